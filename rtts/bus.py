"""How an announcement reaches every instance: Redis pub/sub, or this process alone.

A bus numbers each announcement of a channel (1, 2, 3…) and hands it to every
instance, the publisher included, in that order. ``LocalBus`` does this in process;
``RedisBus`` (``--bus redis://…``) with one Lua script that increments the channel's
counter and publishes in one atomic step, so the numbers and the order in which every
instance receives announcements agree. Redis pub/sub is at most once: an instance
that is not connected when an announcement is published never gets it (its kiosks learn
how many they missed from the counter, ``last_seq``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from .announcements import Announcement, Draft

log = logging.getLogger(__name__)

__all__ = ["Bus", "BusDown", "LocalBus", "RedisBus", "make_bus"]

Deliver = Callable[[Announcement], None]
Resync = Callable[[], None]


class BusDown(Exception):
    """The bus cannot take an announcement now."""


class Bus(Protocol):
    async def start(self, deliver: Deliver, resync: Resync) -> None:
        """From now on, call ``deliver`` on the event loop with every announcement published,
        and ``resync`` after a gap in which announcements may have been missed."""

    async def publish(self, draft: Draft) -> Announcement:
        """Number ``draft`` and send it to every instance; raises ``BusDown``."""

    async def last_seq(self, channel: str) -> int:
        """The number of the channel's latest announcement (0: none yet)."""

    async def stop(self) -> None: ...


class LocalBus:
    """One instance: numbers kept in memory, delivered on the next loop turn."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._seq: dict[str, int] = {}
        self._deliver: Deliver | None = None

    async def start(self, deliver: Deliver, resync: Resync) -> None:
        self._deliver = deliver  # in process there are no gaps

    async def publish(self, draft: Draft) -> Announcement:
        if self._deliver is None:
            raise BusDown("the bus is not started")
        seq = self._seq[draft.channel] = self._seq.get(draft.channel, 0) + 1
        ann = draft.numbered(seq, self._clock())
        asyncio.get_running_loop().call_soon(self._deliver, ann)
        return ann

    async def last_seq(self, channel: str) -> int:
        return self._seq.get(channel, 0)

    async def stop(self) -> None:
        self._deliver = None


# KEYS[1]: the channel's counter; ARGV[1]: the pub/sub channel; ARGV[2]: the draft (JSON).
# The message is "<seq>\n<draft>".
_PUBLISH = """
local seq = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[1], seq .. '\\n' .. ARGV[2])
return seq
"""
PREFIX = "rtts:"
_TOPIC = PREFIX + "announce"
_RETRY_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class RedisBus:
    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        import redis.asyncio as redis  # only with --bus: an optional dependency

        self._errors = (redis.RedisError, OSError)
        self._redis = redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
        self._script = self._redis.register_script(_PUBLISH)
        self._clock = clock
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    async def start(self, deliver: Deliver, resync: Resync) -> None:
        self._listener = asyncio.create_task(self._listen(deliver, resync), name="rtts-bus")
        # Listening before serving: an announcement published right after start is not lost.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), 5)
        if not self._subscribed.is_set():
            log.warning("bus: Redis is not reachable yet; channels work on this instance once it is")

    async def _listen(self, deliver: Deliver, resync: Resync) -> None:
        failures = 0
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(_TOPIC)
                if failures:
                    log.info("bus: connected to Redis again")
                    resync()
                failures = 0
                self._subscribed.set()
                while True:
                    message = await pubsub.get_message(timeout=5.0)
                    if message is None or message.get("type") != "message":
                        continue
                    seq, _, body = message["data"].decode().partition("\n")
                    try:
                        ann = Announcement.from_json(int(seq), body)
                    except (ValueError, TypeError, KeyError) as exc:
                        log.warning("bus: unreadable announcement dropped (%s)", exc)
                        continue
                    deliver(ann)
            except self._errors as exc:
                self._subscribed.clear()
                delay = _RETRY_S[min(failures, len(_RETRY_S) - 1)]
                failures += 1
                if failures == 1:
                    log.warning("bus: lost Redis (%s); announcements published meanwhile are missed here", exc)
                await asyncio.sleep(delay)
            finally:
                with contextlib.suppress(*self._errors):
                    await pubsub.aclose()

    async def publish(self, draft: Draft) -> Announcement:
        key = f"{PREFIX}seq:{draft.channel}"
        published = self._clock()
        try:
            seq = int(await self._script(keys=[key], args=[_TOPIC, draft.to_json(published)]))
        except self._errors as exc:
            raise BusDown(f"Redis: {exc}") from None
        return draft.numbered(seq, published)

    async def last_seq(self, channel: str) -> int:
        try:
            value = await self._redis.get(f"{PREFIX}seq:{channel}")
        except self._errors as exc:
            raise BusDown(f"Redis: {exc}") from None
        return int(value or 0)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        with contextlib.suppress(*self._errors):
            await self._redis.aclose()


def make_bus(url: str | None) -> Bus:
    return RedisBus(url) if url else LocalBus()
