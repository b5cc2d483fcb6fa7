"""The per-connection outbox on its own: byte bound, room hysteresis, stall, close."""

from __future__ import annotations

import asyncio

import pytest

from rtts.serve.outbox import Outbox, Stalled


class Pipe:
    """A sink that takes messages only while its gate is open, like a client's TCP window."""

    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.closed: tuple[int, str] | None = None
        self.gate = asyncio.Event()
        self.gate.set()

    async def send(self, message: bytes) -> None:
        await self.gate.wait()
        self.got.append(message)

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


async def test_full_at_the_limit_and_room_again_at_half():
    rooms = []
    box = Outbox(limit=1000, stall_s=5, on_room=lambda: rooms.append(box.bytes))
    pipe = Pipe()
    pipe.gate.clear()
    sender = asyncio.create_task(box.run(pipe))
    for _ in range(10):
        box.put(b"x" * 100)
    assert box.full and box.bytes == 1000
    waiting = asyncio.create_task(box.room())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    pipe.gate.set()
    await asyncio.wait_for(waiting, 1)
    assert rooms and rooms[0] <= 500
    box.close(1000, "bye")
    await asyncio.wait_for(sender, 1)
    assert len(pipe.got) == 10 and pipe.closed == (1000, "bye") and box.peak == 1000


async def test_a_client_that_takes_nothing_is_stalled():
    box = Outbox(limit=1000, stall_s=0.2)
    pipe = Pipe()
    pipe.gate.clear()
    sender = asyncio.create_task(box.run(pipe))
    box.put(b"a")
    waiting = asyncio.create_task(box.room())
    with pytest.raises(Stalled):
        await asyncio.wait_for(sender, 2)
    assert box.done
    await asyncio.wait_for(waiting, 1)  # a reader waiting for room is let go
    box.put(b"more")  # ignored once the sender is gone
    assert box.bytes == 1


async def test_close_now_skips_what_is_queued():
    box = Outbox(limit=10_000, stall_s=5)
    pipe = Pipe()
    pipe.gate.clear()
    sender = asyncio.create_task(box.run(pipe))
    for _ in range(5):
        box.put(b"audio")
    box.close(1001, "server shutting down", now=True)
    box.put(b"late")
    pipe.gate.set()
    await asyncio.wait_for(sender, 1)
    assert pipe.closed == (1001, "server shutting down")
    assert len(pipe.got) <= 1  # at most the message already being sent


async def test_what_is_put_in_front_goes_ahead_of_the_queue_in_its_own_order():
    """A pong times the client's clock: it must not wait behind 256 KiB of audio."""
    box = Outbox(limit=1000, stall_s=5)
    pipe = Pipe()
    pipe.gate.clear()
    sender = asyncio.create_task(box.run(pipe))
    box.put(b"audio1")
    await asyncio.sleep(0.01)  # the sender holds audio1, waiting for the client
    box.put(b"audio2")
    box.put(b"audio3")
    box.put(b"pong1", front=True)
    box.put(b"pong2", front=True)
    assert box.bytes == len(b"audio1audio2audio3pong1pong2")
    pipe.gate.set()
    await asyncio.sleep(0.01)
    box.put(b"audio4")
    box.put(b"pong3", front=True)
    box.close(1000, "bye")
    box.put(b"late", front=True)  # nothing goes ahead of a queued close, nor after it
    await asyncio.wait_for(sender, 1)
    assert pipe.got == [b"audio1", b"pong1", b"pong2", b"audio2", b"audio3", b"pong3", b"audio4"]
    assert box.bytes == 0
