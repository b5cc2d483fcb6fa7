"""Hepburn romaji → katakana, for Japanese names written in Latin letters ("Shibuya").

Only used inside Japanese sentences, where "次は Shibuya です" means 渋谷, not an
English word: the segmenter hands such a word to Japanese when :func:`is_romaji`
says it is one, and the Japanese normalizer spells it in katakana.
"""

from __future__ import annotations

import re
from typing import Final

_VOWELS: Final = {"a": "ア", "i": "イ", "u": "ウ", "e": "エ", "o": "オ"}
_ROWS: Final = {
    "k": "カキクケコ", "g": "ガギグゲゴ", "s": "サ_スセソ", "z": "ザ_ズゼゾ", "t": "タ__テト",
    "d": "ダ__デド", "n": "ナニヌネノ", "h": "ハヒ_ヘホ", "b": "バビブベボ", "p": "パピプペポ",
    "m": "マミムメモ", "y": "ヤ_ユ_ヨ", "r": "ラリルレロ", "w": "ワ___ヲ",
}  # fmt: skip
_SPECIAL: Final = {
    "shi": "シ", "chi": "チ", "tsu": "ツ", "fu": "フ", "ji": "ジ", "ja": "ジャ", "ju": "ジュ", "jo": "ジョ",
    "sha": "シャ", "shu": "シュ", "sho": "ショ", "cha": "チャ", "chu": "チュ", "cho": "チョ",
}  # fmt: skip
_YOON: Final = {"a": "ャ", "u": "ュ", "o": "ョ"}
_TABLE: dict[str, str] = dict(_SPECIAL)
for _c, _row in _ROWS.items():
    for _v, _kana in zip("aiueo", _row, strict=True):
        if _kana != "_":
            _TABLE[_c + _v] = _kana
    if _c in "kgnhbpmr":
        for _v, _small in _YOON.items():
            _TABLE[_c + "y" + _v] = _row[1] + _small
_TABLE.update(_VOWELS)
_UNIT: Final = re.compile(
    "|".join(sorted((re.escape(k) for k in _TABLE), key=len, reverse=True)) + r"|n(?![aiueoy])|([kstpgcd])(?=\1)"
)
_LONG: Final = str.maketrans({"ā": "aa", "ī": "ii", "ū": "uu", "ē": "ee", "ō": "ou"})
_WORD: Final = re.compile(r"[A-Za-zāīūēō]+")


def to_katakana(word: str) -> str | None:
    """The katakana for a romaji word, or None when it is not one ("Zoom", "Hello")."""
    w = word.lower().translate(_LONG)
    out, pos = [], 0
    while pos < len(w):
        m = _UNIT.match(w, pos)
        if m is None:
            return None
        unit = m.group(0)
        out.append("ン" if unit == "n" else "ッ" if m.group(1) else _TABLE[unit])
        pos = m.end()
    return "".join(out)


def is_romaji(word: str) -> bool:
    """A capitalized word of five letters or more that reads as Hepburn: a Japanese name.

    Shorter words ("time", "game", "Kobe") are too often English to guess.
    """
    return len(word) >= 5 and word[:1].isupper() and to_katakana(word) is not None


def katakana_words(text: str) -> str:
    """Every romaji word in ``text`` in katakana; other Latin words are left alone."""
    return _WORD.sub(lambda m: to_katakana(m.group(0)) or m.group(0), text)
