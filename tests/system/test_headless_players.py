"""Headless players in step (issue 33): ``rtts play`` processes, each playing through
PortAudio into a loudspeaker of its own (tests/sinks.py: one channel of a private
PulseAudio null sink each, all recorded together with capture timestamps), each through a
network delay of its own (tests/netdelay.py), on two rtts instances sharing a Redis bus,
instance B's host clock 30 ms off and both following the Redis host's clock. A Mandarin
announcement of a minute, no voice named, published on A.

Where each player's audio lands is found by cross-correlating the recording with the
announcement's audio as a plain subscriber received it, at its first sound and 60 s in:
the spread between players (one instance, and across two) must be within 5 ms, each
player within 10 ms of ``play_at`` as the recording's timestamps place it, and no player
may underrun. The benchmark with more
links and its table is benchmarks/players.py, on the same harness (tests/players.py).
"""

from __future__ import annotations

import shutil
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest

from rtts import protocol
from tests.conftest import Client, RedisServer, RttsProcess
from tests.netdelay import DelayProxy
from tests.players import (
    CHANNEL,
    SNAPCLIENT,
    SNAPSERVER,
    announce,
    heard,
    player,
    reference,
    settle,
    snapcast_zones,
)
from tests.sinks import PULSEAUDIO, RATE, Recording, Speakers
from tests.texts import STATION_ZH

pytestmark = pytest.mark.slow
try:
    import sounddevice  # noqa: F401

    SOUNDDEVICE = True
except OSError:  # the package is there, PortAudio is not
    SOUNDDEVICE = False

TOKEN = "pub-secret"
SPREAD_MS = 5.0  # the target, between any two players
# Each player against play_at, as the recording's capture timestamps place it: all of them
# came out 3-6 ms late together (the monitor's capture path; common to every player, so
# not in the spread), hence the kiosk test's bound for a first sample rather than 5.
PLAY_AT_MS = 10.0
CLOCK = pytest.mark.skipif(PULSEAUDIO is None or not SOUNDDEVICE or shutil.which("redis-server") is None,
                           reason="needs pulseaudio, libportaudio2 and redis-server")


@CLOCK
def test_headless_players_play_in_step_on_two_instances(tmp_path: Path) -> None:
    for d in ("a", "b", "redis"):
        (tmp_path / d).mkdir()
    with RedisServer(tmp_path / "redis") as redis, ExitStack() as stack:
        # As the two-instance kiosk test: both instances make the announcement at once on the
        # same two cores, through the distilled generator, with an ample lead.
        args = ("--bus", redis.url, "--shared-clock", "bus", "--publish-token", TOKEN, "--preload",
                "--phrase-cache-mb", "0", "--sync-min-lead", "4", "--sync-max-lead", "8", "--generator", "student")
        a = stack.enter_context(RttsProcess(tmp_path / "a", *args))
        b = stack.enter_context(RttsProcess(tmp_path / "b", *args, env={"RTTS_TEST_CLOCK_SKEW_MS": "30"}))
        a.wait_listening(), b.wait_listening()
        for inst in (a, b):  # the Mandarin voice in memory, as on a box that has spoken before
            with Client(inst.url) as c:
                c.send(type="speak", id="warm", text="你好。")
                assert c.utterance("warm", timeout=120)[-1].reason == "done"
        speakers = stack.enter_context(Speakers(3))
        # Two players on A (0 and 100 ms one way, each ± 20 ms), one on B (50 ± 20 ms).
        links = [(a.port, 0, 20), (a.port, 100, 20), (b.port, 50, 20)]
        players = []
        for i, (port, delay, jitter) in enumerate(links):
            proxy = stack.enter_context(DelayProxy(port, delay, jitter, seed=i))
            players.append(stack.enter_context(player(tmp_path, speakers, i, f"ws://127.0.0.1:{proxy.port}/ws")))
        ref = reference(a.url)
        stack.callback(ref.close)
        settle(players)
        result = announce(tmp_path, speakers, players, ref, a.url, STATION_ZH, TOKEN, positions_s=(0.0, 60.0))
        assert result.audio_s > 62, result.audio_s
        lines, wrong = [], []
        for name in result.at:
            one, across = result.spread_ms(name, [0, 1]), result.spread_ms(name)
            offs = result.from_play_at_ms(name)
            lines.append(f"{name}: spread on one instance {one:.2f} ms, across two {across:.2f} ms; "
                         f"each from play_at {', '.join(f'{o:+.2f}' for o in offs)} ms")
            if one > SPREAD_MS or across > SPREAD_MS:
                wrong.append(f"{name}: spread {one:.2f} / {across:.2f} ms")
            wrong += [f"{name}: player{i} {o:+.2f} ms from play_at" for i, o in enumerate(offs) if abs(o) > PLAY_AT_MS]
        for p, m in zip(players, result.metrics):
            lines.append(f"{p.name}: underruns {m['rtts_player_underruns_total']:.0f}, late joins "
                         f"{m['rtts_player_late_joins_total']:.0f}, drift corrections "
                         f"{m['rtts_player_drift_corrections_total']:.0f}, output latency "
                         f"{m['rtts_player_output_latency_seconds'] * 1000:.1f} ms")
            if m["rtts_player_underruns_total"] or m["rtts_player_late_joins_total"]:
                wrong.append(f"{p.name} underran")
        print(f"\nplay_at {result.play_at - result.sent:.3f} s after publish; " + "\n  ".join(lines))
        assert not wrong, (wrong, lines)
        for p in players:
            assert "Traceback" not in p.log.read_text(), p.log.read_text()
    assert "Traceback" not in a.log + b.log


