"""The browser client and the kiosk, driven in Debian's headless Chromium against a real rtts.

Each test loads the real page from a real server with a real voice (Piper joe) and reads
what the page measured from ``window.rtts.stats``: samples the server sent in `audio`
frames, samples the AudioWorklet received and played, underruns, time to first audio.
The run also takes the README's screenshots: into pytest's temporary folder, or into
docs/screenshots/ with RTTS_UPDATE_SCREENSHOTS=1 (``screenshot_dir`` in tests/conftest.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from tests.conftest import ServerThread, make_config
from tests.ports import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",  # what a kiosk is started with
]
DESKTOP = {"width": 1280, "height": 720}
PHONE = {"width": 390, "height": 844}
VOICE = "piper/en_US-joe-medium"
LONG_TEXT = " ".join(
    [
        "This is a long announcement, spoken so that there is time to stop it.",
        "The first train to the airport leaves from platform two at eleven fifteen.",
        "Passengers for the coast should change at the central station.",
        "The buffet car is at the front of the train and serves hot drinks until noon.",
        "Please keep your luggage with you at all times and report anything unusual.",
        "We apologise for the delay to the earlier service, which was caused by a signal fault.",
        "Thank you for your patience, and have a pleasant journey with us today.",
    ]
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A server of this module's own: what the pages speak lands in its phrase cache,
    which must not change what other modules' tests see from the shared one."""
    with ServerThread(make_config(tmp_path_factory.mktemp("browser-srv"))) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class PageErrors:
    """Uncaught exceptions and console errors of a page: a test fails on any, except
    refused connections in a test that takes the server away on purpose."""

    def __init__(self, page: Page, server_goes_away: bool) -> None:
        self.errors: list[str] = []
        self.server_goes_away = server_goes_away
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("console", self._console)

    def _console(self, msg) -> None:  # type: ignore[no-untyped-def]
        if msg.type != "error":
            return
        if self.server_goes_away and "ERR_CONNECTION_REFUSED" in msg.text:
            return
        self.errors.append(f"console: {msg.text}")


@pytest.fixture
def new_page(browser: Browser) -> Iterator:  # type: ignore[type-arg]
    made: list[tuple[Page, PageErrors]] = []

    def make(viewport: dict[str, int] = DESKTOP, server_goes_away: bool = False) -> Page:
        ctx = browser.new_context(viewport=viewport)
        page = ctx.new_page()
        made.append((page, PageErrors(page, server_goes_away)))
        return page

    yield make
    errors = [e for _, pe in made for e in pe.errors]
    for page, _ in made:
        page.context.close()
    assert not errors, errors


def wait_ready(page: Page, timeout_s: float = 60) -> None:
    page.wait_for_function("window.rtts && window.rtts.stats.state === 'ready'", timeout=timeout_s * 1000)


def utterance(page: Page, utt_id: str) -> dict:  # type: ignore[type-arg]
    return page.evaluate("id => window.rtts.stats.utterances[id]", utt_id)


def wait_end(page: Page, utt_id: str, timeout_s: float = 120) -> dict:  # type: ignore[type-arg]
    page.wait_for_function(
        "id => { const u = window.rtts.stats.utterances[id]; return u && u.reason; }",
        arg=utt_id,
        timeout=timeout_s * 1000,
    )
    return utterance(page, utt_id)


def wait_played_out(page: Page, utt_id: str, timeout_s: float = 120) -> dict:  # type: ignore[type-arg]
    """Waits until the worklet has played (or dropped) everything it got for ``utt_id``: its
    ``done``, which it sends once it has the utterance's end, posted after its last chunk.
    (Waiting for played >= received alone ended early on a loaded box: the worklet had got
    and played the first chunk while the rest were still on their way to it, 3840 of
    110160 samples.)"""
    page.wait_for_function(
        """id => { const u = window.rtts.stats.utterances[id];
                   return u && u.reason && u.sent > 0 && u.soundDone && u.played >= u.received
                          && window.rtts.stats.bufferedMs === 0; }""",
        arg=utt_id,
        timeout=timeout_s * 1000,
    )
    return utterance(page, utt_id)


def last_id(page: Page) -> str:
    return page.evaluate("[...window.rtts.utterances.keys()].pop()")


@pytest.fixture
def shoot(screenshot_dir: Path):  # type: ignore[no-untyped-def]
    """``shoot(page, "name.png")``: a screenshot into ``screenshot_dir``."""

    def take(page: Page, name: str, full_page: bool = False) -> None:
        screenshot_dir.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshot_dir / name), full_page=full_page)

    return take


