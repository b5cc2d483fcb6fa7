"""The OpenAI speech API on rtts's port: ``POST /v1/audio/speech``, ``GET /v1/models``,
``GET /v1/audio/voices`` and ``GET /v1/audio/models``.

What clients written for OpenAI send (the ``openai`` package, Open WebUI, LibreChat, n8n,
Home Assistant's OpenAI integrations) is mapped onto one session utterance, run by a
``SessionRunner``: the same inference thread, scheduling, admission, limits and token
(``Authorization: Bearer``) as a WebSocket client. The body streams as the speech is
made: each 20 ms frame goes through the response format's encoder and out.

- ``model`` is accepted and ignored: the voice decides the engine.
- ``voice`` is an rtts voice id, or one of OpenAI's names mapped by ``voice_table``
  (``rtts/openai_voices.json``, overridden by ``--openai-voices``); a mapped name whose
  voices are not installed speaks with the default voice.
- ``response_format``: wav (a streamed WAV: its sizes say "unknown"), pcm (raw 24 kHz
  16-bit little-endian mono), mp3, opus (Ogg Opus), aac (ADTS), flac; all at 24 kHz.
- ``speed``: OpenAI takes 0.25-4.0; rtts voices 0.5-2.0, so it is clamped to that.
- ``stream_format``: ``audio`` (the default) or ``sse``: ``data: {"type":
  "speech.audio.delta", "audio": base64}`` events (the bytes of the response format,
  in order), then ``speech.audio.done`` with usage.
- ``instructions`` is accepted and ignored.
- Errors: ``{"error": {"message", "type", "param", "code"}}`` with a 4xx/5xx status;
  ``code`` is rtts's stable error code.

This module is the HTTP-independent part: parsing, voice mapping, error shapes and the
body as a stream of bytes; ``openai_routes.py`` serves it on the server's plain HTTP.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from importlib import resources
from typing import Any

import numpy as np

from . import audio, codecs, protocol
from .engines.base import VoiceInfo
from .protocol import ErrorCode

RATE = 24000  # what OpenAI's formats are, and what its clients expect of `pcm`
FRAME_MS = 20
SPEED_RANGE = (0.25, 4.0)  # OpenAI's; rtts clamps into protocol.SPEED_RANGE
STREAM_FORMATS = ("audio", "sse")
MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")


# ---------------------------------------------------------------- errors


class ApiError(Exception):
    """An answer in OpenAI's error shape."""

    def __init__(self, status: HTTPStatus, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param

    @property
    def type(self) -> str:
        if self.status == HTTPStatus.UNAUTHORIZED:
            return "authentication_error"
        if self.status == HTTPStatus.TOO_MANY_REQUESTS:
            return "rate_limit_error"
        if self.status >= 500:
            return "server_error"
        return "invalid_request_error"

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": error}, ensure_ascii=False).encode() + b"\n"


# rtts error code → HTTP status (everything else is the client's request: 400).
_STATUS = {
    ErrorCode.UNAUTHORIZED: HTTPStatus.UNAUTHORIZED,
    ErrorCode.BUSY: HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.ENGINE_UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.MEMORY_BUDGET: HTTPStatus.SERVICE_UNAVAILABLE,
    ErrorCode.INTERNAL: HTTPStatus.INTERNAL_SERVER_ERROR,
}
_PARAM = {
    ErrorCode.UNKNOWN_VOICE: "voice",
    ErrorCode.TEXT_TOO_LONG: "input",
    ErrorCode.UNSUPPORTED_LANGUAGE: "input",
    ErrorCode.BAD_MESSAGE: "input",
}


def from_protocol(exc: protocol.ProtocolError) -> ApiError:
    status = _STATUS.get(exc.code, HTTPStatus.BAD_REQUEST)
    return ApiError(status, exc.message, exc.code.value, _PARAM.get(exc.code))


# ---------------------------------------------------------------- voices


def default_table() -> dict[str, tuple[str, ...]]:
    """OpenAI voice name → rtts voice ids to try in order (``rtts/openai_voices.json``)."""
    raw = json.loads((resources.files("rtts") / "openai_voices.json").read_text(encoding="utf-8"))
    return {name: tuple(ids) for name, ids in raw.items() if not name.startswith("_")}


def voice_table(overrides: tuple[tuple[str, str], ...], voices: Mapping[str, VoiceInfo], default: str) -> dict[str, str]:
    """Every OpenAI name → the installed voice it speaks with (overrides first, then the
    table's first installed candidate, then the default voice)."""
    table = {name: next((v for v in ids if v in voices), default) for name, ids in default_table().items()}
    table.update({name: voice for name, voice in overrides if voice in voices})
    return table


# ---------------------------------------------------------------- requests


@dataclass(frozen=True)
class SpeechRequest:
    text: str
    voice: str  # an rtts voice id (it may still be unknown: the session says so)
    speed: float
    response_format: str
    stream_format: str
    model: str | None


class SpeechFields:
    """A speech route's JSON body, checked once for what every such route takes (``input``,
    ``response_format``, ``speed``: OpenAI's and Kokoro-FastAPI's alike), with a typed
    getter for the rest. Every refusal is ``ApiError`` (400)."""

    def __init__(self, body: bytes) -> None:
        try:
            self.obj = protocol.decode_json(body, max_bytes=len(body))  # the front already bounded the size
        except protocol.ProtocolError as exc:
            raise bad_request(f"the body must be a JSON object: {exc.message}", None, exc.code.value) from None
        text = self.get("input", str)
        if text is None:
            raise bad_request("'input' is required: the text to speak", "input", "missing_field")
        if not text.strip():
            raise bad_request("'input' has nothing to speak", "input")
        self.text: str = text
        fmt = self.get("response_format", str, "mp3")
        if fmt not in codecs.STREAM_FORMATS:
            raise bad_request(f"response_format must be one of {', '.join(codecs.STREAM_FORMATS)}", "response_format")
        if not codecs.usable(fmt):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"{fmt} is not available on this server: pip install 'rtts[codecs]' "
                           f"({', '.join(codecs.ALWAYS)} always are)", "unsupported_format", "response_format")
        self.format: str = fmt
        speed = float(self.get("speed", (int, float), 1.0))
        if not (protocol.finite(speed) and SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]):
            raise bad_request(f"speed must be within {SPEED_RANGE[0]}..{SPEED_RANGE[1]}", "speed")
        # OpenAI's range is wider than the session's: the ends are the session's ends.
        self.speed = min(max(speed, protocol.SPEED_RANGE[0]), protocol.SPEED_RANGE[1])

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        """Field ``name`` if it is a ``kind`` (a bool only where ``kind`` is bool), ``default``
        when absent or null."""
        value = self.obj.get(name, default)
        if value is None:
            return default
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise bad_request(f"'{name}' has the wrong type", name)
        return value


