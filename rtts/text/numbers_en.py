"""English number words: cardinals, ordinals, years, digits and decimals."""

from __future__ import annotations

from typing import Final

_ONES: Final = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS: Final = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES: Final = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL_WORDS: Final = {
    "one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
    "nine": "ninth", "twelve": "twelfth",
}  # fmt: skip


def cardinal(n: int) -> str:
    """``1234`` → "one thousand two hundred thirty-four" (American style, no "and")."""
    if n < 0:
        return "minus " + cardinal(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {cardinal(rest)}" if rest else "")
    for value, name in _SCALES:
        if n >= value:
            high, rest = divmod(n, value)
            return f"{cardinal(high)} {name}" + (f" {cardinal(rest)}" if rest else "")
    raise AssertionError(n)  # pragma: no cover


def ordinal(n: int) -> str:
    """``21`` → "twenty-first"."""
    words = cardinal(n)
    head, sep, last = words.rpartition("-") if "-" in words.split()[-1] else words.rpartition(" ")
    if last in _ORDINAL_WORDS:
        last = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return head + sep + last


def year(n: int) -> str:
    """``1999`` → "nineteen ninety-nine", ``2005`` → "two thousand five", ``2026`` → "twenty twenty-six"."""
    if not 1000 <= n <= 9999:
        return cardinal(n)
    high, low = divmod(n, 100)
    if low == 0:
        return cardinal(n) if high % 10 == 0 else f"{cardinal(high)} hundred"
    if 2000 <= n < 2010:
        return cardinal(n)
    return f"{cardinal(high)} {'oh ' + _ONES[low] if low < 10 else cardinal(low)}"


def digits(text: str) -> str:
    """``"4821"`` → "four eight two one"; zero is "zero"."""
    return " ".join(_ONES[int(d)] for d in text if d.isdigit())


def decimal(text: str) -> str:
    """``"3.14"`` → "three point one four"; ``"1,200.5"`` → "one thousand two hundred point five"."""
    whole, _, frac = text.replace(",", "").partition(".")
    words = cardinal(int(whole or "0"))
    return f"{words} point {digits(frac)}" if frac else words
