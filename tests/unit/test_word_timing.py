"""Word timing without models: origins, matching phonemes to words, and the session's entries.

The engine is played by hand: each job's items are made by the real front ends (the
normalizers, espeak-ng's word cuts, jieba and OpenJTalk through ``FrontEnds.words``) with
times made up in order, so what is checked is the mapping back to the client's text:
every written word in exactly one entry, in order, whatever the normalizers read for it.
The same runs end to end with real voices in tests/live/test_words_live.py.
"""

from __future__ import annotations

import functools
import re

import msgpack
import numpy as np
import pytest

from rtts import protocol
from rtts.engines.base import Spoken
from rtts.g2p.kokoro_langs import FrontEnds
from rtts.g2p.words import Word, front_end_words, locate, split_span, squeeze, with_lexicon, words_of
from rtts.speech.word_timing import Clock
from rtts.synthesis.jobs import JobAudio, JobDone, JobWords
from rtts.text import markup
from rtts.text.lexicon import Lexicon
from rtts.text.normalize_en import normalize_en
from rtts.text.normalize_ja import normalize_ja
from rtts.text.normalize_romance import normalize_romance
from rtts.text.normalize_zh import normalize_zh
from rtts.text.origins import aligned, identity
from rtts.text.written import atoms
from tests.unit import test_normalize_en, test_normalize_ja, test_normalize_romance, test_normalize_zh
from tests.unit.test_session import make, sent, submits

# ---------------------------------------------------------------- origins


def test_aligned_maps_kept_characters_to_themselves_and_a_reading_to_what_it_read():
    source, target = "I paid $5 today", "I paid five dollars today"
    origins = aligned(source, target)
    assert origins.span(0, 6) == (0, 6)
    assert source[slice(*origins.span(7, 19))] == "$5"
    assert source[slice(*origins.span(20, 25))] == "today"


def test_origins_compose_back_through_two_rewrites():
    raw = 'Call <sub alias="Doctor">Dr.</sub> Lee at 5'
    rendered, to_raw = markup.render_mapped(raw)
    normalized = normalize_en(rendered)
    back = aligned(rendered, normalized).then(to_raw)
    five = normalized.rindex("five")
    assert raw[slice(*back.span(five, five + 4))] == "5"
    doctor = normalized.index("Doctor")
    assert raw[slice(*back.span(doctor, doctor + 6))] == "Dr."


def test_render_mapped_renders_what_render_does():
    for raw in ["plain", 'a <break time="1s"/> b &amp; c', "<say-as interpret-as='characters'>AB</say-as>", "x \ue001 y <3"]:
        assert markup.render_mapped(raw)[0] == markup.render(raw)


def test_markup_stream_origins_count_all_the_text_fed():
    stream = markup.MarkupStream()
    pieces = ["Hello <sub al", 'ias="World Wide Web">W', "WW</sub> and more"]
    text = ""
    origins = identity(0)
    for piece in pieces:
        rendered, o = stream.feed_mapped(piece)
        text, origins = text + rendered, origins + o
    rendered, o = stream.flush_mapped()
    text, origins = text + rendered, origins + o
    raw = "".join(pieces)
    assert text == markup.render(raw)
    world = text.index("World")
    assert raw[slice(*origins.span(world, world + 14))] == "WWW"
    assert raw[slice(*origins.span(len(text) - 4, len(text)))] == "more"


# ---------------------------------------------------------------- phonemes of words


def test_locate_splits_a_merged_reading_between_its_words():
    # espeak-ng reads "of the" as one word: "ʌvðə"
    spans = locate(["ʌv", "ðə", "bˈɛst"], "ʌvðə bˈɛst.")
    assert spans == [(0, 2), (2, 4), (5, 10)]


def test_locate_covers_a_reading_that_context_changed():
    whole = "fˈɪftiːnθ, twˈɛnti twˈɛntisˈɪks"
    spans = locate(["fˈɪftiːnθ", "twˈɛnti", "twˈɛnti sˈɪks"], whole)
    assert [whole[a:b] for a, b in spans] == ["fˈɪftiːnθ", "twˈɛnti", "twˈɛntisˈɪks"]


