"""The terminal effects of a state change (docs/api.md §2; docs/domain.md §2.15, §2.19):
the routine sync first (scenario 49), then the dependents, then the parent's
children-completed wake with the key of §3.5; the child-set readers of docs/api.md
§5 (scenario 67)."""

from __future__ import annotations

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
    move,
    run_keys,
    runs,
)

SYNC_STUB = """
CREATE TABLE public.sync_calls (
    n serial PRIMARY KEY, task_id text, terminal text, wakes_before bigint);
CREATE OR REPLACE FUNCTION office.sync_routine_run_status(task_id text, terminal text)
    RETURNS boolean
    LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO public.sync_calls (task_id, terminal, wakes_before)
    SELECT $1, $2, (SELECT count(*) FROM office.runs
                     WHERE reason IN ('task_blockers_resolved', 'task_children_completed'))
    RETURNING true
$$;
"""


def children_completed(conn: Conn) -> list[dict[str, Any]]:
    return runs(conn, "task_children_completed")


def set_state_at(conn: Conn, task_id: str, state: str, at: str) -> None:
    """A plain UPDATE that also sets updated_at (kept by the trigger)."""
    conn.execute(
        "UPDATE office.tasks SET state = %s, updated_at = %s::timestamptz WHERE id = %s",
        [state, at, task_id],
    )


@pytest.fixture
def family(db: Conn) -> Conn:
    """parent-1 (Office, assigned to agent-P) with children child-a and child-b."""
    agent(db, "agent-P")
    create(db, "parent-1", assignee_agent_profile_id="agent-P")
    create(db, "child-a", parent_id="parent-1")
    create(db, "child-b", parent_id="parent-1")
    return db


# --- (3) the parent --------------------------------------------------------------


def test_the_last_child_completing_wakes_the_parent_with_the_wave_key(family: Conn) -> None:
    move(family, "child-a", "COMPLETED")
    assert children_completed(family) == []
    move(family, "child-b", "CANCELLED")
    [run] = children_completed(family)
    child_set = scalar(family, "SELECT office.child_set_key('parent-1')")
    generation = scalar(family, "SELECT office.child_generation('parent-1')")
    assert child_set == "child-a:COMPLETED,child-b:CANCELLED"
    assert run["idempotency_key"] == keys.wake_operation_id("parent-1", child_set, generation)
    assert (run["agent_profile_id"], run["task_id"]) == ("agent-P", "parent-1")
    assert run["payload"]["child_set_key"] == child_set
    assert run["payload"]["child_generation"] == generation


def test_the_wave_key_is_the_vector_of_domain_3_5(family: Conn) -> None:
    set_state_at(family, "child-a", "COMPLETED", "2026-01-01 00:05:00+00")
    set_state_at(family, "child-b", "CANCELLED", "2026-01-01 00:10:00.734+00")
    assert run_keys(family, "task_children_completed") == [
        "task_children_completed:parent-1:"
        "077c67d49943b1b9eb3a36842433dd6399e55f55fe54f5e86a5efb24d56e4fdc"
    ]


def test_a_failed_child_does_not_complete_the_parent(family: Conn) -> None:
    move(family, "child-a", "FAILED")
    move(family, "child-b", "COMPLETED")
    assert children_completed(family) == []
    move(family, "child-a", "CANCELLED")
    assert len(children_completed(family)) == 1


def test_archived_children_count_for_terminality_but_not_for_the_key(family: Conn) -> None:
    create(family, "child-c", parent_id="parent-1", state="IN_PROGRESS")
    call(family, "archive_task", task_id="child-c")
    move(family, "child-a", "COMPLETED")
    move(family, "child-b", "COMPLETED")
    assert children_completed(family) == []  # the archived child is still open
    move(family, "child-c", "CANCELLED")
    [run] = children_completed(family)
    assert run["payload"]["child_set_key"] == "child-a:COMPLETED,child-b:COMPLETED"


def test_only_archived_children_make_no_wave(family: Conn) -> None:
    for child in ("child-a", "child-b"):
        call(family, "archive_task", task_id=child)
        move(family, child, "COMPLETED")
    assert children_completed(family) == []


