"""Races on tasks with real connections (the ``concurrently`` fixture releases
every caller at once), and the control showing the blockers spec fails
without its lock. The isolation specs of the deterministic interleavings
(tests/isolation/specs/tasks_*.spec) run in
tests/sql/test_isolation_harness.py."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane import keys
from controlplane.client import Office
from controlplane.event_subscriber import EventSubscriber, HandledEvent, HandlerAction
from controlplane.models import Event
from tests import harness
from tests.scenarios.tasks import (
    Conn,
    agent,
    assign,
    block,
    claim_and_age,
    create,
    move,
    run_keys,
    runs,
    task,
)


@pytest.fixture
def office(dsn: str) -> Iterator[Office]:
    with Office(dsn, max_size=8, registry=CollectorRegistry()) as client:
        yield client


def assigner(task_id: str, who: str | None) -> Callable[[Conn], dict[str, Any]]:
    return lambda conn: assign(conn, task_id, who)


def mover(task_id: str, state: str) -> Callable[[Conn], dict[str, Any]]:
    return lambda conn: move(conn, task_id, state)


def handler(subscriber: EventSubscriber, event: Event) -> Callable[[Conn], HandledEvent]:
    return lambda _conn: subscriber.handle(event)


def retire(conn: Conn, run_id: str) -> None:
    """Finish a run: no longer a coalesce target (and not a claimed one)."""
    conn.execute(
        "UPDATE office.runs SET status = 'finished', finished_at = now() WHERE id = %s", [run_id]
    )


# --- generations --------------------------------------------------------------------


def test_eight_concurrent_reassignments_commit_eight_generations_and_keys(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    agents = [agent(db, f"agent-{i}") for i in range(1, 9)]
    agent(db, "agent-0")
    create(db, "T", workflow_step_id="s", assignee_agent_profile_id="agent-0")  # generation 1
    results = harness.values(concurrently([assigner("T", who) for who in agents]))
    generations = sorted(r["assignment_generation"] for r in results)
    assert generations == list(range(2, 10))
    assert all(r["outcome"] == "queued" for r in results)
    expected = {
        keys.assignment_key("T", who, r["assignment_generation"])
        for who, r in zip(agents, results, strict=True)
    }
    assert len(expected) == 8
    assert set(run_keys(db)) == expected | {"task_assigned:T:agent-0:1"}
    assert task(db, "T")["assignment_generation"] == 9
    # The events carry the same eight generations, each once.
    event_generations = db.execute(
        "SELECT (payload ->> 'assignment_generation')::int FROM office.events"
        " WHERE topic = 'task.assigned' ORDER BY 1"
    ).fetchall()
    assert [g[0] for g in event_generations] == list(range(1, 10))


def test_eight_concurrent_repeats_of_one_agent_are_never_deduped(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    agent(db, "A")
    first = create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    claim_and_age(db, first["run_id"])
    results = harness.values(concurrently([lambda conn: assign(conn, "T", "A")] * 8))
    assert sorted(r["assignment_generation"] for r in results) == list(range(2, 10))
    assert all(r["outcome"] in ("queued", "coalesced") for r in results)
    assert all(r["interrupt"] is False for r in results)
    # Every key that made it into a row is distinct; nothing was deduped.
    stored = [k for k in run_keys(db) if k is not None]
    assert len(stored) == len(set(stored))


def test_assign_task_racing_the_subscriber_for_one_generation_gives_one_run(
    db: Conn, office: Office, concurrently: harness.Concurrently
) -> None:
    agent(db, "A")
    created = create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    claim_and_age(db, created["run_id"])
    subscriber = EventSubscriber(office)
    for generation in range(2, 12):
        # The event the subscriber will see for this very assignment.
        event = Event(
            id=0,
            topic="task.assigned",
            task_id="T",
            payload={"task_id": "T", "agent_profile_id": "A", "assignment_generation": generation},
            created_at=datetime.now(UTC),
        )
        before = len(runs(db))
        assigned, handled = harness.values(
            concurrently([assigner("T", "A"), handler(subscriber, event)])
        )
        assert assigned["assignment_generation"] == generation
        assert isinstance(handled, HandledEvent) and handled.action is HandlerAction.ENQUEUED
        key = keys.assignment_key("T", "A", generation)
        assert handled.idempotency_key == key
        assert len(runs(db)) == before + 1, f"generation {generation}"
        assert run_keys(db).count(key) == 1
        outcomes = sorted(
            [assigned["outcome"], str(handled.result.outcome if handled.result else "")]
        )
        assert "queued" in outcomes and outcomes != ["queued", "queued"], outcomes
        # Finish it so the next round starts without a coalesce target.
        retire(db, runs(db)[-1]["id"])


def test_two_subscribers_on_one_outbox_handle_each_event_once(
    db: Conn, office: Office, concurrently: harness.Concurrently
) -> None:
    agent(db, "A")
    for i in range(40):
        db.execute(
            "INSERT INTO office.tasks"
            " (id, workspace_id, workflow_step_id, assignee_agent_profile_id)"
            " VALUES (%s, 'w1', 's', 'A')",
            [f"t{i:02d}"],
        )
        db.execute("UPDATE office.tasks SET state = 'IN_PROGRESS' WHERE id = %s", [f"t{i:02d}"])
    all_ids = [r[0] for r in db.execute("SELECT id FROM office.events ORDER BY id").fetchall()]
    assert len(all_ids) == 80

    def subscribe(name: str) -> Callable[[Conn], list[int]]:
        def loop(_conn: Conn) -> list[int]:
            subscriber = EventSubscriber(office, consumer=name)
            seen: list[int] = []
            while (report := subscriber.run_once(max_rows=3)).claimed:
                assert report.acked == report.claimed
                seen.extend(h.event_id for h in report.handled)
            return seen

        return loop

    first, second = harness.values(concurrently([subscribe("s1"), subscribe("s2")]))
    assert set(first).isdisjoint(second)
    assert sorted(first + second) == all_ids
    assert db.execute("SELECT max(deliveries) FROM office.events").fetchone() == (1,)
    assert len(runs(db, "task_assigned")) == 40
    assert sorted(k or "" for k in run_keys(db, "task_assigned")) == [
        f"task_assigned:t{i:02d}:A:1" for i in range(40)
    ]


# --- terminal effects --------------------------------------------------------------------


@pytest.mark.parametrize("blockers", [2, 4])
def test_blockers_completing_together_give_exactly_one_wake(
    db: Conn, concurrently: harness.Concurrently, blockers: int
) -> None:
    agent(db, "agent-1")
    for round_number in range(8):
        blocked = f"T{round_number}"
        create(db, blocked, assignee_agent_profile_id="agent-1")
        names = [f"{blocked}-b{i}" for i in range(blockers)]
        for name in names:
            create(db, name)
            block(db, blocked, name)
        states = ["COMPLETED", "FAILED", "CANCELLED", "COMPLETED"]
        harness.values(
            concurrently([mover(name, state) for name, state in zip(names, states, strict=False)])
        )
        wakes = [r for r in runs(db, "task_blockers_resolved") if r["task_id"] == blocked]
        assert len(wakes) == 1, f"round {round_number}: {len(wakes)} wakes"
        assert wakes[0]["idempotency_key"] == keys.blockers_resolved_key(blocked, names)


def test_children_completing_together_wake_the_parent_once(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    agent(db, "agent-p")
    for round_number in range(8):
        parent = f"P{round_number}"
        create(db, parent, assignee_agent_profile_id="agent-p")
        children = [f"{parent}-c{i}" for i in range(3)]
        for child in children:
            create(db, child, parent_id=parent)
        harness.values(concurrently([mover(child, "COMPLETED") for child in children]))
        wakes = [r for r in runs(db, "task_children_completed") if r["task_id"] == parent]
        assert len(wakes) == 1, f"round {round_number}: {len(wakes)} wakes"


def test_a_repeatable_read_transaction_that_waited_is_told_to_retry(db: Conn, dsn: str) -> None:
    # Its snapshot predates the other blocker's commit, so it could not see
    # it; it gets 40001 instead of silently losing the wake.
    agent(db, "agent-1")
    create(db, "T", assignee_agent_profile_id="agent-1")
    for name in ("B1", "B2"):
        create(db, name)
        block(db, "T", name)
    first = psycopg.connect(dsn)
    second = psycopg.connect(dsn)
    try:
        first.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        second.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        second.execute("SELECT 1")  # take the snapshot now
        move(first, "B1", "COMPLETED")
        outcome: list[BaseException | None] = []

        def complete_b2() -> None:
            try:
                move(second, "B2", "COMPLETED")
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=complete_b2)
        thread.start()
        waiting = db.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        )
        while waiting.fetchone() == (0,) and thread.is_alive():
            waiting = db.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
        first.commit()
        thread.join(30)
        [error] = outcome
        assert isinstance(error, psycopg.errors.SerializationFailure)
        second.rollback()
    finally:
        first.close()
        second.close()
    # Retried under READ COMMITTED, the wake happens.
    move(db, "B2", "COMPLETED")
    assert len(runs(db, "task_blockers_resolved")) == 1


# --- isolation-spec control ---------------------------------------------------------------


def test_the_blockers_spec_fails_without_the_lock(tmp_path: Path) -> None:
    # The control: tasks_blockers_race_nolock.spec is the same race with the
    # lock taken out, and its expected output is the lost wake (0 rows). Run
    # it against the locked race's expectation: it must not pass.
    expected = tmp_path / "expected"
    shutil.copytree(harness.ISOLATION_DIR / "expected", expected)
    locked = (expected / "tasks_blockers_race.out").read_text()
    header, first, _second = locked.split("\n\nstarting permutation")
    first_permutation = f"{header}\n\nstarting permutation{first}\n"
    (expected / "tasks_blockers_race_nolock.out").write_text(first_permutation)
    result = harness.run_isolation_spec("tasks_blockers_race_nolock", expected_dir=expected)
    assert not result.passed
    assert "+(0 rows)" in result.diffs  # nobody woken: the lost wake
    assert "-step s2_done: <... completed>" in result.diffs  # the lock made s2 wait


# --- workspaces: a move never lets a new reference slip in ------------------------------------


def _in_thread(conn: Conn, statement: str, outcome: list[BaseException | None]) -> threading.Thread:
    def run() -> None:
        try:
            conn.execute(statement)
            conn.commit()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)
            conn.rollback()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("first", ["child", "move"])
def test_a_child_and_a_move_of_its_parent_never_both_commit(db: Conn, dsn: str, first: str) -> None:
    """A child created in w1 while its parent moves to w2: whichever commits
    first wins, the other is OFW01 (the foreign key's key-share lock on the
    parent and the move's FOR UPDATE of its own row order them)."""
    create(db, "P")
    statements = {
        "child": "INSERT INTO office.tasks (id, workspace_id, parent_id) VALUES ('C', 'w1', 'P')",
        "move": "UPDATE office.tasks SET workspace_id = 'w2' WHERE id = 'P'",
    }
    second = "move" if first == "child" else "child"
    holder = psycopg.connect(dsn)
    waiter = psycopg.connect(dsn)
    try:
        holder.execute(statements[first])  # uncommitted
        outcome: list[BaseException | None] = []
        thread = _in_thread(waiter, statements[second], outcome)
        harness.wait_until_blocked(db, waiter.info.backend_pid, f"the {first}'s lock")
        holder.commit()
        thread.join(30)
        [error] = outcome
        assert isinstance(error, psycopg.Error) and error.sqlstate == "OFW01", error
    finally:
        holder.close()
        waiter.close()
    rows = db.execute("SELECT id, workspace_id FROM office.tasks ORDER BY id").fetchall()
    assert rows == ([("C", "w1"), ("P", "w1")] if first == "child" else [("P", "w2")])
