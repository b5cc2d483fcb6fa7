"""What waits to be sent to one client: bounded, with backpressure and a stall limit.

Messages are produced on the event loop by callbacks from the inference thread, which
must never block, so ``put`` always succeeds. The bound is kept one level up: once
``bytes`` reaches ``limit`` the outbox is ``full`` and the connection stops feeding the
inference thread (it holds the session's next job) and stops reading the client's
frames, until the sender has drained it to half the limit. So the buffer stays
within ``limit`` plus the audio of the one unit that was already being synthesized.

A client that accepts no data for ``stall_s`` seconds while something waits for it is
stalled: ``run`` raises ``Stalled`` and the connection is dropped. Other clients are
not affected: each connection has its own outbox and sender task, which yields to the
loop between messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol


class Stalled(Exception):
    """The client accepted nothing for ``stall_s`` seconds."""


class _Sink(Protocol):
    async def send(self, message: bytes) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...


class Outbox:
    def __init__(self, limit: int, stall_s: float, on_room: Callable[[], None] = lambda: None) -> None:
        self.limit = limit
        self.stall_s = stall_s
        self._on_room = on_room
        self._items: deque[bytes | tuple[int, str]] = deque()
        self._ahead = 0  # items at the head put there with ``front``, in the order they came
        self.bytes = 0  # queued here, not yet handed to the connection
        self.peak = 0
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.closing = False  # a close is queued: nothing more is sent or read
        self.done = False  # the sender ended (closed, stalled or connection lost)
        self.last_sent = time.monotonic()  # when the client last took a message (liveness)

    @property
    def full(self) -> bool:
        return self.bytes >= self.limit

    def put(self, data: bytes, front: bool = False) -> None:
        """Queue ``data`` last, or with ``front`` ahead of everything queued that was not
        itself put in front (a pong: its time is measured, and must not wait behind
        256 KiB of audio); those put in front keep their order."""
        if self.closing or self.done:
            return
        if front:
            self._items.insert(self._ahead, data)
            self._ahead += 1
        else:
            self._items.append(data)
        self.bytes += len(data)
        self.peak = max(self.peak, self.bytes)
        if self.full:
            self._room.clear()
        self._wake.set()

    def close(self, code: int, reason: str, *, now: bool = False) -> None:
        """Queue a close after what is queued, or ``now``: instead of it (shutdown)."""
        if self.closing or self.done:
            return
        self.closing = True
        if now:
            self._items.clear()
            self._ahead = 0
            self.bytes = 0
        self._items.append((code, reason))
        self._wake.set()

    async def room(self) -> None:
        """Return once the outbox has drained below half its limit, or the sender ended."""
        await self._room.wait()

    async def run(self, sink: _Sink) -> None:
        """The sender: until a close is sent. Raises ``Stalled`` or the sink's errors."""
        try:
            while True:
                while not self._items:
                    self._wake.clear()
                    await self._wake.wait()
                item = self._items.popleft()
                self._ahead = max(0, self._ahead - 1)
                if isinstance(item, tuple):
                    await sink.close(*item)
                    return
                try:
                    # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a
                    # cancellation that lands as the send completes, and the sender then
                    # blocks forever on a reader that is gone (an HTTP body closed early).
                    async with asyncio.timeout(self.stall_s):
                        await sink.send(item)
                except TimeoutError:
                    raise Stalled(f"accepted no data for {self.stall_s:g} s") from None
                self.bytes -= len(item)
                self.last_sent = time.monotonic()
                if not self._room.is_set() and self.bytes <= self.limit // 2:
                    self._room.set()
                    self._on_room()
                # A send that fits the socket's buffers returns without suspending: yield
                # between messages, so that thousands of small ones queued for one client
                # (pongs for a ping flood) are not all sent in one turn of the loop.
                await asyncio.sleep(0)
        finally:
            self.done = True
            self._room.set()  # wake a reader waiting for room: there will be none


def cap_kernel_send_buffer(transport: asyncio.BaseTransport, size: int) -> None:
    """Cap the kernel's send buffer of a client's socket too, whatever its protocol: on
    its own Linux grows it to megabytes for a client that does not read (~4 MB, 80 s of
    audio), which would hide a stall from the outbox and hold that memory."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
