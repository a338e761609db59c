"""Mixed versions (DOMAIN.md §2.23): a client against a database still at
schema 0.1.0, which has no ``office.runs.entry_triggered``.

The database is migrated only to the first yoyo migration. Each client probes
once, logs exactly one ERROR naming ``runs`` and ``entry_triggered`` (once per
process: ``forget_missing_columns`` resets that between tests), and every
enqueue still succeeds, with the exclusion inactive and no SQL error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane import schema
from controlplane.aio import AsyncOffice
from controlplane.client import Office
from controlplane.migrate import migrate
from controlplane.models import EnqueueResult, QueueOutcome
from controlplane.observability import forget_missing_columns

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
