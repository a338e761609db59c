"""enqueue_runs gives what as many enqueue_run calls give (docs/api.md §3: elements
applied in order, each seeing the ones before it). The bulk call does the
common case set-based and the rest element by element (sql/30_runs.sql); these
tests run the same requests both ways, on the same starting state, and compare
outcomes, errors, the runs, the recorded keys, the counters and the signals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

Conn = psycopg.Connection[Any]

FIELDS = (
    "agent_profile_id",
    "reason",
    "payload",
    "idempotency_key",
    "task_id",
    "entry_triggered",
    "keyless_cause",
)

# Small pools, so that keys repeat, buckets meet and targets exist.
element = st.fixed_dictionaries(
    {
        "agent_profile_id": st.sampled_from(["a1", "a1", "a2", "paused", "ghost", ""]),
        "reason": st.sampled_from(["r", "r", "q", "", "x" * 201]),
    },
    optional={
        "payload": st.sampled_from([{}, {"n": 1}, {"n": 2}]),
        "idempotency_key": st.sampled_from(["k1", "k2", "k3", "task_comment:c1", "", None]),
        "task_id": st.sampled_from(["t1", "t2", "", None]),
        "entry_triggered": st.booleans(),
        "keyless_cause": st.sampled_from(["unresolved", "by_design", "bogus", None]),
    },
)
# Mostly valid batches (the set-based path), some with a bad element.
batch = st.lists(element, max_size=8)
# Runs that exist before the call: queued, finished, or holding a recorded key.
before = st.lists(
    st.tuples(
        st.sampled_from(["a1", "a2"]),
        st.sampled_from(["r", "q"]),
        st.sampled_from(["k1", "k2", "k4", None]),
        st.sampled_from(["t1", None]),
        st.sampled_from(["queued", "finished"]),
    ),
    max_size=3,
)


def single(conn: Conn, request: dict[str, Any]) -> tuple[str, str | None, str | None]:
    args = {k: request.get(k) for k in FIELDS}
    args["payload"] = json.dumps(request.get("payload", {}))
    args["entry_triggered"] = bool(request.get("entry_triggered") or False)
    row = conn.execute(
        "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run("
        " agent_profile_id => %(agent_profile_id)s, reason => %(reason)s,"
        " payload => %(payload)s::jsonb, idempotency_key => %(idempotency_key)s,"
        " task_id => %(task_id)s, entry_triggered => %(entry_triggered)s,"
        " keyless_cause => %(keyless_cause)s)",
        args,
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def state(conn: Conn, names: dict[str, str]) -> dict[str, Any]:
    """Everything a call can change, with run ids replaced by stable names."""

    def name(run_id: str) -> str:
        return names.setdefault(run_id, f"new{len(names)}")

    runs = conn.execute(
        "SELECT id, agent_profile_id, reason, payload, idempotency_key, task_id, status,"
        ' coalesced_count, entry_triggered FROM office.runs ORDER BY requested_at, id COLLATE "C"'
    ).fetchall()
    recorded = conn.execute(
        "SELECT idempotency_key, run_id FROM office.run_keys_recorded ORDER BY 1"
    ).fetchall()
    return {
        "runs": [(name(r[0]), *r[1:]) for r in runs],
        "recorded": [(k, name(r)) for k, r in recorded],
        "dedup": sorted(conn.execute("SELECT * FROM office.dedup_stats").fetchall()),
        "keyless": sorted(conn.execute("SELECT * FROM office.keyless_stats").fetchall()),
    }


@pytest.fixture
def setup(db: Conn) -> Iterator[Conn]:
    db.execute("SELECT office.upsert_agent(a, 'w') FROM unnest(ARRAY['a1', 'a2', 'paused']) a")
    db.execute("SELECT office.set_agent_status('paused', 'paused')")
    db.autocommit = False
    yield db
    db.rollback()
    db.autocommit = True


def prepare(conn: Conn, rows: list[tuple[str, str, str | None, str | None, str]]) -> dict[str, str]:
    """The runs that exist before the call, named old0, old1, ... (the same
    names on both sides); a keyed queued run also gets a recorded key."""
    names: dict[str, str] = {}
    for n, (agent, reason, key, task, status) in enumerate(rows):
        row = conn.execute(
            "INSERT INTO office.runs (agent_profile_id, reason, idempotency_key, task_id, status)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING id",
            [agent, reason, key, task, status],
        ).fetchone()
        if row is not None:
            names[row[0]] = f"old{n}"
            if key is not None and status == "queued":
                conn.execute(
                    "INSERT INTO office.run_keys_recorded (idempotency_key, run_id)"
                    " VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    [key + "-recorded", row[0]],
                )
    return names


def both_ways(conn: Conn, requests: list[dict[str, Any]], rows: list[Any]) -> tuple[Any, Any]:
    """(bulk, singles): each is (outcomes or (sqlstate, message), state)."""
    results = []
    for way in ("bulk", "single"):
        # Open the transaction that rollback() undoes below, so that
        # conn.transaction() is a savepoint inside it, never its own commit.
        conn.execute("SELECT 1")
        names = prepare(conn, rows)
        got: Any
        try:
            with conn.transaction():
                if way == "bulk":
                    rows_out = conn.execute(
                        "SELECT ordinality, outcome, dedup_kind, run_id"
                        " FROM office.enqueue_runs(%s::jsonb)",
                        [json.dumps(requests)],
                    ).fetchall()
                    got = [(o, k, r) for _, o, k, r in rows_out]
                    assert [n for n, *_ in rows_out] == list(range(1, len(requests) + 1))
                else:
                    got = []
                    for n, request in enumerate(requests, start=1):
                        try:
                            got.append(single(conn, request))
                        except psycopg.Error as error:
                            raise _Element(n, error) from error
        except _Element as failed:
            got = (
                failed.error.sqlstate,
                f"enqueue_runs element {failed.n}: " + (failed.error.diag.message_primary or ""),
            )
        except psycopg.Error as error:
            got = (error.sqlstate, error.diag.message_primary)
        if isinstance(got, list):
            named = state(conn, names)
            got = [(o, k, names[r] if r is not None else None) for o, k, r in got]
        else:
            named = state(conn, names)
        results.append((got, named))
        conn.rollback()
    return results[0], results[1]


class _Element(Exception):
    def __init__(self, n: int, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.n = n
        self.error = error


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(requests=batch, rows=before)
def test_a_bulk_call_is_its_elements_one_by_one(
    setup: Conn, requests: list[dict[str, Any]], rows: list[Any]
) -> None:
    bulk, singles = both_ways(setup, requests, rows)
    assert bulk == singles


@pytest.mark.parametrize(
    "requests",
    [
        # Distinct keys and buckets: the set-based path.
        [
            {
                "agent_profile_id": "a1",
                "reason": "r",
                "idempotency_key": f"k{n}",
                "task_id": f"t{n}",
            }
            for n in range(20)
        ],
        # A key repeated in the batch: deduped onto the first.
        [
            {"agent_profile_id": "a1", "reason": "r", "idempotency_key": "k", "task_id": "t1"},
            {"agent_profile_id": "a2", "reason": "q", "idempotency_key": "k", "task_id": "t2"},
        ],
        # Two elements of one bucket: the second coalesces into the first.
        [
            {"agent_profile_id": "a1", "reason": "r", "idempotency_key": "k1"},
            {"agent_profile_id": "a1", "reason": "r", "idempotency_key": "k2", "payload": {"n": 2}},
        ],
        # A keyless cause counted on the set-based path.
        [
            {
                "agent_profile_id": "a1",
                "reason": "r",
                "keyless_cause": "unresolved",
                "task_id": "t1",
            },
            {"agent_profile_id": "a2", "reason": "r", "keyless_cause": "by_design"},
        ],
    ],
)
def test_the_cases_that_matter_most(setup: Conn, requests: list[dict[str, Any]]) -> None:
    bulk, singles = both_ways(setup, requests, [])
    assert bulk == singles
    assert isinstance(bulk[0], list)


def test_the_set_based_path_signals_like_single_calls(db: Conn, dsn: str) -> None:
    # a1 twice (signalled once), a2 already has a claimable queued run (edge:
    # no signal), a3 has a claimed run (no signal).
    db.execute("SELECT office.upsert_agent(a, 'w') FROM unnest(ARRAY['a1', 'a2', 'a3', 'a4']) a")
    db.execute("SELECT office.enqueue_run('a2', 'old')")
    db.execute("SELECT office.enqueue_run('a3', 'old')")
    db.execute("SELECT count(*) FROM office.claim_run('w', 'a3')")
    requests = [
        {"agent_profile_id": a, "reason": "r", "idempotency_key": f"k{n}", "task_id": f"t{n}"}
        for n, a in enumerate(["a4", "a1", "a2", "a3", "a1"])
    ]
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN office_runs")
        rows = db.execute(
            "SELECT outcome FROM office.enqueue_runs(%s::jsonb)", [json.dumps(requests)]
        ).fetchall()
        assert rows == [("queued",)] * 5
        db.execute("NOTIFY office_runs, 'end'")
        got = []
        for note in listener.notifies():
            if note.payload == "end":
                break
            got.append(note.payload)
    assert got == ["a4", "a1"]


def test_opposite_bulk_calls_with_fresh_keys_do_not_deadlock(db: Conn, concurrently: Any) -> None:
    # The set-based path takes the same locks in the same order as the loop.
    db.execute("SELECT office.upsert_agent(a, 'w') FROM unnest(ARRAY['a1', 'a2']) a")

    def caller(direction: int) -> Any:
        def run(conn: Conn) -> int:
            conn.autocommit = True
            for i in range(30):
                batch = [
                    {
                        "agent_profile_id": a,
                        "reason": "r",
                        "task_id": f"t{i}-{a}",
                        "idempotency_key": f"k{i}-{direction}-{a}",
                    }
                    for a in ("a1", "a2")
                ]
                if direction:
                    batch.reverse()
                conn.execute(
                    "SELECT count(*) FROM office.enqueue_runs(%s::jsonb)", [json.dumps(batch)]
                )
            return 30

        return run

    outcomes = concurrently([caller(0), caller(1)])
    assert [o.error for o in outcomes] == [None, None]


def test_distinct_fresh_requests_take_the_set_based_path(setup: Conn) -> None:
    # White-box: the set-based path calls enqueue_run for no element.
    setup.execute("SET LOCAL track_functions = 'all'")
    requests = [
        {"agent_profile_id": "a1", "reason": "r", "idempotency_key": f"k{n}", "task_id": f"t{n}"}
        for n in range(5)
    ] + [{"agent_profile_id": "a2", "reason": "r", "entry_triggered": True}] * 2
    rows = setup.execute(
        "SELECT outcome FROM office.enqueue_runs(%s::jsonb)", [json.dumps(requests)]
    ).fetchall()
    assert rows == [("queued",)] * 7
    calls = setup.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
        " WHERE schemaname = 'office' AND funcname = 'enqueue_run'"
    ).fetchone()
    assert calls == (0,)


def test_a_bulk_call_takes_at_most_10000_elements(db: Conn) -> None:
    # 0.4.0: 30,000 keyed elements ran out of the lock table (53200).
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    too_many = [
        {"agent_profile_id": "a1", "reason": "r", "idempotency_key": f"k{n}"} for n in range(10_001)
    ]
    with pytest.raises(
        psycopg.errors.InvalidParameterValue, match="10001 requests, more than 10,000"
    ):
        db.execute("SELECT * FROM office.enqueue_runs(%s::jsonb)", [json.dumps(too_many)])
    assert db.execute("SELECT count(*) FROM office.runs").fetchone() == (0,)
    rows = db.execute(
        "SELECT count(*) FROM office.enqueue_runs(%s::jsonb)", [json.dumps(too_many[:10_000])]
    ).fetchone()
    assert rows == (10_000,)
