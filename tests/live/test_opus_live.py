"""``format: "opus"`` on the WebSocket against the real server and a real voice: one Opus
packet per frame, decoded here by FFmpeg's decoder (PyAV)."""

from __future__ import annotations

import numpy as np
import pytest

from rtts import protocol

from tests.conftest import Client
from tests.unit.test_codecs import decode_packets
from tests.live.test_server import PIPER, SENTENCE, is_speech

pytest.importorskip("av", reason="the codecs extra (PyAV) is part of the test install")
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("rate", "frame_ms"), [(24000, 20), (48000, 20), (16000, 60)])
def test_opus_frames_decode_to_the_utterance(client: Client, rate: int, frame_ms: int) -> None:
    client.send(type="hello", v=1, format="opus", sample_rate=rate, frame_ms=frame_ms)
    ready = client.recv()
    assert isinstance(ready, protocol.Ready) and ready.format == "opus" and "opus" in (ready.formats or [])
    client.send(type="speak", id="o", text=SENTENCE, voice=PIPER)
    msgs = client.utterance("o")
    start, end = msgs[0], msgs[-1]
    assert isinstance(start, protocol.Start) and start.format == "opus" and start.sample_rate == rate
    assert isinstance(end, protocol.End) and end.reason == "done"
    frames = [m for m in msgs if isinstance(m, protocol.Audio)]
    n = rate * frame_ms // 1000
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert [f.pts for f in frames] == [i * n for i in range(len(frames))]
    made = round(end.stats["audio_ms"] * rate / 1000)
    # Whole frames holding the audio and the encoder's 6.5 ms look-ahead, padded.
    assert len(frames) == -(-(made + round(0.0065 * rate)) // n)
    assert sum(len(f.data) for f in frames) < made * 2 / 6  # under a sixth of pcm16
    head = b"OpusHead\x01\x01" + (312).to_bytes(2, "little") + rate.to_bytes(4, "little") + b"\x00\x00\x00"
    samples = decode_packets([f.data for f in frames], head, rate)[:made]
    is_speech(samples, rate, SENTENCE)
    assert float(np.abs(samples).max()) < 1.0


@pytest.mark.parametrize(
    "hello", [{"format": "opus", "sample_rate": 22050}, {"format": "opus", "frame_ms": 30}, {"format": "opus", "sample_rate": 44100}]
)
def test_opus_refuses_rates_and_frames_libopus_cannot_make(client: Client, hello: dict) -> None:  # type: ignore[type-arg]
    client.send(type="hello", v=1, **hello)
    err = client.recv()
    assert isinstance(err, protocol.Error) and err.code == "bad_message" and "opus takes" in err.message
    client.send(type="ping", t=1)
    assert isinstance(client.recv(), protocol.Pong)
