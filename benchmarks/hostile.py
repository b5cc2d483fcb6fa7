#!/usr/bin/env python3
"""What one hostile message costs everybody else, and what a long request leaves behind (issue 13).

    python3 benchmarks/hostile.py [--memory-seconds 120] [--json out.json]
    python3 benchmarks/hostile.py --only-floods [--seconds-per-attack 15] [--write-doc] [--json out.json]

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

Floods and slow sockets (issue 20), ``--only-floods``: one server with the Wyoming port,
a publish token and ``--server-nofile`` (1,024) file descriptors, and in a process of its
own (benchmarks/prober.py, from 127.0.0.200 so that no cap counting the attackers'
127.0.0.1 counts it) another client that sends ``GET /healthz`` every 20 ms over a fresh
connection and opens a WebSocket every second. Each attack (``--attacks`` picks some by
key; see ``FLOODS``) runs for ``--seconds-per-attack`` (the counted ones stop at their
count or four times that) and ends by itself; every refusal, 429 or closed connection is
counted, not raised. Its row: the prober's ``/healthz`` round trip during the attack minus
its median in the 2 s before (p50 and max; a failed probe counts with the time it took),
the probes that failed, the peak RSS of the server process and of the inference process
during the attack minus before (and the inference process's once it is idle again: its
peak is the working set of what it synthesizes, the same for a client that reads, which
a row that is not an attack shows), the server's CPU, pass (stall < 100 ms, the server's
peak and the inference process's remainder < 50 MB, no failed probe: the issue's
thresholds), the attack's own symptom where it has one (``DEAF_KERNEL_LIMIT``,
``NAN_SPIN_CPU_PCT``, a refused client at the attackers' address, a 500...) and what else
was seen. ``--write-doc`` puts the table into docs/benchmarks.md. The ``captionedwhole``
row (issue 30: non-streamed captioned bodies against the memory budget) runs on a server
of its own with ``--memory-budget 450`` and Kokoro's Mandarin and Japanese warm;
``--captioned-chars`` shortens its requests for a functional run.

Timings on a shared 2-core VM are noisy: the header prints the host probe of
benchmarks/latency.py and the load average, before and after.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import resource
import select
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import msgpack
import psutil
from websockets.sync.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import latency  # noqa: E402
from latency import ServerProcess, probe_ms  # noqa: E402
from prober import connect_from, read_head  # noqa: E402

from tests.ports import free_port  # noqa: E402

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

# ---------------------------------------------------------------- floods and slow sockets (issue 20)

FLOODS_BEGIN, FLOODS_END = "<!-- floods:begin -->", "<!-- floods:end -->"
FLOODS_HEADING = "Floods and slow sockets (issue 20)"
ATTACKER = "127.0.0.1"  # the prober connects from 127.0.0.200: a different client for every cap
PUBLISH_TOKEN = "hostile-benchmark-publish-token"
STALL_LIMIT_MS = 100.0  # the thresholds
RSS_LIMIT_MB = 50.0
NESTED = b"[" * 20000 + b"]" * 20000  # 20,000 levels: past Python's recursion limit in json.loads
# The attack's own symptom, besides the stall and RSS: for a client that never reads, the
# kernel send queue of the server's socket is capped (--send-buffer, 256 KiB, which Linux
# doubles), not grown to megabytes by autotuning; without ``ss``, what waits in all (the
# server's buffer, both kernels' and one unit's audio) stays under 2 MiB. An announcement
# that waits must not keep the server busy.
DEAF_KERNEL_LIMIT = 640 * 1024
DEAF_QUEUE_LIMIT = 2 * 2**20
NAN_SPIN_CPU_PCT = 25


class Refused(ConnectionError):
    """The server answered a WebSocket upgrade with something else than 101."""

    def __init__(self, status: str) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def tcp(port: int, source: str = ATTACKER, timeout: float = 5.0, rcvbuf: int = 0) -> socket.socket:
    return connect_from(port, source, timeout, rcvbuf)


def status_of(head: bytes) -> str:
    parts = head.split(b" ", 2)
    return parts[1].decode(errors="replace") if len(parts) > 1 else "?"


def ws_raw(port: int, source: str = ATTACKER, rcvbuf: int = 0, timeout: float = 10.0) -> socket.socket:
    """A WebSocket opened by hand on a plain socket, so that it can send without ever
    reading (the sync client reads in a thread of its own)."""
    s = tcp(port, source, timeout, rcvbuf)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        status = status_of(read_head(s))
        if status != "101":
            raise Refused(status)
    except BaseException:
        s.close()
        raise
    return s


def ws_frame(message: dict) -> bytes:
    """One masked binary frame holding ``message`` (the mask is zero: the payload goes as is)."""
    payload = msgpack.packb(message)
    n = len(payload)
    length = bytes([0x80 | n]) if n < 126 else b"\xfe" + struct.pack(">H", n)
    return b"\x82" + length + b"\0\0\0\0" + payload


def wyoming_event(kind: str, data: dict | None = None) -> bytes:
    return json.dumps({"type": kind, "data": data or {}}).encode() + b"\n"


def send_until(s: socket.socket, data: bytes, deadline: float) -> bool:
    """All of ``data``, or False at the deadline (the server stopped reading: back-pressure).
    Raises OSError when the server closed the connection."""
    s.setblocking(False)
    poller = select.poll()  # not select(): descriptors here may be numbered above 1,024
    poller.register(s, select.POLLOUT)
    view = memoryview(data)
    while view:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return False
        try:
            view = view[s.send(view):]
        except BlockingIOError:
            continue
    return True


def closed_by_peer(s: socket.socket) -> bool:
    """Whether the other end closed ``s`` (what it had sent is read and dropped)."""
    s.setblocking(False)
    try:
        while True:
            if not s.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.close()


def http(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None,
         source: str = ATTACKER, timeout: float = 10.0) -> tuple[str, bytes]:
    """(status, body) of one request on a connection of its own (the server closes each)."""
    with tcp(port, source, timeout) as s:
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(body)}",
                 *(f"{k}: {v}" for k, v in (headers or {}).items()), "Connection: close"]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return status_of(head), rest


def announce(port: int, body: bytes) -> str:
    """``POST /v1/announce`` with the publish token: the status, and the error code if any."""
    status, rest = http(port, "POST", "/v1/announce", body,
                        {"Authorization": f"Bearer {PUBLISH_TOKEN}", "Content-Type": "application/json"})
    with contextlib.suppress(ValueError, AttributeError):
        code = json.loads(rest.split(b"\r\n")[-1] if b"\r\n" in rest else rest).get("error")
        if code:
            return f"{status} {code}"
    return status


def server_send_queue(server_port: int, client_port: int) -> int | None:
    """Bytes in the kernel send queue of the server's end of one connection (``ss``)."""
    try:
        out = subprocess.run(["ss", "-tnH", "state", "established", "( sport = :%d and dport = :%d )"
                              % (server_port, client_port)], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    fields = out.split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def drain_at_once(s: socket.socket, gap: float = 0.2, most: float = 10.0) -> int:
    """Bytes readable now: read until nothing comes for ``gap`` seconds. What a client that
    never read finds waiting for it (kernel buffers of both ends and the server's own)."""
    s.setblocking(True)
    s.settimeout(gap)
    total, end = 0, time.monotonic() + most
    with contextlib.suppress(OSError):
        while time.monotonic() < end:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            total += len(chunk)
    return total


def counted(counts: Counter, what: str) -> None:
    counts[what] += 1


def summary(counts: Counter) -> str:
    return ", ".join(f"{k} ×{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


class Listener:
    """A subscriber that reads everything and keeps when each announcement started and ended."""

    def __init__(self, port: int, channel: str) -> None:
        self.ws = connect(f"ws://127.0.0.1:{port}/ws", compression=None, open_timeout=10, max_size=None).__enter__()
        self.ws.recv(10)  # ready
        self.events: list[tuple[float, str, dict]] = []
        self.ws.send(msgpack.packb({"type": "subscribe", "channel": channel}))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            while True:
                data = self.ws.recv()
                if isinstance(data, bytes):
                    msg = msgpack.unpackb(data)
                    if msg.get("type") != "audio":
                        self.events.append((time.monotonic(), msg.get("type"), msg))

    def times(self, kind: str) -> list[float]:
        """When each announcement's ``kind`` (start, end) came."""
        return [t for t, k, m in self.events if k == kind and m.get("channel")]

    def wait(self, kind: str, n: int, until: float) -> bool:
        while time.monotonic() < until:
            if len(self.times(kind)) >= n:
                return True
            time.sleep(0.02)
        return len(self.times(kind)) >= n

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()


def next_gap(listener: Listener, seconds: float) -> tuple[str, bool]:
    """How long the honest subscriber waited between the end of the first announcement
    and the start of the second, and whether it waited the whole ``seconds`` (the symptom)."""
    if not listener.wait("end", 1, time.monotonic() + seconds):
        return "honest subscriber: the 1st announcement did not end", True
    ended = listener.times("end")[0]
    if listener.wait("start", 2, ended + seconds):
        return f"honest subscriber: 2nd announcement {listener.times('start')[1] - ended:.1f} s after the 1st", False
    return f"honest subscriber: no 2nd announcement within {seconds:.0f} s of the 1st", True


# Each attack: (rig, seconds) → details (a "note" and counts); it ends by itself.


def ping_flood(connections: int, speak_cancel: bool = False, max_messages: int = 2_000_000):
    def batch(i: int) -> bytes:
        if not speak_cancel:
            return PING_BATCH
        frames = []
        for j in range(100):
            frames.append(ws_frame({"type": "speak", "id": f"s{i}-{j}", "text": "Hello there.", "voice": VOICES["en"]}))
            frames.append(ws_frame({"type": "cancel", "id": f"s{i}-{j}"}))
        return b"".join(frames)

    per_batch = 200

    def one(port: int, deadline: float, counts: Counter, together: threading.Barrier) -> None:
        sent = i = 0
        first = [True]

        def arrived() -> None:
            """Every connection tried before any floods: the later ones would not get in."""
            if first[0]:
                first[0] = False
                with contextlib.suppress(threading.BrokenBarrierError):
                    together.wait(10)

        while time.monotonic() < deadline and sent < max_messages:
            try:
                s = ws_raw(port, timeout=5)
            except Refused as exc:
                counted(counts, f"refused {exc.status}")
                arrived()
                time.sleep(0.2)
                continue
            except OSError as exc:
                counted(counts, f"connect {type(exc).__name__}")
                arrived()
                time.sleep(0.2)
                continue
            counts["connections"] += 1
            arrived()
            try:
                while sent < max_messages:
                    if not send_until(s, batch(i), deadline):
                        break
                    i += 1
                    sent += per_batch
                    counts["messages sent"] += per_batch
            except OSError:
                counted(counts, "closed by the server")
                time.sleep(0.1)
            finally:
                s.close()

    def run(rig: Rig, seconds: float) -> dict:
        counts: Counter = Counter()
        deadline = time.monotonic() + seconds
        together = threading.Barrier(connections)
        threads = [threading.Thread(target=one, args=(rig.port, deadline, counts, together))
                   for _ in range(connections)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {"note": summary(counts), "counts": dict(counts)}

    return run


PING_BATCH = b"".join(ws_frame({"type": "ping", "t": i}) for i in range(200))


def idle_wyoming(sources: list[str]):
    def run(rig: Rig, seconds: float) -> dict:
        counts: Counter = Counter()
        socks = []
        for source in sources:
            try:
                socks.append(tcp(rig.wyoming_port, source, timeout=5))
            except OSError as exc:
                counted(counts, f"connect {type(exc).__name__}")
        end = time.monotonic() + seconds
        time.sleep(min(3.0, seconds / 2))
        # What another client from the attackers' own address meets meanwhile.
        seen, ws_status, ready = [], "?", "?"
        try:
            ws_raw(rig.port, ATTACKER, timeout=5).close()
            ws_status = "101"
        except Refused as exc:
            ws_status = exc.status
        except OSError as exc:
            ws_status = type(exc).__name__
        seen.append(f"WebSocket from {ATTACKER}: {ws_status}")
        try:
            ready = http(rig.port, "GET", "/readyz", source="127.0.0.201")[0]
        except OSError as exc:
            ready = type(exc).__name__
        seen.append(f"/readyz: {ready}")
        time.sleep(max(0.0, end - time.monotonic()))
        closed = sum(closed_by_peer(s) for s in socks)
        close_all(socks)
        note = f"{len(socks)} open; " + "; ".join(seen) + f"; closed by the server by the end: {closed}/{len(socks)}"
        return {"note": note + (f"; {summary(counts)}" if counts else ""), "counts": dict(counts), "closed": closed,
                "symptom": ws_status != "101" or ready != "200"}

    return run


def bodiless_heads(count: int):
    def run(rig: Rig, seconds: float) -> dict:
        counts: Counter = Counter()
        head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1:{rig.port}\r\nContent-Type: application/json\r\n"
                "Content-Length: 200\r\n\r\n").encode()
        socks: list[socket.socket] = []
        # Opened by 8 threads at once: the server gives each head ``--handshake-timeout``
        # (10 s) for its body, so they must all be open within that to be there together.
        opening = time.monotonic() + max(seconds, 8.0)

        def some(n: int) -> None:
            for _ in range(n):
                if time.monotonic() > opening:
                    counted(counts, "not opened (time)")
                    continue
                try:
                    s = tcp(rig.port, timeout=2)
                    s.sendall(head)
                    socks.append(s)
                except OSError as exc:
                    counted(counts, f"connect {type(exc).__name__}")

        t0 = time.monotonic()
        threads = [threading.Thread(target=some, args=(count // 8 + (i < count % 8),)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        opened, took = len(socks), time.monotonic() - t0
        time.sleep(seconds)
        closed = sum(closed_by_peer(s) for s in socks)
        close_all(socks)
        note = f"{opened}/{count} heads sent in {took:.1f} s; closed by the server {seconds:.0f} s later: {closed}"
        return {"note": note + (f"; {summary(counts)}" if counts else ""), "counts": dict(counts), "closed": closed}

    return run


def channel_hold(rig: Rig, seconds: float) -> dict:
    """A subscriber with an utterance of its own that never ends (an ``append`` never
    flushed): the channel waits for it to end each announcement."""
    honest = Listener(rig.port, "hold")
    holder = connect(f"ws://127.0.0.1:{rig.port}/ws", compression=None, open_timeout=10, max_size=None).__enter__()
    try:
        holder.recv(10)
        holder.send(msgpack.packb({"type": "append", "id": "held", "text": "This sentence is never flushed"}))
        holder.send(msgpack.packb({"type": "subscribe", "channel": "hold"}))
        threading.Thread(target=drain, args=(holder, time.monotonic() + seconds + 5), daemon=True).start()
        time.sleep(0.5)
        answers = [announce(rig.port, json.dumps({"channel": "hold", "text": t}).encode())
                   for t in ("The first announcement.", "The second announcement.")]
        gap, symptom = next_gap(honest, seconds)
        return {"note": f"announce: {', '.join(answers)}; {gap}", "symptom": symptom}
    finally:
        honest.close()
        with contextlib.suppress(Exception):
            holder.close()


def channel_deaf(rig: Rig, seconds: float) -> dict:
    """A subscriber that never reads: the channel waits for it to end each announcement."""
    honest = Listener(rig.port, "deaf")
    deaf = ws_raw(rig.port, rcvbuf=4096)
    try:
        deaf.sendall(ws_frame({"type": "subscribe", "channel": "deaf"}))
        time.sleep(0.5)
        answers = [announce(rig.port, json.dumps({"channel": "deaf", "text": t}).encode())
                   for t in (max_text("en", 400), "The second announcement.")]
        gap, symptom = next_gap(honest, seconds)
        return {"note": f"announce: {', '.join(answers)}; {gap}; deaf subscriber closed by the server: "
                        f"{closed_by_peer(deaf)}", "symptom": symptom}
    finally:
        honest.close()
        deaf.close()


def nan_not_before(path: str):
    def run(rig: Rig, seconds: float) -> dict:
        channel = f"nan-{path}"
        listener = Listener(rig.port, channel)
        try:
            time.sleep(0.3)
            if path == "ws":
                with connect(f"ws://127.0.0.1:{rig.port}/ws", compression=None, open_timeout=10) as ws:
                    ws.recv(10)
                    ws.send(msgpack.packb({"type": "publish", "channel": channel, "text": "Not a number.",
                                           "token": PUBLISH_TOKEN, "not_before": float("nan")}))
                    answer = "no answer"
                    with contextlib.suppress(Exception):
                        while True:
                            msg = msgpack.unpackb(ws.recv(5))
                            if msg.get("type") in ("published", "error"):
                                answer = msg["type"] + (f" {msg.get('code')}" if msg.get("code") else "")
                                break
            else:
                answer = announce(rig.port, b'{"channel": "%s", "text": "Not a number.", "not_before": NaN}'
                                  % channel.encode())
            # The subscriber stays: a spinning loop spins for as long (the row's server CPU shows it).
            time.sleep(seconds)
            return {"note": f"publish answered: {answer}; the subscriber stayed {seconds:.0f} s",
                    "symptom_cpu_pct": NAN_SPIN_CPU_PCT}
        finally:
            listener.close()

    return run


def refused_speech(fmt: str, count: int):
    """Requests refused after the response's encoder was made (a voice nobody has)."""

    def run(rig: Rig, seconds: float) -> dict:
        body = json.dumps({"model": "tts-1", "input": "Hello.", "voice": "no-such-voice",
                           "response_format": fmt}).encode()
        counts: Counter = Counter()
        deadline = time.monotonic() + 4 * seconds
        left = [count]
        lock = threading.Lock()

        def one() -> None:
            while time.monotonic() < deadline:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                try:
                    counted(counts, f"HTTP {http(rig.port, 'POST', '/v1/audio/speech', body, {'Content-Type': 'application/json'})[0]}")
                except OSError as exc:
                    counted(counts, type(exc).__name__)

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {"note": f"{count - left[0]}/{count} sent: {summary(counts)}", "counts": dict(counts)}

    return run


def nul_texts(rounds: int):
    """Text with a NUL (issue 30, bug 2: Hibari's tables returned other keys' entries and it
    failed with marshal errors) on every route, ``rounds`` times each; then the default
    voice must still speak a clean text. The symptom: any answer but the refusal, or a
    clean ``/tts`` that fails afterwards."""

    def run(rig: Rig, seconds: float) -> dict:
        counts: Counter = Counter()
        deadline = time.monotonic() + 4 * seconds
        text = "ab\x00cd efg"
        json_headers = {"Content-Type": "application/json"}
        for _ in range(rounds):
            if time.monotonic() > deadline:
                break
            try:
                counted(counts, f"/tts {http(rig.port, 'GET', '/tts?text=ab%00cd%20efg')[0]}")
                counted(counts, "openai " + http(rig.port, "POST", "/v1/audio/speech", json.dumps(
                    {"model": "tts-1", "input": text}).encode(), json_headers)[0])
                counted(counts, "captioned " + http(rig.port, "POST", "/dev/captioned_speech", json.dumps(
                    {"model": "kokoro", "input": text, "stream": False}).encode(), json_headers)[0])
                counted(counts, "announce " + announce(rig.port, json.dumps({"channel": "nul", "text": text}).encode()))
                with ws_raw(rig.port) as ws:
                    ws.sendall(ws_frame({"type": "speak", "id": "n", "text": text}))
                    ws.settimeout(5)
                    got = b""
                    with contextlib.suppress(OSError):
                        while b"bad_message" not in got and (chunk := ws.recv(65536)):
                            got += chunk
                    counted(counts, "ws " + ("bad_message" if b"bad_message" in got else "other"))
                with tcp(rig.wyoming_port) as wy:
                    wy.sendall(wyoming_event("synthesize", {"text": text}))
                    wy.settimeout(5)
                    counted(counts, "wyoming " + ("error" if b'"error"' in wy.recv(65536) else "other"))
            except OSError as exc:
                counted(counts, type(exc).__name__)
        clean = http(rig.port, "GET", "/tts?text=Still%20speaking.", timeout=60)[0]
        refused = {k: v for k, v in counts.items() if k.endswith(("400", "bad_message", "error", "400 bad_message"))}
        return {"note": f"{summary(counts)}; then a clean /tts: {clean}",
                "symptom": clean != "200" or sum(refused.values()) != sum(counts.values())}

    return run


def nested_json(path: str, count: int = 20):
    def run(rig: Rig, seconds: float) -> dict:
        counts: Counter = Counter()
        deadline = time.monotonic() + 4 * seconds
        for _ in range(count):
            if time.monotonic() > deadline:
                break
            try:
                if path == "wyoming":
                    with tcp(rig.wyoming_port) as s:
                        s.sendall(b'{"type": "describe", "data": {"x": ' + NESTED + b"}}\n")
                        s.settimeout(5)
                        got = b""
                        with contextlib.suppress(OSError):
                            while b"\n" not in got and (chunk := s.recv(65536)):
                                got += chunk
                        kind = json.loads(got.split(b"\n")[0]).get("type") if got else None
                        counted(counts, f"event {kind}" if kind else "dropped without an answer")
                else:
                    headers = {"Content-Type": "application/json"}
                    if path == "/v1/announce":
                        headers["Authorization"] = f"Bearer {PUBLISH_TOKEN}"
                    counted(counts, f"HTTP {http(rig.port, 'POST', path, NESTED, headers)[0]}")
            except (OSError, ValueError) as exc:
                counted(counts, type(exc).__name__)
        broken = sum(v for k, v in counts.items() if k.startswith("HTTP 5") or k.startswith("dropped"))
        return {"note": summary(counts), "counts": dict(counts), "symptom": broken > 0}

    return run


def never_reads(kind: str):
    """A client that asks for a long text and reads nothing: how much waits for it."""

    def run(rig: Rig, seconds: float) -> dict:
        text = max_text("en", 2500)
        port = rig.wyoming_port if kind == "wyoming" else rig.port
        s = ws_raw(port, rcvbuf=4096) if kind == "ws" else tcp(port, rcvbuf=4096)
        try:
            if kind == "wyoming":
                s.sendall(wyoming_event("synthesize", {"text": text, "voice": {"name": VOICES["en"]}}))
            elif kind == "ws":
                s.sendall(ws_frame({"type": "speak", "id": "deaf", "text": text, "voice": VOICES["en"]}))
            else:
                q = urllib.parse.urlencode({"text": text, "voice": VOICES["en"]})
                s.sendall(f"GET /tts?{q} HTTP/1.1\r\nHost: 127.0.0.1:{rig.port}\r\n\r\n".encode())
            time.sleep(seconds)
            kernel = server_send_queue(port, s.getsockname()[1])
            waiting = drain_at_once(s)
        finally:
            s.close()
        audio_s = waiting / (2 * 24000)
        kernel_note = f"{kernel / 1024:.0f} KiB in the server's kernel send queue; " if kernel is not None else ""
        return {"note": f"after {seconds:.0f} s unread: {kernel_note}{waiting / 2**20:.2f} MiB waiting "
                        f"(~{audio_s:.0f} s of audio)", "queued_bytes": waiting, "kernel_send_queue": kernel,
                "symptom": kernel > DEAF_KERNEL_LIMIT if kernel is not None else waiting > DEAF_QUEUE_LIMIT}

    return run


def captioned_whole(count: int):
    """``count`` non-streamed captioned requests at once (``POST /dev/captioned_speech``,
    ``"stream": false``, WAV at speed 0.5, ``--captioned-chars`` of English each: 5,000 is
    480 s of audio, a 30.8 MB body), while two other clients speak Mandarin and Japanese
    over WebSockets (issue 30, bug 1). Symptom: any of those clients refused for memory
    (``memory_budget``), or a captioned request refused for it after its synthesis."""

    def run(rig: Rig, seconds: float) -> dict:
        text = max_text("en", rig.args.captioned_chars)
        body = json.dumps({"model": "tts-1", "input": text, "voice": VOICES["en"], "speed": 0.5,
                           "response_format": "wav", "stream": False}).encode()
        answers: Counter = Counter()
        slowest = [0.0]
        others: Counter = Counter()
        stop = threading.Event()

        def ask() -> None:
            t0 = time.monotonic()
            try:
                status, got = http(rig.port, "POST", "/dev/captioned_speech", body,
                                   {"Content-Type": "application/json"}, timeout=300.0)  # answered whole: late
                code = json.loads(got or b"{}").get("error", {}).get("code", "") if status != "200" else ""
                counted(answers, f"HTTP {status} {code}".strip())
            except (OSError, ValueError) as exc:
                counted(answers, type(exc).__name__)
            slowest[0] = max(slowest[0], time.monotonic() - t0)

        def speak(lang: str) -> None:
            """Another client's sentences, one after the other, until the requests are answered."""
            with contextlib.suppress(OSError, TimeoutError), connect(rig.server.url, compression=None,
                                                                      open_timeout=30) as ws:
                ws.recv(30)  # ready
                n = 0
                while not stop.is_set():
                    n += 1
                    ws.send(msgpack.packb({"type": "speak", "id": f"{lang}{n}", "text": SENTENCES[lang][n % 4]
                                           if isinstance(SENTENCES[lang][0], str) else SENTENCES[lang][n % 4]["text"]}))
                    while (msg := msgpack.unpackb(ws.recv(120))).get("type") != "end":
                        if msg.get("type") == "error":
                            counted(others, msg.get("code", "?"))
                    counted(others, f"end {msg.get('reason')}")

        speakers = [threading.Thread(target=speak, args=(lang,)) for lang in ("zh", "ja")]
        askers = [threading.Thread(target=ask) for _ in range(count)]
        for t in speakers + askers:
            t.start()
        for t in askers:
            t.join()
        stop.set()
        for t in speakers:
            t.join(120)
        starved = others["memory_budget"] + sum(v for k, v in answers.items() if "memory_budget" in k)
        return {"note": f"{len(text)} chars × {count}: {summary(answers)} (slowest {slowest[0]:.1f} s); "
                        f"the Mandarin and Japanese clients: {summary(others)}",
                "counts": dict(answers), "others": dict(others), "symptom": starved > 0}

    return run


FLOODS: list[tuple[str, str, str, Callable]] = [
    ("ping1", "1 connection sends `ping`s as fast as it can, never reads (bug 5)", "WebSocket", ping_flood(1)),
    ("ping12", "12 connections send `ping`s, never read (bug 5)", "WebSocket", ping_flood(12)),
    ("speakcancel", "`speak` + `cancel` flood, never reads (bug 5)", "WebSocket", ping_flood(1, speak_cancel=True)),
    ("wyoming16", "16 idle TCP connections from one address (bug 3)", "Wyoming", idle_wyoming([ATTACKER] * 16)),
    ("wyoming64", "64 idle TCP connections from 127.0.0.2-5 (bug 3)", "Wyoming",
     idle_wyoming([f"127.0.0.{2 + i % 4}" for i in range(64)])),
    ("heads", "1,100 request heads whose body never comes (bug 4)", "HTTP", bodiless_heads(1100)),
    ("hold", "a subscriber with an unflushed `append` (bug 7)", "channels", channel_hold),
    ("deaf", "a subscriber that never reads (bug 7)", "channels", channel_deaf),
    ("nanws", "`publish` with `not_before: NaN`, a subscriber stays (bug 6)", "channels (WebSocket)",
     nan_not_before("ws")),
    ("nanhttp", "`POST /v1/announce` with `not_before: NaN`, a subscriber stays (bug 6)", "channels (HTTP)",
     nan_not_before("http")),
    ("nestedspeech", "20 × 20,000-deep JSON on `/v1/audio/speech` (bug 11)", "HTTP", nested_json("/v1/audio/speech")),
    ("nestedannounce", "20 × 20,000-deep JSON on `/v1/announce` (bug 11)", "HTTP", nested_json("/v1/announce")),
    ("nestedwyoming", "20 × 20,000-deep JSON in a Wyoming event (bug 11)", "Wyoming", nested_json("wyoming")),
    ("wyomingdeaf", "`synthesize` of 2,500 characters, never reads (bug 14)", "Wyoming", never_reads("wyoming")),
    ("ttsdeaf", "`GET /tts` of 2,500 characters, never reads (bug 14)", "HTTP", never_reads("tts")),
    ("wsdeaf", "`speak` of 2,500 characters, never reads (the reference for bug 14)", "WebSocket", never_reads("ws")),
    ("wsread", "not an attack: `speak` of the same 2,500 characters, read (what synthesis itself costs)",
     "WebSocket", lambda rig, seconds: ws_attack({"type": "speak", "id": "r", "text": max_text("en", 2500),
                                                  "voice": VOICES["en"]})(rig.server.url, seconds)
     or {"reference": True}),
    ("refusedflac", "5,000 refused FLAC requests (unknown voice; bug 8)", "HTTP (OpenAI)", refused_speech("flac", 5000)),
    ("refusedmp3", "5,000 refused mp3 requests (unknown voice; bug 8)", "HTTP (OpenAI)", refused_speech("mp3", 5000)),
    ("nul", "text with a NUL on `/tts`, OpenAI, captioned, `/v1/announce`, WebSocket and Wyoming, 50 rounds (issue 30, bug 2)",
     "every route", nul_texts(50)),
]


class RedisServer:
    """A redis-server of this benchmark's own (no persistence), for the bus attacks."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(workdir)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        self.client = redis.Redis(port=self.port, socket_timeout=30)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def subscribe_times(port: int, channels: list[str]) -> list[float]:
    """Seconds from each ``subscribe`` to its ``subscribed``, one connection per channel,
    all at once (kiosks coming back after a restart)."""
    socks = [connect(f"ws://127.0.0.1:{port}/ws", compression=None, open_timeout=30).__enter__() for _ in channels]
    took: list[float] = []

    def one(ws: ClientConnection, name: str) -> None:
        ws.recv(10)
        t0 = time.monotonic()
        ws.send(msgpack.packb({"type": "subscribe", "channel": name}))
        with contextlib.suppress(TimeoutError):
            while msgpack.unpackb(ws.recv(10)).get("type") not in ("subscribed", "error"):
                pass
        took.append(time.monotonic() - t0)

    try:
        threads = [threading.Thread(target=one, args=(ws, name)) for ws, name in zip(socks, channels)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for ws in socks:
            with contextlib.suppress(Exception):
                ws.close()
    return took or [float("nan")]


def channel_names(count: int):
    """Announcements for ``count`` distinct channels, published straight into Redis (as any
    instance, or anyone who reaches Redis, may): every one is a channel kept for ever. The
    symptom: 16 subscribes at once afterwards take 100 ms or more."""

    def run(rig: Rig, seconds: float) -> dict:
        r = rig.redis.client
        deadline = time.monotonic() + 4 * seconds
        draft = {"text": "Hi.", "voice": VOICES["en"], "lang": None, "speed": 1.0, "priority": "normal",
                 "not_before": None, "published": time.time()}
        sent = 0
        while sent < count and time.monotonic() < deadline:
            pipe = r.pipeline(transaction=False)
            for i in range(sent, min(count, sent + 5000)):
                pipe.publish("rtts:announce", f"1\n{json.dumps({'channel': f'flood-{i}', **draft})}")
            pipe.execute()
            sent = min(count, sent + 5000)
        time.sleep(2.0)  # what the server has not read yet
        took = subscribe_times(rig.port, [f"late-{i}" for i in range(16)])
        ms = sorted(t * 1000 for t in took)
        return {"note": f"{sent:,} channel names published; then 16 subscribes at once: {statistics.median(ms):.0f} / "
                        f"{ms[-1]:.0f} ms (p50 / max)", "symptom": not ms[-1] < STALL_LIMIT_MS}

    return run


def redis_hang(subscribes: int):
    """Redis stops answering (SIGSTOP) while clients subscribe: what the server opens
    meanwhile. The symptom: more descriptors than the connections and a few."""

    def run(rig: Rig, seconds: float) -> dict:
        before = rig.server.ps.num_fds()
        peak = before
        socks = []
        rig.redis.proc.send_signal(signal.SIGSTOP)
        try:
            for c in range(subscribes // 16 + 1):
                n = min(16, subscribes - 16 * c)
                if n <= 0:
                    break
                with contextlib.suppress(OSError):
                    s = ws_raw(rig.port)
                    s.sendall(b"".join(ws_frame({"type": "subscribe", "channel": f"hang-{c}-{i}"}) for i in range(n)))
                    socks.append(s)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                with contextlib.suppress(psutil.Error):
                    peak = max(peak, rig.server.ps.num_fds())
                time.sleep(0.1)
        finally:
            rig.redis.proc.send_signal(signal.SIGCONT)
        close_all(socks)
        time.sleep(2.0)
        after = rig.server.ps.num_fds()
        return {"note": f"{len(socks)} connections, {subscribes} subscribes while Redis was stopped: server fds "
                        f"{before} → {peak} (peak) → {after} 2 s after Redis came back",
                "symptom": peak - before > len(socks) + 16}

    return run


REDIS_FLOODS: list[tuple[str, str, str, Callable]] = [
    ("channelnames", "500,000 distinct channel names published through Redis (bug 13)", "channels (Redis)",
     channel_names(500_000)),
    ("redishang", "128 subscribes while Redis hangs (bug 17)", "channels (Redis)", redis_hang(128)),
]
# On a server of their own under a memory budget (what issue 30's bug 1 was measured against),
# with Kokoro's Mandarin and Japanese warm beside Piper.
BUDGET_MB = 450
BUDGET_FLOODS: list[tuple[str, str, str, Callable]] = [
    ("captionedwhole", "8 × `POST /dev/captioned_speech` with `\"stream\": false` (`--captioned-chars`: 5,000 characters, at speed 0.5), "
     f"two other clients speaking Mandarin and Japanese, `--memory-budget {BUDGET_MB}` (issue 30, bug 1)",
     "HTTP (Kokoro-FastAPI)", captioned_whole(8)),
]


class Prober:
    """benchmarks/prober.py in a process of its own; its samples, as they come."""

    def __init__(self, port: int) -> None:
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "prober.py"), "--port", str(port)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.samples: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.samples.append(json.loads(line))

    def window(self, start: float, end: float, kind: str = "healthz") -> list[dict]:
        return [s for s in list(self.samples) if s["kind"] == kind and start <= s["t"] <= end]

    def wait_past(self, t: float, timeout: float = 15.0) -> None:
        """Until a probe that started after ``t`` has finished (one stuck in a stall included)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and not any(s["t"] > t for s in self.samples[-50:] if s["kind"] == "healthz"):
            time.sleep(0.05)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@contextlib.contextmanager
def nofile_soft(limit: int):
    """This process's soft RLIMIT_NOFILE at ``limit`` meanwhile (0: unchanged), so that a
    child started meanwhile inherits it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if limit:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Rig:
    """The server the floods go to (Wyoming on, a publish token, a known descriptor
    limit) and the prober watching it; started again if an attack kills it."""

    def __init__(self, args: argparse.Namespace, workdir: Path, redis: RedisServer | None = None,
                 budget_mb: int = 0) -> None:
        self.args = args
        self.redis = redis
        self.budget_mb = budget_mb
        self.token_file = workdir / "publish-token"
        self.token_file.write_text(PUBLISH_TOKEN + "\n")
        self.log = Path("/tmp/rtts-hostile-floods.log")
        self.restarts = 0
        self._start()

    def _start(self) -> None:
        self.wyoming_port = free_port()
        extra = ["--wyoming-port", str(self.wyoming_port), "--publish-token-file", str(self.token_file),
                 *(["--bus", self.redis.url] if self.redis else []),
                 *(["--memory-budget", str(self.budget_mb)] if self.budget_mb else []), *self.args.server_arg]
        with nofile_soft(self.args.server_nofile):
            self.server = ServerProcess(0, self.log, *extra)
        self.port = self.server.port
        self.nofile = self.server.ps.rlimit(psutil.RLIMIT_NOFILE)[0]
        # Piper loaded and its inference process past its first long request, so that
        # neither is counted as an attack's cost.
        for text in ("Warming up the voice.", max_text("en", 300)):
            ws_attack({"type": "speak", "id": "w", "text": text, "voice": VOICES["en"]})(self.server.url, 60)
        if self.budget_mb:  # and the languages its rows speak beside the attack
            for lang in ("zh", "ja"):
                ws_attack({"type": "speak", "id": "w", "text": max_text(lang, 40)})(self.server.url, 60)
        self.prober = Prober(self.port)
        self.prober.wait_past(time.monotonic(), 30)

    def restart(self) -> None:
        self.stop()
        self.restarts += 1
        self._start()

    def stop(self) -> None:
        self.prober.stop()
        self.server.stop()

    def inference(self) -> psutil.Process | None:
        with contextlib.suppress(psutil.Error):
            return next(iter(self.server.ps.children()), None)
        return None

    def measure(self, key: str, name: str, proto: str, attack: Callable, seconds: float) -> dict:
        with contextlib.suppress(psutil.Error):
            wait_idle(self.server.ps, 30)  # what the last attack left running ends first
        time.sleep(2.0)
        t0 = time.monotonic()
        base = [s["ms"] for s in self.prober.window(t0 - 2.0, t0) if s["ok"]] or [float("nan")]
        server_rss = Rss(self.server.proc.pid)
        server_before = server_rss.reset()
        child = self.inference()
        child_rss = Rss(child.pid) if child is not None else None
        child_before = child_rss.reset() if child_rss is not None else 0
        cpu_before = sum(self.server.ps.cpu_times()[:2])
        try:
            details = attack(self, seconds)
        except Exception as exc:  # a refusal the attack did not expect: the row says so
            details = {"note": f"attack stopped: {type(exc).__name__}: {str(exc)[:120]}"}
        time.sleep(1.0)
        t1 = time.monotonic()
        try:
            cpu = (sum(self.server.ps.cpu_times()[:2]) - cpu_before) / (t1 - t0) * 100
        except psutil.Error:
            cpu = float("nan")
        self.prober.wait_past(t1)
        server_rss.stop()
        child_after = float("nan")
        if child_rss is not None:
            child_rss.stop()
            with contextlib.suppress(psutil.Error):
                wait_idle(child_rss.ps, 30)  # the run in flight when the client left ends first
                child_after = (child_rss.now() - child_before) / 2**20
        probes = self.prober.window(t0, t1)
        ws_probes = self.prober.window(t0, t1, "ws")
        during = [s["ms"] for s in probes] or [float("nan")]
        median = statistics.median(base)
        row = {
            "key": key, "attack": name, "protocol": proto, "seconds": round(t1 - t0, 1),
            "healthz_median_before_ms": round(median, 1),
            "stall_p50_ms": round(statistics.median(during) - median, 1),
            "stall_max_ms": round(max(during) - median, 1),
            "healthz_probes": len(probes), "healthz_failed": sum(not s["ok"] for s in probes),
            "ws_probes": len(ws_probes), "ws_failed": sum(not s["ok"] for s in ws_probes),
            "failures": sorted({s["err"] for s in probes + ws_probes if not s["ok"]})[:4],
            "server_rss_mb": round((server_rss.peak - server_before) / 2**20, 1),
            "inference_rss_mb": round((child_rss.peak - child_before) / 2**20, 1) if child_rss else float("nan"),
            "inference_rss_after_mb": round(child_after, 1),
            "server_cpu_pct": round(cpu),
            **details,
        }
        if "symptom_cpu_pct" in row:
            row["symptom"] = not cpu < row.pop("symptom_cpu_pct")
        if self.server.proc.poll() is not None:
            row["note"] = f"THE SERVER EXITED ({self.server.proc.returncode}); " + row.get("note", "")
        row["pass"] = (row["stall_max_ms"] < STALL_LIMIT_MS and row["server_rss_mb"] < RSS_LIMIT_MB
                       and not row["inference_rss_after_mb"] >= RSS_LIMIT_MB
                       and row["healthz_failed"] == 0 and row["ws_failed"] == 0
                       and self.server.proc.poll() is None)
        if row.get("reference"):
            row["pass"] = None  # not an attack: nothing to judge
        if self.server.proc.poll() is not None:
            self.restart()
        return row


def run_floods(args: argparse.Namespace, command: str) -> dict:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1,100 sockets of our own, at least
    chosen = set(args.attacks.split(",")) if args.attacks else None
    attacks = [a for a in FLOODS if chosen is None or a[0] in chosen]
    on_bus = [a for a in REDIS_FLOODS if (chosen is None or a[0] in chosen) and args.redis
              and shutil.which("redis-server")]
    budgeted = [a for a in BUDGET_FLOODS if chosen is None or a[0] in chosen]
    if chosen and len(attacks) + len(on_bus) + len(budgeted) != len(chosen):
        raise SystemExit(f"unknown attack in --attacks (or --no-redis, or no redis-server on PATH); known: "
                         f"{', '.join(a[0] for a in FLOODS + REDIS_FLOODS + BUDGET_FLOODS)}")
    machine = {"probe_ms_before": round(probe_ms(), 1), "load_before": os.getloadavg(), "cpus": os.cpu_count(),
               "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "own_nofile": hard}
    result: dict = {"command": command, "seconds_per_attack": args.seconds_per_attack, "floods": []}
    with tempfile.TemporaryDirectory(prefix="rtts-floods-") as tmp:
        machine["server_restarts"] = 0
        # The bus attacks on a server of their own with ``--bus``, after the others; the
        # budget's on one with ``--memory-budget``.
        for kind, chosen_attacks in (("", attacks), ("bus_", on_bus), ("budget_", budgeted)):
            if not chosen_attacks:
                continue
            redis = RedisServer(Path(tmp)) if kind == "bus_" else None
            try:
                rig = Rig(args, Path(tmp), redis, BUDGET_MB if kind == "budget_" else 0)
                machine["server_nofile"] = rig.nofile
                machine[f"{kind}server_command"] = rig.server.command
                try:
                    for key, name, proto, attack in chosen_attacks:
                        row = rig.measure(key, name, proto, attack, args.seconds_per_attack)
                        result["floods"].append(row)
                        print(json.dumps(row, ensure_ascii=False), flush=True)
                finally:
                    machine["server_restarts"] += rig.restarts
                    rig.stop()
            finally:
                if redis is not None:
                    redis.stop()
    machine.update(probe_ms_after=round(probe_ms(), 1), load_after=os.getloadavg())
    result["machine"] = machine
    return result


def floods_report(result: dict) -> str:
    m = result["machine"]
    load = lambda v: "/".join(f"{x:.1f}" for x in v)  # noqa: E731
    judged = [r for r in result["floods"] if r["pass"] is not None]
    passed = sum(r["pass"] for r in judged)
    symptom = {True: "**seen**", False: "gone"}
    verdict = {True: "pass", False: "**fail**", None: "—"}
    lines = [
        f"Measured {m['started']} on {m['cpus']} CPUs; host probe {m['probe_ms_before']:.0f} ms before, "
        f"{m['probe_ms_after']:.0f} ms after; load average {load(m['load_before'])} before, "
        f"{load(m['load_after'])} after.",
        "",
        f"Command: `{result['command']}`; {result['seconds_per_attack']:g} s per attack. Server: "
        f"`{m.get('server_command', m.get('bus_server_command', m.get('budget_server_command')))}` with "
        f"{m['server_nofile']} file descriptors"
        + (f" (the Redis rows: the same with `--bus` to a redis-server of the benchmark's own)"
           if "bus_server_command" in m and "server_command" in m else "")
        + (f" (the budget's rows: the same with `--memory-budget {BUDGET_MB}`, Kokoro's Mandarin and Japanese warm)"
           if "budget_server_command" in m and "server_command" in m else "")
        + (f", started again {m['server_restarts']} times after an attack killed it" if m["server_restarts"] else "")
        + ". The prober, in its own process from 127.0.0.200, sends `GET /healthz` every 20 ms and opens a "
          "WebSocket every second. *Stall*: its `/healthz` round trip during the attack minus its median in the 2 s "
          "before (p50 / max; a failed probe counts with the time it took). *Failed*: `/healthz` / WebSocket probes "
          "that failed. RSS: peak during the attack minus before; for the inference process also what is left once "
          "it is idle again (*after*): its peak is the working set of whatever it synthesizes, the same for a client "
          "that reads (the row marked *not an attack*), so it is the server process's peak and the inference "
          "process's *after* that are judged. Pass: stall < 100 ms, those RSS < 50 MB, no failed probe (the "
          "issue's thresholds). *Symptom*: the attack's own, where it has one besides those: another "
          "client of the attackers' address refused or `/readyz` 503 (idle Wyoming), no 2nd announcement within "
          f"{result['seconds_per_attack']:g} s (channels), server CPU ≥ {NAN_SPIN_CPU_PCT} % (NaN), a 500 or a "
          f"dropped connection (nested JSON), more than {DEAF_KERNEL_LIMIT // 1024} KiB in the kernel send queue of "
          "the server's socket to a client that never reads, 16 subscribes at once taking 100 ms or more after the "
          "channel names (Redis), the server opening more descriptors than the connections + 16 while Redis hangs, "
          "a client refused for memory it did not use (`memory_budget`, captioned whole bodies).",
        "",
        "| attack | protocol | stall p50 / max | failed | server RSS | inference RSS peak / after | server CPU | pass "
        "| symptom "
        "| also seen |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["floods"]:
        failed = f"{r['healthz_failed']}/{r['healthz_probes']} · {r['ws_failed']}/{r['ws_probes']}"
        lines.append(
            f"| {r['attack']} | {r['protocol']} | {max(0.0, r['stall_p50_ms']):.0f} / {r['stall_max_ms']:.0f} ms | "
            f"{failed} | {r['server_rss_mb']:+.1f} MB | {r['inference_rss_mb']:+.1f} / {r['inference_rss_after_mb']:+.1f} MB | "
            f"{r['server_cpu_pct']} % | "
            f"{verdict[r['pass']]} | {symptom.get(r.get('symptom'), '—')} | "
            f"{r.get('note', '').replace('|', '/')} |")
    with_symptom = [r for r in result["floods"] if "symptom" in r]
    lines += ["", f"{passed} of {len(judged)} attacks within the issue's thresholds; the attack's own "
                  f"symptom seen in {sum(r['symptom'] for r in with_symptom)} of the {len(with_symptom)} that have one."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hold", type=float, default=12.0, help="seconds an attacker reads before it leaves")
    ap.add_argument("--memory-seconds", type=float, default=120.0, help="longest a max-length request runs")
    ap.add_argument("--only-memory", action="store_true", help="skip the attacks")
    ap.add_argument("--langs", default="en,zh,ja", help="languages of the memory part")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--server-arg", action="append", default=[], help="extra argument for rtts serve")
    ap.add_argument("--only-floods", action="store_true",
                    help="only the floods and slow sockets of issue 20 (nothing else of this benchmark)")
    ap.add_argument("--seconds-per-attack", type=float, default=15.0,
                    help="how long each flood lasts (the counted ones stop at their count or 4x this)")
    ap.add_argument("--attacks", default="", help="comma-separated keys of the floods to run (default: all): "
                    + ",".join(a[0] for a in FLOODS + REDIS_FLOODS + BUDGET_FLOODS))
    ap.add_argument("--captioned-chars", type=int, default=5000,
                    help="characters of each non-streamed captioned request (captionedwhole)")
    ap.add_argument("--server-nofile", type=int, default=1024,
                    help="soft RLIMIT_NOFILE the flood server runs with (0: this process's own)")
    ap.add_argument("--no-redis", dest="redis", action="store_false",
                    help="skip the attacks through Redis (they need redis-server on PATH)")
    ap.add_argument("--write-doc", action="store_true",
                    help=f"write the floods' table into docs/benchmarks.md, section {FLOODS_HEADING!r}")
    args = ap.parse_args()
    command = " ".join(["python3", "benchmarks/hostile.py", *sys.argv[1:]])
    if args.only_floods:
        floods = run_floods(args, command)
        section = floods_report(floods)
        print()
        print(section)
        print(json.dumps(floods["machine"]))
        if args.json:
            args.json.write_text(json.dumps(floods, indent=1, ensure_ascii=False))
        if args.write_doc:
            latency.write_doc(section, FLOODS_BEGIN, FLOODS_END, FLOODS_HEADING)
            print(f"written to {latency.DOC.relative_to(ROOT)}")
        return 0
    machine = {"probe_ms_before": round(probe_ms(), 1), "load_before": os.getloadavg()}
    log = Path("/tmp/rtts-hostile.log")
    server = ServerProcess(0, log, *args.server_arg)
    result: dict = {"command": command, "attacks": [],
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
