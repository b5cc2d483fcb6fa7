"""How an announcement reaches every instance: Redis pub/sub, or this process alone.

A bus numbers each announcement of a channel (1, 2, 3…) and hands it to every
instance, the publisher included, in that order. ``LocalBus`` does this in process;
``RedisBus`` (``--bus redis://…``) with one Lua script that increments the channel's
counter and publishes in one atomic step, so the numbers and the order in which every
instance receives announcements agree. Redis pub/sub is at most once: an instance
that is not connected when an announcement is published never gets it (its kiosks learn
how many they missed from the counter, ``last_seq``).

Whatever arrives from Redis is untrusted (anyone who may ``PUBLISH`` there can send
anything): each message is checked by ``announcements.decode``, with the WebSocket's own
``publish`` checks, and one that fails is dropped, logged and counted (``dropped``). The
listener never ends on its own: a lost connection or any unexpected failure is logged,
counted (``errors``) and retried, and ``state`` says whether it is listening
(``/readyz``, ``rtts_bus_up``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from rtts.broadcast import announcements, timeline
from rtts.broadcast.announcements import Announcement, Draft
from rtts.protocol import ErrorCode, ProtocolError

log = logging.getLogger(__name__)

__all__ = ["Bus", "BusDown", "LocalBus", "RedisBus", "make_bus"]

Deliver = Callable[[Announcement], None]
Resync = Callable[[], None]


class BusDown(Exception):
    """The bus cannot take an announcement now."""


class Bus(Protocol):
    state: str  # "local", "listening", "connecting" (to Redis, or again), "stopped"
    dropped: int  # messages from the bus refused as unreadable
    errors: int  # failures of the listener (each one logged, then retried)
    # Other instances hear it too: an announcement's play_at must be agreed on (claim_play_at).
    shared: bool

    async def start(self, deliver: Deliver, resync: Resync) -> None:
        """From now on, call ``deliver`` on the event loop with every announcement published,
        and ``resync`` after a gap in which announcements may have been missed."""

    async def publish(self, draft: Draft) -> Announcement:
        """Number ``draft`` and send it to every instance; raises ``BusDown``."""

    async def last_seq(self, channel: str) -> int:
        """The number of the channel's latest announcement (0: none yet)."""

    async def server_time(self) -> float:
        """The clock every instance of this bus can read (Unix seconds; ``clock.BusClock``);
        raises ``BusDown``."""

    async def claim_play_at(self, key: str, now: float, lead: float, floor: float, *, max_lead: float) -> float:
        """The ``play_at`` of the announcement ``key`` names (its id and publish time): the
        one the first instance to begin it fixed, or, being first, ``timeline.propose`` with
        the largest recent ``lead`` of any instance (at most ``max_lead``); raises ``BusDown``."""

    async def share_lead(self, lead: float | None, now: float) -> None:
        """Tell the other instances this instance's lead while it has subscribers (None:
        it has none now), so that ``claim_play_at`` covers it whoever begins an
        announcement first; raises ``BusDown``."""

    async def stop(self) -> None: ...


class LocalBus:
    """One instance: numbers kept in memory, delivered on the next loop turn."""

    state = "local"
    dropped = 0
    errors = 0
    shared = False

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

    async def server_time(self) -> float:
        return self._clock()

    async def claim_play_at(self, key: str, now: float, lead: float, floor: float, *, max_lead: float) -> float:
        return timeline.propose(now, min(lead, max_lead), floor)  # nobody else to agree with

    async def share_lead(self, lead: float | None, now: float) -> None:
        pass  # nobody else to tell

    async def stop(self) -> None:
        self._deliver = None


