"""The cron loop's step (plan_tick, then claim_routine_tick or
fire_routine_tick; controlplane.daemon.cron) against a real database: claim,
dispatch with the claimed tick, redelivery; and SQL and Python accept the
same cron expressions. The arithmetic is ``tests/unit/test_cron.py``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane.aio import AsyncOffice
from controlplane.client import Office
from controlplane.cron import (
    BROKEN_TRIGGER_RETRY,
    TickPlan,
    next_tick,
    plan_tick,
)
from controlplane.errors import InvalidArgument
from controlplane.models import CatchUpPolicy, DispatchRoutineResult, RoutineTrigger
from tests.harness import utc

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
