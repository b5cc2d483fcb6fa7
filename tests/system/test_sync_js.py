"""Playing in step, the browser's side (docs/protocol.md, "Playing in step"), in Debian's
headless Chromium against a real rtts: the page's estimate of the server's clock
(static/js/clock.js, the same filter as rtts/broadcast/clock.py), the player's mapping from
AudioContext frames to shared-clock time (static/js/player.js, its `clock` messages to
the worklet), and a real kiosk that plays a channel's announcement at its `play_at`.

The worklet's timed playback (static/js/worklet.js, its arithmetic in static/js/drift.js)
runs for real in an OfflineAudioContext, which renders faster than real time and the
same way every run. The test feeds it chunks and clock mappings at chosen frames (the
context is suspended there, the messages posted, and rendering resumed: the worklet
takes them before its next quantum), and reads back the rendered output and every
message the worklet posted. Signals are impulses on silence, so where each sample went
can be read off the output itself, and tones, where a dropped or repeated sample would
be heard.
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from statistics import median
from typing import Any
from urllib.parse import urlencode

import numpy as np
import pytest
from playwright.sync_api import Page

from rtts import protocol
from tests.conftest import Client, ServerThread, make_config
from tests.system.test_browser import LONG_TEXT, PageErrors, browser, new_page, wait_ready  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

VOICE = "piper/en_US-joe-medium"
PUBLISH_TOKEN = "pub-secret"
VECTORS = Path(__file__).resolve().parents[1] / "data" / "clock_vectors.json"
RATE = 24000
QUANTUM = 128
FADE = 64
CHUNK = 480  # one 20 ms frame, as the server sends them
PREBUFFER = 1440  # the page's 60 ms
SHARED0 = 1.8e9  # shared-clock seconds at which context frame 0 is heard (a Unix time)


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
    """clock.js's ClockSync gives rtts/broadcast/clock.py OffsetFilter's estimates, errors and
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
    of frames over shared seconds, within 1000 ppm of nominal; where the output steps
    (tens of ms at once on a loaded box), the same slope as without the steps."""
    rates = blank.evaluate(
        """async (sr) => {
        const { fitRate } = await import('/js/player.js');
        // steps: {tick: seconds the output moves there, and stays moved}
        const line = (ppm, seconds, steps = {}) => {
            let moved = 0;
            return Array.from({ length: 4 * seconds + 1 }, (_, i) => {
                moved += steps[i] || 0;
                return [1e6 + i * 0.25 * sr * (1 + ppm * 1e-6), 1.8e9 + i * 0.25 + moved];
            });
        };
        return [fitRate(line(300, 9), sr), fitRate(line(300, 60), sr), fitRate(line(-300, 20), sr),
                fitRate(line(2500, 30), sr), fitRate(line(-2500, 30), sr), fitRate([], sr),
                fitRate(line(300, 20, { 40: 0.010 }), sr), fitRate(line(-300, 60, { 30: -0.008, 100: 0.040 }), sr),
                fitRate(line(300, 12, { 2: 0.010, 46: -0.010 }), sr)];
    }""",
        RATE,
    )
    assert rates[0] == RATE
    assert rates[1] == pytest.approx(RATE * (1 + 300e-6), abs=1e-6)
    assert rates[2] == pytest.approx(RATE * (1 - 300e-6), abs=1e-6)
    assert rates[3] == pytest.approx(RATE * 1.001, abs=1e-9)
    assert rates[4] == pytest.approx(RATE * 0.999, abs=1e-9)
    assert rates[5] == RATE
    # One line through a 10 ms step in 20 s would be 750 ppm off.
    assert rates[6] == pytest.approx(RATE * (1 + 300e-6), abs=1e-6)
    assert rates[7] == pytest.approx(RATE * (1 - 300e-6), abs=1e-6)
    # Steps leaving 11 s between them: still fitted (nominal until the stretches make 10 s).
    assert rates[8] == pytest.approx(RATE * (1 + 300e-6), abs=1e-6)


# A player in a real AudioContext with the real worklet, following a ClockSync fed the
# samples of a made-up server clock: shared = local * (1 + ppm) + C + step. Its `clock`
# messages are recorded as posted, each with what the clock says of the frame named, by
# the output timestamp read then.
def test_output_offset_ignores_one_odd_timestamp_and_follows_a_slip(blank: Page) -> None:
    """The output's offset is the median of the last three distinct timestamps within 1 s:
    one read a callback late (+8 ms) moves nothing; a slip (+10 ms from then on) is taken
    from its second reading; a repeated timestamp is one reading; after a silence of over
    1 s only what came since counts."""
    got = blank.evaluate("""async () => {
        const { outputOffset } = await import('/js/player.js');
        const readings = [];
        return [[0, 5], [40, 5], [80, 13], [120, 5], [160, 5], [200, 15], [200, 15], [240, 15],
                [2000, 21], [2040, 15], [2080, 21]]
            .map(([perf, off]) => outputOffset(readings, perf, off));
    }""")
    assert got == [5, 5, 5, 5, 5, 5, 5, 15, 21, 18, 21], got


# Player.heard under a stand-in context: a device callback every 10 ms, frame k*240 heard
# at 1000 + 10k ms (+ ``late`` ms for the callback ``odd`` only; + ``slip`` ms from callback
# ``slipped`` on), the context rendering 20 ms ahead; each read 1 ms after its callback,
# performance.now() a clock set with them: what is under test is the arithmetic.
HEARD = """async ({ n, odd, late, slipped, slip }) => {
    const { Player } = await import('/js/player.js');
    const player = new Player();
    const rate = 24000;
    let ts = null;
    player.ctx = { getOutputTimestamp: () => ts, currentTime: 0, baseLatency: 0, outputLatency: 0 };
    player.sampleRate = rate;
    player.status = { id: 'u', frame: 0, pos: 0, playing: true, buffered: 1e9 };
    const now = performance.now;
    const out = [];
    try {
        for (let k = 1; k <= n; k++) {
            const played = 1000 + 10 * k + (k >= slipped ? slip : 0);
            ts = { contextTime: k * 0.01, performanceTime: played + (k === odd ? late : 0) };
            player.ctx.currentTime = k * 0.01 + 0.021;
            performance.now = () => played + 1;
            out.push(player.heard('u'));
        }
    } finally {
        performance.now = now;
    }
    return out;
}"""


def test_the_position_heard_ignores_one_odd_timestamp(blank: Page) -> None:
    """Player.heard, the position the caption lights a word by, reads the output timestamps
    through the same median as the timeline: the one a callback dated 25 ms late (CI's
    loaded box, where the kiosk's highlight then read 25 ms behind what its worklet had
    played) moves nothing."""
    got = blank.evaluate(HEARD, {"n": 7, "odd": 5, "late": 25, "slipped": 99, "slip": 0})
    # Frame k*240 was played at 1000 + 10k ms; 1 ms later, 24 more; less the quantum the
    # status's frame began.
    assert got == [k * 240 + 24 - QUANTUM for k in range(1, 8)], got


def test_the_position_heard_is_never_past_what_was_rendered(blank: Page) -> None:
    """After a slip (the output 30 ms behind from the fifth callback on, as a missed device
    callback on a loaded box leaves it), the median of the last three timestamps keeps the
    mapping from before it for one reading: the position then read 30 ms ahead of what was
    heard, past what the context had even rendered (the kiosk highlight test, once in a
    suite: 32 ms ahead of its worklet). It is held to the render position (currentTime),
    then follows the slip."""
    got = blank.evaluate(HEARD, {"n": 8, "odd": 0, "late": 0, "slipped": 5, "slip": 30})
    # The fifth held to the render position (21 ms on: 504), not the stale mapping's 31 ms (744).
    assert got == [k * 240 + (504 if k == 5 else 24) - QUANTUM for k in range(1, 9)], got


MAPPING = """async ({ sr, phases }) => {
    const { ClockSync } = await import('/js/clock.js');
    const { Player } = await import('/js/player.js');
    const clock = new ClockSync();
    const player = new Player({ clock });
    await player.open(sr);
    await player.resume();
    const ppm = 300e-6, C = 1.8e9;
    let step = 0;
    const rtt = 0.03;
    // 8 exchanges over the last 40 s: the filter follows a slope once they span 30 s (and
    // they meet without one before that: 300 ppm tilts them 12 ms). A step is a new
    // estimate altogether (as after a reconnection): forgotten, then fed anew.
    const feed = () => {
        clock.reset();
        const now = clock.localMs() / 1000;
        for (let k = 7; k >= 0; k--) {
            const sent = now - k * 40 / 7 - rtt;
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
    # the measurement itself (a jump). The test's reading of the output timestamp is its
    # own, taken just after the player's: on a loaded box the timestamp is renewed between
    # the two now and then (CI: 0.04 ms apart after a 40 ms jump), so "to the measurement"
    # is within 1 ms; a slewed tick is off by the rest of the step, 3 ms or more here.
    for prev, m, error in zip(ticks, ticks[1:], ms[1:]):
        moved = (m["shared"] - prev["shared"] - (m["frame"] - prev["frame"]) / prev["r"]) * 1000
        assert abs(moved) <= 2 + 1e-3 or abs(error) < 1, (m, moved, error)

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


def assert_heard_on_time(rows: list, play_at: float) -> None:  # type: ignore[type-arg]
    """Each chunk's first sample, by the page's reading of its output timestamp (the true
    column), heard within 10 ms of play_at + pos / rate, but where the output stepped.
    On a loaded box the output slips by a device callback (10 ms) or two when Chromium's
    audio thread is held up; the page sees it some 0.1-0.5 s later (the median of its last
    three timestamps) and corrects it: softly up to 15 ms (~2.5 s for 10 ms), by a jump
    beyond. So the median is within the soft bound (15 ms), the rows off by more than
    10 ms are two seconds' worth at most, and none is off by more than three callbacks.
    (CI read a run at 20 ms; this box, running only these tests, runs of 22 and 55 rows at
    10-19 ms, and once a slip of 14 ms early in a 4 s announcement: a median of 11.8 ms.)"""
    offs = [true - (play_at + pos / RATE) for pos, _, true, _ in rows]
    assert abs(median(offs)) <= 0.015, median(offs)
    off = [(pos, round(o, 4)) for (pos, *_), o in zip(rows, offs) if abs(o) > 0.010]
    assert len(off) <= 2 * RATE // CHUNK and all(abs(o) <= 0.030 for _, o in off), off


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
        page.wait_for_function("window.rtts.clock.usable", timeout=10_000)
    # The burst at connect meets a page busy opening its AudioContext: its samples can be
    # tens of ms one way. A few more exchanges (every 2 s) give the filter better ones.
    time.sleep(6)
    # The first announcement warms the voice up and gives the server a first lead.
    warm, _ = publish(server, "Good morning.")
    for page in pages:
        played_out(page, warm.id)
    ann, sent = publish(server, "The train to the airport leaves from platform two at eleven fifteen.")
    for page in pages:
        rec = played_out(page, ann.id)
        play_at = rec["playAt"]
        assert sent < play_at < sent + page.evaluate("window.rtts.conn.ready.clock.max_lead_ms") / 1000 + 0.5
        # None of it late by more than two device callbacks: the output of a page on a
        # loaded box can slip by one or two (10 ms each) before its first sample, which is
        # then joined a few ms in (this box read 3.4 and 16.8 ms, running these tests alone).
        assert rec["lateMs"] <= 20 and rec["received"] == rec["sent"] > RATE, rec
        # All played, but for the samples the worklet dropped or doubled to keep in step:
        # one in 1024 for drift, and 240 for each device callback the output slipped by on
        # a loaded box (this box read 118 and 612 once each, running these tests alone).
        assert abs(rec["played"] - rec["received"]) <= rec["received"] / 1024 + RATE * 0.030, rec
        sync = page.evaluate("id => ({ ...window.rtts.sync, placed: window.rtts.sync.placed.get(id) })", ann.id)
        assert abs(sync["clock"]["offsetMs"]) <= 3, sync["clock"]
        assert sync["clock"]["samples"] > 0
        rows = sync["placed"]
        assert rows[0][0] == 0, rows[:3]
        # Every chunk's first sample: meant for its time, output at it by the page's clock.
        assert len(rows) >= rec["sent"] // (RATE * 20 // 1000)
        for pos, shared, _, _ in rows:
            due = play_at + pos / RATE
            # The worklet follows a changed estimate by soft corrections, ~1 ms a second (a
            # clock 200 ppm fast moves its estimate by a few ms when the filter's line
            # takes over from its median, 10 s in), and an output slipped by a device
            # callback (10 ms, on a loaded box) at ~0.4 %: this box once read 10.6 ms.
            assert abs(shared - due) < 0.020, (pos, shared - due)
        assert_heard_on_time(rows, play_at)
    # In step with each other: each page's own placement, against its due time, over its first
    # second. (One row is one reading of the page's output timestamp, which on a loaded box is
    # a few ms off now and then: CI once read the two first rows 10.6 ms apart, each within
    # 5.5 ms of its time. The median over 50 rows is what the pages play by.)
    offsets = []
    for p in pages:
        rows = p.evaluate("id => window.rtts.sync.placed.get(id)", ann.id)
        play_at = p.evaluate("id => window.rtts.stats.utterances[id].playAt", ann.id)
        offsets.append(median(true - (play_at + pos / RATE) for pos, _, true, _ in rows if pos < RATE))
    assert abs(offsets[0] - offsets[1]) <= 0.010, offsets


def test_a_high_priority_announcement_cuts_in_at_its_time(server: ServerThread, new_page) -> None:  # noqa: F811
    """A timed high-priority announcement does not flush what plays: the one it cuts goes
    on until the high one's play_at (the same instant on every kiosk) and stops there."""
    page = kiosk(server, new_page)
    page.wait_for_function("window.rtts.clock.usable", timeout=10_000)
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
    # (what came too late to be played counts: the timeline went on through it). Each
    # sample a soft correction dropped or doubled moved the count off the timeline by one:
    # none on a quiet box, ~12 ms' worth once on a box held up for 10-50 ms every second.
    sync = page.evaluate("(({ softDrops, softDups, hardSyncs, late }) => ({ softDrops, softDups, hardSyncs, late }))"
                         "(window.rtts.sync)")
    fixes = (sync["softDrops"] + sync["softDups"]) / RATE
    heard_until = cut["playAt"] + cut["played"] / RATE + cut["lateMs"] / 1000
    assert -0.010 - fixes <= heard_until - play_at <= 0.001 + fixes, (heard_until - play_at, sync, {k: (cut[k], rec[k]) for k in ("playAt", "played", "received", "lateMs", "ttfaMs", "firstSoundMs")})
    last = page.evaluate("id => window.rtts.sync.placed.get(id).at(-1)", normal.id)
    assert last[1] < play_at  # by the page's mapping (its reading of the output wobbles by ms)
    assert_heard_on_time(page.evaluate("id => window.rtts.sync.placed.get(id)", high.id), play_at)


def test_kiosk_with_sync_off_plays_as_before(server: ServerThread, new_page) -> None:  # noqa: F811
    """sync=0: no clock, no timeline, the announcement played as soon as it comes."""
    page = kiosk(server, new_page, sync="0")
    page.wait_for_function("window.rtts.player.node !== null")  # the context opens after `ready`
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


@pytest.fixture(scope="module")
def hurried(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A server that sets play_at 1 ms ahead: every announcement starts late, by about
    its time to first audio. (Its voice is loaded first: a model still to load would be
    waited for.)"""
    cfg = make_config(
        tmp_path_factory.mktemp("sync-js-late"), publish_token=PUBLISH_TOKEN, default_voice=VOICE,
        sync_lead=0.001, sync_min_lead=0.001, sync_max_lead=0.001,
    )
    with ServerThread(cfg) as srv:
        with Client(srv.url) as c:
            c.recv()
            c.send(type="speak", id="warm", text="Hello.")
            assert c.utterance("warm", timeout=120)[-1].reason == "done"
        yield srv


def test_a_late_start_joins_the_timeline_and_the_caption_follows_it(hurried: ServerThread, new_page) -> None:  # noqa: F811
    """An announcement whose start came too late joins at its position (its first samples
    dropped, lateMs), and the word lit follows the timeline, not the count of samples
    played, which is behind it by what was dropped."""
    page = kiosk(hurried, new_page)
    page.wait_for_function("window.rtts.clock.usable", timeout=10_000)
    page.evaluate("""() => { window.__heard = [];
        window.rtts.addEventListener('heard', (e) => window.__heard.push(
            [e.detail.id, e.detail.pos, window.rtts.clock.sharedS(performance.now())])); }""")
    ann, _ = publish(hurried, "Passengers for the coast should change at the central station.")
    page.wait_for_function(
        "id => { const u = window.rtts.stats.utterances[id]; return u && u.reason && window.rtts.player.status.id === null"
        " && window.rtts.stats.bufferedMs === 0 && u.played > 0; }",
        arg=ann.id, timeout=60_000,
    )
    rec = page.evaluate("id => window.rtts.stats.utterances[id]", ann.id)
    assert rec["lateMs"] > 40 and rec["words"] > 0, rec
    rows = page.evaluate("id => window.rtts.sync.placed.get(id)", ann.id)
    assert rows[0][0] > 0  # joined, not started from its beginning
    assert_heard_on_time(rows, rec["playAt"])
    heard = [h for h in page.evaluate("window.__heard") if h[0] == ann.id]
    assert len(heard) > 20
    # Each event is timed when the page's main thread gets to it, never before the sample
    # is heard; and the caption stops at what has come (a hurried stream's next chunk
    # can be due before it arrives, on a loaded box). So no event is ahead of the timeline,
    # and the median is on it; counted by samples played, every one would be behind it by
    # what was dropped (lateMs, over 40 ms), where 90 % are less than half that behind
    # (a loaded box's main thread is late now and then: this box once had 24 of 210
    # events 10-20 ms behind).
    behind = [(shared - rec["playAt"]) * RATE - pos for _, pos, shared in heard]
    assert min(behind) >= -RATE * 0.020, behind  # the output's own slip of a callback (10 ms) and its reading
    assert median(behind) <= RATE * 0.010, behind
    near = [b for b in behind if b < RATE * rec["lateMs"] / 2000]
    assert len(near) >= 0.9 * len(behind), (rec["lateMs"], behind)


# ---------------------------------------------------------------- the worklet's timed playback


# The real worklet, and one thing more for the test: an answer to a `sync` message. An
# OfflineAudioContext renders without a break between two suspensions, and messages
# posted while it is suspended may reach the worklet only after rendering has resumed;
# the answer, coming after them on the same port, says they have all been taken.
HARNESS = """
import { RttsPlayer } from "%s/js/worklet.js";
class Harness extends RttsPlayer {
  onMessage(msg) {
    if (msg.type === "sync") this.port.postMessage({ type: "synced", seq: msg.seq });
    else super.onMessage(msg);
  }
}
registerProcessor("rtts-player-test", Harness);
"""

# Renders `seconds` of the worklet in an OfflineAudioContext. `events` is
# [[t, [msg, ...]], ...]: at context time t (rounded up to a quantum by suspend()) the
# messages are posted, and taken before the quantum at that frame is rendered. An audio
# message carries its samples as base64 float32 and is posted as CHUNK-sample chunks,
# each with its `pos` when the message has one.
RENDER = """async ({ sr, seconds, prebuffer, chunk, events, harness }) => {
    const ctx = new OfflineAudioContext(1, Math.round(sr * seconds), sr);
    const code = harness.replace('%s', location.origin);
    await ctx.audioWorklet.addModule(URL.createObjectURL(new Blob([code], { type: 'text/javascript' })));
    const node = new AudioWorkletNode(ctx, 'rtts-player-test', {
        numberOfInputs: 0, outputChannelCount: [1], processorOptions: { prebuffer } });
    node.connect(ctx.destination);
    const got = [];
    let seq = 0, waiting = null;
    node.port.onmessage = (e) => {
        if (e.data.type !== 'synced') got.push(e.data);
        else if (waiting && e.data.seq === seq) waiting();
    };
    node.onprocessorerror = (e) => got.push({ type: 'processorerror', message: String(e.message || e) });
    const synced = () => new Promise((resolve) => {
        waiting = resolve;
        node.port.postMessage({ type: 'sync', seq: ++seq });
    });
    const decode = (b64) => new Float32Array(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)).buffer);
    const post = (m) => {
        if (m.type !== 'audio') return node.port.postMessage(m);
        const all = decode(m.samples);
        for (let off = 0; off < all.length; off += chunk) {
            const samples = all.slice(off, off + chunk);
            const msg = { type: 'audio', id: m.id, samples };
            if (m.pos !== undefined) msg.pos = m.pos + off;
            node.port.postMessage(msg, [samples.buffer]);
        }
    };
    for (const [t, msgs] of events) {
        ctx.suspend(t).then(async () => { msgs.forEach(post); await synced(); ctx.resume(); });
    }
    const out = (await ctx.startRendering()).getChannelData(0);
    await synced(); // every message the worklet posted while rendering is in
    const bytes = new Uint8Array(out.buffer);
    let s = '';
    for (let i = 0; i < bytes.length; i += 0x8000) {
        s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return { out: btoa(s), msgs: got };
}"""


Msg = dict[str, Any]
Events = list[tuple[float, list[Msg]]]


def b64(samples: np.ndarray) -> str:
    return base64.b64encode(samples.astype("<f4").tobytes()).decode()


def render(page: Page, seconds: float, events: Events) -> tuple[np.ndarray, list[Msg]]:
    got = page.evaluate(RENDER, {"sr": RATE, "seconds": seconds, "prebuffer": PREBUFFER, "chunk": CHUNK,
                                 "events": [[t, msgs] for t, msgs in events], "harness": HARNESS})
    errors = [m for m in got["msgs"] if m["type"] == "processorerror"]
    assert not errors, errors
    return np.frombuffer(base64.b64decode(got["out"]), dtype="<f4"), got["msgs"]


def delivered(t: float) -> int:
    """The frame at which messages posted at context time t reach the worklet."""
    return math.ceil(t * RATE / QUANTUM) * QUANTUM


def clock(frame: float, shared: float, ppm: float = 0.0) -> Msg:
    return {"type": "clock", "frame": frame, "shared": shared, "r": RATE * (1 + ppm * 1e-6)}


def target(m: Msg, play_at: float, pos: float) -> float:
    """The frame the mapping ``m`` gives sample ``pos`` (drift.targetFrame)."""
    return m["frame"] + (play_at + pos / RATE - m["shared"]) * m["r"]


def impulses(n: int, every: int, first: int = 0) -> np.ndarray:
    x = np.zeros(n, dtype=np.float32)
    x[first::every] = 1.0
    return x


def tone(n: int, hz: float = 200.0, amp: float = 0.5) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * hz * np.arange(n) / RATE)).astype(np.float32)


def peaks(out: np.ndarray, level: float = 0.5) -> np.ndarray:
    """Frames of the impulses in the output (each an isolated sample above ``level``)."""
    return np.flatnonzero(out > level)


def timed(utt: str, samples: np.ndarray, play_at: float) -> list[Msg]:
    """A whole timed utterance: its timeline, its audio from pos 0, its end."""
    return [{"type": "timeline", "id": utt, "playAt": play_at},
            {"type": "audio", "id": utt, "samples": b64(samples), "pos": 0}, {"type": "end", "id": utt}]


def status(msgs: list[Msg]) -> Msg:
    return [m for m in msgs if m["type"] == "status"][-1]


def placed(msgs: list[Msg], utt: str) -> list[tuple[int, int]]:
    """The (pos, frame) rows the statuses reported for ``utt``, in order."""
    rows = [row for m in msgs if m["type"] == "status" for row in m["placed"]]
    return [(pos, frame) for (i, pos, frame) in rows if i == utt]


def runs(rows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The rows after the first where the output frame has moved against the position:
    the first sample written after a jump, or after a sample dropped or repeated."""
    return [b for a, b in zip(rows, rows[1:]) if b[1] - b[0] != a[1] - a[0]]


def mid_chunk(rows: list[tuple[int, int]], events: Events) -> list[tuple[int, int]]:
    """The rows that begin no chunk: the first sample written after a join, a jump, or a
    sample dropped or repeated."""
    starts = set()
    for _, msgs in events:
        for m in msgs:
            if m["type"] == "audio" and "pos" in m:
                starts.update(range(m["pos"], m["pos"] + len(base64.b64decode(m["samples"])) // 4, CHUNK))
    return [r for r in rows if r[0] not in starts]


def errors_ms(out: np.ndarray, every: int, where: Callable[[int], float]) -> list[tuple[float, float]]:
    """(seconds into the output, error in ms) of each impulse, the k-th being sample
    k*every of the utterance, by ``where(pos) -> target frame``."""
    return [(f / RATE, (f - where(k * every)) / RATE * 1000) for k, f in enumerate(peaks(out))]


DRIFT = """async () => {
    const d = await import('/js/drift.js');
    const clock = { frame: 1000, shared: 1.8e9, r: 24012 };
    const f = d.targetFrame(clock, 1.8e9 + 0.5, 2400, 24000);
    return {
        frame: f, back: d.posAt(clock, 1.8e9 + 0.5, f, 24000),
        decide: [[0, 5000], [12, 5000], [13, 5000], [-13, 5000], [13, 1023], [360, 0], [361, 0], [-361, 5000],
                 [48, 499], [48, 500], [-240, 239], [-240, 240], [360, 240]]
            .map(([e, since]) => d.decide(e, since, 24000)),
        quietest: [[[0.5, 0.3, 0.01, 0.02, 0.4], 0, 5], [[0.5, 0.3, 0.01, 0.3, 0.0, 0.0], 1, 4],
                   [[0, 0, 0], 0, 3], [[0.2, -0.01, 0.01, 0.3], 0, 4]].map((args) => d.quietest(...args)),
    };
}"""


def test_drift_arithmetic(blank: Page) -> None:
    """drift.js, pure: the target frame of a sample and its inverse, the decision
    thresholds (0.5 ms and 15 ms at 24 kHz: 12 and 360 samples; one soft correction per
    1024 samples for a small error, sooner for a larger one: an error of e samples is made
    up at e a second, at most one per 240), and the quietest point (near zero and flat;
    the first of equals)."""
    got = blank.evaluate(DRIFT)
    assert got["frame"] == pytest.approx(1000 + 0.6 * 24012)
    assert got["back"] == pytest.approx(2400)
    assert [(d["kind"], d["n"]) for d in got["decide"]] == [
        ("none", 0), ("none", 0), ("drop", 1), ("dup", -1),
        ("none", 0), ("none", 0), ("hard", 361), ("hard", -361),
        ("none", 0), ("drop", 1), ("none", 0), ("dup", -1), ("drop", 1),
    ]
    # [0.5, 0.3, 0.01, 0.02, 0.4]: k=2 costs 0.01 + 0.01; within [1, 5) of the second,
    # k=4 (0 and flat) is not reached, k=2 is (0.01 + 0.29) against k=3 (0.3 + 0.3);
    # a run of zeros: the first; and a zero crossing: the sample nearer zero before it.
    assert got["quietest"] == [2, 2, 0, 1]


def test_an_impulse_at_pos_0_lands_on_its_frame(blank: Page) -> None:
    """A timed utterance waits in silence for its frame, then plays sample-accurately:
    impulses at pos 0, 2400, 4800 land where the mapping puts them (the frame rounded,
    however it falls in a quantum), with no fade on sample 0, and the worklet reports
    the start and the placements as written."""
    play_at = SHARED0 + 0.3 + 17.3 / RATE  # target frame 7217.3: mid-quantum, not on a sample
    m = clock(0, SHARED0)
    sig = impulses(9600, 2400)
    out, msgs = render(blank, 1.0, [
        (0, [m, *timed("a", sig, play_at)]),
    ])
    want = [round(target(m, play_at, p)) for p in (0, 2400, 4800, 7200)]
    assert want[0] == 7217
    assert list(peaks(out)) == want
    assert out[want[0]] == 1.0  # not faded: sample 0 on time is the utterance's own start
    assert not out[: want[0]].any()
    start = next(x for x in msgs if x["type"] == "start")
    assert (start["id"], start["frame"]) == ("a", want[0])
    assert placed(msgs, "a")[:2] == [(0, want[0]), (CHUNK, want[0] + CHUNK)]
    assert any(x["type"] == "done" and x["id"] == "a" and x["played"] == len(sig) for x in msgs)
    st = status(msgs)
    assert (st["late"], st["softDrops"], st["softDups"], st["hardSyncs"]) == (0, 0, 0, 0)


@pytest.mark.parametrize("ppm", [500, -500])
def test_a_mapping_500_ppm_off_is_followed_within_1_ms(blank: Page, ppm: int) -> None:
    """r 500 ppm off the nominal rate (a kiosk crystal that far off, or a page still
    learning it): 12 samples a second to make up, which one sample per 1024 (~23 a second)
    keeps under 1 ms all through 20 s. Fast (r > sr): samples are due later and later, so
    samples are repeated; slow: dropped."""
    play_at = SHARED0 + 0.2
    m = clock(0, SHARED0, ppm)
    every = 1200
    sig = impulses(20 * RATE, every, first=600)
    out, msgs = render(blank, 21.0, [
        (0, [m, *timed("a", sig, play_at)]),
    ])
    errs = errors_ms(out, every, lambda p: target(m, play_at, 600 + p))
    assert len(errs) == 20 * RATE // every
    worst = max(abs(e) for _, e in errs)
    assert worst < 1.0, errs[::20]
    st = status(msgs)
    fixes = st["softDups"] if ppm > 0 else st["softDrops"]
    # 500 ppm of 20 s is 240 samples, less the 12 left standing (0.5 ms is not corrected).
    assert 215 <= fixes <= 240, st
    assert st["softDrops" if ppm > 0 else "softDups"] == 0 and st["hardSyncs"] == 0, st


def test_an_8_ms_step_is_made_up_softly_within_4_s(blank: Page) -> None:
    """The mapping moves 8 ms at 3 s (a new clock estimate, or the output slipping by a
    callback on a loaded box): 192 samples behind, made up one at a time (no jump), one
    per 240 samples while more than 100 are left and then at the error a second, so in
    about 3 s (under 10 s when every correction waited 1024 samples), and then held."""
    play_at = SHARED0 + 0.2
    m0 = clock(0, SHARED0)
    t_step = 3.0
    f_step = delivered(t_step)
    m1 = clock(f_step, SHARED0 + f_step / RATE + 0.008)  # that frame is heard 8 ms later: due earlier
    every = 1200
    sig = impulses(16 * RATE, every, first=600)
    out, msgs = render(blank, 16.5, [
        (0, [m0, *timed("a", sig, play_at)]),
        (t_step, [m1]),
    ])
    # Each sample by the mapping in force when its frame came.
    errs = errors_ms(out, every, lambda p: target(m0 if target(m0, play_at, 600 + p) < f_step else m1,
                                                  play_at, 600 + p))
    before = [e for t, e in errs if t < t_step]
    after = [(t, e) for t, e in errs if t >= t_step]
    assert max(abs(e) for e in before) <= 1 / RATE * 1000, before  # on its frame, ±1 sample
    assert after[0][1] > 7, after[:3]  # the step was felt
    settled = next(t for t, e in after if abs(e) < 0.6)
    assert settled - t_step < 4, after[::10]
    assert all(abs(e) < 0.6 for t, e in after if t >= settled), after[::10]
    st = status(msgs)
    assert st["hardSyncs"] == 0 and st["softDups"] == 0, st
    assert 175 <= st["softDrops"] <= 192, st


@pytest.mark.parametrize("step_ms", [40, -40])
def test_a_40_ms_step_is_one_hard_sync(blank: Page, step_ms: int) -> None:
    """A 40 ms step in the mapping is beyond soft correction: one fade-out and a jump
    (late: skip 40 ms; early: 40 ms of silence), after which each impulse is on its new
    frame again, and nothing else happens."""
    play_at = SHARED0 + 0.2
    m0 = clock(0, SHARED0)
    t_step = 2.0
    f_step = delivered(t_step)
    m1 = clock(f_step, SHARED0 + f_step / RATE + step_ms / 1000)
    every = 1200
    sig = impulses(6 * RATE, every, first=600)
    out, msgs = render(blank, 6.5, [
        (0, [m0, *timed("a", sig, play_at)]),
        (t_step, [m1]),
    ])
    st = status(msgs)
    assert st["hardSyncs"] == 1 and st["late"] == 0, st
    frames = peaks(out)
    # Each impulse heard is on the frame of the mapping in force, ±1 sample; skipping 40 ms
    # loses the one or two impulses in it, none is heard twice.
    poss = [600 + k * every for k in range(len(sig) // every)]
    where = {round(target(m0, play_at, p)): p for p in poss if target(m0, play_at, p) < f_step}
    where.update({round(target(m1, play_at, p)): p for p in poss if target(m1, play_at, p) >= f_step})
    heard = [min(where, key=lambda w: abs(w - f)) for f in frames]
    assert all(abs(f - w) <= 1 for f, w in zip(frames, heard)), list(zip(frames, heard))
    assert len(set(heard)) == len(heard)
    assert len(frames) >= len(poss) - (2 if step_ms > 0 else 0) - 1  # the last may run past the end


def test_a_hard_sync_in_speech_waits_for_a_quiet_moment_and_fades(blank: Page) -> None:
    """In a tone with a pause in it, the jump waits (up to 200 ms) for the pause; in a
    tone with none it is made at 200 ms, faded out and in: no click either way."""
    play_at = SHARED0 + 0.2
    m0 = clock(0, SHARED0)
    t_step = 1.0
    f_step = delivered(t_step)
    m1 = clock(f_step, SHARED0 + f_step / RATE + 0.04)
    sig = tone(4 * RATE)
    pause_at = round(RATE * 0.9)  # pos 0.9 s is heard at ~1.1 s: 100 ms after the step
    gated = sig.copy()
    gated[pause_at:pause_at + 2400] = 0
    step = 0.5 * 2 * np.pi * 200 / RATE  # the largest change between two tone samples
    for name, s, when in (("gated", gated, 0.1), ("tone", sig, 0.2)):
        out, msgs = render(blank, 3.0, [
            (0, [m0, *timed(name, s, play_at)]),
            (t_step, [m1]),
        ])
        assert status(msgs)["hardSyncs"] == 1
        rows = placed(msgs, name)
        jump = next(f for p, f in runs(rows) if f > f_step)  # the run after the jump
        assert jump / RATE - t_step == pytest.approx(when, abs=0.01), (name, rows[:60])
        assert np.abs(np.diff(out)).max() < step + 2 * 0.5 / FADE, name


def test_a_late_start_joins_at_its_position(blank: Page) -> None:
    """Audio that arrives 300 ms after its time is joined where the timeline is then:
    the first sample played is the one due at that frame (nothing is played late, nothing
    replayed), faded in, and the samples passed over are counted as late."""
    play_at = SHARED0 + 0.2
    m = clock(0, SHARED0)
    every = 240
    sig = impulses(2 * RATE, every, first=120)
    t_in = 0.5
    out, msgs = render(blank, 2.5, [
        (0, [m, {"type": "timeline", "id": "a", "playAt": play_at}]),
        (t_in, [{"type": "audio", "id": "a", "samples": b64(sig), "pos": 0}, {"type": "end", "id": "a"}]),
    ])
    first_pos, first_frame = placed(msgs, "a")[0]
    lateness = delivered(t_in) - target(m, play_at, 0)
    assert abs(first_pos - lateness) <= 1, (first_pos, lateness)
    assert first_frame == delivered(t_in)
    assert status(msgs)["late"] == first_pos
    assert not out[:first_frame].any()
    # Faded in over its first FADE samples, then every impulse on its own frame.
    frames = peaks(out, 0.999)
    assert frames[0] >= first_frame + FADE
    heard = range(120 + every * math.ceil((first_pos + FADE - 120) / every), len(sig), every)
    assert len(frames) == len(heard)
    assert all(abs(f - target(m, play_at, p)) <= 1 for f, p in zip(frames, heard))


def test_an_underrun_rejoins_on_the_timeline_without_growing_the_buffer(blank: Page) -> None:
    """An utterance whose audio runs out twice: each gap is faded and counted as an
    underrun, and the audio that comes after it joins at its own frames (the samples
    already due dropped as late) as soon as 60 ms are queued beyond them: the buffer is
    not doubled as it is for an untimed stream, which cannot fall behind its time."""
    play_at = SHARED0 + 0.2
    m = clock(0, SHARED0)
    every = 240
    sig = impulses(4 * RATE, every, first=120)
    f0 = round(target(m, play_at, 0))
    events: list[tuple[float, list[dict[str, Any]]]] = [
        (0, [m, {"type": "timeline", "id": "a", "playAt": play_at},
             {"type": "audio", "id": "a", "samples": b64(sig[:RATE]), "pos": 0}]),
    ]
    # After each gap: what was due meanwhile and 2000 samples more (more than 60 ms,
    # less than twice that), the rest 50 ms later.
    gaps = []
    for start, t, end in ((RATE, 1.4, round(2.5 * RATE)), (round(2.5 * RATE), 2.9, 4 * RATE)):
        due = delivered(t) - f0
        first = {"type": "audio", "id": "a", "samples": b64(sig[start:due + 2000]), "pos": start}
        events.append((t, [first]))
        rest = [{"type": "audio", "id": "a", "samples": b64(sig[due + 2000:end]), "pos": due + 2000}]
        events.append((t + 0.05, rest + ([{"type": "end", "id": "a"}] if end == len(sig) else [])))
        gaps.append((start, t))
    out, msgs = render(blank, 4.5, events)
    st = status(msgs)
    assert st["underruns"] == 2, st
    frames = peaks(out, 0.999)
    for f in frames:  # every impulse heard is on its frame: the timeline never moved
        pos = round((f - target(m, play_at, 0)) * RATE / m["r"])
        assert (pos - 120) % every == 0, (f, pos)
    rejoins = mid_chunk(placed(msgs, "a"), events)
    assert [f for _, f in rejoins] == [delivered(t) for _, t in gaps], rejoins
    assert [p for p, _ in rejoins] == [delivered(t) - f0 for _, t in gaps]
    # Each sample was played or dropped as late: those passed over at the joins, and the
    # few left over from a quantum that ran dry (their time passed in the silence).
    done = next(x for x in msgs if x["type"] == "done")
    assert done["played"] + st["late"] == done["received"] == len(sig), (done, st)
    assert 0 <= st["late"] - sum(p - start for (p, _), (start, _) in zip(rejoins, gaps)) < 2 * FADE
    assert not out[round(target(m, play_at, RATE)):delivered(1.4)].any()  # silent in the gap


def test_soft_corrections_land_at_quiet_points(blank: Page) -> None:
    """In a 200 Hz tone, each sample dropped or repeated is one at a zero crossing (the
    quietest point of its quantum), so the output never jumps more than the tone does."""
    step = 0.5 * 2 * np.pi * 200 / RATE
    for ppm in (700, -700):
        play_at = SHARED0 + 0.2
        m = clock(0, SHARED0, ppm)
        sig = tone(5 * RATE)
        out, msgs = render(blank, 5.5, [
            (0, [m, *timed("a", sig, play_at)]),
        ])
        st = status(msgs)
        fixes = st["softDups"] + st["softDrops"]
        assert fixes > 50, st
        # The first row after a correction: the sample before it in the utterance is the
        # one dropped, or the one repeated.
        rows = runs(placed(msgs, "a"))
        assert len(rows) == fixes, (len(rows), st)
        at = np.array([abs(sig[p - 1]) for p, _ in rows])
        assert at.max() < 1.5 * step, at.max()
        # Dropping a sample at a zero crossing doubles one step there; repeating one
        # flattens one; a sample taken out of a crest would change the level.
        assert np.abs(np.diff(out)).max() < 2.05 * step


def test_untimed_chunks_play_as_today(blank: Page) -> None:
    """Chunks with no pos, or with a pos but no timeline (a server without a clock, a
    page with sync=0), go through the jitter buffer as before: nothing until 60 ms are
    queued, a fade-in, every sample in order, an underrun faded and counted and the
    buffer doubled for the restart; a clock message changes none of it."""
    sig = tone(RATE)
    for pos in (None, 0):  # no pos; a pos and no timeline

        def audio(start: int, end: int) -> Msg:
            msg = {"type": "audio", "id": "u", "samples": b64(sig[start:end])}
            return msg if pos is None else {**msg, "pos": start}

        out, msgs = render(blank, 2.0, [
            (0, [clock(0, SHARED0), audio(0, 960)]),  # 40 ms: not enough
            (0.1, [audio(960, 2400)]),
            (0.5, [audio(2400, RATE), {"type": "end", "id": "u"}]),
        ])
        f1 = delivered(0.1)
        assert not out[:f1].any()
        ramp = 1 - np.arange(FADE, 0, -1) / FADE
        assert np.allclose(out[f1:f1 + FADE], sig[:FADE] * ramp, atol=1e-7)
        assert np.array_equal(out[f1 + FADE:f1 + 2400 - FADE], sig[FADE:2400 - FADE])
        # The queue ran dry after 2400 samples: faded out over the last 64, then silence
        # until 2880 (the doubled buffer) are queued, which the 0.5 s chunk does at once.
        assert not out[f1 + 2400:delivered(0.5)].any()
        f2 = delivered(0.5)
        assert np.allclose(out[f2:f2 + FADE], sig[2400:2400 + FADE] * ramp, atol=1e-7)
        assert np.array_equal(out[f2 + FADE:f2 + RATE - 2400], sig[2400 + FADE:])
        st = status(msgs)
        assert st["underruns"] == 1 and st["late"] == 0 and st["hardSyncs"] == 0, st
        done = next(x for x in msgs if x["type"] == "done")
        assert done["played"] == done["received"] == RATE


def test_cut_at_stops_what_is_before_it_at_its_start_frame(blank: Page) -> None:
    """A high-priority timed utterance given cutAt: what plays before it goes on until
    its frame, fading out over the samples just before it, and it starts on that frame;
    what was queued before it is dropped (done, flushed) and what comes after is kept."""
    m = clock(0, SHARED0)
    cut_at = SHARED0 + 1.0 + 37 / RATE
    out, msgs = render(blank, 3.0, [
        (0, [m, *timed("low", tone(3 * RATE), SHARED0 + 0.1), *timed("low2", tone(RATE), SHARED0 + 3.2)]),
        (0.5, [{"type": "cutAt", "id": "high"}, *timed("high", impulses(RATE // 2, 2400), cut_at),
               *timed("next", impulses(2400, 2400), cut_at + 1.0)]),
    ])
    start = round(target(m, cut_at, 0))
    # The low one plays on at full level, then fades out over the FADE samples before
    # the cut's first frame.
    assert np.abs(out[start - FADE - 240:start - FADE]).max() > 0.45
    ramp = 1 - np.arange(FADE) / FADE
    assert np.all(np.abs(out[start - FADE:start]) <= 0.5 * ramp + 1e-6)
    assert np.abs(out[start - FADE:start - FADE + 12]).max() > 0  # faded, not cut short
    assert list(peaks(out)) == [start + k * 2400 for k in range(5)] + [round(target(m, cut_at + 1.0, 0))]
    done = {x["id"]: x for x in msgs if x["type"] == "done"}
    assert done["low"].get("flushed") and done["low2"].get("flushed") and done["low2"]["played"] == 0
    assert not done["high"].get("flushed") and not done["next"].get("flushed")
    step = 0.5 * 2 * np.pi * 200 / RATE
    assert np.abs(np.diff(out[: start - 1])).max() < step + 0.5 / FADE  # the fade is no click
    # A cut whose audio never comes still cuts at its frame what was there before it,
    # and only that: an utterance that came after its cutAt plays at its own time.
    out, msgs = render(blank, 3.0, [
        (0, [m, *timed("low", tone(3 * RATE), SHARED0 + 0.1)]),
        (0.3, [{"type": "timeline", "id": "ghost", "playAt": cut_at}, {"type": "cutAt", "id": "ghost"}]),
        (0.4, [*timed("after", impulses(2400, 2400), cut_at + 0.5)]),
    ])
    assert np.abs(out[start - FADE - 240:start - FADE]).max() > 0.45
    assert list(np.flatnonzero(np.abs(out[start:]) > 0.01) + start) == [round(target(m, cut_at + 0.5, 0))]
    done = {x["id"]: x for x in msgs if x["type"] == "done"}
    assert done["low"].get("flushed") and not done["after"].get("flushed")


def test_status_placements_are_bounded(blank: Page) -> None:
    """Placements go out with each status (~40 ms): a few rows each, every chunk's first
    sample reported once, in order."""
    play_at = SHARED0 + 0.1
    m = clock(0, SHARED0)
    out, msgs = render(blank, 3.0, [
        (0, [m, *timed("a", tone(2 * RATE), play_at)]),
    ])
    sizes = [len(x["placed"]) for x in msgs if x["type"] == "status"]
    assert max(sizes) <= 4, sizes
    rows = placed(msgs, "a")
    assert [p for p, _ in rows] == list(range(0, 2 * RATE, CHUNK))
    assert all(f == round(target(m, play_at, p)) for p, f in rows)


# Records, every 20 ms, how far the output timestamp's frame is from the context's frame
# counter (contextTime against performanceTime, both in s), when on the host's clock, and
# how old the timestamp is (ms; renewed every device callback, ~10 ms): it steps when the
# output moves from the device to a timer and back.
TIMESTAMPS = """(ctx) => { ctx = ctx || window.rtts.player.ctx; window.stamps = [];
    setInterval(() => { const ts = ctx.getOutputTimestamp(), now = performance.now();
        if (ts.contextTime > 0) window.stamps.push([ctx.currentTime, ts.performanceTime / 1000 - ts.contextTime,
                                                    (performance.timeOrigin + now) / 1000, now - ts.performanceTime]); },
    20); }"""

# A context that is never silent (a tone at -40 dBFS), so never handed to the timer: what
# the host's stalls alone do to output timestamps.
AUDIBLE = """async () => { const ctx = new AudioContext({ sampleRate: 24000, latencyHint: 'interactive' });
    const osc = new OscillatorNode(ctx, { frequency: 440 });
    osc.connect(new GainNode(ctx, { gain: 0.01 })).connect(ctx.destination);
    osc.start(); await ctx.resume(); window.audible = ctx; }"""


@pytest.fixture(scope="module", autouse=True)
def quiet_kiosks(server: ServerThread, browser) -> Iterator[dict[str, tuple[Page, PageErrors]]]:  # type: ignore[no-untyped-def]  # noqa: F811
    """Two kiosks on a channel nobody announces on, one in step and one with sync=0, and a
    page playing a tone, opened as the module starts and recording their output
    timestamps: the module's last test reads them once they have been silent for 33 s,
    which the tests before it fill."""
    ctx = browser.new_context()
    pages = {}
    for name, params in (("in step", {}), ("sync=0", {"sync": "0"})):
        page = ctx.new_page()
        pages[name] = (page, PageErrors(page, server_goes_away=False))
        page.goto(f"{server.http}/kiosk?{urlencode({'channel': 'quiet', **params})}")
    page = ctx.new_page()
    pages["audible"] = (page, PageErrors(page, server_goes_away=False))
    url = f"{server.http}/sync-test"
    page.route(url, lambda route: route.fulfill(content_type="text/html", body=BLANK))
    page.goto(url)
    for name, (page, _) in pages.items():
        if name == "audible":
            page.evaluate(AUDIBLE)
            page.evaluate(f"({TIMESTAMPS})(window.audible)")
            continue
        wait_ready(page)
        page.wait_for_function("window.rtts.player.node !== null")
        page.evaluate(f"({TIMESTAMPS})()")
    yield pages
    ctx.close()


def test_a_kiosk_in_step_keeps_its_output_awake(quiet_kiosks: dict[str, tuple[Page, PageErrors]]) -> None:
    """After 30 s of exact silence Chromium moves a context's output from the device to a
    timer (and back when it sounds): the output timestamps step by ~10 ms, and a kiosk's
    next announcement would begin that far out of step. A kiosk in step keeps its output
    awake (static/js/player.js, KEEP_AWAKE); one with sync=0, silent, is moved, as before.
    A loaded host that holds up Chromium's audio thread makes outputs miss a callback or
    more (a slip of +10 ms or more; CI once read the kiosk in step +10.0 ms and the one
    with sync=0 +1.9 ms from 30 s on): so the kiosk in step is judged second by second,
    on the seconds in which the host held nothing up, as a page playing a tone (never
    moved to a timer) and every page's timestamps' age say. A slip lands on other pages
    too, but not always by as many callbacks (10 ms apart, with the host's CPUs held for
    20-100 ms every 0.5 s), so no page is a reference for another's level."""
    for page, _ in quiet_kiosks.values():
        page.wait_for_function("window.stamps.length && window.stamps.at(-1)[0] > 40", timeout=50_000)
    stamps = {}
    for name, (page, errors) in quiet_kiosks.items():
        assert not errors.errors, (name, errors.errors)
        stamps[name] = page.evaluate("window.stamps")

    def bins(rows: list[list[float]]) -> dict[int, float]:  # half-second of the host's clock -> median offset
        out: dict[int, list[float]] = {}
        for _, off, wall, _ in rows:
            out.setdefault(int(wall * 2), []).append(off)
        return {b: median(offs) for b, offs in out.items()}

    # A half-second the host held the audio thread up in: the tone stepped, or a timestamp
    # read on any page was more than a callback and a half old.
    tone = bins(stamps["audible"])
    held = {b for b in tone if b - 1 in tone and abs(tone[b] - tone[b - 1]) > 0.002}
    held |= {int(wall * 2) for rows in stamps.values() for _, _, wall, age in rows if age > 15}
    steps = {}
    for name in ("in step", "sync=0"):
        rows = stamps[name]
        levels = bins(rows)
        # Its 30th second of silence on, by the host's clock.
        silent = sorted({int(wall * 2) for t, _, wall, _ in rows if 30 <= t < 60})
        steps[name] = {b: round((levels[b] - levels[b - 1]) * 1000, 2) for b in silent if b - 1 in levels}
    calm = {b: v for b, v in steps["in step"].items() if b not in held and b - 1 not in held}
    # Most half-seconds are calm on a box whose CPUs are held for 10-50 ms every 1-2 s (it
    # passed so here); one held for 20-100 ms every ~0.5 s cannot say (seconds as bins: 1
    # of 12 calm; it fails). If
    # the one the timer would take over in is held up, it says nothing; the others do.
    assert len(calm) >= 5, (sorted(held), steps)
    # In step: never moved, half-second by half-second, for as long as it was silent.
    assert all(abs(v) < 2 for v in calm.values()), (sorted(held), steps)
    # sync=0 is moved (the step this guards against, seen in the same run).
    assert max(abs(v) for v in steps["sync=0"].values()) > 4, (sorted(held), steps)