def test_words_of_keeps_the_phonemes_and_names_the_written_words():
    text = "I paid $23.50 on March 15."
    whole, words = words_of(text, normalize_en, lambda t: t.lower())
    assert whole == normalize_en(text).lower()
    assert {text[w.text_start : w.text_end] for w in words if "dollars" in w.said} == {"$23.50"}


def test_the_items_of_one_written_word_span_all_of_it():
    # "pm" is read "P M", matched letter by letter: both items must name "pm", so that an
    # engine sends them in one go (the session makes them one entry).
    text = "at 6:45 pm"
    _, words = with_lexicon(text, lambda piece: words_of(piece, normalize_en, str.lower))
    assert [(text[w.text_start : w.text_end], w.said) for w in words][-2:] == [("pm", "P"), ("pm", "M")]


def test_squeeze_is_keep_known():
    text, where = squeeze("  a?b  c\u0303 ", set("abc"))
    assert text == "ab c"
    assert where[2] == 0 and where[5] == 2 and where[-1] == len(text)


def test_split_span_uses_each_characters_own_phonemes():
    chars = ["ʂa↘ŋ", "ɕja↘", "ꭧʰɤ→"]
    items = split_span(Word(0, 3, "上下车", 10, 10 + sum(map(len, chars))), "上下车", chars)
    assert [(i.start, i.end) for i in items] == [(10, 14), (14, 18), (18, 22)]  # ꭧʰɤ→ is four symbols
    assert {i.word for i in items} == {0}
    equal = split_span(Word(0, 2, "新宿", 0, 8), "新宿")  # no characters' phonemes: equal shares
    assert [(i.start, i.end) for i in equal] == [(0, 4), (4, 8)]


# ---------------------------------------------------------------- coverage over the golden tables


@functools.cache
def _front_ends() -> FrontEnds:
    return FrontEnds()


def _items(text: str, lang: str) -> list[Word]:
    """The engine's words of ``text`` as Kokoro makes them (phonemes aside)."""
    if lang in ("zh", "ja"):
        normalized = (normalize_zh if lang == "zh" else normalize_ja)(text)
        whole, found = _front_ends().words(lang, normalized)
        return front_end_words(text, normalized, whole, found)
    if lang == "en":
        return words_of(text, normalize_en, str.lower)[1]
    return words_of(text, lambda t: normalize_romance(t, lang), str.lower)[1]


def _timed(words: list[Word]) -> tuple[Spoken, ...]:
    return tuple(Spoken(w.text_start, w.text_end, w.said, 100 * i, 100 * i + 80, w.word) for i, w in enumerate(words))


def _entries(text: str, lang: str, unit: str = "word") -> list:
    clock = Clock(unit)
    clock.add(text, *markup.render_mapped(text))
    part = clock.part(text, identity(len(text)))
    return clock.entries(part, _timed(_items(text, lang)), 0, 1.0) + clock.finish(part, 10**6)


def _check_coverage(text: str, entries: list) -> None:
    spans = [(e.text_start, e.text_end) for e in entries]
    assert spans == sorted(spans) and all(a < b for a, b in spans), spans
    assert all(b <= c for (_, b), (c, _) in zip(spans, spans[1:])), f"overlapping entries: {spans}"
    for e in entries:
        assert e.text == text[e.text_start : e.text_end]
        assert e.start <= e.end
    for a, b in atoms(text):
        if re.search(r"[\w$%°€£¥]", text[a:b]):
            inside = [s for s in spans if s[0] <= a and b <= s[1]]
            assert len(inside) == 1, f"{text[a:b]!r} of {text!r} is in {len(inside)} entries: {entries}"
    starts = [e.start for e in entries]
    assert starts == sorted(starts)


@pytest.mark.parametrize("written", [w for w, _ in test_normalize_en.GOLDEN])
def test_every_english_word_is_timed_once_in_order(written):
    _check_coverage(written, _entries(written, "en"))


