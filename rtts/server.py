"""WebSocket and HTTP on one port, in front of a ``Service``.

The WebSocket handler is a thin loop: frames go into the connection's ``Session``
and its effects come out as sends, submits and closes. HTTP requests other than
the upgrade on ``/ws`` are answered from ``process_request``, before any handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mimetypes
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, unquote

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from . import audio, protocol
from .config import Config
from .service import Service

log = logging.getLogger(__name__)

WS_PATH = "/ws"


def static_dir() -> Path:
    """The page's files: inside the wheel when installed, ``static/`` in a checkout."""
    packaged = Path(str(resources.files("rtts"))) / "_static"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "static"


def _response(status: HTTPStatus, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> Response:
    headers = Headers()
    headers["Content-Type"] = content_type
    headers["Content-Length"] = str(len(body))
    headers["Cache-Control"] = "no-store"
    for key, value in (extra or {}).items():
        headers[key] = value
    return Response(status.value, status.phrase, headers, body)


def _json(status: HTTPStatus, obj: object) -> Response:
    return _response(status, json.dumps(obj, ensure_ascii=False).encode() + b"\n", "application/json")


def _text(status: HTTPStatus, text: str) -> Response:
    return _response(status, text.encode(), "text/plain; charset=utf-8")


class RttsServer:
    def __init__(self, service: Service) -> None:
        self.service = service
        self.config: Config = service.config
        self._server: Server | None = None
        self._static = static_dir()
        self.draining = False
        self._routes: dict[str, Callable[[dict[str, list[str]]], Response | Awaitable[Response]]] = {
            "/healthz": lambda q: _text(HTTPStatus.OK, "ok\n"),
            "/readyz": self._readyz,
            "/voices": lambda q: _json(HTTPStatus.OK, [v.as_dict() for v in service.registry.voices.values()]),
            "/metrics": lambda q: _response(
                HTTPStatus.OK, service.metrics.render(), "text/plain; version=0.0.4; charset=utf-8"
            ),
            "/tts": self._tts,
        }

    async def start(self) -> None:
        self.service.start()
        self._server = await serve(
            self._handle,
            self.config.host,
            self.config.port,
            process_request=self._process_request,
            compression=None,  # PCM barely compresses; deflate costs ~64 KiB per connection
            max_size=self.config.max_message_bytes,
            max_queue=16,
        )
        log.info("listening on %s", ", ".join(self.urls))

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def urls(self) -> list[str]:
        assert self._server is not None
        out = []
        for sock in self._server.sockets:
            host, port = sock.getsockname()[:2]
            out.append(f"ws://{'[' + host + ']' if ':' in host else host}:{port}{WS_PATH}")
        return out

    async def close(self) -> None:
        self.draining = True
        if self._server is not None:
            self._server.close(close_connections=True)
            await self._server.wait_closed()
        self.service.stop()

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    # ------------------------------------------------------------ HTTP

    async def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path, _, query = request.path.partition("?")
        if path == WS_PATH:
            return None  # go on with the WebSocket handshake
        route = self._routes.get(path)
        if route is not None:
            result = route(parse_qs(query))
            return await result if asyncio.iscoroutine(result) else result  # type: ignore[return-value]
        return self._static_file(path)

    def _static_file(self, path: str) -> Response:
        name = unquote(path).lstrip("/") or "index.html"
        if name == "kiosk":
            name = "kiosk.html"
        root = self._static.resolve()
        target = (root / name).resolve()
        if root not in target.parents or not target.is_file():
            return _text(HTTPStatus.NOT_FOUND, "not found\n")
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind == "application/javascript":
            kind += "; charset=utf-8"
        return _response(HTTPStatus.OK, target.read_bytes(), kind)

    def _readyz(self, query: dict[str, list[str]]) -> Response:
        body = {
            "ready": not self.draining,
            "loaded": self.service.loaded_voices(),
            "loading": sorted(self.service.worker.loading),
            "connections": self.service.active,
            "queue_depth": self.service.worker.queue_depth,
        }
        return _json(HTTPStatus.SERVICE_UNAVAILABLE if self.draining else HTTPStatus.OK, body)

    async def _tts(self, query: dict[str, list[str]]) -> Response:
        def arg(name: str) -> str | None:
            values = query.get(name)
            return values[0] if values else None

        text = arg("text")
        if not text:
            return _text(HTTPStatus.BAD_REQUEST, "missing_field: give ?text=...\n")
        if self.config.token is not None and arg("token") != self.config.token:
            return _text(HTTPStatus.UNAUTHORIZED, "unauthorized: give ?token=...\n")
        try:
            speed = float(arg("speed")) if arg("speed") else None
            rate = int(arg("sample_rate")) if arg("sample_rate") else None
            samples, rate, _ = await self.service.speak(text, arg("voice"), arg("lang"), speed, rate)
        except ValueError:
            return _text(HTTPStatus.BAD_REQUEST, "bad_message: speed and sample_rate must be numbers\n")
        except protocol.ProtocolError as exc:
            status = HTTPStatus.SERVICE_UNAVAILABLE if exc.code == protocol.ErrorCode.BUSY else HTTPStatus.BAD_REQUEST
            return _text(status, f"{exc.code.value}: {exc.message}\n")
        return _response(HTTPStatus.OK, audio.wav_bytes(samples, rate), "audio/wav")

    # ------------------------------------------------------------ WebSocket

    async def _handle(self, ws: ServerConnection) -> None:
        service = self.service
        session = service.new_session()
        outbox: asyncio.Queue[bytes | tuple[int, str]] = asyncio.Queue()

        def send(message: protocol.ServerMessage) -> None:
            outbox.put_nowait(protocol.encode(message))

        def close(code: int, reason: str) -> None:
            outbox.put_nowait((code, reason))

        async def sender() -> None:
            while True:
                item = await outbox.get()
                if isinstance(item, tuple):
                    await ws.close(*item)
                    return
                await ws.send(item)

        service.acquire()
        service.metrics.connections.inc()
        service.metrics.connections_total.inc()
        log.debug("%s connected from %s", session.id, ws.remote_address)
        sending = asyncio.create_task(sender(), name=f"send-{session.id}")
        try:
            service.apply(session, session.open(), send, close)
            async for frame in ws:
                service.apply(session, session.receive(frame), send, close)
        except ConnectionClosed:
            pass
        finally:
            service.apply(session, session.close(), send, close)
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await sending
            service.metrics.connections.dec()
            service.release()
            log.debug("%s closed", session.id)
