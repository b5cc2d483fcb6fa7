"""Cutting the near-silence models leave at the start and end of their output."""

from __future__ import annotations

import numpy as np

__all__ = ["PAD_S", "silence_bounds", "trim_silence"]

_FRAME_S = 0.010
# A frame counts as sound when its RMS is within 40 dB of the loudest frame: relative,
# so quiet voices are trimmed like loud ones, and low enough to keep soft consonants.
_RELATIVE_DB = -40.0
# Below this RMS the whole output is treated as silence (about -80 dBFS).
_FLOOR_RMS = 1e-4
PAD_S = 0.025  # near-silence kept either side: the onset of the first phoneme is never clipped


def trim_silence(
    audio: np.ndarray, sample_rate: int, pad_s: float = PAD_S, *, start: bool = True, end: bool = True
) -> np.ndarray:
    """Return ``audio`` without its leading and trailing near-silence, keeping ``pad_s`` of it
    (``audio[slice(*silence_bounds(...))]``)."""
    first, last = silence_bounds(audio, sample_rate, pad_s, start=start, end=end)
    return audio[first:last]


def silence_bounds(
    audio: np.ndarray, sample_rate: int, pad_s: float = PAD_S, *, start: bool = True, end: bool = True
) -> tuple[int, int]:
    """Where ``audio`` starts and ends once its leading and trailing near-silence is cut,
    keeping ``pad_s`` of it.

    The caller adds its own pauses between units, so only a short pad is kept to avoid
    clipping the onset of the first phoneme. All-silent audio becomes empty. A streaming
    caller trims only the ``start`` of its first piece and the ``end`` of its last.

    Non-finite samples (what a model makes of a broken style) are measured as silence:
    audio with nothing else becomes empty, and any others are kept as they are, for
    the caller to refuse. Finite values of any size are measured (in float64, which
    holds the square of the largest float32).
    """
    frame = max(1, int(sample_rate * _FRAME_S))
    n_frames = len(audio) // frame
    level = np.abs(np.nan_to_num(audio, nan=0.0, posinf=0.0, neginf=0.0))
    if n_frames == 0:
        return (0, len(audio)) if np.max(level, initial=0.0) > _FLOOR_RMS else (0, 0)
    frames = level[: n_frames * frame].reshape(n_frames, frame).astype(np.float64)
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    peak = float(rms.max())
    if not peak >= _FLOOR_RMS:
        return 0, 0
    loud = np.flatnonzero(rms >= peak * 10 ** (_RELATIVE_DB / 20))
    pad = int(sample_rate * pad_s)
    first = max(0, int(loud[0]) * frame - pad) if start else 0
    # The tail after the last whole frame is kept when the last frame is loud.
    last = len(audio) if loud[-1] == n_frames - 1 or not end else min(len(audio), (int(loud[-1]) + 1) * frame + pad)
    return first, last
