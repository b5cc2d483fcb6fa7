"""An utterance's audio track (rtts/sound/track.py): frames and positions stay exact across voices' rates."""

from __future__ import annotations

import numpy as np
import pytest

from rtts.sound.track import RESAMPLER_HOLD_S, Track


def test_frames_are_numbered_and_exact_across_a_change_of_rate() -> None:
    track = Track(24000, 20, "pcm16")
    frames = track.switch_rate(22050)
    frames += track.push(np.zeros(22050 // 2, np.float32))  # 0.5 s at 22.05 kHz
    mark = track.position
    frames += track.switch_rate(24000)  # a voice at another rate: the old resampler's tail first
    assert track.position == mark == 12000
    frames += track.push(np.zeros(4800, np.float32))  # 0.2 s at 24 kHz
    frames += track.finish()
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert [f.pts for f in frames] == [i * 480 for i in range(len(frames))]
    assert sum(len(f.data) for f in frames) // 2 == pytest.approx(16800, abs=2)
    assert all(len(f.data) == 960 for f in frames[:-1])
    assert track.audio_s == pytest.approx(0.7)


def test_a_track_needs_its_input_rate_first() -> None:
    with pytest.raises(ValueError, match="switch_rate"):
        Track(24000, 20, "pcm16").push(np.zeros(10, np.float32))


@pytest.mark.parametrize("native, out", [(22050, 24000), (24000, 16000), (22050, 16000), (24000, 48000), (22050, 44100)])
def test_what_the_resampler_holds_back_is_within_the_bound_the_thread_counts(native, out) -> None:
    # The inference thread takes RESAMPLER_HOLD_S as held back where the rates differ
    # (Job.framed): it must be no less than what soxr's stream holds after any chunk.
    track = Track(out, 20, "pcm16")
    track.switch_rate(native)
    for seconds in np.random.default_rng(native + out).uniform(0.005, 0.4, 60):
        track.push(np.zeros(int(seconds * native), np.float32))
        assert 0.0 <= track.unsent_s <= 0.020 + RESAMPLER_HOLD_S  # a part frame and the hold
