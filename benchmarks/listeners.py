"""Concurrent listeners, each playing from its first frame: how many streams a box carries without a gap.

    python3 benchmarks/listeners.py [--paths zh,ja,en,piper,hibari,mixed] [--n 1,2,3,4,6]
        [--repeats 3] [--before DIR] [--generators teacher,student] [--busy-cores 1] [--cpu-quota 0.6] [--no-write]
    python3 benchmarks/listeners.py --paths zh-append,zh-tts,zh-openai,zh-wyoming --no-write
        (the Mandarin announcement by append, GET /tts, the OpenAI API and Wyoming)

Issue 32's benchmark. For each path (Chinese text with no voice named first, as users send
it) and each N, N clients connect, all send the same announcement at once and each plays
it in real time from its own first frame (``latency.Stream``: an underrun is a frame that
arrives more than 5 ms after the audio before it ran out). A stream the server refuses
(``error busy``, with ``--admission refuse``) counts as refused, not as a gap; one it
queues says so in ``start.expected_wait_ms``. Per (path, N), over ``--repeats`` rounds:
streams that underran / admitted, total gap, first audio p50/p95, refused, queued
(``start.queued``: held back for room, or an expected wait above 0.3 s), the RTF of the admitted streams (``end.stats.rtf``) summed —
what share of the box's compute the load took — the least audio a listener still held
when a burst of frames began to come (the lowest of every stream's least, and their p5:
how near a gap the gapless went) and the largest N with no gap in any round.

``--before DIR`` measures a second checkout (e.g. ``git archive HEAD~3 | tar -x -C DIR``)
in alternation, round by round, so both builds see the same host minutes;
``--generators teacher,student`` measures this checkout once per Kokoro generator
(issue 31). ``--busy-cores K`` runs K busy loops beside the server (a busier box);
``--cpu-quota C`` holds each server's processes to C CPUs (a slower box: ``cpu_quota.py``,
root only). The host probe and CPU model are printed before and after. Phrase cache off.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import math
import multiprocessing
import statistics
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency  # noqa: E402  (ServerProcess, Stream, connect, pct, probe_ms, write_doc)
import msgpack  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EN = ("The morning train to Boston leaves from platform four at ten thirty. "
      "Passengers should have their tickets ready before boarding.")
BEGIN, END = "<!-- listeners:begin -->", "<!-- listeners:end -->"
QUEUED_S = 0.3  # an expected wait above this is a stream told it is queued

# (label, voice or None for the server's choice, text): each ~8-10 s of speech, two sentences.
PATHS = {
    "zh": ("Mandarin, no voice named", None,
           "请注意，本次列车即将到达杭州东站。下车的旅客请带好您的随身物品，从列车前进方向的右侧车门下车。"),
    "ja": ("Japanese, no voice named", None,
           "まもなく一番線に電車がまいります。危ないですから黄色い線までお下がりください。"),
    "en": ("English, Kokoro af_heart", "kokoro/af_heart", EN),
    "piper": ("English, Piper joe", "piper/en_US-joe-medium", EN),
    "hibari": ("English, no voice named (Hibari)", None, EN),
    "mixed": ("Mixed, no voice named", None, "Welcome aboard，本次列车开往北京南站，请您注意安全。The next stop is 上海虹桥站。"),
}
# The same Mandarin announcement by the other ways in (issue 32: "every path alike"), each
# read as its client reads it and played from its first audio byte: ``append`` (an LLM's
# tokens, TOKEN_CHARS characters every TOKEN_S, then ``flush``), GET /tts (a streamed WAV,
# read with http.client), the OpenAI speech API (the ``openai`` package, pcm) and Wyoming
# (the ``wyoming`` package's client, ``synthesize``).
for _key, _how in (("append", "by append (an LLM's tokens)"), ("tts", "by GET /tts"),
                   ("openai", "by the OpenAI speech API"), ("wyoming", "by Wyoming")):
    PATHS[f"zh-{_key}"] = (f"Mandarin {_how}, no voice named", None, PATHS["zh"][2])
TOKEN_CHARS, TOKEN_S = 2, 0.05  # ~40 Chinese characters a second: an LLM well ahead of the speech


@dataclass
class Listener:
    stream: latency.Stream = field(default_factory=latency.Stream)
    wait_s: float = 0.0  # start.expected_wait_ms
    expected_s: float = 0.0  # start.expected_audio_ms, else (older servers) expected_wait_ms
    told: bool = False  # a start said it (the HTTP routes and Wyoming have none)
    queued: bool = False  # start.queued: the server held it back for room (issue 32)
    refused: bool = False


async def listen(ws, text: str, voice: str | None, append: bool = False) -> Listener:  # type: ignore[no-untyped-def]
    """One listener on the WebSocket: the text as one ``speak``, or with ``append`` as an
    LLM sends its answer, a few characters at a time and then ``flush``."""

    async def feed() -> None:
        if not append:
            await ws.send(msgpack.packb({"type": "speak", "id": "u", "text": text} | ({"voice": voice} if voice else {})))
            return
        for i in range(0, len(text), TOKEN_CHARS):
            first = {"voice": voice} if voice and i == 0 else {}
            await ws.send(msgpack.packb({"type": "append", "id": "u", "text": text[i:i + TOKEN_CHARS]} | first))
            await asyncio.sleep(TOKEN_S)
        await ws.send(msgpack.packb({"type": "flush", "id": "u"}))

    got = Listener()
    got.stream.sent = time.perf_counter()
    feeding = asyncio.create_task(feed())
    try:
        while True:
            msg = msgpack.unpackb(await ws.recv())
            if msg.get("id") != "u":
                continue
            kind = msg["type"]
            if kind == "start":
                got.wait_s = (msg.get("expected_wait_ms") or 0) / 1000
                got.expected_s = (msg.get("expected_audio_ms", msg.get("expected_wait_ms")) or 0) / 1000
                got.told = True
                got.queued = msg.get("queued") is True
            elif kind == "audio":
                got.stream.frame(time.perf_counter(), len(msg["data"]) / 2 / latency.RATE)
            elif kind == "error":
                got.refused = msg["code"] == "busy"
                got.stream.reason = f"error {msg['code']}"
                if got.refused:
                    return got
            elif kind == "end":
                got.stream.stats = msg.get("stats", {})
                got.stream.reason = got.stream.reason or msg["reason"]
                return got
    finally:
        feeding.cancel()  # a refused stream takes no more text


def _pcm(got: Listener, data: bytes, held: bytearray) -> None:
    """16-bit PCM as it arrives, an odd byte held for the next read."""
    held += data
    whole = len(held) // 2 * 2
    if whole:
        got.stream.frame(time.perf_counter(), whole / 2 / latency.RATE)
        del held[:whole]


WAV_HEAD = 44  # /tts's streamed WAV: RIFF, fmt and data headers, sizes unknown (docs/protocol.md)


def listen_by_tts(port: int, text: str) -> Listener:
    """GET /tts read as it streams (a blocking client, run in a thread)."""
    got = Listener()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        got.stream.sent = time.perf_counter()
        conn.request("GET", "/tts?" + urllib.parse.urlencode({"text": text, "sample_rate": latency.RATE}))
        response = conn.getresponse()
        if response.status != 200:
            got.refused = response.status in (429, 503)
            got.stream.reason = f"HTTP {response.status}"
            return got
        header, held = WAV_HEAD, bytearray()
        while chunk := response.read1(65536):
            skip = min(header, len(chunk))  # the header, then PCM
            header -= skip
            if chunk[skip:]:
                _pcm(got, chunk[skip:], held)
        got.stream.reason = "done"
        return got
    finally:
        conn.close()


def listen_by_openai(port: int, text: str) -> Listener:
    """The OpenAI speech API with the ``openai`` package, pcm, read as it streams."""
    import openai

    got = Listener()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="-", max_retries=0, timeout=120)
    got.stream.sent = time.perf_counter()
    held = bytearray()
    try:
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="auto", input=text, response_format="pcm",  # type: ignore[arg-type]
        ) as response:
            for chunk in response.iter_bytes():
                _pcm(got, chunk, held)
    except openai.APIStatusError as e:
        got.refused = e.status_code in (429, 503)
        got.stream.reason = f"HTTP {e.status_code}"
        return got
    got.stream.reason = "done"
    return got


async def listen_by_wyoming(port: int, text: str) -> Listener:
    """Wyoming's ``synthesize`` with its own client: audio chunks played as they come."""
    from wyoming.audio import AudioChunk, AudioStop
    from wyoming.client import AsyncTcpClient
    from wyoming.error import Error
    from wyoming.tts import Synthesize

    got = Listener()
    async with AsyncTcpClient("127.0.0.1", port) as client:
        got.stream.sent = time.perf_counter()
        await client.write_event(Synthesize(text=text).event())
        while (event := await client.read_event()) is not None:
            if AudioChunk.is_type(event.type):
                chunk = AudioChunk.from_event(event)
                got.stream.frame(time.perf_counter(), len(chunk.audio) / chunk.width / chunk.rate)
            elif AudioStop.is_type(event.type):
                got.stream.reason = "done"
                return got
            elif Error.is_type(event.type):
                got.stream.reason = f"error {Error.from_event(event).code}"
                return got
    got.stream.reason = "closed"
    return got


