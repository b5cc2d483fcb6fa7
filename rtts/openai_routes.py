"""The OpenAI routes (``/v1/...``) on the server's HTTP, through one small interface.

``OpenAIRoutes.serve(exchange)`` answers one request. An ``Exchange`` is what the
server's HTTP mechanism hands a route: the request (method, path, headers, body, the
client's address) and a response written in pieces (``start``, ``send`` each chunk as
it comes, ``end``). Speech goes out as the session makes it, through a
``SessionRunner`` whose sink is the exchange: a client that stops reading holds its
synthesis back like a slow WebSocket, and one that goes away cancels it.

Who may ask is decided as for a WebSocket: the browser ``Origin`` (403), the token as
``Authorization: Bearer`` (401), and the connection caps (429/503): a speech request
holds a slot for as long as its body streams.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Protocol

from . import access, openai_api, protocol
from .access import ConnectionCaps
from .openai_api import ApiError, SpeechBody
from .runner import SessionRunner
from .service import Service

log = logging.getLogger(__name__)

PREFIX = "/v1/"


class Exchange(Protocol):
    method: str
    path: str  # without the query
    headers: Mapping[str, str]  # case-insensitive
    body: bytes
    peer: str  # the client's address (after trusted proxies)

    async def start(self, status: int, headers: dict[str, str]) -> None: ...

    async def send(self, data: bytes) -> None:
        """One piece of the body; raises ConnectionError when the client has gone."""
        ...

    async def end(self) -> None: ...


class _Body:
    """A ``SessionRunner``'s sink: the exchange, started (200) with the first bytes."""

    def __init__(self, exchange: Exchange, content_type: str) -> None:
        self.exchange = exchange
        self.content_type = content_type
        self.started = False

    async def send(self, data: bytes) -> None:
        if not self.started:
            self.started = True
            await self.exchange.start(200, {"Content-Type": self.content_type, "Cache-Control": "no-store"})
        await self.exchange.send(data)

    async def close(self, code: int, reason: str) -> None:
        if self.started:
            await self.exchange.end()


class OpenAIRoutes:
    def __init__(self, service: Service, caps: ConnectionCaps) -> None:
        self.service = service
        self.config = service.config
        self.caps = caps

    def table(self) -> dict[str, str]:
        registry = self.service.registry
        return openai_api.voice_table(self.config.openai_voices, registry.voices, registry.default_voice)

    async def serve(self, exchange: Exchange) -> None:
        try:
            await self._route(exchange)
        except ApiError as err:
            await _answer(exchange, err.status, err.body())

    async def _route(self, ex: Exchange) -> None:
        routes = {
            "/v1/audio/speech": ("POST", self._speech),
            "/v1/models": ("GET", lambda ex: _json(ex, openai_api.models())),
            "/v1/audio/models": ("GET", lambda ex: _json(ex, openai_api.audio_models())),
            "/v1/audio/voices": ("GET", lambda ex: _json(ex, openai_api.audio_voices(
                self.service.registry.voices, self.table()))),
        }
        route = routes.get(ex.path.rstrip("/"))
        if route is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no route {ex.path[:100]}", "not_found")
        method, handler = route
        if ex.method != method:
            raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{ex.path} takes {method}", "method_not_allowed")
        self._check_access(ex)
        await handler(ex)

    def _check_access(self, ex: Exchange) -> None:
        if not access.origin_allowed(ex.headers.get("Origin"), ex.headers.get("Host"), self.config.allow_origin):
            raise ApiError(HTTPStatus.FORBIDDEN, "this origin may not call the API (see --allow-origin)", "forbidden")
        if self.config.token is not None:
            scheme, _, token = (ex.headers.get("Authorization") or "").partition(" ")
            if scheme.lower() != "bearer" or not access.token_ok(token.strip(), self.config.token):
                raise ApiError(HTTPStatus.UNAUTHORIZED, "give the rtts token as 'Authorization: Bearer TOKEN'",
                               protocol.ErrorCode.UNAUTHORIZED.value)

    async def _speech(self, ex: Exchange) -> None:
        request = openai_api.parse_speech(ex.body, self.table())
        status = self.caps.refusal(ex.peer)
        if status is not None:
            self.service.metrics.refused.labels(str(status)).inc()
            raise ApiError(HTTPStatus(status), "busy: too many connections; retry", protocol.ErrorCode.BUSY.value)
        self.caps.take(ex.peer)
        try:
            await self._stream(ex, request)
        finally:
            self.caps.give_back(ex.peer)

    async def _stream(self, ex: Exchange, request: openai_api.SpeechRequest) -> None:
        encode = SpeechBody(request)
        sink = _Body(ex, encode.content_type())
        failure: ApiError | None = None
        async with SessionRunner(self.service, sink, encode, name="http") as runner:
            runner.hello(sample_rate=openai_api.RATE, format="f32", frame_ms=openai_api.FRAME_MS)
            speak = protocol.Speak(id="speech", text=request.text, voice=request.voice, speed=request.speed)
            try:
                await runner.speak(speak)
            except protocol.ProtocolError as exc:
                failure = openai_api.from_protocol(exc)
                if sink.started or runner.outbox.bytes:
                    runner.write(encode.failed(failure))  # the status is out: end the body as it can
                    failure = None
            except (ConnectionError, asyncio.CancelledError):
                return  # the client went away; its work was given back
        if failure is not None:
            raise failure


async def _json(ex: Exchange, obj: object, status: int = 200) -> None:
    await _answer(ex, status, json.dumps(obj, ensure_ascii=False).encode() + b"\n")


async def _answer(ex: Exchange, status: int, body: bytes) -> None:
    await ex.start(status, {"Content-Type": "application/json", "Cache-Control": "no-store",
                            "Content-Length": str(len(body))})
    await ex.send(body)
    await ex.end()
