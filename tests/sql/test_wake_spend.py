"""Spend and budgets (docs/api.md §9): record_run_cost's checks and fence,
the spend per scope and UTC day, the budget_warning/budget_exhausted
decisions on the crossing (one of two racing recordings writes them), and
heartbeat_run's hard stop at a reached budget."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from tests.harness import Concurrently, scalar, values, wait_until_blocked

Conn = psycopg.Connection[Any]


@pytest.fixture
def agents(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    db.execute("SELECT office.upsert_agent('a2', 'w1')")
    db.execute("SELECT office.upsert_agent('b1', 'w2')")


def claimed(db: Conn, agent: str, worker: str = "wk") -> tuple[str, int]:
    row = db.execute(
        "SELECT run_id FROM office.enqueue_run(%s, 'r', '{}', NULL, NULL, true)", [agent]
    ).fetchone()
    assert row is not None
    claim = db.execute(
        "SELECT id, attempt FROM office.claim_run(%s, %s)", [worker, agent]
    ).fetchone()
    assert claim is not None and claim[0] == row[0], claim
    return str(claim[0]), int(claim[1])


def record(db: Conn, run_id: str, attempt: int, amount: Any, worker: str | None = None) -> bool:
    return bool(
        scalar(
            db,
            "SELECT office.record_run_cost(%s, %s, %s::numeric, %s)",
            [run_id, attempt, amount, worker],
        )
    )


def spend(db: Conn, scope: str, scope_id: str) -> Decimal:
    return Decimal(
        scalar(
            db,
            "SELECT coalesce(sum(amount), 0) FROM office.wake_spend"
            " WHERE scope = %s AND scope_id = %s AND day = (now() AT TIME ZONE 'UTC')::date",
            [scope, scope_id],
        )
    )


def cost(db: Conn, run_id: str) -> Decimal:
    return Decimal(scalar(db, "SELECT cost FROM office.runs WHERE id = %s", [run_id]))


def decisions(db: Conn) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT decision, agent_profile_id, run_id, detail->>'scope', detail->>'scope_id'"
        " FROM office.wake_decisions WHERE decision LIKE 'budget%%'"
        " ORDER BY id"
    ).fetchall()


@pytest.mark.parametrize("amount", [None, "-1", "-0.0001", "NaN", "Infinity", "-Infinity"])
def test_bad_amount_is_22023_and_records_nothing(db: Conn, agents: None, amount: Any) -> None:
    run_id, attempt = claimed(db, "a1")
    with pytest.raises(psycopg.Error) as caught:
        record(db, run_id, attempt, amount)
    assert caught.value.sqlstate == "22023"
    assert "amount" in str(caught.value)
    assert cost(db, run_id) == 0
    assert scalar(db, "SELECT count(*) FROM office.wake_spend") == 0


def test_recorded_on_the_run_the_agent_and_the_workspace_without_policy(
    db: Conn, agents: None
) -> None:
    r1, a1 = claimed(db, "a1")
    r2, a2 = claimed(db, "a2")
    assert record(db, r1, a1, "1.25", "wk")
    assert record(db, r1, a1, "0")
    assert record(db, r2, a2, "2")
    assert (cost(db, r1), cost(db, r2)) == (Decimal("1.25"), Decimal("2"))
    assert spend(db, "agent", "a1") == Decimal("1.25")
    assert spend(db, "agent", "a2") == Decimal("2")
    assert spend(db, "workspace", "w1") == Decimal("3.25")
    assert spend(db, "workspace", "w2") == 0
    # One row per agent and day; the workspace's rows are slots of one day.
    assert scalar(db, "SELECT count(*) FROM office.wake_spend WHERE scope = 'agent'") == 2
    assert (
        scalar(db, "SELECT count(DISTINCT day) FROM office.wake_spend WHERE scope = 'workspace'")
        == 1
    )
    assert decisions(db) == []


def test_fence_attempt_and_worker(db: Conn, agents: None) -> None:
    run_id, attempt = claimed(db, "a1", "wk")
    assert not record(db, run_id, attempt + 1, "1")  # not this attempt
    assert not record(db, run_id, attempt - 1, "1")  # never claimed with attempt 0
    assert not record(db, run_id, attempt, "1", "other")  # another worker's claim
    assert not record(db, "no-such-run", 1, "1")
    assert cost(db, run_id) == 0
    assert record(db, run_id, attempt, "1", "wk")
    assert scalar(db, "SELECT office.finish_run(%s, %s, 'wk')", [run_id, attempt])
    # After the claim ended: still accepted with the attempt (and its worker).
    assert record(db, run_id, attempt, "2", "wk")
    assert record(db, run_id, attempt, "3")
    assert not record(db, run_id, attempt, "4", "other")
    assert cost(db, run_id) == Decimal("6")
    assert spend(db, "agent", "a1") == Decimal("6")


def test_after_put_back_the_old_attempt_records_and_a_reclaim_fences_it(
    db: Conn, agents: None
) -> None:
    run_id, attempt = claimed(db, "a1", "wk")
    db.execute(
        "UPDATE office.runs SET heartbeat_at = now() - interval '1 hour' WHERE id = %s", [run_id]
    )
    assert scalar(db, "SELECT office.recover_stale_runs('1 minute')") == 1
    assert record(db, run_id, attempt, "1", "wk")  # put back: claimed_by cleared
    again = db.execute("SELECT id, attempt FROM office.claim_run('wk2')").fetchone()
    assert again is not None and again[0] == run_id and again[1] == attempt + 1
    assert not record(db, run_id, attempt, "1", "wk")
    assert not record(db, run_id, attempt, "1")
    assert record(db, run_id, attempt + 1, "1", "wk2")
    assert cost(db, run_id) == Decimal("2")


def test_decisions_at_80_and_100_percent_per_scope(db: Conn, agents: None) -> None:
    db.execute("SELECT office.set_wake_policy('agent', 'a1', budget => 10)")
    db.execute(
        "SELECT office.set_wake_policy('workspace', 'w1', budget => 20, budget_period => 'day')"
    )
    r1, a1 = claimed(db, "a1")
    assert record(db, r1, a1, "7.99")
    assert decisions(db) == []
    assert record(db, r1, a1, "0.01")  # a1 at 80 %
    assert decisions(db) == [("budget_warning", "a1", r1, "agent", "a1")]
    assert record(db, r1, a1, "1")  # 90 %: no new crossing
    assert len(decisions(db)) == 1
    r2, a2 = claimed(db, "a2")
    # w1: 9 -> 16 (80 %) and a2 has no budget of its own
    assert record(db, r2, a2, "7")
    assert decisions(db)[1:] == [("budget_warning", "a2", r2, "workspace", "w1")]
    # One recording across both thresholds of both scopes writes all four
    # not yet written: a1 100 %, w1 100 %.
    assert record(db, r1, a1, "5")
    assert decisions(db)[2:] == [
        ("budget_exhausted", "a1", r1, "agent", "a1"),
        ("budget_exhausted", "a1", r1, "workspace", "w1"),
    ]
    assert record(db, r1, a1, "5")  # past 100 %: nothing more
    assert len(decisions(db)) == 4
    detail = scalar(
        db,
        "SELECT detail FROM office.wake_decisions WHERE decision = 'budget_exhausted'"
        " ORDER BY id LIMIT 1",
    )
    assert detail["budget"] == 10 and detail["budget_period"] == "month"
    assert Decimal(str(detail["spent"])) == Decimal("14")


def test_spend_of_earlier_days_counts_within_the_period(db: Conn, agents: None) -> None:
    db.execute(
        "INSERT INTO office.wake_spend (scope, scope_id, day, amount) VALUES"
        " ('agent', 'a1', (now() AT TIME ZONE 'UTC')::date - 40, 100),"
        " ('agent', 'a1', date_trunc('month', now() AT TIME ZONE 'UTC')::date, 5)"
    )
    db.execute("SELECT office.set_wake_policy('agent', 'a1', budget => 10)")
    r1, a1 = claimed(db, "a1")
    if scalar(db, "SELECT extract(day FROM now() AT TIME ZONE 'UTC') = 1"):
        pytest.skip("the first of the month: the two rows are one day")
    assert record(db, r1, a1, "3")  # 5 + 3 = 8: the month's, not the 100 of 40 days ago
    assert [d[0] for d in decisions(db)] == ["budget_warning"]
    db.execute("SELECT office.set_wake_policy('agent', 'a1', budget => 10, budget_period => 'day')")
    assert record(db, r1, a1, "3")  # today 6 of 10: crosses nothing new in this period
    assert [d[0] for d in decisions(db)] == ["budget_warning"]


def test_two_recordings_crossing_together_write_each_decision_once(
    db: Conn, dsn: str, agents: None
) -> None:
    """The second recording waits for the first (the agent's day row, the
    workspace's lock) and reads its spend: exactly one crosses."""
    db.execute("SELECT office.set_wake_policy('agent', 'a1', budget => 10)")
    db.execute("SELECT office.set_wake_policy('workspace', 'w1', budget => 10)")
    r1, a1 = claimed(db, "a1")
    assert scalar(db, "SELECT office.finish_run(%s, %s)", [r1, a1])
    r2, a2 = claimed(db, "a1")
    with psycopg.connect(dsn) as first, psycopg.connect(dsn, autocommit=True) as second:
        assert record(first, r1, a1, "6")  # open transaction
        pid = scalar(second, "SELECT pg_backend_pid()")
        result: list[bool] = []
        thread = threading.Thread(target=lambda: result.append(record(second, r2, a2, "6")))
        thread.start()
        wait_until_blocked(db, pid, "the first recording")
        first.commit()
        thread.join(60)
    assert result == [True]
    assert cost(db, r1) + cost(db, r2) == Decimal("12")
    assert spend(db, "agent", "a1") == Decimal("12")
    assert spend(db, "workspace", "w1") == Decimal("12")
    assert sorted(decisions(db)) == sorted(
        [
            ("budget_warning", "a1", r2, "agent", "a1"),
            ("budget_exhausted", "a1", r2, "agent", "a1"),
            ("budget_warning", "a1", r2, "workspace", "w1"),
            ("budget_exhausted", "a1", r2, "workspace", "w1"),
        ]
    )
    # Nothing of the agent is claimed after: the budget holds its next run.
    assert scalar(db, "SELECT office.finish_run(%s, %s)", [r2, a2])
    db.execute("SELECT office.enqueue_run('a1', 'after')")
    assert db.execute("SELECT id FROM office.claim_run('w')").fetchone() is None


def test_racing_recordings_of_two_agents(
    db: Conn, concurrently: Concurrently, agents: None
) -> None:
    db.execute("SELECT office.set_wake_policy('workspace', 'w1', budget => 10)")
    db.execute("SELECT office.set_wake_policy('agent', 'a1', budget => 6)")
    db.execute("SELECT office.set_wake_policy('agent', 'a2', budget => 6)")
    r1, a1 = claimed(db, "a1")
    r2, a2 = claimed(db, "a2")
    assert values(
        concurrently([lambda c: record(c, r1, a1, "6"), lambda c: record(c, r2, a2, "6")])
    ) == [True, True]
    assert spend(db, "workspace", "w1") == Decimal("12")
    got = decisions(db)
    assert sum(1 for d in got if d[3] == "workspace" and d[0] == "budget_exhausted") == 1
    assert sum(1 for d in got if d[3] == "workspace" and d[0] == "budget_warning") == 1
    for agent in ("a1", "a2"):
        mine = sorted(d[0] for d in got if d[3] == "agent" and d[4] == agent)
        assert mine == ["budget_exhausted", "budget_warning"]


def test_recorders_of_different_agents_without_a_workspace_budget_do_not_wait(
    db: Conn, dsn: str, agents: None
) -> None:
    r1, a1 = claimed(db, "a1")
    r2, a2 = claimed(db, "a2")
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        assert record(first, r1, a1, "1")
        second.execute("SET lock_timeout = '2s'")
        assert record(second, r2, a2, "1")  # no wait on w1's spend
        first.commit()
        second.commit()
    assert spend(db, "workspace", "w1") == Decimal("2")


# --- heartbeat_run's hard stop ---------------------------------------------------


def test_heartbeat_stops_at_the_agents_budget(db: Conn, agents: None) -> None:
    db.execute("SELECT office.set_wake_policy('agent', 'a1', budget => 5)")
    run_id, attempt = claimed(db, "a1", "wk")
    assert scalar(db, "SELECT office.heartbeat_run(%s, %s, 'wk')", [run_id, attempt])
    assert record(db, run_id, attempt, "5", "wk")
    retries = scalar(db, "SELECT retry_count FROM office.runs WHERE id = %s", [run_id])
    # A heartbeat that does not match the fence changes nothing, and is false.
    assert not scalar(db, "SELECT office.heartbeat_run(%s, %s, 'other')", [run_id, attempt])
    assert scalar(db, "SELECT status FROM office.runs WHERE id = %s", [run_id]) == "claimed"
    assert not scalar(db, "SELECT office.heartbeat_run(%s, %s, 'wk')", [run_id, attempt])
    row = db.execute(
        "SELECT status, claimed_at, claimed_by, heartbeat_at, retry_count, attempt"
        " FROM office.runs WHERE id = %s",
        [run_id],
    ).fetchone()
    assert row == ("queued", None, None, None, retries, attempt)
    # The worker's late outcome is refused; its last cost is still recorded.
    assert not scalar(db, "SELECT office.finish_run(%s, %s, 'wk')", [run_id, attempt])
    assert not scalar(db, "SELECT office.fail_run(%s, %s, 'late', true, 'wk')", [run_id, attempt])
    assert record(db, run_id, attempt, "1", "wk")
    assert scalar(db, "SELECT status FROM office.runs WHERE id = %s", [run_id]) == "queued"
    # Another agent of the workspace is not stopped by a1's own budget.
    other, other_attempt = claimed(db, "a2")
    assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [other, other_attempt])


