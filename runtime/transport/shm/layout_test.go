package shm_test

import (
	"bytes"
	"testing"

	"gocl/runtime/transport"
	"gocl/runtime/wire"
)

// Every header field survives the slot, in the short LL layout (Seq and
// Count within 32 bits, Root within 16) and in the long one, for every LL
// payload length and a Simple one, through Peek and through the receive.
func TestHeaderFieldsSurviveBothLayouts(t *testing.T) {
	a, b := connect(t)
	defer a.Close()
	defer b.Close()
	peeker := b.(transport.Peeker)
	headers := []wire.Header{
		{Kind: wire.KindColl, Coll: wire.AllReduce, Dtype: 7, Op: 3, Root: 0, Seq: 1, Count: 2, Step: 9},
		{Kind: wire.KindColl, Coll: wire.Broadcast, Dtype: 1, Op: 255, Root: 1<<16 - 1, Seq: 1<<32 - 1, Count: 1<<32 - 1, Step: 1<<32 - 1},
		{Kind: wire.KindColl, Coll: wire.Reduce, Dtype: 2, Op: 1, Root: 1 << 16, Seq: 5, Count: 6, Step: 1},
		{Kind: wire.KindP2P, Coll: wire.SendRecv, Dtype: 3, Root: -1, Seq: 7, Count: 8},
		{Kind: wire.KindColl, Coll: wire.AllGather, Dtype: 4, Seq: 1 << 32, Count: 3},
		{Kind: wire.KindColl, Coll: wire.AlltoAll, Dtype: 5, Seq: 9, Count: 1<<40 + 3, Step: 77},
	}
	for _, n := range []int{0, 1, 3, 4, 8, 11, 12, 13, 16, 127, 128, 129, 4096} {
		for i, h := range headers {
			data := make([]byte, n)
			for k := range data {
				data[k] = byte(k*7 + i + 1)
			}
			sent := h
			if err := a.Send(&sent, data); err != nil {
				t.Fatalf("send %d B, header %d: %v", n, i, err)
			}
			got, ok := peeker.Peek()
			for !ok {
				got, ok = peeker.Peek()
			}
			want := h
			want.Len = uint64(n)
			if got != want {
				t.Fatalf("%d B, header %d: Peek shows %+v, sent %+v", n, i, got, want)
			}
			recv := want
			dst := make([]byte, n)
			if err := b.RecvInto(&recv, dst); err != nil {
				t.Fatalf("%d B, header %d: %v", n, i, err)
			}
			if !bytes.Equal(dst, data) {
				t.Fatalf("%d B, header %d: payload differs", n, i)
			}
		}
	}
	// A field the receiver disagrees on is still caught in the short layout.
	h := headers[0]
	if err := a.Send(&h, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	want := headers[0]
	want.Count++
	if err := b.RecvInto(&want, make([]byte, 4)); err == nil {
		t.Fatal("a count mismatch in a short frame went unnoticed")
	}
}
