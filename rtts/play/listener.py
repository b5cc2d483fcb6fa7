"""The player's WebSocket side: hello, subscribe to the channels, follow the server's
clock (the kiosk's ping pattern: 8 pings 100 ms apart, then 4 a second for 15 s, then one a
second), hand announcements to the ``Player``; on any loss, reconnect with backoff (0.5 s
doubling to 30 s, ±20 %), the servers tried in turn, subscribing again with ``after`` the
last announcement heard so the server says how many were missed."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass

import msgpack
import websockets

from rtts import protocol
from rtts.play.player import Player
from rtts.play.settings import PlayerSettings
from rtts.tokens import encode_token

log = logging.getLogger(__name__)

FRAME_MS = 20
READY_TIMEOUT_S = 10.0
BACKOFF_S = (0.5, 30.0)
STEADY_S = 30.0  # a connection that lasted this long starts the backoff again from its least


@dataclass
class ListenerCounts:
    connected: bool = False
    connects: int = 0
    failures: int = 0
    missed: int = 0  # announcements the server says this player will not hear
    server: str = ""


class Listener:
    def __init__(self, settings: PlayerSettings, player: Player) -> None:
        self.settings, self.player = settings, player
        self.counts = ListenerCounts()
        self.heard: dict[str, int] = {}  # channel -> the last announcement seq started here
        self._token = settings.token()

    async def run(self) -> None:
        backoff = BACKOFF_S[0]
        for attempt in range(10**12):
            url = self.settings.servers[attempt % len(self.settings.servers)]
            began = time.monotonic()
            try:
                await self._session(url)
                log.warning("%s closed the connection", url)
            except (TimeoutError, OSError, websockets.WebSocketException, ConnectionError, ValueError) as exc:
                self.counts.failures += 1
                log.warning("%s: %s", url, exc or type(exc).__name__)
            finally:
                self.counts.connected = False
                self.player.end_all()
            if time.monotonic() - began > STEADY_S:
                backoff = BACKOFF_S[0]
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(BACKOFF_S[1], backoff * 2)

    async def _session(self, url: str) -> None:
        subprotocols = ["rtts.v1"]
        if self._token:
            subprotocols.append(f"rtts.auth.{encode_token(self._token)}")
        async with websockets.connect(url, subprotocols=subprotocols, open_timeout=READY_TIMEOUT_S,  # type: ignore[arg-type]
                                      max_size=2**22, compression=None) as ws:
            await ws.send(_pack(type="hello", v=protocol.VERSION, format="pcm16",
                                sample_rate=self.settings.sample_rate, frame_ms=FRAME_MS))
            ready = await asyncio.wait_for(self._ready(ws), READY_TIMEOUT_S)
            if not ready.clock:
                log.warning("%s offers no shared clock: announcements play as they come, not in step", url)
            self.player.new_clock()
            # What the output writes ahead of play_at (--trim-ms; a Snapcast pipe: its buffer):
            # the server sets the channel's lead to cover it, or an announcement's start
            # would come after its place had been written.
            ahead = {"ahead_ms": round(self.settings.trim_ms)} if self.settings.trim_ms >= 1 else {}
            for channel in self.settings.channels:
                after = self.heard.get(channel)
                await ws.send(_pack(type="subscribe", channel=channel, **({"after": after} if after else {}), **ahead))
            self.counts.connected, self.counts.server = True, url
            self.counts.connects += 1
            log.info("connected to %s (session %s), hearing %s", url, ready.session, ", ".join(self.settings.channels))
            pinger = asyncio.create_task(self._ping(ws), name="rtts-play-ping")
            try:
                async for data in ws:
                    if isinstance(data, bytes):
                        self._on(data)
            finally:
                pinger.cancel()

    async def _ready(self, ws: websockets.ClientConnection) -> protocol.Ready:
        """The ``ready`` that answers our hello: a server without a token sends one on
        connecting too, with its own defaults."""
        while True:
            msg = protocol.decode_server(await ws.recv())  # type: ignore[arg-type]
            if isinstance(msg, protocol.Error):
                raise ValueError(f"the server refused the hello: {msg.code} {msg.message}")
            if isinstance(msg, protocol.Ready) and msg.sample_rate == self.settings.sample_rate:
                return msg

    async def _ping(self, ws: websockets.ClientConnection) -> None:
        """Until the connection closes (the session's loop sees that and reconnects)."""
        started = time.monotonic()
        try:
            for n in range(10**12):
                await ws.send(_pack(type="ping", t=time.monotonic() * 1000))
                since = time.monotonic() - started
                await asyncio.sleep(0.1 if n < 8 else 0.25 if since < 15 else 1.0)
        except websockets.ConnectionClosed:
            return

    def _on(self, data: bytes) -> None:
        try:
            msg = protocol.decode_server(data)
        except (KeyError, TypeError, ValueError, msgpack.UnpackException) as exc:
            log.warning("a message from the server could not be read (%s): skipped", exc)
            return
        if isinstance(msg, protocol.Audio):
            self.player.audio(msg.id, msg.pts, msg.data)
        elif isinstance(msg, protocol.Pong):
            if isinstance(msg.t, (int, float)) and msg.server_time is not None:
                self.player.exchange(msg.t / 1000, msg.server_time, time.monotonic())
        elif isinstance(msg, protocol.Start) and msg.channel is not None:
            self.player.start(msg.id, msg.play_at, msg.sample_rate, msg.priority == "high")
            seq = msg.id.rpartition("#")[2]
            if seq.isdigit():
                self.heard[msg.channel] = max(self.heard.get(msg.channel, 0), int(seq))
            log.info("%s: %r, heard at %s", msg.id, (msg.text or "")[:60], msg.play_at)
        elif isinstance(msg, protocol.End):
            self.player.end(msg.id)
            log.info("%s ended (%s): %s", msg.id, msg.reason, msg.stats)
        elif isinstance(msg, protocol.Subscribed):
            self.counts.missed += msg.missed
            if msg.missed:
                log.warning("%s: %d announcements were made while this player was away", msg.channel, msg.missed)
        elif isinstance(msg, protocol.Error):
            log.warning("the server says %s: %s", msg.code, msg.message)


def _pack(**fields: object) -> bytes:
    return msgpack.packb(fields, use_bin_type=True)
