"""The OpenAI routes on the server's plain HTTP (``plain_http.HttpFront``):
``POST /v1/audio/speech``, ``GET /v1/models``, ``GET /v1/audio/voices``, ``GET /v1/audio/models``,
and Kokoro-FastAPI's ``POST /dev/captioned_speech`` (``captioned_api.py``), which its
clients use beside them.

Speech is a ``SpeechStream`` (the connection ``/tts`` uses): the same session,
scheduling, limits and backpressure as a WebSocket client. Its frames go through the
response format's encoder as they come and out as a chunked body, so a client that
stops reading holds its synthesis back and one that goes away cancels it. Who may
ask is the server's ``http_gate`` (draining, Origin, ``Authorization: Bearer``, the
connection caps), its refusals given in OpenAI's error shape; a request holds a
connection slot for as long as its body streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import prometheus_client as prom

from rtts import protocol
from rtts.host import memory
from rtts.serve import captioned_api, openai_api
from rtts.serve.captioned_api import CaptionedBody, CaptionedRequest, Whole
from rtts.serve.openai_api import ApiError, SpeechBody
from rtts.serve.plain_http import HttpFront, HttpRequest, HttpResponse, is_json, json_response
from rtts.serve.speech_stream import VOICE_HEADER, SpeechStream
from rtts.sound import audio, codecs

if TYPE_CHECKING:
    from rtts.config import Config
    from rtts.serve.access import ConnectionCaps
    from rtts.service import Service

log = logging.getLogger(__name__)

# The gate's refusals (text/plain) → OpenAI's error codes.
_GATE_CODES = {401: "unauthorized", 403: "forbidden", 429: "busy", 503: "busy"}


class OpenAIRoutes:
    """The routes, given what they share with the WebSocket: the service, the config, the
    server's admission rules for a route that synthesizes (``gate``: draining, Origin,
    token, caps) and the connection caps whose slot each body holds."""

    def __init__(
        self, service: Service, config: Config, gate: Callable[[HttpRequest], tuple[HttpResponse | None, str]],
        caps: ConnectionCaps,
    ) -> None:
        self.service = service
        self.config = config
        self._gate = gate
        self._caps = caps
        self._table = openai_api.default_table()
        prom.Gauge(
            "rtts_encoders_open", "compressed-audio encoders open in this process (one per mp3/opus/aac/flac body)",
            registry=self.service.metrics.registry,
        ).set_function(codecs.open_encoders)

    def register(self, front: HttpFront) -> None:
        front.route("/v1/audio/speech", self._speech, methods=("POST",), refuse=_refuse)
        front.route("/dev/captioned_speech", self._captioned, methods=("POST",), refuse=_refuse)
        front.route("/v1/models", self._listing(openai_api.models))
        front.route("/v1/audio/models", self._listing(openai_api.audio_models))
        front.route("/v1/audio/voices", self._listing(lambda: openai_api.audio_voices(self.names())))

    def names(self) -> openai_api.VoiceNames:
        """OpenAI's voice names over the voices there are now (a SIGHUP rescan changes them)."""
        registry = self.service.registry
        return openai_api.VoiceNames(registry.voices, registry.lang_voices, registry.default_voice,
                                     self.config.openai_voices, self._table)

    @staticmethod
    def _listing(make: Callable[[], object]) -> Callable[[HttpRequest], object]:
        async def route(request: HttpRequest) -> HttpResponse:
            return json_response(HTTPStatus.OK, make())

        return route

    async def _speech(self, request: HttpRequest) -> HttpResponse:
        try:
            return await self._speak(request)
        except ApiError as err:
            return _error(err)

    def _admit(self, request: HttpRequest) -> tuple[HttpResponse | None, str]:
        """The gate's refusal in OpenAI's shape, or None and the client's address; ``ApiError``
        (415) for a body that is not JSON."""
        refusal, address = self._gate(request)
        if refusal is not None:
            message = refusal.body.decode().strip() if isinstance(refusal.body, bytes) else "refused"
            err = ApiError(HTTPStatus(refusal.status), message, _GATE_CODES.get(refusal.status, "refused"))
            return _error(err, [(k, v) for k, v in refusal.headers if k in ("Retry-After", "WWW-Authenticate")]), address
        if not is_json(request.header("Content-Type")):
            # json.loads would take text/plain, form data and UTF-16 alike; the API is JSON.
            raise ApiError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "the body must be JSON: send Content-Type: "
                           "application/json", "unsupported_media_type")
        return None, address

    async def _speak(self, request: HttpRequest) -> HttpResponse:
        refusal, address = self._admit(request)
        if refusal is not None:
            return refusal
        speech = openai_api.parse_speech(request.body, self.names())
        held = self._hold(address)
        async with held.starting():
            start = await held.stream.start(speech.text, speech.voice, None, speech.speed, generator=speech.generator)
            body = SpeechBody(speech)  # admitted: only now is an encoder made
            held.encoder = body.encoder
        # Which voice reads the text's start: an OpenAI name or no voice leaves it to the text's language.
        headers = [("Content-Type", body.content_type()), (VOICE_HEADER, start.voice)]
        return HttpResponse(HTTPStatus.OK.value, headers, _chunks(held.stream, body), on_done=held.release)

    async def _captioned(self, request: HttpRequest) -> HttpResponse:
        try:
            return await self._caption(request)
        except ApiError as err:
            return _error(err)

    async def _caption(self, request: HttpRequest) -> HttpResponse:
        """``POST /dev/captioned_speech``: the speech route's admission and session, the
        words asked for, and Kokoro-FastAPI's JSON (lines) out."""
        refusal, address = self._admit(request)
        if refusal is not None:
            return refusal
        ask = captioned_api.parse(request.body, self.names())
        held = self._hold(address)
        if not ask.stream:
            try:
                held.whole = self._reserve(ask)  # refused here, before any audio is made
            except ApiError:
                held.release()
                raise
        stream = held.stream
        async with held.starting():
            await stream.start(ask.text, ask.voice, ask.lang, ask.speed, words="word" if ask.timestamps else None,
                               generator=ask.generator)
            body = CaptionedBody(ask, held.whole.fill if held.whole is not None else None)
            held.encoder = body.encoder
            if not ask.stream:
                # Whole: every failure is still answered with its status.
                async with contextlib.aclosing(_captioned_lines(stream, body)) as lines:
                    async for _ in lines:
                        pass
                body.end()
                whole = await asyncio.to_thread(body.whole)  # a long text's timestamps: not on the loop
        headers = [("Content-Type", body.content_type())]
        if not ask.stream:
            # Held (and counted) until it is sent; sent in pieces, with its length.
            headers.append(("Content-Length", str(len(whole))))
            return HttpResponse(HTTPStatus.OK.value, headers, _pieces(whole), on_done=held.release)
        return HttpResponse(HTTPStatus.OK.value, headers, _captioned_stream(stream, body), on_done=held.release)

    def _reserve(self, ask: CaptionedRequest) -> memory.WholeBody:
        """Room in the server for a whole body the size ``ask`` can make, before its
        synthesis starts; ``ApiError`` when it cannot have it."""
        size = captioned_api.whole_size(ask, self.config.max_audio, self.config.max_pause)
        bodies = self.service.bodies
        if size > bodies.limit:
            seconds = captioned_api.speech_seconds(ask.text, ask.speed, self.config.max_audio, self.config.max_pause)
            raise ApiError(HTTPStatus.BAD_REQUEST, f"this text can make {seconds:.0f} s of audio, {size / memory.MB:.1f} "
                           f"MB as one JSON object: over the {bodies.limit / memory.MB:g} MB this server holds for "
                           "whole bodies (--max-whole-body-mb); ask with \"stream\": true, or send the text in parts",
                           "whole_too_large", "stream")
        reservation = bodies.reserve(size)
        if reservation is None:
            raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, "other whole bodies hold the room this one needs "
                           "(--max-whole-body-mb): try again shortly, or ask with \"stream\": true", "busy")
        return reservation

    def _hold(self, address: str) -> _Held:
        """A connection slot for ``address`` and the speech stream that holds it."""
        caps = self._caps
        caps.take(address)
        try:
            stream = SpeechStream(self.service, sample_rate=openai_api.RATE, format="f32",
                                  voices_at="GET /v1/audio/voices")
        except BaseException:
            caps.give_back(address)
            raise
        return _Held(stream, lambda: caps.give_back(address))


