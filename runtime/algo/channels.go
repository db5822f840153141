package algo

import (
	"sync"

	"gocl/runtime/status"
	"gocl/runtime/transport"
)

// Channels, as in NCCL: a large call is cut into contiguous parts, one per
// channel, and each part runs the whole algorithm over its own FIFOs (its
// own links, primitives and sender) on its own goroutine, so several cores
// can move one call. Links that carry several FIFOs say so by being a
// transport.Channeled; every link of a communicator reports the same counts
// (agreed at init), so every rank splits a call alike.

// nchannels is how many channels a call moving bytes per rank uses: one
// per Chunk of every rank's segment, between the agreed fewest and most.
func (c *Ctx) nchannels(bytes int) int {
	ch, ok := c.Links[c.next()].(transport.Channeled)
	if !ok || c.N == 1 {
		return 1
	}
	links, lo := ch.Channels()
	return max(1, min(len(links), max(lo, bytes/(c.N*max(c.Chunk, 1)))))
}

// channel is the context of channel i of the ring: the same call over the
// i-th FIFO of the links to the ring's neighbours (only those: links to
// other ranks may be in the making, on first use, by another goroutine).
func (c *Ctx) channel(i int) *Ctx {
	cc := *c
	cc.Links = make([]transport.Link, len(c.Links))
	for _, p := range []int{c.next(), c.prev()} {
		links, _ := c.Links[p].(transport.Channeled).Channels()
		cc.Links[p] = links[i]
	}
	return &cc
}

// split runs part(ch, lo, hi) for the element range [lo, hi) of count on
// each of nch channels, channel 0 on the caller's goroutine. A failure on
// one fails the communicator, which ends the others' waits.
func (c *Ctx) split(nch, count int, part func(ch *Ctx, lo, hi int) error) error {
	errs := make([]error, nch)
	var wg sync.WaitGroup
	for i := 1; i < nch; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if errs[i] != nil {
					c.Fail(errs[i])
				}
			}()
			defer status.Catch(&errs[i])
			defer c.catchFault() // a count larger than the buffers
			panicOnFault()
			lo, hi := span(count, nch, i)
			errs[i] = part(c.channel(i), lo, hi)
		}()
	}
	lo, hi := span(count, nch, 0)
	errs[0] = part(c.channel(0), lo, hi)
	if errs[0] != nil {
		c.Fail(errs[0])
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
