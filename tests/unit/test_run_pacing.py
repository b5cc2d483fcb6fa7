"""Paced runs (engines/run_pacing.py, issue 32): a run as long as the thread can spare, cut
between words; the cost line each run is sized by; the thread's budget for it. End to end
with real Kokoro runs in tests/live/test_scheduling.py."""

from __future__ import annotations

import heapq
import itertools
import time
from pathlib import Path

import numpy as np
import pytest

from rtts.engines.kokoro import HEAD_MARGIN, MIN_RUN_TOKENS, KokoroEngine
from rtts.engines.registry import KINDS
from rtts.engines.run_pacing import RunCost, paced_run
from rtts.g2p.split import first_words, split_phonemes
from rtts.g2p.words import Word, inside_words
from rtts.engines.voices import VoiceRegistry
from rtts.synthesis.inference import RUN_GUARD_S, RUN_GUARD_SHARE, SHARED_LEAD_S, InferenceWorker, _Entry
from rtts.synthesis.jobs import Job
from tests.unit.test_engine_seam import ToyKind

# Kokoro's phonemes of 下车的旅客请带好您的随身物品，从列车前进方向的右侧车门下车。(jieba's words
# apart) and of まもなく一番線に電車がまいります。危ないですから黄色い線までお下がりください。
# (pyopenjtalk's morphemes apart: "iʨi baɴseɴ" is one word, 一番線).
ZH = ("ɕja↘ꭧʰɤ→ tɤ ly↓kʰɤ↘ ʨʰi↓ŋ tai↘ xau↓ ni↗n tɤ swei↗ʂə→n u↘pʰi↓n, ʦʰʊ↗ŋ lje↘ꭧʰɤ→ ʨʰjɛ↗nʨi↘nfa→ŋɕja↘ŋ tɤ "
      "jou↘ʦʰɤ↘ ꭧʰɤ→mə↗n ɕja↘ꭧʰɤ→.")
JA = "mamonakɯ iʨi baɴseɴ ɲi deɴɕa ɡa maiɾʲimasɨ. abɯnai desɨkaɾa kʲiiɾoi seɴ made osaɡaɾʲi kɯdasai."


@pytest.mark.parametrize("most", [0, 10, 24, 30, 45, 60, 70, 100, 127, 128, 500])
@pytest.mark.parametrize("text", [ZH, JA])
def test_a_paced_run_is_whole_words_and_loses_nothing(text: str, most: int) -> None:
    words = text is ZH
    head, rest = paced_run(text, most, 24, words)
    assert f"{head} {rest}".strip() == text  # only the space at the cut is dropped
    # No stub on either side: a phrase of 24 symbols at least, or of 12 where no cut
    # leaves 24 and the whole is over the budget.
    assert not rest or min(len(head), len(rest)) >= 24 or (
        min(len(head), len(rest)) >= 12 and len(head) <= max(most, 24) and paced_run(text, len(text), 24, words)[1] == "")
    if rest:
        assert text[len(head)] == " "  # at a space: between words
        if not words:
            assert head[-1] in ",.?!:;—…"  # Japanese: only after punctuation
    if len(text) <= max(most, 24):
        assert rest == ""


def test_the_longest_run_that_fits_and_a_break_first() -> None:
    head, _ = paced_run(ZH, 60, 24)
    assert head == "ɕja↘ꭧʰɤ→ tɤ ly↓kʰɤ↘ ʨʰi↓ŋ tai↘ xau↓ ni↗n tɤ swei↗ʂə→n"  # the last word end within 60
    head, _ = paced_run(ZH, 100, 24)
    assert head.endswith("u↘pʰi↓n,")  # a comma within reach beats a later word end
    # Just over the budget: cut where the rest is no stub, not the whole (a gap) or a stub.
    head, rest = paced_run(ZH, len(ZH) - 5, 24)
    assert len(rest) >= 24 and len(head) <= len(ZH) - 5
    head, rest = paced_run(JA, 30, 24, words=False)
    assert head.endswith("maiɾʲimasɨ.") and rest.startswith("abɯnai")  # past 30: the first break after 24
    # No cut leaves 24 on both sides (word ends at 21 and 31 of 52): one leaving 12 that
    # fits, rather than the whole 0.5 s past the audio in hand.
    en = "tə bˈɔstən lˈivz fɹʌm plˈætfɔɹm fˈɔɹ æt tˈɛn θˈɜɹTi."
    assert paced_run(en, 32, 24) == ("tə bˈɔstən lˈivz fɹʌm plˈætfɔɹm", "fˈɔɹ æt tˈɛn θˈɜɹTi.")
    assert paced_run(en, 10, 24) == ("tə bˈɔstən lˈivz fɹʌm", "plˈætfɔɹm fˈɔɹ æt tˈɛn θˈɜɹTi.")
    assert paced_run(en, 52, 24) == (en, "")  # it fits: whole


