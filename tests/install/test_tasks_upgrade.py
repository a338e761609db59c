"""Schema 0.2.0 -> 0.3.0: tasks and the event outbox arrive on a database
that already queues runs, through ALTER EXTENSION and through yoyo; the
rows written before stay, and the new objects work at once. (The catalog
equality of fresh and upgraded installs is tests/install/test_install_paths.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from controlplane.migrate import migrate

Conn = psycopg.Connection[Any]


def version(conn: Conn) -> str:
    row = conn.execute("SELECT office.schema_version()").fetchone()
    assert row is not None
    return str(row[0])


def exercise(conn: Conn) -> None:
    """The 0.3.0 objects at work: a creation run, a reassignment, a wake."""
    row = conn.execute(
        "SELECT assignment_generation, outcome FROM office.create_task('w1', 'T',"
        " workflow_step_id => 's', assignee_agent_profile_id => 'a1')"
    ).fetchone()
    assert row == (1, "queued")
    conn.execute("SELECT office.create_task('w1', 'B')")
    conn.execute("SELECT office.add_blocker('T', 'B')")
    conn.execute("SELECT office.move_task('B', 'COMPLETED')")
    keys = conn.execute(
        "SELECT idempotency_key FROM office.runs WHERE task_id = 'T' ORDER BY requested_at"
    ).fetchall()
    assert [k[0].split(":")[0] for k in keys] == ["task_assigned", "blockers_resolved"]
    topics = conn.execute("SELECT topic FROM office.claim_events('c') ORDER BY id").fetchall()
    assert topics == [("task.assigned",), ("task.moved",)]


@pytest.fixture
def at_0_2_0(empty_database: str) -> Iterator[Conn]:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION office VERSION '0.2.0'")
        conn.execute("SELECT office.upsert_agent('a1', 'w1')")
        conn.execute("SELECT office.enqueue_run('a1', 'heartbeat', idempotency_key => 'hb:1')")
        yield conn


def test_0_2_0_has_no_tasks(at_0_2_0: Conn) -> None:
    assert version(at_0_2_0) == "0.2.0"
    assert at_0_2_0.execute("SELECT to_regclass('office.tasks')").fetchone() == (None,)
    assert at_0_2_0.execute("SELECT to_regclass('office.events')").fetchone() == (None,)


def test_alter_extension_update_brings_tasks_and_keeps_the_runs(at_0_2_0: Conn) -> None:
    conn = at_0_2_0
    conn.execute("ALTER EXTENSION office UPDATE TO '0.3.0'")
    assert version(conn) == "0.3.0"
    assert conn.execute("SELECT idempotency_key FROM office.runs").fetchall() == [("hb:1",)]
    # The new tables are configuration tables of the extension (pg_dump keeps their rows).
    dumped = conn.execute(
        "SELECT c.relname FROM pg_extension e, unnest(e.extconfig) AS x(oid)"
        " JOIN pg_class c ON c.oid = x.oid WHERE e.extname = 'office' ORDER BY 1"
    ).fetchall()
    assert {"tasks", "task_blockers", "events", "events_id_seq"} <= {d[0] for d in dumped}
    exercise(conn)


def test_the_yoyo_chain_goes_through_0_2_0_to_0_3_0(empty_database: str) -> None:
    first = migrate(empty_database, target="0002.office-0.2.0")
    assert first.version == "0.2.0"
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute("SELECT office.upsert_agent('a1', 'w1')")
    second = migrate(empty_database, target="0003.office-0.3.0")
    assert (second.applied, second.version) == (["0003.office-0.3.0"], "0.3.0")
    with psycopg.connect(empty_database, autocommit=True) as conn:
        exercise(conn)