async def round_of(server: latency.ServerProcess, key: str, n: int) -> list[Listener]:
    _, voice, text = PATHS[key]
    how = key.split("-")[1] if "-" in key else "speak"
    if how == "tts":
        return list(await asyncio.gather(*(asyncio.to_thread(listen_by_tts, server.port, text) for _ in range(n))))
    if how == "openai":
        return list(await asyncio.gather(*(asyncio.to_thread(listen_by_openai, server.port, text) for _ in range(n))))
    if how == "wyoming":
        return list(await asyncio.gather(*(listen_by_wyoming(server.wyoming_port, text) for _ in range(n))))
    sockets = [await latency.connect(server.url) for _ in range(n)]
    try:
        return list(await asyncio.gather(*(listen(ws, text, voice, how == "append") for ws in sockets)))
    finally:
        for ws in sockets:
            await ws.close()


def spin(stop) -> None:  # type: ignore[no-untyped-def]
    while not stop.is_set():
        pass


def server_underruns(server: latency.ServerProcess) -> float | None:
    """The underruns the server has counted so far (``rtts_underruns_total``: the frames a
    client playing from its first frame waited for, by what it sent); None from a build
    without the count."""
    return server.metric("rtts_underruns_total")


def server_contention(server: latency.ServerProcess) -> tuple[float, float] | None:
    """The seconds streams have waited for room on the server's inference thread so far, and
    of them the seconds the thread had nothing to run (``rtts_contended_seconds``,
    ``rtts_contended_idle_seconds``); None from a build without them."""
    waited, idle = server.metric("rtts_contended_seconds"), server.metric("rtts_contended_idle_seconds")
    return None if waited is None or idle is None else (waited, idle)


