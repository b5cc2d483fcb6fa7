"""Piper's and Hibari's word timing, the pure parts: ids back to phonemes, durations to
samples, words handed out window by window, the durations found in a graph."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rtts.engines.hibari import HOP, SOUND_LEAD_FRAMES, id_frames, phoneme_samples
from rtts.engines.base import Timing
from rtts.engines.piper import PiperConfig, id_positions, id_samples, phoneme_ids
from rtts.engines.timed_windows import WindowedWords, heard
from rtts.engines.trim import PAD_S
from rtts.g2p.words import Word, kept, spoken, with_lexicon
from rtts.text.lexicon import PHONEMES_CLOSE, PHONEMES_OPEN

_CONFIG = PiperConfig(
    sample_rate=22050,
    espeak_voice="en-us",
    # "_" pad, "^" BOS, "$" EOS; "ɔ̃" decomposes into "ɔ" and a combining tilde.
    phoneme_id_map={"_": (0,), "^": (1,), "$": (2,), " ": (3,), "a": (4,), "b": (5,), "ɔ": (6,), "\u0303": (7,)},
    phoneme_map={"x": ("a", "b")},
)


@pytest.mark.parametrize("phonemes", ["ab ba", "", "a?b", "xa", "bɔ̃ a", "a\u0303\u0303b"])
def test_id_positions_are_where_each_symbol_starts(phonemes: str) -> None:
    ids, where = id_positions(phonemes, _CONFIG)
    assert ids == phoneme_ids(phonemes, _CONFIG)
    assert len(where) == len(phonemes) + 1 and where == sorted(where)
    assert where[0] == 2 and where[-1] == len(ids) - 1  # after BOS and its pad; at EOS
    for i, ch in enumerate(phonemes):
        mine = ids[where[i] : where[i + 1]]
        if ch == "?":  # missing from the map: no ids
            assert mine == []
        else:  # its ids, then a pad after each
            assert mine[-1] == 0 and mine[0] != 0


def test_id_samples_follow_the_durations_or_share_equally() -> None:
    starts = id_samples(np.array([[[3, 1, 2]]]), 3, 6 * 256, 256)
    assert starts.tolist() == [0, 768, 1024, 1536]
    assert id_samples(None, 4, 1000, 0).tolist() == [0, 250, 500, 750, 1000]
    assert id_samples(np.array([5, 5]), 2, 2000, 256).tolist() == [0, 1280, 2000]  # never past the audio


def _words(n: int) -> list[Word]:
    return [Word(2 * i, 2 * i + 1, f"w{i}", i, i + 1, i) for i in range(n)]


def test_windowed_words_go_out_before_the_chunk_their_start_is_in() -> None:
    # Four one-symbol words at 100, 200, 300, 400 (the last ends at 500, in trailing silence).
    timer = WindowedWords(_words(4), 0, np.array([100, 200, 300, 400, 500]))
    first = timer.before(50, 250, last=False)  # leading silence trimmed to 50
    assert first is not None and [(s.said, s.start, s.end) for s in first.spoken] == [("w0", 50, 150), ("w1", 150, 250)]
    assert timer.before(250, 290, last=False) is None  # nothing starts in it
    last = timer.before(290, 420, last=True)  # trimmed at 420: the last word ends with the audio
    assert last is not None and [(s.said, s.start, s.end) for s in last.spoken] == [("w2", 10, 110), ("w3", 110, 130)]


def test_windowed_words_all_go_out_once_whatever_the_windows() -> None:
    bounds = np.cumsum(np.r_[40, np.full(30, 17)])
    for cuts in ([0, 100, 101, 300, 500], [0, 600], [30, 35, 36, 37, 300, 510]):
        timer = WindowedWords(_words(30), 0, bounds)
        sent = []
        for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
            timing = timer.before(a, b, last=i == len(cuts) - 2)
            for s in timing.spoken if timing else ():
                assert 0 <= s.start <= s.end and a + s.start < b or s.start == b - a
                sent.append(s.said)
        assert sent == [f"w{i}" for i in range(30)]


def test_a_last_chunk_trimmed_to_nothing_still_names_its_words() -> None:
    timer = WindowedWords(_words(2), 0, np.array([100, 200, 300]))
    assert timer.before(100, 150, last=False) is not None
    rest = timer.before(260, 260, last=True)
    assert rest is not None and [(s.said, s.start, s.end) for s in rest.spoken] == [("w1", 0, 0)]


def test_spoken_takes_a_piece_of_the_phonemes() -> None:
    words = [Word(0, 3, "one", 0, 3, 0), Word(4, 7, "two", 4, 7, 1), Word(8, 13, "three", 8, 13, 2)]
    # The piece "two three" of "one two three", at 4.
    items = spoken(words, 4, np.arange(10) * 10)
    assert [(s.said, s.start, s.end) for s in items] == [("two", 0, 30), ("three", 40, 90)]


def test_with_lexicon_joins_as_the_engines_do_and_an_entry_is_one_word() -> None:
    text = f"Say {PHONEMES_OPEN}həlˈO{PHONEMES_CLOSE} twice."

    def piece_words(piece: str) -> tuple[str, list[Word]]:
        phonemes = " " + " ".join(w.upper() for w in piece.split()) + " "
        found, at = [], 1
        for i, w in enumerate(piece.split()):
            start = piece.index(w)
            found.append(Word(start, start + len(w), w, at, at + len(w), i))
            at += len(w) + 1
        return phonemes, found

    phonemes, words = with_lexicon(text, piece_words)
    assert phonemes == "SAY həlˈO TWICE."
    assert [(text[w.text_start : w.text_end], phonemes[w.start : w.end], w.word) for w in words] == [
        ("Say", "SAY", 0),
        (f"{PHONEMES_OPEN}həlˈO{PHONEMES_CLOSE}", "həlˈO", 1),
        ("twice.", "TWICE.", 2),
    ]


def test_kept_drops_unknown_symbols_and_keeps_spaces() -> None:
    assert kept("a?b  c", set("abc ")) == ("ab  c", [0, 1, 1, 2, 3, 4, 5])


def test_hibari_ids_to_samples() -> None:
    # Durations of pad, two phonemes, pad; the model upsamples its frames twice.
    frames = id_frames(np.array([3, 2, 4, 1]), 20)
    assert frames.tolist() == [0, 6, 10, 18, 20]
    lead = SOUND_LEAD_FRAMES * HOP + HOP // 2  # heard before its frames; a frame centred on its hop
    samples = phoneme_samples(frames.tolist(), 4, 20)
    assert samples.tolist() == [6 * HOP - lead, 10 * HOP - lead, 18 * HOP - lead]
    assert phoneme_samples(None, 4, 20).tolist() == [5 * HOP - lead, 10 * HOP - lead, 15 * HOP - lead]
    assert phoneme_samples([0, 1, 3, 4, 6], 4, 6)[0] == 0  # never before the audio


def test_the_durations_are_found_in_a_graph() -> None:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from rtts.engines.hibari_timed import TimedError, with_durations
    from rtts.engines.vits_split import find_durations

    def graph(nodes: list, output: str, elem: int = TensorProto.FLOAT):  # type: ignore[no-untyped-def]
        g = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])],
            [helper.make_tensor_value_info(output, elem, None)],
            [helper.make_tensor("axis", TensorProto.INT64, [], [0])],
        )  # fmt: skip
        return helper.make_model(g)

    vits = graph([helper.make_node("Ceil", ["w"], ["c"]), helper.make_node("CumSum", ["c", "axis"], ["s"])], "s")
    assert find_durations(vits.graph) == "c"
    assert find_durations(graph([helper.make_node("Ceil", ["w"], ["c"])], "c").graph) is None

    hibari = graph(
        [helper.make_node("Cast", ["w"], ["d"], to=TensorProto.INT64), helper.make_node("CumSum", ["d", "axis"], ["s"])],
        "s",
        TensorProto.INT64,
    )
    timed, meta = with_durations(hibari)
    assert meta["durations"] == "d" and [o.name for o in timed.graph.output] == ["s", "d"]
    assert timed.graph.output[1].type.tensor_type.elem_type == TensorProto.INT64
    import onnxruntime as ort

    session = ort.InferenceSession(timed.SerializeToString(), providers=["CPUExecutionProvider"])
    sums, durations = session.run(None, {"w": np.array([2.0, 1.0, 3.0], np.float32)})
    assert durations.tolist() == [2, 1, 3] and sums.tolist() == [2, 3, 6]
    with pytest.raises(TimedError, match="one CumSum"):
        with_durations(graph([helper.make_node("Ceil", ["w"], ["c"])], "c"))


@pytest.fixture(scope="module")
def hibari_g2p():  # type: ignore[no-untyped-def]
    g2p = pytest.importorskip("hibari.g2p")
    return g2p.G2P()


@pytest.mark.parametrize(
    "text",
    [
        "Hello there.",
        "I can't believe it's 5 o'clock, Dr. Smith!",
        "twenty-three dollars and fifty cents for the \u201cbig\u201d show; then home.",
        "The U.S. team (and the U.K. one) won 3-2 at 7:30 pm.",
        "  spaced   out  ",
        "...",
    ],
)
def test_hibari_token_words_are_its_own_phonemes(hibari_g2p, text: str) -> None:  # type: ignore[no-untyped-def]
    from rtts.engines.hibari import token_words

    whole, words = token_words(hibari_g2p, text)
    assert whole == hibari_g2p(text)  # the same phonemes as its G2P makes
    previous_start = previous_end = 0
    for start, end, said, p_start, p_end in words:
        assert previous_start <= start < end <= len(text) and previous_end <= p_start < p_end <= len(whole)
        assert text[start:end].strip() and said.strip()
        previous_start, previous_end = start, p_end
    # Every written word has something read for it.
    for m in re.finditer(r"\S*\w\S*", text):
        assert any(start < m.end() and m.start() < end for start, end, *_ in words), m.group(0)


def test_the_items_of_one_written_word_go_out_together() -> None:
    # "$23.50" read as "twenty-three dollars": two items of one span, then "now".
    words = [Word(0, 6, "twenty-three", 0, 1, 0), Word(0, 6, "dollars", 1, 2, 1), Word(7, 10, "now", 2, 3, 2)]
    timer = WindowedWords(words, 0, np.array([0, 100, 200, 300]))
    first = timer.before(0, 50, last=False)
    assert first is not None and [s.said for s in first.spoken] == ["twenty-three", "dollars"]
    rest = timer.before(50, 300, last=True)
    assert rest is not None and [s.said for s in rest.spoken] == ["now"]


def test_the_chunks_from_the_last_word_on_wait_for_the_end() -> None:
    # Three words; the last ("w2") starts at 300 and its duration runs to 600, but the
    # last chunk is trimmed at 450: it ends there, though it started in the chunk before.
    timer = WindowedWords(_words(3), 0, np.array([100, 200, 300, 600]))
    chunk = np.zeros  # the samples do not matter, their count does
    windows = [(chunk(0), 0, None), (chunk(150), 100, None), (chunk(100), 250, None), (chunk(100), 350, 100)]
    out = list(timer.chunks(iter(windows)))
    kinds = ["T" if isinstance(o, Timing) else o.size for o in out]
    assert kinds == ["T", 150, "T", 100, 100]
    last = out[2]
    assert isinstance(last, Timing) and [(s.said, s.start, s.end) for s in last.spoken] == [("w2", 50, 200)]
    # The trim kept near-silence after the sound: only 60 of the last chunk's 100 are heard.
    timer = WindowedWords(_words(3), 0, np.array([100, 200, 300, 600]))
    out = list(timer.chunks(iter([*windows[:3], (chunk(100), 350, 60)])))
    assert [(s.said, s.start, s.end) for s in out[2].spoken] == [("w2", 50, 160)]  # type: ignore[union-attr]


def test_stopping_the_chunks_stops_the_windows() -> None:
    closed = []

    def windows():  # type: ignore[no-untyped-def]
        try:
            for i in range(5):
                yield np.zeros(10), 10 * i, 10 if i == 4 else None
        finally:
            closed.append(True)

    out = WindowedWords(_words(1), 0, np.array([0, 45])).chunks(windows())
    next(out)
    out.close()
    assert closed == [True]


def test_what_is_heard_of_a_last_chunk() -> None:
    assert heard(1000, False, 24000) == 1000  # the audio's own end: all of it
    assert heard(1000, True, 24000) == 1000 - round(PAD_S * 24000)  # not the near-silence kept
    assert heard(100, True, 24000) == 0


def test_a_piper_word_ends_before_the_pad_after_its_last_phoneme() -> None:
    from rtts.engines.piper import _PieceWords

    ids, where = id_positions("ab ba", _CONFIG)  # ^ _ a _ b _ " " _ b _ a _ $
    frames = np.arange(len(ids) + 1) * 10  # every id 10 samples long
    words = [Word(0, 2, "ab", 0, 2, 0), Word(3, 5, "ba", 3, 5, 1)]
    timing = _PieceWords(words, 0, np.asarray(where), 1).windowed(frames).before(0, 10_000, last=False)
    assert timing is not None
    assert [(s.start, s.end) for s in timing.spoken] == [(20, 50), (80, 110)]  # "a" starts at id 2, "b" ends at 5


def test_the_last_word_of_a_piece_holds_the_sound_after_its_phonemes() -> None:
    # Its phonemes end at 300; what is heard goes on to 340 (a release into the pad).
    timer = WindowedWords(_words(2), 0, np.array([100, 200, 300]))
    timing = timer.before(100, 400, last=True, final=340)
    assert timing is not None and [(s.said, s.start, s.end) for s in timing.spoken] == [("w0", 0, 100), ("w1", 100, 240)]
