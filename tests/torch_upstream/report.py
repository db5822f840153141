"""torch's whole DistributedTest suite on gloo and on gocl, side by side.

    .venv/bin/python tests/torch_upstream/report.py            # make test-torch-upstream
    .venv/bin/python tests/torch_upstream/report.py --reuse gloo,gocl,gocl-gloo-gates   # rewrite RESULTS.md from the last runs' XML

Runs tests/torch_upstream three times, 2 ranks each, every test of the suite
(no subset):

* ``gloo``: torch's own gloo, the reference (GOCL_UPSTREAM_BACKEND=gloo);
* ``gocl``: gocl under torch's gates as they are (the suite imported as
  "gocl": tests gated on gloo's name or on feature sets gocl is not in are
  skipped by torch);
* ``gocl-gloo-gates``: the suite imported under gloo's name, every rank on
  gocl (GOCL_UPSTREAM_GATES=gloo), so the tests gated on the name run too.

It writes RESULTS.md (counts, which tests each run's gates skip, every
difference from gloo) and exits non-zero when a test that passes on gloo
fails on gocl in either gocl run, or is skipped under gloo's gates, unless
known.txt gives the reason (a test that compares the backend's name with
"gloo"). The XML of each run stays in --xml-dir.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import platform
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MODES = {
    "gloo": {"GOCL_UPSTREAM_BACKEND": "gloo", "GOCL_UPSTREAM_GATES": "gloo"},
    "gocl": {"GOCL_UPSTREAM_BACKEND": "gocl", "GOCL_UPSTREAM_GATES": "gocl"},
    "gocl-gloo-gates": {"GOCL_UPSTREAM_BACKEND": "gocl", "GOCL_UPSTREAM_GATES": "gloo"},
}
# known.txt's mode for each gocl run
KNOWN_MODE = {"gocl": "gocl", "gocl-gloo-gates": "gloo-gates"}


def run(mode: str, xml: Path, extra: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("GOCL_UPSTREAM_BACKEND", "GOCL_UPSTREAM_GATES")}
    env.update(MODES[mode])
    cmd = [sys.executable, "-m", "pytest", str(HERE), "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *extra]
    print(f"== {mode}: {' '.join(f'{k}={v}' for k, v in MODES[mode].items())} {' '.join(cmd[1:])}", flush=True)
    t0 = time.monotonic()
    rc = subprocess.run(cmd, env=env, cwd=ROOT).returncode
    if rc not in (0, 1):  # 1: some test failed, which the comparison reports
        raise SystemExit(f"{mode}: pytest exited {rc} (not a test failure): see its output above")
    return time.monotonic() - t0


def outcomes(xml: Path) -> dict[str, tuple[str, str]]:
    """{test name: (passed|failed|skipped, message)} from a JUnit XML file."""
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "")
        kind, msg = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                kind, msg = "failed", child.get("message", "")
                break
            if child.tag == "skipped":
                kind, msg = "skipped", child.get("message", "")
        out[name] = (kind, " ".join(msg.split()))
    return out


def read_known(mode: str) -> dict[str, str]:
    known = {}
    for line in (HERE / "known.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, where, reason = line.split(None, 2)
            if where in (mode, "both"):
                known[name] = reason
    return known


def skip_reason(msg: str) -> str:
    """A skip message with the per-test parts taken out, to count by."""
    msg = re.sub(r"^(Skipped: )", "", msg)
    msg = re.sub(r"\d+ (GPUs|accelerators)", "N \\1", msg)
    return msg[:110] or "(no reason given)"


def compare(res: dict[str, dict[str, tuple[str, str]]]) -> tuple[list[str], list[str]]:
    """(report lines, problems)."""
    gloo = res["gloo"]
    gloo_pass = sorted(n for n, (k, _) in gloo.items() if k == "passed")
    lines, problems = [], []
    lines += ["## Counts", "", "| run | tests | passed | failed | skipped | of gloo's passes: passed | failed | skipped |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, r in res.items():
        c = collections.Counter(k for k, _ in r.values())
        g = collections.Counter(r.get(n, ("missing", ""))[0] for n in gloo_pass)
        lines.append(f"| {mode} | {len(r)} | {c['passed']} | {c['failed']} | {c['skipped']} | "
                     f"{g['passed']} | {g['failed']} | {g['skipped'] + g['missing']} |")
    lines.append("")
    for mode in ("gocl", "gocl-gloo-gates"):
        if mode not in res:
            continue
        r, known = res[mode], read_known(KNOWN_MODE[mode])
        lines += [f"## {mode}: gloo's {len(gloo_pass)} passes", ""]
        failed = [n for n in gloo_pass if r.get(n, ("missing",))[0] == "failed"]
        skipped = [n for n in gloo_pass if r.get(n, ("missing",))[0] in ("skipped", "missing")]
        for n in failed:
            why = known.get(n)
            lines.append(f"- FAILED `{n}`: {r[n][1][:300]}" + (f" (known.txt: {why})" if why else ""))
            if not why:
                problems.append(f"{mode}: {n} passes on gloo and fails on gocl")
        gated = collections.defaultdict(list)
        for n in skipped:
            msg = r.get(n, ("missing", "not collected"))[1]
            gated[skip_reason(msg)].append(n)
            if mode == "gocl-gloo-gates" and not msg.startswith("known.txt"):
                problems.append(f"{mode}: {n} passes on gloo and is skipped on gocl under gloo's gates: {msg}")
        if gated:
            lines.append(f"- skipped on gocl ({len(skipped)}), by the reason its gate gives:")
            for why, names in sorted(gated.items(), key=lambda kv: -len(kv[1])):
                lines.append(f"  - {why} ({len(names)}): " + ", ".join(f"`{n}`" for n in names))
        if not failed and not skipped:
            lines.append("- every one passes")
        extra = sorted(n for n, (k, _) in r.items() if k == "passed" and gloo.get(n, ("",))[0] != "passed")
        if extra:
            lines.append(f"- passing on gocl but not on gloo ({len(extra)}): " + ", ".join(
                f"`{n}` (gloo: {gloo.get(n, ('not collected',))[0]})" for n in extra))
        lines.append("")
    lines += ["## What each run's gates skip", "",
              "Skip reasons with their counts (a test counts once, under its own message):", ""]
    for mode, r in res.items():
        reasons = collections.Counter(skip_reason(m) for k, m in r.values() if k == "skipped")
        lines.append(f"- **{mode}**: " + "; ".join(f"{why} ({c})" for why, c in reasons.most_common()))
    lines.append("")
    return lines, problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default=",".join(MODES), help="runs to make, of " + ", ".join(MODES))
    ap.add_argument("--xml-dir", default=str(ROOT / "build" / "torch-upstream"))
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--reuse", default="", help="runs (comma-separated) whose earlier XML is read instead of running them")
    ap.add_argument("pytest_args", nargs="*", help="passed to every pytest run (after --)")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    reuse = {m for m in a.reuse.split(",") if m}
    if "gloo" not in modes or any(m not in MODES for m in modes) or not reuse <= set(modes):
        ap.error(f"--modes: names from {', '.join(MODES)}, gloo among them (it is the reference); "
                 "--reuse: some of them")
    xml_dir = Path(a.xml_dir)
    xml_dir.mkdir(parents=True, exist_ok=True)
    seconds = {}
    for mode in modes:
        xml = xml_dir / f"{mode}.xml"
        if mode in reuse:
            if not xml.exists():
                ap.error(f"--reuse: {xml} is missing; run without --reuse first")
        else:
            seconds[mode] = run(mode, xml, a.pytest_args)
    res = {m: outcomes(xml_dir / f"{m}.xml") for m in modes}
    lines, problems = compare(res)

    import torch  # noqa: PLC0415  (only for the header)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    head = ["# torch's DistributedTest on gloo and gocl", "",
            f"`make test-torch-upstream` (tests/torch_upstream/report.py), "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit or '?'}, "
            f"torch {torch.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
            "2 ranks, CPU only, the whole suite (no subset).", ""]
    if seconds:
        head += ["Wall time: " + ", ".join(f"{m} {s / 60:.1f} min" for m, s in seconds.items()), ""]
    head += ["Result: " + ("every test gloo passes passes on gocl (known.txt's entries aside)" if not problems
                          else f"{len(problems)} problem(s):"), ""]
    head += [f"- {p}" for p in problems] + ([""] if problems else [])
    Path(a.out).write_text("\n".join(head + lines))
    print(f"wrote {a.out}")
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