@pytest.mark.parametrize("case", ["not_office", "archived", "unassigned", "paused", "gone"])
def test_parents_that_are_not_woken(db: Conn, case: str) -> None:
    agent(db, "agent-P", status="paused" if case == "paused" else "idle")
    create(
        db,
        "parent-1",
        assignee_agent_profile_id=None if case == "unassigned" else "agent-P",
        is_office=case != "not_office",
    )
    create(db, "child-a", parent_id="parent-1")
    if case == "archived":
        call(db, "archive_task", task_id="parent-1")
    if case == "gone":
        db.execute("DELETE FROM office.agent_profiles WHERE id = 'agent-P'")
    assert move(db, "child-a", "COMPLETED")["state"] == "COMPLETED"
    assert children_completed(db) == []


def test_a_reopened_and_recompleted_child_is_a_new_wave(family: Conn) -> None:
    set_state_at(family, "child-a", "COMPLETED", "2026-01-01 00:05:00+00")
    set_state_at(family, "child-b", "COMPLETED", "2026-01-01 00:10:00+00")
    [first] = children_completed(family)
    claim_and_age(family, first["id"])
    set_state_at(family, "child-b", "IN_PROGRESS", "2026-01-01 00:11:00+00")
    set_state_at(family, "child-b", "COMPLETED", "2026-01-01 00:12:00+00")
    keys_now = run_keys(family, "task_children_completed")
    assert len(keys_now) == 2 and keys_now[0] != keys_now[1]
    assert keys_now[1] == keys.wake_operation_id(
        "parent-1", "child-a:COMPLETED,child-b:COMPLETED", "2026-01-01 00:12:00"
    )


def test_the_same_wave_twice_is_one_run(family: Conn) -> None:
    # Terminal-to-terminal edit inside the same second: states are stripped
    # from the key (docs/domain.md §5 scenario 66), so the wave is the same.
    set_state_at(family, "child-a", "COMPLETED", "2026-01-01 00:05:00+00")
    set_state_at(family, "child-b", "COMPLETED", "2026-01-01 00:10:00+00")
    set_state_at(family, "child-b", "CANCELLED", "2026-01-01 00:10:00.5+00")
    assert len(children_completed(family)) == 1


def test_a_child_without_parent_and_an_unknown_parent_reader(db: Conn) -> None:
    create(db, "orphan")
    move(db, "orphan", "COMPLETED")
    assert children_completed(db) == []
    assert scalar(db, "SELECT office.child_set_key('nope')") == ""
    assert scalar(db, "SELECT office.child_generation('nope')") == ""
    assert scalar(db, "SELECT office.child_set_key(NULL)") == ""


# --- the child-set readers: scenario 67 ------------------------------------------


def test_s67_child_set_key_skips_archived_children_and_orders_by_id(db: Conn) -> None:
    create(db, "parent")
    create(db, "child-b", parent_id="parent", state="COMPLETED")
    create(db, "child-a", parent_id="parent", state="FAILED")
    create(db, "child-c", parent_id="parent", state="CANCELLED")
    call(db, "archive_task", task_id="child-a")
    assert scalar(db, "SELECT office.child_set_key('parent')") == (
        "child-b:COMPLETED,child-c:CANCELLED"
    )


def test_s67_child_generation_is_the_newest_non_archived_second_in_utc(db: Conn) -> None:
    create(db, "parent")
    for child in ("child-b", "child-a", "child-z"):
        create(db, child, parent_id="parent")
    set_state_at(db, "child-b", "COMPLETED", "2026-01-01 00:05:00+00")
    set_state_at(db, "child-a", "CANCELLED", "2026-01-01 00:10:00.999+00")
    set_state_at(db, "child-z", "FAILED", "2026-01-01 00:20:00+00")
    db.execute(
        "UPDATE office.tasks SET archived_at = now(), updated_at = '2026-01-01 00:20:00+00'"
        " WHERE id = 'child-z'"
    )
    db.execute("SET TimeZone = 'Asia/Tokyo'")
    row = db.execute(
        "SELECT office.child_set_key('parent'), office.child_generation('parent')"
    ).fetchone()
    assert row == ("child-a:CANCELLED,child-b:COMPLETED", "2026-01-01 00:10:00")


def test_child_set_key_orders_bytewise(db: Conn) -> None:
    create(db, "parent")
    for child in ("b", "B", "a", "_"):
        create(db, child, parent_id="parent")
    assert scalar(db, "SELECT office.child_set_key('parent')") == "B:TODO,_:TODO,a:TODO,b:TODO"


