"""Plain HTTP on the WebSocket port (rtts/serve/plain_http.py), against a real server and voices.

/tts streams as it synthesizes, whatever the WebSocket handshake timeout; it obeys the
Origin rule, the token and the connection caps; HEAD, OPTIONS and other methods are
answered as HTTP says; sockets that never send a request cannot lock anyone out.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import time
import urllib.parse
import wave

import numpy as np
import pytest

from rtts import protocol
from tests.conftest import Client, ServerThread, make_config
from tests.live.test_server import fetch

pytestmark = pytest.mark.slow

PIPER = "piper/en_US-joe-medium"
KOKORO = "kokoro/jf_alpha"
TOKEN = "http-secret"


def request(srv: ServerThread, method: str, target: str, headers: dict[str, str] | None = None,
            timeout: float = 120) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.server.port, timeout=timeout)  # type: ignore[union-attr]
    try:
        conn.request(method, target, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def raw(srv: ServerThread, data: bytes, timeout: float = 30) -> bytes:
    """Send bytes as they are; everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", srv.server.port), timeout=timeout) as s:  # type: ignore[union-attr]
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def server_send_buffer(client: socket.socket, expected: int, timeout: float = 5) -> int | None:
    """SO_SNDBUF of the server's end of ``client``'s connection, once it is ``expected`` or
    as it is after ``timeout`` (the server accepts the socket a moment before it sets it
    up). The server runs in this process (``ServerThread``): its socket is one of this
    process's file descriptors."""
    me = client.getsockname()
    seen = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in os.listdir("/proc/self/fd"):
            try:
                sock = socket.socket(fileno=os.dup(int(name)))
            except OSError:
                continue  # not a socket, or gone
            with sock:
                try:
                    if sock.type == socket.SOCK_STREAM and sock.getpeername() == me:
                        seen = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
                except OSError:
                    continue
        if seen == expected:
            break
        time.sleep(0.05)
    return seen


def tts(text: str, **args: str) -> str:
    return "/tts?" + urllib.parse.urlencode({"text": text, **args})


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    # A small send buffer: a client that reads slowly holds a /tts answer's writer back.
    cfg = make_config(tmp_path_factory.mktemp("http"), handshake_timeout=0.5, max_handshakes=4,
                      max_connections_per_ip=2, send_buffer=16384)
    with ServerThread(cfg) as s:
        yield s


