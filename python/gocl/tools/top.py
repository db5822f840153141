"""``gocl top``: the live view of ``gocl status``, refreshed every second.

One block per communicator, its ranks as rows: where each rank's process
runs, its state, the collective it is in and for how long, the rank it
waits on and for how long, the bytes per second its links move; the
straggler (the rank the others wait on, :func:`gocl.tools.status.straggler`)
in reverse video with a ``*`` before its rank and ``<< STRAGGLER`` after
its row, and the reason under the block. A header with the time, the
host, how many processes answered, and each GPU's utilisation and memory
through NVML when libnvidia-ml.so.1 loads (nothing otherwise). Problems
met while asking (a process that does not answer, a key that cannot be
read) are at the bottom.

Keys: q quits, p pauses (the screen stays as it is), arrows / PgUp /
PgDn / Home scroll a view taller than the terminal. The processes are
asked on a thread of their own, so a stopped process (up to
:data:`gocl.tools.status.ASK_WAIT` s) never holds up the keys.

``--once`` (or a stdout that is not a terminal) prints one frame as plain
text and exits.
"""

from __future__ import annotations

import ctypes
import curses
import locale
import socket
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import status

MIN_W, MIN_H = 60, 8  # smaller: "terminal too small"

# Styles of the lines of a frame.
PLAIN, TITLE, HEAD, CULPRIT, WHY, PROBLEM, DIM, GPU = range(8)

Line = tuple[str, int]

MARK = "<< STRAGGLER"


# NVML, through ctypes: only the calls gocl top needs.

class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


@dataclass
class GpuInfo:
    index: int
    name: str
    util: int | None  # percent busy over NVML's last sample period; None: not supported
    mem_used: int | None  # bytes
    mem_total: int | None


class Nvml:
    """libnvidia-ml.so.1 when it loads and initialises; otherwise every
    call answers no GPUs (no error: a host without a GPU is no problem)."""

    def __init__(self) -> None:
        self.lib = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            for fn in ("nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
                       "nvmlDeviceGetName", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo"):
                getattr(lib, fn).restype = ctypes.c_int
            if lib.nvmlInit_v2() == 0:
                self.lib = lib
        except (OSError, AttributeError):
            pass

    def gpus(self) -> list[GpuInfo]:
        lib = self.lib
        if lib is None:
            return []
        count = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return []
        out = []
        for i in range(count.value):
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(h)) != 0:
                continue
            name = ctypes.create_string_buffer(96)
            label = name.value.decode(errors="replace") if lib.nvmlDeviceGetName(h, name, 96) == 0 else "?"
            u, m = _Utilization(), _Memory()
            util = u.gpu if lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(u)) == 0 else None
            have_mem = lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)) == 0
            out.append(GpuInfo(i, label, util, m.used if have_mem else None, m.total if have_mem else None))
        return out

    def close(self) -> None:
        if self.lib is not None:
            self.lib.nvmlShutdown()
            self.lib = None


# One look at the processes.

@dataclass
class Snapshot:
    jobs: list[status.Job]
    problems: list[str]
    gpus: list[GpuInfo]
    processes: int  # endpoints found
    answered: int  # processes that answered
    when: float = field(default_factory=time.time)


def take(directory: Path | None, connect: tuple[str, int] | None, nvml: Nvml | None) -> Snapshot:
    """Ask the processes (and NVML); any failure becomes a problem line."""
    try:
        eps = None if connect else status.endpoints(directory)
        replies, problems = status.collect(directory, connect, eps=eps)
        js = status.jobs(replies)
        found = 1 if connect else len(eps)
    except Exception as e:  # noqa: BLE001 - shown at the bottom of the screen, never a traceback
        replies, problems, js, found = [], [f"asking the processes failed: {type(e).__name__}: {e}"], [], 0
    try:
        gpus = nvml.gpus() if nvml else []
    except Exception as e:  # noqa: BLE001
        gpus, problems = [], problems + [f"NVML: {type(e).__name__}: {e}"]
    return Snapshot(js, problems, gpus, max(found, len(replies)), len(replies))