# Chinese and Japanese in the screenshots (the page's phone one, the kiosk's phone one),
# read by Kokoro: the default voice hands them to the language's own.
JA_TEXT = "次は渋谷です。お出口は右側です。東横線はお乗り換えです。"
ZH_TEXT = "下一班开往机场的列车将于十点三十分从四号站台发车，请提前做好准备。"
_CJK = re.compile(r"[\u3000-\u30ff\u3400-\u9fff\uff00-\uffef]")


def caption_fonts(page: Page, selector: str = "#caption") -> dict[str, int]:
    """The fonts Chromium drew ``selector``'s text with: family → glyphs (DevTools' CSS
    domain). Without a CJK font, Han and kana are drawn as boxes by a Latin one. A caption
    with word timing holds its text in one span per word: their glyphs count too.

    The page goes on playing while it is read: a caption replaced between the query and
    the fonts' read leaves a node id that is gone ("Could not find node with given id"),
    and the whole read is made again on the new nodes."""
    for _ in range(4):
        try:
            return _fonts_once(page, selector)
        except PlaywrightError as e:
            if "Could not find node" not in str(e):
                raise
    return _fonts_once(page, selector)


def _fonts_once(page: Page, selector: str) -> dict[str, int]:
    cdp = page.context.new_cdp_session(page)
    glyphs: dict[str, int] = {}
    try:
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        root = cdp.send("DOM.getDocument")["root"]["nodeId"]
        nodes = cdp.send("DOM.querySelectorAll", {"nodeId": root, "selector": f"{selector}, {selector} *"})["nodeIds"]
        for node in nodes:
            for f in cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]:
                glyphs[f["familyName"]] = glyphs.get(f["familyName"], 0) + f["glyphCount"]
    finally:
        cdp.detach()
    return glyphs


def assert_drawn_in_cjk(page: Page, lang: str) -> None:
    """The caption is in ``lang`` (its lang attribute, from the marks) and every Han, kana
    and CJK punctuation glyph in it came from that language's Noto CJK face
    (fonts-noto-cjk, which the README's test command installs)."""
    text = page.inner_text("#caption")
    assert page.get_attribute("#caption", "lang") == lang, text
    fonts = caption_fonts(page)
    face = {"zh": "Noto Sans CJK SC", "ja": "Noto Sans CJK JP"}[lang]
    assert fonts.get(face, 0) >= len(_CJK.findall(text)) > 0, f"{text!r} drawn with {fonts}: no {face} (fonts-noto-cjk)?"


def speak_from_page(page: Page, text: str) -> str:
    page.fill("#text", text)
    page.click("#speak")
    page.wait_for_function("window.rtts.utterances.size > 0")
    return last_id(page)


# ---------------------------------------------------------------- the try-it page


