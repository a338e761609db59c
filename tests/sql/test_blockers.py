"""Blockers (docs/api.md §2; docs/domain.md §1.3, §2.13, §3.2-§3.3): the edge rules,
cycles, and the blockers-resolved wake of the terminal trigger - scenarios
32-37 of docs/domain.md §5. The concurrent-completion race is in
test_tasks_races.py and tests/isolation/specs/tasks_blockers_race.spec."""

from __future__ import annotations

import itertools
from typing import Any

import psycopg
import pytest

from controlplane import keys
from tests.harness import scalar
from tests.scenarios.tasks import (
    Conn,
    agent,
    block,
    call,
    claim_and_age,
    create,
    footprint,
    keyless_stats,
    move,
    run_keys,
    runs,
    sqlstate_of,
)


def unblock(conn: Conn, blocked: str, blocker: str) -> None:
    call(conn, "remove_blocker", task_id=blocked, blocker_task_id=blocker)


def edges(conn: Conn) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT task_id, blocker_task_id FROM office.task_blockers"
        ' ORDER BY task_id COLLATE "C", blocker_task_id COLLATE "C"'
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


@pytest.fixture
def dependent(db: Conn) -> Conn:
    """T (assigned to agent-1) blocked by B1 and B2."""
    agent(db, "agent-1")
    create(db, "T", assignee_agent_profile_id="agent-1")
    create(db, "B1")
    create(db, "B2")
    block(db, "T", "B1")
    block(db, "T", "B2")
    return db


def resolved_keys(conn: Conn) -> list[str | None]:
    return run_keys(conn, "task_blockers_resolved")


# --- edges ----------------------------------------------------------------------


def test_add_and_remove_edges(db: Conn) -> None:
    for name in ("A", "B", "C"):
        create(db, name)
    block(db, "A", "B")
    block(db, "A", "C")
    block(db, "A", "B")  # an existing edge: no-op
    assert edges(db) == [("A", "B"), ("A", "C")]
    unblock(db, "A", "B")
    unblock(db, "A", "B")  # already gone: no-op
    assert edges(db) == [("A", "C")]


def test_self_block_is_22023_and_writes_nothing(db: Conn) -> None:
    create(db, "A")
    before = footprint(db)
    assert sqlstate_of(db, "add_blocker", task_id="A", blocker_task_id="A") == "22023"
    assert footprint(db) == before


@pytest.mark.parametrize("length", [2, 3, 5, 12])
def test_an_edge_closing_a_cycle_of_any_length_is_22023(db: Conn, length: int) -> None:
    names = [f"t{i}" for i in range(length)]
    for name in names:
        create(db, name)
    # t0 blocks t1 blocks ... blocks t(n-1)
    for left, right in itertools.pairwise(names):
        block(db, right, left)
    before = footprint(db)
    # t(n-1) blocking t0 would close the cycle.
    assert sqlstate_of(db, "add_blocker", task_id=names[0], blocker_task_id=names[-1]) == "22023"
    assert footprint(db) == before
    # The other direction only duplicates the path: fine.
    block(db, names[-1], names[0])


def test_a_diamond_is_not_a_cycle(db: Conn) -> None:
    for name in ("top", "left", "right", "bottom"):
        create(db, name)
    block(db, "left", "top")
    block(db, "right", "top")
    block(db, "bottom", "left")
    block(db, "bottom", "right")
    block(db, "bottom", "top")
    assert len(edges(db)) == 5


def test_a_cycle_through_a_plain_insert_is_refused_too(db: Conn) -> None:
    create(db, "A")
    create(db, "B")
    block(db, "A", "B")
    with pytest.raises(psycopg.Error) as caught:
        db.execute("INSERT INTO office.task_blockers (task_id, blocker_task_id) VALUES ('B', 'A')")
    assert caught.value.sqlstate == "22023"
    with pytest.raises(psycopg.Error) as caught:
        db.execute("INSERT INTO office.task_blockers (task_id, blocker_task_id) VALUES ('A', 'A')")
    assert caught.value.sqlstate in ("22023", "23514")
    assert edges(db) == [("A", "B")]


def test_the_cycle_message_names_both_tasks(db: Conn) -> None:
    create(db, "first")
    create(db, "second")
    block(db, "first", "second")
    with pytest.raises(psycopg.Error) as caught:
        block(db, "second", "first")
    assert "'first'" in str(caught.value) and "'second'" in str(caught.value)