# A frame: lines of text with a style each, the same for curses and --once.

def _size(b: int) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            return f"{b / f:.1f} {unit}"
    return f"{b} B"


def _op(c: dict | None, current: bool) -> str:
    s = status.describe_call(c, _size)
    return s if current or not c else f"({s})"


COLUMNS = ["rank", "host/pid", "state", "op (current; last in brackets)", "in it", "waits on", "for",
           "link out", "link in"]


def columns(r: int, v: dict | None, culprit: int | None) -> list[str]:
    mark = "*" if r == culprit else " "
    if v is None:
        return [f"{mark}{r}", "?", "not found", "-", "-", "-", "-", "-", "-"]
    host = v.get("addr") if v.get("nodes", 1) > 1 and v.get("addr") else v.get("host", "?")
    where = f"{host}/{v.get('pid', '?')}"
    if v.get("reachable") is False:
        return [f"{mark}{r}", where, "NO ANSWER", "-", "-", "-", "-", "-", "-"]
    cur = v.get("current") if v.get("in_call") else None
    w = v.get("waiting")
    if v.get("error"):
        state = "failed"
    elif cur and w:
        state = "waiting"
    elif v.get("in_call"):
        state = "working"  # in a call, waiting on nobody: reducing or copying
    else:
        state = "idle"  # outside gocl
    return [f"{mark}{r}", where, state, _op(cur or v.get("last"), cur is not None),
            f"{cur['seconds']:.1f}s" if cur else "-",
            f"rank {w['peer']} ({w['for']})" if w else "-",
            f"{w['seconds']:.1f}s" if w else "-",
            status.rate(v.get("send_Bps", 0.0)), status.rate(v.get("recv_Bps", 0.0))]


def _bar(frac: float, n: int = 10) -> str:
    k = max(0, min(n, round(frac * n)))
    return "[" + "|" * k + " " * (n - k) + "]"


def gpu_lines(gpus: list[GpuInfo]) -> list[Line]:
    out = []
    width = max((len(g.name) for g in gpus), default=0)
    for g in gpus:
        util = f"util {_bar(g.util / 100)} {g.util:3d}%" if g.util is not None else "util n/a"
        if g.mem_total:
            mem = f"mem {_bar(g.mem_used / g.mem_total)} {g.mem_used / 2**30:.1f}/{g.mem_total / 2**30:.1f} GiB"
        else:
            mem = "mem n/a"
        out.append((f"GPU {g.index}  {g.name.ljust(width)}  {util}  {mem}", GPU))
    return out


def frame(snap: Snapshot | None, *, interval: float, paused: bool, host: str | None = None,
          keys: bool = True) -> tuple[list[Line], list[Line]]:
    """The view: (body lines, problem lines for the bottom)."""
    host = host or socket.gethostname()
    when = time.strftime("%H:%M:%S", time.localtime(snap.when if snap else time.time()))
    head = f"gocl top  {when}  host {host}"
    if snap:
        head += f"  {snap.processes} process{'es' if snap.processes != 1 else ''}, {snap.answered} answered"
    head += f"  every {interval:g} s"
    if paused:
        head += "  PAUSED (p resumes)"
    elif keys:
        head += "  (q quits, p pauses)"
    body: list[Line] = [(head, TITLE)]
    if snap is None:
        return body + [("", PLAIN), ("asking the gocl processes ...", DIM)], []
    body += gpu_lines(snap.gpus)
    body.append(("", PLAIN))
    if not snap.jobs:
        body.append((f"no gocl communicators found (status directory {status.status_dir()})", DIM))
    for j in snap.jobs:
        rows = [columns(r, j.row(r), j.culprit) for r in range(j.size)]
        widths = [max(len(x[i]) for x in [COLUMNS] + rows) for i in range(len(COLUMNS))]

        def fmt(x: list[str]) -> str:
            return "  ".join(x[i].ljust(widths[i]) for i in range(len(COLUMNS)))

        body.append((f"communicator {j.id}: {j.size} ranks, {len(j.ranks)} seen", TITLE))
        body.append((" " + fmt(COLUMNS).rstrip(), HEAD))
        for r, x in enumerate(rows):
            if r == j.culprit:
                body.append((" " + fmt(x) + "  " + MARK, CULPRIT))
            else:
                body.append((" " + fmt(x).rstrip(), PLAIN))
        for r in range(j.size):
            v = j.row(r)
            if v and v.get("error") and v.get("reachable") is not False:
                body.append((f" rank {r}: {v['error']}", PROBLEM))
        if j.culprit is not None:
            body.append((f" straggler: {j.why}", WHY))
        body.append(("", PLAIN))
    return body, [(f"! {p}", PROBLEM) for p in snap.problems]


