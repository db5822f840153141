package jaxffi

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"gocl/abi"
	"gocl/runtime/wire"
)

// Ranks of one world submit the same call sites in rank-dependent orders
// from several goroutines each (as XLA:CPU may); every call must pair with
// the same call on the other ranks. Run with -race, it also checks the lanes.
func TestLanesAgreeOnOrder(t *testing.T) {
	const n, sites, rounds, count = 3, 5, 10, 257
	h, _ := testSession(t, n)
	var wg sync.WaitGroup
	errs := make(chan error, n*sites*rounds)
	for r := 0; r < n; r++ {
		for round := 0; round < rounds; round++ {
			for k := 0; k < sites; k++ {
				site := int64((k+r*2+round)%sites + 1) // rank-dependent submission order
				in := make([]float32, count)
				out := make([]float32, count)
				for i := range in {
					in[i] = float32(site*100 + int64(r))
				}
				wg.Add(1)
				check := func(e error) {
					if e == nil {
						want := float32(n*site*100 + n*(n-1)/2)
						if out[count-1] != want {
							e = fmt.Errorf("site %d got %g, want %g", site, out[count-1], want)
						}
					}
					errs <- e
				}
				req := request{kind: int(wire.AllReduce), send: unsafe.Pointer(&in[0]), recv: unsafe.Pointer(&out[0]),
					nsend: count, nrecv: count, dtype: int(abi.Float32)}
				// Each call on its own goroutine, as XLA's threads: one may
				// run calls inline; the others queue and finish later.
				go func() {
					later := func() func(error) { return func(e error) { check(e); wg.Done() } }
					if ran, err := submit(h, r, site, req, later); ran {
						check(err)
						wg.Done()
					}
				}()
			}
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		if e != nil {
			t.Error(e)
		}
	}
}

func TestSubmitRejectsBadCalls(t *testing.T) {
	h, err := newSession(nil, 1, 0, 2, []int64{0, 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { takeSession(h).close(false) }()
	b := make([]byte, 64)
	p := unsafe.Pointer(&b[0])
	for _, c := range []struct {
		ordinal int
		r       request
		want    string
	}{
		{1, request{kind: int(wire.AllReduce), send: p, recv: p, nsend: 4, nrecv: 4}, "runs on device 1, which is not one of the 2 local devices"},
		{2048, request{kind: int(wire.AllGather), send: p, recv: p, nsend: 4, nrecv: 4}, "all_gather on rank 1: result has 4 elements but needs world size 2 × input 4"},
		{0, request{kind: int(wire.ReduceScatter), send: p, recv: p, nsend: 5, nrecv: 2}, "not world size 2 × result 2"},
		{0, request{kind: int(wire.Broadcast), send: p, recv: p, nsend: 4, nrecv: 4, root: 2}, "root 2 is not a rank of this world of 2"},
		{0, request{kind: int(wire.AlltoAll), send: p, recv: p, nsend: 3, nrecv: 3}, "split into world size 2 equal blocks"},
		{0, request{kind: int(wire.SendRecv), send: p, recv: p, nsend: 4, nrecv: 4, perm: []int64{0, 5}}, "names a rank outside this world of 2"},
		{0, request{kind: int(wire.SendRecv), send: p, recv: p, nsend: 4, nrecv: 4, perm: []int64{0}}, "(source, destination) pairs"},
	} {
		ran, err := submit(h, c.ordinal, 1, c.r, func() func(error) { t.Error("a rejected call was queued"); return nil })
		if !ran || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", kindName(c.r.kind), err, c.want)
		}
	}
	if _, err := submit(h+100, 0, 1, request{kind: int(wire.AllReduce)}, nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing session: %v", err)
	}
}

// A rank whose XLA thread runs its call inline but is told by rank 0 to run
// a call it has not made yet hands the lane to its goroutine and returns;
// both calls then finish there, paired with rank 0's.
func TestInlineCallerHandsOff(t *testing.T) {
	h, _ := testSession(t, 2)
	in := [2][2][4]float32{} // [rank][site A, B]
	out := [2][2][4]float32{}
	for r := range 2 {
		for s := range 2 {
			for i := range 4 {
				in[r][s][i] = float32(10*(s+1) + r)
			}
		}
	}
	req := func(r, s int) request {
		return request{kind: int(wire.AllReduce), send: unsafe.Pointer(&in[r][s][0]), recv: unsafe.Pointer(&out[r][s][0]),
			nsend: 4, nrecv: 4, dtype: int(abi.Float32)}
	}
	type result struct {
		ran bool
		err error
	}
	later := make(chan error, 4)
	queue := func() func(error) { return func(e error) { later <- e } }
	submitAsync := func(r, s int) chan result {
		c := make(chan result, 1)
		go func() { ran, err := submit(h, r, int64(s+1), req(r, s), queue); c <- result{ran, err} }()
		return c
	}
	b1 := submitAsync(1, 1) // rank 1 starts with B and waits for rank 0's order
	a0 := submitAsync(0, 0) // rank 0 orders A and runs it inline
	if got := <-b1; got.ran || got.err != nil {
		t.Fatalf("rank 1's B: ran=%v err=%v, want it queued (A was ordered first)", got.ran, got.err)
	}
	if got := <-submitAsync(1, 0); got.ran || got.err != nil { // the goroutine owns rank 1 now
		t.Fatalf("rank 1's A: ran=%v err=%v, want it queued", got.ran, got.err)
	}
	if got := <-a0; !got.ran || got.err != nil {
		t.Fatalf("rank 0's A: ran=%v err=%v, want it run inline", got.ran, got.err)
	}
	if got := <-submitAsync(0, 1); !got.ran || got.err != nil {
		t.Fatalf("rank 0's B: ran=%v err=%v, want it run inline", got.ran, got.err)
	}
	for range 2 {
		if e := <-later; e != nil {
			t.Fatal(e)
		}
	}
	for r := range 2 {
		for s := range 2 {
			if want := float32(2*10*(s+1) + 1); out[r][s][3] != want {
				t.Errorf("rank %d site %d: got %g, want %g", r, s, out[r][s][3], want)
			}
		}
	}
}

// Shutting a lane down while an XLA thread runs a call on it inline waits
// for that call and then ends the lane's goroutine: the inline caller wakes
// the goroutine when it leaves a stopping lane (it does not after every
// call).
func TestStopWaitsForTheInlineCaller(t *testing.T) {
	h, err := newSession(nil, 1, 0, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := takeSession(h) // the lanes are driven directly below
	in, out := [2][1]float64{{1}, {2}}, [2][1]float64{}
	req := func(r int) request {
		return request{kind: int(wire.AllReduce), send: unsafe.Pointer(&in[r][0]), recv: unsafe.Pointer(&out[r][0]),
			nsend: 1, nrecv: 1, dtype: int(abi.Float64)}
	}
	noLater := func() func(error) { t.Error("a call was queued; want both run inline"); return func(error) {} }
	first := make(chan error, 1)
	go func() { _, err := w.lanes[0].submit(1, req(0), noLater); first <- err }()
	for { // until rank 0's caller owns its lane (it waits in the order round for rank 1)
		w.lanes[0].mu.Lock()
		o := w.lanes[0].owner
		w.lanes[0].mu.Unlock()
		if o == caller {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stopped := make(chan struct{})
	go func() { w.lanes[0].stop(false); close(stopped) }()
	for { // until the stop has begun (the goroutine was poked while the caller owned the lane)
		w.lanes[0].mu.Lock()
		s := w.lanes[0].stopped
		w.lanes[0].mu.Unlock()
		if s != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := w.lanes[1].submit(1, req(1), noLater); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return after the inline call finished: the lane's goroutine was not woken")
	}
	w.lanes[1].stop(false)
	if out[0][0] != 3 || out[1][0] != 3 {
		t.Errorf("got %v, want 3 on both ranks", out)
	}
}

// Every collective, with inputs that fit the order round (settled from the
// gathered inputs) and inputs that do not (run as a collective), on 3
// ranks, against values computed here.
func TestEveryKindSettledAndRun(t *testing.T) {
	const n = 3
	h, _ := testSession(t, n)
	val := func(r, i int) int32 { return int32((i*7+r*3)%5 + 1) }
	site := int64(0)
	for _, elems := range []int{3 * n, n * (inlineLimit(n)/4/n + 1)} { // 4-byte elements: inline, then not
		for _, c := range []struct {
			kind    wire.Coll
			op      abi.RedOp
			in, out int // elements per rank
			want    func(me, i int) int32
		}{
			{wire.AllReduce, abi.Sum, elems, elems, func(me, i int) int32 { return val(0, i) + val(1, i) + val(2, i) }},
			{wire.AllReduce, abi.Max, elems, elems, func(me, i int) int32 { return max(val(0, i), val(1, i), val(2, i)) }},
			{wire.AllReduce, abi.Avg, elems, elems, func(me, i int) int32 { return (val(0, i) + val(1, i) + val(2, i)) / n }},
			{wire.ReduceScatter, abi.Prod, elems, elems / n, func(me, i int) int32 {
				j := me*(elems/n) + i
				return val(0, j) * val(1, j) * val(2, j)
			}},
			{wire.AllGather, 0, elems, n * elems, func(me, i int) int32 { return val(i/elems, i%elems) }},
			{wire.Broadcast, 0, elems, elems, func(me, i int) int32 { return val(1, i) }},
			{wire.AlltoAll, 0, elems, elems, func(me, i int) int32 { b := elems / n; return val(i/b, me*b+i%b) }},
			{wire.SendRecv, 0, elems, elems, func(me, i int) int32 {
				if me == 2 {
					return 0 // nobody sends to rank 2
				}
				return val((me+2)%n, i)
			}},
		} {
			site++
			var wg sync.WaitGroup
			for r := range n {
				in := make([]int32, c.in)
				for i := range in {
					in[i] = val(r, i)
				}
				out := make([]int32, c.out)
				req := request{kind: int(c.kind), send: unsafe.Pointer(&in[0]), recv: unsafe.Pointer(&out[0]), nsend: c.in, nrecv: c.out,
					dtype: int(abi.Int32), op: int(c.op), root: 1, perm: []int64{2, 0, 0, 1}} // ppermute: 2->0, 0->1
				if c.kind != wire.AllReduce && c.kind != wire.ReduceScatter {
					req.dtype, req.nsend, req.nrecv = int(abi.Uint8), 4*c.in, 4*c.out // data movement: bytes
				}
				wg.Add(1)
				check := func(e error) {
					defer wg.Done()
					if e != nil {
						t.Errorf("%s %d elements rank %d: %v", kindName(int(c.kind)), elems, r, e)
						return
					}
					for i, v := range out {
						if w := c.want(r, i); v != w {
							t.Errorf("%s op %d, %d elements, rank %d: [%d] = %d, want %d", kindName(int(c.kind)), c.op, elems, r, i, v, w)
							return
						}
					}
				}
				go func() {
					if ran, err := submit(h, r, site, req, func() func(error) { return check }); ran {
						check(err)
					}
				}()
			}
			wg.Wait()
		}
	}
}

// Ranks making the same call site with different arguments (different
// programs traced) get an error naming both, and the call's place in the
// user's program, on every rank, not a hang.
func TestMismatchedCallFailsEveryRank(t *testing.T) {
	name := "step.py:12 in step, traced for step at step.py:10 (in jit_step)"
	nameSite(7, name)
	h, err := newSession(nil, 1, 0, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { takeSession(h).close(true) }()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		buf := make([]float32, 8)
		req := request{kind: int(wire.AllReduce), send: unsafe.Pointer(&buf[0]), recv: unsafe.Pointer(&buf[0]),
			nsend: 2 + 2*r, nrecv: 2 + 2*r, dtype: int(abi.Float32)}
		wg.Add(1)
		go func() {
			done := func(e error) { errs[r] = e; wg.Done() }
			if ran, err := submit(h, r, 7, req, func() func(error) { return done }); ran {
				done(err)
			}
		}()
	}
	wg.Wait()
	for r, e := range errs {
		if e == nil || !strings.Contains(e.Error(), "ranks disagree on the gocl.jax call at "+name+" (its execution 1)") ||
			!strings.Contains(e.Error(), "rank 0 runs all_reduce of 2 elements of float32") || !strings.Contains(e.Error(), "rank 1 runs all_reduce of 4 elements") {
			t.Errorf("rank %d: %v", r, e)
		}
	}
}

// One collective at a time, every rank reaching it (a training loop): each
// call is settled by the order round alone, with no collective of its own.
func TestOneAtATimeIsSettledByTheRound(t *testing.T) {
	const n, calls = 2, 50
	h, w := testSession(t, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range calls {
				in, out := []float64{float64(r + k)}, []float64{0}
				done := make(chan error, 1)
				req := request{kind: int(wire.AllReduce), send: unsafe.Pointer(&in[0]), recv: unsafe.Pointer(&out[0]), nsend: 1, nrecv: 1, dtype: int(abi.Float64)}
				if ran, err := submit(h, r, 1, req, func() func(error) { return func(e error) { done <- e } }); ran {
					done <- err
				}
				if err := <-done; err != nil || out[0] != float64(2*k+1) {
					t.Errorf("rank %d call %d: %v, got %g", r, k, err, out[0])
				}
			}
		}()
	}
	wg.Wait()
	for r, l := range w.lanes {
		if got := l.settled.Load(); got != calls {
			t.Errorf("rank %d: the round settled %d of %d calls", r, got, calls)
		}
	}
}

// One order round settles the calls every rank proposed in the same leading
// positions, inputs carried, and names the rest in rank 0's order.
func TestRoundSettlesTheCommonPrefix(t *testing.T) {
	const n = 3
	_, w := testSession(t, n)
	small, large := 4, inlineLimit(n) // float32 elements: D's input does not fit
	for _, c := range []struct {
		name   string
		order2 string // rank 2's order; ranks 0 and 1 queue ABCD
		settle int
		rest   []int64
	}{
		{"same order", "ABCD", 3, []int64{'D'}},
		{"rank 2 differs at C", "ABDC", 2, []int64{'C', 'D'}},
		{"rank 2 differs at A", "BACD", 0, []int64{'A', 'B', 'C', 'D'}},
	} {
		outs := make([]map[int64][]float32, n)
		for r, l := range w.lanes {
			order := "ABCD"
			if r == 2 {
				order = c.order2
			}
			outs[r] = map[int64][]float32{}
			l.mu.Lock()
			l.owner = caller // keeps the lane's goroutine out
			for _, s := range order {
				site := int64(s)
				cnt := small
				if s == 'D' {
					cnt = large
				}
				in, out := make([]float32, cnt), make([]float32, cnt)
				for i := range in {
					in[i] = float32(site*10 + int64(r))
				}
				outs[r][site] = out
				tg := tag{site, l.count[site]}
				l.count[site]++
				l.pending[tg] = &call{r: request{kind: int(wire.AllReduce), send: unsafe.Pointer(&in[0]), recv: unsafe.Pointer(&out[0]),
					nsend: cnt, nrecv: cnt, dtype: int(abi.Float32)}}
				l.order = append(l.order, tg)
			}
			l.mu.Unlock()
		}
		type result struct {
			settled int
			errs    []error
			rest    []tag
			err     error
		}
		res := make([]result, n)
		var wg sync.WaitGroup
		for r, l := range w.lanes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, errs, rest, err := l.agree()
				res[r] = result{len(s), errs, rest, err}
			}()
		}
		wg.Wait()
		for r, got := range res {
			if got.err != nil || got.settled != c.settle {
				t.Errorf("%s, rank %d: settled %d (err %v), want %d", c.name, r, got.settled, got.err, c.settle)
				continue
			}
			var rest []int64
			for _, tg := range got.rest {
				rest = append(rest, tg.site)
			}
			if fmt.Sprint(rest) != fmt.Sprint(c.rest) {
				t.Errorf("%s, rank %d: rest %v, want %v", c.name, r, rest, c.rest)
			}
			for i, e := range got.errs {
				site := int64("ABCD"[i])
				if want := float32(n*site*10 + n*(n-1)/2); e != nil || outs[r][site][small-1] != want {
					t.Errorf("%s, rank %d, call %c: %v, got %g, want %g", c.name, r, site, e, outs[r][site][small-1], want)
				}
			}
		}
		for _, l := range w.lanes { // drop the unsettled calls
			l.mu.Lock()
			l.pending, l.order, l.owner = map[tag]*call{}, nil, idle
			l.mu.Unlock()
		}
	}
}

// testSession is an in-process session of n device ranks, closed when the test ends.
func testSession(t testing.TB, n int) (int64, *session) {
	t.Helper()
	h, err := newSession(nil, 1, 0, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { takeSession(h).close(false) })
	sessionsMu.Lock()
	defer sessionsMu.Unlock()
	return h, sessions[h]
}

// The jitted 8-byte all_reduce's path on 2 in-process ranks, one call at a
// time (settled by the order round): its time and allocations per call.
func BenchmarkOneAtATime(b *testing.B) {
	const n = 2
	h, _ := testSession(b, n)
	b.ReportAllocs()
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, out := []float64{float64(r)}, []float64{0}
			req := request{kind: int(wire.AllReduce), send: unsafe.Pointer(&in[0]), recv: unsafe.Pointer(&out[0]), nsend: 1, nrecv: 1, dtype: int(abi.Float64)}
			for range b.N {
				done := make(chan error, 1)
				if ran, err := submit(h, r, 1, req, func() func(error) { return func(e error) { done <- e } }); ran {
					done <- err
				}
				if err := <-done; err != nil || out[0] != 1 {
					b.Errorf("rank %d: %v, got %g", r, err, out[0])
					return
				}
			}
		}()
	}
	wg.Wait()
}
