"""When a stream that waits for room gets it (rtts/synthesis/room.py, issue 32)."""

from __future__ import annotations

import pytest

from rtts.synthesis.room import Stream, Waiting, wait_for_room


def test_a_stream_that_fits_or_would_be_alone_waits_for_nothing() -> None:
    assert wait_for_room([Stream(0.4, 3.0)], [], 0.4, 1.0) == 0.0
    assert wait_for_room([], [], 2.0, 1.0) == 0.0


def test_it_waits_for_the_stream_with_the_least_left_sharing_the_thread() -> None:
    # Two streams of 0.45 with 1 s and 4 s of compute left share the thread: the first
    # ends after 2 s (each had half of it), and then 0.45 + 0.45 fits in 1.0.
    on_thread = [Stream(0.45, 4.0), Stream(0.45, 1.0)]
    assert wait_for_room(on_thread, [], 0.45, 1.0) == pytest.approx(2.0)
    # Room only for it alone: it waits for both, 2 s and then the second's 3 s alone.
    assert wait_for_room(on_thread, [], 0.6, 0.6) == pytest.approx(5.0)


def test_streams_waiting_ahead_go_first_and_take_their_share() -> None:
    on_thread = [Stream(0.5, 1.0)]
    # Alone behind it: 1 s. Behind one waiting stream of 3 s: that one goes at 1 s, and
    # this one only when it ends, 3 s later.
    assert wait_for_room(on_thread, [], 0.6, 1.0) == pytest.approx(1.0)
    assert wait_for_room(on_thread, [Waiting(0.5, 3.0, 1.0)], 0.6, 1.0) == pytest.approx(4.0)
    # A stream ahead that needs less room goes in beside the other, and then they share.
    assert wait_for_room([Stream(0.3, 1.0)], [Waiting(0.3, 2.0, 1.0)], 0.6, 0.9) == pytest.approx(2.0)


def test_a_finished_stream_is_no_obstacle() -> None:
    assert wait_for_room([Stream(0.9, 0.0)], [Waiting(0.5, 0.0, 1.0)], 0.9, 1.0) == 0.0
