package wire

import (
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	h := Header{Kind: KindColl, Coll: Reduce, Dtype: 7, Op: 1, Root: 3, Seq: 1 << 40, Count: 12345, Step: 9, Len: 777}
	var b [HeaderSize]byte
	h.Encode(b[:])
	got, err := Decode(b[:])
	if err != nil || got != h {
		t.Fatalf("Decode(Encode(h)) = %+v, %v; want %+v", got, err, h)
	}
}

func TestDecodeRejects(t *testing.T) {
	var b [HeaderSize]byte
	(&Header{Kind: KindP2P}).Encode(b[:])
	for name, mut := range map[string]func([]byte) []byte{
		"short":   func(b []byte) []byte { return b[:10] },
		"magic":   func(b []byte) []byte { b[0] ^= 1; return b },
		"version": func(b []byte) []byte { b[4] = 99; return b },
		"kind":    func(b []byte) []byte { b[5] = 9; return b },
	} {
		c := b
		if _, err := Decode(mut(c[:])); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestMatchNamesBothCalls(t *testing.T) {
	want := Header{Kind: KindColl, Coll: AllReduce, Dtype: 7, Op: 0, Seq: 4, Count: 100, Len: 400}
	got := want
	got.Coll, got.Root = Broadcast, 1
	err := Match(&want, &got, 0, 1)
	if err == nil {
		t.Fatal("mismatch accepted")
	}
	for _, f := range []string{"rank 0", "rank 1", "allreduce #4 (count 100, float32, sum)", "broadcast #4 (count 100, float32, root 1)"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("%q lacks %q", err, f)
		}
	}
	got = want
	got.Len = 8
	if err := Match(&want, &got, 0, 1); err == nil || !strings.Contains(err.Error(), "expected 400 bytes") {
		t.Errorf("length mismatch: %v", err)
	}
	if err := Match(&want, &want, 0, 1); err != nil {
		t.Errorf("equal headers: %v", err)
	}
}

// FuzzDecode: any bytes either decode to a header that re-encodes to the
// same framing, or fail cleanly; never a panic.
func FuzzDecode(f *testing.F) {
	var b [HeaderSize]byte
	(&Header{Kind: KindColl, Coll: AllGather, Count: 5, Len: 20}).Encode(b[:])
	f.Add(b[:])
	f.Add([]byte("GOCL"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Decode(data)
		if err != nil {
			return
		}
		var out [HeaderSize]byte
		h.Encode(out[:])
		h2, err := Decode(out[:])
		if err != nil || h2 != h {
			t.Fatalf("re-decode %+v: %+v %v", h, h2, err)
		}
		_ = h.Describe()
	})
}