def test_heartbeat_stops_at_the_workspaces_budget_and_a_policy_change_lifts_it(
    db: Conn, agents: None
) -> None:
    db.execute("SELECT office.set_wake_policy('workspace', 'w1', budget => 3)")
    r1, a1 = claimed(db, "a1")
    r2, a2 = claimed(db, "a2")
    rb, ab = claimed(db, "b1")
    assert record(db, r1, a1, "2")
    assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [r2, a2])
    assert record(db, r1, a1, "1")
    assert not scalar(db, "SELECT office.heartbeat_run(%s, %s)", [r2, a2])
    assert scalar(db, "SELECT status FROM office.runs WHERE id = %s", [r2]) == "queued"
    assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [rb, ab])  # w2 is not w1
    db.execute("SELECT office.set_wake_policy('workspace', 'w1', budget => 100)")
    assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [r1, a1])


def test_heartbeat_without_budget_probes_one_index(db: Conn, agents: None) -> None:
    """With policy rows but no budget, the stop costs one probe of the
    partial index and reads neither the spend nor the agent."""
    db.execute("SELECT office.set_wake_policy('agent', 'a1', max_retries => 1)")
    run_id, attempt = claimed(db, "a1")
    # The xact counters also show what earlier transactions of the session
    # have not reported yet: the difference is what the heartbeat read.
    reads = (
        "SELECT relid::regclass::text, coalesce(seq_scan, 0), coalesce(idx_scan, 0)"
        " FROM pg_stat_xact_user_tables WHERE relid IN ('office.wake_policies'::regclass,"
        " 'office.wake_spend'::regclass, 'office.agent_profiles'::regclass) ORDER BY 1"
    )
    with db.transaction():
        before = db.execute(reads).fetchall()
        assert scalar(db, "SELECT office.heartbeat_run(%s, %s)", [run_id, attempt])
        after = db.execute(reads).fetchall()
    delta = {b[0]: (a[1] - b[1], a[2] - b[2]) for a, b in zip(after, before, strict=True)}
    assert delta == {
        "office.agent_profiles": (0, 0),
        "office.wake_policies": (0, 1),
        "office.wake_spend": (0, 0),
    }
