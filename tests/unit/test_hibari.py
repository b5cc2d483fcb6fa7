"""Hibari's DSP run over windows of frames, against the package's own one-shot synth."""

from __future__ import annotations

import numpy as np
import pytest

hibari = pytest.importorskip("hibari")
from hibari import dsp  # noqa: E402

from rtts.engines.hibari import FIRST_WINDOW, LAST_WINDOW, Windows, window_sizes  # noqa: E402


@pytest.fixture(scope="module")
def tts():  # type: ignore[no-untyped-def]
    return hibari.Hibari()


def _outputs(tts, text: str) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    ids = tts.ids(tts.phonemize(text)[0])
    feeds = {"ids": np.asarray([ids], np.int64), "speed": np.asarray([1.0], np.float32)}
    return [o[0] for o in tts.sess.run(None, feeds)]


@pytest.mark.parametrize("text", ["Hi.", "The quick brown fox jumps over the lazy dog while the sun sets."])
@pytest.mark.parametrize("first,later", [(1, 1), (3, 5), (12, 64), (10_000, 1)])
def test_windows_give_the_one_shot_audio(tts, text: str, first: int, later: int) -> None:  # type: ignore[no-untyped-def]
    outputs = _outputs(tts, text)
    frames = outputs[0].shape[1]
    one_shot = dsp.synth(*outputs, np.random.default_rng(7))
    # The same noise as dsp.synth draws for the whole unit, handed out by frame.
    z = np.random.default_rng(7).standard_normal((outputs[0].shape[0], 2 * frames), dtype=np.float32)
    z = z.view(np.complex64)
    windows = Windows(outputs, lambda a, b: z[:, a:b].copy())
    parts = [windows.take(first)]
    while not windows.finished:
        parts.append(windows.take(later))
    audio = np.concatenate(parts)
    assert audio.shape == one_shot.shape == (frames * dsp.HOP,)
    # Sums taken in another order (a window's tail is added before the next frames): float32
    # rounding only. Measured: at most 6e-8 on a signal peaking near 0.4; 0 for one window.
    difference = float(np.max(np.abs(audio - one_shot)))
    assert difference <= 2e-7 * max(1.0, float(np.max(np.abs(one_shot))))
    if first >= frames:
        assert difference == 0.0


@pytest.mark.parametrize("frames", [1, 30, 87, 88, 200, 1000])
def test_window_sizes_cover_the_unit_and_keep_its_end_whole(frames: int) -> None:
    sizes = window_sizes(frames, FIRST_WINDOW)
    assert sum(sizes) == frames and all(s > 0 for s in sizes)
    assert sizes[0] == min(frames, FIRST_WINDOW) or len(sizes) == 1
    assert len(sizes) == 1 or sizes[-1] >= LAST_WINDOW  # the trailing silence is trimmed in one piece
