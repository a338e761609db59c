"""office.agent_ready, the list of agents an unfiltered claim_run() walks
(sql/30_runs.sql, "readiness"): every change that makes a run
claimable lists its agent again, claimers remove busy, paused and empty
agents, a retry-delayed agent is looked at again when its run is due, the
backstop in recover_stale_runs restores what a bypassing path left out, and
under concurrent claimers, producers and finishers no due run of a free,
accepting agent is ever left unclaimable."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests import harness

Conn = psycopg.Connection[Any]


def ready_rows(db: Conn, agent: str) -> int:
    row = db.execute(
        "SELECT count(*) FROM office.agent_ready WHERE agent_profile_id = %s", [agent]
    ).fetchone()
    assert row is not None
    return int(row[0])


def claim_any(db: Conn) -> tuple[str, str, int] | None:
    """An unfiltered claim: (run id, agent, attempt) or None."""
    row = db.execute("SELECT id, agent_profile_id, attempt FROM office.claim_run('w')").fetchone()
    return None if row is None else (row[0], row[1], row[2])


def enqueue(db: Conn, agent: str, reason: str) -> str:
    row = db.execute("SELECT run_id FROM office.enqueue_run(%s, %s)", [agent, reason]).fetchone()
    assert row is not None
    return str(row[0])


def busy_with_a_run_behind(db: Conn) -> tuple[str, int, str]:
    """Agent a1 holds a claim on r1, r2 is queued behind it, and a claimer
    has already removed a1's row (it is busy): the state in which the end of
    the claim alone must list a1 again. Returns (r1, its attempt, r2)."""
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    r1 = enqueue(db, "a1", "r1")
    claimed = claim_any(db)
    assert claimed is not None and claimed[0] == r1
    r2 = enqueue(db, "a1", "r2")
    assert ready_rows(db, "a1") == 1  # queued while busy: a false positive ...
    assert claim_any(db) is None
    assert ready_rows(db, "a1") == 0  # ... that the claimer removed
    return r1, claimed[2], r2


@pytest.mark.parametrize("agent", [None, "a1"])
def test_a_claim_removes_its_agents_rows_unless_a_producer_holds_them(
    db: Conn, dsn: str, agent: str | None
) -> None:
    # claim_run removes the rows of the agent it has just claimed for itself
    # (sql/30_runs.sql): at once, in the claim's transaction ...
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    r1 = enqueue(db, "a1", "r1")
    enqueue(db, "a1", "r2")
    with db.transaction():
        db.execute("SET LOCAL TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        enqueue(db, "a1", "r3")  # under REPEATABLE READ: a row without a look
    assert ready_rows(db, "a1") == 2
    got = db.execute("SELECT id FROM office.claim_run('w', %s)", [agent]).fetchone()
    assert got == (r1,)
    assert ready_rows(db, "a1") == 0
    # ... but never waiting: while a producer holds the agent's readiness
    # lock, the claim goes ahead and leaves the rows to the next claimer.
    db.execute("SELECT office.finish_run(%s, 1)", [r1])
    assert ready_rows(db, "a1") == 1
    with psycopg.connect(dsn, autocommit=True) as producer, producer.transaction():
        producer.execute(
            "SELECT pg_advisory_xact_lock_shared(hashtextextended('office.runs.ready:a1', 0))"
        )
        got = db.execute(
            "SELECT agent_profile_id FROM office.claim_run('w', %s)", [agent]
        ).fetchone()
        assert got == ("a1",)
        assert ready_rows(db, "a1") == 1
    assert claim_any(db) is None  # a1 is busy: the row was a false positive ...
    assert ready_rows(db, "a1") == 0  # ... that this claimer removed


@pytest.mark.parametrize("path", ["finish_run", "fail_run", "cancel_run", "delete"])
def test_the_end_of_a_claim_lists_the_agent_again(db: Conn, path: str) -> None:
    r1, attempt, r2 = busy_with_a_run_behind(db)
    if path == "finish_run":
        db.execute("SELECT office.finish_run(%s, %s)", [r1, attempt])
    elif path == "fail_run":
        db.execute("SELECT office.fail_run(%s, %s, 'boom')", [r1, attempt])
    elif path == "cancel_run":
        db.execute("SELECT office.cancel_run(%s, 'stop')", [r1])
    else:
        db.execute("DELETE FROM office.runs WHERE id = %s", [r1])
    got = claim_any(db)
    assert got is not None and got[0] == r2


def test_a_claim_ending_with_nothing_queued_lists_nothing(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    enqueue(db, "a1", "r1")
    claimed = claim_any(db)
    assert claimed is not None
    db.execute("SELECT office.finish_run(%s, %s)", [claimed[0], claimed[2]])
    assert ready_rows(db, "a1") == 0


@pytest.mark.parametrize("path", ["retry_run", "recover_stale_runs"])
def test_a_run_queued_again_is_claimable_again(db: Conn, path: str) -> None:
    r1, attempt, r2 = busy_with_a_run_behind(db)
    if path == "retry_run":
        db.execute("SELECT office.retry_run(%s, %s, '0')", [r1, attempt])
    else:
        # recover_stale_runs repairs the list first, while a1 is still busy
        # (so the repair does not list it): the requeue itself does.
        db.execute(
            "UPDATE office.runs SET heartbeat_at = now() - interval '1 hour' WHERE id = %s", [r1]
        )
        assert db.execute("SELECT office.recover_stale_runs('1 minute')").fetchone() == (1,)
    got = claim_any(db)
    assert got is not None and got[0] == r1  # older than r2
    db.execute("SELECT office.finish_run(%s, %s)", [got[0], got[2]])
    got = claim_any(db)
    assert got is not None and got[0] == r2


@pytest.mark.parametrize("path", ["enqueue_run", "enqueue_runs", "dispatch_wakeup", "insert"])
def test_every_producer_lists_the_agent(db: Conn, path: str) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    assert ready_rows(db, "a1") == 0
    if path == "enqueue_run":
        enqueue(db, "a1", "r1")
    elif path == "enqueue_runs":
        db.execute(
            "SELECT * FROM office.enqueue_runs(%s)",
            ['[{"agent_profile_id": "a1", "reason": "r1"}]'],
        )
    elif path == "dispatch_wakeup":
        row = db.execute(
            "SELECT wakeup_request_id FROM office.request_wakeup('a1', 'manual', 'r1')"
        ).fetchone()
        assert row is not None
        assert db.execute("SELECT status FROM office.dispatch_wakeup(%s)", row).fetchone() == (
            "claimed",
        )
    else:
        db.execute("INSERT INTO office.runs (agent_profile_id, reason) VALUES ('a1', 'r1')")
    assert ready_rows(db, "a1") == 1
    got = claim_any(db)
    assert got is not None and got[1] == "a1"


def test_a_producer_under_repeatable_read_lists_the_agent(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    with db.transaction():
        db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        run_id = enqueue(db, "a1", "r1")
    got = claim_any(db)
    assert got is not None and got[0] == run_id


@pytest.mark.parametrize("how", ["set_agent_status", "upsert_agent"])
def test_a_paused_agents_runs_stay_queued_and_are_claimed_after_resume(db: Conn, how: str) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    run_id = enqueue(db, "a1", "r1")
    db.execute("SELECT office.set_agent_status('a1', 'paused')")
    assert claim_any(db) is None
    assert ready_rows(db, "a1") == 0  # removed: only a resume lists it again
    assert db.execute("SELECT status FROM office.runs").fetchall() == [("queued",)]
    if how == "set_agent_status":
        db.execute("SELECT office.set_agent_status('a1', 'idle')")
    else:
        db.execute("SELECT office.upsert_agent('a1', 'w', status => 'running')")
    got = claim_any(db)
    assert got is not None and got[0] == run_id


def test_an_agent_created_after_its_runs_is_listed(db: Conn) -> None:
    # Runs of an agent that does not exist (written by hand) are not
    # claimable; the agent's creation lists it.
    db.execute("INSERT INTO office.runs (agent_profile_id, reason) VALUES ('late', 'r1')")
    assert claim_any(db) is None
    assert ready_rows(db, "late") == 0
    db.execute("SELECT office.upsert_agent('late', 'w')")
    got = claim_any(db)
    assert got is not None and got[1] == "late"


def test_a_retry_delayed_run_is_claimed_when_due(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    run_id = enqueue(db, "a1", "r1")
    claimed = claim_any(db)
    assert claimed is not None
    db.execute("SELECT office.retry_run(%s, %s, '0.5 seconds')", [run_id, claimed[2]])
    assert claim_any(db) is None
    # Kept, but not looked at again before the run is due.
    due = db.execute(
        "SELECT r.due_at = q.scheduled_retry_at FROM office.agent_ready r"
        " JOIN office.runs q ON q.agent_profile_id = r.agent_profile_id"
    ).fetchall()
    assert due == [(True,)]
    time.sleep(0.6)  # past scheduled_retry_at: not a timing assertion
    got = claim_any(db)
    assert got is not None and got[0] == run_id


def test_a_due_run_of_a_delayed_agent_is_claimable_at_once(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    r1 = enqueue(db, "a1", "r1")
    claimed = claim_any(db)
    assert claimed is not None
    db.execute("SELECT office.retry_run(%s, %s, '1 hour')", [r1, claimed[2]])
    assert claim_any(db) is None
    r2 = enqueue(db, "a1", "r2")
    got = claim_any(db)
    assert got is not None and got[0] == r2


@pytest.mark.parametrize("bypass", ["rows deleted", "replica role"])
def test_the_backstop_restores_what_a_bypassing_path_left_out(db: Conn, bypass: str) -> None:
    db.execute("SELECT office.upsert_agent(id, 'w') FROM unnest(ARRAY['a1', 'busy', 'paused']) id")
    for agent in ["busy", "busy", "paused"]:
        enqueue(db, agent, "r")
    assert db.execute("SELECT agent_profile_id FROM office.claim_run('w', 'busy')").fetchone()
    db.execute("SELECT office.set_agent_status('paused', 'paused')")
    if bypass == "rows deleted":
        enqueue(db, "a1", "r1")
        db.execute("DELETE FROM office.agent_ready")
    else:
        # What a logical-replication apply or a restore with triggers off does.
        db.execute("SET session_replication_role = replica")
        db.execute("INSERT INTO office.runs (agent_profile_id, reason) VALUES ('a1', 'r1')")
        db.execute("RESET session_replication_role")
        db.execute("DELETE FROM office.agent_ready WHERE agent_profile_id <> 'a1'")
    assert ready_rows(db, "a1") == 0
    assert claim_any(db) is None  # the stall the backstop bounds
    # Only the free, accepting agent is listed; nothing is recovered.
    assert db.execute("SELECT office.recover_stale_runs('1 hour')").fetchone() == (0,)
    rows = db.execute("SELECT agent_profile_id FROM office.agent_ready").fetchall()
    assert rows == [("a1",)]
    got = claim_any(db)
    assert got is not None and got[1] == "a1"


def test_claimers_producers_and_finishers_never_leave_a_claimable_run_behind(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    agents = [f"agent-{i}" for i in range(6)]
    db.execute("SELECT office.upsert_agent(id, 'w') FROM unnest(%s::text[]) id", [agents])
    stop = threading.Event()
    violations: list[Any] = []

    def watcher() -> None:
        with psycopg.connect(harness.conninfo(db.info.dbname), autocommit=True) as conn:
            while not stop.is_set():
                violations.extend(
                    conn.execute(
                        "SELECT agent_profile_id FROM office.runs WHERE status = 'claimed'"
                        " GROUP BY 1 HAVING count(*) > 1"
                    ).fetchall()
                )

    def producer(seed: int) -> Callable[[Conn], int]:
        def run(conn: Conn) -> int:
            rng = random.Random(seed)
            refused = 0
            for n in range(400):
                try:
                    if rng.random() < 0.2:
                        # A multi-statement producer: its runs commit together.
                        with conn.transaction():
                            for k in range(3):
                                enqueue(conn, rng.choice(agents), f"p{seed}.{n}.{k}")
                    else:
                        enqueue(conn, rng.choice(agents), f"p{seed}.{n}")
                except psycopg.Error as exc:
                    if exc.sqlstate != "OFA02":  # agent-0 paused right now
                        raise
                    refused += 1
            return refused

        return run

    def worker(seed: int) -> Callable[[Conn], int]:
        def run(conn: Conn) -> int:
            rng = random.Random(seed)
            claims = 0
            for _ in range(600):
                row = conn.execute(
                    "SELECT id, attempt FROM office.claim_run(%s, %s)",
                    [f"w{seed}", rng.choice([None, None, None, *agents])],
                ).fetchone()
                if row is None:
                    continue
                claims += 1
                end = rng.choice(["finish", "finish", "fail", "retry", "cancel"])
                if end == "finish":
                    conn.execute("SELECT office.finish_run(%s, %s)", row)
                elif end == "fail":
                    conn.execute("SELECT office.fail_run(%s, %s, 'x')", row)
                elif end == "retry":
                    conn.execute("SELECT office.retry_run(%s, %s, '0')", row)
                else:
                    conn.execute("SELECT office.cancel_run(%s, 'x')", [row[0]])
            return claims

        return run

    def pauser(conn: Conn) -> int:
        rng = random.Random(99)
        for _ in range(100):
            conn.execute(
                "SELECT office.set_agent_status(%s, %s)",
                [agents[0], rng.choice(["paused", "idle"])],
            )
        conn.execute("SELECT office.set_agent_status(%s, 'idle')", [agents[0]])
        return 0

    watch = threading.Thread(target=watcher)
    watch.start()
    try:
        outcomes = concurrently(
            [producer(1), producer(2), producer(3), worker(4), worker(5), worker(6), pauser]
        )
    finally:
        stop.set()
        watch.join(60)
    assert [o.error for o in outcomes] == [None] * 7
    assert sum(o.value for o in outcomes[3:6]) > 0  # claims made
    assert violations == []
    # Quiet now. Every claimed run is finished; then unfiltered claims alone
    # must drain every queued run (all are due, every agent accepts runs).
    db.execute("SELECT office.finish_run(id, attempt) FROM office.runs WHERE status = 'claimed'")
    queued = db.execute("SELECT count(*) FROM office.runs WHERE status = 'queued'").fetchone()
    assert queued is not None and queued[0] > 0
    drained = 0
    while (got := claim_any(db)) is not None:
        db.execute("SELECT office.finish_run(%s, %s)", [got[0], got[2]])
        drained += 1
    assert drained == queued[0]
    assert db.execute("SELECT count(*) FROM office.runs WHERE status = 'queued'").fetchone() == (0,)


def test_a_run_inserted_in_another_status_lists_nothing(db: Conn) -> None:
    # runs_30_ready_insert has no WHEN clause: the function itself tests that
    # the inserted run is queued before it lists the agent.
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    db.execute("DELETE FROM office.agent_ready")
    for status in ("claimed", "finished", "failed", "cancelled"):
        db.execute(
            "INSERT INTO office.runs (id, agent_profile_id, reason, status)"
            " VALUES (%s, 'a1', 'r', %s)",
            [f"x-{status}", status],
        )
        assert ready_rows(db, "a1") == 0, status
    db.execute(
        "INSERT INTO office.runs (id, agent_profile_id, reason, status)"
        " VALUES ('q', 'a1', 'r', 'queued')"
    )
    assert ready_rows(db, "a1") == 1  # the same insert, queued: listed


def test_an_update_that_changes_nothing_it_depends_on_lists_nothing(db: Conn) -> None:
    # runs_30_ready_update has no WHEN clause: the function tells an update
    # that leaves the run queued where and when it was, or a claim held as it
    # was, from one that makes a run claimable, and lists nobody for it.
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    r1 = enqueue(db, "a1", "r1")
    db.execute("DELETE FROM office.agent_ready")
    db.execute(
        "UPDATE office.runs SET status = 'queued', requested_at = requested_at + interval '1 s'"
        " WHERE id = %s",
        [r1],
    )
    assert ready_rows(db, "a1") == 0
    db.execute(
        "UPDATE office.runs SET requested_at = requested_at - interval '2 s' WHERE id = %s", [r1]
    )
    assert ready_rows(db, "a1") == 1  # re-dated earlier: listed
    claimed = claim_any(db)
    assert claimed is not None and claimed[0] == r1
    enqueue(db, "a1", "r2")
    db.execute("DELETE FROM office.agent_ready")
    db.execute("UPDATE office.runs SET status = 'claimed' WHERE id = %s", [r1])
    assert ready_rows(db, "a1") == 0
    db.execute("SELECT office.finish_run(%s, %s)", [r1, claimed[2]])
    assert ready_rows(db, "a1") == 1  # the claim ended: listed


def test_a_heartbeat_of_a_parent_wake_run_marks_nothing_and_its_end_does(db: Conn) -> None:
    # runs_70_parent_wake_mark_update's WHEN clause names the reason only;
    # the function marks the parent when the run leaves flight, not on a beat.
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    db.execute("SELECT office.enqueue_run('a1', 'task_children_completed', '{}', 'k', 'P')")
    claimed = claim_any(db)
    assert claimed is not None
    db.execute("DELETE FROM office.parent_wake_marks")
    db.execute("SELECT office.heartbeat_run(%s, %s)", [claimed[0], claimed[2]])
    assert db.execute("SELECT count(*) FROM office.parent_wake_marks").fetchone() == (0,)
    db.execute("SELECT office.finish_run(%s, %s)", [claimed[0], claimed[2]])
    assert db.execute("SELECT parent_task_id FROM office.parent_wake_marks").fetchall() == [("P",)]
