"""Channels over a real redis-server whose pub/sub anyone on it may write to (issue 20):
garbage published straight into ``rtts:announce``, a garbage ``rtts:seq:<channel>``,
a lone surrogate on every route that takes text, and a Redis that hangs while kiosks
flood subscribes. Real server, real WebSocket subscribers, a real Piper voice."""

from __future__ import annotations

import json
import shutil
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rtts import protocol
from rtts.broadcast.bus import MAX_CONNECTIONS, BusDown
from rtts.broadcast.clock import OffsetFilter
from tests.conftest import Client, RedisServer, RttsProcess, ServerThread, make_config

redis = pytest.importorskip("redis")
REDIS = shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(REDIS is None, reason="needs redis-server: apt-get install redis-server"),
]

VOICE = "piper/en_US-joe-medium"
PUBLISH_TOKEN = "pub-secret"
BEARER = {"Authorization": f"Bearer {PUBLISH_TOKEN}", "Content-Type": "application/json"}
TOPIC = "rtts:announce"


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as r:
        yield r


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[ServerThread]:
    cfg = make_config(tmp_path_factory.mktemp("srv"), bus=redis_server.url, publish_token=PUBLISH_TOKEN,
                      default_voice=VOICE, max_connections_per_ip=64)
    with ServerThread(cfg) as srv:
        yield srv


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis(port=redis_server.port) as client:
        yield client


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
    request = urllib.request.Request(url, data=body, method="POST", headers=headers or BEARER)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def subscriber(server: ServerThread, channel: str = "lobby") -> Client:
    c = Client(server.url)
    assert isinstance(c.recv(), protocol.Ready)
    c.send(type="subscribe", channel=channel)
    ok = c.recv(timeout=30)
    assert isinstance(ok, protocol.Subscribed), ok
    return c


def announce(server: ServerThread, text: str, channel: str = "lobby") -> protocol.Published:
    status, answer = post(f"{server.http}/v1/announce", json.dumps({"channel": channel, "text": text}).encode())
    assert status == 202, answer
    return protocol.Published(**answer)


def heard(c: Client, ann_id: str) -> None:
    msgs = c.utterance(ann_id)
    assert isinstance(msgs[-1], protocol.End) and msgs[-1].reason == "done", msgs[-1]
    assert sum(len(m.data) for m in msgs if isinstance(m, protocol.Audio)) > 12000


