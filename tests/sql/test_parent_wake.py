"""Parent wakes (docs/api.md §5; docs/domain.md §1.7, §2.19-§2.22): scenarios 57-68
and 75 of docs/domain.md §5 as outcomes returned by SQL and by both clients, the
marks that keep the sweep's cost to the touched parents, bad input and roles.
The races are in test_parent_wake_races.py, the property test in
test_parent_wake_property.py.

The helpers it shares with them are in tests/scenarios/parent_wake.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane import keys
from controlplane.aio import AsyncOffice
from controlplane.client import Office
from controlplane.errors import InvalidArgument, TaskNotFound
from controlplane.models import (
    DedupKind,
    ProducerOutcome,
    ReconcileResult,
    SkippedReason,
    StuckParent,
)
from controlplane.observability import (
    MSG_WAKE_ASSIGNEE_UNRESOLVED,
    MSG_WAKE_CANDIDATE,
    MSG_WAKE_EMITTED,
    PARENT_WAKE_LOGGER,
)
from tests.harness import scalar
from tests.scenarios.parent_wake import (
    T0,
    WAKE,
    candidates,
    marked,
    receipt,
    reconcile,
    scanned,
    settle,
    stuck,
    stuck_parent,
    sweep,
    wakes,
    wave,
    write,
)
from tests.scenarios.tasks import Conn, agent, call, create, move

VECTOR_ID = (
    "task_children_completed:parent-1:"
    "077c67d49943b1b9eb3a36842433dd6399e55f55fe54f5e86a5efb24d56e4fdc"
)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def office(dsn: str, registry: CollectorRegistry) -> Iterator[Office]:
    with Office(dsn, registry=registry) as client:
        yield client


def counted(registry: CollectorRegistry, what: str) -> float:
    return registry.get_sample_value(f"office_parent_wake_{what}_total") or 0.0


THREE = {"c1": ("COMPLETED", "05:00"), "c2": ("CANCELLED", "06:00"), "c3": ("COMPLETED", "07:00")}


# --- 57: the sweep --------------------------------------------------------------------


def test_s57_one_tick_wakes_the_parent_once_with_a_receipt_and_the_next_does_nothing(
    db: Conn,
) -> None:
    stuck_parent(db, "P", THREE)
    assert wakes(db) == []
    [result] = sweep(db)
    child_set, generation = wave(db, "P")
    assert (child_set, generation) == ("c1:COMPLETED,c2:CANCELLED,c3:COMPLETED", f"{T0}07:00")
    op = keys.wake_operation_id("P", child_set, generation)
    assert op
    assert result == {
        "parent_task_id": "P",
        "delivered": True,
        "operation_id": op,
        "outcome": "queued",
        "dedup_kind": None,
        "run_id": result["run_id"],
        "skipped_reason": None,
    }
    [run] = wakes(db)
    assert (run["id"], run["idempotency_key"], run["task_id"]) == (result["run_id"], op, "P")
    assert (run["agent_profile_id"], run["status"]) == ("agent-P", "queued")
    assert run["payload"]["child_set_key"] == child_set
    assert run["payload"]["child_generation"] == generation
    assert run["payload"]["operation_id"] == op
    row = receipt(db, "P")
    assert row is not None
    assert (row["child_set_key"], row["delivered_run_id"]) == (child_set, run["id"])
    assert (row["delivery_operation_id"], row["child_generation"]) == (op, generation)

    assert sweep(db) == []
    settle(db, "P")  # the run finished long ago: the receipt alone holds the parent
    assert sweep(db) == []
    assert len(wakes(db)) == 1
    assert marked(db) == set()


# --- 58: reopened child, same key -----------------------------------------------------


def test_s58_a_reopened_and_recompleted_child_is_readmitted_by_its_generation(db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    [first] = sweep(db)
    settle(db, "P")
    before = receipt(db, "P")
    assert before is not None

    # Reopened and recompleted while the agent was paused: the edge path woke
    # nobody, and the child set key is byte-identical.
    call(db, "set_agent_status", id="agent-P", status="paused")
    write(db, "c1", "20:00", "IN_PROGRESS")
    write(db, "c1", "21:00", "COMPLETED")
    call(db, "set_agent_status", id="agent-P", status="idle")
    assert wakes(db, "P")[1:] == []

    [candidate] = candidates(db)
    assert candidate["child_set_key"] == before["child_set_key"]  # arm (a) false
    assert before["delivery_operation_id"] != ""  # arm (b) false
    assert candidate["newest_child_updated_at"] == f"{T0}21:00"  # arm (c)
    [second] = sweep(db)
    assert second["delivered"] and second["outcome"] == "queued"
    assert second["operation_id"] != first["operation_id"]
    assert second["operation_id"] == keys.wake_operation_id(
        "P", before["child_set_key"], f"{T0}21:00"
    )
    after = receipt(db, "P")
    assert after is not None
    assert after["child_generation"] == f"{T0}21:00"
    assert after["delivery_operation_id"] == second["operation_id"]
    assert after["delivered_run_id"] == second["run_id"] != first["run_id"]
    assert len(wakes(db, "P")) == 2
    assert sweep(db) == []


# --- 59: runs evidence ----------------------------------------------------------------


def wake_run(conn: Conn, parent: str, status: str, requested_at: str, key: str = "k") -> str:
    run_id = call(
        conn,
        "enqueue_run",
        agent_profile_id="agent-P",
        reason=WAKE,
        idempotency_key=f"{key}-{status}",
        task_id=parent,
    )["run_id"]
    conn.execute(
        "UPDATE office.runs SET status = %s, requested_at = %s WHERE id = %s",
        [status, requested_at, run_id],
    )
    return str(run_id)


@pytest.mark.parametrize("status", ["queued", "claimed", "finished", "failed", "cancelled"])
@pytest.mark.parametrize("requested", ["10:00.000", "10:00.999", "30:00"])
def test_s59_a_wake_run_at_or_after_the_newest_child_change_excludes_the_parent(
    db: Conn, status: str, requested: str
) -> None:
    stuck_parent(db, "P", {"c1": ("COMPLETED", "05:00"), "c2": ("CANCELLED", "10:00.400")})
    assert stuck(db) == ["P"]
    wake_run(db, "P", status, f"{T0}{requested}+00")
    assert stuck(db) == [] == scanned(db)
    assert sweep(db) == []


@pytest.mark.parametrize("status", ["queued", "claimed"])
def test_s59_a_wake_run_in_flight_excludes_the_parent_whenever_it_was_requested(
    db: Conn, status: str
) -> None:
    stuck_parent(db, "P", {"c1": ("COMPLETED", "05:00")})
    wake_run(db, "P", status, "2020-01-01 00:00:00+00")
    assert stuck(db) == [] == scanned(db)


@pytest.mark.parametrize("status", ["finished", "failed", "cancelled"])
def test_s59_a_terminal_run_before_a_later_child_completion_no_longer_excludes(
    db: Conn, status: str
) -> None:
    stuck_parent(db, "P", {"c1": ("COMPLETED", "05:00"), "c2": ("COMPLETED", "10:00")})
    wake_run(db, "P", status, f"{T0}09:59.999+00")
    assert stuck(db) == ["P"] == scanned(db)
    [result] = sweep(db)
    assert result["delivered"] and result["outcome"] == "queued"


def test_s59_runs_of_another_reason_or_task_are_no_evidence(db: Conn) -> None:
    stuck_parent(db, "P", {"c1": ("COMPLETED", "05:00")})
    create(db, "other")
    call(db, "enqueue_run", agent_profile_id="agent-P", reason="task_comment", task_id="P")
    call(db, "enqueue_run", agent_profile_id="agent-P", reason=WAKE, task_id="other")
    assert stuck(db) == ["P"]


def test_s59_the_reason_argument_chooses_the_evidence(db: Conn) -> None:
    stuck_parent(db, "P", {"c1": ("COMPLETED", "05:00")})
    wake_run(db, "P", "queued", f"{T0}30:00+00")
    assert stuck(db) == []
    assert stuck(db, reason="children_completed") == ["P"]  # the older engine reason
    call(
        db,
        "enqueue_run",
        agent_profile_id="agent-P",
        reason="children_completed",
        task_id="P",
        idempotency_key="old",
    )
    assert stuck(db, reason="children_completed") == []


# --- 60: candidate exclusions ---------------------------------------------------------


EXCLUSIONS = [
    "not_office",
    "only_archived_children",
    "ephemeral",
    "parent_completed",
    "parent_cancelled",
    "parent_archived",
    "no_runner",
    "paused",
    "stopped",
    "pending_approval",
    "assignee_missing",
    "open_child",
    "failed_child",
]


def excluded_parent(db: Conn, case: str) -> None:
    stuck_parent(
        db,
        "P",
        {"c1": ("COMPLETED", "05:00"), "c2": ("CANCELLED", "06:00")},
        assignee=None if case == "no_runner" else "agent-P",
        is_office=case != "not_office",
        is_ephemeral=case == "ephemeral",
    )
    if case == "only_archived_children":
        call(db, "archive_task", task_id="c1")
        call(db, "archive_task", task_id="c2")
    elif case == "parent_completed":
        move(db, "P", "COMPLETED")
    elif case == "parent_cancelled":
        move(db, "P", "CANCELLED")
    elif case == "parent_archived":
        call(db, "archive_task", task_id="P")
    elif case in ("paused", "stopped", "pending_approval"):
        call(db, "set_agent_status", id="agent-P", status=case)
    elif case == "assignee_missing":
        db.execute("DELETE FROM office.agent_profiles WHERE id = 'agent-P'")
    elif case == "open_child":
        create(db, "c3", parent_id="P", state="IN_PROGRESS")
    elif case == "failed_child":
        create(db, "c3", parent_id="P", state="FAILED")  # FAILED does not finish a wave


@pytest.mark.parametrize("case", EXCLUSIONS)
def test_s60_parents_that_are_never_candidates(db: Conn, case: str) -> None:
    excluded_parent(db, case)
    assert stuck(db) == [] == scanned(db)
    assert sweep(db) == []
    assert wakes(db) == [] and receipt(db, "P") is None
    assert marked(db) == set()  # looked at once, then forgotten


def test_s60_the_same_parent_without_the_exclusion_is_a_candidate(db: Conn) -> None:
    stuck_parent(db, "P", {"c1": ("COMPLETED", "05:00"), "c2": ("CANCELLED", "06:00")})
    create(db, "c3", parent_id="P", state="FAILED")
    call(db, "archive_task", task_id="c3")  # archived children are ignored, FAILED included
    assert stuck(db) == ["P"] == scanned(db)


@pytest.mark.parametrize(
    ("case", "repair"),
    [
        ("not_office", "UPDATE office.tasks SET is_office = true WHERE id = 'P'"),
        ("ephemeral", "UPDATE office.tasks SET is_ephemeral = false WHERE id = 'P'"),
        ("parent_completed", "SELECT office.move_task('P', 'IN_PROGRESS')"),
        ("parent_archived", "UPDATE office.tasks SET archived_at = NULL WHERE id = 'P'"),
        ("no_runner", "SELECT office.upsert_agent('agent-P', 'w1')"),
        ("paused", "SELECT office.set_agent_status('agent-P', 'idle')"),
        ("pending_approval", "SELECT office.set_agent_status('agent-P', 'running')"),
        ("assignee_missing", "SELECT office.upsert_agent('agent-P', 'w1')"),
        ("open_child", "SELECT office.archive_task('c3')"),
        ("failed_child", "DELETE FROM office.tasks WHERE id = 'c3'"),
        ("only_archived_children", "UPDATE office.tasks SET archived_at = NULL WHERE id = 'c2'"),
    ],
)
def test_s60_a_parent_that_stops_being_excluded_is_found_again(
    db: Conn, case: str, repair: str
) -> None:
    excluded_parent(db, case)
    assert sweep(db) == [] and marked(db) == set()
    if case == "no_runner":
        db.execute(repair)
        repair = "SELECT office.assign_task('P', 'agent-P')"
    db.execute(repair)
    assert stuck(db) == ["P"] == scanned(db)
    [result] = sweep(db)
    assert result["delivered"]


# --- 61: no LIMIT starvation ----------------------------------------------------------


def test_s61_delivered_parents_never_take_a_limit_slot(db: Conn) -> None:
    for n in range(1, 9):
        stuck_parent(db, f"p{n}", {f"p{n}-c": ("COMPLETED", "05:00")})
    for n in range(1, 6):
        child_set, generation = wave(db, f"p{n}")
        assert reconcile(db, f"p{n}", child_set, generation)["delivered"]
    # Only the receipts hold p1-p5 back now (their runs are gone).
    db.execute("DELETE FROM office.runs WHERE reason = %s", [WAKE])
    assert stuck(db, 5) == ["p6", "p7", "p8"]
    assert [r["parent_task_id"] for r in sweep(db, 5)] == ["p6", "p7", "p8"]
    assert sweep(db, 5) == []


def test_s61_candidates_are_ordered_bytewise_by_parent_id(db: Conn) -> None:
    for parent in ("b-parent", "B-parent", "_parent", "a-parent"):
        stuck_parent(db, parent, {f"{parent}-c": ("COMPLETED", "05:00")})
    expected = ["B-parent", "_parent", "a-parent", "b-parent"]
    assert stuck(db) == expected == scanned(db)
    assert stuck(db, 2) == expected[:2]
    assert [r["parent_task_id"] for r in sweep(db, 3)] == expected[:3]
    assert stuck(db) == ["b-parent"]


def test_list_and_sweep_check_their_arguments(db: Conn) -> None:
    stuck_parent(db, "P", {"c1": ("COMPLETED", "05:00")})
    assert stuck(db, 0) == [] and sweep(db, 0) == []
    for bad in (
        "SELECT * FROM office.list_stuck_parents(-1)",
        "SELECT * FROM office.list_stuck_parents(NULL)",
        "SELECT * FROM office.list_stuck_parents(5, '')",
        "SELECT * FROM office.sweep_stuck_parents(-1)",
    ):
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            db.execute(bad)
    assert stuck(db) == ["P"]  # defaults: 5 rows, task_children_completed
    assert scalar(db, "SELECT count(*) FROM office.list_stuck_parents()") == 1


# --- 62: the assignee race ------------------------------------------------------------


def test_s62_an_assignee_paused_between_scan_and_reconcile(
    office: Office, registry: CollectorRegistry, db: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    stuck_parent(db, "P", THREE)
    [candidate] = office.list_stuck_parents()
    assert isinstance(candidate, StuckParent)
    office.set_agent_status("agent-P", "paused")
    caplog.set_level(logging.DEBUG, logger=PARENT_WAKE_LOGGER)
    result = office.reconcile_parent(
        candidate.parent_task_id, candidate.child_set_key, candidate.newest_child_updated_at
    )
    assert result == ReconcileResult(
        parent_task_id="P",
        delivered=False,
        outcome=ProducerOutcome.SKIPPED,
        skipped_reason=SkippedReason.ASSIGNEE_UNRESOLVED,
    )
    assert wakes(db) == [] and receipt(db, "P") is None
    assert counted(registry, "assignee_unresolved") == 1
    assert counted(registry, "emitted") == 0
    [record] = [r for r in caplog.records if r.name == PARENT_WAKE_LOGGER]
    assert (record.levelno, record.getMessage()) == (logging.DEBUG, MSG_WAKE_ASSIGNEE_UNRESOLVED)
    assert (record.parent_task_id, record.reason) == ("P", "assignee_unresolved")  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["stopped", "pending_approval", "deleted", "unassigned"])
def test_s62_every_unresolved_assignee_declines_without_a_receipt(db: Conn, how: str) -> None:
    stuck_parent(db, "P", THREE)
    [candidate] = candidates(db)
    if how == "deleted":
        db.execute("DELETE FROM office.agent_profiles WHERE id = 'agent-P'")
    elif how == "unassigned":
        call(db, "assign_task", task_id="P", assignee_agent_profile_id=None)
    else:
        call(db, "set_agent_status", id="agent-P", status=how)
    result = reconcile(db, "P", candidate["child_set_key"], candidate["newest_child_updated_at"])
    assert (result["delivered"], result["outcome"], result["run_id"]) == (False, "skipped", None)
    assert result["skipped_reason"] == "assignee_unresolved"
    assert wakes(db) == [] and receipt(db, "P") is None


# --- 63: a wake that is not accepted --------------------------------------------------


def test_s63_an_enqueue_that_fails_writes_no_receipt(db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    db.execute(
        """
        CREATE FUNCTION public.refuse_wakes() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'the queue is down'; END $$;
        CREATE TRIGGER refuse_wakes BEFORE INSERT ON office.runs
            FOR EACH ROW WHEN (NEW.reason = 'task_children_completed')
            EXECUTE FUNCTION public.refuse_wakes();
        """
    )
    # The sweep goes on; the parent it could not wake is set aside (poison),
    # its failure rolled back, its marks kept.
    assert sweep(db) == []
    assert wakes(db) == [] and receipt(db, "P") is None
    poison = db.execute("SELECT loop, row_id, reason, sqlstate FROM office.poison").fetchall()
    assert poison == [("sweep", "P", "the queue is down", "P0001")]
    assert stuck(db) == []  # set aside: not listed until released
    db.execute("DROP TRIGGER refuse_wakes ON office.runs")
    assert db.execute("SELECT office.release_poison('sweep', 'P')").fetchone() == (True,)
    [result] = sweep(db)
    assert result["delivered"] and receipt(db, "P") is not None


# --- 64: the child set changes between scan and reconcile -----------------------------


@pytest.mark.parametrize(
    "change",
    [
        "SELECT office.move_task('c1', 'IN_PROGRESS')",  # reopened
        "UPDATE office.tasks SET title = 'edited', updated_at = '2026-01-01 00:30:00+00'"
        " WHERE id = 'c1'",  # same set key, newer generation
        "SELECT office.create_task('w1', 'c4', parent_id => 'P')",  # a new open child
        "SELECT office.archive_task('c3')",  # the set shrank
    ],
)
def test_s64_a_child_change_between_scan_and_reconcile_writes_nothing(
    db: Conn, change: str
) -> None:
    stuck_parent(db, "P", THREE)
    [candidate] = candidates(db)
    db.execute(change)
    result = reconcile(db, "P", candidate["child_set_key"], candidate["newest_child_updated_at"])
    assert (result["delivered"], result["outcome"], result["run_id"]) == (False, "skipped", None)
    assert result["skipped_reason"] == "child_set_changed"
    assert wakes(db) == [] and receipt(db, "P") is None


def test_s64_the_next_tick_delivers_the_new_set(db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    [candidate] = candidates(db)
    db.execute("SELECT office.archive_task('c3')")
    assert (
        reconcile(db, "P", candidate["child_set_key"], candidate["newest_child_updated_at"])[
            "skipped_reason"
        ]
        == "child_set_changed"
    )
    [result] = sweep(db)
    assert result["delivered"]
    row = receipt(db, "P")
    assert row is not None and row["child_set_key"] == "c1:COMPLETED,c2:CANCELLED"
    assert row["child_generation"] == f"{T0}06:00"


def test_reconcile_refuses_a_set_that_is_not_a_finished_wave(db: Conn) -> None:
    agent(db, "agent-P")
    create(db, "P", assignee_agent_profile_id="agent-P")
    create(db, "c1", parent_id="P")
    child_set, generation = wave(db, "P")
    result = reconcile(db, "P", child_set, generation)  # c1 is TODO
    assert result["skipped_reason"] == "child_set_changed"
    create(db, "Q", assignee_agent_profile_id="agent-P")
    assert reconcile(db, "Q", "", "")["skipped_reason"] == "child_set_changed"  # no children
    assert wakes(db) == []


def test_reconcile_bad_input(db: Conn) -> None:
    with pytest.raises(psycopg.Error, match="'nope'") as info:
        reconcile(db, "nope", "c:COMPLETED", "2026-01-01 00:00:00")
    assert info.value.sqlstate == "OFT01"
    stuck_parent(db, "P", THREE)
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        db.execute("SELECT office.reconcile_parent('P', NULL, '2026-01-01 00:00:00')")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        db.execute("SELECT office.reconcile_parent('P', 'c1:COMPLETED', NULL)")


# --- 65: edge path and sweep converge -------------------------------------------------


def family(db: Conn, assignee_status: str = "idle") -> None:
    """parent-1 (assigned to agent-P) with child-a and child-b (docs/domain.md §3.5)."""
    agent(db, "agent-P", status=assignee_status)
    create(db, "parent-1", assignee_agent_profile_id="agent-P")
    create(db, "child-a", parent_id="parent-1")
    create(db, "child-b", parent_id="parent-1")


def test_s65_the_sweep_derives_the_vector_id_of_domain_3_5(db: Conn) -> None:
    family(db, assignee_status="paused")  # the edge path wakes nobody
    write(db, "child-a", "05:00", "COMPLETED")
    write(db, "child-b", "10:00.734", "CANCELLED")
    assert wakes(db) == []
    call(db, "set_agent_status", id="agent-P", status="idle")
    [result] = sweep(db)
    assert result["operation_id"] == VECTOR_ID
    assert [r["idempotency_key"] for r in wakes(db)] == [VECTOR_ID]


def test_s65_a_sweep_after_the_edge_path_lands_on_the_edge_paths_run(db: Conn) -> None:
    family(db)
    write(db, "child-a", "05:00", "COMPLETED")
    write(db, "child-b", "10:00.734", "CANCELLED")
    [edge] = wakes(db)
    assert edge["idempotency_key"] == VECTOR_ID
    # The edge run no longer holds the parent back and there is no receipt
    # (the edge path writes none): the sweep finds it and converges by key.
    settle(db, "parent-1", at="2026-01-01 00:00:00+00")
    [result] = sweep(db)
    assert (result["operation_id"], result["outcome"]) == (VECTOR_ID, "deduped")
    assert (result["dedup_kind"], result["run_id"]) == ("durable", edge["id"])  # dated 2026-01-01
    assert len(wakes(db)) == 1
    row = receipt(db, "parent-1")
    assert row is not None and row["delivered_run_id"] == edge["id"]
    assert sweep(db) == []


def test_s65_an_edge_path_after_the_sweep_lands_on_the_sweeps_run(db: Conn) -> None:
    family(db, assignee_status="paused")
    write(db, "child-a", "05:00", "COMPLETED")
    write(db, "child-b", "10:00.100", "COMPLETED")
    call(db, "set_agent_status", id="agent-P", status="idle")
    [result] = sweep(db)
    assert result["operation_id"] == VECTOR_ID  # states are not in the id
    # The same wave through the edge path: a terminal-to-terminal edit in the
    # same second (same ids, same generation).
    write(db, "child-b", "10:00.900", "CANCELLED")
    assert [r["id"] for r in wakes(db)] == [result["run_id"]]


# --- 66: terminal-to-terminal edit ----------------------------------------------------


def test_s66_states_swapped_in_the_same_second_keep_the_operation_id(db: Conn) -> None:
    generation = f"{T0}10:00"
    a = keys.wake_operation_id("parent-1", "child-a:COMPLETED,child-b:CANCELLED", generation)
    b = keys.wake_operation_id("parent-1", "child-a:CANCELLED,child-b:COMPLETED", generation)
    assert a == b == VECTOR_ID
    assert (
        scalar(
            db,
            "SELECT office.wake_operation_id("
            "'parent-1', 'child-a:CANCELLED,child-b:COMPLETED', %s)",
            [generation],
        )
        == VECTOR_ID
    )

    family(db, assignee_status="paused")
    write(db, "child-a", "05:00", "COMPLETED")
    write(db, "child-b", "10:00.200", "CANCELLED")
    call(db, "set_agent_status", id="agent-P", status="idle")
    [first] = sweep(db)
    write(db, "child-a", "10:00.300", "CANCELLED")
    write(db, "child-b", "10:00.400", "COMPLETED")
    assert wave(db, "parent-1") == ("child-a:CANCELLED,child-b:COMPLETED", generation)
    # The child set key changed (arm a), but the run was requested after the
    # newest child change: the runs evidence holds the parent back ...
    assert stuck(db) == []
    # ... until that run is older than the change; then the same operation id
    # lands on the same run and the receipt takes the new key.
    settle(db, "parent-1", at="2026-01-01 00:09:00+00")
    [second] = sweep(db)
    assert (second["operation_id"], second["run_id"]) == (VECTOR_ID, first["run_id"])
    assert second["outcome"] == "deduped"
    row = receipt(db, "parent-1")
    assert row is not None and row["child_set_key"] == "child-a:CANCELLED,child-b:COMPLETED"
    assert len(wakes(db)) == 1


# --- 67: the child set helpers --------------------------------------------------------


def test_s67_the_candidate_fields_are_the_child_set_helpers(db: Conn) -> None:
    stuck_parent(
        db,
        "parent",
        {
            "child-b": ("COMPLETED", "05:00"),
            "child-a": ("CANCELLED", "10:00.999"),
            "child-z": ("FAILED", "20:00"),
        },
    )
    call(db, "archive_task", task_id="child-z")
    write(db, "child-z", "20:00")
    db.execute("SET TimeZone = 'Asia/Tokyo'")
    assert wave(db, "parent") == ("child-a:CANCELLED,child-b:COMPLETED", f"{T0}10:00")
    [candidate] = candidates(db)
    assert candidate == {
        "parent_task_id": "parent",
        "assignee_agent_profile_id": "agent-P",
        "workflow_step_id": None,
        "child_set_key": "child-a:CANCELLED,child-b:COMPLETED",
        "newest_child_updated_at": f"{T0}10:00",
    }


# --- 68: legacy receipts --------------------------------------------------------------


def test_s68_the_receipt_columns_are_replayable_and_default_to_empty(db: Conn) -> None:
    for _ in range(2):
        db.execute(
            "ALTER TABLE office.parent_child_wake_receipts"
            " ADD COLUMN IF NOT EXISTS delivery_operation_id text NOT NULL DEFAULT '',"
            " ADD COLUMN IF NOT EXISTS child_generation text NOT NULL DEFAULT ''"
        )
    rows = db.execute(
        "SELECT column_name, is_nullable, column_default FROM information_schema.columns"
        " WHERE table_schema = 'office' AND table_name = 'parent_child_wake_receipts'"
        " ORDER BY ordinal_position"
    ).fetchall()
    assert rows == [
        ("parent_task_id", "NO", None),
        ("child_set_key", "NO", None),
        ("delivered_run_id", "NO", "''::text"),
        ("delivery_operation_id", "NO", "''::text"),
        ("delivered_at", "NO", "now()"),
        ("child_generation", "NO", "''::text"),
    ]


def legacy_receipt(db: Conn, parent: str, run_id: str, **columns: str) -> None:
    names = ["parent_task_id", "child_set_key", "delivered_run_id", *columns]
    values = [parent, wave(db, parent)[0], run_id, *columns.values()]
    db.execute(
        f"INSERT INTO office.parent_child_wake_receipts ({', '.join(names)})"
        f" VALUES ({', '.join(['%s'] * len(values))})",
        values,
    )


def test_s68_a_legacy_receipt_has_no_generation_which_readmits_its_parent(db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    run_id = wake_run(db, "P", "finished", "2020-01-01 00:00:00+00")  # the legacy delivery
    legacy_receipt(db, "P", run_id)
    row = receipt(db, "P")
    assert row is not None and (row["delivery_operation_id"], row["child_generation"]) == ("", "")
    assert stuck(db) == ["P"] == scanned(db)  # arm (c): '' is not the generation
    [result] = sweep(db)
    assert result["delivered"]
    row = receipt(db, "P")
    assert row is not None and row["child_generation"] == f"{T0}07:00"
    assert row["delivery_operation_id"] == result["operation_id"]
    assert sweep(db) == []


def test_s68_a_legacy_receipt_whose_run_is_gone_has_lost_its_evidence(db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    run_id = wake_run(db, "P", "finished", "2020-01-01 00:00:00+00")
    legacy_receipt(db, "P", run_id, child_generation=f"{T0}07:00")
    assert stuck(db) == []  # same set, same generation, its run exists
    db.execute("DELETE FROM office.runs WHERE id = %s", [run_id])
    assert stuck(db) == ["P"] == scanned(db)  # arm (b)
    # A receipt with an operation id keeps no such arm: its run may be pruned.
    [result] = sweep(db)
    db.execute("DELETE FROM office.runs WHERE id = %s", [result["run_id"]])
    assert stuck(db) == [] == scanned(db)


# --- 75: second-precision equality ----------------------------------------------------


def test_s75_a_microsecond_and_a_whole_second_writer_of_one_second_agree_in_any_zone(
    db: Conn,
) -> None:
    stuck_parent(db, "P", {"c1": ("COMPLETED", "05:00")})
    db.execute("SET TimeZone = 'Asia/Tokyo'")
    write(db, "c1", "2026-01-01 09:10:00.123456+09")  # a microsecond writer
    [delivered] = sweep(db)
    row = receipt(db, "P")
    assert row is not None and row["child_generation"] == f"{T0}10:00"
    settle(db, "P")
    # A whole-second writer of the same second, from another zone: the same
    # generation, so the parent is not re-admitted.
    db.execute("SET TimeZone = 'America/New_York'")
    write(db, "c1", "2025-12-31 19:10:00-05")
    assert "P" in marked(db)
    assert wave(db, "P")[1] == f"{T0}10:00"
    assert stuck(db) == [] and sweep(db) == []
    assert (
        keys.second_precision_text(datetime.fromisoformat("2026-01-01T09:10:00.123456+09:00"))
        == f"{T0}10:00"
    )
    # One second later is a new generation.
    write(db, "c1", "2025-12-31 19:10:01-05")
    [again] = sweep(db)
    assert again["operation_id"] != delivered["operation_id"]


# --- coalesced and deduped deliveries -------------------------------------------------


def test_a_wake_coalesced_into_a_queued_run_is_delivered_on_that_run(db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    [candidate] = candidates(db)
    queued = call(db, "enqueue_run", agent_profile_id="agent-P", reason=WAKE, task_id="P")
    result = reconcile(db, "P", candidate["child_set_key"], candidate["newest_child_updated_at"])
    assert (result["outcome"], result["run_id"], result["delivered"]) == (
        "coalesced",
        queued["run_id"],
        True,
    )
    row = receipt(db, "P")
    assert row is not None and row["delivered_run_id"] == queued["run_id"]
    assert row["delivery_operation_id"] == result["operation_id"]


def test_a_repeated_reconcile_lands_on_the_same_run(db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    [candidate] = candidates(db)
    args = ("P", candidate["child_set_key"], candidate["newest_child_updated_at"])
    first = reconcile(db, *args)
    second = reconcile(db, *args)
    assert (second["outcome"], second["dedup_kind"]) == ("deduped", "windowed")
    assert second["run_id"] == first["run_id"] and second["operation_id"] == first["operation_id"]
    assert len(wakes(db)) == 1


# --- the marks ------------------------------------------------------------------------


def test_a_delivered_or_settled_parent_is_not_looked_at_again(db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    stuck_parent(db, "Q", {"q1": ("COMPLETED", "05:00")})
    agent(db, "agent-Q")
    create(db, "R", assignee_agent_profile_id="agent-Q")
    create(db, "r1", parent_id="R")  # open: never marked
    assert marked(db) == {"P", "Q"}
    sweep(db, 1)  # delivers P; Q is stuck: it stays marked
    assert marked(db) == {"Q"}
    sweep(db)
    assert marked(db) == set()
    # Progress on an open child marks nothing; finishing it does.
    move(db, "r1", "IN_PROGRESS")
    assert marked(db) == set()
    move(db, "r1", "COMPLETED")  # the edge path wakes R
    assert marked(db) == {"R"}
    assert sweep(db) == [] and marked(db) == set()
    # Leaving flight marks the parent (its run may no longer hold it back).
    db.execute("UPDATE office.runs SET status = 'finished' WHERE task_id = 'R'")
    assert marked(db) == {"R"}
    assert sweep(db) == [] and marked(db) == set()


def test_a_receipt_deleted_by_hand_readmits_its_parent(db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    sweep(db)
    settle(db, "P")
    sweep(db)
    assert marked(db) == set()
    db.execute("DELETE FROM office.parent_child_wake_receipts WHERE parent_task_id = 'P'")
    assert stuck(db) == ["P"]


def test_mark_all_parents_rebuilds_the_marks(db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    stuck_parent(db, "Q", {"q1": ("COMPLETED", "05:00")}, is_office=False)
    db.execute("DELETE FROM office.parent_wake_marks")
    assert stuck(db) == [] and scanned(db) == ["P"]
    assert scalar(db, "SELECT office.mark_all_parents()") == 1
    assert stuck(db) == ["P"]


def test_roles(db: Conn) -> None:
    rows = db.execute(
        "SELECT r, f, has_function_privilege(r, f, 'EXECUTE')"
        "  FROM unnest(ARRAY['office_producer', 'office_worker', 'office_reader']) AS r,"
        "       unnest(ARRAY['office.list_stuck_parents(int, text)',"
        "                    'office.reconcile_parent(text, text, text)',"
        "                    'office.sweep_stuck_parents(int)',"
        "                    'office.mark_all_parents()']) AS f"
    ).fetchall()
    allowed = {(r, f) for r, f, ok in rows if ok}
    assert allowed == {
        ("office_producer", "office.list_stuck_parents(int, text)"),
        ("office_producer", "office.reconcile_parent(text, text, text)"),
        ("office_producer", "office.sweep_stuck_parents(int)"),
        ("office_reader", "office.list_stuck_parents(int, text)"),
    }


# --- the clients ----------------------------------------------------------------------


def test_sync_client_sweeps_counts_and_logs(
    office: Office, registry: CollectorRegistry, db: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    stuck_parent(db, "P", THREE)
    stuck_parent(db, "Q", {"q1": ("COMPLETED", "05:00")})
    [p, q] = office.list_stuck_parents()
    assert p == StuckParent(
        parent_task_id="P",
        assignee_agent_profile_id="agent-P",
        child_set_key="c1:COMPLETED,c2:CANCELLED,c3:COMPLETED",
        newest_child_updated_at=f"{T0}07:00",
    )
    assert office.list_stuck_parents(1) == [p]
    assert office.list_stuck_parents(reason="children_completed") == [p, q]
    caplog.set_level(logging.DEBUG, logger=PARENT_WAKE_LOGGER)
    results = office.sweep_stuck_parents()
    assert [(r.parent_task_id, r.delivered, r.outcome, r.created) for r in results] == [
        ("P", True, ProducerOutcome.QUEUED, True),
        ("Q", True, ProducerOutcome.QUEUED, True),
    ]
    assert results[0].operation_id == keys.wake_operation_id("P", p.child_set_key, f"{T0}07:00")
    assert counted(registry, "candidates") == 2
    assert counted(registry, "emitted") == 2
    emitted = [r for r in caplog.records if r.getMessage() == MSG_WAKE_EMITTED]
    assert [(r.levelno, r.parent_task_id, r.operation_id) for r in emitted] == [  # type: ignore[attr-defined]
        (logging.INFO, "P", results[0].operation_id),
        (logging.INFO, "Q", results[1].operation_id),
    ]
    assert [r.parent_task_id for r in caplog.records if r.getMessage() == MSG_WAKE_CANDIDATE] == [  # type: ignore[attr-defined]
        "P",
        "Q",
    ]
    assert office.sweep_stuck_parents() == []

    again = office.reconcile_parent("P", p.child_set_key, p.newest_child_updated_at)
    assert (again.outcome, again.dedup_kind, again.run_id) == (
        ProducerOutcome.DEDUPED,
        DedupKind.WINDOWED,
        results[0].run_id,
    )
    assert counted(registry, "emitted") == 3
    with pytest.raises(TaskNotFound):
        office.reconcile_parent("nope", "", "")
    with pytest.raises(InvalidArgument):
        office.list_stuck_parents(-1)


async def test_async_client_has_the_same_methods_and_results(dsn: str, db: Conn) -> None:
    stuck_parent(db, "P", THREE)
    registry = CollectorRegistry()
    async with AsyncOffice(dsn, registry=registry) as office:
        [p] = await office.list_stuck_parents()
        assert p.child_set_key == "c1:COMPLETED,c2:CANCELLED,c3:COMPLETED"
        db.execute("SELECT office.move_task('c1', 'IN_PROGRESS')")
        declined = await office.reconcile_parent(
            p.parent_task_id, p.child_set_key, p.newest_child_updated_at
        )
        assert declined.skipped_reason is SkippedReason.CHILD_SET_CHANGED
        assert not declined.delivered and declined.run_id is None
        db.execute("SELECT office.move_task('c1', 'COMPLETED')")  # the edge path wakes P
        assert await office.sweep_stuck_parents() == []
        settle(db, "P")
        [result] = await office.sweep_stuck_parents(5)
        assert result.delivered and result.outcome is ProducerOutcome.DEDUPED
        assert counted(registry, "emitted") == 1
        with pytest.raises(TaskNotFound):
            await office.reconcile_parent("nope", "", "")
