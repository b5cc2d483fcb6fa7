"""Markup (break, say-as, sub; everything else ignored) and the pronunciation lexicon."""

import pytest

from rtts.text.lexicon import Lexicon, split_phonemes
from rtts.text.markup import MarkupStream, pieces, render


@pytest.mark.parametrize(
    "text, expected",
    [
        ('Hello <break time="500ms"/> world', ["Hello", 500, "world"]),
        ("Wait<break time='1.5s'/>go", ["Wait", 1500, "go"]),
        ('<break strength="strong"/>Go', [700, "Go"]),
        ('<break time="99s"/>', [10000]),
        ('<break time="soon"/>x', [400, "x"]),
        ('Code <say-as interpret-as="characters">AB12</say-as> now', ["Code eigh B 1 2 now"]),
        ('<say-as interpret-as="date">2026-03-15</say-as>', ["2026-03-15"]),
        ('<sub alias="World Wide Web">WWW</sub>', ["World Wide Web"]),
        ("<speak><p>Hi</p> <s>there</s></speak>", ["Hi there"]),
        ('<unknown foo="x">text</unknown>', ["text"]),
        ("a < b and <3 > 2", ["a < b and <3 > 2"]),
        ("AT&amp;T &lt;tag&gt;", ["AT&T <tag>"]),
        ('<say-as interpret-as="characters">ABC', ["eigh B C"]),
        ("</p>stray close", ["stray close"]),
        ("\ue000123\ue001 sentinels from clients are removed", ["123 sentinels from clients are removed"]),
    ],
)
def test_render(text, expected):
    assert pieces(render(text)) == expected


def test_stream_holds_back_unfinished_tags_and_spans():
    stream = MarkupStream()
    out = [stream.feed(t) for t in ["Hi <bre", 'ak time="1s"/> there <say-as interpret-as="characters">A', "B</say-as> ok"]]
    assert out[0] == "Hi "
    assert pieces("".join(out) + stream.flush()) == ["Hi", 1000, "there eigh B ok"]
    stream = MarkupStream()
    assert stream.feed("3 < 4") + stream.flush() == "3 < 4"


def test_lexicon_respellings_and_phonemes():
    lex = Lexicon.parse("# names\nNguyen = Win\nXiaomi = /ʃaʊmi/\nNASA = Nasa\n重庆 = 崇庆\nbroken line\n")
    text = lex.apply("nguyen, NGUYEN and Xiaomi in 重庆; nasa stays, NASA changes")
    assert text == "Win, Win and \ue002ʃaʊmi\ue003 in 崇庆; nasa stays, Nasa changes"
    assert list(split_phonemes(text))[1] == (True, "ʃaʊmi")
    assert Lexicon.parse("").apply("anything") == "anything"


def test_lexicon_file_missing_or_unreadable_is_empty(tmp_path):
    assert not Lexicon.load(tmp_path / "lexicon.txt")
    (tmp_path / "lexicon.txt").write_bytes(b"\xff\xfe bad")
    assert not Lexicon.load(tmp_path / "lexicon.txt")


def _seconds(fn, text: str) -> float:
    import time

    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - t0)
    return best


def test_unfinished_tag_of_spaces_is_linear():
    """Issue 13, bug 1: "<" + thousands of spaces + "!" backtracked cubically (46 s for 2,400).

    Linear work grows 4x for 4x the input, quadratic 16x and cubic 64x; the bound leaves room
    for a loaded machine without letting a quadratic pattern through. The absolute bound is
    a second, where the old pattern took minutes.
    """
    small = "<" + " " * 500 + "!"
    large = "<" + " " * 2000 + "!"

    def feed(text: str) -> None:
        MarkupStream().feed(text)

    t_small, t_large = _seconds(feed, small), _seconds(feed, large)
    assert t_large < 1.0
    assert t_large < 10 * max(t_small, 1e-4)
