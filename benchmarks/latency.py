#!/usr/bin/env python3
"""Latency and throughput of a real rtts server, side by side with piper-tts and kokoro-onnx.

One command does everything (about 10 minutes on 2 cores; ``--quick`` for a smoke run)::

    python3 benchmarks/latency.py

It starts ``python3 -m rtts serve --port P --idle-unload 5 --phrase-cache-mb 0`` as a
subprocess (the phrase cache is off so that repeated texts are really synthesized) and
drives it over WebSocket with protocol v1:

* time to first audio (TTFA: ``speak`` sent -> first ``audio`` frame received), p50 and
  p95 over ``--repeats`` runs on a warm connection, for one sentence and for a
  three-sentence paragraph, for the Piper and the Kokoro voice;
* RTF (the server's compute time / audio time, from ``end.stats``);
* underruns at 1, 2, 4, 8 and 16 concurrent streams per engine: every client plays in
  real time from what it has received, starting at its first frame with no prebuffer,
  and an underrun is a frame that arrives more than 5 ms after the audio before it ran
  out. Piper streams speak the paragraph; Kokoro streams three short sentences. A level
  with underruns ends the climb for that engine;
* RSS of the server, its inference process included (psutil: the process and its
  children): with nothing loaded, with both models loaded, the peak over the whole
  run, and after the idle unload (which follows one Mandarin and Japanese utterance,
  so the front ends' dictionaries have been loaded);
* a cold connection after the unload: connect -> first Piper audio (the server runs
  with ``--default-voice`` Piper), then the same for Kokoro on a second server whose
  default voice is Kokoro (a connection preloads the default voice, and a request for
  another model would wait behind that load).

Then, with the server stopped, the peers run on the same texts and the same model
files in their own venv (``--peers-python``, default /work/peers-venv/bin/python; create
it with ``python3 -m venv /work/peers-venv && /work/peers-venv/bin/pip install
piper-tts==1.8.0 kokoro-onnx==0.6.1``): piper-tts ``PiperVoice.synthesize`` (time to
its first chunk) and kokoro-onnx ``create_stream``. The results are printed with the
ratios and the issue's targets, and written into docs/benchmarks.md, section "Latency
and throughput (issue 4)" (``--no-write`` leaves the file alone).

Mandarin and Japanese come last, from benchmarks/languages.py (``--no-languages`` skips
them): first audio with no voice named and named, RTF, concurrent Mandarin streams and
mixed sentences, with kokoro-onnx on the same texts, in their own section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import psutil
import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from cpu_quota import CpuQuota  # beside this file

from tests.ports import free_port  # one helper for the tests' and benchmarks' servers

DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- latency:begin -->", "<!-- latency:end -->"

PIPER = "piper/en_US-joe-medium"
KOKORO = "kokoro/jf_alpha"
TEXTS = {
    "sentence": "The quick brown fox jumps over the lazy dog near the river bank.",
    "paragraph": (
        "The morning train to Boston leaves from platform four at ten thirty. "
        "Passengers should have their tickets ready before boarding. "
        "Food and drinks are available in the third carriage."
    ),
}
SHORT_SENTENCES = "Your table is ready. Please follow me. Enjoy your meal."
CJK_TEXT = "你好，欢迎来到杭州。今日は東京です。"  # spoken once before the idle unload
LEVELS = (1, 2, 4, 8, 16)
RATE = 24000
UNDERRUN_TOLERANCE_S = 0.005
# Frames closer together than this came in one burst (one chunk of the server's).
BURST_S = 0.010


# ---------------------------------------------------------------- the server under test


def in_cgroup(cgroup: Path, cmd: list[str]) -> list[str]:
    """``cmd`` run inside ``cgroup``: a shell joins it, then becomes ``cmd`` (the same
    pid), so nothing of the server, its inference process included, runs outside it."""
    return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup / "cgroup.procs"), *cmd]


class ServerProcess:
    """``python3 -m rtts serve`` in a subprocess, with its RSS sampled every 20 ms; with
    ``wyoming``, its Wyoming server too (on ``wyoming_port``)."""

    quota: CpuQuota | None = None  # where its processes are held to fewer CPUs

    def __init__(
        self, idle_unload: float, log_path: Path, *extra: str, wyoming: bool = False, cores: float | None = None
    ) -> None:
        """``cores``: the server's processes held to that many CPUs (``cpu_quota``: a slower box)."""
        self.port = free_port()
        self.wyoming_port = free_port() if wyoming else 0
        cmd = [sys.executable, "-m", "rtts", "serve", "--port", str(self.port),
               "--idle-unload", str(idle_unload), "--phrase-cache-mb", "0", *extra]
        if wyoming:
            cmd += ["--wyoming-port", str(self.wyoming_port)]
        self.command = " ".join(["python3", *cmd[1:]])
        self._log = log_path.open("wb")
        if cores is not None:
            # Made before the server starts, so a box without cgroups stops here, not halfway.
            self.quota = CpuQuota(cores, f"{self.port}")
            cmd = in_cgroup(self.quota.dir, cmd)
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.proc.pid)
        self.peak = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        deadline = time.monotonic() + 60
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start; see {log_path}")
            time.sleep(0.1)
        self._sampler.start()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def http(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
            return r.read()

    def metric(self, name: str) -> float | None:
        """The value of an unlabelled sample in the server's /metrics; None where it has none
        (a build before it)."""
        for line in self.http("/metrics").decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def _healthy(self) -> bool:
        try:
            return self.http("/healthz").startswith(b"ok")
        except OSError:
            return False

    def _rss(self) -> int:
        """Bytes resident in the server and its children (the inference process)."""
        total = self.ps.memory_info().rss
        for child in self.ps.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass  # ended between the listing and the reading
        return total

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self._rss())
            except psutil.Error:
                return
            time.sleep(0.02)

    def rss_mb(self) -> float:
        return self._rss() / 2**20

    def loaded(self) -> list[str]:
        return json.loads(self.http("/readyz"))["loaded"]

    def wait_unloaded(self, timeout: float = 60) -> float:
        """Seconds until the idle unload happened."""
        start = time.monotonic()
        while self.loaded():
            if time.monotonic() - start > timeout:
                raise RuntimeError("models were not unloaded")
            time.sleep(0.2)
        return time.monotonic() - start

    def stop(self) -> None:
        self._stop.set()
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()
        if self.quota is not None:
            self.quota.close()


