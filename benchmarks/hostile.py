#!/usr/bin/env python3
"""What one hostile message costs everybody else, and what a long request leaves behind (issue 13).

    python3 benchmarks/hostile.py [--memory-seconds 120] [--json out.json]

Starts ``python3 -m rtts serve`` (its own port, ``--idle-unload 0``). A victim client
pings every 20 ms over its own WebSocket the whole time. Then, one after the other,
the worst single message of each kind is sent by an attacker (who reads what it gets,
for at most ``--hold`` seconds, then leaves); for each, the table gives the victim's
worst ping round trip during the attack minus its median before it (the stall), and
how much the server process's RSS grew (its peak during the attack minus its value
before; the inference process is counted apart, it holds the models).

Then the inference process's memory: for each of en, zh and ja, on a fresh server, a
request of ``max_text_chars`` (5,000) characters without punctuation (so every unit is
as long as units get, 250 characters) is spoken (for at most
``--memory-seconds``, then the client leaves and its work is cancelled) after a
warm-up sentence; the table gives the inference process's RSS when warm, its peak
during the request, and its RSS 5 s after it went idle (the run in flight when the
client left finishes first). ``RTTS_ORT_ARENA_SHRINK=0``
in the environment runs the build without arena shrinkage, for comparison.

Timings on a shared 2-core VM are noisy: the header prints the host probe of
benchmarks/latency.py and the load average, before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import msgpack
import psutil
from websockets.sync.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from latency import ServerProcess, probe_ms  # noqa: E402

SENTENCES = {lang: json.loads((ROOT / "benchmarks" / "sentences" / f"{lang}.json").read_text())[lang]
             for lang in ("en", "zh", "ja")}
VOICES = {"en": "piper/en_US-joe-medium", "zh": "kokoro/jm_kumo", "ja": "kokoro/jf_alpha"}


def max_text(lang: str, chars: int = 5000) -> str:
    pieces = [s if isinstance(s, str) else s["text"] for s in SENTENCES[lang]]
    sep = " " if lang == "en" else ""
    out = ""
    while len(out) < chars:
        for p in pieces:
            if len(out) + len(p) + 1 > chars:
                return out
            out += p + sep
    return out


def longest_units(lang: str, chars: int = 5000) -> str:
    """``max_text`` without its punctuation: every unit is as long as units get (250
    characters), the worst case for the inference process's memory."""
    text = max_text(lang, chars * 2)
    kept = "".join(ch for ch in text if ch.isalnum() or ch == " ")
    return kept[:chars]


class Victim:
    """A client that pings every 20 ms and keeps (time, round trip) pairs."""

    def __init__(self, url: str) -> None:
        self.ws = connect(url, compression=None, open_timeout=30).__enter__()
        self.ws.recv(30)  # ready
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            self.ws.send(msgpack.packb({"type": "ping", "t": t0}))
            while True:
                msg = msgpack.unpackb(self.ws.recv(120))
                if msg.get("type") == "pong":
                    break
            self.samples.append((t0, time.monotonic() - t0))
            time.sleep(max(0.0, 0.02 - (time.monotonic() - t0)))

    def window(self, start: float, end: float) -> list[float]:
        return [rtt for t, rtt in self.samples if start <= t <= end]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.ws.close()


class Rss:
    """RSS of one process, sampled every 10 ms in a thread, with its peak."""

    def __init__(self, pid: int) -> None:
        self.ps = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def now(self) -> int:
        return self.ps.memory_info().rss

    def reset(self) -> int:
        self.peak = self.now()
        return self.peak

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.now())
            except psutil.Error:
                return
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()


