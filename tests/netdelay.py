"""Network delay for tests that need a slow or jittery link between a client and rtts.

``tc netem`` is what one would reach for, but this kernel (and likely CI's) is built
without it (``Specified qdisc kind is unknown``), so the delay is made in user space: a
TCP relay that holds every chunk it reads for a while before passing it on, in each
direction. A chunk read at ``t`` is released at ``max(previous release, t + delay + U)``
with ``U`` uniform in ``[-jitter, +jitter]``: the delay and jitter of netem, without its
reordering (a TCP stream cannot reorder; netem's reordering shows up as retransmits,
which a test does not need). Each kiosk page of a test loads through a proxy of its own,
so its page, its WebSocket and its pings all see its delay.

``netem_available()`` says whether netem works here after all (in a private network
namespace, as the zeroconf test makes one), for a test that would rather use the kernel's.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import threading
from collections.abc import Callable

_CHUNK = 64 * 1024


def netem_available() -> bool:
    """True when a netem qdisc can be added (on the loopback of a namespace of its own,
    so nothing on this machine is touched)."""
    if shutil.which("unshare") is None or shutil.which("tc") is None:
        return False
    try:
        run = subprocess.run(["unshare", "-n", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                              "1ms"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return run.returncode == 0


def release_time(previous: float, read_at: float, delay: float, jitter: float,
                 draw: Callable[[], float]) -> float:
    """When a chunk read at ``read_at`` goes on: its delay, a jitter drawn uniform in
    ±``jitter`` (``draw`` gives [0, 1)), never before the chunk ahead of it."""
    return max(previous, read_at + delay + (2 * draw() - 1) * jitter)


class DelayProxy:
    """A TCP relay from ``127.0.0.1:.port`` to ``127.0.0.1:target_port`` that delays each
    direction by ``delay_ms`` ± ``jitter_ms`` (one way), on an event loop in a thread of
    its own. ``with DelayProxy(port, 50, 20) as p: ... p.port``."""

    def __init__(self, target_port: int, delay_ms: float = 0.0, jitter_ms: float = 0.0, seed: int = 0,
                 host: str = "127.0.0.1") -> None:
        if jitter_ms < 0 or delay_ms < 0:
            raise ValueError("delay and jitter are not negative")
        self.target = (host, target_port)
        self.host = host
        self.delay = delay_ms / 1000
        self.jitter = jitter_ms / 1000
        self._rng = random.Random(seed)  # used on the loop's thread only
        self.port = 0
        self.connections = 0  # accepted so far
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"delay-proxy-{target_port}", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self._server = self.loop.run_until_complete(asyncio.start_server(self._accept, self.host, 0))
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as exc:  # surface it in start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()

    def start(self) -> DelayProxy:
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def close(self) -> None:
        """Stops listening, drops every relayed connection and ends the thread."""
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for w in list(self._writers):
            w.close()
        await self._server.wait_closed()

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            self._writers.discard(writer)
            return
        self._writers.add(up_writer)
        try:
            # Both directions to their ends; one side closing ends the other once what it
            # sent has been delivered (a half-close, as TCP has).
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass  # close(): the task ends quietly (asyncio logs a cancelled connection handler)
        finally:
            for w in (writer, up_writer):
                w.close()
                self._writers.discard(w)
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One direction: a reader that stamps each chunk with its release time, and a
        sender that waits for it; the queue between them is the link's contents."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def read() -> None:
            previous = 0.0
            while True:
                try:
                    data = await reader.read(_CHUNK)
                except (ConnectionError, OSError):
                    data = b""
                previous = release_time(previous, self.loop.time(), self.delay, self.jitter, self._rng.random)
                await queue.put((previous, data))
                if not data:
                    return

        async def send() -> None:
            while True:
                at, data = await queue.get()
                wait = at - self.loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                try:
                    if not data:
                        if writer.can_write_eof():
                            writer.write_eof()
                        return
                    writer.write(data)
                    await writer.drain()
                except (ConnectionError, OSError):
                    return

        reading = asyncio.ensure_future(read())
        try:
            await send()
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
