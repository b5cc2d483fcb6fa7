"""One utterance's audio on its way to the client (pure numpy, no I/O).

Engines hand over float32 chunks at their model's own rate; the client asked for one
rate, format and frame length for the whole utterance. A ``Track`` resamples (a new
resampler whenever the voice's rate changes: several voices may speak one utterance),
cuts frames of exactly the asked length (only the last is shorter) and numbers them,
so every frame's ``pts`` and every mark's position is exact in output samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rtts.sound import audio, codecs

__all__ = ["RESAMPLER_HOLD_S", "Frame", "Track"]

# The most audio soxr's streaming resampler holds back between chunks (it works in blocks:
# 6-42 ms, measured over Kokoro's, Piper's and the clients' rates; tests/unit/test_track.py).
RESAMPLER_HOLD_S = 0.045


@dataclass(frozen=True)
class Frame:
    seq: int
    pts: int  # output samples before this frame
    data: bytes  # encoded in the utterance's format
    seconds: float


class Track:
    def __init__(self, sample_rate: int, frame_ms: int, format: str) -> None:
        self.sample_rate = sample_rate
        self.format = format
        self.frame_len = audio.frame_samples(sample_rate, frame_ms)
        self._framer = audio.Framer(self.frame_len)
        self.seq = 0
        self.audio_s = 0.0  # audio taken in so far, pauses included
        # Output position: samples framed before the current resampler started, plus what
        # that resampler was given (at its input rate). A voice with another native rate
        # flushes the resampler into the framer and starts a new one, so positions stay exact.
        self.rate = 0  # the current input rate; 0 before any audio
        self._out_base = 0
        self._native_since = 0
        self._resampler: audio.Resampler | None = None
        # Format "opus": one encoder for the utterance, a packet per frame (codecs imports PyAV
        # only here, so a server without the codecs extra never loads it).
        self._opus = codecs.OpusPackets(sample_rate, self.frame_len) if format == "opus" else None

    @property
    def position(self) -> int:
        """Where the next sample taken in will play, in output samples (for marks)."""
        if not self.rate:
            return self._out_base
        return self._out_base + self._native_since * self.sample_rate // self.rate

    @property
    def unsent_s(self) -> float:
        """Seconds of audio taken in and not yet in a frame: the framer's part frame and the
        resampler's filter delay, which go out with the audio that follows."""
        return (self.position - self._framer.samples_out) / self.sample_rate

    def switch_rate(self, rate: int) -> list[Frame]:
        """Resample from ``rate`` from now on; the old resampler's tail is framed first."""
        if self.rate == rate:
            return []
        frames = self._drain()
        self.rate = rate
        self._resampler = audio.Resampler(rate, self.sample_rate)
        return frames

    def push(self, samples: np.ndarray) -> list[Frame]:
        """Samples at the current rate (``switch_rate`` first)."""
        if self._resampler is None:
            raise ValueError("push before switch_rate: the track does not know the input rate")
        self._native_since += len(samples)
        self.audio_s += len(samples) / self.rate
        return self._number(self._framer.push(self._resampler.process(samples)))

    def finish(self) -> list[Frame]:
        """The resampler's tail and the one short frame."""
        frames = self._drain()
        tail = self._framer.flush()
        if self._opus is not None:
            # Opus frames are whole: the tail and the encoder's look-ahead, padded.
            return frames + [self._frame(data, self.frame_len) for data in self._opus.finish(tail)]
        return frames + (self._number([tail]) if tail is not None else [])

    def _drain(self) -> list[Frame]:
        frames = []
        if self._resampler is not None:
            frames = self._number(self._framer.push(self._resampler.flush()))
        self._out_base = self._framer.samples_out + self._framer.pending
        self._native_since = 0
        self._resampler = None
        self.rate = 0
        return frames

    def _number(self, samples: list[np.ndarray]) -> list[Frame]:
        if self._opus is not None:
            return [self._frame(self._opus.encode(frame), len(frame)) for frame in samples]
        return [self._frame(audio.encode(frame, self.format), len(frame)) for frame in samples]

    def _frame(self, data: bytes, samples: int) -> Frame:
        pts = self.seq * self.frame_len  # only the last frame is shorter, so this is exact
        self.seq += 1
        return Frame(self.seq - 1, pts, data, samples / self.sample_rate)
