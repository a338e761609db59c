"""Wake policies (docs/api.md §9, "Policies"): set_wake_policy's checks of
every argument, insert, replace and clear, and the retry limits fail_run
reads from them (the agent's row, else its workspace's, else the default)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

Conn = psycopg.Connection[Any]


CASTS = {
    "cooldown": "interval",
    "max_runs": "int",
    "per": "interval",
    "budget": "numeric",
    "max_retries": "int",
    "retry_backoff": "interval[]",
}


def named_args(args: dict[str, Any]) -> str:
    return ", ".join(
        f"{k} => %({k})s::{CASTS[k]}" if k in CASTS else f"{k} => %({k})s" for k in args
    )


def policy(conn: Conn, **kwargs: Any) -> dict[str, Any]:
    names = named_args(kwargs)
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(f"SELECT * FROM office.set_wake_policy({names})", kwargs).fetchone()
    assert row is not None
    return row


def rows(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT scope, scope_id, cooldown, max_runs, per, budget, budget_period, max_retries,"
        ' retry_backoff FROM office.wake_policies ORDER BY scope, scope_id COLLATE "C"'
    ).fetchall()


@pytest.fixture
def agent(db: Conn) -> str:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    return "a1"


def test_insert_replace_and_clear(db: Conn, agent: str) -> None:
    row = policy(
        db,
        scope="agent",
        scope_id=agent,
        cooldown=dt.timedelta(minutes=5),
        max_runs=3,
        per=dt.timedelta(hours=1),
        budget=12.5,
        budget_period="week",
        max_retries=2,
        retry_backoff=[dt.timedelta(seconds=10), dt.timedelta(minutes=1)],
    )
    assert row["scope"] == "agent" and row["scope_id"] == agent
    assert row["cooldown"] == dt.timedelta(minutes=5)
    assert (row["max_runs"], row["per"]) == (3, dt.timedelta(hours=1))
    assert (row["budget"], row["budget_period"], row["max_retries"]) == (12.5, "week", 2)
    assert row["retry_backoff"] == [dt.timedelta(seconds=10), dt.timedelta(minutes=1)]
    assert row["updated_at"] is not None
    # Replace: what is not given is not set any more (NULL), the period back to month.
    again = policy(db, scope="agent", scope_id=agent, max_retries=0)
    assert rows(db) == [("agent", agent, None, None, None, None, "month", 0, None)]
    assert again["updated_at"] >= row["updated_at"]
    policy(db, scope="workspace", scope_id="w-unknown-to-any-agent", budget=0)
    assert len(rows(db)) == 2
    assert db.execute("SELECT office.clear_wake_policy('agent', %s)", [agent]).fetchone() == (True,)
    assert db.execute("SELECT office.clear_wake_policy('agent', %s)", [agent]).fetchone() == (
        False,
    )
    assert db.execute("SELECT office.clear_wake_policy('nope', NULL)").fetchone() == (False,)
    assert rows(db) == [
        ("workspace", "w-unknown-to-any-agent", None, None, None, 0, "month", None, None)
    ]


BAD: list[tuple[dict[str, Any], str]] = [
    ({"scope": None}, "scope"),
    ({"scope": ""}, "scope"),
    ({"scope": "team"}, "scope"),
    ({"scope_id": None}, "agent id"),
    ({"scope_id": ""}, "agent id"),
    ({"scope_id": "x" * 201}, "agent id"),
    ({"scope_id": "a:1"}, "agent id"),
    ({"scope": "workspace", "scope_id": ""}, "workspace id"),
    ({"scope": "workspace", "scope_id": "w,1"}, "workspace id"),
    ({"scope": "workspace", "scope_id": "w\x01"}, "workspace id"),
    ({"cooldown": dt.timedelta(seconds=-1)}, "cooldown"),
    ({"cooldown": "1000000 years"}, "cooldown"),
    ({"max_runs": 3}, "max_runs and per"),
    ({"per": dt.timedelta(hours=1)}, "max_runs and per"),
    ({"max_runs": 0, "per": dt.timedelta(hours=1)}, "max_runs"),
    ({"max_runs": 10001, "per": dt.timedelta(hours=1)}, "max_runs"),
    ({"max_runs": -1, "per": dt.timedelta(hours=1)}, "max_runs"),
    ({"max_runs": 1, "per": dt.timedelta(0)}, "per"),
    ({"max_runs": 1, "per": "-1 day"}, "per"),
    ({"max_runs": 1, "per": "101 years"}, "per"),
    ({"budget": -0.01}, "budget"),
    ({"budget": "NaN"}, "budget"),
    ({"budget": "Infinity"}, "budget"),
    ({"budget": "-Infinity"}, "budget"),
    ({"budget_period": None}, "budget_period"),
    ({"budget_period": ""}, "budget_period"),
    ({"budget_period": "year"}, "budget_period"),
    ({"budget_period": "x" * 70000}, "budget_period"),
    ({"max_retries": -1}, "max_retries"),
    ({"max_retries": 101}, "max_retries"),
    ({"retry_backoff": []}, "retry_backoff"),
    ({"retry_backoff": [dt.timedelta(seconds=1)] * 33}, "retry_backoff"),
    ({"retry_backoff": [dt.timedelta(seconds=1), None]}, "retry_backoff[2]"),
    ({"retry_backoff": [dt.timedelta(seconds=-1)]}, "retry_backoff[1]"),
    ({"retry_backoff": "{1 second, 200 years}"}, "retry_backoff[2]"),
    ({"retry_backoff": "{{1 second},{2 seconds}}"}, "retry_backoff"),
]


@pytest.mark.parametrize(("change", "named"), BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_bad_argument_is_22023_naming_it_and_writes_nothing(
    db: Conn, agent: str, change: dict[str, Any], named: str
) -> None:
    policy(db, scope="agent", scope_id=agent, max_retries=7)
    before = rows(db)
    args: dict[str, Any] = {"scope": "agent", "scope_id": agent} | change
    names = named_args(args)
    with pytest.raises(psycopg.Error) as caught:
        db.execute(f"SELECT office.set_wake_policy({names})", args)
    assert caught.value.sqlstate == "22023", caught.value
    assert named in str(caught.value)
    assert rows(db) == before


def test_unknown_agent_is_ofa01_and_a_workspace_need_not_exist(db: Conn) -> None:
    with pytest.raises(psycopg.Error) as caught:
        db.execute("SELECT office.set_wake_policy('agent', 'ghost', max_retries => 1)")
    assert caught.value.sqlstate == "OFA01"
    assert "ghost" in str(caught.value)
    assert rows(db) == []
    policy(db, scope="workspace", scope_id="w-empty", max_retries=1)
    assert [r[:2] for r in rows(db)] == [("workspace", "w-empty")]


def test_bounds_are_accepted(db: Conn, agent: str) -> None:
    row = policy(
        db,
        scope="agent",
        scope_id=agent,
        cooldown=dt.timedelta(0),
        max_runs=10000,
        per="100 years",
        budget=0,
        budget_period="day",
        max_retries=100,
        retry_backoff=[dt.timedelta(0)] * 32,
    )
    assert (row["max_runs"], row["max_retries"], len(row["retry_backoff"])) == (10000, 100, 32)
    row = policy(db, scope="agent", scope_id=agent, max_runs=1, per=dt.timedelta(seconds=1))
    assert row["max_runs"] == 1


def test_grants_admin_writes_readers_read(db: Conn, agent: str) -> None:
    policy(db, scope="agent", scope_id=agent, max_retries=1)
    for role in ("office_producer", "office_worker", "office_reader"):
        db.execute(f"SET ROLE {role}")
        try:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute("SELECT office.set_wake_policy('agent', 'a1')")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute("SELECT office.clear_wake_policy('agent', 'a1')")
        finally:
            db.execute("RESET ROLE")
    db.execute("SET ROLE office_reader")
    try:
        assert db.execute("SELECT count(*) FROM office.wake_policies").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM office.wake_spend").fetchone() == (0,)
    finally:
        db.execute("RESET ROLE")
    db.execute("SET ROLE office_admin")
    try:
        policy(db, scope="agent", scope_id=agent, max_retries=2)
        assert db.execute("SELECT office.clear_wake_policy('agent', 'a1')").fetchone() == (True,)
    finally:
        db.execute("RESET ROLE")


# --- fail_run(retryable) reads the retry limits ---------------------------------


def claimed_run(db: Conn, agent: str) -> tuple[str, int]:
    run_id = db.execute(
        "SELECT run_id FROM office.enqueue_run(%s, 'r', '{}', NULL, NULL, true)", [agent]
    ).fetchone()
    assert run_id is not None
    return claim_again(db, str(run_id[0]))


def claim_again(db: Conn, run_id: str) -> tuple[str, int]:
    db.execute("UPDATE office.runs SET scheduled_retry_at = NULL WHERE id = %s", [run_id])
    row = db.execute("SELECT id, attempt FROM office.claim_run('w1')").fetchone()
    assert row is not None and row[0] == run_id, row
    return run_id, int(row[1])


def fail_retryable(db: Conn, run_id: str, attempt: int) -> tuple[bool, str, dt.timedelta | None]:
    ok = db.execute(
        "SELECT office.fail_run(%s, %s, 'boom', retryable => true, worker_id => 'w1')",
        [run_id, attempt],
    ).fetchone()
    row = db.execute(
        "SELECT status, scheduled_retry_at - now() FROM office.runs WHERE id = %s", [run_id]
    ).fetchone()
    assert ok is not None and row is not None
    return bool(ok[0]), str(row[0]), row[1]


def retries_until_failed(db: Conn, agent: str) -> list[dt.timedelta]:
    """The back-offs of one run's retryable failures until it fails for good."""
    run_id, attempt = claimed_run(db, agent)
    delays: list[dt.timedelta] = []
    for _ in range(200):
        ok, status, delay = fail_retryable(db, run_id, attempt)
        assert ok
        if status == "failed":
            return delays
        assert status == "queued" and delay is not None
        delays.append(delay)
        run_id, attempt = claim_again(db, run_id)
    raise AssertionError("never failed")