# ---------------------------------------------------------------- a client that plays in real time


@dataclass
class Stream:
    """What one utterance looked like from a client that plays as it receives."""

    sent: float = 0.0
    first: float | None = None
    audio_s: float = 0.0
    underruns: int = 0
    gap_s: float = 0.0
    gaps: list[tuple[float, float]] = field(default_factory=list)  # (audio heard before it, its length), seconds
    stats: dict = field(default_factory=dict)
    reason: str = ""
    # The least audio it still held when a burst of frames began to come (a chunk of the
    # server's; its first burst aside): how near a gap it went. Infinite for one burst.
    least_s: float = float("inf")
    least_at_s: float = 0.0  # the audio it had received when it held that least
    _runs_out: float = 0.0  # when the audio received so far will have been played
    _last: float = 0.0  # when the frame before came

    @property
    def ttfa(self) -> float:
        return (self.first - self.sent) if self.first is not None else float("nan")

    def frame(self, now: float, seconds: float) -> None:
        if self.first is None:
            self.first = now
            self._runs_out = now
        elif now - self._last > BURST_S and self._runs_out - now < self.least_s:
            self.least_s, self.least_at_s = self._runs_out - now, self.audio_s
        self._last = now
        if now > self._runs_out + UNDERRUN_TOLERANCE_S:
            self.underruns += 1
            self.gap_s += now - self._runs_out
            self.gaps.append((self.audio_s, now - self._runs_out))
        self._runs_out = max(self._runs_out, now) + seconds
        self.audio_s += seconds


async def connect(url: str):  # type: ignore[no-untyped-def]
    ws = await websockets.connect(url, compression=None, max_size=None, open_timeout=60)
    ready = msgpack.unpackb(await ws.recv())
    assert ready["type"] == "ready", ready
    await ws.send(msgpack.packb({"type": "hello", "format": "pcm16", "sample_rate": RATE, "frame_ms": 20}))
    assert msgpack.unpackb(await ws.recv())["type"] == "ready"
    return ws


