"""The OpenAI speech API against the real server and real voices: the official ``openai``
package as the client for every response format, and a plain HTTP client for SSE."""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from rtts.sound import audio
from tests.conftest import RttsProcess, ServerThread, make_config
from tests.live.test_server import PARAGRAPH, PIPER, fetch, is_speech

av = pytest.importorskip("av", reason="the codecs extra (PyAV) is part of the test install")
pytestmark = pytest.mark.slow

TEXT = "The 10:30 train to Boston leaves from platform 4."
TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac",
         "flac": "audio/flac"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with ServerThread(make_config(tmp_path_factory.mktemp("oai"), phrase_cache_mb=0)) as srv:
        yield srv


def client(srv: ServerThread, key: str = "not-needed") -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.http + "/v1", api_key=key, max_retries=0, timeout=120)


def decode(data: bytes, fmt: str) -> np.ndarray:
    """The body as 24 kHz float samples, by FFmpeg's decoders (raw PCM by hand)."""
    if fmt == "pcm":
        return audio.decode(data, "pcm16")
    with av.open(io.BytesIO(data)) as f:
        frames = list(f.decode(audio=0))
    rate = frames[0].sample_rate
    x = np.concatenate([fr.to_ndarray().reshape(len(fr.layout.channels), -1)[0] for fr in frames])
    x = x.astype(np.float32) / (32768 if x.dtype == np.int16 else 2**31 if x.dtype == np.int32 else 1)
    return audio.Resampler(rate, 24000).process(x) if rate != 24000 else x


