"""WebSocket and HTTP on one port, in front of a ``Service``.

The WebSocket handler is a thin loop: frames go into the connection's driver
(``connection.Connection``), which carries out its session's effects. Every request
that is not a WebSocket upgrade is answered by ``plain_http.HttpFront`` (its routes are
set up here); websockets sees only upgrades, and ``process_request`` admits or refuses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mimetypes
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import prometheus_client as prom
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers, MultipleValuesError
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import Event

from rtts import protocol, tokens
from rtts.config import Config
from rtts.serve import access, announce_http
from rtts.serve.access import ConnectionCaps
from rtts.serve.connection import Connection
from rtts.serve.openai_routes import OpenAIRoutes
from rtts.serve.outbox import Stalled
from rtts.serve.plain_http import HttpFront, HttpRequest, HttpResponse, json_response, text
from rtts.serve.speech_stream import VOICE_HEADER, SpeechStream
from rtts.service import Service
from rtts.sound import audio, subtitles
from rtts.speech.ratelimit import MessageRate, Verdict

if TYPE_CHECKING:
    from rtts.serve.wyoming_server import WyomingServer

log = logging.getLogger(__name__)

WS_PATH = "/ws"


def static_dir() -> Path:
    """The page's files: inside the wheel when installed, ``static/`` in a checkout."""
    packaged = Path(str(resources.files("rtts"))) / "_static"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "static"