def test_two_concurrent_edges_never_close_a_cycle_together(db: Conn, concurrently: Any) -> None:
    # Each edge alone is fine; together they are A -> B -> A. The graph lock
    # makes the second one see the first.
    for round_number in range(10):
        a, b = f"a{round_number}", f"b{round_number}"
        create(db, a)
        create(db, b)
        outcomes = concurrently(
            [
                lambda conn, a=a, b=b: block(conn, a, b),
                lambda conn, a=a, b=b: block(conn, b, a),
            ]
        )
        errors = [o.error for o in outcomes if o.error is not None]
        assert len(errors) == 1, outcomes
        assert isinstance(errors[0], psycopg.Error) and errors[0].sqlstate == "22023"
    assert len(edges(db)) == 10


def test_edges_go_with_a_deleted_task(db: Conn) -> None:
    for name in ("A", "B", "C"):
        create(db, name)
    block(db, "A", "B")
    block(db, "B", "C")
    db.execute("DELETE FROM office.tasks WHERE id = 'B'")
    assert edges(db) == []


# --- the blockers-resolved wake: docs/domain.md §5 scenarios 32-37 -------------------------


def test_s32_a_failed_blocker_no_longer_blocks(dependent: Conn) -> None:
    move(dependent, "B1", "FAILED")
    assert resolved_keys(dependent) == []
    move(dependent, "B2", "COMPLETED")
    [run] = runs(dependent, "task_blockers_resolved")
    assert run["idempotency_key"] == keys.blockers_resolved_key("T", ["B1", "B2"])
    assert run["idempotency_key"].startswith("blockers_resolved:T:")
    assert run["agent_profile_id"] == "agent-1"
    assert run["task_id"] == "T"
    assert run["payload"]["resolved_blocker_task_id"] == "B2"


@pytest.mark.parametrize("last", ["COMPLETED", "FAILED", "CANCELLED"])
def test_every_terminal_state_resolves(dependent: Conn, last: str) -> None:
    move(dependent, "B1", "CANCELLED")
    move(dependent, "B2", last)
    assert resolved_keys(dependent) == [keys.blockers_resolved_key("T", ["B1", "B2"])]


def test_s33_a_non_terminal_blocker_keeps_the_task_blocked(dependent: Conn) -> None:
    move(dependent, "B1", "IN_PROGRESS")
    move(dependent, "B2", "COMPLETED")
    assert resolved_keys(dependent) == []
    for state in ("REVIEW", "BLOCKED", "WAITING_FOR_INPUT", "TODO"):
        move(dependent, "B1", state)
    assert resolved_keys(dependent) == []


def test_s34_the_digest_does_not_depend_on_order(db: Conn) -> None:
    agent(db, "agent-1")
    create(db, "task-x", assignee_agent_profile_id="agent-1")
    create(db, "task-y", assignee_agent_profile_id="agent-1")
    for name in ("blocker-a", "blocker-b"):
        create(db, name)
    block(db, "task-x", "blocker-a")
    block(db, "task-x", "blocker-b")
    block(db, "task-y", "blocker-b")  # the other insertion order
    block(db, "task-y", "blocker-a")
    move(db, "blocker-b", "COMPLETED")
    move(db, "blocker-a", "COMPLETED")
    digest = "d7df692e08daa09b54d82524e90dc63f128d9c18377d74f333532afa1ba1a166"  # §3.2
    assert sorted(k or "" for k in resolved_keys(db)) == [
        f"blockers_resolved:task-x:{digest}",
        f"blockers_resolved:task-y:{digest}",
    ]
    assert keys.blockers_resolved_key("task-x", ["blocker-b", "blocker-a"]) == (
        f"blockers_resolved:task-x:{digest}"
    )


def test_s34_bytewise_order_with_uppercase_and_uuids(db: Conn) -> None:
    agent(db, "agent-1")
    ids = ["3f2b8c1e-0000-4000-8000-000000000001", "0a9d7e55-0000-4000-8000-000000000002", "B", "a"]
    create(db, "T", assignee_agent_profile_id="agent-1")
    for blocker in ids:
        create(db, blocker)
        block(db, "T", blocker)
    for blocker in ids:
        move(db, blocker, "COMPLETED")
    assert resolved_keys(db) == [keys.blockers_resolved_key("T", ids)]
    assert resolved_keys(db)[0] == scalar(
        db, "SELECT office.blockers_resolved_key('T', %s::text[])", [list(reversed(ids))]
    )


def test_s35_a_task_that_blocks_nobody_wakes_nobody(db: Conn) -> None:
    agent(db, "agent-1")
    create(db, "alone", assignee_agent_profile_id="agent-1")
    move(db, "alone", "COMPLETED")
    assert resolved_keys(db) == []
    assert keyless_stats(db) == {}


