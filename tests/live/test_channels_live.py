"""Channels on a live server with a real voice: one announcement, synthesized once, heard
by every subscriber (real WebSocket clients), each in its own format."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from rtts import protocol

from tests.conftest import Client, ServerThread, make_config

pytestmark = pytest.mark.slow

VOICE = "piper/en_US-joe-medium"
PUBLISH_TOKEN = "pub-secret"
CHANNEL = "lobby"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    cfg = make_config(tmp_path_factory.mktemp("channels"), publish_token=PUBLISH_TOKEN, default_voice=VOICE,
                      max_connections_per_ip=64)
    with ServerThread(cfg) as srv:
        yield srv


def subscriber(server: ServerThread, **hello) -> Client:  # type: ignore[no-untyped-def]
    c = Client(server.url)
    assert isinstance(c.recv(), protocol.Ready)
    if hello:
        c.send(type="hello", v=1, **hello)
        assert isinstance(c.recv(), protocol.Ready)
    c.send(type="subscribe", channel=CHANNEL)
    ok = c.recv()
    assert isinstance(ok, protocol.Subscribed) and ok.channel == CHANNEL, ok
    return c


def publish(client: Client, text: str, **extra) -> protocol.Published:  # type: ignore[no-untyped-def]
    client.send(type="publish", channel=CHANNEL, text=text, token=PUBLISH_TOKEN, **extra)
    answer = client.recv()
    assert isinstance(answer, protocol.Published), answer
    return answer


def post(server: ServerThread, body: object, headers: dict[str, str] | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
    """POST /v1/announce; (status, JSON answer)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"{server.http}/v1/announce", data=data, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


BEARER = {"Authorization": f"Bearer {PUBLISH_TOKEN}"}


def all_until_end(client: Client, utt_id: str) -> list[protocol.ServerMessage]:
    msgs = client.until(protocol.End)
    while not (isinstance(msgs[-1], protocol.End) and msgs[-1].id == utt_id):
        msgs += client.until(protocol.End)
    return msgs


def unique_text() -> str:
    # Never heard before on this server: the phrase cache cannot answer it.
    n = random.randrange(100, 999)
    return f"Flight {n} to Oslo is now boarding at gate {n % 40 + 1}. Please have your boarding pass ready."


def test_twenty_subscribers_hear_one_synthesis(server: ServerThread) -> None:
    formats = [{}] * 16 + [{"format": "f32", "sample_rate": 48000}] * 2 + [{"format": "mulaw", "sample_rate": 8000}] * 2
    clients = [subscriber(server, **hello) for hello in formats]
    try:
        jobs_before = server.service.worker.jobs_done
        text = unique_text()
        status, answer = post(server, {"channel": CHANNEL, "text": text, "voice": VOICE, "lang": "en"}, BEARER)
        assert status == 202, answer
        published = protocol.Published(**answer)
        assert published.id == f"{CHANNEL}#{published.seq}" and published.queue_limit == 16

        heard = [c.utterance(published.id) for c in clients]
        for msgs, hello in zip(heard, formats):
            start, end = msgs[0], msgs[-1]
            assert isinstance(start, protocol.Start) and start.channel == CHANNEL and start.text == text
            assert start.sample_rate == hello.get("sample_rate", 24000) and start.format == hello.get("format", "pcm16")
            assert isinstance(end, protocol.End) and end.reason == "done" and end.channel == CHANNEL
            assert all(m.channel == CHANNEL for m in msgs if isinstance(m, protocol.Mark))

        def pcm(msgs: list[protocol.ServerMessage]) -> bytes:
            return b"".join(m.data for m in msgs if isinstance(m, protocol.Audio))

        groups: dict[str, set[bytes]] = {}
        for msgs, hello in zip(heard, formats):
            groups.setdefault(hello.get("format", "pcm16"), set()).add(pcm(msgs))
        assert all(len(audio) == 1 for audio in groups.values()), "subscribers of one format heard different audio"
        assert all(len(next(iter(audio))) > 24000 for audio in groups.values())
        # The engine ran once: one job per text unit (the marks of any one subscriber), not 20.
        parts = sum(isinstance(m, protocol.Mark) for m in heard[0])
        assert server.service.worker.jobs_done - jobs_before == parts
        assert server.service.channels.jobs.joined >= 19 * parts
    finally:
        for c in clients:
            c.close()