def test_the_cost_line_is_learned_from_runs() -> None:
    cost = RunCost(overhead_s=0.1, per_token_s=0.008, shortest=24)
    assert cost.tokens_within("zh", 0.9, 1.0) == pytest.approx(100, abs=1)  # the priors' line
    for _ in range(30):  # this box: 0.05 s fixed, 5 ms a phoneme
        for tokens in (12, 40, 90, 128):
            cost.learn("zh", tokens, 1.0, 0.05 + 0.005 * tokens)
    fixed, slope = cost.line("zh")
    assert fixed == pytest.approx(0.05, abs=0.01) and slope == pytest.approx(0.005, rel=0.05)
    assert cost.tokens_within("zh", 0.55, 1.0) == pytest.approx(100, abs=5)
    assert cost.line("ja") == (0.1, 0.008)  # each language its own, from the priors
    assert cost.tokens_within("zh", 0.01, 1.0) == 0  # less than the fixed part: none fit
    assert cost.tokens_within("en", 0.5, 2.0) == 2 * cost.tokens_within("en", 0.5, 1.0)  # speed 2: half the frames


def test_one_length_alone_keeps_the_priors_shape() -> None:
    cost = RunCost(overhead_s=0.1, per_token_s=0.008, shortest=24)
    for _ in range(20):
        cost.learn("zh", 50, 1.0, 0.6)  # every run the same length: no slope to be had
    fixed, slope = cost.line("zh")
    assert fixed >= 0 and slope > 0
    assert fixed + slope * 50 == pytest.approx(0.6, rel=0.1)


def test_a_runs_fixed_part_is_never_none_while_the_line_is_learned() -> None:
    """A box twice as fast as the priors: the line through their points and its first
    runs tips below zero and reads no fixed part; the crowd rule still gets one near the
    box's, and the line's own once it is learned."""
    cost = RunCost(overhead_s=0.1, per_token_s=0.018, shortest=24)
    assert cost.fixed_s("en") == 0.1  # nothing learned: the priors
    for tokens, seconds in ((16, 0.188), (21, 0.253), (30, 0.291), (51, 0.487)):  # 2-core Xeon, en
        cost.learn("en", tokens, 1.0, seconds)
    assert cost.line("en")[0] == 0.0
    assert 0.05 < cost.fixed_s("en") < 0.1
    for _ in range(20):
        for tokens in (8, 12, 27, 51):
            cost.learn("en", tokens, 1.0, 0.08 + 0.008 * tokens)
    assert cost.fixed_s("en") == pytest.approx(cost.line("en")[0]) == pytest.approx(0.08, abs=0.01)


@pytest.fixture
def worker(tmp_path: Path) -> InferenceWorker:
    (tmp_path / "a.toy").write_text("")
    registry = VoiceRegistry.discover(tmp_path, tmp_path, 1, default_voice="toy/a", kinds=(*KINDS, ToyKind()))
    return InferenceWorker(registry, lambda callback: callback())  # not started: its heap is ours


def _queue(worker: InferenceWorker, job: Job, started_s: float | None = None) -> _Entry:
    entry = _Entry(job.deadline, job.seq, job)
    if started_s is not None:  # between its chunks, its last one this long
        entry.chunks, entry.last_chunk_s = iter(()), started_s
    heapq.heappush(worker._heap, entry)
    return entry


