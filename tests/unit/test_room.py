"""When a stream that waits for room gets it, and is heard (rtts/synthesis/room.py, issue 32)."""

from __future__ import annotations

import pytest

from rtts.synthesis.room import Heard, Stream, Waiting, crowd_hold_s, crowd_ready, when_heard


def own(rtf: float, compute_s: float = 1.0, room: float = 1.0, unit_s: float = 0.5) -> Waiting:
    return Waiting(rtf, compute_s, room, unit_s)


def test_a_stream_that_would_be_alone_goes_at_once_and_is_heard_after_its_first_run() -> None:
    assert when_heard([], [], own(2.0), 0.3) == Heard(0.0, 0.0, 0.3)
    assert when_heard([Stream(0.9, 0.0, 0.5)], [], own(0.5), 0.2) == Heard(0.0, 0.0, 0.2)  # a finished stream


def test_a_stream_that_fits_goes_after_those_that_asked_before_it_and_have_no_audio() -> None:
    # One stream has audio in hand for 3 s; another asked a moment ago and is still on its
    # first run (0.25 s of compute). The new one is made after that run, and before the
    # stream with audio in hand.
    on_thread = [Stream(0.3, 5.0, 0.1, runs_out_s=3.0), Stream(0.3, 2.0, 0.1, runs_out_s=-0.1, next_s=0.25)]
    assert when_heard(on_thread, [], own(0.3, room=float("inf")), 0.2) == Heard(
        0.0, pytest.approx(0.25), pytest.approx(0.45)
    )


def test_it_waits_for_a_stream_to_end_and_then_is_served_first() -> None:
    # Two streams of 0.45 on the thread, units of 0.5 s of compute: b has one unit left, a
    # many. The thread takes the stream whose audio runs out first: b's (0.5 s in hand)
    # before a's (2 s), so b ends at 0.5 s; then a + the new one fit in 1.0, and the new one,
    # holding no audio, goes before a.
    on_thread = [Stream(0.45, 4.0, 0.5, runs_out_s=2.0), Stream(0.45, 0.5, 0.5, runs_out_s=0.5)]
    assert when_heard(on_thread, [], own(0.45), 0.2) == Heard(
        pytest.approx(0.5), pytest.approx(0.5), pytest.approx(0.7)
    )


def test_the_running_unit_holds_the_thread_until_it_ends() -> None:
    # The running unit has 0.3 s left; the stream it belongs to ends with it.
    running = Stream(0.6, 0.3, 0.5, runs_out_s=5.0, next_s=0.3, running=True)
    assert when_heard([running], [], own(0.6), 0.1) == Heard(
        pytest.approx(0.3), pytest.approx(0.3), pytest.approx(0.4)
    )


def test_a_stream_that_fits_waits_for_the_running_unit_and_then_for_those_that_asked_before_it() -> None:
    # The running unit has 0.1 s left; a stream there that asked before has its first run
    # (0.25 s) to make. The new one starts after both (it was told it would go first while
    # a unit was running: the running unit's time counted as its wait).
    running = Stream(0.3, 2.0, 0.1, runs_out_s=3.0, next_s=0.1, running=True)
    earlier = Stream(0.3, 2.0, 0.1, runs_out_s=-0.1, next_s=0.25)
    assert when_heard([running, earlier], [], own(0.3, room=float("inf")), 0.2) == Heard(
        0.0, pytest.approx(0.35), pytest.approx(0.55)
    )


def test_streams_on_the_thread_end_one_unit_after_another_not_together() -> None:
    # Six Mandarin listeners (docs/benchmarks.md, "What a held-back stream is told"): three
    # streams of 0.2 with 1.85 s of compute each, three waiting, room for three. An even
    # share of the thread ended the three together and told every waiting stream the
    # same 5.55 s, and they were heard later (p50 7.7 s against 6.2 told). Played unit by
    # unit the three on the thread end apart, and each stream let in catches up with the
    # audio the others hold before the last of them is made, so the third waits longest.
    on_thread = [Stream(0.2, 1.85, 0.4) for _ in range(3)]
    ahead: list[Waiting] = []
    heard = []
    for _ in range(3):
        heard.append(when_heard(on_thread, ahead, Waiting(0.2, 1.85, 0.7, 0.4), 0.2))
        ahead.append(Waiting(0.2, 1.85, 0.7, 0.4))
    rooms = [h.room_s for h in heard]
    assert rooms == sorted(rooms) and rooms[0] < 5.55 < rooms[2] and rooms[2] - rooms[0] > 0.5
    assert all(h.audio_s > h.room_s for h in heard)


