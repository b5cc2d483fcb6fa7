"""trim_silence on audio no model should make, but a broken style does (issue 20, bug 19)."""

from __future__ import annotations

import numpy as np
import pytest

from rtts.engines.trim import trim_silence

RATE = 24000


def tone(seconds: float, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (amplitude * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


@pytest.mark.parametrize("fill", [np.nan, np.inf, -np.inf, 0.0])
@pytest.mark.parametrize("n", [RATE, 100, 0])
def test_audio_of_nothing_but_non_finite_or_zero_samples_becomes_empty(fill: float, n: int) -> None:
    """3e38 styles made Kokoro's audio all NaN: IndexError (`internal`) here."""
    assert trim_silence(np.full(n, fill, np.float32), RATE).size == 0


def test_extreme_finite_audio_is_trimmed_like_any_other() -> None:
    quiet = np.zeros(RATE // 2, np.float32)
    audio = np.concatenate([quiet, np.full(RATE, 3e38, np.float32), quiet])
    out = trim_silence(audio, RATE, pad_s=0.0)
    assert out.size == RATE and np.all(out == np.float32(3e38))


def test_non_finite_samples_count_as_silence_and_are_left_for_the_caller() -> None:
    audio = np.concatenate([np.full(RATE // 2, np.nan, np.float32), tone(1.0), np.full(RATE // 2, np.inf, np.float32)])
    out = trim_silence(audio, RATE, pad_s=0.0)
    assert out.size == pytest.approx(RATE, abs=RATE // 50)
    assert np.isfinite(out).all()
    mixed = tone(1.0)
    mixed[100] = np.nan  # kept: trimming is not repairing
    assert np.isnan(trim_silence(mixed, RATE)).sum() == 1
