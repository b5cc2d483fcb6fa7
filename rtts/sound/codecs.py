"""Compressed audio for clients that ask for it: mp3, Opus, AAC and FLAC, plus WAV and raw PCM.

Two shapes, for two kinds of client:

* ``stream_encoder(fmt, rate)``: a byte stream to write as it comes (HTTP bodies, the
  OpenAI speech API): ``push(samples) -> bytes`` and ``finish() -> bytes``. mp3 is bare
  MPEG frames, Opus is Ogg Opus, AAC is ADTS, FLAC is native FLAC, WAV is a header with
  "unknown length" sizes followed by PCM, ``pcm`` is bare little-endian int16.
* ``OpusPackets(rate, frame_samples)``: one raw Opus packet per fixed frame, for a
  framed transport (the WebSocket's ``format: "opus"``, decoded in browsers by
  WebCodecs' ``AudioDecoder``).

mp3 is the OpenAI speech API's default (what its clients send when they name no
format), so every install makes it: LAME itself, through lameenc (a base dependency, a
0.2 MB wheel). Opus, AAC and FLAC are FFmpeg's encoders, through PyAV (libopus,
FFmpeg's own AAC and FLAC, all in PyAV's wheel). PyAV is an optional extra (``pip
install 'rtts[codecs]'``: a 36 MB wheel, ~20 MB of RSS once imported), so it is imported
on first use, never at start: a server nobody asks for Opus idles as small as before.
``available(fmt)`` tells whether a format can be made here; asking for one that cannot
raises ``Unavailable``.
"""

from __future__ import annotations

import importlib.util
import struct
from dataclasses import dataclass
from typing import Any, Final, Protocol

import lameenc  # LAME, for mp3 (a base dependency; see the docstring)
import numpy as np

from rtts.sound import audio


# What each compressed format is made of: FFmpeg muxer, encoder, bit rate (None: lossless
# or the encoder's own choice), and the Content-Type it is served as.
@dataclass(frozen=True)
class _Container:
    muxer: str
    codec: str
    bit_rate: int | None
    content_type: str
    options: tuple[tuple[str, str], ...] = ()


# Bit rates for mono speech: Opus is transparent-ish for speech at 24 kbit/s (the rate
# the thin links need), mp3 and AAC need more for the same quality at 24 kHz.
# docs/benchmarks.md has the bytes per second of audio each one makes.
_CONTAINERS: Final = {
    # One Ogg page per packet: the first sound leaves at once instead of after a 1 s page.
    "opus": _Container("ogg", "libopus", 24_000, "audio/ogg; codecs=opus", (("page_duration", "20000"),)),
    "aac": _Container("adts", "aac", 48_000, "audio/aac"),
    "flac": _Container("flac", "flac", None, "audio/flac"),
}
# mp3 at 48 kbit/s (LAME, not PyAV: see the module's docstring). LAME's own default
# quality, which is what FFmpeg's libmp3lame used here before.
MP3_BIT_RATE: Final = 48_000
_MP3_QUALITY: Final = 3
PLAIN: Final = ("wav", "pcm")
# Made by every install: the plain formats and mp3.
ALWAYS: Final = PLAIN + ("mp3",)
COMPRESSED: Final = ("mp3", *_CONTAINERS)
STREAM_FORMATS: Final = PLAIN + COMPRESSED
# libopus takes these rates, and frames of these lengths (ms).
OPUS_RATES: Final = (8000, 12000, 16000, 24000, 48000)
OPUS_FRAME_MS: Final = (10, 20, 40, 60)
OPUS_BIT_RATE: Final = 24_000

_INSTALL_HINT = "pip install 'rtts[codecs]' (PyAV)"


class Unavailable(Exception):
    """This format (Opus, AAC, FLAC) needs PyAV, which is not installed."""


def _av() -> Any:
    try:
        import av
    except ImportError:
        raise Unavailable(f"Opus, AAC and FLAC need PyAV: {_INSTALL_HINT}") from None
    return av


def available(fmt: str) -> bool:
    """Whether ``fmt`` (a stream format, or ``"opus"`` for packets) can be encoded here.

    Asked of every WebSocket's ``ready``: it looks for PyAV without importing it, which
    would take tens of milliseconds of the event loop and ~20 MB on the first ``ready``
    of a server that may never encode anything.
    """
    if fmt in ALWAYS:
        return True
    try:
        return importlib.util.find_spec("av") is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def usable(fmt: str) -> bool:
    """Whether ``fmt`` can be encoded here, PyAV imported to be sure (once; the import is
    kept): for a request that is about to use it, where ``available``'s look could be
    fooled by a package that is there but does not import (a half-removed or broken one)."""
    if fmt in ALWAYS:
        return True
    try:
        _av()
    except Unavailable:
        return False
    return True


def content_type(fmt: str, rate: int) -> str:
    if fmt == "wav":
        return "audio/wav"
    if fmt == "pcm":
        return f"audio/pcm; rate={rate}; channels=1; encoding=s16le"
    if fmt == "mp3":
        return "audio/mpeg"
    return _CONTAINERS[fmt].content_type


