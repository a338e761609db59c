"""The asyncpg client held to the same scenarios as the psycopg one
(``tests/scenarios/clients.py``), plus what only an async client has: ``async with``,
concurrent callers on one event loop."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Iterator
from typing import Any

import asyncpg
import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane.aio import AsyncOffice
from controlplane.errors import AgentNotFound, UniqueViolationError
from controlplane.models import DedupKind, QueueOutcome
from tests.scenarios.clients import (
    RAW_INSERT,
    SCENARIOS,
    Blocking,
    Env,
    Scenario,
    check_raw_session_state_does_not_outlive_the_call,
)


@pytest.fixture
def env(dsn: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture) -> Iterator[Env]:
    registry = CollectorRegistry()
    caplog.set_level(logging.INFO, logger="controlplane")
    loop = asyncio.new_event_loop()
    office = AsyncOffice(dsn, min_size=1, max_size=4, registry=registry)
    try:
        loop.run_until_complete(office.open())
        yield Env(Blocking(office, loop), registry, db, caplog)
    finally:
        loop.run_until_complete(office.close())
        loop.close()


@pytest.mark.parametrize("check", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_async_office(check: Scenario, env: Env) -> None:
    check(env)


# --- async-only -------------------------------------------------------------------


def dedup_total(registry: CollectorRegistry, reason: str, kind: str) -> float:
    labels = {"reason": reason, "kind": kind, "queue": "runs"}
    return registry.get_sample_value("office_run_dedup_total", labels) or 0.0


async def test_concurrent_producers_of_one_key_all_get_an_outcome(dsn: str) -> None:
    registry = CollectorRegistry()
    async with AsyncOffice(dsn, min_size=1, max_size=8, registry=registry) as office:
        await office.upsert_agent("a1", "w1")
        results = await asyncio.gather(
            *(office.enqueue_run("a1", "task_assigned", idempotency_key="k") for _ in range(16))
        )
        queued = [r for r in results if r.outcome is QueueOutcome.QUEUED]
        assert len(queued) == 1
        assert {r.run_id for r in results} == {queued[0].run_id}
        # The losers are deduped, or coalesced when they passed the windowed
        # lookup before the winner committed; each is counted once.
        losers = [r for r in results if r is not queued[0]]
        assert all(r.outcome is not QueueOutcome.QUEUED for r in losers)
        suppressed = (
            dedup_total(registry, "task_assigned", "windowed")
            + dedup_total(registry, "task_assigned", "durable")
            + (
                registry.get_sample_value("office_run_coalesced_total", {"reason": "task_assigned"})
                or 0
            )
        )
        assert suppressed == 15


async def test_async_with_and_open_on_first_use(dsn: str) -> None:
    office = AsyncOffice(dsn, registry=CollectorRegistry())
    try:
        agent = await office.upsert_agent("a1", "w1")  # opens the pool
        assert agent.id == "a1"
        assert office.pool is not None
    finally:
        await office.close()
    assert office.pool is None


async def test_a_borrowed_pool_is_left_open(dsn: str) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        async with AsyncOffice(pool=pool, registry=CollectorRegistry()) as office:
            with pytest.raises(AgentNotFound):
                await office.enqueue_run("nobody", "r")
            await office.execute(RAW_INSERT, {"id": "r1", "agent": "x", "reason": "r", "key": "k"})
            hit = await office.execute(
                RAW_INSERT, {"id": "r2", "agent": "x", "reason": "r", "key": "k"}
            )
            assert hit.dedup is not None
            assert (hit.dedup.dedup_kind, hit.dedup.holder_id) == (DedupKind.DURABLE, "r1")
            with pytest.raises(UniqueViolationError):
                await office.execute(
                    RAW_INSERT, {"id": "r1", "agent": "x", "reason": "r", "key": None}
                )
        assert await pool.fetchval("SELECT count(*) FROM office.runs") == 1
    finally:
        await pool.close()


def test_report_keyless_is_not_a_coroutine(dsn: str) -> None:
    registry = CollectorRegistry()
    office = AsyncOffice(dsn, registry=registry)
    office.report_keyless("task_assigned", "unresolved", "no_caller_run")
    labels = {"reason": "task_assigned", "cause": "unresolved"}
    assert registry.get_sample_value("office_run_dedup_keyless_total", labels) == 1


def test_both_clients_have_the_same_methods() -> None:
    from controlplane.client import Office

    def methods(cls: type) -> dict[str, list[inspect.Parameter]]:
        return {
            name: list(inspect.signature(member).parameters.values())
            for name, member in vars(cls).items()
            if inspect.isfunction(member) and not name.startswith("_")
        }

    sync, async_ = methods(Office), methods(AsyncOffice)
    assert set(async_) - {"open"} == set(sync)
    for name, parameters in sync.items():
        assert async_[name] == parameters, name


def test_raw_session_state_does_not_outlive_the_call(dsn: str) -> None:
    loop = asyncio.new_event_loop()
    office = AsyncOffice(dsn, min_size=1, max_size=1, registry=CollectorRegistry())
    try:
        check_raw_session_state_does_not_outlive_the_call(Blocking(office, loop))
    finally:
        loop.run_until_complete(office.close())
        loop.close()
