"""Origin and cause through the internal producers (docs/api.md §9, "Origin
and cause"): assign_task's actor, office.actor for create_task and the
triggers, the task.assigned event's payload; and a ping-pong of two agents
that assign work to each other, cut by the loop guard at
office.max_chain_depth."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]


@pytest.fixture
def agents(db: Conn) -> Conn:
    for agent, workspace in (("a1", "w1"), ("a2", "w1"), ("x1", "w2")):
        db.execute("SELECT office.upsert_agent(%s, %s)", [agent, workspace])
    return db


def lineage(db: Conn, run_id: str) -> tuple[str, str | None, int]:
    row = db.execute(
        "SELECT origin, cause_run_id, chain_depth FROM office.runs WHERE id = %s", [run_id]
    ).fetchone()
    assert row is not None
    return (row[0], row[1], row[2])


def claimed(db: Conn, agent: str, reason: str = "work") -> str:
    """A claimed run of ``agent``: what it holds while it acts."""
    db.execute("SELECT office.enqueue_run(%s, %s)", [agent, reason])
    row = db.execute("SELECT id FROM office.claim_run('w', %s)", [agent]).fetchone()
    assert row is not None
    return str(row[0])


def task(db: Conn, task_id: str, workspace: str = "w1") -> None:
    db.execute(
        "SELECT office.create_task(%s, id => %s, workflow_step_id => 'step')", [workspace, task_id]
    )


def assign(db: Conn, task_id: str, agent: str, actor: str | None, kind: str) -> tuple[str, str]:
    row = db.execute(
        "SELECT outcome, run_id FROM office.assign_task(%s, %s, %s, %s)",
        [task_id, agent, actor, kind],
    ).fetchone()
    assert row is not None
    return (row[0], row[1])


def test_assign_task_takes_its_actor(agents: Conn) -> None:
    db = agents
    cause = claimed(db, "a1")
    # One task per assignment: two wakes of one agent for one task would
    # coalesce into one run.
    cases = [
        ("a2", "a1", "agent", ("agent", cause, 1)),
        ("a1", "alice", "user", ("human", None, 0)),
        ("a2", None, "user", ("system", None, 0)),  # a user without an id
        ("a1", "cron", "system", ("system", None, 0)),
        # An agent without a claimed run starts a chain of its own (depth 1).
        ("a1", "a2", "agent", ("agent", None, 1)),
    ]
    for n, (agent, actor, kind, expected) in enumerate(cases):
        task(db, f"t{n}")
        outcome, run = assign(db, f"t{n}", agent, actor, kind)
        assert outcome == "queued" and lineage(db, run) == expected, (agent, actor, kind)
    # The actor setting is restored after the call.
    setting = db.execute("SELECT current_setting('office.actor', true)").fetchone()
    assert setting in ((None,), ("",))


def test_an_agent_of_another_workspace_causes_nothing_here(agents: Conn) -> None:
    db = agents
    claimed(db, "x1")
    task(db, "t1")
    _, run = assign(db, "t1", "a1", "x1", "agent")
    assert lineage(db, run) == ("agent", None, 1)


def test_create_task_and_the_triggers_read_office_actor(agents: Conn) -> None:
    db = agents
    cause = claimed(db, "a1")
    db.execute('SET office.actor = \'{"id": "a1", "type": "agent"}\'')
    try:
        row = db.execute(
            "SELECT run_id FROM office.create_task('w1', id => 't1', workflow_step_id => 's',"
            " assignee_agent_profile_id => 'a2')"
        ).fetchone()
        assert row is not None and lineage(db, row[0]) == ("agent", cause, 1)
        # A plain write of the assignee: the trigger's event carries the lineage.
        db.execute("UPDATE office.tasks SET assignee_agent_profile_id = 'a1' WHERE id = 't1'")
    finally:
        db.execute("RESET office.actor")
    [payload] = db.execute(
        "SELECT payload FROM office.events WHERE topic = 'task.assigned'"
        " AND payload ->> 'agent_profile_id' = 'a1'"
    ).fetchone() or pytest.fail("no event")
    payload = payload if isinstance(payload, dict) else json.loads(payload)
    assert (payload["origin"], payload["cause_run_id"]) == ("agent", cause)
    first = db.execute(
        "SELECT payload ->> 'origin' FROM office.events WHERE topic = 'task.assigned'"
        " AND payload ->> 'agent_profile_id' = 'a2'"
    ).fetchone()
    assert first == ("agent",)


def test_a_ping_pong_of_two_agents_is_guarded_at_the_limit(agents: Conn) -> None:
    """a1 and a2 hand one task back and forth, each during a run the other's
    handoff caused: the chain deepens by one per handoff, and the handoff
    past office.max_chain_depth is guarded (no run, a decision, counted)."""
    db = agents
    db.execute("SET office.max_chain_depth = 4")
    task(db, "t1")
    holder, other = "a1", "a2"
    current = claimed(db, holder)
    depths = []
    for _ in range(6):
        outcome, run = assign(db, "t1", other, holder, "agent")
        if outcome == "guarded":
            break
        assert outcome == "queued"
        depths.append(lineage(db, run)[2])
        # The holder's run ends; the woken agent claims the handoff and acts.
        finish = "SELECT office.finish_run(id, attempt) FROM office.runs WHERE id = %s"
        db.execute(finish, [current])
        row = db.execute("SELECT id FROM office.claim_run('w', %s)", [other]).fetchone()
        assert row is not None and row[0] == run
        current, holder, other = run, other, holder
    assert depths == [1, 2, 3, 4]
    assert outcome == "guarded" and run is None
    decisions = db.execute(
        "SELECT agent_profile_id, origin, cause_run_id, chain_depth FROM office.wake_decisions"
        " WHERE decision = 'guarded'"
    ).fetchall()
    assert decisions == [(other, "agent", current, 5)]
    guarded = db.execute(
        "SELECT total FROM office.dedup_stats WHERE kind = 'guarded' AND reason = 'task_assigned'"
    ).fetchone()
    assert guarded == (1,)
    # A human's handoff starts a new chain.
    outcome, run = assign(db, "t1", other, "alice", "user")
    assert outcome == "queued" and lineage(db, run) == ("human", None, 0)
