"""The time streams waited for room and the thread's idle time in it (rtts/synthesis/contention.py)."""

from __future__ import annotations

import pytest

from rtts.synthesis.contention import Contention


def test_only_time_with_a_stream_waiting_counts() -> None:
    c = Contention()
    c.note(0.0, idle=True)  # an idle thread with no one waiting is no loss
    c.note(5.0, waiting=True)
    c.note(6.0, idle=False)  # one second waited on an idle thread
    c.note(9.0, waiting=False)  # three more on work
    c.note(20.0, idle=True)
    assert c.totals(30.0) == pytest.approx((4.0, 1.0))


def test_the_state_since_the_last_mark_is_counted_when_read() -> None:
    c = Contention()
    c.note(1.0, waiting=True, idle=True)
    assert c.totals(1.5) == pytest.approx((0.5, 0.5))
    assert c.totals(2.0) == pytest.approx((1.0, 1.0))  # read twice: nothing counted twice
    c.note(2.0, idle=False)
    assert c.totals(4.0) == pytest.approx((3.0, 1.0))


def test_a_clock_read_out_of_order_adds_nothing() -> None:
    # The event loop reads the sums under the worker's lock, but with a clock read before it.
    c = Contention()
    c.note(10.0, waiting=True)
    assert c.totals(9.0) == (0.0, 0.0)
    assert c.totals(11.0) == pytest.approx((1.0, 0.0))
