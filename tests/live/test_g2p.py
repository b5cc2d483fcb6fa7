"""espeak-ng phonemization, the Kokoro respelling and phoneme splitting (no models loaded)."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtts.engines.kokoro import MAX_TOKENS, KokoroEngine, KokoroPack, to_kokoro_phonemes
from rtts.g2p import phonemize, split_phonemes
from rtts.g2p.split import first_words
from rtts.g2p.espeak import punctuation_for_terminator
from tests.texts import LONG_TEXT

PUNCTUATION = ",.?!:;"



@pytest.fixture(scope="module")
def kokoro(tmp_path_factory: pytest.TempPathFactory) -> KokoroEngine:
    # Phonemizing needs only the vocab, so this never assembles or loads the model.
    return KokoroEngine(tmp_path_factory.mktemp("cache"), threads=1)


@pytest.fixture(scope="module")
def vocab() -> set[str]:
    return set(json.loads(KokoroPack.find().vocab.read_text(encoding="utf-8"))["vocab"])


def test_espeak_gives_stressed_ipa_words() -> None:
    out = phonemize("Hello world")
    assert out == "həlˈoʊ wˈɜːld"


def test_espeak_keeps_clause_punctuation_in_order() -> None:
    out = phonemize("Hello, world! How are you? Fine: thanks; okay. The end")
    assert [ch for ch in out if ch in PUNCTUATION] == list(",!?:;.")
    # Punctuation sticks to the clause's last word and is followed by a space.
    assert re.search(r"\S, \S", out)
    assert not out.endswith(".")


def test_espeak_collapses_punctuation_runs() -> None:
    assert [ch for ch in phonemize("Wait?! Really... Yes.") if ch in PUNCTUATION] == list("?..")


def test_espeak_ignores_punctuation_inside_tokens() -> None:
    out = phonemize("It costs $5.20 at 3:30.")
    assert [ch for ch in out if ch in PUNCTUATION] == ["."]


def test_espeak_empty_text() -> None:
    assert phonemize("") == ""
    assert phonemize("  \n\t ") == ""
    assert phonemize("...") == ""


def test_espeak_tie_joins_multi_letter_phonemes() -> None:
    assert "a^ɪ" in phonemize("I", tie="^")
    assert "aɪ" in phonemize("I")


def test_espeak_voice_by_language() -> None:
    american = phonemize("tomato", "en-us")
    british = phonemize("tomato", "en-gb")
    assert american != british
    assert "ɑː" in british


def test_espeak_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="no voice"):
        phonemize("x", "xx-nope")
    with pytest.raises(ValueError, match="tie"):
        phonemize("x", tie="^^")
    # A failed voice change must leave espeak usable.
    assert phonemize("Hello world") == "həlˈoʊ wˈɜːld"


def test_espeak_control_characters_do_not_cut_text() -> None:
    assert phonemize("Hello\x00 world") == "həlˈoʊ wˈɜːld"


def test_espeak_is_safe_from_many_threads() -> None:
    texts = ["Hello, world!", "How are you today?", "Tomato water, please."] * 10
    voices = ["en-us", "en-gb", "en-us"] * 10
    expected = [phonemize(t, v) for t, v in zip(texts, voices, strict=True)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(phonemize, texts, voices))
    assert got == expected


@pytest.mark.parametrize(
    ("terminator", "punct"),
    [
        (40 | 0x00080000, "."),  # period
        (20 | 0x00001000 | 0x00040000, ","),  # comma
        (40 | 0x00002000 | 0x00080000, "?"),  # question
        (45 | 0x00003000 | 0x00080000, "!"),  # exclamation
        (30 | 0x00040000, ":"),  # colon
        (30 | 0x00001000 | 0x00040000, ";"),  # semicolon
        (40 | 0x00080000 | 0x00010000, ""),  # end of text
        (0, ""),
    ],
)
def test_terminator_flags_map_to_punctuation(terminator: int, punct: str) -> None:
    assert punctuation_for_terminator(terminator) == punct


def test_kokoro_respelling_table() -> None:
    assert (
        to_kokoro_phonemes("ˈa^ɪ ˈa^ʊ ˈe^ɪ ˈo^ʊ d^ʒ t^ʃ ɔ^ɪ ɚ r ɾ ʔ", british=False)
        == "ˈI ˈW ˈA ˈO ʤ ʧ Y əɹ ɹ T t"
    )
    assert to_kokoro_phonemes("bˈɜːd", british=False) == "bˈɜɹd"
    assert to_kokoro_phonemes("ɡˈə^ʊ hˈe^ə ɑː", british=True) == "ɡˈQ hˈɛː ɑː"


def test_kokoro_phonemes_american(kokoro: KokoroEngine) -> None:
    out = kokoro.phonemize("I know how the boy judged the church, go better!", "af_heart", "en")
    for symbol in "IWOYʤʧT":
        assert symbol in out
    assert "^" not in out and "ː" not in out
    assert out.endswith("!")


def test_kokoro_phonemes_british_for_b_voices(kokoro: KokoroEngine) -> None:
    out = kokoro.phonemize("Go home, tomato.", "bf_emma", "en")
    assert "Q" in out and "ː" in out


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox jumps over the lazy dog.",
        "Hmm... Dr. Smith's café (in Zürich) costs €5.20; isn't that \"nice\"?",
        "Loch Ness, Bach, and the Tsar's jalapeño—whatever!",
        LONG_TEXT,
    ],
)
def test_kokoro_phonemes_only_use_vocab(kokoro: KokoroEngine, vocab: set[str], text: str) -> None:
    for voice in ("af_heart", "bf_emma"):
        out = kokoro.phonemize(text, voice, "en")
        assert out
        assert set(out) <= vocab


def test_kokoro_rejects_other_languages(kokoro: KokoroEngine) -> None:
    with pytest.raises(ValueError, match="'ko'"):
        kokoro.phonemize("안녕하세요", "jf_alpha", "ko")


def _same_modulo_split_whitespace(pieces: list[str], original: str) -> bool:
    return "".join("".join(p.split()) for p in pieces) == "".join(original.split())


def test_long_text_splits_without_losing_phonemes(kokoro: KokoroEngine) -> None:
    phonemes = kokoro.phonemize(LONG_TEXT, "af_heart", "en")
    assert len(phonemes) > MAX_TOKENS
    pieces = split_phonemes(phonemes, MAX_TOKENS)
    assert len(pieces) >= 2
    assert all(0 < len(p) <= MAX_TOKENS for p in pieces)
    assert _same_modulo_split_whitespace(pieces, phonemes)
    assert " ".join(pieces) == phonemes
    # The cut falls after a clause, not in the middle of one.
    assert all(p[-1] in PUNCTUATION for p in pieces[:-1])


def test_split_prefers_punctuation_then_spaces() -> None:
    assert split_phonemes("aa bb, cc dd", 9) == ["aa bb,", "cc dd"]
    assert split_phonemes("aa bb cc dd", 9) == ["aa bb cc", "dd"]
    assert split_phonemes("aaaaaaaaaaaa bb", 5) == ["aaaaa", "aaaaa", "aa bb"]
    assert split_phonemes("  short  ", 510) == ["short"]
    assert split_phonemes("", 510) == []


def test_first_words_cut_only_between_words() -> None:
    assert first_words("kɤ↘wei↘ ly↓kʰɤ↘ ʨʰi↓ŋ ꭧu↘i↘,", 10) == ("kɤ↘wei↘", "ly↓kʰɤ↘ ʨʰi↓ŋ ꭧu↘i↘,")
    assert first_words("kɤ↘wei↘ ly↓kʰɤ↘ ʨʰi↓ŋ ꭧu↘i↘,", 16, 8) == ("kɤ↘wei↘ ly↓kʰɤ↘", "ʨʰi↓ŋ ꭧu↘i↘,")
    assert first_words("ʨʰi↓ŋ ʨjɑ→ŋʂou↓ʨi→", 10, 8) == ("ʨʰi↓ŋ ʨjɑ→ŋʂou↓ʨi→", "")  # one syllable is too short
    assert first_words("aa bb, cc dd", 9) == ("aa bb,", "cc dd")
    assert first_words("xwa→ni↗ŋkwa→ŋli↗n.", 10) == ("xwa→ni↗ŋkwa→ŋli↗n.", "")  # one word: never split
    assert first_words(" short ", 10) == ("short", "")
    assert first_words("aa bb cc dd", 6, joined={5}) == ("aa", "bb cc dd")  # "bb cc" is one written word's reading


@given(st.lists(st.text(alphabet="abəˈɪ↘,", min_size=1, max_size=9), min_size=1, max_size=8), st.integers(1, 20))
def test_first_words_lose_nothing(words: list[str], limit: int) -> None:
    text = " ".join(words)
    head, rest = first_words(text, limit)
    assert " ".join(p for p in (head, rest) if p) == text
    assert not rest or (len(head) <= limit and head)


_words = st.text(alphabet="abəˈɪ", min_size=1, max_size=12)
_seps = st.sampled_from([" ", "  ", ", ", ". ", "? ", " \n"])


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(_words, _seps), max_size=60), st.integers(min_value=1, max_value=40))
def test_split_never_loses_or_overruns(parts: list[tuple[str, str]], limit: int) -> None:
    phonemes = "".join(w + s for w, s in parts)
    pieces = split_phonemes(phonemes, limit)
    assert all(0 < len(p) <= limit for p in pieces)
    assert _same_modulo_split_whitespace(pieces, phonemes)
    if all(len(w) + 1 <= limit for w, _ in parts):
        # No word is cut when every word (with its punctuation) fits.
        assert " ".join(pieces).split() == phonemes.split()


def test_kokoro_pack_is_found() -> None:
    pack = KokoroPack.find()
    assert len(pack.parts) == 4 and all(isinstance(p, Path) and p.is_file() for p in pack.parts)
    assert re.fullmatch(r"[0-9a-f]{64}", pack.sha256)


def test_the_inference_process_speaks_over_the_compact_tables(server, client) -> None:  # type: ignore[no-untyped-def]
    """A server's inference process maps the compact tables of every front end it used
    (``rtts.g2p.compact``), from its cache dir: the wiring, where the equality of their
    phonemes is tests/unit/test_g2p_compact.py's."""
    for utt, text in (("zh", "欢迎光临。"), ("ja", "ようこそ。"), ("en", "Welcome aboard.")):
        client.send(type="speak", id=utt, text=text)
        assert client.utterance(utt, timeout=180)[-1].reason == "done"
    pid = server.service.registry.host.pid
    maps = Path(f"/proc/{pid}/maps").read_text()
    folder = server.config.cache_dir / "g2p-compact"
    for name in ("zh-", "ja-", "hibari-"):
        assert f"{folder}/{name}" in maps, name
    assert "jieba.marisa" in maps and "gold.marisa" in maps and "ja-words.marisa" in maps
