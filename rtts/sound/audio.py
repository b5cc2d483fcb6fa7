"""Pure audio helpers on float32 mono sample arrays in [-1, 1].

Everything the server does to audio between the engine and the socket lives here:
wire encodings (``pcm16``, ``f32``, ``mulaw``), streaming resampling, fixed-size
framing, WAV I/O for tests and clients, and clean-up of engine output. No I/O other
than ``read_wav`` on a path, no event loop, no ONNX.

Conventions: samples are ``np.float32`` 1-D arrays; full scale is 1.0 and int16 maps
as ``i / 32768`` so that ``encode(decode(b, "pcm16"), "pcm16") == b`` exactly.
"""

from __future__ import annotations

import io
import os
import struct
import wave
from collections.abc import Iterator
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt
import soxr

FORMATS: Final = ("pcm16", "f32", "mulaw")
SAMPLE_RATES: Final = (8000, 16000, 22050, 24000, 44100, 48000)

_BYTES_PER_SAMPLE: Final = {"pcm16": 2, "f32": 4, "mulaw": 1}

Samples = npt.NDArray[np.float32]


def _check_format(fmt: str) -> None:
    if fmt not in _BYTES_PER_SAMPLE:
        raise ValueError(f"unknown audio format {fmt!r}; expected one of {', '.join(FORMATS)}")


def bytes_per_sample(fmt: str) -> int:
    """Size of one mono sample on the wire in ``fmt``."""
    _check_format(fmt)
    return _BYTES_PER_SAMPLE[fmt]


def _as_mono(samples: npt.ArrayLike) -> Samples:
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        # Silently flattening (n, 2) would interleave channels into garbage.
        raise ValueError(f"expected 1-D mono samples, got shape {x.shape}")
    return x


# --- G.711 mu-law -----------------------------------------------------------
#
# Same algorithm as CPython's audioop (Sun's g711.c): the int16 sample is shifted to
# 14 bits, biased, and split into a 3-bit segment and 4-bit mantissa. Encoding is a
# 64 KiB lookup table indexed by the int16 bit pattern, which is exact by
# construction and faster than doing the bit arithmetic per call.

_ULAW_BIAS: Final = 0x84
_ULAW_SEG_END: Final = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)


def _build_ulaw_encode_table() -> npt.NDArray[np.uint8]:
    pcm = np.arange(65536, dtype=np.uint16).view(np.int16).astype(np.int32) >> 2
    negative = pcm < 0
    magnitude = np.where(negative, -pcm, pcm) + (_ULAW_BIAS >> 2)
    seg = np.searchsorted(_ULAW_SEG_END, magnitude, side="left")
    mantissa = (magnitude >> (seg + 1)) & 0xF
    code = np.where(seg >= 8, 0x7F, (seg << 4) | mantissa)
    code ^= np.where(negative, 0x7F, 0xFF)
    return code.astype(np.uint8)


def _build_ulaw_decode_table() -> npt.NDArray[np.int16]:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.int16)


_ULAW_ENCODE: Final = _build_ulaw_encode_table()  # indexed by int16 viewed as uint16
_ULAW_DECODE: Final = _build_ulaw_decode_table()  # indexed by the mu-law byte


def _to_int16(x: Samples) -> npt.NDArray[np.int16]:
    # Round to nearest (not truncate) so that decode -> encode is lossless; the clip
    # also catches +1.0, which would otherwise wrap to -32768.
    return np.clip(np.rint(x * 32768.0), -32768, 32767).astype(np.int16)


def _finite(x: Samples) -> Samples:
    # A NaN cast to int16 is undefined (and warns); encode() must never emit it.
    if np.isfinite(x).all():
        return x
    return np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)