def test_page_speaks_and_the_worklet_receives_the_samples(server: ServerThread, new_page, shoot) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    page.goto(server.http + "/")
    wait_ready(page)
    voices = server.service.registry.voices.values()
    assert page.locator("#voice option").count() == len(voices)
    # Grouped by the language each voice was made for: the Mandarin ones under one heading.
    zh = [v.id for v in voices if v.langs[0] == "zh"]
    assert zh and page.locator("#voice optgroup[data-lang=zh] option").evaluate_all("os => os.map(o => o.value)") == zh
    page.select_option("#voice", VOICE)
    utt = speak_from_page(page, "The 10:30 train to Boston leaves from platform 4. Please mind the gap.")
    rec = wait_played_out(page, utt)

    assert rec["reason"] == "done"
    rate = page.evaluate("window.rtts.stats.sampleRate")
    assert rate == 24000
    # The page's count of what the server sent agrees with the server's own audio_ms ...
    assert rec["sent"] == pytest.approx(rec["stats"]["audio_ms"] * rate / 1000, abs=rate * 0.02)
    # ... and the AudioWorklet got (and played) at least 95 % of it.
    assert rec["received"] >= 0.95 * rec["sent"]
    assert rec["played"] >= 0.95 * rec["sent"]
    assert rec["marks"] >= 2
    assert 0 < rec["ttfaMs"] < 30_000 and rec["serverTtfaMs"] is not None
    assert rec["expectedAudioMs"] is not None and rec["expectedAudioMs"] >= rec["expectedWaitMs"] >= 0
    assert rec["ttfaMs"] >= rec["serverTtfaMs"] - 1  # the page cannot hear it before the server sent it
    assert page.locator("#history tr").count() == 1
    assert "done" in page.locator("#e-reason").inner_text()
    # The server's count of frames it sent late, as its `end` said it (0 on a quiet box).
    late = rec["stats"]["underruns"]
    shown = page.locator("#e-late").inner_text()
    assert shown == "0" if late == 0 else shown.startswith(f"{late} ("), (shown, rec["stats"])
    first_id = utt

    # The screenshot: a second utterance, with the model warm, caught mid-sentence; this
    # one from the keyboard.
    page.fill("#text", "Welcome aboard. This page plays each frame as it arrives.")
    page.focus("#text")
    page.keyboard.press("Control+Enter")
    page.wait_for_function("window.rtts.utterances.size === 2")
    utt = last_id(page)
    # With word timing, once a word or two has been heard.
    page.wait_for_function("window.rtts.caption !== null && (!window.rtts.caption.parts || window.rtts.caption.word >= 1)",
                           timeout=60_000)
    shoot(page, "index-1280x720.png")
    assert wait_played_out(page, utt)["reason"] == "done"

    # The last utterance as a WAV, as the Download button makes it.
    with page.expect_download() as dl:
        page.click("#download")
    assert dl.value.suggested_filename == f"rtts-{utt}.wav"  # the last utterance
    wav = Path(dl.value.path()).read_bytes()
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE"
    assert int.from_bytes(wav[24:28], "little") == rate
    assert (len(wav) - 44) // 2 == utterance(page, utt)["sent"]
    assert utt != first_id

    # Another output rate: a new `hello`, a new AudioContext at that rate, same counts.
    page.select_option("#rate", "16000")
    page.wait_for_function("window.rtts.stats.sampleRate === 16000")
    utt = speak_from_page(page, "Now at sixteen kilohertz.")
    rec = wait_played_out(page, utt)
    assert rec["sent"] == pytest.approx(rec["stats"]["audio_ms"] * 16, abs=16000 * 0.02)
    assert rec["received"] >= 0.95 * rec["sent"]

    # At phone width, Japanese: its caption drawn in a Japanese font, and the panel names
    # the Kokoro model that spoke it, not each of its voices.
    phone = new_page(PHONE)
    phone.goto(server.http + "/")
    wait_ready(phone)
    utt = speak_from_page(phone, JA_TEXT)
    phone.wait_for_function("window.rtts.stats.caption !== null", timeout=120_000)
    assert_drawn_in_cjk(phone, "ja")
    kokoro = sum(1 for v in voices if v.engine == "kokoro")
    phone.wait_for_function("n => document.getElementById('f-loaded').textContent.includes(`Kokoro (${n} voices)`)",
                            arg=kokoro, timeout=30_000)
    loaded = phone.inner_text("#f-loaded")
    assert "piper/en_US-joe-medium" in loaded and "kokoro/" not in loaded, loaded
    shoot(phone, "index-phone.png", full_page=True)
    wait_played_out(phone, utt)


