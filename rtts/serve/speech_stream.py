"""One text spoken through a connection of its own and pulled as audio bytes, at the reader's pace.

For whatever speaks a whole text outside a WebSocket: HTTP routes (``/tts``, and any
other route that streams speech) and ``rtts say``. It is a ``Connection`` like a
WebSocket client's, so the same session, scheduling, limits, errors and backpressure
apply: the reader is the outbox's sink, and while it is behind, the outbox fills and
the session's next job is held back; a reader that takes nothing for ``send_stall``
seconds ends the stream.

Asked for (``start(words=...)``), the session's ``words`` messages come too: ``timed``
gives each in its place among the audio, before the first frame it describes, as a
WebSocket client would get it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import numpy as np

from rtts import protocol
from rtts.protocol import ProtocolError
from rtts.serve.connection import Connection

if TYPE_CHECKING:
    from rtts.service import Service

_END = 1000  # the outbox's close after `end`: the stream is over
# The response header of an HTTP route that says which voice reads the start of its text
# (``start.voice``): with no voice named, or an OpenAI name, the text's language chose it.
VOICE_HEADER = "X-Rtts-Voice"


class SpeechStream(Connection):
    """``await start(...)`` (raises ``ProtocolError`` for a refused text), then ``async for``
    over the audio in the session format, then ``close()`` (always; it cancels what is left)."""

    def __init__(self, service: Service, *, sample_rate: int | None, format: str, voices_at: str) -> None:
        """``voices_at``: where the route's client can look the voices up (``GET /voices``…)."""
        super().__init__(service, authorized=True, encode=_audio_only, voices_at=voices_at)
        # Resolved by the first audio (or the end): until then a failure is still a refusal.
        self._started: asyncio.Future[protocol.Start] = asyncio.get_running_loop().create_future()
        self._start: protocol.Start | None = None
        self.end: protocol.End | None = None
        self._error: ProtocolError | None = None
        self._closed = False
        # Each ``words`` message with the number of audio frames queued before it: the
        # outbox carries bytes only, so the reader puts it back in its place by that count.
        self._words: deque[tuple[int, protocol.Words]] = deque()
        self._frames = 0
        service.acquire()
        self.handle(protocol.Hello(sample_rate=sample_rate, format=format, frame_ms=200))
        if self._error is not None:
            self._started.exception()  # retrieved: it is raised here instead
            self.close()
            raise self._error

    @property
    def sample_rate(self) -> int:
        return self.session.out.sample_rate

    async def start(
        self, text: str, voice: str | None = None, lang: str | None = None, speed: float | None = None,
        words: bool | str | None = None, generator: str | None = None,
    ) -> protocol.Start:
        """Ask for ``text``; returns ``start`` once the first audio is ready, or raises what
        ``error`` says. Waiting for the audio, not for ``start`` alone, lets an HTTP route
        answer a failure of the first unit (``memory_budget``, ``engine_unavailable``)
        with its status instead of a 200 whose body breaks off. ``words`` and ``generator``:
        as ``speak``'s."""
        self.handle(protocol.Speak(id="u", text=text, voice=voice, lang=lang, speed=speed, words=words,
                                   generator=generator))
        return await self._started

    async def __aiter__(self) -> AsyncIterator[bytes]:
        # Closed here, not left to the loop's finalizer: its sender is ended at once.
        async with contextlib.aclosing(self.timed()) as items:
            async for item in items:
                if isinstance(item, bytes):
                    yield item

    async def timed(self) -> AsyncIterator[bytes | protocol.Words]:
        """The audio frames, and the ``words`` messages each before the first frame it describes."""
        sink = _QueueSink()
        sender = asyncio.get_running_loop().create_task(self.outbox.run(sink))
        read = 0
        try:
            while (data := await sink.queue.get()) is not None:
                while self._words and self._words[0][0] <= read:
                    yield self._words.popleft()[1]
                read += 1
                yield data
            while self._words:  # words of audio never sent (none, unless the session changes)
                yield self._words.popleft()[1]
            await sender  # raises Stalled if the reader took nothing for too long
        finally:
            sender.cancel()
            # Let the cancellation finish here: a sender left cancelling when the loop
            # stops (a body closed at shutdown) is "destroyed but pending".
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        super().close()
        self.service.release()

    def deliver(self, message: protocol.ServerMessage) -> None:
        super().deliver(message)
        if isinstance(message, protocol.Start):
            self._start = message
        elif isinstance(message, protocol.Words):
            self._words.append((self._frames, message))
        elif isinstance(message, protocol.Audio):
            if message.data:
                self._frames += 1  # one outbox item, as _audio_only made it
            if not self._started.done() and self._start is not None:
                self._started.set_result(self._start)
        elif isinstance(message, protocol.End):
            self.end = message
            if not self._started.done() and self._start is not None and message.reason != "error":
                self._started.set_result(self._start)  # nothing to say (only pauses, or empty)
            self.outbox.close(_END, "")
        elif isinstance(message, protocol.Error):
            self._error = ProtocolError(protocol.ErrorCode(message.code), message.message)
            if not self._started.done():
                self._started.set_exception(self._error)  # refused: nothing more comes
            # After `start`, `end reason:"error"` follows and ends the stream.


def _audio_only(message: protocol.ServerMessage) -> bytes | None:
    return message.data if isinstance(message, protocol.Audio) else None


class _QueueSink:
    """The outbox's sink: hands each frame to the reader, one at a time."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=1)

    async def send(self, data: bytes) -> None:
        await self.queue.put(data)

    async def close(self, code: int, reason: str) -> None:
        await self.queue.put(None)


async def speak(
    service: Service,
    text: str,
    voice: str | None = None,
    lang: str | None = None,
    speed: float | None = None,
    sample_rate: int | None = None,
    words: bool | str | None = None,
) -> tuple[np.ndarray, int, protocol.End, list[dict[str, Any]]]:
    """Speak a whole text through a connection of its own (``rtts say``); returns float32 audio, its
    rate, ``end`` and, asked for with ``words`` (as ``speak.words``), every timed word
    (``protocol.Words`` entries, on the audio's sample clock; else none). Raises
    ``protocol.ProtocolError`` for what a client would get as ``error``.
    """
    stream = SpeechStream(service, sample_rate=sample_rate, format="f32", voices_at="`rtts voices`")
    chunks: list[bytes] = []
    timed: list[dict[str, Any]] = []
    try:
        await stream.start(text, voice, lang, speed, words)
        async with contextlib.aclosing(stream.timed()) as items:
            async for item in items:
                if isinstance(item, bytes):
                    chunks.append(item)
                else:
                    timed += item.words
    finally:
        stream.close()
    assert stream.end is not None
    return np.frombuffer(b"".join(chunks), dtype="<f4"), stream.sample_rate, stream.end, timed
