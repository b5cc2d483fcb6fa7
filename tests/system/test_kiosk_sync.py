"""Kiosks in step: several kiosk pages in Debian's headless Chromium hear one channel
announcement, each through a network delay of its own (tests/netdelay.py: its page, its
WebSocket and its pings all go through it), and play it at the announcement's `play_at`
on the server's shared clock. Each page reports when each sample reached its output, on
the one clock every page of this host shares (tests/spread.py); the spread between the
first and the last page to hear a sample must stay within 10 ms, at the first sample and
a minute in.

(a) one instance, four kiosks at 0, 33, 66 and 100 ms one way, each ± 20 ms, one of them
with a clock 200 ppm fast; a raw client and a kiosk with `sync=0` next to them, which
must go on playing as before. (b) two instances sharing a Redis bus behind nginx, two
kiosks on each, a Mandarin announcement of a minute: tests/system/test_in_step_across_instances.py,
where headless players hear the same announcement, with this file's checks.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from statistics import median

import pytest
from playwright.sync_api import Browser, BrowserType, sync_playwright

from rtts import protocol
from tests import spread
from tests.conftest import Client, RttsProcess
from tests.spread import Kiosk
from tests.system.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.texts import STATION_EN_SHORT

pytestmark = pytest.mark.slow

ARGS = [*CHROMIUM_ARGS, *spread.UNTHROTTLED]
TOKEN = "pub-secret"
CHANNEL = "hall"
SPREAD_MS = 10.0  # the target, between any two kiosks
# How far a page's shared-clock estimate may be from the host's clock. A page whose crystal
# runs 200 ppm fast is followed by the smallest slope that fits within 1 ms of the best
# (static/js/clock.js), which leaves a few ms: on 66 +- 20 ms it ended 1.9-5.2 ms off in six
# runs (every other page within 0.7 ms), so it is held to 8.
CLOCK_MS = 5.0
SKEWED_CLOCK_MS = 8.0
CLAIM_S = 0.25  # what choosing play_at may add beyond sync_max_lead (a Redis round trip, a busy loop)
# One-way delay ± jitter of each kiosk's link, as the issue asks (0-100 ms, ± 20 ms).
LINKS = [(0, 20), (33, 20), (66, 20), (100, 20)]


@pytest.fixture(scope="module")
def chromium() -> Iterator[BrowserType]:
    with sync_playwright() as pw:
        yield pw.chromium


def own_browser(stack: ExitStack, chromium: BrowserType) -> Browser:
    """A browser process of its own for one kiosk, as each kiosk is a machine of its own: the
    pages of one browser share its audio service, whose output timestamps then step together
    (by 10-20 ms at once on every page, now and then, on this 2-core box)."""
    b = chromium.launch(executable_path=CHROMIUM, args=ARGS)
    stack.callback(b.close)
    return b


def publish(url: str, text: str) -> tuple[protocol.Published, float]:
    """Publishes over a WebSocket; the Unix time it was handed over, too."""
    with Client(url) as c:
        assert isinstance(c.recv(), protocol.Ready)
        sent = time.time()
        c.send(type="publish", channel=CHANNEL, text=text, token=TOKEN)
        answer = c.recv()
    assert isinstance(answer, protocol.Published), answer
    return answer, sent


def subscriber(url: str) -> tuple[Client, protocol.Ready]:
    """A plain Python client on the channel, as any WebSocket client is."""
    c = Client(url)
    ready = c.recv()
    assert isinstance(ready, protocol.Ready)
    c.send(type="subscribe", channel=CHANNEL)
    assert isinstance(c.recv(timeout=10), protocol.Subscribed)
    return c, ready


def check_in_step(kiosks: list[Kiosk], ann_id: str, sent: float, play_at: float, max_lead: float,
                  at_s: tuple[float, ...]) -> spread.Spread:
    """The assertions both scenarios share, each page's figures printed first (all of
    them, so a failure shows the whole picture); returns the spread."""
    reports = [k.report(ann_id) for k in kiosks]
    for k, r in zip(kiosks, reports):
        brief = {x: v for x, v in r.raw.items() if x not in ("rows", "recorder")}
        assert r.source == "placed", f"{k.name}: the page did not play {ann_id} in step: {brief}"
        assert r.raw["done"], k.name
    s = spread.spread(reports, at_s=at_s)
    print(f"\n{ann_id}: {s.line()}; play_at {play_at - sent:.3f} s after publish")
    wrong = []
    for k, r in zip(kiosks, reports):
        errors = [abs(e) for e in r.clock_errors_ms()]
        offset = r.raw["clock"]["offsetMs"]
        # A page's first row is its first sample: the worklet's own `start` frame, which is
        # what tests/spread.py measures a sync=0 page by (the baseline), must be the same
        # frame. (Mapped to time they are two readings of the output clock, taken tens of
        # ms apart: on the loaded box one stepped 11 ms between them. Printed.)
        start_frames = r.recorder[0][3] - r.rows[0][3]  # type: ignore[operator]
        start_gap = (r.recorder[0][2] - r.rows[0][2]) * 1000  # type: ignore[operator]
        off_time = (r.heard(r.first_pos) - play_at - r.first_pos / r.rate) * 1000
        clock, raw = r.raw["clock"], r.raw
        print(f"  {r.name}: heard {r.heard(r.first_pos) - sent:.3f} s after publish ({off_time:+.1f} ms "
              f"from play_at), rows {len(r.rows)}, clock offset {offset:+.2f} ms (bound {clock['errorMs']:.2f}, rtt "
              f"{clock['rttMs']:.1f} ms, {clock['samples']} samples), mapping vs host clock median {median(errors):.2f}, 95th "
              f"percentile {sorted(errors)[int(0.95 * (len(errors) - 1))]:.2f}, max {max(errors):.2f} ms, late "
              f"{raw['late']}, soft {raw['softDrops']}/{raw['softDups']}, hard {raw['hardSyncs']}, "
              f"worklet start frame {start_gap:+.2f} ms")
        # The mapping's worst moments are printed, not asserted: on this shared box a
        # browser's output timestamps now and then step by tens of ms (the page then makes
        # up the difference, a hard sync at worst; CI once saw one page of a shared browser
        # off by ~30 ms for 0.8 s of 15 s, the others not). What a page plays
        # by, its median, is held to the spread's target: under the full suite every page
        # of one run was 5.7-5.9 ms late together (a spread of 1.6 ms), inaudible between
        # kiosks, but a page off by more than 10 ms on its own would be out of step with
        # another instance's kiosks. The targets are the spreads, asserted below.
        typical = median(errors)
        clock_ms = SKEWED_CLOCK_MS if "clock_skew_ppm" in k.params else CLOCK_MS
        if abs(offset) > clock_ms or typical > SPREAD_MS:
            wrong.append(f"{r.name}: clock off by {offset:+.2f} ms (its bound {clock['errorMs']:.2f} ms), mapping by "
                         f"{typical:.2f} ms in the median")
        if start_frames != 0:
            wrong.append(f"{r.name}: the worklet's start frame is {start_frames:+.0f} from its first placed one")
        if abs(off_time) > SPREAD_MS:
            wrong.append(f"{r.name}: first sample heard {off_time:+.1f} ms from its time")
    if not 0 < play_at - sent <= max_lead + CLAIM_S:
        wrong.append(f"play_at {play_at - sent:.3f} s after publish (sync_max_lead {max_lead} s)")
    if s.start_ms > SPREAD_MS or any(v > SPREAD_MS for v in s.at_ms.values()):
        wrong.append(f"spread over {SPREAD_MS} ms: {s.line()}")
    if set(s.at_ms) != set(at_s):
        wrong.append(f"the pages did not all play {at_s} s in: {s.line()}")
    assert not wrong, wrong
    return s


def test_kiosks_on_one_instance_play_in_step(tmp_path: Path, chromium: BrowserType) -> None:
    with ExitStack() as stack:
        srv = stack.enter_context(RttsProcess(tmp_path, "--publish-token", TOKEN, "--preload",
                                              "--phrase-cache-mb", "0"))
        srv.wait_listening()
        port = srv.port
        kiosks = [Kiosk(stack, own_browser(stack, chromium), port, link, seed=i, channel=CHANNEL,
                        **({"clock_skew_ppm": 200} if i == 2 else {})) for i, link in enumerate(LINKS)]
        old = Kiosk(stack, own_browser(stack, chromium), port, (0, 0), seed=9, channel=CHANNEL, sync=0)
        for k in [*kiosks, old]:
            k.wait_ready()
        raw, ready = subscriber(srv.url)
        stack.callback(raw.close)
        assert ready.clock is not None and ready.clock["source"] == "host", ready.clock
        max_lead = ready.clock["max_lead_ms"] / 1000

        ann, sent = publish(srv.url, STATION_EN_SHORT)
        msgs = raw.utterance(ann.id)
        start = msgs[0]
        assert isinstance(start, protocol.Start) and isinstance(start.play_at, float), start
        assert isinstance(msgs[-1], protocol.End) and msgs[-1].reason == "done"
        audio_s = msgs[-1].stats["audio_ms"] / 1000
        assert audio_s > 12, audio_s
        for k in [*kiosks, old]:
            k.wait_played(ann.id, 60)
        s = check_in_step(kiosks, ann.id, sent, start.play_at, max_lead, at_s=())
        assert s.end_ms <= SPREAD_MS and s.span_s > audio_s - 1, s.line()  # ...and to the end

        # The page that does not sync played it all, as soon as it could: before play_at.
        before = old.report(ann.id)
        assert before.source == "recorder" and before.raw["playAt"] is None
        played = old.page.evaluate("id => window.rtts.stats.utterances[id]", ann.id)
        assert played["played"] == played["received"] > audio_s * 24000 * 0.95, played
        assert before.heard(0) < start.play_at - 0.1, (before.heard(0), start.play_at)
        print(f"  sync=0 kiosk: heard {before.heard(0) - sent:.3f} s after publish, "
              f"{(start.play_at - before.heard(0)) * 1000:.0f} ms before the others")
        for k in [*kiosks, old]:
            assert not k.errors, (k.name, k.errors)
    assert "Traceback" not in srv.log, srv.log
