"""The meeting point of the player's two threads: the listener (asyncio) places
announcements on the timeline and feeds the clock; the output's thread asks for each
block. One lock, held only for a few array operations on each side."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from rtts.broadcast.clock import OffsetFilter
from rtts.play.steering import JUMP_S, Steering, fit
from rtts.play.timeline import Timeline

# Before the server's clock is known (the first half second of a connection), the host's own
# clock stands in for it: the server's is its host's, kept by NTP like ours.
NO_ESTIMATE_LEAD_S = 0.15  # an announcement without play_at is heard this long after it arrives


class Player:
    def __init__(self, rate: int, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.rate = rate
        self.lock = threading.Lock()
        self.timeline = Timeline(rate)
        self.steering = Steering(rate)
        self.clock = OffsetFilter()
        self._monotonic, self._wall = monotonic, wall

    def shared(self, local: float) -> float:
        """Monotonic time ``local`` on the server's shared clock."""
        if self.clock.ready:
            return self.clock.shared(local)
        return local + (self._wall() - self._monotonic())

    def new_clock(self) -> OffsetFilter:
        """A fresh estimate for a new connection (maybe another instance)."""
        with self.lock:
            self.clock = OffsetFilter()
            return self.clock

    def exchange(self, sent: float, server_time: float, received: float) -> None:
        with self.lock:
            self.clock.add(sent, server_time, received)

    def start(self, key: str, play_at: float | None, rate: int, high: bool) -> None:
        with self.lock:
            if play_at is None:  # a server that does not time its announcements: as they come
                play_at = self.shared(self._monotonic()) + NO_ESTIMATE_LEAD_S
            self.timeline.start(key, play_at, rate, high)

    def audio(self, key: str, pts: int, pcm16: bytes) -> None:
        samples = np.frombuffer(pcm16, "<i2").astype(np.float32) / 32768
        with self.lock:
            self.timeline.audio(key, pts, samples)

    def end(self, key: str) -> None:
        with self.lock:
            self.timeline.end(key)

    def end_all(self) -> None:
        """The connection is gone: nothing more comes for what was playing."""
        with self.lock:
            for key in list(self.timeline.clips):
                self.timeline.end(key)

    def fill(self, heard_at: float, frames: int) -> np.ndarray:
        """The block whose first sample is heard at monotonic time ``heard_at``."""
        with self.lock:
            ideal = self.shared(heard_at)
            # Within JUMP_S of it either way: where the cursor is, or will be after a move.
            quiet = self.timeline.quiet(ideal - JUMP_S, ideal + frames / self.rate + JUMP_S)
            step = self.steering.next(ideal, frames, quiet)
            samples = self.timeline.render(step.start, step.read)
        return fit(samples, frames)
