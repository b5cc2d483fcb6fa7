"""Channels: announcements published once, heard on every subscribed connection.

A connection subscribes to channels by name. An announcement published on any instance
comes back from the bus (``bus.py``) to every instance, numbered, in one order. Each
instance keeps, per channel, the announcement playing now and a bounded queue of the
ones waiting (high priority first, then in order; one whose ``not_before`` has not come
waits without holding up the others). When one starts, every subscriber present gets it
as an utterance of its own session (``Session.announce``), in its own format and rate,
while its synthesis runs once for all of them (``shared_jobs.py``). The next starts
when every subscriber has ended the current one (its session ends it once all its audio
is sent). One subscriber cannot hold the others up: once one has ended it, those that
have not begun it (their own utterance still playing, or waiting for a ``flush``) are
left behind at once, and those still receiving it get ``LAG_S`` more; after ``HOLD_S``
everyone is. One left behind still gets the announcement later, with a synthesis of
its own: its share of the held audio is let go when it is left behind.

The queue is in two halves of ``queue_limit`` each: announcements due now, and those
scheduled later (``not_before``, at most ``protocol.MAX_NOT_BEFORE_AHEAD_S`` ahead), so
announcements for later never make one for now ``queue_full``. A channel with neither
subscribers nor work is forgotten.

A high-priority announcement does not wait: it interrupts a playing normal one (each
subscriber's session treats it as ``speak`` with ``interrupt: true``).

Each announcement is handed out with the time its first sample is heard (``play_at``,
docs/protocol.md "Playing in step"): one lead ahead of its begin (``timeline.py``, learnt
from how late its audio came, ``audio``), after the one before it ends. Across instances
(a shared bus) the first instance to begin it fixes that time for all of them
(``Bus.claim_play_at``), so it is handed out once the claim is answered, within
``CLAIM_TIMEOUT_S``; in one process at once. An answer no instance could have claimed
(``timeline.claim_bounds``: written into Redis by someone else) is refused, and this
instance's own time used.

Delivery is at most once. A connection that subscribes gets what starts from then on;
with ``subscribe.after`` (the last ``seq`` it heard) it is told how many it missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from rtts import protocol
from rtts.broadcast import timeline
from rtts.broadcast.announcements import Announcement, Draft
from rtts.broadcast.bus import Bus, BusDown
from rtts.broadcast.shared_jobs import SharedJobs
from rtts.broadcast.timeline import LeadEstimator
from rtts.protocol import ErrorCode, ProtocolError
from rtts.synthesis.jobs import Job

log = logging.getLogger(__name__)

__all__ = ["Channels", "Member"]

# How long a channel waits for a subscriber that has not ended the current announcement
# before starting the next one (seconds): long enough for a long announcement, short
# enough that one busy connection does not hold a channel up for everyone.
HOLD_S = 60.0
# Once one subscriber has ended it, how long the others still receiving it get to end it
# too (seconds): enough to empty a send buffer (256 KiB) over a slow link, short enough
# that a client that reads nothing costs the channel little.
LAG_S = 5.0
# Channels one connection may subscribe to: each costs an entry here for as long as it lasts.
MAX_SUBSCRIPTIONS = 16
# How long an announcement waits for the instances to agree on its play_at (one Redis
# round trip, ~1 ms on a LAN) before it is played at this instance's own.
CLAIM_TIMEOUT_S = 0.5
# An announcement its publisher wants heard at a time begins this much before it is
# needed: the timer that begins it fires a little late, and one lead from then would
# then be past the time asked.
WANTED_EARLY_S = 0.1
# How often an instance with subscribers renews its lead in a shared bus (``_keep_lead_shared``),
# well inside the time the bus keeps a lead for (bus.LEAD_TTL_S, 600 s).
LEAD_RENEW_S = 120.0


class Member(Protocol):
    """A subscribed connection (``connection.Connection``)."""

    def announce(self, ann: Announcement) -> None: ...

    def tell(self, message: protocol.ServerMessage) -> None: ...


@dataclass(eq=False)
class _Channel:
    name: str
    # Its subscribers, in the order they came, each with how long before play_at it must
    # have the audio (``subscribe.ahead_ms``).
    members: dict[Member, float] = field(default_factory=dict)
    queue: list[Announcement] = field(default_factory=list)
    current: Announcement | None = None
    waiting: set[Member] = field(default_factory=set)  # subscribers that have not ended ``current``
    begun: set[Member] = field(default_factory=set)  # of those, the ones whose session began it
    last_seq: int = 0
    timer: asyncio.TimerHandle | None = None
    lag: asyncio.TimerHandle | None = None  # LAG_S for those still receiving ``current``
    play_end: float = 0.0  # when the audio of the announcements played so far ends (shared clock)
    play_at: float | None = None  # ``current``'s, once agreed
    begun_at: float = 0.0  # when ``current`` began here (shared clock): what play_at was set from
    delivered_s: float = 0.0  # of its audio, how much was synthesized so far
    lag_s: float | None = None  # how late its audio came (``timeline.LeadEstimator``)
    load_s: float = 0.0  # how long its voice's model was to take to load, when it began


class Channels:
    def __init__(
        self,
        bus: Bus,
        jobs: SharedJobs,
        queue_limit: int,
        clock: Callable[[], float] = time.time,
        lead: LeadEstimator | None = None,
        gap: float = 0.25,
        model_wait: Callable[[str], float] = lambda voice: 0.0,
        model_load: Callable[[str], float] | None = None,
    ) -> None:
        """``clock``: the shared clock (``clock.SharedClock.now``), Unix seconds; ``lead``
        and ``gap``: how far ahead an announcement's ``play_at`` is set, and how far apart
        consecutive ones are (``timeline.py``); ``model_wait``: seconds before a voice's
        model is in memory (its load time, 0 when loaded); ``model_load``: its load time,
        loaded or not (another instance may have had to load it; ``model_wait`` without)."""
        self._bus = bus
        self.jobs = jobs
        self.queue_limit = queue_limit
        self._clock = clock
        self.lead = lead or LeadEstimator(min_lead=0.3, max_lead=2.0)
        self._gap = gap
        self._model_wait = model_wait
        self._model_load = model_load or model_wait
        self._channels: dict[str, _Channel] = {}
        self._subscriptions: dict[Member, set[str]] = {}  # each member's channels: no walk over all
        self._holding: dict[Member, set[str]] = {}  # announcements handed to a member, not yet ended
        self._tasks: set[asyncio.Task[None]] = set()
        self._sharing: asyncio.Task[None] | None = None  # _keep_lead_shared, while there are subscribers
        self._members_changed = asyncio.Event()  # _keep_lead_shared looks again at once
        self.started = 0  # announcements started on this instance
        self.dropped = 0  # announcements this instance could not queue
        self.claims_failed = 0  # announcements played at this instance's own time, the bus silent
        self.claims_refused = 0  # ... the time in the bus one no instance could have claimed
        jobs.on_audio = self.audio

    async def start(self) -> None:
        await self._bus.start(self._arrived, self._resync)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._sharing is not None:
            # Taken back, so that no instance waits for this one's lead; a Redis that does
            # not answer at once leaves it to expire there.
            with contextlib.suppress(BusDown, TimeoutError):
                await asyncio.wait_for(self._bus.share_lead(None, self._clock()), 1.0)
        for ch in self._channels.values():
            for timer in (ch.timer, ch.lag):
                if timer is not None:
                    timer.cancel()
        await self._bus.stop()

    @property
    def bus(self) -> Bus:
        """The bus, for its ``state`` and counters (``/readyz``, metrics)."""
        return self._bus

    # ------------------------------------------------------------ subscriptions

    def join(self, member: Member, name: str, after: int | None, ahead_s: float = 0.0) -> None:
        """``name`` and ``ahead_s`` were checked by ``protocol`` (``subscribe``)."""
        mine = self._subscriptions.get(member, set())
        if name not in mine and len(mine) >= MAX_SUBSCRIPTIONS:
            member.tell(protocol.Error(ErrorCode.BAD_MESSAGE.value,
                                       f"at most {MAX_SUBSCRIPTIONS} channels per connection; unsubscribe one first"))
            return
        ch = self._channel(name)
        ch.members[member] = ahead_s
        self._subscriptions.setdefault(member, set()).add(name)
        # Members are in before the answer is: nothing that starts meanwhile is lost.
        self._spawn(self._answer_join(member, ch, after))
        if self._bus.shared:
            self._members_changed.set()
            if self._sharing is None or self._sharing.done():
                self._sharing = self._spawn(self._keep_lead_shared())

    async def _keep_lead_shared(self) -> None:
        """Keep this instance's lead in the shared bus while it has subscribers: at once
        when a subscriber raised it, else renewed every LEAD_RENEW_S; taken back when the
        last one has gone. Only the announcements an instance began used to put it there,
        so after ten quiet minutes (bus.LEAD_TTL_S) the first instance to begin one set its
        play_at by its own lead alone, and a Snapcast feeder subscribed to another instance
        (its lead holding the pipe's 1 s buffer, ``subscribe.ahead_ms``) lost its start."""
        shared, renewed = 0.0, -math.inf
        while True:
            self._members_changed.clear()  # before the lead is read: a change from now on wakes the next round
            leads = [self._lead(name) for name, ch in self._channels.items() if ch.members]
            if not leads:
                with contextlib.suppress(BusDown):  # else it expires there by itself
                    await self._bus.share_lead(None, self._clock())
                if not self._members_changed.is_set():
                    return
                shared, renewed = 0.0, -math.inf  # one subscribed meanwhile: shared afresh
                continue
            lead, now = max(leads), time.monotonic()
            if lead > shared or now - renewed >= LEAD_RENEW_S:
                try:
                    await self._bus.share_lead(lead, self._clock())
                    shared, renewed = lead, now
                except BusDown:
                    pass  # the bus's state says so (/readyz, metrics); tried again next round
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._members_changed.wait(), LEAD_RENEW_S)

    async def _answer_join(self, member: Member, ch: _Channel, after: int | None) -> None:
        try:
            last = await self._bus.last_seq(ch.name)
            # Known from now on: a resync counts what is missed after it, not since seq 1
            # (a channel is forgotten between subscribers, its number with it).
            ch.last_seq = max(ch.last_seq, last)
        except BusDown:
            last = ch.last_seq
        except Exception:  # answered all the same: a subscribe is never left without one
            log.exception("channel %s: the bus could not say its last number", ch.name)
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
        mine = self._subscriptions.get(member)
        if mine is not None:
            mine.discard(name)
            if not mine:
                del self._subscriptions[member]
        ch = self._channels.get(name)
        if ch is not None:
            ch.members.pop(member, None)
            if ch.current is not None and member in ch.waiting:
                self._let_go(ch, member, ch.current)  # not waited for: it left
                if not ch.waiting:
                    self._finish(ch)
            self._tidy(ch)
            self._members_changed.set()
        member.tell(protocol.Unsubscribed(name))

    def forget(self, member: Member) -> None:
        """A connection closed: its subscriptions go, and its hold on every announcement."""
        for name in self._subscriptions.pop(member, set()):
            ch = self._channels.get(name)
            if ch is None:
                continue
            ch.members.pop(member, None)
            if member in ch.waiting:
                self._ended_by(ch, member, received=False)
            self._tidy(ch)
            self._members_changed.set()
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
            except Exception:  # the publisher is answered whatever happened
                log.exception("channel %s: publish failed", draft.channel)
                member.tell(protocol.Error(ErrorCode.INTERNAL.value, "the announcement could not be published"))

        self._spawn(run())

    async def publish(self, draft: Draft) -> protocol.Published:
        """Send ``draft`` to every instance; raises ``ProtocolError`` (bad_message for a
        ``not_before`` too far ahead, queue_full, bus_unavailable)."""
        now = self._clock()
        protocol.check_not_before(draft.not_before, now)
        protocol.check_not_before(draft.wanted_at, now, "play_at")
        ch = self._channels.get(draft.channel)
        later = not self._due(draft, now)
        pool = self._pool(ch, later, now)
        queued = len(pool)
        if queued >= self.queue_limit and not (draft.priority == "high" and any(not a.high for a in pool)):
            what = "scheduled for later" if later else "waiting"
            raise ProtocolError(
                ErrorCode.QUEUE_FULL,
                f"channel {draft.channel!r} has {queued} announcements {what} (limits.channel_queue); try later",
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
        ch = self._channels.get(ann.channel)
        if ch is None:
            return  # nobody here listens: nothing to synthesize, nothing to remember
        if ann.seq < ch.last_seq:
            # Neither bus delivers twice: the numbering started again (Redis restarted without its data).
            log.warning("channel %s: numbering restarted at %d (was %d)", ch.name, ann.seq, ch.last_seq)
        ch.last_seq = ann.seq
        if not ch.members:
            self._tidy(ch)
            return
        now = self._clock()
        ann = replace(ann, arrived=now)
        pool = self._pool(ch, not self._due(ann, now), now)
        if len(pool) >= self.queue_limit:
            normals = [a for a in pool if not a.high]
            if not (ann.high and normals):
                self.dropped += 1
                log.warning("channel %s: queue full (%d); %s dropped on this instance", ch.name, len(pool), ann.id)
                return
            ch.queue.remove(normals[-1])  # the newest normal one makes room for a high one
            self.dropped += 1
        if ann.high:
            # After the high ones already waiting, ahead of every normal one.
            place = sum(1 for a in ch.queue if a.high)
            ch.queue.insert(place, ann)
            if ch.current is not None and not ch.current.high and self._due(ann, now):
                ch.queue.remove(ann)
                self._begin(ch, ann)  # the subscribers' sessions cut the playing one short
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
            wake = min(self._due_at(a) for a in ch.queue) - now
            ch.timer = asyncio.get_running_loop().call_later(max(0.0, wake), self._advance, ch)
        self._tidy(ch)

    def _begin(self, ch: _Channel, ann: Announcement) -> None:
        self._cancel_timers(ch)
        self._learn(ch)
        ch.current = ann
        ch.waiting = set(ch.members)
        ch.begun = set()
        ch.play_at = None
        self.started += 1
        log.info("channel %s: %s to %d subscribers", ch.name, ann.id, len(ch.waiting))
        now = self._clock()
        ch.begun_at, ch.delivered_s, ch.lag_s = now, 0.0, None
        lead, floor = self._lead(ch.name), timeline.floor(ch.play_end, self._gap, ann.not_before, ann.high)
        if ann.wanted_at is not None:
            floor = max(floor, ann.wanted_at)  # the publisher's time, unless it cannot be made
        # A model that must load first (unloaded after an idle hall's long silence) delays
        # the audio for everyone, in step or not: it is waited for on top of the lead (which
        # alone is bounded by sync_max_lead), or every kiosk would join it seconds in.
        ch.load_s = self._model_wait(ann.voice)
        if ch.load_s > 0:
            floor = max(floor, now + ch.load_s + lead)
        try:
            for member in list(ch.waiting):
                self.jobs.hold(ann.id)
                self._holding.setdefault(member, set()).add(ann.id)
            if self._bus.shared:
                # Every instance must hear it at one time: agreed through the bus, then handed out.
                self._spawn(self._claim(ch, ann, now, lead, floor))
            else:
                self._hand_out(ch, ann, timeline.propose(now, lead, floor))
        finally:
            # Whatever happened above, the channel goes on: never wedged on ``current``.
            if ch.current is ann:
                ch.timer = asyncio.get_running_loop().call_later(HOLD_S, self._stop_holding, ch, ann)
                if not ch.waiting:
                    self._finish(ch)

    async def _claim(self, ch: _Channel, ann: Announcement, now: float, lead: float, floor: float) -> None:
        """Agree on ``ann``'s ``play_at`` with the other instances, then hand it out; without
        an answer soon, this instance's own time (its kiosks may then differ from the others')."""
        members = list(ch.waiting)
        try:
            async with asyncio.timeout(CLAIM_TIMEOUT_S):
                play_at = await self._bus.claim_play_at(
                    f"{ann.id}:{ann.published!r}", now, lead, floor, max_lead=self.lead.max_lead
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # BusDown, a timeout or a bug: the announcement is played all the same
            play_at = timeline.propose(now, lead, floor)
            self.claims_failed += 1
            log.warning("channel %s: no agreed time for %s (%s); played at this instance's own",
                        ch.name, ann.id, exc if isinstance(exc, BusDown) else type(exc).__name__)
        else:
            # Anyone who can write to Redis can write the agreed time: one no instance could
            # have claimed is not handed out (nor carried forward as the next one's floor).
            since = max(ann.arrived, ann.not_before or 0.0, ann.wanted_at or 0.0)
            earliest, latest = timeline.claim_bounds(
                since, now, floor, self.lead.max_lead, self._model_load(ann.voice)
            )
            if not earliest <= play_at <= latest:
                self.claims_refused += 1
                log.warning("channel %s: the agreed time for %s is %+.3f s from now, outside what an instance "
                            "could claim (%+.3f to %+.3f s); played at this instance's own",
                            ch.name, ann.id, play_at - now, earliest - now, latest - now)
                play_at = timeline.propose(now, lead, floor)
        if ch.current is not ann:
            # The channel went on meanwhile (everyone left, or a high one cut it): never handed out.
            for member in members:
                self._unhold(member, ann.id)
            return
        self._hand_out(ch, ann, play_at)
        if ch.current is ann and not ch.waiting:
            self._finish(ch)

    def _hand_out(self, ch: _Channel, ann: Announcement, play_at: float) -> None:
        """Give ``ann``, timed, to every subscriber still waiting for it."""
        ch.play_at = play_at
        if ann.high:
            ch.play_end = play_at  # what was to play after it is cut where it begins
        timed = replace(ann, play_at=play_at)
        for member in list(ch.waiting):
            try:
                member.announce(timed)  # may end it at once (an error): ``ended`` copes
            except Exception:  # one subscriber's failure is its own, never the channel's
                log.exception("channel %s: %s could not be handed to a subscriber", ch.name, ann.id)
                self._let_go(ch, member, ann)

    def audio(self, ann_id: str, audio_s: float) -> None:
        """``audio_s`` more of the announcement's audio was synthesized (``SharedJobs``):
        how late it came, after what came before it, teaches the lead."""
        ch = self._channels.get(ann_id.rpartition("#")[0])
        if ch is None or ch.current is None or ch.current.id != ann_id:
            return
        lag = self._clock() - ch.begun_at - ch.load_s - ch.delivered_s  # a load is not the lead's to cover
        ch.lag_s = lag if ch.lag_s is None else max(ch.lag_s, lag)
        ch.delivered_s += audio_s

    def _learn(self, ch: _Channel) -> None:
        if ch.lag_s is not None:
            self.lead.record(ch.lag_s)
            ch.lag_s = None

    def begun(self, member: Member, ann_id: str) -> None:
        """``member``'s session made the first job of announcement ``ann_id``: it is receiving it."""
        ch = self._channels.get(ann_id.rpartition("#")[0])
        if ch is not None and ch.current is not None and ch.current.id == ann_id and member in ch.waiting:
            ch.begun.add(member)

    def ended(self, member: Member, ann_id: str, audio_ms: float | None = None) -> None:
        """``member`` sent ``end`` for an announcement (done, cancelled or error), after
        ``audio_ms`` of its audio (``end.stats``)."""
        held = self._holding.get(member)
        if held is not None and ann_id in held:
            held.discard(ann_id)
            self.jobs.release(ann_id)
        ch = self._channels.get(ann_id.rpartition("#")[0])
        if ch is not None and ch.current is not None and ch.current.id == ann_id and member in ch.waiting:
            if ch.play_at is not None and audio_ms is not None and audio_ms > 0:
                # The next announcement is heard after this one ends on every kiosk.
                ch.play_end = max(ch.play_end, ch.play_at + audio_ms / 1000)
            self._ended_by(ch, member, received=member in ch.begun)

    def _ended_by(self, ch: _Channel, member: Member, *, received: bool) -> None:
        """``received``: ``member`` had begun it, so its end says the audio is there
        (an error before any job, or a connection gone, says nothing about the others)."""
        ch.waiting.discard(member)
        ch.begun.discard(member)
        if not ch.waiting:
            self._finish(ch)
            return
        if not received:
            return
        ann = ch.current
        assert ann is not None
        # One has it all: those that have not even begun it are not waited for (their own
        # utterance is ahead of it, maybe waiting for a flush that never comes) ...
        for other in [m for m in ch.waiting if m not in ch.begun]:
            self._let_go(ch, other, ann)
        if not ch.waiting:
            self._finish(ch)
        elif ch.lag is None:  # ... and those receiving it have LAG_S more
            ch.lag = asyncio.get_running_loop().call_later(LAG_S, self._stop_holding, ch, ann)

    def _let_go(self, ch: _Channel, member: Member, ann: Announcement) -> None:
        """Stop waiting for ``member`` on ``ann`` and give back its share of the held audio:
        its session still plays the announcement when it comes to it, synthesized for it alone."""
        ch.waiting.discard(member)
        ch.begun.discard(member)
        self._unhold(member, ann.id)

    def _unhold(self, member: Member, ann_id: str) -> None:
        held = self._holding.get(member)
        if held is not None and ann_id in held:
            held.discard(ann_id)
            if not held:
                del self._holding[member]
            self.jobs.release(ann_id)

    def _stop_holding(self, ch: _Channel, ann: Announcement) -> None:
        if ch.current is ann:
            log.info("channel %s: %d subscribers still busy with %s; going on", ch.name, len(ch.waiting), ann.id)
            for member in list(ch.waiting):
                self._let_go(ch, member, ann)
            self._finish(ch)

    def _finish(self, ch: _Channel) -> None:
        self._learn(ch)
        ch.current = None
        ch.waiting.clear()
        ch.begun.clear()
        self._cancel_timers(ch)
        self._advance(ch)

    @staticmethod
    def _cancel_timers(ch: _Channel) -> None:
        for timer in (ch.timer, ch.lag):
            if timer is not None:
                timer.cancel()
        ch.timer = ch.lag = None

    # ------------------------------------------------------------ jobs

    def submit(self, job: Job, member: Member | None = None) -> None:
        """A subscriber's job of an announcement (``Job.shared``)."""
        if member is not None and job.shared is not None and job.shared[1] == 0:
            self.begun(member, job.shared[0])
        self.jobs.submit(job)

    # ------------------------------------------------------------ helpers

    def _channel(self, name: str) -> _Channel:
        ch = self._channels.get(name)
        if ch is None:
            ch = self._channels[name] = _Channel(name)
        return ch

    def _tidy(self, ch: _Channel) -> None:
        """Forget a channel with nobody and nothing left: what nobody here hears is not kept
        (a name published to through Redis costs nothing on an instance without subscribers)."""
        if not ch.members and ch.current is None and not ch.waiting:
            ch.queue.clear()
            self._cancel_timers(ch)
            self._channels.pop(ch.name, None)

    def _due(self, ann: Draft, now: float | None = None) -> bool:
        return self._due_at(ann) <= (now if now is not None else self._clock())

    def _due_at(self, ann: Draft) -> float:
        """When ``ann`` may begin: at its ``not_before``, and one lead (and its model's load)
        before the time its publisher wants it heard, so that every kiosk has it by then."""
        due = ann.not_before or 0.0
        if ann.wanted_at is not None:
            due = max(due, ann.wanted_at - self._lead(ann.channel) - self._model_wait(ann.voice) - WANTED_EARLY_S)
        return due

    def _lead(self, name: str) -> float:
        """How far ahead of its begin a channel's announcement is heard: the lead the audio
        needs to reach every subscriber (``timeline.LeadEstimator``) and the longest its
        subscribers write ahead of play_at (``subscribe.ahead_ms``: a Snapcast pipe source
        writes its buffer, 1 s, ahead; with less, the start of an announcement came after
        its place had been written, as silence: "The museum" lost), together at most
        --sync-max-lead, the bound on the delay playing in step adds."""
        ch = self._channels.get(name)
        ahead = max(ch.members.values(), default=0.0) if ch is not None else 0.0
        lead = self.lead.lead()
        return min(lead + ahead, max(lead, self.lead.max_lead))

    def _pool(self, ch: _Channel | None, later: bool, now: float) -> list[Announcement]:
        """The half of the queue an announcement goes in: those scheduled for later, or the rest."""
        if ch is None:
            return []
        return [a for a in ch.queue if (not self._due(a, now)) == later]

    def _spawn(self, coro) -> asyncio.Task[None]:  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # never silent
            log.error("channels: a task failed", exc_info=task.exception())

    def queued(self, name: str) -> int:
        ch = self._channels.get(name)
        return len(ch.queue) if ch is not None else 0
