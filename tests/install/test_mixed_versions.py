"""Mixed versions (docs/domain.md §2.23): a client against a database still at
schema 0.1.0, which has no ``office.runs.entry_triggered``, and against one
at 0.3.0, which has no ``office.runs.heartbeat_at`` (nor ``heartbeat_run``,
``get_run``, ``run_keys``).

The database is migrated only to the first yoyo migration. Each client probes
once, logs exactly one ERROR naming ``runs`` and ``entry_triggered`` (once per
process: ``forget_missing_columns`` resets that between tests), and every
enqueue still succeeds, with the exclusion inactive and no SQL error.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane import schema
from controlplane.aio import AsyncOffice
from controlplane.client import Office
from controlplane.daemon.config import STALE_AFTER
from controlplane.daemon.loop import DatabaseHealth
from controlplane.daemon.metrics import daemon_metrics_for
from controlplane.daemon.recovery import RecoveryLoop
from controlplane.migrate import migrate
from controlplane.models import EnqueueResult, QueueOutcome, RunKeyHow
from controlplane.observability import forget_missing_columns
from tests.scenarios.clients import Blocking

FIRST_RELEASE = schema.sql_dir() / "released" / "office--0.1.0.sql"

needs_first_release = pytest.mark.skipif(
    not FIRST_RELEASE.exists(),
    reason="schema 0.1.0 is not frozen yet (sql/released/office--0.1.0.sql)",
)


@pytest.fixture
def old_database(empty_database: str) -> Iterator[str]:
    result = migrate(empty_database, target="0001.office-0.1.0")
    assert (result.path, result.version) == ("migrations", "0.1.0")
    with psycopg.connect(empty_database) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = 'office'"
            " AND table_name = 'runs' AND column_name = 'entry_triggered'"
        ).fetchone()
        assert found is None, "0.1.0 must not have runs.entry_triggered"
        conn.execute("SELECT office.upsert_agent('a1', 'w1')")
    forget_missing_columns()
    yield empty_database
    forget_missing_columns()


def the_column_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


def check_outcomes(results: list[EnqueueResult]) -> None:
    entry, ordinary, keyed, keyed_again = results
    assert entry.outcome is QueueOutcome.QUEUED
    # The exclusion is inactive: an ordinary request may merge into the
    # "entry-triggered" run.
    assert ordinary.outcome in (QueueOutcome.QUEUED, QueueOutcome.COALESCED)
    assert keyed.outcome in (QueueOutcome.QUEUED, QueueOutcome.COALESCED)
    assert keyed_again.outcome in (QueueOutcome.DEDUPED, QueueOutcome.COALESCED)


def check_the_one_error(caplog: pytest.LogCaptureFixture) -> None:
    [record] = the_column_errors(caplog)
    message = record.getMessage()
    assert "runs" in message and "entry_triggered" in message
    assert (record.table, record.column) == ("runs", "entry_triggered")  # type: ignore[attr-defined]
    # And nothing in the dedup logger is an error.
    assert record.name != "controlplane.dedup"


@needs_first_release
def test_office_on_schema_0_1_0(old_database: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with Office(old_database, min_size=1, max_size=2, registry=CollectorRegistry()) as office:
        results = [
            office.enqueue_run("a1", "stage_pending", task_id="t1", entry_triggered=True),
            office.enqueue_run("a1", "stage_pending", task_id="t1"),
            office.enqueue_run("a1", "task_comment", idempotency_key="task_comment:c1:a1"),
            office.enqueue_run("a1", "task_comment", idempotency_key="task_comment:c1:a1"),
        ]
        bulk = office.enqueue_runs(
            [
                {"agent_profile_id": "a1", "reason": "heartbeat", "entry_triggered": True},
                {"agent_profile_id": "a1", "reason": "heartbeat", "entry_triggered": False},
            ]
        )
        claimed = office.claim_run("w1")
    check_outcomes(results)
    assert [item.ordinality for item in bulk] == [1, 2]
    assert claimed is not None and claimed.entry_triggered is False
    check_the_one_error(caplog)

    # A second client in the same process probes again but does not log again.
    with Office(old_database, min_size=1, max_size=2, registry=CollectorRegistry()) as office:
        office.enqueue_run("a1", "task_assigned", entry_triggered=True)
    assert len(the_column_errors(caplog)) == 1


@needs_first_release
async def test_async_office_on_schema_0_1_0(
    old_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with AsyncOffice(
        old_database, min_size=1, max_size=2, registry=CollectorRegistry()
    ) as office:
        results = [
            await office.enqueue_run("a1", "stage_pending", task_id="t1", entry_triggered=True),
            await office.enqueue_run("a1", "stage_pending", task_id="t1"),
            await office.enqueue_run("a1", "task_comment", idempotency_key="task_comment:c1:a1"),
            await office.enqueue_run("a1", "task_comment", idempotency_key="task_comment:c1:a1"),
        ]
        bulk = await office.enqueue_runs(
            [{"agent_profile_id": "a1", "reason": "heartbeat", "entry_triggered": True}]
        )
        claimed = await office.claim_run("w1")
    check_outcomes(results)
    assert [item.outcome for item in bulk] == [QueueOutcome.QUEUED]
    assert claimed is not None and claimed.entry_triggered is False
    check_the_one_error(caplog)


def test_the_current_schema_logs_no_error(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    forget_missing_columns()
    caplog.set_level(logging.INFO)
    with Office(dsn, registry=CollectorRegistry()) as office:
        office.upsert_agent("a1", "w1")
        assert office.enqueue_run("a1", "r", entry_triggered=True).created
    assert the_column_errors(caplog) == []


# --- leases and run lookups against schema 0.3.0 (no heartbeat_at) -------------------


@pytest.fixture
def database_0_3_0(empty_database: str) -> Iterator[str]:
    result = migrate(empty_database, target="0003.office-0.3.0")
    assert (result.path, result.version) == ("migrations", "0.3.0")
    with psycopg.connect(empty_database) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = 'office'"
            " AND table_name = 'runs' AND column_name = 'heartbeat_at'"
        ).fetchone()
        assert found is None, "0.3.0 must not have runs.heartbeat_at"
        conn.execute("SELECT office.upsert_agent('a1', 'w1')")
        conn.execute(
            "SELECT office.enqueue_run('a1', 'task_comment',"
            " idempotency_key => 'task_comment:c1:a1')"
        )
    forget_missing_columns()
    yield empty_database
    forget_missing_columns()


def check_leases_fall_back(office: Any, caplog: pytest.LogCaptureFixture) -> None:
    """heartbeat_run, get_run and run_keys on 0.3.0: no SQL error, one ERROR
    naming runs.heartbeat_at; a heartbeat tells whether the claim holds."""
    run = office.claim_run("w1")
    assert run is not None and run.heartbeat_at is None
    assert office.heartbeat_run(run.id, run.attempt) is True
    assert office.heartbeat_run(run.id, run.attempt + 1) is False
    assert office.get_run(run.id) == run
    assert office.get_run("no-such-run") is None
    served = office.run_keys(run.id)
    assert [(k.idempotency_key, k.how, k.recorded_at) for k in served] == [
        ("task_comment:c1:a1", RunKeyHow.OWN, run.requested_at)
    ]
    assert office.finish_run(run.id, run.attempt) is True
    assert office.heartbeat_run(run.id, run.attempt) is False
    [record] = the_column_errors(caplog)
    assert (record.table, record.column) == ("runs", "heartbeat_at")  # type: ignore[attr-defined]
    assert "heartbeat_at" in record.getMessage() and "heartbeat_run" in record.getMessage()


@needs_first_release
def test_office_leases_on_schema_0_3_0(
    database_0_3_0: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with Office(database_0_3_0, min_size=1, max_size=2, registry=CollectorRegistry()) as office:
        check_leases_fall_back(office, caplog)


@needs_first_release
def test_async_office_leases_on_schema_0_3_0(
    database_0_3_0: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    loop = asyncio.new_event_loop()
    office = AsyncOffice(database_0_3_0, min_size=1, max_size=2, registry=CollectorRegistry())
    try:
        check_leases_fall_back(Blocking(office, loop), caplog)
    finally:
        loop.run_until_complete(office.close())
        loop.close()


def recovery_loop(office: Office, stale_after: float | None) -> RecoveryLoop:
    metrics = daemon_metrics_for(CollectorRegistry())
    return RecoveryLoop(
        office,
        stale_after=stale_after,
        interval=1.0,
        metrics=metrics,
        health=DatabaseHealth(metrics),
        stop=threading.Event(),
    )


@needs_first_release
def test_the_recovery_default_on_schema_0_3_0_is_0_3_0s(
    database_0_3_0: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing renews a claim before 0.4.0: the daemon's short default would
    hand every run longer than two minutes to a second worker, so a daemon
    that was given no threshold keeps 0.3.0's 15 minutes there."""
    caplog.set_level(logging.INFO)
    with Office(database_0_3_0, min_size=1, max_size=2, registry=CollectorRegistry()) as office:
        claimed = office.claim_run("w1")
        assert claimed is not None
        with psycopg.connect(database_0_3_0, autocommit=True) as conn:
            conn.execute("UPDATE office.runs SET claimed_at = now() - interval '10 minutes'")
        default = recovery_loop(office, None)
        assert default.iterate() is False
        assert (default.threshold(), default.recovered) == (timedelta(minutes=15), 0)
        assert office.has_leases() is False
        # A threshold that was set is kept.
        configured = recovery_loop(office, 5 * 60)
        configured.iterate()
        assert (configured.threshold(), configured.recovered) == (timedelta(minutes=5), 1)
    [record] = the_column_errors(caplog)
    assert (record.table, record.column) == ("runs", "heartbeat_at")  # type: ignore[attr-defined]


def test_the_recovery_default_with_leases_is_short(dsn: str) -> None:
    with Office(dsn, registry=CollectorRegistry()) as office:
        assert office.has_leases() is True
        loop = recovery_loop(office, None)
        loop.iterate()
        assert loop.threshold() == timedelta(seconds=STALE_AFTER) == timedelta(minutes=2)
