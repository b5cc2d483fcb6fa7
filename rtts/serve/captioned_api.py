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
- ``voice``: an rtts voice id, an OpenAI name (as ``/v1/audio/speech`` reads them: in
  the text's language, or ``lang_code``'s), ``auto``, or a Kokoro voice by its bare name (``af_heart`` is ``kokoro/af_heart``). Absent (or
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

A whole body waits in the server until its synthesis ends (only then is its status
known), so before the synthesis starts it is sized from its text (``whole_size``: the
most audio the text makes at its speed, as base64, and its timestamps) and reserved
within the server's ``--max-whole-body-mb`` for all such bodies at once
(``memory.WholeBodies``); one that cannot fit is refused then (``whole_too_large``,
or ``busy`` while others hold the room). Its audio is base64-encoded frame by frame as
it comes and the object sent in pieces, never copied whole on the event loop.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import numpy as np

from rtts import protocol
from rtts.serve.openai_api import AUTO, RATE, ApiError, SpeechFields, VoiceNames, bad_request
from rtts.sound import audio, codecs
from rtts.text.markup import MAX_BREAK_MS

# Kokoro's language letters (its pipeline's lang_code) → rtts's languages.
KOKORO_LANGS = {"a": "en", "b": "en-gb", "e": "es", "f": "fr", "h": "hi", "i": "it", "j": "ja", "p": "pt-br", "z": "zh"}
KOKORO_DEFAULT_VOICE = "af_heart"  # what Kokoro-FastAPI speaks with when a request names none
MAX_VOLUME = 10.0
# Seconds of speech a character makes at speed 1, at most, for sizing a whole body
# before it is made. Measured (rtts say, the default voices, 2026-12): English 0.065-0.08
# (0.2 for text that is mostly numbers: "1,234,567" is read in 2.8 s), Mandarin 0.20-0.22
# with its numbers, Japanese 0.18; each figure here is above what its kind of character
# was seen to make, so an estimate errs on the large side.
S_PER_DIGIT = 0.4
S_PER_CJK = 0.3  # a Han character or a kana
S_PER_OTHER = 0.1  # letters, spaces, punctuation: everything else
TIMESTAMP_BYTES_PER_CHAR = 60  # one timestamp's JSON (~110 bytes) per word of two or more characters
_WHOLE_FRAME = len(b'{"audio":"","audio_format":"audio/ogg; codecs=opus","timestamps":null}\n')
_SEND_PIECE = 1 << 16  # bytes of a whole body written at a time


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
    generator: str | None = None  # rtts's own, as /v1/audio/speech takes it


def parse(body: bytes, names: VoiceNames) -> CaptionedRequest:
    """The JSON body → a request, or ``ApiError`` (400)."""
    fields = SpeechFields(body)  # input, response_format, speed: as /v1/audio/speech checks them
    lang = fields.get("lang_code", str)
    if lang is not None:
        lang = KOKORO_LANGS.get(lang.lower(), lang)
    voice = _voice(fields.get("voice", str), names, fields.text, lang)
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
        generator=fields.generator,
    )


def _voice(name: str | None, names: VoiceNames, text: str, lang: str | None) -> str | None:
    voices = names.voices
    if name is None or name in voices or name.lower() in names.table or name.lower() == AUTO:
        return names.resolve(name, text, lang)  # an OpenAI name reads the text's language
    if f"kokoro/{name}" in voices:
        return f"kokoro/{name}"
    if name == KOKORO_DEFAULT_VOICE:
        return None  # Kokoro-FastAPI's default, sent by clients that fill every field in
    if any(c in name for c in "+()"):
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{name[:80]!r}: rtts does not mix voices; name one", "unknown_voice",
                       "voice")
    return name  # the session refuses it with unknown_voice, as it would a WebSocket's


def speech_seconds(text: str, speed: float, max_audio: float, max_pause: float) -> float:
    """The most audio ``text`` makes at ``speed`` (seconds): its characters at the rates
    above, its ``<break>`` pauses (each at most 10 s, all at most ``max_pause``), all of
    it at most ``max_audio`` (where the session ends any utterance)."""
    spoken = sum(S_PER_DIGIT if ch.isdigit() else S_PER_CJK if _cjk(ch) else S_PER_OTHER for ch in text)
    pauses = min(max_pause, text.count("<break") * MAX_BREAK_MS / 1000)
    return min(max_audio, spoken / speed + pauses)


def whole_size(request: CaptionedRequest, max_audio: float, max_pause: float) -> int:
    """Bytes of the whole body (``stream: false``) ``request`` can make, at most: its
    audio in the response format as base64, and its timestamps."""
    seconds = speech_seconds(request.text, request.speed, max_audio, max_pause)
    encoded = seconds * codecs.max_bytes_per_second(request.response_format, RATE) + 64  # a WAV header and a margin
    stamps = len(request.text) * TIMESTAMP_BYTES_PER_CHAR if request.timestamps else 0
    return 4 * math.ceil(encoded / 3) + stamps + _WHOLE_FRAME


