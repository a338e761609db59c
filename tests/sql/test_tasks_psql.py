"""The triggers hold for a client that knows no office function: every
effect of docs/api.md §2 and §6 driven by plain INSERT and UPDATE statements,
run by psql itself. The generation bumps, the outbox, the blockers and
children wakes happen in SQL; the task_assigned runs then come from the
outbox subscriber (the second producer)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from psycopg import sql

from controlplane import keys
from controlplane.client import Office
from controlplane.event_subscriber import EventSubscriber
from tests.scenarios.tasks import Conn, events, run_keys, runs, task

PSQL = shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"

SCRIPT = """
\\set ON_ERROR_STOP 1
INSERT INTO office.agent_profiles (id, workspace_id)
VALUES ('agent-a', 'w1'), ('agent-b', 'w1'), ('agent-p', 'w1');

-- Generations: 1 at insert (assignee and step), then one per assignee write.
INSERT INTO office.tasks (id, workspace_id, workflow_step_id, assignee_agent_profile_id)
VALUES ('task-1', 'w1', 'step-1', 'agent-a');
UPDATE office.tasks SET assignee_agent_profile_id = 'agent-b' WHERE id = 'task-1';
UPDATE office.tasks SET assignee_agent_profile_id = 'agent-b' WHERE id = 'task-1';
UPDATE office.tasks SET assignee_agent_profile_id = NULL WHERE id = 'task-1';
UPDATE office.tasks SET assignee_agent_profile_id = 'agent-a' WHERE id = 'task-1';
UPDATE office.tasks SET title = 'renamed' WHERE id = 'task-1';

-- A parent with two children that also block task-1.
INSERT INTO office.tasks (id, workspace_id, assignee_agent_profile_id)
VALUES ('parent-1', 'w1', 'agent-p');
INSERT INTO office.tasks (id, workspace_id, parent_id)
VALUES ('child-a', 'w1', 'parent-1'), ('child-b', 'w1', 'parent-1');
INSERT INTO office.task_blockers (task_id, blocker_task_id)
VALUES ('task-1', 'child-a'), ('task-1', 'child-b');

-- Both blockers terminal (FAILED counts) -> task-1 is woken; the parent is
-- not complete while a child FAILED.
BEGIN;
UPDATE office.tasks SET state = 'COMPLETED' WHERE id = 'child-a';
UPDATE office.tasks SET state = 'FAILED' WHERE id = 'child-b';
COMMIT;
-- FAILED -> CANCELLED completes the parent's wave; the blockers' key repeats.
UPDATE office.tasks SET state = 'CANCELLED' WHERE id = 'child-b';
"""

CYCLE = "INSERT INTO office.task_blockers (task_id, blocker_task_id) VALUES ('child-a', 'task-1');"
HAND_WRITTEN_GENERATION = "UPDATE office.tasks SET assignment_generation = 1 WHERE id = 'task-1';"


def psql(dsn: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PSQL, "--no-psqlrc", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def office(db: Conn, dsn: str) -> Iterator[Office]:
    # No coalescing here, so every occurrence shows up as its own run.
    db.execute(
        sql.SQL("ALTER DATABASE {} SET office.coalesce_window = '0'").format(
            sql.Identifier(db.info.dbname)
        )
    )
    with Office(dsn, registry=CollectorRegistry()) as client:
        yield client


def test_plain_statements_from_psql_get_every_effect(db: Conn, dsn: str, office: Office) -> None:
    done = psql(dsn, SCRIPT)
    assert done.returncode == 0, done.stderr

    # Generations and updated_at.
    row = task(db, "task-1")
    assert (row["assignee_agent_profile_id"], row["assignment_generation"]) == ("agent-a", 5)
    assert row["updated_at"] > row["created_at"]
    assert task(db, "parent-1")["assignment_generation"] == 0

    # The outbox.
    assigned = [
        (e["task_id"], e["payload"]["agent_profile_id"], e["payload"]["assignment_generation"])
        for e in events(db, "task.assigned")
    ]
    assert assigned == [
        ("task-1", "agent-a", 1),
        ("task-1", "agent-b", 2),
        ("task-1", "agent-b", 3),
        ("task-1", None, 4),
        ("task-1", "agent-a", 5),
        ("parent-1", "agent-p", 0),
    ]
    assert all(e["payload"]["actor"] is None for e in events(db, "task.assigned"))
    moved = [
        (e["task_id"], e["payload"]["from_state"], e["payload"]["to_state"])
        for e in events(db, "task.moved")
    ]
    assert moved == [
        ("child-a", "TODO", "COMPLETED"),
        ("child-b", "TODO", "FAILED"),
        ("child-b", "FAILED", "CANCELLED"),
    ]

    # The terminal effects: one blockers-resolved wake, one parent wake.
    [resolved] = runs(db, "task_blockers_resolved")
    assert resolved["idempotency_key"] == keys.blockers_resolved_key(
        "task-1", ["child-a", "child-b"]
    )
    assert (resolved["agent_profile_id"], resolved["task_id"]) == ("agent-a", "task-1")
    [wave] = runs(db, "task_children_completed")
    child_set = "child-a:COMPLETED,child-b:CANCELLED"
    generation = db.execute("SELECT office.child_generation('parent-1')").fetchone()
    assert generation is not None
    assert wave["idempotency_key"] == keys.wake_operation_id("parent-1", child_set, generation[0])
    assert (wave["agent_profile_id"], wave["task_id"]) == ("agent-p", "parent-1")

    # Refusals hold from psql too.
    for statement in (CYCLE, HAND_WRITTEN_GENERATION):
        refused = psql(dsn, statement)
        assert refused.returncode != 0 and "ERROR" in refused.stderr, statement
    assert db.execute("SELECT count(*) FROM office.task_blockers").fetchone() == (2,)

    # The second producer turns the assignment events into keyed runs.
    report = EventSubscriber(office).run_once()
    assert report.acked == report.claimed == 9
    assert run_keys(db, "task_assigned") == [
        "task_assigned:task-1:agent-a:1",
        "task_assigned:task-1:agent-b:2",
        "task_assigned:task-1:agent-b:3",
        "task_assigned:task-1:agent-a:5",
        "task_assigned:parent-1:agent-p:0",
    ]
    # Delivered again: nothing new.
    db.execute("UPDATE office.events SET processed_at = NULL, visible_at = NULL")
    again = EventSubscriber(office).run_once()
    assert again.runs_created == 0
    assert len(runs(db, "task_assigned")) == 5