def contended(before: tuple[float, float] | None, after: tuple[float, float] | None) -> tuple[float, float] | None:
    return None if before is None or after is None else (after[0] - before[0], after[1] - before[1])


def summary(rounds: list[list[Listener]], seen: list[float | None] | None = None,
            waits: list[tuple[float, float] | None] | None = None) -> dict:
    admitted = [x for r in rounds for x in r if not x.refused]
    seen = seen or []
    waits = waits or []
    return {
        # While streams waited for room: how long, summed over the rounds, and the share of
        # it the inference thread was on work (None: a build without the count).
        "contended": None if not waits or None in waits else (
            sum(w[0] for w in waits if w is not None), sum(w[1] for w in waits if w is not None)),
        # What the server itself counted of those underruns (None: a build without the count).
        "server": None if not seen or None in seen else round(sum(x for x in seen if x is not None)),
        "n": len(rounds[0]) if rounds else 0,
        "underran": sum(1 for x in admitted if x.stream.underruns),
        "admitted": len(admitted),
        "underruns": sum(x.stream.underruns for x in admitted),
        "gap_s": sum(x.stream.gap_s for x in admitted),
        "ttfa": [x.stream.ttfa for x in admitted if x.stream.first is not None],
        # When a round's last stream was first heard, median of the rounds: how soon the box
        # got through all of them (a bound that holds streams back only reorders them if
        # this does not move).
        "last": statistics.median(max((x.stream.ttfa for x in r if not x.refused and x.stream.first is not None),
                                      default=math.nan) for r in rounds) if rounds else math.nan,
        "refused": sum(1 for r in rounds for x in r if x.refused),
        "queued": sum(1 for x in admitted if x.queued or x.wait_s > QUEUED_S),
        # Streams held back for room: the first audio their start told them, and when it came.
        "told": [x.expected_s for x in admitted if x.queued],
        "waited": [x.stream.ttfa for x in admitted if x.queued and x.stream.first is not None],
        "late": [x.stream.ttfa - x.expected_s for x in admitted if x.queued and x.stream.first is not None],
        # And the streams let in at once (their start said it too, since expected_audio_ms).
        "late_now": [x.stream.ttfa - x.expected_s for x in admitted
                     if x.told and not x.queued and x.stream.first is not None],
        # The load each round put on the box: the admitted streams' RTFs summed, median over rounds.
        "load": statistics.median(
            sum(x.stream.stats.get("rtf", 0.0) for x in r if not x.refused) for r in rounds
        ) if rounds else 0.0,
        # The least audio each stream held when a frame came: how near a gap the gapless went.
        "least": [x.stream.least_s for x in admitted if math.isfinite(x.stream.least_s)],
        # Where the lowest of them was: the audio its stream had by then, and whether it had waited for room.
        "least_at": min(((x.stream.least_s, x.stream.least_at_s, x.queued) for x in admitted),
                        default=(math.inf, 0.0, False))[1:],
        "gapless": all(x.stream.underruns == 0 for x in admitted),
        "failed": [x.stream.reason for x in admitted if x.stream.reason != "done"],
    }


