"""Remembered keys (docs/api.md §3, since 0.4.0): a key absorbed by a coalesce is
served by the run it coalesced into, so its redelivery is a dedup onto that
run, never a second run; a key is served by at most one run under any
concurrency; run_keys lists what a run serves."""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests import harness

Conn = psycopg.Connection[Any]


def enqueue(conn: Conn, key: str | None, task: str | None = None, **extra: Any) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run('agent-a', %(reason)s,"
        " %(payload)s::jsonb, idempotency_key => %(key)s, task_id => %(task)s)",
        {
            "reason": extra.get("reason", "task_assigned"),
            "payload": json.dumps(extra.get("payload", {})),
            "key": key,
            "task": task,
        },
    ).fetchone()
    assert row is not None
    return tuple(row)


def keys_of(conn: Conn, run_id: str) -> list[tuple[str, str]]:
    return [
        (k, how)
        for k, _, how in conn.execute("SELECT * FROM office.run_keys(%s)", [run_id]).fetchall()
    ]


@pytest.fixture
def agent(db: Conn) -> str:
    db.execute("SELECT office.upsert_agent('agent-a', 'ws-1')")
    db.execute("SET office.coalesce_window = '1 hour'")
    return "agent-a"


def test_a_coalesced_assignment_redelivered_after_its_claim_is_a_dedup(db: Conn) -> None:
    # As a new user typed it: the second assignment coalesced into the first
    # run, and its key is delivered again once that run is claimed.
    db.execute("SELECT office.upsert_agent('dup-a', 'w')")
    created = db.execute(
        "SELECT assignment_generation, outcome FROM office.create_task('w', id => 'dup-t',"
        " workflow_step_id => 's', assignee_agent_profile_id => 'dup-a')"
    ).fetchone()
    assigned = db.execute(
        "SELECT assignment_generation, outcome FROM office.assign_task('dup-t', 'dup-a')"
    ).fetchone()
    assert created == (1, "queued")
    assert assigned == (2, "coalesced")
    claimed = db.execute("SELECT id FROM office.claim_run('w1', 'dup-a')").fetchone()
    assert claimed is not None
    again = db.execute(
        "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run('dup-a', 'task_assigned',"
        " idempotency_key => office.assignment_key('dup-t', 'dup-a', 2), task_id => 'dup-t')"
    ).fetchone()
    assert again == ("deduped", "windowed", claimed[0])
    assert db.execute("SELECT count(*) FROM office.runs").fetchone() == (1,)
    assert keys_of(db, claimed[0]) == [
        ("task_assigned:dup-t:dup-a:1", "own"),
        ("task_assigned:dup-t:dup-a:2", "coalesced"),
    ]


def test_k1_coalesce_k2_finish_then_k2_is_deduped_onto_the_first_run(db: Conn, agent: str) -> None:
    first = enqueue(db, "k1", "T")
    assert first[0] == "queued"
    assert enqueue(db, "k2", "T") == ("coalesced", None, first[2])
    claimed = db.execute("SELECT id, attempt FROM office.claim_run('w')").fetchone()
    assert claimed is not None and claimed[0] == first[2]
    assert db.execute("SELECT office.finish_run(%s, %s)", claimed).fetchone() == (True,)
    assert enqueue(db, "k2", "T") == ("deduped", "windowed", first[2])
    assert enqueue(db, "k2", "other-task") == ("deduped", "windowed", first[2])
    assert db.execute("SELECT count(*) FROM office.runs").fetchone() == (1,)
    stats = db.execute(
        "SELECT kind, total FROM office.dedup_stats WHERE queue = 'runs' ORDER BY kind"
    ).fetchall()
    assert stats == [("coalesced", 1), ("windowed", 2)]


def test_a_recorded_key_is_windowed_then_durable_by_the_age_of_the_recording(
    db: Conn, agent: str
) -> None:
    target = enqueue(db, "k1", "T")[2]
    enqueue(db, "k2", "T")
    # The run is old, the recording is not: windowed.
    db.execute("UPDATE office.runs SET requested_at = now() - interval '2 days'")
    assert enqueue(db, "k2", "T") == ("deduped", "windowed", target)
    assert enqueue(db, "k1", "T") == ("deduped", "durable", target)
    db.execute("UPDATE office.run_keys_recorded SET recorded_at = now() - interval '2 days'")
    assert enqueue(db, "k2", "T") == ("deduped", "durable", target)
    db.execute("SET office.idempotency_window = '3 days'")
    assert enqueue(db, "k2", "T") == ("deduped", "windowed", target)


def test_a_served_key_is_deduped_before_any_coalescing_whatever_its_age(
    db: Conn, agent: str
) -> None:
    # 0.3.0 coalesced a key older than the window into a queued run of its
    # bucket; since 0.4.0 a key is never recorded on a second run.
    old = enqueue(db, "k1", "T", payload={"n": 1})[2]
    db.execute("UPDATE office.runs SET requested_at = now() - interval '2 days'")
    newer = enqueue(db, None, "T", payload={"n": 2})[2]
    assert enqueue(db, "k1", "T", payload={"n": 3}) == ("deduped", "durable", old)
    row = db.execute(
        "SELECT coalesced_count, payload->>'n' FROM office.runs WHERE id = %s", [newer]
    )
    assert row.fetchone() == (1, "2")
    assert keys_of(db, newer) == []