# KEYS[1]: the channel's counter; ARGV[1]: the pub/sub channel; ARGV[2]: the draft (JSON).
# The message is "<seq>\n<draft>".
_PUBLISH = """
local seq = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[1], seq .. '\\n' .. ARGV[2])
return seq
"""
# KEYS[1]: the announcement's play_at; KEYS[2]: every instance's lead, "<lead>:<when>"
# (two fields an instance: its last claim's, and its subscribers', ``share_lead``);
# ARGV: this instance, its lead, now, the floor, the largest lead allowed. The first
# claim fixes play_at for every instance, covering the slowest instance's recent lead;
# the others get that value. Leads older than LEAD_TTL_S (an instance gone) are dropped.
# Returned as text: Redis turns a Lua number into an integer.
_CLAIM = """
local lead, now, floor, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[7])
local fixed = redis.call('GET', KEYS[1])
if fixed then return fixed end
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  local other, at = string.match(all[i + 1], '^([^:]+):(.+)$')
  other, at = tonumber(other), tonumber(at)
  if other and at and now - at < tonumber(ARGV[6]) then
    if other > lead then lead = other end
  else
    redis.call('HDEL', KEYS[2], all[i])
  end
end
if lead > cap then lead = cap end
local play = string.format('%.6f', math.max(now + lead, floor))
redis.call('SET', KEYS[1], play, 'EX', ARGV[7])
return play
"""
LEAD_TTL_S = 600  # an instance's lead counts this long after its last claim or share
# A claimed play_at is kept this long: every instance begins an announcement within minutes
# of the first (a channel waits at most HOLD_S for each before it).
PLAY_TTL_S = 3600
PREFIX = "rtts:"
_TOPIC = PREFIX + "announce"
_RETRY_S = (0.2, 0.5, 1.0, 2.0, 5.0)
# Redis connections one instance may open: the subscription's and the rest for publish
# and last_seq. While Redis hangs, a flood of subscribes waits for one of these (at most
# _POOL_WAIT_S, then BusDown) instead of opening a socket each (issue 20, bug 17).
MAX_CONNECTIONS = 8
_POOL_WAIT_S = 2.0
# At most one warning a second about dropped messages: a flood of garbage is counted,
# not written to the log line by line.
_WARN_EVERY_S = 1.0