def measure(servers: dict[str, latency.ServerProcess], paths: list[str], ns: list[int], repeats: int) -> dict:
    results: dict = {}
    for server in servers.values():  # every voice and front end loaded before anything is timed
        for key in paths:
            asyncio.run(round_of(server, key, 1))
    for key in paths:
        for n in ns:
            rounds: dict[str, list[list[Listener]]] = {name: [] for name in servers}
            seen: dict[str, list[float | None]] = {name: [] for name in servers}
            waits: dict[str, list[tuple[float, float] | None]] = {name: [] for name in servers}
            for _ in range(repeats):
                for name, server in servers.items():  # the builds take turns, round by round
                    before, waited = server_underruns(server), server_contention(server)
                    rounds[name].append(asyncio.run(round_of(server, key, n)))
                    after = server_underruns(server)
                    seen[name].append(None if before is None or after is None else after - before)
                    waits[name].append(contended(waited, server_contention(server)))
                    time.sleep(0.3)
            for name in servers:
                s = summary(rounds[name], seen[name], waits[name])
                results[(key, n, name)] = s
                print(f"  {name:10} {key:6} N={n}: underran {s['underran']}/{s['admitted']}"
                      f" ({s['underruns']} underruns; the server counted {s['server']}), gap {s['gap_s']:.2f} s, "
                      f"first audio p50 {latency.ms(latency.pct(s['ttfa'], 50))} p95 {latency.ms(latency.pct(s['ttfa'], 95))} "
                      f"last {latency.ms(s['last'])}, "
                      f"refused {s['refused']}, queued {s['queued']}, load {s['load']:.2f}"
                      + least(s) + busy_held(s)
                      + told(s) + told_now(s) + (f", failed {s['failed'][:2]}" if s["failed"] else ""), flush=True)
                gaps = [f"{at:.1f}+{gap:.2f}" for r in rounds[name] for x in r for at, gap in x.stream.gaps]
                if gaps:  # where each gap fell: audio heard before it + its length, seconds
                    print(f"  {'':10} gaps at {', '.join(gaps)}", flush=True)
    return results


