"""Wake governance under faults (docs/api.md §9), with ``officectl worker``
subprocesses over the test handler module: a worker SIGKILLed between
``record_run_cost`` and its outcome, a worker SIGSTOPped past its budget,
a worker restarted during a cooldown, and the daemon (``officectl run``,
whose subscriber enqueues each assignment) SIGKILLed during one. Nothing is
lost, nothing runs twice, and the spend is what was recorded."""

from __future__ import annotations

import itertools
import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.harness import scalar, wait_for
from tests.scenarios.daemon import (
    assert_each_assignment_has_one_run,
    daemon,
    make_assignment_backlog,
    pending_events,
)
from tests.scenarios.worker import HANDLERS, Handlers, enqueue, worker

Conn = psycopg.Connection[Any]
FAST = ("--heartbeat", "0.3", "--poll", "0.2")


@pytest.fixture
def handlers(tmp_path: Path) -> Handlers:
    (tmp_path / "handlers.py").write_text(HANDLERS)
    return Handlers(tmp_path, tmp_path / "calls.jsonl")


@pytest.fixture
def agent(db: Conn) -> str:
    db.execute("SELECT office.upsert_agent('a1', 'ws')")
    return "a1"


def run_row(db: Conn, run_id: str) -> tuple[str, int, Any]:
    row = db.execute(
        "SELECT status, attempt, cost FROM office.runs WHERE id = %s", [run_id]
    ).fetchone()
    assert row is not None
    return (row[0], row[1], row[2])


def spend(db: Conn, scope: str, scope_id: str) -> Any:
    return scalar(
        db,
        "SELECT coalesce(sum(amount), 0) FROM office.wake_spend WHERE scope = %s AND scope_id = %s",
        (scope, scope_id),
    )


def test_a_worker_killed_after_recording_a_cost_loses_nothing(
    db: Conn, dsn: str, agent: str, handlers: Handlers
) -> None:
    """SIGKILL after the cost is recorded, before the outcome: the recording
    stays (once), recovery hands the run to another worker, whose own
    recording adds to it, and the run is finished once."""
    run_id = enqueue(db, agent, 1, action="cost", amount=0.25, seconds=30, attempts=[1])
    with worker(dsn, handlers, "handlers:handle", "--worker-id", "A", *FAST) as a:
        wait_for(lambda: handlers.events(run_id, "recorded"), "A to record the cost")
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
    assert run_row(db, run_id)[:2] == ("claimed", 1)
    wait_for(
        lambda: scalar(db, "SELECT office.recover_stale_runs(interval '1 second')"),
        "the killed worker's run to be recovered",
    )
    with worker(dsn, handlers, "handlers:handle", "--worker-id", "B", *FAST) as b:
        wait_for(lambda: run_row(db, run_id)[0] == "finished", "B to finish the run")
        assert b.terminate() == 0
    status, attempt, cost = run_row(db, run_id)
    assert (status, attempt) == ("finished", 2)
    recorded = handlers.events(run_id, "recorded")
    assert [(c["attempt"], c["recorded"]) for c in recorded] == [(1, True)]
    assert [c["attempt"] for c in handlers.events(run_id, "end")] == [2]
    # The killed attempt's recording, once (the payload records on attempt 1
    # only): in the run's cost and in its agent's and workspace's spend.
    assert cost == pytest.approx(0.25)
    assert spend(db, "agent", agent) == pytest.approx(0.25)
    assert spend(db, "workspace", "ws") == pytest.approx(0.25)


def test_a_worker_stopped_past_its_budget_has_its_late_outcome_refused(
    db: Conn, dsn: str, agent: str, handlers: Handlers
) -> None:
    """The run's recording reaches the budget, then its worker is SIGSTOPped
    (no heartbeat can stop the run): recovery puts the run back, no worker
    claims it while the budget holds, the stopped worker's late finish is
    refused, and after a policy change the run is claimed and finished once."""
    db.execute("SELECT office.set_wake_policy('agent', %s, budget => 1)", [agent])
    run_id = enqueue(db, agent, 1, action="cost", amount=1.5, seconds=2, attempts=[1])
    with worker(dsn, handlers, "handlers:handle", "--worker-id", "A", *FAST) as a:
        wait_for(lambda: handlers.events(run_id, "recorded"), "A to record the cost")
        a.proc.send_signal(signal.SIGSTOP)
        wait_for(
            lambda: (
                scalar(db, "SELECT office.recover_stale_runs(interval '1 second')")
                or run_row(db, run_id)[0] == "queued"
            ),
            "the run to be put back (recovered, or stopped by a heartbeat first)",
        )
        with worker(dsn, handlers, "handlers:handle", "--worker-id", "B", *FAST) as b:
            wait_for(lambda: b.messages(), "B to start")
            a.proc.send_signal(signal.SIGCONT)
            wait_for(lambda: handlers.events(run_id, "end")[:1], "A's handler to end")
            wait_for(lambda: "lost" in a.text() or "stopped" in a.text(), "A to log the lost run")
            # The budget holds: B claims nothing, the run waits queued.
            assert run_row(db, run_id)[:2] == ("queued", 1)
            held = scalar(db, "SELECT held_by FROM office.explain_agent(%s)", (agent,))
            assert held == "budget"
            db.execute("SELECT office.set_wake_policy('agent', %s, budget => 10)", [agent])
            wait_for(lambda: run_row(db, run_id)[0] == "finished", "B to finish the run")
            assert b.terminate() == 0
        assert a.terminate() == 0, a.text()[-4000:]
    status, attempt, cost = run_row(db, run_id)
    assert (status, attempt) == ("finished", 2)
    assert [c["attempt"] for c in handlers.events(run_id, "end")] == [1, 2]
    assert cost == pytest.approx(1.5)  # the first attempt's (the payload records on it only)
    stops = scalar(
        db, "SELECT count(*) FROM office.wake_decisions WHERE decision = 'budget_exhausted'"
    )
    assert stops == 1


