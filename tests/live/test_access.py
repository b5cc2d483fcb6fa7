"""Who gets in: Origin allow-list, token in the handshake, connection caps — on a real server."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

import msgpack
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from rtts import protocol, tokens

from tests.conftest import Client, RttsProcess, ServerThread, make_config

TOKEN = "kiosk-7 s3cret/+="  # spaces and base64 specials: must survive the subprotocol encoding


def status_of(url: str, **kw) -> int:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidStatus) as info:
        with connect(url, compression=None, open_timeout=10, **kw):
            pass
    return info.value.response.status_code


# ---------------------------------------------------------------- live server


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory):
    cfg = make_config(
        tmp_path_factory.mktemp("guarded"),
        token=TOKEN,
        max_connections=4,
        max_connections_per_ip=2,
        trusted_proxies=("127.0.0.1",),
        allow_origin=("https://kiosk.example",),
        max_text_chars=900,
        max_utterances=5,
    )
    with ServerThread(cfg) as srv:
        yield srv


def test_token_in_subprotocol_skips_hello(guarded: ServerThread):
    with connect(guarded.url, compression=None, subprotocols=["rtts.v1", tokens.encode_token(TOKEN)]) as ws:
        assert ws.subprotocol == "rtts.v1"
        assert TOKEN not in str(ws.response.headers) and "rtts.auth" not in str(ws.response.headers)
        ready = protocol.decode_server(ws.recv(10))
        assert isinstance(ready, protocol.Ready)
        assert ready.limits == {
            "max_text_chars": 900,
            "max_message_bytes": 65536,
            "max_utterances": 5,
            "message_rate": 200.0,
            "message_burst": 64,
            "max_audio_ms": 600000,
            "max_pause_ms": 60000,
            "max_connections": 4,
            "max_connections_per_ip": 2,
            "send_buffer_bytes": 262144,
            "send_stall_ms": 30000,
            "channel_queue": 16,
            "memory_budget_mb": round(guarded.config.memory_budget or 0),  # the cgroup's cap, if any
            "sync_max_lead_ms": 2000,
        }
        ws.send(msgpack.packb({"type": "ping", "t": 1}))
        pong = protocol.decode_server(ws.recv(10))
        assert isinstance(pong, protocol.Pong) and pong.t == 1


def test_wrong_token_in_subprotocol_is_401_before_the_upgrade(guarded: ServerThread):
    assert status_of(guarded.url, subprotocols=["rtts.v1", tokens.encode_token("guess")]) == 401
    assert status_of(guarded.url, subprotocols=["rtts.v1", "rtts.auth.!!"]) == 401


def test_without_the_header_token_hello_must_carry_it(guarded: ServerThread):
    with Client(guarded.url) as c:
        c.send(type="hello", v=1, token="guess")
        err = c.recv()
        assert isinstance(err, protocol.Error) and err.code == "unauthorized"
    with Client(guarded.url) as c:
        c.send(type="hello", v=1, token=TOKEN)
        assert isinstance(c.recv(), protocol.Ready)


def test_origin_allow_list(guarded: ServerThread):
    assert status_of(guarded.url, origin="https://evil.example") == 403
    assert status_of(guarded.url, origin="http://localhost:3000") == 403  # an allow-list replaces the default
    with connect(guarded.url, compression=None, origin="https://kiosk.example") as ws:
        ws.send(msgpack.packb({"type": "hello", "v": 1, "token": TOKEN}))
        assert isinstance(protocol.decode_server(ws.recv(10)), protocol.Ready)


def test_default_origin_rule_on_a_server_without_a_list(server: ServerThread):
    own = f"http://127.0.0.1:{server.server.port}"  # type: ignore[union-attr]
    with connect(server.url, compression=None, origin=own) as ws:
        assert isinstance(protocol.decode_server(ws.recv(10)), protocol.Ready)
    with connect(server.url, compression=None, origin="http://localhost:8000") as ws:
        assert isinstance(protocol.decode_server(ws.recv(10)), protocol.Ready)
    assert status_of(server.url, origin="https://evil.example") == 403


def readyz(srv: ServerThread) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(srv.http + "/readyz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_caps_per_address_and_in_total(guarded: ServerThread):
    def open_as(address: str):  # type: ignore[no-untyped-def]
        return Client(guarded.url, additional_headers={"X-Forwarded-For": address},
                      subprotocols=["rtts.v1", tokens.encode_token(TOKEN)])

    a1, a2 = open_as("192.0.2.1"), open_as("192.0.2.1")
    with pytest.raises(InvalidStatus) as info:
        open_as("192.0.2.1")
    assert info.value.response.status_code == 429
    assert info.value.response.headers["Retry-After"] == "1"
    b1, b2 = open_as("192.0.2.2"), open_as("192.0.2.2")
    assert readyz(guarded)[0] == 503 and readyz(guarded)[1]["full"] is True
    with pytest.raises(InvalidStatus) as info:
        open_as("192.0.2.3")
    assert info.value.response.status_code == 503
    a1.close()
    deadline = time.monotonic() + 5
    while guarded.server.connections >= 4 and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.02)
    c1 = open_as("192.0.2.3")  # the slot came back
    assert readyz(guarded)[0] == 503
    for ws in (a2, b1, b2, c1):
        ws.close()
    deadline = time.monotonic() + 5
    while readyz(guarded)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    status, body = readyz(guarded)
    assert status == 200 and body["connections"] == 0


def test_failed_handshakes_give_their_slot_back(guarded: ServerThread):
    port = guarded.server.port  # type: ignore[union-attr]
    for _ in range(6):  # more than the per-address cap
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            # An upgrade request without Sec-WebSocket-Key: admitted, then refused by websockets.
            s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      b"Sec-WebSocket-Version: 13\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 400")
    deadline = time.monotonic() + 5
    while guarded.server.connections and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.02)
    assert guarded.server.connections == 0  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_token_never_reaches_the_log(tmp_path):
    """Debug logging, a token in the header, in hello and in /tts: not one copy in the log."""
    with RttsProcess(tmp_path, "--log-level", "debug", env={"RTTS_TOKEN": TOKEN}) as proc:
        proc.wait_listening()
        with connect(proc.url, compression=None, subprotocols=["rtts.v1", tokens.encode_token(TOKEN)]) as ws:
            ws.recv(10)
            ws.send(msgpack.packb({"type": "hello", "v": 1, "token": TOKEN}))
            ws.recv(10)
        assert status_of(proc.url, subprotocols=["rtts.v1", tokens.encode_token(TOKEN + "x")]) == 401
        with Client(proc.url) as c:
            c.send(type="hello", v=1, token=TOKEN + "x")
            c.recv()
        q = urllib.parse.urlencode({"text": "Hi.", "token": TOKEN})
        with urllib.request.urlopen(f"{proc.http}/tts?{q}", timeout=120) as r:
            assert r.status == 200
        assert proc.stop() == 0
    log = proc.log
    assert "DEBUG" in log and "connected from" in log  # debug logging was on
    encoded = tokens.encode_token(TOKEN)[len("rtts.auth.") :]
    for needle in (TOKEN, encoded, TOKEN.encode().hex(), "kiosk-7"):
        assert needle not in log


def test_access_settings_from_flags_and_environment(tmp_path):
    import argparse

    from rtts import config

    (tmp_path / "token").write_text("tok-1\n")
    parser = argparse.ArgumentParser()
    config.add_flags(parser)
    cfg = config.from_args(
        parser.parse_args(["--token-file", str(tmp_path / "token"), "--allow-origin", "https://a.example, https://b.example"]),
        {},
    )
    assert cfg.token == "tok-1" and cfg.allow_origin == ("https://a.example", "https://b.example")
    env = {"RTTS_TOKEN_FILE": str(tmp_path / "token"), "RTTS_PRELOAD": "yes", "RTTS_TRUSTED_PROXIES": "10.0.0.1 10.0.0.2"}
    cfg = config.from_args(parser.parse_args([]), env)
    assert cfg.token == "tok-1" and cfg.preload is True and cfg.trusted_proxies == ("10.0.0.1", "10.0.0.2")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        config.from_args(parser.parse_args(["--token-file", str(tmp_path / "empty")]), {})
    with pytest.raises(ValueError, match="shutdown-timeout"):
        config.Config(drain_grace=5, shutdown_timeout=5)