def metric(server: ServerThread, name: str) -> float:
    with urllib.request.urlopen(f"{server.http}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def readyz(server: ServerThread) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(f"{server.http}/readyz", timeout=10) as answer:
        return json.loads(answer.read())


def garbage() -> list[bytes]:
    good = {"channel": "lobby", "text": "Hi.", "voice": VOICE, "lang": None, "speed": 1.0, "priority": "normal",
            "not_before": None, "published": time.time()}

    def body(**changes: object) -> bytes:
        return b"99\n" + json.dumps({**good, **changes}).encode()

    return [
        b"\xff", b"1\n\xc3\x28", b"no number", b"1\n" + b"[" * 50_000,
        body(channel=["lobby"]), body(text=5), body(text="\ud800"), body(not_before=float("nan")),
        body(not_before=time.time() * 1000), body(channel="x" * 100_000), body(priority="urgent"),
    ]


def test_garbage_on_the_bus_is_dropped_and_the_listener_keeps_listening(server: ServerThread, r) -> None:  # type: ignore[no-untyped-def]
    """Bug 1: each of these used to end the listener for good, silently."""
    kiosk = subscriber(server)
    try:
        dropped = metric(server, "rtts_bus_messages_dropped_total")
        for data in garbage():
            r.publish(TOPIC, data)
        deadline = time.monotonic() + 10
        while metric(server, "rtts_bus_messages_dropped_total") < dropped + len(garbage()):
            assert time.monotonic() < deadline, "the garbage was not counted"
            time.sleep(0.05)
        assert r.pubsub_numsub(TOPIC) == [(TOPIC.encode(), 1)]
        assert readyz(server)["bus"] == "listening" and metric(server, "rtts_bus_up") == 1
        assert metric(server, "rtts_bus_listener_errors_total") == 0
        heard(kiosk, announce(server, "The listener is still listening.").id)
        assert r.pubsub_numsub(TOPIC) == [(TOPIC.encode(), 1)]
    finally:
        kiosk.close()


def test_a_lone_surrogate_is_refused_on_every_route(server: ServerThread, r) -> None:  # type: ignore[no-untyped-def]
    """Bug 2: "\\ud800" in JSON wedged the channel (and on the Redis bus /v1/announce never answered);
    on /v1/audio/speech it gave 200, an empty body and a traceback."""
    kiosk = subscriber(server)
    try:
        status, answer = post(f"{server.http}/v1/announce", b'{"channel": "lobby", "text": "Hi \\ud800 there."}')
        assert (status, answer["error"]) == (400, "bad_message"), answer
        status, answer = post(f"{server.http}/v1/audio/speech",
                              json.dumps({"model": "tts-1", "voice": VOICE, "input": "Hi \ud800 there.",
                                          "response_format": "wav"}).encode(),
                              {"Content-Type": "application/json"})
        assert (status, answer["error"]["code"]) == (400, "bad_message"), answer
        # The channel still plays (nothing wedged it).
        heard(kiosk, announce(server, "Nothing is wedged.").id)
    finally:
        kiosk.close()


def test_a_garbage_sequence_number_in_redis_still_answers_subscribe(server: ServerThread, r) -> None:  # type: ignore[no-untyped-def]
    """Bug 16: a ValueError escaped last_seq and the subscribe was never answered."""
    r.set("rtts:seq:spoiled", b"not a number \xff")
    with Client(server.url) as c:
        assert isinstance(c.recv(), protocol.Ready)
        c.send(type="subscribe", channel="spoiled", after=3)
        ok = c.recv(timeout=10)
        assert isinstance(ok, protocol.Subscribed) and ok.channel == "spoiled" and ok.seq == 0, ok
        c.send(type="publish", channel="spoiled", text="Hello.", token=PUBLISH_TOKEN)
        err = c.recv(timeout=10)
        assert isinstance(err, protocol.Error) and err.code == "bus_unavailable", err  # INCR refuses it too
    r.delete("rtts:seq:spoiled")


def redis_sockets(port: int) -> int:
    return sum(1 for c in psutil.Process().net_connections(kind="tcp") if c.raddr and c.raddr.port == port)


def test_subscribes_while_redis_hangs_open_a_bounded_number_of_connections(
    server: ServerThread, redis_server: RedisServer
) -> None:
    """Bug 17: every subscribe's last_seq opened a connection of its own to a hung Redis."""
    kiosks = [Client(server.url) for _ in range(8)]
    try:
        for k in kiosks:
            assert isinstance(k.recv(), protocol.Ready)
        redis_server.proc.send_signal(signal.SIGSTOP)
        try:
            for k in kiosks:  # 128 subscribes to distinct channels, all waiting on Redis at once
                for i in range(16):
                    k.send(type="subscribe", channel=f"hang-{id(k)}-{i}")
            most = 0
            answered = [0] * len(kiosks)
            deadline = time.monotonic() + 90
            while sum(answered) < 16 * len(kiosks):
                assert time.monotonic() < deadline, f"{sum(answered)} subscribes answered"
                most = max(most, redis_sockets(redis_server.port))
                for n, k in enumerate(kiosks):
                    try:
                        msg = k.recv(timeout=0.05)
                    except TimeoutError:
                        continue
                    assert isinstance(msg, protocol.Subscribed), msg
                    answered[n] += 1
            assert most <= MAX_CONNECTIONS, most
        finally:
            redis_server.proc.send_signal(signal.SIGCONT)
        assert redis_sockets(redis_server.port) <= MAX_CONNECTIONS
    finally:
        for k in kiosks:
            k.close()
    deadline = time.monotonic() + 30
    while readyz(server)["bus"] != "listening":
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_garbage_on_the_bus_then_sigterm_stops_cleanly(tmp_path: Path, redis_server: RedisServer, r) -> None:  # type: ignore[no-untyped-def]
    """Bug 1's last symptom: the listener's exception came out of shutdown (a traceback, no "stopped")."""
    with RttsProcess(tmp_path, "--bus", redis_server.url, "--publish-token", PUBLISH_TOKEN) as proc:
        proc.wait_listening()
        before = r.pubsub_numsub(TOPIC)[0][1]
        for data in garbage():
            r.publish(TOPIC, data)
        proc.wait_for(r"bus: message on rtts:announce dropped")
        assert r.pubsub_numsub(TOPIC)[0][1] == before
        assert proc.stop() == 0
    assert "Traceback" not in proc.log, proc.log
    assert proc.log.splitlines()[-1].endswith("stopped"), proc.log[-2000:]


def test_not_before_must_be_finite_and_within_a_day(server: ServerThread) -> None:
    """Bug 6 (NaN made the channel's timer spin a core) and bug 15 (a millisecond time held a slot for ever)."""
    with Client(server.url) as c:
        assert isinstance(c.recv(), protocol.Ready)
        for when in (float("nan"), float("inf"), time.time() * 1000, time.time() + 25 * 3600):
            c.send(type="publish", channel="lobby", text="Later.", token=PUBLISH_TOKEN, not_before=when)
            err = c.recv(timeout=10)
            assert isinstance(err, protocol.Error) and err.code == "bad_message", (when, err)
    status, answer = post(f"{server.http}/v1/announce", b'{"channel": "lobby", "text": "Hi.", "not_before": NaN}')
    assert (status, answer["error"]) == (400, "bad_message"), answer
    status, answer = post(f"{server.http}/v1/announce", b'{"channel": "lobby", "text": "Hi.", "not_before": 1e400}')
    assert (status, answer["error"]) == (400, "bad_message"), answer


def test_a_subscriber_with_an_unflushed_append_does_not_hold_the_channel(server: ServerThread) -> None:
    """Bug 7: its own utterance, waiting for a flush, held every announcement HOLD_S (60 s)."""
    busy, good = subscriber(server), subscriber(server)
    try:
        busy.send(type="append", id="mine", text="This sentence waits for a flush that does not come")
        started = time.monotonic()
        first = announce(server, "First of two announcements.")
        second = announce(server, "Second of two announcements.")
        heard(good, first.id)
        heard(good, second.id)
        assert time.monotonic() - started < 20
        # The busy one still gets both, after its own utterance.
        busy.send(type="flush", id="mine")
        heard(busy, "mine")
        heard(busy, first.id)
        heard(busy, second.id)
    finally:
        busy.close(), good.close()


def test_a_listener_that_fails_is_logged_counted_and_listens_again(
    server: ServerThread, r, monkeypatch, caplog  # type: ignore[no-untyped-def]
) -> None:
    """No background task dies silently: a failure the bus does not expect (a bug) is
    logged with its traceback, counted, and the listener subscribes again."""
    import rtts.broadcast.bus

    real = rtts.broadcast.bus.announcements.decode
    calls = []

    def failing_once(data: bytes, **kw):  # type: ignore[no-untyped-def]
        calls.append(data)
        if len(calls) == 1:
            raise RuntimeError("a bug in decode")
        return real(data, **kw)

    monkeypatch.setattr(rtts.broadcast.bus.announcements, "decode", failing_once)
    kiosk = subscriber(server)
    try:
        errors = metric(server, "rtts_bus_listener_errors_total")
        lost = announce(server, "Lost to the bug.")
        deadline = time.monotonic() + 10
        while metric(server, "rtts_bus_listener_errors_total") < errors + 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert "a bug in decode" in caplog.text
        while readyz(server)["bus"] != "listening":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        heard(kiosk, announce(server, "Heard after the bug.").id)
        assert lost.seq > 0
    finally:
        kiosk.close()


def test_channel_names_published_through_redis_cost_nothing_where_nobody_listens(server: ServerThread, r) -> None:  # type: ignore[no-untyped-def]
    """Bug 13: every name published through Redis stayed in memory, and each subscribe
    and close walked them all."""
    fields = {"text": "Hi.", "voice": VOICE, "lang": None, "speed": 1.0, "priority": "normal",
              "not_before": None, "published": time.time()}
    dropped = metric(server, "rtts_bus_messages_dropped_total")
    with r.pipeline(transaction=False) as pipe:
        for i in range(20_000):
            pipe.publish(TOPIC, f"{i + 1}\n".encode() + json.dumps({**fields, "channel": f"void-{i}"}).encode())
        pipe.publish(TOPIC, b"1\n" + json.dumps({**fields, "channel": "v" * 100_000}).encode())
        pipe.execute()
    kiosk = subscriber(server, "counted")
    try:
        deadline = time.monotonic() + 30
        while metric(server, "rtts_bus_messages_dropped_total") < dropped + 1:  # the last one: all read
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert server.call(_channel_count(server)) == 1
        heard(kiosk, announce(server, "Only this channel is kept.", "counted").id)
    finally:
        kiosk.close()
    deadline = time.monotonic() + 10
    while server.call(_channel_count(server)) != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)


