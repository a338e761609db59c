"""The outcome calls fenced by the worker (docs/api.md §3, since 0.5.0): with a
worker_id, heartbeat_run, finish_run, fail_run and retry_run also require
claimed_by = worker_id, so a worker that read another's attempt (get_run
shows it to every worker) cannot act on its run; without one, the attempt
alone fences, as before. fail_run(..., retryable => true) re-queues with a
jittered back-off while retries are left (docs/api.md §9, with its defaults).
set_aside is the daemon's, not a worker's."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

Conn = psycopg.Connection[Any]

OUTCOME_CALLS = {
    "heartbeat_run": "SELECT office.heartbeat_run(%(run)s, %(attempt)s, worker_id => %(worker)s)",
    "finish_run": "SELECT office.finish_run(%(run)s, %(attempt)s, worker_id => %(worker)s)",
    "fail_run": "SELECT office.fail_run(%(run)s, %(attempt)s, 'boom', worker_id => %(worker)s)",
    "fail_run_retryable": "SELECT office.fail_run(%(run)s, %(attempt)s, 'boom',"
    " retryable => true, worker_id => %(worker)s)",
    "retry_run": "SELECT office.retry_run(%(run)s, %(attempt)s, '1 minute',"
    " worker_id => %(worker)s)",
}


def scalar(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def run(conn: Conn, run_id: str) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM office.get_run(%s)", [run_id]).fetchone()
    assert row is not None
    return row


@pytest.fixture
def claimed(db: Conn) -> tuple[str, int]:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    db.execute("SELECT office.enqueue_run('a1', 'long_job')")
    got = db.execute("SELECT id, attempt FROM office.claim_run('worker-a')").fetchone()
    assert got is not None
    return (got[0], got[1])


@pytest.mark.parametrize("call", sorted(OUTCOME_CALLS))
def test_another_worker_holding_the_attempt_is_refused(
    db: Conn, claimed: tuple[str, int], call: str
) -> None:
    run_id, attempt = claimed
    before = run(db, run_id)
    db.execute("SET ROLE office_worker")
    try:
        params = {"run": run_id, "attempt": attempt, "worker": "worker-b"}
        assert scalar(db, OUTCOME_CALLS[call], params) is False
        assert run(db, run_id) == before
        params["worker"] = "worker-a"
        assert scalar(db, OUTCOME_CALLS[call], params) is True
    finally:
        db.execute("RESET ROLE")
    assert run(db, run_id) != before


@pytest.mark.parametrize("call", sorted(OUTCOME_CALLS))
def test_without_a_worker_id_the_attempt_alone_fences(
    db: Conn, claimed: tuple[str, int], call: str
) -> None:
    run_id, attempt = claimed
    params = {"run": run_id, "attempt": attempt + 1, "worker": None}
    assert scalar(db, OUTCOME_CALLS[call], params) is False
    params["attempt"] = attempt
    assert scalar(db, OUTCOME_CALLS[call], params) is True


def test_a_retryable_failure_backs_off_then_fails_when_retries_are_spent(
    db: Conn, claimed: tuple[str, int]
) -> None:
    run_id, attempt = claimed
    # The default back-off, {2 min, 10 min, 30 min, 2 h}, each times 0.75-1.25.
    steps = [(90, 150), (450, 750), (1350, 2250)]
    for n, (low, high) in enumerate(steps):
        assert scalar(db, "SELECT office.fail_run(%s, %s, 'flaky', true)", [run_id, attempt])
        row = run(db, run_id)
        assert (row["status"], row["retry_count"], row["error_message"]) == (
            "queued",
            n + 1,
            "flaky",
        )
        assert row["claimed_by"] is None and row["heartbeat_at"] is None
        wait = scalar(
            db,
            "SELECT extract(epoch FROM scheduled_retry_at - now()) FROM office.get_run(%s)",
            [run_id],
        )
        assert low <= float(wait) <= high
        db.execute("UPDATE office.runs SET scheduled_retry_at = now() WHERE id = %s", [run_id])
        got = db.execute("SELECT id, attempt FROM office.claim_run('worker-a')").fetchone()
        assert got is not None and got[0] == run_id
        attempt = got[1]
    # retry_count is 3, the default max_retries: this one fails for good.
    assert scalar(db, "SELECT office.fail_run(%s, %s, 'flaky', true)", [run_id, attempt])
    assert (run(db, run_id)["status"], run(db, run_id)["retry_count"]) == ("failed", 3)


@pytest.mark.parametrize(("role", "allowed"), [("office_admin", True), ("office_worker", False)])
def test_only_the_admin_role_sets_aside(db: Conn, role: str, allowed: bool) -> None:
    db.execute(f"SET ROLE {role}")
    try:
        call = "SELECT office.set_aside('subscriber', '1', 'bad row')"
        if allowed:
            assert scalar(db, call) is True
        else:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute(call)
    finally:
        db.execute("RESET ROLE")