# --- (1) the routine sync, and the order: scenario 49 -------------------------------


@pytest.fixture
def syncer(db: Conn) -> Conn:
    db.execute(SYNC_STUB)
    return db


def sync_calls(conn: Conn) -> list[tuple[str, str, int]]:
    rows = conn.execute("SELECT task_id, terminal, wakes_before FROM public.sync_calls ORDER BY n")
    return [(r[0], r[1], int(r[2])) for r in rows.fetchall()]


def test_s49_the_sync_runs_first_with_the_terminal_word(syncer: Conn) -> None:
    db = syncer
    agent(db, "agent-1")
    create(db, "parent", assignee_agent_profile_id="agent-1")
    create(db, "dependent", assignee_agent_profile_id="agent-1")
    create(db, "done", parent_id="parent")
    block(db, "dependent", "done")
    move(db, "done", "COMPLETED")
    # The sync saw no wake yet; both wakes followed it in the same transaction.
    assert sync_calls(db) == [("done", "done", 0)]
    assert len(runs(db, "task_blockers_resolved")) == 1
    assert len(runs(db, "task_children_completed")) == 1


@pytest.mark.parametrize(
    ("state", "terminal"), [("COMPLETED", "done"), ("FAILED", "failed"), ("CANCELLED", "cancelled")]
)
def test_s49_each_terminal_state_syncs_with_its_word(
    syncer: Conn, state: str, terminal: str
) -> None:
    create(syncer, "T", state="IN_PROGRESS")
    move(syncer, "T", state)
    assert sync_calls(syncer) == [("T", terminal, 0)]


def test_s49_no_sync_for_a_non_terminal_move_or_a_repeat(syncer: Conn) -> None:
    create(syncer, "T")
    move(syncer, "T", "IN_PROGRESS")
    move(syncer, "T", "COMPLETED")
    move(syncer, "T", "COMPLETED")  # no change of state
    assert sync_calls(syncer) == [("T", "done", 0)]


def test_s49_without_a_syncer_there_is_no_error(db: Conn) -> None:
    # A schema without the routines capability: the trigger must not need it.
    if scalar(db, "SELECT to_regprocedure('office.sync_routine_run_status(text,text)')"):
        db.execute(
            "ALTER EXTENSION office DROP FUNCTION office.sync_routine_run_status(text, text)"
        )
        db.execute("DROP FUNCTION office.sync_routine_run_status(text, text)")
    assert scalar(db, "SELECT to_regprocedure('office.sync_routine_run_status(text,text)')") is None
    create(db, "T")
    assert move(db, "T", "COMPLETED")["state"] == "COMPLETED"


def test_a_failing_syncer_is_a_warning_and_the_wakes_still_happen(db: Conn) -> None:
    db.execute(
        "CREATE OR REPLACE FUNCTION office.sync_routine_run_status(task_id text, terminal text)"
        " RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp"
        " AS $$ BEGIN INSERT INTO office.runs (agent_profile_id, reason) VALUES ('x', 'y');"
        " RAISE EXCEPTION 'routine store unavailable'; END $$"
    )
    notices: list[str] = []
    db.add_notice_handler(lambda diag: notices.append(f"{diag.severity}: {diag.message_primary}"))
    agent(db, "agent-1")
    create(db, "dependent", assignee_agent_profile_id="agent-1")
    create(db, "blocker")
    block(db, "dependent", "blocker")
    assert move(db, "blocker", "COMPLETED")["state"] == "COMPLETED"
    assert any(
        n.startswith("WARNING") and "routine store unavailable" in n and "blocker" in n
        for n in notices
    ), notices
    assert [r["reason"] for r in runs(db) if r["reason"] == "y"] == []  # its writes undone
    assert len(runs(db, "task_blockers_resolved")) == 1


def test_the_effects_are_atomic_with_the_move(db: Conn) -> None:
    agent(db, "agent-1")
    create(db, "parent", assignee_agent_profile_id="agent-1")
    create(db, "child", parent_id="parent")
    with pytest.raises(psycopg.errors.RaiseException), db.transaction():
        move(db, "child", "COMPLETED")
        assert len(children_completed(db)) == 1
        db.execute("DO $$ BEGIN RAISE EXCEPTION 'caller changes its mind'; END $$")
    assert children_completed(db) == []
    assert scalar(db, "SELECT state FROM office.tasks WHERE id = 'child'") == "TODO"