def _response(status: HTTPStatus, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> Response:
    headers = Headers()
    headers["Content-Type"] = content_type
    headers["Content-Length"] = str(len(body))
    headers["Cache-Control"] = "no-store"
    for key, value in (extra or {}).items():
        headers[key] = value
    return Response(status.value, status.phrase, headers, body)


def _text(status: HTTPStatus, message: str) -> Response:
    return _response(status, message.encode(), "text/plain; charset=utf-8")


class RttsServer:
    def __init__(self, service: Service) -> None:
        self.service = service
        self.config: Config = service.config
        self._server: Server | None = None
        self._static = static_dir()
        self.draining = False
        self.caps = ConnectionCaps(self.config.max_connections, self.config.max_connections_per_ip)
        self._admitted: dict[ServerConnection, tuple[str, bool]] = {}  # → (client address, token given)
        self._live: dict[ServerConnection, Connection] = {}
        self._stop_grace = asyncio.Event()
        # Every socket not being served, on either port, waits in one room: the limit is
        # the server's, not each protocol's.
        self.waiting = access.Waiting(self.config.max_handshakes)
        self.wyoming: WyomingServer | None = None
        if self.config.wyoming_port is not None:
            from rtts.serve.wyoming_server import WyomingServer  # only when asked for

            self.wyoming = WyomingServer(
                service, self.caps, self.waiting, self.config.host, self.config.wyoming_port,
                zeroconf=self.config.zeroconf,
            )
        self.send_peak = 0  # the most bytes any connection's outbox has held
        prom.Gauge(
            "rtts_send_buffer_peak_bytes", "the most bytes queued for one client so far",
            registry=service.metrics.registry,
        ).set_function(lambda: max([self.send_peak, *(live.outbox.peak for live in self._live.values())]))
        waiting = self.waiting
        prom.Gauge(
            "rtts_waiting_sockets", "sockets of either port waiting for a (next) request (at most --max-handshakes)",
            registry=service.metrics.registry,
        ).set_function(lambda: len(waiting))
        dropped = prom.Gauge(
            "rtts_waiting_dropped", "waiting sockets closed so far: late, or evicted to make room for a newcomer",
            ["why"], registry=service.metrics.registry,
        )
        dropped.labels("late").set_function(lambda: waiting.late)
        dropped.labels("evicted").set_function(lambda: waiting.evicted)
        cfg = self.config
        self.front = HttpFront(
            self._static_file,
            max_body=cfg.max_message_bytes,
            # A /tts text of --max-text-chars fits the URL however it is written (a code point
            # percent-encoded is at most 12 bytes), with room for the headers beside it.
            max_head=12 * cfg.max_text_chars + 16384,
            head_timeout=cfg.handshake_timeout,
            max_pending=cfg.max_handshakes,
            send_stall=cfg.send_stall,
            send_buffer=cfg.send_buffer,  # every socket, WebSocket or HTTP, from its arrival
            waiting=self.waiting,
            guard=self._host_guard,
        )
        self._own_hosts = access.own_host_names()
        # Hosts of --allow-origin are names the operator gave; "*" origins make rebinding
        # pointless, so the Host check is off then. A token does not: /metrics, /voices,
        # /readyz and /v1/models answer without one (probes and scrapers carry none), and
        # a rebinding page would read them as its own origin.
        self._allowed_hosts = cfg.allow_host + tuple(
            h for h in (urlsplit(o).hostname for o in cfg.allow_origin if o != "*") if h
        )
        self._check_host = "*" not in cfg.allow_origin
        self.front.route("/healthz", self._healthz)
        self.front.route("/readyz", self._readyz)
        self.front.route("/voices", self._voices)
        self.front.route("/metrics", self._metrics)
        self.front.route("/tts", self._tts)
        self.front.route("/v1/announce", self._announce, methods=("POST",),
                         refuse=lambda status, code, message: json_response(status, {"error": code, "message": message}))
        self.front.route(WS_PATH, self._upgrade_required)
        OpenAIRoutes(self.service, self.config, self.http_gate, self.caps).register(self.front)

    async def start(self, sock: socket.socket | None = None) -> None:
        """Listen on the configured host and port, or on ``sock`` (systemd socket activation)."""
        self.service.start()
        await self.service.channels.start()
        where: dict[str, Any] = {"sock": sock} if sock is not None else {
            "host": self.config.host,
            "port": self.config.port,
            "backlog": access.LISTEN_BACKLOG,
        }
        self._server = await serve(
            self._handle,
            process_request=self._process_request,
            create_connection=type("RttsConnection", (_AnsweredConnection, self.front.connection_class()),
                                   {"config": self.config}),
            # plain_http's gate bounds the wait for a request head; past it, an upgrade is
            # answered at once and an HTTP response may stream for as long as it takes.
            open_timeout=None,
            select_subprotocol=lambda connection, offered: access.select_subprotocol(offered),
            compression=None,  # PCM barely compresses; deflate costs ~64 KiB per connection
            max_size=self.config.max_message_bytes,
            # What websockets buffers from a client that sends faster than it is served:
            # at most 4 messages (256 KiB at the default size limit).
            max_queue=4,
            close_timeout=min(5.0, self.config.shutdown_timeout / 2),
            ping_interval=KEEPALIVE_S,
            ping_timeout=KEEPALIVE_S,
            **where,
        )
        for listening in self._server.sockets:
            _limit_receive_buffer(listening)
        log.info("listening on %s", ", ".join(self.urls))
        if self.wyoming is not None:
            await self.wyoming.start()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def urls(self) -> list[str]:
        assert self._server is not None
        out = []
        for sock in self._server.sockets:
            name = sock.getsockname()
            if not isinstance(name, tuple):
                out.append(f"unix:{name}")
                continue
            host, port = name[:2]
            out.append(f"ws://{'[' + host + ']' if ':' in host else host}:{port}{WS_PATH}")
        return out

    @property
    def connections(self) -> int:
        return self.caps.total

    async def close(self) -> None:
        """Stop at once: the same steps as ``shutdown`` without a grace period."""
        self._stop_grace.set()
        await self.shutdown()

    def cut_grace(self) -> None:
        """A second signal: skip what is left of the drain grace."""
        self._stop_grace.set()

    async def shutdown(self) -> None:
        """Drain, then close every connection with 1001 and stop, within ``shutdown_timeout``.

        For ``drain_grace`` seconds (or until the last client leaves) the server keeps
        serving its connections while ``/readyz`` and new WebSocket requests get 503, so a
        load balancer moves new clients elsewhere. Then listening stops, every
        connection's work is cancelled and it is closed with 1001; connections that do
        not finish their close handshake in time are aborted.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.shutdown_timeout - 0.5
        self.draining = True
        if self._server is None:
            await self.service.channels.stop()
            self.service.stop()
            return
        if self.config.drain_grace > 0 and self._live and not self._stop_grace.is_set():
            log.info("draining: %d connections; closing them in %.1f s", len(self._live), self.config.drain_grace)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._until_empty_or_cut(), self.config.drain_grace)
        self._server.close(close_connections=False)
        await self.front.close()
        if self.wyoming is not None:
            await self.wyoming.close()
        if self._live:
            log.info("closing %d connections (1001)", len(self._live))
        for conn in list(self._live.values()):
            conn.shut(protocol.CloseCode.GOING_AWAY, "server shutting down")
        try:
            await asyncio.wait_for(self._server.wait_closed(), max(0.1, deadline - loop.time()))
        except TimeoutError:
            stuck = [ws for ws in self._live]
            log.warning("%d connections did not close in time; aborting them", len(stuck))
            for ws in stuck:
                ws.transport.abort()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 0.5)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.service.channels.stop(), 1.0)
        self.service.stop(timeout=max(0.1, deadline - loop.time()))

    async def _until_empty_or_cut(self) -> None:
        while self._live and not self._stop_grace.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_grace.wait(), 0.1)

    # ------------------------------------------------------------ HTTP

    async def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """WebSocket upgrades only (plain_http answers every other request)."""
        if request.path.partition("?")[0] != WS_PATH:
            return _text(HTTPStatus.NOT_FOUND, f"not found: WebSockets connect to {WS_PATH}\n")
        try:
            return self._admit(connection, request)
        except MultipleValuesError as exc:
            return _text(HTTPStatus.BAD_REQUEST, f"bad_request: {exc} is repeated\n")

    def _admit(self, connection: ServerConnection, request: Request) -> Response | None:
        """Refuse a WebSocket request before the upgrade, or take a connection slot for it."""
        cfg = self.config
        headers = request.headers
        if self.draining:
            self.service.metrics.refused.labels("503").inc()
            return _refuse(HTTPStatus.SERVICE_UNAVAILABLE, "draining: this server is shutting down")
        if not self._host_ok(headers.get("Host"), headers.get("Origin") is not None or "Sec-Fetch-Site" in headers):
            self.service.metrics.refused.labels("403").inc()
            return _text(HTTPStatus.FORBIDDEN, _MISDIRECTED)
        if not access.origin_allowed(headers.get("Origin"), headers.get("Host"), cfg.allow_origin,
                                     headers.get("Sec-Fetch-Site")):
            self.service.metrics.refused.labels("403").inc()
            log.info("refused a WebSocket from origin %.100s (403)", headers.get("Origin"))
            return _text(HTTPStatus.FORBIDDEN, "forbidden: this origin may not connect (see --allow-origin)\n")
        offered = access.offered_subprotocols(headers.get_all("Sec-WebSocket-Protocol"))
        has_token, token = tokens.subprotocol_token(offered)
        authorized = False
        if has_token and cfg.token is not None:
            if not tokens.token_ok(token, cfg.token):
                self.service.metrics.refused.labels("401").inc()
                return _text(HTTPStatus.UNAUTHORIZED, "unauthorized: wrong token\n")
            authorized = True
        peer = str(connection.remote_address[0]) if connection.remote_address else "unix"
        address = access.client_address(peer, headers.get("X-Forwarded-For"), cfg.trusted_proxies)
        status = self.caps.refusal(address)
        if status is not None:
            self.service.metrics.refused.labels(str(status)).inc()
            log.info("refused a WebSocket from %s (%d): %d open", address, status, self.caps.total)
            if status == 429:
                return _refuse(HTTPStatus.TOO_MANY_REQUESTS, "busy: too many connections from this address")
            return _refuse(HTTPStatus.SERVICE_UNAVAILABLE, "busy: this server has no room; try another")
        # The slot is held by this connection's task: from now through the handshake and
        # the handler, and given back whatever way the connection ends.
        self.caps.take(address)
        self._admitted[connection] = (address, authorized)
        task = asyncio.current_task()
        assert task is not None

        def give_back(_: object) -> None:
            self.caps.give_back(address)
            self._admitted.pop(connection, None)

        task.add_done_callback(give_back)
        return None

    async def _static_file(self, request: HttpRequest) -> HttpResponse:
        name = unquote(request.path).lstrip("/") or "index.html"
        if name == "kiosk":
            name = "kiosk.html"
        root = self._static.resolve()
        try:
            target = (root / name).resolve()
            found = root in target.parents and target.is_file()
        except (OSError, ValueError):  # a NUL byte, a name too long for the file system
            found = False
        if not found:
            return text(HTTPStatus.NOT_FOUND, "not found\n")
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind == "application/javascript":
            kind += "; charset=utf-8"
        return HttpResponse(HTTPStatus.OK.value, [("Content-Type", kind)], target.read_bytes())

    def _host_ok(self, host: str | None, browser: bool) -> bool:
        return not self._check_host or access.host_allowed(host, browser, self._allowed_hosts, self._own_hosts)

    def _host_guard(self, request: HttpRequest) -> HttpResponse | None:
        browser = request.header("Origin") is not None or request.header("Sec-Fetch-Site") is not None
        if self._host_ok(request.header("Host"), browser):
            return None
        self.service.metrics.refused.labels("403").inc()
        return text(HTTPStatus.FORBIDDEN, _MISDIRECTED)

    async def _healthz(self, request: HttpRequest) -> HttpResponse:
        return text(HTTPStatus.OK, "ok\n")

    async def _voices(self, request: HttpRequest) -> HttpResponse:
        return json_response(HTTPStatus.OK, [v.as_dict() for v in self.service.registry.voices.values()])

    async def _metrics(self, request: HttpRequest) -> HttpResponse:
        content_type = "text/plain; version=0.0.4; charset=utf-8"
        body = self.service.metrics.render(self.service.worker.resident_parts())
        return HttpResponse(HTTPStatus.OK.value, [("Content-Type", content_type)], body)

    async def _upgrade_required(self, request: HttpRequest) -> HttpResponse:
        return text(HTTPStatus.UPGRADE_REQUIRED, f"upgrade_required: {WS_PATH} is a WebSocket\n",
                    [("Upgrade", "websocket")])

    async def _readyz(self, request: HttpRequest) -> HttpResponse:
        """200 while this instance takes new clients; 503 when draining or full."""
        ready = not self.draining and not self.caps.full
        body = {
            "ready": ready,
            "draining": self.draining,
            "full": self.caps.full,
            "max_connections": self.config.max_connections,
            "loaded": self.service.loaded_voices(),
            "loading": sorted(self.service.worker.loading),
            "connections": self.caps.total,
            "queue_depth": self.service.worker.queue_depth,
            # Per engine its measured RTF and the streams of it the thread carries within
            # the admission bound (--admission-max-load, lowered for a while where a stream
            # underran), and the load now (issue 32).
            "capacity": {
                **self.service.worker.capacity(self.service.admission.now()),
                "configured_max_load": self.config.admission_max_load,
            },
            # Channels' bus: "local", "listening", or "connecting" while Redis is away (not
            # a 503: every instance shares that Redis, and speech works without it).
            "bus": self.service.channels.bus.state,
            # The memory budget (0: none) and what the server, the inference process and
            # each part in it hold (rtts/host/memory.py).
            "memory": self.service.memory_state(),
        }
        return json_response(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, body)

    def http_gate(self, request: HttpRequest) -> tuple[HttpResponse | None, str]:
        """The WebSocket's admission rules for an HTTP route that synthesizes: draining,
        Origin, token (``?token=`` or ``Authorization: Bearer``) and the connection caps.
        Returns (a refusal or None, the client address whose slot ``take_slot`` takes)."""
        cfg = self.config
        metrics = self.service.metrics
        if self.draining:
            metrics.refused.labels("503").inc()
            return text(HTTPStatus.SERVICE_UNAVAILABLE, "draining: this server is shutting down\n",
                        [("Retry-After", "1")]), ""
        if not access.origin_allowed(request.header("Origin"), request.header("Host"), cfg.allow_origin,
                                     request.header("Sec-Fetch-Site")):
            metrics.refused.labels("403").inc()
            return text(HTTPStatus.FORBIDDEN, "forbidden: this origin may not use this server\n"), ""
        if cfg.token is not None:
            bearer = request.header("Authorization")
            given = bearer[7:].strip() if bearer and bearer[:7].lower() == "bearer " else request.arg("token")
            if not tokens.token_ok(given, cfg.token):
                metrics.refused.labels("401").inc()
                return text(HTTPStatus.UNAUTHORIZED, "unauthorized: give ?token=... or Authorization: Bearer\n",
                            [("WWW-Authenticate", "Bearer")]), ""
        address = access.client_address(request.peer, request.header("X-Forwarded-For"), cfg.trusted_proxies)
        status = self.caps.refusal(address)
        if status is not None:
            metrics.refused.labels(str(status)).inc()
            why = "too many connections from this address" if status == 429 else "this server has no room"
            return text(HTTPStatus(status), f"busy: {why}; try again\n", [("Retry-After", "1")]), address
        return None, address

    async def _tts(self, request: HttpRequest) -> HttpResponse:
        """GET /tts?text=...: a WAV streamed as it is synthesized (see docs/protocol.md)."""
        refusal, address = self.http_gate(request)
        if refusal is not None:
            return refusal
        text_arg = request.arg("text")
        if not text_arg:
            return text(HTTPStatus.BAD_REQUEST, "missing_field: give ?text=...\n")
        try:
            speed = float(request.arg("speed") or 0) or None
            rate = int(request.arg("sample_rate") or 0) or None
        except ValueError:
            return text(HTTPStatus.BAD_REQUEST, "bad_message: speed and sample_rate must be numbers\n")
        voice = request.arg("voice")
        if voice is not None and voice not in self.service.registry.voices:
            return text(HTTPStatus.BAD_REQUEST, f"unknown_voice: no voice {voice[:80]!r}; see {VOICES_AT}\n")
        captions = request.arg("captions")
        if captions is not None and captions not in subtitles.FORMATS:
            return text(HTTPStatus.BAD_REQUEST, f"bad_message: captions must be {' or '.join(subtitles.FORMATS)}\n")
        generator = request.arg("generator")  # checked with the rest of the request, by the session
        headers = [("Content-Type", subtitles.CONTENT_TYPES[captions] if captions else "audio/wav")]
        if request.method == "HEAD":
            return HttpResponse(HTTPStatus.OK.value, headers)  # what GET would answer, without the work
        self.caps.take(address)
        try:
            stream = SpeechStream(self.service, sample_rate=rate, format="pcm16", voices_at=VOICES_AT)
        except protocol.ProtocolError as exc:
            self.caps.give_back(address)
            return text(HTTPStatus.BAD_REQUEST, f"{exc.code.value}: {exc.message}\n")

        def done() -> None:
            stream.close()
            self.caps.give_back(address)

        try:
            start = await stream.start(text_arg, voice, request.arg("lang"), speed, words="word" if captions else None,
                                       generator=generator)
        except protocol.ProtocolError as exc:
            done()
            unavailable = exc.code in _UNAVAILABLE
            return text(HTTPStatus.SERVICE_UNAVAILABLE if unavailable else HTTPStatus.BAD_REQUEST,
                        f"{exc.code.value}: {exc.message}\n")
        except BaseException:
            done()
            raise
        body = _caption_stream(stream, text_arg, captions) if captions else _wav_stream(stream)
        return HttpResponse(HTTPStatus.OK.value, [*headers, (VOICE_HEADER, start.voice)], body, on_done=done)

    async def _announce(self, request: HttpRequest) -> HttpResponse:
        """POST /v1/announce: publish to a channel (announce_http.py). The publish token comes
        as ``Authorization: Bearer``, the server's token (when it has one) as ``X-Rtts-Token``."""
        if self.draining:
            return text(HTTPStatus.SERVICE_UNAVAILABLE, "draining: this server is shutting down\n",
                        [("Retry-After", "1")])
        if not access.origin_allowed(request.header("Origin"), request.header("Host"), self.config.allow_origin,
                                     request.header("Sec-Fetch-Site")):
            return text(HTTPStatus.FORBIDDEN, "forbidden: this origin may not use this server\n")
        token = request.header("X-Rtts-Token") or request.arg("token")
        status, body = await announce_http.announce(self.service, request.body, request.header("Authorization"), token)
        return json_response(status, body)

    # ------------------------------------------------------------ WebSocket

    async def _handle(self, ws: ServerConnection) -> None:
        service = self.service
        address, authorized = self._admitted.get(ws, ("?", False))
        conn = Connection(service, authorized=authorized)
        outbox = conn.outbox
        ws.alive_until = lambda: max(outbox.last_sent, conn.playing_until)  # type: ignore[attr-defined]
        self._live[ws] = conn
        service.acquire()
        service.metrics.connections.inc()
        service.metrics.connections_total.inc()
        log.debug("%s connected from %s", conn.id, address)
        sending = asyncio.create_task(self._send(conn, ws, address), name=f"send-{conn.id}")
        hello_due = asyncio.get_running_loop().call_later(self.config.handshake_timeout, _no_hello, conn)
        ours = False  # the server closes: its close frame goes out after what is queued
        try:
            conn.open()
            async for frame in ws:
                conn.receive(frame)
                if outbox.closing or outbox.done:
                    # Nothing more is taken from this client: stop reading, so that one
                    # closed for flooding is held back by TCP instead of parsed for nothing.
                    ours = outbox.closing
                    break
                if outbox.full:
                    # Stop reading (TCP backpressure) until the client has caught up.
                    await outbox.room()
                else:
                    # One message per turn of the loop: websockets hands over what it has
                    # buffered without suspending, so a client that sends faster than it
                    # is served would otherwise keep every other client waiting.
                    await asyncio.sleep(0)
        except ConnectionClosed:
            pass
        finally:
            del self._live[ws]
            self.send_peak = max(self.send_peak, outbox.peak)
            ours = ours or outbox.closing
            conn.close()
            if not outbox.done:
                outbox.close(protocol.CloseCode.GOING_AWAY, "")
            # A close of the server's own waits for the sender, whose send stall and
            # websockets' close timeout bound it; a client that left needs a moment at most.
            with contextlib.suppress(asyncio.TimeoutError, ConnectionClosed, Stalled):
                await asyncio.wait_for(asyncio.shield(sending), None if ours else 1.0)
            if not sending.done():
                sending.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                    await sending
            hello_due.cancel()
            service.metrics.connections.dec()
            service.release()
            log.debug("%s closed", conn.id)

    async def _send(self, conn: Connection, ws: ServerConnection, address: str) -> None:
        try:
            await conn.outbox.run(ws)
        except Stalled as exc:
            log.warning("%s from %s dropped: %s; its work is cancelled", conn.id, address, exc)
            self.service.metrics.stalled.inc()
            _reset(ws)
        except ConnectionClosed:
            pass


class _AnsweredConnection(ServerConnection):
    """A WebSocket whose control frames count against the message rate as well.

    websockets answers a client's pings (the WebSocket's own, not rtts' ``ping``) itself,
    as it parses them, before any message reaches the session: without a count here a
    client could have thousands of pongs a second made for it, and queued without
    bound if it never reads them. One that sends pings and pongs faster than
    ``limits.message_rate`` until it owes a burst is dropped (TCP reset).
    """

    config: Config
    # Until when the client shows signs of life besides pongs: it took a message, or may
    # still be playing audio it was sent (set by _handle once the session is up).
    alive_until: Callable[[], float] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._control = MessageRate(self.config.message_rate, self.config.message_burst, time.monotonic)

    async def keepalive(self) -> None:
        """websockets' keepalive (a ping every ``ping_interval``, closed with 1011 when no
        pong comes in ``ping_timeout``), except that a client still taking audio, or still
        playing what it took, is alive: one that plays as it reads has our ping behind all
        the audio buffered between us (its kernel's receive buffer alone holds minutes of
        it), and its pong comes only when playback reaches it (benchmarks/capped_soak.py's
        players of 5,000 characters were closed after 1-2 minutes). A client that takes
        nothing for ``--send-stall`` is dropped by its outbox instead; one with nothing to
        take or play answers within the timeout."""
        assert self.ping_interval is not None and self.ping_timeout is not None
        try:
            while True:
                await asyncio.sleep(self.ping_interval)
                pong = await self.ping()
                while True:
                    try:
                        async with asyncio.timeout(self.ping_timeout):
                            await asyncio.shield(pong)
                        break
                    except TimeoutError:
                        alive = self.alive_until() if self.alive_until is not None else 0.0
                        if time.monotonic() - alive > self.ping_timeout:
                            async with self.send_context():
                                self.protocol.fail(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
                            return
        except ConnectionClosed:
            return

    def process_event(self, event: Event) -> None:
        if isinstance(event, Frame) and event.opcode in (Opcode.PING, Opcode.PONG):
            if self._control.take() is Verdict.CLOSE and not self.transport.is_closing():
                log.warning("a WebSocket from %s dropped: over %g pings a second",
                            self.remote_address[0] if self.remote_address else "?", self.config.message_rate)
                _reset(self)
                return
        super().process_event(event)


_MISDIRECTED = "forbidden: a browser reached this server by a name it does not serve (see --allow-host)\n"


def _no_hello(conn: Connection) -> None:
    """A token is required and no valid hello came within the handshake timeout: the
    connection holds a slot for nothing, so it is closed (1008)."""
    if not conn.session.authorized:
        conn.deliver(protocol.Error(protocol.ErrorCode.UNAUTHORIZED.value, "no hello with a valid token in time"))
        conn.outbox.close(protocol.CloseCode.POLICY, "unauthorized")


def _refuse(status: HTTPStatus, message: str) -> Response:
    return _response(status, message.encode() + b"\n", "text/plain; charset=utf-8", {"Retry-After": "1"})


# Seconds between keepalive pings, and for a pong (websockets' default); see
# _AnsweredConnection.keepalive.
KEEPALIVE_S = 20.0

VOICES_AT = "GET /voices"  # where an HTTP client looks the voices up (``unknown_voice`` says so)
# Refusals that are the server's state, not the request's fault: 503.
_UNAVAILABLE = frozenset({protocol.ErrorCode.BUSY, protocol.ErrorCode.ENGINE_UNAVAILABLE,
                          protocol.ErrorCode.MEMORY_BUDGET})


async def _wav_stream(stream: SpeechStream) -> AsyncIterator[bytes]:
    yield audio.wav_header(stream.sample_rate)
    async for chunk in stream:
        yield chunk


async def _caption_stream(stream: SpeechStream, text: str, fmt: str) -> AsyncIterator[bytes]:
    """``/tts?captions=``: the subtitle file, each cue sent once the next word starts
    another (the audio is synthesized for its timing, and dropped)."""
    cues = subtitles.Cues(text, stream.sample_rate)
    count = 0

    def out(done: list[subtitles.Cue]) -> bytes:
        nonlocal count
        first, count = count + 1, count + len(done)
        return "".join(subtitles.cue(fmt, i, c) for i, c in enumerate(done, first)).encode()

    yield subtitles.header(fmt).encode()
    async with contextlib.aclosing(stream.timed()) as items:
        async for item in items:
            if isinstance(item, protocol.Words):
                yield out(cues.push(item.words))
    yield out(cues.finish())


def _reset(ws: ServerConnection) -> None:
    """Drop a connection with a TCP reset. A plain close would leave the kernel trying to
    deliver the unsent buffer to a client that reads nothing, for minutes."""
    sock = ws.transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ws.transport.abort()


# What the kernel holds from one client before it is read. websockets parses all that one
# read brings in one go, without yielding: 256 KiB of tiny frames is ~9,000 messages and
# ~40 ms of the loop's time, many times that on a loaded box. Clients send small messages
# (text, at most limits.max_message_bytes), so a smaller window costs them nothing that
# matters and keeps each read a few milliseconds' work.
RECEIVE_BUFFER = 16384


def _limit_receive_buffer(sock: socket.socket) -> None:
    """Set on a listening socket: every connection accepted from it inherits it (Linux),
    before its first byte, so data sent ahead of the upgrade is bounded as well."""
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
