"""Keepalive pings on real sockets: a client that plays as it reads stays, a silent peer goes.

The server's keepalive is shortened to 1 s (interval and timeout) so that the cases
take seconds, not minutes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from websockets.sync.client import connect

from rtts.serve import server as server_module
from tests.conftest import ServerThread, make_config
from tests.rawws import open_raw

pytestmark = pytest.mark.slow

PIPER = "piper/en_US-joe-medium"
TEXT = " ".join(["The next train to the airport leaves from platform four in ten minutes."] * 5)


@pytest.fixture
def quick_keepalive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerThread]:
    monkeypatch.setattr(server_module, "KEEPALIVE_S", 1.0)
    with ServerThread(make_config(tmp_path)) as srv:
        yield srv


def test_a_client_that_plays_as_it_reads_is_not_dropped(quick_keepalive: ServerThread) -> None:
    # It reads one 20 ms frame per 20 ms, so the server's pings wait behind seconds of
    # audio in its buffers and are answered late: seconds after the 1 s timeout.
    with connect(quick_keepalive.url, compression=None, max_queue=1, open_timeout=30) as ws:
        ws.recv(30)  # ready
        ws.send(msgpack.packb({"type": "speak", "id": "a", "text": TEXT, "voice": PIPER}))
        frames, started = 0, time.monotonic()
        while True:
            msg = msgpack.unpackb(ws.recv(60))
            if msg["type"] == "audio":
                frames += 1
                time.sleep(max(0.0, started + frames * 0.02 - time.monotonic()))
            elif msg["type"] == "end":
                break
        assert msg["reason"] == "done"
        assert frames * 0.02 > 10  # long enough for several pings to have waited
        ws.send(msgpack.packb({"type": "ping", "id": "p"}))
        assert msgpack.unpackb(ws.recv(10))["type"] == "pong"


def test_a_peer_that_never_answers_a_ping_is_closed(quick_keepalive: ServerThread) -> None:
    assert quick_keepalive.server is not None
    sock = open_raw(quick_keepalive.server.port)  # upgraded, then never reads or writes again
    try:
        sock.settimeout(10)
        deadline = time.monotonic() + 10
        got = b""
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break  # closed by the server
            got += chunk
            time.sleep(0.5)  # reads (so the close can arrive) but answers no ping
        assert time.monotonic() < deadline, "the server kept a peer that answers no ping"
        assert b"keepalive ping timeout" in got
    finally:
        sock.close()

