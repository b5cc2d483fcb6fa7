"""How far ahead announcements are timed: the lead learnt from lags, its bounds, the floors."""

from __future__ import annotations

import pytest

from rtts.broadcast import timeline
from rtts.broadcast.timeline import LeadEstimator


def test_before_any_lag_the_lead_is_a_second_within_the_bounds() -> None:
    assert LeadEstimator(0.3, 2.0).lead() == 1.0
    assert LeadEstimator(0.3, 0.8).lead() == 0.8
    assert LeadEstimator(1.5, 2.0).lead() == 1.5


def test_the_lead_covers_the_95th_percentile_of_the_last_32_lags() -> None:
    est = LeadEstimator(0.3, 2.0)
    for lag in [0.2] * 19 + [0.6]:  # one slow first audio in twenty
        est.record(lag)
    # The 95th percentile of twenty sits at rank 0.95 * 19 = 18.05: 5% of the way from 0.2 to 0.6.
    assert est.lead() == pytest.approx((0.2 + 0.05 * 0.4) * 1.5 + 0.35)
    for _ in range(32):
        est.record(0.1)  # the slow one is forgotten after 32 more
    assert est.lags == [0.1] * 32 and est.lead() == pytest.approx(0.1 * 1.5 + 0.35)


def test_the_lead_is_bounded_and_a_fixed_one_wins() -> None:
    est = LeadEstimator(0.5, 2.0)
    est.record(0.0)
    assert est.lead() == 0.5
    est.record(5.0)  # slower than real time: the bound is what the setting promises
    assert est.lead() == 2.0
    est.record(float("nan"))
    est.record(-1.0)  # audio that came before its time counts as on time
    assert est.lags == [0.0, 5.0, 0.0]
    assert LeadEstimator(0.3, 2.0, fixed=0.7).lead() == 0.7


def test_floors_keep_announcements_apart_except_a_high_one() -> None:
    assert timeline.floor(prev_end=100.0, gap=0.25, not_before=None, high=False) == 100.25
    assert timeline.floor(prev_end=100.0, gap=0.25, not_before=200.0, high=False) == 200.0
    assert timeline.floor(prev_end=100.0, gap=0.25, not_before=200.0, high=True) == 0.0
    assert timeline.propose(now=99.0, lead=0.5, floor=100.25) == 100.25
    assert timeline.propose(now=99.0, lead=2.0, floor=100.25) == 101.0


def test_a_claim_is_bounded_by_what_any_instance_could_have_claimed() -> None:
    """Issue 30, bug 3: a claim is no earlier than the announcement could have begun
    anywhere, and no later than a lead and a load after this instance began it, or than the
    end of what plays before it; each with CLAIM_SLACK_S for clocks and pub/sub."""
    slack = timeline.CLAIM_SLACK_S
    arrived, now = 1000.0, 1003.0
    assert timeline.claim_bounds(arrived, now, floor=0.0, max_lead=2.0, load_s=0.0) == (
        arrived - slack, now + 2.0 + slack
    )
    # Another instance may have had to load the model first, slower than this one did.
    assert timeline.claim_bounds(arrived, now, floor=0.0, max_lead=2.0, load_s=3.0)[1] == (
        now + 2.0 + timeline.LOAD_SLACK * 3.0 + slack
    )
    # What plays before it ends in a minute: the next is heard after it.
    assert timeline.claim_bounds(arrived, now, floor=now + 60, max_lead=2.0, load_s=0.0)[1] == now + 60 + slack
    # The values of issue 30: 80,000 s either way is outside, whatever the channel holds.
    earliest, latest = timeline.claim_bounds(arrived, now, floor=now + 600, max_lead=2.0, load_s=10.0)
    assert not earliest <= now + 80_000 <= latest and not earliest <= now - 80_000 <= latest


def test_the_settings_are_checked_once_with_their_flags_names() -> None:
    import argparse

    from rtts import config

    parser = argparse.ArgumentParser()
    config.add_flags(parser)
    cfg = config.from_args(parser.parse_args(["--sync-max-lead", "1.5", "--sync-gap", "0"]), {"RTTS_SYNC_LEAD": "0.8"})
    assert (cfg.sync_lead, cfg.sync_min_lead, cfg.sync_max_lead, cfg.sync_gap, cfg.shared_clock) == (
        0.8, 0.3, 1.5, 0.0, "host"
    )
    assert cfg.limits["sync_max_lead_ms"] == 1500
    for args, why in (
        (["--shared-clock", "bus"], "give --bus too"),
        (["--shared-clock", "ntp"], "host or bus"),
        (["--sync-lead", "3"], "at most sync-max-lead"),
        (["--sync-min-lead", "2.5"], "min <= max"),
        (["--sync-gap", "-1"], "sync-gap"),
    ):
        with pytest.raises(ValueError, match=why):
            config.from_args(parser.parse_args(args), {})
    assert config.from_args(parser.parse_args(["--shared-clock", "bus", "--bus", "redis://r:6379/0"]), {}).shared_clock == "bus"
