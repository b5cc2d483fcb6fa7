"""The real server on port 0, a real websockets client, real voices."""

from __future__ import annotations

import io
import json
import math
import re
import time
import urllib.error
import urllib.request
import wave

import msgpack
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed

from rtts import protocol
from rtts.sound import audio
from tests.conftest import Client, ServerThread, make_config

pytestmark = pytest.mark.slow

PIPER = "piper/en_US-joe-medium"
KOKORO = "kokoro/jf_alpha"
SENTENCE = "The quick brown fox jumps over the lazy dog."
PARAGRAPH = (
    "Good morning, and welcome aboard. The next stop is Central Station, where you can change "
    "for the airport line. Please mind the gap when leaving the train."
)


def fetch(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def gauge(metrics: str, name: str) -> float:
    """An unlabelled sample of a /metrics text; fails where the server has none."""
    found = re.search(rf"^{name} (\S+)$", metrics, re.MULTILINE)
    assert found is not None, f"no {name} in /metrics"
    return float(found.group(1))


def check_stream(msgs: list, utt_id: str, rate: int, frame_ms: int, width: int) -> np.ndarray:
    """The invariants every utterance's messages keep; returns the decoded audio."""
    assert isinstance(msgs[0], protocol.Start) and msgs[0].sample_rate == rate
    frames = [m for m in msgs if isinstance(m, protocol.Audio)]
    end = msgs[-1]
    assert isinstance(end, protocol.End) and end.reason == "done", end
    n = rate * frame_ms // 1000
    assert frames, "no audio"
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert [f.pts for f in frames] == [i * n for i in range(len(frames))]
    assert all(len(f.data) == n * width for f in frames[:-1])
    assert 0 < len(frames[-1].data) <= n * width
    marks = [m for m in msgs if isinstance(m, protocol.Mark)]
    assert marks and marks[0].pts == 0
    total = sum(len(f.data) for f in frames) // width
    assert all(0 <= m.pts < total for m in marks)
    assert set(end.stats) == {"queue_ms", "ttfa_ms", "audio_ms", "rtf", "underruns", "late_ms"}
    assert end.stats["audio_ms"] == pytest.approx(total * 1000 / rate, rel=0.02)
    # rtf is 0 when the phrase cache answered; no upper bound: speed is for benchmarks, not tests.
    assert 0 < end.stats["ttfa_ms"] and 0 <= end.stats["rtf"] < float("inf")
    return np.concatenate([audio.decode(f.data, msgs[0].format) for f in frames])


def is_speech(samples: np.ndarray, rate: int, text: str) -> None:
    """Loud enough, not clipped flat, and as long as speaking ``text`` takes."""
    seconds = len(samples) / rate
    words = len(text.split())
    assert 0.15 * words < seconds < 0.8 * words + 1, seconds
    rms = float(np.sqrt(np.mean(samples**2)))
    assert 0.01 < rms < 0.5, rms


@pytest.mark.parametrize("voice", [PIPER, KOKORO])
def test_speak_streams_real_speech(client: Client, voice: str):
    client.send(type="speak", id="u1", text=SENTENCE, voice=voice)
    msgs = client.utterance("u1")
    assert msgs[0].voice == voice
    samples = check_stream(msgs, "u1", 24000, 20, 2)
    is_speech(samples, 24000, SENTENCE)


def test_session_format_and_rate(client: Client):
    client.send(type="hello", v=1, sample_rate=16000, format="f32", frame_ms=40)
    ready = client.recv()
    assert isinstance(ready, protocol.Ready) and ready.format == "f32"
    client.send(type="speak", id="x", text=PARAGRAPH, voice=PIPER)
    msgs = client.utterance("x")
    samples = check_stream(msgs, "x", 16000, 40, 4)
    is_speech(samples, 16000, PARAGRAPH)
    marks = [m.text for m in msgs if isinstance(m, protocol.Mark)]
    assert len(marks) >= 3 and " ".join(marks).split() == PARAGRAPH.split()
    assert len(marks[0]) < 40  # the first unit is short so sound starts early


def test_mulaw_at_8k(client: Client):
    client.send(type="hello", v=1, sample_rate=8000, format="mulaw", frame_ms=20)
    client.recv()
    client.send(type="speak", id="m", text="Platform two.", voice=PIPER)
    samples = check_stream(client.utterance("m"), "m", 8000, 20, 1)
    is_speech(samples, 8000, "Platform two.")


def test_long_text_is_spoken_whole(client: Client):
    # One sentence with no punctuation, far over Kokoro's 510-token input limit.
    words = ("seven green boats sail past the old harbour wall and " * 14).split()
    text = " ".join(words) + "."
    client.send(type="speak", id="long", text=text, voice=PIPER)
    samples = check_stream(client.utterance("long"), "long", 24000, 20, 2)
    is_speech(samples, 24000, text)


def test_cancel_mid_utterance(client: Client):
    client.send(type="speak", id="c", text=PARAGRAPH * 3, voice=KOKORO)
    msgs = client.until(protocol.Audio)
    client.send(type="cancel", id="c")
    rest = client.utterance("c")
    end = rest[-1]
    assert end.reason == "cancelled"
    client.send(type="ping", t=1)
    after = client.until(protocol.Pong)
    assert not [m for m in after if getattr(m, "id", None) == "c"], "audio after end"
    total = sum(len(m.data) for m in msgs + rest if isinstance(m, protocol.Audio)) / 2 / 24000
    assert total < 15  # far less than the whole text (~40 s)


def test_interrupt_barges_in(client: Client):
    # Long enough that it cannot be finished when the interrupt arrives (Piper runs ~10x real time).
    client.send(type="speak", id="a", text=PARAGRAPH * 6, voice=PIPER)
    client.until(protocol.Audio)
    client.send(type="speak", id="b", text="Attention please, a new announcement.", voice=PIPER, interrupt=True)
    msgs = client.until(protocol.End)
    assert msgs[-1].id == "a" and msgs[-1].reason == "cancelled"
    check_stream(client.utterance("b"), "b", 24000, 20, 2)


def test_append_starts_before_flush(client: Client):
    client.send(type="append", id="llm", text="Sure, here is the", voice=PIPER)
    client.send(type="append", id="llm", text=" forecast for today, which looks")
    first = client.until(protocol.Audio)  # audio arrives although nothing was flushed
    assert any(isinstance(m, protocol.Start) for m in first)
    client.send(type="append", id="llm", text=" sunny and warm.")
    client.send(type="flush", id="llm")
    msgs = first + client.utterance("llm")
    marks = " ".join(m.text for m in msgs if isinstance(m, protocol.Mark))
    assert marks.split() == "Sure, here is the forecast for today, which looks sunny and warm.".split()
    check_stream(msgs, "llm", 24000, 20, 2)


def test_bad_input_gets_codes_and_the_connection_lives(server: ServerThread, client: Client):
    cases = [
        (b"\x93\x01", "bad_frame"),
        (msgpack.packb({"type": "dance"}), "unknown_type"),
        (msgpack.packb({"type": "speak", "id": "a"}), "missing_field"),
        (msgpack.packb({"type": "speak", "id": "a", "text": 7}), "bad_message"),
        (msgpack.packb({"type": "speak", "id": "a", "text": "x" * 5001}), "text_too_long"),
        (msgpack.packb({"type": "speak", "id": "a", "text": "Hi.", "voice": "x/y"}), "unknown_voice"),
        (msgpack.packb({"type": "cancel", "id": "ghost"}), "unknown_id"),
    ]
    with Client(server.url) as other:
        other.recv()
        other.send(type="speak", id="o", text=PARAGRAPH, voice=PIPER)
        for data, code in cases:
            client.ws.send(data)
            err = client.recv()
            assert isinstance(err, protocol.Error) and err.code == code, (data, err)
        client.ws.send("a text frame")
        err = client.recv()
        assert err.code == "bad_frame"
        client.send(type="speak", id="d", text="First one.", voice=PIPER)
        client.send(type="speak", id="d", text="Same id.", voice=PIPER)
        msgs = client.until(protocol.Error)
        assert msgs[-1].code == "duplicate_id" and msgs[-1].id == "d"
        client.utterance("d")
        # The other client never saw any of it.
        other_msgs = other.utterance("o")
        assert not [m for m in other_msgs if isinstance(m, protocol.Error)]
        assert other_msgs[-1].reason == "done"
    client.send(type="ping", t="still here")
    assert client.until(protocol.Pong)[-1].t == "still here"


def test_message_over_size_limit_closes_1009(server: ServerThread):
    with Client(server.url) as c:
        c.recv()
        c.ws.send(msgpack.packb({"type": "speak", "id": "big", "text": "x" * 70000}))
        with pytest.raises(ConnectionClosed) as info:
            c.recv()
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009


def test_disconnect_mid_utterance_frees_the_thread(server: ServerThread):
    worker = server.service.worker
    a = Client(server.url)
    a.recv()
    a.send(type="speak", id="a", text=PARAGRAPH * 4, voice=KOKORO)
    a.until(protocol.Audio)
    done_before = worker.jobs_done
    a.vanish()
    with Client(server.url) as b:
        b.recv()
        b.send(type="speak", id="b", text="Next please.", voice=PIPER)
        check_stream(b.utterance("b"), "b", 24000, 20, 2)
    # B's unit, and at most the unit that was running when A left; A's other ~12 were dropped.
    assert worker.jobs_done - done_before <= 2


def test_clients_share_the_thread(server: ServerThread):
    with Client(server.url) as a, Client(server.url) as b:
        a.recv(), b.recv()
        # Sentences no other test speaks, so the phrase cache cannot answer for the engine.
        sentences = PARAGRAPH.split(". ")
        a.send(type="speak", id="a", text=". ".join(f"Alpha, {x}" for x in sentences), voice=PIPER)
        b.send(type="speak", id="b", text=". ".join(f"Bravo, {x}" for x in sentences), voice=PIPER)
        ma, mb = a.utterance("a"), b.utterance("b")
        check_stream(ma, "a", 24000, 20, 2)
        check_stream(mb, "b", 24000, 20, 2)
        # Interleaved, not one after the other: B's first audio came before A was done.
        assert mb[-1].stats["ttfa_ms"] < ma[-1].stats["ttfa_ms"] + ma[-1].stats["audio_ms"] * ma[-1].stats["rtf"]


def test_http_endpoints(server: ServerThread):
    status, headers, body = fetch(server.http + "/healthz")
    assert status == 200 and body == b"ok\n"
    status, _, body = fetch(server.http + "/readyz")
    ready = json.loads(body)
    assert status == 200 and ready["ready"] is True and "loaded" in ready
    status, _, body = fetch(server.http + "/voices")
    ids = [v["id"] for v in json.loads(body)]
    assert PIPER in ids and KOKORO in ids and "kokoro/jm_kumo" in ids
    status, headers, body = fetch(server.http + "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and b"rtts" in body
    assert fetch(server.http + "/nope")[0] == 404
    assert fetch(server.http + "/../pyproject.toml")[0] == 404


def check_tts_wav(server: ServerThread, text: str, voice: str, rate: int) -> None:
    """``GET /tts`` answers a mono 16-bit WAV at ``rate`` that says ``text``."""
    q = urllib.parse.urlencode({"text": text, "voice": voice, "sample_rate": rate})
    status, headers, body = fetch(server.http + "/tts?" + q)
    assert status == 200 and headers["Content-Type"] == "audio/wav"
    with wave.open(io.BytesIO(body)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (rate, 1, 2)
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768
    is_speech(pcm, rate, text)


def test_http_tts_returns_a_wav(server: ServerThread):
    check_tts_wav(server, SENTENCE, PIPER, 22050)
    assert fetch(server.http + "/tts")[0] == 400
    assert fetch(server.http + "/tts?text=hi&voice=none")[0] == 400


def test_metrics_count_what_happened(server: ServerThread, client: Client):
    client.send(type="speak", id="m", text="Count me.", voice=PIPER)
    client.utterance("m")
    status, headers, body = fetch(server.http + "/metrics")
    text = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    for name in ("rtts_connections_open", "rtts_utterances_total", "rtts_ttfa_seconds_bucket", "rtts_rtf_bucket",
                 "rtts_queue_depth", "rtts_models_loaded"):
        assert name in text
    assert 'rtts_utterances_total{reason="done"}' in text
    # The models are loaded (the utterance just ran): the inference process is up.
    assert gauge(text, "rtts_inference_process_resident_bytes") > 50 * 2**20
    assert re.search(r"^rtts_inference_process_starts_total [1-9]", text, re.M)



def test_the_box_says_what_it_can_carry(server: ServerThread, client: Client):
    """Issue 32: /metrics and /readyz give each engine's measured RTF and the streams of it
    the inference thread carries within --admission-max-load, from what ran on this box."""
    client.send(type="speak", id="c", text="Measure me, a sentence long enough to say a rate.", voice=PIPER)
    client.utterance("c")
    text = fetch(server.http + "/metrics")[2].decode()
    metric = {m.group(1): float(m.group(2))
              for m in re.finditer(r'^(rtts_(?:engine_rtf|capacity_streams)\{engine="piper"\}) (\S+)$', text, re.M)}
    rtf, streams = metric['rtts_engine_rtf{engine="piper"}'], metric['rtts_capacity_streams{engine="piper"}']
    # The bound admission uses now: the configured one, or lower for a while where a stream
    # on this shared server underran beside others (admission_bound.py; it did once in a
    # full suite, and the gauge said 2 streams where the configured bound gives 4).
    worker, max_load = server.service.worker, server.service.admission.now()
    assert max_load <= server.config.admission_max_load
    assert 0 < rtf < 1 and rtf == pytest.approx(worker.rtf["piper"], rel=0.05)  # measured: joe-medium is ~0.05-0.2
    # Its costliest language's RTF decides (a Piper voice's English may cost more than the
    # engine's figure, on a server whose first units were few: this test run alone).
    assert streams == worker.streams("piper", max_load) <= max(1, math.floor(max_load / rtf))
    status, _, body = fetch(server.http + "/readyz")
    capacity = json.loads(body)["capacity"]
    assert status == 200 and capacity["configured_max_load"] == server.config.admission_max_load
    assert capacity["max_load"] == pytest.approx(max_load, abs=0.01)  # recovering at 0.06 a minute
    assert capacity["engines"]["piper"]["streams"] == worker.streams("piper", max_load)
    assert set(capacity["engines"]) == set(worker.rtf) >= {"piper", "kokoro"}
    assert capacity["load"] == 0 and capacity["waiting"] == 0  # nothing is being made now
    assert re.search(r"^rtts_inference_load 0\.0$", text, re.M)
    # Whether streams held back for room left the thread idle (none waited on this server
    # unless another test's streams did: the sums, whatever they are, agree).
    assert 0 <= gauge(text, "rtts_contended_idle_seconds") <= gauge(text, "rtts_contended_seconds")
    client.send(type="hello", v=1)  # a ready as of now
    ready = client.recv()
    assert isinstance(ready, protocol.Ready) and ready.capacity == {e: worker.streams(e, max_load) for e in worker.rtf}


def test_token_is_required_when_set(tmp_path):
    with ServerThread(make_config(tmp_path, token="s3cret")) as srv:
        with Client(srv.url) as c:
            c.send(type="speak", id="a", text="Hi.")
            assert c.recv().code == "unauthorized"
            with pytest.raises(ConnectionClosed) as info:
                c.recv()
            assert info.value.rcvd.code == 1008
        with Client(srv.url) as c:
            c.send(type="hello", v=1, token="s3cret")
            assert isinstance(c.recv(), protocol.Ready)
            c.send(type="speak", id="a", text="Hi there.", voice=PIPER)
            check_stream(c.utterance("a"), "a", 24000, 20, 2)


def test_idle_unload_and_reload(tmp_path):
    with ServerThread(make_config(tmp_path, idle_unload=1.0)) as srv:
        with Client(srv.url) as c:
            c.recv()
            c.send(type="speak", id="a", text="Before unload.", voice=PIPER)
            check_stream(c.utterance("a"), "a", 24000, 20, 2)
            assert PIPER in srv.service.loaded_voices()
        deadline = time.monotonic() + 20
        while srv.service.loaded_voices() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert srv.service.loaded_voices() == []
        assert json.loads(fetch(srv.http + "/readyz")[2])["loaded"] == []
        with Client(srv.url) as c:
            ready = c.recv()
            assert ready.loaded == []  # says so: the next utterance waits for a load
            c.send(type="speak", id="b", text="After unload.", voice=PIPER)
            check_stream(c.utterance("b"), "b", 24000, 20, 2)
        assert srv.service.worker.unloads >= 1