class _Held:
    """What a speech request holds until it ends, whichever way (refused, failed, finished,
    or the client gone mid-body): its encoder, its stream, its connection slot and a whole
    body's room in the server. An encoder only dropped keeps FFmpeg's buffers for good
    (codecs._Muxed)."""

    def __init__(self, stream: SpeechStream, give_back: Callable[[], None]) -> None:
        self.stream = stream
        self.encoder: Any = None  # set once admitted: only then is one made
        self.whole: memory.WholeBody | None = None  # a whole body's room in the server
        self._give_back = give_back

    def release(self) -> None:
        if self.encoder is not None:
            self.encoder.close()
        if self.whole is not None:
            self.whole.release()
        self.stream.close()
        self._give_back()

    @contextlib.asynccontextmanager
    async def starting(self) -> AsyncIterator[None]:
        """Around the start of the speech: a refusal becomes its OpenAI error, and any
        failure releases everything first."""
        try:
            yield
        except protocol.ProtocolError as exc:
            self.release()
            raise openai_api.from_protocol(exc) from None
        except BaseException:
            self.release()
            raise


async def _captioned_lines(stream: SpeechStream, body: CaptionedBody) -> AsyncIterator[bytes]:
    """The body's lines as the audio and its words come (raises what the speech raises)."""
    async with contextlib.aclosing(stream.timed()) as items:
        async for item in items:
            if isinstance(item, protocol.Words):
                body.words(item, stream.sample_rate)
            elif data := body.frame(audio.decode(item, "f32")):
                yield data


async def _captioned_stream(stream: SpeechStream, body: CaptionedBody) -> AsyncIterator[bytes]:
    try:
        async with contextlib.aclosing(_captioned_lines(stream, body)) as lines:
            async for data in lines:
                yield data
    except protocol.ProtocolError as exc:
        yield body.failed(openai_api.from_protocol(exc))
        return
    yield body.end()


async def _pieces(whole: Whole) -> AsyncIterator[bytes]:
    for piece in whole.pieces():
        yield piece


async def _chunks(stream: SpeechStream, body: SpeechBody) -> AsyncIterator[bytes]:
    """The body, frame by frame through the encoder; a failure after the status is out
    ends an SSE body with an ``error`` event (an audio body just ends)."""
    try:
        async for frame in stream:
            data = body.frame(audio.decode(frame, "f32"))
            if data:
                yield data
    except protocol.ProtocolError as exc:
        yield body.failed(openai_api.from_protocol(exc))
        return
    yield body.end(stream.end.stats.get("audio_ms", 0.0) if stream.end else 0.0)


def _refuse(status: HTTPStatus, code: str, message: str) -> HttpResponse:
    """A request refused before the route saw it (a body over the limit…), in OpenAI's shape."""
    return _error(ApiError(status, message, code, "input" if status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE else None))


def _error(err: ApiError, headers: list[tuple[str, str]] | None = None) -> HttpResponse:
    return HttpResponse(err.status.value, [("Content-Type", "application/json"), *(headers or [])], err.body())