# ---------------------------------------------------------------- byte streams


class StreamEncoder(Protocol):
    def push(self, samples: audio.Samples) -> bytes:
        """Encode more audio; returns what is ready to send (maybe nothing yet)."""
        ...

    def finish(self) -> bytes:
        """The end of the stream: what the encoder still held, and any trailer."""
        ...

    def close(self) -> None:
        """Give the encoder back, finished or not (a refused or abandoned stream); again: nothing."""
        ...


class _Pcm:
    def push(self, samples: audio.Samples) -> bytes:
        return audio.encode(samples, "pcm16")

    def finish(self) -> bytes:
        return b""

    def close(self) -> None:
        pass


class _Wav(_Pcm):
    """A WAV whose length is not known when it starts (``audio.UNKNOWN_WAV_SIZE``: sizes
    that FFmpeg, and players built on it, read as "until the end of the stream")."""

    def __init__(self, rate: int) -> None:
        self._header: bytes | None = audio.wav_header(rate)

    def push(self, samples: audio.Samples) -> bytes:
        head, self._header = self._header or b"", None
        return head + super().push(samples)

    def finish(self) -> bytes:
        head, self._header = self._header or b"", None
        return head


class _Counted:
    """A compressed stream encoder, counted from when it is made until it is closed
    (``open_encoders``): one that is never closed is a leak, in FFmpeg's buffers (a muxer
    only dropped keeps them for good) or in the caller's bookkeeping."""

    unclosed = 0  # in this process: what a leak test, or a metric, reads

    def __init__(self) -> None:
        self._closed = False
        _Counted.unclosed += 1

    def close(self) -> None:
        """Give the encoder back; again: nothing."""
        if not self._closed:
            self._closed = True
            _Counted.unclosed -= 1
            self._release()

    def _release(self) -> None:
        pass


