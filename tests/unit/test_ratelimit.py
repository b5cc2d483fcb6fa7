"""The per-connection message rate (rtts/speech/ratelimit.py), on a clock moved by hand."""

from __future__ import annotations

import pytest

from rtts.speech.ratelimit import MessageRate, Verdict


class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


def verdicts(rate: MessageRate, n: int) -> list[Verdict]:
    return [rate.take() for _ in range(n)]


def test_a_burst_passes_then_one_refusal_then_silence_then_close() -> None:
    clock = Clock()
    rate = MessageRate(200, 64, clock)
    assert verdicts(rate, 64) == [Verdict.TAKE] * 64
    # Over the limit: told once, then dropped without a word, until a whole burst is owed.
    assert verdicts(rate, 64) == [Verdict.REFUSE] + [Verdict.DROP] * 62 + [Verdict.CLOSE]


def test_the_rate_refills_credit_at_rate_per_second() -> None:
    clock = Clock()
    rate = MessageRate(100, 10, clock)
    assert verdicts(rate, 10) == [Verdict.TAKE] * 10
    assert rate.take() is Verdict.REFUSE  # debt: -1
    clock.t += 0.055  # 5.5 tokens: back to +4.5
    assert verdicts(rate, 4) == [Verdict.TAKE] * 4
    assert rate.take() is Verdict.REFUSE  # a new run over the limit is told again
    clock.t += 1000  # credit never exceeds the burst
    assert verdicts(rate, 10) == [Verdict.TAKE] * 10
    assert rate.take() is Verdict.REFUSE


def test_a_client_that_keeps_to_the_rate_is_never_refused() -> None:
    clock = Clock()
    rate = MessageRate(200, 64, clock)
    for _ in range(10_000):
        clock.t += 1 / 200
        assert rate.take() is Verdict.TAKE


def test_a_client_a_little_over_the_rate_is_closed_once_it_owes_a_burst() -> None:
    """Refused messages still cost: one that never slows down ends up closed, however
    slightly it is over (here 10 % over 100/s: closed within ~ (10 + 10) / 10 s)."""
    clock = Clock()
    rate = MessageRate(100, 10, clock)
    seen: list[Verdict] = []
    while Verdict.CLOSE not in seen and clock.t < 100:
        clock.t += 1 / 110
        seen.append(rate.take())
    assert seen[-1] is Verdict.CLOSE and clock.t < 55
    assert Verdict.REFUSE in seen and seen.count(Verdict.REFUSE) < len(seen) // 2


def test_a_flood_is_closed_after_two_bursts_whatever_its_speed() -> None:
    clock = Clock()
    rate = MessageRate(200, 64, clock)
    n = 0
    while rate.take() is not Verdict.CLOSE:
        clock.t += 1e-5  # 100,000 messages a second
        n += 1
    assert 127 <= n <= 130


def test_a_clock_going_back_adds_no_credit() -> None:
    clock = Clock()
    rate = MessageRate(10, 2, clock)
    assert verdicts(rate, 2) == [Verdict.TAKE] * 2
    clock.t -= 5
    assert rate.take() is Verdict.REFUSE


@pytest.mark.parametrize(("r", "burst"), [(0, 1), (-1, 5), (10, 0)])
def test_nonsense_limits_are_refused(r: float, burst: int) -> None:
    with pytest.raises(ValueError):
        MessageRate(r, burst, Clock())
