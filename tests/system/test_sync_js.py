"""Playing in step, the browser's side, in Debian's headless Chromium.

The worklet's timed playback (static/js/worklet.js, its arithmetic in static/js/drift.js):
the real worklet runs in an OfflineAudioContext, which renders faster than real time and
the same way every run. The test feeds it chunks and clock mappings at chosen frames
(the context is suspended there, the messages posted, and rendering resumed: the worklet
takes them before its next quantum), and reads back the rendered output and every
message the worklet posted. Signals are impulses on silence, so where each sample went
can be read off the output itself, and tones, where a dropped or repeated sample would
be heard.
"""

from __future__ import annotations

import base64
import functools
import math
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Page

from tests.system.test_browser import browser, new_page  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

STATIC = Path(__file__).resolve().parents[2] / "static"
SR = 24000
QUANTUM = 128
FADE = 64
CHUNK = 480  # one 20 ms frame, as the server sends them
PREBUFFER = 1440  # the page's 60 ms
SHARED0 = 1.8e9  # shared-clock seconds at which context frame 0 is heard (a Unix time)

# ---------------------------------------------------------------- the worklet's timed playback


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def static_http() -> Iterator[str]:
    """static/ over HTTP on 127.0.0.1 (a secure context, as AudioWorklet needs): the
    modules as the server serves them, without a server's voices."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(STATIC)))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    thread.join(10)
    srv.server_close()


@pytest.fixture
def worklet_page(static_http: str, new_page) -> Page:  # type: ignore[no-untyped-def]  # noqa: F811
    """An empty page of that origin (with an icon: a /favicon.ico 404 is a console error)."""
    page = new_page()
    url = f"{static_http}/worklet-test"
    blank = "<!doctype html><link rel='icon' href='data:,'><title>worklet</title>"
    page.route(url, lambda route: route.fulfill(content_type="text/html", body=blank))
    page.goto(url)
    return page


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
    got = page.evaluate(RENDER, {"sr": SR, "seconds": seconds, "prebuffer": PREBUFFER, "chunk": CHUNK,
                                 "events": [[t, msgs] for t, msgs in events], "harness": HARNESS})
    errors = [m for m in got["msgs"] if m["type"] == "processorerror"]
    assert not errors, errors
    return np.frombuffer(base64.b64decode(got["out"]), dtype="<f4"), got["msgs"]


def delivered(t: float) -> int:
    """The frame at which messages posted at context time t reach the worklet."""
    return math.ceil(t * SR / QUANTUM) * QUANTUM


def clock(frame: float, shared: float, ppm: float = 0.0) -> Msg:
    return {"type": "clock", "frame": frame, "shared": shared, "r": SR * (1 + ppm * 1e-6)}


def target(m: Msg, play_at: float, pos: float) -> float:
    """The frame the mapping ``m`` gives sample ``pos`` (drift.targetFrame)."""
    return m["frame"] + (play_at + pos / SR - m["shared"]) * m["r"]


def impulses(n: int, every: int, first: int = 0) -> np.ndarray:
    x = np.zeros(n, dtype=np.float32)
    x[first::every] = 1.0
    return x


def tone(n: int, hz: float = 200.0, amp: float = 0.5) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * hz * np.arange(n) / SR)).astype(np.float32)


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
    return [(f / SR, (f - where(k * every)) / SR * 1000) for k, f in enumerate(peaks(out))]


DRIFT = """async () => {
    const d = await import('/js/drift.js');
    const clock = { frame: 1000, shared: 1.8e9, r: 24012 };
    const f = d.targetFrame(clock, 1.8e9 + 0.5, 2400, 24000);
    return {
        frame: f, back: d.posAt(clock, 1.8e9 + 0.5, f, 24000),
        decide: [[0, 5000], [12, 5000], [13, 5000], [-13, 5000], [13, 1023], [360, 0], [361, 0], [-361, 5000]]
            .map(([e, since]) => d.decide(e, since, 24000)),
        quietest: [[[0.5, 0.3, 0.01, 0.02, 0.4], 0, 5], [[0.5, 0.3, 0.01, 0.3, 0.0, 0.0], 1, 4],
                   [[0, 0, 0], 0, 3], [[0.2, -0.01, 0.01, 0.3], 0, 4]].map((args) => d.quietest(...args)),
    };
}"""


def test_drift_arithmetic(worklet_page: Page) -> None:
    """drift.js, pure: the target frame of a sample and its inverse, the decision
    thresholds (0.5 ms and 15 ms at 24 kHz: 12 and 360 samples; one soft correction per
    1024 samples), and the quietest point (near zero and flat; the first of equals)."""
    got = worklet_page.evaluate(DRIFT)
    assert got["frame"] == pytest.approx(1000 + 0.6 * 24012)
    assert got["back"] == pytest.approx(2400)
    assert [(d["kind"], d["n"]) for d in got["decide"]] == [
        ("none", 0), ("none", 0), ("drop", 1), ("dup", -1),
        ("none", 0), ("none", 0), ("hard", 361), ("hard", -361),
    ]
    # [0.5, 0.3, 0.01, 0.02, 0.4]: k=2 costs 0.01 + 0.01; within [1, 5) of the second,
    # k=4 (0 and flat) is not reached, k=2 is (0.01 + 0.29) against k=3 (0.3 + 0.3);
    # a run of zeros: the first; and a zero crossing: the sample nearer zero before it.
    assert got["quietest"] == [2, 2, 0, 1]


def test_an_impulse_at_pos_0_lands_on_its_frame(worklet_page: Page) -> None:
    """A timed utterance waits in silence for its frame, then plays sample-accurately:
    impulses at pos 0, 2400, 4800 land where the mapping puts them (the frame rounded,
    however it falls in a quantum), with no fade on sample 0, and the worklet reports
    the start and the placements as written."""
    play_at = SHARED0 + 0.3 + 17.3 / SR  # target frame 7217.3: mid-quantum, not on a sample
    m = clock(0, SHARED0)
    sig = impulses(9600, 2400)
    out, msgs = render(worklet_page, 1.0, [
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
def test_a_mapping_500_ppm_off_is_followed_within_1_ms(worklet_page: Page, ppm: int) -> None:
    """r 500 ppm off the nominal rate (a kiosk crystal that far off, or a page still
    learning it): 12 samples a second to make up, which one sample per 1024 (~23 a second)
    keeps under 1 ms all through 20 s. Fast (r > sr): samples are due later and later, so
    samples are repeated; slow: dropped."""
    play_at = SHARED0 + 0.2
    m = clock(0, SHARED0, ppm)
    every = 1200
    sig = impulses(20 * SR, every, first=600)
    out, msgs = render(worklet_page, 21.0, [
        (0, [m, *timed("a", sig, play_at)]),
    ])
    errs = errors_ms(out, every, lambda p: target(m, play_at, 600 + p))
    assert len(errs) == 20 * SR // every
    worst = max(abs(e) for _, e in errs)
    assert worst < 1.0, errs[::20]
    st = status(msgs)
    fixes = st["softDups"] if ppm > 0 else st["softDrops"]
    # 500 ppm of 20 s is 240 samples, less the 12 left standing (0.5 ms is not corrected).
    assert 215 <= fixes <= 240, st
    assert st["softDrops" if ppm > 0 else "softDups"] == 0 and st["hardSyncs"] == 0, st


def test_an_8_ms_step_is_made_up_softly_within_10_s(worklet_page: Page) -> None:
    """The mapping moves 8 ms at 3 s (a new clock estimate): 192 samples behind, made up
    one at a time (no jump) in under 10 s, and then held."""
    play_at = SHARED0 + 0.2
    m0 = clock(0, SHARED0)
    t_step = 3.0
    f_step = delivered(t_step)
    m1 = clock(f_step, SHARED0 + f_step / SR + 0.008)  # that frame is heard 8 ms later: due earlier
    every = 1200
    sig = impulses(16 * SR, every, first=600)
    out, msgs = render(worklet_page, 16.5, [
        (0, [m0, *timed("a", sig, play_at)]),
        (t_step, [m1]),
    ])
    # Each sample by the mapping in force when its frame came.
    errs = errors_ms(out, every, lambda p: target(m0 if target(m0, play_at, 600 + p) < f_step else m1,
                                                  play_at, 600 + p))
    before = [e for t, e in errs if t < t_step]
    after = [(t, e) for t, e in errs if t >= t_step]
    assert max(abs(e) for e in before) <= 1 / SR * 1000, before  # on its frame, ±1 sample
    assert after[0][1] > 7, after[:3]  # the step was felt
    settled = next(t for t, e in after if abs(e) < 0.6)
    assert settled - t_step < 10, after[::10]
    assert all(abs(e) < 0.6 for t, e in after if t >= settled), after[::10]
    st = status(msgs)
    assert st["hardSyncs"] == 0 and st["softDups"] == 0, st
    assert 175 <= st["softDrops"] <= 192, st


@pytest.mark.parametrize("step_ms", [40, -40])
def test_a_40_ms_step_is_one_hard_sync(worklet_page: Page, step_ms: int) -> None:
    """A 40 ms step in the mapping is beyond soft correction: one fade-out and a jump
    (late: skip 40 ms; early: 40 ms of silence), after which each impulse is on its new
    frame again, and nothing else happens."""
    play_at = SHARED0 + 0.2
    m0 = clock(0, SHARED0)
    t_step = 2.0
    f_step = delivered(t_step)
    m1 = clock(f_step, SHARED0 + f_step / SR + step_ms / 1000)
    every = 1200
    sig = impulses(6 * SR, every, first=600)
    out, msgs = render(worklet_page, 6.5, [
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


def test_a_hard_sync_in_speech_waits_for_a_quiet_moment_and_fades(worklet_page: Page) -> None:
    """In a tone with a pause in it, the jump waits (up to 200 ms) for the pause; in a
    tone with none it is made at 200 ms, faded out and in: no click either way."""
    play_at = SHARED0 + 0.2
    m0 = clock(0, SHARED0)
    t_step = 1.0
    f_step = delivered(t_step)
    m1 = clock(f_step, SHARED0 + f_step / SR + 0.04)
    sig = tone(4 * SR)
    pause_at = round(SR * 0.9)  # pos 0.9 s is heard at ~1.1 s: 100 ms after the step
    gated = sig.copy()
    gated[pause_at:pause_at + 2400] = 0
    step = 0.5 * 2 * np.pi * 200 / SR  # the largest change between two tone samples
    for name, s, when in (("gated", gated, 0.1), ("tone", sig, 0.2)):
        out, msgs = render(worklet_page, 3.0, [
            (0, [m0, *timed(name, s, play_at)]),
            (t_step, [m1]),
        ])
        assert status(msgs)["hardSyncs"] == 1
        rows = placed(msgs, name)
        jump = next(f for p, f in runs(rows) if f > f_step)  # the run after the jump
        assert jump / SR - t_step == pytest.approx(when, abs=0.01), (name, rows[:60])
        assert np.abs(np.diff(out)).max() < step + 2 * 0.5 / FADE, name


def test_a_late_start_joins_at_its_position(worklet_page: Page) -> None:
    """Audio that arrives 300 ms after its time is joined where the timeline is then:
    the first sample played is the one due at that frame (nothing is played late, nothing
    replayed), faded in, and the samples passed over are counted as late."""
    play_at = SHARED0 + 0.2
    m = clock(0, SHARED0)
    every = 240
    sig = impulses(2 * SR, every, first=120)
    t_in = 0.5
    out, msgs = render(worklet_page, 2.5, [
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


def test_an_underrun_rejoins_on_the_timeline_without_growing_the_buffer(worklet_page: Page) -> None:
    """An utterance whose audio runs out twice: each gap is faded and counted as an
    underrun, and the audio that comes after it joins at its own frames (the samples
    already due dropped as late) as soon as 60 ms are queued beyond them: the buffer is
    not doubled as it is for an untimed stream, which cannot fall behind its time."""
    play_at = SHARED0 + 0.2
    m = clock(0, SHARED0)
    every = 240
    sig = impulses(4 * SR, every, first=120)
    f0 = round(target(m, play_at, 0))
    events: list[tuple[float, list[dict[str, Any]]]] = [
        (0, [m, {"type": "timeline", "id": "a", "playAt": play_at},
             {"type": "audio", "id": "a", "samples": b64(sig[:SR]), "pos": 0}]),
    ]
    # After each gap: what was due meanwhile and 2000 samples more (more than 60 ms,
    # less than twice that), the rest 50 ms later.
    gaps = []
    for start, t, end in ((SR, 1.4, round(2.5 * SR)), (round(2.5 * SR), 2.9, 4 * SR)):
        due = delivered(t) - f0
        first = {"type": "audio", "id": "a", "samples": b64(sig[start:due + 2000]), "pos": start}
        events.append((t, [first]))
        rest = [{"type": "audio", "id": "a", "samples": b64(sig[due + 2000:end]), "pos": due + 2000}]
        events.append((t + 0.05, rest + ([{"type": "end", "id": "a"}] if end == len(sig) else [])))
        gaps.append((start, t))
    out, msgs = render(worklet_page, 4.5, events)
    st = status(msgs)
    assert st["underruns"] == 2, st
    frames = peaks(out, 0.999)
    for f in frames:  # every impulse heard is on its frame: the timeline never moved
        pos = round((f - target(m, play_at, 0)) * SR / m["r"])
        assert (pos - 120) % every == 0, (f, pos)
    rejoins = mid_chunk(placed(msgs, "a"), events)
    assert [f for _, f in rejoins] == [delivered(t) for _, t in gaps], rejoins
    assert [p for p, _ in rejoins] == [delivered(t) - f0 for _, t in gaps]
    # Each sample was played or dropped as late: those passed over at the joins, and the
    # few left over from a quantum that ran dry (their time passed in the silence).
    done = next(x for x in msgs if x["type"] == "done")
    assert done["played"] + st["late"] == done["received"] == len(sig), (done, st)
    assert 0 <= st["late"] - sum(p - start for (p, _), (start, _) in zip(rejoins, gaps)) < 2 * FADE
    assert not out[round(target(m, play_at, SR)):delivered(1.4)].any()  # silent in the gap


def test_soft_corrections_land_at_quiet_points(worklet_page: Page) -> None:
    """In a 200 Hz tone, each sample dropped or repeated is one at a zero crossing (the
    quietest point of its quantum), so the output never jumps more than the tone does."""
    step = 0.5 * 2 * np.pi * 200 / SR
    for ppm in (700, -700):
        play_at = SHARED0 + 0.2
        m = clock(0, SHARED0, ppm)
        sig = tone(5 * SR)
        out, msgs = render(worklet_page, 5.5, [
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


def test_untimed_chunks_play_as_today(worklet_page: Page) -> None:
    """Chunks with no pos, or with a pos but no timeline (a server without a clock, a
    page with sync=0), go through the jitter buffer as before: nothing until 60 ms are
    queued, a fade-in, every sample in order, an underrun faded and counted and the
    buffer doubled for the restart; a clock message changes none of it."""
    sig = tone(SR)
    for pos in (None, 0):  # no pos; a pos and no timeline

        def audio(start: int, end: int) -> Msg:
            msg = {"type": "audio", "id": "u", "samples": b64(sig[start:end])}
            return msg if pos is None else {**msg, "pos": start}

        out, msgs = render(worklet_page, 2.0, [
            (0, [clock(0, SHARED0), audio(0, 960)]),  # 40 ms: not enough
            (0.1, [audio(960, 2400)]),
            (0.5, [audio(2400, SR), {"type": "end", "id": "u"}]),
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
        assert np.array_equal(out[f2 + FADE:f2 + SR - 2400], sig[2400 + FADE:])
        st = status(msgs)
        assert st["underruns"] == 1 and st["late"] == 0 and st["hardSyncs"] == 0, st
        done = next(x for x in msgs if x["type"] == "done")
        assert done["played"] == done["received"] == SR


def test_cut_at_stops_what_is_before_it_at_its_start_frame(worklet_page: Page) -> None:
    """A high-priority timed utterance given cutAt: what plays before it goes on until
    its frame, fading out over the samples just before it, and it starts on that frame;
    what was queued before it is dropped (done, flushed) and what comes after is kept."""
    m = clock(0, SHARED0)
    cut_at = SHARED0 + 1.0 + 37 / SR
    out, msgs = render(worklet_page, 3.0, [
        (0, [m, *timed("low", tone(3 * SR), SHARED0 + 0.1), *timed("low2", tone(SR), SHARED0 + 3.2)]),
        (0.5, [{"type": "cutAt", "id": "high"}, *timed("high", impulses(SR // 2, 2400), cut_at),
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
    step = 0.5 * 2 * np.pi * 200 / SR
    assert np.abs(np.diff(out[: start - 1])).max() < step + 0.5 / FADE  # the fade is no click


def test_status_placements_are_bounded(worklet_page: Page) -> None:
    """Placements go out with each status (~40 ms): a few rows each, every chunk's first
    sample reported once, in order."""
    play_at = SHARED0 + 0.1
    m = clock(0, SHARED0)
    out, msgs = render(worklet_page, 3.0, [
        (0, [m, *timed("a", tone(2 * SR), play_at)]),
    ])
    sizes = [len(x["placed"]) for x in msgs if x["type"] == "status"]
    assert max(sizes) <= 4, sizes
    rows = placed(msgs, "a")
    assert [p for p, _ in rows] == list(range(0, 2 * SR, CHUNK))
    assert all(f == round(target(m, play_at, p)) for p, f in rows)
