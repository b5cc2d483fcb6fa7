"""Split a text unit into runs of one language each: en, zh, ja, ko or a Latin-script language.

Scripts decide: Latin letters are English (or the Latin-script language the request
names: es, fr, it, pt-br, en-gb; scripts cannot tell those apart), kana Japanese, Hangul Korean. Han
characters are Japanese in a sentence that has kana (or when the request says ``ja``),
else Mandarin. Digits, punctuation and spaces belong to no script: they stay with
the run before them, except that a run touching the next CJK run across a space
("Gate 5号") goes with that one, so "3号" is read in Chinese and "Platform 3" in
English. In a Japanese sentence a romanized Japanese name ("次は Shibuya です") is
Japanese too. Joining the segments' text gives back the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import groupby
from typing import Final

from rtts.text.romaji import is_romaji

# Languages written in Latin letters: which one a Latin run is comes from the request.
LATIN: Final = ("en", "en-gb", "es", "fr", "it", "pt-br")
LANGS: Final = ("zh", "ja", "ko", *LATIN)

# Script of one character, or None for neutral ones (digits, punctuation, spaces, symbols).
_KANA: Final = re.compile(r"[\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HAN: Final = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3007\u303b]")
# Jamo, compatibility jamo, parenthesized and circled Hangul, jamo extended A, syllables
# and extended B, halfwidth: every form is Korean (not offered), never read as something else.
_HANGUL: Final = re.compile(
    r"[\u1100-\u11ff\u3130-\u318f\u3200-\u321e\u3260-\u327f\ua960-\ua97f\uac00-\ud7ff\uffa0-\uffdc]"
)
_LATIN: Final = re.compile(r"[A-Za-z\u00c0-\u024f\uff21-\uff3a\uff41-\uff5a]")
# The long-vowel mark and middle dot are kana punctuation: neutral, but they make a text Japanese.
# Han is read as Japanese or Chinese sentence by sentence.
_SENTENCE: Final = re.compile(r"[^。！？!?\n]+[。！？!?\n]*|[。！？!?\n]+")
_KANA_ONLY: Final = re.compile(r"[\u3040-\u30ff\uff66-\uff9f]")


@dataclass(frozen=True)
class Segment:
    lang: str
    text: str


def script_of(ch: str) -> str | None:
    """"latin", "han", "kana", "hangul" or None."""
    if _LATIN.match(ch):
        return "latin"
    if _KANA.match(ch):
        return "kana"
    if _HAN.match(ch):
        return "han"
    if _HANGUL.match(ch):
        return "hangul"
    return None


def cjk_chars(text: str) -> int:
    """How many of ``text``'s characters are Han or kana: what a Chinese or Japanese voice
    reads, at its seconds a character (several times a Latin letter's)."""
    return len(_HAN.findall(text)) + len(_KANA.findall(text))


def is_japanese(text: str) -> bool:
    """Has kana: Han characters here are read in Japanese."""
    return _KANA_ONLY.search(text) is not None


def segment(text: str, hint: str | None = None, default: str = "en") -> list[Segment]:
    """Language runs of ``text`` (see the module docstring).

    ``hint`` is the request's language: ``ja`` makes Han Japanese, ``zh`` keeps it
    Mandarin even next to kana-less Japanese. ``default`` is the language of a text
    with no letters at all ("12:30"), when there is no hint.
    """
    # Built from lists joined once: growing strings by concatenation is quadratic, and
    # this runs on the event loop over a whole request (up to max_text_chars).
    runs: list[tuple[str | None, str]] = []  # (lang or None for neutral, text)
    for sentence in _SENTENCE.findall(text):
        han = "ja" if hint == "ja" or (hint != "zh" and is_japanese(sentence)) else "zh"
        latin = hint if hint in LATIN else "en"
        by_script = {"latin": latin, "kana": "ja", "han": han, "hangul": "ko"}
        start = len(runs)
        for lang, chars in groupby(sentence, key=lambda ch: _lang_of(ch, by_script)):
            run = "".join(chars)
            if run == "C" and runs and runs[-1][1].endswith("°"):
                lang = None  # "25°C" is one sign, which the number's language reads (摄氏度, 度)
            runs.append((lang, run))
        if han == "ja":  # "次は Shibuya です": a romanized Japanese name is read in Japanese
            runs[start:] = [("ja", t) if lang == latin and is_romaji(t) else (lang, t) for lang, t in runs[start:]]
    out: list[tuple[str, list[str]]] = []  # (lang, pieces)
    pending = ""  # neutral text waiting for a lang (only at the start)
    for i, (lang, chunk) in enumerate(runs):
        if lang is not None:
            if out and out[-1][0] == lang:
                out[-1][1].extend((pending, chunk))
            else:
                out.append((lang, [pending, chunk]))
            pending = ""
            continue
        nxt = runs[i + 1][0] if i + 1 < len(runs) else None
        if not out:
            pending += chunk
            continue
        keep, give = _share(chunk, out[-1][0], nxt)
        out[-1][1].append(keep)
        pending = give
    if pending:
        if out:
            out[-1][1].append(pending)
        else:
            out.append((hint if hint in LANGS else default, [pending]))
    return [Segment(lang, "".join(pieces)) for lang, pieces in out]


def _lang_of(ch: str, by_script: dict[str, str]) -> str | None:
    script = script_of(ch)
    return by_script[script] if script else None


def _share(neutral: str, prev: str, nxt: str | None) -> tuple[str, str]:
    """Split a neutral run between the segment before it and the one after.

    Text is handed over only across a space, to the side it touches: "Platform 3 到了"
    keeps "3" in English, "Gate 5号" gives "5号" to Chinese, "价格是 $5 a month" gives
    "$5" to English.
    """
    if nxt is None or nxt == prev:
        return neutral, ""
    if prev in LATIN:
        cut = max(neutral.rfind(" "), neutral.rfind("\u3000"))
        if cut < 0:
            return neutral, ""
        return neutral[: cut + 1], neutral[cut + 1 :]
    if nxt in LATIN:
        cut = neutral.find(" ")
        if cut < 0:
            return neutral, ""
        return neutral[: cut + 1], neutral[cut + 1 :]
    return neutral, ""
