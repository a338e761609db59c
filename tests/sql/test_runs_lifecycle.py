"""Claim, finish, fail, retry, cancel, recover and prune (docs/api.md §3,
docs/domain.md §2.7), on one connection; the concurrent cases are in
test_runs_races.py."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

Conn = psycopg.Connection[Any]


def enqueue(
    conn: Conn, agent: str, reason: str, key: str | None = None, task: str | None = None
) -> str:
    row = conn.execute(
        "SELECT outcome, run_id FROM office.enqueue_run(agent_profile_id => %s, reason => %s,"
        " idempotency_key => %s, task_id => %s)",
        [agent, reason, key, task],
    ).fetchone()
    assert row is not None and row[0] == "queued", row
    return str(row[1])


def claim(conn: Conn, worker: str | None = "w1", agent: str | None = None) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM office.claim_run(%s, %s)", [worker, agent]).fetchall()
    assert len(rows) <= 1
    return rows[0] if rows else None


def run(conn: Conn, run_id: str) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM office.runs WHERE id = %s", [run_id]).fetchone()
    assert row is not None
    return row


def call(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def age(conn: Conn, run_id: str, column: str, interval: str) -> None:
    assert column in (
        "requested_at",
        "claimed_at",
        "heartbeat_at",
        "finished_at",
        "scheduled_retry_at",
    )
    conn.execute(
        f"UPDATE office.runs SET {column} = now() - %s::interval WHERE id = %s",
        [interval, run_id],
    )


@pytest.fixture
def agents(db: Conn) -> list[str]:
    names = ["agent-a", "agent-b", "agent-c"]
    for name in names:
        db.execute("SELECT office.upsert_agent(%s, 'ws-1')", [name])
    # Distinct reasons so nothing coalesces.
    return names


# ---------------------------------------------------------------------------
# claim_run


def test_claim_takes_the_oldest_queued_run(db: Conn, agents: list[str]) -> None:
    a, b, _ = agents
    first = enqueue(db, a, "r1")
    second = enqueue(db, b, "r2")
    age(db, first, "requested_at", "1 minute")
    age(db, second, "requested_at", "2 minutes")
    claimed = claim(db, "worker-7")
    assert claimed is not None
    assert claimed["id"] == second
    assert claimed["status"] == "claimed"
    assert claimed["claimed_by"] == "worker-7"
    assert claimed["attempt"] == 1
    assert claimed["claimed_at"] is not None
    assert run(db, second)["status"] == "claimed"


def test_claim_breaks_requested_at_ties_by_id(db: Conn, agents: list[str]) -> None:
    ids = [enqueue(db, agents[i % 3], f"r{i}") for i in range(3)]
    db.execute("UPDATE office.runs SET requested_at = '2026-01-01 00:00:00+00'")
    claimed = claim(db)
    assert claimed is not None and claimed["id"] == min(ids)


def test_claim_of_an_empty_queue_returns_no_row(db: Conn) -> None:
    assert claim(db) is None


def test_at_most_one_claimed_run_per_agent(db: Conn, agents: list[str]) -> None:
    a, b, _ = agents
    a1 = enqueue(db, a, "r1")
    a2 = enqueue(db, a, "r2")
    b1 = enqueue(db, b, "r3")
    for run_id, minutes in ((a1, 3), (a2, 2), (b1, 1)):
        age(db, run_id, "requested_at", f"{minutes} minutes")
    first = claim(db)
    second = claim(db)
    assert first is not None and first["id"] == a1
    # a2 is older than b1 but agent-a already has a claimed run.
    assert second is not None and second["id"] == b1
    assert claim(db) is None
    # The rule holds in the table too.
    with pytest.raises(psycopg.errors.UniqueViolation):
        db.execute("UPDATE office.runs SET status = 'claimed' WHERE agent_profile_id = %s", [a])


def test_finishing_the_claimed_run_frees_the_agent(db: Conn, agents: list[str]) -> None:
    a = agents[0]
    first = enqueue(db, a, "r1")
    second = enqueue(db, a, "r2")
    claimed = claim(db)
    assert claimed is not None and claimed["id"] == first
    assert claim(db) is None
    assert call(db, "SELECT office.finish_run(%s, 1)", [first]) is True
    again = claim(db)
    assert again is not None and again["id"] == second


def test_claim_for_one_agent(db: Conn, agents: list[str]) -> None:
    a, b, _ = agents
    enqueue(db, a, "r1")
    b1 = enqueue(db, b, "r2")
    claimed = claim(db, "w", b)
    assert claimed is not None and claimed["id"] == b1
    assert claim(db, "w", b) is None
    assert claim(db, "w", "ghost") is None


def test_a_retry_is_not_claimable_before_its_time(db: Conn, agents: list[str]) -> None:
    a = agents[0]
    run_id = enqueue(db, a, "r1")
    claimed = claim(db)
    assert claimed is not None
    assert call(db, "SELECT office.retry_run(%s, 1, '10 minutes')", [run_id]) is True
    assert claim(db) is None
    db.execute(
        "UPDATE office.runs SET scheduled_retry_at = now() - interval '1 second' WHERE id = %s",
        [run_id],
    )
    again = claim(db)
    assert again is not None and again["id"] == run_id and again["attempt"] == 2


def test_a_worker_id_is_optional(db: Conn, agents: list[str]) -> None:
    enqueue(db, agents[0], "r1")
    claimed = claim(db, None)
    assert claimed is not None and claimed["claimed_by"] is None


# ---------------------------------------------------------------------------
# finish_run, fail_run: fenced on status and attempt


def test_finish_run(db: Conn, agents: list[str]) -> None:
    run_id = enqueue(db, agents[0], "r1")
    claim(db)
    assert call(db, "SELECT office.finish_run(%s, 2)", [run_id]) is False  # wrong attempt
    assert run(db, run_id)["status"] == "claimed"
    assert call(db, "SELECT office.finish_run(%s, 1)", [run_id]) is True
    row = run(db, run_id)
    assert row["status"] == "finished" and row["finished_at"] is not None
    assert call(db, "SELECT office.finish_run(%s, 1)", [run_id]) is False  # already finished
    assert call(db, "SELECT office.finish_run('ghost', 1)") is False


def test_a_queued_run_cannot_be_finished_or_failed(db: Conn, agents: list[str]) -> None:
    run_id = enqueue(db, agents[0], "r1")
    assert call(db, "SELECT office.finish_run(%s, 0)", [run_id]) is False
    assert call(db, "SELECT office.fail_run(%s, 0, 'x')", [run_id]) is False
    assert run(db, run_id)["status"] == "queued"


def test_fail_run(db: Conn, agents: list[str]) -> None:
    run_id = enqueue(db, agents[0], "r1")
    claim(db)
    assert call(db, "SELECT office.fail_run(%s, 0, 'boom')", [run_id]) is False
    assert call(db, "SELECT office.fail_run(%s, 1, 'boom')", [run_id]) is True
    row = run(db, run_id)
    assert (row["status"], row["error_message"]) == ("failed", "boom")
    assert row["finished_at"] is not None
    assert call(db, "SELECT office.finish_run(%s, 1)", [run_id]) is False


def test_a_late_finish_cannot_overwrite_a_cancel(db: Conn, agents: list[str]) -> None:
    run_id = enqueue(db, agents[0], "r1")
    claim(db)
    assert call(db, "SELECT office.cancel_run(%s, 'operator')", [run_id]) is True
    assert call(db, "SELECT office.finish_run(%s, 1)", [run_id]) is False
    assert run(db, run_id)["status"] == "cancelled"


# ---------------------------------------------------------------------------
# retry_run


def test_retry_run_requeues_in_place_and_keeps_the_key(db: Conn, agents: list[str]) -> None:
    run_id = enqueue(db, agents[0], "r1", key="K")
    claim(db)
    assert call(db, "SELECT office.retry_run(%s, 0, '2 minutes')", [run_id]) is False
    with db.transaction():  # one now() for the retry and the check
        assert call(db, "SELECT office.retry_run(%s, 1, '2 minutes')", [run_id]) is True
        delay = call(
            db, "SELECT scheduled_retry_at - now() FROM office.runs WHERE id = %s", [run_id]
        )
    assert delay == dt.timedelta(minutes=2)
    row = run(db, run_id)
    assert row["status"] == "queued"
    assert row["retry_count"] == 1
    assert row["idempotency_key"] == "K"
    assert row["claimed_at"] is None and row["claimed_by"] is None
    assert row["attempt"] == 1
    # The key is still held: a redelivery is deduplicated.
    dedup = db.execute(
        "SELECT outcome, run_id FROM office.enqueue_run('agent-a', 'r1', idempotency_key => 'K')"
    ).fetchone()
    assert dedup == ("deduped", run_id)


@pytest.mark.parametrize("delay", [None, "-1 second"])
def test_retry_run_refuses_a_bad_delay(db: Conn, agents: list[str], delay: str | None) -> None:
    run_id = enqueue(db, agents[0], "r1")
    claim(db)
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT office.retry_run(%s, 1, %s::interval)", [run_id, delay])
    assert info.value.sqlstate == "22023"
    assert run(db, run_id)["status"] == "claimed"


def test_retry_with_zero_delay_is_claimable_at_once(db: Conn, agents: list[str]) -> None:
    run_id = enqueue(db, agents[0], "r1")
    claim(db)
    assert call(db, "SELECT office.retry_run(%s, 1, '0')", [run_id]) is True
    again = claim(db)
    assert again is not None and again["id"] == run_id and again["attempt"] == 2


# ---------------------------------------------------------------------------
# cancel_run


@pytest.mark.parametrize("claimed", [False, True])
def test_cancel_from_queued_or_claimed(db: Conn, agents: list[str], claimed: bool) -> None:
    run_id = enqueue(db, agents[0], "r1")
    if claimed:
        claim(db)
    assert call(db, "SELECT office.cancel_run(%s, 'no longer needed')", [run_id]) is True
    row = run(db, run_id)
    assert (row["status"], row["cancel_reason"]) == ("cancelled", "no longer needed")
    assert row["finished_at"] is not None


@pytest.mark.parametrize("end", ["finish", "fail", "cancel"])
def test_cancel_leaves_a_terminal_run_untouched(db: Conn, agents: list[str], end: str) -> None:
    run_id = enqueue(db, agents[0], "r1")
    claim(db)
    if end == "finish":
        db.execute("SELECT office.finish_run(%s, 1)", [run_id])
    elif end == "fail":
        db.execute("SELECT office.fail_run(%s, 1, 'x')", [run_id])
    else:
        db.execute("SELECT office.cancel_run(%s, 'first')", [run_id])
    before = run(db, run_id)
    assert call(db, "SELECT office.cancel_run(%s, 'second')", [run_id]) is False
    assert run(db, run_id) == before


def test_cancel_of_an_unknown_run_is_false(db: Conn) -> None:
    assert call(db, "SELECT office.cancel_run('ghost', 'x')") is False


# ---------------------------------------------------------------------------
# recover_stale_runs


def test_recover_stale_runs(db: Conn, agents: list[str]) -> None:
    a, b, _ = agents
    stale = enqueue(db, a, "r1")
    fresh = enqueue(db, b, "r2")
    claim(db)
    claim(db)
    # Since 0.4.0 recovery reads the lease (heartbeat_at, set by the claim).
    age(db, stale, "claimed_at", "10 minutes")
    age(db, stale, "heartbeat_at", "10 minutes")
    assert call(db, "SELECT office.recover_stale_runs('5 minutes')") == 1
    row = run(db, stale)
    assert row["status"] == "queued"
    assert row["claimed_at"] is None and row["claimed_by"] is None
    assert row["heartbeat_at"] is None
    assert row["attempt"] == 1  # kept: the old worker stays fenced
    assert run(db, fresh)["status"] == "claimed"
    assert call(db, "SELECT office.recover_stale_runs('5 minutes')") == 0
    again = claim(db)
    assert again is not None and again["id"] == stale and again["attempt"] == 2
    assert call(db, "SELECT office.finish_run(%s, 1)", [stale]) is False
    assert call(db, "SELECT office.finish_run(%s, 2)", [stale]) is True


@pytest.mark.parametrize("older_than", [None, "-1 minute"])
def test_recover_refuses_a_bad_interval(db: Conn, older_than: str | None) -> None:
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT office.recover_stale_runs(%s::interval)", [older_than])
    assert info.value.sqlstate == "22023"


# ---------------------------------------------------------------------------
# prune_runs


def test_prune_deletes_old_terminal_runs_and_frees_their_keys(db: Conn, agents: list[str]) -> None:
    a, b, c = agents
    finished = enqueue(db, a, "r1", key="K-finished")
    failed = enqueue(db, b, "r2", key="K-failed")
    cancelled = enqueue(db, c, "r3", key="K-cancelled")
    for _ in range(3):
        claim(db)
    db.execute("SELECT office.finish_run(%s, 1)", [finished])
    db.execute("SELECT office.fail_run(%s, 1, 'x')", [failed])
    db.execute("SELECT office.cancel_run(%s, 'x')", [cancelled])
    recent = enqueue(db, a, "r4", key="K-recent")
    claim(db)
    db.execute("SELECT office.finish_run(%s, 1)", [recent])
    queued = enqueue(db, a, "r5", key="K-queued")
    claimed = enqueue(db, b, "r6", key="K-claimed")
    claim(db)
    for run_id in (finished, failed, cancelled):
        age(db, run_id, "finished_at", "8 days")
    db.execute("UPDATE office.runs SET requested_at = now() - interval '9 days'")

    assert call(db, "SELECT office.prune_runs('7 days')") == 3
    left = {r[0] for r in db.execute("SELECT id FROM office.runs").fetchall()}
    assert left == {recent, queued, claimed}
    again = db.execute(
        "SELECT outcome FROM office.enqueue_run('agent-a', 'r1', idempotency_key => 'K-finished')"
    ).fetchone()
    assert again == ("queued",)
    assert call(db, "SELECT office.prune_runs('7 days')") == 0


@pytest.mark.parametrize("older_than", [None, "-1 day"])
def test_prune_refuses_a_bad_interval(db: Conn, older_than: str | None) -> None:
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT office.prune_runs(%s::interval)", [older_than])
    assert info.value.sqlstate == "22023"


# ---------------------------------------------------------------------------
# Bounds (docs/api.md Conventions, since 0.4.0): 22023 naming the argument, nothing written


@pytest.mark.parametrize(
    ("query", "argument"),
    [
        ("SELECT office.fail_run(%(id)s, 1, repeat('x', 65537))", "error_message"),
        ("SELECT office.cancel_run(%(id)s, repeat('x', 65537))", "reason"),
        ("SELECT office.retry_run(%(id)s, 1, '101 years')", "delay"),
        ("SELECT office.recover_stale_runs('101 years')", "older_than"),
        ("SELECT office.prune_runs('-1 second')", "older_than"),
    ],
)
def test_bounds_of_the_lifecycle_functions(
    db: Conn, agents: list[str], query: str, argument: str
) -> None:
    run_id = enqueue(db, agents[0], "r1")
    claim(db)
    before = db.execute("SELECT * FROM office.runs").fetchall()
    with pytest.raises(psycopg.Error) as info:
        db.execute(query, {"id": run_id})
    assert info.value.sqlstate == "22023" and argument in str(info.value)
    assert db.execute("SELECT * FROM office.runs").fetchall() == before


def test_free_texts_of_64_kib_are_accepted(db: Conn, agents: list[str]) -> None:
    run_id = enqueue(db, agents[0], "r1")
    claim(db)
    assert call(db, "SELECT office.fail_run(%s, 1, repeat('x', 65536))", [run_id]) is True


# ---------------------------------------------------------------------------
# Roles


def test_a_worker_claims_and_finishes_and_a_producer_cannot_claim(
    db: Conn, agents: list[str]
) -> None:
    first = enqueue(db, agents[0], "r1")
    second = enqueue(db, agents[1], "r2")
    third = enqueue(db, agents[2], "r3")
    db.execute("SET ROLE office_worker")
    try:
        claimed = claim(db)
        assert claimed is not None and claimed["id"] == first
        assert call(db, "SELECT office.finish_run(%s, 1)", [first]) is True
        claim(db)
        assert call(db, "SELECT office.fail_run(%s, 1, 'x')", [second]) is True
        assert call(db, "SELECT office.cancel_run(%s, 'x')", [third]) is True
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("SELECT office.prune_runs('1 day')")
    finally:
        db.execute("RESET ROLE")
    db.execute("SET ROLE office_producer")
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            claim(db)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("SELECT office.finish_run('x', 1)")
    finally:
        db.execute("RESET ROLE")


def test_an_admin_recovers_and_prunes_and_a_worker_cannot_recover(db: Conn) -> None:
    db.execute("SET ROLE office_worker")
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("SELECT office.recover_stale_runs('1 minute')")
    finally:
        db.execute("RESET ROLE")
    db.execute("SET ROLE office_admin")
    try:
        assert call(db, "SELECT office.recover_stale_runs('1 minute')") == 0
        assert call(db, "SELECT office.prune_runs('1 day')") == 0
        assert claim(db) is None
    finally:
        db.execute("RESET ROLE")


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("status", "bogus"),
        ("reason", ""),
        ("payload", "[]"),
        ("payload", "1"),
        ("idempotency_key", ""),
        ("idempotency_key", "k" * 513),
    ],
)
def test_a_run_row_written_straight_is_checked(db: Conn, column: str, value: str) -> None:
    # The table's own CHECK (runs_row_check), for a writer that bypasses the
    # functions: by an insert and by an update, nothing written either way.
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    run_id = enqueue(db, "a1", "r", "k-1")
    cast = "jsonb" if column == "payload" else "text"
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        db.execute(
            f"INSERT INTO office.runs (agent_profile_id, reason, {column})"
            f" VALUES ('a1', 'r2', %s::{cast})"
            if column != "reason"
            else "INSERT INTO office.runs (agent_profile_id, reason) VALUES ('a1', %s)",
            [value],
        )
    assert caught.value.diag.constraint_name == "runs_row_check"
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(f"UPDATE office.runs SET {column} = %s::{cast} WHERE id = %s", [value, run_id])
    assert db.execute("SELECT count(*) FROM office.runs").fetchone() == (1,)
    assert db.execute(
        "SELECT status, reason, payload ->> 'agent_profile_id', idempotency_key FROM office.runs"
    ).fetchone() == ("queued", "r", "a1", "k-1")


def test_the_run_row_check_admits_the_bounds(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    db.execute(
        "INSERT INTO office.runs (agent_profile_id, reason, status, idempotency_key)"
        " SELECT 'a1', 'r', s, k FROM unnest(ARRAY['queued', 'claimed', 'finished', 'failed',"
        " 'cancelled'], ARRAY[repeat('k', 512), NULL, 'x', NULL, 'y']) AS u(s, k)"
    )
    assert db.execute("SELECT count(*) FROM office.runs").fetchone() == (5,)
