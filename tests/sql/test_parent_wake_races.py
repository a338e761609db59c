"""Parent-wake races with real connections (the ``concurrently`` fixture
releases every caller at once): the edge path and a sweep for the same wave
make one run, two sweeps deliver each parent once, a child reopened between
list and reconcile leaves no receipt. The isolation specs of the
deterministic interleavings (tests/isolation/specs/parent_wake_*.spec) run in
tests/sql/test_isolation_harness.py."""

from __future__ import annotations

from typing import Any

import psycopg

from controlplane import keys
from tests import harness
from tests.scenarios.parent_wake import (
    T0,
    candidates,
    marked,
    receipt,
    reconcile,
    stuck,
    stuck_parent,
    sweep,
    wakes,
    wave,
    write,
)
from tests.scenarios.tasks import Conn, agent, create


def test_the_edge_path_and_a_sweep_for_the_same_wave_make_one_run(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    for n in range(12):
        parent = f"P{n:02d}"
        a, b = f"{parent}-a", f"{parent}-b"
        # Stuck: the children were created terminal, nobody was woken.
        stuck_parent(db, parent, {a: ("COMPLETED", "05:00"), b: ("CANCELLED", "10:00.100")})
        the_wave = keys.wake_operation_id(parent, f"{a}:X,{b}:Y", f"{T0}10:00")

        def edge(conn: Conn, child: str = b) -> None:
            # A terminal-to-terminal edit inside the generation's second: the
            # edge path derives the sweep's operation id.
            write(conn, child, "10:00.900", "COMPLETED")

        edge_result, swept = harness.values(concurrently([edge, lambda conn: sweep(conn, 50)]))
        assert edge_result is None
        runs = wakes(db, parent)
        assert [r["idempotency_key"] for r in runs] == [the_wave]
        for result in swept:
            assert result["parent_task_id"] == parent
            assert result["operation_id"] == the_wave and result["run_id"] == runs[0]["id"]
        assert sweep(db, 50) == []
        assert len(wakes(db, parent)) == 1


def test_the_last_child_completing_while_a_sweep_runs_makes_one_run(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    agent(db, "agent-P")
    for n in range(12):
        parent = f"P{n:02d}"
        create(db, parent, assignee_agent_profile_id="agent-P")
        create(db, f"{parent}-a", parent_id=parent, state="COMPLETED")
        create(db, f"{parent}-b", parent_id=parent, state="IN_PROGRESS")

        def last(conn: Conn, child: str = f"{parent}-b") -> None:
            conn.execute("SELECT office.move_task(%s, 'COMPLETED')", [child])

        harness.values(
            concurrently([last, lambda conn: sweep(conn, 50), lambda conn: sweep(conn, 50)])
        )
        sweep(db, 50)
        [run] = wakes(db, parent)
        child_set, generation = wave(db, parent)
        assert run["idempotency_key"] == keys.wake_operation_id(parent, child_set, generation)


def test_two_sweeps_at_once_deliver_each_parent_once(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    for round_ in range(5):
        parents = [f"R{round_}-P{n}" for n in range(10)]
        for parent in parents:
            stuck_parent(db, parent, {f"{parent}-c": ("COMPLETED", "05:00")})
        first, second = harness.values(
            concurrently([lambda conn: sweep(conn, 20), lambda conn: sweep(conn, 20)])
        )
        delivered = [r["parent_task_id"] for r in first + second if r["delivered"]]
        assert sorted(delivered) == sorted(parents)  # each once, by one of the two
        assert all(r["outcome"] == "queued" for r in first + second)
        for parent in parents:
            [run] = wakes(db, parent)
            row = receipt(db, parent)
            assert row is not None and row["delivered_run_id"] == run["id"]
        assert sweep(db, 20) == [] and marked(db) == set()


def test_many_sweeps_at_once_with_a_small_limit_drain_the_stuck_parents(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    parents = [f"P{n:02d}" for n in range(24)]
    for parent in parents:
        stuck_parent(db, parent, {f"{parent}-c": ("COMPLETED", "05:00")})
    results: list[dict[str, Any]] = []
    while stuck(db):
        for batch in harness.values(concurrently([lambda conn: sweep(conn, 5)] * 4)):
            results.extend(batch)
    assert sorted(r["parent_task_id"] for r in results if r["delivered"]) == parents
    assert all(len(wakes(db, parent)) == 1 for parent in parents)


def test_a_child_reopened_between_list_and_reconcile_writes_no_receipt(db: Conn, dsn: str) -> None:
    stuck_parent(db, "P", {"c1": ("COMPLETED", "05:00"), "c2": ("CANCELLED", "06:00")})
    [listed] = candidates(db)
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT office.move_task('c1', 'IN_PROGRESS')")
    result = reconcile(db, "P", listed["child_set_key"], listed["newest_child_updated_at"])
    assert (result["delivered"], result["skipped_reason"]) == (False, "child_set_changed")
    assert receipt(db, "P") is None and wakes(db) == []


def test_a_child_reopened_while_the_parent_is_reconciled(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    for n in range(12):
        parent = f"P{n:02d}"
        child = f"{parent}-a"
        stuck_parent(
            db, parent, {child: ("COMPLETED", "05:00"), f"{parent}-b": ("CANCELLED", "06:00")}
        )
        [listed] = [c for c in candidates(db) if c["parent_task_id"] == parent]

        def reconciler(conn: Conn, p: str = parent, c: dict[str, Any] = listed) -> Any:
            return reconcile(conn, p, c["child_set_key"], c["newest_child_updated_at"])

        def reopen(conn: Conn, c: str = child) -> None:
            conn.execute("SELECT office.move_task(%s, 'IN_PROGRESS')", [c])

        result, _ = harness.values(concurrently([reconciler, reopen]))
        row = receipt(db, parent)
        if result["delivered"]:
            # Delivered first: the receipt is the wave it read, on its run.
            assert row is not None and row["child_set_key"] == listed["child_set_key"]
            assert [r["id"] for r in wakes(db, parent)] == [result["run_id"]]
        else:
            assert result["skipped_reason"] == "child_set_changed"
            assert row is None and wakes(db, parent) == []
        assert parent not in stuck(db)  # an open child now