def guarded(slack: float) -> float:
    """What a run may take of ``slack``: the guard, and of a long run a share of it."""
    return slack - max(RUN_GUARD_S, RUN_GUARD_SHARE * slack)


def test_a_run_may_take_the_tightest_slack_on_the_thread(worker: InferenceWorker) -> None:
    voice = worker._registry.get("toy/a")
    now = time.monotonic()
    running = _Entry(now + 3.0, 0, Job("a", "x" * 40, voice, "en", 1.0, now + 3.0))
    # Alone: its own buffer, less a share of it (a long run strays from its estimate in
    # proportion: 2.4 s of 3, where a fixed guard left 2.9).
    assert worker._run_budget(running) == pytest.approx(guarded(3.0), abs=0.01)
    assert guarded(3.0) < 3.0 - 2 * RUN_GUARD_S and guarded(0.3) == pytest.approx(0.3 - RUN_GUARD_S)
    # A client with 1 s in hand whose next turn costs 0.2 s: 0.8 s to spare for this run.
    _queue(worker, Job("b", "y", voice, "en", 1.0, now + 1.0), started_s=0.2 / 4)  # toy streams: 4x its last
    assert worker._run_budget(running) == pytest.approx(guarded(0.8), abs=0.01)
    # A second, due later, must also get its turn after b's: 2.0 - (0.2 + 1.5) = 0.3.
    _queue(worker, Job("c", "z", voice, "en", 1.0, now + 2.0), started_s=1.5 / 4)
    assert worker._run_budget(running) == pytest.approx(guarded(0.3), abs=0.01)
    # A newcomer waiting for its first audio: below zero, the engine's shortest run.
    _queue(worker, Job("d", "w", voice, "en", 1.0, now, opens=True))
    assert worker._run_budget(running) < 0


def test_a_run_makes_about_what_a_stream_waiting_for_the_crowd_needs(worker: InferenceWorker) -> None:
    # A stream that fits by load waits until each stream there holds a crowd's turn of
    # audio (room.crowd_hold_s): the running stream's run ends about when it holds that,
    # so the one waiting goes in then rather than after the running stream's whole unit.
    voice = worker._registry.get("toy/a")
    worker._registry.engines["toy"].run_overhead_s = lambda lang, generator: 0.5  # type: ignore[attr-defined]
    worker.rtf["toy"] = 0.2
    now = time.monotonic()
    running = _Entry(now + 1.0, 0, Job("a", "x" * 40, voice, "en", 1.0, now + 1.0))
    worker._current_entry = running
    assert worker._run_budget(running) == pytest.approx(guarded(1.0), abs=0.01)  # none waits
    worker._waiting.append(Job("b", "hello", voice, "en", 1.0, now, room=1.0))
    # b needs a to hold its first run (5 characters at the toy's 1 ms) and 1.0 / 0.6 s:
    # a lacks 0.67 s of audio, 0.13 s of compute at 0.2, half as much again for the margin.
    lacks = worker._first_s(worker._waiting[0]) + 1.0 / 0.6 - 1.0
    assert worker._run_budget(running) == pytest.approx(lacks * 0.2 * 1.5, abs=0.01)
    # Holding that already, its run is paced by the others alone.
    running.job.deadline = now + 3.0  # type: ignore[union-attr]
    assert worker._run_budget(running) == pytest.approx(guarded(3.0), abs=0.01)


