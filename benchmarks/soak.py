#!/usr/bin/env python3
"""Soak test: N clients for T minutes against a real ``rtts serve`` process.

    python3 benchmarks/soak.py --clients 8 --minutes 10 --json /tmp/soak.json

Starts rtts as a child process (its own port, an empty models dir, ``--idle-unload 0``,
``--send-stall 4``) and runs ``--clients`` asyncio clients, each looping over a seeded
random mix of what real clients do:

* ``speak``      a sentence or two, played back at real time (a player that reads as it plays);
* ``append``     an LLM-style stream of small appends with pauses, then ``flush``;
* ``cancel``     a long text cancelled after the first audio;
* ``interrupt``  a long text, then a barge-in ``speak`` with ``interrupt: true``;
* ``vanish``     a long text, then the TCP connection dropped mid-audio (no close handshake);
* ``slow``       a reader that stops reading for 1.5 s at a time (paced by backpressure);
* ``stall``      a client that never reads again: the server must drop it after the stall limit;
* ``garbage``    random bytes, a text frame and an unknown type: each answered by ``error``.

Every 5 s it samples the RSS, open fds and threads of the server and its inference
process (psutil) and the server's asyncio task count and open connections
(``/metrics``). It reports the RSS slope after warm-up (least
squares, MB/hour), counts before and after (fds, threads, tasks, connections, once idle),
unexpected errors, and underruns: audio frames that arrived after the moment a player
that started with a 200 ms buffer would have needed them. Exit status 0 when nothing
unexpected happened and the counts came back to baseline, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import psutil
import websockets

ROOT = Path(__file__).resolve().parent.parent
PIPER = "piper/en_US-joe-medium"
KOKORO = "kokoro/jf_alpha"
SHORT = [
    "The next train leaves from platform four.",
    "Welcome back! Your order is ready.",
    "Please hold the handrail, and mind the step.",
    "It is ten past nine, and the doors are closing.",
]
LONG = (
    "Good morning, and welcome aboard. The next stop is Central Station, where you can change "
    "for the airport line. Please mind the gap when leaving the train, and take all of your "
    "belongings with you. Thank you for travelling with us today."
)
JITTER_BUFFER_S = 0.2
TCP_ESTABLISHED = 1  # tcp_info.tcpi_state
KINDS = ("speak", "append", "cancel", "interrupt", "vanish", "slow", "stall", "garbage")
WEIGHTS = (30, 15, 10, 8, 8, 8, 3, 8)


@dataclass
class Tally:
    actions: Counter = field(default_factory=Counter)
    utterances: Counter = field(default_factory=Counter)  # by end reason
    unexpected: list[str] = field(default_factory=list)
    expected_errors: Counter = field(default_factory=Counter)
    underruns: int = 0
    frames: int = 0
    ttfa_ms: list[float] = field(default_factory=list)
    stalled_dropped: int = 0


def pack(**msg: Any) -> bytes:
    return msgpack.packb(msg)


async def recv_msg(ws: Any, timeout: float = 120) -> dict[str, Any]:
    data = await asyncio.wait_for(ws.recv(), timeout)
    return msgpack.unpackb(data)


async def until_end(ws: Any, utt: str, tally: Tally, *, paced: bool = False, pause_every: int = 0) -> dict[str, Any]:
    """Read one utterance to its ``end``; count underruns as a real-time player would."""
    t0: float | None = None
    rate = 24000
    n = 0
    while True:
        msg = await recv_msg(ws)
        kind = msg["type"]
        if kind == "error" and msg.get("id") != utt:
            tally.unexpected.append(f"error {msg}")
            continue
        if msg.get("id") != utt:
            continue
        if kind == "start":
            rate = msg["sample_rate"]
        elif kind == "audio":
            now = time.monotonic()
            tally.frames += 1
            n += 1
            if t0 is None:
                t0 = now
            elif now > t0 + JITTER_BUFFER_S + msg["pts"] / rate + 0.02:
                tally.underruns += 1
                t0 = now - msg["pts"] / rate - JITTER_BUFFER_S  # the player rebuffers
            if paced:
                ahead = t0 + msg["pts"] / rate - time.monotonic()
                if ahead > 0.5:
                    await asyncio.sleep(ahead - 0.5)  # keep ~0.5 s in hand, like a player
            if pause_every and n % pause_every == 0:
                await asyncio.sleep(1.5)
        elif kind == "error":
            tally.expected_errors[msg["code"]] += 1
        elif kind == "end":
            tally.utterances[msg["reason"]] += 1
            if msg["reason"] == "done" and msg["stats"]["ttfa_ms"] >= 0:
                tally.ttfa_ms.append(msg["stats"]["ttfa_ms"])
            return msg


async def connect(url: str, **kw: Any) -> Any:
    ws = await websockets.connect(url, compression=None, open_timeout=30, **kw)
    ready = await recv_msg(ws)
    assert ready["type"] == "ready", ready
    return ws


async def one_action(url: str, kind: str, rng: random.Random, tally: Tally, seq: int, stall_s: float) -> None:
    voice = PIPER if rng.random() < 0.8 else KOKORO
    uid = f"u{seq}"
    if kind == "stall":
        # Never read again: the server must drop this connection after the stall limit.
        sock = await asyncio.to_thread(raw_stalled_client, url, pack(type="speak", id=uid, text=LONG * 3, voice=PIPER))
        # Generous: under overload the server may take a while to have stall-worth of audio for it.
        deadline = time.monotonic() + stall_s + 120
        dropped = False
        while time.monotonic() < deadline and not dropped:
            await asyncio.sleep(0.5)
            # Reading would unstall it, so look at the TCP state instead: the server resets it.
            dropped = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0] != TCP_ESTABLISHED
        sock.close()
        if dropped:
            tally.stalled_dropped += 1
        else:
            tally.unexpected.append("a stalled client was not dropped")
        return
    ws = await connect(url, max_queue=2 if kind == "slow" else 16)
    try:
        if kind == "speak":
            text = " ".join(rng.sample(SHORT, rng.randint(1, 2)))
            await ws.send(pack(type="speak", id=uid, text=text, voice=voice))
            await until_end(ws, uid, tally, paced=True)
        elif kind == "append":
            words = LONG.split()
            i = 0
            while i < len(words):
                k = rng.randint(1, 4)
                await ws.send(pack(type="append", id=uid, text=" ".join(words[i : i + k]) + " ", voice=voice))
                i += k
                await asyncio.sleep(rng.uniform(0.0, 0.08))
            await ws.send(pack(type="flush", id=uid))
            await until_end(ws, uid, tally)
        elif kind == "cancel":
            await ws.send(pack(type="speak", id=uid, text=LONG, voice=voice))
            while (await recv_msg(ws))["type"] != "audio":
                pass
            await ws.send(pack(type="cancel", id=uid))
            end = await until_end(ws, uid, tally)
            if end["reason"] != "cancelled":
                tally.unexpected.append(f"cancel ended with {end['reason']}")
        elif kind == "interrupt":
            await ws.send(pack(type="speak", id=uid, text=LONG, voice=voice))
            while (await recv_msg(ws))["type"] != "audio":
                pass
            await ws.send(pack(type="speak", id=uid + "b", text=rng.choice(SHORT), voice=voice, interrupt=True))
            await until_end(ws, uid, tally)
            await until_end(ws, uid + "b", tally)
        elif kind == "vanish":
            await ws.send(pack(type="speak", id=uid, text=LONG, voice=voice))
            while (await recv_msg(ws))["type"] != "audio":
                pass
            ws.transport.abort()
            return
        elif kind == "slow":
            await ws.send(pack(type="speak", id=uid, text=LONG, voice=voice))
            await until_end(ws, uid, tally, pause_every=60)
        elif kind == "garbage":
            for data, code in (
                (rng.randbytes(rng.randint(1, 60)), None),
                ("a text frame", "bad_frame"),
                (pack(type="dance"), "unknown_type"),
                (pack(type="speak", id="x", text="x" * 6000), "text_too_long"),
            ):
                await ws.send(data)
                await ws.send(pack(type="ping", t=seq))
                got = []
                while True:
                    msg = await recv_msg(ws)
                    if msg["type"] == "pong":
                        break
                    got.append(msg)
                codes = [m.get("code") for m in got if m["type"] == "error"]
                if (code is not None and codes != [code]) or (code is None and len(codes) > 1):
                    tally.unexpected.append(f"garbage {data[:20]!r} got {got}")
                for c in codes:
                    tally.expected_errors[c] += 1
        await ws.close()
    except (websockets.ConnectionClosed, TimeoutError) as exc:
        tally.unexpected.append(f"{kind}: {type(exc).__name__} {exc}")
        ws.transport.abort()


async def client_loop(url: str, idx: int, clients: int, until: float, tally: Tally, stall_s: float, seed: int,
                      think_s: tuple[float, float]) -> None:
    rng = random.Random(seed * 1000 + idx)
    seq = 0
    # First round: the clients share out every kind of action between them, so even a
    # short run tries each; then a weighted random mix until the time is up.
    first = list(KINDS[idx::clients])
    while time.monotonic() < until or first:
        kind = first.pop(0) if first else rng.choices(KINDS, WEIGHTS)[0]
        seq += 1
        tally.actions[kind] += 1
        try:
            await one_action(url, kind, rng, tally, seq, stall_s)
        except Exception as exc:  # anything a client trips over is a finding, not a crash of the soak
            tally.unexpected.append(f"{kind}: {type(exc).__name__}: {exc}")
        await asyncio.sleep(rng.uniform(*think_s))


def raw_stalled_client(url: str, first: bytes) -> socket.socket:
    """A WebSocket on a bare socket with a 4 KiB receive buffer that sends ``first`` and never reads."""
    import base64

    host, port = re.match(r"ws://([^:/]+):(\d+)", url).groups()  # type: ignore[union-attr]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET /ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    mask = os.urandom(4)
    n = len(first)
    length = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
    sock.sendall(b"\x82" + length + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(first)))
    sock.setblocking(False)
    return sock


class Server:
    """rtts serve as a child process, with its log kept."""

    def __init__(self, stall_s: float, loop: str, cache_dir: Path | None) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="rtts-soak-")
        cmd = [
            sys.executable, "-m", "rtts", "serve", "--host", "127.0.0.1", "--port", "0",
            "--models-dir", self.tmp.name, "--idle-unload", "0", "--send-stall", str(stall_s),
            "--loop", loop, "--max-connections-per-ip", "64",
        ]
        if cache_dir is not None:
            cmd += ["--cache-dir", str(cache_dir)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = self._wait_port()
        self.ps = psutil.Process(self.proc.pid)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def _wait_port(self) -> int:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/ws", line)
                if m:
                    return int(m.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("rtts did not start:\n" + "".join(self.lines))

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for name in ("rtts_event_loop_tasks", "rtts_connections_open", "rtts_clients_stalled_total",
                     "rtts_send_buffer_peak_bytes", "rtts_queue_depth", "rtts_inference_busy_seconds"):
            m = re.search(rf"^{name} (\S+)$", text, re.M)
            if m:
                out[name] = float(m.group(1))
        return out

    def sample(self, t0: float) -> dict[str, float]:
        # The models run in the server's child (the inference process): count it too.
        procs = [self.ps, *self.ps.children(recursive=True)]
        totals = {"rss": 0, "fds": 0, "threads": 0}
        for proc in procs:
            try:
                totals["rss"] += proc.memory_info().rss
                totals["fds"] += proc.num_fds()
                totals["threads"] += proc.num_threads()
            except psutil.NoSuchProcess:
                if proc is self.ps:
                    raise
        return {
            "t": round(time.monotonic() - t0, 1),
            "rss_mb": round(totals["rss"] / 2**20, 2),
            "fds": totals["fds"],
            "threads": totals["threads"],
            **self.metrics(),
        }

    def stop(self) -> int:
        self.proc.terminate()
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = -9
        self._reader.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self.tmp.cleanup()
        return code


def slope_mb_per_hour(samples: list[dict[str, float]]) -> float:
    xs = [s["t"] / 3600 for s in samples]
    ys = [s["rss_mb"] for s in samples]
    if len(xs) < 3:
        return float("nan")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else float("nan")


async def settle(server: Server, t0: float, seconds: float = 8.0) -> dict[str, float]:
    """Wait for the server to go idle (no connections, empty queue); then sample."""
    deadline = time.monotonic() + seconds
    s = server.sample(t0)
    while time.monotonic() < deadline and (s.get("rtts_connections_open", 0) or s.get("rtts_queue_depth", 0)):
        await asyncio.sleep(0.25)
        s = server.sample(t0)
    await asyncio.sleep(1.0)
    return server.sample(t0)


async def soak(clients: int, minutes: float, stall_s: float = 4.0, loop: str = "auto",
               cache_dir: Path | None = None, seed: int = 1, warmup_s: float | None = None,
               think_s: tuple[float, float] = (0.5, 3.0)) -> dict[str, Any]:
    server = Server(stall_s, loop, cache_dir)
    url = f"ws://127.0.0.1:{server.port}/ws"
    tally = Tally()
    t0 = time.monotonic()
    try:
        # Warm up: load both voices once, so the baseline includes the models.
        ws = await connect(url)
        for i, voice in enumerate((PIPER, KOKORO)):
            await ws.send(pack(type="speak", id=f"w{i}", text="Warming up.", voice=voice))
            await until_end(ws, f"w{i}", Tally())
        await ws.close()
        baseline = await settle(server, t0)
        samples = [baseline]
        until = time.monotonic() + minutes * 60
        tasks = [asyncio.create_task(client_loop(url, i, clients, until, tally, stall_s, seed, think_s)) for i in range(clients)]
        while time.monotonic() < until:
            await asyncio.sleep(min(5.0, max(0.1, until - time.monotonic())))
            samples.append(server.sample(t0))
        await asyncio.wait_for(asyncio.gather(*tasks), stall_s + 300)
        final = await settle(server, t0)
        samples.append(final)
    finally:
        code = server.stop()
    # RSS climbs while ONNX Runtime's arenas and glibc's heaps meet their largest inputs;
    # the slope is taken after that (a quarter of the run, at least a minute).
    run_s = samples[-2]["t"] - baseline["t"] if len(samples) > 2 else 1.0
    busy = (samples[-2].get("rtts_inference_busy_seconds", 0) - baseline.get("rtts_inference_busy_seconds", 0)) / run_s
    warm = warmup_s if warmup_s is not None else max(60.0, minutes * 60 * 0.25)
    steady = [s for s in samples if s["t"] >= baseline["t"] + warm]
    log = "".join(server.lines)
    problems = [line.rstrip() for line in server.lines if re.search(r" (ERROR|CRITICAL) |Traceback", line)]
    ttfa = sorted(tally.ttfa_ms)
    result = {
        "clients": clients,
        "minutes": minutes,
        "loop": loop,
        "actions": dict(tally.actions),
        "utterances": dict(tally.utterances),
        "frames": tally.frames,
        "underruns": tally.underruns,
        "ttfa_ms_p50": ttfa[len(ttfa) // 2] if ttfa else None,
        "ttfa_ms_p95": ttfa[int(len(ttfa) * 0.95)] if ttfa else None,
        "expected_errors": dict(tally.expected_errors),
        "unexpected": tally.unexpected[:50],
        "unexpected_count": len(tally.unexpected),
        "stalled_dropped": tally.stalled_dropped,
        "stalled_counted_by_server": final.get("rtts_clients_stalled_total"),
        "send_buffer_peak_bytes": final.get("rtts_send_buffer_peak_bytes"),
        "rss_mb": {"baseline": baseline["rss_mb"], "peak": max(s["rss_mb"] for s in samples), "end": final["rss_mb"]},
        "rss_slope_mb_per_hour": round(slope_mb_per_hour(steady), 2),
        "rss_slope_after_s": warm,
        "inference_busy": round(busy, 3),
        "fds": {"baseline": baseline["fds"], "peak": max(s["fds"] for s in samples), "end": final["fds"]},
        "threads": {"baseline": baseline["threads"], "peak": max(s["threads"] for s in samples), "end": final["threads"]},
        "tasks": {"baseline": baseline.get("rtts_event_loop_tasks"),
                  "peak": max(s.get("rtts_event_loop_tasks", 0) for s in samples),
                  "end": final.get("rtts_event_loop_tasks")},
        "connections_end": final.get("rtts_connections_open"),
        "server_log_problems": problems[:20],
        "server_exit": code,
        "warnings_logged": len(re.findall(r" WARNING ", log)),
        "samples": samples,
    }
    result["ok"] = (
        not tally.unexpected and not problems and code == 0
        and final["fds"] <= baseline["fds"] + 2 and final["threads"] <= baseline["threads"]
        and final.get("rtts_event_loop_tasks") == baseline.get("rtts_event_loop_tasks")
        and final.get("rtts_connections_open") == 0
    )
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--stall", type=float, default=4.0, help="the server's --send-stall")
    ap.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"])
    ap.add_argument("--cache-dir", type=Path, default=ROOT / ".pytest-cache-models")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--think", type=float, nargs=2, default=(0.5, 3.0), metavar=("MIN", "MAX"),
                    help="seconds a client waits between actions (uniform)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = asyncio.run(soak(args.clients, args.minutes, args.stall, args.loop, args.cache_dir, args.seed,
                              think_s=tuple(args.think)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
