"""Wyoming, the protocol Home Assistant speaks to local voice services (``rtts serve
--wyoming-port 10200``; off by default).

Events are the ``wyoming`` package's own (``Describe``/``Info``, ``Synthesize``,
``SynthesizeStart``/``Chunk``/``Stop``/``Stopped``, ``AudioStart``/``Chunk``/``Stop``,
``Error``). Each TCP connection drives one ``Session`` through a ``SessionRunner``:
the same inference thread, scheduling, limits and idle unload as a WebSocket client.

- ``describe`` → ``info``: one TTS program, every voice with its languages, and
  ``supports_synthesize_streaming``. A voice with a choice of waveform generators (Kokoro's:
  its own and the distilled one) lists them as its speakers, ``student`` and ``teacher``:
  Home Assistant's speaker setting is the per-request choice (``speak.generator``);
  none, the server's.
- ``synthesize`` → ``audio-start``, ``audio-chunk``… as the audio is made, ``audio-stop``.
- ``synthesize-start``, ``synthesize-chunk``… (text as an LLM writes it), ``synthesize-stop``
  → the same audio events, each clause spoken as soon as it is complete (the session's
  ``append``), then ``synthesize-stopped``. The ``synthesize`` that Home Assistant also
  sends inside a stream, for servers without streaming, is ignored.
- Bad requests get an ``error`` event with rtts's stable code and the connection stays.

Sockets are counted like the WebSocket port's. One that is not being served (before its
first event, and between requests) waits in the server's ``access.Waiting`` with the
HTTP sockets that have not sent a whole request: its first event must come within
``--handshake-timeout``, the next within ``--wyoming-idle-timeout``, and a newcomer
beyond ``--max-handshakes`` closes the one waiting longest. A request being served
(``synthesize``, or ``synthesize-start`` to ``synthesize-stop``) holds a connection slot
(``--max-connections``, per address too) and counts as activity for the idle unload;
an idle connection holds neither, so Wyoming sockets, which carry no token, cannot
lock authorized clients out or keep the models loaded.

Audio is 16-bit mono at the server's ``--sample-rate`` (24 kHz by default), 100 ms a chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import logging
import socket

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, write_event
from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice, TtsVoiceSpeaker
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from rtts import __version__, protocol
from rtts.serve.access import LISTEN_BACKLOG, ConnectionCaps, Waiting
from rtts.serve.outbox import cap_kernel_send_buffer
from rtts.serve.runner import SessionRunner
from rtts.service import Service

log = logging.getLogger(__name__)

CHUNK_MS = 100  # Wyoming clients buffer; 100 ms chunks cost a tenth of the events of 10 ms ones
_ATTRIBUTION = Attribution(name="rtts", url="")


def event_bytes(event: Event) -> bytes:
    """One event in Wyoming's framing (JSON header line, data, payload), by the package's writer."""
    buf = io.BytesIO()
    write_event(event, buf)
    return buf.getvalue()


async def read_event(reader: asyncio.StreamReader, max_bytes: int) -> Event | None:
    """The next event, or None at the end of the stream.

    ``wyoming.event.async_read_event`` trusts the lengths a client declares; a server
    must not (a header saying 2 GB of payload would be read into memory), so this reads
    the same framing with every part bounded by ``max_bytes``. Raises ValueError for an
    event that is not well-formed or too big.
    """
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise ValueError("the connection ended inside an event") from None
    except asyncio.LimitOverrunError:
        raise ValueError("an event header is too long") from None
    header = _json(line, max_bytes)
    if not isinstance(header.get("type"), str):
        raise ValueError("an event header must be a JSON object with a string 'type'")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise ValueError("event data must be a JSON object")
    lengths = [header.get("data_length") or 0, header.get("payload_length") or 0]
    if not all(isinstance(n, int) and 0 <= n <= max_bytes for n in lengths):
        raise ValueError(f"event data and payload must be 0..{max_bytes} bytes")
    if lengths[0]:
        data.update(_json(await reader.readexactly(lengths[0]), max_bytes))
    payload = await reader.readexactly(lengths[1]) if lengths[1] else None
    return Event(type=header["type"], data=data, payload=payload)


def _json(data: bytes, max_bytes: int) -> dict[str, object]:
    """A JSON object of the framing, parsed as every JSON from a client is (nesting bounded)."""
    try:
        return protocol.decode_json(data, max_bytes=max_bytes)
    except protocol.ProtocolError as exc:
        raise ValueError(exc.message) from None


class _Writer:
    """The outbox's sink: a TCP stream."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def send(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def close(self, code: int, reason: str) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()