async def _channel_count(server: ServerThread) -> int:
    return len(server.service.channels._channels)


# ---------------------------------------------------------------- playing in step


async def test_two_instances_claiming_one_announcement_agree_and_the_larger_lead_wins(redis_server: RedisServer, r) -> None:  # type: ignore[no-untyped-def]
    """docs/protocol.md "Playing in step": the first claim fixes play_at for every instance,
    covering the largest recent lead of any of them (each claim records its own), at most
    the largest lead allowed."""
    import asyncio

    from rtts.broadcast.bus import RedisBus

    a, b = RedisBus(redis_server.url, 5000), RedisBus(redis_server.url, 5000)
    try:
        r.delete("rtts:lead")
        now = time.time()
        key = f"lobby#7:{now!r}"
        got = await asyncio.gather(
            a.claim_play_at(key, now, 0.4, 0.0, max_lead=2.0), b.claim_play_at(key, now, 1.3, 0.0, max_lead=2.0)
        )
        assert got[0] == got[1]  # the first to run fixed it, for both
        # Each claim records its instance's lead: from now on, the slower instance's is covered,
        # whoever claims first.
        later = now + 10
        for n in range(8, 12):
            got = await asyncio.gather(
                a.claim_play_at(f"lobby#{n}:{later!r}", later, 0.4, 0.0, max_lead=2.0),
                b.claim_play_at(f"lobby#{n}:{later!r}", later, 1.3, 0.0, max_lead=2.0),
            )
            assert got[0] == got[1] == pytest.approx(later + 1.3, abs=1e-6)
        # Never beyond the largest lead allowed.
        assert await a.claim_play_at(f"lobby#12:{later!r}", later, 0.4, 0.0, max_lead=1.0) == pytest.approx(later + 1.0)
        # A floor holds: the announcement before it is still being heard.
        assert await b.claim_play_at(f"lobby#13:{later!r}", later, 1.3, later + 30, max_lead=2.0) == pytest.approx(
            later + 30, abs=1e-6
        )
        # The same number published again (Redis restarted without its data) is another announcement.
        assert await a.claim_play_at(f"lobby#7:{later!r}", later, 0.4, 0.0, max_lead=2.0) == pytest.approx(
            later + 1.3, abs=1e-6
        )
        assert 3000 < r.ttl(f"rtts:play:lobby#7:{later!r}") <= 3600
        # A lead not renewed for ten minutes (its instance gone) no longer counts.
        r.hset("rtts:lead", b.instance, f"1.9:{later - 601!r}")
        assert await a.claim_play_at(f"lobby#14:{later!r}", later, 0.4, 0.0, max_lead=2.0) == pytest.approx(
            later + 0.4, abs=1e-6
        )
        assert r.hget("rtts:lead", b.instance) is None
        # What anyone wrote there is not trusted.
        r.set(f"rtts:play:lobby#15:{later!r}", "soon")
        with pytest.raises(BusDown):
            await a.claim_play_at(f"lobby#15:{later!r}", later, 0.4, 0.0, max_lead=2.0)
        assert abs(await a.server_time() - time.time()) < 0.05
    finally:
        await a.stop()
        await b.stop()


