"""``gocl trace FILES...``: line up the ranks' flight-recorder files, and
summarise metrics files.

Each rank writes its last calls as JSON lines (GOCL_TRACE_FILE, on failure or
``Communicator.dump_trace()`` / ``goclCommDumpTrace``). Read together, they
show which rank is behind and on which call, which calls differ between
ranks, and which ranks wrote nothing (a stopped or killed rank cannot), as
torch's flight-recorder analyser does for NCCL.

Metrics files (GOCL_METRICS_FILE: one line per completed call, in the
fields of NCCL's Inspector plugin, whose own output reads the same) are
summarised per communicator and op: calls, bytes, median duration and
median busbw, and per message size when a op ran at several. The two kinds
may be given together.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import Iterable, Sequence

P2P = ("send", "recv")


def load(paths: Iterable[str], metrics: list[dict] | None = None) -> tuple[list[dict], list[str]]:
    """Every trace record of the files, and a note for each line that is not
    one. Metrics lines (Inspector-style: header plus coll_perf or p2p_perf,
    or gocl's count of dropped records) go to ``metrics`` when it is given,
    flattened by :func:`metric`."""
    records, notes = [], []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        r = json.loads(line)
                        if metrics is not None and isinstance(r, dict) and "header" in r:
                            metrics.append(metric(r))
                            continue
                        r["comm"], r["rank"], r["id"]  # noqa: B018 - the fields every line has
                    except (ValueError, KeyError, TypeError, AttributeError):
                        notes.append(f"{path}:{n}: not a gocl trace record, skipped")
                        continue
                    records.append(r)
        except OSError as e:
            notes.append(f"{path}: {e.strerror or e}")
    return records, notes


def metric(line: dict) -> dict:
    """A metrics line as {comm, rank, nranks, op, bytes, us, algbw, busbw,
    error}, or {comm, rank, dropped} for a line that counts dropped records."""
    h = line["header"]
    out = {"comm": str(h["id"]), "rank": int(h["rank"]), "nranks": int(h.get("n_ranks", 0))}
    if "gocl_metrics_dropped" in line:
        return {**out, "dropped": int(line["gocl_metrics_dropped"])}
    if "coll_perf" in line:
        p, k, op = line["coll_perf"], "coll_", line["coll_perf"]["coll"]
    else:
        p, k = line["p2p_perf"], "p2p_"
        op = p["p2p"]
    return {**out, "op": str(op), "bytes": int(p[k + "msg_size_bytes"]), "us": float(p[k + "exec_time_us"]),
            "algbw": float(p.get(k + "algobw_gbs", 0)), "busbw": float(p.get(k + "busbw_gbs", 0)),
            "error": p.get(k + "error")}


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _size(b: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024 or unit == "GiB":
            return f"{b:.0f} {unit}" if unit == "B" or b == int(b) else f"{b:.1f} {unit}"
        b /= 1024
    return f"{b} B"


def summarise(metrics: Sequence[dict]) -> list[str]:
    """Per communicator and op (and message size): calls, bytes, median
    duration and median busbw over the ranks' records."""
    out: list[str] = []
    by_comm: dict[str, list[dict]] = defaultdict(list)
    for m in metrics:
        by_comm[m["comm"]].append(m)
    for comm in sorted(by_comm):
        ms = by_comm[comm]
        calls = [m for m in ms if "op" in m]
        ranks = sorted({m["rank"] for m in ms})
        n = max([m.get("nranks", 0) for m in ms] + [max(ranks) + 1])
        out.append(f"communicator {comm}: {n} ranks, metrics from {_ranks(ranks)}: {len(calls)} calls")
        out.append(f"  {'op':<14} {'size':>10} {'calls':>8} {'bytes':>12} {'median us':>11} {'median busbw':>13} "
                   f"{'errors':>6}")
        by_op: dict[str, list[dict]] = defaultdict(list)
        for m in calls:
            by_op[m["op"]].append(m)
        for op in sorted(by_op):
            rs = by_op[op]
            sizes = sorted({m["bytes"] for m in rs})
            groups = [("all", rs)] + ([(s, [m for m in rs if m["bytes"] == s]) for s in sizes] if len(sizes) > 1 else [])
            for size, g in groups:
                label = "all" if size == "all" else _size(size)
                if size == "all" and len(sizes) == 1:
                    label = _size(sizes[0])
                out.append(f"  {op if size == 'all' else '':<14} {label:>10} {len(g):>8} "
                           f"{_size(sum(m['bytes'] for m in g)):>12} {_median([m['us'] for m in g]):>11.1f} "
                           f"{_median([m['busbw'] for m in g]):>9.3f} GB/s {sum(1 for m in g if m['error']):>6}")
        for m in sorted((m for m in calls if m["error"]), key=lambda m: m["rank"])[:n]:
            out.append(f"  rank {m['rank']}: {m['op']} of {_size(m['bytes'])} failed: {m['error']}")
        dropped = {}
        for m in ms:
            if "dropped" in m:
                dropped[m["rank"]] = max(dropped.get(m["rank"], 0), m["dropped"])
        for rank, d in sorted(dropped.items()):
            out.append(f"  rank {rank}: {d} records dropped (the writer fell behind the calls): these counts miss them")
    return out


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
        print("gocl trace: give the ranks' trace files (GOCL_TRACE_FILE) or metrics files (GOCL_METRICS_FILE)",
              file=sys.stderr)
        return 2
    metrics: list[dict] = []
    records, notes = load(paths, metrics)
    for note in notes:
        print(f"gocl trace: {note}", file=sys.stderr)
    if not records and not metrics:
        print("gocl trace: no records in the files given", file=sys.stderr)
        return 1
    lines = analyse(records) if records else []
    if metrics:
        lines += summarise(metrics)
    print("\n".join(lines))
    return 0