def test_streams_waiting_ahead_go_first() -> None:
    on_thread = [Stream(0.5, 1.0, 1.0)]
    alone = when_heard(on_thread, [], own(0.6), 0.1)
    behind = when_heard(on_thread, [Waiting(0.5, 3.0, 1.0, 1.0)], own(0.6), 0.1)
    assert alone.room_s == pytest.approx(1.0)
    # The one ahead fits beside the other at once; this one waits until both have ended,
    # the 4 s of compute they have between them.
    assert behind.room_s == pytest.approx(4.0)
    # Room beside one of them: it goes once the stream on the thread has ended (its unit
    # after the first of the one let in before it).
    assert when_heard(
        [Stream(0.3, 1.0, 1.0)], [Waiting(0.3, 2.0, 1.0, 1.0)], own(0.6, room=0.9), 0.1
    ).room_s == (pytest.approx(2.0))
    # Room for it alone: it waits for both.
    assert when_heard(
        [Stream(0.3, 1.0, 1.0)], [Waiting(0.3, 2.0, 1.0, 1.0)], own(0.6, room=0.6), 0.1
    ).room_s == (pytest.approx(3.0))


def test_a_long_wait_is_told_whole_in_coarser_pieces() -> None:
    # A stream with 1,000 s of compute left, in pieces of 0.1 s, and room only once it ends:
    # played forward piece by piece the estimate stopped at its cap (500 s) and told that.
    heard = when_heard([Stream(0.9, 1000.0, 0.1, runs_out_s=5.0)], [], own(0.5), 0.1)
    assert heard.room_s == pytest.approx(1000.0, rel=0.01) and heard.audio_s > heard.room_s


def test_a_crowd_takes_a_newcomer_once_its_streams_hold_a_turn_of_the_crowds_audio() -> None:
    # Three Mandarin teacher streams of RTF 0.2 and a newcomer: 0.2 left of the thread for
    # four runs' fixed parts of 0.1 s, so a turn must make 2 s of audio, and each stream
    # there must hold that and the newcomer's first run (0.3 s) besides.
    hold = crowd_hold_s([0.2] * 4, [0.1] * 4, 0.3)
    assert hold == pytest.approx(2.3)
    assert not crowd_ready([3.0, 2.2, 5.0], hold)
    assert crowd_ready([3.0, 2.4, 5.0], hold)
    # A stream there with no audio yet (let in a moment ago) holds every newcomer back:
    # streams let in together start one after another.
    assert not crowd_ready([0.0, 9.0], crowd_hold_s([0.2] * 3, [0.1] * 3, 0.3))
    # Runs with no fixed part (Piper's windows, Hibari) never wait for it, nor does a
    # newcomer beside streams that are all between units.
    assert crowd_hold_s([0.3] * 3, [0.0] * 3, 0.3) == 0.0
    assert crowd_ready([0.0, 0.0], 0.0)
    assert crowd_ready([], hold)


def test_a_newcomer_that_fits_by_load_is_told_the_wait_for_the_crowds_audio() -> None:
    # One stream on the thread, RTF 0.25, holding 0.2 s of audio, made in pieces of 0.1 s
    # with a fixed part of 0.1 s a run; the newcomer (RTF 0.25, fixed part 0.1, first run
    # 0.2 s) fits by load (0.5 of 0.8), but it needs the stream there to hold
    # 0.2 + 0.2 / 0.5 = 0.6 s: each 0.1 s piece adds 0.4 s of audio, so after two pieces
    # (0.8 s in hand at 0.2 s) it goes, and its first run ends 0.2 s later.
    there = Stream(0.25, 5.0, 0.1, runs_out_s=0.2, overhead_s=0.1)
    newcomer = Waiting(0.25, 2.0, 0.8, 0.1, overhead_s=0.1, first_s=0.2)
    heard = when_heard([there], [], newcomer, 0.2)
    assert heard == Heard(pytest.approx(0.2), pytest.approx(0.2), pytest.approx(0.4))
    # Without fixed parts it goes at once, ahead of the stream with audio in hand.
    plain = Waiting(0.25, 2.0, 0.8, 0.1, first_s=0.2)
    assert when_heard([Stream(0.25, 5.0, 0.1, runs_out_s=0.2)], [], plain, 0.2) == Heard(
        0.0, 0.0, pytest.approx(0.2)
    )
