"""The headless player's pure parts (rtts/play): the timeline's client rules (docs/protocol.md,
"Playing in step"), the steering that keeps an output on the shared clock, how a device
block is dated (outputs.BlockDates), and the settings file. End to end, with real processes, sockets and a sound server:
tests/system/test_in_step_across_instances.py and test_headless_players.py."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from rtts.play import settings as play_settings
from rtts.play.steering import DEADBAND_S, Steering, fit
from rtts.play.timeline import FADE_S, Timeline

RATE = 1000  # one sample a millisecond: positions read as times


def ramp(n: int, start: int = 1) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.float32)


def test_samples_are_heard_at_play_at_plus_their_position() -> None:
    t = Timeline(RATE)
    t.start("a#1", play_at=100.0, rate=RATE)
    t.audio("a#1", 0, ramp(50))
    t.end("a#1")
    out = t.render(99.990, 30)  # 10 ms of silence, then samples 0..19
    assert np.all(out[:10] == 0) and np.array_equal(out[10:], ramp(20))
    assert t.counts.underruns == 0 and t.counts.late_joins == 0


def test_audio_that_has_not_arrived_is_an_underrun_and_joins_at_its_position_faded_in() -> None:
    t = Timeline(RATE)
    t.start("a#1", 0.0, RATE)
    t.audio("a#1", 0, ramp(10))
    first = t.render(0.0, 20)  # 10 samples, then 10 due and missing
    assert np.array_equal(first[:10], ramp(10)) and np.all(first[10:] == 0)
    assert t.counts.underruns == 1
    t.audio("a#1", 10, ramp(40, 11))  # positions 10..49 arrive late
    second = t.render(0.020, 20)  # positions 20..39: played from 20, nothing replayed
    fade = int(FADE_S * RATE)
    assert second[0] < 21 and np.array_equal(second[fade:], ramp(20 - fade, 21 + fade))
    assert t.counts.underruns == 1  # one run of missing audio is one underrun


def test_a_player_that_hears_an_announcement_late_joins_where_the_others_are() -> None:
    t = Timeline(RATE)
    t.start("a#1", 0.0, RATE)
    t.audio("a#1", 0, ramp(100))
    out = t.render(0.050, 10)  # first read 50 ms after play_at
    assert out[-1] == 60 and t.counts.late_joins == 1


def test_high_priority_cuts_what_plays_at_its_play_at_not_on_arrival() -> None:
    t = Timeline(RATE)
    t.start("a#1", 0.0, RATE)
    t.audio("a#1", 0, np.ones(1000, np.float32))
    t.start("a#2", 0.5, RATE, high=True)  # arrives now, heard from 0.5 s
    t.audio("a#2", 0, np.full(100, 2.0, np.float32))
    t.render(0.0, 400)
    before = t.render(0.400, 90)
    assert np.all(before == 1)  # the normal one goes on until the cut
    across = t.render(0.490, 20)  # 0.490..0.509
    fade = int(FADE_S * RATE)
    assert np.all(across[: 10 - fade] == 1) and np.all(across[10:] == 2)
    assert t.counts.cuts == 1


def test_an_announcement_in_another_rate_is_refused() -> None:
    with pytest.raises(ValueError):
        Timeline(48000).start("a#1", 0.0, 24000)


def test_ended_announcements_are_forgotten() -> None:
    t = Timeline(RATE)
    t.start("a#1", 0.0, RATE)
    t.audio("a#1", 0, ramp(10))
    t.end("a#1")
    t.render(5.0, 10)
    assert not t.clips and t.quiet(5.0, math.inf)


def test_steering_follows_a_fast_crystal_a_sample_at_a_time() -> None:
    """An output whose crystal runs 200 ppm fast: each block is heard a little later on the
    shared clock than its sample count says. The read position keeps within a quarter of a
    millisecond (the dead band, and the smoothing's lag: 32 blocks of 2 us), and only by
    single-sample corrections after the first block."""
    rate, frames = 48000, 480
    s = Steering(rate)
    shared = 1000.0
    worst = 0.0
    for n in range(6000):  # a minute
        step = s.next(shared, frames)
        if n > 200:
            worst = max(worst, abs(shared - step.start))
        assert step.read in (frames - 1, frames, frames + 1)
        shared += frames / rate * (1 + 200e-6)
    assert s.jumps == 1
    assert DEADBAND_S < worst < 0.00025, worst
    assert 0.9 * 200e-6 * 60 * rate < s.corrections < 1.1 * 200e-6 * 60 * rate


def test_steering_jumps_when_the_output_stalls() -> None:
    s = Steering(48000)
    s.next(10.0, 480)
    assert s.next(10.5, 480).jumped and s.cursor == pytest.approx(10.5 + 480 / 48000)


def test_fit_drops_or_repeats_one_sample() -> None:
    x = np.arange(11, dtype=np.float32)
    assert fit(x, 10).size == 10 and fit(x[:9], 10).size == 10 and fit(x[:10], 10) is not None


def args(**kw: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    play_settings.add_flags(parser)
    ns = parser.parse_args([])
    for key, value in kw.items():
        setattr(ns, key, value)
    return ns


def test_settings_come_from_one_file_and_flags_win(tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "player.toml"
    conf.write_text('servers = ["ws://a.local:8765/ws", "ws://b.local:8765/ws"]\nchannels = "hall"\n'
                    'output = "file:/run/snapfifo"\ntrim_ms = 1000\n')
    s = play_settings.from_args(args(config=conf, channels=["platform-1"]))
    assert s.servers == ("ws://a.local:8765/ws", "ws://b.local:8765/ws")
    assert s.channels == ("platform-1",) and s.output == "file:/run/snapfifo" and s.trim_ms == 1000.0


@pytest.mark.parametrize("text, problem", [
    ('servers = ["http://x/"]', "servers"),
    ("sample_rate = 44000", "sample_rate"),
    ("output_channels = 3", "output_channels"),
    ('metrics = "nowhere"', "metrics"),
    ("volume = 3", "unknown keys"),
    ('channels = ["' + "x" * 65 + '"]', "channels"),
    ("trim_ms = true", "trim_ms"),
])
def test_a_bad_setting_stops_the_player_at_start_naming_it(tmp_path, text: str, problem: str) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "player.toml"
    conf.write_text(text + "\n")
    with pytest.raises(ValueError, match=problem):
        play_settings.from_args(args(config=conf))


def test_every_setting_is_in_the_edge_guides_table() -> None:
    from dataclasses import fields
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "edge.md").read_text(encoding="utf-8")
    missing = [f.name for f in fields(play_settings.PlayerSettings) if f"| `{f.name}` |" not in guide]
    assert not missing, f"docs/edge.md's settings table lacks {missing}"


def test_audio_placed_past_an_hour_is_dropped_not_allocated() -> None:
    t = Timeline(RATE)
    t.start("a#1", 0.0, RATE)
    t.audio("a#1", 10**12, ramp(10))
    assert t.clips["a#1"].received == 0 and t.clips["a#1"].pcm.size == 0


class Clocks:
    """A wall clock and a monotonic one, 1.7e9 s apart, that a test moves together: a
    callback entered late reads both later."""

    def __init__(self) -> None:
        self.mono = 5000.0

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.mono + 1.7e9


def test_a_block_dated_on_the_wall_clock_is_heard_when_dated_however_late_its_callback_runs() -> None:
    from rtts.play.outputs import BlockDates

    clocks = Clocks()
    dates = BlockDates(clocks.monotonic, (clocks.wall, clocks.monotonic))
    asked = clocks.wall()  # PortAudio dates the block when it asks for it: 120 ms ahead
    on_time = dates.heard(asked, asked + 0.120, latency=0.1)
    assert on_time == pytest.approx(clocks.mono + 0.120)
    clocks.mono += 0.008  # the same block's callback, run 8 ms late (the GIL, a busy box)
    assert dates.heard(asked, asked + 0.120, latency=0.1) == pytest.approx(on_time, abs=1e-9)


def test_a_block_dated_on_the_monotonic_clock_is_heard_at_its_date() -> None:
    from rtts.play.outputs import BlockDates

    clocks = Clocks()
    dates = BlockDates(clocks.monotonic, (clocks.wall, clocks.monotonic))
    clocks.mono += 0.015
    assert dates.heard(clocks.mono - 0.015, clocks.mono + 0.100, latency=0.1) == pytest.approx(clocks.mono + 0.100)


def test_undated_blocks_and_a_clock_of_the_backends_own_fall_back_to_the_callbacks_time() -> None:
    from rtts.play.outputs import BlockDates

    clocks = Clocks()
    dates = BlockDates(clocks.monotonic, (clocks.wall, clocks.monotonic))
    assert dates.heard(0.0, 0.0, latency=0.09) == pytest.approx(clocks.mono + 0.09)  # no dates at all
    own = BlockDates(clocks.monotonic, (clocks.wall, clocks.monotonic))
    assert own.heard(12.5, 12.62, latency=0.09) == pytest.approx(clocks.mono + 0.12)  # stream time from 0


def test_steering_takes_a_step_at_once_in_silence_and_a_sample_a_block_in_sound() -> None:
    """The output's timestamps step back 4 ms (a loaded box's PulseAudio): with nothing
    heard the read position follows within a few smoothing spans (0.5 s); while an
    announcement plays it still creeps, a sample a block, never more."""
    rate, frames = 48000, 480

    def after_step(quiet: bool) -> tuple[float, Steering]:
        s = Steering(rate)
        shared = 1000.0
        for _ in range(100):
            s.next(shared, frames, quiet)
            shared += frames / rate
        shared -= 0.004
        for _ in range(50):
            step = s.next(shared, frames, quiet)
            assert quiet or step.read in (frames - 1, frames, frames + 1)
            shared += frames / rate
        return abs(shared - s.cursor), s

    off, s = after_step(quiet=True)
    assert off < 0.0005 and s.shifts > 0 and s.jumps == 1, (off, s.shifts)
    off, s = after_step(quiet=False)
    assert off > 0.0025 and s.shifts == 0, off


def test_only_where_nothing_is_due_is_quiet() -> None:
    t = Timeline(48000)
    t.start("a#1", 10.0, 48000)
    assert t.quiet(9.0, 9.98) and not t.quiet(9.0, 10.01), "due from its play_at, whether or not it has come"
    t.audio("a#1", 0, np.ones(4800, np.float32))
    t.end("a#1")
    assert not t.quiet(10.05, 10.06) and t.quiet(10.11, 10.2), "over once its last sample is heard"
