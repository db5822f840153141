"""The Python size rules (gocl._sizes) against Go's (comm.Elems), through the
table runtime/comm/testdata/elems.json that Go's TestElemsTable pins."""

import json
from pathlib import Path

import pytest

from gocl import _sizes

TABLE = Path(__file__).resolve().parents[2] / "runtime" / "comm" / "testdata" / "elems.json"


def test_sizes_match_go_for_every_collective():
    if not TABLE.is_file():
        pytest.skip(f"{TABLE} is not here (an installed package without the Go sources)")
    rows = json.loads(TABLE.read_text())
    assert {r["call"] for r in rows} == set(_sizes._RULES), "a collective is missing on one side"
    for r in rows:
        assert _sizes.elems(r["call"], r["count"], r["nranks"]) == (r["send"], r["recv"]), r
