"""Mandarin text → Chinese characters as a person reads them aloud, before pinyin.

Numbers are read the way announcements read them: quantities as numbers
(一百二十八元), years, phone, flight, train and order numbers digit by digit
(二零二六年, 幺三八…), times as 点/分, dates as 年月日, percentages as 百分之….
``2`` before a measure word is 两 (两个, 两点). The golden table in
tests/unit/test_normalize_zh.py is the spec.
"""

from __future__ import annotations

import re
from typing import Final

import cn2an

from rtts.text.rules import Rule, alternation, apply_rules

_DIGITS: Final = "零一二三四五六七八九"
_CN2AN_DIGITS: Final = 16  # the longest number cn2an.an2cn reads (it raises past it)
# Measure words after which 2 is 两 (两个人, 两点, 两天); 二 stays in 二月, 二号, 第二.
_LIANG_BEFORE: Final = "个位张次天本件条只名辆种台份间双对把瓶杯碗块元千万亿点分秒周年岁层家所路趟小架支首套斤公米"
_CURRENCY: Final = {"¥": "元", "￥": "元", "$": "美元", "€": "欧元", "£": "英镑", "HK$": "港币", "US$": "美元"}
_UNITS: Final = {
    "km/h": "公里每小时", "km": "公里", "cm": "厘米", "mm": "毫米", "m": "米", "kg": "公斤", "g": "克",
    "ml": "毫升", "mL": "毫升", "L": "升", "GB": "G B", "MB": "M B", "°C": "摄氏度", "℃": "摄氏度", "°": "度",
}  # fmt: skip
# Words after which a number is an identifier, read digit by digit.
_ID_WORDS: Final = "号码|电话|手机|编号|单号|订单号|航班|车次|房间号|房间|房号|工号|账号|尾号|验证码|密码|代码|邮编|座位|门牌"


# Full-width digits, letters and number signs to ASCII; CJK punctuation (，。：) stays.
FULLWIDTH: Final = str.maketrans(
    {chr(c): chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F) if chr(c) not in "，。！？：；（）～"} | {"～": "~"}
)


def digits(s: str, yao: bool = True) -> str:
    """Digit by digit; 1 is 幺 in phone-like numbers, as it is spoken there."""
    out = "".join(_DIGITS[int(d)] for d in s if d.isdigit())
    return out.replace("一", "幺") if yao else out


def cardinal(whole: str) -> str:
    """A whole number in words (128 → 一百二十八); past cn2an's 16 digits, which nobody reads
    as a quantity anyway, digit by digit."""
    whole = whole.lstrip("0") or "0"
    return cn2an.an2cn(whole) if len(whole) <= _CN2AN_DIGITS else digits(whole, yao=False)


def number(s: str) -> str:
    """A quantity: 128 → 一百二十八, 7.50 → 七点五, 1,200 → 一千二百, -5 → 负五."""
    s = s.replace(",", "")
    sign = "负" if s.startswith("-") else ""
    s = s.lstrip("+-")
    whole, _, frac = s.partition(".")
    words = cardinal(whole)
    if frac:
        words += "点" + digits(frac, yao=False)
    return sign + words


def _liang(words: str) -> str:
    """二 → 两 as a whole number before a measure word, and 二千/二万 → 两千/两万 at its start."""
    if words == "二":
        return "两"
    if words[:2] in ("二千", "二万", "二亿"):
        return "两" + words[1:]
    return words


def _quantity(m: re.Match[str]) -> str:
    words = number(m.group(1))
    after = m.group(2)
    if after and after[0] in _LIANG_BEFORE and "点" not in words:
        words = _liang(words)
    return words + after


def _date(m: re.Match[str]) -> str:
    y, mo, d = m.group("y"), m.group("mo"), m.group("d")
    out = ""
    if y:
        out += digits(y, yao=False) + "年"
    if mo:
        out += cardinal(mo) + "月"
    if d:
        out += cardinal(d) + (m.group("dsuf") or "日")
    return out


def _time(m: re.Match[str]) -> str:
    hour, minute = int(m.group("h")), int(m.group("m"))
    if hour > 24 or minute > 59:
        return m.group(0)
    out = _liang(cardinal(str(hour))) + "点"
    if minute == 30 and m.group("half"):
        return out + "半"
    if minute:
        out += ("零" if minute < 10 else "") + cardinal(str(minute)) + "分"
    if m.group("s"):
        out += cardinal(m.group("s")) + "秒"
    return out


def _money(m: re.Match[str]) -> str:
    amount = m.group("amt").replace(",", "")
    if "." in amount:
        amount = amount.rstrip("0").rstrip(".")
    return number(amount) + _CURRENCY[m.group("sym")]