def test_tts_streams_past_the_handshake_timeout(srv: ServerThread):
    """Bug 3: /tts ran inside the handshake hook and websockets' open_timeout dropped it.

    The client reads as a player does, a piece at a time through a small receive buffer,
    so the server is still writing the answer well after the head deadline, however fast
    the box synthesizes (with the distilled generator a fast box made the paragraph in
    0.23 s): against a server with these buffers, 3 s after such a request only 30 kB of
    its ~470 kB had left the server."""
    text = ("Good morning, and welcome aboard. The next stop is Central Station, where you can change for "
            "the airport line. Please mind the gap when leaving the train, and take all your belongings.")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # before connect: not autotuned
    sock.settimeout(120)
    sock.connect(("127.0.0.1", srv.server.port))  # type: ignore[union-attr]
    conn = http.client.HTTPConnection("127.0.0.1", srv.server.port)  # type: ignore[union-attr]
    conn.sock = sock
    t0 = time.monotonic()
    try:
        conn.request("GET", tts(text, voice=KOKORO))
        r = conn.getresponse()
        status, headers = r.status, {k.lower(): v for k, v in r.getheaders()}
        pieces = []
        while piece := r.read(16384):
            pieces.append(piece)
            time.sleep(0.05)  # ~330 kB/s
        body = b"".join(pieces)
    finally:
        conn.close()
    took = time.monotonic() - t0
    assert status == 200 and headers["content-type"] == "audio/wav"
    assert headers.get("transfer-encoding") == "chunked" and "content-length" not in headers
    assert took > 2 * srv.config.handshake_timeout  # it outlasted the head deadline and was not cut
    with wave.open(io.BytesIO(body)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        pcm = np.frombuffer(body[44:], "<i2")
    assert len(pcm) / 24000 > 8.0  # the whole paragraph, not a cut-off piece
    assert np.abs(pcm).max() > 1000


def test_head_options_and_other_methods(srv: ServerThread):
    before = srv.service.worker.jobs_done
    status, headers, body = request(srv, "HEAD", tts("Nothing is synthesized for HEAD."))
    assert (status, body, headers["content-type"]) == (200, b"", "audio/wav")
    status, headers, body = request(srv, "OPTIONS", tts("Nor for OPTIONS."))
    assert status == 204 and body == b"" and headers["allow"] == "GET, HEAD, OPTIONS"
    for method in ("DELETE", "PUT", "POST"):
        status, headers, _ = request(srv, method, tts("Nor for this."))
        assert status == 405 and headers["allow"] == "GET, HEAD, OPTIONS"
    assert srv.service.worker.jobs_done == before
    status, headers, body = request(srv, "HEAD", "/healthz")
    assert status == 200 and body == b"" and headers["content-length"] == "3"
    assert request(srv, "GET", "/ws")[0] == 426  # plain GET of the WebSocket path


def test_tts_follows_the_origin_rule_and_the_caps(srv: ServerThread):
    status, _, _ = request(srv, "GET", tts("Hi."), {"Origin": "https://evil.example"})
    assert status == 403
    status, _, _ = request(srv, "GET", tts("Hi.", voice=PIPER), {"Origin": f"http://127.0.0.1:{srv.server.port}"})
    assert status == 200
    # Two slots per address: a WebSocket and a /tts that is being read hold both.
    long_text = "This sentence is spoken slowly, read by a client that takes its time. " * 6
    with Client(srv.url) as ws:
        ws.recv()
        conn = http.client.HTTPConnection("127.0.0.1", srv.server.port, timeout=60)  # type: ignore[union-attr]
        conn.request("GET", tts(long_text, voice=PIPER))
        r = conn.getresponse()
        assert r.status == 200 and r.read(44)[:4] == b"RIFF"
        status, headers, body = request(srv, "GET", tts("Third.", voice=PIPER))
        assert status == 429 and headers["retry-after"] == "1"
        ready = json.loads(fetch(srv.http + "/readyz")[2])
        assert ready["connections"] == 2
        # The reader goes away mid-stream: its synthesis is cancelled, its slot freed. (The
        # response holds the socket open too: closing only the connection left a client that
        # merely stopped reading, which the whole WAV outran in a kernel buffer of megabytes.)
        r.close()
        conn.close()
    deadline = time.monotonic() + 10
    while srv.server.caps.total and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.05)
    assert srv.server.caps.total == 0  # type: ignore[union-attr]


def test_tts_needs_the_token_when_one_is_set(tmp_path):
    with ServerThread(make_config(tmp_path, token=TOKEN)) as s:
        assert request(s, "GET", tts("Hi.", voice=PIPER))[0] == 401
        assert request(s, "GET", tts("Hi.", voice=PIPER, token="wrong"))[0] == 401
        assert request(s, "GET", tts("Hi.", voice=PIPER, token=TOKEN))[0] == 200
        assert request(s, "GET", tts("Hi.", voice=PIPER), {"Authorization": f"Bearer {TOKEN}"})[0] == 200


