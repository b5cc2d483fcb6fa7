"""Playing in step, the browser's side (docs/protocol.md, "Playing in step"), in Debian's
headless Chromium against a real rtts: the page's estimate of the server's clock
(static/js/clock.js, the same filter as rtts/clock.py), the player's mapping from
AudioContext frames to shared-clock time (static/js/player.js, its `clock` messages to
the worklet), and a real kiosk that plays a channel's announcement at its `play_at`.
"""

from __future__ import annotations

import json
import time
from statistics import median
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page

from rtts import protocol

from tests.conftest import Client, ServerThread, make_config
from tests.system.test_browser import LONG_TEXT, browser, new_page, wait_ready  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

VOICE = "piper/en_US-joe-medium"
PUBLISH_TOKEN = "pub-secret"
VECTORS = Path(__file__).resolve().parents[1] / "data" / "clock_vectors.json"
RATE = 24000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    # A fixed lead of 2 s: these tests are of the page, which can place only what came in
    # time; how the server learns its lead is tested with it (tests/unit/test_timeline.py).
    cfg = make_config(
        tmp_path_factory.mktemp("sync-js"), publish_token=PUBLISH_TOKEN, default_voice=VOICE, sync_lead=2.0,
    )
    with ServerThread(cfg) as srv:
        yield srv


# An empty document with an icon (else the browser asks for /favicon.ico, a 404 that
# new_page counts as an error).
BLANK = "<!doctype html><link rel='icon' href='data:,'><title>sync</title>"


@pytest.fixture
def blank(server: ServerThread, new_page) -> Page:  # type: ignore[no-untyped-def]  # noqa: F811
    """A page of the server's origin with nothing on it, to import the modules into."""
    page = new_page()
    url = f"{server.http}/sync-test"
    page.route(url, lambda route: route.fulfill(content_type="text/html", body=BLANK))
    page.goto(url)
    return page


def test_clock_filter_on_the_shared_vectors(blank: Page) -> None:
    """clock.js's ClockSync gives rtts/clock.py OffsetFilter's estimates, errors and
    readiness on every case of tests/data/clock_vectors.json, to the last bit or nearly
    (within 1e-9 s, where a Unix time's own resolution is 2.4e-7 s)."""
    vectors = json.loads(VECTORS.read_text())
    results = blank.evaluate(
        """async (cases) => {
        const { ClockSync } = await import('/js/clock.js');
        return cases.map((c) => c.checks.map((check) => {
            const clock = new ClockSync();
            for (const [sent, server, recv] of c.samples.slice(0, check.after)) clock.add(sent, server, recv);
            return { estimate: clock.estimate(check.at), error: clock.error, ready: clock.ready,
                     samples: clock.samples.length, shared: clock.sharedS(check.at * 1000) };
        }));
    }""",
        vectors["cases"],
    )
    assert len(results) == len(vectors["cases"]) >= 7
    for case, got in zip(vectors["cases"], results):
        for check, js in zip(case["checks"], got, strict=True):
            where = (case["name"], check["after"])
            assert js["ready"] == check["ready"] and js["samples"] == check["samples"], where
            assert abs(js["estimate"] - check["estimate"]) <= 1e-9, (where, js["estimate"] - check["estimate"])
            assert abs(js["error"] - check["error"]) <= 1e-9, where
            # shared(local) = local + estimate(local), from a performance.now() reading.
            assert abs(js["shared"] - (check["at"] + check["estimate"])) <= 1e-6, where


