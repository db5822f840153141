package comm

import (
	"fmt"
	"strings"
	"testing"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/transport/socket"
	"gocl/runtime/wire"
)

// matrix runs every collective × datatype × op × size (out of place and in
// place) on one rank of c and checks it against the reference. Sizes hit 0,
// 1, odd, one chunk ± 1 and several chunks; roots rotate.
func matrix(c *Comm, types []abi.DataType, sizes []int) error {
	var k checker
	n := c.NRanks()
	call := 0
	for _, t := range types {
		for _, count := range sizes {
			for _, inPlace := range []bool{false, true} {
				root := call % n
				call++
				for _, op := range allOps {
					h, free, err := redOp(c, t, op)
					if err != nil {
						return err
					}
					if err := checkReductions(c, &k, t, op, h, count, root, inPlace); err != nil {
						return err
					}
					free()
				}
				if err := checkMovement(c, &k, t, count, root, inPlace); err != nil {
					return err
				}
			}
		}
	}
	return k.err()
}

func checkReductions(c *Comm, k *checker, t abi.DataType, op abi.RedOp, h int32, count, root int, inPlace bool) error {
	n, r := c.NRanks(), c.Rank()
	es := t.Size()
	want := func(i int) float64 { return reference(t, op, 2, n, i) }
	tag := func(coll string) string {
		return fmt.Sprintf("%s %s %s count=%d root=%d inplace=%v n=%d", coll, t, op, count, root, inPlace, n)
	}
	tags := map[string]string{}
	for _, c := range []string{"allreduce", "reduce", "reducescatter"} {
		tags[c] = tag(c)
	}

	// allreduce
	send := fill(t, op, r, count)
	recv := make([]byte, count*es)
	if inPlace {
		recv = send
	}
	if err := c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(send), Recv: ptr(recv), Count: count, Type: t, RedOp: h}); err != nil {
		return fmt.Errorf("%s: %w", tag("allreduce"), err)
	}
	for i := 0; i < count; i++ {
		if !k.expect(tags["allreduce"], t, recv, i, want(i)) {
			break
		}
	}

	// reduce
	send = fill(t, op, r, count)
	recv = make([]byte, count*es)
	if inPlace {
		recv = send
	}
	if err := c.Run(nil, Op{Coll: wire.Reduce, Send: ptr(send), Recv: ptr(recv), Count: count, Type: t, RedOp: h, Root: root}); err != nil {
		return fmt.Errorf("%s: %w", tag("reduce"), err)
	}
	if r == root {
		for i := 0; i < count; i++ {
			if !k.expect(tags["reduce"], t, recv, i, want(i)) {
				break
			}
		}
	}

	// reducescatter: rank p's input block b holds element b*count+i of a
	// conceptual array whose reference is want(b*count+i).
	send = fill(t, op, r, n*count)
	recv = make([]byte, count*es)
	if inPlace {
		recv = send[r*count*es : (r+1)*count*es]
	}
	if err := c.Run(nil, Op{Coll: wire.ReduceScatter, Send: ptr(send), Recv: ptr(recv), Count: count, Type: t, RedOp: h}); err != nil {
		return fmt.Errorf("%s: %w", tag("reducescatter"), err)
	}
	for i := 0; i < count; i++ {
		if !k.expect(tags["reducescatter"], t, recv, i, want(r*count+i)) {
			break
		}
	}
	return nil
}

