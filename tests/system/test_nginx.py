"""Scale-out: two rtts processes behind a real nginx (Debian's package), configured as
docs/deployment.md says, on loopback ports, from a config written to a temp dir."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed

from rtts import protocol

from tests.conftest import Client, RttsProcess
from tests.ports import free_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(NGINX is None, reason="needs nginx: apt-get install nginx")]

PIPER = "piper/en_US-joe-medium"

# The same proxy settings as docs/deployment.md, with test paths and ports.
CONFIG = """
daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;

    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}
    upstream rtts {{
        least_conn;
        server 127.0.0.1:{a} max_fails=1 fail_timeout=10s;
        server 127.0.0.1:{b} max_fails=1 fail_timeout=10s;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://rtts;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_next_upstream error timeout http_503;
            proxy_buffering off;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
        }}
    }}
}}
"""


def readyz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@contextlib.contextmanager
def nginx_in_front(tmp: Path, a: int, b: int) -> Iterator[str]:
    """A real nginx on a free loopback port in front of rtts ports ``a`` and ``b``, configured
    as docs/deployment.md says, from ``tmp``; yields its WebSocket URL."""
    tmp.mkdir(exist_ok=True)
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(CONFIG.format(tmp=tmp, a=a, b=b, port=port))
    nginx = subprocess.Popen([NGINX, "-p", str(tmp), "-c", str(conf)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and nginx.poll() is None, (tmp / "error.log").read_text()
                time.sleep(0.1)
        yield f"ws://127.0.0.1:{port}/ws"
    finally:
        nginx.send_signal(signal.SIGQUIT)
        try:
            nginx.wait(10)
        except subprocess.TimeoutExpired:
            nginx.kill()
            nginx.wait()


def speak_ok(c: Client, utt_id: str) -> None:
    c.send(type="speak", id=utt_id, text="Through the proxy.", voice=PIPER)
    msgs = c.utterance(utt_id)
    assert msgs[-1].reason == "done" and any(isinstance(m, protocol.Audio) for m in msgs)


def test_two_instances_behind_nginx(tmp_path):
    args = ("--drain-grace", "2", "--shutdown-timeout", "8", "--trusted-proxies", "127.0.0.1", "--preload",
            "--default-voice", "piper/en_US-joe-medium")
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    with RttsProcess(tmp_path / "a", *args) as a, RttsProcess(tmp_path / "b", *args) as b:
        a.wait_listening(), b.wait_listening()
        a.wait_for("loaded piper"), b.wait_for("loaded piper")
        with nginx_in_front(tmp_path / "nginx", a.port, b.port) as url:
            # 1. least_conn spreads clients over both instances.
            clients = [Client(url) for _ in range(4)]
            for i, c in enumerate(clients):
                assert isinstance(c.recv(), protocol.Ready)
                speak_ok(c, f"u{i}")
            on_a, on_b = readyz(a.port)[1]["connections"], readyz(b.port)[1]["connections"]
            assert (on_a, on_b) == (2, 2)

            # 2. SIGTERM to A: its /readyz turns 503 while its clients are still connected.
            a.signal(signal.SIGTERM)
            deadline = time.monotonic() + 2
            while readyz(a.port)[0] != 503:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            status, body = readyz(a.port)
            assert status == 503 and body["draining"] is True and body["connections"] == 2
            # New clients meanwhile are sent to B (A answers 503, nginx tries the next one).
            newcomer = Client(url)
            assert isinstance(newcomer.recv(), protocol.Ready)
            assert readyz(b.port)[1]["connections"] == 3

            # 3. A closes its clients with 1001; they reconnect through nginx and land on B.
            moved = 0
            for i, c in enumerate(clients):
                try:
                    c.send(type="ping", t=i)
                    msg = c.recv(timeout=6)
                    assert isinstance(msg, protocol.Pong)
                    c.recv(timeout=4)  # A's clients are closed within the grace; B's stay open
                    raise AssertionError("unexpected message")
                except TimeoutError:
                    continue  # on B: nothing to say
                except ConnectionClosed as closed:
                    assert closed.rcvd is not None and closed.rcvd.code == 1001
                    c.close()
                    clients[i] = Client(url)
                    assert isinstance(clients[i].recv(), protocol.Ready)
                    speak_ok(clients[i], f"again{i}")
                    moved += 1
            assert moved == 2
            assert a.proc.wait(10) == 0
            assert readyz(b.port)[1]["connections"] == 5
            for c in [*clients, newcomer]:
                c.close()
    assert "Traceback" not in a.log + b.log