class _Mp3(_Counted):
    """Bare MPEG audio frames from LAME, at the input's own rate (LAME would otherwise pick
    a lower one for 48 kbit/s at 44.1 or 48 kHz). LAME holds about a frame and its
    look-ahead (~1,700 samples), so the first bytes come after ~70 ms of audio."""

    def __init__(self, rate: int) -> None:
        super().__init__()
        enc = lameenc.Encoder()
        enc.set_channels(1)
        enc.set_in_sample_rate(rate)
        enc.set_out_sample_rate(rate)
        enc.set_bit_rate(MP3_BIT_RATE // 1000)
        enc.set_quality(_MP3_QUALITY)
        enc.silence()  # LAME prints its settings to stdout otherwise
        self._enc = enc

    def push(self, samples: audio.Samples) -> bytes:
        return bytes(self._enc.encode(audio.encode(samples, "pcm16"))) if len(samples) else b""

    def finish(self) -> bytes:
        try:
            return bytes(self._enc.flush())
        finally:
            self.close()


class _Collect:
    """The file PyAV's muxer writes into: it keeps what was written until taken."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: Any) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


class _Muxed(_Counted):
    """An FFmpeg encoder and muxer writing into memory, flushed after every packet so
    that each push returns the bytes it made (a streamed body starts with the first).

    It must be closed (``finish`` or ``close``): an output container that is only
    dropped keeps FFmpeg's buffers, 20-60 KB a stream, for good (the garbage collector
    frees the Python object, not them).
    """

    def __init__(self, fmt: str, rate: int) -> None:
        av = _av()
        spec = _CONTAINERS[fmt]
        self._av = av
        self._rate = rate
        self._sink = _Collect()
        # The file has no seek(): muxers that would go back to patch a header (FLAC's
        # STREAMINFO totals) leave it as it was written, which decoders accept.
        self._out = av.open(self._sink, mode="w", format=spec.muxer,
                            options={"flush_packets": "1", **dict(spec.options)})
        super().__init__()
        try:
            self._stream = self._out.add_stream(spec.codec, rate=rate, layout="mono")
            if spec.bit_rate:
                self._stream.codec_context.bit_rate = spec.bit_rate
            self._out.start_encoding()  # the header now, so even an empty stream is a valid file
        except BaseException:
            self.close()
            raise
        self._pts = 0

    def push(self, samples: audio.Samples) -> bytes:
        if len(samples):
            frame = self._av.AudioFrame.from_ndarray(
                np.ascontiguousarray(samples, dtype=np.float32).reshape(1, -1), format="flt", layout="mono"
            )
            frame.sample_rate = self._rate
            frame.pts = self._pts
            self._pts += len(samples)
            for packet in self._stream.encode(frame):
                self._out.mux(packet)
        return self._sink.take()

    def finish(self) -> bytes:
        try:
            for packet in self._stream.encode(None):
                self._out.mux(packet)
        finally:
            self.close()
        return self._sink.take()

    def _release(self) -> None:
        self._out.close()  # writes the trailer into the sink, which nobody reads then


def max_bytes_per_second(fmt: str, rate: int) -> float:
    """At most how many bytes one second of mono audio at ``rate`` makes in ``fmt``, for
    sizing a body before it is made: PCM's own, FLAC's (on noise, which it cannot shrink,
    its frames come to 4.5% over PCM), the compressed formats their bit rate with their
    framing's share and a margin (docs/history/benchmarks.md, "Formats": mp3 6,008 B/s at 48
    kbit/s, Ogg Opus 4,434 at 24, ADTS AAC 6,471 at 48)."""
    if fmt in PLAIN:
        return 2.0 * rate
    if fmt == "flac":
        return 2.2 * rate
    bit_rate = MP3_BIT_RATE if fmt == "mp3" else _CONTAINERS[fmt].bit_rate or 16 * rate
    framing = 1.6 if fmt == "opus" else 1.15  # an Ogg page per 20 ms packet is ~45% over 24 kbit/s
    return bit_rate / 8 * framing


def open_encoders() -> int:
    """Compressed stream encoders made and not yet closed, in this process."""
    return _Counted.unclosed


def stream_encoder(fmt: str, rate: int) -> StreamEncoder:
    """A streaming encoder of float32 mono audio at ``rate`` into ``fmt`` (``STREAM_FORMATS``).

    Raises ``Unavailable`` when ``fmt`` needs PyAV and it is missing, ValueError for an
    unknown format.
    """
    if fmt == "pcm":
        return _Pcm()
    if fmt == "wav":
        return _Wav(rate)
    if fmt == "mp3":
        return _Mp3(rate)
    if fmt not in _CONTAINERS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(STREAM_FORMATS)}")
    return _Muxed(fmt, rate)


# ---------------------------------------------------------------- Opus packets


def check_opus(rate: int, frame_ms: int, offered: tuple[int, ...] = OPUS_RATES) -> None:
    """ValueError unless libopus can make frames of ``frame_ms`` at ``rate``, and PyAV is here.

    ``offered``: the rates the caller takes at all (``protocol.SAMPLE_RATES``); the
    message names only those libopus takes too, so every rate it lists is accepted.
    """
    if rate not in OPUS_RATES or rate not in offered:
        rates = [r for r in OPUS_RATES if r in offered]
        raise ValueError(f"opus takes sample_rate {', '.join(map(str, rates))}, not {rate}")
    if frame_ms not in OPUS_FRAME_MS:
        raise ValueError(f"opus takes frame_ms {', '.join(map(str, OPUS_FRAME_MS))}, not {frame_ms}")
    if not available("opus"):
        raise ValueError(f"opus is not available on this server ({_INSTALL_HINT})")


class OpusPackets:
    """Raw Opus packets (RFC 6716), exactly one per frame of ``frame_samples``.

    libopus looks ahead: its output is late by ``pre_skip`` samples (6.5 ms: 312 at
    48 kHz), as a decoder's first samples show. ``finish`` therefore encodes the last,
    shorter frame padded with silence plus that look-ahead, so the end of the speech is
    in the packets; it returns one or two packets.
    """

    def __init__(self, rate: int, frame_samples: int, bit_rate: int = OPUS_BIT_RATE) -> None:
        av = _av()
        self._av = av
        self.rate = rate
        self.frame_samples = frame_samples
        ctx = av.CodecContext.create("libopus", "w")
        ctx.sample_rate = rate
        ctx.layout = "mono"
        ctx.format = "flt"
        ctx.bit_rate = bit_rate
        ctx.options = {"frame_duration": f"{frame_samples * 1000 / rate:g}", "application": "audio"}
        ctx.open()
        self._ctx = ctx
        # OpusHead (RFC 7845 §5.1): the pre-skip is a little-endian u16 at byte 10, at 48 kHz.
        head = bytes(ctx.extradata or b"")
        self.head = head
        self.pre_skip = struct.unpack_from("<H", head, 10)[0] * rate // 48000 if len(head) >= 12 else 0
        self._pts = 0

    def encode(self, frame: audio.Samples) -> bytes:
        """One full frame → one packet."""
        if len(frame) != self.frame_samples:
            raise ValueError(f"an Opus frame is {self.frame_samples} samples, not {len(frame)}")
        packets = self._encode(frame)
        if len(packets) != 1:  # libopus is synchronous: a frame in, a packet out
            raise RuntimeError(f"libopus gave {len(packets)} packets for one frame")
        return packets[0]

    def finish(self, tail: audio.Samples | None) -> list[bytes]:
        """The last (shorter, or no) frame and the look-ahead, padded to whole frames."""
        rest = np.zeros(0, dtype=np.float32) if tail is None else np.asarray(tail, dtype=np.float32)
        n = len(rest) + self.pre_skip
        n = -(-n // self.frame_samples) * self.frame_samples
        padded = np.zeros(n, dtype=np.float32)
        padded[: len(rest)] = rest
        return [self.encode(padded[i : i + self.frame_samples]) for i in range(0, n, self.frame_samples)]

    def _encode(self, frame: audio.Samples) -> list[bytes]:
        f = self._av.AudioFrame.from_ndarray(
            np.ascontiguousarray(frame, dtype=np.float32).reshape(1, -1), format="flt", layout="mono"
        )
        f.sample_rate = self.rate
        f.pts = self._pts
        self._pts += len(frame)
        return [bytes(p) for p in self._ctx.encode(f)]
