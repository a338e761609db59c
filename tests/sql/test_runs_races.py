"""Races on the run queue with real connections (the ``concurrently``
fixture releases every caller at once). The isolation specs that pin the
interleavings (tests/isolation/specs/runs_*.spec) run in
tests/sql/test_isolation_harness.py."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests import harness

Conn = psycopg.Connection[Any]

OUTCOMES = {"queued", "deduped", "coalesced"}


def enqueue_call(reason: str, **kwargs: Any) -> Callable[[Conn], tuple[str, str | None, str]]:
    """A caller that enqueues for agent-a with a long coalesce window (so the
    assertions never depend on how fast the machine is)."""

    def call(conn: Conn) -> tuple[str, str | None, str]:
        conn.execute("SET office.coalesce_window = '1 hour'")
        row = conn.execute(
            "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run("
            " agent_profile_id => 'agent-a', reason => %(reason)s,"
            " idempotency_key => %(key)s, task_id => %(task)s, entry_triggered => %(entry)s)",
            {
                "reason": reason,
                "key": kwargs.get("key"),
                "task": kwargs.get("task"),
                "entry": kwargs.get("entry", False),
            },
        ).fetchone()
        assert row is not None
        return (row[0], row[1], row[2])

    return call


def all_runs(conn: Conn) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM office.runs ORDER BY requested_at, id").fetchall()


@pytest.fixture
def agent(db: Conn) -> str:
    db.execute("SELECT office.upsert_agent('agent-a', 'ws-1')")
    return "agent-a"


# ---------------------------------------------------------------------------
# Producers


@pytest.mark.parametrize(
    ("reason", "key", "entry"),
    [
        ("task_assigned", "task_assigned:T:agent-a:1", False),  # coalescible key: bucket lock
        ("task_comment", "task_comment:c1:agent-a", False),  # never coalesces: unique index
        ("stage_pending", "stage:entry:1", True),  # entry-triggered: unique index
    ],
    ids=["ordinary-key", "comment-key", "entry-triggered"],
)
def test_s12_sixteen_producers_one_key_leave_one_row(
    db: Conn, agent: str, concurrently: harness.Concurrently, reason: str, key: str, entry: bool
) -> None:
    results = harness.values(
        concurrently([enqueue_call(reason, key=key, task="T", entry=entry)] * 16)
    )
    rows = all_runs(db)
    assert len(rows) == 1
    assert rows[0]["idempotency_key"] == key
    outcomes = Counter(outcome for outcome, _, _ in results)
    assert set(outcomes) <= OUTCOMES
    assert outcomes["queued"] == 1
    assert {run_id for _, _, run_id in results} == {rows[0]["id"]}
    if entry or key.startswith("task_comment:"):
        assert outcomes["deduped"] == 15  # windowed or durable; never coalesced
    assert rows[0]["coalesced_count"] == 1 + outcomes["coalesced"]


def test_s13_concurrent_producers_with_a_neighbour_are_all_suppressed(
    db: Conn, agent: str, concurrently: harness.Concurrently
) -> None:
    neighbour = enqueue_call("task_assigned", task="T")(db)
    assert neighbour[0] == "queued"
    results = harness.values(concurrently([enqueue_call("task_assigned", key="K", task="T")] * 16))
    assert {outcome for outcome, _, _ in results} <= {"coalesced", "deduped"}
    rows = all_runs(db)
    assert [r["id"] for r in rows] == [neighbour[2]]
    assert rows[0]["idempotency_key"] is None  # no row has K


def test_sixteen_keyless_producers_in_one_bucket_leave_one_run(
    db: Conn, agent: str, concurrently: harness.Concurrently
) -> None:
    results = harness.values(concurrently([enqueue_call("heartbeat")] * 16))
    assert Counter(outcome for outcome, _, _ in results) == {"queued": 1, "coalesced": 15}
    rows = all_runs(db)
    assert len(rows) == 1
    assert (rows[0]["status"], rows[0]["coalesced_count"]) == ("queued", 16)
    stats = db.execute("SELECT total FROM office.dedup_stats WHERE kind = 'coalesced'").fetchone()
    assert stats == (15,)


def test_keyless_producers_in_different_buckets_do_not_meet(
    db: Conn, agent: str, concurrently: harness.Concurrently
) -> None:
    results = harness.values(
        concurrently([enqueue_call("heartbeat", task=f"T{i}") for i in range(8)])
    )
    assert [outcome for outcome, _, _ in results] == ["queued"] * 8
    assert len(all_runs(db)) == 8


def test_a_repeatable_read_producer_that_waited_is_told_to_retry(
    db: Conn, dsn: str, agent: str
) -> None:
    # Its snapshot cannot see the run the lock holder committed: rather than
    # insert a second run into the bucket, it gets 40001.
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn) as rr:
        rr.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        rr.execute("SELECT 1")  # begin, and take the snapshot
        enqueue_call("heartbeat")(holder)  # holds the bucket lock, not committed
        done: list[BaseException | tuple[str, str | None, str]] = []
        waiter = threading.Thread(target=lambda: _capture(done, enqueue_call("heartbeat"), rr))
        waiter.start()
        harness.wait_until_blocked(db, rr.info.backend_pid, "the bucket lock")
        holder.commit()
        waiter.join(60)
        rr.rollback()
    assert len(done) == 1 and isinstance(done[0], psycopg.errors.SerializationFailure)
    assert len(all_runs(db)) == 1


def test_producers_at_every_isolation_level_serve_each_key_once(
    db: Conn, dsn: str, agent: str
) -> None:
    # The red team's race: READ COMMITTED producers serve a key (by a coalesce,
    # recording it, or by inserting its run) while REPEATABLE READ and
    # SERIALIZABLE producers whose snapshot is older enqueue it the other way.
    # Every producer takes its snapshot, then all are released at once; one
    # told to retry (40001) retries in a new transaction, as a client must.
    # Each key must end served by one run, and every producer's answer for it
    # must name that run. tests/isolation/specs/runs_snapshot_key_race.spec
    # pins each interleaving.
    levels = ["read committed"] * 2 + ["repeatable read"] * 3 + ["serializable"] * 3
    ways = [("heartbeat", False), ("digest", False), ("deploy", True)]  # two buckets, an insert
    rounds = 60
    db.execute("SELECT office.enqueue_run('agent-a', 'heartbeat')")  # coalesce targets
    db.execute("SELECT office.enqueue_run('agent-a', 'digest')")
    released = threading.Barrier(len(levels), timeout=60)
    answers: dict[tuple[int, int], str] = {}
    retries = Counter[str]()

    def producer(index: int) -> Callable[[Conn], None]:
        def run(conn: Conn) -> None:
            conn.execute("SET office.coalesce_window = '1 hour'")
            for n in range(rounds):
                reason, entry = ways[(n + index) % len(ways)]
                first = True
                while True:
                    conn.execute(f"BEGIN ISOLATION LEVEL {levels[index]}")
                    conn.execute("SELECT count(*) FROM office.runs")  # the snapshot
                    if first:
                        released.wait()
                        first = False
                    try:
                        row = conn.execute(
                            "SELECT run_id FROM office.enqueue_run('agent-a', %s,"
                            " idempotency_key => %s, entry_triggered => %s)",
                            [reason, f"k{n}", entry],
                        ).fetchone()
                        conn.execute("COMMIT")
                    except psycopg.errors.SerializationFailure:
                        conn.execute("ROLLBACK")
                        retries[levels[index]] += 1
                        continue
                    assert row is not None
                    answers[(index, n)] = row[0]
                    break

        return run

    outcomes = harness.run_concurrently(dsn, [producer(i) for i in range(len(levels))], timeout=300)
    assert [o.error for o in outcomes] == [None] * len(levels)
    serving = db.execute(
        "SELECT s.key, array_agg(s.run_id ORDER BY s.run_id)"
        "  FROM (SELECT r.idempotency_key AS key, r.id AS run_id FROM office.runs r"
        "         WHERE r.idempotency_key IS NOT NULL"
        "        UNION ALL"
        "        SELECT k.idempotency_key, k.run_id FROM office.run_keys_recorded k) AS s"
        " GROUP BY s.key"
    ).fetchall()
    served_by = dict(serving)
    assert sorted(served_by) == sorted(f"k{n}" for n in range(rounds))
    assert {key: ids for key, ids in served_by.items() if len(ids) != 1} == {}
    assert {
        (index, n): run_id
        for (index, n), run_id in answers.items()
        if [run_id] != served_by[f"k{n}"]
    } == {}
    print(f"40001 retries by level: {dict(retries)}")


def _capture(sink: list[Any], call: Callable[[Conn], Any], conn: Conn) -> None:
    try:
        sink.append(call(conn))
    except BaseException as exc:
        sink.append(exc)


# ---------------------------------------------------------------------------
# Claimers


@pytest.fixture
def four_agents(db: Conn) -> list[str]:
    names = [f"agent-{i}" for i in range(4)]
    for name in names:
        db.execute("SELECT office.upsert_agent(%s, 'ws-1')", [name])
        for n in range(5):  # several queued runs each, distinct reasons: no coalescing
            db.execute("SELECT office.enqueue_run(%s, %s)", [name, f"reason-{n}"])
    return names


def test_eight_claimers_holding_their_claims_get_one_run_per_agent(
    db: Conn, four_agents: list[str], concurrently: harness.Concurrently
) -> None:
    # Every claimer claims inside an open transaction and keeps it open until
    # all eight have claimed: a claimer that waited for another would break
    # the barrier. Four agents: four claims, four empty results.
    hold = threading.Barrier(8, timeout=60)

    def claimer(conn: Conn) -> tuple[str, str] | None:
        with conn.transaction():
            row = conn.execute("SELECT id, agent_profile_id FROM office.claim_run()").fetchone()
            hold.wait()
        return None if row is None else (row[0], row[1])

    results = harness.values(concurrently([claimer] * 8))
    claimed = [r for r in results if r is not None]
    assert len(claimed) == 4
    assert sorted(agent for _, agent in claimed) == sorted(four_agents)
    per_agent = db.execute(
        "SELECT agent_profile_id, count(*) FROM office.runs WHERE status = 'claimed'"
        " GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert per_agent == [(a, 1) for a in sorted(four_agents)]


def test_eight_claimers_drain_four_agents_without_a_double_claim(
    db: Conn, four_agents: list[str], concurrently: harness.Concurrently
) -> None:
    def claimer(conn: Conn) -> list[str]:
        done: list[str] = []
        while True:
            row = conn.execute("SELECT id, agent_profile_id, attempt FROM office.claim_run()")
            got = row.fetchone()
            if got is None:
                left = conn.execute(
                    "SELECT count(*) FROM office.runs WHERE status IN ('queued', 'claimed')"
                ).fetchone()
                if left == (0,):
                    return done
                continue
            run_id, agent_id, attempt = got
            claimed = conn.execute(
                "SELECT count(*) FROM office.runs"
                " WHERE agent_profile_id = %s AND status = 'claimed'",
                [agent_id],
            ).fetchone()
            assert claimed == (1,), f"{agent_id} has {claimed} claimed runs"
            finished = conn.execute("SELECT office.finish_run(%s, %s)", [run_id, attempt])
            assert finished.fetchone() == (True,)
            done.append(run_id)

    results = harness.values(concurrently([claimer] * 8))
    done = [run_id for per_claimer in results for run_id in per_claimer]
    assert len(done) == len(set(done)) == 20
    rows = db.execute("SELECT status, attempt, count(*) FROM office.runs GROUP BY 1, 2").fetchall()
    assert rows == [("finished", 1, 20)]


def test_claim_recover_reclaim_fences_the_stale_worker(db: Conn, dsn: str, agent: str) -> None:
    db.execute("SELECT office.enqueue_run('agent-a', 'heartbeat')")
    with (
        psycopg.connect(dsn, autocommit=True) as stale,
        psycopg.connect(dsn, autocommit=True) as fresh,
    ):
        first = stale.execute("SELECT id, attempt FROM office.claim_run('stale')").fetchone()
        assert first is not None and first[1] == 1
        recovered = db.execute("SELECT office.recover_stale_runs('0')").fetchone()
        assert recovered == (1,)
        second = fresh.execute("SELECT id, attempt FROM office.claim_run('fresh')").fetchone()
        assert second == (first[0], 2)
        before = all_runs(db)
        assert stale.execute("SELECT office.finish_run(%s, 1)", [first[0]]).fetchone() == (False,)
        assert stale.execute("SELECT office.fail_run(%s, 1, 'late')", [first[0]]).fetchone() == (
            False,
        )
        assert stale.execute("SELECT office.retry_run(%s, 1, '0')", [first[0]]).fetchone() == (
            False,
        )
        assert all_runs(db) == before
        assert before[0]["claimed_by"] == "fresh" and before[0]["status"] == "claimed"
        assert fresh.execute("SELECT office.finish_run(%s, 2)", [first[0]]).fetchone() == (True,)
    assert all_runs(db)[0]["status"] == "finished"