def test_fit_rate(blank: Page) -> None:
    """The mapping's rate: the nominal one until 10 s of history, then the fitted slope
    of frames over shared seconds, within 1000 ppm of nominal."""
    rates = blank.evaluate(
        """async (sr) => {
        const { fitRate } = await import('/js/player.js');
        const line = (ppm, seconds) => Array.from({ length: 4 * seconds + 1 },
            (_, i) => [1e6 + i * 0.25 * sr * (1 + ppm * 1e-6), 1.8e9 + i * 0.25]);
        return [fitRate(line(300, 9), sr), fitRate(line(300, 60), sr), fitRate(line(-300, 20), sr),
                fitRate(line(2500, 30), sr), fitRate(line(-2500, 30), sr), fitRate([], sr)];
    }""",
        RATE,
    )
    assert rates[0] == RATE
    assert rates[1] == pytest.approx(RATE * (1 + 300e-6), abs=1e-6)
    assert rates[2] == pytest.approx(RATE * (1 - 300e-6), abs=1e-6)
    assert rates[3] == pytest.approx(RATE * 1.001, abs=1e-9)
    assert rates[4] == pytest.approx(RATE * 0.999, abs=1e-9)
    assert rates[5] == RATE


# A player in a real AudioContext with the real worklet, following a ClockSync fed the
# samples of a made-up server clock: shared = local * (1 + ppm) + C + step. Its `clock`
# messages are recorded as posted, each with what the clock says of the frame named, by
# the output timestamp read then.
MAPPING = """async ({ sr, phases }) => {
    const { ClockSync } = await import('/js/clock.js');
    const { Player } = await import('/js/player.js');
    const clock = new ClockSync();
    const player = new Player({ clock });
    await player.open(sr);
    await player.resume();
    const ppm = 300e-6, C = 1.8e9;
    let step = 0, rtt = 0.02;
    // 8 samples over the last 20 s, each batch with a lower rtt than the one before, so
    // the filter takes the newest batch (and a line: they span more than 10 s).
    const feed = () => {
        rtt -= 0.001;
        const now = clock.localMs() / 1000;
        for (let k = 7; k >= 0; k--) {
            const sent = now - k * 20 / 7 - rtt;
            const mid = sent + rtt / 2;
            clock.add(sent, mid * (1 + ppm) + C + step, sent + rtt);
        }
    };
    feed();
    const posted = [];
    const port = player.node.port;
    const post = port.postMessage.bind(port);
    port.postMessage = (msg, transfer) => {
        if (msg.type === 'clock') {
            const ts = player.ctx.getOutputTimestamp();
            const perf = ts.performanceTime + (msg.frame / sr - ts.contextTime) * 1000;
            posted.push({ ...msg, expected: clock.sharedS(perf), at: performance.now(), step });
        }
        return post(msg, transfer);
    };
    player.timeline('t', clock.sharedS(performance.now()) + 100);
    const t0 = performance.now();
    for (const [until, newStep] of phases) {
        while (performance.now() - t0 < until * 1000) await new Promise((r) => setTimeout(r, 50));
        if (newStep !== null) { step = newStep; feed(); }
    }
    await player.flush();
    await player.ctx.close();
    return posted.map((m) => ({ ...m, at: (m.at - t0) / 1000 }));
}"""


def test_mapping_follows_the_clock(blank: Page) -> None:
    """Every 250 ms a `clock` message names a frame and when it is heard on the shared
    clock; its rate is the nominal one for 10 s, then the fitted one (the made-up server
    clock runs 300 ppm fast, so a shared second is fewer frames). A 5 ms change of the
    estimate moves the mapping by at most 2 ms a tick; a 40 ms one at once. (On a busy
    box an output timestamp can be a few ms off; the slew keeps such a one out of the
    mapping, so single ticks are compared by median.)"""
    posted = blank.evaluate(MAPPING, {"sr": RATE, "phases": [[11.5, 0.005], [13, 0.045], [14, None]]})
    ticks = [m for m in posted if m["at"] > 0.01]
    gaps = [b["at"] - a["at"] for a, b in zip(ticks, ticks[1:])]
    assert 0.2 < median(gaps) < 0.3, gaps  # one every 250 ms
    ms = [(m["expected"] - m["shared"]) * 1000 for m in ticks]  # measured less mapped
    # Each tick moves the mapping by at most 2 ms from where the last one put it, or to
    # the measurement itself (a jump).
    for prev, m, error in zip(ticks, ticks[1:], ms[1:]):
        moved = (m["shared"] - prev["shared"] - (m["frame"] - prev["frame"]) / prev["r"]) * 1000
        assert abs(moved) <= 2 + 1e-3 or abs(error) < 1e-3, (m, moved, error)

    steady = [e for m, e in zip(ticks, ms) if m["at"] < 11.4]
    assert median([abs(e) for e in steady]) < 0.5, steady  # the output timestamp's frame, mapped
    early = [m["r"] for m in ticks if m["at"] < 9.5]
    late = [m["r"] for m in ticks if m["at"] > 10.9]
    assert early and late and all(r == RATE for r in early)
    assert median(late) == pytest.approx(RATE / (1 + 300e-6), abs=RATE * 50e-6), late
    assert all(abs(r / RATE - 1) <= 1000e-6 for r in late)

    # Slewed: the estimate moved 5 ms, the mapping follows, 2 ms a tick...
    soft = [e for m, e in zip(ticks, ms) if m["step"] == 0.005]
    assert soft[0] > 2.5 and median([abs(e) for e in soft[3:]]) < 0.5, soft
    # ...and past 15 ms it is taken at once.
    hard = [e for m, e in zip(ticks, ms) if m["step"] == 0.045]
    assert abs(hard[0]) < 1 and median([abs(e) for e in hard]) < 0.5, hard
    # The rate is the clock's, not bent by its steps: the history is mapped anew each tick.
    after = [m["r"] for m in ticks if m["step"] > 0]
    assert median(after) == pytest.approx(RATE / (1 + 300e-6), abs=RATE * 50e-6), after


