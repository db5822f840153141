package socket_test

import (
	"io"
	"net"
	"sync"
	"testing"

	"gocl/runtime/transport"
	"gocl/runtime/transport/socket"
	"gocl/runtime/wire"
)

// benchSize is one message of the both-ways benchmarks: a TCP ring's chunk.
const benchSize = socket.Chunk

// end is one side of a both-ways benchmark: the i-th message out and in.
type end struct{ send, recv func(i int) error }

// bothWays runs b.N messages each way at once: per end, a sender goroutine
// (as the ring's) sends while the end's own goroutine receives.
func bothWays(b *testing.B, ends [2]end) {
	b.SetBytes(benchSize)
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, e := range ends {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range b.N {
				if err := e.send(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range b.N {
				if err := e.recv(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkBothWaysRaw is the anchor: per end one goroutine writes benchSize
// bytes and another reads as many from the peer, on one plain connection.
func BenchmarkBothWaysRaw(b *testing.B) {
	as, bs := dialPairs(b, 1)
	raw := func(c net.Conn) end {
		out, in := make([]byte, benchSize), make([]byte, benchSize)
		return end{
			send: func(int) error { _, err := c.Write(out); return err },
			recv: func(int) error { _, err := io.ReadFull(c, in); return err },
		}
	}
	bothWays(b, [2]end{raw(as[0]), raw(bs[0])})
}

func benchLinks(b *testing.B, conns int, sealed bool) {
	as, bs := dialPairs(b, conns)
	link := func(l transport.Link) end {
		out, in := make([]byte, benchSize), make([]byte, benchSize)
		frame := func(i int) *wire.Header { return &wire.Header{Kind: wire.KindColl, Step: uint32(i)} }
		return end{
			send: func(i int) error { return l.Send(frame(i), out) },
			recv: func(i int) error { return l.RecvInto(frame(i), in) },
		}
	}
	la, lb := socket.New(as, 0, 1), socket.New(bs, 1, 0)
	if sealed {
		o := socket.Options{Encrypt: true, Secret: testSecret}
		var ea, eb error
		if la, lb, ea, eb = connectPair(b, as, bs, o, o); ea != nil || eb != nil {
			b.Fatal(ea, eb)
		}
	}
	bothWays(b, [2]end{link(la), link(lb)})
}

// BenchmarkBothWaysLink: the same traffic through two socket Links.
func BenchmarkBothWaysLink1(b *testing.B) { benchLinks(b, 1, false) }
func BenchmarkBothWaysLink2(b *testing.B) { benchLinks(b, 2, false) }

// BenchmarkBothWaysSealed: the same through encrypted links
// (GOCL_SOCKET_ENCRYPT=1), for the cost of sealing on loopback.
func BenchmarkBothWaysSealed1(b *testing.B) { benchLinks(b, 1, true) }
func BenchmarkBothWaysSealed2(b *testing.B) { benchLinks(b, 2, true) }
