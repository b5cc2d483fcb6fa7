"""Japanese text → the written forms OpenJTalk reads correctly, before readings.

pyopenjtalk already reads numbers with counters well (3番 サンバン, 1本 イッポン,
20日 ハツカ), so this only rewrites what it misreads or reads as symbols: clock
times (15:30), ISO and slashed dates, currency signs, percent signs, ranges, and
phone numbers (read digit by digit with の between groups), and romanized names
(Shibuya → シブヤ) that the segmenter gave to Japanese. The golden table in
tests/unit/test_normalize_ja.py is the spec.
"""

from __future__ import annotations

import re
from typing import Final

from rtts.text.normalize_zh import FULLWIDTH
from rtts.text.romaji import katakana_words
from rtts.text.rules import Rule, alternation, apply_rules

_DIGIT_KANA: Final = ("ゼロ", "イチ", "ニー", "サン", "ヨン", "ゴー", "ロク", "ナナ", "ハチ", "キュー")
_CURRENCY: Final = {"¥": "円", "$": "ドル", "€": "ユーロ", "£": "ポンド", "₩": "ウォン"}
_UNITS: Final = {
    "km/h": "キロメートル毎時", "km": "キロメートル", "cm": "センチメートル", "mm": "ミリメートル",
    "m": "メートル", "kg": "キログラム", "g": "グラム", "ml": "ミリリットル", "mL": "ミリリットル",
    "L": "リットル", "°C": "度", "℃": "度", "GB": "ギガバイト", "MB": "メガバイト",
}  # fmt: skip


def digits(s: str) -> str:
    return "".join(_DIGIT_KANA[int(d)] for d in s if d.isdigit())


def _plain(s: str) -> str:
    return s.replace(",", "")


def _date(m: re.Match[str]) -> str:
    y, mo, d = m.group("y"), int(m.group("mo")), int(m.group("d"))
    if not (1 <= mo <= 12 and 1 <= d <= 31):
        return m.group(0)
    return (f"{int(y)}年" if y else "") + f"{mo}月{d}日"


def _time(m: re.Match[str]) -> str:
    hour, minute = int(m.group("h")), int(m.group("m"))
    if hour > 30 or minute > 59:
        return m.group(0)
    out = f"{hour}時"
    if minute:
        out += f"{minute}分"
    if m.group("s"):
        out += f"{int(m.group('s'))}秒"
    return out


def _money(m: re.Match[str]) -> str:
    return _plain(m.group("amt")) + _CURRENCY[m.group("sym")]


def _phone(m: re.Match[str]) -> str:
    return "の".join(digits(g) for g in re.split(r"[-\s]", m.group(0)) if g)


def _range(m: re.Match[str]) -> str:
    a, b, unit = m.group(1), m.group(2), m.group(3) or ""
    if unit == "%":
        return f"{_plain(a)}パーセントから{_plain(b)}パーセント"
    return f"{_plain(a)}から{_plain(b)}{unit}"


def _unit(m: re.Match[str]) -> str:
    value = m.group(1)
    sign = "マイナス" if value.startswith("-") else ""
    return sign + _plain(value.lstrip("+-")) + _UNITS[m.group(2)]


_RULES: Final[list[Rule]] = [
    # Dates: 2026-03-15, 2026/3/15, 3/15 (month/day, the Japanese order).
    (re.compile(r"(?<!\d)(?P<y>\d{4})[-/.](?P<mo>\d{1,2})[-/.](?P<d>\d{1,2})(?![\d:])"), _date),
    (re.compile(r"(?<![\d/])(?P<y>)(?P<mo>\d{1,2})/(?P<d>\d{1,2})(?![\d/])"), _date),
    # Times: 15:30, 9:05, 10:30:15.
    (re.compile(r"(?<![\d.])(?P<h>\d{1,2})[:：](?P<m>\d{2})(?::(?P<s>\d{2}))?(?!\d)"), _time),
    # Phone numbers: 03-1234-5678, 090-1234-5678, 0120-123-456.
    (re.compile(r"(?<![\d.])0\d{1,4}-\d{2,4}-\d{3,4}(?!\d)"), _phone),
    # Money: ¥1,200, $5, €3.50; 1,200円 loses its comma.
    (re.compile(r"(?P<sym>[¥$€£₩])\s?(?P<amt>\d[\d,]*(?:\.\d+)?)"), _money),
    # Ranges: 5~10分, 10%-20%, 9時〜17時 (〜 and ～ too).
    (re.compile(r"(\d[\d,]*(?:\.\d+)?)%?\s?[-~〜–]\s?(\d[\d,]*(?:\.\d+)?)(%)"), _range),
    (re.compile(r"(?<=[\d時分秒日月年円度])\s?~\s?(?=\d)"), "から"),
    (re.compile(r"(\d+(?:\.\d+)?)\s?%"), r"\1パーセント"),
    (re.compile(rf"([-+]?\d+(?:\.\d+)?)\s?({alternation(_UNITS)})(?![A-Za-z])"), _unit),
    (re.compile(r"(?<![\w.])-(\d)"), r"マイナス\1"),
    (re.compile(r"(\d{1,3}(?:,\d{3})+)"), lambda m: _plain(m.group(1))),
]


def normalize_ja(text: str) -> str:
    """Rewrite times, dates, money, percentages, ranges and phone numbers for OpenJTalk."""
    text = katakana_words(text.translate(FULLWIDTH).replace("〜", "~"))
    return apply_rules(_RULES, text)
