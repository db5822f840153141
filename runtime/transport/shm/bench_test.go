package shm_test

import (
	"runtime"
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

// An 8-byte frame to a goroutine that sends it back: a round trip between
// two threads, usually on two cores (on the benchmark VM it swings between
// runs with where the host puts the vCPUs: a bare C ping-pong took 50-530 ns).
func BenchmarkPingPong8(b *testing.B) {
	x, y := connect(b)
	defer x.Close()
	defer y.Close()
	h := wire.Header{Kind: wire.KindColl, Coll: wire.AllReduce, Dtype: 7, Count: 2}
	done := make(chan struct{})
	n := b.N
	go func() {
		runtime.LockOSThread()
		buf := make([]byte, 8)
		s, r := new(wire.Header), new(wire.Header)
		for i := 0; i < n; i++ {
			*r = h
			if err := y.RecvInto(r, buf); err != nil {
				panic(err)
			}
			*s = h
			if err := y.Send(s, buf); err != nil {
				panic(err)
			}
		}
		close(done)
	}()
	runtime.LockOSThread()
	buf := make([]byte, 8)
	s, r := new(wire.Header), new(wire.Header)
	b.ResetTimer()
	for i := 0; i < n; i++ {
		*s = h
		if err := x.Send(s, buf); err != nil {
			b.Fatal(err)
		}
		*r = h
		if err := x.RecvInto(r, buf); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}