def test_run_keys_lists_own_then_coalesced_and_nothing_for_a_keyless_or_unknown_run(
    db: Conn, agent: str
) -> None:
    target = enqueue(db, "k1", "T")[2]
    enqueue(db, "k3", "T")
    enqueue(db, "k2", "T")
    with db.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM office.run_keys(%s)", [target]).fetchall()
        requested = cur.execute("SELECT requested_at FROM office.runs").fetchone()
    assert [(r["idempotency_key"], r["how"]) for r in rows] == [
        ("k1", "own"),
        ("k3", "coalesced"),
        ("k2", "coalesced"),
    ]
    assert requested is not None and rows[0]["recorded_at"] == requested["requested_at"]
    assert rows[1]["recorded_at"] <= rows[2]["recorded_at"]
    keyless = enqueue(db, None, "T2")[2]
    assert keys_of(db, keyless) == []
    assert keys_of(db, "no-such-run") == []


def test_a_keyless_run_serves_the_keys_that_coalesced_into_it(db: Conn, agent: str) -> None:
    target = enqueue(db, None, "T")[2]
    assert enqueue(db, "k1", "T")[0] == "coalesced"
    assert keys_of(db, target) == [("k1", "coalesced")]
    assert enqueue(db, "k1", "T") == ("deduped", "windowed", target)


@pytest.mark.parametrize(
    "role", ["office_producer", "office_worker", "office_reader", "office_admin"]
)
def test_every_office_role_may_list_a_runs_keys(db: Conn, agent: str, role: str) -> None:
    target = enqueue(db, "k1", "T")[2]
    db.execute(f"SET ROLE {role}")
    try:
        assert keys_of(db, target) == [("k1", "own")]
    finally:
        db.execute("RESET ROLE")


def test_pruning_a_run_frees_its_recorded_keys(db: Conn, agent: str) -> None:
    target = enqueue(db, "k1", "T")[2]
    enqueue(db, "k2", "T")
    claimed = db.execute("SELECT id, attempt FROM office.claim_run()").fetchone()
    assert claimed is not None
    db.execute("SELECT office.finish_run(%s, %s)", claimed)
    db.execute("UPDATE office.runs SET finished_at = now() - interval '2 days'")
    assert db.execute("SELECT office.prune_runs('1 day')").fetchone() == (1,)
    assert db.execute("SELECT count(*) FROM office.run_keys_recorded").fetchone() == (0,)
    outcome, _, again = enqueue(db, "k2", "T")
    assert outcome == "queued" and again != target
    assert keys_of(db, again) == [("k2", "own")]


def test_a_bulk_call_records_and_dedups_keys_in_order(db: Conn, agent: str) -> None:
    requests = [
        {
            "agent_profile_id": "agent-a",
            "reason": "task_assigned",
            "task_id": "T",
            "idempotency_key": k,
        }
        for k in ["k1", "k2", "k2", "k1", "k3"]
    ]
    rows = db.execute(
        "SELECT ordinality, outcome, dedup_kind, run_id FROM office.enqueue_runs(%s::jsonb)",
        [json.dumps(requests)],
    ).fetchall()
    target = rows[0][3]
    assert [(o, k) for _, o, k, _ in rows] == [
        ("queued", None),
        ("coalesced", None),
        ("deduped", "windowed"),
        ("deduped", "windowed"),
        ("coalesced", None),
    ]
    assert {r[3] for r in rows} == {target}
    row = db.execute("SELECT coalesced_count FROM office.runs WHERE id = %s", [target]).fetchone()
    assert row == (3,)


# ---------------------------------------------------------------------------
# Races: a key is served by at most one run, ever


