"""Plain HTTP on the WebSocket port: every request that is not a WebSocket upgrade.

websockets parses only what a handshake needs: no request bodies, and every request
is a handshake that its ``open_timeout`` cuts off, so a response that takes longer
(a long ``/tts``) used to be dropped unanswered. So rtts looks at each new connection
first: h11 reads the request head; a WebSocket upgrade is handed, bytes untouched, to
websockets, and everything else is answered here, with a body read within limits,
HEAD and OPTIONS as HTTP says, 405 for other methods, and a response body that may be
streamed (chunked) for as long as the client keeps reading.

The same gate bounds connections that have not sent a whole request, head *and*
body (they hold a socket and a file descriptor and nothing else counts them): each
gets ``head_timeout`` seconds from its arrival, and they wait in an
``access.Waiting`` of ``max_pending`` places (shared with the Wyoming port's sockets
that wait for a request); a newcomer beyond that closes the one that has waited
longest, so idle sockets, or heads whose body never comes, cannot lock real clients
out. Every socket's kernel send buffer is capped (``send_buffer``), like the outbox.

A route is ``front.route(path, handler, methods)``; the handler takes an
``HttpRequest`` and returns an ``HttpResponse`` whose body is bytes or an async
iterator of bytes (sent chunked as it comes; a client that goes away cancels it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

import h11
from websockets.asyncio.server import ServerConnection

from rtts.serve.access import Waiting
from rtts.serve.outbox import cap_kernel_send_buffer

log = logging.getLogger(__name__)

Body = bytes | AsyncIterator[bytes]


class BadRequest(Exception):
    """A request this server will not read further: answered with 400 and ``str(self)``."""


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str  # without the query, not percent-decoded
    query: dict[str, list[str]]
    headers: tuple[tuple[str, str], ...]  # names in lower case
    body: bytes
    peer: str  # the socket's peer address ("unix" on a Unix socket)

    def header(self, name: str) -> str | None:
        """The header's one value; a repeated header is a bad request (which one would count?)."""
        values = self.header_all(name)
        if len(values) > 1:
            raise BadRequest(f"{name} is repeated")
        return values[0] if values else None

    def header_all(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k == name]

    def arg(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


@dataclass
class HttpResponse:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: Body = b""
    # Called once the response is over, sent or not (a streamed body's resources).
    on_done: Callable[[], None] | None = None


def text(status: HTTPStatus, message: str, headers: list[tuple[str, str]] | None = None) -> HttpResponse:
    body = message.encode()
    return HttpResponse(status.value, [("Content-Type", "text/plain; charset=utf-8"), *(headers or [])], body)


def is_json(content_type: str | None) -> bool:
    """Whether a request's ``Content-Type`` says JSON in UTF-8: ``application/json``, with
    no parameter or ``charset=utf-8`` (JSON is UTF-8; another charset would be guessed)."""
    kind, _, params = (content_type or "").partition(";")
    if kind.strip().lower() != "application/json":
        return False
    for param in filter(None, (p.strip() for p in params.split(";"))):
        name, _, value = param.partition("=")
        if name.strip().lower() != "charset" or value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return False
    return True


def json_response(status: HTTPStatus, obj: Any) -> HttpResponse:
    body = json.dumps(obj, ensure_ascii=False).encode() + b"\n"
    return HttpResponse(status.value, [("Content-Type", "application/json")], body)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
# A route's answer to a request refused before it reached the route (a body or head too
# large, a body that never came): (status, code, message) → its own error shape.
Refuse = Callable[[HTTPStatus, str, str], HttpResponse]


def refuse_as_text(status: HTTPStatus, code: str, message: str) -> HttpResponse:
    """``code: message`` as text, as ``/tts`` and the pages answer."""
    return text(status, f"{code}: {message}\n")


@dataclass(frozen=True)
class _Route:
    handler: Handler
    methods: tuple[str, ...]
    refuse: Refuse = refuse_as_text


class HttpFront:
    def __init__(
        self,
        fallback: Handler,
        *,
        max_body: int,
        max_head: int = 16384,
        head_timeout: float,
        max_pending: int,
        send_stall: float,
        send_buffer: int | None = None,
        waiting: Waiting | None = None,
        guard: Callable[[HttpRequest], HttpResponse | None] = lambda request: None,
    ) -> None:
        """``guard``: a refusal for any request before its route sees it, or None.
        ``max_head``: bytes of a request head (request line and headers) read at most.
        ``send_buffer``: each socket's kernel send buffer in bytes (None: the kernel's).
        ``waiting``: where sockets without a whole request wait (one of ``max_pending``
        places by default; the server shares its own with the Wyoming port)."""
        self._routes: dict[str, _Route] = {}
        self._guard = guard
        self._fallback = _Route(fallback, ("GET",))
        self.max_body = max_body
        self.max_head = max_head
        self.head_timeout = head_timeout
        self.max_pending = max_pending
        self.send_stall = send_stall
        self.send_buffer = send_buffer
        self.waiting = waiting if waiting is not None else Waiting(max_pending)
        self._serving: set[asyncio.Task[None]] = set()

    def route(
        self, path: str, handler: Handler, methods: tuple[str, ...] = ("GET",), refuse: Refuse = refuse_as_text,
    ) -> None:
        """Serve ``path`` with ``handler`` for ``methods``; GET brings HEAD, OPTIONS is always
        answered. ``refuse`` answers what is refused before the handler sees it, in the
        error shape the route's clients read."""
        self._routes[path] = _Route(handler, methods, refuse)

    def refusal(self, path: str, status: HTTPStatus, code: str, message: str) -> HttpResponse:
        """``path``'s own answer to a request refused before its handler saw it."""
        return self._routes.get(path, self._fallback).refuse(status, code, message)

    def connection_class(self) -> type[ServerConnection]:
        """The class to pass to websockets' ``serve(create_connection=...)``."""
        return type("GateConnection", (_GateConnection,), {"front": self})

    @property
    def pending(self) -> int:
        """Sockets waiting for a whole request (the Wyoming port's too, when shared)."""
        return len(self.waiting)

    @property
    def serving(self) -> int:
        return len(self._serving)

    async def close(self) -> None:
        """Shutdown: drop connections still sending their request, and end every response."""
        self.waiting.drop_all()
        tasks = list(self._serving)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------ answering

    async def respond(self, request: HttpRequest) -> HttpResponse:
        refusal = self._guard(request)
        if refusal is not None:
            return refusal
        route = self._routes.get(request.path, self._fallback)
        allowed = route.methods + (("HEAD",) if "GET" in route.methods else ()) + ("OPTIONS",)
        allow = [("Allow", ", ".join(allowed))]
        if request.method == "OPTIONS":
            return HttpResponse(HTTPStatus.NO_CONTENT.value, allow)
        if request.method not in allowed:
            return text(HTTPStatus.METHOD_NOT_ALLOWED, f"method_not_allowed: {', '.join(allowed)}\n", allow)
        return await route.handler(request)


class _GateConnection(ServerConnection):
    """A websockets connection that reads the request head itself first (see the module docstring)."""

    front: HttpFront

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._http: h11.Connection | None = h11.Connection(h11.SERVER, max_incomplete_event_size=self.front.max_head)
        self._raw = bytearray()  # what came before the head was whole, for websockets
        self._head: h11.Request | None = None
        self._body = bytearray()
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.front.send_buffer is not None:
            cap_kernel_send_buffer(transport, self.front.send_buffer)
        # Waiting until its request is whole: the head, and the body the head announces.
        self.front.waiting.enter(self, self.front.head_timeout, self._dropped)

    def _dropped(self, late: bool) -> None:
        """Out of the waiting room: the request was not whole in time, or a newcomer needed the place."""
        if late and self._head is not None and self._http is not None:
            self._refuse(HTTPStatus.REQUEST_TIMEOUT.value, "request_timeout: the body did not arrive")
        else:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.waiting.leave(self)
        if self._task is not None:
            self._task.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._http is None:  # a WebSocket: websockets reads everything
            super().data_received(data)
            return
        if self._head is None:
            self._raw += data
        try:
            self._http.receive_data(data)
            self._read()
        except h11.RemoteProtocolError as exc:
            line_too_long = self._head is None and b"\r\n" not in self._raw
            if exc.error_status_hint == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE and line_too_long:
                # Only /tts takes text in the URL, and a text of --max-text-chars fits (max_head).
                self._refuse(HTTPStatus.REQUEST_URI_TOO_LONG.value,
                             f"text_too_long: the URL is over {self.front.max_head} bytes: more text than a request "
                             "may hold")
            else:
                self._refuse(exc.error_status_hint, f"bad_request: {exc}")

    def _read(self) -> None:
        assert self._http is not None
        while True:
            event = self._http.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                return
            if isinstance(event, h11.Request):
                self._head = event
                if _is_upgrade(event) and _has_body(event):
                    # websockets would drop it without a status; and whatever the body holds
                    # (another request) is never read as anything.
                    self._refuse(HTTPStatus.BAD_REQUEST.value,
                                 "bad_request: a WebSocket upgrade has no body (Content-Length or Transfer-Encoding)")
                    return
                declared = [v for k, v in event.headers if k == b"content-length"]
                if declared and int(declared[0]) > self.front.max_body:  # h11 checked it is a number
                    self._refuse_body()
                    return
                if _is_upgrade(event):
                    self.front.waiting.leave(self)  # websockets answers it at once (server._admit)
                    raw, self._raw, self._http = bytes(self._raw), bytearray(), None
                    super().data_received(raw)  # websockets takes it from the request line on
                    return
                self._raw = bytearray()
            elif isinstance(event, h11.Data):
                self._body += event.data
                if len(self._body) > self.front.max_body:  # a chunked body, that declared no length
                    self._refuse_body()
                    return
            elif isinstance(event, h11.EndOfMessage) and self._head is not None:
                # The whole request is here: served from now on, for as long as it takes.
                self.front.waiting.leave(self)
                self._task = asyncio.get_running_loop().create_task(self._serve(self._head))
                self.front._serving.add(self._task)
                self._task.add_done_callback(self.front._serving.discard)

    def _refuse_body(self) -> None:
        self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE.value,
                     f"body_too_large: the request body is over {self.front.max_body} bytes")

    def _refuse(self, status: int, message: str) -> None:
        """Answer a request that could not be read, if HTTP still allows an answer, and close.
        ``message`` is ``code: text``; the route the request was for (as far as it was read)
        shapes the answer as its clients read errors (``HttpFront.route(refuse=...)``)."""
        if self._task is not None:
            self._task.cancel()
        assert self._http is not None
        code, _, detail = message.partition(": ")
        refusal = self.front.refusal(self._path(), HTTPStatus(status), code, detail)
        assert isinstance(refusal.body, bytes)
        with contextlib.suppress(h11.LocalProtocolError):
            headers = [*refusal.headers, ("Content-Length", str(len(refusal.body))), ("Connection", "close")]
            response = h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase)
            self.transport.write(self._http.send(response) or b"")
            self.transport.write(self._http.send(h11.Data(data=refusal.body)) or b"")
            self.transport.write(self._http.send(h11.EndOfMessage()) or b"")
        self.transport.close()

    def _path(self) -> str:
        """The path of the request as far as it came: its head, or its request line so far."""
        target = self._head.target if self._head is not None else (bytes(self._raw).split(b" ", 2)[1:2] or [b""])[0]
        return target.split(b"?", 1)[0].decode("ascii", "replace")

    async def _serve(self, head: h11.Request) -> None:
        response: HttpResponse | None = None
        try:
            try:
                response = await self.front.respond(_request(head, bytes(self._body), self._peer()))
            except BadRequest as exc:
                response = self.front.refusal(head.target.split(b"?", 1)[0].decode("ascii", "replace"),
                                              HTTPStatus.BAD_REQUEST, "bad_request", str(exc))
            except Exception:
                log.exception("HTTP %s %.200s failed", head.method.decode(), head.target.decode("latin-1"))
                response = text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal: see the server log\n")
            await self._send_response(response, head_only=head.method == b"HEAD")
        except (TimeoutError, ConnectionError):
            pass  # the client stopped reading, or went away
        finally:
            if response is not None:
                body = response.body
                if not isinstance(body, bytes):
                    with contextlib.suppress(Exception):
                        await body.aclose()  # type: ignore[attr-defined]
                if response.on_done is not None:
                    response.on_done()
            self.transport.close()

    async def _send_response(self, response: HttpResponse, *, head_only: bool) -> None:
        assert self._http is not None
        headers = [*response.headers, ("Cache-Control", "no-store"), ("Connection", "close")]
        body = response.body
        if isinstance(body, bytes) and response.status not in (204, 304):
            headers.append(("Content-Length", str(len(body))))
        await self._send(h11.Response(status_code=response.status, headers=headers,
                                      reason=HTTPStatus(response.status).phrase))
        if not head_only:
            if isinstance(body, bytes):
                if body:
                    await self._send(h11.Data(data=body))
            else:
                async for chunk in body:
                    if chunk:
                        await self._send(h11.Data(data=chunk))
        await self._send(h11.EndOfMessage())

    async def _send(self, event: h11.Event) -> None:
        assert self._http is not None
        data = self._http.send(event)
        if self.transport.is_closing():
            raise ConnectionResetError("the client went away")
        if data:
            self.transport.write(data)
            # A client that stops reading holds this response (and what it streams) no longer than this.
            async with asyncio.timeout(self.front.send_stall):
                await self.drain()

    def _peer(self) -> str:
        address = self.remote_address
        return str(address[0]) if isinstance(address, tuple) and address else "unix"


def _is_upgrade(head: h11.Request) -> bool:
    return head.method == b"GET" and any(
        name == b"upgrade" and b"websocket" in value.lower() for name, value in head.headers
    )


def _has_body(head: h11.Request) -> bool:
    """The head announces a body: any Transfer-Encoding, or a Content-Length other than
    ``0`` (all websockets accepts on a handshake)."""
    return any(name == b"transfer-encoding" or (name == b"content-length" and value != b"0")
               for name, value in head.headers)


def _request(head: h11.Request, body: bytes, peer: str) -> HttpRequest:
    target = head.target.decode("ascii", "replace")
    path, _, query = target.partition("?")
    try:
        parsed = parse_qs(query, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("the query is not UTF-8") from None
    headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers)
    return HttpRequest(head.method.decode("ascii", "replace"), path, parsed, headers, body, peer)
