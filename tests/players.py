"""Headless players (``rtts play``) as real processes, and when each one made an
announcement heard: the harness tests/system/test_in_step_across_instances.py,
tests/system/test_headless_players.py and
benchmarks/players.py share. Each player plays through PortAudio into a loudspeaker of
its own (tests/sinks.py); ``announce`` records them all, publishes, and finds where each
one's audio lands by cross-correlating the recording with the announcement's audio as a
plain subscriber received it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rtts import protocol
from tests.conftest import Client
from tests.ports import free_port
from tests.sinks import RATE, Recording, Speakers, locate

CHANNEL = "hall"


@dataclass
class PlayerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    metrics_port: int
    log: Path

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return {k: float(v) for k, v in (line.split(" ", 1) for line in text.splitlines() if line and line[0] != "#")}


@contextmanager
def player(tmp: Path, speakers: Speakers, channel: int, url: str) -> Iterator[PlayerProcess]:
    port = free_port()
    log = tmp / f"player{channel}.log"
    cmd = [sys.executable, "-m", "rtts", "play", "--server", url, "--channel", CHANNEL, "--output", "pulse",
           "--output-channels", "1", "--metrics", f"127.0.0.1:{port}"]
    with process(cmd, speakers.env(channel), log) as proc:
        deadline = time.monotonic() + 30
        while "connected to" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield PlayerProcess(f"player{channel}", proc, port, log)


def reference(url: str) -> Client:
    """A plain subscriber in the players' format: the announcement's audio, as sent."""
    c = Client(url)
    c.send(type="hello", v=1, format="pcm16", sample_rate=RATE)
    while not (isinstance(m := c.recv(), protocol.Ready) and m.sample_rate == RATE):
        pass
    c.send(type="subscribe", channel=CHANNEL)
    assert isinstance(c.until(protocol.Subscribed, timeout=10)[-1], protocol.Subscribed)
    return c


def heard(take_audio: np.ndarray, take_wall, ref: np.ndarray, pos: int) -> float:  # type: ignore[no-untyped-def]
    """When one player's channel made ``ref[pos]`` heard (wall clock): found with 2 s of
    the announcement anywhere in the recording, then placed with the half second from
    ``pos`` within 2 s of there. A player's lag may move within 2 s (it creeps a sample a
    block), and over a lag that moves, speech's correlation can peak a pitch period away:
    stop 46's failed run read +5.77 ms at the first sound with 2 s, -1.18 ms with half a
    second, as 0.1 s, 0.25 s and the first sample over a threshold (-1.3 to -1.4 ms) did."""
    near = locate(take_audio, ref, pos, 2 * RATE)
    frame = locate(take_audio, ref, pos, RATE // 2, around=int(near))
    return float(take_wall(frame))


@dataclass
class Heard:
    """One announcement as the players made it heard."""

    sent: float  # wall time it was published
    play_at: float
    audio_s: float
    id: str = ""
    pcm: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # as the reference received it
    at: dict[str, list[float]] = field(default_factory=dict)  # position name -> per player, when pts 0 was heard
    metrics: list[dict[str, float]] = field(default_factory=list)

    def spread_ms(self, name: str, players: list[int] | None = None) -> float:
        times = [t for i, t in enumerate(self.at[name]) if players is None or i in players]
        return (max(times) - min(times)) * 1000

    def from_play_at_ms(self, name: str) -> list[float]:
        return [(t - self.play_at) * 1000 for t in self.at[name]]


def settle(players: list[PlayerProcess], samples: int = 20, timeout: float = 60) -> None:
    """Until each player's clock estimate rests on ``samples`` exchanges (its bound is no
    use here: on a 50 ms link it stays near 30 ms while the estimate is within a ms)."""
    deadline = time.monotonic() + timeout
    while any(p.metrics()["rtts_player_clock_samples"] < samples for p in players):
        assert time.monotonic() < deadline, [p.metrics() for p in players]
        time.sleep(0.5)


def received(msgs: list[protocol.ServerMessage]) -> np.ndarray:
    """An utterance's audio (pcm16 at RATE) as a subscriber received it, each frame at its
    pts, and a second of silence after it."""
    pcm = np.zeros(max(m.pts for m in msgs if isinstance(m, protocol.Audio)) + RATE, np.float32)
    for m in msgs:
        if isinstance(m, protocol.Audio):
            x = np.frombuffer(m.data, "<i2").astype(np.float32) / 32768
            pcm[m.pts : m.pts + x.size] = x
    return pcm


def announce(tmp: Path, speakers: Speakers, players: list[PlayerProcess], ref: Client, publish_url: str, text: str,
             token: str, positions_s: tuple[float, ...] = (0.0,)) -> Heard:
    """Publishes ``text`` and waits until every player has played it; when each made the
    audio heard at its first sound and ``positions_s`` seconds after it."""
    with Recording(speakers, tmp / "room") as recording:
        time.sleep(0.5)
        with Client(publish_url) as c:
            sent = time.time()
            c.send(type="publish", channel=CHANNEL, text=text, token=token)
            published = c.until(protocol.Published, timeout=10)[-1]
        assert isinstance(published, protocol.Published), published
        msgs = ref.utterance(published.id, timeout=150)
        start, end = msgs[0], msgs[-1]
        assert isinstance(start, protocol.Start) and isinstance(start.play_at, float), start
        assert isinstance(end, protocol.End) and end.reason == "done", end
        pcm = received(msgs)
        audio_s = end.stats["audio_ms"] / 1000
        time.sleep(max(0.0, start.play_at + audio_s + 1.0 - time.time()))
    take = recording.take()
    result = Heard(sent, start.play_at, audio_s, published.id, pcm)
    first = int(np.argmax(np.abs(pcm) > 0.05))  # the first sound, past any leading silence
    for offset in positions_s:
        pos = first + int(offset * RATE)
        name = "start" if offset == 0 else f"{offset:g} s"
        result.at[name] = [heard(take.samples[:, i], take.wall, pcm, pos) - pos / RATE for i in range(len(players))]
    result.metrics = [p.metrics() for p in players]
    return result


SNAPSERVER, SNAPCLIENT = shutil.which("snapserver"), shutil.which("snapclient")
SNAPCAST_BUFFER_MS = 1000  # snapserver's stream.buffer: the player writes that far ahead of play_at


@contextmanager
def snapserver(tmp: Path) -> Iterator[tuple[Path, int]]:
    """Debian's snapserver with one pipe source (a FIFO it makes), its control ports off."""
    assert SNAPSERVER is not None
    fifo, port = tmp / "snapfifo", free_port()
    (tmp / "snapserver.conf").write_text("")
    log = (tmp / "snapserver.log").open("w")
    proc = subprocess.Popen([SNAPSERVER, "-c", str(tmp / "snapserver.conf"), f"--server.datadir={tmp}",
                             "--http.enabled=0", "--tcp.enabled=0", f"--stream.port={port}",
                             f"--stream.buffer={SNAPCAST_BUFFER_MS}", "--stream.codec=pcm",
                             f"--stream.source=pipe://{fifo}?name=rtts&mode=create&sampleformat={RATE}:16:2",
                             "--logging.sink=stderr"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not fifo.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp / "snapserver.log").read_text()
            time.sleep(0.05)
        yield fifo, port
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@contextmanager
def process(cmd: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def snapcast_zones(stack: ExitStack, tmp: Path, url: str, speakers: Speakers, zones: int = 2) -> None:
    """snapserver with an rtts channel as its pipe source (``rtts play --output file:FIFO``)
    and ``zones`` snapclients, each on a loudspeaker of its own; returns once all are up."""
    fifo, port = stack.enter_context(snapserver(tmp))
    stack.enter_context(process([sys.executable, "-m", "rtts", "play", "--server", url, "--channel", CHANNEL,
                                 "--output", f"file:{fifo}", "--trim-ms", str(SNAPCAST_BUFFER_MS)], {},
                                tmp / "feeder.log"))
    for i in range(zones):
        stack.enter_context(process([str(SNAPCLIENT), "-h", "127.0.0.1", "-p", str(port), "--hostID", f"zone{i}",
                                     "--instance", str(i + 1), "--player", "pulse"], speakers.env(i),
                                    tmp / f"snapclient{i}.log"))
    logs = [tmp / f"snapclient{i}.log" for i in range(zones)]
    deadline = time.monotonic() + 30
    while not (all("diff to server" in log.read_text() for log in logs) and "connected to" in (tmp / "feeder.log").read_text()):
        assert time.monotonic() < deadline, [log.read_text() for log in logs]
        time.sleep(0.2)