def publish(server: ServerThread, text: str, **extra: str) -> tuple[protocol.Published, float]:
    """Publishes to channel hall; returns the answer and the Unix time it was sent."""
    with Client(server.url) as c:
        assert isinstance(c.recv(), protocol.Ready)
        sent = time.time()
        c.send(type="publish", channel="hall", text=text, token=PUBLISH_TOKEN, **extra)
        answer = c.recv()
    assert isinstance(answer, protocol.Published), answer
    return answer, sent


def played_out(page: Page, ann_id: str) -> dict:  # type: ignore[type-arg]
    page.wait_for_function(
        """id => { const u = window.rtts.stats.utterances[id];
                   return u && u.reason && u.played > 0 && window.rtts.player.status.id === null
                          && window.rtts.stats.bufferedMs === 0; }""",
        arg=ann_id,
        timeout=60_000,
    )
    return page.evaluate("id => window.rtts.stats.utterances[id]", ann_id)


def kiosk(server: ServerThread, new_page, **params: str) -> Page:  # type: ignore[no-untyped-def]  # noqa: F811
    page = new_page()
    page.goto(f"{server.http}/kiosk?{urlencode({'channel': 'hall', **params})}")
    wait_ready(page)
    page.wait_for_function("window.rtts.channels.get('hall') !== null")
    return page


def test_kiosk_plays_an_announcement_at_its_time(server: ServerThread, new_page) -> None:  # noqa: F811
    """Two kiosks, one with a clock running 200 ppm fast, follow the server's clock (one
    host: the truth is an offset of 0) and play a channel's announcement at its play_at:
    every sample placed within 10 ms of play_at + pos / rate, by each page's own reading
    of the host's clock, none of it late."""
    pages = [kiosk(server, new_page), kiosk(server, new_page, clock_skew_ppm="200")]
    for page in pages:
        assert page.evaluate("window.rtts.conn.ready.clock.source") == "host"
        page.wait_for_function("window.rtts.clock.ready", timeout=10_000)
    # The burst at connect meets a page busy opening its AudioContext: its samples can be
    # tens of ms one way. A few more exchanges (every 2 s) give the filter better ones.
    for page in pages:
        page.wait_for_function("window.rtts.clock.samples.length >= 12", timeout=30_000)
    # The first announcement warms the voice up and gives the server a first lead.
    warm, _ = publish(server, "Good morning.")
    for page in pages:
        played_out(page, warm.id)
    ann, sent = publish(server, "The train to the airport leaves from platform two at eleven fifteen.")
    for page in pages:
        rec = played_out(page, ann.id)
        play_at = rec["playAt"]
        assert sent < play_at < sent + page.evaluate("window.rtts.conn.ready.clock.max_lead_ms") / 1000 + 0.5
        assert rec["lateMs"] == 0 and rec["received"] == rec["sent"] > RATE, rec
        # All played, but for the samples the worklet dropped or doubled to keep in step
        # (one in 1024 at most).
        assert abs(rec["played"] - rec["received"]) <= rec["received"] / 1024, rec
        sync = page.evaluate("id => ({ ...window.rtts.sync, placed: window.rtts.sync.placed.get(id) })", ann.id)
        assert abs(sync["clock"]["offsetMs"]) <= 3, sync["clock"]
        assert sync["clock"]["samples"] >= 8
        rows = sync["placed"]
        assert rows[0][0] == 0, rows[:3]
        # Every chunk's first sample: meant for its time, output at it by the page's clock.
        assert len(rows) >= rec["sent"] // (RATE * 20 // 1000)
        for pos, shared, true in rows:
            due = play_at + pos / RATE
            # The worklet follows a changed estimate by soft corrections, ~1 ms a second.
            assert abs(shared - due) < 0.005, (pos, shared - due)
            assert abs(true - due) <= 0.010, (pos, true - due)
    starts = [p.evaluate("id => window.rtts.sync.placed.get(id)[0][2]", ann.id) for p in pages]
    assert abs(starts[0] - starts[1]) <= 0.010, starts


