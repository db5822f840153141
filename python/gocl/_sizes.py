"""The size rules, once for Python: how many elements a call's send and
receive buffers need, given its count (the count argument of the C call) and
the number of ranks. Go's comm.Elems states the same rules;
runtime/comm/testdata/elems.json is the table both suites check."""

from __future__ import annotations

# call -> (send, recv) as multiples of count: 1 is count, "n" is nranks × count.
_RULES = {
    "all_reduce": (1, 1), "broadcast": (1, 1), "reduce": (1, 1),
    "all_gather": (1, "n"), "reduce_scatter": ("n", 1), "all_to_all": ("n", "n"),
    "gather": (1, "n"), "scatter": ("n", 1),
    "send": (1, 0), "recv": (0, 1),
}


def elems(call: str, count: int, nranks: int) -> tuple[int, int]:
    """(send, recv) elements of one call of ``call`` (a numpy API name) with
    ``count`` on ``nranks`` ranks; a send has no receive buffer and a receive
    no send buffer."""
    def times(k) -> int:
        return nranks * count if k == "n" else k * count
    s, r = _RULES[call]
    return times(s), times(r)
