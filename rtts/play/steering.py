"""Keeps an output's read position on the shared timeline.

An output plays its own samples at its own crystal's rate; the timeline runs on the
shared clock. Each block the output says when its first sample will be heard (its
measured latency included), on the shared clock: ``ideal``. The read position
(``cursor``) should be there. It is moved sample by sample, as Snapcast's clients do:
while the smoothed error is over a tenth of a millisecond, each block reads one sample more (behind)
or one fewer (ahead) than it plays, which a listener does not hear (a 10 ms block at 48
kHz corrects up to 2,000 ppm, ten times a bad crystal). An error over ``JUMP_S`` (the
first block, a stepped clock, an output that stalled) is not crept up on: the cursor
jumps, and the timeline's late rule makes the join (a 3 ms fade-in). Where nothing is
heard (``quiet``: no announcement due within ``JUMP_S`` of the block) the error is taken
at once, as the median of the last ``QUIET_BLOCKS`` blocks' (one odd timestamp moves
nothing; a step is followed in three blocks). Crept up on, a sample a block, an error
closes at 2 ms a second, and on a loaded box an output's reported delay steps by a few
ms, again and again, for seconds after it opens (PulseAudio's null sink with a core
busy): players that crept met an announcement's first sample 12-23 ms apart in 3 runs of
7 (tests/system/test_in_step_across_instances.py; taken at once, 0.5-1.3 ms, none of 7:
docs/benchmarks.md, "Loudspeakers in step").

Device timestamps jitter by a fraction of a millisecond block to block, so the error is
smoothed over about ``SMOOTH_BLOCKS`` blocks before it is acted on. Pure."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

import numpy as np

JUMP_S = 0.02
SMOOTH_BLOCKS = 32
# Within this the error is left alone: device timestamps jitter by ±0.06 ms block to block
# (PulseAudio's null sink through ALSA, measured), and chasing that would drop or repeat a
# sample many times a second for nothing. A tenth of a millisecond is nothing to the ear.
DEADBAND_S = 0.0001
QUIET_BLOCKS = 5


@dataclass
class Step:
    start: float  # shared time of the first sample to read
    read: int  # samples to read from the timeline for this block (frames - 1, frames or frames + 1)
    jumped: bool


class Steering:
    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.cursor: float | None = None
        self.error = 0.0  # smoothed: ideal - cursor, seconds
        self.jumps = 0
        self.corrections = 0  # samples dropped or repeated
        self.shifts = 0  # times the cursor moved at once in silence
        self._recent: deque[float] = deque(maxlen=QUIET_BLOCKS)  # the last blocks' ideal - cursor

    def next(self, ideal: float, frames: int, quiet: bool = False) -> Step:
        """The block heard from shared time ``ideal``; ``quiet``: nothing is due near it."""
        jumped = self.cursor is None or abs(ideal - self.cursor) > JUMP_S
        if jumped:
            self.cursor, self.error = ideal, 0.0
            self.jumps += 1
            self._recent.clear()
        assert self.cursor is not None
        self._recent.append(ideal - self.cursor)
        self.error += (ideal - self.cursor - self.error) / SMOOTH_BLOCKS
        one = 1 / self.rate
        band = max(one, DEADBAND_S)
        shift = statistics.median(self._recent) if quiet else 0.0
        if abs(shift) > band:
            # The errors so far were measured from where the cursor was; the smoothed one,
            # which lags a step, starts again from what is left: nothing.
            self.cursor += shift
            self.error = 0.0
            self._recent = deque((e - shift for e in self._recent), maxlen=QUIET_BLOCKS)
            self.shifts += 1
        k = 1 if self.error > band else -1 if self.error < -band else 0
        if k:
            self.corrections += 1
            self.error -= k * one  # taken: the next blocks' errors will show it
        step = Step(self.cursor, frames + k, jumped)
        self.cursor += (frames + k) * one
        return step


def fit(samples: np.ndarray, frames: int) -> np.ndarray:
    """``samples`` (one more or one fewer than ``frames``, as ``Step.read`` asked) made
    ``frames`` long by dropping or repeating one sample in the middle of the block."""
    extra = samples.shape[0] - frames
    if extra == 0:
        return samples
    mid = frames // 2
    if extra > 0:
        return np.concatenate([samples[:mid], samples[mid + extra :]])
    return np.concatenate([samples[: mid + 1], samples[mid:]])
