"""Channels: announcements published once, heard on every subscribed connection.

A connection subscribes to channels by name. An announcement published on any instance
comes back from the bus (``bus.py``) to every instance, numbered, in one order. Each
instance keeps, per channel, the announcement playing now and a bounded queue of the
ones waiting (high priority first, then in order; one whose ``not_before`` has not come
waits without holding up the others). When one starts, every subscriber present gets it
as an utterance of its own session (``Session.announce``), in its own format and rate,
while its synthesis runs once for all of them (``shared_jobs.py``). The next starts
when every subscriber has ended the current one, or after ``HOLD_S`` for those that have
not (a connection with its own long utterance queued): they still get it, later.

A high-priority announcement does not wait: it interrupts a playing normal one (each
subscriber's session treats it as ``speak`` with ``interrupt: true``).

Delivery is at most once. A connection that subscribes gets what starts from then on;
with ``subscribe.after`` (the last ``seq`` it heard) it is told how many it missed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from . import protocol
from .announcements import Announcement, Draft
from .bus import Bus, BusDown
from .jobs import Job
from .protocol import ErrorCode, ProtocolError
from .shared_jobs import SharedJobs

log = logging.getLogger(__name__)

__all__ = ["Channels", "Member"]

# How long a channel waits for a subscriber that has not ended the current announcement
# before starting the next one (seconds): long enough for a long announcement, short
# enough that one busy connection does not hold a channel up for everyone.
HOLD_S = 60.0
# Channels one connection may subscribe to: each costs an entry here for as long as it lasts.
MAX_SUBSCRIPTIONS = 16


class Member(Protocol):
    """A subscribed connection (``connection.Connection``)."""

    def announce(self, ann: Announcement) -> None: ...

    def tell(self, message: protocol.ServerMessage) -> None: ...


@dataclass(eq=False)
class _Channel:
    name: str
    members: dict[Member, None] = field(default_factory=dict)  # an ordered set
    queue: list[Announcement] = field(default_factory=list)
    current: Announcement | None = None
    waiting: set[Member] = field(default_factory=set)  # subscribers that have not ended ``current``
    last_seq: int = 0
    timer: asyncio.TimerHandle | None = None


class Channels:
    def __init__(
        self, bus: Bus, jobs: SharedJobs, queue_limit: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._bus = bus
        self.jobs = jobs
        self.queue_limit = queue_limit
        self._clock = clock
        self._channels: dict[str, _Channel] = {}
        self._holding: dict[Member, set[str]] = {}  # announcements handed to a member, not yet ended
        self._tasks: set[asyncio.Task[None]] = set()
        self.started = 0  # announcements started on this instance
        self.dropped = 0  # announcements this instance could not queue

    async def start(self) -> None:
        await self._bus.start(self._arrived, self._resync)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for ch in self._channels.values():
            if ch.timer is not None:
                ch.timer.cancel()
        await self._bus.stop()

    # ------------------------------------------------------------ subscriptions

    def join(self, member: Member, name: str, after: int | None) -> None:
        ch = self._channels.get(name)
        if (ch is None or member not in ch.members) and self._count(member) >= MAX_SUBSCRIPTIONS:
            member.tell(protocol.Error(ErrorCode.BAD_MESSAGE.value,
                                       f"at most {MAX_SUBSCRIPTIONS} channels per connection; unsubscribe one first"))
            return
        ch = self._channel(name)
        ch.members[member] = None
        # Members are in before the answer is: nothing that starts meanwhile is lost.
        self._spawn(self._answer_join(member, ch, after))

    async def _answer_join(self, member: Member, ch: _Channel, after: int | None) -> None:
        try:
            last = await self._bus.last_seq(ch.name)
        except BusDown:
            last = ch.last_seq
        missed = 0
        if after is not None and after < last:
            coming = sum(1 for a in ch.queue if a.seq > after)
            missed = max(0, last - after - coming)
        member.tell(protocol.Subscribed(ch.name, last, missed, self.queue_limit))

    def _resync(self) -> None:
        """The bus was down for a while: tell subscribers what was published meanwhile
        (an unasked ``subscribed`` with ``missed``)."""

        async def check(ch: _Channel) -> None:
            try:
                last = await self._bus.last_seq(ch.name)
            except BusDown:
                return
            if last > ch.last_seq:
                missed, ch.last_seq = last - ch.last_seq, last
                log.warning("channel %s: %d announcements missed while the bus was down", ch.name, missed)
                for member in list(ch.members):
                    member.tell(protocol.Subscribed(ch.name, last, missed, self.queue_limit))

        for ch in list(self._channels.values()):
            if ch.members:
                self._spawn(check(ch))

    def leave(self, member: Member, name: str) -> None:
        ch = self._channels.get(name)
        if ch is not None:
            ch.members.pop(member, None)
            self._tidy(ch)
        member.tell(protocol.Unsubscribed(name))

    def forget(self, member: Member) -> None:
        """A connection closed: its subscriptions go, and its hold on every announcement."""
        for ch in list(self._channels.values()):
            ch.members.pop(member, None)
            if member in ch.waiting:
                self._ended_by(ch, member)
            self._tidy(ch)
        for ann_id in self._holding.pop(member, set()):
            self.jobs.release(ann_id)

    # ------------------------------------------------------------ publishing

    def post(self, member: Member, draft: Draft) -> None:
        """A ``publish`` from a connection: answered with ``published`` or an ``error``."""

        async def run() -> None:
            try:
                member.tell(await self.publish(draft))
            except ProtocolError as exc:
                member.tell(protocol.Error(exc.code.value, exc.message))

        self._spawn(run())

    async def publish(self, draft: Draft) -> protocol.Published:
        """Send ``draft`` to every instance; raises ``ProtocolError`` (queue_full, bus_unavailable)."""
        ch = self._channels.get(draft.channel)
        queued = len(ch.queue) if ch is not None else 0
        if queued >= self.queue_limit and not (draft.priority == "high" and self._normals(ch)):
            raise ProtocolError(
                ErrorCode.QUEUE_FULL,
                f"channel {draft.channel!r} has {queued} announcements waiting (limits.channel_queue); try later",
            )
        try:
            ann = await self._bus.publish(draft)
        except BusDown as exc:
            raise ProtocolError(ErrorCode.BUS_UNAVAILABLE, f"announcement not published: {exc}") from None
        log.info("published %s (%s, %d chars)", ann.id, ann.priority, len(ann.text))
        return protocol.Published(ann.channel, ann.id, ann.seq, queued, self.queue_limit)

    # ------------------------------------------------------------ playing

    def _arrived(self, ann: Announcement) -> None:
        """An announcement from the bus (any instance's, this one's included)."""
        ch = self._channel(ann.channel)
        if ann.seq <= ch.last_seq:
            # Neither bus delivers twice: the numbering started again (Redis restarted without its data).
            log.warning("channel %s: numbering restarted at %d (was %d)", ch.name, ann.seq, ch.last_seq)
        ch.last_seq = ann.seq
        if not ch.members:
            self._tidy(ch)
            return  # nobody here listens: nothing to synthesize
        if ann.high:
            if len(ch.queue) >= self.queue_limit and self._normals(ch):
                ch.queue.remove(self._normals(ch)[-1])
                self.dropped += 1
            # After the high ones already waiting, ahead of every normal one.
            place = sum(1 for a in ch.queue if a.high)
            ch.queue.insert(place, ann)
            if ch.current is not None and not ch.current.high and self._due(ann):
                ch.queue.remove(ann)
                self._begin(ch, ann)  # the subscribers' sessions cut the playing one short
                return
        elif len(ch.queue) >= self.queue_limit:
            self.dropped += 1
            log.warning("channel %s: queue full (%d); %s dropped on this instance", ch.name, len(ch.queue), ann.id)
            return
        else:
            ch.queue.append(ann)
        self._advance(ch)

    def _advance(self, ch: _Channel) -> None:
        if ch.current is not None:
            return
        if ch.timer is not None:
            ch.timer.cancel()
            ch.timer = None
        now = self._clock()
        for ann in ch.queue:
            if self._due(ann, now):
                ch.queue.remove(ann)
                self._begin(ch, ann)
                return
        if ch.queue:
            wake = min(a.not_before or now for a in ch.queue) - now
            ch.timer = asyncio.get_running_loop().call_later(max(0.0, wake), self._advance, ch)
        self._tidy(ch)

    def _begin(self, ch: _Channel, ann: Announcement) -> None:
        if ch.timer is not None:
            ch.timer.cancel()
            ch.timer = None
        ch.current = ann
        ch.waiting = set(ch.members)
        self.started += 1
        log.info("channel %s: %s to %d subscribers", ch.name, ann.id, len(ch.waiting))
        for member in list(ch.waiting):
            self.jobs.hold(ann.id)
            self._holding.setdefault(member, set()).add(ann.id)
        for member in list(ch.waiting):
            member.announce(ann)  # may end it at once (an error): ``ended`` copes
        if ch.current is ann:
            ch.timer = asyncio.get_running_loop().call_later(HOLD_S, self._stop_holding, ch, ann)
            if not ch.waiting:
                self._finish(ch)

    def ended(self, member: Member, ann_id: str) -> None:
        """``member`` sent ``end`` for an announcement (done, cancelled or error)."""
        held = self._holding.get(member)
        if held is not None and ann_id in held:
            held.discard(ann_id)
            self.jobs.release(ann_id)
        ch = self._channels.get(ann_id.rpartition("#")[0])
        if ch is not None and ch.current is not None and ch.current.id == ann_id and member in ch.waiting:
            self._ended_by(ch, member)

    def _ended_by(self, ch: _Channel, member: Member) -> None:
        ch.waiting.discard(member)
        if not ch.waiting:
            self._finish(ch)

    def _stop_holding(self, ch: _Channel, ann: Announcement) -> None:
        if ch.current is ann:
            log.info("channel %s: %d subscribers still busy with %s; going on", ch.name, len(ch.waiting), ann.id)
            ch.waiting.clear()
            self._finish(ch)

    def _finish(self, ch: _Channel) -> None:
        ch.current = None
        ch.timer, timer = None, ch.timer
        if timer is not None:
            timer.cancel()
        self._advance(ch)

    # ------------------------------------------------------------ jobs

    def submit(self, job: Job) -> None:
        self.jobs.submit(job)

    # ------------------------------------------------------------ helpers

    def _count(self, member: Member) -> int:
        return sum(1 for ch in self._channels.values() if member in ch.members)

    def _channel(self, name: str) -> _Channel:
        ch = self._channels.get(name)
        if ch is None:
            ch = self._channels[name] = _Channel(name)
        return ch

    def _tidy(self, ch: _Channel) -> None:
        """Forget a channel with nobody and nothing left, but not its numbering while it has members."""
        if not ch.members and ch.current is None and not ch.waiting:
            ch.queue.clear()
            if ch.timer is not None:
                ch.timer.cancel()
            if ch.last_seq == 0:  # else its last number is kept: the bus may redeliver an old one
                self._channels.pop(ch.name, None)

    def _due(self, ann: Announcement, now: float | None = None) -> bool:
        return ann.not_before is None or ann.not_before <= (now if now is not None else self._clock())

    @staticmethod
    def _normals(ch: _Channel | None) -> list[Announcement]:
        return [a for a in ch.queue if not a.high] if ch is not None else []

    def _spawn(self, coro) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def queued(self, name: str) -> int:
        ch = self._channels.get(name)
        return len(ch.queue) if ch is not None else 0