def test_an_announcements_jobs_are_made_the_same_way_whatever_the_load(worker: InferenceWorker) -> None:
    # Each instance makes an announcement's audio itself: neither the engine's lead nor its
    # runs may follow this box's clock, or two instances cut its units two ways.
    voice = worker._registry.get("toy/a")
    now = time.monotonic()
    _queue(worker, Job("d", "w", voice, "en", 1.0, now, opens=True))  # a newcomer waiting
    for deadline in (now, now + 3.0):
        own = Job("a", "x" * 40, voice, "en", 1.0, deadline)
        assert worker._run_budget(_Entry(deadline, 0, own)) < 0
        shared = Job("hall#1", "x" * 40, voice, "en", 1.0, deadline, shared=("hall#1", 1))
        assert worker._run_budget(_Entry(deadline, 0, shared)) is None
        assert worker._lead(shared) == SHARED_LEAD_S
    opening = Job("hall#1", "x" * 40, voice, "en", 1.0, now + 3.0, opens=True, shared=("hall#1", 0))
    assert worker._lead(opening) == 0.0  # its first: awaited now on every instance alike
    assert worker._lead(Job("a", "x", voice, "en", 1.0, now + 3.0)) == pytest.approx(3.0, abs=0.05)


def test_two_clients_with_the_same_utterance_id_are_two_streams(worker: InferenceWorker) -> None:
    # Utterance ids are the clients' own: the load once counted every client's "u" as one.
    voice = worker._registry.get("toy/a")
    now = time.monotonic()
    for session in ("s1", "s2"):
        _queue(worker, Job("u", "hello", voice, "en", 1.0, now + 1, sink=lambda job, event, s=session: None))
    _, load, _ = worker.estimate(Job("u", "hello", voice, "en", 1.0, now + 1))
    assert load == pytest.approx(3 * worker.rtf["toy"])


def test_a_paced_run_is_never_cut_inside_one_written_words_reading() -> None:
    # "costs $23.50." read as six words: the cut after "costs" or after "cents.", never between.
    text = "ðə tˈɛn θˈɜɹTi tɹˈAn kˈɔsts twˈɛntiθɹˈi dˈɑləɹz ænd fˈɪfti sˈɛnts. plˈiz mˈInd ðə ɡˈæp"
    words = [
        Word(0, 3, "The", 0, 2), Word(4, 9, "ten", 3, 7), Word(4, 9, "thirty", 8, 14), Word(10, 15, "train", 15, 20),
        Word(16, 21, "costs", 21, 27), Word(22, 28, "twenty-three", 28, 39), Word(22, 28, "dollars", 40, 47),
        Word(22, 28, "and", 48, 51), Word(22, 28, "fifty", 52, 58), Word(22, 29, "cents.", 59, 65),
        Word(30, 36, "Please", 67, 72),
    ]  # fmt: skip
    joined = inside_words(words, 0, len(text))
    assert sorted(p for p in joined if text[p] == " ") == [7, 39, 47, 51, 58]  # ten|thirty and the four inside the money
    for most in range(0, len(text)):
        head, rest = paced_run(text, most, 6, True, joined)
        assert f"{head} {rest}".strip() == text
        assert len(head) not in joined
    assert paced_run(text, 45, 6, True, joined)[0].endswith("kˈɔsts")  # not "twˈɛntiθɹˈi"
    # Positions are from ``start``: a piece later in the unit.
    assert {p for p in inside_words(words, 28, 66) if text[28 + p] == " "} == {11, 19, 23, 30}
    # One item read as two words (zero-width characters join the written word): its space too.
    assert inside_words([Word(0, 21, "zero\u200bwidth\u200cjoin\u200dtest", 0, 21)], 0, 21) >= {6, 15}


