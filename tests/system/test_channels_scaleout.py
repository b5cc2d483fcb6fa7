"""Channels across instances: two real rtts processes sharing a real redis-server
(``--bus``), kiosks connected through a real nginx (docs/deployment.md's settings), an
announcement published to one instance heard by the kiosks on both."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from rtts import protocol

from tests.conftest import Client, RedisServer, RttsProcess
from tests.system.test_nginx import NGINX, nginx_in_front, readyz

REDIS = shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NGINX is None, reason="needs nginx: apt-get install nginx"),
    pytest.mark.skipif(REDIS is None, reason="needs redis-server: apt-get install redis-server"),
]

PUBLISH_TOKEN = "pub-secret"
CHANNEL = "hall"


def kiosk(url: str, after: int | None = None) -> tuple[Client, protocol.Subscribed]:
    c = Client(url)
    assert isinstance(c.recv(), protocol.Ready)
    c.send(type="subscribe", channel=CHANNEL, **({"after": after} if after is not None else {}))
    ok = c.recv(timeout=10)
    assert isinstance(ok, protocol.Subscribed), ok
    return c, ok


def heard(c: Client, ann_id: str) -> bytes:
    msgs = c.utterance(ann_id)
    assert isinstance(msgs[0], protocol.Start) and msgs[0].channel == CHANNEL
    assert isinstance(msgs[-1], protocol.End) and msgs[-1].reason == "done"
    return b"".join(m.data for m in msgs if isinstance(m, protocol.Audio))


def test_announcement_reaches_kiosks_on_both_instances(tmp_path: Path) -> None:
    for d in ("a", "b", "redis"):
        (tmp_path / d).mkdir()
    with RedisServer(tmp_path / "redis") as redis:
        args = ("--bus", redis.url, "--publish-token", PUBLISH_TOKEN, "--trusted-proxies", "127.0.0.1", "--preload",
                "--default-voice", "piper/en_US-joe-medium")
        with RttsProcess(tmp_path / "a", *args) as a, RttsProcess(tmp_path / "b", *args) as b:
            a.wait_listening(), b.wait_listening()
            a.wait_for("loaded piper", 60), b.wait_for("loaded piper", 60)
            with nginx_in_front(tmp_path / "nginx", a.port, b.port) as url:
                kiosks = [kiosk(url)[0] for _ in range(4)]
                assert (readyz(a.port)[1]["connections"], readyz(b.port)[1]["connections"]) == (2, 2)

                # Over HTTP, straight to instance A.
                request = urllib.request.Request(
                    f"{a.http}/v1/announce", method="POST",
                    data=json.dumps({"channel": CHANNEL, "text": "The museum closes in fifteen minutes."}).encode(),
                    headers={"Authorization": f"Bearer {PUBLISH_TOKEN}", "Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=30) as r:
                    assert r.status == 202
                    first = protocol.Published(**json.loads(r.read()))
                assert first.id == f"{CHANNEL}#1"
                publisher = Client(a.url)  # and over a WebSocket
                assert isinstance(publisher.recv(), protocol.Ready)
                audio = [heard(k, first.id) for k in kiosks]
                assert all(len(x) > 24000 for x in audio)
                # Each instance synthesized it once, for its own two kiosks.
                a.wait_for(rf"channel {CHANNEL}: {CHANNEL}#1 to 2 subscribers")
                b.wait_for(rf"channel {CHANNEL}: {CHANNEL}#1 to 2 subscribers")

                # A kiosk away while the next one is published is told it missed it when it is back.
                kiosks.pop().close()
                publisher.send(type="publish", channel=CHANNEL, text="The cafe is now open.", token=PUBLISH_TOKEN)
                second = publisher.recv()
                assert isinstance(second, protocol.Published) and second.seq == 2
                for k in kiosks:
                    heard(k, second.id)
                back, ok = kiosk(url, after=first.seq)
                kiosks.append(back)
                assert (ok.seq, ok.missed) == (2, 1)

                # Both sides see each other's announcements: publish through B this time.
                other = Client(b.url)
                assert isinstance(other.recv(), protocol.Ready)
                other.send(type="publish", channel=CHANNEL, text="Goodbye.", token=PUBLISH_TOKEN)
                third = other.recv()
                assert isinstance(third, protocol.Published) and third.seq == 3
                for k in kiosks:
                    heard(k, third.id)
                for c in [*kiosks, publisher, other]:
                    c.close()
        assert "Traceback" not in a.log + b.log, a.log + b.log


def test_an_instance_cut_off_from_redis_tells_its_kiosks_what_they_missed(tmp_path: Path) -> None:
    import redis

    from tests.conftest import ServerThread, make_config

    (tmp_path / "redis").mkdir()
    with RedisServer(tmp_path / "redis") as server_redis:
        cfg = make_config(tmp_path, bus=server_redis.url, publish_token=PUBLISH_TOKEN)
        with ServerThread(cfg) as srv, redis.Redis(port=server_redis.port) as r:
            k, ok = kiosk(srv.url)
            assert (ok.seq, ok.missed) == (0, 0)
            # The instance loses its subscription; meanwhile another instance publishes one
            # (its number taken, its message gone to nobody here).
            assert r.client_kill_filter(_type="pubsub") == 1
            r.incr(f"rtts:seq:{CHANNEL}")
            told = k.recv(timeout=20)
            assert isinstance(told, protocol.Subscribed) and (told.seq, told.missed) == (1, 1), told
            # And it hears the next one.
            r_publish = Client(srv.url)
            assert isinstance(r_publish.recv(), protocol.Ready)
            r_publish.send(type="publish", channel=CHANNEL, text="Back again.", token=PUBLISH_TOKEN)
            answer = r_publish.recv()
            assert isinstance(answer, protocol.Published) and answer.seq == 2
            heard(k, answer.id)
            for c in (k, r_publish):
                c.close()
