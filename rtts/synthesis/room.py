"""When a stream that waits for room gets it (issue 32, ``start.queued``).

A stream past ``--admission-max-load`` waits until the streams on the inference thread,
with its own, fit again (``InferenceWorker._admit``). When that is depends on how much
each of them still has to say: the session tells each job how many characters of its
utterance come after it (``Job.rest_chars``), and the worker turns what every stream
still has into compute seconds by its engine's real-time factor.

The thread runs the most urgent unit first, and every stream on it is kept playing, so
the streams share it about evenly: modelled here as processor sharing, each of ``n``
streams getting ``1/n`` of the thread. The stream with the least left ends first, at
``n × its compute``; then the rest share it among fewer. Streams waiting ahead of this
one go on when they fit, first come first served, and take their share from then on.
A stream fed by ``append`` (an LLM) counts only the text it has sent: its wait is a
lower bound, as the worker cannot know what is still to come.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Stream", "Waiting", "wait_for_room"]


@dataclass(frozen=True)
class Stream:
    rtf: float  # compute seconds per second of its audio, on this box
    left_s: float  # compute seconds of what it still has to say


@dataclass(frozen=True)
class Waiting:
    rtf: float
    compute_s: float  # compute seconds of the whole of it
    room: float  # the load it goes in under (``Job.room``)


def wait_for_room(on_thread: Sequence[Stream], ahead: Sequence[Waiting], own_rtf: float, room: float) -> float:
    """Seconds until a stream of ``own_rtf`` waiting behind ``ahead`` fits within ``room``
    beside the streams then on the thread (0.0: it fits now, or would be alone)."""
    now = 0.0
    live = [[s.rtf, s.left_s] for s in on_thread if s.left_s > 0]

    def fits(rtf: float, within: float) -> bool:
        return not live or sum(r for r, _ in live) + rtf <= within

    def next_end() -> None:
        nonlocal now
        least = min(left for _, left in live)
        now += least * len(live)
        for stream in live:
            stream[1] -= least
        live[:] = [s for s in live if s[1] > 1e-9]

    for w in ahead:
        while not fits(w.rtf, w.room):
            next_end()
        live.append([w.rtf, w.compute_s])
    while not fits(own_rtf, room):
        next_end()
    return now