def within_jitter(delay: dt.timedelta, base: dt.timedelta) -> bool:
    return base * 0.75 - dt.timedelta(seconds=1) <= delay <= base * 1.25


def test_default_without_policy(db: Conn, agent: str) -> None:
    delays = retries_until_failed(db, agent)
    assert len(delays) == 3
    for delay, base in zip(delays, [dt.timedelta(minutes=m) for m in (2, 10, 30)], strict=True):
        assert within_jitter(delay, base), (delay, base)


def test_workspace_row_serves_when_the_agent_sets_nothing(db: Conn, agent: str) -> None:
    policy(db, scope="workspace", scope_id="w1", max_retries=5, retry_backoff=["1 hour", "1 day"])
    policy(db, scope="agent", scope_id=agent, cooldown=dt.timedelta(0))  # sets no retry limit
    delays = retries_until_failed(db, agent)
    assert len(delays) == 5
    assert within_jitter(delays[0], dt.timedelta(hours=1))
    for delay in delays[1:]:  # the last step repeats
        assert within_jitter(delay, dt.timedelta(days=1)), delay


def test_agent_row_wins_each_value_on_its_own(db: Conn, agent: str) -> None:
    policy(db, scope="workspace", scope_id="w1", max_retries=5, retry_backoff=["1 hour"])
    policy(db, scope="agent", scope_id=agent, max_retries=1)
    delays = retries_until_failed(db, agent)
    assert len(delays) == 1 and within_jitter(delays[0], dt.timedelta(hours=1))
    policy(db, scope="agent", scope_id=agent, retry_backoff=["3 seconds"])
    delays = retries_until_failed(db, agent)  # max_retries from the workspace again
    assert len(delays) == 5
    assert all(within_jitter(d, dt.timedelta(seconds=3)) for d in delays), delays


def test_max_retries_zero_fails_at_once_and_other_agents_keep_the_default(
    db: Conn, agent: str
) -> None:
    db.execute("SELECT office.upsert_agent('b1', 'w2')")
    policy(db, scope="agent", scope_id=agent, max_retries=0)
    assert retries_until_failed(db, agent) == []
    assert len(retries_until_failed(db, "b1")) == 3


def test_jitter_spreads_the_back_off(db: Conn, agent: str) -> None:
    policy(db, scope="agent", scope_id=agent, max_retries=1, retry_backoff=["1 hour"])
    delays = [retries_until_failed(db, agent)[0] for _ in range(30)]
    assert all(within_jitter(d, dt.timedelta(hours=1)) for d in delays)
    assert max(delays) - min(delays) > dt.timedelta(minutes=5)
