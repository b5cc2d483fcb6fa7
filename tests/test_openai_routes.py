"""rtts.openai_routes on the real service and real voices, with the HTTP transport replaced
by an in-memory exchange (the same routes over real sockets: tests/test_openai_live.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from rtts import audio
from rtts.access import ConnectionCaps
from rtts.openai_routes import OpenAIRoutes

from .conftest import ServerThread, make_config
from .test_server import PIPER, is_speech

pytestmark = pytest.mark.slow
TEXT = "Platform four, for the airport."


class Exchange:
    def __init__(self, method: str, path: str, body: object = b"", headers: dict[str, str] | None = None,
                 stop_after: int | None = None) -> None:
        self.method, self.path, self.peer = method, path, "127.0.0.1"
        self.body = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.headers = {k.title(): v for k, v in (headers or {}).items()}
        self.status: int | None = None
        self.response_headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.ended = False
        self.stop_after = stop_after  # a client that goes away after this many chunks

    async def start(self, status: int, headers: dict[str, str]) -> None:
        assert self.status is None, "started twice"
        self.status, self.response_headers = status, headers

    async def send(self, data: bytes) -> None:
        assert self.status is not None and not self.ended
        if self.stop_after is not None and len(self.chunks) >= self.stop_after:
            raise ConnectionResetError("gone")
        self.chunks.append(data)

    async def end(self) -> None:
        self.ended = True

    def json(self) -> dict:  # type: ignore[type-arg]
        return json.loads(b"".join(self.chunks))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with ServerThread(make_config(tmp_path_factory.mktemp("routes"), phrase_cache_mb=0)) as srv:
        yield srv


def run(srv: ServerThread, ex: Exchange, caps: ConnectionCaps | None = None) -> Exchange:
    routes = OpenAIRoutes(srv.service, caps or ConnectionCaps(64, 16))
    srv.call(routes.serve(ex), timeout=120)
    return ex


def test_speech_streams_in_chunks_and_ends(server: ServerThread) -> None:
    ex = run(server, Exchange("POST", "/v1/audio/speech", {"input": TEXT, "voice": "alloy", "response_format": "pcm"}))
    assert ex.status == 200 and ex.ended and ex.response_headers["Content-Type"].startswith("audio/pcm")
    assert len(ex.chunks) > 10  # frame by frame, not one body
    is_speech(audio.decode(b"".join(ex.chunks), "pcm16"), 24000, TEXT)
    assert server.service.active == 0


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [({"input": TEXT, "voice": "nobody"}, 400, "unknown_voice"), ({"voice": "alloy"}, 400, "missing_field"),
     ({"input": "안녕하세요", "voice": PIPER}, 400, "unsupported_language")],
)
def test_refusals_answer_in_openais_shape_before_any_audio(server: ServerThread, body: dict, status: int, code: str) -> None:  # type: ignore[type-arg]
    ex = run(server, Exchange("POST", "/v1/audio/speech", body))
    assert ex.status == status and ex.json()["error"]["code"] == code and ex.ended


def test_routes_methods_and_caps(server: ServerThread) -> None:
    assert run(server, Exchange("GET", "/v1/nothing")).status == 404
    assert run(server, Exchange("GET", "/v1/audio/speech")).status == 405
    assert run(server, Exchange("GET", "/v1/models")).json()["object"] == "list"
    caps = ConnectionCaps(1, 1)
    caps.take("127.0.0.1")
    ex = run(server, Exchange("POST", "/v1/audio/speech", {"input": TEXT, "voice": "alloy", "response_format": "wav"}), caps)
    assert ex.status == 503 and ex.json()["error"]["type"] == "server_error"
    forbidden = Exchange("POST", "/v1/audio/speech", {"input": TEXT, "voice": "alloy"}, {"Origin": "http://evil.example"})
    assert run(server, forbidden).status == 403


def test_a_client_that_goes_away_gives_its_work_back(server: ServerThread) -> None:
    long_text = " ".join(["The next train to the airport leaves from platform two in five minutes."] * 20)
    ex = run(server, Exchange("POST", "/v1/audio/speech", {"input": long_text, "voice": PIPER, "response_format": "pcm"},
                              stop_after=5))
    assert len(ex.chunks) == 5
    server.call(asyncio.sleep(0.5))
    assert server.service.active == 0 and server.service.worker.queue_depth == 0
