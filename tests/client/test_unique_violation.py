"""Driver errors become domain outcomes and errors, for psycopg and asyncpg
alike (``controlplane.errors.wrap_exceptions``), from real server errors.

* 23505 on ``idx_run_idempotency``/``idx_wakeup_idempotency`` → a
  ``DedupIndexHit`` signal, which the clients return as ``deduped``/``durable``;
* any other 23505 (a primary key) → ``UniqueViolationError``;
* the SQLSTATEs of docs/api.md §7 → their typed errors, server message kept;
* everything else → the driver's own error, unchanged.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import asyncpg
import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane.aio import AsyncOffice
from controlplane.client import Office
from controlplane.errors import (
    AgentNotAcceptingRuns,
    AgentNotFound,
    DedupIndexHit,
    InvalidArgument,
    OfficeError,
    RoutineNotFound,
    TaskNotFound,
    UniqueViolationError,
    WorkspaceMismatch,
    wrap_exceptions,
)
from controlplane.models import DedupKind, DedupQueue, QueueOutcome
from controlplane.observability import DEDUP_LOGGER, MSG_DURABLE

TRICKY_KEY = "task_comment:c1) already exists. Key (x)=(y:a1"

TYPED: list[tuple[str, type[OfficeError]]] = [
    ("22023", InvalidArgument),
    ("OFA01", AgentNotFound),
    ("OFA02", AgentNotAcceptingRuns),
    ("OFT01", TaskNotFound),
    ("OFR01", RoutineNotFound),
    ("OFW01", WorkspaceMismatch),
]


def raise_sql(sqlstate: str, message: str) -> str:
    return (
        f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '{sqlstate}', MESSAGE = '{message}'; END $$"
    )


# A second dedup index: the wakeup queue's index name on a stand-in table, so
# the classification is tested whatever the wakeup schema looks like.
WAKEUP_STANDIN = """
CREATE SCHEMA standin;
CREATE TABLE standin.wakeups (id text PRIMARY KEY, idempotency_key text);
CREATE UNIQUE INDEX idx_wakeup_idempotency ON standin.wakeups (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
INSERT INTO standin.wakeups VALUES ('w1', 'routine:r1:cron:1');
"""


@pytest.fixture
def keyed_run(db: psycopg.Connection[Any]) -> str:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    row = db.execute(
        "SELECT run_id FROM office.enqueue_run('a1', 'task_comment', idempotency_key => %s)",
        [TRICKY_KEY],
    ).fetchone()
    assert row is not None
    return str(row[0])


RAW_DUPLICATE = (
    "INSERT INTO office.runs (agent_profile_id, reason, idempotency_key) VALUES ('a1', 'r', %s)"
)


# --- psycopg ------------------------------------------------------------------------


def test_psycopg_hit_on_the_run_key_index_is_a_dedup_signal(
    db: psycopg.Connection[Any], keyed_run: str
) -> None:
    with pytest.raises(DedupIndexHit) as info, wrap_exceptions():
        db.execute(RAW_DUPLICATE, [TRICKY_KEY])
    hit = info.value
    assert not isinstance(hit, OfficeError)  # a duplicate is not an error
    assert (hit.constraint_name, hit.queue, hit.key) == ("idx_run_idempotency", "runs", TRICKY_KEY)
    assert isinstance(hit.__cause__, psycopg.errors.UniqueViolation)


def test_psycopg_hit_on_the_wakeup_key_index_is_a_dedup_signal(db: psycopg.Connection[Any]) -> None:
    db.execute(WAKEUP_STANDIN)
    with pytest.raises(DedupIndexHit) as info, wrap_exceptions():
        db.execute("INSERT INTO standin.wakeups VALUES ('w2', 'routine:r1:cron:1')")
    assert (info.value.queue, info.value.key) == ("wakeup", "routine:r1:cron:1")


def test_psycopg_primary_key_collision_is_a_typed_error(db: psycopg.Connection[Any]) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    with pytest.raises(UniqueViolationError) as info, wrap_exceptions():
        db.execute("INSERT INTO office.agent_profiles (id, workspace_id) VALUES ('a1', 'w2')")
    error = info.value
    assert (error.sqlstate, error.constraint_name) == ("23505", "agent_profiles_pkey")
    assert error.message == 'duplicate key value violates unique constraint "agent_profiles_pkey"'
    assert error.detail == "Key (id)=(a1) already exists."


@pytest.mark.parametrize(("sqlstate", "error"), TYPED, ids=[s for s, _ in TYPED])
def test_psycopg_sqlstates_are_typed_errors(
    db: psycopg.Connection[Any], sqlstate: str, error: type[OfficeError]
) -> None:
    with pytest.raises(error) as info, wrap_exceptions():
        db.execute(raise_sql(sqlstate, f"the {sqlstate} message"))
    assert (info.value.sqlstate, info.value.message) == (sqlstate, f"the {sqlstate} message")
    assert isinstance(info.value.__cause__, psycopg.Error)


def test_psycopg_other_errors_stay_unchanged(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.DivisionByZero), wrap_exceptions():
        db.execute("SELECT 1 / 0")
    with pytest.raises(KeyError), wrap_exceptions():
        raise KeyError("not a database error")


# --- asyncpg ------------------------------------------------------------------------


async def test_asyncpg_hit_on_the_run_key_index_is_a_dedup_signal(
    async_db: asyncpg.Connection, keyed_run: str
) -> None:
    with pytest.raises(DedupIndexHit) as info:
        async with wrap_exceptions():
            await async_db.execute(RAW_DUPLICATE.replace("%s", "$1"), TRICKY_KEY)
    assert (info.value.constraint_name, info.value.key) == ("idx_run_idempotency", TRICKY_KEY)
    assert isinstance(info.value.__cause__, asyncpg.UniqueViolationError)


async def test_asyncpg_primary_key_collision_is_a_typed_error(
    async_db: asyncpg.Connection,
) -> None:
    await async_db.execute("SELECT office.upsert_agent('a1', 'w1')")
    # The plain (non-async) form works inside coroutines too.
    with pytest.raises(UniqueViolationError) as info, wrap_exceptions():
        await async_db.execute(
            "INSERT INTO office.agent_profiles (id, workspace_id) VALUES ('a1', 'w2')"
        )
    assert info.value.constraint_name == "agent_profiles_pkey"
    assert (
        info.value.message == 'duplicate key value violates unique constraint "agent_profiles_pkey"'
    )


@pytest.mark.parametrize(("sqlstate", "error"), TYPED, ids=[s for s, _ in TYPED])
async def test_asyncpg_sqlstates_are_typed_errors(
    async_db: asyncpg.Connection, sqlstate: str, error: type[OfficeError]
) -> None:
    with pytest.raises(error) as info:
        async with wrap_exceptions():
            await async_db.execute(raise_sql(sqlstate, f"the {sqlstate} message"))
    assert (info.value.sqlstate, info.value.message) == (sqlstate, f"the {sqlstate} message")


async def test_asyncpg_other_errors_stay_unchanged(async_db: asyncpg.Connection) -> None:
    with pytest.raises(asyncpg.DivisionByZeroError):
        async with wrap_exceptions():
            await async_db.execute("SELECT 1 / 0")


# --- through the clients -----------------------------------------------------------------


def test_raw_inserts_racing_on_one_key_all_get_an_outcome(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    """16 threads insert one key through ``Office.execute`` at once: one row,
    one insert, fifteen durable dedups, nothing raised."""
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    registry = CollectorRegistry()
    barrier = threading.Barrier(16)
    results: list[Any] = [None] * 16

    with Office(dsn, min_size=4, max_size=16, registry=registry) as office:
        office.pool.wait()

        def insert(index: int) -> None:
            barrier.wait(30)
            try:
                results[index] = office.execute(
                    "INSERT INTO office.runs (agent_profile_id, reason, idempotency_key)"
                    " VALUES ('a1', 'task_assigned', 'k') RETURNING id"
                )
            except BaseException as exc:
                results[index] = exc

        threads = [threading.Thread(target=insert, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)

    assert not [r for r in results if isinstance(r, BaseException)]
    inserted = [r for r in results if not r.deduped]
    deduped = [r.dedup for r in results if r.deduped]
    assert len(inserted) == 1 and inserted[0].rowcount == 1
    holder = inserted[0].rows[0]["id"]
    assert len(deduped) == 15
    assert {(d.queue, d.holder_id, d.reason) for d in deduped} == {
        (DedupQueue.RUNS, holder, "task_assigned")
    }
    labels = {"reason": "task_assigned", "kind": "durable", "queue": "runs"}
    assert registry.get_sample_value("office_run_dedup_total", labels) == 15
    assert db.execute("SELECT count(*) FROM office.runs").fetchone() == (1,)


async def test_async_raw_insert_on_the_wakeup_index_is_an_outcome(
    dsn: str, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    db.execute(WAKEUP_STANDIN)
    registry = CollectorRegistry()
    caplog.set_level(logging.INFO, logger="controlplane")
    async with AsyncOffice(dsn, registry=registry) as office:
        result = await office.execute(
            "INSERT INTO standin.wakeups VALUES (%(id)s, %(key)s)",
            {"id": "w2", "key": "routine:r1:cron:1"},
        )
    assert result.dedup is not None
    assert (result.dedup.outcome, result.dedup.dedup_kind) == (
        QueueOutcome.DEDUPED,
        DedupKind.DURABLE,
    )
    assert (result.dedup.queue, result.dedup.key) == (DedupQueue.WAKEUP, "routine:r1:cron:1")
    # The holder is read from office.wakeup_requests, not from the stand-in.
    assert result.dedup.holder_id is None
    labels = {"reason": "unknown", "kind": "durable", "queue": "wakeup"}
    assert registry.get_sample_value("office_run_dedup_total", labels) == 1
    records = [r for r in caplog.records if r.name == DEDUP_LOGGER]
    assert [(r.levelno, r.getMessage()) for r in records] == [(logging.WARNING, MSG_DURABLE)]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
