"""Cron ticks and catch-up (controlplane.cron; docs/domain.md §6 item 21): next
ticks in a time zone across DST changes, the skip_missed and
enqueue_missed_with_cap policies, computed without a database. The loop's step
against a real one is ``tests/daemon/test_cron_loop.py``."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest

from controlplane.cron import (
    BROKEN_TRIGGER_RETRY,
    Fire,
    due_fires,
    latest_tick,
    next_tick,
    plan_tick,
)
from controlplane.errors import InvalidArgument
from controlplane.models import CatchUpPolicy, RoutineTrigger
from tests.harness import utc

NY = "America/New_York"


def ticks(expression: str, zone: str, after: datetime, count: int) -> list[datetime]:
    found = []
    for _ in range(count):
        after = next_tick(expression, zone, after)
        found.append(after)
    return found


def trigger(
    expression: str = "*/5 * * * *",
    next_run_at: datetime | None = None,
    zone: str = "UTC",
    enabled: bool = True,
) -> RoutineTrigger:
    return RoutineTrigger(
        id="t1",
        routine_id="L",
        cron_expression=expression,
        timezone=zone,
        next_run_at=next_run_at,
        enabled=enabled,
    )


# --- next ticks ----------------------------------------------------------------------------


def test_next_tick_is_strictly_after() -> None:
    assert next_tick("*/15 * * * *", "UTC", utc(2026, 5, 10, 12, 7)) == utc(2026, 5, 10, 12, 15)
    assert next_tick("*/15 * * * *", "UTC", utc(2026, 5, 10, 12, 15)) == utc(2026, 5, 10, 12, 30)
    after = utc(2026, 5, 10, 12, 14, 59) + timedelta(microseconds=999_999)
    assert next_tick("*/15 * * * *", "UTC", after) == utc(2026, 5, 10, 12, 15)
    assert next_tick("0 9 * * MON", "UTC", utc(2026, 5, 10)) == utc(2026, 5, 11, 9)  # a Sunday


def test_a_daily_0230_job_on_the_spring_forward_day_runs_once_after_the_jump() -> None:
    # 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist.
    found = ticks("30 2 * * *", NY, utc(2026, 3, 7, 12), 3)
    assert found == [
        utc(2026, 3, 8, 7, 0),  # 03:00 EDT, right after the jump
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
        utc(2026, 3, 10, 6, 30),
    ]


def test_a_daily_0230_job_on_the_fall_back_day_runs_once() -> None:
    # 2026-11-01: 02:00 EDT falls back to 01:00 EST; 02:30 happens once (EST).
    found = ticks("30 2 * * *", NY, utc(2026, 10, 31, 12), 3)
    assert found == [utc(2026, 11, 1, 7, 30), utc(2026, 11, 2, 7, 30), utc(2026, 11, 3, 7, 30)]


def test_a_daily_job_in_the_repeated_hour_runs_once_at_its_first_occurrence() -> None:
    # 01:30 happens twice on 2026-11-01 (EDT, then EST): the job runs at the first.
    found = ticks("30 1 * * *", NY, utc(2026, 10, 31, 12), 2)
    assert found == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


def test_an_hourly_job_runs_every_elapsed_hour_across_both_changes() -> None:
    fall = ticks("30 * * * *", NY, utc(2026, 11, 1, 4), 4)
    assert fall == [utc(2026, 11, 1, h, 30) for h in (4, 5, 6, 7)]  # 00:30, 01:30 x2, 02:30 local
    spring = ticks("30 * * * *", NY, utc(2026, 3, 8, 5), 3)
    assert spring == [utc(2026, 3, 8, h, 30) for h in (5, 6, 7)]  # 00:30, 01:30, 03:30 local


def test_the_zone_moves_the_utc_tick_with_the_season() -> None:
    assert next_tick("0 9 * * *", "Europe/Paris", utc(2026, 1, 15)) == utc(2026, 1, 15, 8)
    assert next_tick("0 9 * * *", "Europe/Paris", utc(2026, 7, 15)) == utc(2026, 7, 15, 7)


def test_latest_tick_is_at_or_before() -> None:
    assert latest_tick("*/5 * * * *", "UTC", utc(2026, 5, 10, 12, 0)) == utc(2026, 5, 10, 12, 0)
    assert latest_tick("*/5 * * * *", "UTC", utc(2026, 5, 10, 12, 4, 59)) == utc(2026, 5, 10, 12, 0)
    assert latest_tick("30 2 * * *", NY, utc(2026, 3, 8, 12)) == utc(2026, 3, 8, 7, 0)


@pytest.mark.parametrize(
    ("expression", "zone", "message"),
    [
        ("* * * *", "UTC", "expected 5 fields"),
        ("0 * * * * *", "UTC", "expected 5 fields"),
        ("61 * * * *", "UTC", "invalid cron expression '61 \\* \\* \\* \\*'"),
        ("0 0 30 2 *", "UTC", "invalid cron expression"),
        ("* * * * *", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_bad_expressions_and_zones_are_invalid(expression: str, zone: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        next_tick(expression, zone, utc(2026, 1, 1))


def test_times_must_be_aware() -> None:
    with pytest.raises(InvalidArgument, match="timezone-aware"):
        next_tick("* * * * *", "UTC", datetime(2026, 1, 1))


# --- catch-up plans ---------------------------------------------------------------------------


def test_nothing_is_owed_before_the_tick_or_by_a_disabled_trigger() -> None:
    t0 = utc(2026, 5, 10, 12, 0)
    assert plan_tick(trigger(next_run_at=t0), t0 - timedelta(seconds=1)) is None
    assert plan_tick(trigger(next_run_at=t0, enabled=False), t0 + timedelta(hours=1)) is None
    assert due_fires(trigger(next_run_at=t0), t0 - timedelta(seconds=1)) == []


def test_an_unarmed_trigger_is_armed_and_fires_nothing() -> None:
    now = utc(2026, 5, 10, 12, 2)
    plan = plan_tick(trigger(), now)
    assert plan is not None
    assert (plan.action, plan.observed, plan.following, plan.fire) == (
        "arm",
        None,
        utc(2026, 5, 10, 12, 5),
        None,
    )
    assert due_fires(trigger(), now) == []


def test_one_due_tick_is_one_plain_fire() -> None:
    t0 = utc(2026, 5, 10, 12, 0)
    plan = plan_tick(trigger(next_run_at=t0), t0 + timedelta(seconds=3))
    assert plan is not None and plan.action == "fire"
    assert plan.fire == Fire(tick=t0, scheduled_for=t0)
    assert plan.following == utc(2026, 5, 10, 12, 5)


@pytest.mark.parametrize("policy", list(CatchUpPolicy))
def test_missed_ticks_collapse_into_one_fire(policy: CatchUpPolicy) -> None:
    t0 = utc(2026, 5, 10, 12, 0)
    now = utc(2026, 5, 10, 12, 22)  # due: 12:00 12:05 12:10 12:15 12:20
    fires = due_fires(trigger(next_run_at=t0), now, policy, catch_up_max=25)
    assert len(fires) == 1
    [fire] = fires
    assert fire.tick == t0 and fire.scheduled_for == utc(2026, 5, 10, 12, 20)
    if policy is CatchUpPolicy.SKIP_MISSED:
        assert (fire.missed_ticks, fire.missed_since, fire.missed_truncated) == (None, None, None)
    else:
        assert (fire.missed_ticks, fire.missed_since, fire.missed_truncated) == (5, t0, False)
    plan = plan_tick(trigger(next_run_at=t0), now, policy)
    assert plan is not None and plan.following == utc(2026, 5, 10, 12, 25)


def test_the_count_is_capped_and_says_so() -> None:
    t0 = utc(2026, 5, 10, 12, 0)
    now = utc(2026, 5, 10, 12, 22)
    [at_cap] = due_fires(trigger(next_run_at=t0), now, "enqueue_missed_with_cap", catch_up_max=5)
    assert (at_cap.missed_ticks, at_cap.missed_truncated) == (5, False)
    [capped] = due_fires(trigger(next_run_at=t0), now, "enqueue_missed_with_cap", catch_up_max=3)
    assert (capped.missed_ticks, capped.missed_since, capped.missed_truncated) == (3, t0, True)
    assert capped.scheduled_for == utc(2026, 5, 10, 12, 20)


def test_a_year_long_outage_is_one_fire_computed_without_walking_the_year() -> None:
    t0 = utc(2025, 5, 10, 12, 0)
    now = utc(2026, 5, 10, 12, 0, 30)
    [fire] = due_fires(trigger("* * * * *", next_run_at=t0), now)
    assert (fire.missed_ticks, fire.missed_truncated, fire.scheduled_for) == (
        25,
        True,
        utc(2026, 5, 10, 12, 0),
    )


def test_a_slot_that_is_not_a_cron_tick_still_counts() -> None:
    t0 = utc(2026, 5, 10, 12, 1)  # e.g. re-armed by hand
    [fire] = due_fires(trigger(next_run_at=t0), utc(2026, 5, 10, 12, 6))
    assert (fire.tick, fire.scheduled_for, fire.missed_ticks) == (t0, utc(2026, 5, 10, 12, 5), 2)


def test_a_trigger_that_cannot_be_computed_is_rearmed_a_day_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    t0 = utc(2026, 5, 10, 12, 0)
    now = utc(2026, 5, 10, 12, 1)
    with caplog.at_level(logging.WARNING, logger="controlplane.routines"):
        plan = plan_tick(trigger("0 0 30 2 *", next_run_at=t0), now)
    assert plan is not None
    assert (plan.action, plan.observed, plan.following, plan.fire) == (
        "rearm",
        t0,
        now + BROKEN_TRIGGER_RETRY,
        None,
    )
    assert any(r.getMessage().startswith("cron trigger cannot be computed") for r in caplog.records)
    unknown_zone = plan_tick(trigger(next_run_at=t0, zone="Nowhere/Land"), now)
    assert unknown_zone is not None and unknown_zone.action == "rearm"


def test_plan_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        plan_tick(trigger(), utc(2026, 1, 1), "summarize_everything")
    with pytest.raises(InvalidArgument, match="catch_up_max"):
        plan_tick(trigger(), utc(2026, 1, 1), catch_up_max=0)