def test_a_high_priority_announcement_cuts_in_at_its_time(server: ServerThread, new_page) -> None:  # noqa: F811
    """A timed high-priority announcement does not flush what plays: the one it cuts goes
    on until the high one's play_at (the same instant on every kiosk) and stops there."""
    page = kiosk(server, new_page)
    page.wait_for_function("window.rtts.clock.ready", timeout=10_000)
    normal, _ = publish(server, LONG_TEXT)
    page.wait_for_function(
        "id => { const u = window.rtts.stats.utterances[id]; return u && u.played > 2 * 24000; }", arg=normal.id,
        timeout=60_000,
    )
    high, _ = publish(server, "Attention please. Fire drill now.", priority="high")
    rec = played_out(page, high.id)
    cut = page.evaluate("id => window.rtts.stats.utterances[id]", normal.id)
    play_at = rec["playAt"]
    assert rec["priority"] == "high" and play_at > cut["playAt"]
    # Played up to the high one's time, less its fade-out (64 samples), and no further
    # (what came too late to be played counts: the timeline went on through it).
    heard_until = cut["playAt"] + cut["played"] / RATE + cut["lateMs"] / 1000
    assert -0.010 <= heard_until - play_at <= 0.001, (heard_until - play_at, {k: (cut[k], rec[k]) for k in ("playAt", "played", "received", "lateMs", "ttfaMs", "firstSoundMs")})
    last = page.evaluate("id => window.rtts.sync.placed.get(id).at(-1)", normal.id)
    assert last[2] < play_at
    for pos, _, true in page.evaluate("id => window.rtts.sync.placed.get(id)", high.id):
        assert abs(true - (play_at + pos / RATE)) <= 0.010, (pos, true - play_at - pos / RATE)


def test_kiosk_with_sync_off_plays_as_before(server: ServerThread, new_page) -> None:  # noqa: F811
    """sync=0: no clock, no timeline, the announcement played as soon as it comes."""
    page = kiosk(server, new_page, sync="0")
    posted = []
    page.expose_function("recordPost", lambda kind: posted.append(kind))
    page.evaluate("""() => { const port = window.rtts.player.node.port, post = port.postMessage.bind(port);
                             port.postMessage = (m, t) => { recordPost(m.type + (m.pos === undefined ? '' : '+pos'));
                                                            return post(m, t); }; }""")
    ann, _ = publish(server, "Platform four is closed.")
    rec = played_out(page, ann.id)
    assert rec["playAt"] is None and rec["lateMs"] is None
    assert rec["played"] == rec["received"] == rec["sent"] > 0
    assert page.evaluate("window.rtts.sync.clock === null && window.rtts.sync.placed.size === 0")
    assert set(posted) == {"audio", "end"}, set(posted)
