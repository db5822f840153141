package comm

import (
	"math"
	"math/bits"
	"unsafe"

	"gocl/abi"
	"gocl/kernels"
	"gocl/runtime/status"
	"gocl/runtime/wire"
)

// Op is one call as the user made it: buffers are raw pointers to memory the
// caller owns (C memory, numpy or torch buffers), sized by the call's rules.
type Op struct {
	Coll       wire.Coll
	Send, Recv unsafe.Pointer
	Count      int
	Type       abi.DataType
	RedOp      int32 // a abi.RedOp, or a handle from CreatePreMulSum
	Root       int   // rooted collectives: the root
	Peer       int   // send/recv: the other rank
	IsSend     bool  // send/recv: which side

	// Filled by prepare.
	send, recv []byte
	red        *kernels.Reducer
}

// maxBytes bounds one buffer: larger counts are overflow or garbage.
const maxBytes = 1 << 46

// Elems is the one statement of the size rules: how many elements the send
// and recv buffers of a call of coll with count need on nranks ranks (a send
// has no recv buffer, a receive no send buffer; isSend says which
// SendRecv is). Buffers a rank does not touch (root-only ones elsewhere) are
// counted too. Unknown collectives need nothing.
func Elems(coll wire.Coll, count, nranks int, isSend bool) (send, recv int) {
	d := coll.Desc()
	send, recv = d.Send.Elems(count, nranks), d.Recv.Elems(count, nranks)
	if coll == wire.SendRecv { // one side of it
		if isSend {
			return send, 0
		}
		return 0, recv
	}
	return send, recv
}

// sizes returns the bytes of the send and recv buffers of op on this comm.
func (c *Comm) sizes(op *Op) (send, recv int) {
	s, r := Elems(op.Coll, op.Count, c.nranks, op.IsSend)
	size := op.Type.Size()
	return s * size, r * size
}

func (op *Op) name() string {
	if op.Coll == wire.SendRecv {
		if op.IsSend {
			return "send"
		}
		return "recv"
	}
	return op.Coll.String()
}

// prepare validates op and builds its buffers and reducer. Every message
// names the argument, the rank and what to pass instead.
func (c *Comm) prepare(op *Op) error {
	bad := func(format string, args ...any) error {
		return status.Errorf(status.InvalidArgument, "%s on rank %d: "+format, append([]any{op.name(), c.rank}, args...)...)
	}
	if !op.Type.Valid() {
		return bad("datatype %d is not a gocl datatype (use goclInt8 ... goclBfloat16, 0..9)", int(op.Type))
	}
	// A multiply, not maxBytes / size / nranks: divisions were the
	// costliest part of a small call's validation (bench/CALLPATH.md).
	if hi, lo := bits.Mul64(uint64(op.Count), uint64(op.Type.Size()*c.nranks)); op.Count < 0 || hi != 0 || lo > maxBytes {
		return bad("count %d overflows (count × %d bytes × %d ranks must stay below 2^46 bytes)", uint64(op.Count), op.Type.Size(), c.nranks)
	}
	d := op.Coll.Desc()
	if d.Rooted && (op.Root < 0 || op.Root >= c.nranks) {
		return bad("root %d is out of range: pass a rank in [0, %d]", op.Root, c.nranks-1)
	}
	if op.Coll == wire.SendRecv && (op.Peer < 0 || op.Peer >= c.nranks) {
		return bad("peer %d is out of range: pass a rank in [0, %d]", op.Peer, c.nranks-1)
	}
	sb, rb := c.sizes(op)
	// Which buffers this rank reads and writes (root-only buffers elsewhere
	// may be NULL, as in NCCL).
	needSend := sb > 0 && (!d.RootSends || c.rank == op.Root)
	needRecv := rb > 0 && (!d.RootRecvs || c.rank == op.Root)
	if needSend && op.Send == nil {
		return bad("sendbuff is NULL but count is %d", op.Count)
	}
	if needRecv && op.Recv == nil {
		return bad("recvbuff is NULL but count is %d", op.Count)
	}
	if needSend {
		op.send = unsafe.Slice((*byte)(op.Send), sb)
	}
	if needRecv {
		op.recv = unsafe.Slice((*byte)(op.Recv), rb)
	}
	if op.Coll == wire.AlltoAll && op.Count > 0 && op.Send == op.Recv {
		return bad("sendbuff and recvbuff are the same buffer: alltoall cannot run in place, pass a separate recvbuff")
	}
	if d.Reduces {
		red, err := c.reducer(op.Type, op.RedOp)
		if err != nil {
			return bad("%v", err)
		}
		op.red = red
	}
	return nil
}

// wireOp is the op byte in frame headers (custom ops are all PreMulSum).
func (op *Op) wireOp() uint8 {
	if op.red != nil {
		return uint8(min(int(op.red.Op()), math.MaxUint8))
	}
	return 0
}
