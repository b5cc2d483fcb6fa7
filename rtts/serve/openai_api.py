"""The OpenAI speech API on rtts's port: ``POST /v1/audio/speech``, ``GET /v1/models``,
``GET /v1/audio/voices`` and ``GET /v1/audio/models``.

What clients written for OpenAI send (the ``openai`` package, Open WebUI, LibreChat, n8n,
Home Assistant's OpenAI integrations) is mapped onto one session utterance, run by a
``SessionRunner``: the same inference thread, scheduling, admission, limits and token
(``Authorization: Bearer``) as a WebSocket client. The body streams as the speech is
made: each 20 ms frame goes through the response format's encoder and out.

- ``model`` is accepted and ignored: the voice decides the engine.
- ``voice`` is an rtts voice id, or one of OpenAI's names: a character (female or male,
  ``rtts/serve/openai_voices.json``, ``--openai-voices``) read with a voice of the text's own
  language (``VoiceNames``). Absent, null or ``auto``: the server's choice, as for a
  WebSocket ``speak`` without a voice.
- ``response_format``: wav (a streamed WAV: its sizes say "unknown"), pcm (raw 24 kHz
  16-bit little-endian mono), mp3, opus (Ogg Opus), aac (ADTS), flac; all at 24 kHz.
- ``speed``: OpenAI takes 0.25-4.0; rtts voices 0.5-2.0, so it is clamped to that.
- ``stream_format``: ``audio`` (the default) or ``sse``: ``data: {"type":
  "speech.audio.delta", "audio": base64}`` events (the bytes of the response format,
  in order), then ``speech.audio.done`` with usage.
- ``instructions`` is accepted and ignored.
- ``generator`` (rtts's own): as a WebSocket ``speak``'s, which waveform generator a Kokoro
  voice speaks with: ``auto``, ``student`` or ``teacher`` (docs/protocol.md).
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

from rtts import protocol
from rtts.engines.base import VoiceInfo
from rtts.protocol import ErrorCode
from rtts.sound import audio, codecs
from rtts.text import markup
from rtts.text.segment import script_of, segment

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


AUTO = "auto"  # a voice that leaves the choice to the server, as no voice does


@dataclass(frozen=True)
class Character:
    """What an OpenAI voice name stands for: a gender, and rtts voices to try first (any language)."""

    gender: str | None
    voices: tuple[str, ...]


def default_table() -> dict[str, Character]:
    """OpenAI voice name → its character (``rtts/serve/openai_voices.json``)."""
    raw = json.loads((resources.files("rtts.serve") / "openai_voices.json").read_text(encoding="utf-8"))
    return {name: Character(entry.get("gender"), tuple(entry["voices"]))
            for name, entry in raw.items() if not name.startswith("_")}


class VoiceNames:
    """A request's ``voice`` → the rtts voice that reads its text. OpenAI's names are
    characters, not voices: ``alloy`` reads English with an American English voice and
    Mandarin with a Mandarin one, so a client that can only send OpenAI's names (the
    ``openai`` package, Open WebUI) never hears a text read with another language's
    phonology. The text's language is found as the session finds it (``text.segment``).

    ``voices`` and ``lang_voices`` are the registry's (each language's own voice:
    ``--lang-voices``); ``overrides`` (``--openai-voices``) go first for their own language.
    """

    def __init__(
        self, voices: Mapping[str, VoiceInfo], lang_voices: Mapping[str, VoiceInfo], default_voice: str,
        overrides: tuple[tuple[str, str], ...] = (), table: Mapping[str, Character] | None = None,
    ) -> None:
        self.voices = voices
        self.lang_voices = lang_voices
        self.default_voice = default_voice
        table = default_table() if table is None else table
        first: dict[str, list[str]] = {}
        for name, voice in overrides:
            first.setdefault(name.lower(), []).append(voice)
        self.table = {name: Character(c.gender, (*first.get(name, ()), *c.voices)) for name, c in table.items()}

    def resolve(self, voice: str | None, text: str, lang: str | None = None) -> str | None:
        """The rtts voice id for a request's ``voice`` and ``text`` (``lang``: the request's
        language, if it names one); None leaves the choice to the session, as for a
        WebSocket ``speak`` without a voice (absent, or ``auto``). Anything else that is
        not an OpenAI name is returned as it is: a voice id, or one the session refuses."""
        if voice is None or voice.lower() == AUTO:
            return None
        if voice in self.voices or voice.lower() not in self.table:
            return voice
        return self.pick(voice.lower(), lang or self.language(text))

    def pick(self, name: str, lang: str) -> str | None:
        """The voice OpenAI's ``name`` reads ``lang`` with: the first of its voices made for
        ``lang``; else the language's own voice when it is of the name's gender, else the
        first voice made for the language that is. None: no voice speaks ``lang`` (the
        session refuses the text with ``unsupported_language``)."""
        character = self.table[name]
        made_for = [v for v in self.voices.values() if _family(v.langs[0]) == _family(lang)]
        for voice_id in character.voices:
            if any(v.id == voice_id for v in made_for):
                return voice_id
        own = self.lang_voices.get(lang) or next(
            (v for code, v in self.lang_voices.items() if _family(code) == _family(lang)), None)
        if own is None:
            return None
        if None in (character.gender, own.gender) or own.gender == character.gender:
            return own.id
        return next((v.id for v in made_for if v.gender == character.gender), own.id)

    def language(self, text: str) -> str:
        """The language most of ``text`` is read in, by the session's segmentation (a Han,
        kana or Hangul character weighs as much as three Latin letters: about as long
        spoken); a text without letters is in the default voice's language."""
        default = self.voices[self.default_voice].langs[0]
        weights: dict[str, int] = {}
        for seg in segment(markup.render(text), None, default):
            weights[seg.lang] = weights.get(seg.lang, 0) + sum(
                1 if script == "latin" else 3 for script in map(script_of, seg.text) if script is not None)
        return max(weights, key=lambda lang: weights[lang], default=default) if any(weights.values()) else default

    def listing(self) -> list[dict[str, Any]]:
        """Each name, the voice it reads the default voice's language with, and the voice
        for every language a voice here speaks (``GET /v1/audio/voices``)."""
        default = self.voices[self.default_voice].langs[0]
        out = []
        for name in sorted(self.table):
            voice = self.pick(name, default) or self.default_voice
            by_lang = {lang: self.pick(name, lang) for lang in sorted(self.lang_voices)}
            out.append({"id": name, "name": f"{name} → {voice}", "voice": voice, "voices": by_lang})
        return out