def test_a_first_run_or_a_memory_bounded_one_is_never_cut_inside_a_reading() -> None:
    """The quick start's window and a memory budget's pieces keep the same words whole as
    a paced run. A window with no cut but a space inside "$23.50"'s reading at its end
    was cut there: the caption said "twenty-three dollars" (a live words test, on a
    loaded box, where the learned first run had grown to end inside the money)."""
    text = "I pˈAd twˈɛntiθɹˈi dˈɑləɹz ænd fˈɪfti sˈɛnts ˈɔn mˈɑɹʧ"
    money = [Word(7, 13, said, a, b) for said, a, b in (
        ("twenty-three", 7, 18), ("dollars", 19, 26), ("and", 27, 30), ("fifty", 31, 37), ("cents", 38, 44))]
    words = [Word(0, 1, "I", 0, 1), Word(2, 6, "paid", 2, 6), *money, Word(14, 16, "on", 45, 48)]
    joined = inside_words(words, 0, len(text))
    assert {p for p in joined if text[p] == " "} == {18, 26, 30, 37}
    for shortest in range(1, len(text)):
        for limit in range(shortest, len(text) + 1):
            head, rest = first_words(text, limit, shortest, joined)
            assert f"{head} {rest}".strip() == text and len(head) not in joined, (shortest, limit)
    assert first_words(text, 26, 18, joined) == (text, "")  # no word ends in the window: whole
    assert first_words(text, 44, 18, joined)[0].endswith("sˈɛnts")
    for limit in range(len("twˈɛntiθɹˈi"), len(text)):
        pieces = split_phonemes(text, limit, joined)
        assert " ".join(pieces) == text, limit
        cuts = list(itertools.accumulate(len(p) + 1 for p in pieces[:-1]))
        assert not any(c - 1 in joined for c in cuts) or limit < len("twˈɛntiθɹˈi dˈɑləɹz ænd fˈɪfti sˈɛnts"), limit
    # Positions are in the string given, leading spaces and all; a reading longer than
    # the bound is still cut (a memory bound is hard), at its own spaces first.
    assert split_phonemes("  " + text, 20, {p + 2 for p in joined})[:2] == ["I pˈAd", "twˈɛntiθɹˈi dˈɑləɹz"]


def test_a_run_below_the_shortest_where_the_shortest_would_be_late() -> None:
    """A paced run is MIN_RUN_TOKENS at least, but where not even that would be made before
    the listener's audio runs out, it is as long as would be: no shorter than a run whose
    audio outlasts its compute (HEAD_MARGIN) nor than the quick start's least. A Mandarin
    unit after a first clause of 0.8 s ("请注意，") made a first run of 26 phonemes in
    0.85 s on a 2-core EPYC (0.45 s + 17 ms a phoneme): a gap in every round."""
    engine = KokoroEngine(model_path_fn=lambda: Path("/nonexistent"))  # nothing loaded
    for _ in range(30):
        for tokens in (12, 26, 62):
            engine._run_cost.learn("zh", tokens, 1.0, 0.45 + 0.017 * tokens)
            engine._run_cost.learn("ja", tokens, 1.0, 0.45 + 0.017 * tokens)
    # The shortest run that still gains on the listener: 1.25 x 0.45 s over
    # (0.065 - 1.25 x 17 ms) a phoneme.
    least = engine._least_run("zh", 1.0)
    assert least == 13 and engine._least_run("ja", 1.0) is None  # no quick start: cut at breaks only
    # Word ends at 17 and 26 of 52: with 22 or 25 in time, 17, where the floor of 24 made 26.
    text = "a" * 17 + " " + "b" * 8 + " " + "c" * 25
    for most in (22, 25):
        assert paced_run(text, most, MIN_RUN_TOKENS, least=least) == ("a" * 17, "b" * 8 + " " + "c" * 25)
        assert paced_run(text, most, MIN_RUN_TOKENS)[0] == "a" * 17 + " " + "b" * 8
    # In time at the floor: as before, the longest that fits.
    assert paced_run(text, 30, MIN_RUN_TOKENS, least=least)[0] == "a" * 17 + " " + "b" * 8
    # No cut in time even at the least: as before.
    short = "a" * 17 + " " + "b" * 30
    assert paced_run(short, 10, MIN_RUN_TOKENS, least=least) == paced_run(short, 10, MIN_RUN_TOKENS) == ("a" * 17, "b" * 30)


