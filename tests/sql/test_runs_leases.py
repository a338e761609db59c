"""Leases on claimed runs (docs/api.md §3, since 0.4.0): claim_run sets
heartbeat_at, heartbeat_run renews it (fenced by attempt: false means the
worker lost the run), recover_stale_runs requeues a claim whose heartbeat
(its claim, if it never beat) is older than the limit."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

Conn = psycopg.Connection[Any]


def scalar(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def run(conn: Conn, run_id: str) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM office.get_run(%s)", [run_id]).fetchone()
    assert row is not None
    return row


def age(conn: Conn, run_id: str, column: str, interval: str) -> None:
    assert column in ("claimed_at", "heartbeat_at")
    conn.execute(
        f"UPDATE office.runs SET {column} = now() - %s::interval WHERE id = %s", [interval, run_id]
    )


@pytest.fixture
def claimed(db: Conn) -> tuple[str, int]:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    db.execute("SELECT office.enqueue_run('a1', 'long_job')")
    row = db.execute("SELECT id, attempt, heartbeat_at = claimed_at FROM office.claim_run('w1')")
    got = row.fetchone()
    assert got is not None and got[2] is True  # the claim is the first beat
    return (got[0], got[1])


def test_a_heart_beating_run_is_never_recovered(db: Conn, claimed: tuple[str, int]) -> None:
    run_id, attempt = claimed
    # The agent has been working for an hour, far past the threshold ...
    age(db, run_id, "claimed_at", "1 hour")
    for _ in range(3):
        age(db, run_id, "heartbeat_at", "90 seconds")
        # ... and keeps beating: its lease is renewed every time.
        assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [run_id, attempt]) is True
        assert scalar(db, "SELECT office.recover_stale_runs('2 minutes')") == 0
    row = run(db, run_id)
    assert (row["status"], row["claimed_by"], row["attempt"]) == ("claimed", "w1", 1)
    assert scalar(db, "SELECT office.finish_run(%s, %s)", [run_id, attempt]) is True


def test_a_run_that_stops_beating_is_recovered_and_its_late_finish_refused(
    db: Conn, claimed: tuple[str, int]
) -> None:
    run_id, attempt = claimed
    assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [run_id, attempt]) is True
    age(db, run_id, "heartbeat_at", "3 minutes")
    assert scalar(db, "SELECT office.recover_stale_runs('2 minutes')") == 1
    row = run(db, run_id)
    assert row["status"] == "queued"
    assert (row["claimed_at"], row["claimed_by"], row["heartbeat_at"]) == (None, None, None)
    # The lost worker learns it at its next beat, and cannot finish.
    assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [run_id, attempt]) is False
    assert scalar(db, "SELECT office.finish_run(%s, %s)", [run_id, attempt]) is False
    again = db.execute("SELECT id, attempt FROM office.claim_run('w2')").fetchone()
    assert again == (run_id, attempt + 1)
    assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [run_id, attempt]) is False
    assert scalar(db, "SELECT office.finish_run(%s, %s)", [run_id, attempt]) is False
    assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [run_id, attempt + 1]) is True
    assert scalar(db, "SELECT office.finish_run(%s, %s)", [run_id, attempt + 1]) is True


def test_a_claim_that_never_beat_is_recovered_on_its_claim_time(
    db: Conn, claimed: tuple[str, int]
) -> None:
    run_id, _ = claimed
    db.execute("UPDATE office.runs SET heartbeat_at = NULL")  # as a writer outside claim_run
    assert scalar(db, "SELECT office.recover_stale_runs('2 minutes')") == 0
    age(db, run_id, "claimed_at", "3 minutes")
    assert scalar(db, "SELECT office.recover_stale_runs('2 minutes')") == 1


@pytest.mark.parametrize("state", ["wrong attempt", "finished", "cancelled", "retried", "unknown"])
def test_a_heartbeat_is_fenced(db: Conn, claimed: tuple[str, int], state: str) -> None:
    run_id, attempt = claimed
    if state == "wrong attempt":
        attempt += 1
    elif state == "finished":
        db.execute("SELECT office.finish_run(%s, %s)", [run_id, attempt])
    elif state == "cancelled":
        db.execute("SELECT office.cancel_run(%s, 'no longer needed')", [run_id])
    elif state == "retried":
        db.execute("SELECT office.retry_run(%s, %s, '1 hour')", [run_id, attempt])
        assert run(db, run_id)["heartbeat_at"] is None
    else:
        run_id = "no-such-run"
    before = db.execute("SELECT * FROM office.runs").fetchall()
    assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [run_id, attempt]) is False
    assert db.execute("SELECT * FROM office.runs").fetchall() == before


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        ("office_worker", True),
        ("office_admin", True),
        ("office_producer", False),
        ("office_reader", False),
    ],
)
def test_who_may_heartbeat(db: Conn, claimed: tuple[str, int], role: str, allowed: bool) -> None:
    db.execute(f"SET ROLE {role}")
    try:
        if allowed:
            assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", list(claimed)) is True
        else:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute("SELECT office.heartbeat_run(%s, %s)", list(claimed))
    finally:
        db.execute("RESET ROLE")


def test_the_upgrade_gives_existing_claims_their_claim_time_as_heartbeat(
    empty_database: str,
) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION office VERSION '0.3.0'")
        conn.execute("SELECT office.upsert_agent('a1', 'w1')")
        conn.execute("SELECT office.enqueue_run('a1', 'r1')")
        conn.execute("SELECT office.enqueue_run('a1', 'r2')")
        conn.execute("SELECT office.claim_run('w1')")
        conn.execute("ALTER EXTENSION office UPDATE TO '0.4.0'")
        rows = conn.execute(
            "SELECT status, heartbeat_at IS NOT DISTINCT FROM claimed_at, heartbeat_at IS NULL"
            " FROM office.runs ORDER BY status"
        ).fetchall()
    assert rows == [("claimed", True, False), ("queued", True, True)]