def _family(lang: str) -> str:
    """Languages one voice is made for alike: American and British English are English."""
    lang = lang.lower()
    return "en" if lang.startswith("en") else lang.split("-")[0]


# ---------------------------------------------------------------- requests


@dataclass(frozen=True)
class SpeechRequest:
    text: str
    voice: str | None  # an rtts voice id (it may still be unknown: the session says so); None: the server's choice
    speed: float
    response_format: str
    stream_format: str
    model: str | None
    generator: str | None = None  # protocol.GENERATORS; None: the server's


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
        # rtts's own; its value is checked with the rest of the request, by the session.
        self.generator: str | None = self.get("generator", str)

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


def parse_speech(body: bytes, names: VoiceNames) -> SpeechRequest:
    """The JSON body of ``POST /v1/audio/speech`` → a request, or ``ApiError`` (400)."""
    fields = SpeechFields(body)
    voice = fields.obj.get("voice")
    if isinstance(voice, dict):  # a custom voice object (`{"id": ...}`) names it by id
        voice = voice.get("id")
    if voice is not None and not isinstance(voice, str):
        raise bad_request("'voice' has the wrong type", "voice")
    voice = names.resolve(voice, fields.text)
    stream_format = fields.get("stream_format", str, "audio")
    if stream_format not in STREAM_FORMATS:
        raise bad_request("stream_format must be audio or sse", "stream_format")
    model = fields.get("model", str)
    fields.get("instructions", str)  # accepted (and type-checked), not used
    return SpeechRequest(fields.text, voice, fields.speed, fields.format, stream_format, model, fields.generator)


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


def audio_voices(names: VoiceNames) -> dict[str, Any]:
    """``GET /v1/audio/voices``: every rtts voice, then OpenAI's names with the voice each
    speaks with (``voice``: in the default voice's language; ``voices``: in each language)."""
    listed = [{"id": v.id, "name": v.name, "languages": list(v.langs), "engine": v.engine}
              for v in names.voices.values()]
    return {"voices": listed + names.listing()}