class RedisBus:
    shared = True

    def __init__(self, url: str, max_text_chars: int, clock: Callable[[], float] = time.time) -> None:
        import redis.asyncio as redis  # only with --bus: an optional dependency

        self._errors = (redis.RedisError, OSError)
        pool = redis.BlockingConnectionPool.from_url(
            url, max_connections=MAX_CONNECTIONS, timeout=_POOL_WAIT_S, socket_connect_timeout=2, socket_timeout=5
        )
        self._redis = redis.Redis.from_pool(pool)
        self._script = self._redis.register_script(_PUBLISH)
        self._claim = self._redis.register_script(_CLAIM)
        self.instance = uuid.uuid4().hex  # whose lead is whose, in rtts:lead
        self._max_text_chars = max_text_chars
        self._clock = clock
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._stopping = False
        # One GET per channel in flight, shared by every subscribe that asks meanwhile.
        self._seq_lookups: dict[str, asyncio.Future[int]] = {}
        self._warned_at = -_WARN_EVERY_S
        self.dropped = 0
        self.errors = 0

    @property
    def state(self) -> str:
        if self._stopping:
            return "stopped"
        if self._listener is None or self._listener.done():
            return "down"  # never started, or ended (it does not: see _listen_forever)
        return "listening" if self._subscribed.is_set() else "connecting"

    async def start(self, deliver: Deliver, resync: Resync) -> None:
        self._listener = asyncio.create_task(self._listen_forever(deliver, resync), name="rtts-bus")
        # Listening before serving: an announcement published right after start is not lost.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), 5)
        if not self._subscribed.is_set():
            log.warning("bus: Redis is not reachable yet; channels work on this instance once it is")

    async def _listen_forever(self, deliver: Deliver, resync: Resync) -> None:
        failures = 0
        while True:
            try:
                await self._listen(deliver, resync, again=failures > 0)
            except self._errors as exc:
                if failures == 0 or self._subscribed.is_set():
                    log.warning("bus: lost Redis (%s); announcements published meanwhile are missed here", exc)
            except Exception:  # a bug: logged and counted, and the listener carries on
                self.errors += 1
                log.exception("bus: the Redis listener failed; listening again")
            if self._subscribed.is_set():
                failures = 0  # it was listening: the back-off starts over
            self._subscribed.clear()
            await asyncio.sleep(_RETRY_S[min(failures, len(_RETRY_S) - 1)])
            failures += 1

    async def _listen(self, deliver: Deliver, resync: Resync, *, again: bool) -> None:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(_TOPIC)
            if again:
                log.info("bus: connected to Redis again")
                resync()
            self._subscribed.set()
            while True:
                message = await pubsub.get_message(timeout=5.0)
                if message is not None and message.get("type") == "message":
                    self._take(message.get("data"), deliver)
                    # get_message returns what is already buffered without suspending: a
                    # burst of 500,000 PUBLISHes held the loop for 100-170 ms at a time.
                    await asyncio.sleep(0)
        finally:
            with contextlib.suppress(*self._errors):
                await pubsub.aclose()

    def _take(self, data: object, deliver: Deliver) -> None:
        try:
            if not isinstance(data, bytes):
                raise ProtocolError(ErrorCode.BAD_MESSAGE, f"{type(data).__name__}, not bytes")
            ann = announcements.decode(data, now=self._clock(), max_text_chars=self._max_text_chars)
        except ProtocolError as exc:
            self.dropped += 1
            now = time.monotonic()
            if now - self._warned_at >= _WARN_EVERY_S:
                self._warned_at = now
                log.warning("bus: message on %s dropped (%s: %s); %d dropped so far",
                            _TOPIC, exc.code.value, exc.message[:200], self.dropped)
            return
        try:
            deliver(ann)
        except Exception:  # a bug in the channels: this announcement is lost, not the listener
            self.errors += 1
            log.exception("bus: %s could not be delivered", ann.id)

    async def publish(self, draft: Draft) -> Announcement:
        key = f"{PREFIX}seq:{draft.channel}"
        published = self._clock()
        try:
            seq = int(await self._script(keys=[key], args=[_TOPIC, draft.to_json(published)]))
        except self._errors as exc:
            raise BusDown(f"Redis: {exc}") from None
        return draft.numbered(seq, published)

    async def last_seq(self, channel: str) -> int:
        lookup = self._seq_lookups.get(channel)
        if lookup is None:
            lookup = self._seq_lookups[channel] = asyncio.get_running_loop().create_task(self._get_seq(channel))
            lookup.add_done_callback(lambda done: self._lookup_done(channel, done))
        # Shielded: one subscriber going away does not cancel the others' answer.
        return await asyncio.shield(lookup)

    def _lookup_done(self, channel: str, done: asyncio.Future[int]) -> None:
        self._seq_lookups.pop(channel, None)
        if not done.cancelled():
            done.exception()  # retrieved, even when every asker went away meanwhile

    async def _get_seq(self, channel: str) -> int:
        key = f"{PREFIX}seq:{channel}"
        try:
            value = await self._redis.get(key)
        except self._errors as exc:
            raise BusDown(f"Redis: {exc}") from None
        if value is None:
            return 0
        if not (isinstance(value, bytes) and value.isdigit() and len(value) <= 18):
            # Not a number this bus wrote (INCR would refuse it too): said, not raised as ValueError.
            log.warning("bus: %s holds %r, not a number", key, value[:40] if isinstance(value, bytes) else value)
            raise BusDown(f"Redis: {key} holds no number")
        return int(value)

    async def server_time(self) -> float:
        try:
            seconds, micros = await self._redis.time()
        except self._errors as exc:
            raise BusDown(f"Redis: {exc}") from None
        return int(seconds) + int(micros) / 1e6

    async def claim_play_at(self, key: str, now: float, lead: float, floor: float, *, max_lead: float) -> float:
        keys = [f"{PREFIX}play:{key}", f"{PREFIX}lead"]
        args = [self.instance, repr(lead), repr(now), repr(floor), repr(max_lead), LEAD_TTL_S, PLAY_TTL_S]
        try:
            value = await self._claim(keys=keys, args=args)
        except self._errors as exc:
            raise BusDown(f"Redis: {exc}") from None
        # Anyone who can write to this Redis can write there: a number, or not trusted.
        try:
            play_at = float(value)
        except (TypeError, ValueError):
            raise BusDown(f"Redis: {keys[0]} holds {str(value)[:40]!r}, not a time") from None
        if not math.isfinite(play_at):
            raise BusDown(f"Redis: {keys[0]} holds {play_at!r}, not a time")
        return play_at  # how near now it must be is the channel's to say (timeline.claim_bounds)

    async def share_lead(self, lead: float | None, now: float) -> None:
        key, field = f"{PREFIX}lead", f"{self.instance}/subscribers"  # beside its claims' field
        try:
            if lead is None:
                await self._redis.hdel(key, field)
                return
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(key, field, f"{lead!r}:{now!r}")
                pipe.expire(key, LEAD_TTL_S)
                await pipe.execute()
        except self._errors as exc:
            raise BusDown(f"Redis: {exc}") from None

    async def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            self._listener.cancel()
            try:
                await self._listener
            except asyncio.CancelledError:
                pass
            except Exception:  # never re-raised out of shutdown
                log.exception("bus: the Redis listener had failed")
        with contextlib.suppress(*self._errors):
            await self._redis.aclose()


def make_bus(url: str | None, max_text_chars: int) -> Bus:
    """``max_text_chars``: the longest text a message from Redis may carry (``limits.max_text_chars``)."""
    return RedisBus(url, max_text_chars) if url else LocalBus()