def test_a_first_run_says_enough_for_the_next_to_be_made_on_this_box() -> None:
    """An utterance's first run (its first words, Mandarin and English) is long enough that
    the next run, MIN_RUN_TOKENS at least, is made while it plays, by the cost line learned
    on this box: the quick start's own bounds on a box as fast as the priors, longer on a
    slower one (a Xeon's fresh server: ~0.45 s + 15 ms a phoneme, 0.056 s of English a
    phoneme, where "The morning" ran dry before the next run in every round)."""
    engine = KokoroEngine(model_path_fn=lambda: Path("/nonexistent"))  # nothing loaded
    assert engine._first_symbols("en", 0.0) == (8, 16)  # not paced (used alone): the same cut on any box
    engine.limit_run_compute(0.0)  # paced by the thread, as in a server
    # The priors: the next run 0.1 s + 24 x 18 ms, over 0.065 s of audio a phoneme.
    assert engine.head_tokens("zh") == engine.head_tokens("en") == 11
    assert engine._first_symbols("zh", 0.0) == engine._first_symbols("en", 0.0) == (11, 19)
    assert engine._first_symbols("ja", 0.0) is None  # never cut: pyopenjtalk's words are morphemes
    assert engine._first_symbols("en", 0.5) is None  # a later unit: paced instead
    for _ in range(30):
        for tokens in (10, 27, 51):
            engine._run_cost.learn("en", tokens, 1.0, 0.45 + 0.015 * tokens)
            engine._learn_length("en", tokens + 30, 0.056 * (tokens + 30))
    least = engine.head_tokens("en")
    fixed, slope = engine._run_cost.line("en")
    next_s = fixed + slope * MIN_RUN_TOKENS
    assert least * 0.056 >= next_s * HEAD_MARGIN > (least - 1) * 0.056  # the fewest that do
    assert 18 <= least <= 22 and engine._first_symbols("en", 0.0) == (least, least + 8)
    # A window, not one length: words ending at 16 and 19 with a least of 18, cut at 19
    # within (18, 26), made whole with (18, 18).
    en = "ðə mˈɔɹnɪŋ tɹˈAn tə bˈɔstən lˈivz fɹʌm"
    assert first_words(en, 26, 18)[0] == "ðə mˈɔɹnɪŋ tɹˈAn tə" and first_words(en, 18, 18) == (en, "")
    # and a break below the least is no cut: the word end within the window is taken.
    assert first_words("ðə, mˈɔɹnɪŋ tɹˈAn tə bˈɔstən lˈivz fɹʌm", 21, 18)[0] == "ðə, mˈɔɹnɪŋ tɹˈAn tə"
    # The earliest word end at or above the least, not the window's last: every symbol
    # of the first run is made before the listener hears anything; a break after
    # punctuation in the window still comes first.
    assert first_words("aa bb cc dd ee ff", 11, 4) == ("aa bb", "cc dd ee ff")
    assert first_words("aa bb cc, dd ee ff", 14, 4) == ("aa bb cc,", "dd ee ff")
    assert engine._first_symbols("zh", 0.0) == (11, 19)  # each language its own line
    assert engine.head_tokens("en", speed=2.0) > least  # fast speech: a phoneme gives half the audio


def test_the_first_runs_length_holds_while_the_line_wobbles() -> None:
    """Raised when the next run needs a quarter more, lowered only when it needs a quarter
    less: the same announcement is cut the same way from one time to the next."""
    engine = KokoroEngine(model_path_fn=lambda: Path("/nonexistent"))
    engine.limit_run_compute(0.0)
    for _ in range(30):
        for tokens in (10, 27, 51):
            engine._run_cost.learn("zh", tokens, 1.0, 0.45 + 0.015 * tokens)
    first = engine._first_symbols("zh", 0.0)
    engine._run_cost.learn("zh", 27, 1.0, 0.45 + 0.015 * 27 - 0.2)  # a quicker run: the need dips
    assert engine.head_tokens("zh") < first[0] and engine._first_symbols("zh", 0.0) == first
    for _ in range(3):
        engine._run_cost.learn("zh", 27, 1.0, 0.45 + 0.015 * 27 + 0.5)  # slower runs: raised
    assert engine.head_tokens("zh") > HEAD_MARGIN * first[0]
    assert engine._first_symbols("zh", 0.0)[0] == engine.head_tokens("zh")
    for _ in range(40):
        for tokens in (10, 27, 51):
            engine._run_cost.learn("zh", tokens, 1.0, 0.1 + 0.007 * tokens)  # a box twice as fast
    assert engine._first_symbols("zh", 0.0)[0] == max(8, engine.head_tokens("zh")) < first[0]