class WyomingServer:
    def __init__(
        self, service: Service, caps: ConnectionCaps, waiting: Waiting, host: str, port: int, *, zeroconf: bool = False
    ) -> None:
        self.service = service
        self.caps = caps
        self.waiting = waiting
        self.host = host
        self._port = port
        self._zeroconf_wanted = zeroconf
        self._zeroconf: object | None = None
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._connection, self.host, self._port, limit=self.service.config.max_message_bytes,
            backlog=LISTEN_BACKLOG,
        )
        log.info("Wyoming on tcp://%s:%d", self.host, self.port)
        if self.service.config.token is not None:
            # Wyoming has no way to carry a token: whoever reaches this port may speak.
            log.warning("the Wyoming port takes no token: keep it on a trusted network")
        if self._zeroconf_wanted:
            self._zeroconf = await advertise(self.host, self.port)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening, cancel every connection's work and close it."""
        if self._zeroconf is not None:
            with contextlib.suppress(Exception):
                await self._zeroconf.async_close()  # type: ignore[attr-defined]
        if self._server is None:
            return
        self._server.close()
        for task in list(self._clients):
            task.cancel()
        if self._clients:
            await asyncio.wait(self._clients, timeout=2)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cap_kernel_send_buffer(writer.transport, self.service.config.send_buffer)
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) else "unix"
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        client: _Client | None = None
        try:
            async with SessionRunner(self.service, _Writer(writer), self._encoder(), name="wyoming",
                                     voices_at="describe (info.tts)") as runner:
                client = _Client(self.service, runner, self.caps, self.waiting, address)
                try:
                    await client.run(reader)
                finally:
                    client.idle()
        except asyncio.CancelledError:
            pass  # shutdown, or dropped from the waiting room (late, or evicted by a newcomer)
        except (ConnectionError, TimeoutError) as exc:
            # A client resetting its connection, or silent mid-stream: nothing to fix here.
            log.info("Wyoming client %s gone: %s", address, type(exc).__name__)
        except Exception:
            log.exception("Wyoming connection from %s failed", address)
        finally:
            self._clients.discard(task)
            if client is not None:
                self.waiting.leave(client)
            if not writer.is_closing():
                writer.close()

    def _encoder(self):  # type: ignore[no-untyped-def]
        """Session messages → Wyoming audio events (one encoder per connection)."""
        rate = self.service.config.sample_rate

        def encode(message: protocol.ServerMessage) -> bytes | None:
            if isinstance(message, protocol.Start):
                return event_bytes(AudioStart(rate=rate, width=2, channels=1).event())
            if isinstance(message, protocol.Audio):
                ms = message.pts * 1000 // rate
                return event_bytes(AudioChunk(rate=rate, width=2, channels=1, audio=message.data, timestamp=ms).event())
            if isinstance(message, protocol.End):
                return event_bytes(AudioStop().event())
            return None  # ready, marks

        return encode