def test_cheap_malformed_requests_get_4xx_not_500(srv: ServerThread):
    """Bug 6: a NUL byte in a static path and repeated Host/Origin/X-Forwarded-For gave 500 and a traceback."""
    assert request(srv, "GET", "/index%00.html")[0] == 404
    assert request(srv, "GET", "/" + "a" * 5000)[0] == 404
    port = srv.server.port  # type: ignore[union-attr]
    for name, value in (("Host", f"127.0.0.1:{port}"), ("Origin", "http://a.example"), ("X-Forwarded-For", "10.0.0.1")):
        twice = f"{name}: {value}\r\n{name}: {value}\r\n" if name != "Host" else f"Host: a\r\nHost: b\r\n"
        head = f"GET {tts('Hi.', voice=PIPER)} HTTP/1.1\r\n" + (f"Host: 127.0.0.1\r\n" if name != "Host" else "")
        answer = raw(srv, (head + twice + "\r\n").encode())
        assert answer.startswith(b"HTTP/1.1 400"), (name, answer[:200])
        upgrade = (
            "GET /ws HTTP/1.1\r\n" + (f"Host: 127.0.0.1:{port}\r\n" if name != "Host" else "") + twice
            + "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        )
        answer = raw(srv, upgrade.encode())
        assert answer.startswith(b"HTTP/1.1 400"), (name, answer[:200])


def test_a_websocket_upgrade_with_a_body_gets_400_on_the_real_server(srv: ServerThread):
    """Issue 30, bug 6: closed with no HTTP status before; the request in its body is never served."""
    port = srv.server.port  # type: ignore[union-attr]
    inner = f"GET {tts('Smuggled.', voice=PIPER)} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    for framing, body in ((f"Content-Length: {len(inner)}\r\n", inner),
                          ("Transfer-Encoding: chunked\r\n", f"{len(inner):x}\r\n{inner}\r\n0\r\n\r\n")):
        upgrade = (
            f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{framing}\r\n{body}"
        )
        answer = raw(srv, upgrade.encode())
        assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1") == 1, answer[:300]
        assert b"bad_request: a WebSocket upgrade has no body" in answer
    with Client(srv.url) as c:  # a proper upgrade still opens
        assert isinstance(c.recv(), protocol.Ready)


def test_sockets_that_send_nothing_cannot_lock_clients_out(srv: ServerThread):
    idle = [socket.create_connection(("127.0.0.1", srv.server.port)) for _ in range(12)]  # type: ignore[union-attr]
    try:
        time.sleep(0.2)
        assert srv.server.front.pending <= srv.config.max_handshakes  # type: ignore[union-attr]
        assert fetch(srv.http + "/healthz")[0] == 200
        with Client(srv.url) as c:
            assert isinstance(c.recv(), protocol.Ready)
        time.sleep(srv.config.handshake_timeout + 0.5)
        assert srv.server.front.pending == 0  # type: ignore[union-attr]
        for s in idle:
            s.settimeout(5)
            assert s.recv(100) == b""  # closed by the server
    finally:
        for s in idle:
            s.close()