def done_count(srv: ServerThread) -> float:
    text = fetch(srv.http + "/metrics")[2].decode()
    m = re.search(r'^rtts_utterances_total\{reason="done"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.parametrize("fmt", list(TYPES))
def test_openai_package_streams_every_format(server: ServerThread, fmt: str) -> None:
    with client(server).audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format=fmt,  # type: ignore[arg-type]
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(TYPES[fmt])
        assert "content-length" not in response.headers  # chunked: it streams
        body = b"".join(response.iter_bytes())
    is_speech(decode(body, fmt), 24000, TEXT)


def test_the_body_starts_before_the_speech_is_synthesized(server: ServerThread) -> None:
    before = done_count(server)
    with client(server).audio.speech.with_streaming_response.create(
        model="tts-1", voice=PIPER, input=" ".join([PARAGRAPH] * 3), response_format="pcm",
    ) as response:
        chunks = response.iter_bytes()
        first = next(chunks)
        assert first and done_count(server) == before  # audio in hand, the utterance not finished
        rest = b"".join(chunks)
    assert done_count(server) == before + 1
    assert len(first + rest) > 24000 * 2 * 20  # the whole ~30 s of it


def test_speed_and_a_piper_voice_id(server: ServerThread) -> None:
    lengths = {}
    for speed in (1.0, 2.0):
        with client(server).audio.speech.with_streaming_response.create(
            model="tts-1", voice=PIPER, input=TEXT, response_format="pcm", speed=speed,
        ) as response:
            lengths[speed] = len(response.read())
    assert lengths[2.0] < 0.75 * lengths[1.0]


def test_sse_form_with_a_plain_http_client(server: ServerThread) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.server.port, timeout=120)  # type: ignore[union-attr]
    body = {"model": "gpt-4o-mini-tts", "input": TEXT, "voice": "nova", "response_format": "pcm", "stream_format": "sse"}
    conn.request("POST", "/v1/audio/speech", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type", "").startswith("text/event-stream")
    raw = r.read().decode()
    conn.close()
    events = [json.loads(block[len("data: "):]) for block in raw.split("\n\n") if block.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["input_tokens"] == len(TEXT)
    deltas = [e for e in events[:-1]]
    assert deltas and all(e["type"] == "speech.audio.delta" for e in deltas)
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    is_speech(audio.decode(pcm, "pcm16"), 24000, TEXT)


def test_errors_in_openais_shape(server: ServerThread) -> None:
    c = client(server)
    with pytest.raises(openai.BadRequestError) as info:
        c.audio.speech.create(model="tts-1", voice="no-such-voice", input=TEXT)  # type: ignore[arg-type]
    assert info.value.status_code == 400
    error = info.value.response.json()["error"]
    assert (error["code"], error["param"], error["type"]) == ("unknown_voice", "voice", "invalid_request_error")
    assert error["message"] == "no voice 'no-such-voice'; see GET /v1/audio/voices"  # not ready.voices (issue 30)
    with pytest.raises(openai.BadRequestError) as info:
        c.audio.speech.create(model="tts-1", voice="alloy", input="x" * 6000)
    assert info.value.response.json()["error"]["code"] == "text_too_long"
    with pytest.raises(openai.BadRequestError) as info:
        c.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, speed=9.0)
    assert info.value.response.json()["error"]["param"] == "speed"
    # The server carries on.
    assert len(c.audio.speech.create(model="tts-1", voice="alloy", input="Still here.", response_format="wav").read()) > 1000


MANDARIN = "各位旅客，G123次列车即将进站，请在三号站台候车。"


@pytest.mark.parametrize(("voice", "gender"), [("alloy", "female"), ("onyx", "male")])
def test_an_openai_name_reads_chinese_with_a_mandarin_voice(server: ServerThread, voice: str, gender: str) -> None:
    """Issue 30: ``alloy`` read Chinese with kokoro/af_heart, an American voice."""
    with client(server).audio.speech.with_streaming_response.create(
        model="tts-1", voice=voice, input=MANDARIN, response_format="pcm",  # type: ignore[arg-type]
    ) as response:
        spoken_by = response.headers["x-rtts-voice"]
        pcm = response.read()
    info = server.service.registry.voices[spoken_by]
    assert (info.langs[0], info.gender) == ("zh", gender), spoken_by
    assert len(pcm) > 24000  # over half a second of speech


def test_no_voice_and_auto_are_the_servers_choice(server: ServerThread) -> None:
    """Issue 30: no voice was 400 ``'voice' is required``, and "auto" 400 too."""
    c = client(server)
    zh_voice = server.service.registry.lang_voices["zh"].id
    for voice in (openai.NOT_GIVEN, "auto"):
        with c.audio.speech.with_streaming_response.create(
            model="tts-1", voice=voice, input=MANDARIN, response_format="wav",  # type: ignore[arg-type]
        ) as response:
            assert response.status_code == 200
            assert response.headers["x-rtts-voice"] == zh_voice  # as a WebSocket speak with no voice
            assert len(response.read()) > 24000
    r = http.client.HTTPConnection("127.0.0.1", server.server.port, timeout=120)  # type: ignore[union-attr]
    r.request("POST", "/v1/audio/speech", json.dumps({"input": TEXT, "response_format": "pcm"}),
              {"Content-Type": "application/json"})
    answer = r.getresponse()
    assert answer.status == 200 and answer.getheader("X-Rtts-Voice") == server.service.registry.default_voice
    is_speech(audio.decode(answer.read(), "pcm16"), 24000, TEXT)


def test_streamed_wavs_say_their_length_is_unknown_as_ffmpeg_does(server: ServerThread, tmp_path: Path) -> None:
    """Issue 30: /tts and the OpenAI route's wav carried a placeholder size that Python's
    wave read as 89,478 s and FFmpeg as a real size. Now both sizes are 0xFFFFFFFF."""
    sf = pytest.importorskip("soundfile")
    oai = client(server).audio.speech.create(model="tts-1", voice=PIPER, input=TEXT, response_format="wav").read()
    status, headers, tts = fetch(server.http + "/tts?" + urllib.parse.urlencode({"text": TEXT, "voice": PIPER}))
    assert status == 200 and headers["X-Rtts-Voice"] == PIPER
    for body in (oai, tts):
        assert body[4:8] == body[40:44] == b"\xff\xff\xff\xff"
        saved = tmp_path / "saved.wav"
        saved.write_bytes(body)
        assert sf.info(str(saved)).frames == (len(body) - 44) // 2
        samples, rate = audio.read_wav(saved)  # Python's wave: every frame there
        assert len(samples) == (len(body) - 44) // 2
        is_speech(samples, rate, TEXT)


def test_listings(server: ServerThread) -> None:
    c = client(server)
    assert {"tts-1", "tts-1-hd"} <= {m.id for m in c.models.list()}
    status, _, body = fetch(server.http + "/v1/audio/voices")
    voices = json.loads(body)["voices"]
    assert status == 200 and {PIPER, "alloy"} <= {v["id"] for v in voices}


def test_token_as_authorization_bearer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with ServerThread(make_config(tmp_path, token="s3cret")) as srv:
        with pytest.raises(openai.AuthenticationError) as info:
            client(srv, "wrong").audio.speech.create(model="tts-1", voice="alloy", input=TEXT)
        assert info.value.status_code == 401
        assert info.value.response.json()["error"]["type"] == "authentication_error"
        data = client(srv, "s3cret").audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm")
        is_speech(audio.decode(data.read(), "pcm16"), 24000, TEXT)


def test_a_client_that_goes_away_gives_its_work_back(server: ServerThread) -> None:
    import socket
    import time

    body = json.dumps({"input": " ".join([PARAGRAPH] * 6), "voice": PIPER, "response_format": "mp3"}).encode()
    with socket.create_connection(("127.0.0.1", server.server.port), timeout=60) as sock:  # type: ignore[union-attr]
        sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while b"\r\n\r\n" not in got or len(got) < 4096:
            got += sock.recv(4096)
        assert got.startswith(b"HTTP/1.1 200") and server.service.active == 1
    deadline = time.monotonic() + 30
    while (server.service.active or server.service.worker.queue_depth) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.service.active == 0 and server.service.worker.queue_depth == 0
    assert server.server.caps.total == 0  # type: ignore[union-attr]


# ---------------------------------------------------------------- a plain install

ROOT = Path(__file__).resolve().parents[2]
OPENAI_GUIDE = ROOT / "docs" / "openai.md"


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RttsProcess]:
    """``rtts serve`` as a plain ``pip install .`` runs it, without the codecs extra: an
    ``av`` package that refuses to be imported comes first on its path, in place of PyAV."""
    tmp = tmp_path_factory.mktemp("plain")
    (tmp / "no-extras" / "av").mkdir(parents=True)
    (tmp / "no-extras" / "av" / "__init__.py").write_text('raise ImportError("no PyAV: a plain install")\n')
    path = os.pathsep.join(p for p in (str(tmp / "no-extras"), os.environ.get("PYTHONPATH")) if p)
    with RttsProcess(tmp, env={"PYTHONPATH": path}) as proc:
        yield proc.wait_listening()