class _Client:
    """One Wyoming connection: events in, session requests out."""

    def __init__(
        self, service: Service, runner: SessionRunner, caps: ConnectionCaps, waiting: Waiting, address: str
    ) -> None:
        self.service = service
        self.runner = runner
        self.config = service.config
        self.caps = caps
        self.waiting = waiting
        self.address = address
        self.serving = False  # a request holds a connection slot and counts as activity
        self._ids = itertools.count(1)
        self._stream: _TextStream | None = None
        self._events = 0
        runner.hello(sample_rate=self.config.sample_rate, format="pcm16", frame_ms=CHUNK_MS)

    async def run(self, reader: asyncio.StreamReader) -> None:
        while not self.runner.outbox.closing and not self.runner.outbox.done:
            try:
                event = await self._next(reader)
            except (ValueError, UnicodeDecodeError) as exc:
                self._error("bad_frame", f"not a Wyoming event: {exc}")
                return  # the framing is lost: nothing after it can be read
            if event is None:
                return
            self._events += 1
            try:
                await self._handle(event)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                # The wyoming package's from_event trusts the data's shapes (a string voice, a list text).
                self._error("bad_message", f"a malformed {event.type[:40]} event ({type(exc).__name__})")
            await self.runner.room()  # a client that does not read its audio is not read either

    async def _next(self, reader: asyncio.StreamReader) -> Event | None:
        """The next event. A connection not being served waits for it in the waiting room,
        which cancels this task when it is late or evicted; one in a text stream (an LLM
        writing) gets the idle timeout alone, while it holds its slot."""
        idle = self.config.wyoming_idle_timeout
        if self.serving:
            async with asyncio.timeout(idle):
                return await read_event(reader, self.config.max_message_bytes)
        task = asyncio.current_task()
        assert task is not None
        timeout = idle if self._events else self.config.handshake_timeout
        self.waiting.enter(self, timeout, lambda late: task.cancel())
        try:
            return await read_event(reader, self.config.max_message_bytes)
        finally:
            self.waiting.leave(self)

    def serve(self) -> bool:
        """Take a connection slot for a request, or answer ``busy`` (the connection stays)."""
        if self.serving:
            return True
        status = self.caps.refusal(self.address)
        if status is not None:
            self.service.metrics.refused.labels(str(status)).inc()
            why = "too many connections from this address" if status == 429 else "this server has no room"
            self._error("busy", f"busy: {why}; try again")
            return False
        self.caps.take(self.address)
        self.service.acquire()
        self.serving = True
        return True

    def idle(self) -> None:
        """The request is over: its slot and its activity are given back."""
        if self.serving:
            self.serving = False
            self.caps.give_back(self.address)
            self.service.release()

    async def _handle(self, event: Event) -> None:
        if Describe.is_type(event.type):
            self.runner.write(event_bytes(describe(self.service).event()))
        elif SynthesizeStart.is_type(event.type):
            start = SynthesizeStart.from_event(event)
            self._stream = _TextStream(f"w{next(self._ids)}", start.voice)
            self._stream.failed = not self.serve()
        elif SynthesizeChunk.is_type(event.type):
            if self._stream is None:
                self._error("bad_message", "synthesize-chunk outside synthesize-start … synthesize-stop")
                return
            text = str(event.data.get("text", ""))
            if text:
                self._append(self._stream, text)
        elif SynthesizeStop.is_type(event.type):
            stream, self._stream = self._stream, None
            try:
                if stream is not None:
                    await self._finish(stream)
            finally:
                self.idle()
            self.runner.write(event_bytes(SynthesizeStopped().event()))
        elif Synthesize.is_type(event.type):
            if self._stream is not None:
                return  # the whole text again, for servers that cannot stream: already coming
            if not self.serve():
                return
            try:
                synth = Synthesize.from_event(event)
                voice, lang, generator = self._voice(synth.voice)
                end = self.runner.speak(
                    protocol.Speak(id=f"w{next(self._ids)}", text=synth.text, voice=voice, lang=lang,
                                   generator=generator)
                )
                await end
            except protocol.ProtocolError as exc:
                self._error(exc.code.value, exc.message)
            except (KeyError, TypeError, ValueError) as exc:
                self._error("bad_message", f"synthesize needs a text: {exc}")
            finally:
                self.idle()
        else:
            log.debug("ignored a Wyoming %.40s event", event.type)

    def _append(self, stream: _TextStream, text: str) -> None:
        if stream.failed:
            return
        try:
            if stream.end is None:
                voice, lang, generator = self._voice(stream.voice)
                stream.end = self.runner.append(
                    protocol.Append(id=stream.id, text=text, voice=voice, lang=lang, generator=generator)
                )
            else:
                self.runner.append(protocol.Append(id=stream.id, text=text))
        except protocol.ProtocolError as exc:
            stream.failed = True
            self._error(exc.code.value, exc.message)
            return
        if stream.end.done() and stream.end.exception() is not None:
            stream.failed = True
            exc = stream.end.exception()
            assert isinstance(exc, protocol.ProtocolError)
            self._error(exc.code.value, exc.message)

    async def _finish(self, stream: _TextStream) -> None:
        if stream.end is None or stream.failed:
            return
        try:
            self.runner.flush(stream.id)
            await stream.end
        except protocol.ProtocolError as exc:
            self._error(exc.code.value, exc.message)

    def _voice(self, wanted: SynthesizeVoice | None) -> tuple[str | None, str | None, str | None]:
        """(rtts voice id, language hint, generator) for a Wyoming voice: a name is an rtts
        voice id (a speaker picks ``piper/NAME/SPEAKER``, or a Kokoro voice's generator,
        ``describe``'s speakers); a language alone picks that language's voice."""
        if wanted is None:
            return None, None, None
        voices = self.service.registry.voices
        lang = _lang(wanted.language) if wanted.language else None
        if wanted.name:
            if wanted.speaker and f"{wanted.name}/{wanted.speaker}" in voices:
                return f"{wanted.name}/{wanted.speaker}", lang, None
            named = voices.get(wanted.name)
            if wanted.speaker and named is not None and named.generators:
                # Checked with the rest of the request, by the session: a speaker that
                # names no generator is its bad_message.
                return wanted.name, lang, wanted.speaker
            return wanted.name, lang, None
        if lang is not None:
            chosen = self.runner.session.lang_voices().get(lang)
            if chosen is None:
                raise self.runner.session.not_offered(lang)
            return chosen.id, lang, None
        return None, None, None

    def _error(self, code: str, text: str) -> None:
        self.runner.write(event_bytes(Error(text=text, code=code).event()))


