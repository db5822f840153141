package transport

import (
	"bytes"
	"testing"
)

func TestCopyHot(t *testing.T) {
	for _, n := range []int{0, 1, hotPiece - 1, hotPiece, 3*hotPiece + 7} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*7 + i>>9)
		}
		dst := make([]byte, n+3)
		if got := CopyHot(dst, src); got != n {
			t.Fatalf("n=%d: copied %d", n, got)
		}
		if !bytes.Equal(dst[:n], src) || !bytes.Equal(dst[n:], []byte{0, 0, 0}) {
			t.Fatalf("n=%d: wrong bytes", n)
		}
		if got := CopyHot(dst[:n/2], src); got != n/2 || !bytes.Equal(dst[:n/2], src[:n/2]) {
			t.Fatalf("n=%d: short dst copied %d", n, got)
		}
	}
}