def wait_idle(proc: psutil.Process, timeout: float = 120.0) -> float:
    """Seconds until ``proc`` used under 5 % of a core over half a second."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        before = sum(proc.cpu_times()[:2])
        time.sleep(0.5)
        if sum(proc.cpu_times()[:2]) - before < 0.025:
            break
    return time.monotonic() - start


def drain(ws: ClientConnection, until: float) -> None:
    """Read everything until ``end`` of the last utterance or the deadline."""
    while time.monotonic() < until:
        try:
            data = ws.recv(max(0.05, until - time.monotonic()))
        except TimeoutError:
            return
        except Exception:
            return
        if isinstance(data, bytes) and msgpack.unpackb(data).get("type") == "end":
            return


def ws_attack(*messages: dict, hello: dict | None = None) -> Callable[[str, float], None]:
    def run(url: str, hold: float) -> None:
        with connect(url, compression=None, open_timeout=30, max_size=None) as ws:
            ws.recv(30)
            if hello:
                ws.send(msgpack.packb(hello))
                ws.recv(30)
            for m in messages:
                ws.send(m["raw"] if "raw" in m else msgpack.packb(m))
            drain(ws, time.monotonic() + hold)
    return run


def tts_attack(text: str, clients: int) -> Callable[[str, float], None]:
    def run(url: str, hold: float) -> None:
        base = url.replace("ws://", "http://").removesuffix("/ws")
        q = urllib.parse.urlencode({"text": text, "voice": VOICES["en"]})

        def one() -> None:
            try:
                with urllib.request.urlopen(f"{base}/tts?{q}", timeout=hold + 30) as r:
                    end = time.monotonic() + hold
                    while time.monotonic() < end and r.read(65536):
                        pass
            except OSError:
                pass

        threads = [threading.Thread(target=one) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return run


def idle_sockets(count: int) -> Callable[[str, float], None]:
    def run(url: str, hold: float) -> None:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        socks = []
        for _ in range(count):
            try:
                socks.append(socket.create_connection(("127.0.0.1", port)))
            except OSError:
                break
        time.sleep(min(hold, 3.0))
        for s in socks:
            s.close()
    return run


import urllib.parse  # noqa: E402

ATTACKS: list[tuple[str, Callable[[str, float], None]]] = [
    ("append: '<' + 2,400 spaces + '!' (bug 1)", ws_attack({"type": "append", "id": "a", "text": "<" + " " * 2400 + "!"},
                                                          {"type": "flush", "id": "a"})),
    ("speak: 260 x <break time='10s'/> + 'Hi.' at 48 kHz f32 (bug 2)",
     ws_attack({"type": "speak", "id": "b", "text": "<break time='10s'/>" * 260 + "Hi.", "voice": VOICES["en"]},
               hello={"type": "hello", "v": 1, "sample_rate": 48000, "format": "f32"})),
    ("speak: say-as characters, 4,950 letters", ws_attack(
        {"type": "speak", "id": "c", "voice": VOICES["en"],
         "text": '<say-as interpret-as="characters">' + "AB12" * 1237 + "</say-as>"})),
    ("speak: 5,000 characters of English (Piper)", ws_attack(
        {"type": "speak", "id": "d", "text": max_text("en"), "voice": VOICES["en"]})),
    ("speak: 5,000 characters of Mandarin (Kokoro)", ws_attack(
        {"type": "speak", "id": "e", "text": max_text("zh"), "voice": VOICES["zh"]})),
    ("speak: 5,000 digits", ws_attack({"type": "speak", "id": "f", "text": "1" * 5000, "voice": VOICES["en"]})),
    ("4 x GET /tts of 5,000 characters", tts_attack(max_text("en"), 4)),
    ("a 64 KiB frame of garbage", ws_attack({"raw": os.urandom(65000)})),
    ("120 sockets that send nothing", idle_sockets(120)),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hold", type=float, default=12.0, help="seconds an attacker reads before it leaves")
    ap.add_argument("--memory-seconds", type=float, default=120.0, help="longest a max-length request runs")
    ap.add_argument("--only-memory", action="store_true", help="skip the attacks")
    ap.add_argument("--langs", default="en,zh,ja", help="languages of the memory part")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--server-arg", action="append", default=[], help="extra argument for rtts serve")
    args = ap.parse_args()
    machine = {"probe_ms_before": round(probe_ms(), 1), "load_before": os.getloadavg()}
    log = Path("/tmp/rtts-hostile.log")
    server = ServerProcess(0, log, *args.server_arg)
    result: dict = {"command": " ".join(["python3", "benchmarks/hostile.py", *sys.argv[1:]]), "attacks": [],
                    "memory": []}
    try:
        victim = Victim(server.url)
        main_rss = Rss(server.proc.pid)
        # Warm both engines so that model loads are not counted as an attack's cost.
        for lang in ("en", "zh", "ja"):
            ws_attack({"type": "speak", "id": "w", "text": SENTENCES[lang][0] if isinstance(SENTENCES[lang][0], str)
                       else SENTENCES[lang][0]["text"], "voice": VOICES[lang]})(server.url, 60)
        time.sleep(2)
        for name, attack in [] if args.only_memory else ATTACKS:
            t0 = time.monotonic()
            base = victim.window(t0 - 2.0, t0) or [0.0]
            before = main_rss.reset()
            attack(server.url, args.hold)
            time.sleep(1.0)
            t1 = time.monotonic()
            during = victim.window(t0, t1) or [float("nan")]
            row = {
                "attack": name,
                "seconds": round(t1 - t0, 1),
                "ping_median_ms": round(statistics.median(base) * 1000, 1),
                "ping_worst_ms": round(max(during) * 1000, 1),
                "stall_ms": round((max(during) - statistics.median(base)) * 1000, 1),
                "rss_growth_mb": round((main_rss.peak - before) / 2**20, 1),
            }
            result["attacks"].append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
            time.sleep(2.0)
        victim.stop()
    finally:
        server.stop()
    # The inference process: a fresh server per language, so that "warm" is that
    # language's model and front end after one sentence, as a box serving it would be.
    for lang in args.langs.split(","):
        server = ServerProcess(0, log, *args.server_arg)
        try:
            ws_attack({"type": "speak", "id": "w", "text": max_text(lang, 40), "voice": VOICES[lang]})(server.url, 60)
            time.sleep(2.0)
            child = next(iter(server.ps.children()), None)
            if child is None:
                raise RuntimeError("no inference process")
            rss = Rss(child.pid)
            warm = rss.reset()
            t0 = time.monotonic()
            ws_attack({"type": "speak", "id": "m", "text": longest_units(lang), "voice": VOICES[lang]})(
                server.url, args.memory_seconds)
            spoke = time.monotonic() - t0
            idle_after = wait_idle(child)  # the run in flight when the client left ends first
            time.sleep(5.0)
            row = {"lang": lang, "voice": VOICES[lang], "seconds": round(spoke, 1),
                   "warm_mb": round(warm / 2**20), "peak_mb": round(rss.peak / 2**20),
                   "idle_after_s": round(idle_after, 1), "after_5s_mb": round(rss.now() / 2**20)}
            rss.stop()
            result["memory"].append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
        finally:
            server.stop()
    machine.update(probe_ms_after=round(probe_ms(), 1), load_after=os.getloadavg())
    result["machine"] = machine
    print(json.dumps(machine))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
