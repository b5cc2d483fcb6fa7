"""Word timing in the browser: the page and the kiosk light the word being heard, in
Debian's headless Chromium against a real rtts with real voices.

The pages ask for ``words`` in ``hello`` and keep what the server sent
(``window.rtts.utterances.get(id).words``); their caption element carries the playback
position the highlight was chosen by (``data-pos``, samples on the utterance's ``pts``
clock) and the word lit (``data-word``, ``data-text-start``, ``data-text-end``). A
MutationObserver records every change of them during playback, together with the
worklet's own count of samples played, and the test checks each record against the words
received: the word lit is the last one whose ``start`` the position has reached (the
highlight stays on through the pause after a word), its text is the client's own text at
those code points, the position is what the worklet has played less the output latency,
and the highlight never goes back.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page

from rtts import protocol

from tests.conftest import Client, ServerThread, make_config
from tests.system.test_browser import browser, new_page, shoot, speak_from_page, wait_played_out, wait_ready  # noqa: F401

pytestmark = pytest.mark.slow

FRAME_S = 0.020  # one 20 ms frame of slack
QUANTUM = 128  # the samples an AudioWorklet renders at a time
PUBLISH_TOKEN = "pub-secret"
# The client's text as the caption shows it: markup dropped, entities decoded (words.js).
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
_ENTITIES = {"&lt;": "<", "&gt;": ">", "&amp;": "&", "&quot;": '"', "&apos;": "'"}


def shown(text: str) -> str:
    return re.sub(r"&(lt|gt|amp|quot|apos);", lambda m: _ENTITIES[m.group(0)], _TAG.sub("", text))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    cfg = make_config(tmp_path_factory.mktemp("word-highlight"), publish_token=PUBLISH_TOKEN)
    with ServerThread(cfg) as srv:
        yield srv


# Every change of the caption's position attribute, with the worklet's count at that
# moment and the output latency the context reports: enough to check the highlight against
# the words and the position against the samples played.
RECORDER = """() => {
    const el = document.getElementById('caption');
    window.__seen = [];
    new MutationObserver(() => {
        const p = window.rtts.player, st = p.status, ctx = p.ctx;
        if (!el.dataset.pos || !ctx) return;
        const ts = ctx.getOutputTimestamp ? ctx.getOutputTimestamp() : {};
        const rate = p.sampleRate, frame = ctx.currentTime * rate, t = performance.now();
        // The frame heard now by this reading, and by each the page's heard() takes its median
        // of (player.js: a slip is followed from the second reading that shows it, so until
        // then the page is behind this reading by the slip; the suite saw 27 ms).
        const offsets = (p._heardReadings || []).map((r) => r[1]);
        if (ts.contextTime > 0) offsets.push(ts.performanceTime - ts.contextTime * 1000);
        const heard = offsets.length ? Math.min(...offsets.map((o) => (t - o) / 1000 * rate)) : 0;
        const now = el.querySelector('.word.now');
        window.__seen.push({
            id: el.dataset.utterance, pos: Number(el.dataset.pos), word: Number(el.dataset.word),
            textStart: el.dataset.textStart, textEnd: el.dataset.textEnd,
            lit: now ? now.textContent : null, lits: el.querySelectorAll('.word.now').length,
            caption: el.textContent, statusId: st.id, played: st.pos, statusFrame: st.frame, frame,
            playing: st.playing, buffered: st.buffered,
            latency: Math.max(((ctx.baseLatency || 0) + (ctx.outputLatency || 0)) * rate, heard ? frame - heard : 0),
            // A busy main thread may run this a while after the page chose the position.
            late: window.rtts.caption ? Math.max(0, (t - window.rtts.caption.heardAt) / 1000 * rate) : 0,
            firstPts: (window.rtts.utterances.get(el.dataset.utterance) || {}).firstPts || 0,
        });
    }).observe(el, { attributes: true, attributeFilter: ['data-pos'] });
}"""


def word_at(words: list[dict], pos: float) -> int:  # type: ignore[type-arg]
    """The last word whose start ``pos`` has reached (-1: none yet), as the page must light it."""
    index = -1
    for i, w in enumerate(words):
        if w["start"] <= pos:
            index = i
    return index


def check_highlight(page: Page, utt: str, text: str) -> dict:  # type: ignore[type-arg]
    """Checks every recorded state of the caption during ``utt``'s playback against the
    words the page received; returns figures for the assertion messages."""
    words = page.evaluate("id => window.rtts.utterances.get(id).words", utt)
    assert words, "the page received no words"
    # The words as the protocol promises them: the client's text at their code points
    # (Python's str indexes code points), in order, each once.
    at = 0
    for w in words:
        assert w["text_start"] >= at and w["text_end"] > w["text_start"], (w, words)
        assert text[w["text_start"]:w["text_end"]] == w["text"], (w, text)
        assert w["end"] >= w["start"] >= 0, w
        at = w["text_end"]
    frame = page.evaluate("window.rtts.player.sampleRate") * FRAME_S  # in samples
    seen = [s for s in page.evaluate("window.__seen") if s["id"] == utt and s["statusId"] == utt]
    assert len(seen) > 20, f"only {len(seen)} caption updates recorded for {utt}"
    lit: set[int] = set()
    last = -1
    for s in seen:
        pos, word = s["pos"], s["word"]
        # The word the timing says for this position, with one frame of slack either way.
        assert word_at(words, pos - frame) <= word <= word_at(words, pos + frame), (s, words)
        assert word >= last, f"the highlight went back from word {last} to {word}: {s}"
        last = word
        if word >= 0:
            w = words[word]
            lit.add(word)
            assert (s["textStart"], s["textEnd"]) == (str(w["text_start"]), str(w["text_end"])), (s, w)
            # The lit span shows exactly the client's text at those code points (an emoji
            # or a character beyond the BMP before it would shift a UTF-16 slice).
            assert s["lits"] == 1 and s["lit"] == shown(text[w["text_start"]:w["text_end"]]), (s, w, text)
        assert " ".join(s["caption"].split()) in " ".join(shown(text).split()), (s["caption"], text)
        # The position is what the worklet has played (its last status, moved on by the
        # frames rendered since while it plays) less the output's latency, within a frame.
        played = s["played"] + s["firstPts"]
        since = s["frame"] - s["statusFrame"] - QUANTUM
        ahead = min(since, s["buffered"]) if s["playing"] else 0
        assert pos <= played + max(0.0, since) + frame, s
        assert pos >= played + max(0.0, ahead) - s["latency"] - s["late"] - frame, s
    # Every word lit for 150 ms or more was seen lit (shorter ones may fall between two
    # updates of a page on a busy machine).
    for i, w in enumerate(words):
        following = words[i + 1]["start"] if i + 1 < len(words) else w["end"]
        if following - w["start"] >= 7.5 * frame and w["start"] < seen[-1]["pos"]:
            assert i in lit, (i, w, sorted(lit))
    return {"words": len(words), "updates": len(seen), "lit": len(lit)}


def kiosk_url(server: ServerThread, **params: str) -> str:
    # sync=0: a channel's announcement played as it comes, every sample of it, which is what
    # the checks count against. In step (the default), what comes too late for its time is
    # dropped, as on a busy box synthesizing slower than real time; the caption then
    # follows the timeline (tests/system/test_sync_js.py).
    return f"{server.http}/kiosk?{urlencode({'gap': '300', 'sync': '0', **params})}"


# ---------------------------------------------------------------- words.js on its own


def test_the_caption_functions_count_code_points_and_keep_the_text(server: ServerThread, new_page) -> None:  # noqa: F811
    """words.js against hand-made timing: code point spans beyond the BMP, the word kept
    lit in a pause, sentences cut at their punctuation only outside words and tags."""
    page = new_page()
    page.goto(server.http + "/")
    result = page.evaluate(
        """async () => {
            const { wordAt, captionParts, sentenceOf } = await import('/js/words.js');
            const cps = (t) => Array.from(t);
            // Two sentences of Japanese with an ideograph and an emoji outside the BMP.
            const ja = '𠮷野家で😀ランチ。次は渋谷です。';
            const w = (text, s, e, start, end) => ({ text, text_start: s, text_end: e, said: text, start, end });
            const jaWords = [w('𠮷野家', 0, 3, 100, 900), w('で', 3, 4, 900, 1000), w('ランチ', 5, 8, 1500, 2500),
                             w('次', 9, 10, 4000, 4400), w('は', 10, 11, 4400, 4600), w('渋谷', 11, 13, 4600, 5200),
                             w('です', 13, 15, 5200, 5800)];
            const at = (pos) => wordAt(jaWords, pos);
            const cap = (now) => captionParts(cps(ja), jaWords, now);
            const text = (c) => c.parts.map((p) => p.text).join('');
            const lit = (c) => c.parts.filter((p) => p.now).map((p) => p.text);
            const en = 'It costs $23.50 today. The 10:30 train<break time="1.5s"/> leaves &amp; arrives. Bye';
            const enWords = [w('It', 0, 2, 0, 10), w('costs', 3, 8, 10, 20), w('$23.50', 9, 15, 20, 30),
                             w('today', 16, 21, 30, 40), w('The', 23, 26, 50, 60), w('10:30', 27, 32, 60, 70),
                             w('train', 33, 38, 70, 80), w('leaves', 59, 65, 90, 100), w('arrives', 72, 79, 110, 120)];
            const enCap = (now) => captionParts(cps(en), enWords, now);
            return {
                before: at(50), first: at(100), pause: at(1200), second: at(4000), end: at(99999),
                jaFirst: text(cap(0)), jaLitFirst: lit(cap(0)), jaSecond: text(cap(5)), jaLitSecond: lit(cap(5)),
                jaSaid: cap(5).parts.filter((p) => p.said).map((p) => p.text),
                jaNone: lit(cap(-1)), jaNoneText: text(cap(-1)),
                enFirst: text(enCap(2)), enSecond: text(enCap(6)), enLit: lit(enCap(2)),
                // Only the first word known so far: the sentence still ends at the text's full stop.
                enEarly: text(captionParts(cps(en), enWords.slice(0, 1), 0)),
                enEarlySaid: captionParts(cps(en), enWords.slice(0, 1), 0).parts.filter((p) => p.said).map((p) => p.text),
                jaEndSaid: cap(6).parts.filter((p) => p.said).map((p) => p.text),
                // No punctuation after the last word: the sentence runs to the end of the text.
                open: sentenceOf(cps('No stop here'), [w('No', 0, 2, 0, 1), w('stop', 3, 7, 1, 2)], 1).end,
            };
        }"""
    )
    assert result["before"] == -1 and result["first"] == 0
    assert result["pause"] == 1, "the word before a pause stays lit until the next starts"
    assert result["second"] == 3 and result["end"] == 6
    assert result["jaFirst"] == "𠮷野家で😀ランチ。" and result["jaLitFirst"] == ["𠮷野家"]
    assert result["jaSecond"] == "次は渋谷です。" and result["jaLitSecond"] == ["渋谷"]
    assert result["jaSaid"] == ["次", "は"]
    assert result["jaNone"] == [] and result["jaNoneText"] == "𠮷野家で😀ランチ。"
    # "$23.50" and the tag's "1.5s" end no sentence; the tag is not shown, "&amp;" is "&".
    assert result["enFirst"] == "It costs $23.50 today."
    assert result["enSecond"] == "The 10:30 train leaves & arrives."
    assert result["enLit"] == ["$23.50"]
    assert result["enEarly"] == "It costs $23.50 today."
    assert result["enEarlySaid"] == [], "words not timed yet are not said"
    assert result["jaEndSaid"] == ["次", "は", "渋谷", "。"], "the full stop after the last word is"
    assert result["open"] == len("No stop here")


# ---------------------------------------------------------------- against the server


def test_the_page_lights_the_word_being_heard_in_japanese_and_english(server: ServerThread, new_page, shoot) -> None:  # noqa: F811
    page = new_page()
    page.goto(server.http + "/")
    wait_ready(page)
    assert page.is_checked("#words")
    page.evaluate(RECORDER)

    # Japanese with the default voice (handed to Kokoro's Japanese).
    ja = "次は渋谷です。お出口は右側です。"
    utt = speak_from_page(page, ja)
    page.wait_for_function("() => document.querySelector('#caption .word.now')", timeout=120_000)
    assert page.get_attribute("#caption", "lang") == "ja"
    wait_played_out(page, utt)
    check_highlight(page, utt, ja)

    # English with a Kokoro voice, an emoji (a code point beyond the BMP) early on, a
    # number and money as written.
    page.select_option("#voice", "kokoro/af_heart")
    en = "Good morning 😀 everyone. The 10:30 train to Boston costs $23.50 today."
    utt = speak_from_page(page, en)
    page.wait_for_function("() => document.querySelector('#caption .word.now')", timeout=120_000)
    page.wait_for_function("() => (document.querySelector('#caption .word.now') || {}).textContent === 'Boston'",
                           timeout=60_000)
    shoot(page, "index-words-1280x720.png")
    rec = wait_played_out(page, utt)
    assert rec["reason"] == "done" and rec["words"] > 0
    check_highlight(page, utt, en)


def test_the_page_lights_words_typed_along_and_over_opus(server: ServerThread, new_page) -> None:  # noqa: F811
    """Two other paths to the same highlight: type-along, whose words count code points of
    all the text appended so far (read by the default voice, Hibari), and Opus, decoded at
    48 kHz, the clock its words are on."""
    page = new_page()
    page.goto(server.http + "/")
    wait_ready(page)
    page.evaluate(RECORDER)
    assert page.input_value("#voice") == "hibari/heart"
    page.check("#typealong")
    page.click("#text")
    first = "Typed along, word by word. "
    page.keyboard.type(first, delay=15)
    utt = page.evaluate("[...window.rtts.utterances.keys()].pop()")
    rest = "And the rest comes later"
    page.keyboard.type(rest, delay=15)
    page.keyboard.press("Enter")
    rec = wait_played_out(page, utt)
    assert rec["mode"] == "typed" and rec["text"] == first + rest
    check_highlight(page, utt, first + rest)

    opus = new_page()
    opus.goto(server.http + "/?format=opus")
    opus.wait_for_function("window.rtts && window.rtts.stats.wireFormat === 'opus'", timeout=60_000)
    wait_ready(opus)
    opus.evaluate(RECORDER)
    opus.select_option("#voice", "kokoro/af_heart")
    text = "Over Opus the words keep time at forty-eight kilohertz."
    utt = speak_from_page(opus, text)
    opus.wait_for_function(
        "id => { const u = window.rtts.stats.utterances[id]; return u && u.reason && u.played >= 0.95 * u.sent"
        " && window.rtts.stats.bufferedMs === 0; }", arg=utt, timeout=120_000,
    )
    assert opus.evaluate("window.rtts.stats.sampleRate") == 48000
    check_highlight(opus, utt, text)


def test_without_words_the_page_asks_for_none_and_captions_by_sentence(server: ServerThread, new_page) -> None:  # noqa: F811
    page = new_page()
    page.goto(server.http + "/?words=0")
    wait_ready(page)
    assert not page.is_checked("#words")
    utt = speak_from_page(page, "Captions by sentence, as before.")
    page.wait_for_function("window.rtts.stats.caption !== null", timeout=60_000)
    assert page.locator("#caption span").count() == 0  # plain text, no word spans
    assert page.get_attribute("#caption", "data-word") is None
    rec = wait_played_out(page, utt)
    assert rec["reason"] == "done" and rec["words"] == 0


def test_the_kiosk_lights_mandarin_words_and_a_channels(server: ServerThread, new_page, shoot) -> None:  # noqa: F811
    # Mandarin with no voice named: the default path, the kiosk's URL names none.
    zh = "下一班列车将于十点三十分从四号站台发车。请提前做好准备。"
    page = new_page()
    page.goto(kiosk_url(server, channel="lobby", queue=zh))
    wait_ready(page)
    page.evaluate(RECORDER)
    page.wait_for_function("() => Number(document.getElementById('caption').dataset.word) >= 6", timeout=120_000)
    assert page.get_attribute("#caption", "lang") == "zh"
    shoot(page, "kiosk-words-1280x720.png")
    utt = page.evaluate("[...window.rtts.utterances.keys()][0]")
    wait_played_out(page, utt)
    check_highlight(page, utt, zh)
    page.wait_for_function("document.getElementById('caption').classList.contains('idle')")
    assert page.get_attribute("#caption", "data-word") is None

    # An announcement published to the kiosk's channel carries its words too (the kiosk's
    # `hello.words`).
    en = "The gallery closes in ten minutes. Please make your way to the exit."
    with Client(server.url) as c:
        assert isinstance(c.recv(), protocol.Ready)
        c.send(type="publish", channel="lobby", text=en, token=PUBLISH_TOKEN, voice="kokoro/af_heart")
        published = c.recv()
    assert isinstance(published, protocol.Published), published
    deadline = time.monotonic() + 120
    while not page.evaluate("id => window.rtts.utterances.has(id)", published.id):
        assert time.monotonic() < deadline, "the announcement never reached the kiosk"
        time.sleep(0.05)
    rec = wait_played_out(page, published.id)
    assert rec["channel"] == "lobby" and rec["words"] > 0
    check_highlight(page, published.id, en)