def test_page_lists_hibari_and_speaks_with_it(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    page.goto(server.http + "/")
    wait_ready(page)
    assert "Hibari" in page.locator('#voice option[value="hibari/heart"]').inner_text()
    page.select_option("#voice", "hibari/heart")
    utt = speak_from_page(page, "Hibari speaks in the browser too. The 7:45 bus leaves from stop 12.")
    rec = wait_played_out(page, utt)
    assert rec["reason"] == "done" and rec["stats"]["audio_ms"] > 2000
    assert rec["received"] >= 0.95 * rec["sent"] and rec["played"] >= 0.95 * rec["sent"]
    assert "hibari/heart" in server.service.loaded_voices()


def test_page_names_the_voice_that_speaks(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    """The voice list says "Hibari heart (American English, female) — default", and
    Hibari speaks English only: Chinese text goes to a Mandarin voice, which the page
    must name (it named none, and the kiosk named Hibari)."""
    page = new_page()
    page.goto(server.http + "/")
    wait_ready(page)
    assert page.input_value("#voice") == "hibari/heart"
    # What the page shows two frames after `start`: it named the voice only at the first
    # audio, which a loaded box (CI) sends seconds later.
    page.evaluate("""() => { window.voiceAtStart = new Promise((done) => window.rtts.addEventListener("start",
        () => requestAnimationFrame(() => requestAnimationFrame(
            () => done(document.getElementById("e-voice").textContent))),
        { once: true })); }""")
    utt = speak_from_page(page, ZH_TEXT)
    page.wait_for_function("id => window.rtts.utterances.get(id).voice !== null", arg=utt, timeout=120_000)
    spoke = page.evaluate("id => window.rtts.utterances.get(id).voice", utt)  # start.voice
    assert spoke.startswith("kokoro/z"), spoke
    name = page.evaluate("id => window.rtts.voiceName(id)", spoke)
    assert page.evaluate("window.voiceAtStart") == name
    wait_end(page, utt)
    assert name in page.inner_text(f"#h-{utt} td:first-child")
    page.evaluate("window.rtts.stop()")


def test_page_names_kokoros_generator_for_the_next_utterances(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    """Issue 31: the teacher one option away, per request. The page's "Kokoro generator"
    goes with each utterance (this server speaks the distilled one by default); naming
    Kokoro's own opens its decoder in the server, which the memory parts then show."""
    page = new_page()
    page.goto(server.http + "/")
    wait_ready(page)
    assert page.input_value("#generator") == ""
    assert "generator" not in page.evaluate("window.rtts._voiceFields()")
    assert "kokoro:teacher" not in server.service.worker.resident_parts()
    page.select_option("#generator", "teacher")
    assert page.evaluate("window.rtts._voiceFields()")["generator"] == "teacher"
    rec = wait_end(page, speak_from_page(page, "欢迎光临。"))
    assert rec["reason"] == "done" and rec["stats"]["audio_ms"] > 500
    assert "kokoro:teacher" in server.service.worker.resident_parts()
    page.reload()  # the choice is kept with the page's other settings
    wait_ready(page)
    assert page.input_value("#generator") == "teacher"
    page.select_option("#generator", "")
    assert "generator" not in page.evaluate("window.rtts._voiceFields()")


def test_samples_played_and_the_history_agree(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    """The history's last column showed the worklet's `received` as it was at `end` (41.0 %)
    beside the live "Samples received … (100.0 %)": now both are the samples played of
    those that came, and the history gives none until the sound is over."""
    page = new_page()
    page.goto(server.http + "/")
    wait_ready(page)
    # Hibari synthesizes this ~25 s text in a second or two: `end` comes long before the
    # sound is over.
    utt = speak_from_page(page, LONG_TEXT)
    rec = wait_end(page, utt)
    assert rec["reason"] == "done" and rec["played"] < rec["sent"]
    row = f"#h-{utt} td:last-child"
    assert page.inner_text(row) == "playing…"
    live = re.fullmatch(r"(\d+) of (\d+) \(\d+\.\d %\)", page.inner_text("#f-samples"))
    assert live and int(live[1]) < int(live[2]) == rec["sent"], page.inner_text("#f-samples")
    page.click("#stop")
    page.wait_for_function("s => document.querySelector(s).textContent.endsWith('%')", arg=row, timeout=10_000)
    rec = utterance(page, utt)
    share = f"{100 * rec['played'] / rec['sent']:.1f} %"
    assert page.inner_text(row) == share
    # The whole line, not its share: an earlier count can round to the same share (23,680
    # and 24,064 of 681,120 are both 3.5 %), and the live line takes one more update.
    final = f"{rec['played']} of {rec['sent']} ({share})"
    page.wait_for_function("t => document.getElementById('f-samples').textContent === t", arg=final, timeout=5_000)
    assert page.inner_text("#f-samples") == final


def test_stop_silences_within_100_ms_and_the_server_cancels(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    page.goto(server.http + "/")
    wait_ready(page)
    # About 3 minutes of speech by Piper (not Hibari, the default, which makes it 40x faster
    # than real time): even a fast machine is still synthesizing it when Stop comes.
    page.select_option("#voice", VOICE)
    utt = speak_from_page(page, " ".join([LONG_TEXT] * 6))
    page.wait_for_function(
        "id => (window.rtts.stats.utterances[id] || {}).played > 24000 * 0.6", arg=utt, timeout=60_000
    )
    # An analyser on the worklet's output, independent of the worklet's own bookkeeping:
    # it records when the output last had sound, sampled every few milliseconds.
    page.evaluate(
        """() => {
            const p = window.rtts.player, an = p.ctx.createAnalyser();
            an.fftSize = 256; p.node.connect(an);
            const buf = new Float32Array(an.fftSize);
            window.probe = { loud: 0, lastLoud: 0 };
            window.probe.timer = setInterval(() => {
                an.getFloatTimeDomainData(buf);
                let peak = 0; for (const v of buf) peak = Math.max(peak, Math.abs(v));
                if (peak > 0) { window.probe.loud++; window.probe.lastLoud = performance.now(); }
            }, 2);
        }"""
    )
    page.wait_for_timeout(300)
    assert page.evaluate("window.probe.loud") > 0, "nothing was playing before Stop"
    clicked = page.evaluate("() => { window.probe.clicked = performance.now(); document.getElementById('stop').click(); return true; }")
    assert clicked
    page.wait_for_function("window.rtts.stats.lastStopMs !== null", timeout=5_000)
    rec = wait_end(page, utt)
    page.wait_for_timeout(500)
    probe = page.evaluate("window.probe")
    stats = page.evaluate("window.rtts.stats")

    assert stats["lastStopMs"] < 100
    # The analyser window is fftSize samples (~11 ms) long, so the last loud reading can
    # trail the last sound by that much.
    assert probe["lastLoud"] - probe["clicked"] < 100 + 256 / 24
    assert rec["reason"] == "cancelled", "the server did not report the utterance cancelled"
    assert rec["stopMs"] == stats["lastStopMs"]
    assert rec["played"] < 24000 * 5  # it really was cut short
    assert stats["bufferedMs"] == 0
    played = rec["played"]
    page.wait_for_timeout(300)
    assert utterance(page, utt)["played"] == played  # nothing more reached the speakers


def test_type_along_speaks_before_the_text_is_finished(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    page.goto(server.http + "/")
    wait_ready(page)
    page.check("#typealong")
    page.click("#text")
    first = "Hello there, this is typed along. "
    page.keyboard.type(first, delay=20)
    utt = last_id(page)
    # The first sentence is complete, the text is not: its audio must come anyway.
    page.wait_for_function(
        "id => (window.rtts.stats.utterances[id] || {}).sent > 0", arg=utt, timeout=60_000
    )
    assert utterance(page, utt)["flushAt"] is None
    rest = "And it keeps going until Enter"
    page.keyboard.type(rest, delay=10)
    page.keyboard.press("Enter")
    rec = wait_played_out(page, utt)

    assert rec["mode"] == "typed"
    assert rec["text"] == first + rest
    assert rec["firstFrameAt"] < rec["flushAt"]
    assert rec["reason"] == "done"
    assert rec["marks"] >= 2
    assert rec["received"] >= 0.95 * rec["sent"]
    assert page.input_value("#text") == ""  # ready for the next line


# A recorder for the worklet's output: every render quantum it hears, posted back whole.
RECORDER = """
class Recorder extends AudioWorkletProcessor {
  process(inputs) {
    const ch = inputs[0][0];
    this.port.postMessage(ch ? ch.slice() : new Float32Array(128));
    return true;
  }
}
registerProcessor("recorder", Recorder);
"""


def test_an_underrun_is_counted_and_faded_not_a_click(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    """A 250 Hz tone fed to the real worklet with a 300 ms hole in it, and then flushed
    mid-tone: the recorded output must change by no more than a tone sample does (plus
    the fade step), where a hard cut would jump by up to its amplitude."""
    page = new_page()
    page.goto(server.http + "/")
    wait_ready(page)
    result = page.evaluate(
        """async (recorder) => {
            const { Player } = await import('/js/player.js');
            const p = new Player({ prebufferMs: 60 });
            await p.open(24000);
            await p.ctx.audioWorklet.addModule(URL.createObjectURL(new Blob([recorder], {type: 'text/javascript'})));
            const rec = new AudioWorkletNode(p.ctx, 'recorder');
            const mute = p.ctx.createGain(); mute.gain.value = 0;
            p.node.connect(rec); rec.connect(mute); mute.connect(p.ctx.destination);
            const got = []; rec.port.onmessage = (e) => got.push(e.data);
            const tone = (n, start) => Float32Array.from({length: n}, (_, i) => 0.5 * Math.sin(2 * Math.PI * 250 * (start + i) / 24000));
            const sleep = (ms) => new Promise(r => setTimeout(r, ms));
            // 4830 samples end mid-wave (50.3 cycles), where a cut would be loud.
            p.push('x', tone(4830, 0));
            await sleep(500);                       // the hole: the queue runs dry
            p.push('x', tone(24000, 4830));         // a second of tone, then flush mid-way
            await sleep(400);
            await p.flush();
            await sleep(200);
            const out = new Float32Array(got.reduce((n, c) => n + c.length, 0));
            let o = 0; for (const c of got) { out.set(c, o); o += c.length; }
            let jump = 0, peak = 0;
            for (let i = 1; i < out.length; i++) { jump = Math.max(jump, Math.abs(out[i] - out[i - 1])); peak = Math.max(peak, Math.abs(out[i])); }
            const st = p.status;
            await p.ctx.close();
            return { jump, peak, underruns: st.underruns, audible: st.audibleUnderruns, tail: Array.from(out.slice(-2400)).some(v => v !== 0) };
        }""",
        RECORDER,
    )
    step = 0.5 * 2 * 3.14159 * 250 / 24000  # the largest change between two tone samples
    assert result["peak"] > 0.45, result  # the tone was heard
    assert result["underruns"] == 1 and result["audible"] == 1, result  # the hole was mid-tone
    assert result["jump"] < step + 0.5 / 64 + 0.01, result  # faded: no click at the hole or the flush
    assert not result["tail"], result  # silent after the flush


# What the layout test measures in the page: every control and value field of each card
# (the composer, the live figures, the history) inside that card's box, not covered by
# anything else at its centre, and not cut short (scrollWidth <= clientWidth). The Output
# rate select once sat outside its card under the Live figures panel at 1280x720, and the
# Speed value was cut off.
LAYOUT_PROBLEMS = """() => {
    const problems = [];
    const shown = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
    const name = (el) => el.id ? '#' + el.id : el.tagName.toLowerCase() + (el.className ? '.' + el.className : '')
                          + (el.matches('.compose, .figures, .history') ? '' : ` "${el.textContent.replace(/\\s+/g, ' ').trim().slice(0, 30)}"`);
    const fields = 'input, select, textarea, button, output, label, summary, dt, dd, .caption, .table-wrap, h2, h3';
    for (const card of document.querySelectorAll('.compose, .figures, .history')) {
        for (const el of card.querySelectorAll(fields)) {
            if (!shown(el) || el.closest('.sr-only')) continue;
            el.scrollIntoView({block: 'center', inline: 'center'});
            const c = card.getBoundingClientRect(), r = el.getBoundingClientRect();
            if (r.left < c.left - 0.5 || r.right > c.right + 0.5 || r.top < c.top - 0.5 || r.bottom > c.bottom + 0.5) {
                problems.push(`${name(el)} [${Math.round(r.left)}..${Math.round(r.right)} x ${Math.round(r.top)}..${Math.round(r.bottom)}] `
                              + `outside ${name(card)} [${Math.round(c.left)}..${Math.round(c.right)} x ${Math.round(c.top)}..${Math.round(c.bottom)}]`);
            }
            if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1 && !el.matches('.table-wrap, textarea')) {
                problems.push(`${name(el)} cut short: scrollWidth ${el.scrollWidth} > clientWidth ${el.clientWidth}`);
            }
            if (el.matches('input, select, textarea, button, output')) {
                const x = Math.min(Math.max((r.left + r.right) / 2, 0), innerWidth - 1);
                const y = Math.min(Math.max((r.top + r.bottom) / 2, 0), innerHeight - 1);
                const top = document.elementFromPoint(x, y);
                if (!top || !el.contains(top)) {
                    problems.push(`${name(el)} covered at its centre by ${top ? name(top) : 'nothing'}`);
                }
            }
        }
    }
    window.scrollTo(0, 0);
    return problems;
}"""


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x720", "phone"])
def test_every_control_sits_inside_its_card_and_is_not_cut_short(server: ServerThread, new_page, viewport) -> None:  # type: ignore[no-untyped-def]
    page = new_page(viewport)
    page.goto(server.http + "/")
    wait_ready(page)
    page.click("#conn-settings summary")  # the token field too
    problems = page.evaluate(LAYOUT_PROBLEMS)
    assert not problems, "\n".join(problems)
    # Each voice's label says its gender once ("Hibari heart (American English, female)"
    # was followed by another "(female)").
    labels = page.locator("#voice option").all_inner_texts()
    assert labels and not [t for t in labels if re.search(r"\b(female|male)\b.*\b\1\b", t)], labels


# ---------------------------------------------------------------- restart


def _start_rtts(port: int, tmp: Path) -> subprocess.Popen[bytes]:
    (tmp / "models").mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtts", "serve", "--port", str(port), "--idle-unload", "0",
         "--models-dir", str(tmp / "models"), "--cache-dir", str(ROOT / ".pytest-cache-models")],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "rtts exited at start"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("rtts did not start")


def _stop_rtts(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_page_and_kiosk_reconnect_after_a_server_restart(tmp_path: Path, new_page, shoot) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    proc = _start_rtts(port, tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"
        page = new_page(server_goes_away=True)
        page.goto(base + "/")
        wait_ready(page)
        kiosk = new_page(server_goes_away=True)
        kiosk.goto(base + "/kiosk")
        wait_ready(kiosk)
        assert kiosk.locator("#down").is_hidden()

        _stop_rtts(proc)
        page.wait_for_function("window.rtts.stats.state !== 'ready'", timeout=10_000)
        kiosk.wait_for_selector("#down", state="visible", timeout=10_000)
        # Each says so between its attempts; during one it says "Connecting…" (a whole
        # suite once read the page in the middle of one).
        kiosk.wait_for_function("document.getElementById('down').innerText.includes('unreachable')", timeout=10_000)
        page.wait_for_function("document.getElementById('conn').innerText.toLowerCase().includes('unreachable')",
                               timeout=10_000)
        shoot(kiosk, "kiosk-server-down.png")
        time.sleep(2)  # a few failed attempts: the backoff has grown

        proc = _start_rtts(port, tmp_path)
        wait_ready(page, timeout_s=30)
        wait_ready(kiosk, timeout_s=30)
        kiosk.wait_for_selector("#down", state="hidden")
        utt = speak_from_page(page, "Back again after the restart.")
        rec = wait_played_out(page, utt)
        assert rec["reason"] == "done"
        assert rec["received"] >= 0.95 * rec["sent"] > 0
    finally:
        _stop_rtts(proc)


# ---------------------------------------------------------------- kiosk


def kiosk_url(server: ServerThread, *queue: str, **extra: str) -> str:
    query = [("voice", VOICE), ("gap", "300")] + [("queue", q) for q in queue] + list(extra.items())
    return f"{server.http}/kiosk?{urlencode(query)}"


def test_kiosk_shows_the_caption_of_the_sentence_being_spoken(server: ServerThread, new_page, shoot) -> None:  # type: ignore[no-untyped-def]
    first = "Welcome to the central station."
    second = "The next train to the airport leaves from platform two in five minutes."
    page = new_page()
    # Captions from the marks, sentence by sentence (word timing, switched off here, moves
    # on at each word instead: tests/system/test_word_highlight.py).
    page.goto(kiosk_url(server, f"{first} {second}", words="0"))
    wait_ready(page)

    # What the screen showed at each playback position the worklet reported.
    page.evaluate(
        """() => { window.seen = [];
                   window.rtts.addEventListener('status', (e) => window.seen.push(
                       [e.detail.id, e.detail.pos, document.getElementById('caption').textContent])); }"""
    )
    page.wait_for_function("t => document.getElementById('caption').textContent === t", arg=second, timeout=60_000)
    utt = page.evaluate("[...window.rtts.utterances.keys()][0]")
    marks = page.evaluate("id => window.rtts.utterances.get(id).marks", utt)
    # The first sentence may arrive as two units (the first is cut short for a fast start);
    # the caption still shows whole sentences.
    assert " ".join(m["text"] for m in marks) == f"{first} {second}" and marks[-1]["text"] == second
    assert page.evaluate("window.rtts.stats.caption") == second
    shown = {text for _, _, text in page.evaluate("window.seen")}
    assert first in shown  # grown from its first unit to the whole sentence, not replaced by "station."
    shoot(page, "kiosk-1280x720.png")
    rec = wait_played_out(page, utt)
    assert rec["received"] >= 0.95 * rec["sent"]
    # The caption followed the marks: the first sentence (grown unit by unit) until
    # playback reached the second's pts, the second from then on.
    seen = [(pos, text) for sid, pos, text in page.evaluate("window.seen") if sid == utt and pos > 0]
    assert {text for _, text in seen} >= {first, second}
    for pos, text in seen:
        if pos < marks[-1]["pts"]:
            assert first.startswith(text), (pos, text, marks)
        else:
            assert text == second, (pos, text, marks)
    page.wait_for_function("document.getElementById('caption').classList.contains('idle')")

    # At phone width, a Mandarin announcement: Piper joe hands it to the Mandarin voice,
    # and the caption is drawn in a Chinese font.
    phone = new_page(PHONE)
    phone.goto(kiosk_url(server, ZH_TEXT))
    wait_ready(phone)
    # A lone sentence may be split into a short first clause and the rest; either way
    # the caption is the text of a mark of this announcement.
    phone.wait_for_function("!document.getElementById('caption').classList.contains('idle')", timeout=120_000)
    assert_drawn_in_cjk(phone, "zh")
    shoot(phone, "kiosk-phone.png")
    assert phone.inner_text("#caption").strip() in ZH_TEXT
    wait_played_out(phone, phone.evaluate("[...window.rtts.utterances.keys()][0]"))


def test_kiosk_high_priority_interrupts_and_the_cut_one_is_spoken_again(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    normal = LONG_TEXT
    alert = "Attention please. The building must be evacuated."
    page = new_page()
    page.goto(kiosk_url(server, normal, "Thank you."))
    wait_ready(page)
    page.wait_for_function("(window.rtts.player.status.pos || 0) > 24000 * 0.5", timeout=60_000)
    cut = page.evaluate("window.rtts.kiosk.current.id")
    # The way another same-origin page (an operator console in a frame) announces.
    page.evaluate("t => window.postMessage({type: 'rtts-announce', text: t, priority: 'high'}, location.origin)", alert)

    page.wait_for_function(
        "t => document.getElementById('caption').textContent === t", arg="Attention please.", timeout=30_000
    )
    assert "high" in page.get_attribute("#caption", "class")
    played = utterance(page, cut)["played"]
    rec = wait_end(page, cut)
    assert rec["reason"] in ("cancelled", "done")  # done: it was fully synthesized already
    page.wait_for_timeout(300)
    assert utterance(page, cut)["played"] == played  # not a sample of it after the alert
    assert "Next: This is a long announcement" in page.locator("#next").inner_text()

    # After the alert, the interrupted announcement starts again from its beginning (the
    # first mark's text; with word timing its whole first sentence).
    opening = page.evaluate("id => window.rtts.utterances.get(id).marks[0].text", cut)
    page.wait_for_function(
        "t => document.getElementById('caption').textContent.startsWith(t)", arg=opening, timeout=60_000
    )
    ids = page.evaluate("[...window.rtts.utterances.keys()]")
    texts = [utterance(page, i)["text"] for i in ids]
    assert texts == [normal, alert, normal]
    page.evaluate("window.rtts.stop()")


# ---------------------------------------------------------------- Opus on the wire


def wait_decoded_played(page: Page, utt_id: str, timeout_s: float = 120) -> dict:  # type: ignore[type-arg]
    """Like ``wait_played_out``, for Opus: the decoder hands the worklet its last samples in
    a burst after ``end``, and the worklet's counts trail its messages, so wait until it
    has played (nearly) all that was decoded, not merely all it has heard of so far."""
    page.wait_for_function(
        """id => { const u = window.rtts.stats.utterances[id];
                   return u && u.reason && u.sent > 0 && u.played >= 0.95 * u.sent
                          && window.rtts.stats.bufferedMs === 0; }""",
        arg=utt_id,
        timeout=timeout_s * 1000,
    )
    return utterance(page, utt_id)


def test_page_and_kiosk_play_opus_decoded_by_webcodecs(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    """``?format=opus``: the server sends one Opus packet per 20 ms frame at 48 kHz, the
    page decodes them with WebCodecs' AudioDecoder and the worklet plays every sample."""
    text = "The 10:30 train to Boston leaves from platform 4. Please mind the gap."
    page = new_page()
    page.goto(server.http + "/?format=opus")
    page.wait_for_function("window.rtts && window.rtts.stats.wireFormat === 'opus'", timeout=60_000)
    wait_ready(page)
    page.select_option("#voice", VOICE)
    utt = speak_from_page(page, text)
    rec = wait_decoded_played(page, utt)
    assert rec["reason"] == "done" and rec["format"] == "opus"
    assert page.evaluate("window.rtts.stats.sampleRate") == 48000
    # Every sample the server made came out of the decoder (plus at most a frame of the
    # padding that completes the last packet), and the worklet played it.
    audio_samples = rec["stats"]["audio_ms"] * 48
    assert audio_samples <= rec["sent"] <= audio_samples + 960 * 2
    assert rec["played"] >= 0.95 * rec["sent"]
    # About 24 kbit/s: an eighth of pcm16 at 24 kHz, a sixteenth at 48 kHz.
    bytes_per_s = rec["bytes"] / (rec["stats"]["audio_ms"] / 1000)
    assert 1500 < bytes_per_s < 4500, bytes_per_s
    rms = page.evaluate(
        """() => { const c = window.rtts.last.chunks; let s = 0, n = 0;
                   for (const x of c) for (const v of x) { s += v * v; n++; } return Math.sqrt(s / n); }"""
    )
    assert 0.01 < rms < 0.5, rms


def test_kiosk_plays_opus_decoded_by_webcodecs(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    """The kiosk speaks its URL queue as soon as it is ready, while the player may still
    be switching its AudioContext to Opus's 48 kHz: every decoded sample must reach the
    worklet and be played (it once lost the samples posted during the switch, about one
    run in two, and never reported them played)."""
    kiosk = new_page()
    kiosk.goto(kiosk_url(server, "Welcome to the central station.") + "&format=opus")
    kiosk.wait_for_function("window.rtts && window.rtts.stats.wireFormat === 'opus'", timeout=60_000)
    kiosk.wait_for_function("window.rtts.utterances.size > 0", timeout=60_000)
    utt = kiosk.evaluate("[...window.rtts.utterances.keys()][0]")
    kiosk.wait_for_function(
        "id => { const u = window.rtts.stats.utterances[id]; return u && u.reason && u.sent > 0 && u.played === u.sent; }",
        arg=utt, timeout=60_000,
    )
    rec = utterance(kiosk, utt)
    assert rec["format"] == "opus" and rec["played"] == rec["received"] == rec["sent"] > 48000 // 2


def test_without_webcodecs_the_page_falls_back_to_pcm16(server: ServerThread, new_page) -> None:  # type: ignore[no-untyped-def]
    page = new_page()
    page.add_init_script("delete window.AudioDecoder; delete window.EncodedAudioChunk;")
    page.goto(server.http + "/?format=opus&rate=24000")
    wait_ready(page)
    assert page.evaluate("window.rtts.stats.wireFormat") == "pcm16"
    page.select_option("#voice", VOICE)
    rec = wait_played_out(page, speak_from_page(page, "Plain samples then."))
    assert rec["format"] == "pcm16" and rec["played"] >= 0.95 * rec["sent"] > 0
