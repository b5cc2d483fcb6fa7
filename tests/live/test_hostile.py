"""Single hostile messages against a real server with real voices (issue 13).

Each test sends one message that once froze or swelled the whole server, and checks
that its work is bounded and that another client is served meanwhile. How long such
a message stalls others and how much memory it takes is measured by
benchmarks/hostile.py, not asserted here.
"""

from __future__ import annotations

import time

import pytest

from rtts import protocol

from tests.conftest import Client, ServerThread, make_config
from tests.live.test_server import fetch

pytestmark = pytest.mark.slow

PIPER = "piper/en_US-joe-medium"


def _send_peak(server: ServerThread) -> float:
    _, _, body = fetch(server.http + "/metrics")
    (line,) = [x for x in body.decode().splitlines() if x.startswith("rtts_send_buffer_peak_bytes ")]
    return float(line.split()[1])


def test_a_wall_of_breaks_is_capped_and_held_back_for_a_slow_client(tmp_path):
    """Bug 2: 260 ten-second breaks were one 43-minute block of silence, built at once."""
    with ServerThread(make_config(tmp_path)) as server, Client(server.url) as a, Client(server.url) as b:
        cfg = server.config
        ready = a.recv()
        assert ready.limits["max_pause_ms"] == round(cfg.max_pause * 1000)
        b.recv()
        a.send(type="hello", v=1, sample_rate=48000, format="f32")
        a.recv()
        a.send(type="speak", id="w", text="<break time='10s'/>" * 260 + "Hi.", voice=PIPER)
        time.sleep(2.0)  # A reads nothing for a while: its pause jobs must wait, not pile up
        b.send(type="ping", t=1.0)
        assert b.until(protocol.Pong, timeout=10)[-1].t == 1.0
        msgs = a.utterance("w", timeout=120)
        end = msgs[-1]
        assert end.reason == "done"
        assert cfg.max_pause * 1000 <= end.stats["audio_ms"] <= cfg.max_pause * 1000 + 3000
        # What waited for A: the send buffer plus at most one pause job (2 s of 48 kHz f32) and a chunk.
        assert 0 < _send_peak(server) < cfg.send_buffer + 2.2 * 48000 * 4 + 65536


@pytest.mark.parametrize(
    "text, voice",
    [
        ("编号12345678901234567890123，金额98765432109876543210元。", "kokoro/jm_kumo"),
        ("番号は12345678901234567890123です。", "kokoro/jf_alpha"),
        ("The number is 12345678901234567890123456789012345678901234567890.", PIPER),
    ],
)
def test_very_long_numbers_are_spoken_not_internal(server: ServerThread, text: str, voice: str):
    """Bug 5: Mandarin numbers over 16 digits ended the utterance with `internal` (cn2an raised)."""
    with Client(server.url) as c:
        c.recv()
        c.send(type="speak", id="n", text=text, voice=voice)
        msgs = c.utterance("n", timeout=180)
    assert not [m for m in msgs if isinstance(m, protocol.Error)], msgs[-2:]
    assert msgs[-1].reason == "done" and msgs[-1].stats["audio_ms"] > 2000
