"""The record of wake-governance decisions (docs/api.md §9): office.wake_decisions,
its internal writer, prune_wake_decisions, who may read it; and the lineage
columns of office.runs."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.harness import scalar

Conn = psycopg.Connection[Any]


def write(conn: Conn, *args: Any) -> None:
    conn.execute("SELECT office._write_wake_decision(%s, %s, %s, %s, %s, %s, %s)", args)


def decisions(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT agent_profile_id, run_id, decision, origin, cause_run_id, chain_depth, detail"
        " FROM office.wake_decisions ORDER BY id"
    ).fetchall()


def test_the_writer_records_a_decision_with_neutral_values_for_nulls(db: Conn) -> None:
    with db.transaction():
        write(db, "a1", None, "guarded", "agent", "r9", 21, Jsonb({"limit": 20}))
        write(db, "a1", "r1", "budget_warning", None, None, None, None)
        assert scalar(db, "SELECT count(*) FROM office.wake_decisions WHERE at = now()") == 2
    assert decisions(db) == [
        ("a1", None, "guarded", "agent", "r9", 21, {"limit": 20}),
        ("a1", "r1", "budget_warning", "system", None, 0, {}),
    ]
    ids = [r[0] for r in db.execute("SELECT id FROM office.wake_decisions ORDER BY id")]
    assert ids == sorted(set(ids))


@pytest.mark.parametrize(
    ("decision", "origin"),
    [("retried", "agent"), ("guarded", "robot"), ("", "agent")],
)
def test_the_table_refuses_an_unknown_decision_or_origin(
    db: Conn, decision: str, origin: str
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        write(db, "a1", None, decision, origin, None, 1, None)
    assert decisions(db) == []


def test_prune_deletes_decisions_older_than_the_interval_only(db: Conn) -> None:
    for decision in ("guarded", "pulled_forward", "budget_exhausted"):
        write(db, "a1", None, decision, "agent", None, 1, None)
    db.execute(
        "UPDATE office.wake_decisions SET at = now() - interval '2 days'"
        " WHERE decision <> 'budget_exhausted'"
    )
    assert scalar(db, "SELECT office.prune_wake_decisions('1 day')") == 2
    assert [r[2] for r in decisions(db)] == ["budget_exhausted"]
    assert scalar(db, "SELECT office.prune_wake_decisions('1 day')") == 0


@pytest.mark.parametrize("older_than", [None, "-1 day", "1000000 years"])
def test_prune_refuses_an_unbounded_interval(db: Conn, older_than: str | None) -> None:
    write(db, "a1", None, "guarded", "agent", None, 1, None)
    db.execute("UPDATE office.wake_decisions SET at = now() - interval '2 days'")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        db.execute("SELECT office.prune_wake_decisions(%s::interval)", [older_than])
    assert len(decisions(db)) == 1


def test_readers_read_the_decisions_and_only_admins_prune_or_write(db: Conn) -> None:
    write(db, "a1", None, "guarded", "agent", None, 1, None)
    for role in ("office_reader", "office_admin"):
        db.execute(f"SET ROLE {role}")
        assert len(decisions(db)) == 1
        db.execute("RESET ROLE")
    for role in ("office_producer", "office_worker"):
        db.execute(f"SET ROLE {role}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            decisions(db)
        db.execute("RESET ROLE")
    for role in ("office_producer", "office_worker", "office_reader"):
        db.execute(f"SET ROLE {role}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("SELECT office.prune_wake_decisions('1 day')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            write(db, "a1", None, "guarded", "agent", None, 1, None)
        db.execute("RESET ROLE")
    db.execute("SET ROLE office_admin")
    assert scalar(db, "SELECT office.prune_wake_decisions('0 seconds')") == 1
    db.execute("RESET ROLE")


def test_a_new_run_has_the_neutral_lineage(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    run_id = scalar(db, "SELECT run_id FROM office.enqueue_run('a1', 'manual')")
    row = db.execute(
        "SELECT origin, cause_run_id, chain_depth, priority, cost FROM office.runs WHERE id = %s",
        [run_id],
    ).fetchone()
    assert row == ("system", None, 0, 0, 0)


@pytest.mark.parametrize(
    "assignment",
    ["origin = 'robot'", "chain_depth = -1", "priority = 101", "priority = -101"],
)
def test_the_table_refuses_a_lineage_out_of_its_bounds(db: Conn, assignment: str) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    db.execute("SELECT office.enqueue_run('a1', 'manual')")
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(f"UPDATE office.runs SET {assignment}")