async def test_a_lead_shared_without_a_claim_is_covered_by_another_instances_claim(redis_server: RedisServer, r) -> None:  # type: ignore[no-untyped-def]
    """An instance with subscribers keeps its lead in Redis between its claims (``share_lead``):
    another instance that begins an announcement first covers it; taken back, it no longer counts."""
    from rtts.broadcast.bus import RedisBus

    a, b = RedisBus(redis_server.url, 5000), RedisBus(redis_server.url, 5000)
    try:
        r.delete("rtts:lead")
        now = time.time()
        await b.share_lead(1.4, now)  # a Snapcast feeder on b: 0.4 learnt and its 1 s buffer
        assert await a.claim_play_at(f"shared#1:{now!r}", now, 0.4, 0.0, max_lead=2.0) == pytest.approx(now + 1.4)
        await b.claim_play_at(f"other#1:{now!r}", now, 0.4, 0.0, max_lead=2.0)  # b's claims keep their own field
        assert await a.claim_play_at(f"shared#2:{now!r}", now, 0.4, 0.0, max_lead=2.0) == pytest.approx(now + 1.4)
        await b.share_lead(None, now)
        assert await a.claim_play_at(f"shared#3:{now!r}", now, 0.4, 0.0, max_lead=2.0) == pytest.approx(now + 0.4)
        assert 0 < r.ttl("rtts:lead")
    finally:
        await a.stop()
        await b.stop()


