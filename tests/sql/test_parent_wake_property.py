"""A property test of parent wakes (hypothesis): random sequences of child
completions, reopens, archives, edits, assignee and agent changes, finished
runs and sweeps on a small tree (two parents, three children each).

Time is logical: operation n happens at base + n seconds, written explicitly
into updated_at, and each run is re-dated to the second of the operation that
created it. So no two operations share a second and the second-precision
masking of docs/domain.md §2.20 ("Known limitation") never applies: the property
is about the logic.

Checked after every operation: list_stuck_parents (which reads the marks) is
exactly the same list as a scan of every open parent, so the marks never miss
a candidate. Checked after finishing every run and a final sweep: no parent is
stuck, and every eligible parent (Office, open, an assignee that accepts runs,
at least one live child and all live children COMPLETED/CANCELLED) has exactly
one run keyed with its current wave - unless the wave became current by
archiving the child whose change was the newest: then the generation (over
live children only) went back in time, and a run requested after it (for the
previous wave) is, by docs/domain.md §2.20 rule 8, a delivery at or after the
newest child change. That case is asserted to be the only exception.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

from controlplane import keys
from tests.scenarios.parent_wake import WAKE, scanned, stuck
from tests.scenarios.tasks import Conn, agent, create

PARENTS = ("P0", "P1")
CHILDREN = 3
DONE = ("COMPLETED", "CANCELLED")

child = st.tuples(st.integers(0, len(PARENTS) - 1), st.integers(0, CHILDREN - 1))
# Finishing moves are the common case (a wave needs all its children done).
move = st.tuples(
    st.just("move"),
    child,
    st.sampled_from(["COMPLETED", "CANCELLED", "COMPLETED", "CANCELLED", "IN_PROGRESS", "FAILED"]),
)
operation = st.one_of(
    move,
    move,
    move,
    st.tuples(st.just("archive"), child, st.booleans()),
    st.tuples(st.just("edit"), child),
    st.tuples(st.just("sweep"), st.sampled_from([1, 5])),
    st.tuples(st.just("sweep"), st.sampled_from([1, 5])),
    st.tuples(st.just("finish")),
    st.tuples(st.just("agent"), st.sampled_from(["idle", "paused"])),
    st.tuples(st.just("assign"), st.integers(0, len(PARENTS) - 1), st.booleans()),
)
# Children may start finished: created terminal, they wake nobody (stuck).
initial_states = st.lists(
    st.sampled_from(["TODO", "COMPLETED", "CANCELLED", "COMPLETED", "CANCELLED"]),
    min_size=len(PARENTS) * CHILDREN,
    max_size=len(PARENTS) * CHILDREN,
)


def child_id(which: tuple[int, int]) -> str:
    return f"{PARENTS[which[0]]}-c{which[1]}"


def reset(db: Conn, states: list[str]) -> datetime:
    for table in ("tasks", "runs", "events", "parent_wake_marks", "agent_profiles"):
        db.execute(f"DELETE FROM office.{table}")
    base = db.execute("SELECT date_trunc('second', now()) - interval '1 hour'").fetchone()
    assert base is not None
    agent(db, "A")
    for parent in PARENTS:
        create(db, parent, assignee_agent_profile_id="A")
        for n in range(CHILDREN):
            create(db, f"{parent}-c{n}", parent_id=parent, state=states.pop())
    db.execute("UPDATE office.tasks SET updated_at = %s", [base[0]])
    db.execute("UPDATE office.runs SET requested_at = %s", [base[0]])
    return base[0]  # type: ignore[no-any-return]


def apply(db: Conn, op: tuple[Any, ...], tick: datetime) -> list[dict[str, Any]]:
    kind = op[0]
    swept: list[dict[str, Any]] = []
    if kind == "move":
        db.execute(
            "UPDATE office.tasks SET state = %s, updated_at = %s WHERE id = %s",
            [op[2], tick, child_id(op[1])],
        )
    elif kind == "archive":
        db.execute(
            "UPDATE office.tasks SET archived_at = CASE WHEN %(on)s THEN %(t)s END,"
            " updated_at = %(t)s WHERE id = %(id)s",
            {"on": op[2], "t": tick, "id": child_id(op[1])},
        )
    elif kind == "edit":
        db.execute(
            "UPDATE office.tasks SET title = title || '.', updated_at = %s WHERE id = %s",
            [tick, child_id(op[1])],
        )
    elif kind == "sweep":
        with db.cursor(row_factory=dict_row) as cur:
            swept = cur.execute("SELECT * FROM office.sweep_stuck_parents(%s)", [op[1]]).fetchall()
    elif kind == "finish":
        db.execute(
            "UPDATE office.runs SET status = 'finished', finished_at = %s"
            " WHERE status IN ('queued', 'claimed')",
            [tick],
        )
    elif kind == "agent":
        db.execute("SELECT office.set_agent_status('A', %s)", [op[1]])
    elif kind == "assign":
        db.execute(
            "UPDATE office.tasks SET assignee_agent_profile_id = %s WHERE id = %s",
            ["A" if op[2] else None, PARENTS[op[1]]],
        )
    # Every run this operation created happened at its second.
    db.execute(
        "UPDATE office.runs SET requested_at = %s WHERE requested_at > %s",
        [tick, tick + timedelta(minutes=30)],
    )
    for result in swept:
        if result["delivered"]:
            key = db.execute(
                "SELECT idempotency_key FROM office.runs WHERE id = %s", [result["run_id"]]
            ).fetchone()
            assert key == (result["operation_id"],)
    return swept


def check_final(db: Conn) -> None:
    with db.cursor(row_factory=dict_row) as cur:
        tasks = {r["id"]: r for r in cur.execute("SELECT * FROM office.tasks").fetchall()}
        runs = cur.execute("SELECT * FROM office.runs WHERE reason = %s", [WAKE]).fetchall()
        status = cur.execute("SELECT status FROM office.agent_profiles WHERE id = 'A'").fetchone()
    assert status is not None
    accepting = status["status"] not in ("paused", "stopped", "pending_approval")
    for parent in PARENTS:
        children = [t for t in tasks.values() if t["parent_id"] == parent]
        live = sorted((t for t in children if t["archived_at"] is None), key=lambda t: t["id"])
        eligible = (
            accepting
            and tasks[parent]["assignee_agent_profile_id"] == "A"
            and bool(live)
            and all(t["state"] in DONE for t in live)
        )
        if not eligible:
            continue
        child_set = ",".join(f"{t['id']}:{t['state']}" for t in live)
        generation = keys.second_precision_text(max(t["updated_at"] for t in live))
        assert generation is not None
        wave = keys.wake_operation_id(parent, child_set, generation)
        mine = [r for r in runs if r["task_id"] == parent]
        if sum(r["idempotency_key"] == wave for r in mine) == 1:
            continue
        # The only exception: a run for an earlier wave, requested after this
        # wave's newest live child change, with an archive after that run.
        masking = [
            r for r in mine if (keys.second_precision_text(r["requested_at"]) or "") >= generation
        ]
        archives = [t["updated_at"] for t in children if t["archived_at"] is not None]
        assert masking and any(a > min(r["requested_at"] for r in masking) for a in archives), (
            parent,
            child_set,
            generation,
            [(r["idempotency_key"], r["requested_at"], r["status"]) for r in mine],
        )


@settings(
    max_examples=50,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(states=initial_states, operations=st.lists(operation, min_size=1, max_size=40))
def test_every_finished_wave_is_delivered_once_and_nothing_stays_stuck(
    db: Conn, states: list[str], operations: list[tuple[Any, ...]]
) -> None:
    base = reset(db, list(states))
    tick = base
    for op in operations:
        tick += timedelta(seconds=1)
        apply(db, op, tick)
        assert stuck(db, 1000) == scanned(db), op  # the marks miss no candidate
    # Let every run finish, the agent accept runs and both parents have it
    # (what the marks must notice too), then sweep until nothing is left.
    for final in [("finish",), ("agent", "idle"), ("assign", 0, True), ("assign", 1, True)]:
        tick += timedelta(seconds=1)
        apply(db, final, tick)
        assert stuck(db, 1000) == scanned(db), final
    for _ in range(len(PARENTS) + 1):
        tick += timedelta(seconds=1)
        if not apply(db, ("sweep", 5), tick):
            break
    assert stuck(db, 1000) == [] == scanned(db)
    check_final(db)