def least(s: dict) -> str:
    """The least audio the streams held when a frame came: the lowest of them and their p5
    (below 0: a gap)."""
    if not s["least"]:
        return ""
    return (f", least in hand {min(s['least']) * 1000:.0f} ms (p5 {latency.pct(s['least'], 5) * 1000:.0f} ms; "
            f"the lowest {s['least_at'][0]:.1f} s into the audio of a stream "
            f"{'held back' if s['least_at'][1] else 'let in at once'})")


def on_work(s: dict) -> float | None:
    """While streams waited for room: the share of that time the inference thread was on
    work (a bound that holds streams back while the thread idles wastes the box); None
    where they hardly waited or the build does not count it."""
    if s["contended"] is None or s["contended"][0] < 0.05:
        return None
    waited, idle = s["contended"]
    return 1 - idle / waited


def busy_held(s: dict) -> str:
    share = on_work(s)
    if share is None:
        return ""
    return f"; while streams waited for room ({s['contended'][0]:.1f} s) the thread was on work {share:.0%} of it"


def told(s: dict) -> str:
    """The streams held back for room: the first audio they were told and when it came, p50,
    and each one's first audio less what it was told (p50 and the largest)."""
    if not s["told"] or not s["waited"]:
        return ""
    late = s["late"]
    return (f", told {statistics.median(s['told']):.1f} s / first audio {statistics.median(s['waited']):.1f} s"
            f" (heard − told p50 {statistics.median(late):+.1f} s, max {max(late, key=abs):+.1f} s)")


def told_now(s: dict) -> str:
    """The streams let in at once: each one's first audio less what its start said, p50 and
    the largest, in ms (console only: the table keeps its columns)."""
    late = s["late_now"]
    if not late:
        return ""
    return f"; let in at once: heard − told p50 {statistics.median(late) * 1000:+.0f} ms, max {max(late, key=abs) * 1000:+.0f} ms"


def report(results: dict, builds: list[str], paths: list[str], ns: list[int], command: str, probes: list[float],
           repeats: int, busy: int, cores: float | None = None) -> str:
    ms, pct = latency.ms, latency.pct
    lines = [
        f"Command: `{command}`; run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {latency.cpu_model()}; "
        f"host probe (latency.py `probe_ms`) {', '.join(f'{p:.0f}' for p in probes)} ms (before, after); "
        f"{busy} busy loop(s) beside the server"
        f"{'' if cores is None else f'; the server held to {cores:g} CPUs by a CFS quota'}. Each cell: {repeats} rounds of N clients sending the same text at "
        "once, each playing from its own first frame; streams that underran / admitted (and in brackets the "
        "underruns the server itself counted, `rtts_underruns_total`: frames sent after the audio before them "
        "ran out), the total gap, first audio "
        "p50 / p95 over every admitted stream of every round, refused and queued streams, and the load (the admitted "
        "streams' RTFs summed, median of the rounds: 1.0 is the whole of the one inference thread); for the streams "
        "held back for room, the first audio their `start` told them (`expected_audio_ms`; before it, "
        "`expected_wait_ms`) and their first audio (p50), and each one's first audio less what it was told; "
        "then the least audio a listener held when a burst of frames began to come (the lowest of the streams'); "
        "last, where streams waited for room, the share of that time the inference thread was on work "
        "(`rtts_contended_seconds`, `rtts_contended_idle_seconds`).",
        "",
        "| path | N | " + " | ".join(f"{b}: underran, gap, first audio p50 / p95, refused, queued, load, least held, thread on work while held"
                                     for b in builds) + " |",
        "|---|---|" + "---|" * len(builds),
    ]
    for key in paths:
        for n in ns:
            cells = []
            for b in builds:
                s = results[(key, n, b)]
                server = "" if s["server"] is None else f" (server {s['server']})"
                cells.append(f"{s['underran']}/{s['admitted']}{server}, {s['gap_s']:.2f} s, {ms(pct(s['ttfa'], 50))} / "
                             f"{ms(pct(s['ttfa'], 95))}, {s['refused']}, {s['queued']}, {s['load']:.2f}{told(s)}"
                             + (f", {min(s['least']) * 1000:.0f} ms held" if s["least"] else "")
                             + ("" if on_work(s) is None else f", thread on work {on_work(s):.0%} while held"))
            lines.append(f"| {PATHS[key][0]} | {n} | " + " | ".join(cells) + " |")
    lines += ["", ("Largest N with no gap in any round, at it and at every N tried below it (a larger N "
                   "that played gapless past a gap is named beside it: there admission held more streams back):"), ""]
    for b in builds:
        lines.append(f"- {b}: " + ", ".join(f"{PATHS[k][0]} {gapless_upto(ns, results, k, b)}" for k in paths))
    return "\n".join(lines) + "\n"


