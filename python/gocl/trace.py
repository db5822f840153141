"""``gocl trace FILES...``: line up the ranks' flight-recorder files.

Each rank writes its last calls as JSON lines (GOCL_TRACE_FILE, on failure or
``Communicator.dump_trace()`` / ``goclCommDumpTrace``). Read together, they
show which rank is behind and on which call, which calls differ between
ranks, and which ranks wrote nothing (a stopped or killed rank cannot), as
torch's flight-recorder analyser does for NCCL.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import Iterable, Sequence

P2P = ("send", "recv")


def load(paths: Iterable[str]) -> tuple[list[dict], list[str]]:
    """Every record of the files, and a note for each line that is not one."""
    records, notes = [], []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        r = json.loads(line)
                        r["comm"], r["rank"], r["id"]  # noqa: B018 - the fields every line has
                    except (ValueError, KeyError, TypeError):
                        notes.append(f"{path}:{n}: not a gocl trace record, skipped")
                        continue
                    records.append(r)
        except OSError as e:
            notes.append(f"{path}: {e.strerror or e}")
    return records, notes


def describe(r: dict) -> str:
    s = f"{r['op']} #{r['seq']} (count {r['count']}, {r['dtype']}"
    if r.get("redop"):
        s += f", {r['redop']}"
    if r.get("root") is not None:
        s += f", root {r['root']}"
    if r.get("peer") is not None:
        s += f", rank {r['peer']}"
    return s + ")"


def _signature(r: dict) -> tuple:
    return r["op"], r["count"], r["dtype"], r.get("redop"), r.get("root")


def _state(r: dict) -> str:
    ms = r.get("duration_us", 0) / 1e3
    if r["state"] == "started":
        return f"started, running for {ms:.0f} ms when written"
    return f"{r['state']} in {ms:.3f} ms"


def _ranks(rs: Iterable[int]) -> str:
    rs = sorted(rs)
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def analyse(records: Sequence[dict]) -> list[str]:
    """The report, one communicator after the other."""
    by_comm: dict[str, dict[int, dict[int, dict]]] = defaultdict(lambda: defaultdict(dict))
    nranks: dict[str, int] = defaultdict(int)
    for r in records:  # a later dump of the same call replaces an earlier one
        by_comm[r["comm"]][r["rank"]][r["id"]] = r
        nranks[r["comm"]] = max(nranks[r["comm"]], r.get("nranks", 0), r["rank"] + 1)
    out: list[str] = []
    for comm in sorted(by_comm):
        ranks = by_comm[comm]
        n = nranks[comm]
        out.append(f"communicator {comm}: {n} ranks, traces from {_ranks(ranks)}")
        suspects: list[str] = []
        missing = sorted(set(range(n)) - set(ranks))
        if missing:
            out.append(f"  {_ranks(missing)} wrote no trace: stopped, killed, hung outside gocl, or tracing was "
                       "off there (a rank that fails writes its file when GOCL_TRACE_FILE is set)")
            suspects.append(f"{_ranks(missing)} (no trace)")
        colls = {rank: sorted((r for r in recs.values() if r["op"] not in P2P), key=lambda r: r["seq"])
                 for rank, recs in ranks.items()}
        # calls that differ between ranks at the same sequence number
        by_seq: dict[int, dict[int, dict]] = defaultdict(dict)
        for rank, rs in colls.items():
            for r in rs:
                by_seq[r["seq"]][rank] = r
        for seq in sorted(by_seq):
            sigs = defaultdict(list)
            for rank, r in by_seq[seq].items():
                sigs[_signature(r)].append(rank)
            if len(sigs) > 1:
                parts = "; ".join(f"{_ranks(rs)}: {describe(by_seq[seq][rs[0]])}" for rs in sigs.values())
                out.append(f"  collective #{seq} differs between ranks: {parts}")
                suspects.append(f"collective #{seq} differs")
                break
        last = {rank: rs[-1] for rank, rs in colls.items() if rs}
        if last:
            front = max(r["seq"] for r in last.values())
            ahead = [rank for rank, r in last.items() if r["seq"] == front]
            for rank in sorted(last):
                r = last[rank]
                out.append(f"  rank {rank}: last collective {describe(r)}"
                           + (f" via {r['algorithm']}" if r.get("algorithm") else "")
                           + f" over {r.get('transport', '?')}: {_state(r)}")
            for rank in sorted(last):
                r = last[rank]
                if r["seq"] < front:
                    lacking = by_seq.get(r["seq"] + 1, {})
                    call = describe(next(iter(lacking.values()))) if lacking else f"collective #{r['seq'] + 1}"
                    out.append(f"  rank {rank} is behind: it never started {call}, which {_ranks(ahead)} "
                               f"{'is' if len(ahead) == 1 else 'are'} in")
                    suspects.append(f"rank {rank} (behind, on {call})")
            waiting = [rank for rank in ahead if last[rank]["state"] == "started"]
            if waiting:
                done = [rank for rank in ahead if last[rank]["state"] != "started"]
                msg = f"  {_ranks(waiting)} still in {describe(last[waiting[0]])}"
                if done:
                    msg += f" that {_ranks(done)} finished"
                out.append(msg)
        p2p = [r for recs in ranks.values() for r in recs.values() if r["op"] in P2P and r["state"] == "started"]
        for r in sorted(p2p, key=lambda r: (r["rank"], r["id"])):
            out.append(f"  rank {r['rank']} waits in {describe(r)}, {_state(r)}")
        failed = [r for recs in ranks.values() for r in recs.values() if r.get("error")]
        for r in sorted(failed, key=lambda r: (r["rank"], r["id"]))[:n]:
            out.append(f"  rank {r['rank']}: {describe(r)} failed: {r['error']}")
        out.append("  => look at " + "; ".join(suspects) if suspects else
                   "  => every rank that wrote a trace reached the same call")
    return out


def main(paths: Sequence[str]) -> int:
    if not paths:
        print("gocl trace: give the ranks' trace files (GOCL_TRACE_FILE)", file=sys.stderr)
        return 2
    records, notes = load(paths)
    for note in notes:
        print(f"gocl trace: {note}", file=sys.stderr)
    if not records:
        print("gocl trace: no records in the files given", file=sys.stderr)
        return 1
    print("\n".join(analyse(records)))
    return 0