def encode(samples: npt.ArrayLike, fmt: str) -> bytes:
    """Encode float samples for the wire.

    Out-of-range values are clipped to [-1, 1] and NaN becomes 0, so this never
    fails on bad engine output; use :func:`sanitize` first if you want to count it.

    * ``pcm16``: little-endian int16, ``round(x * 32768)`` clipped.
    * ``f32``: little-endian float32.
    * ``mulaw``: 8-bit G.711 mu-law of the pcm16 value (bit-exact with ``audioop``).
    """
    _check_format(fmt)
    x = _finite(_as_mono(samples))
    if fmt == "f32":
        return np.clip(x, -1.0, 1.0).astype("<f4", copy=False).tobytes()
    pcm = _to_int16(x)
    if fmt == "pcm16":
        return pcm.astype("<i2", copy=False).tobytes()
    return _ULAW_ENCODE[pcm.view(np.uint16)].tobytes()


def decode(data: bytes | bytearray | memoryview, fmt: str) -> Samples:
    """Inverse of :func:`encode`: wire bytes to a new, writable float32 array."""
    _check_format(fmt)
    size = _BYTES_PER_SAMPLE[fmt]
    if len(data) % size:
        raise ValueError(f"{len(data)} bytes is not a whole number of {fmt} samples")
    if fmt == "f32":
        return np.frombuffer(data, dtype="<f4").astype(np.float32)
    if fmt == "pcm16":
        pcm = np.frombuffer(data, dtype="<i2")
    else:
        pcm = _ULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]
    return pcm.astype(np.float32) / np.float32(32768.0)


# --- timing -----------------------------------------------------------------


def frame_samples(sample_rate: int, frame_ms: float) -> int:
    """Samples in one frame of exactly ``frame_ms`` at ``sample_rate``.

    Raises ValueError when the frame would not hold a whole number of samples
    (22050 Hz with 10 ms is 220.5): rounding would make timestamps drift.
    """
    if sample_rate <= 0 or frame_ms <= 0:
        raise ValueError(f"sample_rate and frame_ms must be positive, got {sample_rate}, {frame_ms}")
    # Via str so that a decimal like 0.5 ms is taken at its face value, not its binary float.
    n = Fraction(sample_rate) * Fraction(str(frame_ms)) / 1000
    if n.denominator != 1:
        raise ValueError(f"{frame_ms} ms at {sample_rate} Hz is {float(n)} samples, not a whole number")
    return int(n)


def silence(ms: float, rate: int) -> Samples:
    """``ms`` milliseconds of zeros at ``rate`` (rounded to the nearest sample)."""
    if ms < 0 or rate <= 0:
        raise ValueError(f"need ms >= 0 and rate > 0, got {ms}, {rate}")
    return np.zeros(round(rate * ms / 1000), dtype=np.float32)


def silence_chunks(ms: float, rate: int, chunk_ms: int) -> Iterator[Samples]:
    """``silence(ms, rate)`` in pieces of at most ``chunk_ms``: a long pause is never one array."""
    if ms < 0 or rate <= 0 or chunk_ms <= 0:
        raise ValueError(f"need ms >= 0, rate > 0 and chunk_ms > 0, got {ms}, {rate}, {chunk_ms}")
    left = round(rate * ms / 1000)
    step = max(1, rate * chunk_ms // 1000)
    while left > 0:
        n = min(step, left)
        left -= n
        yield np.zeros(n, dtype=np.float32)


# --- streaming resampling ---------------------------------------------------


class Resampler:
    """Streaming mono resampler that is seamless across ``process`` calls.

    Keeps the filter state between chunks, so cutting the input into pieces gives
    the same output as one call. soxr holds back a filter delay's worth of output;
    ``flush()`` returns it at the end of an utterance and readies the resampler for
    the next one. With equal rates it is a passthrough that returns its input.
    """

    def __init__(self, in_rate: int, out_rate: int) -> None:
        if in_rate <= 0 or out_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {in_rate} -> {out_rate}")
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream = (
            None
            if in_rate == out_rate
            else soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality="HQ")
        )

    @property
    def passthrough(self) -> bool:
        return self._stream is None

    def process(self, x: npt.ArrayLike) -> Samples:
        samples = _as_mono(x)
        if self._stream is None:
            return samples
        out: Samples = self._stream.resample_chunk(np.ascontiguousarray(samples))
        return out

    def flush(self) -> Samples:
        """Return the held-back tail and reset for a new, unrelated signal."""
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        tail: Samples = self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        self._stream.clear()
        return tail


