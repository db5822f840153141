"""The point-to-point c10d operations of an Engine: send, recv, recv from
any source, with torch's tags."""

from __future__ import annotations


import torch

from .. import _core
from ._staging import Host
from ._work import GoclWork, Task

from ._calls import U8, Calls


class PointToPoint(Calls):
    """send, recv, recv_anysource."""

    # gocl delivers a pair's messages in the order they were sent. A tag
    # travels with its message so that a receive can never take a message
    # sent with another tag silently: tag 0 sends the tensor's bytes as
    # they are (uint8, no copy); a nonzero tag sends the tag (8 bytes)
    # then them, as int8, and the receive checks the tag. So
    # equal tags posted in the order sent work, a receive that meets a
    # message of another tag fails naming both tags (gloo would reorder:
    # gocl cannot, as a receive must know a message's size before it is
    # posted), and a tag on one side only fails as a datatype mismatch.
    _TAG_BYTES = 8

    def _tagged(self, tag) -> int:
        tag = int(tag)
        if not -(1 << 63) <= tag < (1 << 63):
            raise self._err(f"send/recv: tag {tag} does not fit in 64 bits")
        return tag

    def send(self, tensors, dstRank: int, tag: int = 0) -> GoclWork:  # noqa: N803
        t = self._one(tensors, "send")
        peer = self._check_peer(dstRank, "send")
        tag = self._tagged(tag)
        st = {}

        if tag == 0:
            def issue(stream):
                h = st["h"] = Host(t)
                self.comm.send(h.bytes().data_ptr(), h.nbytes, U8, peer, stream)
        else:
            def issue(stream):
                b = Host(t).bytes()
                n = b.numel()
                buf = st["buf"] = torch.empty(n + self._TAG_BYTES, dtype=torch.uint8)
                buf[:self._TAG_BYTES].view(torch.int64)[0] = tag  # first: aligned
                buf[self._TAG_BYTES:].copy_(b)
                self.comm.send(buf.data_ptr(), buf.numel(), _core.INT8, peer, stream)
        self.seq += 1
        return self.executor.submit(Task("send", issue, None, [t], [t], p2p=True), async_op=True)

    def _recv_steps(self, t, tag: int, peer, call):
        """issue and finish of a receive into t; call(ptr, nbytes, dtype, stream)
        makes the gocl call; peer() is the sender (known once it ran)."""
        st = {}
        if tag == 0:
            def issue(stream):
                h = st["h"] = Host(t, read=False)
                call(h.bytes().data_ptr(), h.nbytes, U8, stream)

            def finish():
                st["h"].write_back()
            return issue, finish

        def issue(stream):
            h = st["h"] = Host(t, read=False)
            buf = st["buf"] = torch.empty(h.nbytes + self._TAG_BYTES, dtype=torch.uint8)
            call(buf.data_ptr(), buf.numel(), _core.INT8, stream)

        def finish():
            h, buf = st["h"], st["buf"]
            got = int(buf[:self._TAG_BYTES].view(torch.int64)[0])
            if got != tag:
                raise RuntimeError(
                    f"gocl recv on {self.where()}: the next message from rank {peer()} was sent with tag {got}, "
                    f"but this receive (tag={tag}) expects tag {tag}; the message was not delivered. gocl "
                    f"delivers each rank's messages in the order sent and does not reorder them by tag (gloo "
                    f"does): post the receives from a rank in the order that rank sends, with the same tags")
            h.bytes().copy_(buf[self._TAG_BYTES:])
            h.write_back()
        return issue, finish

    def recv(self, tensors, srcRank: int, tag: int = 0) -> GoclWork:  # noqa: N803
        t = self._one(tensors, "recv")
        peer = self._check_peer(srcRank, "recv")
        tag = self._tagged(tag)
        issue, finish = self._recv_steps(
            t, tag, lambda: peer, lambda p, n, dt, stream: self.comm.recv(p, n, dt, peer, stream))
        self.seq += 1
        return self.executor.submit(Task("recv", issue, finish, [t], [t], p2p=True), async_op=True)

    def recv_anysource(self, tensors, tag: int = 0) -> GoclWork:
        """Receive from whichever rank sends first (gloo's recvAnysource):
        the Work's _source_rank() is that rank. It runs alone, after the
        group's queued work (its peer is known only once it has run)."""
        t = self._one(tensors, "recv")
        tag = self._tagged(tag)

        def call(p, n, dt, _stream):
            work.source = self.comm.recv_any(p, n, dt)

        issue, finish = self._recv_steps(t, tag, lambda: work.source, call)
        self.seq += 1
        # held back with the group's isend/irecv (program order), then run alone
        work = self.executor.submit(Task("recvAnySource", issue, finish, [t], [t], p2p=True, blocking=True),
                                    async_op=True)
        return work
