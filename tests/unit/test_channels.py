"""Channel scheduling without a server: the real hub and in-process bus, members that
record what they are handed (the same behaviour is tested end to end with a real voice
in test_channels_live.py and across instances in test_channels_scaleout.py)."""

from __future__ import annotations

import asyncio

import pytest

from rtts import protocol
from rtts.announcements import Announcement, Draft
from rtts.bus import LocalBus
from rtts.channels import Channels
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


def draft(text: str, priority: str = "normal", not_before: float | None = None, channel: str = "lobby") -> Draft:
    return Draft(channel, text, "piper/en_US-joe-medium", None, 1.0, priority, not_before)


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
    from rtts.channels import MAX_SUBSCRIPTIONS

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
