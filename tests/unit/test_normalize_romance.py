"""Golden table: Spanish, French, Italian and Brazilian Portuguese numbers, times, dates and money."""

from __future__ import annotations

import pytest

from rtts.text.normalize_romance import normalize_romance

GOLDEN = [
    ("es", "sale del andén 4 a las 10:30.", "sale del andén cuatro a las diez y treinta."),
    ("es", "a la 1:15", "a la una y quince"),
    ("es", "de 9 a 18 horas", "de nueve a dieciocho horas"),
    ("es", "Son 23,50 €.", "Son veintitrés euros con cincuenta céntimos."),
    ("es", "Cuesta €1.500.", "Cuesta mil quinientos euros."),
    ("es", "el 3/5/2024", "el tres de mayo de dos mil veinticuatro"),
    ("es", "el 1/5", "el primero de mayo"),
    ("es", "un 15 % más", "un quince por ciento más"),
    ("es", "pesa 3,5 kg", "pesa tres coma cinco kg"),
    ("fr", "du quai 3 à 14 h 20.", "du quai trois à quatorze heures vingt."),
    ("fr", "de 9 h à 19 h.", "de neuf heures à dix-neuf heures."),
    ("fr", "à 21:00", "à vingt et une heures"),
    ("fr", "s'élève à 42,50 €", "s'élève à quarante-deux euros et cinquante centimes"),
    ("fr", "le 1/5/2024", "le premier mai deux mille vingt-quatre"),
    ("fr", "1 500 habitants", "mille cinq cents habitants"),
    ("it", "dalle 9 alle 19", "dalle nove alle diciannove"),
    ("it", "alle 13:05", "alle tredici e cinque"),
    ("it", "36 euro", "trentasei euro"),
    ("it", "il 1/3/2025", "il primo marzo duemilaventicinque"),
    ("pt-br", "às 2 horas", "às duas horas"),
    ("pt-br", "R$ 57,90", "cinquenta e sete reais e noventa centavos"),
    ("pt-br", "o voo 318", "o voo trezentos e dezoito"),
    ("pt-br", "em 2024-05-01", "em primeiro de maio de dois mil e vinte e quatro"),
    ("pt-br", "às 8:00", "às oito horas"),
]


@pytest.mark.parametrize(("lang", "text", "spoken"), GOLDEN)
def test_golden(lang: str, text: str, spoken: str) -> None:
    assert normalize_romance(text, lang) == spoken


def test_text_without_numbers_is_unchanged_and_impossible_times_stay() -> None:
    assert normalize_romance("Gracias por su paciencia.", "es") == "Gracias por su paciencia."
    assert normalize_romance("99:99", "it") == "novantanove:novantanove"