@pytest.mark.parametrize("written", [w for w, _ in test_normalize_zh.GOLDEN])
def test_every_mandarin_word_is_timed_once_in_order(written):
    _check_coverage(written, _entries(written, "zh"))
    _check_coverage(written, _entries(written, "zh", "char"))


@pytest.mark.parametrize("written", [w for w, _ in test_normalize_ja.GOLDEN])
def test_every_japanese_word_is_timed_once_in_order(written):
    _check_coverage(written, _entries(written, "ja"))


@pytest.mark.parametrize(("lang", "written"), [(lang, w) for lang, w, _ in test_normalize_romance.GOLDEN])
def test_every_romance_word_is_timed_once_in_order(lang, written):
    _check_coverage(written, _entries(written, lang))


def test_money_is_one_word_with_what_was_read_for_it():
    entries = _entries("I paid $23.50 on March 15, 2026.", "en")
    by_text = {e.text: e.said for e in entries}
    assert by_text["$23.50"] == "twenty-three dollars and fifty cents"
    assert by_text["15"] == "fifteenth"
    assert by_text["2026"] == "twenty twenty-six"


def test_a_time_is_read_for_itself_and_pm_for_itself():
    entries = _entries("Meet me at 5:30 pm today.", "en")
    assert [(e.text, e.said) for e in entries][3:5] == [("5:30", "five thirty"), ("pm", "P M")]


def test_a_word_with_no_sound_of_its_own_is_part_of_the_one_before():
    clock = Clock("word")
    text = "でしょうか"
    clock.add(text, *markup.render_mapped(text))
    part = clock.part(text, identity(len(text)))
    items = (Spoken(0, 3, "でしょ", 0, 100, 0), Spoken(3, 4, "う", 100, 100, 1), Spoken(4, 5, "か", 100, 150, 2))
    entries = clock.entries(part, items, 0, 1.0)
    assert [(e.text, e.start, e.end) for e in entries] == [("でしょう", 0, 100), ("か", 100, 150)]


def test_mandarin_words_and_characters():
    words = _entries("请您不要在车门关闭时上下车。", "zh")
    assert [e.text for e in words] == ["请", "您", "不要", "在", "车门", "关闭", "时", "上下车"]
    chars = _entries("请您不要在车门关闭时上下车。", "zh", "char")
    assert "".join(e.text for e in chars) == "请您不要在车门关闭时上下车" and len(chars) == 13
    # A number read as several words is one entry, with the character after it in its word.
    assert [e.text for e in _entries("2026年3月15日", "zh")][:2] in (["2026年", "3月"], ["2026", "年"])


# ---------------------------------------------------------------- the session