def plain(body: list[Line], foot: list[Line]) -> str:
    lines = [t for t, _ in body]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines + [t for t, _ in foot]) + "\n"


# The terminal.

class Feed(threading.Thread):
    """Asks the processes every interval while not paused; the newest
    snapshot and a counter the screen watches."""

    def __init__(self, directory: Path | None, connect: tuple[str, int] | None, interval: float):
        super().__init__(name="gocl-top-feed", daemon=True)
        self.directory, self.connect, self.interval = directory, connect, interval
        self.snapshot: Snapshot | None = None
        self.version = 0
        self.paused = False
        self.done = threading.Event()

    def run(self) -> None:
        nvml = Nvml()
        try:
            while not self.done.is_set():
                t = time.monotonic()
                if not self.paused:
                    snap = take(self.directory, self.connect, nvml)
                    if not self.paused:  # p pressed while asking: keep the screen as it was
                        self.snapshot = snap
                        self.version += 1
                self.done.wait(max(0.05, self.interval - (time.monotonic() - t)))
        finally:
            nvml.close()


def _styles() -> dict[int, int]:
    st = {PLAIN: curses.A_NORMAL, TITLE: curses.A_BOLD, HEAD: curses.A_UNDERLINE,
          CULPRIT: curses.A_REVERSE | curses.A_BOLD, WHY: curses.A_BOLD, PROBLEM: curses.A_NORMAL, DIM: curses.A_DIM, GPU: curses.A_NORMAL}
    try:
        if curses.has_colors():
            curses.start_color()
            try:
                curses.use_default_colors()
                bg = -1
            except curses.error:
                bg = curses.COLOR_BLACK
            for n, fg in ((1, curses.COLOR_RED), (2, curses.COLOR_YELLOW), (3, curses.COLOR_CYAN)):
                curses.init_pair(n, fg, bg)
            st[CULPRIT] |= curses.color_pair(1)  # reverse: red background
            st[WHY] |= curses.color_pair(1)
            st[PROBLEM] |= curses.color_pair(2)
            st[GPU] |= curses.color_pair(3)
    except curses.error:
        pass
    return st


def _wrap(lines: list[Line], w: int) -> list[Line]:
    """Sentences (the why line, problems) folded to the width; tables are cut instead."""
    out: list[Line] = []
    for text, style in lines:
        if style in (WHY, PROBLEM, DIM) and len(text) > w - 1:
            out += [(t, style) for t in textwrap.wrap(text, w - 1, subsequent_indent="   ")]
        else:
            out.append((text, style))
    return out


