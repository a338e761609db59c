"""The routine and wakeup methods of Office (psycopg) and AsyncOffice
(asyncpg): the same calls, the same pydantic results, the typed errors, and
what they report (docs/domain.md §4: the wakeup durable dedup on queue wakeup,
the disposition of each fire, the warnings of a failed lightweight fire)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from controlplane.aio import AsyncOffice
from controlplane.client import Office
from controlplane.errors import (
    AgentNotAcceptingRuns,
    AgentNotFound,
    InvalidArgument,
    RoutineNotFound,
)
from controlplane.models import (
    CatchUpPolicy,
    ConcurrencyPolicy,
    DedupKind,
    RoutineRunStatus,
    RoutineStatus,
    RoutineTerminal,
    WakeupDispatchStatus,
    WakeupOutcome,
)
from tests.scenarios.routines import DAY, TEMPLATE

TICK = datetime(2026, 5, 10, 12, tzinfo=UTC)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def office(dsn: str, registry: CollectorRegistry) -> Iterator[Office]:
    with Office(dsn, registry=registry) as client:
        client.upsert_agent("agent-1", "w1")
        yield client


def dispositions(registry: CollectorRegistry, disposition: str, source: str = "manual") -> float:
    value = registry.get_sample_value(
        "office_loop_routine_run_total",
        {"workspace": "w1", "source": source, "disposition": disposition},
    )
    return value or 0.0


def wakeup_dedups(registry: CollectorRegistry, reason: str) -> float:
    value = registry.get_sample_value(
        "office_run_dedup_total", {"reason": reason, "kind": "durable", "queue": "wakeup"}
    )
    return value or 0.0


def test_sync_client_runs_a_heavy_routine(office: Office, registry: CollectorRegistry) -> None:
    routine = office.create_routine(
        "w1",
        "daily",
        TEMPLATE,
        "agent-1",
        variables=DAY,
        id="R",
        catch_up_policy=CatchUpPolicy.SKIP_MISSED,
        catch_up_max=3,
    )
    assert routine.heavy and routine.status is RoutineStatus.ACTIVE
    assert routine.concurrency_policy is ConcurrencyPolicy.SKIP_IF_ACTIVE
    assert (routine.catch_up_policy, routine.catch_up_max) == (CatchUpPolicy.SKIP_MISSED, 3)
    assert routine.task_template == TEMPLATE and routine.variables == DAY

    first = office.dispatch_routine("R", "manual")
    assert first.task_created and first.linked_task_id and first.run_id
    assert first.workspace_id == "w1" and first.coalesced_into_run_id == ""
    second = office.dispatch_routine("R", "manual")
    assert second.status is RoutineRunStatus.SKIPPED and second.linked_task_id == ""
    other = office.dispatch_routine("R", "manual", variables={"day": "2026-01-02"})
    assert other.task_created

    assert office.close_routine_run(first.routine_run_id, RoutineTerminal.DONE) is True
    assert office.close_routine_run(first.routine_run_id, RoutineTerminal.CANCELLED) is False
    assert office.sync_routine_run_status(other.linked_task_id, "done") is True
    assert office.sync_routine_run_status("", "done") is False
    assert office.dispatch_routine("R", "manual").task_created
    assert dispositions(registry, "task_created") == 3
    assert dispositions(registry, "skipped") == 1


def test_sync_client_runs_a_lightweight_routine_and_wakeups(
    office: Office, registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    office.create_routine(
        "w1",
        "light",
        assignee_agent_profile_id="agent-1",
        concurrency_policy="always_create",
        id="L",
    )
    trigger = office.add_routine_trigger("L", "0 12 * * *", "Europe/Paris", TICK, id="t1")
    assert (trigger.timezone, trigger.next_run_at, trigger.enabled) == ("Europe/Paris", TICK, True)
    assert office.claim_routine_tick("t1", TICK, datetime(2026, 5, 11, 10, tzinfo=UTC)) is True
    assert office.claim_routine_tick("t1", TICK, datetime(2026, 5, 11, 10, tzinfo=UTC)) is False

    fired = office.dispatch_routine("L", "cron", trigger_id="t1", claimed_tick=TICK)
    assert fired.status is RoutineRunStatus.DONE and fired.wakeup_outcome is WakeupOutcome.QUEUED
    assert fired.idempotency_key == "routine:L:t1:tick:1778414400" and fired.run_id
    with caplog.at_level(logging.WARNING, logger="controlplane.dedup"):
        again = office.dispatch_routine("L", "cron", trigger_id="t1", claimed_tick=TICK)
    # Scenario 51: already requested is success, counted as a durable wakeup dedup.
    assert again.status is RoutineRunStatus.DONE and again.wakeup_outcome is WakeupOutcome.DEDUPED
    assert again.wakeup_request_id == fired.wakeup_request_id
    assert wakeup_dedups(registry, "routine_dispatch_cron") == 1
    [record] = [r for r in caplog.records if r.getMessage() == "run deduplicated (durable index)"]
    assert record.__dict__["queue"] == "wakeup" and record.__dict__["key"] == fired.idempotency_key
    assert dispositions(registry, "done", "cron") == 2

    requested = office.request_wakeup("agent-1", "user", "ping", {"a": 1}, "ping:1")
    assert requested.created and requested.dedup_kind is None
    duplicate = office.request_wakeup("agent-1", "user", "ping", {"a": 2}, "ping:1")
    assert duplicate.outcome is WakeupOutcome.DEDUPED and duplicate.dedup_kind is DedupKind.DURABLE
    assert duplicate.wakeup_request_id == requested.wakeup_request_id
    assert wakeup_dedups(registry, "ping") == 1
    dispatched = office.dispatch_wakeup(requested.wakeup_request_id)
    assert dispatched.status is WakeupDispatchStatus.COALESCED and dispatched.run_id == fired.run_id
    assert office.dispatch_wakeup(requested.wakeup_request_id).status is WakeupDispatchStatus.NOOP
    assert office.fail_wakeup(requested.wakeup_request_id, "late") is False
    queued = office.request_wakeup("agent-1", "user")
    assert office.fail_wakeup(queued.wakeup_request_id, "no longer needed") is True


def test_52_53_a_failed_lightweight_fire_is_a_result_with_its_disposition(
    office: Office, registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    office.create_routine("w1", "light", assignee_agent_profile_id="agent-1", id="L")
    office.set_agent_status("agent-1", "paused")
    with caplog.at_level(logging.WARNING, logger="controlplane.routines"):
        failed = office.dispatch_routine("L", "manual")
    assert failed.failed and failed.wakeup_request_id is not None
    assert "paused" in (failed.error_message or "")
    assert dispositions(registry, "failed") == 1 and dispositions(registry, "task_created") == 0
    [record] = [r for r in caplog.records if r.getMessage() == "dispatch routine wakeup request"]
    assert record.__dict__["routine"] == "L"
    assert record.__dict__["wakeup_id"] == failed.wakeup_request_id

    office.execute("DELETE FROM office.agent_profiles")
    with caplog.at_level(logging.WARNING, logger="controlplane.routines"):
        create_failed = office.dispatch_routine("L", "manual")
    assert create_failed.failed and create_failed.wakeup_request_id is None
    assert any(r.getMessage() == "create routine wakeup request" for r in caplog.records)
    assert dispositions(registry, "failed") == 2


def test_sync_client_errors_are_typed(office: Office) -> None:
    with pytest.raises(InvalidArgument, match="unknown concurrency_policy 'sometimes'"):
        office.create_routine("w1", "n", concurrency_policy="sometimes")
    with pytest.raises(InvalidArgument, match="unknown catch_up_policy"):
        office.create_routine("w1", "n", catch_up_policy="all")
    with pytest.raises(AgentNotFound):
        office.create_routine("w1", "n", assignee_agent_profile_id="ghost")
    office.create_routine("w1", "n", id="R")
    with pytest.raises(InvalidArgument, match="unknown source 'email'"):
        office.dispatch_routine("R", "email")
    with pytest.raises(RoutineNotFound, match="routine 'nope' not found"):
        office.dispatch_routine("nope", "manual")
    with pytest.raises(RoutineNotFound):
        office.add_routine_trigger("nope", "* * * * *")
    with pytest.raises(InvalidArgument, match="invalid cron expression"):
        office.add_routine_trigger("R", "* * *")
    with pytest.raises(InvalidArgument, match="unknown time zone 'Atlantis'"):
        office.add_routine_trigger("R", "* * * * *", "Atlantis")
    with pytest.raises(RoutineNotFound):
        office.claim_routine_tick("nope", TICK, datetime(2026, 5, 11, tzinfo=UTC))
    with pytest.raises(RoutineNotFound):
        office.close_routine_run("nope", "done")
    with pytest.raises(InvalidArgument):
        office.close_routine_run("nope", "finished")
    with pytest.raises(AgentNotFound):
        office.request_wakeup("ghost", "user")
    with pytest.raises(InvalidArgument):
        office.request_wakeup("agent-1", "")
    with pytest.raises(RoutineNotFound):
        office.dispatch_wakeup("nope")
    office.set_agent_status("agent-1", "stopped")
    request = office.request_wakeup("agent-1", "user")
    with pytest.raises(AgentNotAcceptingRuns):
        office.dispatch_wakeup(request.wakeup_request_id)
    assert office.fail_wakeup(request.wakeup_request_id, "stopped") is True


async def test_async_client_gives_the_same_results(dsn: str) -> None:
    registry = CollectorRegistry()
    async with AsyncOffice(dsn, registry=registry) as office:
        await office.upsert_agent("agent-1", "w1")
        routine = await office.create_routine(
            "w1", "daily", TEMPLATE, "agent-1", "coalesce_if_active", DAY, id="R"
        )
        assert routine.heavy and routine.concurrency_policy is ConcurrencyPolicy.COALESCE_IF_ACTIVE
        first = await office.dispatch_routine("R", "manual")
        second = await office.dispatch_routine("R", "manual")
        assert first.task_created and second.status is RoutineRunStatus.COALESCED
        assert second.coalesced_into_run_id == first.routine_run_id
        assert await office.sync_routine_run_status(first.linked_task_id, "cancelled") is True
        assert await office.close_routine_run(first.routine_run_id, "done") is False
        third = await office.dispatch_routine("R", "manual", variables={"day": "x"})
        assert third.task_created

        await office.create_routine("w1", "light", assignee_agent_profile_id="agent-1", id="L")
        trigger = await office.add_routine_trigger("L", "0 12 * * *", next_run_at=TICK, id="t1")
        assert trigger.next_run_at == TICK
        assert await office.claim_routine_tick("t1", TICK, datetime(2026, 5, 11, 12, tzinfo=UTC))
        fired = await office.dispatch_routine("L", "cron", trigger_id="t1", claimed_tick=TICK)
        again = await office.dispatch_routine("L", "cron", trigger_id="t1", claimed_tick=TICK)
        assert fired.wakeup_outcome is WakeupOutcome.QUEUED
        assert (
            again.wakeup_outcome is WakeupOutcome.DEDUPED and again.status is RoutineRunStatus.DONE
        )
        assert wakeup_dedups(registry, "routine_dispatch_cron") == 1

        requested = await office.request_wakeup("agent-1", "user", payload={"x": 1})
        dispatched = await office.dispatch_wakeup(requested.wakeup_request_id)
        assert dispatched.status is WakeupDispatchStatus.COALESCED
        assert await office.fail_wakeup(requested.wakeup_request_id, "x") is False
        with pytest.raises(RoutineNotFound):
            await office.dispatch_routine("nope", "manual")
        with pytest.raises(InvalidArgument):
            await office.create_routine("w1", "n", concurrency_policy="bogus")
        await office.set_agent_status("agent-1", "paused")
        with pytest.raises(AgentNotAcceptingRuns):
            await office.dispatch_wakeup(
                (await office.request_wakeup("agent-1", "u")).wakeup_request_id
            )