# --- framing ----------------------------------------------------------------


class Framer:
    """Cuts a stream of sample chunks into frames of exactly ``frame_samples``.

    ``samples_out`` counts the samples in frames already returned, i.e. the
    presentation timestamp (in samples) of the next frame. Frames may be views of
    the pushed arrays, so do not modify those afterwards.
    """

    def __init__(self, frame_samples: int) -> None:
        if frame_samples <= 0:
            raise ValueError(f"frame_samples must be positive, got {frame_samples}")
        self.frame_samples = frame_samples
        self.samples_out = 0
        self._rest: Samples = np.zeros(0, dtype=np.float32)

    @property
    def pending(self) -> int:
        """Samples held back waiting for a full frame."""
        return len(self._rest)

    def push(self, x: npt.ArrayLike) -> list[Samples]:
        samples = _as_mono(x)
        buf = np.concatenate((self._rest, samples)) if len(self._rest) else samples
        n = len(buf) // self.frame_samples * self.frame_samples
        frames = [buf[i : i + self.frame_samples] for i in range(0, n, self.frame_samples)]
        # Copy the remainder so it does not pin the caller's (possibly large) array.
        self._rest = buf[n:].copy()
        self.samples_out += n
        return frames

    def flush(self) -> Samples | None:
        """The final, shorter frame, or None if nothing is buffered."""
        if not len(self._rest):
            return None
        last, self._rest = self._rest, np.zeros(0, dtype=np.float32)
        self.samples_out += len(last)
        return last


# --- WAV --------------------------------------------------------------------


def wav_bytes(samples: npt.ArrayLike, rate: int) -> bytes:
    """A complete 16-bit mono WAV file."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(encode(samples, "pcm16"))
    return buf.getvalue()


# The size of a WAV chunk not known when its header goes out (a stream): what FFmpeg
# writes for a WAV sent to a pipe, and reads as "until the data ends" (wavdec.c) wherever
# it meets it. 0, the other habit, would be read as no audio at all by Python's wave.
# Python's wave has no "unknown": it reports 2**31 - 1 frames and reads what is there;
# libsndfile (soundfile) takes the length from a saved file's size.
UNKNOWN_WAV_SIZE = 0xFFFFFFFF


def wav_header(rate: int, data_bytes: int | None = None) -> bytes:
    """The 44-byte header of a 16-bit mono WAV of ``data_bytes`` of samples; ``None``:
    the length is not known yet (a stream), both sizes ``UNKNOWN_WAV_SIZE``."""
    riff, data = (UNKNOWN_WAV_SIZE,) * 2 if data_bytes is None else (36 + data_bytes, data_bytes)
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI", b"RIFF", riff, b"WAVE", b"fmt ", 16, 1, 1, rate, rate * 2, 2, 16, b"data", data
    )


def read_wav(source: str | os.PathLike[str] | bytes | bytearray) -> tuple[Samples, int]:
    """Read an integer PCM WAV (8, 16 or 32 bit) as float32 mono and its rate.

    Multi-channel files are averaged down to mono.
    """
    f = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else os.fspath(source)
    with wave.open(f, "rb") as w:
        channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
        raw = w.readframes(w.getnframes())
    if width == 1:  # 8-bit WAV is unsigned
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 4:
        x = (np.frombuffer(raw, dtype="<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    else:
        raise ValueError(f"unsupported WAV sample width: {width} bytes")
    if channels > 1:
        x = x.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    return x.astype(np.float32, copy=False), rate


# --- clean-up ---------------------------------------------------------------


def sanitize(x: npt.ArrayLike) -> tuple[Samples, int]:
    """Replace NaN/inf with 0 and clip to [-1, 1].

    Returns the clean array and how many samples were not finite, so the caller can
    log a model producing NaN (out-of-range but finite samples are clipped silently).
    """
    samples = _as_mono(x)
    finite = np.isfinite(samples)
    bad = samples.size - int(np.count_nonzero(finite))
    if bad:
        samples = np.where(finite, samples, np.float32(0.0))
    return np.clip(samples, -1.0, 1.0), bad
