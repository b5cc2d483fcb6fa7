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

Room by load is not all: streams let in together each make short runs beside the others,
and a run of Kokoro's costs a fixed part (~0.1 s) whatever its length. Four Mandarin
streams whose RTFs summed to 0.8 made runs of 0.5-1.3 s of audio at 0.23-0.29 s of
compute a second of it (0.17 alone): the thread had about 1.04 to do, and one ran out.
So a stream goes in only once the streams there hold the audio the crowd it makes will
need (``crowd_hold_s``): they take turns of about that much audio each, and its fixed
parts must fit in what their RTFs leave of the thread (a stream between two units is not
waited for: an ``append`` stream's next text may be seconds away). Streams let in together
start one after another, each when the ones before it have made a little audio ahead; a
stream there that lacks it makes a run of about what it lacks (``InferenceWorker._run_budget``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Heard", "Stream", "Waiting", "crowd_hold_s", "crowd_ready", "when_heard"]

# At most about this many pieces are played forward (on the event loop: ~2 ms): where the
# streams there have more to say than that many pieces, the pieces grow to fit, a wait of
# minutes being told in coarser steps rather than cut short.
MAX_UNITS = 2_000
# The share of the thread a crowd of streams may plan to use, and the least it leaves for
# the fixed parts of their runs: the RTFs are learned from whole units, whose own fixed
# parts they already hold, so these err on the side of the streams there.
USABLE = 1.0
LEAST_SPARE = 0.05


def crowd_hold_s(rtfs: Sequence[float], overheads: Sequence[float], first_s: float) -> float:
    """The audio each stream there must hold before a newcomer goes in beside them:
    ``rtfs`` and ``overheads`` (compute seconds of a run's fixed part) are theirs and its
    own. The newcomer's first run (``first_s``, made first: it has no audio) and one turn
    of the crowd's: the audio a turn must make so that every stream's fixed part fits in
    what the RTFs leave of the thread. 0 where runs have no fixed part (Piper's windows,
    Hibari): earliest deadline first and their small pieces keep them."""
    fixed = sum(overheads)
    if fixed <= 0:
        return 0.0
    return first_s + fixed / max(USABLE - sum(rtfs), LEAST_SPARE)


def crowd_ready(held_s: Sequence[float], hold_s: float) -> bool:
    """Whether streams that hold ``held_s`` seconds of audio each (those with a unit queued
    or running) hold what a newcomer needs of them (``crowd_hold_s``)."""
    return hold_s <= 0 or min(held_s, default=math.inf) >= hold_s


@dataclass(frozen=True)
class Stream:
    """A stream on the thread."""

    rtf: float  # compute seconds per second of its audio, on this box
    left_s: float  # compute seconds of what it still has to say
    unit_s: float  # compute seconds of one of its units (a unit holds the thread whole)
    runs_out_s: float = 0.0  # seconds from now until the audio it holds runs out
    next_s: float | None = None  # compute of the unit it has queued or running now (None: unit_s)
    running: bool = False  # that unit is running: it holds the thread until it ends
    overhead_s: float = 0.0  # compute seconds of one of its runs' fixed part (``crowd_hold_s``)
    between: bool = False  # between two units: its next on its way, not waited for until it runs


@dataclass(frozen=True)
class Waiting:
    """A stream waiting for room, in the order they came."""

    rtf: float
    compute_s: float  # compute seconds of the whole of it
    room: float  # the load it goes in under (``Job.room``)
    unit_s: float
    overhead_s: float = 0.0  # see Stream
    first_s: float | None = None  # compute of its first run (None: unit_s)


@dataclass(frozen=True)
class Heard:
    room_s: float  # seconds until it goes to the thread (0: at once)
    start_s: float  # seconds until the thread starts on it
    audio_s: float  # seconds until its first audio is made


class _Live:
    __slots__ = ("between", "left", "next", "order", "overhead", "rtf", "runs_out", "started", "unit")

    def __init__(
        self,
        rtf: float,
        left: float,
        unit: float,
        runs_out: float,
        nxt: float | None,
        order: int,
        overhead: float = 0.0,
        between: bool = False,
    ) -> None:
        self.rtf, self.left, self.unit, self.runs_out = max(rtf, 1e-6), left, max(unit, 1e-3), runs_out
        self.next, self.started, self.order, self.overhead = nxt, runs_out > 0, order, overhead
        self.between = between


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
            live.append(
                _Live(s.rtf, s.left_s, s.unit_s, s.runs_out_s, s.next_s, next(order), s.overhead_s, s.between)
            )
            running = live[-1] if s.running else running
    queue = [*ahead, own]
    # The least piece: what everything there and waiting has to say, in MAX_UNITS / 2 pieces.
    least = (sum(s.left for s in live) + sum(w.compute_s for w in queue)) / (MAX_UNITS / 2)
    admitted: _Live | None = None
    room_s, waited = 0.0, False
    for _ in range(MAX_UNITS):
        while queue and (not live or _fits(live, queue[0], now)):
            w = queue.pop(0)
            # A stream let in after waiting has no audio and its deadline is its request,
            # before every other's (first come, first served); one that goes at once asked
            # now, after those there without audio yet.
            asked_now = w is own and not waited
            # Its first turn is its first run (a whole unit for the student, whose audio
            # then lets the next one in), not a piece the size of its later ones.
            first = first_s if not queue else (w.first_s or 0.0)
            nxt = min(first, max(w.compute_s, 0.0)) if first > 0 else None
            entry = _Live(
                w.rtf, w.compute_s, w.unit_s, 0.0 if asked_now else -math.inf, nxt, next(order), w.overhead_s
            )
            if not queue:
                admitted, room_s = entry, now
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


def _fits(live: list[_Live], w: Waiting, now: float) -> bool:
    """Whether ``w`` goes in beside the streams ``live`` at ``now``: by load, and (where it
    waits for room at all) by the audio they hold."""
    rtfs = [s.rtf for s in live]
    if sum(rtfs) + w.rtf > w.room:
        return False
    if math.isinf(w.room):
        return True
    first = w.first_s if w.first_s is not None else w.unit_s
    held = [max(0.0, s.runs_out - now) if s.started else 0.0 for s in live if not s.between]
    return crowd_ready(held, crowd_hold_s([*rtfs, w.rtf], [*(s.overhead for s in live), w.overhead_s], first))


def _run(stream: _Live, now: float, want: float) -> float:
    """Play one unit of ``stream`` (``want`` compute seconds, at most what it has left)
    starting at ``now``: the compute it took."""
    run = min(want, stream.left)
    stream.next, stream.between = None, False
    stream.left -= run
    done = now + run
    stream.runs_out = (max(stream.runs_out, done) if stream.started else done) + run / stream.rtf
    stream.started = True
    return run
