"""benchmarks/word_timing.py's pure parts: how our words are paired with Whisper's, and the exactness checks."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("word_timing", ROOT / "benchmarks" / "word_timing.py")
assert _spec is not None and _spec.loader is not None
wt = importlib.util.module_from_spec(_spec)
sys.modules["word_timing"] = wt  # dataclasses look their module up there
_spec.loader.exec_module(wt)

RATE = 16000


def toks(words: list[str], lang: str = "en") -> list[list[str]]:
    return [wt.tokens(w, lang) for w in words]


def test_tokens_fold_case_width_and_punctuation() -> None:
    assert wt.tokens("Hello,", "en") == ["hello"]
    assert wt.tokens("$23.50", "en") == ["23", "50"]
    assert wt.tokens("Today\u2019s", "en") == ["today's"]
    assert wt.tokens("l'après-midi", "fr") == ["l'après", "midi"]
    assert wt.tokens("—", "en") == []
    assert wt.tokens("会议，", "zh") == ["会", "议"]
    assert wt.tokens("１５時", "ja") == ["1", "5", "時"]  # NFKC: full-width digits
    assert wt.tokens("Bluetooth", "zh") == list("bluetooth")


def test_a_word_whisper_splits_is_compared_at_both_edges() -> None:
    ours = toks(["Your", "total", "is", "$23.50,"])
    theirs = toks([" Your", " total", " is", " $23", ".50,"])
    pairs = wt.align(ours, theirs)
    assert pairs.starts == ((0, 0), (1, 1), (2, 2), (3, 3))
    assert pairs.ends == ((0, 0), (1, 1), (2, 2), (3, 4))


def test_a_word_whisper_joins_is_compared_at_its_outer_edges() -> None:
    ours = toks(["twenty", "three", "dollars"])
    theirs = toks([" twenty-three", " dollars"])
    pairs = wt.align(ours, theirs)
    assert pairs.starts == ((0, 0), (2, 1))  # "three" starts inside Whisper's word: not compared
    assert pairs.ends == ((1, 0), (2, 1))


def test_a_misheard_word_and_an_inserted_one_are_left_out() -> None:
    ours = toks(["The", "cat", "sat", "down."])
    theirs = toks([" The", " hat", " sat", " right", " down."])
    pairs = wt.align(ours, theirs)
    assert pairs.starts == ((0, 0), (2, 2), (3, 4))
    assert pairs.ends == pairs.starts


def test_punctuation_alone_takes_no_part() -> None:
    pairs = wt.align(toks(["a", "—", "b"]), toks([" a", " b"]))
    assert pairs.starts == ((0, 0), (2, 1))


def test_chinese_words_against_whisper_characters() -> None:
    ours = toks(["会议", "定于", "3月", "举行。"], "zh")
    theirs = toks(["会", "议", "定", "于", "三", "月", "举", "行"], "zh")
    pairs = wt.align(ours, theirs)
    # "3月" starts with a digit Whisper wrote as 三: its start is not compared, its end is.
    assert pairs.starts == ((0, 0), (1, 2), (3, 6))
    assert pairs.ends == ((0, 1), (1, 3), (2, 5), (3, 7))


def test_differences_are_ours_minus_theirs_in_ms_with_the_shift() -> None:
    pairs = wt.Alignment(starts=((0, 1),), ends=((0, 1),))
    starts, ends = wt.differences([(1.0, 1.5)], [(0.0, 0.0), (0.96, 1.58)], pairs)
    assert starts == pytest.approx([40.0]) and ends == pytest.approx([-80.0])
    starts, _ = wt.differences([(1.31, 1.8)], [(0.0, 0.0), (1.0, 1.5)], pairs, -0.31)
    assert starts == pytest.approx([0.0])


def test_summary_is_of_magnitudes_with_a_signed_bias() -> None:
    s = wt.summary([-10.0, 20.0, 30.0, -40.0, 50.0])
    assert s["n"] == 5 and s["median"] == 30.0 and s["bias"] == 20.0
    assert s["p95"] == pytest.approx(48.0)  # linear between 40 and 50
    assert s["around_bias"] == 30.0  # |d - 20|: 30, 0, 10, 60, 30
    assert wt.summary([])["n"] == 0 and wt.summary([])["median"] is None


def speech(seconds: float, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(round(seconds * RATE)) * 3000).astype(np.int16)


def word(text: str, text_start: int, start_s: float, end_s: float, pts0: int = 0) -> dict[str, object]:
    return {"text": text, "text_start": text_start, "text_end": text_start + len(text), "said": text.lower(),
            "start": pts0 + round(start_s * RATE), "end": pts0 + round(end_s * RATE)}


BREAK_TEXT = 'Please wait <break time="500ms"/> here.'
AUDIO = np.concatenate([speech(0.5), np.zeros(round(0.56 * RATE), np.int16), speech(0.4, 1)])


@pytest.mark.parametrize("pts0", [0, 4800])
def test_break_gap_matches_the_silence_within_a_frame(pts0: int) -> None:
    words = [word("Please", 0, 0.0, 0.3, pts0), word("wait", 7, 0.3, 0.51, pts0),
             word("here.", 34, 1.07, 1.46, pts0)]
    got = wt.break_check(BREAK_TEXT, words, AUDIO, RATE, pts0)
    assert (got["before"], got["after"], got["ok"]) == ("wait", "here.", True)
    assert got["silence_ms"] == pytest.approx(560, abs=5) and got["gap_ms"] == pytest.approx(560)
    assert got["end_vs_silence_ms"] == pytest.approx(10, abs=5)


def test_break_gap_off_by_more_than_a_frame_fails() -> None:
    words = [word("Please", 0, 0.0, 0.3), word("wait", 7, 0.3, 0.45), word("here.", 34, 1.07, 1.46)]
    got = wt.break_check(BREAK_TEXT, words, AUDIO, RATE, 0)
    assert not got["ok"] and got["end_vs_silence_ms"] == pytest.approx(-50, abs=5)


def test_break_with_no_word_after_it_fails() -> None:
    got = wt.break_check(BREAK_TEXT, [word("Please", 0, 0.0, 0.3)], AUDIO, RATE, 0)
    assert not got["ok"] and "no word" in got["why"]


def test_last_word_end_against_the_audio_length() -> None:
    n = round(1.46 * RATE)
    assert wt.end_check([word("a", 0, 0.0, 0.5), word("b", 2, 0.5, 1.45)], n, RATE, 0) == {
        "word": "b", "after_ms": pytest.approx(10.0), "ok": True}
    assert not wt.end_check([word("a", 0, 0.0, 0.5), word("b", 2, 0.5, 1.40)], n, RATE, 0)["ok"]


def test_order_problems() -> None:
    assert wt.order_problems([word("a", 0, 0.0, 0.1), word("b", 2, 0.1, 0.2)]) == []
    assert len(wt.order_problems([word("a", 0, 0.0, 0.1), word("b", 0, 0.1, 0.2)])) == 1  # overlapping spans
    assert len(wt.order_problems([word("a", 0, 0.2, 0.1)])) == 1  # ends before it starts


def test_spread_pick_keeps_the_ends_and_spaces_the_rest() -> None:
    assert wt.spread_pick(list("abcdefghi"), 3) == ["a", "e", "i"]
    assert wt.spread_pick(list("ab"), 5) == ["a", "b"]


def test_katakana_is_compared_as_hiragana() -> None:
    pairs = wt.align(toks(["まもなく", "電車"], "ja"), toks(["マ", "モ", "ナ", "ク", "電", "車"], "ja"))
    assert pairs.starts == ((0, 0), (1, 4)) and pairs.ends == ((0, 3), (1, 5))


def test_first_word_start_against_the_first_sound() -> None:
    samples = np.concatenate([np.zeros(round(0.05 * RATE), np.int16), speech(0.5)])
    got = wt.onset_check([word("a", 0, 0.08, 0.3), word("b", 2, 0.3, 0.55)], samples, RATE, 0)
    assert got["word"] == "a" and got["after_ms"] == pytest.approx(30, abs=5) and not got["ok"]
    assert wt.onset_check([word("a", 0, 0.06, 0.3)], samples, RATE, 0)["ok"]


def test_a_word_belongs_to_the_voice_of_the_mark_before_its_middle() -> None:
    marks = [(0, "hibari/heart"), (8000, "kokoro/zf_xiaoxiao")]
    assert wt.spoken_by(word("Hello", 0, 0.0, 0.45), marks) == "hibari/heart"
    assert wt.spoken_by(word("欢迎", 6, 0.5, 0.9), marks) == "kokoro/zf_xiaoxiao"
    assert wt.spoken_by(word("a", 0, 0.0, 0.1), []) == ""
    assert wt.spoken_by(word("Hello", 0, 0.5, 0.5), marks) == "hibari/heart"  # untimed, where Hibari ended


def test_words_after_a_pause_against_the_sound_returning() -> None:
    # Sound 0-0.5 s, silence to 1.06 s, sound to 1.46 s: one pause inside, at 1.06 s.
    words = [word("Please", 0, 0.0, 0.3), word("wait", 7, 0.3, 0.51), word("here.", 34, 1.09, 1.46)]
    assert [(k, round(d)) for k, d in wt.onsets_after_silence(words, AUDIO, RATE, 0)] == [(2, 30)]
    far = [word("Please", 0, 0.0, 0.3), word("here.", 34, 1.3, 1.46)]  # no word starts near it
    assert wt.onsets_after_silence(far, AUDIO, RATE, 0) == []


def test_read_characters_no_word_holds() -> None:
    text = 'Rain 40% <break time="500ms"/> now, $5.'
    words = [word("Rain", 0, 0.0, 0.2), word("40", 5, 0.2, 0.5), word("now", 31, 1.0, 1.2),
             word("$5", 36, 1.2, 1.5)]
    assert wt.uncovered(text, words) == ["%"]  # not the markup, spaces or the comma and full stop
    assert wt.uncovered("25°C", [word("25°", 0, 0.0, 0.3)]) == ["C"]
    assert wt.uncovered("今天", [word("今天", 0, 0.0, 0.3)]) == []