def test_sixteen_producers_mixing_repeated_keys_over_several_buckets(
    db: Conn, agent: str, concurrently: harness.Concurrently
) -> None:
    # Twelve keys, each sent by several producers and for different buckets
    # (tasks T0-T2), mixed with keyless requests that make coalesce targets;
    # single calls and bulk calls. Every request carries a payload naming it.
    rng = random.Random(11)
    plans: list[list[list[dict[str, Any]]]] = []
    for number in range(16):
        calls: list[list[dict[str, Any]]] = []
        for n in range(12):
            batch = []
            for m in range(rng.choice([1, 1, 3])):
                key = rng.choice([f"K{rng.randrange(12)}", None])
                batch.append(
                    {
                        "agent_profile_id": "agent-a",
                        "reason": "task_assigned",
                        "task_id": f"T{rng.randrange(3)}",
                        "idempotency_key": key,
                        "payload": {"by": f"p{number}.{n}.{m}"},
                    }
                )
            calls.append(batch)
        plans.append(calls)

    def producer(calls: list[list[dict[str, Any]]]) -> Callable[[Conn], list[tuple[Any, ...]]]:
        def run(conn: Conn) -> list[tuple[Any, ...]]:
            conn.execute("SET office.coalesce_window = '1 hour'")
            seen = []
            for batch in calls:
                if len(batch) == 1:
                    r = batch[0]
                    row = conn.execute(
                        "SELECT outcome, run_id FROM office.enqueue_run(%s, %s, %s::jsonb,"
                        " idempotency_key => %s, task_id => %s)",
                        [
                            r["agent_profile_id"],
                            r["reason"],
                            json.dumps(r["payload"]),
                            r["idempotency_key"],
                            r["task_id"],
                        ],
                    ).fetchone()
                    assert row is not None
                    seen.append((r, row[0], row[1]))
                else:
                    rows = conn.execute(
                        "SELECT outcome, run_id FROM office.enqueue_runs(%s::jsonb)"
                        " ORDER BY ordinality",
                        [json.dumps(batch)],
                    ).fetchall()
                    seen.extend((r, o, i) for r, (o, i) in zip(batch, rows, strict=True))
            return seen

        return run

    outcomes = concurrently([producer(p) for p in plans])
    errors = [o.error for o in outcomes if o.error is not None]
    assert errors == []
    seen = [s for o in outcomes for s in o.value]

    by_key: dict[str, list[tuple[str, str]]] = defaultdict(list)
    coalesced_on: dict[str, int] = defaultdict(int)
    setters: dict[str, set[str]] = defaultdict(set)  # run -> payload tags that may be its payload
    for request, outcome, run_id in seen:
        if request["idempotency_key"] is not None:
            by_key[request["idempotency_key"]].append((outcome, run_id))
        if outcome == "coalesced":
            coalesced_on[run_id] += 1
        if outcome in ("queued", "coalesced"):
            setters[run_id].add(request["payload"]["by"])

    served: dict[str, list[str]] = defaultdict(list)
    for run_id, key, _ in db.execute(
        "SELECT r.id, k.idempotency_key, k.how FROM office.runs r, office.run_keys(r.id) k"
    ).fetchall():
        served[key].append(run_id)
    assert set(served) == set(by_key)
    for key, answers in by_key.items():
        assert len(served[key]) == 1, f"{key} is served by {served[key]}"
        winners = [a for a in answers if a[0] != "deduped"]
        assert len(winners) == 1, f"{key}: {answers}"  # one queued/coalesced, never a second
        assert {run_id for _, run_id in answers} == set(served[key])
    for run_id, count, by in db.execute(
        "SELECT id, coalesced_count, payload->>'by' FROM office.runs"
    ).fetchall():
        assert count == 1 + coalesced_on[run_id]
        assert by in setters[run_id]  # never a deduped request's payload


def test_two_bulk_calls_in_opposite_orders_never_deadlock(
    db: Conn, agent: str, concurrently: harness.Concurrently
) -> None:
    # Each element's bucket lock taken as the element is applied would
    # deadlock two calls over the same buckets in opposite orders. Each call
    # here also repeats a key of the previous round (a dedup: a counter row of
    # its reason) and brings a fresh key per bucket.
    buckets = [("task_assigned", f"T{i}") for i in range(4)] + [("heartbeat", None), ("r2", "T1")]
    rounds = 150
    start = threading.Barrier(2, timeout=60)

    def caller(direction: int) -> Callable[[Conn], int]:
        def run(conn: Conn) -> int:
            conn.execute("SET office.coalesce_window = '1 hour'")
            start.wait()
            for n in range(rounds):
                batch = [
                    {
                        "agent_profile_id": "agent-a",
                        "reason": reason,
                        "task_id": task,
                        "idempotency_key": f"{direction}:{n}:{i}",
                    }
                    for i, (reason, task) in enumerate(buckets)
                ]
                batch += [
                    dict(b, idempotency_key=f"{direction}:{n - 1}:{i}")
                    for i, b in enumerate(batch)
                    if n
                ]
                if direction:
                    batch.reverse()
                conn.execute(
                    "SELECT count(*) FROM office.enqueue_runs(%s::jsonb)", [json.dumps(batch)]
                )
            return rounds

        return run

    outcomes = concurrently([caller(0), caller(1)])
    assert [o.error for o in outcomes] == [None, None]
    assert [o.value for o in outcomes] == [rounds, rounds]


def test_counting_never_shares_a_slot_between_live_transactions(db: Conn, dsn: str) -> None:
    # The counter rows two transactions write are never the same row, so
    # counting neither waits nor deadlocks (sql/25_counters.sql).
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        a = first.execute("SELECT office._counter_slot()").fetchone()
        b = second.execute("SELECT office._counter_slot()").fetchone()
        assert a is not None and b is not None and a != b
        assert first.execute("SELECT office._counter_slot()").fetchone() == a
        first.commit()
        second.commit()