class _TextStream:
    """A synthesize-start … synthesize-stop in progress: one session utterance, built by appends."""

    def __init__(self, utt_id: str, voice: SynthesizeVoice | None) -> None:
        self.id = utt_id
        self.voice = voice
        self.end: asyncio.Future[protocol.End] | None = None
        self.failed = False


# A voice's generators as Wyoming speakers ("auto" left out: no speaker is the server's choice).
_SPEAKERS = tuple(g for g in protocol.GENERATORS if g != "auto")


def _lang(code: str) -> str:
    """Home Assistant's ``en_US``/``en-US``/``zh-Hans`` → the session's ``en``/``zh``."""
    return code.replace("_", "-").split("-")[0].lower()


def describe(service: Service) -> Info:
    """The answer to ``describe``: one TTS program with every voice (read now: SIGHUP rescans)."""
    voices = [
        TtsVoice(
            name=v.id,
            description=f"{v.name} ({v.engine}, {', '.join(v.langs)})",
            attribution=_ATTRIBUTION,
            installed=True,
            version=None,
            languages=list(v.langs),
            speakers=[TtsVoiceSpeaker(name=g) for g in _SPEAKERS] if v.generators else None,
        )
        for v in service.registry.voices.values()
    ]
    program = TtsProgram(
        name="rtts",
        description="rtts: real-time text-to-speech for small CPU machines",
        attribution=_ATTRIBUTION,
        installed=True,
        version=__version__,
        voices=voices,
        supports_synthesize_streaming=True,
    )
    return Info(tts=[program])


async def advertise(host: str, port: int) -> object:
    """Announce ``_wyoming._tcp`` by mDNS, so Home Assistant offers to add this server.

    Uses the ``zeroconf`` package (the ``zeroconf`` extra). On ``0.0.0.0`` every
    interface is announced; on a specific address, that one.
    """
    try:
        from zeroconf import IPVersion
        from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf
    except ImportError:
        raise RuntimeError("--zeroconf needs the zeroconf package: pip install 'rtts[zeroconf]'") from None
    from zeroconf import get_all_addresses

    everywhere = host in ("0.0.0.0", "", "::")
    addresses = [socket.inet_aton(a) for a in (get_all_addresses() if everywhere else [host])]
    zc = AsyncZeroconf(interfaces="all" if everywhere else [host], ip_version=IPVersion.V4Only)  # type: ignore[arg-type]
    name = f"rtts-{socket.gethostname()}"[:60]
    info = AsyncServiceInfo(
        "_wyoming._tcp.local.", f"{name}._wyoming._tcp.local.", port=port, addresses=addresses,
        properties={"version": __version__},
    )
    await zc.async_register_service(info)
    log.info("announced %s._wyoming._tcp by mDNS", name)
    return zc
