package shm

// The slot format: the descriptor words both ends agree on, the LL and
// Simple protocols' boundary, and the decoding of a descriptor.

import "gocl/runtime/wire"

// Slot words (4 bytes of data each): the descriptor, which carries the
// frame's wire header field by field (the magic and version of a socket
// frame are the segment's), then the LL payload or the Simple piece's place
// in the data ring.
const (
	wFlags     = 0  // mode bits, then the header's Kind, Coll and Dtype, a byte each
	wLen       = 1  // this piece's payload bytes (24 bits), then the header's Op
	wRoot      = 2  // the header's Root
	wSeq       = 3  // 2 words: Seq
	wCount     = 5  // 2 words: Count
	wStep      = 7  // Step
	wFrame     = 8  // 2 words: the frame's Len (all its pieces)
	llDesc     = 10 // words of an LL descriptor: the payload follows
	wStart     = 10 // Simple: 2 words: the piece's data-ring position (monotonic)
	wEnd       = 12 // Simple: 2 words: where the data ring is released to after it
	simpleDesc = 14 // words of a Simple descriptor
	wClaim     = 14 // CMA pieces: a plain word (no flag) the receiver claims before it reads the sender's memory, and a failing sender withdraws (cma.go)
	modeSimple = 1
	modeMore   = 2 // another piece of the same frame follows
	modeCMA    = 4 // with modeSimple: wStart is the sender's address (cma.go)
	modeShort  = 8 // an LL frame in the short layout below
)

// The short layout of an LL frame, for the common case of a header whose
// Seq and Count fit 32 bits and whose Root fits 16 (and an LL frame is one
// piece, so its Len is the piece's): 5 descriptor words, so a frame of up
// to 12 bytes is one cache line (8 words) and the pair moves one line per
// frame instead of two. A 2-rank 8-byte allreduce is little more than one
// such frame each way: the second line cost a read-for-ownership the
// sender's flag store waited for, and a miss the receiver waited for.
const (
	sLen      = 1 // the payload bytes (8 bits), the header's Op (8), its Root (16)
	sSeq      = 2 // Seq
	sCount    = 3 // Count
	sStep     = 4 // Step
	shortDesc = 5 // the payload follows
)

// A piece's length must fit in wLen's 24 bits.
const _ = uint(1<<24 - MaxPiece)

// LLMax is the largest payload sent inside a slot (LL protocol); larger ones
// go through the data ring (Simple protocol). LL moves 4 bytes per 8-byte
// word and its receiver checks every word's flag, while Simple is one
// memmove each side behind one flag: a 256 B LL frame fills 10 cache lines
// of its slot, Simple 2 of the slot and 4 of the ring. Simple wins from
// 256 B, with one rank per core or two; at 128 B they are even
// (bench/SHM.md).
const LLMax = 128

// The LL payload must fit in a slot after the descriptor.
const _ = uint((llWords-llDesc)*4 - LLMax)

type piece struct {
	seq        uint64
	flags, n   int
	start, end uint64
	hdr        wire.Header // received pieces: the header the slot carries
}

// descWords is the length of the descriptor whose first word is w0.
func descWords(w0 uint32) int {
	switch {
	case w0&modeSimple != 0:
		return simpleDesc
	case w0&modeShort != 0:
		return shortDesc
	}
	return llDesc
}

// decode sets p's header, mode, length and ring position from a
// descriptor; false when it cannot be one (a corrupt slot).
func decode(d *[simpleDesc]uint32, p *piece) bool {
	h := &p.hdr
	h.Kind, h.Coll, h.Dtype = wire.Kind(d[wFlags]>>8), wire.Coll(d[wFlags]>>16), uint8(d[wFlags]>>24)
	p.flags = int(d[wFlags] & 0xff)
	if p.flags&modeShort != 0 {
		p.n = int(d[sLen] & 0xff)
		h.Op = uint8(d[sLen] >> 8)
		h.Root = int32(d[sLen] >> 16)
		h.Seq, h.Count, h.Step, h.Len = uint64(d[sSeq]), uint64(d[sCount]), d[sStep], uint64(p.n)
		p.start, p.end = 0, 0
	} else {
		p.n = int(d[wLen] & (1<<24 - 1))
		h.Op = uint8(d[wLen] >> 24)
		h.Root = int32(d[wRoot])
		h.Seq = uint64(d[wSeq]) | uint64(d[wSeq+1])<<32
		h.Count = uint64(d[wCount]) | uint64(d[wCount+1])<<32
		h.Step = d[wStep]
		h.Len = uint64(d[wFrame]) | uint64(d[wFrame+1])<<32
		p.start = uint64(d[wStart]) | uint64(d[wStart+1])<<32
		p.end = uint64(d[wEnd]) | uint64(d[wEnd+1])<<32
	}
	return h.Kind == wire.KindColl || h.Kind == wire.KindP2P || h.Kind == wire.KindAbort
}
