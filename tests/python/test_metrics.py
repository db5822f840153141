"""GOCL_METRICS_FILE: one JSON line per completed call, in NCCL Inspector's
fields, on a real 2-process job (gocl perf -P 2). Every line parses; its
bytes and busbw agree with what gocl perf reports for the same run; the
files are off by default; `gocl trace` summarises them."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict

from gocl.tools import cli, trace

# 8 B .. 1 MiB, x32: 8 B, 256 B, 8 KiB, 256 KiB (and 1 MiB is past the end).
SWEEP = ["-b", "8", "-e", "1M", "-f", "32", "-n", "20", "-w", "5", "-c", "0"]


def perf(tmp_path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gocl", "perf", "all_reduce", "-P", "2", *SWEEP, *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if not k.startswith("GOCL_METRICS")} | env)


def test_metrics_agree_with_gocl_perf(tmp_path, capsys):
    result = tmp_path / "perf.json"
    r = perf(tmp_path, {"GOCL_METRICS_FILE": str(tmp_path / "metrics-%h-%p-r%r.jsonl")}, f"--json={result}")
    assert r.returncode == 0, r.stdout + r.stderr
    files = sorted(tmp_path.glob("metrics-*-r*.jsonl"))
    assert len(files) == 2 and {f.name.rsplit("-", 1)[1] for f in files} == {"r0.jsonl", "r1.jsonl"}, files

    # every line parses and has the Inspector's fields
    calls = defaultdict(list)  # (size, rank) -> coll_perf of this run's float allreduces
    comms = set()
    for f in files:
        rank = int(f.name.rsplit("-r", 1)[1].split(".")[0])
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            h, md = rec["header"], rec["metadata"]
            assert h["rank"] == rank and h["n_ranks"] == 2 and h["nnodes"] == 1, rec
            assert md["inspector_output_format_version"] == "v4.0" and md["pid"] > 0 and md["hostname"], rec
            assert "gocl_metrics_dropped" not in rec, f"records dropped: {rec}"
            comms.add(h["id"])
            c = rec["coll_perf"]  # gocl perf all_reduce makes no sends or receives
            for k in ("coll_sn", "coll_msg_size_bytes", "coll_exec_time_us", "coll_algobw_gbs", "coll_busbw_gbs",
                      "coll_algo", "coll_proto", "coll_dtype", "coll_count", "coll_start_us"):
                assert k in c, (k, rec)
            assert c["coll_timing_source"] == "collective_cpu" and "coll_error" not in c, rec
            if c["coll"] == "AllReduce" and c["coll_dtype"] == "float32":
                assert c["coll_msg_size_bytes"] == 4 * c["coll_count"], rec
                assert abs(c["coll_busbw_gbs"] - c["coll_algobw_gbs"]) <= 1e-6, rec  # 2(n-1)/n = 1 at 2 ranks
                us = c["coll_exec_time_us"]
                assert us > 0 and abs(c["coll_algobw_gbs"] - c["coll_msg_size_bytes"] / us / 1e3) < 1e-3 * c[
                    "coll_algobw_gbs"] + 1e-6, rec
                calls[c["coll_msg_size_bytes"], rank].append(c)
    assert len(comms) == 1, comms
    # gocl perf's timed calls: the runs of 20 between two of its float64
    # allreduces (one lines the ranks up, the next averages the time)
    timed = {}
    for f in files:
        rank = int(f.name.rsplit("-r", 1)[1].split(".")[0])
        seq = sorted((json.loads(line)["coll_perf"] for line in f.read_text().splitlines()),
                     key=lambda c: c["coll_sn"])
        marks = [i for i, c in enumerate(seq) if c["coll_dtype"] == "float64"]
        for a, b in zip(marks, marks[1:]):
            run = seq[a + 1:b]
            if len(run) == 20 and len({c["coll_msg_size_bytes"] for c in run}) == 1:
                timed.setdefault((run[0]["coll_msg_size_bytes"], rank), []).extend(run)

    run = json.loads(result.read_text())
    rows = run["rows"]
    assert [row["size"] for row in rows] == [8, 256, 8192, 262144], rows
    for row in rows:
        size = row["size"]
        for phase, k in (("out_of_place", 0), ("in_place", 1)):
            got = [c for rank in (0, 1) for c in timed[size, rank][20 * k:20 * (k + 1)]]
            assert len(got) == 2 * 20, (size, phase, len(got))  # the 20 timed calls of both ranks
            # perf's busbw is size / (mean time of a call, over the ranks);
            # the metrics' the same: size / (mean duration). A duration is
            # the algorithm's, inside the call perf times: at small sizes the
            # call overhead outside it (~0.5 us) makes the metrics' faster.
            mean_us = statistics.mean(c["coll_exec_time_us"] for c in got)
            busbw = size / mean_us / 1e3  # factor 2(n-1)/n = 1
            want = row[phase]["busbw"]
            assert want / 2 <= busbw <= want * (4 if size >= 256 << 10 else 10), (size, phase, busbw, want)

    # gocl trace summarises the metrics files
    capsys.readouterr()
    assert cli.main(["trace", *map(str, files)]) == 0
    out = capsys.readouterr().out
    assert f"communicator {comms.pop()}: 2 ranks, metrics from ranks 0, 1" in out, out
    assert "AllReduce" in out and "256 KiB" in out and "GB/s" in out, out


def test_metrics_are_off_by_default(tmp_path):
    r = perf(tmp_path, {})
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_trace_summary_of_inspector_lines(tmp_path, capsys):
    """Lines as NCCL's Inspector writes them read too, with gocl's drop count."""
    head = {"header": {"id": "0xabc", "rank": 0, "n_ranks": 2, "nnodes": 1},
            "metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": 1, "hostname": "h", "pid": 1}}
    lines = [dict(head, coll_perf={"coll": "AllGather", "coll_sn": i, "coll_msg_size_bytes": 1 << 20,
                                    "coll_exec_time_us": 100 + i, "coll_timing_source": "kernel_gpu",
                                    "coll_algobw_gbs": 10.0, "coll_busbw_gbs": 5.0 + i}) for i in range(3)]
    lines.append(dict(head, p2p_perf={"p2p": "Send", "p2p_sn": 0, "p2p_peer": 1, "p2p_msg_size_bytes": 64,
                                      "p2p_exec_time_us": 3, "p2p_algobw_gbs": 0.02, "p2p_busbw_gbs": 0.02,
                                      "p2p_error": "boom"}))
    lines.append(dict(head, gocl_metrics_dropped=7))
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    metrics: list[dict] = []
    records, notes = trace.load([str(path)], metrics)
    assert records == [] and notes == [] and len(metrics) == 5
    out = "\n".join(trace.summarise(metrics))
    assert "communicator 0xabc: 2 ranks, metrics from rank 0: 4 calls" in out, out
    assert "AllGather" in out and "1 MiB" in out and "101.0" in out and "6.000 GB/s" in out, out
    assert "rank 0: Send of 64 B failed: boom" in out and "rank 0: 7 records dropped" in out, out