def test_high_priority_interrupts_everywhere(server: ServerThread) -> None:
    clients = [subscriber(server) for _ in range(3)]
    publisher = Client(server.url)
    try:
        assert isinstance(publisher.recv(), protocol.Ready)
        long = " ".join(unique_text() for _ in range(12))
        normal = publish(publisher, long)
        for c in clients:  # every subscriber is hearing it
            msgs = c.until(protocol.Audio)
            assert any(isinstance(m, protocol.Start) and m.id == normal.id for m in msgs)
        high = publish(publisher, "Attention please. This is an emergency announcement.", priority="high")
        for c in clients:
            msgs = all_until_end(c, high.id)
            ends = {m.id: m.reason for m in msgs if isinstance(m, protocol.End)}
            assert ends == {normal.id: "cancelled", high.id: "done"}
            start = next(m for m in msgs if isinstance(m, protocol.Start))
            assert start.id == high.id and start.priority == "high"
            # Nothing of the interrupted one after the high one began.
            after = msgs[msgs.index(start):]
            assert not any(getattr(m, "id", None) == normal.id for m in after)
    finally:
        for c in [*clients, publisher]:
            c.close()


def test_a_subscriber_cannot_publish(server: ServerThread) -> None:
    c = subscriber(server)
    try:
        for token in (None, "wrong"):
            fields = {"token": token} if token else {}
            c.send(type="publish", channel=CHANNEL, text="Not from you.", **fields)
            err = c.recv()
            assert isinstance(err, protocol.Error) and err.code == "forbidden"
        c.send(type="ping", t=1)
        assert isinstance(c.recv(), protocol.Pong)  # the connection carries on
    finally:
        c.close()


def test_http_publish_needs_the_publish_token_and_says_what_is_wrong(server: ServerThread) -> None:
    good = {"channel": CHANNEL, "text": "Hello."}
    assert post(server, good)[0] == 403
    status, answer = post(server, good, {"Authorization": "Bearer wrong"})
    assert (status, answer["error"]) == (403, "forbidden")
    assert post(server, b"{not json", BEARER)[0] == 400
    assert post(server, {"text": "no channel"}, BEARER) == (400, {"error": "missing_field", "message": "give 'channel'"})
    assert post(server, {**good, "channel": "bad name!"}, BEARER)[1]["error"] == "bad_message"
    refused = post(server, {**good, "voice": "nope"}, BEARER)[1]
    # Issue 30: it said "see ready.voices", which an HTTP publisher never gets.
    assert (refused["error"], refused["message"]) == ("unknown_voice", "no voice 'nope'; see GET /voices")
    named = post(server, {**good, "lang": "ko"}, BEARER)[1]
    written = post(server, {**good, "text": "안녕하세요"}, BEARER)[1]
    assert named["error"] == written["error"] == "unsupported_language"
    assert named["message"] == written["message"]  # one wording (issue 30)
    assert post(server, {**good, "priority": "urgent"}, BEARER)[1]["error"] == "bad_message"
    assert post(server, {**good, "text": 5}, BEARER)[1]["error"] == "bad_message"


def test_with_a_token_publishing_needs_both(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = make_config(tmp_path, token="kiosk-secret", publish_token=PUBLISH_TOKEN, default_voice=VOICE)
    with ServerThread(cfg) as guarded:
        good = {"channel": CHANNEL, "text": "Hello."}
        assert post(guarded, good, BEARER)[0] == 401
        assert post(guarded, good, {**BEARER, "X-Rtts-Token": "kiosk-secret"})[0] == 202
        # A kiosk holding the token only can subscribe, not publish.
        with Client(guarded.url) as c:
            c.send(type="hello", v=1, token="kiosk-secret")
            assert isinstance(c.recv(), protocol.Ready)
            c.send(type="publish", channel=CHANNEL, text="Hello.", token="kiosk-secret")
            err = c.recv()
            assert isinstance(err, protocol.Error) and err.code == "forbidden"
