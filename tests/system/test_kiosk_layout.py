"""The kiosk with long Chinese and Japanese announcements, in Debian's headless Chromium
against a real rtts with its real voices: at phone and desktop widths the page never
grows sideways and nothing of it leaves the screen, its footer names the voice that is
heard (the server's pick by language, not the default voice's name), and between two
queued announcements the caption says one is coming, as the footer's "Next:" does.

A queued Mandarin announcement once made the page 559 px wide at 390×844 (1886 px at
1280×720): Chinese and Japanese have no spaces to break at, the footer's "Next:" line
does not wrap, and the kiosk's grid column grew to the widest of them, taking the clock,
"Next:" and "Voice:" off-screen and cutting the caption.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page

from tests.conftest import ServerThread, make_config
from tests.system.test_browser import DESKTOP, PHONE, browser, new_page, wait_ready  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

# One long sentence each (the kiosk captions the sentence being heard), the Mandarin one
# with a year, which must stay on one line.
ZH_LONG = (
    "各位旅客请注意，北京时间下午三点，列车即将到达北京南站，请下车的旅客提前做好准备，"
    "带好您的随身物品，从列车前进方向的右侧车门下车，本站是2026年新开通的车站，谢谢合作。"
)
JA_LONG = (
    "まもなく終点の東京に到着いたします、お忘れ物のないようご注意ください、"
    "新幹線、山手線、京浜東北線、中央線、総武線快速、横須賀線はお乗り換えです。"
)

# What leaves the screen: the page wider than the viewport, any box of the header or the
# footer outside it, any character of the caption outside it, "2026年" over two lines.
OFF_SCREEN = """() => {
    const problems = [], d = document.documentElement;
    if (d.scrollWidth > d.clientWidth) problems.push(`page ${d.scrollWidth} px wide in ${d.clientWidth}`);
    const inside = (r) => r.left >= -0.5 && r.right <= innerWidth + 0.5 && r.top >= -0.5 && r.bottom <= innerHeight + 0.5;
    const box = (r) => `[${Math.round(r.left)}..${Math.round(r.right)} x ${Math.round(r.top)}..${Math.round(r.bottom)}]`;
    for (const el of document.querySelectorAll('.kiosk-head, .kiosk-head *, .kiosk-foot, .kiosk-foot *')) {
        if (!el.getClientRects().length) continue;
        const r = el.getBoundingClientRect();
        if (!inside(r)) problems.push(`${el.id || el.className} ${box(r)} "${el.textContent.slice(0, 20)}"`);
    }
    const chars = [];
    const walk = document.createTreeWalker(document.getElementById('caption'), NodeFilter.SHOW_TEXT);
    for (let n; (n = walk.nextNode());) {
        for (let k = 0; k < n.length; k++) {
            const range = document.createRange();
            range.setStart(n, k);
            range.setEnd(n, k + 1);
            chars.push([n.data[k], range.getBoundingClientRect()]);
        }
    }
    for (const [c, r] of chars) if (r.width && !inside(r)) problems.push(`caption "${c}" ${box(r)}`);
    const text = chars.map(([c]) => c).join(''), year = text.indexOf('2026年');
    if (year >= 0 && new Set(chars.slice(year, year + 5).map(([, r]) => Math.round(r.top))).size > 1) {
        problems.push('"2026年" broken over two lines');
    }
    return problems;
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with ServerThread(make_config(tmp_path_factory.mktemp("kiosk-layout"))) as srv:
        yield srv


def heard(page: Page, text: str) -> str:
    """Waits until the caption shows part of announcement ``text``; returns its id."""
    page.wait_for_function(
        """t => { const c = document.getElementById('caption'), cur = window.rtts.kiosk.current;
                  return cur && cur.text === t && !c.classList.contains('idle') && t.includes(c.textContent.trim()); }""",
        arg=text,
        timeout=180_000,
    )
    return page.evaluate("window.rtts.kiosk.current.id")


def voice_heard(page: Page, utt: str) -> str:
    """The voice the server says speaks the sentence on screen (its mark's, else `start`'s)."""
    return page.evaluate(
        """id => { const rec = window.rtts.utterances.get(id), cap = window.rtts.caption;
                   return (cap && cap.id === id && cap.voice) || rec.voice; }""",
        utt,
    )


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390x844", "1280x720"])
def test_kiosk_with_long_chinese_and_japanese_stays_on_screen_and_names_the_voice_heard(  # type: ignore[no-untyped-def]
    server: ServerThread, new_page, viewport  # noqa: F811
) -> None:
    page = new_page(viewport)
    # No voice named: the server picks one by each text's language.
    page.goto(f"{server.http}/kiosk?{urlencode([('queue', ZH_LONG), ('queue', JA_LONG), ('gap', '300')])}")
    wait_ready(page)

    # Mandarin heard, the Japanese one waiting in the footer's "Next:".
    zh = heard(page, ZH_LONG)
    assert page.inner_text("#next").startswith("Next: まもなく")
    problems = page.evaluate(OFF_SCREEN)
    assert not problems, "\n".join(problems)
    zh_voice = voice_heard(page, zh)
    assert zh_voice.startswith("kokoro/z"), zh_voice  # a Mandarin voice, not the default Hibari
    name = page.evaluate("id => window.rtts.voiceName(id)", zh_voice)
    assert page.inner_text("#voice") == f"Voice: {name}"

    # The Japanese one cuts in; the Mandarin one waits in "Next:" to be said again.
    page.evaluate("t => window.rtts.announce(t, {priority: 'high'})", JA_LONG)
    ja = heard(page, JA_LONG)
    assert page.inner_text("#next").startswith("Next: 各位旅客")
    problems = page.evaluate(OFF_SCREEN)
    assert not problems, "\n".join(problems)
    ja_voice = voice_heard(page, ja)
    assert ja_voice.startswith("kokoro/j"), ja_voice
    name = page.evaluate("id => window.rtts.voiceName(id)", ja_voice)
    assert page.inner_text("#voice") == f"Voice: {name}"
    page.evaluate("window.rtts.stop()")


def test_kiosk_between_queued_announcements_says_the_next_is_coming(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """In the gap after one announcement the footer shows "Next: …"; the caption said
    "Waiting for announcements" beside it."""
    page = new_page()
    query = [("queue", "Platform two."), ("queue", "Platform three."), ("gap", "4000")]
    page.goto(f"{server.http}/kiosk?{urlencode(query)}")
    wait_ready(page)
    page.wait_for_function(
        "() => window.rtts.kiosk.current === null && window.rtts.kiosk.queue.normal.length === 1"
        " && window.rtts.utterances.size === 1",
        timeout=60_000,
    )
    assert page.inner_text("#next") == "Next: Platform three."
    assert "idle" in page.get_attribute("#caption", "class")
    assert page.inner_text("#caption") == "Next announcement shortly"
    heard(page, "Platform three.")
    page.wait_for_function("window.rtts.kiosk.current === null && window.rtts.kiosk.queue.normal.length === 0",
                           timeout=60_000)
    page.wait_for_function("document.getElementById('caption').textContent === 'Waiting for announcements'")
    assert page.inner_text("#next") == ""