def _percent(m: re.Match[str]) -> str:
    return "百分之" + number(m.group(1))


def _range(m: re.Match[str]) -> str:
    a, b, unit = m.group(1), m.group(2), m.group(3) or ""
    if unit == "%":
        return f"百分之{number(a)}到百分之{number(b)}"
    return f"{number(a)}到{number(b)}{unit}"


def _phone(m: re.Match[str]) -> str:
    return "，".join(digits(g) for g in re.split(r"[-\s]", m.group(0)) if g)


def _identifier(m: re.Match[str]) -> str:
    # 幺 where numbers are dialled or called out (phones, flights, trains, rooms), 一 elsewhere.
    yao = re.search(r"电话|手机|航班|车次|房", m.group(1)) is not None
    return m.group(1) + digits(m.group(2), yao) + (m.group(3) or "")


def _fraction(m: re.Match[str]) -> str:
    return f"{number(m.group(2))}分之{number(m.group(1))}"


def _unit(m: re.Match[str]) -> str:
    return number(m.group(1)) + _UNITS[m.group(2)]


_RULES: Final[list[Rule]] = [
    # Dates: 2026年3月15日, 2026-03-15, 2026/3/15, 3月15号, 2026年.
    (re.compile(r"(?P<y>\d{4})[-/.](?P<mo>\d{1,2})[-/.](?P<d>\d{1,2})(?P<dsuf>)(?![\d:])"), _date),
    (re.compile(r"(?:(?P<y>\d{4})年)?(?P<mo>\d{1,2})月(?:(?P<d>\d{1,2})(?P<dsuf>[日号]))?"), _date),
    (re.compile(r"(?P<y>\d{4})年(?P<mo>)(?P<d>)(?P<dsuf>)"), _date),
    # Times: 15:30, 9:05, 10:30:15; "3点半" is left to the number rules.
    (re.compile(r"(?<![\d.])(?P<h>\d{1,2})[:：](?P<m>\d{2})(?::(?P<s>\d{2}))?(?P<half>(?!\d))"), _time),
    # Phone numbers: 138-1234-5678, 13812345678, 010-12345678, 400-820-8820.
    (re.compile(r"(?<![\d.])1[3-9]\d{9}(?!\d)|(?<![\d.])\d{3,4}-\d{3,4}-\d{4}(?!\d)|(?<![\d.])0\d{2,3}-\d{7,8}(?!\d)"), _phone),
    # Identifiers: 订单号是4821, 航班CA1234 (letters are left to the segmenter), 车次G123.
    (re.compile(rf"((?:{_ID_WORDS})(?:是|为|：|:)?\s?)(\d+)(号)?"), _identifier),
    (re.compile(r"(?<![A-Za-z])([A-Z]{1,3})(\d{2,})"), lambda m: m.group(1) + digits(m.group(2))),
    (re.compile(r"(\d{3,})(?=[次号]?(?:航班|列车|车次|班次))"), lambda m: digits(m.group(1))),
    # Money: ¥7.5, ￥128, $5, 128元 (the last is a plain quantity before 元).
    (re.compile(r"(?P<sym>HK\$|US\$|[¥￥$€£])\s?(?P<amt>\d[\d,]*(?:\.\d+)?)"), _money),
    # Ranges and percentages: 10%-20%, 3~5天, 5-10分钟, 50%.
    (re.compile(r"(\d+(?:\.\d+)?)%?\s?[-~～–—至到]\s?(\d+(?:\.\d+)?)(%)"), _range),
    (re.compile(r"(\d+(?:\.\d+)?)\s?[-~～–—]\s?(\d+(?:\.\d+)?)([^\d\s]?)"), _range),
    (re.compile(r"(\d+(?:\.\d+)?)\s?[%％]"), _percent),
    (re.compile(r"(?<![\d/])(\d+)/(\d+)(?![\d/])"), _fraction),
    (re.compile(rf"([-+]?\d+(?:\.\d+)?)\s?({alternation(_UNITS)})(?![A-Za-z])"), _unit),
    # 第3 → 第三 (ordinals never take 两).
    (re.compile(r"第(\d+)"), lambda m: "第" + cardinal(m.group(1))),
    # Any other number is a quantity: 128元, 3点半, 2个, 1,200人, 3.5公里.
    (re.compile(r"([-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[-+]?\d+(?:\.\d+)?)(.?)"), _quantity),
    (re.compile(r"\+"), "加"),
]


def normalize_zh(text: str) -> str:
    """Rewrite numbers, dates, times, money, percentages and ids in Chinese characters."""
    text = text.translate(FULLWIDTH)
    return apply_rules(_RULES, text)
