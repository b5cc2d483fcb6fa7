"""Channel scheduling without a server: the real hub and in-process bus, members that
record what they are handed (the same behaviour is tested end to end with a real voice
in test_channels_live.py and across instances in test_channels_scaleout.py)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import replace

import pytest

from rtts import protocol
from rtts.broadcast import announcements
from rtts.broadcast.announcements import Announcement, Draft
from rtts.broadcast.bus import LocalBus
from rtts.broadcast.channels import HOLD_S, LAG_S, Channels
from rtts.protocol import ProtocolError


class FakeJobs:
    def __init__(self) -> None:
        self.holds: dict[str, int] = {}

    def hold(self, ann: str) -> None:
        self.holds[ann] = self.holds.get(ann, 0) + 1

    def release(self, ann: str) -> None:
        self.holds[ann] -= 1


class Member:
    def __init__(self, hub: Channels) -> None:
        self.hub = hub
        self.heard: list[Announcement] = []
        self.told: list[protocol.ServerMessage] = []

    def announce(self, ann: Announcement) -> None:
        self.heard.append(ann)

    def tell(self, message: protocol.ServerMessage) -> None:
        self.told.append(message)

    def end(self, ann: Announcement) -> None:
        self.hub.ended(self, ann.id)


def draft(text: str, priority: str = "normal", not_before: float | None = None, channel: str = "lobby",
          voice: str = "piper/en_US-joe-medium") -> Draft:
    return Draft(channel, text, voice, None, 1.0, priority, not_before)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
async def hub():  # type: ignore[no-untyped-def]
    h = Channels(LocalBus(), FakeJobs(), queue_limit=3)  # type: ignore[arg-type]
    await h.start()
    yield h
    await h.stop()


async def test_one_at_a_time_in_order_to_every_member(hub: Channels) -> None:
    a, b = Member(hub), Member(hub)
    hub.join(a, "lobby", None), hub.join(b, "lobby", None)
    first = await hub.publish(draft("one"))
    second = await hub.publish(draft("two"))
    await settle()
    assert [x.text for x in a.heard] == ["one"] == [x.text for x in b.heard]
    assert (first.seq, second.seq, second.queued) == (1, 2, 0)
    a.end(a.heard[0])
    await settle()
    assert len(b.heard) == 1  # b has not ended it yet: the channel waits
    b.end(b.heard[0])
    assert [x.text for x in a.heard] == ["one", "two"] == [x.text for x in b.heard]
    assert hub.jobs.holds == {"lobby#1": 0, "lobby#2": 2}  # type: ignore[attr-defined]


async def test_high_priority_interrupts_and_goes_ahead_of_the_queue(hub: Channels) -> None:
    a = Member(hub)
    hub.join(a, "lobby", None)
    await hub.publish(draft("playing"))
    await hub.publish(draft("waiting"))
    await settle()
    await hub.publish(draft("fire", priority="high"))
    await settle()
    assert [x.text for x in a.heard] == ["playing", "fire"]  # handed over at once: its session cuts "playing"
    a.end(a.heard[0])  # the cut one ends (cancelled): the high one is still playing
    assert len(a.heard) == 2
    a.end(a.heard[1])
    assert [x.text for x in a.heard] == ["playing", "fire", "waiting"]


async def test_queue_is_bounded_and_says_so(hub: Channels) -> None:
    a = Member(hub)
    hub.join(a, "lobby", None)
    for i in range(4):  # one plays, three wait
        await hub.publish(draft(f"n{i}"))
        await settle()
    with pytest.raises(ProtocolError) as refused:
        await hub.publish(draft("one too many"))
    assert refused.value.code == protocol.ErrorCode.QUEUE_FULL
    # A high one still gets in: the newest normal one makes room.
    await hub.publish(draft("fire", priority="high"))
    await settle()
    assert [x.text for x in a.heard] == ["n0", "fire"]
    for ann in list(a.heard):  # n0 was cut, fire ends
        a.end(ann)
    a.end(a.heard[-1])  # n1
    a.end(a.heard[-1])  # n2; n3 made room for fire
    assert [x.text for x in a.heard] == ["n0", "fire", "n1", "n2"]
    assert hub.dropped == 1


async def test_not_before_waits_without_holding_up_the_others(hub: Channels) -> None:
    a = Member(hub)
    hub.join(a, "lobby", None)
    loop_now = hub._clock()
    await hub.publish(draft("later", not_before=loop_now + 0.3))
    await hub.publish(draft("now"))
    await settle()
    assert [x.text for x in a.heard] == ["now"]
    a.end(a.heard[0])
    await asyncio.sleep(0.4)
    assert [x.text for x in a.heard] == ["now", "later"]


async def test_subscribe_reports_what_was_missed(hub: Channels) -> None:
    a = Member(hub)
    hub.join(a, "lobby", None)
    for text in ("one", "two", "three"):
        await hub.publish(draft(text))
    await settle()  # "one" plays, two wait
    late = Member(hub)
    hub.join(late, "lobby", 0)  # heard nothing so far
    await settle()
    ok = late.told[-1]
    assert isinstance(ok, protocol.Subscribed)
    # "one" started before it came; "two" and "three" are still queued: it will hear them.
    assert (ok.seq, ok.missed, ok.queue_limit) == (3, 1, 3)


async def test_a_member_that_leaves_lets_the_channel_go_on(hub: Channels) -> None:
    a, b = Member(hub), Member(hub)
    hub.join(a, "lobby", None), hub.join(b, "lobby", None)
    await hub.publish(draft("one"))
    await hub.publish(draft("two"))
    await settle()
    a.end(a.heard[0])
    hub.forget(b)  # b's connection closed without ending it
    assert [x.text for x in a.heard] == ["one", "two"]
    assert [x.text for x in b.heard] == ["one"]
    assert hub.jobs.holds["lobby#1"] == 0  # type: ignore[attr-defined]


async def test_nobody_subscribed_nothing_is_synthesized(hub: Channels) -> None:
    await hub.publish(draft("into the void", channel="empty"))
    await settle()
    assert hub.jobs.holds == {}  # type: ignore[attr-defined]
    assert hub.started == 0


async def test_a_connection_may_subscribe_to_a_bounded_number_of_channels(hub: Channels) -> None:
    from rtts.broadcast.channels import MAX_SUBSCRIPTIONS

    a = Member(hub)
    for i in range(MAX_SUBSCRIPTIONS + 1):
        hub.join(a, f"c{i}", None)
    hub.join(a, "c0", None)  # again: still one subscription
    await settle()
    errors = [m for m in a.told if isinstance(m, protocol.Error)]
    assert len(errors) == 1 and errors[0].code == "bad_message"
    assert sum(isinstance(m, protocol.Subscribed) for m in a.told) == MAX_SUBSCRIPTIONS + 1
    hub.forget(a)
    assert hub._channels == {}


# ---------------------------------------------------------------- issue 20: untrusted bus, holds, scheduling


def wire(seq: object = 1, **changes: object) -> bytes:
    """A bus message as RedisBus publishes it, with ``changes`` to its fields."""
    fields = {"channel": "lobby", "text": "Hello.", "voice": "piper/en_US-joe-medium", "lang": None, "speed": 1.0,
              "priority": "normal", "not_before": None, "published": time.time(), **changes}
    return f"{seq}\n".encode() + json.dumps(fields).encode()


def decode(data: bytes) -> Announcement:
    return announcements.decode(data, now=time.time(), max_text_chars=5000)


def test_a_bus_message_is_checked_like_a_publish() -> None:
    ann = decode(wire(7, priority="high", not_before=time.time() + 60, speed=2))
    assert (ann.id, ann.high, ann.speed) == ("lobby#7", True, 2.0)
    garbage = [
        b"\xff", b"1\n\xff\xfe", b"x\n{}", b"0\n{}", b"1\n[]", b"1\n" + b"[" * 100_000, b"9" * 40 + b"\n{}",
        wire(channel=["lobby"]), wire(text=5), wire(text=""), wire(voice=None), wire(speed="fast"), wire(speed=True),
        wire(speed=9.0), wire(priority="urgent"), wire(priority=None), wire(channel="x" * 100_000),
        wire(channel="bad name!"), wire(lang=3), wire(published="now"),
        wire(text="\ud800"), wire(channel="lo\udc00bby"),  # lone surrogates: json.dumps keeps them as \u escapes
        wire(not_before=float("nan")), wire(not_before=float("inf")), wire(not_before=10**400),
        wire(not_before=time.time() * 1000),  # milliseconds: 55,000 years ahead
        wire(not_before=time.time() + 25 * 3600), wire(text="a" * 5001),
        wire(extra="field"),
    ]
    for data in garbage:
        with pytest.raises(ProtocolError) as refused:
            decode(data)
        assert refused.value.code in ("bad_message", "text_too_long"), data[:80]
    fields = json.loads(wire().partition(b"\n")[2])
    del fields["published"]
    with pytest.raises(ProtocolError):
        decode(b"1\n" + json.dumps(fields).encode())


def test_lone_surrogates_and_non_finite_numbers_are_refused_in_every_message() -> None:
    for msg in (protocol.Speak(id="u", text="a\ud800b"), protocol.Publish(channel="lobby", text="\udfff"),
                protocol.Publish(channel="lobby", text="Hi.", not_before=math.nan),
                protocol.Publish(channel="lobby", text="Hi.", not_before=10**400),
                protocol.Hello(voice="x\ud801")):
        with pytest.raises(ProtocolError) as refused:
            protocol.check(msg)
        assert refused.value.code == "bad_message"
    protocol.check(protocol.Publish(channel="lobby", text="Hi \U0001f600.", not_before=1.5e9))


async def test_not_before_must_be_within_a_day(hub: Channels) -> None:
    now = hub._clock()
    for when in (now * 1000, now + 24 * 3600 + 60):
        with pytest.raises(ProtocolError) as refused:
            await hub.publish(draft("later", not_before=when))
        assert refused.value.code == "bad_message"
    await hub.publish(draft("tomorrow", not_before=now + 23 * 3600))
    await hub.publish(draft("long ago", not_before=0.0))  # past: now


async def test_announcements_for_later_never_fill_the_queue_for_now(hub: Channels) -> None:
    a = Member(hub)
    hub.join(a, "lobby", None)
    later = hub._clock() + 3600
    for i in range(3):  # queue_limit: 3
        await hub.publish(draft(f"later {i}", not_before=later))
    await settle()
    with pytest.raises(ProtocolError) as refused:
        await hub.publish(draft("later too", not_before=later))
    assert refused.value.code == "queue_full"
    # A high one for later takes the place of the newest normal one for later.
    await hub.publish(draft("fire drill", priority="high", not_before=later))
    # Now: as if nothing were scheduled, normal and high alike.
    await hub.publish(draft("now"))
    await hub.publish(draft("fire", priority="high"))
    await settle()
    assert [x.text for x in a.heard] == ["now", "fire"]
    assert hub.queued("lobby") == 3 and hub.dropped == 1


async def test_a_subscriber_that_never_begins_does_not_hold_the_channel(hub: Channels) -> None:
    """An unflushed append (or its own long utterance) keeps b from beginning the
    announcement: once a has received it all, the channel goes on at once, and b's
    share of the held audio is let go."""
    a, b = Member(hub), Member(hub)
    hub.join(a, "lobby", None), hub.join(b, "lobby", None)
    await hub.publish(draft("one"))
    await hub.publish(draft("two"))
    await settle()
    first = a.heard[0]
    hub.begun(a, first.id)  # a's session made the announcement's first job
    a.end(first)
    assert [x.text for x in a.heard] == ["one", "two"]
    assert hub.jobs.holds[first.id] == 0  # type: ignore[attr-defined]
    b.end(first)  # much later, b gets to it: nothing is released twice
    assert hub.jobs.holds[first.id] == 0  # type: ignore[attr-defined]


async def test_a_subscriber_still_receiving_gets_lag_s_then_is_left_behind(monkeypatch, hub: Channels) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("rtts.broadcast.channels.LAG_S", 0.05)
    a, b = Member(hub), Member(hub)
    hub.join(a, "lobby", None), hub.join(b, "lobby", None)
    await hub.publish(draft("one"))
    await hub.publish(draft("two"))
    await settle()
    first = a.heard[0]
    hub.begun(a, first.id), hub.begun(b, first.id)  # both receiving; b reads slowly
    a.end(first)
    assert len(a.heard) == 1  # b has LAG_S more
    await asyncio.sleep(0.1)
    assert [x.text for x in a.heard] == ["one", "two"]
    assert hub.jobs.holds[first.id] == 0  # type: ignore[attr-defined]
    assert LAG_S < HOLD_S


async def test_stop_holding_lets_the_held_audio_go(monkeypatch, hub: Channels) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("rtts.broadcast.channels.HOLD_S", 0.05)
    a = Member(hub)
    hub.join(a, "lobby", None)
    await hub.publish(draft("one"))
    await settle()
    assert hub.jobs.holds["lobby#1"] == 1  # type: ignore[attr-defined]
    await asyncio.sleep(0.1)  # a never ends it
    assert hub.jobs.holds["lobby#1"] == 0  # type: ignore[attr-defined]
    assert hub._holding == {}


async def test_a_subscriber_that_fails_does_not_wedge_the_channel(hub: Channels) -> None:
    class Broken(Member):
        def announce(self, ann: Announcement) -> None:
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    a, broken = Member(hub), Broken(hub)
    hub.join(broken, "lobby", None), hub.join(a, "lobby", None)
    await hub.publish(draft("one"))
    await hub.publish(draft("two"))
    await settle()
    a.end(a.heard[0])
    assert [x.text for x in a.heard] == ["one", "two"]
    a.end(a.heard[1])
    assert hub._channels["lobby"].current is None


async def test_channels_nobody_listens_to_are_forgotten(hub: Channels) -> None:
    for i in range(500):
        await hub.publish(draft("into the void", channel=f"c{i}"))
    await settle()
    assert hub._channels == {}
    a = Member(hub)
    hub.join(a, "lobby", None)
    await hub.publish(draft("one"))
    await settle()
    a.end(a.heard[0])
    hub.leave(a, "lobby")  # numbered, played, left: nothing kept
    assert hub._channels == {} and hub._subscriptions == {}


async def test_a_subscriber_that_leaves_is_not_waited_for(hub: Channels) -> None:
    a, b = Member(hub), Member(hub)
    hub.join(a, "lobby", None), hub.join(b, "lobby", None)
    await hub.publish(draft("one"))
    await hub.publish(draft("two"))
    await settle()
    a.end(a.heard[0])
    hub.leave(b, "lobby")
    assert [x.text for x in a.heard] == ["one", "two"]
    assert hub.jobs.holds["lobby#1"] == 0  # type: ignore[attr-defined]


async def test_a_failing_bus_answers_subscribe_and_publish() -> None:
    class Broken(LocalBus):
        async def last_seq(self, channel: str) -> int:
            raise ValueError("invalid literal for int()")

        async def publish(self, draft: Draft) -> Announcement:
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    hub = Channels(Broken(), FakeJobs(), queue_limit=3)  # type: ignore[arg-type]
    await hub.start()
    a = Member(hub)
    hub.join(a, "lobby", None)
    hub.post(a, draft("one"))
    await settle()
    assert isinstance(a.told[0], protocol.Subscribed) and a.told[0].seq == 0
    assert isinstance(a.told[1], protocol.Error) and a.told[1].code == "internal"
    await hub.stop()


async def test_a_resync_counts_only_what_was_missed_since_subscribing() -> None:
    """A channel is forgotten between subscribers: its number comes back from the bus on
    subscribe, so a resync does not count every announcement since seq 1 as missed."""
    bus = LocalBus()
    hub = Channels(bus, FakeJobs(), queue_limit=3)  # type: ignore[arg-type]
    await hub.start()
    bus._seq["lobby"] = 40  # published to while nobody here listened
    a = Member(hub)
    hub.join(a, "lobby", None)
    await settle()
    assert isinstance(a.told[-1], protocol.Subscribed) and a.told[-1].seq == 40
    bus._seq["lobby"] = 42  # two published while the bus was away
    hub._resync()
    await settle()
    told = a.told[-1]
    assert isinstance(told, protocol.Subscribed) and (told.seq, told.missed) == (42, 2)
    await hub.stop()


# ---------------------------------------------------------------- playing in step


class Wall:
    """The shared clock, by hand (Unix seconds)."""

    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


async def test_every_member_gets_one_play_at_one_lead_ahead_and_the_next_after_the_end() -> None:
    from rtts.broadcast.timeline import LeadEstimator

    wall = Wall()
    hub = Channels(LocalBus(wall), FakeJobs(), queue_limit=3, clock=wall,  # type: ignore[arg-type]
                   lead=LeadEstimator(0.3, 2.0), gap=0.25)
    await hub.start()
    a, b = Member(hub), Member(hub)
    hub.join(a, "lobby", None), hub.join(b, "lobby", None)
    await hub.publish(draft("one"))
    await hub.publish(draft("two"))
    await settle()
    first = a.heard[0]
    assert first.play_at == b.heard[0].play_at == wall.t + 1.0  # no lag measured yet: 1 s ahead
    wall.t += 0.2  # all its audio sent, far ahead of playing it: the next waits for it to be heard
    hub.ended(a, first.id, 3000.0)
    hub.ended(b, first.id, 3000.0)
    assert a.heard[1].play_at == b.heard[1].play_at == first.play_at + 3.0 + 0.25
    wall.t += 10  # long after: one lead ahead again
    hub.ended(a, a.heard[1].id, 500.0)
    hub.ended(b, b.heard[1].id, 500.0)
    await hub.publish(draft("three"))
    await settle()
    assert a.heard[2].play_at == wall.t + 1.0
    await hub.stop()


async def test_the_lead_covers_what_a_subscriber_writes_ahead_within_the_max_lead() -> None:
    """A Snapcast pipe source writes its buffer (1 s) ahead of play_at (``subscribe.ahead_ms``):
    with a lead of 0.4 s its announcements' starts came after their place had been written,
    and were lost. The channel's lead is the learnt one and the longest subscriber's ahead,
    at most --sync-max-lead; a channel without such a subscriber keeps its own."""
    from rtts.broadcast.timeline import LeadEstimator

    wall = Wall()
    hub = Channels(LocalBus(wall), FakeJobs(), queue_limit=3, clock=wall,  # type: ignore[arg-type]
                   lead=LeadEstimator(0.3, 2.0, fixed=0.4), gap=0.25)
    await hub.start()
    kiosk, feeder, other = Member(hub), Member(hub), Member(hub)
    hub.join(kiosk, "lobby", None)
    hub.join(feeder, "lobby", None, 1.0)
    hub.join(other, "hall", None)
    await hub.publish(draft("one"))
    await hub.publish(draft("two", channel="hall"))
    await settle()
    assert kiosk.heard[0].play_at == feeder.heard[0].play_at == pytest.approx(wall.t + 1.4)  # every member in step
    assert other.heard[0].play_at == pytest.approx(wall.t + 0.4)
    hub.ended(kiosk, kiosk.heard[0].id, 500.0), hub.ended(feeder, feeder.heard[0].id, 500.0)
    hub.leave(feeder, "lobby")
    hub.join(Member(hub), "lobby", None, 5.0)  # more than the bound: the bound
    wall.t += 10
    await hub.publish(draft("three"))
    await settle()
    assert kiosk.heard[1].play_at == pytest.approx(wall.t + 2.0)
    await hub.stop()


async def test_a_high_priority_announcement_cuts_at_its_own_play_at() -> None:
    from rtts.broadcast.timeline import LeadEstimator

    wall = Wall()
    hub = Channels(LocalBus(wall), FakeJobs(), queue_limit=3, clock=wall,  # type: ignore[arg-type]
                   lead=LeadEstimator(0.3, 2.0, fixed=0.5), gap=0.25)
    await hub.start()
    a = Member(hub)
    hub.join(a, "lobby", None)
    await hub.publish(draft("long one"))
    await settle()
    hub.ended(a, a.heard[0].id, 60_000.0)  # sent, to be heard for a minute
    await hub.publish(draft("next"))
    await settle()
    assert a.heard[1].play_at == a.heard[0].play_at + 60.25
    wall.t += 1
    await hub.publish(draft("fire", priority="high"))
    await settle()
    fire = a.heard[2]
    assert fire.text == "fire" and fire.play_at == wall.t + 0.5  # no floor: it cuts what plays
    hub.ended(a, a.heard[1].id, 60_000.0)  # the cut one ends, after the high one began: no say
    hub.ended(a, fire.id, 2000.0)
    await hub.publish(draft("after"))
    await settle()
    assert a.heard[3].play_at == fire.play_at + 2.0 + 0.25
    await hub.stop()


class SharedBus(LocalBus):
    """A bus other instances share (as Redis): every claim waits for ``answer``."""

    shared = True

    def __init__(self, clock) -> None:  # type: ignore[no-untyped-def]
        super().__init__(clock)
        self.claims: list[tuple[str, float, float, float]] = []
        self.shares: list[float | None] = []
        self.shares_refused = 0
        self.gate: asyncio.Event | None = None
        self.answer: asyncio.Future[float] | None = None
        self.down = False

    async def claim_play_at(self, key: str, now: float, lead: float, floor: float, *, max_lead: float) -> float:
        from rtts.broadcast.bus import BusDown

        self.claims.append((key, now, lead, floor))
        if self.down:
            raise BusDown("Redis: connection refused")
        self.answer = asyncio.get_running_loop().create_future()
        return await self.answer

    async def share_lead(self, lead: float | None, now: float) -> None:
        from rtts.broadcast.bus import BusDown

        if self.down:
            self.shares_refused += 1
            raise BusDown("Redis: connection refused")
        if self.gate is not None:  # Redis taking its time
            await self.gate.wait()
        self.shares.append(lead)


async def shared_hub(wall: Wall, **lead) -> tuple[Channels, SharedBus]:  # type: ignore[no-untyped-def]
    from rtts.broadcast.timeline import LeadEstimator

    bus = SharedBus(wall)
    hub = Channels(bus, FakeJobs(), queue_limit=3, clock=wall,  # type: ignore[arg-type]
                   lead=LeadEstimator(0.3, 2.0, **lead), gap=0.25)
    await hub.start()
    return hub, bus


async def test_across_instances_one_claim_and_its_time_for_every_member() -> None:
    wall = Wall()
    hub, bus = await shared_hub(wall)
    a, b = Member(hub), Member(hub)
    hub.join(a, "lobby", None), hub.join(b, "lobby", None)
    ann = await hub.publish(draft("one"))
    await settle()
    assert a.heard == [] and len(bus.claims) == 1  # nobody has it before its time is agreed
    key, now, lead, floor = bus.claims[0]
    assert key.startswith("lobby#1:") and (now, lead, floor) == (wall.t, 1.0, 0.25)
    assert bus.answer is not None
    bus.answer.set_result(wall.t + 1.7)  # another instance claimed it first, with a longer lead
    await settle()
    assert [x.play_at for x in a.heard] == [wall.t + 1.7] == [x.play_at for x in b.heard]
    assert a.heard[0].id == ann.id and hub.claims_failed == 0
    await hub.stop()


async def test_an_instance_with_subscribers_keeps_its_lead_in_the_shared_bus(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Not only its claims: after ten quiet minutes another instance began an announcement
    by its own lead alone, and a Snapcast feeder here (1 s ahead) lost the start. Shared at
    once when a subscriber raises it (a flood of kiosks shares it once), renewed, taken
    back when the last subscriber has gone; a bus that is down is tried again."""
    from rtts.broadcast import channels

    wall = Wall()
    hub, bus = await shared_hub(wall, fixed=0.4)
    kiosks = [Member(hub) for _ in range(20)]
    for kiosk in kiosks:
        hub.join(kiosk, "lobby", None)
    await settle()
    assert bus.shares == [0.4]
    feeder = Member(hub)
    hub.join(feeder, "hall", None, 1.0)
    await settle()
    assert bus.shares == [0.4, 1.4]
    monkeypatch.setattr(channels, "LEAD_RENEW_S", 0.05)
    bus.down = True
    hub.leave(feeder, "hall")  # wakes it; its renewal, due 0.05 s on, meets a bus that is down
    await asyncio.sleep(0.12)
    assert bus.shares == [0.4, 1.4] and bus.shares_refused >= 1
    bus.down = False
    await asyncio.sleep(0.12)
    assert bus.shares[2:] and set(bus.shares[2:]) == {0.4}  # renewed, at the lead it has now
    for kiosk in kiosks:
        hub.leave(kiosk, "lobby")
    await asyncio.sleep(0.1)
    assert bus.shares[-1] is None and hub._sharing is not None and hub._sharing.done()
    await hub.stop()


