"""One text spoken through a session and pulled as audio bytes, at the reader's pace.

For whatever speaks a whole text outside a WebSocket: HTTP routes (``/tts``, and any
other route that streams speech) and ``rtts say``. It is a session like a WebSocket
client's, so the same scheduling, limits and errors apply, with the same backpressure:
while ``limit`` bytes wait for the reader, the session's next job is held back.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from . import protocol
from .jobs import Job
from .protocol import ProtocolError

if TYPE_CHECKING:
    from .service import Service


class SpeechStream:
    """``await start(...)`` (raises ``ProtocolError`` for a refused text), then ``async for``
    over the audio in the session format, then ``close()`` (always; it cancels what is left)."""

    def __init__(self, service: Service, *, sample_rate: int | None, format: str, limit: int = 262144) -> None:
        self._service = service
        self._limit = limit
        self._session = service.new_session(authorized=True)
        self._chunks: deque[bytes] = deque()
        self._bytes = 0
        self._held: list[Job] = []
        self._wake = asyncio.Event()
        self._started: asyncio.Future[protocol.Start] = asyncio.get_running_loop().create_future()
        self.end: protocol.End | None = None
        self._error: ProtocolError | None = None
        self._closed = False
        service.acquire()
        hello = protocol.Hello(sample_rate=sample_rate, format=format, frame_ms=200)
        self._apply(self._session.receive(protocol.encode(hello)))
        if self._error is not None:
            self._started.exception()  # retrieved: it is raised here instead
            self.close()
            raise self._error

    @property
    def sample_rate(self) -> int:
        return self._session.out.sample_rate

    async def start(
        self, text: str, voice: str | None = None, lang: str | None = None, speed: float | None = None
    ) -> protocol.Start:
        """Ask for ``text``; returns ``start`` once synthesis begins, or raises what ``error`` says."""
        speak = protocol.Speak(id="u", text=text, voice=voice, lang=lang, speed=speed)
        self._apply(self._session.receive(protocol.encode(speak)))
        return await self._started

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            while not self._chunks and self.end is None and self._error is None:
                self._wake.clear()
                await self._wake.wait()
            if self._chunks:
                data = b"".join(self._chunks)
                self._chunks.clear()
                self._bytes = 0
                held, self._held = self._held, []
                for job in held:
                    if not job.cancelled:
                        self._service.worker.submit(job)
                yield data
            elif self._error is not None:
                raise self._error
            else:
                return

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._apply(self._session.close())
        self._held.clear()
        self._service.release()

    # ------------------------------------------------------------ the session's effects

    def _apply(self, effects: list) -> None:  # type: ignore[type-arg]
        self._service.apply(self._session, effects, self._send, self._close, self._submit)

    def _send(self, message: protocol.ServerMessage) -> None:
        if isinstance(message, protocol.Audio):
            self._chunks.append(message.data)
            self._bytes += len(message.data)
        elif isinstance(message, protocol.Start):
            if not self._started.done():
                self._started.set_result(message)
        elif isinstance(message, protocol.End):
            self.end = message
        elif isinstance(message, protocol.Error):
            self._error = ProtocolError(protocol.ErrorCode(message.code), message.message)
            if not self._started.done():
                self._started.set_exception(self._error)
        self._wake.set()

    def _close(self, code: int, reason: str) -> None:
        pass  # nothing to close: the caller ends its response when the stream ends

    def _submit(self, job: Job) -> None:
        if self._bytes >= self._limit:
            self._held.append(job)  # the reader is behind: synthesis waits for it
        else:
            self._service.worker.submit(job)
