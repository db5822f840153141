package shm_test

import (
	"testing"

	"gocl/runtime/wire"
)

// An 8-byte frame sent and received on one goroutine: the software cost of
// a small frame, without the wait for another core.
func BenchmarkSendRecv8(b *testing.B) {
	x, y := connect(b)
	defer x.Close()
	defer y.Close()
	buf, dst := make([]byte, 8), make([]byte, 8)
	h := wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Dtype: 7, Count: 2}
	s, r := new(wire.Header), new(wire.Header)
	for i := 0; i < b.N; i++ {
		h.Seq = uint64(i)
		*s = h
		if err := x.Send(s, buf); err != nil {
			b.Fatal(err)
		}
		*r = h
		if err := y.RecvInto(r, dst); err != nil {
			b.Fatal(err)
		}
	}
}