def post(port: int, body: bytes) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    out = r.status, r.getheader("Content-Type", ""), r.read()
    conn.close()
    return out


def test_a_plain_install_answers_the_guides_mp3_example(plain: RttsProcess) -> None:
    # The OpenAI guide's own request, byte for byte as its curl example sends it.
    guide = OPENAI_GUIDE.read_text()
    example = re.search(r"curl http://127\.0\.0\.1:8765/v1/audio/speech .*?-d '(\{.*?\})'\s*\\\s*-o speech\.mp3",
                        guide, re.S)
    assert example, "docs/openai.md's mp3 example is gone"
    request = json.loads(example.group(1))
    assert request["response_format"] == "mp3"
    status, ctype, body = post(plain.port, example.group(1).encode())
    assert status == 200, body[:300]
    assert ctype == "audio/mpeg"
    wav_status, _, wav = post(plain.port, json.dumps({**request, "response_format": "wav"}).encode())
    assert wav_status == 200
    mp3_samples, reference = decode(body, "mp3"), audio.read_wav(wav)[0]
    is_speech(mp3_samples, 24000, request["input"])
    # The whole of it: as long as the same speech as WAV, give or take LAME's padding.
    assert abs(len(mp3_samples) - len(reference)) < 24000 // 10, (len(mp3_samples), len(reference))
    # It really is a server without PyAV: Opus still needs the extra, and says so.
    status, _, refused = post(plain.port, json.dumps({**request, "response_format": "opus"}).encode())
    assert status == 400 and json.loads(refused)["error"]["code"] == "unsupported_format"
    assert "rtts[codecs]" in json.loads(refused)["error"]["message"]


def test_a_plain_install_answers_the_openai_package_without_response_format(plain: RttsProcess) -> None:
    c = openai.OpenAI(base_url=plain.http + "/v1", api_key="anything", max_retries=0, timeout=120)
    # What Open WebUI and most clients do: no response_format, so the API's default, mp3.
    with c.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=TEXT) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "audio/mpeg"
        body = response.read()
    assert json.loads(response.http_request.content) == {"model": "tts-1", "voice": "alloy", "input": TEXT}
    is_speech(decode(body, "mp3"), 24000, TEXT)


def test_mp3_comes_from_a_base_dependency() -> None:
    """What rtts.sound.codecs imports for mp3 is one of the project's own dependencies, not an extra's."""
    import tomllib

    from rtts.sound import codecs

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    assert codecs.lameenc.__name__ in base
    assert "mp3" in codecs.ALWAYS and codecs.available("mp3")