async def speak(ws, utt_id: str, text: str, voice: str, sent: float | None = None, lang: str | None = "en") -> Stream:  # type: ignore[no-untyped-def]
    stream = Stream()
    request = {"type": "speak", "id": utt_id, "text": text, "voice": voice}
    if lang:
        request["lang"] = lang
    await ws.send(msgpack.packb(request))
    stream.sent = sent if sent is not None else time.perf_counter()
    while True:
        msg = msgpack.unpackb(await ws.recv())
        if msg.get("id") != utt_id:
            continue
        kind = msg["type"]
        if kind == "audio":
            stream.frame(time.perf_counter(), len(msg["data"]) / 2 / RATE)
        elif kind == "error":
            stream.reason = f"error {msg['code']}: {msg['message']}"
        elif kind == "end":
            stream.stats = msg.get("stats", {})
            stream.reason = stream.reason or msg["reason"]
            return stream


async def ttfa_runs(url: str, voice: str, text: str, repeats: int) -> list[Stream]:
    ws = await connect(url)
    try:
        out = []
        for i in range(repeats):
            out.append(await speak(ws, f"r{i}", text, voice))
            await asyncio.sleep(0.2)
        return out
    finally:
        await ws.close()


async def concurrent(url: str, voice: str, text: str, n: int) -> list[Stream]:
    sockets = [await connect(url) for _ in range(n)]
    try:
        return list(await asyncio.gather(*(speak(ws, "c", text, voice) for ws in sockets)))
    finally:
        for ws in sockets:
            await ws.close()


async def cjk_once(url: str) -> str:
    ws = await connect(url)
    try:
        return (await speak(ws, "cjk", CJK_TEXT, KOKORO, lang=None)).reason
    finally:
        await ws.close()


async def cold(url: str, voice: str, text: str) -> float:
    """Seconds from opening a connection to the first audio frame."""
    start = time.perf_counter()
    ws = await connect(url)
    try:
        stream = await speak(ws, "cold", text, voice, sent=start)
        return stream.ttfa
    finally:
        await ws.close()


# ---------------------------------------------------------------- peers


