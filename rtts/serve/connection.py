"""One client's driver: its ``Session``, its ``Outbox`` and its jobs.

The session decides (sans-I/O); a ``Connection`` carries out every effect it returns:
messages go to the outbox (encoded for the client's wire), jobs to the inference
thread (held back while the client is behind, ``outbox.py``), cancellations to the
worker, a close to the outbox. Whatever reaches the session, a WebSocket frame
(``receive``), a message made in this process (``handle``) or an event of the
inference thread, takes the same path back out.

A WebSocket connection (``server.py``), ``rtts say`` and ``/tts`` (``speech_stream.speak``)
all drive one of these; they differ only in where messages are delivered
(``deliver``) and who sends the outbox.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rtts import protocol
from rtts.broadcast.announcements import Announcement
from rtts.serve.outbox import Outbox
from rtts.speech.effects import Close, Drop, Effect, Join, Leave, Post, Send, Submit
from rtts.synthesis.jobs import Job, JobEvent

if TYPE_CHECKING:
    from rtts.service import Service

__all__ = ["Connection"]

Encode = Callable[[protocol.ServerMessage], "bytes | None"]


class Connection:
    def __init__(
        self, service: Service, *, authorized: bool = False, encode: Encode = protocol.encode,
        voices_at: str = "ready.voices",
    ) -> None:
        """``authorized``: the token came in the handshake; ``encode`` turns a message into
        the client's wire bytes (None: nothing to send for it); ``voices_at``: where this
        kind of client can look the voices up (``unknown_voice`` names it)."""
        self.service = service
        self.session = service.new_session(authorized=authorized, voices_at=voices_at)
        self.outbox = Outbox(service.config.send_buffer, service.config.send_stall, self._on_room)
        self._encode = encode
        self._held: list[Job] = []  # the session's next job, while the client is behind
        # Until when a client that plays what it reads at real time may still be playing
        # the audio it was sent (monotonic s): its keepalive pong may wait behind it.
        self.playing_until = 0.0

    @property
    def id(self) -> str:
        return self.session.id

    # ------------------------------------------------------------ inputs

    def open(self) -> None:
        self.apply(self.session.open())

    def receive(self, frame: bytes | str) -> None:
        """A frame from the client."""
        self.apply(self.session.receive(frame))

    def handle(self, message: protocol.ClientMessage) -> None:
        """A request made in this process: no encoding, the same checks."""
        self.apply(self.session.handle(message))

    def announce(self, ann: Announcement) -> None:
        """An announcement of a channel this connection subscribed to (``channels.py``)."""
        self.apply(self.session.announce(ann))

    def tell(self, message: protocol.ServerMessage) -> None:
        """A message from elsewhere in the service (a channel's answer)."""
        self.apply([Send(message)])

    def close(self) -> None:
        """The client went away (or is being let go): give back every job."""
        self.apply(self.session.close())
        self._held.clear()
        self.service.channels.forget(self)

    def shut(self, code: int, reason: str) -> None:
        """Cancel all work and close, ahead of anything still queued (shutdown)."""
        self.close()
        self.outbox.close(code, reason, now=True)

    # ------------------------------------------------------------ effects

    def apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self.service.metrics.observe(effect.message)
                self.deliver(effect.message)
                if isinstance(effect.message, protocol.End) and effect.message.channel is not None:
                    end = effect.message
                    self.service.channels.ended(self, end.id, end.stats.get("audio_ms"))
            elif isinstance(effect, Submit):
                effect.job.sink = self._job_event
                self._submit(effect.job)
            elif isinstance(effect, Drop):
                self.service.worker.drop(effect.job)
            elif isinstance(effect, Close):
                self.outbox.close(effect.code, effect.reason)
            elif isinstance(effect, Join):
                self.service.channels.join(self, effect.channel, effect.after, effect.ahead_s)
            elif isinstance(effect, Leave):
                self.service.channels.leave(self, effect.channel)
            elif isinstance(effect, Post):
                self.service.channels.post(self, effect.draft)

    def deliver(self, message: protocol.ServerMessage) -> None:
        """Queue one message for the client."""
        data = self._encode(message)
        if data:
            # A pong goes ahead of queued audio: its round trip times the client's clock.
            self.outbox.put(data, front=isinstance(message, protocol.Pong))
            if isinstance(message, protocol.Audio):
                self.playing_until = max(self.playing_until, time.monotonic()) + self.session.out.frame_ms / 1000

    def _job_event(self, job: Job, event: JobEvent) -> None:
        self.apply(self.session.job_event(job, event))

    def _submit(self, job: Job) -> None:
        # Backpressure: synthesis for a client with a full outbox waits until it drains.
        if self.outbox.full:
            self._held.append(job)
        else:
            self._run(job)

    def _run(self, job: Job) -> None:
        # An announcement's jobs are shared with the other subscribers (shared_jobs.py).
        if job.shared is not None:
            self.service.channels.submit(job, self)
        else:
            self.service.worker.submit(job)

    def _on_room(self) -> None:
        for job in self._held:
            if not job.cancelled:
                self._run(job)
        self._held.clear()
