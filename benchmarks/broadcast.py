"""Voice broadcast: what an announcement costs with 1, 10 and 50 subscribers, and how
close together the subscribers hear it, on one instance and across two (Redis bus).

For each number of subscribers N (real WebSocket clients, 24 kHz pcm16 in 20 ms frames,
as the kiosk page asks), announcements are published over HTTP one at a time and the
CPU time of the rtts processes (server + inference process, from psutil) is read
before and after each; the same N clients then each `speak` the same text themselves,
at once, which is what N kiosks cost without channels. First-audio spread is the time
between the first and the last subscriber receiving the announcement's first audio
frame (on this benchmark's clock). The phrase cache is off, so every text is
synthesized.

    python benchmarks/broadcast.py                 # prints the tables
    python benchmarks/broadcast.py --write         # and puts them into docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import psutil
import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import PIPER, ServerProcess, cpu_times, probe_ms, steal_share, write_block  # noqa: E402

from tests.conftest import RedisServer  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
TOKEN = "bench-publish"
CHANNEL = "bench"
LEVELS = (1, 10, 50)


def text(k: int) -> str:
    return f"Flight {100 + k} to Oslo is now boarding at gate {k % 30 + 1}. Please have your boarding pass ready."


def cpu_s(procs: list[ServerProcess]) -> float:
    """CPU seconds used so far by the rtts processes and their inference processes."""
    total = 0.0
    for server in procs:
        for p in [server.ps, *server.ps.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
    return total


@dataclass
class Subscriber:
    ws: websockets.ClientConnection
    first: dict[str, float] = field(default_factory=dict)  # utterance id -> first audio frame
    ended: dict[str, asyncio.Event] = field(default_factory=dict)

    def event(self, utt: str) -> asyncio.Event:
        return self.ended.setdefault(utt, asyncio.Event())

    async def run(self) -> None:
        async for data in self.ws:
            msg = msgpack.unpackb(data)
            kind, utt = msg["type"], msg.get("id")
            if kind == "audio" and utt not in self.first:
                self.first[utt] = time.perf_counter()
            elif kind == "end":
                self.event(utt).set()


async def subscribe(url: str, subscribe_too: bool = True) -> Subscriber:
    ws = await websockets.connect(url, compression=None, max_size=None, open_timeout=60)
    assert msgpack.unpackb(await ws.recv())["type"] == "ready"
    if subscribe_too:
        await ws.send(msgpack.packb({"type": "subscribe", "channel": CHANNEL}))
        assert msgpack.unpackb(await ws.recv())["type"] == "subscribed"
    sub = Subscriber(ws)
    sub.task = asyncio.create_task(sub.run())  # type: ignore[attr-defined]
    return sub


def publish(server: ServerProcess, words: str) -> str:
    body = json.dumps({"channel": CHANNEL, "text": words, "voice": PIPER, "lang": "en"}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/announce", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())["id"]


def spread(subs: list[Subscriber], ann: str) -> float:
    firsts = [s.first[ann] for s in subs]
    return max(firsts) - min(firsts)


async def announce_round(publisher: ServerProcess, everyone: list[ServerProcess], subs: list[Subscriber],
                         k: int) -> tuple[float, str, float]:
    """(CPU seconds, the announcement's id, publish to the last subscriber's first audio, s)."""
    before = cpu_s(everyone)
    sent = time.perf_counter()
    ann = await asyncio.to_thread(publish, publisher, text(k))
    await asyncio.gather(*(s.event(ann).wait() for s in subs))
    await asyncio.sleep(0.3)  # the inference process's last accounting
    return cpu_s(everyone) - before, ann, max(s.first[ann] for s in subs) - sent


async def speak_round(everyone: list[ServerProcess], subs: list[Subscriber], k: int) -> float:
    """Every client speaks the same text itself: CPU seconds for all of them."""
    before = cpu_s(everyone)
    utt = f"own{k}"
    await asyncio.gather(*(s.ws.send(msgpack.packb({"type": "speak", "id": utt, "text": text(k), "voice": PIPER,
                                                     "lang": "en"})) for s in subs))
    await asyncio.gather(*(s.event(utt).wait() for s in subs))
    await asyncio.sleep(0.3)
    return cpu_s(everyone) - before


async def one_instance(server: ServerProcess, rounds: int, own_rounds: int) -> list[dict]:
    rows = []
    subs: list[Subscriber] = []
    k = 0
    await announce_round(server, [server], [await subscribe(server.url)], 999)  # warm up (model, first runs)
    for n in LEVELS:
        while len(subs) < n:
            subs.append(await subscribe(server.url))
        cpu, spreads, last = [], [], []
        for _ in range(rounds):
            k += 1
            c, ann, l = await announce_round(server, [server], subs, k)
            cpu.append(c), spreads.append(spread(subs, ann)), last.append(l)
        own = []
        for _ in range(own_rounds):
            k += 1
            own.append(await speak_round([server], subs, k))
        rows.append({"n": n, "cpu": statistics.median(cpu), "spread": statistics.median(spreads),
                     "spread_max": max(spreads), "last": statistics.median(last), "own": statistics.median(own)})
    for s in subs:
        await s.ws.close()
    return rows


async def two_instances(a: ServerProcess, b: ServerProcess, rounds: int) -> list[dict]:
    rows = []
    k = 500
    warm = [await subscribe(a.url), await subscribe(b.url)]
    await announce_round(a, [a, b], warm, k)
    for n in (10, 50):
        subs_a = [await subscribe(a.url) for _ in range(n // 2)]
        subs_b = [await subscribe(b.url) for _ in range(n - n // 2)]
        cpu, spreads, within, last = [], [], [], []
        for _ in range(rounds):
            k += 1
            c, ann, l = await announce_round(a, [a, b], subs_a + subs_b, k)
            within.append(max(spread(subs_a, ann), spread(subs_b, ann)))
            cpu.append(c), spreads.append(spread(subs_a + subs_b, ann)), last.append(l)
        rows.append({"n": n, "cpu": statistics.median(cpu), "spread": statistics.median(spreads),
                     "within": statistics.median(within), "last": statistics.median(last)})
        for s in subs_a + subs_b:
            await s.ws.close()
    for s in warm:
        await s.ws.close()
    return rows


def table(one: list[dict], two: list[dict], machine: dict, command: str) -> str:
    lines = [
        f"Measured {machine['when']} on {machine['cpus']} CPUs ({machine['cpu']}); host probe "
        f"{machine['probe_before']:.0f} ms before, {machine['probe_after']:.0f} ms after; CPU stolen by other "
        f"guests {machine['steal']:.0%}. Other helpers' test runs shared these 2 cores: compare rows "
        "within this run, not with other runs.",
        "",
        f"Command: `{command}`. Piper joe, a two-sentence announcement (~5 s of audio), subscribers at 24 kHz "
        "pcm16 in 20 ms frames, phrase cache off; medians over the rounds.",
        "",
        "**One instance.** CPU: the rtts server and its inference process, per announcement. "
        "*Without channels*: the same N clients each `speak` the same text (N syntheses).",
        "",
        "| subscribers | CPU per announcement | without channels | first-audio spread (median / max) "
        "| publish → last subscriber's first audio |",
        "|---|---|---|---|---|",
    ]
    for r in one:
        lines.append(f"| {r['n']} | {r['cpu'] * 1000:.0f} ms | {r['own'] * 1000:.0f} ms | "
                     f"{r['spread'] * 1000:.1f} ms / {r['spread_max'] * 1000:.1f} ms | {r['last'] * 1000:.0f} ms |")
    lines += [
        "",
        "**Two instances, one Redis** (`--bus`): subscribers split evenly, the announcement posted to "
        "instance A; each instance synthesizes it once. CPU is both instances together; both run on "
        "the same 2 cores, so they also compete with each other.",
        "",
        "| subscribers | CPU per announcement (A + B) | first-audio spread, all | within one instance "
        "| publish → last subscriber's first audio |",
        "|---|---|---|---|---|",
    ]
    for r in two:
        lines.append(f"| {r['n']} | {r['cpu'] * 1000:.0f} ms | {r['spread'] * 1000:.1f} ms | "
                     f"{r['within'] * 1000:.1f} ms | {r['last'] * 1000:.0f} ms |")
    return "\n".join(lines)


async def measure(args: argparse.Namespace, workdir: Path) -> tuple[list[dict], list[dict]]:
    common = ("--publish-token", TOKEN, "--max-connections", "256", "--max-connections-per-ip", "256",
              "--preload", "--default-voice", PIPER)
    server = ServerProcess(0, workdir / "one.log", *common)
    try:
        one = await one_instance(server, args.rounds, args.own_rounds)
    finally:
        server.stop()
    (workdir / "redis").mkdir()
    with RedisServer(workdir / "redis") as redis:
        a = ServerProcess(0, workdir / "a.log", *common, "--bus", redis.url)
        b = ServerProcess(0, workdir / "b.log", *common, "--bus", redis.url)
        try:
            two = await two_instances(a, b, args.rounds)
        finally:
            a.stop(), b.stop()
    return one, two


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="announcements per number of subscribers")
    parser.add_argument("--own-rounds", type=int, default=2, help="rounds of every client speaking it itself")
    parser.add_argument("--write", action="store_true", help="put the tables into docs/benchmarks.md")
    args = parser.parse_args()
    command = "python benchmarks/broadcast.py" + (f" --rounds {args.rounds}" if args.rounds != 5 else "")
    machine = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": psutil.cpu_count(),
               "cpu": platform.processor() or platform.machine(), "probe_before": probe_ms()}
    stat = cpu_times()
    with tempfile.TemporaryDirectory() as tmp:
        one, two = asyncio.run(measure(args, Path(tmp)))
    machine["steal"] = steal_share(stat, cpu_times())
    machine["probe_after"] = probe_ms()
    section = table(one, two, machine, command)
    print(section)
    if args.write:
        write_block(DOC, "broadcast", section, "Voice broadcast (channels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
