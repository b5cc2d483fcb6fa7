#!/usr/bin/env python3
"""Another client of an rtts server, in a process of its own: what an attack costs it.

    python3 benchmarks/prober.py --port P [--source 127.0.0.200] [--interval 0.02] [--ws-every 1]

Every ``--interval`` seconds it sends ``GET /healthz`` over a fresh TCP connection (the
server closes every plain HTTP connection after its answer, so there is no keep-alive to
use) and, every ``--ws-every`` seconds, opens a WebSocket and waits for its first frame
(the ``ready``). It prints one JSON line per try on stdout: ``{"t": monotonic start,
"ms": elapsed, "kind": "healthz"|"ws", "ok": bool, "err": why}``. CLOCK_MONOTONIC is the
machine's, so the parent compares these times with its own. It binds ``--source``, a
loopback address of its own, so the caps that count an attacker's address (127.0.0.1)
do not count it: it is *another* client. A separate process, so that its timings are
not the attacker's threads waiting for the GIL. It runs until its stdin closes.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sys
import threading
import time


def connect_from(port: int, source: str, timeout: float, rcvbuf: int = 0) -> socket.socket:
    """A TCP connection to 127.0.0.1:``port`` from ``source``; ``rcvbuf`` (set before the
    connection, so the window stays small) keeps what piles up in this end's kernel small."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(timeout)
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
    except BaseException:
        s.close()
        raise
    return s


def read_head(s: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionResetError(f"closed after {len(data)} bytes of the response head")
        data += chunk
    return data


def healthz(port: int, source: str, timeout: float) -> None:
    """One ``GET /healthz``; raises unless it is answered ``200 ok``."""
    with connect_from(port, source, timeout) as s:
        s.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        data = read_head(s)
        status = data.split(b" ", 2)[1] if data.startswith(b"HTTP/1.1 ") else b"?"
        if status != b"200":
            raise ConnectionError(f"HTTP {status.decode(errors='replace')}")


def websocket(port: int, source: str, timeout: float) -> None:
    """A WebSocket opened up to its first frame (``ready``); raises for a refusal (429, 503)."""
    with connect_from(port, source, timeout) as s:
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        data = read_head(s)
        status = data.split(b" ", 2)[1] if data.startswith(b"HTTP/1.1 ") else b"?"
        if status != b"101":
            raise ConnectionError(f"HTTP {status.decode(errors='replace')}")
        rest = data.split(b"\r\n\r\n", 1)[1]
        while len(rest) < 2:  # the first frame's header at least
            chunk = s.recv(4096)
            if not chunk:
                raise ConnectionError("closed before ready")
            rest += chunk


def _loop(kind: str, probe, port: int, source: str, every: float, timeout: float, lock: threading.Lock) -> None:
    while True:
        t0 = time.monotonic()
        err = None
        try:
            probe(port, source, timeout)
        except (OSError, ValueError) as exc:
            err = f"{type(exc).__name__}: {exc}"[:120]
        elapsed = time.monotonic() - t0
        line = json.dumps({"t": t0, "ms": round(elapsed * 1000, 2), "kind": kind, "ok": err is None, "err": err})
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        time.sleep(max(0.0, every - elapsed))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--source", default="127.0.0.200", help="loopback address to connect from")
    ap.add_argument("--interval", type=float, default=0.02, help="seconds between /healthz probes")
    ap.add_argument("--ws-every", type=float, default=1.0, help="seconds between WebSocket probes (0: none)")
    ap.add_argument("--timeout", type=float, default=10.0, help="a probe slower than this is a failure")
    args = ap.parse_args()
    lock = threading.Lock()
    threads = [threading.Thread(target=_loop, daemon=True,
                                args=("healthz", healthz, args.port, args.source, args.interval, args.timeout, lock))]
    if args.ws_every > 0:
        threads.append(threading.Thread(target=_loop, daemon=True,
                                        args=("ws", websocket, args.port, args.source, args.ws_every, args.timeout,
                                              lock)))
    for t in threads:
        t.start()
    sys.stdin.read()  # the parent closes it (or dies): time to go
    return 0


if __name__ == "__main__":
    sys.exit(main())