class Screen:
    def __init__(self, win, feed: Feed, interval: float, ascii_only: bool):
        self.win, self.feed, self.interval, self.ascii_only = win, feed, interval, ascii_only
        self.styles = _styles()
        self.scroll = 0
        self.host = socket.gethostname()

    def put(self, y: int, x: int, text: str, attr: int, w: int) -> None:
        if self.ascii_only:
            text = text.encode("ascii", "replace").decode()
        text = "".join(c if c.isprintable() else " " for c in text)
        try:
            self.win.addnstr(y, x, text, max(0, w - x), attr)
        except curses.error:
            pass  # the bottom-right cell: written, then curses complains

    def draw(self) -> None:
        win = self.win
        h, w = win.getmaxyx()
        win.erase()
        if h < MIN_H or w < MIN_W:
            msg = f"terminal too small ({w}x{h}): gocl top needs {MIN_W}x{MIN_H}"
            for i in range(0, min(len(msg), w * h), max(w, 1)):
                self.put(i // max(w, 1), 0, msg[i:i + w], curses.A_BOLD, w)
            win.refresh()
            return
        body, foot = frame(self.feed.snapshot, interval=self.interval, paused=self.feed.paused, host=self.host)
        body, foot = body[:1] + _wrap(body[1:], w), _wrap(foot, w)
        foot = foot[-max(1, h // 3):] if foot else []
        room = h - len(foot) - 1  # below the header line
        rest = body[1:]
        self.scroll = max(0, min(self.scroll, len(rest) - room))
        shown = rest[self.scroll:self.scroll + room]
        hidden = len(rest) - self.scroll - len(shown)
        if hidden > 0 and shown:
            shown[-1] = (f"... {hidden + 1} more lines (arrows, PgUp/PgDn scroll)", DIM)
        self.put(0, 0, body[0][0].ljust(w), self.styles[TITLE] | curses.A_REVERSE, w)
        for i, (text, style) in enumerate(shown, start=1):
            self.put(i, 0, text.ljust(w) if style == CULPRIT else text, self.styles[style], w)
        for i, (text, style) in enumerate(foot):
            self.put(h - len(foot) + i, 0, text, self.styles[style], w)
        win.refresh()

    def loop(self) -> int:
        win = self.win
        try:
            curses.curs_set(0)
        except curses.error:
            pass
        win.keypad(True)
        win.timeout(100)
        shown, dirty = -1, True
        while True:
            if dirty or self.feed.version != shown:
                shown = self.feed.version
                self.draw()
                dirty = False
            ch = win.getch()
            if ch == -1:
                continue
            dirty = True
            h = win.getmaxyx()[0]
            if ch in (ord("q"), ord("Q")):
                return 0
            if ch in (ord("p"), ord("P"), ord(" ")):
                self.feed.paused = not self.feed.paused
            elif ch == curses.KEY_RESIZE:
                curses.update_lines_cols()
            elif ch in (curses.KEY_DOWN, ord("j")):
                self.scroll += 1
            elif ch in (curses.KEY_UP, ord("k")):
                self.scroll = max(0, self.scroll - 1)
            elif ch == curses.KEY_NPAGE:
                self.scroll += max(1, h - 3)
            elif ch == curses.KEY_PPAGE:
                self.scroll = max(0, self.scroll - max(1, h - 3))
            elif ch == curses.KEY_HOME:
                self.scroll = 0


def main(interval: float = 1.0, once: bool = False, directory: str | None = None, connect: str | None = None) -> int:
    try:
        target = status.address(connect)
    except ValueError as e:
        print(f"gocl top: {e}")
        return 2
    if not interval > 0:
        print(f"gocl top: --interval {interval:g}: give a positive number of seconds")
        return 2
    d = Path(directory) if directory else None
    if once or not (sys.stdout.isatty() and sys.stdin.isatty()):
        nvml = Nvml()
        try:
            snap = take(d, target, nvml)
        finally:
            nvml.close()
        print(plain(*frame(snap, interval=interval, paused=False, keys=False)), end="")
        return 0 if snap.answered or not snap.problems else 1
    locale.setlocale(locale.LC_ALL, "")
    ascii_only = "utf" not in (locale.getpreferredencoding(False) or "").lower()
    feed = Feed(d, target, interval)
    feed.start()
    try:
        return curses.wrapper(lambda win: Screen(win, feed, interval, ascii_only).loop())
    except KeyboardInterrupt:
        return 0
    except curses.error as e:
        print(f"gocl top: the terminal refused curses ({e}); try gocl top --once or gocl status")
        return 1
    finally:
        feed.done.set()