def test_a_run_keeps_a_margin_as_wide_as_its_cost_wanders() -> None:
    """A paced run is sized to the learned line times a margin learned with it: on a box
    whose runs keep to the line, none; where they wander ±15 % (a Mandarin run on a 2-core
    EPYC, where runs sized to the line itself left a gap in about half the rounds), about
    a sixth, so that the run still ends in time when it costs more than the line says."""
    rng = np.random.default_rng(7)
    steady = RunCost(overhead_s=0.1, per_token_s=0.018, shortest=24)
    wandering = RunCost(overhead_s=0.1, per_token_s=0.018, shortest=24)
    assert steady.margin("zh") == 1.0  # nothing measured: the line alone
    for _ in range(60):
        for tokens in (12, 26, 62):
            cost = 0.45 + 0.017 * tokens
            steady.learn("zh", tokens, 1.0, cost)
            wandering.learn("zh", tokens, 1.0, cost * rng.uniform(0.85, 1.15))
    assert steady.margin("zh") < 1.01 and 1.1 < wandering.margin("zh") < 1.3
    most = wandering.tokens_within("zh", 1.0, 1.0)
    assert most < steady.tokens_within("zh", 1.0, 1.0)
    late = sum((0.45 + 0.017 * most) * rng.uniform(0.85, 1.15) > 1.0 for _ in range(1000))
    assert late == 0, (most, late)
    assert wandering.margin("ja") == 1.0  # each language its own


def test_a_stream_whose_next_part_is_another_voices_is_left_that_voices_first_run(worker: InferenceWorker) -> None:
    """A mixed stream at the end of its English part (its audio made) needs the thread for
    its Mandarin's first run (``Job.next_first_s``) when that audio runs out: a run beside
    it leaves room for both, where its English job's own last turn said little."""
    voice = worker._registry.get("toy/a")
    now = time.monotonic()
    running = _Entry(now + 3.0, 0, Job("a", "x" * 40, voice, "en", 1.0, now + 3.0))
    english = Job("b", "y" * 400, voice, "en", 1.0, now + 1.0)
    entry = _queue(worker, english, started_s=0.2 / 4)
    entry.compute_s = 100.0  # its audio made: what is left is its end
    assert worker._run_budget(running) == pytest.approx(guarded(0.8), abs=0.01)
    english.next_first_s = 0.5
    assert worker._run_budget(running) == pytest.approx(guarded(0.3), abs=0.01)
    # Mid-way through its part, the next is not due by this deadline: its turn alone counts.
    entry.compute_s = 0.0
    assert worker._left_s(entry, time.monotonic()) > worker._turn_cost(entry)
    assert worker._run_budget(running) == pytest.approx(guarded(0.8), abs=0.01)


class _PacedRuns:
    """An engine that paces its runs: its shortest run costs 0.3 s with Kokoro's own
    generator and a fifth of it with the student (what ``KokoroEngine.least_run_s`` says)."""

    loaded = True

    def least_run_s(self, lang: str, generator: str | None = None) -> float:
        return 0.06 if generator == "student" else 0.3


def test_the_next_voices_first_run_is_costed_by_the_generator_the_client_named(worker: InferenceWorker) -> None:
    voice = worker._registry.get("toy/a")
    worker._registry.engines[voice.model] = _PacedRuns()
    worker.first_s_per_char["toy"] = 0.1  # 1.0 s for ten characters on a free thread: the runs are less
    text = "x" * 10
    assert worker.next_run_s(voice, "en", text) == pytest.approx(0.3)
    assert worker.next_run_s(voice, "en", text, "teacher") == pytest.approx(0.3)
    assert worker.next_run_s(voice, "en", text, "student") == pytest.approx(0.06)
    worker.first_s_per_char["toy"] = 0.001  # never more than its first audio on a free thread
    assert worker.next_run_s(voice, "en", text, "teacher") == pytest.approx(0.01)
