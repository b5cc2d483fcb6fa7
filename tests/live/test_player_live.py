"""``rtts play`` against a real server with a real voice, writing its output to a file in
real time (the Snapcast path, no sound server needed): it hears an announcement, survives
the server going away (reconnect with backoff, subscribing again with ``after``), and hears
the next one from the server that came back. In step on sound devices:
tests/system/test_in_step_across_instances.py."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import Client, RttsProcess
from tests.ports import free_port

pytestmark = pytest.mark.slow
TOKEN = "pub-secret"
RATE = 24000


def publish(url: str, text: str) -> None:
    with Client(url) as c:
        c.send(type="publish", channel="hall", text=text, token=TOKEN)
        c.recv()  # ready
        c.recv()  # published


def wait_for(path: Path, needle: str, count: int = 1, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while (text := path.read_text()).count(needle) < count:
        assert time.monotonic() < deadline, text
        time.sleep(0.1)
    return text


def test_a_player_hears_announcements_and_survives_its_server_going_away(tmp_path: Path) -> None:
    port = free_port()
    out, log = tmp_path / "out.raw", tmp_path / "player.log"
    args = ("--publish-token", TOKEN, "--default-voice", "piper/en_US-joe-medium")
    srv = RttsProcess(tmp_path, *args, port=port).wait_listening()
    with log.open("w") as f:
        player = subprocess.Popen([sys.executable, "-m", "rtts", "play", "--server", f"ws://127.0.0.1:{port}/ws",
                                   "--channel", "hall", "--output", f"file:{out}", "--output-channels", "1",
                                   "--sample-rate", str(RATE)], stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_for(log, "connected to")
        publish(srv.url, "Platform four.")
        wait_for(log, "hall#1 ended")
        srv.stop()
        wait_for(log, "closed the connection")
        time.sleep(2)  # a retry or two against nothing
        srv = RttsProcess(tmp_path, *args, port=port).wait_listening()
        text = wait_for(log, "connected to", count=2, timeout=90)
        assert "refused" in text or "Connect call failed" in text or "Errno" in text, text
        publish(srv.url, "Platform five.")
        text = wait_for(log, "hall#1 ended", count=2)  # the new server numbers from 1 again
        # Its audio is written in real time from its play_at on, which a server that has just
        # started puts its lead and the voice's load time ahead.
        play_at = float(text.rsplit("heard at ", 1)[1].split()[0])
        time.sleep(max(0.0, play_at - time.time()) + 2.0)
    finally:
        player.terminate()
        player.wait(10)
        srv.stop()
    pcm = np.fromfile(out, "<i2").astype(np.float32) / 32768
    loud = np.flatnonzero(np.abs(pcm) > 0.05)
    # Two stretches of speech with the restart's silence between them: both announcements heard.
    assert loud.size and (np.diff(loud) > 2 * RATE).sum() >= 1, "one announcement only"
    assert pcm.size / RATE > 5  # written in real time, silence between announcements included
    assert "Traceback" not in log.read_text(), log.read_text()
