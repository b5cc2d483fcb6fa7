"""Kiosks in step (issue 24): how far apart kiosk pages hear one announcement, on one
instance and across two (Redis bus, nginx), with and without network delay, and what
playing in step costs (publish -> heard, the lead).

Each kiosk is a page of Debian's headless Chromium on `/kiosk?channel=hall`, loaded
through a delaying TCP relay of its own (tests/netdelay.py: its page, WebSocket and
pings take that link's delay). The pages say when each sample reached their output, on
the one clock every page of this host shares (tests/spread.py): a page in step from its
placed rows, a `sync=0` page (today's playback, the baseline) from its worklet's `start`
frame and its statuses, mapped to time the same way. The spread at a sample is the
time between the first and the last kiosk to hear it. Announcements are published over
HTTP to instance A with no voice named (Mandarin: Kokoro zf_xiaoxiao; English: Hibari),
the phrase cache off; each instance synthesizes each announcement itself.

    python benchmarks/sync.py                    # prints the table (~40 min)
    python benchmarks/sync.py --short            # a ~15 s announcement, one round: a quick check
    python benchmarks/sync.py --write            # and puts it into docs/benchmarks.md
    python benchmarks/sync.py --stalls 1,20,100  # on a host whose CPUs are held up now and then
                                                 # (benchmarks/stalls.py: every ~1 s, 20-100 ms; root)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from playwright.sync_api import Browser, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import ServerProcess, cpu_model, cpu_times, probe_ms, steal_share, write_block  # noqa: E402
from stalls import stalls  # noqa: E402

from tests import spread  # noqa: E402
from tests.conftest import Client, RedisServer  # noqa: E402
from tests.spread import Kiosk  # noqa: E402
from tests.system.test_browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.system.test_nginx import nginx_in_front  # noqa: E402
from tests.texts import STATION_EN, STATION_EN_SHORT, STATION_ZH, STATION_ZH_SHORT  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
TOKEN = "bench-publish"
CHANNEL = "hall"
TEXTS = {"zh": STATION_ZH, "en": STATION_EN}
SHORT_TEXTS = {"zh": STATION_ZH_SHORT, "en": STATION_EN_SHORT}


@dataclass(frozen=True)
class Cell:
    setup: str  # "one" | "two"
    delayed: bool  # one-way 0-100 ms over the kiosks, ± 20 ms; else none
    lang: str
    sync: bool = True

    def links(self, n: int) -> list[tuple[float, float]]:
        if not self.delayed:
            return [(0.0, 0.0)] * n
        return [(100.0 * i / max(1, n - 1), 20.0) for i in range(n)]


def grid() -> list[Cell]:
    cells = [Cell(setup, delayed, lang)
             for setup in ("one", "two") for delayed in (False, True) for lang in ("zh", "en")]
    # The baseline: today's playback (sync=0), measured the same way, on the hardest links.
    cells += [Cell(setup, True, "zh", sync=False) for setup in ("one", "two")]
    return cells


@dataclass
class Round:
    spread: spread.Spread
    heard_s: list[float]  # publish -> first sample heard, per kiosk
    clock_ms: float | None  # the worst |page's shared-clock mapping - host clock| over the rows
    late_ms: float | None  # the most any kiosk dropped because it came after its time
    soft_per_s: float | None  # soft corrections (dropped + repeated samples) per second, per kiosk
    hard: int | None  # hard syncs, all kiosks
    play_at_s: float | None  # play_at - publish
    lead_s: float | None  # rtts_sync_lead_seconds on the publishing instance, after the round
    audio_s: float
    pages: list[tuple[str, str]] = field(default_factory=list)  # per kiosk, for the log


@dataclass
class Result:
    cell: Cell
    rounds: list[Round] = field(default_factory=list)


def publish(port: int, text: str) -> tuple[str, float]:
    body = json.dumps({"channel": CHANNEL, "text": text}).encode()  # no voice: what the users send
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/announce", data=body, method="POST",
                                     headers=headers)
    sent = time.time()
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())["id"], sent


def metric(port: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return None


def counters(k: Kiosk) -> tuple[int, int]:
    got = k.page.evaluate("() => { const s = window.rtts.sync; "
                          "return [s.softDrops + s.softDups, s.hardSyncs]; }")
    return int(got[0]), int(got[1])


def k_state(kiosks: list[Kiosk], name: str, ann: str) -> object:
    page = next(k.page for k in kiosks if k.name == name)
    return page.evaluate("id => ({u: window.rtts.stats.utterances[id], conn: window.rtts.conn.state,"
                         " ready: window.rtts.conn.ready && window.rtts.conn.ready.clock})", ann)


def one_round(kiosks: list[Kiosk], cell: Cell, publish_port: int, text: str,
              at_s: tuple[float, ...]) -> Round:
    before = [counters(k) for k in kiosks] if cell.sync else []
    ann, sent = publish(publish_port, text)
    for k in kiosks:
        k.wait_played(ann, 300)
    reports = [k.report(ann) for k in kiosks]
    want = "placed" if cell.sync else "recorder"
    for r in reports:
        if r.source != want:
            brief = {x: v for x, v in r.raw.items() if x not in ("rows", "recorder")}
            raise RuntimeError(f"{r.name}: measured from {r.source}, not {want}; the page did not play as "
                               f"asked: {brief}, {k_state(kiosks, r.name, ann)}")
    s = spread.spread(reports, at_s=at_s)
    audio_s = s.span_s
    heard = [r.heard(r.first_pos) - sent for r in reports]
    pages = [(r.name, f"first {r.first_pos / r.rate:.2f} s, last {r.last_pos / r.rate:.2f} s, heard "
              f"{r.heard(r.first_pos) - sent:.3f} s after publish, lateMs {r.raw['lateMs']}, "
              f"clock {r.raw['clock']}, underruns {r.raw['underruns']}") for r in reports]
    if not cell.sync:
        return Round(s, heard, None, None, None, None, None, None, audio_s, pages)
    after = [counters(k) for k in kiosks]
    soft = statistics.mean((a[0] - b[0]) / audio_s for a, b in zip(after, before))
    hard = sum(a[1] - b[1] for a, b in zip(after, before))
    clock = max(max(abs(e) for e in r.clock_errors_ms()) for r in reports)
    late = max(r.raw["lateMs"] or 0.0 for r in reports)
    play_at = reports[0].raw["playAt"]
    lead = metric(publish_port, "rtts_sync_lead_seconds")
    return Round(s, heard, clock, late, soft, hard, play_at - sent, lead, audio_s, pages)


def run_cell(browser: Browser, cell: Cell, ports: tuple[int, int], front: int,
             args: argparse.Namespace) -> Result:
    """``ports``: (the instance announcements are published to, the other or the same);
    ``front``: where the kiosks connect (the instance, or nginx)."""
    texts = SHORT_TEXTS if args.short else TEXTS
    at_s = (10.0,) if args.short else (60.0,)
    result = Result(cell)
    with ExitStack() as stack:
        kiosks = []
        for i, link in enumerate(cell.links(args.kiosks)):
            params = {} if cell.sync else {"sync": 0}
            kiosks.append(Kiosk(stack, browser, front, link, seed=i, channel=CHANNEL, **params))
            kiosks[-1].wait_ready(settled=False)  # one at a time: nginx's least_conn then spreads them evenly
        for k in kiosks:
            k.wait_settled()  # their clocks settle together
        for _ in range(args.rounds):
            result.rounds.append(one_round(kiosks, cell, ports[0], texts[cell.lang], at_s))
            last = result.rounds[-1]
            print(f"  {describe(cell)}: {last.spread.line()}", flush=True)
            for name, line in last.pages:
                print(f"    {name}: {line}", flush=True)
            time.sleep(1)
        errors = [e for k in kiosks for e in k.errors]
        if errors:
            raise RuntimeError(f"page errors: {errors[:5]}")
    return result


def warm(port: int) -> None:
    """Loads both voices (a first announcement would otherwise time a cold model load)."""
    with Client(f"ws://127.0.0.1:{port}/ws") as c:
        c.recv()
        for i, text in enumerate(("你好。", "Hello.")):
            c.send(type="speak", id=f"w{i}", text=text)
            c.utterance(f"w{i}", timeout=120)


def measure(args: argparse.Namespace, workdir: Path) -> list[Result]:
    common = ("--publish-token", TOKEN, "--max-connections", "256", "--max-connections-per-ip", "256",
              "--preload", *(("--sync-lead", str(args.sync_lead)) if args.sync_lead is not None else ()))
    cells = [c for c in grid() if c.setup in args.setups and (args.only is None or describe(c) == args.only)]
    results: list[Result] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *spread.UNTHROTTLED])
        try:
            if any(c.setup == "one" for c in cells):
                server = ServerProcess(0, workdir / "one.log", *common)
                try:
                    warm(server.port)
                    for cell in (c for c in cells if c.setup == "one"):
                        results.append(run_cell(browser, cell, (server.port, server.port), server.port, args))
                finally:
                    server.stop()
            if any(c.setup == "two" for c in cells):
                (workdir / "redis").mkdir()
                with RedisServer(workdir / "redis") as redis:
                    two = (*common, "--bus", redis.url, "--shared-clock", "bus", "--trusted-proxies", "127.0.0.1")
                    a = ServerProcess(0, workdir / "a.log", *two)
                    b = ServerProcess(0, workdir / "b.log", *two)
                    try:
                        warm(a.port), warm(b.port)
                        with nginx_in_front(workdir / "nginx", a.port, b.port) as url:
                            front = int(url.split(":")[2].split("/")[0])
                            for cell in (c for c in cells if c.setup == "two"):
                                results.append(run_cell(browser, cell, (a.port, b.port), front, args))
                    finally:
                        a.stop(), b.stop()
        finally:
            browser.close()
    return results


def describe(cell: Cell) -> str:
    setup = "one instance" if cell.setup == "one" else "two + Redis + nginx"
    links = "0–100 ms ± 20 ms" if cell.delayed else "none"
    return f"{setup}, {links}, {cell.lang}" + ("" if cell.sync else ", **sync=0**")


def ms(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} / {max(values):.1f}"


def row(result: Result, at: float) -> str:
    rs = result.rounds
    sp = [r.spread for r in rs]
    at_values = [s.at_ms[at] for s in sp if at in s.at_ms]
    heard = [h for r in rs for h in r.heard_s]
    cells = [
        describe(result.cell),
        ms([s.start_ms for s in sp]),
        ms(at_values) if at_values else "—",
        f"{statistics.median([s.p95_ms for s in sp]):.1f} / {max(s.max_ms for s in sp):.1f}",
    ]
    if result.cell.sync:
        cells += [
            f"{max(r.clock_ms for r in rs if r.clock_ms is not None):.1f} ms",
            f"{max(r.late_ms or 0.0 for r in rs):.0f} ms",
            f"{statistics.mean(r.soft_per_s or 0.0 for r in rs):.1f}",
            str(sum(r.hard or 0 for r in rs)),
        ]
    else:
        cells += ["—"] * 4
    cells.append(f"{statistics.median(heard) * 1000:.0f} / {max(heard) * 1000:.0f} ms")
    leads = [r.lead_s for r in rs if r.lead_s is not None]
    play_at = [r.play_at_s for r in rs if r.play_at_s is not None]
    cells.append(f"{statistics.median(leads):.2f} s ({statistics.median(play_at):.2f} s)" if leads else "—")
    return "| " + " | ".join(cells) + " |"


def table(results: list[Result], machine: dict, command: str, args: argparse.Namespace) -> str:
    at = 10.0 if args.short else 60.0
    audio = statistics.median(r.audio_s for res in results for r in res.rounds)
    lines = [
        f"Measured {machine['when']} on {machine['cpus']} CPUs ({machine['cpu']}); host probe "
        f"{machine['probe_before']:.0f} ms before, {machine['probe_after']:.0f} ms after; CPU stolen by "
        f"other guests {machine['steal']:.0%}. The kiosks' Chromium, the relays and the rtts instances "
        "all share these cores." + (
            f" Every core was held up at random moments (benchmarks/stalls.py: every ~{args.stalls[0]:g} s "
            f"on average, {args.stalls[1]:g}–{args.stalls[2]:g} ms at real-time priority), as a "
            "busy VM host's steal does." if args.stalls else ""),
        "",
        f"Command: `{command}`. {args.kiosks} kiosks, {args.rounds} round(s) per row of a ~{audio:.0f} s "
        "announcement published to instance A with no voice named (Mandarin: Kokoro zf_xiaoxiao; "
        "English: Hibari heart), phrase cache off. Links: each kiosk's own relay; *0–100 ms* spreads "
        "the one-way delays evenly over the kiosks, each ± 20 ms uniform, in both directions. Two "
        "instances: both `--shared-clock bus`, kiosks spread over them by nginx.",
        "",
        "Spreads in ms, median / max over the rounds; *p95 / max* over every 20 ms of the announcement. "
        "*Clock*: the worst distance between a page's shared-clock mapping and the host's clock. "
        "*Late*: the most audio one kiosk dropped because it came after its time (a late start, or "
        "rejoining at position after an underrun). *Soft/s*: samples dropped or repeated per second "
        "per kiosk; *hard*: hard syncs, all kiosks. *Publish → heard*: to the first sample at each "
        "kiosk. *Lead*: `rtts_sync_lead_seconds` after the round (and play_at − publish).",
        "",
        f"| setup, links, text | spread at start | at {at:.0f} s | p95 / max | clock | late | soft/s | hard "
        "| publish → heard | lead |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [row(r, at) for r in results]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="announcements per row")
    parser.add_argument("--kiosks", type=int, default=6, help="kiosk pages per row")
    parser.add_argument("--short", action="store_true",
                        help="a ~15 s announcement, one round (unless --rounds)")
    parser.add_argument("--setups", default="one,two",
                        help="which: one (instance), two (+ Redis + nginx), or both")
    parser.add_argument("--only", help="one row, named as in the table, e.g. 'one instance, none, zh'")
    parser.add_argument("--sync-lead", type=float, help="the instances' --sync-lead (default: learnt)")
    parser.add_argument("--workdir", help="keep the servers' logs here (default: a temporary folder)")
    parser.add_argument("--stalls", help="EVERY_S,LO_MS,HI_MS: hold every core up now and then (benchmarks/stalls.py)")
    parser.add_argument("--write", action="store_true", help="put the table into docs/benchmarks.md")
    args = parser.parse_args()
    args.setups = args.setups.split(",")
    if args.stalls:
        args.stalls = tuple(float(x) for x in args.stalls.split(","))
    if args.short and "--rounds" not in sys.argv:
        args.rounds = 1
    command = "python benchmarks/sync.py" + "".join(
        f" {flag}" for flag, on in ((f"--rounds {args.rounds}", args.rounds != 3 and not args.short),
                                    (f"--kiosks {args.kiosks}", args.kiosks != 6), ("--short", args.short),
                                    (f"--only '{args.only}'", args.only is not None),
                                    (f"--sync-lead {args.sync_lead}", args.sync_lead is not None),
                                    ("--stalls " + ",".join(f"{x:g}" for x in args.stalls or ()), args.stalls is not None)) if on)
    machine = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": psutil.cpu_count(),
               "cpu": cpu_model(), "probe_before": probe_ms()}
    print(f"host: {machine['cpu']}; host probe {machine['probe_before']:.0f} ms before", flush=True)
    stat = cpu_times()
    with ExitStack() as stack:
        if args.stalls:
            stack.enter_context(stalls(*args.stalls))
        if args.workdir:
            Path(args.workdir).mkdir(parents=True, exist_ok=True)
            results = measure(args, Path(args.workdir))
        else:
            results = measure(args, Path(stack.enter_context(tempfile.TemporaryDirectory())))
    machine["steal"] = steal_share(stat, cpu_times())
    machine["probe_after"] = probe_ms()
    section = table(results, machine, command, args)
    print(section)
    if args.write:
        write_block(DOC, "sync", section, "Kiosks in step (issue 24)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