def test_a_subscriber_that_writes_ahead_puts_its_instances_lead_in_redis_at_once(server: ServerThread, r) -> None:  # type: ignore[no-untyped-def]
    """A real server: a subscriber with ``ahead_ms`` (as ``rtts play --output file:FIFO``)
    puts the instance's lead, with it, in Redis before any announcement; it is taken back
    when that subscriber has gone."""
    feeder = Client(server.url)
    try:
        assert isinstance(feeder.recv(), protocol.Ready)
        feeder.send(type="subscribe", channel="zone", ahead_ms=1000)
        assert isinstance(feeder.recv(timeout=30), protocol.Subscribed)
        deadline = time.monotonic() + 10
        while not (mine := {k: v for k, v in r.hgetall("rtts:lead").items() if k.endswith(b"/subscribers")}):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ((_, value),) = mine.items()
        lead, at = (float(x) for x in value.split(b":"))
        assert 1.0 + 0.3 <= lead <= 2.0 and abs(at - time.time()) < 10  # its learnt lead and the buffer, within the bound
    finally:
        feeder.close()
    deadline = time.monotonic() + 10
    while any(k.endswith(b"/subscribers") for k in r.hgetall("rtts:lead")):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_an_announcement_starts_with_one_play_at_for_every_subscriber(server: ServerThread) -> None:
    kiosks = [subscriber(server, "timed"), subscriber(server, "timed")]
    try:
        before = time.time()
        ann = announce(server, "Playing in step.", channel="timed")
        starts = [k.utterance(ann.id)[0] for k in kiosks]
        assert all(isinstance(s, protocol.Start) for s in starts)
        play_at = {s.play_at for s in starts}  # type: ignore[union-attr]
        assert len(play_at) == 1
        (at,) = play_at
        assert before + 0.3 <= at <= time.time() + 2.0  # one lead ahead, within the bounds
        assert metric(server, "rtts_sync_claims_failed_total") == 0
        assert 0.3 <= metric(server, "rtts_sync_lead_seconds") <= 2.0
    finally:
        for k in kiosks:
            k.close()


def test_a_time_in_redis_no_instance_could_have_claimed_is_refused(server: ServerThread, r) -> None:  # type: ignore[no-untyped-def]
    """Issue 30, bug 3: ``rtts:play:<channel>#<seq>:<published>`` set by hand to now + 80,000 s
    held that announcement, and through its floor every later one, ~22 h late; now − 80,000 s
    made kiosks drop it as late. Each is refused (counted) and the instance's own time used."""
    kiosk = subscriber(server, "claims")
    try:
        refused = metric(server, "rtts_sync_claims_refused_total")
        for offset in (80_000, -80_000):
            seq, published = r.incr("rtts:seq:claims"), time.time()
            r.set(f"rtts:play:claims#{seq}:{published!r}", f"{time.time() + offset:.6f}", ex=3600)
            draft = {"channel": "claims", "text": "Mind the gap.", "voice": VOICE, "lang": None, "speed": 1.0,
                     "priority": "normal", "not_before": None, "published": published}
            r.publish(TOPIC, f"{seq}\n{json.dumps(draft)}".encode())
            start = kiosk.utterance(f"claims#{seq}")[0]
            assert isinstance(start, protocol.Start)
            # One lead (and the voice's first load) ahead: this instance's own time.
            assert published < start.play_at < time.time() + 10  # type: ignore[operator]
        assert metric(server, "rtts_sync_claims_refused_total") == refused + 2
        # Nothing carried forward: the next one is heard after the last one's audio ends.
        ann = announce(server, "Still on time.", channel="claims")
        start = kiosk.utterance(ann.id)[0]
        assert isinstance(start, protocol.Start) and start.play_at < time.time() + 10  # type: ignore[operator]
        assert metric(server, "rtts_sync_claims_refused_total") == refused + 2
        assert metric(server, "rtts_sync_claims_failed_total") == 0
    finally:
        kiosk.close()


