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

// dialPairs connects n loopback TCP connection pairs.
func dialPairs(b *testing.B, n int) (as, bs []net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	for range n {
		acc := make(chan net.Conn, 1)
		go func() { c, _ := ln.Accept(); acc <- c }()
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		as, bs = append(as, a), append(bs, <-acc)
	}
	b.Cleanup(func() {
		for i := range as {
			as[i].Close()
			bs[i].Close()
		}
	})
	return as, bs
}

// BenchmarkBothWaysRaw is the anchor: per end one goroutine writes benchSize
// bytes and another reads as many from the peer, on one plain connection.
func BenchmarkBothWaysRaw(b *testing.B) {
	as, bs := dialPairs(b, 1)
	b.SetBytes(benchSize)
	end := func(c net.Conn, wg *sync.WaitGroup) {
		defer wg.Done()
		out, in := make([]byte, benchSize), make([]byte, benchSize)
		var w sync.WaitGroup
		w.Add(1)
		go func() {
			defer w.Done()
			for range b.N {
				if _, err := c.Write(out); err != nil {
					b.Error(err)
					return
				}
			}
		}()
		for range b.N {
			if _, err := io.ReadFull(c, in); err != nil {
				b.Error(err)
				return
			}
		}
		w.Wait()
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	wg.Add(2)
	go end(as[0], &wg)
	go end(bs[0], &wg)
	wg.Wait()
}

func benchLinks(b *testing.B, conns int) {
	as, bs := dialPairs(b, conns)
	la, lb := socket.New(as, 0, 1), socket.New(bs, 1, 0)
	b.SetBytes(benchSize)
	end := func(l transport.Link, wg *sync.WaitGroup) {
		defer wg.Done()
		out, in := make([]byte, benchSize), make([]byte, benchSize)
		var w sync.WaitGroup
		w.Add(1)
		go func() { // the ring's sender goroutine
			defer w.Done()
			for i := range b.N {
				h := wire.Header{Kind: wire.KindColl, Step: uint32(i)}
				if err := l.Send(&h, out); err != nil {
					b.Error(err)
					return
				}
			}
		}()
		for i := range b.N {
			h := wire.Header{Kind: wire.KindColl, Step: uint32(i)}
			if err := l.RecvInto(&h, in); err != nil {
				b.Error(err)
				return
			}
		}
		w.Wait()
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	wg.Add(2)
	go end(la, &wg)
	go end(lb, &wg)
	wg.Wait()
}

// BenchmarkBothWaysLink: the same traffic through two socket Links.
func BenchmarkBothWaysLink1(b *testing.B) { benchLinks(b, 1) }
func BenchmarkBothWaysLink2(b *testing.B) { benchLinks(b, 2) }
