"""benchmarks/listeners.py's pure parts: what a cell's summary says of the server's count
of the time streams waited for room, and of when a round's last stream was heard."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import latency
import listeners


def heard(ttfa: float) -> listeners.Listener:
    stream = latency.Stream(sent=10.0)
    stream.frame(10.0 + ttfa, 0.02)
    return listeners.Listener(stream=stream)


def test_the_rounds_waits_are_summed_and_their_share_on_work_given() -> None:
    rounds = [[heard(0.2), heard(1.0)], [heard(0.3), heard(3.0)]]
    s = listeners.summary(rounds, [0, 0], [listeners.contended((5.0, 1.0), (9.0, 1.5)), (6.0, 0.5)])
    assert s["contended"] == pytest.approx((10.0, 1.0))
    assert listeners.on_work(s) == pytest.approx(0.9)
    assert "on work 90%" in listeners.busy_held(s)
    # The last stream heard in each round, their median: 1.0 s and 3.0 s.
    assert s["last"] == pytest.approx(2.0)


def test_a_build_without_the_count_or_a_round_without_waiting_says_nothing() -> None:
    rounds = [[heard(0.2)]]
    assert listeners.summary(rounds, [0], [listeners.contended(None, (1.0, 0.0))])["contended"] is None
    quiet = listeners.summary(rounds, [0], [(0.01, 0.0)])
    assert listeners.on_work(quiet) is None and listeners.busy_held(quiet) == ""


def test_a_round_with_no_stream_heard_has_no_last() -> None:
    refused = listeners.Listener(refused=True)
    assert math.isnan(listeners.summary([[refused]])["last"])