func checkMovement(c *Comm, k *checker, t abi.DataType, count, root int, inPlace bool) error {
	n, r := c.NRanks(), c.Rank()
	es := t.Size()
	tag := func(coll string) string {
		return fmt.Sprintf("%s %s count=%d root=%d inplace=%v n=%d", coll, t, count, root, inPlace, n)
	}
	tags := map[string]string{}
	for _, c := range []string{"broadcast", "allgather", "alltoall", "gather", "scatter", "sendrecv", "sendrecv self"} {
		tags[c] = tag(c)
	}
	val := func(rank, i int) float64 { return input(t, abi.Sum, rank, i) }

	// broadcast
	buf := make([]byte, count*es)
	send := fill(t, abi.Sum, r, count)
	if inPlace {
		buf = send
	}
	if err := c.Run(nil, Op{Coll: wire.Broadcast, Send: ptr(send), Recv: ptr(buf), Count: count, Type: t, Root: root}); err != nil {
		return fmt.Errorf("%s: %w", tag("broadcast"), err)
	}
	for i := 0; i < count; i++ {
		if !k.expect(tags["broadcast"], t, buf, i, val(root, i)) {
			break
		}
	}

	// allgather
	recv := make([]byte, n*count*es)
	send = fill(t, abi.Sum, r, count)
	if inPlace {
		copy(recv[r*count*es:], send)
		send = recv[r*count*es : (r+1)*count*es]
	}
	if err := c.Run(nil, Op{Coll: wire.AllGather, Send: ptr(send), Recv: ptr(recv), Count: count, Type: t}); err != nil {
		return fmt.Errorf("%s: %w", tag("allgather"), err)
	}
	for p := 0; p < n; p++ {
		for i := 0; i < count; i++ {
			if !k.expect(tags["allgather"], t, recv, p*count+i, val(p, i)) {
				break
			}
		}
	}

	// alltoall: block b of rank p holds values val(p, b*count+i)
	send = fill(t, abi.Sum, r, n*count)
	recv = make([]byte, n*count*es)
	if err := c.Run(nil, Op{Coll: wire.AlltoAll, Send: ptr(send), Recv: ptr(recv), Count: count, Type: t}); err != nil {
		return fmt.Errorf("%s: %w", tag("alltoall"), err)
	}
	for p := 0; p < n; p++ {
		for i := 0; i < count; i++ {
			if !k.expect(tags["alltoall"], t, recv, p*count+i, val(p, r*count+i)) {
				break
			}
		}
	}

	// gather
	send = fill(t, abi.Sum, r, count)
	recv = make([]byte, n*count*es)
	if inPlace && r == root {
		copy(recv[r*count*es:], send)
		send = recv[r*count*es : (r+1)*count*es]
	}
	if err := c.Run(nil, Op{Coll: wire.Gather, Send: ptr(send), Recv: ptr(recv), Count: count, Type: t, Root: root}); err != nil {
		return fmt.Errorf("%s: %w", tag("gather"), err)
	}
	if r == root {
		for p := 0; p < n; p++ {
			for i := 0; i < count; i++ {
				if !k.expect(tags["gather"], t, recv, p*count+i, val(p, i)) {
					break
				}
			}
		}
	}

	// scatter: root's block p holds val(root, p*count+i)
	send = fill(t, abi.Sum, r, n*count)
	recv = make([]byte, count*es)
	if inPlace && r == root {
		recv = send[r*count*es : (r+1)*count*es]
	}
	if err := c.Run(nil, Op{Coll: wire.Scatter, Send: ptr(send), Recv: ptr(recv), Count: count, Type: t, Root: root}); err != nil {
		return fmt.Errorf("%s: %w", tag("scatter"), err)
	}
	for i := 0; i < count; i++ {
		if !k.expect(tags["scatter"], t, recv, i, val(root, r*count+i)) {
			break
		}
	}

	// grouped ring exchange: send to r+1, receive from r-1, plus self
	var g Group
	send = fill(t, abi.Sum, r, count)
	recv = make([]byte, count*es)
	self := make([]byte, count*es)
	g.Add(c, nil, Op{Coll: wire.SendRecv, IsSend: true, Send: ptr(send), Count: count, Type: t, Peer: (r + 1) % n})
	g.Add(c, nil, Op{Coll: wire.SendRecv, Recv: ptr(recv), Count: count, Type: t, Peer: (r + n - 1) % n})
	g.Add(c, nil, Op{Coll: wire.SendRecv, IsSend: true, Send: ptr(send), Count: count, Type: t, Peer: r})
	g.Add(c, nil, Op{Coll: wire.SendRecv, Recv: ptr(self), Count: count, Type: t, Peer: r})
	if err := g.Run(); err != nil {
		return fmt.Errorf("%s: %w", tag("sendrecv"), err)
	}
	for i := 0; i < count; i++ {
		if !k.expect(tags["sendrecv"], t, recv, i, val((r+n-1)%n, i)) || !k.expect(tags["sendrecv self"], t, self, i, val(r, i)) {
			break
		}
	}
	return nil
}

// algoRanks is, per forced algorithm, the clique sizes the matrices run on:
// 1..8 ranks (halving-doubling's all-reduce needs a power of two, elsewhere
// the tuner falls back to the model; its allgather is Bruck's there and its
// reduce-scatter folds pairs first), fewer in -short (the -race run).
func algoRanks(short bool) map[string][]int {
	if short {
		// halving-doubling at 5 takes the folded path (a power of two
		// plus pairs) that 6 takes too
		return map[string][]int{"ring": {1, 3, 5}, "direct": {2, 3}, "tree": {2, 3, 5}, "halvingdoubling": {2, 4, 5}}
	}
	all := []int{1, 2, 3, 4, 5, 6, 7, 8}
	return map[string][]int{"ring": all, "direct": all, "tree": all, "halvingdoubling": all}
}

