"""Tasks and assignment generations (docs/api.md §2; docs/domain.md §2.8-§2.12):
scenarios 16-21 and 27-31 of docs/domain.md §5 as outcomes returned by SQL, the
create path, the readers, bad input and roles. The event-subscriber scenarios
(22-26, 29) are in tests/daemon/test_subscriber.py, the races in test_tasks_races.py.

The helpers it shares with them are in tests/scenarios/tasks.py."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from controlplane import keys
from tests.harness import scalar
from tests.scenarios.tasks import (
    Conn,
    agent,
    assign,
    call,
    claim_and_age,
    create,
    events,
    footprint,
    keyless_stats,
    move,
    run_keys,
    runs,
    sqlstate_of,
    task,
)

STATES = (
    "TODO",
    "CREATED",
    "SCHEDULING",
    "IN_PROGRESS",
    "REVIEW",
    "BLOCKED",
    "WAITING_FOR_INPUT",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
)


# --- create ---------------------------------------------------------------------


def test_s28_create_with_assignee_and_step_is_generation_1_with_one_run(db: Conn) -> None:
    agent(db, "A")
    result = create(db, "T1", workflow_step_id="step-1", assignee_agent_profile_id="A")
    assert result["task_id"] == "T1"
    assert result["assignment_generation"] == 1
    assert result["outcome"] == "queued" and result["dedup_kind"] is None
    assert run_keys(db) == ["task_assigned:T1:A:1"]
    [run] = runs(db)
    assert run["id"] == result["run_id"]
    assert run["reason"] == "task_assigned" and run["task_id"] == "T1"
    assert run["agent_profile_id"] == "A"
    [event] = events(db, "task.assigned")
    assert event["payload"]["assignment_generation"] == 1
    assert event["payload"]["agent_profile_id"] == "A"
    assert task(db, "T1")["assignment_generation"] == 1


def test_s28_create_unassigned_is_generation_0_and_the_first_assignment_commits_1(
    db: Conn,
) -> None:
    agent(db, "A")
    result = create(db, "T1", workflow_step_id="step-1")
    assert (result["assignment_generation"], result["outcome"], result["run_id"]) == (0, None, None)
    assert runs(db) == [] and events(db, "task.assigned") == []
    first = assign(db, "T1", "A")
    assert first["assignment_generation"] == 1 and first["outcome"] == "queued"
    assert run_keys(db) == ["task_assigned:T1:A:1"]


def test_create_with_assignee_but_no_step_is_generation_0_and_keyed_0(db: Conn) -> None:
    agent(db, "A")
    result = create(db, "T1", assignee_agent_profile_id="A")
    assert result["assignment_generation"] == 0 and result["outcome"] == "queued"
    assert run_keys(db) == ["task_assigned:T1:A:0"]
    # An empty step counts as no step.
    result = create(db, "T2", workflow_step_id="", assignee_agent_profile_id="A")
    assert result["assignment_generation"] == 0


def test_create_defaults_and_generated_id(db: Conn) -> None:
    result = create(db, None)  # type: ignore[arg-type]
    row = task(db, result["task_id"])
    assert len(result["task_id"]) == 36
    assert row["state"] == "TODO" and row["title"] == "" and row["is_office"] is True
    assert row["is_ephemeral"] is False and row["archived_at"] is None
    assert row["parent_id"] is None and row["assignee_agent_profile_id"] is None


def test_a_non_office_task_gets_no_run_but_its_event(db: Conn) -> None:
    agent(db, "A")
    result = create(db, "T1", workflow_step_id="s", assignee_agent_profile_id="A", is_office=False)
    assert result["assignment_generation"] == 1 and result["outcome"] is None
    assert runs(db) == []
    assert events(db, "task.assigned")[0]["payload"]["is_office"] is False
    assert assign(db, "T1", "A")["outcome"] is None
    assert runs(db) == []


def test_a_task_created_terminal_runs_no_terminal_effects(db: Conn) -> None:
    agent(db, "P")
    create(db, "parent", assignee_agent_profile_id="P")
    create(db, "child", parent_id="parent", state="COMPLETED")
    assert runs(db, "task_children_completed") == []
    assert events(db, "task.moved") == []


def test_create_with_a_paused_assignee_commits_the_task_and_skips_the_run(db: Conn) -> None:
    agent(db, "A", status="paused")
    result = create(db, "T1", workflow_step_id="s", assignee_agent_profile_id="A")
    assert result["outcome"] == "skipped" and result["run_id"] is None
    assert result["assignment_generation"] == 1
    assert runs(db) == []
    assert task(db, "T1")["assignee_agent_profile_id"] == "A"


# --- assign: docs/domain.md §5 scenarios 16-21, 27, 31 ---------------------------------


def test_s16_a_b_a_past_the_window_gives_three_keys_and_three_queued_runs(db: Conn) -> None:
    agent(db, "A")
    agent(db, "B")
    first = create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    claim_and_age(db, first["run_id"], "1 minute")
    second = assign(db, "T", "B")
    claim_and_age(db, second["run_id"], "1 minute")
    third = assign(db, "T", "A")
    assert [first["outcome"], second["outcome"], third["outcome"]] == ["queued"] * 3
    assert [second["assignment_generation"], third["assignment_generation"]] == [2, 3]
    assert run_keys(db) == [
        "task_assigned:T:A:1",
        "task_assigned:T:B:2",
        "task_assigned:T:A:3",
    ]


def test_s17_a_b_a_inside_the_window_is_never_deduped(db: Conn) -> None:
    agent(db, "A")
    agent(db, "B")
    create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    assign(db, "T", "B")
    third = assign(db, "T", "A")
    assert third["assignment_generation"] == 3
    assert third["outcome"] in ("queued", "coalesced")
    assert third["dedup_kind"] is None


def test_s18_same_agent_again_bumps_and_wakes_without_interrupt(db: Conn) -> None:
    agent(db, "A")
    first = create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    again = assign(db, "T", "A")
    assert again["assignment_generation"] == 2
    assert again["interrupt"] is False
    assert again["outcome"] in ("queued", "coalesced")
    claim_and_age(db, first["run_id"])
    once_more = assign(db, "T", "A")
    assert (once_more["assignment_generation"], once_more["outcome"]) == (3, "queued")
    assert "task_assigned:T:A:3" in run_keys(db)


def test_s19_a_different_agent_interrupts(db: Conn) -> None:
    agent(db, "A")
    agent(db, "B")
    create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    result = assign(db, "T", "B")
    assert result["interrupt"] is True and result["outcome"] == "queued"
    # From nobody to someone is not an interrupt.
    create(db, "U")
    assert assign(db, "U", "A")["interrupt"] is False


def test_s20_unassignment_bumps_queues_nothing_and_counts_nothing(db: Conn) -> None:
    agent(db, "A")
    first = create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    claim_and_age(db, first["run_id"])
    unassigned = assign(db, "T", None)
    assert unassigned["assignment_generation"] == 2
    assert unassigned["interrupt"] is True  # unassigning A interrupts A
    assert (unassigned["outcome"], unassigned["run_id"]) == (None, None)
    assert run_keys(db) == ["task_assigned:T:A:1"]
    assert keyless_stats(db) == {}
    again = assign(db, "T", "A")
    assert (again["assignment_generation"], again["outcome"]) == (3, "queued")
    assert run_keys(db) == ["task_assigned:T:A:1", "task_assigned:T:A:3"]
    # '' is an unassignment too, and stored as NULL.
    empty = assign(db, "T", "")
    assert empty["assignment_generation"] == 4 and empty["outcome"] is None
    assert task(db, "T")["assignee_agent_profile_id"] is None


def test_s21_repeat_after_the_lookback_window_queues(db: Conn) -> None:
    agent(db, "A")
    first = create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    claim_and_age(db, first["run_id"], "25 hours")
    result = assign(db, "T", "A")
    assert result["outcome"] == "queued"
    assert result["run_id"] != first["run_id"]


def test_s27_assign_task_always_carries_its_generation(db: Conn) -> None:
    # The reactivity path of the original could lose the generation and go
    # keyless (nil_mutation_generation). assign_task returns the value its own
    # UPDATE committed, so every run it asks for is keyed.
    agent(db, "A")
    agent(db, "B")
    create(db, "T", workflow_step_id="s")
    for who in ("A", "B", None, "A", "A"):
        assign(db, "T", who)
    assert all(key is not None for key in run_keys(db))
    assert keyless_stats(db) == {}


def test_s31_a_rolled_back_assignment_leaves_no_trace(db: Conn) -> None:
    agent(db, "A")
    agent(db, "B")
    create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    before = footprint(db)
    with db.transaction(force_rollback=True):
        result = assign(db, "T", "B")
        assert result["assignment_generation"] == 2
    assert footprint(db) == before
    row = task(db, "T")
    assert (row["assignee_agent_profile_id"], row["assignment_generation"]) == ("A", 1)
    # The next committed assignment mints 2, exactly once.
    assert assign(db, "T", "B")["assignment_generation"] == 2


def test_assign_to_an_agent_that_does_not_accept_runs_commits_and_skips(db: Conn) -> None:
    for status in ("paused", "stopped", "pending_approval"):
        agent(db, status, status=status)
    create(db, "T", workflow_step_id="s")
    for number, status in enumerate(("paused", "stopped", "pending_approval"), start=1):
        result = assign(db, "T", status)
        assert result["outcome"] == "skipped" and result["run_id"] is None
        assert result["assignment_generation"] == number
    assert runs(db) == []
    assert task(db, "T")["assignee_agent_profile_id"] == "pending_approval"


def test_the_key_is_the_python_builders_key(db: Conn) -> None:
    agent(db, "agent-A")
    create(db, "task-1", workflow_step_id="s")
    result = assign(db, "task-1", "agent-A")
    [run] = runs(db)
    assert run["idempotency_key"] == keys.assignment_key(
        "task-1", "agent-A", result["assignment_generation"]
    )
    assert run["payload"] == {
        "task_id": "task-1",
        "agent_profile_id": "agent-A",
        "assignment_generation": 1,
    }


def test_the_event_carries_actor_and_previous_assignee(db: Conn) -> None:
    agent(db, "A")
    agent(db, "B")
    create(db, "T", assignee_agent_profile_id="A")
    assign(db, "T", "B", actor_id="u-7", actor_type="agent")
    assign(db, "T", None, actor_type="system")
    db.execute("UPDATE office.tasks SET assignee_agent_profile_id = 'A' WHERE id = 'T'")
    payloads = [e["payload"] for e in events(db, "task.assigned")]
    assert [(p["agent_profile_id"], p["previous_agent_profile_id"]) for p in payloads] == [
        ("A", None),
        ("B", "A"),
        (None, "B"),
        ("A", None),
    ]
    assert [p["assignment_generation"] for p in payloads] == [0, 1, 2, 3]
    assert [p["actor"] for p in payloads] == [
        None,
        {"id": "u-7", "type": "agent"},
        {"id": None, "type": "system"},
        None,  # a plain UPDATE has no actor, even later in a transaction
    ]


def test_the_actor_does_not_leak_into_a_later_plain_update(db: Conn) -> None:
    agent(db, "A")
    create(db, "T")
    with db.transaction():
        assign(db, "T", "A", actor_id="u-1")
        db.execute("UPDATE office.tasks SET assignee_agent_profile_id = NULL WHERE id = 'T'")
    assert [e["payload"]["actor"] for e in events(db, "task.assigned")] == [
        {"id": "u-1", "type": "user"},
        None,
    ]


# --- move, archive, readers ---------------------------------------------------------


def test_move_sets_the_state_and_stamps_updated_at(db: Conn) -> None:
    create(db, "T")
    before = task(db, "T")["updated_at"]
    row = move(db, "T", "IN_PROGRESS")
    assert row["state"] == "IN_PROGRESS" and row["updated_at"] > before
    [event] = events(db, "task.moved")
    assert event["payload"] == {
        "task_id": "T",
        "workspace_id": "w1",
        "from_state": "TODO",
        "to_state": "IN_PROGRESS",
    }


def test_every_state_is_accepted(db: Conn) -> None:
    create(db, "T")
    for state in STATES:
        assert move(db, "T", state)["state"] == state


def test_archive_sets_archived_at_once(db: Conn) -> None:
    create(db, "T")
    first = call(db, "archive_task", task_id="T")
    assert first["archived_at"] is not None
    again = call(db, "archive_task", task_id="T")
    assert again["archived_at"] == first["archived_at"]


@pytest.mark.parametrize(
    ("state", "archived", "expected"),
    [
        ("TODO", False, ""),
        ("IN_PROGRESS", False, ""),
        ("BLOCKED", False, ""),
        ("COMPLETED", False, "done"),
        ("FAILED", False, "failed"),
        ("CANCELLED", False, "cancelled"),
        ("IN_PROGRESS", True, "cancelled"),
        ("COMPLETED", True, "cancelled"),
    ],
)
def test_task_terminal_status(db: Conn, state: str, archived: bool, expected: str) -> None:
    create(db, "T", state=state)
    if archived:
        call(db, "archive_task", task_id="T")
    assert scalar(db, "SELECT office.task_terminal_status('T')") == expected


def test_task_terminal_status_of_a_missing_task(db: Conn) -> None:
    assert scalar(db, "SELECT office.task_terminal_status('nope')") == "missing"
    assert scalar(db, "SELECT office.task_terminal_status(NULL)") == "missing"


@pytest.mark.parametrize("state", STATES)
def test_is_task_terminal(db: Conn, state: str) -> None:
    create(db, "T", state=state)
    expected = state in ("COMPLETED", "FAILED", "CANCELLED")
    assert scalar(db, "SELECT office.is_task_terminal('T')") is expected


def test_get_task(db: Conn) -> None:
    create(db, "T", title="hello")
    rows = db.execute("SELECT id, title FROM office.get_task('T')").fetchall()
    assert rows == [("T", "hello")]
    assert db.execute("SELECT * FROM office.get_task('nope')").fetchall() == []


# --- bad input: the SQLSTATE, and nothing written ----------------------------------


@pytest.fixture
def populated(db: Conn) -> Conn:
    agent(db, "A")
    create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    create(db, "U")
    create(db, "V", workspace="w2")
    return db


BAD_CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("22023", "move_task", {"task_id": "T", "state": "DONE"}),
    ("22023", "move_task", {"task_id": "T", "state": "completed"}),
    ("22023", "move_task", {"task_id": "T", "state": None}),
    ("22023", "move_task", {"task_id": "nope", "state": "DONE"}),
    ("OFT01", "move_task", {"task_id": "nope", "state": "COMPLETED"}),
    ("OFT01", "assign_task", {"task_id": "nope", "assignee_agent_profile_id": "A"}),
    ("OFT01", "assign_task", {"task_id": None, "assignee_agent_profile_id": None}),
    ("OFA01", "assign_task", {"task_id": "T", "assignee_agent_profile_id": "ghost"}),
    (
        "22023",
        "assign_task",
        {"task_id": "T", "assignee_agent_profile_id": "A", "actor_type": "robot"},
    ),
    ("OFT01", "archive_task", {"task_id": "nope"}),
    ("OFT01", "is_task_terminal", {"task_id": "nope"}),
    ("OFT01", "add_blocker", {"task_id": "T", "blocker_task_id": "nope"}),
    ("OFT01", "add_blocker", {"task_id": "nope", "blocker_task_id": "T"}),
    ("OFT01", "remove_blocker", {"task_id": "nope", "blocker_task_id": "T"}),
    ("22023", "add_blocker", {"task_id": "T", "blocker_task_id": "T"}),
    ("22023", "create_task", {"workspace_id": ""}),
    ("22023", "create_task", {"workspace_id": None}),
    ("22023", "create_task", {"workspace_id": "w:1"}),
    ("22023", "create_task", {"workspace_id": "w1", "id": ""}),
    ("22023", "create_task", {"workspace_id": "w1", "id": "a,b"}),
    ("22023", "create_task", {"workspace_id": "w1", "id": "a:b"}),
    ("22023", "create_task", {"workspace_id": "w1", "id": "x" * 201}),
    ("22023", "create_task", {"workspace_id": "w1", "state": "DONE"}),
    ("OFT01", "create_task", {"workspace_id": "w1", "parent_id": "nope"}),
    ("OFA01", "create_task", {"workspace_id": "w1", "assignee_agent_profile_id": "ghost"}),
    ("23505", "create_task", {"workspace_id": "w1", "id": "T"}),
    # Bounds on what is stored (docs/api.md Conventions).
    ("22023", "create_task", {"workspace_id": "w1", "title": "x" * 65537}),
    ("22023", "create_task", {"workspace_id": "w1", "title": "é" * 32769}),
    ("22023", "create_task", {"workspace_id": "w1", "workflow_step_id": "s" * 201}),
    ("22023", "create_task", {"workspace_id": "w1", "workflow_step_id": "s\n1"}),
    (
        "22023",
        "assign_task",
        {"task_id": "T", "assignee_agent_profile_id": "A", "actor_id": "u" * 201},
    ),
    (
        "22023",
        "assign_task",
        {"task_id": "T", "assignee_agent_profile_id": "A", "actor_id": "u\x01"},
    ),
    # Workspaces do not mix.
    ("OFW01", "create_task", {"workspace_id": "w2", "parent_id": "T"}),
    ("OFW01", "create_task", {"workspace_id": "w2", "assignee_agent_profile_id": "A"}),
    ("OFW01", "assign_task", {"task_id": "V", "assignee_agent_profile_id": "A"}),
    ("OFW01", "add_blocker", {"task_id": "T", "blocker_task_id": "V"}),
    ("OFW01", "add_blocker", {"task_id": "V", "blocker_task_id": "U"}),
]


@pytest.mark.parametrize(
    ("sqlstate", "function", "args"), BAD_CALLS, ids=[f"{c[1]}-{c[0]}" for c in BAD_CALLS]
)
def test_bad_input_raises_its_sqlstate_and_writes_nothing(
    populated: Conn, sqlstate: str, function: str, args: dict[str, Any]
) -> None:
    before = footprint(populated)
    assert sqlstate_of(populated, function, **args) == sqlstate
    assert footprint(populated) == before


def test_messages_name_the_offending_value(populated: Conn) -> None:
    cases = [
        ("move_task", {"task_id": "T", "state": "DONE"}, "'DONE'"),
        ("move_task", {"task_id": "nope", "state": "TODO"}, "'nope'"),
        ("assign_task", {"task_id": "T", "assignee_agent_profile_id": "ghost"}, "'ghost'"),
        ("create_task", {"workspace_id": "w1", "parent_id": "nope"}, "'nope'"),
        ("create_task", {"workspace_id": "w1", "id": "T"}, "task 'T' already exists"),
        ("create_task", {"workspace_id": "w1", "title": "x" * 65537}, "title"),
        ("create_task", {"workspace_id": "w1", "workflow_step_id": "s" * 201}, "workflow_step_id"),
        (
            "create_task",
            {"workspace_id": "w2", "parent_id": "T", "id": "C"},
            "task 'C' of workspace 'w2' cannot have parent task 'T' of workspace 'w1'",
        ),
        (
            "assign_task",
            {"task_id": "V", "assignee_agent_profile_id": "A"},
            "task 'V' of workspace 'w2' cannot be assigned to agent 'A' of workspace 'w1'",
        ),
        (
            "add_blocker",
            {"task_id": "T", "blocker_task_id": "V"},
            "task 'T' of workspace 'w1' cannot be blocked by task 'V' of workspace 'w2'",
        ),
        (
            "assign_task",
            {"task_id": "T", "assignee_agent_profile_id": "A", "actor_id": "u" * 201},
            "actor_id",
        ),
    ]
    for function, args, value in cases:
        with pytest.raises(psycopg.Error) as caught:
            call(populated, function, **args)
        assert value in str(caught.value), (function, str(caught.value))


def test_the_generation_cannot_be_written_by_hand(populated: Conn) -> None:
    before = footprint(populated)
    with pytest.raises(psycopg.Error) as caught:
        populated.execute("UPDATE office.tasks SET assignment_generation = 0 WHERE id = 'T'")
    assert caught.value.sqlstate == "22023"
    assert footprint(populated) == before


def test_a_bad_state_in_a_plain_update_is_refused_by_the_table(populated: Conn) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        populated.execute("UPDATE office.tasks SET state = 'DONE' WHERE id = 'T'")


# --- roles ----------------------------------------------------------------------------

GRANTS = {
    "office_producer": [
        "create_task(text,text,text,text,text,text,text,boolean,boolean)",
        "assign_task(text,text,text,text)",
        "move_task(text,text)",
        "archive_task(text)",
        "add_blocker(text,text)",
        "remove_blocker(text,text)",
        "get_task(text)",
    ],
    "office_worker": [
        "claim_events(text,integer,interval)",
        "ack_events(bigint[])",
        "get_task(text)",
    ],
    "office_reader": [
        "task_terminal_status(text)",
        "is_task_terminal(text)",
        "child_set_key(text)",
        "child_generation(text)",
        "get_task(text)",
    ],
}


@pytest.mark.parametrize("role", sorted(GRANTS))
def test_each_role_executes_what_its_job_needs(db: Conn, role: str) -> None:
    everything = sorted({f for functions in GRANTS.values() for f in functions})
    for function in everything:
        allowed = scalar(
            db,
            "SELECT has_function_privilege(%s, %s, 'EXECUTE')",
            [role, f"office.{function}"],
        )
        assert allowed is (function in GRANTS[role]), (role, function)
        assert scalar(
            db,
            "SELECT has_function_privilege('office_admin', %s, 'EXECUTE')",
            [f"office.{function}"],
        )


def test_a_producer_role_can_drive_tasks_without_table_privileges(db: Conn) -> None:
    agent(db, "A")
    db.execute("DROP ROLE IF EXISTS office_test_producer_login")
    db.execute("CREATE ROLE office_test_producer_login LOGIN IN ROLE office_producer")
    try:
        with db.transaction(force_rollback=True):
            db.execute("SET LOCAL ROLE office_test_producer_login")
            create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
            create(db, "B")
            call(db, "add_blocker", task_id="T", blocker_task_id="B")
            assert assign(db, "T", "A")["assignment_generation"] == 2
            move(db, "B", "COMPLETED")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute("SELECT * FROM office.tasks")
    finally:
        db.execute("DROP ROLE office_test_producer_login")


# --- workspaces do not mix, through plain SQL (docs/api.md Conventions) ------------------------


def test_plain_sql_cannot_cross_workspaces(populated: Conn) -> None:
    db = populated
    cases = [
        "INSERT INTO office.tasks (id, workspace_id, parent_id) VALUES ('C', 'w2', 'T')",
        "INSERT INTO office.tasks (id, workspace_id, assignee_agent_profile_id)"
        " VALUES ('C', 'w2', 'A')",
        "UPDATE office.tasks SET parent_id = 'T' WHERE id = 'V'",
        "UPDATE office.tasks SET assignee_agent_profile_id = 'A' WHERE id = 'V'",
        "UPDATE office.tasks SET workspace_id = 'w2' WHERE id = 'T'",  # its assignee stays in w1
        "INSERT INTO office.task_blockers (task_id, blocker_task_id) VALUES ('V', 'U')",
    ]
    for statement in cases:
        before = footprint(db)
        with pytest.raises(psycopg.Error) as caught:
            db.execute(statement)
        assert caught.value.sqlstate == "OFW01", statement
        assert footprint(db) == before, statement


def test_a_task_moves_only_with_everything_it_references(populated: Conn) -> None:
    db = populated
    create(db, "P")
    create(db, "C", parent_id="P")
    create(db, "B")
    call(db, "add_blocker", task_id="P", blocker_task_id="B")
    for statement, named in [
        ("UPDATE office.tasks SET workspace_id = 'w2' WHERE id = 'P'", "child task 'C'"),
        ("UPDATE office.tasks SET workspace_id = 'w2' WHERE id = 'C'", "parent task 'P'"),
        ("UPDATE office.tasks SET workspace_id = 'w2' WHERE id IN ('P', 'C')", "task 'B'"),
    ]:
        with pytest.raises(psycopg.Error) as caught:
            db.execute(statement)
        assert caught.value.sqlstate == "OFW01"
        assert named in str(caught.value) and "'w2'" in str(caught.value)
    # The whole connected set in one statement is consistent.
    db.execute("UPDATE office.tasks SET workspace_id = 'w2' WHERE id IN ('P', 'C', 'B')")
    assert scalar(db, "SELECT count(*) FROM office.tasks WHERE workspace_id = 'w2'") == 4


def test_rows_from_before_the_upgrade_are_not_rechecked(populated: Conn) -> None:
    db = populated
    # Cross-workspace rows as 0.3.0 allowed them (written with triggers off).
    db.execute("SET session_replication_role = replica")
    db.execute(
        "INSERT INTO office.tasks (id, workspace_id, parent_id, assignee_agent_profile_id)"
        " VALUES ('L', 'w2', 'T', 'A')"
    )
    db.execute("INSERT INTO office.task_blockers (task_id, blocker_task_id) VALUES ('L', 'U')")
    db.execute("SET session_replication_role = origin")
    # Writes that leave those references alone go through...
    move(db, "L", "IN_PROGRESS")
    db.execute("UPDATE office.tasks SET title = 'renamed', parent_id = 'T' WHERE id = 'L'")
    assert assign(db, "L", "A")["assignment_generation"] == 1
    move(db, "U", "COMPLETED")
    # ... a new reference does not.
    create(db, "T2")
    with pytest.raises(psycopg.Error) as caught:
        db.execute("UPDATE office.tasks SET parent_id = 'T2' WHERE id = 'L'")
    assert caught.value.sqlstate == "OFW01"