def bad_request(message: str, param: str | None, code: str = "bad_message") -> ApiError:
    return ApiError(HTTPStatus.BAD_REQUEST, message, code, param)


def parse_speech(body: bytes, table: Mapping[str, str]) -> SpeechRequest:
    """The JSON body of ``POST /v1/audio/speech`` → a request, or ``ApiError`` (400)."""
    fields = SpeechFields(body)
    voice = fields.obj.get("voice")
    if isinstance(voice, dict):  # a custom voice object (`{"id": ...}`) names it by id
        voice = voice.get("id")
    if voice is None:
        raise bad_request("'voice' is required: an rtts voice id or an OpenAI voice name", "voice", "missing_field")
    if not isinstance(voice, str):
        raise bad_request("'voice' has the wrong type", "voice")
    voice = table.get(voice.lower(), voice)
    stream_format = fields.get("stream_format", str, "audio")
    if stream_format not in STREAM_FORMATS:
        raise bad_request("stream_format must be audio or sse", "stream_format")
    model = fields.get("model", str)
    fields.get("instructions", str)  # accepted (and type-checked), not used
    return SpeechRequest(fields.text, voice, fields.speed, fields.format, stream_format, model)


# ---------------------------------------------------------------- the body


class SpeechBody:
    """The response body, piece by piece: each frame of audio through the response
    format's encoder (``frame``), then what the encoder held and any trailer (``end``);
    with ``stream_format: "sse"`` the same bytes go out as ``speech.audio.delta`` events."""

    def __init__(self, request: SpeechRequest) -> None:
        self.request = request
        self.encoder = codecs.stream_encoder(request.response_format, RATE)
        self.sse = request.stream_format == "sse"

    def content_type(self) -> str:
        return "text/event-stream" if self.sse else codecs.content_type(self.request.response_format, RATE)

    def frame(self, samples: audio.Samples) -> bytes | None:
        return self._out(self.encoder.push(samples))

    def end(self, audio_ms: float) -> bytes:
        data = self._out(self.encoder.finish()) or b""
        if self.sse:
            data += _sse(_done_event(self.request.text, audio_ms / 1000))
        return data

    def _out(self, data: bytes) -> bytes | None:
        if not data:
            return None
        if self.sse:
            return _sse({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
        return data

    def failed(self, error: ApiError) -> bytes:
        """What to send when the speech fails after the body began (the status is out):
        an SSE ``error`` event, or nothing (the body ends short)."""
        if self.sse:
            return _sse({"type": "error", "error": json.loads(error.body())["error"]})
        return b""


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def _done_event(text: str, audio_s: float) -> dict[str, Any]:
    # OpenAI counts tokens; rtts has none. Characters in and 20 ms frames out are
    # reported in their place so clients that read `usage` get numbers that grow with work.
    out_frames = int(np.ceil(audio_s * 1000 / FRAME_MS))
    return {"type": "speech.audio.done",
            "usage": {"input_tokens": len(text), "output_tokens": out_frames, "total_tokens": len(text) + out_frames}}


# ---------------------------------------------------------------- listings


def models() -> dict[str, Any]:
    """``GET /v1/models``: the names clients send as ``model`` (all accepted, all the same)."""
    now = int(time.time())
    return {"object": "list", "data": [{"id": m, "object": "model", "created": now, "owned_by": "rtts"} for m in MODELS]}


def audio_models() -> dict[str, Any]:
    """``GET /v1/audio/models``, as Open WebUI asks an OpenAI-compatible TTS server."""
    return {"models": [{"id": m, "name": m} for m in MODELS]}


def audio_voices(voices: Mapping[str, VoiceInfo], table: Mapping[str, str]) -> dict[str, Any]:
    """``GET /v1/audio/voices``: every rtts voice, then OpenAI's names with the voice each speaks with."""
    listed = [{"id": v.id, "name": v.name, "languages": list(v.langs), "engine": v.engine} for v in voices.values()]
    aliases = [{"id": name, "name": f"{name} → {voice}", "voice": voice} for name, voice in sorted(table.items())]
    return {"voices": listed + aliases}
