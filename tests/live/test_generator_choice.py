"""A request names Kokoro's waveform generator (issue 31: "the teacher stays one option
away, a flag and a per-request choice"), on every route that takes one: a WebSocket
``hello`` or ``speak``, ``/tts?generator=``, and the OpenAI and captioned routes' body.

Two real servers: one speaks the distilled student by default (``--generator student``),
one the teacher (``auto``: the student passed no language's gates). The same request
naming a generator gives the same audio on both, sample for sample (the decoders have no
random ops, and the student's noise is seeded per run): the name, not the server, decides.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Iterator

import numpy as np
import openai
import pytest

from rtts import protocol
from rtts.sound import audio
from tests.conftest import Client, ServerThread, make_config
from tests.live.test_captions import captioned
from tests.live.test_server import fetch

pytestmark = [pytest.mark.live, pytest.mark.slow]

TEXT = "欢迎光临，请您排队。"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerThread]]:
    with (
        ServerThread(make_config(tmp_path_factory.mktemp("student"), generator="student", phrase_cache_mb=0)) as student,
        ServerThread(make_config(tmp_path_factory.mktemp("auto"), generator="auto", phrase_cache_mb=0)) as auto,
    ):
        yield {"student": student, "auto": auto}


def _speak(srv: ServerThread, **fields) -> np.ndarray:  # type: ignore[no-untyped-def]
    with Client(srv.url) as client:
        client.recv()  # ready
        client.send(type="speak", id="g", text=TEXT, **fields)
        msgs = client.utterance("g")
    end = msgs[-1]
    assert isinstance(end, protocol.End) and end.reason == "done", end
    return np.concatenate([audio.decode(m.data, "pcm16") for m in msgs if isinstance(m, protocol.Audio)])


def _tts(srv: ServerThread, **args: str) -> tuple[int, bytes]:
    status, _, body = fetch(srv.http + "/tts?" + urllib.parse.urlencode({"text": TEXT, **args}))
    return status, body


def test_a_named_generator_speaks_whatever_the_servers_default(servers) -> None:  # type: ignore[no-untyped-def]
    student, auto = servers["student"], servers["auto"]
    by_default = {name: _speak(srv) for name, srv in servers.items()}
    # The servers' own: the student's audio is not the teacher's (the teacher's first run
    # is also cut shorter, QUICK_START, so even their lengths differ).
    a, b = by_default["student"], by_default["auto"]
    assert a.size > 24000 and b.size > 24000
    assert a.size != b.size or not np.allclose(a, b, atol=0.05)
    # Named, each server speaks as the other does by default.
    assert np.array_equal(_speak(auto, generator="student"), by_default["student"])
    assert np.array_equal(_speak(student, generator="teacher"), by_default["auto"])
    # "auto" names the gates' choice (the teacher everywhere today), as the flag does.
    assert np.array_equal(_speak(student, generator="auto"), by_default["auto"])
    # A connection's hello sets it for every utterance after.
    with Client(auto.url) as client:
        client.recv()
        client.send(type="hello", v=1, generator="student")
        client.until(protocol.Ready)
        client.send(type="speak", id="h", text=TEXT)
        msgs = client.utterance("h")
    heard = np.concatenate([audio.decode(m.data, "pcm16") for m in msgs if isinstance(m, protocol.Audio)])
    assert np.array_equal(heard, by_default["student"])
    # The generator it opened for the request is counted in the memory the server reports.
    parts = json.loads(fetch(auto.http + "/readyz")[2])["memory"]["parts_mb"]
    assert "kokoro:student" in parts, parts


def test_a_bad_generator_is_refused_at_the_edge_and_the_connection_carries_on(servers) -> None:  # type: ignore[no-untyped-def]
    srv = servers["auto"]
    with Client(srv.url) as client:
        client.recv()
        client.send(type="speak", id="x", text=TEXT, generator="fast")
        error = client.until(protocol.Error)[-1]
        assert isinstance(error, protocol.Error) and error.code == "bad_message" and "generator" in error.message
        client.send(type="speak", id="y", text="你好。", generator=7)
        error = client.until(protocol.Error)[-1]
        assert isinstance(error, protocol.Error) and error.code == "bad_message"
        client.send(type="speak", id="z", text="你好。", generator="student")
        assert isinstance(client.utterance("z")[-1], protocol.End)
    status, body = _tts(srv, generator="fast")
    assert status == 400 and body.startswith(b"bad_message: generator must be one of")
    api = openai.OpenAI(base_url=srv.http + "/v1", api_key="x", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as refused:
        api.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, extra_body={"generator": "fast"})
    assert refused.value.body["code"] == "bad_message" and "generator" in refused.value.body["message"]  # type: ignore[index]


def test_every_http_route_takes_the_generator(servers) -> None:  # type: ignore[no-untyped-def]
    student, auto = servers["student"], servers["auto"]
    status, named = _tts(auto, generator="student", sample_rate="24000")
    assert status == 200
    status, own = _tts(student, sample_rate="24000")
    assert status == 200 and named == own  # the same WAV, byte for byte
    status, teacher = _tts(student, generator="teacher", sample_rate="24000")
    assert status == 200 and teacher != own
    api = openai.OpenAI(base_url=auto.http + "/v1", api_key="x", max_retries=0, timeout=120)
    pcm = api.audio.speech.create(model="tts-1", voice="kokoro/zf_xiaoxiao", input=TEXT, response_format="pcm",
                                  extra_body={"generator": "student"}).content
    assert np.array_equal(audio.decode(pcm, "pcm16"), _speak(student, voice="kokoro/zf_xiaoxiao"))
    response = captioned(auto, input=TEXT, voice="zf_xiaoxiao", response_format="pcm", stream=False, generator="student")
    assert response.status_code == 200
    answer = response.json()
    assert answer["timestamps"]
    heard = audio.decode(base64.b64decode(answer["audio"]), "pcm16")
    assert np.array_equal(heard, _speak(student, voice="kokoro/zf_xiaoxiao"))


def test_an_announcement_names_its_generator_for_every_subscriber(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """publish.generator (and /v1/announce's): the publisher's choice, for every subscriber,
    whatever each connection named for itself; a bad one refused before it is published."""
    from tests.live.test_channels_live import BEARER, CHANNEL, PUBLISH_TOKEN, all_until_end, post, subscriber

    with ServerThread(make_config(tmp_path, generator="auto", publish_token=PUBLISH_TOKEN, phrase_cache_mb=0)) as srv:
        listeners = [subscriber(srv), subscriber(srv, generator="teacher")]
        try:
            status, answer = post(srv, {"channel": CHANNEL, "text": TEXT, "generator": "student"}, BEARER)
            assert status == 202, answer
            heard = []
            for client in listeners:
                msgs = all_until_end(client, answer["id"])
                assert msgs[-1].reason == "done", msgs[-1]  # type: ignore[union-attr]
                heard.append(np.concatenate([audio.decode(m.data, "pcm16") for m in msgs if isinstance(m, protocol.Audio)]))
            assert np.array_equal(heard[0], heard[1])  # one synthesis, shared
            assert "kokoro:student" in json.loads(fetch(srv.http + "/readyz")[2])["memory"]["parts_mb"]
            status, refused = post(srv, {"channel": CHANNEL, "text": TEXT, "generator": "fast"}, BEARER)
            assert status == 400 and refused["error"] == "bad_message" and "generator" in refused["message"]
        finally:
            for client in listeners:
                client.close()
