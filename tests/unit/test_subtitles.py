"""rtts.sound.subtitles: cues from timed words, and the WebVTT and SRT files they make, read
back by strict parsers of both formats (written here: neither format's library is part
of the test install, and these check what players are strict about)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from hypothesis import given
from hypothesis import strategies as st

from rtts.sound import subtitles
from rtts.sound.subtitles import Cue, Style, width

RATE = 24000


def timed(text: str, words: Iterable[str], *, each_s: float = 0.3, gap_s: float = 0.05,
          pauses: dict[str, float] | None = None) -> list[dict]:
    """``words`` found in ``text`` in order, each ``each_s`` long after a ``gap_s`` pause
    (``pauses``: a longer one before the named word), as ``words`` messages carry them."""
    out, pos, t = [], 0, 0.0
    for word in words:
        start = text.index(word, pos)
        pos = start + len(word)
        t += (pauses or {}).get(word, gap_s)
        out.append({"text": word, "text_start": start, "text_end": pos, "said": word.lower(),
                    "start": round(t * RATE), "end": round((t + each_s) * RATE)})
        t += each_s
    return out


def latin_words(text: str) -> list[str]:
    return re.findall(r"\$?\w+(?:[.:'’]\w+)*", text)


# ---------------------------------------------------------------- strict readers


_VTT_TIME = r"(\d{2,}):([0-5]\d):([0-5]\d)\.(\d{3})"
_SRT_TIME = r"(\d{2,}):([0-5]\d):([0-5]\d),(\d{3})"


def _ms(h: str, m: str, s: str, f: str) -> int:
    return ((int(h) * 60 + int(m)) * 60 + int(s)) * 1000 + int(f)


def read_vtt(data: str) -> list[Cue]:
    """WebVTT as its spec parses it: the signature, blocks parted by blank lines, an
    optional identifier without "-->", a timing line, text lines with no "-->" and only
    the escapes and tags WebVTT defines (rtts writes none of the tags)."""
    assert data.startswith("WEBVTT\n\n"), "the file signature"
    assert "\r" not in data and data.endswith("\n\n")
    cues = []
    for block in data[len("WEBVTT\n\n"):].strip("\n").split("\n\n"):
        lines = block.split("\n")
        if "-->" not in lines[0]:
            ident = lines.pop(0)
            assert ident.strip() and "-->" not in ident
        m = re.fullmatch(_VTT_TIME + " --> " + _VTT_TIME, lines[0])
        assert m, f"timing line {lines[0]!r}"
        text = lines[1:]
        assert text and all(line.strip() for line in text), "a cue has text, with no blank line"
        for line in text:
            assert "-->" not in line and "<" not in line
            assert not re.search(r"&(?!amp;|lt;|gt;)", line), f"a bare & in {line!r}"
        unescaped = tuple(t.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") for t in text)
        cues.append(Cue(_ms(*m.groups()[:4]), _ms(*m.groups()[4:]), unescaped))
    return cues


def read_srt(data: str) -> list[Cue]:
    """SubRip: blocks of a counter (1, 2, 3...), a timing line with commas, text lines."""
    assert not data.startswith("\ufeff") and data.endswith("\n\n")
    cues = []
    for n, block in enumerate(data.strip("\n").split("\n\n"), 1):
        lines = block.split("\n")
        assert lines[0] == str(n), f"counter {lines[0]!r}, expected {n}"
        m = re.fullmatch(_SRT_TIME + " --> " + _SRT_TIME, lines[1])
        assert m, f"timing line {lines[1]!r}"
        assert lines[2:] and all(line.strip() for line in lines[2:])
        cues.append(Cue(_ms(*m.groups()[:4]), _ms(*m.groups()[4:]), tuple(lines[2:])))
    return cues


def check(cues: list[Cue], words: list[dict], style: Style = Style()) -> None:
    """What every set of cues must be: readable, in time with the words, never overlapping."""
    assert cues
    end = 0
    for c in cues:
        assert end <= c.start_ms < c.end_ms, "monotonic, no overlap"
        end = c.end_ms
        assert 1 <= len(c.lines) <= style.lines
    assert cues[0].start_ms == round(words[0]["start"] * 1000 / RATE)
    assert cues[-1].end_ms == round(words[-1]["end"] * 1000 / RATE)
    for fmt, read in (("vtt", read_vtt), ("srt", read_srt)):
        assert read(subtitles.render(fmt, cues)) == cues


def shown(cues: list[Cue], sep: str = " ") -> str:
    return sep.join(sep.join(c.lines) for c in cues)


# ---------------------------------------------------------------- English

STORY = ("Hello world! Welcome to the captioned speech system. The 10:30 train to Boston, which was late "
         "again, leaves from platform 4 at $23.50, says Mr. Smith; \"really?\" asked she.")


def test_cues_end_at_sentences_and_keep_the_clients_text() -> None:
    words = timed(STORY, latin_words(STORY))
    cues = subtitles.cues(words, STORY, RATE)
    check(cues, words)
    assert shown(cues) == STORY  # every character as written: punctuation, "$23.50", quotes
    assert cues[0].lines == ("Hello world!",)
    assert cues[1].lines == ("Welcome to the captioned speech system.",)
    assert not any(c.lines[-1].endswith("Mr.") for c in cues)  # an abbreviation ends no sentence
    for c in cues:
        assert all(width(line) <= 1 for line in c.lines)
        assert c.end_ms - c.start_ms <= 6000


def test_a_cue_too_long_breaks_at_its_last_clause_mark() -> None:
    text = ("The northbound service to the airport, which leaves from platform two, "
            "departs today from platform nine because of maintenance work on the tracks.")
    words = timed(text, latin_words(text), each_s=0.2)
    cues = subtitles.cues(words, text, RATE)
    check(cues, words)
    assert shown(cues) == text
    assert cues[0].lines[-1].endswith("platform two,")  # not mid-phrase
    # Two lines, as even as they can be: neither holds more than twice the other.
    long = [c for c in cues if len(c.lines) == 2]
    assert long and all(max(map(len, c.lines)) <= 2 * min(map(len, c.lines)) for c in long)


def test_no_cue_lasts_longer_than_six_seconds() -> None:
    text = "one two three four five six seven eight nine ten eleven twelve"
    words = timed(text, text.split(), each_s=0.9)
    cues = subtitles.cues(words, text, RATE)
    check(cues, words)
    assert all(c.end_ms - c.start_ms <= 6000 for c in cues) and len(cues) >= 2
    assert shown(cues) == text


def test_a_long_silence_starts_a_new_cue() -> None:
    text = "Please stand clear of the doors now"
    words = timed(text, text.split(), pauses={"now": 1.5})
    cues = subtitles.cues(words, text, RATE)
    check(cues, words)
    assert [c.lines for c in cues] == [("Please stand clear of the doors",), ("now",)]
    assert cues[1].start_ms - cues[0].end_ms == 1500


def test_markup_is_not_shown_and_vtt_escapes_what_it_must() -> None:
    text = 'Fish &amp; chips <break time="1.5s"/> at <sub alias="World Wide Web">WWW</sub> dot <i>com</i> & more.'
    visible = ["Fish", "chips", "at", "WWW", "dot", "com", "more"]
    words = timed(text, visible, pauses={"at": 1.8})
    cues = subtitles.cues(words, text, RATE)
    check(cues, words)
    assert [c.lines for c in cues] == [("Fish & chips",), ("at WWW dot com & more.",)]
    assert "Fish &amp; chips" in subtitles.render("vtt", cues)
    assert "Fish & chips" in subtitles.render("srt", cues)


def test_a_paragraph_starts_a_new_cue() -> None:
    text = "Gate changes\n\nFlight 12 now boards at gate 5"
    words = timed(text, latin_words(text))
    assert [c.lines for c in subtitles.cues(words, text, RATE)] == [("Gate changes",), ("Flight 12 now boards at gate 5",)]


# ---------------------------------------------------------------- Chinese and Japanese

MANDARIN = "今天天气很好，我们去公园散步吧。北京时间2026年3月15日下午三点，会议正式开始，请各位准时参加并提前十分钟到场签到。"
MANDARIN_WORDS = ["今天", "天气", "很", "好", "我们", "去", "公园", "散步", "吧", "北京", "时间", "2026年", "3月",
                  "15日", "下午", "三点", "会议", "正式", "开始", "请", "各位", "准时", "参加", "并", "提前",
                  "十分钟", "到场", "签到"]


def test_mandarin_is_joined_without_spaces_and_broken_for_its_wide_characters() -> None:
    words = timed(MANDARIN, MANDARIN_WORDS, each_s=0.25)
    cues = subtitles.cues(words, MANDARIN, RATE)
    check(cues, words)
    assert shown(cues, "") == MANDARIN
    assert not any(" " in line for c in cues for line in c.lines)
    assert cues[0].lines == ("今天天气很好，我们去公园散步吧。",)  # a sentence, 16 characters: one line
    for c in cues:
        assert all(width(line) <= 1 for line in c.lines)  # at most 16 characters (digits count half)
    # A cue's lines break after its clause mark, or where they are even when it has none.
    assert cues[1].lines == ("北京时间2026年3月15日下午三点，", "会议正式开始，")
    assert cues[2].lines == ("请各位准时参加并", "提前十分钟到场签到。")


def test_mandarin_per_character() -> None:
    text = "欢迎光临。请随便看看。"
    chars = [ch for ch in text if ch not in "。"]
    words = timed(text, chars, each_s=0.2)
    cues = subtitles.cues(words, text, RATE)
    check(cues, words)
    assert [c.lines for c in cues] == [("欢迎光临。",), ("请随便看看。",)]


JAPANESE = "本日は晴天なり。次の電車は、十時三十分に三番線から発車いたします。「お急ぎください」とのことです。"
JAPANESE_WORDS = ["本日", "は", "晴天", "なり", "次", "の", "電車", "は", "十時", "三十分", "に", "三番線", "から",
                  "発車", "いたし", "ます", "お", "急ぎ", "ください", "と", "の", "こと", "です"]


def test_japanese_keeps_its_brackets_with_their_words() -> None:
    words = timed(JAPANESE, JAPANESE_WORDS, each_s=0.22)
    cues = subtitles.cues(words, JAPANESE, RATE)
    check(cues, words)
    assert shown(cues, "") == JAPANESE
    assert cues[0].lines == ("本日は晴天なり。",)
    assert cues[-1].lines[0].startswith("「お急ぎ")  # the opening bracket goes with what it opens
    assert any(line.endswith("ください」とのことです。") or line.endswith("」とのことです。") for line in cues[-1].lines)


def test_mixed_wide_and_narrow_characters_share_a_line() -> None:
    assert width("あ" * 16) == 1 and width("a" * 42) == 1
    assert width("あ" * 8 + "a" * 21) == 1


# ---------------------------------------------------------------- streaming and properties


def test_pushed_piece_by_piece_it_makes_the_same_cues() -> None:
    words = timed(STORY, latin_words(STORY))
    builder = subtitles.Cues(STORY, RATE)
    streamed = []
    for i in range(0, len(words), 3):
        streamed += builder.push(words[i:i + 3])
    assert streamed and streamed + builder.finish() == subtitles.cues(words, STORY, RATE)


_WORD = st.sampled_from(["the", "train", "to", "Boston,", "leaves", "now.", "platform", "four;", "eleven", "$23.50",
                         "“quick”", "gate!", "北京", "时间。", "電車", "は、", "a", "extraordinarily"])


@given(st.lists(st.tuples(_WORD, st.floats(0.0, 0.6), st.floats(0.0, 2.0)), min_size=1, max_size=60))
def test_any_words_make_valid_files(items: list[tuple[str, float, float]]) -> None:
    text = " ".join(w for w, _, _ in items)
    words, pos, t = [], 0, 0.0
    for token, length, gap in items:
        core = re.search(r"[\w$.]+", token)
        assert core
        start = text.index(token, pos) + core.start()
        pos = start + len(core.group())
        t += gap
        words.append({"text": core.group(), "text_start": start, "text_end": pos, "said": "",
                      "start": round(t * RATE), "end": round((t + length) * RATE)})
        t += length
    cues = subtitles.cues(words, text, RATE)
    end = 0
    for c in cues:
        assert end <= c.start_ms < c.end_ms
        end = c.end_ms
        assert len(c.lines) <= 2
    assert read_vtt(subtitles.render("vtt", cues)) == cues
    assert read_srt(subtitles.render("srt", cues)) == cues
    assert "".join(shown(cues).split()) == "".join(text.split())  # all of it, in order
