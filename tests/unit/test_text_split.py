"""Pure tests for rtts.text.split: examples first, then properties."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtts.text.split import CLAUSE, CUT, PAUSE_MS, SENTENCE, Unit, UnitBuffer, pause_ms, split_units


def texts(units: list[Unit]) -> list[str]:
    return [u.text for u in units]


def stream(text: str, pieces: list[int] | None = None, **limits: int) -> list[Unit]:
    """Feed ``text`` to a UnitBuffer in pieces of the given sizes (default: chars)."""
    buffer = UnitBuffer(**limits)
    units: list[Unit] = []
    i = 0
    for size in pieces or [1] * len(text):
        units += buffer.feed(text[i : i + size])
        i += size
    units += buffer.feed(text[i:])
    return units + buffer.flush()


def assert_covers(text: str, units: list[Unit]) -> None:
    """The units are consecutive pieces of ``text`` with whitespace collapsed."""
    normal = " ".join(text.split())
    pos = 0
    for unit in units:
        assert unit.text and unit.text == " ".join(unit.text.split())
        if normal.startswith(" ", pos):
            pos += 1
        assert normal.startswith(unit.text, pos), (unit, normal[pos:])
        pos += len(unit.text)
    assert pos == len(normal)


# --- sentences and clauses ----------------------------------------------------


def test_sentences() -> None:
    assert split_units("Hello world. How are you?") == [
        Unit("Hello world.", SENTENCE),
        Unit("How are you?", SENTENCE),
    ]


def test_empty_and_whitespace_only() -> None:
    assert split_units("") == []
    assert split_units(" \n\t\u3000 ") == []


def test_whitespace_is_collapsed() -> None:
    assert split_units("  Hello \t  big\u00a0world.  \n ") == [Unit("Hello big world.", SENTENCE)]


def test_text_without_terminator_is_one_sentence() -> None:
    assert split_units("Hi") == [Unit("Hi", SENTENCE)]


@pytest.mark.parametrize(
    "text",
    [
        "Pi is 3.14 and e is 2.718 today.",
        "Meet me at 10:30 or 11:45 tomorrow.",
        "It costs 1,000 or 1,250,000 dollars.",
        "Mr. Smith met Mrs. Jones and Dr. Who.",
        "Go to St. Paul's vs. the No. 5 church.",
        "Bring fruit, e.g. apples, i.e. food.",
        "He moved to the U.S. last year.",
        "We met at 9 a.m. and left at 5 p.m. today.",
        "Apples, pears, etc. are all fruit.",
        "J. R. R. Tolkien wrote it.",
        "Wait... what happened here?",
        "Visit https://example.com/a.b?c=1,2;d=3 now.",
        "Mail jane.doe@example.co.uk today.",
        "A well-known 1990–2000 era, -5 degrees.",
    ],
)
def test_no_split_inside(text: str) -> None:
    assert split_units(text, first_max_chars=60) == [Unit(text, SENTENCE)]


def test_maybe_abbreviations_end_a_sentence_before_a_capital() -> None:
    text = "Okay. I like apples, pears, etc. Then I left at 5 p.m. Later, No. 5 said no. I agree."
    assert texts(split_units(text)) == [
        "Okay.",
        "I like apples, pears, etc.",
        "Then I left at 5 p.m.",
        "Later, No. 5 said no.",
        "I agree.",
    ]


def test_pronoun_i_ends_a_sentence() -> None:
    assert texts(split_units("Okay. So do I. Then what?")) == ["Okay.", "So do I.", "Then what?"]


def test_ellipsis_before_a_capital_ends_a_sentence() -> None:
    assert texts(split_units("Okay. Well... I suppose so.")) == ["Okay.", "Well...", "I suppose so."]


def test_numbered_list_items_are_not_split_after_the_number() -> None:
    assert texts(split_units("1. Preheat the oven.\n  2. Mix the flour.")) == [
        "1. Preheat the oven.",
        "2. Mix the flour.",
    ]


def test_closing_quotes_and_brackets_stay_with_the_sentence() -> None:
    assert texts(split_units('He said "Stop." Then he left. (Really!) Yes. 「はい。」')) == [
        'He said "Stop."',
        "Then he left.",
        "(Really!)",
        "Yes.",
        "「はい。」",
    ]


def test_newlines_end_sentences() -> None:
    assert split_units("Title\n\nBody text here\r\nMore") == [
        Unit("Title", SENTENCE),
        Unit("Body text here", SENTENCE),
        Unit("More", SENTENCE),
    ]


def test_newline_after_clause_mark_ends_the_sentence() -> None:
    assert split_units("Dear John,\nThank you.") == [
        Unit("Dear John,", SENTENCE),
        Unit("Thank you.", SENTENCE),
    ]


def test_unspeakable_lines_join_the_next_sentence() -> None:
    assert texts(split_units("Okay.\n* * *\nMore text.")) == ["Okay.", "* * * More text."]


def test_cjk_sentences_need_no_space() -> None:
    assert texts(split_units("今日は晴れです。明日は雨でしょう！本当？")) == [
        "今日は晴れです。",
        "明日は雨でしょう！",
        "本当？",
    ]


def test_ascii_terminator_before_cjk_ends_a_sentence() -> None:
    assert texts(split_units("你好!我是小明。")) == ["你好!", "我是小明。"]


def test_later_units_keep_short_clauses_together() -> None:
    text = "Okay. Yes, no, maybe, I think so; but — as you said — who knows: not me."
    assert split_units(text) == [
        Unit("Okay.", SENTENCE),
        Unit("Yes, no, maybe, I think so; but — as you said — who knows: not me.", SENTENCE),
    ]


# --- the short first unit ---------------------------------------------------


def test_short_first_sentence_is_whole() -> None:
    assert split_units("Hi, there. Bye.") == [Unit("Hi, there.", SENTENCE), Unit("Bye.", SENTENCE)]


def test_long_first_sentence_starts_with_its_first_clause() -> None:
    text = "Oh, I think that the weather today is going to be really nice and warm."
    assert split_units(text) == [
        Unit("Oh,", CLAUSE),
        Unit("I think that the weather today is going to be really nice and warm.", SENTENCE),
    ]


def test_long_first_clause_is_cut_at_a_word_boundary() -> None:
    text = "The quick brown fox jumps over the lazy dog and keeps running far away, then stops."
    units = split_units(text)
    assert units[0] == Unit("The quick brown fox jumps over the lazy", CUT)
    assert len(units[0].text) <= 40
    assert texts(units[1:]) == ["dog and keeps running far away, then stops."]


@pytest.mark.parametrize("dash", [" — ", "—", " - ", " – ", " -- "])
def test_dash_is_a_clause_boundary(dash: str) -> None:
    text = f"I went home early that night{dash}it was late and very cold outside."
    assert texts(split_units(text))[0] == f"I went home early that night{dash.rstrip()}"
    assert split_units(text)[0].end == CLAUSE


def test_cjk_first_unit_is_cut_by_characters_only_past_a_whole_clause() -> None:
    text = "今日は晴れです" * 12 + "。"  # 85 characters and no mark: too long to wait for
    units = split_units(text, first_max_chars=20)
    assert units[0].end == CUT and len(units[0].text) == 20
    assert_covers(text, units)
    # Issue 32: a clause within CJK_FIRST_CLAUSE stays whole, its words with it.
    assert texts(split_units("次の電車は十時三十分に東京駅を出発します。", first_max_chars=16)) == [
        "次の電車は十時三十分に東京駅を出発します。"
    ]
    assert texts(split_units("会议定于2026年3月15日上午9点举行。会议时间两小时。", first_max_chars=16))[0] == (
        "会议定于2026年3月15日上午9点举行。"
    )


def test_a_first_clause_of_a_few_cjk_characters_is_not_a_unit_of_its_own() -> None:
    """"请注意，" alone gave 0.82 s of audio, too little for the next unit's first run on a
    slower box (a gap in every round): it goes with the sentence or the next clause, and
    the engine cuts the first run to the box's speed. A longer first clause is a unit as
    before, and so is a short one with nothing whole within reach."""
    zh = "请注意，本次列车即将到达杭州东站。下车的旅客请带好您的随身物品，从列车前进方向的右侧车门下车。"
    assert texts(split_units(zh, first_max_chars=16)) == [
        "请注意，本次列车即将到达杭州东站。", "下车的旅客请带好您的随身物品，从列车前进方向的右侧车门下车。"
    ]
    assert texts(split_units("次は、新宿です。お忘れ物のないよう、ご注意ください。", first_max_chars=16))[0] == "次は、新宿です。"
    assert texts(split_units("请注意，各位旅客，" + "本" * 40 + "。", first_max_chars=16))[0] == "请注意，各位旅客，"
    assert texts(split_units("各位旅客请注意，G1023次列车开始检票。", first_max_chars=16))[0] == "各位旅客请注意，"
    assert texts(split_units("请注意，" + "本" * 50 + "。", first_max_chars=16))[0] == "请注意，"  # none within reach
    assert texts(split_units("请注意，今天 Hello world 很好。", first_max_chars=16))[0] == "请注意，"  # Latin words
    for text in (zh, "请注意，各位旅客，" + "本" * 40 + "。", "请注意，" + "本" * 50 + "。"):
        for pieces in (None, [3] * 40, [1, 7, 2] * 15):
            assert stream(text, pieces, first_max_chars=16) == split_units(text, first_max_chars=16)


def test_cjk_cut_does_not_split_a_latin_word() -> None:
    units = split_units("我喜欢用Python编程" * 5, first_max_chars=8)  # 60 characters: past CJK_FIRST_CLAUSE
    assert units[0].text == "我喜欢用"


def test_giant_token_is_cut_to_fit() -> None:
    text = "x" * 100
    units = split_units(text, first_max_chars=30, max_chars=60)
    assert [len(u.text) for u in units] == [30, 70 - 35, 35]
    assert_covers(text, units)


def test_a_first_word_longer_than_the_first_unit_is_kept_whole() -> None:
    """Issue 30, bug 5: a 68-digit number was cut into a 40-character first unit and the
    rest, and each unit's words are timed apart: two ``words`` entries for one word. A
    word that fits in a later unit (``max_chars``) is a first unit of its own instead."""
    number = "1234567890" * 6 + "12345678"
    url = "https://example.com/a/very/long/path/to/something?x=1&y=2"
    for text, first in ((number, number), (f"{number}.", f"{number}."), (f"{url} is the address.", url),
                        (f"{number}, and then the rest.", f"{number},")):
        assert split_units(text)[0].text == first, text
        assert stream(text)[0] == split_units(text)[0], text  # streamed: waits for the word's end
        assert stream(text, [7] * 20) == split_units(text), text
    assert split_units(f"{number}, and then the rest.")[0].end == CLAUSE  # the comma's pause
    buffer = UnitBuffer()
    assert buffer.feed(number) == []  # the word may go on
    assert buffer.feed(" and") == [Unit(number, CUT)]
    # Longer than any unit: cut as before (each part its own entry: docs/protocol.md).
    assert [len(u.text) for u in split_units("x" * 300)] == [40, 130, 130]


# --- long sentences ---------------------------------------------------------


def test_long_sentence_splits_at_clauses_into_balanced_units() -> None:
    clauses = [f"this is clause number {i}" for i in range(12)]
    text = "Okay. " + ", ".join(clauses) + "."
    units = split_units(text, max_chars=250)
    assert texts(units) == [
        "Okay.",
        ", ".join(clauses[:6]) + ",",
        ", ".join(clauses[6:]) + ".",
    ]
    assert [u.end for u in units] == [SENTENCE, CLAUSE, SENTENCE]


def test_long_sentence_without_clauses_is_cut_at_words() -> None:
    text = "Okay. " + " ".join(f"word{i}" for i in range(80)) + "."
    units = split_units(text, max_chars=150)
    assert [u.end for u in units] == [SENTENCE, CUT, CUT, CUT, SENTENCE]  # 550 chars
    assert all(len(u.text) <= 150 for u in units)
    assert all(u.text.split()[0].startswith("word") for u in units[1:])
    assert_covers(text, units)


def test_clause_near_start_does_not_make_a_stub_unit() -> None:
    text = "Okay. Oh, " + " ".join(f"word{i}" for i in range(50)) + "."
    units = split_units(text, max_chars=200)
    assert texts(units)[1].startswith("Oh, word0")


# --- pauses -----------------------------------------------------------------


def test_pause_ms_table() -> None:
    assert pause_ms(Unit("a.", SENTENCE)) == PAUSE_MS[SENTENCE] == 250
    assert pause_ms(Unit("a,", CLAUSE)) == PAUSE_MS[CLAUSE] == 120
    assert pause_ms(Unit("a", CUT)) == PAUSE_MS[CUT] == 0
    with pytest.raises(TypeError):
        PAUSE_MS[SENTENCE] = 1  # type: ignore[index]


def test_unit_is_frozen() -> None:
    with pytest.raises(AttributeError):
        Unit("a", SENTENCE).text = "b"  # type: ignore[misc]


@pytest.mark.parametrize(("first", "most"), [(0, 10), (20, 10)])
def test_bad_limits(first: int, most: int) -> None:
    with pytest.raises(ValueError):
        split_units("x", first_max_chars=first, max_chars=most)
    with pytest.raises(ValueError):
        UnitBuffer(first_max_chars=first, max_chars=most)


# --- streaming --------------------------------------------------------------


def test_terminator_at_end_of_buffer_waits() -> None:
    buffer = UnitBuffer()
    assert buffer.feed("Pi is 3.") == []
    assert buffer.feed("14 or so") == []
    assert buffer.pending == len("Pi is 3.14 or so")
    assert buffer.feed(". Then") == [Unit("Pi is 3.14 or so.", SENTENCE)]
    assert buffer.pending == len("Then")  # leading whitespace is dropped
    assert buffer.flush() == [Unit("Then", SENTENCE)]
    assert buffer.pending == 0


def test_whitespace_proves_a_sentence_complete() -> None:
    buffer = UnitBuffer()
    assert buffer.feed("Hello.") == []
    assert buffer.feed(" ") == [Unit("Hello.", SENTENCE)]


def test_closing_quote_may_still_arrive() -> None:
    buffer = UnitBuffer()
    assert buffer.feed('He said "Stop.') == []
    assert buffer.feed('"') == []
    assert buffer.feed(" And") == [Unit('He said "Stop."', SENTENCE)]


def test_abbreviation_waits_for_the_next_word() -> None:
    buffer = UnitBuffer()
    buffer.feed("Okay. ")
    assert buffer.feed("Apples, pears, etc. ") == []
    assert buffer.feed("and more. ") == [Unit("Apples, pears, etc. and more.", SENTENCE)]


def test_clause_is_enough_for_the_first_unit() -> None:
    buffer = UnitBuffer()
    assert buffer.feed("Hi, there") == [Unit("Hi,", CLAUSE)]
    assert buffer.feed(", you") == []  # later units wait for the whole sentence
    assert buffer.feed(". ") == [Unit("there, you.", SENTENCE)]


def test_first_unit_is_cut_once_long_enough() -> None:
    buffer = UnitBuffer(first_max_chars=20)
    assert buffer.feed("one two three four") == []  # "four," would be a clause
    assert buffer.feed(" f") == []  # 20 chars: might still end a 20-char sentence
    assert buffer.feed("i") == [Unit("one two three four", CUT)]


def test_flush_resets_for_the_next_utterance() -> None:
    buffer = UnitBuffer(first_max_chars=10)
    assert buffer.feed("First one. ") == [Unit("First one.", SENTENCE)]
    assert buffer.flush() == []
    assert buffer.feed("Alpha beta gamma delta.") == [Unit("Alpha beta", CUT)]
    assert buffer.flush() == [Unit("gamma delta.", SENTENCE)]


def test_long_stream_matches_one_shot_split() -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "3.14", "Mr.", "e.g.", "10:30", "1,000", "今日は", "—", "-", "x" * 30]
    marks = ["", "", "", ",", ";", ".", "!", "?", "...", ".\n", '."', "。", "、"]
    text = "Okay. " + " ".join(rng.choice(words) + rng.choice(marks) for _ in range(2000))
    sizes = [rng.randint(1, 12) for _ in range(len(text))]
    assert stream(text, sizes) == split_units(text)


# --- properties -------------------------------------------------------------

TOKENS = [
    "Hello", "world", "I", "a", "Mr.", "Dr.", "e.g.", "etc.", "a.m.", "U.S.", "No.", "J.", "1.",
    "3.14", "10:30", "1,000", "5", "https://ex.com/a?b=1,2", "a.b@c.org", "x" * 30,
    "...", "…", "—", "-", "--", ",", ".", "!", "?", ";", ":", '"', "'", ")", "(",
    "「", "」", "。", "、", "，", "今日は", "晴れです", "Python",
    " ", " ", " ", "  ", "\n", "\n\n", "\t", "\u3000", "\u00a0", "\r\n",
]  # fmt: skip

token_text = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
any_text = st.one_of(token_text, st.text(max_size=120))
limits = st.tuples(st.integers(1, 50), st.integers(0, 120)).map(lambda t: (t[0], t[0] + t[1]))


@given(any_text, limits)
def test_split_loses_and_reorders_nothing(text: str, lim: tuple[int, int]) -> None:
    units = split_units(text, first_max_chars=lim[0], max_chars=lim[1])
    assert_covers(text, units)


@given(any_text, limits)
def test_units_respect_limits(text: str, lim: tuple[int, int]) -> None:
    first, most = lim
    units = split_units(text, first_max_chars=first, max_chars=most)
    if units:
        assert len(units[0].text) <= first or " " not in units[0].text  # one long word, kept whole
        assert all(len(u.text) <= most for u in units)
        assert units[-1].end == SENTENCE
        assert {u.end for u in units} <= {SENTENCE, CLAUSE, CUT}


@settings(max_examples=60)
@given(any_text, limits)
def test_char_by_char_stream_keeps_the_text(text: str, lim: tuple[int, int]) -> None:
    units = stream(text, first_max_chars=lim[0], max_chars=lim[1])
    whole = split_units(text, first_max_chars=lim[0], max_chars=lim[1])
    # Whitespace at a unit boundary is dropped (a pause replaces it), and streaming may cut
    # where the whole text did not ("Hello、\tHello"), so compare without whitespace.
    assert "".join("".join(texts(units)).split()) == "".join("".join(texts(whole)).split())
    assert_covers(text, units)
    if units:
        assert len(units[0].text) <= lim[0] or " " not in units[0].text
        assert all(len(u.text) <= lim[1] for u in units)


@settings(max_examples=60)
@given(token_text, st.lists(st.integers(1, 8)), st.integers(0, 60))
def test_stream_matches_split_after_the_first_unit(text: str, sizes: list[int], extra: int) -> None:
    # With a short first sentence the only streaming difference (clause-only first
    # unit) cannot arise, so any way of cutting the input gives identical units.
    text = "Okay. " + text
    most = 10 + extra
    assert stream(text, sizes, max_chars=most, first_max_chars=10) == split_units(
        text, max_chars=most, first_max_chars=10
    )


def test_a_cut_between_cjk_characters_never_splits_a_number():
    # Cut as "…付了23" | ".5元…", the Mandarin reader said 二十三 … 五元 (found by word timing).
    text = "我在2026年3月15日付了23.5元一共三百块钱之后我们又去了别的地方看了看还买了一些水果和面包。"
    units = [u.text for u in split_units(text, first_max_chars=16)]  # past CJK_FIRST_CLAUSE: cut
    assert units[0] == "我在2026年3月15日付了" and units[1].startswith("23.5元")
    assert [u.text for u in split_units("次は15:30発、東京行きの電車がまいります", first_max_chars=5)][0] == "次は15:30発、"
