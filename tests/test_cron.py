"""Cron ticks, catch-up and the cron loop's step (controlplane.cron;
DOMAIN.md §6 item 21): next ticks in a time zone across DST changes, the
skip_missed and enqueue_missed_with_cap policies, and the loop's step
(plan_tick, then claim_routine_tick or fire_routine_tick) against a real
database (claim, dispatch with the claimed tick, redelivery)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane.aio import AsyncOffice
from controlplane.client import Office
from controlplane.cron import (
    BROKEN_TRIGGER_RETRY,
    Fire,
    TickPlan,
    due_fires,
    latest_tick,
    next_tick,
    plan_tick,
)
from controlplane.errors import InvalidArgument
from controlplane.models import CatchUpPolicy, DispatchRoutineResult, RoutineTrigger

NY = "America/New_York"


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


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


# --- SQL and Python agree on the syntax ------------------------------------------------------

ACCEPTED = [
    "* * * * *",
    "*/15 9-17 * * MON-FRI",
    "0 0 1,15 * *",
    "5/10 * * * 7",
    "0 9 L * *",
    "0 9 LW * *",
    "0 9 * * 5L",
    "0 9 * * FRI#2",
    "0 0 * jan,Jul sun",
    "0-59/7 0-23/5 1-31/3 1-12/2 0-6/2",
]
REFUSED = [
    "60 * * * *",
    "* 24 * * *",
    "* * 0 * *",
    "* * * 13 *",
    "* * * * 8",
    "*/0 * * * *",
    "5-1 * * * *",
    "? * * * *",
]


def test_sql_and_python_accept_and_refuse_the_same_expressions(db: psycopg.Connection[Any]) -> None:
    for expression in ACCEPTED:
        db.execute("SELECT office._check_cron_expression(%s)", [expression])
        next_tick(expression, "Europe/Paris", utc(2026, 1, 1))
    for expression in REFUSED:
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            db.execute("SELECT office._check_cron_expression(%s)", [expression])
        with pytest.raises(InvalidArgument):
            next_tick(expression, "UTC", utc(2026, 1, 1))


# --- a step of the cron loop against the database -----------------------------------------------


@dataclass(frozen=True)
class Step:
    """What one step of the cron loop did for one trigger: the plan, whether
    this caller won the claim, and the dispatch (a won claim with a fire)."""

    plan: TickPlan
    claimed: bool
    dispatch: DispatchRoutineResult | None = None


def step(
    office: Office,
    trigger: RoutineTrigger,
    now: datetime,
    catch_up_policy: CatchUpPolicy | str = CatchUpPolicy.ENQUEUE_MISSED_WITH_CAP,
    catch_up_max: int = 25,
) -> Step | None:
    """The cron loop's step (controlplane.daemon.cron): plan, then arm with
    claim_routine_tick or claim-and-dispatch with fire_routine_tick (one
    transaction). None when the trigger owes nothing."""
    plan = plan_tick(trigger, now, catch_up_policy, catch_up_max)
    if plan is None:
        return None
    if plan.fire is None:
        return Step(plan, office.claim_routine_tick(trigger.id, plan.observed, plan.following))
    fire = plan.fire
    tick = office.fire_routine_tick(
        trigger.id,
        fire.tick,
        plan.following,
        fire.missed_ticks,
        fire.missed_since,
        fire.missed_truncated,
    )
    return Step(plan, tick.claimed, tick.dispatch)


async def step_async(office: AsyncOffice, trigger: RoutineTrigger, now: datetime) -> Step | None:
    """:func:`step` with an AsyncOffice (a due tick, no catch-up)."""
    plan = plan_tick(trigger, now)
    assert plan is not None and plan.fire is not None
    tick = await office.fire_routine_tick(trigger.id, plan.fire.tick, plan.following)
    return Step(plan, tick.claimed, tick.dispatch)


@pytest.fixture
def office(dsn: str) -> Iterator[Office]:
    with Office(dsn, registry=CollectorRegistry()) as client:
        client.upsert_agent("agent-1", "w1")
        client.create_routine(
            "w1",
            "light",
            assignee_agent_profile_id="agent-1",
            concurrency_policy="always_create",
            id="L",
        )
        yield client


def stored(office: Office, trigger_id: str = "t1") -> RoutineTrigger:
    result = office.execute(
        "SELECT * FROM office.routine_triggers WHERE id = %(id)s", {"id": trigger_id}
    )
    return RoutineTrigger.model_validate(result.rows[0])


def wakeups(office: Office) -> list[dict[str, Any]]:
    return office.execute("SELECT * FROM office.wakeup_requests ORDER BY requested_at, id").rows


def test_a_step_claims_and_dispatches_with_the_claimed_tick(office: Office) -> None:
    t0 = utc(2026, 5, 10, 12, 0)
    office.add_routine_trigger("L", "*/5 * * * *", next_run_at=t0, id="t1")
    seen = stored(office)
    outcome = step(office, seen, t0 + timedelta(seconds=10))
    assert outcome is not None and outcome.claimed and outcome.dispatch is not None
    assert outcome.dispatch.status == "done"
    assert outcome.dispatch.idempotency_key == "routine:L:t1:tick:1778414400"
    after = stored(office)
    assert after.next_run_at == utc(2026, 5, 10, 12, 5) and after.last_fired_at is not None
    # Another loop that looked at the same trigger loses the claim: no fire.
    late = step(office, seen, t0 + timedelta(seconds=20))
    assert late is not None and not late.claimed and late.dispatch is None
    # A redelivery of the same fire dedups on the wakeup key; the next tick does not.
    fire = outcome.plan.fire
    assert fire is not None
    again = office.dispatch_routine("L", "cron", trigger_id="t1", **fire.dispatch_args())
    assert again.wakeup_outcome == "deduped" and again.status == "done"
    nxt = step(office, after, utc(2026, 5, 10, 12, 5, 1))
    assert nxt is not None and nxt.dispatch is not None
    assert nxt.dispatch.idempotency_key == "routine:L:t1:tick:1778414700"
    assert nxt.dispatch.wakeup_outcome == "queued"
    assert len(wakeups(office)) == 2


def test_a_step_carries_the_catch_up_into_the_wakeup(office: Office) -> None:
    t0 = utc(2026, 5, 10, 12, 0)
    office.add_routine_trigger("L", "*/5 * * * *", next_run_at=t0, id="t1")
    outcome = step(office, stored(office), utc(2026, 5, 10, 13, 0, 1), catch_up_max=4)
    assert outcome is not None and outcome.dispatch is not None
    [request] = wakeups(office)
    assert request["payload"]["missed_ticks"] == 4
    assert request["payload"]["missed_since"] == "2026-05-10T12:00:00Z"
    assert request["payload"]["missed_truncated"] is True
    assert stored(office).next_run_at == utc(2026, 5, 10, 13, 5)
    run = office.execute(
        "SELECT catch_up_missed_ticks, catch_up_truncated FROM office.routine_runs"
    ).rows
    assert run == [{"catch_up_missed_ticks": 4, "catch_up_truncated": True}]


def test_a_step_arms_an_unarmed_trigger(office: Office) -> None:
    office.add_routine_trigger("L", "0 9 * * *", timezone="Europe/Paris", id="t1")
    outcome = step(office, stored(office), utc(2026, 7, 15, 12))
    assert outcome is not None and outcome.claimed and outcome.dispatch is None
    assert outcome.plan.action == "arm"
    assert stored(office).next_run_at == utc(2026, 7, 16, 7)
    assert stored(office).last_fired_at is None
    assert wakeups(office) == []
    assert step(office, stored(office), utc(2026, 7, 15, 13)) is None  # not due yet


def test_a_step_rearms_a_trigger_that_cannot_be_computed(office: Office) -> None:
    t0 = utc(2026, 5, 10, 12, 0)
    office.add_routine_trigger("L", "0 0 30 2 *", next_run_at=t0, id="t1")  # structurally fine
    now = utc(2026, 5, 10, 12, 1)
    outcome = step(office, stored(office), now)
    assert outcome is not None and outcome.plan.action == "rearm" and outcome.dispatch is None
    assert stored(office).next_run_at == now + BROKEN_TRIGGER_RETRY
    assert wakeups(office) == []


async def test_a_step_with_the_async_client(dsn: str) -> None:
    async with AsyncOffice(dsn, registry=CollectorRegistry()) as office:
        await office.upsert_agent("agent-1", "w1")
        await office.create_routine("w1", "light", assignee_agent_profile_id="agent-1", id="L")
        t0 = utc(2026, 5, 10, 12, 0)
        seen = await office.add_routine_trigger("L", "*/5 * * * *", next_run_at=t0, id="t1")
        outcome = await step_async(office, seen, t0 + timedelta(minutes=1))
        assert outcome is not None and outcome.claimed and outcome.dispatch is not None
        assert outcome.dispatch.idempotency_key == "routine:L:t1:tick:1778414400"
        late = await step_async(office, seen, t0 + timedelta(minutes=1))
        assert late is not None and not late.claimed
