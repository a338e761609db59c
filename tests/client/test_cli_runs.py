"""``officectl --version`` and ``officectl runs list|show|requeue|cancel``
against a real database, through a subprocess as an operator runs them:
the dashboard's filters, paging past one window of ``list_runs``, ``null``
for every absent value in ``--json``, and requeue/cancel by id or from
standard input."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import psycopg
import pytest

import controlplane
from tests.scenarios.cli import OFFICECTL, cli_env, officectl, ok_json

Conn = psycopg.Connection[Any]


@pytest.fixture
def office(db: Conn) -> Conn:
    db.execute("SELECT office.upsert_agent('a1', 'w1', 'Ada')")
    db.execute("SELECT office.upsert_agent('a2', 'w1', 'Bob')")
    return db


def run_id(db: Conn, agent: str, reason: str, **kw: Any) -> str:
    row = db.execute(
        "SELECT run_id FROM office.enqueue_run(%s, %s, idempotency_key => %s, task_id => %s)",
        [agent, reason, kw.get("key"), kw.get("task")],
    ).fetchone()
    assert row is not None
    return str(row[0])


def failed(db: Conn, agent: str, reason: str) -> str:
    rid = run_id(db, agent, reason)
    row = db.execute("SELECT id, attempt FROM office.claim_run('w', %s)", [agent]).fetchone()
    assert row is not None and row[0] == rid
    db.execute("SELECT office.fail_run(%s, %s, 'boom')", [rid, row[1]])
    return rid


def test_version() -> None:
    result = subprocess.run([OFFICECTL, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.strip() == f"officectl, version {controlplane.__version__}"


def test_list_takes_the_dashboards_filters(dsn: str, office: Conn) -> None:
    bad = failed(office, "a1", "fix")
    queued = run_id(office, "a2", "review", key="pr:1", task="T1")
    other = run_id(office, "a2", "deploy", key="dep:1")
    everything = ok_json(dsn, "runs", "list")
    assert [r["id"] for r in everything] == [other, queued, bad]  # newest first
    assert [r["id"] for r in ok_json(dsn, "runs", "list", "--status", "failed")] == [bad]
    assert [r["id"] for r in ok_json(dsn, "runs", "list", "--agent", "a2")] == [other, queued]
    assert [r["id"] for r in ok_json(dsn, "runs", "list", "--reason", "review")] == [queued]
    assert [r["id"] for r in ok_json(dsn, "runs", "list", "--task", "T1")] == [queued]
    assert [r["id"] for r in ok_json(dsn, "runs", "list", "--key-prefix", "pr:")] == [queued]
    both = ok_json(dsn, "runs", "list", "--agent", "a2", "--status", "queued", "--task", "T1")
    assert [r["id"] for r in both] == [queued]
    assert ok_json(dsn, "runs", "list", "--agent", "nobody") == []
    # Paging: --limit, then --before the last one shown.
    page = ok_json(dsn, "runs", "list", "--limit", "2")
    assert [r["id"] for r in page] == [other, queued]
    rest = ok_json(dsn, "runs", "list", "--before", page[-1]["id"])
    assert [r["id"] for r in rest] == [bad]
    # Absent values are null, never "".
    shown = {r["id"]: r for r in everything}
    assert shown[other]["task_id"] is None and shown[other]["claimed_by"] is None
    assert shown[bad]["idempotency_key"] is None and shown[bad]["error_message"] == "boom"
    table = officectl(dsn, "runs", "list", "--limit", "2")
    assert table.returncode == 0 and "queued" in table.stdout and "failed" not in table.stdout
    assert f"--before {queued}" in table.stderr
    bad_status = officectl(dsn, "runs", "list", "--status", "done")
    assert bad_status.returncode == 2 and "Traceback" not in bad_status.stderr


def test_list_goes_past_one_window_of_list_runs(dsn: str, office: Conn) -> None:
    """A filter that matches only runs older than the newest 10,000 is still
    answered: the command walks window after window (run_window_end)."""
    rare = run_id(office, "a1", "rare")
    office.execute(
        "INSERT INTO office.runs (agent_profile_id, reason, status, finished_at)"
        " SELECT 'a2', 'bulk', 'finished', now() FROM generate_series(1, 10050)"
    )
    found = ok_json(dsn, "runs", "list", "--reason", "rare")
    assert [r["id"] for r in found] == [rare]


def test_show_prints_the_run_and_its_keys(dsn: str, office: Conn) -> None:
    rid = run_id(office, "a1", "r", key="k1")
    office.execute("SELECT office.enqueue_run('a1', 'r', idempotency_key => 'k2')")
    shown = ok_json(dsn, "runs", "show", rid)
    assert shown["id"] == rid and shown["status"] == "queued"
    assert shown["claimed_at"] is None and shown["task_id"] is None
    assert [(k["idempotency_key"], k["how"]) for k in shown["keys"]] == [
        ("k1", "own"),
        ("k2", "coalesced"),
    ]
    missing = officectl(dsn, "runs", "show", "no-such-run")
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == ["Error: no run 'no-such-run'"]


def test_requeue_and_cancel_by_id_and_from_stdin(dsn: str, office: Conn) -> None:
    one = failed(office, "a1", "r1")
    two = failed(office, "a2", "r2")
    assert ok_json(dsn, "runs", "requeue", one, "unknown") == {"requested": 2, "changed": 1}
    assert office.execute("SELECT status FROM office.runs WHERE id = %s", [one]).fetchone() == (
        "queued",
    )
    listed = ok_json(dsn, "runs", "list", "--status", "failed")
    piped = subprocess.run(
        [OFFICECTL, "--dsn", dsn, "runs", "requeue", "-"],
        input="".join(f"{r['id']}\n" for r in listed),
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.strip() == "requeued 1 of 1 run(s)"
    cancelled = ok_json(dsn, "runs", "cancel", one, two, "--reason", "ops")
    assert cancelled == {"requested": 2, "changed": 2}
    rows = office.execute(
        "SELECT status, cancel_reason FROM office.runs WHERE id = ANY (%s)", [[one, two]]
    ).fetchall()
    assert rows == [("cancelled", "ops"), ("cancelled", "ops")]
    again = officectl(dsn, "runs", "cancel", one, "--reason", "ops")
    assert again.returncode == 0 and again.stdout.strip() == "cancelled 0 of 1 run(s)"
    no_reason = officectl(dsn, "runs", "cancel", one)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr


def test_requeue_as_a_role_without_office_admin_is_one_line(dsn: str, office: Conn) -> None:
    rid = failed(office, "a1", "r1")
    office.execute("DROP ROLE IF EXISTS cli_runs_worker")
    office.execute("CREATE ROLE cli_runs_worker LOGIN IN ROLE office_worker")
    try:
        as_worker = psycopg.conninfo.make_conninfo(dsn, user="cli_runs_worker")
        result = officectl(as_worker, "runs", "requeue", rid)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert "(SQLSTATE 42501)" in result.stderr
    finally:
        office.execute("DROP ROLE cli_runs_worker")


def test_fire_routine_json_says_null_for_every_absent_value(dsn: str, office: Conn) -> None:
    office.execute(
        "SELECT office.create_routine('w1', 'ping', assignee_agent_profile_id => 'a2',"
        " id => 'light')"
    )
    fired = ok_json(dsn, "fire-routine", "light")
    assert fired["status"] == "done"
    assert fired["linked_task_id"] is None and fired["coalesced_into_run_id"] is None
    assert "" not in json.loads(json.dumps(fired)).values()