def test_a_publisher_says_when_an_announcement_is_heard_over_http(server: ServerThread) -> None:
    """/v1/announce with ``play_at``: every subscriber's start carries that very time; a
    time in milliseconds (55,000 years ahead) is refused at the edge."""
    kiosks = [subscriber(server, "at"), subscriber(server, "at")]
    try:
        at = round(time.time() + 4.0, 3)
        status, answer = post(f"{server.http}/v1/announce",
                              json.dumps({"channel": "at", "text": "Boarding now.", "play_at": at}).encode())
        assert status == 202, answer
        # Each start as it comes, and when: handed out before it is due to be heard (the
        # whole utterance may take longer than the 4 s on a loaded box: once read after it
        # had all come, the time was past play_at in the full suite).
        starts = []
        for k in kiosks:
            start = k.until(protocol.Start)[-1]
            starts.append((start, time.time()))
        assert [(s.id, s.play_at) for s, _ in starts] == [(answer["id"], at)] * 2  # type: ignore[union-attr]
        assert all(came < at for _, came in starts), (starts, at)
        status, answer = post(f"{server.http}/v1/announce",
                              json.dumps({"channel": "at", "text": "Never.", "play_at": at * 1000}).encode())
        assert status == 400 and answer["error"] == "bad_message" and "play_at" in answer["message"]
    finally:
        for k in kiosks:
            k.close()


@pytest.mark.parametrize("source", ["host", "bus"])
def test_a_wrong_host_clock_is_what_kiosks_follow_unless_the_bus_keeps_time(
    tmp_path: Path, redis_server: RedisServer, monkeypatch, source: str  # type: ignore[no-untyped-def]
) -> None:
    """RTTS_TEST_CLOCK_SKEW_MS makes this instance's host clock 30 ms fast; with
    --shared-clock bus it follows the Redis server's (here, the true time) instead."""
    monkeypatch.setenv("RTTS_TEST_CLOCK_SKEW_MS", "30")
    cfg = make_config(tmp_path, bus=redis_server.url, shared_clock=source)
    with ServerThread(cfg) as srv:
        c = Client(srv.url)
        try:
            ready = c.recv()
            assert isinstance(ready, protocol.Ready) and ready.clock == {"source": source, "max_lead_ms": 2000}
            time.sleep(1.0)  # the bus clock's first burst
            # Read as a kiosk reads it, through the filter the pages share (an intersection of
            # what each exchange allows): the lowest round trip of five once read 8.7 ms for
            # 30 under the full suite, all five slow on one side. Exchanges go on until the
            # bound is tight; the truth is within it whatever the box's load.
            ahead = OffsetFilter()
            for _ in range(200):
                sent = time.time()
                c.send(type="ping", t=1)
                pong = c.until(protocol.Pong)[-1]
                ahead.add(sent, pong.server_time, time.time())  # type: ignore[arg-type]
                if ahead.samples >= 5 and ahead.error <= 0.004:
                    break
            assert ahead.error <= 0.004, f"no exchange of 200 was fast both ways: bound {ahead.error * 1000:.1f} ms"
            want = 0.030 if source == "host" else 0.0
            assert abs(ahead.estimate(time.time()) - want) <= ahead.error + 0.001
            if source == "host":
                assert metric(srv, "rtts_clock_offset_seconds") == 0.0
            else:
                assert metric(srv, "rtts_clock_offset_seconds") == pytest.approx(-0.030, abs=0.005)
        finally:
            c.close()