@pytest.mark.skipif(SNAPSERVER is None or SNAPCLIENT is None or PULSEAUDIO is None or not SOUNDDEVICE,
                    reason="needs snapserver, snapclient, pulseaudio and libportaudio2")
def test_a_channel_as_a_snapcast_source(tmp_path: Path) -> None:
    """An rtts channel fed to snapserver as a pipe source (``rtts play --output
    file:FIFO``, silence between announcements), heard by two snapclients, each on a
    loudspeaker of its own: both hear the announcement, in step as Snapcast keeps them."""
    with ExitStack() as stack:
        srv = stack.enter_context(RttsProcess(tmp_path, "--publish-token", TOKEN, "--preload", "--phrase-cache-mb", "0"))
        srv.wait_listening()
        speakers = stack.enter_context(Speakers(2))
        snapcast_zones(stack, tmp_path, srv.url, speakers)
        ref = reference(srv.url)
        stack.callback(ref.close)
        recording = stack.enter_context(Recording(speakers, tmp_path / "room"))
        time.sleep(0.5)
        with Client(srv.url) as c:
            c.send(type="publish", channel=CHANNEL, text="The museum closes in fifteen minutes. Please make your way to the exit.",
                   token=TOKEN)
            published = c.until(protocol.Published, timeout=10)[-1]
        assert isinstance(published, protocol.Published), published
        msgs = ref.utterance(published.id, timeout=60)
        start, end = msgs[0], msgs[-1]
        assert isinstance(start, protocol.Start) and isinstance(start.play_at, float) and isinstance(end, protocol.End)
        pcm = np.concatenate([np.frombuffer(m.data, "<i2").astype(np.float32) / 32768 for m in msgs
                              if isinstance(m, protocol.Audio)])
        time.sleep(max(0.0, start.play_at + end.stats["audio_ms"] / 1000 + 1.5 - time.time()))
        recording.__exit__(None, None, None)
        take = recording.take()
        first = int(np.argmax(np.abs(pcm) > 0.05))
        at = []
        for i in range(2):
            channel = take.samples[:, i]
            assert np.abs(channel).max() > 0.05, f"snapclient {i} played nothing"
            at.append(heard(channel, take.wall, pcm, first) - first / RATE)
        spread_ms = abs(at[0] - at[1]) * 1000
        print(f"\nsnapclients: spread {spread_ms:.2f} ms; from play_at "
              + ", ".join(f"{(t - start.play_at) * 1000:+.1f} ms" for t in at))
        assert spread_ms <= SPREAD_MS
    assert "Traceback" not in srv.log