def gapless_upto(ns: list[int], results: dict, key: str, build: str) -> str:
    """The largest N tried with no gap there nor at any smaller N tried, and where a gap was."""
    upto, gaps = 0, []
    for n in sorted(ns):
        if not results[(key, n, build)]["gapless"]:
            gaps.append(n)
        elif not gaps:
            upto = n
    return f"{upto}" + (f" (a gap at N={', '.join(map(str, gaps))})" if gaps else "")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--paths", default="zh,ja,en,piper,hibari,mixed")
    p.add_argument("--n", default="1,2,3,4,6")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--before", type=Path, help="a checkout of the previous build, measured in alternation")
    p.add_argument("--generators", default="", help="e.g. teacher,student: this checkout once per Kokoro generator")
    p.add_argument("--busy-cores", type=int, default=0, help="busy loops beside the server (a busier box)")
    p.add_argument("--cpu-quota", type=float, default=None, metavar="CPUS",
                   help="hold each server's processes to this many CPUs (a slower box; root, cgroups)")
    p.add_argument("--server-arg", action="append", default=[], help="passed to rtts serve, e.g. --admission=refuse")
    p.add_argument("--no-write", dest="write", action="store_false")
    args = p.parse_args()
    paths, ns = args.paths.split(","), [int(n) for n in args.n.split(",")]
    builds = latency.builds(args.before, args.generators)
    work = Path(tempfile.mkdtemp(prefix="rtts-listeners-"))
    print(f"host: {latency.cpu_model()}", flush=True)
    probes = [latency.probe_ms()]
    stop = multiprocessing.Event()
    busy = [multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(args.busy_cores)]
    servers: dict[str, latency.ServerProcess] = {}
    try:
        for name, (root, extra) in builds.items():  # all up at once; only one is spoken to at a time
            latency.ROOT = root
            servers[name] = latency.ServerProcess(600, work / f"{name.replace(' ', '-')}.log", *extra,
                                                  *args.server_arg, wyoming=True, cores=args.cpu_quota)
        latency.ROOT = ROOT
        for proc in busy:
            proc.start()
        results = measure(servers, paths, ns, args.repeats)
    finally:
        stop.set()
        for proc in busy:
            proc.join(5)
        for server in servers.values():
            server.stop()
    probes.append(latency.probe_ms())
    command = "python3 benchmarks/listeners.py" + ("" if not sys.argv[1:] else " " + " ".join(sys.argv[1:]))
    section = report(results, list(builds), paths, ns, command, probes, args.repeats, args.busy_cores, args.cpu_quota)
    print("\n" + section)
    if args.write:
        latency.write_doc(section, BEGIN, END, "Listeners: streams per box without a gap (issue 32)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