def test_a_worker_restarted_during_a_cooldown_runs_each_run_once_and_spaced(
    db: Conn, dsn: str, agent: str, handlers: Handlers
) -> None:
    """Three runs under a cooldown of a second: a worker finishes the first
    and is stopped (SIGTERM) while the others are held; a new worker runs
    them, one at a time, each claimed at least a cooldown after the last
    claim of the agent ended."""
    db.execute("SELECT office.set_wake_policy('agent', %s, cooldown => '1 second')", [agent])
    runs = [enqueue(db, agent, n) for n in range(3)]
    with worker(dsn, handlers, "handlers:handle", "--worker-id", "A", *FAST) as a:
        wait_for(lambda: handlers.events(runs[0], "end"), "A to run the first")
        assert a.terminate() == 0
    with worker(dsn, handlers, "handlers:handle", "--worker-id", "B", *FAST) as b:
        wait_for(lambda: all(run_row(db, r)[0] == "finished" for r in runs), "B to run the others")
        assert b.terminate() == 0
    rows = db.execute(
        "SELECT id, attempt, claimed_at, finished_at FROM office.runs"
        " WHERE agent_profile_id = %s ORDER BY claimed_at",
        [agent],
    ).fetchall()
    assert sorted(r[0] for r in rows) == sorted(runs)
    assert all(r[1] == 1 for r in rows)  # each claimed once
    for before, after in itertools.pairwise(rows):
        assert (after[2] - before[3]).total_seconds() >= 1.0, rows
    assert all(len(handlers.events(r)) == 1 for r in runs)


def held_by_cooldown(db: Conn, agent: str) -> int:
    return int(
        scalar(
            db,
            "SELECT count(*) FROM office.explain_agent(%s) WHERE held_by = 'cooldown'",
            [agent],
        )
    )


def test_a_daemon_killed_during_a_cooldown_leaves_one_run_per_assignment_each_spaced(
    db: Conn, dsn: str, handlers: Handlers
) -> None:
    """Two assignments whose runs the daemon's subscriber enqueues; a worker
    runs the first and the cooldown holds the second; the daemon is SIGKILLed
    then, two more assignments are made while it is away, and a new daemon
    takes over. Every assignment has one run, each claimed once, each claim
    at least a cooldown after the agent's previous claim ended: the hold
    lives in the database, and neither the kill nor the new daemon's
    readiness repair lets a run through early."""
    agent, cooldown = "cd-agent-0", 1.5
    make_assignment_backlog(db, "cd", tasks=2, agents=1)
    db.execute(
        "SELECT office.set_wake_policy('agent', %s, cooldown => make_interval(secs => %s))",
        [agent, cooldown],
    )
    with worker(dsn, handlers, "handlers:handle", "--worker-id", "W", *FAST) as w:
        with daemon(dsn) as first:
            # The first run's own events reach the subscriber a poll later
            # than the hold shows, so the kill waits for both.
            wait_for(
                lambda: held_by_cooldown(db, agent) == 1 and pending_events(db) == 0,
                "a run held by the cooldown, and every event processed",
            )
            first.proc.send_signal(signal.SIGKILL)
            assert first.proc.wait(30) == -signal.SIGKILL
        for n in (3, 4):
            db.execute("SELECT office.create_task('ws', id => %s)", [f"cd-task-{n}"])
            db.execute(
                "UPDATE office.tasks SET assignee_agent_profile_id = %s WHERE id = %s",
                [agent, f"cd-task-{n}"],
            )
        assert pending_events(db) == 2  # nobody enqueued them yet
        with daemon(dsn) as second:
            wait_for(
                lambda: (
                    scalar(
                        db,
                        "SELECT count(*) FROM office.runs WHERE agent_profile_id = %s"
                        " AND status = 'finished'",
                        [agent],
                    )
                    == 4
                ),
                "the four runs to finish",
                timeout=60,
            )
            assert second.terminate() == 0, second.text()[-4000:]
        assert w.terminate() == 0
    assert assert_each_assignment_has_one_run(db, "cd") == 4
    rows = db.execute(
        "SELECT id, attempt, claimed_at, finished_at FROM office.runs"
        " WHERE agent_profile_id = %s ORDER BY claimed_at",
        [agent],
    ).fetchall()
    assert [r[1] for r in rows] == [1, 1, 1, 1]  # each claimed once
    for before, after in itertools.pairwise(rows):
        assert (after[2] - before[3]).total_seconds() >= cooldown, rows
    assert all(len(handlers.events(r[0])) == 1 for r in rows)