def _cjk(ch: str) -> bool:
    code = ord(ch)
    return (0x3040 <= code <= 0x30FF or 0x3400 <= code <= 0x4DBF or 0x4E00 <= code <= 0x9FFF
            or 0xF900 <= code <= 0xFAFF or 0xFF66 <= code <= 0xFF9F or 0x20000 <= code <= 0x3FFFF)


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
    line; whole (``stream: false``), the audio is kept as base64 (``grew`` is told the
    bytes each piece adds) and ``whole`` gives the one object after ``end``."""

    def __init__(self, request: CaptionedRequest, grew: Callable[[int], None] | None = None) -> None:
        self.request = request
        self.encoder = codecs.stream_encoder(request.response_format, RATE)
        self.audio_format = codecs.content_type(request.response_format, RATE)
        self._pending: list[dict[str, Any]] = []  # timed, not yet on a line
        # Whole: the audio's base64 so far, and the last 0-2 bytes not yet in it (base64
        # takes 3 bytes at a time, so pieces encoded apart join into the whole's).
        self._base64 = bytearray()
        self._carry = b""
        self._grew = grew

    def content_type(self) -> str:
        return "application/json"  # Kokoro-FastAPI's, for the lines too

    def words(self, message: protocol.Words, sample_rate: int) -> None:
        self._pending += timestamps(message.words, sample_rate)

    def frame(self, samples: audio.Samples) -> bytes | None:
        if self.request.volume != 1.0:
            samples = np.clip(np.asarray(samples, dtype=np.float32) * self.request.volume, -1.0, 1.0)
        return self._out(self.encoder.push(samples))

    def end(self) -> bytes:
        """Streamed: the last line. Whole: the encoder's last bytes join the audio, and
        ``whole`` gives the object."""
        data = self.encoder.finish()
        if not self.request.stream:
            self._keep(data, last=True)
            if self.request.response_format == "wav":
                self._wav_sizes()
            return b""
        # Words with no audio after them (none, unless the session changes) still get a line.
        return self._out(data, last=True) or b""

    def whole(self) -> Whole:
        """The one object, after ``end``. Its timestamps' JSON is made here (thousands of
        words for a long text: call it off the event loop); its audio is not copied."""
        stamps = self._pending if self.request.timestamps else None
        tail = b'","audio_format":' + _json(self.audio_format) + b',"timestamps":' + _json(stamps) + b"}\n"
        return Whole(b'{"audio":"', self._base64, tail)

    def _out(self, data: bytes, last: bool = False) -> bytes | None:
        if not self.request.stream:
            self._keep(data)
            return None
        if not data and not (last and self._pending):
            return None  # words wait for the audio they describe, as Kokoro-FastAPI's do
        line, self._pending = self._line(data, self._pending), []
        return line

    def _keep(self, data: bytes, last: bool = False) -> None:
        data = self._carry + data
        cut = len(data) if last else len(data) - len(data) % 3
        self._carry = data[cut:]
        if cut:
            encoded = base64.b64encode(data[:cut])
            self._base64 += encoded
            if self._grew is not None:
                self._grew(len(encoded))

    def _wav_sizes(self) -> None:
        """A whole WAV's real sizes in its header, in place of the stream's "until the data
        ends" (audio.UNKNOWN_WAV_SIZE): the length is known once the body is whole. The
        header is the first 44 bytes; the first 48 are 64 base64 characters of their own."""
        total = len(self._base64) // 4 * 3 - self._base64[-2:].count(b"=")
        if total < 48:
            return
        head = bytearray(base64.b64decode(bytes(self._base64[:64])))
        struct.pack_into("<I", head, 4, total - 8)
        struct.pack_into("<I", head, 40, total - 44)
        self._base64[:64] = base64.b64encode(bytes(head))

    def _line(self, data: bytes, stamps: list[dict[str, Any]] | None) -> bytes:
        return _json({"audio": base64.b64encode(data).decode(), "audio_format": self.audio_format,
                      "timestamps": stamps}) + b"\n"

    @staticmethod
    def failed(error: ApiError) -> bytes:
        """The last line of a streamed body whose speech failed after it began."""
        return json.dumps({"error": json.loads(error.body())["error"]}, ensure_ascii=False).encode() + b"\n"


@dataclass(frozen=True)
class Whole:
    """A whole body in three parts, the audio's base64 between a head and a tail: the
    bytes ``{"audio", "audio_format", "timestamps"}`` makes dumped at once."""

    head: bytes
    audio: bytearray
    tail: bytes

    def __len__(self) -> int:
        return len(self.head) + len(self.audio) + len(self.tail)

    def pieces(self) -> Iterator[bytes]:
        """Its bytes in order, the audio a piece at a time (each piece a copy of itself only)."""
        yield self.head
        view = memoryview(self.audio)
        for start in range(0, len(view), _SEND_PIECE):
            yield bytes(view[start:start + _SEND_PIECE])
        yield self.tail


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
