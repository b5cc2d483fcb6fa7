"""When a stream that waits for room gets it, and when it is heard (issue 32, ``start.queued``).

A stream past ``--admission-max-load`` waits until the streams on the inference thread,
with its own, fit again (``InferenceWorker._admit``). When that is depends on how much
each of them still has to say: the session tells each job how many characters of its
utterance come after it (``Job.rest_chars``), and the worker turns what every stream
still has into compute seconds by its engine's real-time factor.

The thread is played forward here as it runs: one unit at a time, whole, the unit of the
stream whose audio runs out first (a stream that has none yet goes first). That order is
what makes the wait: the streams on the thread do not end together, as an even share of
the thread would have them, but one unit after another; and a stream let in while others
still have units to make is served first until it holds as much audio as they do, so
the last of those ends later. With six Mandarin listeners on the 2-core Xeon (teacher,
three let in at a time) an even share told the held-back streams 6.2 s and they were
heard at 7.7 s, p50 (``benchmarks/listeners.py --before``; docs/benchmarks.md, "What a
held-back stream is told").

A stream fed by ``append`` (an LLM) counts the text it has sent and what the session
guesses is still to come (``speech.append_lengths``: what the last such streams came to);
the worker cannot know the rest of its answer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Heard", "Stream", "Waiting", "when_heard"]

# At most about this many pieces are played forward (on the event loop: ~2 ms): where the
# streams there have more to say than that many pieces, the pieces grow to fit, a wait of
# minutes being told in coarser steps rather than cut short.
MAX_UNITS = 2_000


@dataclass(frozen=True)
class Stream:
    """A stream on the thread."""

    rtf: float  # compute seconds per second of its audio, on this box
    left_s: float  # compute seconds of what it still has to say
    unit_s: float  # compute seconds of one of its units (a unit holds the thread whole)
    runs_out_s: float = 0.0  # seconds from now until the audio it holds runs out
    next_s: float | None = None  # compute of the unit it has queued or running now (None: unit_s)
    running: bool = False  # that unit is running: it holds the thread until it ends


@dataclass(frozen=True)
class Waiting:
    """A stream waiting for room, in the order they came."""

    rtf: float
    compute_s: float  # compute seconds of the whole of it
    room: float  # the load it goes in under (``Job.room``)
    unit_s: float


@dataclass(frozen=True)
class Heard:
    room_s: float  # seconds until it goes to the thread (0: at once)
    start_s: float  # seconds until the thread starts on it
    audio_s: float  # seconds until its first audio is made


class _Live:
    __slots__ = ("left", "next", "order", "rtf", "runs_out", "started", "unit")

    def __init__(
        self, rtf: float, left: float, unit: float, runs_out: float, nxt: float | None, order: int
    ) -> None:
        self.rtf, self.left, self.unit, self.runs_out = max(rtf, 1e-6), left, max(unit, 1e-3), runs_out
        self.next, self.started, self.order = nxt, runs_out > 0, order


def when_heard(on_thread: Sequence[Stream], ahead: Sequence[Waiting], own: Waiting, first_s: float) -> Heard:
    """When a stream ``own`` waiting behind ``ahead`` goes to the thread, when the thread
    starts on it and when its first audio (``first_s`` of compute once it runs) is made. A
    stream that fits now, or would be alone, goes at once, behind the streams there that
    asked before it and have no audio yet."""
    now = 0.0
    order = itertools.count()
    live: list[_Live] = []
    running: _Live | None = None  # the thread is its until its unit ends
    for s in on_thread:
        if s.left_s > 0:
            live.append(_Live(s.rtf, s.left_s, s.unit_s, s.runs_out_s, s.next_s, next(order)))
            running = live[-1] if s.running else running
    queue = [*ahead, own]
    # The least piece: what everything there and waiting has to say, in MAX_UNITS / 2 pieces.
    least = (sum(s.left for s in live) + sum(w.compute_s for w in queue)) / (MAX_UNITS / 2)
    admitted: _Live | None = None
    room_s, waited = 0.0, False
    for _ in range(MAX_UNITS):
        while queue and (not live or sum(s.rtf for s in live) + queue[0].rtf <= queue[0].room):
            w = queue.pop(0)
            # A stream let in after waiting has no audio and its deadline is its request,
            # before every other's (first come, first served); one that goes at once asked
            # now, after those there without audio yet.
            asked_now = w is own and not waited
            entry = _Live(w.rtf, w.compute_s, w.unit_s, 0.0 if asked_now else -math.inf, None, next(order))
            if not queue:
                admitted, room_s = entry, now
                entry.next = min(first_s, max(w.compute_s, 0.0)) if first_s > 0 else None
            live.append(entry)
        if not live:
            break
        stream = running or min(live, key=lambda s: (s.runs_out, s.order))
        running = None
        start = now
        now += _run(stream, now, stream.next if stream.next is not None else max(stream.unit, least))
        waited = True
        if stream is admitted:
            return Heard(room_s, start, now)
        if stream.left <= 1e-9:
            live.remove(stream)
    return Heard(room_s if admitted is not None else now, now, now)


def _run(stream: _Live, now: float, want: float) -> float:
    """Play one unit of ``stream`` (``want`` compute seconds, at most what it has left)
    starting at ``now``: the compute it took."""
    run = min(want, stream.left)
    stream.next = None
    stream.left -= run
    done = now + run
    stream.runs_out = (max(stream.runs_out, done) if stream.started else done) + run / stream.rtf
    stream.started = True
    return run