async def test_a_subscriber_that_comes_while_the_lead_is_taken_back_has_it_shared_again() -> None:
    wall = Wall()
    hub, bus = await shared_hub(wall, fixed=0.4)
    kiosk = Member(hub)
    hub.join(kiosk, "lobby", None)
    await settle()
    bus.gate = asyncio.Event()
    hub.leave(kiosk, "lobby")  # the last: its lead is being taken back...
    await settle()
    hub.join(Member(hub), "hall", None, 0.5)  # ...when another subscribes
    bus.gate.set()
    await settle()
    assert bus.shares == [0.4, None, 0.9] and hub._sharing is not None and not hub._sharing.done()
    await hub.stop()


async def test_a_bus_of_one_instance_is_told_no_lead() -> None:
    hub = Channels(LocalBus(), FakeJobs(), queue_limit=3)  # type: ignore[arg-type]
    await hub.start()
    hub.join(Member(hub), "lobby", None, 1.0)
    await settle()
    assert hub._sharing is None
    await hub.stop()


async def test_without_an_answer_from_the_bus_an_announcement_plays_at_this_instances_time(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from rtts.broadcast import channels

    wall = Wall()
    hub, bus = await shared_hub(wall, fixed=0.6)
    a = Member(hub)
    hub.join(a, "lobby", None)
    bus.down = True
    await hub.publish(draft("one"))
    await settle()
    assert [x.play_at for x in a.heard] == [wall.t + 0.6] and hub.claims_failed == 1
    a.end(a.heard[0])
    bus.down = False
    monkeypatch.setattr(channels, "CLAIM_TIMEOUT_S", 0.05)  # Redis hangs
    await hub.publish(draft("two"))
    await asyncio.sleep(0.1)
    assert [x.text for x in a.heard] == ["one", "two"] and hub.claims_failed == 2
    await hub.stop()


async def test_a_time_in_the_bus_no_instance_could_have_claimed_is_refused_and_not_carried_forward() -> None:
    """Issue 30, bug 3: ``rtts:play:<key>`` set by hand to now + 80,000 s held that
    announcement and, through its floor, every later one ~22 h late; now − 80,000 s made
    kiosks drop it as late. Such a value is counted and this instance's own time used."""
    wall = Wall()
    hub, bus = await shared_hub(wall, fixed=0.6)
    a = Member(hub)
    hub.join(a, "lobby", None)
    for n, told in enumerate((wall.t + 80_000, wall.t - 80_000), 1):
        await hub.publish(draft(f"announcement {n}"))
        await settle()
        assert bus.answer is not None
        bus.answer.set_result(told)
        await settle()
        assert a.heard[-1].play_at == wall.t + 0.6
        assert hub.claims_refused == n and hub.claims_failed == 0
        hub.ended(a, a.heard[-1].id, 2000.0)
        wall.t += 5.0
    # The next one's floor is the end of what was heard, not what the bus said.
    await hub.publish(draft("three"))
    await settle()
    assert bus.answer is not None
    bus.answer.set_result(wall.t + 0.9)  # another instance's, with a longer lead: taken
    await settle()
    assert a.heard[-1].play_at == wall.t + 0.9 and hub.claims_refused == 2
    await hub.stop()


async def test_a_claim_in_the_past_is_taken_when_another_instance_began_it_first() -> None:
    """An instance whose channel was busy begins an announcement after another instance
    played it: the agreed time has passed and its kiosks join at position (protocol.md)."""
    wall = Wall()
    hub, bus = await shared_hub(wall, fixed=0.6)
    a = Member(hub)
    hub.join(a, "lobby", None)
    await hub.publish(draft("long one"))
    await settle()
    assert bus.answer is not None
    bus.answer.set_result(wall.t + 0.6)
    await settle()
    await hub.publish(draft("after it"))  # arrives now, begins once the long one is sent
    await settle()
    arrived = wall.t
    wall.t += 40.0
    hub.ended(a, a.heard[0].id, 30_000.0)
    await settle()
    bus.answer.set_result(arrived + 1.0)  # the other instance began it as it arrived
    await settle()
    assert a.heard[1].play_at == arrived + 1.0 and hub.claims_refused == 0
    await hub.stop()


async def test_a_member_that_leaves_mid_claim_is_not_handed_it_nor_holds_it() -> None:
    wall = Wall()
    hub, bus = await shared_hub(wall)
    a, b = Member(hub), Member(hub)
    hub.join(a, "lobby", None), hub.join(b, "lobby", None)
    await hub.publish(draft("one"))
    await settle()
    hub.leave(b, "lobby")
    assert bus.answer is not None
    bus.answer.set_result(wall.t + 1.0)
    await settle()
    assert len(a.heard) == 1 and b.heard == []
    assert hub.jobs.holds == {"lobby#1": 1}  # type: ignore[attr-defined]
    hub.leave(a, "lobby")  # the last one leaves while it plays: the channel is let go
    assert hub.jobs.holds == {"lobby#1": 0}  # type: ignore[attr-defined]
    await hub.stop()


async def test_a_high_one_that_cuts_a_normal_one_mid_claim_leaves_no_hold_behind() -> None:
    wall = Wall()
    hub, bus = await shared_hub(wall)
    a = Member(hub)
    hub.join(a, "lobby", None)
    await hub.publish(draft("normal"))
    await settle()
    first = bus.answer
    await hub.publish(draft("fire", priority="high"))
    await settle()
    assert first is not None and bus.answer is not first and len(bus.claims) == 2
    assert bus.claims[1][3] == 0.0  # a high one has no floor: it cuts
    bus.answer.set_result(wall.t + 1.0)
    first.set_result(wall.t + 1.0)  # the normal one's answer comes late: it was cut before it began
    await settle()
    assert [x.text for x in a.heard] == ["fire"]
    assert hub.jobs.holds == {"lobby#1": 0, "lobby#2": 1}  # type: ignore[attr-defined]
    await hub.stop()


async def test_how_late_audio_came_sets_the_next_lead() -> None:
    wall = Wall()
    hub = Channels(LocalBus(wall), FakeJobs(), queue_limit=3, clock=wall)  # type: ignore[arg-type]
    await hub.start()
    a = Member(hub)
    hub.join(a, "lobby", None)
    await hub.publish(draft("one"))
    await settle()
    assert a.heard[0].play_at == wall.t + 1.0
    wall.t += 0.3  # first audio: 0.3 s after it began
    hub.audio(a.heard[0].id, 0.5)
    wall.t += 0.6  # the next half second came 0.4 s after the first ran out
    hub.audio(a.heard[0].id, 0.5)
    hub.audio("lobby#9", 5.0)  # not playing: not counted
    a.end(a.heard[0])
    assert hub.lead.lags == [pytest.approx(0.4)]
    assert hub.lead.lead() == pytest.approx(0.4 * 1.5 + 0.35)
    await hub.publish(draft("two"))
    await settle()
    assert a.heard[1].play_at == pytest.approx(wall.t + 0.95)
    await hub.stop()


async def test_a_publisher_may_say_when_it_is_heard() -> None:
    """``publish.play_at``: it begins one lead before (and no sooner), and is heard then."""
    from rtts.broadcast.timeline import LeadEstimator

    hub = Channels(LocalBus(), FakeJobs(), queue_limit=3, lead=LeadEstimator(0.3, 2.0, fixed=0.3))  # type: ignore[arg-type]
    await hub.start()
    a = Member(hub)
    hub.join(a, "lobby", None)
    at = hub._clock() + 0.9  # after "now" (0.3 s ahead, 0.1 s long, 0.25 s of gap)
    await hub.publish(replace(draft("at nine"), wanted_at=at))
    await hub.publish(draft("now"))
    await settle()
    assert [x.text for x in a.heard] == ["now"]  # not yet begun: it is due one lead (and 0.1 s) before, at 0.5 s
    hub.ended(a, a.heard[0].id, 100.0)
    await asyncio.sleep(0.4)
    assert [x.text for x in a.heard] == ["now"]
    await asyncio.sleep(0.25)
    assert [x.text for x in a.heard] == ["now", "at nine"] and a.heard[1].play_at == at
    with pytest.raises(ProtocolError) as refused:
        await hub.publish(replace(draft("never"), wanted_at=hub._clock() * 1000))
    assert refused.value.code == "bad_message"
    await hub.stop()


def test_a_publishers_play_at_crosses_the_bus_and_old_messages_still_decode() -> None:
    at = time.time() + 30
    ann = decode(b"4\n" + replace(draft("Hi."), wanted_at=at).to_json(time.time()).encode())
    assert ann.wanted_at == at
    assert "wanted_at" not in draft("Hi.").to_json(time.time())  # unset: what an older instance reads
    assert decode(wire(5)).wanted_at is None
    for bad in (wire(wanted_at="soon"), wire(wanted_at=time.time() * 1000)):
        with pytest.raises(ProtocolError):
            decode(bad)


def test_a_publishers_generator_crosses_the_bus_checked() -> None:
    # Issue 31: publish.generator names Kokoro's generator for the announcement, the same
    # for every subscriber on every instance (tests/unit/test_session.py: their jobs); a
    # bus message is checked as a publish is.
    ann = decode(b"4\n" + replace(draft("Hi."), generator="teacher").to_json(time.time()).encode())
    assert ann.generator == "teacher"
    assert "generator" not in draft("Hi.").to_json(time.time())  # unset: what an older instance reads
    assert decode(wire(5)).generator is None
    for bad in (wire(generator="fast"), wire(generator=1)):
        with pytest.raises(ProtocolError):
            decode(bad)


async def test_a_model_that_must_load_first_is_waited_for_on_top_of_the_lead() -> None:
    """Kokoro unloaded after an idle hour takes seconds to load: every kiosk would join the
    announcement that far in. The load is added to the lead, and not learnt as lag."""
    wall = Wall()
    loads = {"kokoro/zf_xiaobei": 2.5}
    hub = Channels(LocalBus(wall), FakeJobs(), queue_limit=3, clock=wall,  # type: ignore[arg-type]
                   model_wait=lambda voice: loads.get(voice, 0.0))
    await hub.start()
    a = Member(hub)
    hub.join(a, "lobby", None)
    await hub.publish(draft("一", voice="kokoro/zf_xiaobei"))
    await settle()
    assert a.heard[0].play_at == wall.t + 2.5 + 1.0  # beyond sync_max_lead (2 s): the lead alone is bounded
    wall.t += 2.5 + 0.3  # loaded, then its first audio
    hub.audio(a.heard[0].id, 0.5)
    a.end(a.heard[0])
    assert hub.lead.lags == [pytest.approx(0.3)]
    wall.t += 60
    await hub.publish(draft("二", voice="piper/en_US-joe-medium"))
    await settle()
    assert a.heard[1].play_at == pytest.approx(wall.t + 0.3 * 1.5 + 0.35)  # loaded: the lead only
    await hub.stop()


async def test_the_one_synthesis_tells_how_much_audio_came_once_for_every_subscriber() -> None:
    import numpy as np

    from rtts.broadcast.shared_jobs import SharedJobs
    from rtts.engines.base import VoiceInfo
    from rtts.synthesis.jobs import Job, JobAudio, JobDone

    class Worker:
        def __init__(self) -> None:
            self.jobs: list[Job] = []

        def submit(self, job: Job) -> None:
            self.jobs.append(job)

        def drop(self, job: Job) -> None:
            job.cancelled = True

    voice = VoiceInfo("piper/a", "A", ("en",), "piper", 22050, "piper/a")
    worker = Worker()
    jobs = SharedJobs(worker)  # type: ignore[arg-type]
    told: list[tuple[str, float]] = []
    jobs.on_audio = lambda ann, seconds: told.append((ann, seconds))
    jobs.hold("lobby#1"), jobs.hold("lobby#1")
    got: list[object] = []
    for _ in range(2):  # two subscribers' sessions make the same job
        job = Job("lobby#1", "Hi.", voice, "en", 1.0, 0.0)
        job.shared, job.sink = ("lobby#1", 0), lambda j, event: got.append(event)
        jobs.submit(job)
    assert len(worker.jobs) == 1
    run = worker.jobs[0]
    assert run.sink is not None
    assert run.shared == ("lobby#1", 0)  # the worker makes it the same way on every instance
    run.sink(run, JobAudio(np.zeros(11025, dtype=np.float32)))
    await settle()
    run.sink(run, JobDone(0.1))
    assert told == [("lobby#1", 0.5)] and len(got) == 4  # each subscriber got both events
