"""A client of another protocol (Wyoming) driving a ``Session`` the way a WebSocket
connection does, for as long as its own connection lasts.

Same session, same inference thread, same scheduling, limits and admission: the
runner is a ``Connection`` (the one driver every client kind uses) that hands the
session protocol messages made in this process (no encoding), and sends what the
client should get through an ``Outbox`` to a sink (so a client that does not read gets
backpressure, then is dropped after ``send_stall``). The adapter supplies ``encode``,
which turns session messages into its own wire bytes (a Wyoming ``audio-chunk``). The
adapter counts its activity for the idle unload (``service.acquire``/``release``) while
it has a request to serve: an open, idle connection is no activity. (One text spoken for
one HTTP response is ``speech_stream.SpeechStream``.)

Requests go in as protocol messages (``Hello``, ``Speak``, ``Append``, ``Flush``) and
each utterance's ``End`` comes back as a future; an ``error`` about it raises
``protocol.ProtocolError`` from that future instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from rtts import protocol
from rtts.serve.connection import Connection
from rtts.serve.outbox import Stalled, _Sink

if TYPE_CHECKING:
    from rtts.service import Service

log = logging.getLogger(__name__)

Encode = Callable[[protocol.ServerMessage], "bytes | None"]


class SessionRunner(Connection):
    def __init__(
        self, service: Service, sink: _Sink, encode: Encode, *, name: str = "client", voices_at: str = "ready.voices",
    ) -> None:
        super().__init__(service, authorized=True, encode=encode, voices_at=voices_at)
        self.name = name
        self._sink = sink
        self._ends: dict[str, asyncio.Future[protocol.End]] = {}
        self._sender: asyncio.Task[None] | None = None
        self.stalled = False

    # ------------------------------------------------------------ lifetime

    async def __aenter__(self) -> SessionRunner:
        self._sender = asyncio.create_task(self._send(), name=f"send-{self.name}-{self.id}")
        self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.finish()

    async def finish(self, drain_s: float = 5.0) -> None:
        """Give back any work, send what is queued (at most ``drain_s``), then close the sink."""
        if self._sender is None:
            return
        sender, self._sender = self._sender, None
        self.close()
        self._fail_ends(None)
        self.outbox.close(1000, "")
        with contextlib.suppress(asyncio.TimeoutError, Stalled, ConnectionError):
            await asyncio.wait_for(asyncio.shield(sender), drain_s)
        if not sender.done():
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await sender

    async def _send(self) -> None:
        try:
            await self.outbox.run(self._sink)
        except Stalled as exc:
            log.warning("%s %s dropped: %s; its work is cancelled", self.name, self.id, exc)
            self.service.metrics.stalled.inc()
            self.stalled = True
            self.close()
            self._fail_ends(ConnectionError(str(exc)))
            raise
        except ConnectionError:
            self.close()
            self._fail_ends(ConnectionError("the client went away"))

    def _fail_ends(self, exc: BaseException | None) -> None:
        """Every utterance still awaited: cancelled (None) or failed with ``exc``."""
        for end in self._ends.values():
            if not end.done():
                if exc is None:
                    end.cancel()
                else:
                    end.set_exception(exc)

    # ------------------------------------------------------------ requests

    def hello(self, **fields: object) -> None:
        """Session settings (``sample_rate``, ``format``, ``frame_ms``, ``voice``…); raises
        ``ProtocolError`` when the session refuses them."""
        self._request(protocol.Hello(**fields), None)  # type: ignore[arg-type]

    def speak(self, message: protocol.Speak) -> asyncio.Future[protocol.End]:
        return self._request(message, message.id)

    def append(self, message: protocol.Append) -> asyncio.Future[protocol.End]:
        """Text for an utterance built as it arrives; the future is the same for each append."""
        return self._request(message, message.id)

    def flush(self, utt_id: str) -> asyncio.Future[protocol.End]:
        return self._request(protocol.Flush(utt_id), utt_id)

    def cancel(self, utt_id: str | None = None) -> None:
        self.handle(protocol.Cancel(utt_id))

    def write(self, data: bytes) -> None:
        """Adapter bytes (a header, a trailer), in order with the audio."""
        self.outbox.put(data)

    async def room(self) -> None:
        """Wait while the client is behind: an adapter reading more requests should."""
        await self.outbox.room()

    def _request(self, message: protocol.ClientMessage, utt_id: str | None) -> asyncio.Future[protocol.End]:
        loop = asyncio.get_running_loop()
        end = self._ends.get(utt_id) if utt_id is not None else None
        if end is None or end.done():
            end = loop.create_future()
        if utt_id is not None:
            self._ends[utt_id] = end
        effects = self.session.handle(message)
        refused = [
            msg for effect in effects
            if isinstance(msg := getattr(effect, "message", None), protocol.Error) and msg.id == utt_id
        ]
        self.apply(effects)
        if utt_id is None and refused:
            raise protocol.ProtocolError(protocol.ErrorCode(refused[0].code), refused[0].message)
        return end

    # ------------------------------------------------------------ effects

    def deliver(self, message: protocol.ServerMessage) -> None:
        if isinstance(message, protocol.Error):
            # The utterance failed (an ``end`` may follow; nobody waits for it).
            end = self._ends.pop(message.id, None) if message.id is not None else None
            if end is not None and not end.done():
                end.set_exception(protocol.ProtocolError(protocol.ErrorCode(message.code), message.message, message.id))
            return
        super().deliver(message)
        if isinstance(message, protocol.End):
            end = self._ends.pop(message.id, None)
            if end is not None and not end.done():
                end.set_result(message)
