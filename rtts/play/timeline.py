"""Announcements on the shared clock, read out at the times the output says its samples
are heard (docs/protocol.md, "Playing in step", client rules).

Sample ``p`` of an announcement is heard at ``play_at + p / rate``. ``render(at, n)``
gives the ``n`` samples heard from shared time ``at`` on: whatever was due and has
arrived; silence where it has not (an underrun: counted, and the audio that comes
later joins at its own position with a 3 ms fade-in, nothing replayed); silence
between announcements. A high-priority one cuts what plays at its ``play_at``, with a
3 ms fade-out. Pure: the caller brings the times and the lock."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FADE_S = 0.003
KEEP_S = 2.0
# The longest announcement a player holds: audio placed past it is dropped, so a server
# that sends a wild pts cannot make the player allocate without bound.
MAX_CLIP_S = 3600  # an ended announcement is forgotten this long after its last sample was due


@dataclass
class Clip:
    key: str
    play_at: float
    rate: int
    pcm: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    received: int = 0  # samples 0..received-1 have arrived
    ended: bool = False
    cut_at: float | None = None  # shared time from which a high-priority one plays instead
    next_index: int | None = None  # the index the last block stopped before
    fade_from: int | None = None  # a join: the gain ramps up from this index
    in_gap: bool = False
    heard: bool = False

    def put(self, pts: int, samples: np.ndarray) -> None:
        end = pts + samples.size
        if end > self.pcm.size:
            grown = np.zeros(max(end, 2 * self.pcm.size), np.float32)
            grown[: self.pcm.size] = self.pcm
            self.pcm = grown
        self.pcm[pts:end] = samples
        self.received = max(self.received, end)

    def last_due(self) -> float:
        """When its last sample arrived so far is heard (or its cut)."""
        last = self.play_at + self.received / self.rate
        return min(last, self.cut_at) if self.cut_at is not None else last


@dataclass
class Counts:
    underruns: int = 0  # runs of due samples that had not arrived
    late_joins: int = 0  # announcements first heard after their first sample was due
    cuts: int = 0  # announcements cut by a high-priority one
    announcements: int = 0


class Timeline:
    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.clips: dict[str, Clip] = {}
        self.counts = Counts()

    def start(self, key: str, play_at: float, rate: int, high: bool = False) -> None:
        """An announcement begins: its first sample is heard at ``play_at``. The output
        rate is the player's; a clip in another rate is refused (the player asks the
        server for its own)."""
        if rate != self.rate:
            raise ValueError(f"{key}: sample rate {rate}, the output's is {self.rate}")
        if high:
            for clip in self.clips.values():
                if clip.cut_at is None and (not clip.ended or clip.last_due() > play_at):
                    clip.cut_at = play_at
                    self.counts.cuts += 1
        self.clips[key] = Clip(key, play_at, rate)
        self.counts.announcements += 1

    def audio(self, key: str, pts: int, samples: np.ndarray) -> None:
        clip = self.clips.get(key)
        if clip is not None and 0 <= pts and pts + samples.size <= MAX_CLIP_S * clip.rate:
            clip.put(pts, samples)

    def end(self, key: str) -> None:
        clip = self.clips.get(key)
        if clip is not None:
            clip.ended = True

    def quiet(self, start: float, end: float) -> bool:
        """Whether nothing is due from shared time ``start`` to ``end``: silence there,
        wherever within it the read position is."""
        return not any(
            c.play_at < end and (not c.ended or c.last_due() > start) and (c.cut_at is None or c.cut_at > start)
            for c in self.clips.values()
        )

    def render(self, at: float, n: int) -> np.ndarray:
        out = np.zeros(n, np.float32)
        for key, clip in list(self.clips.items()):
            if clip.ended and clip.last_due() < at - KEEP_S:
                del self.clips[key]
                continue
            self._mix(clip, at, out)
        return out

    def _mix(self, clip: Clip, at: float, out: np.ndarray) -> None:
        n = out.size
        first = round((at - clip.play_at) * clip.rate)
        idx = np.arange(first, first + n)
        due = idx >= 0
        if clip.cut_at is not None:
            due &= clip.play_at + idx / clip.rate < clip.cut_at
        if not due.any():
            clip.next_index = first + n if first >= 0 else None
            return
        # Audio arrives in order, so what has arrived is a prefix of what is due.
        have = due & (idx < clip.received)
        missing = due & ~have & (not clip.ended)
        if have.any():
            head = int(idx[have][0])
            if not clip.heard and head > 0:
                self.counts.late_joins += 1  # first heard after its start was due: join at position
                clip.fade_from = head
            elif clip.in_gap or (clip.next_index is not None and clip.next_index != first):
                clip.fade_from = head  # after an underrun, or the read position jumped
            clip.in_gap, clip.heard = False, True
        if missing.any() and not clip.in_gap:
            self.counts.underruns += 1
            clip.in_gap = True
        if have.any():
            gain = np.ones(n, np.float32)
            if clip.fade_from is not None:
                ramp = (idx - clip.fade_from + 1) / max(1.0, FADE_S * clip.rate)
                gain = np.clip(ramp, 0.0, 1.0).astype(np.float32)
                if idx[-1] - clip.fade_from >= FADE_S * clip.rate:
                    clip.fade_from = None
            if clip.cut_at is not None:
                until = (clip.cut_at - (clip.play_at + idx / clip.rate)) / FADE_S
                gain = np.minimum(gain, np.clip(until, 0.0, 1.0).astype(np.float32))
            out[have] += clip.pcm[idx[have]] * gain[have]
        clip.next_index = first + n
