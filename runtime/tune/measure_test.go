package tune_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"gocl/runtime/transport"
	"gocl/runtime/transport/inproc"
	"gocl/runtime/transport/socket"
	"gocl/runtime/wire"
)

// BenchmarkLinkCost measures what costs.txt holds for the transports one
// process can pair by itself: a frame's latency (half an 8-byte round trip)
// and its bandwidth (a stream of 16 MiB frames, one-way, out of cache). Run it alone on an
// idle host and copy the printed rows into costs.txt:
//
//	go test ./runtime/tune -run '^$' -bench LinkCost -benchtime 2000x
//
// shm needs two processes: its row comes from `gocl-perf -P 2` (8 B and 16
// MiB allreduce, as the comment in costs.txt says).
func BenchmarkLinkCost(b *testing.B) {
	for _, tr := range []struct {
		name string
		pair func(b *testing.B) (transport.Link, transport.Link)
	}{{"inproc", inprocPair}, {"socket", socketPair}} {
		b.Run(tr.name, func(b *testing.B) {
			x, y := tr.pair(b)
			defer x.Close()
			defer y.Close()
			alpha := pingPong(b, x, y, 8, b.N) / 2
			const big = 16 << 20
			frames := max(b.N/500, 4)
			stream := oneWay(b, x, y, big, frames)
			beta := float64(big) / (stream.Seconds() * 1e9) // GB/s
			b.ReportMetric(float64(alpha.Nanoseconds())/1e3, "alpha-µs")
			b.ReportMetric(beta, "beta-GB/s")
			fmt.Printf("%-8s simple %6.2f %6.2f\n", tr.name, float64(alpha.Nanoseconds())/1e3, beta)
		})
	}
}

func hdr(i int) *wire.Header {
	return &wire.Header{Kind: wire.KindP2P, Coll: wire.SendRecv, Seq: uint64(i), Count: 1}
}

// pingPong returns the mean round trip of n-byte frames.
func pingPong(b *testing.B, x, y transport.Link, n, iters int) time.Duration {
	buf, back := make([]byte, n), make([]byte, n)
	done := make(chan error, 1)
	go func() {
		for i := range iters {
			if err := y.RecvInto(hdr(i), back); err != nil {
				done <- err
				return
			}
			if err := y.Send(hdr(i), back); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	start := time.Now()
	for i := range iters {
		if err := x.Send(hdr(i), buf); err != nil {
			b.Fatal(err)
		}
		if err := x.RecvInto(hdr(i), buf); err != nil {
			b.Fatal(err)
		}
	}
	d := time.Since(start)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return d / time.Duration(iters)
}

// oneWay returns the mean time per n-byte frame of a stream from x to y.
func oneWay(b *testing.B, x, y transport.Link, n, frames int) time.Duration {
	src, dst := make([]byte, n), make([]byte, n)
	done := make(chan error, 1)
	go func() {
		for i := range frames {
			if err := y.RecvInto(hdr(i), dst); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	start := time.Now()
	for i := range frames {
		if err := x.Send(hdr(i), src); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return time.Since(start) / time.Duration(frames)
}

func inprocPair(b *testing.B) (transport.Link, transport.Link) {
	key := fmt.Sprint("linkcost-", b.N, time.Now().UnixNano())
	return inproc.Connect(key, 0, 1), inproc.Connect(key, 1, 0)
}

func socketPair(b *testing.B) (transport.Link, transport.Link) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var xs, ys []net.Conn
	for range 2 {
		acc := make(chan net.Conn, 1)
		go func() { c, _ := ln.Accept(); acc <- c }()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		xs, ys = append(xs, c), append(ys, <-acc)
	}
	return socket.New(xs, 0, 1), socket.New(ys, 1, 0)
}