def test_a_rebinding_name_is_refused_to_browsers(srv: ServerThread):
    """DNS rebinding: a page on evil.example that resolves to this server is its own origin,
    so only the Host name gives it away (the server has no token)."""
    port = srv.server.port  # type: ignore[union-attr]
    evil = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
    assert request(srv, "GET", tts("Hi.", voice=PIPER), evil)[0] == 403
    assert request(srv, "GET", "/voices", {"Host": f"evil.example:{port}", "Sec-Fetch-Site": "same-origin"})[0] == 403
    upgrade = (
        f"GET /ws HTTP/1.1\r\nHost: evil.example:{port}\r\nOrigin: http://evil.example:{port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    )
    assert raw(srv, upgrade.encode()).startswith(b"HTTP/1.1 403")
    # Not a browser (no Origin, no Sec-Fetch-*): nothing to rebind; the page's own address: fine.
    assert request(srv, "GET", "/voices", {"Host": f"evil.example:{port}"})[0] == 200
    assert request(srv, "GET", "/voices", {"Host": f"127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"})[0] == 200


def test_heads_whose_body_never_comes_cannot_lock_clients_out(tmp_path):
    """Issue 20, bug 4: the gate let a connection go once its head was whole, and the body
    it announced was then awaited uncounted: ~1,100 such sockets exhausted a 1,024-fd limit.
    Now a request waits in the gate until its body is whole too, its timeout from arrival."""
    with ServerThread(make_config(tmp_path, handshake_timeout=5.0, max_handshakes=4)) as srv:
        port = srv.server.port  # type: ignore[union-attr]
        head = (b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n{")
        heads = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(12)]
        try:
            for s in heads:
                s.sendall(head)
                time.sleep(0.01)  # in order: the oldest are the first
            time.sleep(0.3)
            assert srv.server.front.pending == 4  # type: ignore[union-attr]
            # The 8 oldest were closed at once for the newcomers, long before the 5 s timeout.
            t0 = time.monotonic()
            for s in heads[:8]:
                try:
                    assert s.recv(100) == b""
                except ConnectionResetError:
                    pass
            assert time.monotonic() - t0 < 2.0
            assert fetch(srv.http + "/healthz")[0] == 200
            with Client(srv.url) as c:
                assert isinstance(c.recv(), protocol.Ready)
            # The /healthz came in as a newcomer to a full room and closed the oldest (then the
            # WebSocket found a place); the other 3 get 408 when their time is up (the head
            # came, the body did not).
            answers = sorted(s.recv(200)[:12] for s in heads[8:])
            assert answers == [b"", b"HTTP/1.1 408", b"HTTP/1.1 408", b"HTTP/1.1 408"]
            assert srv.server.front.pending == 0  # type: ignore[union-attr]
            metrics = fetch(srv.http + "/metrics")[2].decode()
            assert 'rtts_waiting_dropped{why="evicted"} 9.0' in metrics
            assert 'rtts_waiting_dropped{why="late"} 3.0' in metrics
        finally:
            for s in heads:
                s.close()


def test_http_and_websocket_sockets_get_the_kernel_send_buffer_cap(srv: ServerThread):
    """Issue 20, bug 14: only upgraded WebSockets had SO_SNDBUF capped; an HTTP response to a
    client that does not read queued ~4 MB in the kernel before back-pressure started."""
    expected = 2 * srv.config.send_buffer  # what Linux reports for the size rtts sets
    with socket.create_connection(("127.0.0.1", srv.server.port), timeout=10) as s:  # type: ignore[union-attr]
        s.sendall(b"GET /tts?text=Hi HTTP/1.1\r\n")  # an HTTP request, its head not yet whole
        assert server_send_buffer(s, expected) == expected
    with Client(srv.url) as c:
        assert isinstance(c.recv(), protocol.Ready)
        assert server_send_buffer(c.ws.socket, expected) == expected


def test_a_no_cors_request_from_another_site_is_refused(srv: ServerThread):
    """Issue 20, weakness: <audio src="http://LAN-IP:8765/tts?text=..."> on any page made a
    tokenless box speak: a no-cors GET has no Origin, only Sec-Fetch-Site: cross-site."""
    before = srv.service.worker.jobs_done
    for site in ("cross-site", "same-site"):
        assert request(srv, "GET", tts("Hi.", voice=PIPER), {"Sec-Fetch-Site": site})[0] == 403
    assert srv.service.worker.jobs_done == before
    assert request(srv, "HEAD", tts("Hi."), {"Sec-Fetch-Site": "none"})[0] == 200  # the address bar
    assert request(srv, "HEAD", tts("Hi."), {"Sec-Fetch-Site": "same-origin"})[0] == 200  # rtts's own page
    # A page on another machine's localhost is no page of this box's (only same-machine ones are).
    port = srv.server.port  # type: ignore[union-attr]
    lan = {"Host": f"192.0.2.10:{port}", "Origin": "http://localhost:3000"}
    assert request(srv, "HEAD", tts("Hi."), lan)[0] == 403
    assert request(srv, "HEAD", tts("Hi."), {"Origin": "http://localhost:3000"})[0] == 200  # Host 127.0.0.1


def test_the_host_check_holds_with_a_token(tmp_path):
    """Issue 20, weakness: with --token the Host check was off, and /metrics, /voices, /readyz
    and /v1/models answer without a token, so a page on a rebinding domain could read them."""
    with ServerThread(make_config(tmp_path, token=TOKEN)) as s:
        port = s.server.port  # type: ignore[union-attr]
        evil = {"Host": f"evil.example:{port}", "Sec-Fetch-Site": "same-origin"}
        for path in ("/metrics", "/voices", "/readyz", "/v1/models", "/healthz"):
            assert request(s, "GET", path, evil)[0] == 403, path
            assert request(s, "GET", path, {"Host": f"evil.example:{port}"})[0] == 200, path  # scrapers, probes
            assert request(s, "GET", path, {"Sec-Fetch-Site": "same-origin"})[0] == 200, path


def test_speech_needs_json_and_nesting_is_bounded(srv: ServerThread):
    """Issue 20: the speech route took text/plain and UTF-16 bodies as JSON (weakness), and
    20,000 levels of nesting gave 500 with a RecursionError traceback (bug 11)."""
    body = json.dumps({"input": "Hi.", "voice": PIPER, "response_format": "wav"})

    def speech(data: bytes, content_type: str | None) -> tuple[int, dict]:
        headers = {"Content-Type": content_type} if content_type else {}
        status, _, answer = post(srv, "/v1/audio/speech", data, headers)
        return status, json.loads(answer)["error"] if status != 200 else {}

    for kind in ("text/plain", "application/x-www-form-urlencoded", "application/json; charset=utf-16", None):
        status, error = speech(body.encode(), kind)
        assert (status, error.get("code")) == (415, "unsupported_media_type"), kind
    status, error = speech(body.encode("utf-16"), "application/json")
    assert (status, error["code"]) == (400, "bad_frame")
    nested = b'{"input": "Hi.", "voice": "alloy", "x": ' + b"[" * 20000 + b"]" * 20000 + b"}"
    status, error = speech(nested, "application/json")
    assert (status, error["code"]) == (400, "bad_frame") and "deeper than" in error["message"]
    assert speech(body.encode(), "Application/JSON; charset=UTF-8")[0] == 200
    status, _, answer = post(srv, "/v1/announce", b'{"channel": "lobby", "text": ' + b"[" * 20000 + b"]" * 20000 + b"}",
                             {"Content-Type": "application/json"})
    assert status == 400 and json.loads(answer)["error"] == "bad_message"


def test_requests_too_large_are_refused_in_their_routes_shape(srv: ServerThread):
    """Issue 30: an over-size OpenAI body got 413 text/plain, not OpenAI's error shape; a
    100,000-character /tts?text= got 431 "bad request"; and a /tts text within
    --max-text-chars got that 431 too once percent-encoding made it over 16 KiB."""
    big = json.dumps({"input": "x" * 70000, "voice": PIPER, "channel": "lobby", "text": "Hi."}).encode()
    for path in ("/v1/audio/speech", "/dev/captioned_speech"):
        status, headers, answer = post(srv, path, big, {"Content-Type": "application/json"})
        assert (status, headers["content-type"]) == (413, "application/json"), path
        error = json.loads(answer)["error"]
        assert (error["code"], error["type"], error["param"]) == ("body_too_large", "invalid_request_error", "input")
    status, headers, answer = post(srv, "/v1/announce", big, {"Content-Type": "application/json"})
    assert (status, json.loads(answer)["error"]) == (413, "body_too_large")
    status, headers, answer = request(srv, "GET", tts("x" * 100_000, voice=PIPER))
    assert status == 414 and answer.startswith(b"text_too_long: the URL is over"), answer[:200]
    assert request(srv, "HEAD", tts("各" * 2000, voice=PIPER))[0] == 200  # 18 KB encoded: read, not refused
    status, _, answer = request(srv, "GET", tts("各" * 5001, voice=PIPER))
    assert (status, answer) == (400, b"text_too_long: text is over 5000 characters\n")


def post(srv: ServerThread, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.server.port, timeout=120)  # type: ignore[union-attr]
    try:
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()
