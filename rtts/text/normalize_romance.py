"""Spanish, French, Italian and Brazilian Portuguese text → words, before espeak-ng.

Numbers are written the way each language writes them (1.500 or 1 500 is fifteen
hundred, 3,5 is three point five) and read with num2words; times (10:30, 14 h 20),
dates (3/5/2024, 2024-05-03), money (23,50 €, €5, R$ 57, $7.99) and percentages get
the words a native listener expects ("a las diez y treinta", "quatorze heures vingt",
"tre maggio duemilaventiquattro", "cinquenta e sete reais"). espeak-ng would read bare
digits too, but not these forms. The golden table in tests/test_normalize_romance.py
is the spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from num2words import num2words

from rtts.text.rules import Rule, apply_rules

__all__ = ["LANGS", "normalize_romance"]


@dataclass(frozen=True)
class _Lang:
    code: str  # num2words' language code
    months: tuple[str, ...]
    first_day: str  # the 1st of a month: "primero", "premier", "primo", "primeiro"
    date: str  # "{d} de {m} de {y}"
    time: str  # "{h} y {m}"
    whole_hour: str  # "{h}" or "{h} heures"
    decimal: str  # the word for the decimal comma
    percent: str
    money_and: str  # between units and cents
    cents: tuple[str, str]  # singular, plural
    currencies: dict[str, tuple[str, str]]  # symbol or code → (singular, plural)
    feminine: tuple[tuple[str, str], ...]  # last-word rewrites for a feminine noun (horas)


_MONTHS_ES = "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre"
_MONTHS_FR = "janvier février mars avril mai juin juillet août septembre octobre novembre décembre"
_MONTHS_IT = "gennaio febbraio marzo aprile maggio giugno luglio agosto settembre ottobre novembre dicembre"
_MONTHS_PT = "janeiro fevereiro março abril maio junho julho agosto setembro outubro novembro dezembro"

_LANGS: Final = {
    "es": _Lang(
        "es", tuple(_MONTHS_ES.split()), "primero", "{d} de {m} de {y}", "{h} y {m}", "{h}",
        "coma", "por ciento", "con", ("céntimo", "céntimos"),
        {"€": ("euro", "euros"), "EUR": ("euro", "euros"), "$": ("dólar", "dólares"), "USD": ("dólar", "dólares")},
        (("uno", "una"), ("veintiuno", "veintiuna")),
    ),
    "fr": _Lang(
        "fr", tuple(_MONTHS_FR.split()), "premier", "{d} {m} {y}", "{h} heures {m}", "{h} heures",
        "virgule", "pour cent", "et", ("centime", "centimes"),
        {"€": ("euro", "euros"), "EUR": ("euro", "euros"), "$": ("dollar", "dollars"), "USD": ("dollar", "dollars")},
        (("un", "une"),),
    ),
    "it": _Lang(
        "it", tuple(_MONTHS_IT.split()), "primo", "{d} {m} {y}", "{h} e {m}", "{h}",
        "virgola", "per cento", "e", ("centesimo", "centesimi"),
        {"€": ("euro", "euro"), "EUR": ("euro", "euro"), "$": ("dollaro", "dollari"), "USD": ("dollaro", "dollari")},
        (("uno", "una"),),
    ),
    "pt-br": _Lang(
        "pt_BR", tuple(_MONTHS_PT.split()), "primeiro", "{d} de {m} de {y}", "{h} e {m}", "{h} horas",
        "vírgula", "por cento", "e", ("centavo", "centavos"),
        {
            "R$": ("real", "reais"), "BRL": ("real", "reais"), "€": ("euro", "euros"), "EUR": ("euro", "euros"),
            "$": ("dólar", "dólares"), "USD": ("dólar", "dólares"),
        },
        (("um", "uma"), ("dois", "duas")),
    ),
}  # fmt: skip
LANGS: Final = tuple(_LANGS)

# 1.500 / 1 500 / 1 500 (thousands), optionally ",5" (decimals); or a plain run of digits.
_NUMBER = r"\d{1,3}(?:[.\u00a0\u202f ]\d{3})+(?:,\d+)?|\d+(?:,\d+)?"
_SYMBOLS = r"R\$|€|\$"
_CODES = r"EUR|USD|BRL"


def _to_words(number: str, lang: _Lang) -> str:
    """``"1.500"`` → "mil quinientos"; ``"3,25"`` → "tres coma veinticinco"."""
    whole, _, frac = number.partition(",")
    words = num2words(int(re.sub(r"\D", "", whole)), lang=lang.code)
    if frac:
        # A fraction with a leading zero is read digit by digit ("cero cinco"), else as a number.
        tail = " ".join(num2words(int(d), lang=lang.code) for d in frac) if frac.startswith("0") else num2words(int(frac), lang=lang.code)
        words += f" {lang.decimal} {tail}"
    return words


def _feminine(words: str, lang: _Lang) -> str:
    head, _, last = words.rpartition(" ")
    for masc, fem in lang.feminine:
        if last == masc:
            return f"{head} {fem}".strip()
        if last.endswith("-" + masc):  # French "vingt-et-un"
            return f"{head} {last[: -len(masc)]}{fem}".strip()
    return words


def _money(amount: str, currency: str, lang: _Lang) -> str:
    one, many = lang.currencies[currency]
    whole, _, frac = amount.replace(".", ",").rpartition(",") if re.search(r"[.,]\d{2}$", amount) else (amount, "", "")
    whole = re.sub(r"\D", "", whole) or "0"
    units = int(whole)
    words = f"{num2words(units, lang=lang.code)} {one if units == 1 else many}"
    cents = int(frac) if frac else 0
    if cents:
        words += f" {lang.money_and} {num2words(cents, lang=lang.code)} {lang.cents[0] if cents == 1 else lang.cents[1]}"
    return words


def _rules(lang: _Lang) -> list[Rule]:
    def date(d: str, m: str, y: str | None) -> str | None:
        day, month = int(d), int(m)
        if not (1 <= day <= 31 and 1 <= month <= 12):
            return None
        day_words = lang.first_day if day == 1 else num2words(day, lang=lang.code)
        text = lang.date.format(d=day_words, m=lang.months[month - 1], y=num2words(int(y), lang=lang.code) if y else "")
        return text.removesuffix(" de ").strip() if not y else text

    def on_date(m: re.Match[str]) -> str:
        return date(m["d"], m["m"], m["y"]) or m[0]

    def time(m: re.Match[str]) -> str:
        h, mins = int(m["h"]), int(m["min"] or 0)
        if h > 24 or mins > 59:
            return m[0]
        hour = _feminine(num2words(h, lang=lang.code), lang)
        if not mins:
            return lang.whole_hour.format(h=hour)
        return lang.time.format(h=hour, m=num2words(mins, lang=lang.code))

    def money(m: re.Match[str]) -> str:
        return _money(m["amount"], m["cur"], lang)

    def percent(m: re.Match[str]) -> str:
        return f"{_to_words(m['n'], lang)} {lang.percent}"

    def number(m: re.Match[str]) -> str:
        return _to_words(m[0], lang)

    rules: list[Rule] = [
        (re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b"), on_date),
        (re.compile(r"\b(?P<d>\d{1,2})/(?P<m>\d{1,2})(?:/(?P<y>\d{4}))?\b"), on_date),
        (re.compile(r"\b(?P<h>\d{1,2}):(?P<min>\d{2})\b"), time),
        (re.compile(rf"(?P<cur>{_SYMBOLS})\s?(?P<amount>\d[\d.,]*\d|\d)"), money),
        (re.compile(rf"(?P<amount>\d[\d.,\u00a0\u202f ]*\d|\d)\s?(?P<cur>€|{_CODES}\b)"), money),
        (re.compile(rf"(?P<n>{_NUMBER})\s?%"), percent),
    ]
    if lang.code == "fr":  # 14 h 20, 9 h, 9h30
        rules.insert(2, (re.compile(r"\b(?P<h>\d{1,2})\s?h(?:\s?(?P<min>\d{2}))?\b"), time))
    # Hours are feminine: "a la una", "às duas horas", "une heure".
    rules.append((re.compile(r"(?<![\d,.])\d+(?=\s(?:horas?|heures?|ore|ora)\b)"), lambda m: _feminine(number(m), lang)))
    rules.append((re.compile(rf"(?<![\d,.]){_NUMBER}"), number))
    return rules


_RULES: Final = {code: _rules(lang) for code, lang in _LANGS.items()}


def normalize_romance(text: str, lang: str) -> str:
    """Numbers, dates, times, money and percentages in ``text`` as words in ``lang``."""
    return apply_rules(_RULES[lang], text)
