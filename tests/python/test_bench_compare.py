"""bench/compare.py's sweep segments: the segments cover the sweep exactly
(the sizes gocl-perf and mpi-perf would run for -b/-e/-f), each ends at or
before a segment end, and merged segments give back one sweep."""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))  # as when compare.py runs as a script (it imports _units)
spec = importlib.util.spec_from_file_location("compare", REPO / "bench" / "compare.py")
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)


def sweep(b, e, f):
    out = [b]
    while out[-1] * f <= e:
        out.append(out[-1] * f)
    return out


@pytest.mark.parametrize("b,e,f", [(8, 64 << 20, 2), (8, 512, 2), (3000, 64 << 20, 4), (8, 8, 2),
                                   (64 << 10, 64 << 20, 2), (1024, 2048, 2), (5, 100000, 3)])
def test_segments_cover_the_sweep(b, e, f):
    segs = compare.segments(b, e, f)
    sizes = [s for lo, hi in segs for s in sweep(lo, hi, f)]
    assert sizes == sweep(b, e, f)
    for lo, hi in segs[:-1]:
        assert any(hi <= end < hi * f for end in compare.SEGMENT_ENDS), (lo, hi)


def test_merge_concatenates_rows():
    parts = [{"maxbytes": 1024, "rows": [{"size": 8}], "out_of_bounds": 0, "nranks": 2},
             {"maxbytes": 64 << 20, "rows": [{"size": 2048}, {"size": 4096}], "out_of_bounds": 1, "nranks": 2}]
    run = compare.merge(parts)
    assert [r["size"] for r in run["rows"]] == [8, 2048, 4096]
    assert run["maxbytes"] == 64 << 20 and run["out_of_bounds"] == 1 and run["nranks"] == 2
