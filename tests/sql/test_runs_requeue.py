"""requeue_run, requeue_runs and cancel_runs (docs/api.md §3, since 0.5.0): a
failed or cancelled run back to queued in place (its key still served by it,
claimable and signalled like a new run), the bulk forms in one statement
locking runs in id order, and cancel_runs racing claims. The interleaving of
a bulk cancel waiting on a claim is tests/isolation/specs/runs_cancel_race.spec."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests import harness

Conn = psycopg.Connection[Any]
MARK = "-- end --"


def enqueue(conn: Conn, agent: str, reason: str, key: str | None = None) -> tuple[str, str]:
    row = conn.execute(
        "SELECT outcome, run_id FROM office.enqueue_run(%s, %s, idempotency_key => %s)",
        [agent, reason, key],
    ).fetchone()
    assert row is not None
    return (str(row[0]), str(row[1]))


def claim(conn: Conn, agent: str | None = None) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM office.claim_run('w1', %s)", [agent]).fetchall()
    return rows[0] if rows else None


def run(conn: Conn, run_id: str) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM office.runs WHERE id = %s", [run_id]).fetchone()
    assert row is not None
    return row


def value(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


@pytest.fixture
def agents(db: Conn) -> list[str]:
    names = ["agent-a", "agent-b"]
    for name in names:
        db.execute("SELECT office.upsert_agent(%s, 'ws-1')", [name])
    return names


def failed_run(db: Conn, agent: str, reason: str, key: str | None = None) -> str:
    outcome, run_id = enqueue(db, agent, reason, key)
    assert outcome == "queued"
    got = claim(db, agent)
    assert got is not None and got["id"] == run_id
    assert value(db, "SELECT office.fail_run(%s, %s, 'boom')", [run_id, got["attempt"]])
    return run_id


def test_a_failed_run_goes_back_to_queued_in_place(db: Conn, agents: list[str]) -> None:
    a, _ = agents
    run_id = failed_run(db, a, "r1")
    db.execute("UPDATE office.runs SET scheduled_retry_at = now() - interval '1 hour'")
    before = run(db, run_id)
    assert before["status"] == "failed" and before["finished_at"] is not None

    assert value(db, "SELECT office.requeue_run(%s)", [run_id]) is True
    after = run(db, run_id)
    assert after["status"] == "queued"
    for column in ("finished_at", "claimed_at", "claimed_by", "heartbeat_at", "scheduled_retry_at"):
        assert after[column] is None, column
    # Kept: why it stopped (until its next outcome), the retries the worker
    # asked for, its attempt (bumped by the next claim), its place in time.
    assert after["error_message"] == "boom"
    assert after["retry_count"] == before["retry_count"]
    assert after["attempt"] == before["attempt"] == 1
    assert after["requested_at"] == before["requested_at"]

    # Claimable by an unfiltered claim (office.agent_ready lists the agent
    # again), with the attempt bumped: the first worker is fenced.
    again = claim(db)
    assert again is not None and again["id"] == run_id and again["attempt"] == 2
    assert value(db, "SELECT office.finish_run(%s, 1)", [run_id]) is False
    assert value(db, "SELECT office.fail_run(%s, 2, 'again')", [run_id]) is True
    assert run(db, run_id)["error_message"] == "again"


def test_a_cancelled_run_keeps_its_reason_until_the_next_outcome(
    db: Conn, agents: list[str]
) -> None:
    a, _ = agents
    _, run_id = enqueue(db, a, "r1")
    assert value(db, "SELECT office.cancel_run(%s, 'operator')", [run_id]) is True
    assert value(db, "SELECT office.requeue_run(%s)", [run_id]) is True
    assert run(db, run_id)["cancel_reason"] == "operator"
    got = claim(db, a)
    assert got is not None and got["id"] == run_id and got["attempt"] == 1
    assert value(db, "SELECT office.cancel_run(%s, 'second')", [run_id]) is True
    assert run(db, run_id)["cancel_reason"] == "second"


def test_false_from_any_other_status_and_for_an_unknown_run(db: Conn, agents: list[str]) -> None:
    a, b = agents
    _, queued = enqueue(db, a, "r1")
    _, claimed = enqueue(db, b, "r2")
    got = claim(db, b)
    assert got is not None and got["id"] == claimed
    _, finished = enqueue(db, b, "r3")
    db.execute("SELECT office.finish_run(%s, %s)", [claimed, got["attempt"]])
    got = claim(db, b)
    assert got is not None and got["id"] == finished
    db.execute("SELECT office.finish_run(%s, %s)", [finished, got["attempt"]])
    _, claimed = enqueue(db, b, "r4")
    assert (claim(db, b) or {}).get("id") == claimed
    snapshot = db.execute("SELECT * FROM office.runs ORDER BY id").fetchall()
    for run_id in (queued, claimed, finished, "no-such-run", None):
        assert value(db, "SELECT office.requeue_run(%s)", [run_id]) is False, run_id
    assert value(db, "SELECT office.requeue_runs(%s)", [[queued, claimed, finished, "x"]]) == 0
    assert db.execute("SELECT * FROM office.runs ORDER BY id").fetchall() == snapshot


def test_the_key_stays_served_by_the_same_run(db: Conn, agents: list[str]) -> None:
    a, _ = agents
    run_id = failed_run(db, a, "r1", key="k-own")
    # A redelivery of the failed run's key is a dedup onto it, before and
    # after the requeue; nothing new is queued.
    assert enqueue(db, a, "r1", key="k-own") == ("deduped", run_id)
    assert value(db, "SELECT office.requeue_run(%s)", [run_id]) is True
    assert run(db, run_id)["idempotency_key"] == "k-own"
    # A coalesce into the requeued run records its key on it, as on any
    # queued run; both keys are then served by this one run.
    assert enqueue(db, a, "r1", key="k-other") == ("coalesced", run_id)
    assert enqueue(db, a, "r1", key="k-own") == ("deduped", run_id)
    assert enqueue(db, a, "r1", key="k-other") == ("deduped", run_id)
    assert value(db, "SELECT count(*) FROM office.runs") == 1
    keys = db.execute("SELECT idempotency_key, how FROM office.run_keys(%s)", [run_id]).fetchall()
    assert keys == [("k-own", "own"), ("k-other", "coalesced")]


@pytest.fixture
def signals(db: Conn, dsn: str) -> Iterator[Callable[[], list[str]]]:
    """``signals()``: the payloads received on office_runs since the last call."""
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN office_runs")

        def received() -> list[str]:
            db.execute("SELECT pg_notify('office_runs', %s)", [MARK])
            got: list[str] = []
            for note in listener.notifies(timeout=30):
                if note.payload == MARK:
                    return got
                got.append(note.payload)
            raise AssertionError("the marker never arrived")

        yield received


def test_a_requeued_run_is_signalled_like_a_new_one(
    db: Conn, agents: list[str], signals: Callable[[], list[str]]
) -> None:
    a, b = agents
    first = failed_run(db, a, "r1")
    second = failed_run(db, a, "r2")
    other = failed_run(db, b, "r3")
    assert signals() == [a, a, b]  # the enqueues
    # edge: the agent has nothing claimable, so the first requeue signals;
    # the second finds the first queued and due, and sends nothing.
    assert value(db, "SELECT office.requeue_run(%s)", [first]) is True
    assert value(db, "SELECT office.requeue_run(%s)", [second]) is True
    assert signals() == [a]
    # A busy agent (a claimed run) gets no signal under edge.
    db.execute("SELECT office.cancel_runs(%s, 'x')", [[first, second]])
    _, busy = enqueue(db, a, "r4")
    assert (claim(db, a) or {}).get("id") == busy
    signals()
    assert value(db, "SELECT office.requeue_runs(%s)", [[first, second, other]]) == 3
    assert signals() == [b]
    # every: each requeue_run, a bulk call once per agent (as enqueue_runs);
    # off: none.
    db.execute("SELECT office.cancel_runs(%s, 'x')", [[first, second, other]])
    db.execute("SET office.notify = 'every'")
    assert value(db, "SELECT office.requeue_run(%s)", [first]) is True
    assert value(db, "SELECT office.requeue_run(%s)", [second]) is True
    assert signals() == [a, a]
    db.execute("SELECT office.cancel_runs(%s, 'x')", [[first, second, other]])
    assert value(db, "SELECT office.requeue_runs(%s)", [[other, second, first]]) == 3
    assert sorted(signals()) == [a, b]
    db.execute("SELECT office.cancel_runs(%s, 'x')", [[first, second, other]])
    db.execute("SET office.notify = 'off'")
    assert value(db, "SELECT office.requeue_runs(%s)", [[first, second, other]]) == 3
    assert signals() == []


def test_cancel_runs_cancels_queued_and_claimed_runs_and_counts_them(
    db: Conn, agents: list[str]
) -> None:
    a, b = agents
    failed = failed_run(db, a, "r3")
    _, queued = enqueue(db, a, "r1")
    _, claimed = enqueue(db, b, "r2")
    got = claim(db, b)
    assert got is not None and got["id"] == claimed
    ids = [queued, claimed, failed, "unknown", queued]
    assert value(db, "SELECT office.cancel_runs(%s, 'ops')", [ids]) == 2
    assert [run(db, i)["status"] for i in (queued, claimed, failed)] == [
        "cancelled",
        "cancelled",
        "failed",
    ]
    assert run(db, queued)["cancel_reason"] == "ops" and run(db, queued)["finished_at"] is not None
    # The claim ended: agent-b's worker is fenced and its next run claimable.
    assert value(db, "SELECT office.finish_run(%s, %s)", [claimed, got["attempt"]]) is False
    _, next_b = enqueue(db, b, "r4")
    assert (claim(db) or {}).get("id") == next_b
    assert value(db, "SELECT office.cancel_runs(%s, 'ops')", [[queued, claimed]]) == 0
    assert value(db, "SELECT office.cancel_runs(NULL, 'ops')") == 0
    assert value(db, "SELECT office.requeue_runs(%s)", [[queued, claimed, failed]]) == 3
    assert value(db, "SELECT office.requeue_runs('{}')") == 0


@pytest.mark.parametrize("function", ["requeue_runs", "cancel_runs"])
def test_more_than_10000_ids_is_22023_naming_the_argument(
    db: Conn, agents: list[str], function: str
) -> None:
    _, run_id = enqueue(db, agents[0], "r1")
    db.execute("SELECT office.cancel_run(%s, 'x')", [run_id])
    args = "%s" if function == "requeue_runs" else "%s, 'r'"
    ok = [run_id] + [f"x{i}" for i in range(9999)]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="run_ids has 10001 elements"):
        db.execute(f"SELECT office.{function}({args})", [[*ok, "one more"]])
    assert run(db, run_id)["status"] == "cancelled"
    expected = 1 if function == "requeue_runs" else 0
    assert value(db, f"SELECT office.{function}({args})", [ok]) == expected


def test_cancel_runs_reason_over_64_kib_is_22023(db: Conn, agents: list[str]) -> None:
    _, run_id = enqueue(db, agents[0], "r1")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="reason is 65537 bytes"):
        db.execute("SELECT office.cancel_runs(%s, %s)", [[run_id], "x" * 65537])
    assert run(db, run_id)["status"] == "queued"


@pytest.mark.parametrize(
    "signature", ["requeue_run(text)", "requeue_runs(text[])", "cancel_runs(text[], text)"]
)
def test_for_office_admin_only(db: Conn, signature: str) -> None:
    rows = db.execute(
        "SELECT r, pg_catalog.has_function_privilege(r, %s, 'EXECUTE')"
        "  FROM unnest(ARRAY['office_admin', 'office_worker', 'office_producer',"
        "                    'office_reader', 'public']) AS r",
        [f"office.{signature}"],
    ).fetchall()
    assert dict(rows) == {
        "office_admin": True,
        "office_worker": False,
        "office_producer": False,
        "office_reader": False,
        "public": False,
    }


def test_cancel_runs_racing_claims_never_fails_and_counts_what_it_cancelled(
    db: Conn, dsn: str, concurrently: harness.Concurrently
) -> None:
    """Claimers on every agent and two bulk cancels over the same runs in
    opposite orders, at once: no deadlock, no error, each run cancelled by
    exactly one of the two calls (the counts add up to the runs that were in
    flight), and no worker can finish a run that was cancelled."""
    agents = [f"ag{i}" for i in range(8)]
    for agent in agents:
        db.execute("SELECT office.upsert_agent(%s, 'ws-1')", [agent])
    for rounds in range(5):
        ids = [enqueue(db, agent, f"r{rounds}-{n}")[1] for agent in agents for n in range(4)]

        def claimer(conn: Conn) -> list[tuple[str, int]]:
            got = []
            for _ in range(6):
                row = conn.execute("SELECT id, attempt FROM office.claim_run('w')").fetchone()
                if row is not None:
                    got.append((row[0], row[1]))
            return got

        def canceller(order: list[str]) -> Callable[[Conn], int]:
            return lambda conn: int(value(conn, "SELECT office.cancel_runs(%s, 'ops')", [order]))

        outcomes = concurrently([claimer, claimer, canceller(ids), canceller(list(reversed(ids)))])
        errors = [o.error for o in outcomes if o.error is not None]
        assert errors == []
        assert outcomes[2].value + outcomes[3].value == len(ids)
        statuses = db.execute(
            "SELECT status, count(*) FROM office.runs WHERE id = ANY (%s) GROUP BY 1", [ids]
        ).fetchall()
        assert statuses == [("cancelled", len(ids))]
        for run_id, attempt in outcomes[0].value + outcomes[1].value:
            assert value(db, "SELECT office.finish_run(%s, %s)", [run_id, attempt]) is False
        assert value(db, "SELECT count(*) FROM office.runs WHERE status = 'claimed'") == 0


def test_bulk_requeues_and_cancels_in_opposite_orders_never_deadlock(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    """Two requeue_runs and two cancel_runs over the same runs, each given
    them in its own order, rounds of them at once: none waits for another in
    a cycle (the runs are locked in id order), so no 40P01."""
    db.execute("SELECT office.upsert_agent('a', 'ws-1')")
    ids = [enqueue(db, "a", f"r{n}")[1] for n in range(200)]
    db.execute("SELECT office.cancel_runs(%s, 'x')", [ids])
    back = list(reversed(ids))
    for _ in range(5):
        outcomes = concurrently(
            [
                lambda c: value(c, "SELECT office.requeue_runs(%s)", [ids]),
                lambda c: value(c, "SELECT office.requeue_runs(%s)", [back]),
                lambda c: value(c, "SELECT office.cancel_runs(%s, 'x')", [back]),
                lambda c: value(c, "SELECT office.cancel_runs(%s, 'x')", [ids]),
            ]
        )
        assert [o.error for o in outcomes] == [None] * 4
