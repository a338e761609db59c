"""enqueue_run's lineage, scheduling and loop guard (docs/api.md §3, §9):
origin, cause_run_id, priority and not_before, their validation, the chain
depth they give a run, and the outcome guarded past office.max_chain_depth."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest

from tests import harness

Conn = psycopg.Connection[Any]
MARK = "-- end --"
ENQUEUE = (
    "SELECT r.outcome, r.dedup_kind, r.run_id FROM office.enqueue_run("
    "%(agent)s, %(reason)s, '{}'::jsonb, idempotency_key => %(key)s, origin => %(origin)s,"
    " cause_run_id => %(cause)s, priority => %(priority)s, not_before => %(not_before)s) r"
)


def enqueue(
    conn: Conn,
    reason: str = "r",
    *,
    agent: str = "a1",
    key: str | None = None,
    origin: str | None = None,
    cause: str | None = None,
    priority: int | None = 0,
    not_before: Any = None,
) -> tuple[str, str | None, str | None]:
    row = conn.execute(
        ENQUEUE,
        {
            "agent": agent,
            "reason": reason,
            "key": key,
            "origin": origin,
            "cause": cause,
            "priority": priority,
            "not_before": not_before,
        },
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def lineage(conn: Conn, run_id: str | None) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT origin, cause_run_id, chain_depth, priority FROM office.runs WHERE id = %s",
        [run_id],
    ).fetchone()
    assert row is not None
    return tuple(row)


@pytest.fixture
def agents(db: Conn) -> Conn:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    db.execute("SELECT office.upsert_agent('a2', 'w1')")
    db.execute("SELECT office.upsert_agent('b1', 'w2')")
    return db


def test_origin_is_derived_and_checked(agents: Conn) -> None:
    db = agents
    _, _, plain = enqueue(db, "r1")
    assert lineage(db, plain) == ("system", None, 0, 0)
    _, _, caused = enqueue(db, "r2", cause="r-unknown")
    assert lineage(db, caused) == ("agent", "r-unknown", 1, 0)
    _, _, empty = enqueue(db, "r3", cause="")
    assert lineage(db, empty) == ("system", None, 0, 0)
    _, _, human = enqueue(db, "r4", origin="human", cause=caused, priority=None)
    assert lineage(db, human) == ("human", caused, 0, 0)
    _, _, system = enqueue(db, "r5", origin="system", cause=caused)
    assert lineage(db, system) == ("system", caused, 0, 0)
    for bad in ("Agent", "", "robot", "x" * 10000):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="origin"):
            enqueue(db, "r6", origin=bad)
    for bad in ("line\nbreak", "c" * 201):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="cause_run_id"):
            enqueue(db, "r6", cause=bad)
    assert harness.scalar(db, "SELECT count(*) FROM office.runs WHERE reason = 'r6'") == 0


def test_chain_depth_follows_the_cause_in_the_workspace(agents: Conn) -> None:
    db = agents
    _, _, first = enqueue(db, "d1", origin="agent")
    assert lineage(db, first)[2] == 1
    _, _, second = enqueue(db, "d2", agent="a2", cause=first)
    assert lineage(db, second) == ("agent", first, 2, 0)
    _, _, third = enqueue(db, "d3", cause=second)
    assert lineage(db, third)[2] == 3
    # a cause of another workspace is refused, whatever the origin
    for origin in (None, "human", "system"):
        with pytest.raises(psycopg.Error, match="workspace 'w1'") as refused:
            enqueue(db, "d4", agent="b1", origin=origin, cause=first)
        assert refused.value.sqlstate == "OFW01"
    assert harness.scalar(db, "SELECT count(*) FROM office.runs WHERE reason = 'd4'") == 0


def test_priority_and_not_before_are_checked(agents: Conn) -> None:
    db = agents
    _, _, high = enqueue(db, "p1", priority=100)
    _, _, low = enqueue(db, "p2", priority=-100)
    assert lineage(db, high)[3] == 100 and lineage(db, low)[3] == -100
    for bad in (101, -101, 2**31 - 1):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="priority"):
            enqueue(db, "p3", priority=bad)
    for stamp in ("infinity", "-infinity", "10000-01-01Z"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="not_before"):
            db.execute(
                "SELECT office.enqueue_run('a1', 'p3', not_before => %s::timestamptz)", [stamp]
            )
    assert harness.scalar(db, "SELECT count(*) FROM office.runs WHERE reason = 'p3'") == 0


def test_not_before_delays_the_run_without_a_signal(agents: Conn, dsn: str) -> None:
    db = agents
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

        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        _, _, delayed = enqueue(db, "s1", not_before=later)
        assert received() == []
        assert (
            harness.scalar(
                db, "SELECT scheduled_retry_at FROM office.runs WHERE id = %s", [delayed]
            )
            == later
        )
        assert db.execute("SELECT * FROM office.claim_run('w', 'a1')").fetchall() == []
        # one in the past means now: claimable, signalled
        _, _, due = enqueue(db, "s2", agent="a2", not_before="2000-01-01T00:00:00Z")
        assert received() == ["a2"]
        assert (
            harness.scalar(db, "SELECT scheduled_retry_at FROM office.runs WHERE id = %s", [due])
            is None
        )
        claimed = db.execute("SELECT c.id FROM office.claim_run('w', 'a2') c").fetchall()
        assert claimed == [(due,)]


def test_the_guard_refuses_a_chain_past_the_limit(agents: Conn) -> None:
    db = agents
    db.execute("SET office.max_chain_depth = 2")
    _, _, first = enqueue(db, "g1", origin="agent")
    _, _, second = enqueue(db, "g2", cause=first)
    assert lineage(db, second)[2] == 2
    before = harness.scalar(db, "SELECT count(*) FROM office.runs")
    assert enqueue(db, "g3", key="occurrence-1", cause=second) == ("guarded", None, None)
    assert harness.scalar(db, "SELECT count(*) FROM office.runs") == before
    assert (
        harness.scalar(
            db,
            "SELECT count(*) FROM office.run_keys_recorded WHERE idempotency_key = 'occurrence-1'",
        )
        == 0
    )
    assert db.execute(
        "SELECT total FROM office.dedup_stats WHERE queue = 'runs' AND reason = 'g3'"
        " AND kind = 'guarded'"
    ).fetchall() == [(1,)]
    decision = db.execute(
        "SELECT agent_profile_id, run_id, decision, origin, cause_run_id, chain_depth, detail"
        " FROM office.wake_decisions"
    ).fetchall()
    assert len(decision) == 1
    agent, run_id, word, origin, cause, depth, detail = decision[0]
    assert (agent, run_id, word, origin, cause, depth) == (
        "a1",
        None,
        "guarded",
        "agent",
        second,
        3,
    )
    assert detail["max_chain_depth"] == 2 and detail["idempotency_key"] == "occurrence-1"
    # a redelivery is judged again, and is still not served
    assert enqueue(db, "g3", key="occurrence-1", cause=second) == ("guarded", None, None)
    assert harness.scalar(db, "SELECT count(*) FROM office.runs") == before
    # a human action starts a new chain; the guard off lets the chain go on
    assert enqueue(db, "g3", origin="human", cause=second)[0] == "queued"
    db.execute("SET office.max_chain_depth = 0")
    assert enqueue(db, "g4", cause=second)[0] == "queued"
    db.execute("SET office.max_chain_depth = ''")
    assert enqueue(db, "g5", cause=second)[0] == "queued"


def test_a_served_key_stays_deduped_past_the_limit(agents: Conn) -> None:
    db = agents
    _, _, first = enqueue(db, "k1", origin="agent", key="kk")
    db.execute("SET office.max_chain_depth = 1")
    assert enqueue(db, "k1", key="kk", cause=first)[:2] == ("deduped", "windowed")


@pytest.mark.parametrize("value", ["-1", "two", "1.5", "2 "])
def test_a_bad_setting_fails_every_agent_call(agents: Conn, value: str) -> None:
    db = agents
    db.execute("SELECT set_config('office.max_chain_depth', %s, false)", [value])
    if value.strip() == "2":
        assert enqueue(db, "b1", origin="agent")[0] == "queued"
        return
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"office\.max_chain_depth"):
        enqueue(db, "b1", origin="agent")
    # only calls of origin agent read it
    assert enqueue(db, "b2")[0] == "queued"
    assert enqueue(db, "b3", origin="human")[0] == "queued"
    assert harness.scalar(db, "SELECT count(*) FROM office.runs WHERE reason = 'b1'") == 0


def test_concurrent_requests_over_the_limit_are_all_guarded(
    agents: Conn, concurrently: harness.Concurrently
) -> None:
    db = agents
    _, _, first = enqueue(db, "c1", origin="agent")
    _, _, second = enqueue(db, "c2", cause=first)

    def request(index: int) -> Any:
        def call(conn: Conn) -> Any:
            conn.execute("SET office.max_chain_depth = 2")
            return enqueue(conn, "c3", key=f"race-{index % 4}", cause=second)

        return call

    outcomes = harness.values(concurrently([request(i) for i in range(16)]))
    assert outcomes == [("guarded", None, None)] * 16
    assert harness.scalar(db, "SELECT count(*) FROM office.runs WHERE reason = 'c3'") == 0
    assert harness.scalar(db, "SELECT count(*) FROM office.run_keys_recorded") == 0
    assert (
        harness.scalar(
            db, "SELECT total FROM office.dedup_stats WHERE reason = 'c3' AND kind = 'guarded'"
        )
        == 16
    )
    assert (
        harness.scalar(db, "SELECT count(*) FROM office.wake_decisions WHERE decision = 'guarded'")
        == 16
    )
