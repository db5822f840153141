package transport

import "gocl/runtime/wire"

// Peeker is a Prober that can also show the header of the waiting frame
// without consuming it. Receives from any source use it to pass over a peer
// whose next frame belongs to a later collective (the peer went ahead), which
// a bare Pending cannot tell from a send.
type Peeker interface {
	Prober
	// Peek returns the waiting frame's header; ok is false when no whole
	// header is waiting. A closed link reports ok with Kind wire.KindAbort.
	Peek() (h wire.Header, ok bool)
}