var algoNames = []string{"ring", "direct", "tree", "halvingdoubling"}

// TestCollectivesInProcess runs the whole matrix on 1..8 in-process ranks,
// once per forced algorithm, with a small chunk so pipelining is exercised.
func TestCollectivesInProcess(t *testing.T) {
	const chunk = 4096
	types := allTypes
	if testing.Short() { // the -race run: every code path, fewer repetitions
		types = []abi.DataType{abi.Int8, abi.Uint32, abi.Float16, abi.Float64}
	}
	ranks := algoRanks(testing.Short())
	for _, algo := range algoNames {
		for _, n := range ranks[algo] {
			t.Run(fmt.Sprintf("%s/n=%d", algo, n), func(t *testing.T) {
				configtest.Setenv(t, "GOCL_ALGO", algo, "GOCL_BUFFSIZE", fmt.Sprint(chunk), "GOCL_DIRECT_THRESHOLD", "0")
				sizes := []int{0, 1, 7, 1023}
				clique(t, n, func(c *Comm) error {
					if err := matrix(c, types, sizes); err != nil {
						return err
					}
					// chunk ± 1 and several chunks, in elements of float32 and bf16
					return matrix(c, []abi.DataType{abi.Float32, abi.Bfloat16, abi.Int64},
						[]int{chunk/4 - 1, chunk/4 + 1, 3*n*chunk/4 + 5})
				})
			})
		}
	}
}

// TestCollectivesSockets runs the matrix over TCP between ranks of one
// process (GOCL_P2P_DISABLE=1), with several sockets per peer so striping
// is exercised.
func TestCollectivesSockets(t *testing.T) {
	// Over TCP a clique takes long on a small machine, so each algorithm runs
	// on one or two clique sizes; the in-process matrix covers 1..8 ranks.
	ranks := map[string][]int{"ring": {3, 8}, "direct": {2}, "tree": {5}, "halvingdoubling": {4}}
	if testing.Short() { // the -race run: one clique (the old budget)
		ranks = map[string][]int{"tree": {3}}
	}
	for _, algo := range algoNames {
		for _, n := range ranks[algo] {
			t.Run(fmt.Sprintf("%s/n=%d", algo, n), func(t *testing.T) {
				configtest.Setenv(t, "GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", "1", "GOCL_BUFFSIZE", "300000", "GOCL_NSOCKS_PERTHREAD", "3", "GOCL_SOCKET_IFNAME", "lo",
					"GOCL_ALGO", algo, "GOCL_DIRECT_THRESHOLD", "0")
				// Element sizes 1, 2, 4 and 8 on the small cliques; the large
				// ones stripe the same frames over more peers (every dtype
				// and op is TestCollectivesInProcess's).
				types := []abi.DataType{abi.Int8, abi.Float32, abi.Float16, abi.Uint64}
				if n > 4 {
					types = []abi.DataType{abi.Int8, abi.Float32}
				}
				if testing.Short() {
					types = []abi.DataType{abi.Float16}
				}
				clique(t, n, func(c *Comm) error {
					return matrix(c, types, []int{0, 1, 7, 300001 / 4, 1 << 17})
				})
			})
		}
	}
}

// TestCollectivesSocketsEncrypted runs the matrix over encrypted TCP links
// (GOCL_SOCKET_ENCRYPT=1), striped, with frames longer than a sealed record
// and chunks that end inside one.
func TestCollectivesSocketsEncrypted(t *testing.T) {
	n := 3
	configtest.Setenv(t, "GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", "1", "GOCL_SOCKET_ENCRYPT", "1", "GOCL_BUFFSIZE", "300000",
		"GOCL_NSOCKS_PERTHREAD", "3", "GOCL_SOCKET_IFNAME", "lo", "GOCL_ALGO", "ring", "GOCL_DIRECT_THRESHOLD", "0")
	clique(t, n, func(c *Comm) error {
		for p, l := range c.links {
			if p != c.rank && fmt.Sprintf("%T", l) != "*socket.sealedLink" {
				return fmt.Errorf("rank %d: the link to rank %d is a %T, not an encrypted socket link", c.rank, p, l)
			}
		}
		types := []abi.DataType{abi.Int8, abi.Float32}
		if testing.Short() { // the -race run
			types = types[1:]
		}
		return matrix(c, types, []int{0, 1, 7, 300001 / 4, 1 << 17})
	})
}

