"""When kiosk pages play an announcement, and how far apart: what tests/system/test_kiosk_sync.py
and benchmarks/sync.py read from headless Chromium pages.

Every page reports, for positions of the announcement (samples on its ``pts`` timeline),
the time that sample reached the output, on one clock all pages of one host share:
``(performance.timeOrigin + perf) / 1000`` with ``perf`` the ``performance.now()`` time at
which the frame is output, from ``AudioContext.getOutputTimestamp()``. A page that plays in
step keeps them in ``window.rtts.sync.placed`` (rows ``[pos, sharedS, trueS, frame]``: the first
sample of each chunk and of each run after a correction). A page that does not (``sync=0``,
or a build from before) is measured from its worklet's own reports by ``RECORDER``: the
frame its `start` message names for the first sample, then every status of a quantum it
played whole (``pos`` samples played after the quantum that began at ``frame``), mapped to
``performance.now()`` time the same way. Between two rows a page plays on at its sample
rate, so sample ``p`` is heard at ``trueS + (p - pos) / rate`` of the last row at or
before it: a gap (an underrun, a late join) is charged where it happens.
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from tests.netdelay import DelayProxy

# A page in a tab nobody looks at must still run its timers and audio on time: what
# Chromium is started with for these pages, next to tests/system/test_browser.py's flags.
UNTHROTTLED = ["--disable-background-timer-throttling", "--disable-renderer-backgrounding",
               "--disable-backgrounding-occluded-windows"]

# Installed once the page is ready (window.rtts.player exists): from then on every `start`
# and every whole-quantum status of the worklet becomes a row [pos, null, trueS, frame] in
# window.__spread[id]. Frames map to output time as the page's own clock tick does: the
# output timestamp when the browser gives one, else currentTime plus the latencies it reports.
RECORDER = """() => {
    if (window.__spread) return;
    const p = window.rtts.player, QUANTUM = 128;
    const rows = window.__spread = {};
    const trueS = (frame) => {
        const ctx = p.ctx, sr = p.sampleRate;
        const ts = ctx.getOutputTimestamp ? ctx.getOutputTimestamp() : null;
        const perf = ts && ts.contextTime > 0 && ts.performanceTime > 0
            ? ts.performanceTime + (frame / sr - ts.contextTime) * 1000
            : performance.now()
              + (frame / sr - ctx.currentTime + (ctx.baseLatency || 0) + (ctx.outputLatency || 0)) * 1000;
        return (performance.timeOrigin + perf) / 1000;
    };
    const add = (id, pos, frame) => (rows[id] = rows[id] || []).push([pos, null, trueS(frame), frame]);
    p.addEventListener('start', (e) => add(e.detail.id, 0, e.detail.frame));
    p.addEventListener('status', (e) => {
        const s = e.detail;
        // Playing after a quantum means the whole quantum was this utterance's samples.
        if (s.playing && s.id !== null && s.pos >= QUANTUM) add(s.id, s.pos - QUANTUM, s.frame);
    });
}"""

# What a page has to say about one announcement. Rows from the page's own sync report
# when it has them; the recorder's otherwise (their positions count from the first sample
# the page received, so its firstPts is added).
READ = """id => {
    const r = window.rtts, sync = r.sync || null, u = r.utterances.get(id) || {};
    const placed = sync && sync.placed ? (sync.placed.get ? sync.placed.get(id) : sync.placed[id]) : null;
    const st = r.player.status || {};  // its counters are the page's whole life's
    const first = u.firstPts || 0;
    const own = (window.__spread && window.__spread[id]) || [];
    return {
        source: placed && placed.length ? 'placed' : 'recorder',
        rows: placed && placed.length ? placed : own.map(([p, s, t, f]) => [p + first, s, t, f]),
        recorder: own.map(([p, s, t, f]) => [p + first, s, t, f]),
        rate: r.player.sampleRate, firstPts: first, clock: sync ? sync.clock : null,
        playAt: (r.stats.utterances[id] || {}).playAt ?? null,
        late: sync ? sync.late : null, softDrops: sync ? sync.softDrops : null,
        softDups: sync ? sync.softDups : null,
        hardSyncs: sync ? sync.hardSyncs : null, lateMs: (r.stats.utterances[id] || {}).lateMs ?? null,
        underruns: st.underruns ?? null, done: Boolean(u.soundDone),
    };
}"""


@dataclass
class Report:
    """One page's account of one announcement."""

    name: str
    rows: list[list[float | None]]  # [pos, sharedS or None, trueS, frame], by pos
    rate: int
    source: str
    recorder: list[list[float | None]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def first_pos(self) -> float:
        return float(self.rows[0][0])  # type: ignore[arg-type]

    @property
    def last_pos(self) -> float:
        return float(self.rows[-1][0])  # type: ignore[arg-type]

    def heard(self, pos: float) -> float:
        """The true time sample ``pos`` was heard: the last row at or before it, moved on
        at the sample rate."""
        return heard_at(self.rows, pos, self.rate)

    def clock_errors_ms(self) -> list[float]:
        """sharedS - trueS per row: the page's shared-clock estimate against the host's
        clock (the server's shared clock is the host's on one host)."""
        return [(s - t) * 1000 for _, s, t, *_ in self.rows  # type: ignore[operator]
                if s is not None and t is not None]


def install(page: Any) -> None:
    page.evaluate(RECORDER)


def read(page: Any, ann_id: str, name: str = "") -> Report:
    got = page.evaluate(READ, ann_id)
    rows = sorted(got["rows"], key=lambda r: r[0])
    return Report(name=name, rows=rows, rate=int(got["rate"]), source=got["source"],
                  recorder=sorted(got["recorder"], key=lambda r: r[0]), raw=got)


def heard_at(rows: Sequence[Sequence[float | None]], pos: float, rate: int) -> float:
    keys = [float(r[0]) for r in rows]  # type: ignore[arg-type]
    i = bisect.bisect_right(keys, pos) - 1
    if i < 0:
        raise ValueError(f"pos {pos} is before the first row ({keys[0] if keys else None})")
    return float(rows[i][2]) + (pos - keys[i]) / rate  # type: ignore[arg-type]


def spread_at(reports: Sequence[Report], pos: float) -> float:
    """Seconds between the first and the last page to hear sample ``pos``."""
    times = [r.heard(pos) for r in reports]
    return max(times) - min(times)


@dataclass
class Spread:
    start_ms: float  # at the first sample every page played
    at_ms: dict[float, float]  # seconds into the announcement -> spread there
    end_ms: float  # over the last second every page played (the median there)
    p95_ms: float
    max_ms: float
    span_s: float  # the stretch compared: from the common first to the common last sample
    max_at_s: float  # where the max is, seconds into the announcement
    last_ms: float = 0.0  # at the last sample every page played

    def line(self) -> str:
        at = "".join(f", at {s:.0f} s {v:.1f} ms" for s, v in self.at_ms.items())
        return (f"spread at start {self.start_ms:.1f} ms{at}, at the end {self.end_ms:.1f} ms "
                f"(the last sample {self.last_ms:.1f} ms); "
                f"p95 {self.p95_ms:.1f} ms, max {self.max_ms:.1f} ms (at {self.max_at_s:.2f} s) "
                f"over {self.span_s:.1f} s")


def spread(reports: Sequence[Report], at_s: Sequence[float] = (), step_s: float = 0.02) -> Spread:
    """The spread between pages at the first sample all of them played, at ``at_s``
    seconds in (where every page got that far), at the last one, and over every
    ``step_s`` between."""
    rate = reports[0].rate
    first = max(r.first_pos for r in reports)
    last = min(r.last_pos for r in reports)
    if last < first:
        raise ValueError("the pages played no stretch in common")
    step = max(1, round(step_s * rate))
    grid = [first + k * step for k in range(int((last - first) // step) + 1)]
    at_grid = [(spread_at(reports, p), p) for p in grid]
    values = sorted(v for v, _ in at_grid)
    worst = max(at_grid)
    # The end is the last second, not its last sample alone: a page reads when a sample
    # was heard off its browser's output timestamps, and under load those step by 10-20
    # ms now and then for a moment (own_browser in tests/system/test_kiosk_sync.py): the
    # last sample alone read 12.9 ms in one full suite of four (and passed 3 of 3 alone
    # after it). A page drifting out of step stays out for the whole second.
    tail = [v for v, p in at_grid if p >= last - rate] or [values[-1]]
    return Spread(
        start_ms=spread_at(reports, first) * 1000,
        at_ms={s: spread_at(reports, s * rate) * 1000 for s in at_s if first <= s * rate <= last},
        end_ms=statistics.median(tail) * 1000,
        last_ms=spread_at(reports, last) * 1000,
        p95_ms=values[min(len(values) - 1, int(0.95 * len(values)))] * 1000,
        max_ms=values[-1] * 1000,
        span_s=(last - first) / rate,
        max_at_s=worst[1] / rate,
    )


# One page's wall clock as the reports use it, read while this process reads its own:
# pages of one host agree with each other (and with time.time()) to well under a
# millisecond, or comparing their trueS would mean nothing.
_TRUE_NOW = "() => (performance.timeOrigin + performance.now()) / 1000"


def truth_offsets_ms(pages: Sequence[Any], tries: int = 5) -> list[float]:
    """Per page: its (timeOrigin + now) less time.time() at the moment it was read, the
    best of ``tries`` readings (the shortest round trip)."""
    out = []
    for page in pages:
        best: tuple[float, float] | None = None
        for _ in range(tries):
            before = time.time()
            value = page.evaluate(_TRUE_NOW)
            after = time.time()
            if best is None or after - before < best[0]:
                best = (after - before, value - (before + after) / 2)
        assert best is not None
        out.append(best[1] * 1000)
    return out


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Kiosk:
    """A kiosk page on ``channel`` loaded through a DelayProxy of its own (so its page, its
    WebSocket and its pings all take that link's delay), its errors collected. What it
    opens is closed with ``stack``."""

    def __init__(self, stack: ExitStack, browser: Any, target_port: int, link: tuple[float, float], seed: int,
                 channel: str, **params: object) -> None:
        self.link = link
        self.channel = channel
        self.proxy = stack.enter_context(DelayProxy(target_port, *link, seed=seed))
        ctx = browser.new_context()
        stack.callback(ctx.close)
        self.page = ctx.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        self.params = {k: str(v) for k, v in params.items()}
        self.name = f"{link[0]:.0f}±{link[1]:.0f} ms" + "".join(f" {k}={v}" for k, v in self.params.items())
        self.page.goto(f"{self.proxy.url}/kiosk?{urlencode({'channel': channel, **self.params})}")

    @property
    def syncs(self) -> bool:
        return self.params.get("sync") != "0"

    def wait_ready(self, timeout_s: float = 60, settled: bool = True) -> None:
        """Subscribed, its audio open, and (when it syncs, unless ``settled`` is false: then
        wait_settled) a settled clock estimate."""
        self.page.wait_for_function(
            "ch => window.rtts && window.rtts.stats.state === 'ready' && window.rtts.player.ctx"
            " && window.rtts.channels.get(ch) != null", arg=self.channel, timeout=timeout_s * 1000)
        install(self.page)
        if settled:
            self.wait_settled(timeout_s)

    def wait_settled(self, timeout_s: float = 60) -> None:
        """A kiosk that syncs has a settled clock estimate: 40 exchanges, the burst and 8 s
        of four a second. (The estimate is as good as the fastest ways out and back it has
        seen: on a link of 66 ± 20 ms, a kiosk asked to play 2 s after it connected was
        10 ms off, then corrected by soft steps.) Kiosks are connected long before they are
        asked to play; so are these."""
        if self.syncs:
            self.page.wait_for_function("window.rtts.sync.clock && window.rtts.sync.clock.samples >= 40",
                                        timeout=timeout_s * 1000)

    def wait_played(self, ann_id: str, timeout_s: float) -> None:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            self.page.wait_for_function(
                "id => { const u = window.rtts.utterances.get(id); return u && u.soundDone; }", arg=ann_id,
                timeout=timeout_s * 1000)
        except PlaywrightTimeout:
            state = self.page.evaluate(
                "id => ({utterance: window.rtts.stats.utterances[id] || null, worklet: window.rtts.player.status,"
                " sync: {...window.rtts.sync, placed: undefined}})", ann_id)
            raise AssertionError(f"{self.name}: {ann_id} not played out in {timeout_s} s: {state}") from None

    def report(self, ann_id: str) -> Report:
        return read(self.page, ann_id, self.name)
