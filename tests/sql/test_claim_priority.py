"""Claim order with priorities (docs/api.md §9, "Scheduling"): the first
claimable run in claim order, highest priority first, then the oldest due,
across agents as within one; runs below 0 after every claimable run of
priority 0; a run that is not due, or whose agent is busy, does not block
the order."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]


@pytest.fixture
def agents(db: Conn) -> Conn:
    for agent in ("a", "b", "c"):
        db.execute("SELECT office.upsert_agent(%s, 'w')", [agent])
    return db


def enqueue(db: Conn, agent: str, reason: str, priority: int = 0, later: bool = False) -> None:
    row = db.execute(
        "SELECT outcome FROM office.enqueue_run(agent_profile_id => %s, reason => %s,"
        " priority => %s, not_before => CASE WHEN %s THEN now() + interval '1 hour' END)",
        [agent, reason, priority, later],
    ).fetchone()
    assert row == ("queued",)


def claim(db: Conn, agent: str | None = None) -> str | None:
    if agent is None:
        row = db.execute("SELECT reason FROM office.claim_run('w')").fetchone()
    else:
        row = db.execute("SELECT reason FROM office.claim_run('w', %s)", [agent]).fetchone()
    return None if row is None else str(row[0])


def finish_all(db: Conn) -> None:
    db.execute("SELECT office.finish_run(id, attempt) FROM office.runs WHERE status = 'claimed'")


def test_across_agents_priority_then_age(agents: Conn) -> None:
    db = agents
    enqueue(db, "a", "a-old")
    enqueue(db, "b", "b-below", priority=-5)
    enqueue(db, "c", "c-plain")
    enqueue(db, "a", "a-urgent", priority=9)
    enqueue(db, "c", "c-high", priority=3)
    enqueue(db, "b", "b-later", priority=50, later=True)  # not due: no block
    order: list[str] = []
    while (reason := claim(db)) is not None or db.execute(
        "SELECT 1 FROM office.runs WHERE status = 'claimed'"
    ).fetchone():
        if reason is None:
            finish_all(db)
            continue
        order.append(reason)
    # a-urgent and c-high first (their agents then busy); b's only due run is
    # below 0, but it is the only claimable one; then a and c by age.
    assert order == ["a-urgent", "c-high", "b-below", "a-old", "c-plain"]


def test_runs_below_zero_wait_for_every_claimable_run_of_priority_zero(agents: Conn) -> None:
    db = agents
    enqueue(db, "a", "a-below", priority=-1)
    enqueue(db, "b", "b-plain")
    enqueue(db, "a", "a-plain")
    assert [claim(db), claim(db)] == ["b-plain", "a-plain"]
    finish_all(db)
    assert claim(db) == "a-below"


def test_within_one_agent(agents: Conn) -> None:
    db = agents
    for reason, priority in (("r0", 0), ("r-2", -2), ("r5", 5), ("r1", 1), ("r0b", 0)):
        enqueue(db, "a", reason, priority)
    order: list[str] = []
    while (found := claim(db, "a")) is not None:
        order.append(found)
        finish_all(db)
    assert order == ["r5", "r1", "r0", "r0b", "r-2"]


def test_without_priorities_the_order_is_age(agents: Conn) -> None:
    db = agents
    for agent, reason in (("b", "first"), ("a", "second"), ("c", "third")):
        enqueue(db, agent, reason)
    assert [claim(db), claim(db), claim(db)] == ["first", "second", "third"]


def test_explain_agent_lists_the_runs_in_the_order_claim_run_takes_them(agents: Conn) -> None:
    """explain_agent and claim_run(worker, agent) each read the backlog in
    three index-ordered parts (above 0, 0, below 0): the same vectors hold
    the two to one order, ties of priority and requested_at included."""
    db = agents
    priorities = [0, 3, -1, 0, 3, 7, -1, 0, -4, 1, 0, 7]
    for n, priority in enumerate(priorities):
        enqueue(db, "a", f"r{n}", priority)
    # Two runs with one requested_at: the id breaks the tie, in both.
    db.execute(
        "UPDATE office.runs SET requested_at = (SELECT min(requested_at) FROM office.runs)"
        " WHERE reason IN ('r1', 'r4')"
    )
    listed = [
        str(row[0])
        for row in db.execute(
            "SELECT r.reason FROM office.explain_agent('a') e JOIN office.runs r ON r.id = e.run_id"
        ).fetchall()
    ]
    claimed: list[str] = []
    while (found := claim(db, "a")) is not None:
        claimed.append(found)
        finish_all(db)
    assert len(claimed) == len(priorities)
    assert listed == claimed
    assert claimed[:2] == ["r5", "r11"] and claimed[-1] == "r8"
