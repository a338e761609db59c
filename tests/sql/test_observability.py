"""Observability in SQL (docs/api.md §6): office.dedup_stats, office.keyless_stats,
office.queue_stats, who may read them, and counting that never makes two
enqueues wait on one counter row."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]


def enqueue(conn: Conn, agent: str, reason: str, **kwargs: Any) -> tuple[str, str | None, str]:
    row = conn.execute(
        "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run(agent_profile_id => %(a)s,"
        " reason => %(r)s, idempotency_key => %(key)s, task_id => %(task)s,"
        " keyless_cause => %(cause)s)",
        {
            "a": agent,
            "r": reason,
            "key": kwargs.get("key"),
            "task": kwargs.get("task"),
            "cause": kwargs.get("cause"),
        },
    ).fetchone()
    assert row is not None
    return (row[0], row[1], row[2])


@pytest.fixture
def agents(db: Conn) -> list[str]:
    for name in ("agent-a", "agent-b"):
        db.execute("SELECT office.upsert_agent(%s, 'ws-1')", [name])
    return ["agent-a", "agent-b"]


def test_dedup_stats_count_every_suppression_by_queue_reason_and_kind(
    db: Conn, agents: list[str]
) -> None:
    a, b = agents
    _, _, _first = enqueue(db, a, "task_assigned", key="K1")
    enqueue(db, a, "task_assigned", key="K1")  # windowed
    enqueue(db, a, "task_assigned", key="K1")  # windowed
    enqueue(db, a, "task_assigned", key="K2")  # coalesced into K1's run
    db.execute("UPDATE office.runs SET requested_at = now() - interval '2 days'")
    enqueue(db, a, "task_assigned", key="K1")  # durable
    enqueue(db, b, "task_comment", key="task_comment:c1:agent-b")
    enqueue(db, b, "task_comment", key="task_comment:c1:agent-b")  # windowed
    # Another capability (wakeup requests) counts through the same helper.
    db.execute("SELECT office._count_dedup('wakeup', 'routine_dispatch_cron', 'durable')")
    rows = db.execute(
        "SELECT queue, reason, kind, total FROM office.dedup_stats ORDER BY 1, 2, 3"
    ).fetchall()
    assert rows == [
        ("runs", "task_assigned", "coalesced", 1),
        ("runs", "task_assigned", "durable", 1),
        ("runs", "task_assigned", "windowed", 2),
        ("runs", "task_comment", "windowed", 1),
        ("wakeup", "routine_dispatch_cron", "durable", 1),
    ]


def test_queued_outcomes_are_not_counted_as_dedups(db: Conn, agents: list[str]) -> None:
    enqueue(db, agents[0], "r1", key="K1")
    enqueue(db, agents[0], "r2")
    assert db.execute("SELECT count(*) FROM office.dedup_stats").fetchone() == (0,)


def test_the_counters_refuse_an_unknown_queue_or_kind(db: Conn) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("SELECT office._count_dedup('elsewhere', 'r', 'durable')")
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("SELECT office._count_dedup('runs', 'r', 'skipped')")
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("SELECT office._count_keyless('r', 'whatever')")


def test_keyless_stats(db: Conn, agents: list[str]) -> None:
    a, b = agents
    enqueue(db, a, "task_assigned", cause="unresolved")
    enqueue(db, a, "task_assigned", cause="unresolved")
    enqueue(db, b, "task_assigned", cause="unresolved")
    enqueue(db, a, "task_unblocked", cause="by_design")
    enqueue(db, a, "task_reopened")  # keyless without a cause: not counted
    rows = db.execute("SELECT reason, cause, total FROM office.keyless_stats ORDER BY 1, 2")
    assert rows.fetchall() == [
        ("task_assigned", "unresolved", 3),
        ("task_unblocked", "by_design", 1),
    ]


def test_queue_stats_lists_every_status(db: Conn, agents: list[str]) -> None:
    rows = db.execute("SELECT status, agents, runs, oldest_requested_at FROM office.queue_stats")
    assert rows.fetchall() == [
        ("queued", 0, 0, None),
        ("claimed", 0, 0, None),
        ("finished", 0, 0, None),
        ("failed", 0, 0, None),
        ("cancelled", 0, 0, None),
    ]


def test_queue_stats_counts_runs_and_agents_per_status(db: Conn, agents: list[str]) -> None:
    a, b = agents
    for reason in ("r1", "r2", "r3"):
        enqueue(db, a, reason)
    enqueue(db, b, "r1")
    enqueue(db, b, "r2")
    db.execute(
        "UPDATE office.runs SET requested_at = '2026-01-01 00:00:00+00'"
        " WHERE agent_profile_id = 'agent-b' AND reason = 'r2'"
    )
    claimed = db.execute("SELECT id FROM office.claim_run()").fetchone()  # agent-b r2
    assert claimed is not None
    db.execute("SELECT office.finish_run(%s, 1)", [claimed[0]])
    claimed = db.execute("SELECT id FROM office.claim_run()").fetchone()
    assert claimed is not None
    stats = {
        status: (agents_n, runs_n, oldest)
        for status, agents_n, runs_n, oldest in db.execute(
            "SELECT status, agents, runs, oldest_requested_at FROM office.queue_stats"
        ).fetchall()
    }
    oldest_queued = db.execute(
        "SELECT min(requested_at) FROM office.runs WHERE status = 'queued'"
    ).fetchone()
    assert oldest_queued is not None
    assert stats["queued"] == (2, 3, oldest_queued[0])
    assert stats["claimed"][:2] == (1, 1)
    assert stats["finished"] == (1, 1, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    assert stats["failed"] == (0, 0, None)
    assert stats["cancelled"] == (0, 0, None)


def test_a_reader_reads_the_views_and_nothing_else(db: Conn, agents: list[str]) -> None:
    enqueue(db, agents[0], "r1", key="K")
    enqueue(db, agents[0], "r1", key="K")
    db.execute("SET ROLE office_reader")
    try:
        assert db.execute("SELECT total FROM office.dedup_stats").fetchall() == [(1,)]
        assert db.execute("SELECT count(*) FROM office.keyless_stats").fetchone() == (0,)
        assert db.execute(
            "SELECT runs FROM office.queue_stats WHERE status = 'queued'"
        ).fetchone() == (1,)
        for query in (
            "SELECT * FROM office.runs",
            "SELECT * FROM office.dedup_counters",
            "SELECT * FROM office.keyless_counters",
            "SELECT office._count_dedup('runs', 'r1', 'windowed')",
            "SELECT office.enqueue_run('agent-a', 'r1')",
            "SELECT * FROM office.claim_run()",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute(query)
    finally:
        db.execute("RESET ROLE")


def test_an_admin_reads_the_views(db: Conn) -> None:
    db.execute("SET ROLE office_admin")
    try:
        for view in ("dedup_stats", "keyless_stats", "queue_stats"):
            db.execute(f"SELECT * FROM office.{view}")
    finally:
        db.execute("RESET ROLE")


def test_the_counters_are_unlogged(db: Conn) -> None:
    rows = db.execute(
        "SELECT relname, relpersistence FROM pg_class"
        " WHERE relnamespace = 'office'::regnamespace"
        "   AND relname IN ('dedup_counters', 'keyless_counters') ORDER BY 1"
    ).fetchall()
    assert rows == [("dedup_counters", "u"), ("keyless_counters", "u")]


def _two_backends_in_different_slots(dsn: str) -> tuple[Conn, Conn]:
    first = psycopg.connect(dsn)
    spare: list[Conn] = []
    try:
        for _ in range(10):
            second = psycopg.connect(dsn, autocommit=True)
            if second.info.backend_pid % 64 != first.info.backend_pid % 64:
                return first, second
            spare.append(second)
        raise AssertionError("no second backend in another counter slot")
    finally:
        for conn in spare:
            conn.close()


def test_counting_does_not_make_concurrent_enqueues_wait(
    db: Conn, dsn: str, agents: list[str]
) -> None:
    # Two keys (since 0.4.0 a request waits for a concurrent one with the
    # same key: the key lock), one label.
    enqueue(db, agents[0], "task_assigned", key="K1", task="T1")
    enqueue(db, agents[0], "task_assigned", key="K2", task="T2")
    holder, other = _two_backends_in_different_slots(dsn)
    with holder, other:
        # The holder counts a windowed dedup and keeps its transaction open, so
        # it holds the lock on its counter row.
        assert enqueue(holder, agents[0], "task_assigned", key="K1")[:2] == ("deduped", "windowed")
        # The other backend counts the very same label: it must not wait.
        other.execute("SET lock_timeout = '20s'")
        assert enqueue(other, agents[0], "task_assigned", key="K2")[:2] == ("deduped", "windowed")
        holder.commit()
    assert db.execute("SELECT total FROM office.dedup_stats").fetchall() == [(2,)]
    assert db.execute("SELECT count(*) FROM office.dedup_counters").fetchone() == (2,)
