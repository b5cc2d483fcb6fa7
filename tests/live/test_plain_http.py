"""rtts/serve/plain_http.py on a real socket, with routes of its own (no voices): request
bodies, streamed responses, a client that goes away, and WebSocket upgrades passed on."""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import AsyncIterator
from http import HTTPStatus

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from rtts.serve.plain_http import HttpFront, HttpRequest, HttpResponse, json_response, text


async def _not_found(request: HttpRequest) -> HttpResponse:
    return text(HTTPStatus.NOT_FOUND, "not found\n")


class App:
    def __init__(self) -> None:
        self.front = HttpFront(_not_found, max_body=1000, head_timeout=2.0, max_pending=8, send_stall=5.0)
        self.front.route("/echo", self.echo, methods=("POST",))
        self.front.route("/count", self.count)
        self.finished: list[str] = []
        self.release = asyncio.Event()

    async def echo(self, request: HttpRequest) -> HttpResponse:
        return json_response(HTTPStatus.OK, {"got": json.loads(request.body), "type": request.header("Content-Type")})

    async def count(self, request: HttpRequest) -> HttpResponse:
        async def body() -> AsyncIterator[bytes]:
            for i in range(int(request.arg("n") or 3)):
                yield f"{i}\n".encode()
                if i == 0:
                    await self.release.wait()  # the first chunk is out before the rest exists

        return HttpResponse(200, [("Content-Type", "text/plain")], body(), on_done=lambda: self.finished.append("count"))


async def _ws(ws: ServerConnection) -> None:
    async for message in ws:
        await ws.send(message)


def _get(port: int, method: str, target: str, body: bytes | None = None, headers: dict | None = None):  # type: ignore[no-untyped-def]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, target, body=body, headers=headers or {})
    return conn, conn.getresponse()


async def test_bodies_streams_and_upgrades() -> None:
    app = App()
    async with serve(_ws, "127.0.0.1", 0, create_connection=app.front.connection_class(), open_timeout=None) as server:
        try:
            await _bodies_streams_and_upgrades(app, server.sockets[0].getsockname()[1])
        finally:
            await app.front.close()  # what the server's shutdown does: plain HTTP is not websockets'


async def _bodies_streams_and_upgrades(app: App, port: int) -> None:
    # A POST body, read whole (issue 15's /v1/audio/speech is such a route).
    conn, r = await asyncio.to_thread(_get, port, "POST", "/echo", b'{"input": "hi"}', {"Content-Type": "application/json"})
    assert r.status == 200 and json.loads(r.read()) == {"got": {"input": "hi"}, "type": "application/json"}
    conn.close()
    conn, r = await asyncio.to_thread(_get, port, "POST", "/echo", b"x" * 2000)
    assert r.status == 413
    conn.close()
    # A streamed body: chunked, the first chunk arrives while the handler still waits.
    conn, r = await asyncio.to_thread(_get, port, "GET", "/count?n=3")
    assert r.status == 200 and r.getheader("Transfer-Encoding") == "chunked"
    assert await asyncio.to_thread(r.readline) == b"0\n"
    app.release.set()
    assert await asyncio.to_thread(r.read) == b"1\n2\n"
    conn.close()
    assert app.finished == ["count"]
    # A client that goes away mid-stream: the stream is closed and on_done runs.
    app.release.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /count?n=3 HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await reader.readuntil(b"0\n\r\n")  # the head and the first chunk
    assert head.startswith(b"HTTP/1.1 200 OK")
    writer.close()
    for _ in range(100):
        if len(app.finished) == 2:
            break
        await asyncio.sleep(0.02)
    assert app.finished == ["count", "count"]
    # WebSocket upgrades still go to websockets, bytes untouched.
    async with connect(f"ws://127.0.0.1:{port}/anything") as ws:
        await ws.send("ping")
        assert await ws.recv() == "ping"


_UPGRADE = (b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
_SMUGGLED = b"GET /count?n=1 HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize("framing, body", [
    (b"Content-Length: 5\r\n", b"hello"),
    (b"Content-Length: %d\r\n" % len(_SMUGGLED), _SMUGGLED),
    (b"Content-Length: 5000\r\n", b"x" * 10),  # over max_body: the same answer
    (b"Content-Length: 00\r\n", b""),  # websockets takes "0" only
    (b"Transfer-Encoding: chunked\r\n", b"%x\r\n%s\r\n0\r\n\r\n" % (len(_SMUGGLED), _SMUGGLED)),
    (b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", b"5\r\nhello\r\n0\r\n\r\n"),
])
async def test_a_websocket_upgrade_with_a_body_gets_400_and_nothing_is_smuggled(framing: bytes, body: bytes) -> None:
    """Issue 30, bug 6: an upgrade that carries a body was handed to websockets, which
    closed it with no HTTP status. It gets a 400 here, and its body is read as nothing."""
    app = App()
    app.release.set()
    async with serve(_ws, "127.0.0.1", 0, create_connection=app.front.connection_class(), open_timeout=None) as server:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            writer.write(_UPGRADE + framing + b"\r\n" + body)
            answer = await asyncio.wait_for(reader.read(), 5)  # until the server closes
            writer.close()
            assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
            head, _, text_ = answer.partition(b"\r\n\r\n")
            assert b"text/plain" in head and text_.startswith(b"bad_request: a WebSocket upgrade has no body")
            assert answer.count(b"HTTP/1.1") == 1 and app.finished == []  # the request inside was never served
        finally:
            await app.front.close()


async def test_an_upgrade_with_content_length_0_is_still_an_upgrade() -> None:
    app = App()
    async with serve(_ws, "127.0.0.1", 0, create_connection=app.front.connection_class(), open_timeout=None) as server:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            writer.write(_UPGRADE + b"Content-Length: 0\r\n\r\n")
            assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 101 ")
            writer.close()
        finally:
            await app.front.close()


@pytest.mark.parametrize("method, status", [("HEAD", 200), ("OPTIONS", 204), ("PUT", 405)])
async def test_methods(method: str, status: int) -> None:
    app = App()
    app.release.set()
    async with serve(_ws, "127.0.0.1", 0, create_connection=app.front.connection_class(), open_timeout=None) as server:
        port = server.sockets[0].getsockname()[1]
        conn, r = await asyncio.to_thread(_get, port, method, "/count")
        assert r.status == status and (r.read() == b"") == (method != "PUT")
        if status != 200:
            assert r.getheader("Allow") == "GET, HEAD, OPTIONS"
        conn.close()
        await app.front.close()
