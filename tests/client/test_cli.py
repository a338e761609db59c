"""``officectl`` against a real database, as an operator runs it: each command
through a subprocess with ``--dsn``, its output asserted (``--json`` parsed),
bad input answered by one line with the SQLSTATE and no traceback, and
``doctor`` passing on a fresh database and failing on a broken one."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from controlplane import schema
from controlplane.cli.base import libpq_dsn
from tests import harness
from tests.scenarios.cli import OFFICECTL, cli_env, officectl, ok_json


def one_line_error(result: subprocess.CompletedProcess[str], sqlstate: str) -> str:
    """The failure is exit 1 and exactly one line on stderr, carrying the SQLSTATE."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and f"(SQLSTATE {sqlstate})" in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def office(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """The test database with a workspace of two agents."""
    db.execute("SELECT office.upsert_agent('a1', 'w1', 'Ada')")
    db.execute("SELECT office.upsert_agent('a2', 'w1', 'Bob')")
    return db


# --- enqueue ---------------------------------------------------------------------


def test_enqueue_prints_each_outcome(dsn: str, office: psycopg.Connection[Any]) -> None:
    first = ok_json(dsn, "enqueue", "a1", "task_comment", "--key", "task_comment:c9:a1")
    assert first["outcome"] == "queued" and first["dedup_kind"] is None
    again = ok_json(dsn, "enqueue", "a1", "task_comment", "--key", "task_comment:c9:a1")
    assert again == {"outcome": "deduped", "dedup_kind": "windowed", "run_id": first["run_id"]}

    keyless = ok_json(
        dsn,
        "enqueue",
        "a2",
        "heartbeat",
        "--task",
        "t-7",
        "--payload",
        '{"note": "hi"}',
        "--keyless-cause",
        "by_design",
    )
    assert keyless["outcome"] == "queued"
    coalesced = ok_json(dsn, "enqueue", "a2", "heartbeat", "--task", "t-7")
    assert coalesced == {"outcome": "coalesced", "dedup_kind": None, "run_id": keyless["run_id"]}
    entry = ok_json(dsn, "enqueue", "a2", "heartbeat", "--task", "t-7", "--entry-triggered")
    assert entry["outcome"] == "queued" and entry["run_id"] != keyless["run_id"]

    row = office.execute(
        "SELECT payload, task_id, entry_triggered, coalesced_count FROM office.runs WHERE id = %s",
        (keyless["run_id"],),
    ).fetchone()
    assert row == ({"task_id": "t-7", "agent_profile_id": "a2"}, "t-7", False, 2)
    assert office.execute(
        "SELECT entry_triggered FROM office.runs WHERE id = %s", (entry["run_id"],)
    ).fetchone() == (True,)
    assert office.execute("SELECT total FROM office.keyless_stats").fetchone() == (1,)

    table = officectl(dsn, "enqueue", "a1", "task_comment", "--key", "task_comment:c9:a1")
    assert table.returncode == 0
    assert "deduped" in table.stdout and "windowed" in table.stdout


def test_enqueue_bad_input_is_one_line_with_the_sqlstate(
    dsn: str, office: psycopg.Connection[Any]
) -> None:
    line = one_line_error(officectl(dsn, "enqueue", "nobody", "ping"), "OFA01")
    assert "nobody" in line
    one_line_error(officectl(dsn, "enqueue", "a1", "ping", "--payload", "[1, 2]"), "22023")
    one_line_error(officectl(dsn, "enqueue", "a1", ""), "22023")
    office.execute("SELECT office.set_agent_status('a2', 'paused')")
    one_line_error(officectl(dsn, "enqueue", "a2", "ping"), "OFA02")

    not_json = officectl(dsn, "enqueue", "a1", "ping", "--payload", "{")
    assert not_json.returncode == 1 and "Traceback" not in not_json.stderr
    assert "--payload is not valid JSON" in not_json.stderr

    debug = subprocess.run(
        [OFFICECTL, "--dsn", dsn, "--debug", "enqueue", "nobody", "ping"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "AgentNotFound" in debug.stderr


def test_the_dsn_comes_from_office_dsn_too(dsn: str, office: psycopg.Connection[Any]) -> None:
    result = subprocess.run(
        [OFFICECTL, "enqueue", "a1", "ping", "--json"],
        capture_output=True,
        text=True,
        env={**cli_env(), "OFFICE_DSN": dsn},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["outcome"] == "queued"


def test_an_unreachable_database_is_one_line(dsn: str) -> None:
    result = officectl("postgresql://postgres@127.0.0.1:1/nowhere", "stats")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "127.0.0.1" in result.stderr


# --- assign, move --------------------------------------------------------------------


def test_assign_prints_the_generation_and_its_run(
    dsn: str, office: psycopg.Connection[Any]
) -> None:
    office.execute("SELECT office.create_task('w1', 't1', 'write', workflow_step_id => 's1')")
    first = ok_json(dsn, "assign", "t1", "a1")
    assert first["assignment_generation"] == 1 and first["interrupt"] is False
    assert first["outcome"] == "queued"
    key = office.execute(
        "SELECT idempotency_key FROM office.runs WHERE id = %s", (first["run_id"],)
    ).fetchone()
    assert key == ("task_assigned:t1:a1:1",)

    second = ok_json(dsn, "assign", "t1", "a2", "--actor-id", "ops", "--actor-type", "system")
    assert second["assignment_generation"] == 2 and second["interrupt"] is True
    actor = office.execute(
        "SELECT payload->'actor' FROM office.events WHERE topic = 'task.assigned'"
        " ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert actor == ({"id": "ops", "type": "system"},)

    unassigned = ok_json(dsn, "assign", "t1", "")
    assert unassigned == {
        "outcome": None,
        "dedup_kind": None,
        "run_id": None,
        "assignment_generation": 3,
        "interrupt": True,
    }
    table = officectl(dsn, "assign", "t1", "a1")
    assert table.returncode == 0 and "assignment_generation" in table.stdout
    assert "4" in table.stdout

    one_line_error(officectl(dsn, "assign", "missing", "a1"), "OFT01")
    one_line_error(officectl(dsn, "assign", "t1", "nobody"), "OFA01")


def test_move_runs_the_terminal_effects(dsn: str, office: psycopg.Connection[Any]) -> None:
    office.execute("SELECT office.create_task('w1', 'blocker', 'first')")
    office.execute(
        "SELECT office.create_task('w1', 'blocked', 'second', assignee_agent_profile_id => 'a1')"
    )
    office.execute("SELECT office.add_blocker('blocked', 'blocker')")
    moved = ok_json(dsn, "move", "blocker", "COMPLETED")
    assert moved["id"] == "blocker" and moved["state"] == "COMPLETED"
    woken = office.execute(
        "SELECT count(*) FROM office.runs WHERE reason = 'task_blockers_resolved'"
        " AND task_id = 'blocked'"
    ).fetchone()
    assert woken == (1,)

    line = one_line_error(officectl(dsn, "move", "blocker", "DONE"), "22023")
    assert "DONE" in line
    one_line_error(officectl(dsn, "move", "missing", "COMPLETED"), "OFT01")


# --- fire-routine, sweep --------------------------------------------------------------


def test_fire_routine_heavy_and_lightweight(dsn: str, office: psycopg.Connection[Any]) -> None:
    office.execute(
        "SELECT office.create_routine('w1', 'report', '{\"title\": \"report on {{topic}}\"}',"
        " 'a1', variables => '{\"topic\": {\"default\": \"sales\"}}', id => 'heavy')"
    )
    fired = ok_json(dsn, "fire-routine", "heavy", "--var", "topic=costs")
    assert fired["status"] == "task_created" and fired["linked_task_id"]
    title = office.execute(
        "SELECT title FROM office.tasks WHERE id = %s", (fired["linked_task_id"],)
    ).fetchone()
    assert title == ("report on costs",)
    # The same fingerprint while the task is open: skipped by policy, not an error.
    again = ok_json(dsn, "fire-routine", "heavy", "--var", "topic=costs")
    assert again["status"] == "skipped"

    office.execute(
        "SELECT office.create_routine('w1', 'ping', assignee_agent_profile_id => 'a2',"
        " id => 'light')"
    )
    first = ok_json(dsn, "fire-routine", "light", "--source", "webhook", "--explicit-key", "d-1")
    repeat = ok_json(dsn, "fire-routine", "light", "--source", "webhook", "--explicit-key", "d-1")
    assert first["status"] == repeat["status"] == "done"
    assert first["idempotency_key"] == "routine:light:webhook:d-1"
    assert repeat["wakeup_request_id"] == first["wakeup_request_id"]
    assert (first["wakeup_outcome"], repeat["wakeup_outcome"]) == ("queued", "deduped")

    line = one_line_error(officectl(dsn, "fire-routine", "heavy", "--var", "nope=1"), "22023")
    assert "nope" in line
    one_line_error(officectl(dsn, "fire-routine", "missing"), "OFR01")
    bad_var = officectl(dsn, "fire-routine", "heavy", "--var", "topic")
    assert bad_var.returncode == 1 and "NAME=VALUE" in bad_var.stderr


def test_sweep_wakes_a_stuck_parent_once(dsn: str, office: psycopg.Connection[Any]) -> None:
    assert ok_json(dsn, "sweep") == []
    empty = officectl(dsn, "sweep")
    assert empty.returncode == 0 and "no stuck parents" in empty.stdout

    # Children finish while the parent has nobody to wake; then it is assigned.
    office.execute("SELECT office.create_task('w1', 'parent', 'epic')")
    office.execute("SELECT office.create_task('w1', 'child', 'story', parent_id => 'parent')")
    office.execute("SELECT office.move_task('child', 'COMPLETED')")
    office.execute("SELECT office.assign_task('parent', 'a1')")

    swept = ok_json(dsn, "sweep", "--max-rows", "10")
    assert len(swept) == 1
    (result,) = swept
    assert result["parent_task_id"] == "parent" and result["delivered"] is True
    assert result["outcome"] == "queued" and result["operation_id"].startswith(
        "task_children_completed:parent:"
    )
    reason = office.execute(
        "SELECT reason, task_id FROM office.runs WHERE id = %s", (result["run_id"],)
    ).fetchone()
    assert reason == ("task_children_completed", "parent")
    assert ok_json(dsn, "sweep") == []  # delivered: not stuck any more

    bad = officectl(dsn, "sweep", "--max-rows", "0")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


# --- stats --------------------------------------------------------------------------


def test_stats_tables_and_json(dsn: str, office: psycopg.Connection[Any]) -> None:
    fresh = ok_json(dsn, "stats")
    assert fresh["dedup_stats"] == [] and fresh["keyless_stats"] == []
    assert [r["status"] for r in fresh["queue_stats"]] == [
        "queued",
        "claimed",
        "finished",
        "failed",
        "cancelled",
    ]

    ok_json(dsn, "enqueue", "a1", "task_comment", "--key", "task_comment:c1:a1")
    ok_json(dsn, "enqueue", "a1", "task_comment", "--key", "task_comment:c1:a1")
    office.execute("SET office.idempotency_window = '0'")
    office.execute(
        "SELECT office.enqueue_run('a1', 'task_comment', idempotency_key => 'task_comment:c1:a1')"
    )
    office.execute("RESET office.idempotency_window")
    ok_json(dsn, "enqueue", "a2", "heartbeat", "--keyless-cause", "unresolved")
    ok_json(dsn, "enqueue", "a2", "heartbeat")

    report = ok_json(dsn, "stats")
    assert report["dedup_stats"] == [
        {"queue": "runs", "reason": "heartbeat", "kind": "coalesced", "total": 1},
        {"queue": "runs", "reason": "task_comment", "kind": "durable", "total": 1},
        {"queue": "runs", "reason": "task_comment", "kind": "windowed", "total": 1},
    ]
    assert report["keyless_stats"] == [{"reason": "heartbeat", "cause": "unresolved", "total": 1}]
    queued = report["queue_stats"][0]
    assert queued["status"] == "queued" and queued["runs"] == 2 and queued["agents"] == 2
    assert queued["oldest_requested_at"] is not None

    table = officectl(dsn, "stats")
    assert table.returncode == 0
    for text in ("office.dedup_stats", "durable", "office.keyless_stats", "office.queue_stats"):
        assert text in table.stdout


# --- events tail ------------------------------------------------------------------------


def _events(office: psycopg.Connection[Any], count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        office.execute(
            "SELECT office.create_task('w1', %s, assignee_agent_profile_id => 'a1')", (f"t{i}",)
        )


def _lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_events_tail_reads_without_claiming(dsn: str, office: psycopg.Connection[Any]) -> None:
    assert _lines(officectl(dsn, "events", "tail", "--json").stdout) == []
    _events(office, 5)
    ids = [r[0] for r in office.execute("SELECT id FROM office.events ORDER BY id").fetchall()]
    assert len(ids) == 5

    newest = _lines(officectl(dsn, "events", "tail", "--limit", "3", "--json").stdout)
    assert [e["id"] for e in newest] == ids[-3:]
    assert (
        newest[0]["topic"] == "task.assigned" and newest[0]["payload"]["agent_profile_id"] == "a1"
    )

    after = _lines(
        officectl(dsn, "events", "tail", "--since", str(ids[0]), "--limit", "2", "--json").stdout
    )
    assert [e["id"] for e in after] == ids[1:3]

    text = officectl(dsn, "events", "tail")
    assert text.returncode == 0
    assert [line.split()[0] for line in text.stdout.splitlines()] == [f"#{i}" for i in ids]
    assert "task.assigned task=t0" in text.stdout

    # An observer: nothing was claimed, every event is still there for a consumer.
    untouched = office.execute(
        "SELECT count(*) FROM office.events"
        " WHERE processed_at IS NULL AND claimed_by IS NULL AND deliveries = 0"
    ).fetchone()
    assert untouched == (5,)
    claimed = office.execute("SELECT id FROM office.claim_events('consumer', 100)").fetchall()
    assert sorted(r[0] for r in claimed) == ids


class Follower:
    """``officectl events tail --follow --json`` in the background, its lines
    read by a thread (so a missing line fails the test instead of hanging it)."""

    def __init__(self, dsn: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [
                OFFICECTL,
                "--dsn",
                dsn,
                "events",
                "tail",
                "--follow",
                "--json",
                "--interval",
                "0.1",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def next_events(self, count: int) -> list[dict[str, Any]]:
        return [json.loads(self.lines.get(timeout=30)) for _ in range(count)]

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)


@pytest.fixture
def follower(dsn: str) -> Iterator[list[Follower]]:
    started: list[Follower] = []
    yield started
    for f in started:
        if f.proc.poll() is None:
            f.proc.kill()
            f.proc.wait()


def test_events_tail_follow_prints_new_events_in_commit_order(
    dsn: str, office: psycopg.Connection[Any], follower: list[Follower]
) -> None:
    _events(office, 2)
    tail = Follower(dsn, "--limit", "1")
    follower.append(tail)
    (first,) = tail.next_events(1)
    assert first["payload"]["task_id"] == "t1"

    _events(office, 1, start=2)
    (new,) = tail.next_events(1)
    assert new["payload"]["task_id"] == "t2"

    # A transaction that took a lower id commits after a higher one was printed:
    # the tail still prints it (ids are not commit order).
    with psycopg.connect(dsn) as slow:
        slow.execute("SELECT office.create_task('w1', 'slow', assignee_agent_profile_id => 'a1')")
        _events(office, 1, start=3)
        (fast,) = tail.next_events(1)
        assert fast["payload"]["task_id"] == "t3"
        slow.commit()
    (late,) = tail.next_events(1)
    assert late["payload"]["task_id"] == "slow" and late["id"] < fast["id"]

    assert tail.stop(signal.SIGTERM) == 0
    assert "Traceback" not in (tail.proc.stderr.read() if tail.proc.stderr else "")
    assert office.execute(
        "SELECT count(*) FROM office.events WHERE deliveries > 0 OR processed_at IS NOT NULL"
    ).fetchone() == (0,)


def test_events_tail_follow_stops_on_sigint(
    dsn: str, office: psycopg.Connection[Any], follower: list[Follower]
) -> None:
    tail = Follower(dsn)
    follower.append(tail)
    _events(office, 1)
    (event,) = tail.next_events(1)  # following now
    assert event["topic"] == "task.assigned"
    assert tail.stop(signal.SIGINT) == 0


# --- migrate ----------------------------------------------------------------------------


def test_migrate_json_on_an_extension_database(dsn: str) -> None:
    assert ok_json(dsn, "migrate") == {
        "path": "extension",
        "applied": [],
        "version": schema.current_version(),
    }


# --- doctor -----------------------------------------------------------------------------


def _doctor(dsn: str) -> tuple[int, dict[str, Any]]:
    result = officectl(dsn, "doctor", "--json")
    assert "Traceback" not in result.stderr
    return result.returncode, json.loads(result.stdout)


def _problems(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["status"] == "problem"]


def test_doctor_passes_on_a_fresh_database(dsn: str) -> None:
    code, report = _doctor(dsn)
    assert code == 0 and report["ok"] is True, report
    assert _problems(report) == []
    checks = {f["check"] for f in report["findings"]}
    assert checks == {
        "version",
        "native",
        "indexes",
        "roles",
        "grants",
        "settings",
        "probes",
        "workspaces",
        "poison",
        "budgets",
    }
    version = next(f for f in report["findings"] if f["check"] == "version")
    assert schema.current_version() in version["detail"]
    indexes = " ".join(f["detail"] for f in report["findings"] if f["check"] == "indexes")
    for name in (
        "idx_run_idempotency",
        "idx_wakeup_idempotency",
        "idx_office_routine_runs_active_fingerprint",
        "idx_office_routine_runs_linked_task",
    ):
        assert name in indexes

    table = officectl(dsn, "doctor")
    assert table.returncode == 0 and "no problems found" in table.stdout


_NATIVE_FUNCTIONS = harness.C_FUNCTIONS
# What the doctor says of the binding the install made (sql/95_native.sql),
# which a PL/pgSQL-only run (OFFICE_TEST_DEFINITIONS=plpgsql) replaced.
_INSTALLED_BINDING = pytest.mark.skipif(
    harness.PLPGSQL_ONLY, reason="PL/pgSQL-only run: the install's native binding was replaced"
)


@_INSTALLED_BINDING
def test_doctor_reports_which_definitions_serve(dsn: str, db: psycopg.Connection[Any]) -> None:
    native = db.execute(_NATIVE_FUNCTIONS).fetchone()
    assert native is not None
    _, report = _doctor(dsn)
    (finding,) = [f for f in report["findings"] if f["check"] == "native"]
    assert finding["status"] == "ok", finding
    if native[0]:  # PostgreSQL 15 with the library: the handshake matched
        assert finding["detail"] == (
            f"native: {native[0]} functions"
            f" (library {schema.current_version()} = schema {schema.current_version()})"
        )
    else:  # the embedded PostgreSQL 18 has no library
        assert finding["detail"] == (
            "PL/pgSQL only, because the office library is not installed on this server"
        )


@_INSTALLED_BINDING
def test_doctor_flags_a_library_the_install_refused(dsn: str, db: psycopg.Connection[Any]) -> None:
    # What the handshake records for a stale library (sql/95_native.sql).
    db.execute(
        "CREATE OR REPLACE FUNCTION office._native_binding() RETURNS text LANGUAGE sql"
        " RETURN 'PL/pgSQL only: the office library is version 0.4.9, the schema 0.5.0'"
    )
    native = db.execute(_NATIVE_FUNCTIONS).fetchone()
    assert native is not None
    code, report = _doctor(dsn)
    (finding,) = [f for f in report["findings"] if f["check"] == "native"]
    assert "version 0.4.9" in finding["detail"] and finding["fix"], finding
    if native[0]:  # C definitions bound although the install refused the library
        assert finding["status"] == "problem" and code == 1, finding
    else:
        assert finding["status"] == "warning" and code == 0, finding


def test_doctor_lists_cross_workspace_rows_from_before_the_upgrade(
    dsn: str, db: psycopg.Connection[Any]
) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1'), office.upsert_agent('a2', 'w2')")
    db.execute("SELECT office.create_task('w1', 'p1'), office.create_task('w1', 'b1')")
    # What 0.3.0 allowed, written with the triggers off (as a restore would).
    db.execute("SET session_replication_role = replica")
    db.execute(
        "INSERT INTO office.tasks (id, workspace_id, parent_id, assignee_agent_profile_id)"
        " VALUES ('c1', 'w2', 'p1', 'a1'), ('c2', 'w2', 'p1', 'a2')"
    )
    db.execute("INSERT INTO office.task_blockers (task_id, blocker_task_id) VALUES ('c2', 'b1')")
    db.execute(
        "INSERT INTO office.routines (id, workspace_id, name, assignee_agent_profile_id)"
        " VALUES ('r1', 'w2', 'n', 'a1')"
    )
    db.execute("SET session_replication_role = origin")
    code, report = _doctor(dsn)
    assert code == 0 and report["ok"] is True  # warnings: the rows are legal leftovers
    found = sorted(f["detail"] for f in report["findings"] if f["check"] == "workspaces")
    assert found == [
        "1 routine assignee reference(s) across workspaces, written before 0.4.0:"
        " r1 (w2) -> a1 (w1)",
        "1 task assignee reference(s) across workspaces, written before 0.4.0: c1 (w2) -> a1 (w1)",
        "1 task blocker reference(s) across workspaces, written before 0.4.0: c2 (w2) -> b1 (w1)",
        "2 task parent reference(s) across workspaces, written before 0.4.0:"
        " c1 (w2) -> p1 (w1); c2 (w2) -> p1 (w1)",
    ]
    assert all(f["status"] == "warning" for f in report["findings"] if f["check"] == "workspaces")


def test_doctor_finds_a_dropped_dedup_index(dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute("DROP INDEX office.idx_run_idempotency")
    code, report = _doctor(dsn)
    assert code == 1 and report["ok"] is False
    (problem,) = _problems(report)
    assert "idx_run_idempotency is missing" in problem["detail"]
    assert problem["fix"].startswith(
        "CREATE UNIQUE INDEX idx_run_idempotency ON office.runs USING btree (idempotency_key)"
        " WHERE (idempotency_key IS NOT NULL)"
    )
    table = officectl(dsn, "doctor", "--problems-only")
    assert table.returncode == 1 and "1 problem(s) found" in table.stdout
    assert "idx_run_idempotency" in table.stdout and "ok" not in table.stdout.split()


def test_doctor_finds_a_changed_predicate(dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute("DROP INDEX office.idx_office_routine_runs_active_fingerprint")
    db.execute(
        "CREATE INDEX idx_office_routine_runs_active_fingerprint ON office.routine_runs"
        " (routine_id, dispatch_fingerprint, created_at DESC)"
    )
    code, report = _doctor(dsn)
    (problem,) = _problems(report)
    assert code == 1 and "expected" in problem["detail"]
    assert problem["fix"].startswith(
        "DROP INDEX office.idx_office_routine_runs_active_fingerprint;"
    )


def test_doctor_finds_grants_to_public(dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute("GRANT USAGE ON SCHEMA office TO PUBLIC")
    db.execute("GRANT EXECUTE ON FUNCTION office.prune_runs(interval) TO PUBLIC")
    db.execute("GRANT SELECT ON office.runs TO PUBLIC")
    code, report = _doctor(dsn)
    assert code == 1
    details = {p["detail"]: p["fix"] for p in _problems(report)}
    assert details == {
        "PUBLIC has USAGE on schema office": "REVOKE ALL ON SCHEMA office FROM PUBLIC",
        "PUBLIC may execute office.prune_runs(interval)": (
            "REVOKE EXECUTE ON FUNCTION office.prune_runs(interval) FROM PUBLIC"
        ),
        "PUBLIC has SELECT on office.runs": "REVOKE ALL ON office.runs FROM PUBLIC",
    }
    # Doing what the findings say makes the database healthy again.
    for fix in details.values():
        db.execute(fix)
    assert _doctor(dsn)[0] == 0


def test_doctor_finds_bad_settings(dsn: str, db: psycopg.Connection[Any]) -> None:
    name = db.info.dbname
    db.execute(f"ALTER DATABASE {name} SET office.idempotency_window = 'a day or so'")
    db.execute(f"ALTER DATABASE {name} SET office.coalesce_window = '-5 seconds'")
    db.execute(f"ALTER DATABASE {name} SET office.notify = 'false'")
    code, report = _doctor(dsn)
    assert code == 1
    problems = {p["detail"].split(" = ")[0]: p for p in _problems(report)}
    assert set(problems) == {
        "office.idempotency_window",
        "office.coalesce_window",
        "office.notify",
    }
    assert "is not an interval" in problems["office.idempotency_window"]["detail"]
    assert f"ALTER DATABASE {name}" in problems["office.idempotency_window"]["detail"]
    assert "is negative" in problems["office.coalesce_window"]["detail"]
    assert "fails with 22023" in problems["office.notify"]["detail"]
    assert problems["office.notify"]["fix"].startswith(
        "set it to 'edge' (the default), 'every' or 'off'"
    )

    db.execute(f"ALTER DATABASE {name} RESET ALL")
    db.execute(f"ALTER DATABASE {name} SET office.notify = 'off'")
    db.execute(f"ALTER DATABASE {name} SET office.idempotency_window = '1 hour'")
    code, report = _doctor(dsn)
    assert code == 0
    settings = " ".join(f["detail"] for f in report["findings"] if f["check"] == "settings")
    assert "office.idempotency_window: '1 hour'" in settings and "'off'" in settings


@pytest.mark.parametrize("value", ["edge", "every", "on", "off"])
def test_doctor_takes_every_value_of_office_notify(
    dsn: str, db: psycopg.Connection[Any], value: str
) -> None:
    """edge is the documented default: set explicitly it passes, as do every,
    on (its 0.3.0 spelling) and off."""
    db.execute(f"ALTER DATABASE {db.info.dbname} SET office.notify = '{value}'")
    code, report = _doctor(dsn)
    assert code == 0, _problems(report)
    settings = [f["detail"] for f in report["findings"] if f["check"] == "settings"]
    assert f"office.notify: {value!r} (ALTER DATABASE {db.info.dbname})" in settings


def test_doctor_says_the_notify_default_is_edge(dsn: str) -> None:
    code, report = _doctor(dsn)
    settings = [f["detail"] for f in report["findings"] if f["check"] == "settings"]
    assert code == 0 and "office.notify: default edge" in settings


def test_doctor_finds_a_missing_probe_column(dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute("ALTER TABLE office.runs DROP COLUMN entry_triggered CASCADE")
    code, report = _doctor(dsn)
    assert code == 1
    assert any("entry_triggered is missing" in p["detail"] for p in _problems(report))


def test_doctor_on_a_database_without_office(empty_database: str) -> None:
    code, report = _doctor(empty_database)
    assert code == 1
    (problem,) = report["findings"]
    assert "not installed" in problem["detail"] and "officectl migrate" in problem["fix"]


def test_a_yoyo_style_psycopg_url_names_the_same_database(
    dsn: str, office: psycopg.Connection[Any]
) -> None:
    # yoyo.ini spells a psycopg 3 database postgresql+psycopg://; the group
    # --dsn and a command's own --dsn take it as the postgresql:// URL.
    url = psycopg.conninfo.conninfo_to_dict(dsn)
    yoyo = "postgresql+psycopg://{user}@{host}:{port}/{dbname}".format(**url)
    assert ok_json(yoyo, "enqueue", "a1", "ping")["outcome"] == "queued"
    assert office.execute("SELECT count(*) FROM office.runs WHERE reason = 'ping'").fetchone() == (
        1,
    )


@pytest.mark.parametrize(
    "url", ["postgres+psycopg://postgres@127.0.0.1/db", "postgresql+psycopg2://postgres@h/db"]
)
def test_other_driver_schemes_are_refused_with_the_accepted_ones(url: str) -> None:
    result = officectl(url, "stats")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert url.split("://")[0] + "://" in result.stderr
    assert "postgresql+psycopg://" in result.stderr


def test_libpq_dsn_keeps_what_libpq_takes() -> None:
    assert libpq_dsn("postgresql+psycopg://u@h:5/d?sslmode=disable") == (
        "postgresql://u@h:5/d?sslmode=disable"
    )
    for same in ("postgresql://u@h/d", "postgres://u@h/d", "host=h dbname=d password=a://b"):
        assert libpq_dsn(same) == same
    with pytest.raises(ValueError, match="postgres\\+psycopg://"):
        libpq_dsn("postgres+psycopg://u@h/d")
