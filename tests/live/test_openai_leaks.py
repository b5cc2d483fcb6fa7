"""Every OpenAI speech request gives its encoder back (issue 20, bug 8).

5,000 refused FLAC requests took the server's RSS from 144 to 673 MB: the encoder (an
FFmpeg muxer, whose buffers the garbage collector does not free) was made before the
request was admitted and never closed when it was refused or its client went away.
"""

from __future__ import annotations

import gc
import json
import re
import socket
import time
from collections.abc import Iterator

import openai
import pytest
import requests

from rtts.sound import codecs
from tests.conftest import ServerThread, make_config
from tests.live.test_server import PIPER, fetch

pytest.importorskip("av", reason="the codecs extra (PyAV) is part of the test install")
pytestmark = pytest.mark.slow

FORMATS = ("flac", "mp3", "aac", "opus")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    # The server runs in the test process, whose encoder count is the process's: encoders
    # that tests run earlier in the same process still hold are not this server's. Each
    # count is taken against those (once the collector has run), in any order of the suite.
    gc.collect()
    base = codecs.open_encoders()
    with ServerThread(make_config(tmp_path_factory.mktemp("oai-leaks"), phrase_cache_mb=0)) as srv:
        srv.encoders_before = base  # type: ignore[attr-defined]
        yield srv


def open_encoders(srv: ServerThread) -> float:
    text = fetch(srv.http + "/metrics")[2].decode()
    (value,) = re.findall(r"^rtts_encoders_open (\S+)$", text, re.M)
    return float(value)


def settled(srv: ServerThread, timeout: float = 30) -> float:
    """The server's own encoders still open once it is idle (or ``timeout`` passed)."""
    deadline = time.monotonic() + timeout
    while (open_encoders(srv) > srv.encoders_before or srv.service.active) and time.monotonic() < deadline:
        time.sleep(0.05)
    return open_encoders(srv) - srv.encoders_before


def test_refused_requests_leave_no_encoder_open(server: ServerThread) -> None:
    c = openai.OpenAI(base_url=server.http + "/v1", api_key="x", max_retries=0, timeout=60)
    assert settled(server) == 0
    refused = 0
    for i in range(60):
        fmt = FORMATS[i % len(FORMATS)]
        # Refused once the stream is asked for: nothing to speak, a language no voice speaks.
        text = "... !!" if i % 2 else "안녕하세요"
        with pytest.raises(openai.BadRequestError) as info:
            c.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format=fmt)  # type: ignore[arg-type]
        assert info.value.response.json()["error"]["code"] in ("bad_message", "unsupported_language")
        refused += 1
    assert refused == 60
    assert settled(server) == 0 and codecs.open_encoders() == server.encoders_before


def test_aborted_and_finished_requests_leave_no_encoder_open(server: ServerThread) -> None:
    port = server.server.port  # type: ignore[union-attr]
    for i in range(12):
        body = json.dumps({"input": "The train to Boston leaves from platform four at half past ten.",
                           "voice": PIPER, "response_format": FORMATS[i % len(FORMATS)]}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            got = b""
            while b"\r\n\r\n" not in got:
                got += sock.recv(4096)
            assert got.startswith(b"HTTP/1.1 200")
            if i % 2:  # gone with the headers only, or after the first bytes of audio
                got += sock.recv(4096)
        # Closed here, mid-body.
    assert settled(server) == 0
    c = openai.OpenAI(base_url=server.http + "/v1", api_key="x", max_retries=0, timeout=120)
    for fmt in FORMATS:
        assert len(c.audio.speech.create(model="tts-1", voice="alloy", input="Done.", response_format=fmt).read()) > 100
    assert settled(server) == 0


def test_captioned_requests_leave_no_encoder_open(server: ServerThread) -> None:
    """Kokoro-FastAPI's route too: gone mid-body, refused, streamed or whole."""
    port = server.server.port  # type: ignore[union-attr]
    for i in range(8):
        body = json.dumps({"input": "The train to Boston leaves from platform four at half past ten.",
                           "voice": "af_heart", "response_format": FORMATS[i % len(FORMATS)]}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            sock.sendall(b"POST /dev/captioned_speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            got = b""
            while b"\r\n\r\n" not in got:
                got += sock.recv(4096)
            assert got.startswith(b"HTTP/1.1 200")
            if i % 2:
                got += sock.recv(4096)
    assert settled(server) == 0
    url = server.http + "/dev/captioned_speech"
    for i, fmt in enumerate(FORMATS):
        refused = requests.post(url, json={"input": "안녕하세요", "response_format": fmt}, timeout=60)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "unsupported_language"
        done = requests.post(url, json={"input": "Done.", "voice": "af_heart", "response_format": fmt,
                                        "stream": bool(i % 2)}, timeout=120)
        lines = [json.loads(line) for line in done.text.splitlines()]
        assert done.status_code == 200 and lines and all(line["audio_format"] for line in lines)
    assert settled(server) == 0 and codecs.open_encoders() == server.encoders_before
