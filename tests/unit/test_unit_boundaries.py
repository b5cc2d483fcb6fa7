"""No unit boundary inside a word, in any language (issue 32): each unit is spoken by its
own run, so a cut inside a word is heard as two ("東京駅を出" | "発します": OpenJTalk read
デ + ハッシマス). Over the public sentences, the project's own and the issue's, at every
engine's first-unit length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtts.text.split import split_units

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT.parent / "shared" / "tools" / "sentences-public.json"
OWN = {
    "zh": ["会议定于2026年3月15日上午9点举行。", "各位旅客请注意开往上海虹桥的列车现在开始检票请您做好准备",
           "下车的旅客请带好您的随身物品从列车前进方向的右侧车门下车。"],
    "ja": ["次の電車は十時三十分に東京駅を出発します。", "まもなく一番線に電車がまいります危ないですから黄色い線までお下がりください",
           "お会計は三千五百円になります。"],
}  # fmt: skip
# The marks a unit may end at in unspaced text (split.py's clause and sentence marks).
MARKS = set("。！？!?、，；：,;:.…—―-」』）)\"'”’")


def _sentences(lang: str) -> list[str]:
    found = list(OWN.get(lang, []))
    path = ROOT / "benchmarks" / "sentences" / f"{lang}.json"
    if path.exists():
        # A sentence is its text, or {"text", "ref"} where the words heard differ from it.
        found += [s if isinstance(s, str) else s["text"] for s in json.loads(path.read_text())[lang]]
    if PUBLIC.exists():
        found += json.loads(PUBLIC.read_text()).get(lang, [])
    return found


@pytest.mark.parametrize("first", [5, 16, 40, 80])
@pytest.mark.parametrize("lang", ["zh", "ja"])
def test_chinese_and_japanese_units_end_at_a_mark(lang: str, first: int) -> None:
    sentences = _sentences(lang)
    assert len(sentences) >= 10
    for text in sentences:
        units = split_units(text, first_max_chars=first)
        for unit in units[:-1]:
            assert unit.text[-1] in MARKS, (text, [u.text for u in units])


@pytest.mark.parametrize("first", [5, 16, 40, 80])
@pytest.mark.parametrize("lang", ["en", "es", "fr"])
def test_spaced_units_end_between_words(lang: str, first: int) -> None:
    sentences = _sentences(lang)
    assert len(sentences) >= 5
    for text in sentences:
        units = split_units(text, first_max_chars=first)
        joined = " ".join(text.split())  # units collapse runs of whitespace
        at = 0
        for unit in units[:-1]:
            at = joined.index(unit.text, at) + len(unit.text)
            assert at == len(joined) or joined[at] == " ", (text, [u.text for u in units])


def test_a_first_clause_with_latin_words_in_it_is_cut_between_words() -> None:
    """Only a first clause with no space in it is kept whole past the first unit's length:
    "今日は Hello world" is cut between its words as any spaced text (found by
    test_text_split's property test: the rule once kept the whole sentence)."""
    units = split_units("今日は Hello", first_max_chars=1, max_chars=9)
    assert len(units[0].text) == 1 and " " not in units[0].text
    assert split_units("今日はいい天気ですね。", first_max_chars=4, max_chars=40)[0].text == "今日はいい天気ですね。"