def test_s36_a_dependent_that_cannot_be_woken_does_not_stop_the_others(db: Conn) -> None:
    # The original logged a read error and went on with the next dependent.
    # Here a dependent whose assignee is paused, gone, or missing is skipped;
    # the move commits and the other dependents are woken.
    agent(db, "ok")
    agent(db, "sleepy", status="paused")
    agent(db, "ghost")
    create(db, "B")
    for name, who in (("d1", "sleepy"), ("d2", "ghost"), ("d3", None), ("d4", "ok")):
        create(db, name, assignee_agent_profile_id=who)
        block(db, name, "B")
    db.execute("DELETE FROM office.agent_profiles WHERE id = 'ghost'")
    assert move(db, "B", "COMPLETED")["state"] == "COMPLETED"
    assert [(r["task_id"], r["agent_profile_id"]) for r in runs(db, "task_blockers_resolved")] == [
        ("d4", "ok")
    ]


def test_s37_a_new_blocker_is_a_new_wave_and_a_reopened_set_collapses(db: Conn) -> None:
    agent(db, "agent-1")
    create(db, "T", assignee_agent_profile_id="agent-1")
    create(db, "B1")
    create(db, "B2")
    block(db, "T", "B1")
    move(db, "B1", "COMPLETED")
    first = keys.blockers_resolved_key("T", ["B1"])
    assert resolved_keys(db) == [first]
    # (claimed, so the next wave is not coalesced into it)
    claim_and_age(db, runs(db, "task_blockers_resolved")[0]["id"])

    block(db, "T", "B2")
    move(db, "B2", "COMPLETED")
    second = keys.blockers_resolved_key("T", ["B1", "B2"])
    assert second != first
    assert resolved_keys(db) == [first, second]

    # Reopen and re-resolve the same set: the same key, suppressed (the
    # documented collapse of docs/domain.md §2.13).
    move(db, "B2", "IN_PROGRESS")
    move(db, "B2", "COMPLETED")
    assert resolved_keys(db) == [first, second]
    dedups = db.execute(
        "SELECT kind, total FROM office.dedup_stats WHERE reason = 'task_blockers_resolved'"
    ).fetchall()
    assert dedups == [("windowed", 1)]


def test_removing_the_open_blocker_then_completing_another_wakes_with_the_remaining_set(
    dependent: Conn,
) -> None:
    create(dependent, "B3")
    block(dependent, "T", "B3")
    move(dependent, "B1", "COMPLETED")
    unblock(dependent, "T", "B3")
    move(dependent, "B2", "COMPLETED")
    assert resolved_keys(dependent) == [keys.blockers_resolved_key("T", ["B1", "B2"])]


def test_an_unassigned_dependent_is_not_woken_and_gets_its_run_when_assigned(
    dependent: Conn,
) -> None:
    claim_and_age(dependent, runs(dependent, "task_assigned")[0]["id"])
    call(dependent, "assign_task", task_id="T", assignee_agent_profile_id=None)
    move(dependent, "B1", "COMPLETED")
    move(dependent, "B2", "COMPLETED")
    assert resolved_keys(dependent) == []
    result = call(dependent, "assign_task", task_id="T", assignee_agent_profile_id="agent-1")
    assert result["outcome"] == "queued"
    assert run_keys(dependent, "task_assigned")[-1] == "task_assigned:T:agent-1:2"


def test_a_terminal_to_terminal_move_wakes_again_under_the_same_key(dependent: Conn) -> None:
    move(dependent, "B1", "COMPLETED")
    move(dependent, "B2", "COMPLETED")
    move(dependent, "B2", "CANCELLED")
    assert resolved_keys(dependent) == [keys.blockers_resolved_key("T", ["B1", "B2"])]


def test_one_statement_completing_both_blockers_gives_one_run(dependent: Conn) -> None:
    dependent.execute("UPDATE office.tasks SET state = 'COMPLETED' WHERE id IN ('B1', 'B2')")
    assert resolved_keys(dependent) == [keys.blockers_resolved_key("T", ["B1", "B2"])]


def test_an_edge_joins_tasks_of_one_workspace_through_every_path(dependent: Conn) -> None:
    create(dependent, "X", workspace="w2")
    before = footprint(dependent)
    assert sqlstate_of(dependent, "add_blocker", task_id="X", blocker_task_id="B1") == "OFW01"
    for statement in (
        "INSERT INTO office.task_blockers (task_id, blocker_task_id) VALUES ('B1', 'X')",
        "UPDATE office.task_blockers SET blocker_task_id = 'X' WHERE blocker_task_id = 'B1'",
    ):
        with pytest.raises(psycopg.Error) as caught:
            dependent.execute(statement)
        assert caught.value.sqlstate == "OFW01", statement
        assert "'w1'" in str(caught.value) and "'w2'" in str(caught.value)
    assert footprint(dependent) == before
    assert edges(dependent) == [("T", "B1"), ("T", "B2")]
