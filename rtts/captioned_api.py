"""Kokoro-FastAPI's ``POST /dev/captioned_speech``: speech with the time of every word,
in the shape its clients read, so they work with rtts unchanged.

The request is its body: OpenAI's speech fields (``input``, ``voice``, ``model``,
``response_format``, ``speed``) and Kokoro-FastAPI's own:

- ``stream`` (default true): the body is JSON lines, each ``{"audio": base64,
  "audio_format": content type, "timestamps": [...]}``: the bytes of the response
  format in order (joined, they are the file), and the words timed since the line
  before, each before or with the audio it describes. False: one JSON object of the
  same three fields, for the whole text.
- ``return_timestamps`` (default true): false leaves ``timestamps`` empty (``[]``
  streamed, ``null`` whole), and the words are not timed at all.
- ``lang_code``: Kokoro's one letter (``a`` American English, ``b`` British, ``e``
  Spanish, ``f`` French, ``i`` Italian, ``j`` Japanese, ``p`` Brazilian Portuguese,
  ``z`` Mandarin) or an rtts language code.
- ``volume_multiplier`` (default 1.0): a gain, the result clipped to full scale.
- ``voice``: an rtts voice id, an OpenAI name (the ``/v1/audio/speech`` table), or a
  Kokoro voice by its bare name (``af_heart`` is ``kokoro/af_heart``). Absent (or
  Kokoro-FastAPI's default ``af_heart`` when that voice is not installed, it is not
  an error), rtts chooses as for any request without a voice: by the text's language.
  Mixes (``af_bella+af_sky``) are refused with ``unknown_voice``.
- ``ssml``: accepted; rtts always reads its SSML subset (``<break>``, ``<say-as>``,
  ``<sub>``). ``allow_voice_tags: true`` is refused (``bad_message``): rtts has no
  ``[voice:...]`` tags, and would read them aloud. ``normalization_options``,
  ``return_download_link``, ``download_format`` and ``voice_aliases`` are accepted and
  not used (no ``X-Download-Path`` header comes back).

Each timestamp is Kokoro-FastAPI's ``{"word", "start_time", "end_time"}`` (seconds in
the audio), with ``word`` the client's own text of the word ("$23.50", "2026年3月15日"),
not what was read for it, and punctuation never a word of its own; rtts adds
``said`` (what was read), ``text_start`` and ``text_end`` (code points of ``input``).

Errors are the OpenAI routes' (``{"error": {message, type, param, code}}``, 503 for
``memory_budget`` and ``engine_unavailable``), all before the body begins; a failure
after it began ends a streamed body with a line ``{"error": {...}}``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import numpy as np

from . import audio, codecs, protocol
from .engines.base import VoiceInfo
from .openai_api import RATE, ApiError, SpeechFields, bad_request

# Kokoro's language letters (its pipeline's lang_code) → rtts's languages.
KOKORO_LANGS = {"a": "en", "b": "en-gb", "e": "es", "f": "fr", "h": "hi", "i": "it", "j": "ja", "p": "pt-br", "z": "zh"}
KOKORO_DEFAULT_VOICE = "af_heart"  # what Kokoro-FastAPI speaks with when a request names none
MAX_VOLUME = 10.0


@dataclass(frozen=True)
class CaptionedRequest:
    text: str
    voice: str | None  # None: the session chooses by the text's language
    lang: str | None
    speed: float
    response_format: str
    stream: bool
    timestamps: bool
    volume: float


def parse(body: bytes, table: Mapping[str, str], voices: Mapping[str, VoiceInfo]) -> CaptionedRequest:
    """The JSON body → a request, or ``ApiError`` (400)."""
    fields = SpeechFields(body)  # input, response_format, speed: as /v1/audio/speech checks them
    voice = _voice(fields.get("voice", str), table, voices)
    lang = fields.get("lang_code", str)
    if lang is not None:
        lang = KOKORO_LANGS.get(lang.lower(), lang)
    volume = float(fields.get("volume_multiplier", (int, float), 1.0))
    if not (protocol.finite(volume) and 0 <= volume <= MAX_VOLUME):
        raise bad_request(f"volume_multiplier must be within 0..{MAX_VOLUME:g}", "volume_multiplier")
    if fields.get("allow_voice_tags", bool, False):
        raise bad_request("allow_voice_tags: rtts has no [voice:...] tags (one voice per request)", "allow_voice_tags")
    for name, kind in (("model", str), ("ssml", bool), ("return_download_link", bool), ("download_format", str),
                       ("normalization_options", dict), ("voice_aliases", dict)):
        fields.get(name, kind)  # accepted (and type-checked), not used
    return CaptionedRequest(
        text=fields.text,
        voice=voice,
        lang=lang,
        speed=fields.speed,
        response_format=fields.format,
        stream=fields.get("stream", bool, True),
        timestamps=fields.get("return_timestamps", bool, True),
        volume=volume,
    )


def _voice(name: str | None, table: Mapping[str, str], voices: Mapping[str, VoiceInfo]) -> str | None:
    if name is None:
        return None
    if name in voices:
        return name
    if name.lower() in table:
        return table[name.lower()]
    if f"kokoro/{name}" in voices:
        return f"kokoro/{name}"
    if name == KOKORO_DEFAULT_VOICE:
        return None  # Kokoro-FastAPI's default, sent by clients that fill every field in
    if any(c in name for c in "+()"):
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{name[:80]!r}: rtts does not mix voices; name one", "unknown_voice",
                       "voice")
    return name  # the session refuses it with unknown_voice, as it would a WebSocket's


def timestamps(words: list[dict[str, Any]], sample_rate: int) -> list[dict[str, Any]]:
    """``words`` entries → Kokoro-FastAPI's timestamps, with rtts's fields beside them."""
    return [
        {"word": w["text"], "start_time": round(w["start"] / sample_rate, 3), "end_time": round(w["end"] / sample_rate, 3),
         "said": w["said"], "text_start": w["text_start"], "text_end": w["text_end"]}
        for w in words
    ]


class CaptionedBody:
    """The response, piece by piece: ``words`` as they come, each ``frame`` of audio through
    the response format's encoder, then ``end``. Streamed, each piece that has audio is a
    line; whole (``stream: false``), ``end`` gives the one object."""

    def __init__(self, request: CaptionedRequest) -> None:
        self.request = request
        self.encoder = codecs.stream_encoder(request.response_format, RATE)
        self.audio_format = codecs.content_type(request.response_format, RATE)
        self._pending: list[dict[str, Any]] = []  # timed, not yet on a line
        self._whole: list[bytes] = []

    def content_type(self) -> str:
        return "application/json"  # Kokoro-FastAPI's, for the lines too

    def words(self, message: protocol.Words, sample_rate: int) -> None:
        self._pending += timestamps(message.words, sample_rate)

    def frame(self, samples: audio.Samples) -> bytes | None:
        if self.request.volume != 1.0:
            samples = np.clip(np.asarray(samples, dtype=np.float32) * self.request.volume, -1.0, 1.0)
        return self._out(self.encoder.push(samples))

    def end(self) -> bytes:
        data = self.encoder.finish()
        if not self.request.stream:
            self._whole.append(data)
            return self._line(b"".join(self._whole), self._pending if self.request.timestamps else None)
        # Words with no audio after them (none, unless the session changes) still get a line.
        return self._out(data, last=True) or b""

    def _out(self, data: bytes, last: bool = False) -> bytes | None:
        if not self.request.stream:
            self._whole.append(data)
            return None
        if not data and not (last and self._pending):
            return None  # words wait for the audio they describe, as Kokoro-FastAPI's do
        line, self._pending = self._line(data, self._pending), []
        return line

    def _line(self, data: bytes, stamps: list[dict[str, Any]] | None) -> bytes:
        obj = {"audio": base64.b64encode(data).decode(), "audio_format": self.audio_format, "timestamps": stamps}
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"

    @staticmethod
    def failed(error: ApiError) -> bytes:
        """The last line of a streamed body whose speech failed after it began."""
        return json.dumps({"error": json.loads(error.body())["error"]}, ensure_ascii=False).encode() + b"\n"