def run_peers(python: str, repeats: int, workdir: Path) -> dict[str, dict]:
    texts = workdir / "texts.json"
    texts.write_text(json.dumps(TEXTS))
    sys.path.insert(0, str(ROOT))
    from rtts.config import Config
    from rtts.engines.kokoro import KokoroEngine, KokoroPack
    from rtts.engines.voices import VoiceRegistry

    config = Config()  # the same model files the server used, from the same defaults
    assert config.cache_dir is not None
    registry = VoiceRegistry.discover(config.models_dir, config.cache_dir, threads=2)
    piper_model = registry.engines[registry.voices[PIPER].model].model_path  # type: ignore[attr-defined]
    kokoro = registry.engines["kokoro"]
    assert isinstance(kokoro, KokoroEngine)
    jobs = {
        "piper-tts": ["piper", "--model", str(piper_model)],
        "kokoro-onnx": ["kokoro", "--model", str(kokoro.model_path()), "--voices", str(KokoroPack.find().voices),
                        "--voice", registry.voices[KOKORO].speaker],
    }
    out = {}
    for name, args in jobs.items():
        print(f"  {name} ...", flush=True)
        cmd = [python, str(ROOT / "benchmarks" / "peers.py"), *args, "--texts", str(texts), "--repeats", str(repeats)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            raise RuntimeError(f"{name} failed")
        out[name] = json.loads(done.stdout)
    return out


# ---------------------------------------------------------------- numbers and the report


def pct(values: list[float], q: float) -> float:
    values = sorted(v for v in values if v == v)
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if q < 100 else values[-1]


def ms(seconds: float) -> str:
    return "—" if seconds != seconds else f"{seconds * 1000:.0f} ms"


def ratio(peer: float, ours: float) -> str:
    if ours != ours or peer != peer or ours <= 0:
        return "—"
    return f"{peer / ours:.1f}×"


def verdict(ok: bool | None) -> str:
    return "—" if ok is None else ("met" if ok else "**missed**")


def cpu_times() -> list[int]:
    """The machine's CPU time counters (/proc/stat: user ... steal), in ticks."""
    with open("/proc/stat", encoding="ascii") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def steal_share(before: list[int], after: list[int]) -> float:
    """Share of CPU time the hypervisor gave to other guests between two readings:
    on a shared VM it slows every timing here, ours and the peers' alike."""
    delta = [b - a for a, b in zip(before, after)]
    return delta[7] / sum(delta) if sum(delta) else 0.0


def write_block(doc: Path, name: str, section: str, heading: str) -> None:
    """Put ``section`` between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in
    ``doc`` (docs/benchmarks.md), or append it under ``heading`` the first time."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = doc.read_text()
    block = f"{begin}\n{section}\n{end}"
    if begin in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text += f"\n## {heading}\n\n" + block + "\n"
    doc.write_text(text)


def builds(before: Path | None, generators: str) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """The servers a comparing benchmark starts, by name: (checkout, extra ``rtts serve``
    arguments). This checkout, and ``before``'s beside it; or, with ``generators``
    ("teacher,student"), this checkout once per Kokoro generator, and with both, each
    checkout once per generator ("before teacher": issue 31's reference)."""
    if generators:
        roots = {"": ROOT} | ({"before ": before.resolve()} if before else {})
        return {f"{name}{g}": (root, ("--generator", g)) for name, root in roots.items() for g in generators.split(",")}
    return {"this build": (ROOT, ())} | ({"before": (before.resolve(), ())} if before else {})


def cpu_model() -> str:
    """The CPU's name and the instruction sets that change Kokoro's kernels (VNNI: its int8
    products; see rtts/engines/conv_gemm.py), printed beside every host probe: boxes that
    report the same name differ by 2x and more."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return "unknown CPU"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "unknown CPU")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    kinds = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8") if f in flags]
    return f"{name} ({', '.join(kinds) or 'no AVX2'}; {os.cpu_count()} CPUs)"


def probe_ms() -> float:
    """A fixed CPU workload (matrix products on one core), best of 3, in ms. This VM's
    host lends it more or less CPU from one minute to the next (the same build's
    timings moved by 2x within an hour), so the probe is taken before rtts is measured,
    after it and after the peers: a rise means a slower host for that part, not code."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((192, 192)).astype(np.float32)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(200):
            a = np.tanh(a @ a.T * 0.01)
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def measure(args: argparse.Namespace, workdir: Path) -> dict:
    r: dict = {"ttfa": {}, "rtf": {}, "concurrency": {}, "machine": {}}
    cpu_start = cpu_times()
    probes = [probe_ms()]
    # Piper the default voice (not the built-in default, Hibari): "both models loaded" is
    # then Piper and Kokoro, and the cold connection's first Piper audio waits for no
    # other load, as in a Piper deployment.
    server = ServerProcess(args.idle_unload, workdir / "server.log", "--default-voice", PIPER, *args.server_arg)
    r["command_server"] = server.command
    try:
        r["rss_start"] = server.rss_mb()
        print("warming up (loads both models) ...", flush=True)
        for voice in (PIPER, KOKORO):
            asyncio.run(ttfa_runs(server.url, voice, TEXTS["sentence"], 2))
        r["rss_loaded"] = server.rss_mb()
        for engine, voice in (("piper", PIPER), ("kokoro", KOKORO)):
            for name, text in TEXTS.items():
                runs = asyncio.run(ttfa_runs(server.url, voice, text, args.repeats))
                bad = [s.reason for s in runs if s.reason != "done"]
                if bad:
                    raise RuntimeError(f"{voice}: {bad[0]}")
                r["ttfa"][(engine, name)] = [s.ttfa for s in runs]
                r["rtf"].setdefault(engine, []).extend(s.stats.get("rtf", float("nan")) for s in runs)
                print(f"  {engine:6} {name:9} TTFA p50 {ms(pct(r['ttfa'][(engine, name)], 50))}"
                      f"  p95 {ms(pct(r['ttfa'][(engine, name)], 95))}", flush=True)
        for engine, voice, text in (("piper", PIPER, TEXTS["paragraph"]), ("kokoro", KOKORO, SHORT_SENTENCES)):
            for n in args.levels:
                streams = asyncio.run(concurrent(server.url, voice, text, n))
                under = [s.underruns for s in streams]
                r["concurrency"][(engine, n)] = {
                    "underruns": under,
                    "gap_s": [s.gap_s for s in streams],
                    "ttfa": [s.ttfa for s in streams],
                    "failed": sum(s.reason != "done" for s in streams),
                }
                print(f"  {engine:6} {n:2} streams: underruns/stream mean {statistics.mean(under):.2f} "
                      f"max {max(under)}, gaps {sum(s.gap_s for s in streams):.2f} s, "
                      f"TTFA p50 {ms(pct([s.ttfa for s in streams], 50))}", flush=True)
                if sum(under) or r["concurrency"][(engine, n)]["failed"]:
                    break  # more streams will only do worse
        # Mandarin and Japanese once, so that their front ends' dictionaries are in
        # the figures too (RSS after the unload included).
        reason = asyncio.run(cjk_once(server.url))
        if reason != "done":
            raise RuntimeError(f"zh/ja utterance: {reason}")
        r["rss_peak"] = server.peak / 2**20
        print("waiting for the idle unload ...", flush=True)
        r["unload_after_s"] = server.wait_unloaded()
        time.sleep(1.0)
        r["rss_idle"] = server.rss_mb()
        r["cold_piper"] = asyncio.run(cold(server.url, PIPER, TEXTS["sentence"]))
    finally:
        server.stop()
    # A connection preloads the default voice (Piper above), which a Kokoro request would
    # wait behind; a Kokoro deployment makes Kokoro the default, so measure it that way.
    server = ServerProcess(args.idle_unload, workdir / "server-kokoro.log", "--default-voice", KOKORO, *args.server_arg)
    try:
        asyncio.run(ttfa_runs(server.url, KOKORO, TEXTS["sentence"], 1))
        server.wait_unloaded()
        time.sleep(0.5)
        r["cold_kokoro"] = asyncio.run(cold(server.url, KOKORO, TEXTS["sentence"]))
        print(f"  RSS start {r['rss_start']:.0f} MB, loaded {r['rss_loaded']:.0f} MB, peak {r['rss_peak']:.0f} MB, "
              f"after unload {r['rss_idle']:.0f} MB; cold Kokoro {ms(r['cold_kokoro'])}, cold Piper "
              f"{ms(r['cold_piper'])}", flush=True)
    finally:
        server.stop()
    probes.append(probe_ms())
    cpu_rtts = cpu_times()
    if args.peers:
        print("peers ...", flush=True)
        r["peers"] = run_peers(args.peers_python, args.peer_repeats, workdir)
        probes.append(probe_ms())
    r["machine"] = {
        "cpus": len(os.sched_getaffinity(0)),
        "cpu": platform.processor() or platform.machine(),
        "load": os.getloadavg(),
        "steal": steal_share(cpu_start, cpu_times()),
        "steal_rtts": steal_share(cpu_start, cpu_rtts),
        "steal_peers": steal_share(cpu_rtts, cpu_times()) if args.peers else None,
        "probes_ms": probes,
    }
    print(f"  host probe {', '.join(f'{p:.0f}' for p in probes)} ms (before rtts, after it, after the peers)", flush=True)
    return r


def host_drift(machine: dict) -> list[str]:
    """A line on how fast the host was while rtts ran, and while the peers ran."""
    probes = machine.get("probes_ms")
    if not probes:
        return []
    line = (f"Host speed probe (`probe_ms`, a fixed CPU workload; higher is a slower host): "
            f"{probes[0]:.0f} ms before rtts, {probes[1]:.0f} ms after it")
    if len(probes) > 2:
        line += f", {probes[2]:.0f} ms after the peers"
    line += f"; CPU stolen while rtts ran {machine['steal_rtts']:.0%}"
    if machine.get("steal_peers") is not None:
        line += f", while the peers ran {machine['steal_peers']:.0%}"
    return [line + "."]


def report(r: dict, command: str) -> str:
    peers = r.get("peers", {})

    def peer_ttfa(name: str, text: str, q: float) -> float:
        runs = peers.get(name, {}).get("runs", {}).get(text, [])
        return pct([x["ttfa_s"] for x in runs], q)

    def peer_rtf(name: str) -> float:
        runs = [x for text in peers.get(name, {}).get("runs", {}).values() for x in text]
        return statistics.median(x["total_s"] / x["audio_s"] for x in runs) if runs else float("nan")

    t = r["ttfa"]
    lines = [
        f"Command: `{command}` (server: `{r['command_server']}`).",
        f"Machine: {r['machine']['cpus']} CPUs ({r['machine']['cpu']}), load average at the end "
        f"{', '.join(f'{x:.2f}' for x in r['machine']['load'])}, CPU time stolen by other guests of the host "
        f"{r['machine'].get('steal', 0):.0%}; run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        *host_drift(r["machine"]),
        "",
        "| measure | rtts | peer, same text and model | peer ÷ rtts | target | |",
        "|---|---|---|---|---|---|",
    ]
    rows = [
        ("Piper TTFA p50, one sentence", ("piper", "sentence", 50), ("piper-tts", "sentence", 50), "≤ 50 ms",
         lambda ours, peer: ours <= 0.050),
        ("Piper TTFA p95, one sentence", ("piper", "sentence", 95), ("piper-tts", "sentence", 95), "", None),
        ("Piper TTFA p50, three-sentence paragraph", ("piper", "paragraph", 50), ("piper-tts", "paragraph", 50),
         "≥ 4× better than piper-tts", lambda ours, peer: peer / ours >= 4),
        ("Piper TTFA p95, three-sentence paragraph", ("piper", "paragraph", 95), ("piper-tts", "paragraph", 95), "", None),
        ("Kokoro TTFA p50, one sentence", ("kokoro", "sentence", 50), ("kokoro-onnx", "sentence", 50), "", None),
        ("Kokoro TTFA p95, one sentence", ("kokoro", "sentence", 95), ("kokoro-onnx", "sentence", 95), "", None),
        ("Kokoro TTFA p50, three-sentence paragraph", ("kokoro", "paragraph", 50), ("kokoro-onnx", "paragraph", 50),
         "≤ 400 ms", lambda ours, peer: ours <= 0.400),
        ("Kokoro TTFA p95, three-sentence paragraph", ("kokoro", "paragraph", 95), ("kokoro-onnx", "paragraph", 95), "", None),
    ]
    for label, (engine, text, q), (peer, ptext, pq), target, check in rows:
        ours = pct(t.get((engine, text), []), q)
        theirs = peer_ttfa(peer, ptext, pq)
        ok = None
        if check is not None and ours == ours and (theirs == theirs or "piper-tts" not in target):
            ok = check(ours, theirs)
        lines.append(f"| {label} | {ms(ours)} | {peer} {ms(theirs)} | {ratio(theirs, ours)} | {target} | {verdict(ok)} |")
    for engine, peer in (("piper", "piper-tts"), ("kokoro", "kokoro-onnx")):
        ours = statistics.median(x for x in r["rtf"][engine] if x == x)
        theirs = peer_rtf(peer)
        lines.append(f"| {engine.capitalize()} RTF (median; compute ÷ audio) | {ours:.3f} | {peer} {theirs:.3f} | "
                     f"{ratio(theirs, ours)} | | |")
    limits = {}
    for engine in ("piper", "kokoro"):
        clean = [n for (e, n), c in r["concurrency"].items() if e == engine and not sum(c["underruns"]) and not c["failed"]]
        limits[engine] = max(clean) if clean else 0
    tested = {e: max(n for (x, n) in r["concurrency"] if x == e) for e in ("piper", "kokoro")}
    for engine, target, need in (("piper", "≥ 8", 8), ("kokoro", "≥ 2 (short sentences)", 2)):
        shown = f"{limits[engine]}" + (f" (all {tested[engine]} tested)" if limits[engine] == tested[engine] else "")
        lines.append(f"| concurrent {engine.capitalize()} streams with zero underruns | {shown} | | | {target} | "
                     f"{verdict(limits[engine] >= need)} |")
    peer_rss = {k: v.get("peak_rss_mb", float("nan")) for k, v in peers.items()}
    lines += [
        f"| RSS with nothing loaded | {r['rss_start']:.0f} MB | | | | |",
        f"| RSS with both models loaded | {r['rss_loaded']:.0f} MB | | | | |",
        f"| RSS peak over the run | {r['rss_peak']:.0f} MB | peak: piper-tts {peer_rss.get('piper-tts', float('nan')):.0f} MB, "
        f"kokoro-onnx {peer_rss.get('kokoro-onnx', float('nan')):.0f} MB (one model each) | | | |",
        f"| RSS after idle unload | {r['rss_idle']:.0f} MB | | | ≤ 80 MB | {verdict(r['rss_idle'] <= 80)} |",
        f"| cold connection after unload → first Kokoro audio (Kokoro the default voice) | {ms(r['cold_kokoro'])} | kokoro-onnx load "
        f"{ms(peers.get('kokoro-onnx', {}).get('load_s', float('nan')))} + first audio | | ≤ 2 s | "
        f"{verdict(r['cold_kokoro'] <= 2.0)} |",
        f"| cold connection after unload → first Piper audio (Piper the default voice) | {ms(r['cold_piper'])} | | | | |",
        "",
        "Concurrent streams: every client plays in real time from its first frame (no prebuffer); "
        f"an underrun is a frame arriving over {UNDERRUN_TOLERANCE_S * 1000:.0f} ms after the audio before it ran out. "
        f"Piper streams speak the paragraph, Kokoro streams \"{SHORT_SENTENCES}\". The climb stops at the first level "
        "with underruns.",
        "",
        "| engine | streams | underruns per stream (mean / max) | total gap | TTFA p50 / max |",
        "|---|---|---|---|---|",
    ]
    for (engine, n), c in sorted(r["concurrency"].items()):
        lines.append(f"| {engine} | {n} | {statistics.mean(c['underruns']):.2f} / {max(c['underruns'])} | "
                     f"{sum(c['gap_s']) * 1000:.0f} ms | {ms(pct(c['ttfa'], 50))} / {ms(max(c['ttfa']))} |"
                     + (f" {c['failed']} failed" if c["failed"] else ""))
    return "\n".join(lines) + "\n"


def write_doc(section: str, begin: str = BEGIN, end: str = END, heading: str = "Latency and throughput (issue 4)") -> None:
    """Put ``section`` between the ``begin`` and ``end`` markers of docs/benchmarks.md (a new
    ``heading`` at its end the first time)."""
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    block = f"{begin}\n{section}{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## {heading}\n\n" + block + "\n"
    DOC.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10, help="TTFA runs per voice and text (default 10)")
    parser.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=list(LEVELS),
                        help="concurrent streams to try, e.g. 1,2,4,8,16")
    parser.add_argument("--idle-unload", type=float, default=5.0)
    parser.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                        help="pass ARG to rtts serve, e.g. --server-arg=--first-unit-chars-piper=30 (repeatable)")
    parser.add_argument("--peers-python", default="/work/peers-venv/bin/python")
    parser.add_argument("--peer-repeats", type=int, default=3, help="runs per text for each peer (default 3)")
    parser.add_argument("--no-peers", dest="peers", action="store_false")
    parser.add_argument("--no-write", dest="write", action="store_false", help="do not touch docs/benchmarks.md")
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 repeats, levels 1,2,4, 1 peer repeat")
    parser.add_argument("--english-voices", dest="models_dir", type=Path, metavar="DIR", nargs="?",
                        const=Path(), help="then compare the English voices (benchmarks/english_voices.py), "
                                           "optionally serving from the models directory DIR")
    parser.add_argument("--no-languages", dest="languages", action="store_false",
                        help="skip the Mandarin and Japanese rows (benchmarks/languages.py, run after the above)")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.levels, args.peer_repeats = 3, [1, 2, 4], 1
    if args.peers and not Path(args.peers_python).exists():
        parser.error(f"{args.peers_python} not found: create the peers' venv (see --help) or pass --no-peers")
    command = "python3 benchmarks/latency.py" + ("" if sys.argv[1:] == [] else " " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="rtts-bench-") as tmp:
        results = measure(args, Path(tmp))
    section = report(results, command)
    print()
    print(section)
    if args.write:
        write_doc(section)
        print(f"written to {DOC.relative_to(ROOT)}")
    if args.models_dir is not None:  # Hibari, Piper joe and Kokoro af_heart side by side, after the above
        import english_voices

        models_dir = args.models_dir if args.models_dir != Path() else None
        english_voices.run(models_dir, args.server_arg, args.write, command, args.repeats)
    if args.languages:  # Mandarin and Japanese beside English, with no voice named and named
        extra = ([] if args.peers else ["--no-peers"]) + ([] if args.write else ["--no-write"])
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "languages.py"), *extra,
                        "--peers-python", args.peers_python], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