// TestCollectivesShm runs the matrix over shared memory between ranks of one
// process (GOCL_P2P_DISABLE=1), with chunks around the LL limit and frames
// cut into several data-ring pieces.
func TestCollectivesShm(t *testing.T) {
	ranks := []int{2, 3, 5, 8}
	if testing.Short() {
		ranks = []int{3}
	}
	for _, n := range ranks {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			configtest.Setenv(t, "GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", "0", "GOCL_BUFFSIZE", "1980")
			clique(t, n, func(c *Comm) error {
				for _, l := range c.links {
					if l != nil && l.Name() != "shm" {
						return fmt.Errorf("rank %d: link via %s, want shm", c.Rank(), l.Name())
					}
				}
				return matrix(c, []abi.DataType{abi.Int8, abi.Float32, abi.Bfloat16, abi.Uint64},
					[]int{0, 1, 7, 493, 495, 1 << 14})
			})
		})
	}
}

// TestLargeAllReduce moves 16 MiB per rank through the ring over every
// transport.
func TestLargeAllReduce(t *testing.T) {
	for _, via := range transportEnvs {
		t.Run(via.name, func(t *testing.T) {
			configtest.Setenv(t, append([]string{"GOCL_SOCKET_IFNAME", "lo"}, via.env...)...)
			const count = 4 << 20 // float32: 16 MiB
			clique(t, 4, func(c *Comm) error {
				var k checker
				send := fill(abi.Float32, abi.Sum, c.Rank(), count)
				recv := make([]byte, len(send))
				if err := c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(send), Recv: ptr(recv), Count: count, Type: abi.Float32}); err != nil {
					return err
				}
				for i := 0; i < count; i += 997 {
					k.expect("allreduce 16MiB", abi.Float32, recv, i, reference(abi.Float32, abi.Sum, 0, 4, i))
				}
				return k.err()
			})
		})
	}
}

// Many small ring chunks over sockets: frames that each fit the inline limit
// must not add up to more than the kernel buffers before the peer reads
// (every rank sends before it receives), or the ring would deadlock.
func TestSmallChunksOverSocketsDoNotDeadlock(t *testing.T) {
	configtest.Setenv(t, "GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", "1", "GOCL_SOCKET_IFNAME", "lo", "GOCL_ALGO", "ring", "GOCL_BUFFSIZE", "8192", "GOCL_TIMEOUT", "20")
	const count = 8 << 20 // 32 MiB of float32: 16 MiB segments in 8 KiB chunks, beyond any socket buffer
	clique(t, 2, func(c *Comm) error {
		send := fill(abi.Float32, abi.Sum, c.Rank(), count)
		return c.Run(nil, Op{Coll: wire.AllReduce, Send: ptr(send), Recv: ptr(send), Count: count, Type: abi.Float32})
	})
}

// Over sockets the ring's chunk is socket.Chunk unless GOCL_BUFFSIZE says
// otherwise; within a process (inproc) it stays GOCL_BUFFSIZE's default.
func TestSocketChunk(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want int
	}{
		{"inproc", nil, 1 << 20},
		{"socket", []string{"GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", "1", "GOCL_SOCKET_IFNAME", "lo"}, socket.Chunk},
		{"socket, BUFFSIZE set", []string{"GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", "1", "GOCL_SOCKET_IFNAME", "lo", "GOCL_BUFFSIZE", "1048576"}, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.env) > 0 {
				configtest.Setenv(t, tc.env...)
			}
			clique(t, 2, func(c *Comm) error {
				if c.chunk != tc.want {
					return fmt.Errorf("chunk %d, want %d", c.chunk, tc.want)
				}
				return nil
			})
		})
	}
}

// A malformed tuner or channel setting (or its NCCL_ fallback) fails init
// on every rank, with a message naming the variable and what it takes.
func TestBadSettingFailsInit(t *testing.T) {
	for _, c := range []struct{ key, value, says string }{
		{"GOCL_ALGO", "rings", "comma list"}, {"NCCL_ALGO", "allreduce:tree;ring", "comma list"}, {"GOCL_PROTO", "LL64", "comma list"},
		{"GOCL_MAX_NCHANNELS", "0", "1 or more"}, {"NCCL_MAX_NCHANNELS", "many", "1 or more"}, {"GOCL_MIN_NCHANNELS", "-1", "1 or more"},
	} {
		t.Run(c.key, func(t *testing.T) {
			configtest.Setenv(t, c.key, c.value)
			comms, err := InitAll(2, nil, Options{})
			if err == nil {
				for _, c := range comms {
					c.Destroy()
				}
				t.Fatalf("%s=%s: init succeeded", c.key, c.value)
			}
			if msg := err.Error(); !strings.Contains(msg, c.key+"=") || !strings.Contains(msg, c.says) {
				t.Errorf("%s=%s: %v", c.key, c.value, err)
			}
		})
	}
}
