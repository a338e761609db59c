"""``officectl policy set|show|clear`` and ``officectl explain`` against a
real database, through a subprocess as an operator runs them: the policy a
call writes is the row SQL reads, ``--json`` gives the same fields as the
tables, and a bad value is a one-line error naming it."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from tests.scenarios.cli import officectl, ok_json

Conn = psycopg.Connection[Any]


@pytest.fixture
def office(db: Conn) -> Conn:
    db.execute("SELECT office.upsert_agent('a1', 'w1', 'Ada')")
    return db


def test_set_show_clear(dsn: str, office: Conn) -> None:
    row = ok_json(
        dsn,
        "policy", "set", "agent", "a1",
        "--cooldown", "15m", "--max-runs", "3", "--per", "1h",
        "--budget", "2.50", "--budget-period", "day",
        "--retry-backoff", "10s", "--retry-backoff", "2m",
    )  # fmt: skip
    assert row["cooldown"] == 900 and (row["max_runs"], row["per"]) == (3, 3600)
    assert (row["budget"], row["budget_period"], row["retry_backoff"]) == (2.5, "day", [10, 120])
    stored = office.execute(
        "SELECT cooldown, max_runs, budget::text, budget_period FROM office.wake_policies"
    ).fetchall()
    assert [(str(c), m, b, p) for c, m, b, p in stored] == [("0:15:00", 3, "2.50", "day")]
    ok_json(dsn, "policy", "set", "workspace", "w1", "--max-retries", "1")
    shown = ok_json(dsn, "policy", "show")
    assert [(p["scope"], p["scope_id"]) for p in shown] == [("agent", "a1"), ("workspace", "w1")]
    assert [p["scope_id"] for p in ok_json(dsn, "policy", "show", "workspace")] == ["w1"]
    table = officectl(dsn, "policy", "show")
    assert table.returncode == 0 and "0:15:00" in table.stdout
    assert ok_json(dsn, "policy", "clear", "agent", "a1") == {"cleared": True}
    assert ok_json(dsn, "policy", "clear", "agent", "a1") == {"cleared": False}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-runs", "3"], "--max-runs and --per come together"),
        (["--budget", "lots"], "'lots' is not a number"),
        (["--budget", "-1"], "budget"),
        (["--cooldown", "soon"], "invalid duration 'soon'"),
    ],
)
def test_a_bad_value_is_one_line_naming_it(
    dsn: str, office: Conn, args: list[str], message: str
) -> None:
    result = officectl(dsn, "policy", "set", "agent", "a1", *args)
    assert result.returncode != 0 and message in result.stderr
    assert "Traceback" not in result.stderr
    assert office.execute("SELECT count(*) FROM office.wake_policies").fetchone() == (0,)


def test_an_unknown_agent_is_named(dsn: str, office: Conn) -> None:
    result = officectl(dsn, "policy", "set", "agent", "nobody", "--budget", "1")
    assert result.returncode != 0 and "agent 'nobody' not found" in result.stderr
    result = officectl(dsn, "explain", "nobody")
    assert result.returncode != 0 and "agent 'nobody' not found" in result.stderr


def test_explain_says_what_holds_each_run(dsn: str, office: Conn) -> None:
    assert ok_json(dsn, "explain", "a1") == {"agent": "a1", "runs": []}
    office.execute("SELECT office.set_wake_policy('agent', 'a1', budget => 0)")
    run = office.execute("SELECT run_id FROM office.enqueue_run('a1', 'work')").fetchone()
    assert run is not None
    report = ok_json(dsn, "explain", "a1", "--all")
    [row] = report["runs"]
    assert (row["run_id"], row["claimable"], row["held_by"]) == (run[0], False, "budget")
    assert row["until"] is not None and "budget of 0 per month is reached" in row["detail"]
    assert report["held"] == [{"agent_profile_id": "a1", "held_by": "budget", "runs": 1}]
    table = officectl(dsn, "explain", "a1")
    assert table.returncode == 0 and "budget" in table.stdout


def test_doctor_warns_without_a_budget_and_near_one(dsn: str, office: Conn) -> None:
    office.execute("SELECT office.upsert_agent('b1', 'w2')")
    office.execute("SELECT office.set_wake_policy('agent', 'a1', budget => 10)")
    run = office.execute("SELECT run_id FROM office.enqueue_run('a1', 'work')").fetchone()
    assert run is not None
    claimed = office.execute("SELECT id, attempt FROM office.claim_run('w')").fetchone()
    assert claimed is not None
    office.execute("SELECT office.record_run_cost(%s, %s, 8.5)", claimed)
    result = officectl(dsn, "doctor", "--json")
    assert result.returncode == 0, result.stderr  # warnings, not problems
    budgets = [f for f in json.loads(result.stdout)["findings"] if f["check"] == "budgets"]
    assert [(f["status"], f["detail"]) for f in budgets] == [
        (
            "warning",
            "workspace 'w2' has no budget, nor do 1 of its agents: nothing stops their spend",
        ),
        (
            "warning",
            "agent 'a1' has spent 8.5 of its budget of 10 this month (85%); at 100 % no run"
            " of it is claimed until the next period",
        ),
    ]