def _speak(session, text, **fields):
    effects = session.receive(msgpack.packb({"type": "speak", "id": "u", "text": text, **fields}))
    out = list(effects)
    while jobs := submits(effects):
        effects = []
        for job in jobs:
            rate = job.voice.native_rate
            if job.pause_ms:
                effects += session.job_event(job, JobAudio(np.zeros(job.pause_ms * rate // 1000, np.float32)))
            else:
                if job.words:
                    words = _items(job.text, job.lang)
                    effects += session.job_event(job, JobWords(_timed(words)))
                effects += session.job_event(job, JobAudio(np.full(rate // 2, 0.1, np.float32)))
            effects += session.job_event(job, JobDone(0.0))
        out += effects
    return out


def test_words_come_only_when_asked_and_before_the_audio_they_describe():
    session, _ = make()
    text = "Good morning. Tom & Jerry paid $5 for <sub alias='World Wide Web'>WWW</sub>!"
    plain = _speak(session, text)
    assert not sent(plain, protocol.Words)
    session, _ = make()
    effects = _speak(session, text, words=True)
    messages = sent(effects)
    words = [w for m in messages if isinstance(m, protocol.Words) for w in m.words]
    assert [w["text"] for w in words] == ["Good", "morning", "Tom", "&", "Jerry", "paid", "$5", "for", "WWW"]
    assert words[-1]["said"] == "World Wide Web"
    assert all(text[w["text_start"] : w["text_end"]] == w["text"] for w in words)
    first_words = next(i for i, m in enumerate(messages) if isinstance(m, protocol.Words))
    first_audio = next(i for i, m in enumerate(messages) if isinstance(m, protocol.Audio))
    assert first_words < first_audio
    # On the pts clock: the second sentence starts after the first's audio and its pause.
    starts = [w["start"] for w in words]
    assert starts == sorted(starts) and starts[2] >= 24000 // 2


def test_a_lexicon_word_is_timed_as_the_word_written():
    from rtts.config import Config
    from rtts.speech.session import Session
    from tests.unit.test_session import Catalog

    cfg = Config(cache_dir="/tmp/rtts-test", models_dir="/tmp/rtts-test")
    session = Session("s", cfg, Catalog(), lexicon=Lexicon.parse("Nguyen = Win\nXiaomi = /ʃaʊmi/"))
    effects = _speak(session, "Mr Nguyen likes Xiaomi phones.", words=True)
    words = [w for m in sent(effects, protocol.Words) for w in m.words]
    assert [w["text"] for w in words] == ["Mr", "Nguyen", "likes", "Xiaomi", "phones"]


def test_appended_text_is_timed_against_all_of_it():
    session, _ = make()
    out = []
    pieces = ["Hello there, ", "how are ", "you today? Fine."]
    for i, piece in enumerate(pieces):
        fields = {"words": True} if i == 0 else {}
        out += session.receive(msgpack.packb({"type": "append", "id": "u", "text": piece, **fields}))
    out += session.receive(msgpack.packb({"type": "flush", "id": "u"}))
    effects = out
    while jobs := submits(effects):
        effects = []
        for job in jobs:
            if job.words:
                effects += session.job_event(job, JobWords(_timed(_items(job.text, job.lang))))
            effects += session.job_event(job, JobAudio(np.full(job.voice.native_rate // 4, 0.1, np.float32)))
            effects += session.job_event(job, JobDone(0.0))
        out += effects
    text = "".join(pieces)
    words = [w for m in sent(out, protocol.Words) for w in m.words]
    assert [w["text"] for w in words] == ["Hello", "there", "how", "are", "you", "today", "Fine"]
    assert all(text[w["text_start"] : w["text_end"]] == w["text"] for w in words)


def test_mixed_languages_are_timed_in_order():
    from rtts.config import Config
    from rtts.engines.base import VoiceInfo
    from rtts.speech.session import Session
    from tests.catalogs import FixedCatalog

    voices = {
        "kokoro/af": VoiceInfo("kokoro/af", "af", ("en", "zh"), "kokoro", 24000, "kokoro", "af"),
        "kokoro/zf": VoiceInfo("kokoro/zf", "zf", ("zh", "en"), "kokoro", 24000, "kokoro", "zf"),
    }
    catalog = FixedCatalog(voices, "kokoro/af", lang_voices=(("zh", "kokoro/zf"),))
    session = Session("s", Config(cache_dir="/tmp/rtts-test", models_dir="/tmp/rtts-test"), catalog)
    text = "Platform 3 到了，请上车 at 5 pm。Gate 5号"
    effects = _speak(session, text, words=True)
    assert not sent(effects, protocol.Error)
    words = [w for m in sent(effects, protocol.Words) for w in m.words]
    texts = [w["text"] for w in words]
    assert texts[:2] == ["Platform", "3"] and texts[-5:] == ["at", "5", "pm", "Gate", "5号"], texts
    assert "".join(texts[2:-5]) == "到了请上车"
    assert all(text[w["text_start"] : w["text_end"]] == w["text"] for w in words)
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)


def test_hello_words_is_checked_at_the_edge():
    session, _ = make()
    effects = session.receive(msgpack.packb({"type": "hello", "words": "syllable"}))
    assert [m.code for m in sent(effects, protocol.Error)] == ["bad_message"]
    effects = session.receive(msgpack.packb({"type": "hello", "words": 3}))
    assert [m.code for m in sent(effects, protocol.Error)] == ["bad_message"]
