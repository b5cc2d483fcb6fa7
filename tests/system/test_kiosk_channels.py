"""The kiosk page subscribed to a channel (``/kiosk?channel=lobby``), in Debian's headless
Chromium against a real rtts with a real voice: it captions announcements published
elsewhere, keeps its own queue, and after losing its connection subscribes again and
says what it missed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest

from rtts import protocol
from tests.conftest import Client, ServerThread, make_config
from tests.system.test_browser import browser, new_page, shoot, wait_ready  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

VOICE = "piper/en_US-joe-medium"
PUBLISH_TOKEN = "pub-secret"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    cfg = make_config(tmp_path_factory.mktemp("kiosk-channels"), publish_token=PUBLISH_TOKEN, default_voice=VOICE)
    with ServerThread(cfg) as srv:
        yield srv


def publish(server: ServerThread, text: str, **extra) -> protocol.Published:  # type: ignore[no-untyped-def]
    with Client(server.url) as c:
        assert isinstance(c.recv(), protocol.Ready)
        c.send(type="publish", channel="lobby", text=text, token=PUBLISH_TOKEN, **extra)
        answer = c.recv()
    assert isinstance(answer, protocol.Published), answer
    return answer


def members(server: ServerThread) -> int:
    ch = server.service.channels._channels.get("lobby")
    return len(ch.members) if ch is not None else 0


def caption_is(page, text: str, timeout_ms: int = 60_000) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function("t => document.getElementById('caption').textContent === t", arg=text, timeout=timeout_ms)


def test_kiosk_hears_its_channel_and_resubscribes(server: ServerThread, new_page, shoot) -> None:  # noqa: F811
    page = new_page()
    query = urlencode([("channel", "lobby"), ("title", "Lobby"), ("gap", "300")])
    page.goto(f"{server.http}/kiosk?{query}")
    wait_ready(page)
    page.wait_for_function("window.rtts.channels.get('lobby') !== null")
    assert page.locator("#channel").inner_text() == "Channel: lobby"

    first = publish(server, "The gallery closes in ten minutes.")
    caption_is(page, "The gallery closes in ten minutes.")
    rec = page.evaluate("id => window.rtts.stats.utterances[id]", first.id)
    assert rec["channel"] == "lobby" and rec["text"] == "The gallery closes in ten minutes."
    shoot(page, "kiosk-channel-1280x720.png")

    # Its own queue still works, next to the channel.
    page.evaluate("window.rtts.announce('Local message.')")
    caption_is(page, "Local message.")

    # A high-priority announcement takes over, with the high style.
    high = publish(server, "Attention please. Fire drill now.", priority="high")
    caption_is(page, "Attention please.")
    assert "high" in page.get_attribute("#caption", "class")
    page.wait_for_function(
        "id => { const u = window.rtts.stats.utterances[id]; return u && u.reason === 'done'; }", arg=high.id,
        timeout=60_000,
    )

    # The connection drops; an announcement is published while the kiosk is away.
    page.evaluate("window.rtts.conn.ws.close()")
    deadline = time.monotonic() + 10
    while members(server):
        assert time.monotonic() < deadline
        time.sleep(0.005)
    missed = publish(server, "You missed this one.")
    # Back, subscribed again (forever: the page reconnects by itself), told what it missed.
    page.wait_for_function("document.getElementById('problem').textContent.includes('Missed 1 announcement')",
                           timeout=30_000)
    assert page.evaluate("id => window.rtts.stats.utterances[id] === undefined", missed.id)
    after = publish(server, "Welcome back.")
    caption_is(page, "Welcome back.")
    assert page.evaluate("window.rtts.channels.get('lobby')") == after.seq
