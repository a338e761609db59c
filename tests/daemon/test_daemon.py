"""``officectl run``, the control-plane daemon, against real PostgreSQL.

Daemons run as subprocesses (``officectl --dsn … run``) with intervals of
fractions of a second; every wait is a bounded polling loop on a condition,
never a timed assertion. The restart test starts a private throwaway
PostgreSQL 15 cluster of its own (the suite's cluster must not be restarted
under the other tests).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane import schema
from controlplane.client import Office
from controlplane.daemon import DaemonConfig
from controlplane.daemon.cron import CronLoop
from controlplane.daemon.loop import DatabaseHealth
from controlplane.daemon.metrics import daemon_metrics_for
from controlplane.daemon.stats import StatsLoop
from tests import harness
from tests.harness import scalar, wait_for
from tests.scenarios.daemon import (
    OFFICECTL,
    ROOT,
    DaemonProcess,
    assert_each_assignment_has_one_run,
    assignment_dedups,
    daemon,
    make_assignment_backlog,
    pending_events,
)

PG15_EXTENSION_DIR = Path("/usr/share/postgresql/15/extension")

# --- helpers -----------------------------------------------------------------------


# --- two daemons on one database -------------------------------------------------------


def test_two_daemons_never_handle_an_event_a_tick_or_a_wakeup_twice(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    options = ("--event-batch", "10", "--cron-batch", "5", "--wakeup-batch", "5")
    with (
        daemon(dsn, *options, "--consumer", "first") as first,
        daemon(dsn, *options, "--consumer", "second") as second,
    ):
        for run in (first, second):

            def started(run: DaemonProcess = run) -> bool:
                return any("control plane started" in m for m in run.messages())

            wait_for(started, "both daemons to start")
        # The work appears while both are polling.
        make_assignment_backlog(db, "ev", tasks=300, agents=15)
        # 30 heavy routines (always_create: a second fire of a tick would be a
        # second task) and 10 lightweight ones, each with a tick due now.
        overdue = datetime.now(UTC) - timedelta(minutes=1)
        for i in range(10):
            db.execute("SELECT office.upsert_agent(%s, 'ws')", (f"rl-agent-{i}",))
        for i in range(40):
            heavy = i < 30
            db.execute(
                """SELECT office.create_routine('ws', %(name)s, %(template)s::jsonb, %(assignee)s,
                                                'always_create', id => %(name)s)""",
                {
                    "name": f"routine-{i}",
                    "template": json.dumps({"title": f"routine {i}"} if heavy else {}),
                    "assignee": "ev-agent-0" if heavy else f"rl-agent-{i - 30}",
                },
            )
            db.execute(
                "SELECT office.add_routine_trigger(%s, '0 0 1 1 *', 'UTC', %s, id => %s)",
                (f"routine-{i}", overdue, f"trigger-{i}"),
            )
        # 40 wakeup requests nobody dispatched, for 40 idle agents.
        for i in range(40):
            db.execute("SELECT office.upsert_agent(%s, 'ws')", (f"wk-agent-{i}",))
            db.execute("SELECT office.request_wakeup(%s, 'manual', 'ping')", (f"wk-agent-{i}",))

        wait_for(lambda: pending_events(db) == 0, "the outbox to drain")
        wait_for(
            lambda: scalar(
                db, "SELECT count(*) = 0 FROM office.routine_triggers WHERE next_run_at <= now()"
            ),
            "every tick to be claimed",
        )
        wait_for(
            lambda: scalar(
                db, "SELECT count(*) = 0 FROM office.wakeup_requests WHERE status = 'queued'"
            ),
            "every wakeup to be dispatched",
        )
        assert first.terminate() == 0, first.text()[-4000:]
        assert second.terminate() == 0, second.text()[-4000:]

    # Events: each claimed once, acknowledged, one run per assignment; both
    # daemons took their share.
    assert scalar(db, "SELECT count(*) FROM office.events WHERE deliveries <> 1") == 0
    consumers = dict(
        db.execute("SELECT claimed_by, count(*) FROM office.events GROUP BY 1").fetchall()
    )
    assert set(consumers) == {"first", "second"}, consumers
    assert assert_each_assignment_has_one_run(db, "ev") == 300
    # The only suppressed task_assigned enqueues: the event of each task a
    # heavy routine created (create_task queued its run first) - once each.
    assert assignment_dedups(db) == 30
    # Ticks: one routine run per trigger; one task per heavy routine; one
    # wakeup (keyed with the tick) per lightweight one.
    per_trigger = db.execute(
        "SELECT trigger_id, count(*) FROM office.routine_runs GROUP BY trigger_id"
    ).fetchall()
    assert sorted(per_trigger) == sorted((f"trigger-{i}", 1) for i in range(40))
    assert scalar(db, "SELECT count(*) FROM office.tasks WHERE title LIKE 'routine %'") == 30
    assert (
        scalar(
            db,
            """SELECT count(DISTINCT idempotency_key) FROM office.wakeup_requests
                WHERE idempotency_key LIKE 'routine:%:tick:%'""",
        )
        == 10
    )
    # Wakeups: each dispatched once, into a run of its own.
    rows = db.execute(
        "SELECT status, run_id FROM office.wakeup_requests WHERE agent_profile_id LIKE 'wk-%'"
    ).fetchall()
    assert {status for status, _ in rows} == {"claimed"}
    assert len({run_id for _, run_id in rows}) == 40
    assert scalar(db, "SELECT count(*) FROM office.runs WHERE agent_profile_id LIKE 'wk-%'") == 40


# --- SIGTERM -------------------------------------------------------------------------------


def test_sigterm_mid_batch_loses_nothing_and_exits_zero(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    make_assignment_backlog(db, "st", tasks=2000, agents=40)
    only_subscriber = [
        arg
        for loop in ("wakeups", "cron", "sweep", "recovery", "prune")
        for arg in ("--disable", loop)
    ]
    with daemon(dsn, "--event-batch", "100", *only_subscriber) as first:
        wait_for(
            lambda: scalar(db, "SELECT count(*) FROM office.events WHERE processed_at IS NOT NULL"),
            "the first acknowledged event",
        )
        assert first.terminate() == 0, first.text()[-4000:]
        messages = first.messages()
    assert any("SIGTERM received" in m for m in messages)
    # It stopped with work left, and holds nothing: every event it claimed is
    # acknowledged, the others were never claimed.
    assert pending_events(db) > 0
    assert (
        scalar(
            db,
            "SELECT count(*) FROM office.events WHERE processed_at IS NULL AND deliveries > 0",
        )
        == 0
    )
    with daemon(dsn, "--event-batch", "100", *only_subscriber) as second:
        wait_for(lambda: pending_events(db) == 0, "the rest of the outbox")
        assert second.terminate() == 0
    assert scalar(db, "SELECT count(*) FROM office.events WHERE deliveries <> 1") == 0
    assert assert_each_assignment_has_one_run(db, "st") == 2000
    assert assignment_dedups(db) == 0


# --- the database restarted under the daemon --------------------------------------------------


@pytest.fixture
def private_cluster() -> Iterator[harness.Cluster]:
    if not (harness.PG15_BIN / "pg_ctl").exists():
        pytest.skip("PostgreSQL 15 binaries are not installed")
    if not (PG15_EXTENSION_DIR / "office.control").exists():
        schema.install_extension_files(PG15_EXTENSION_DIR)
    with harness.throwaway_cluster(harness.PG15_BIN) as cluster:
        yield cluster


def test_database_restarted_under_the_daemon(private_cluster: harness.Cluster) -> None:
    cluster = private_cluster
    with psycopg.connect(cluster.url(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE office_restart")
    dsn = cluster.url("office_restart")
    with psycopg.connect(dsn, autocommit=True) as db:
        harness.create_office(db)
        make_assignment_backlog(db, "before", tasks=400, agents=20)

    with daemon(dsn, "--event-batch", "20", "--event-visibility", "2s") as run:
        with psycopg.connect(dsn, autocommit=True) as db:
            wait_for(
                lambda: scalar(
                    db, "SELECT count(*) FROM office.events WHERE processed_at IS NOT NULL"
                ),
                "the daemon to start on the backlog",
            )
        cluster.stop()  # mid-backlog: its connections are terminated
        # Back, but out of the daemon's reach (Unix socket only): more backlog.
        cluster.start(tcp=False)
        with psycopg.connect(cluster.socket_url("office_restart"), autocommit=True) as db:
            make_assignment_backlog(db, "during", tasks=300, agents=20)
        cluster.stop()
        wait_for(lambda: "database connection lost" in run.text(), "the loss to be logged")
        cluster.start()
        with psycopg.connect(dsn, autocommit=True) as db:
            wait_for(lambda: pending_events(db) == 0, "the backlog after the restart", timeout=90)
        wait_for(lambda: "database connection restored" in run.text(), "the return to be logged")
        assert run.terminate() == 0, run.text()[-4000:]

    with psycopg.connect(dsn, autocommit=True) as db:
        # Exactly once: one run per assignment, whichever delivery made it
        # (an event claimed when the server went away came back after its
        # visibility timeout, and its key made the second delivery a dedup).
        assert assert_each_assignment_has_one_run(db, "before") == 400
        assert assert_each_assignment_has_one_run(db, "during") == 300
        assert scalar(db, "SELECT count(*) FROM office.events WHERE processed_at IS NULL") == 0


# --- a killed worker ------------------------------------------------------------------------

WORKER = """
import json, sys
from controlplane.client import Office
with Office(sys.argv[1]) as office:
    run = office.claim_run("worker-A", sys.argv[2])
    print(json.dumps({"id": run.id, "attempt": run.attempt}), flush=True)
    sys.stdin.readline()  # "working" until told to report
    print(json.dumps({"finished": office.finish_run(run.id, run.attempt)}), flush=True)
"""


def test_a_dead_workers_claim_is_recovered_and_its_late_finish_refused(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    db.execute("SELECT office.upsert_agent('agent-k', 'ws')")
    db.execute(
        "SELECT office.enqueue_run('agent-k', 'task_comment',"
        " idempotency_key => 'task_comment:c1:agent-k')"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, dsn, "agent-k"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert worker.stdout is not None and worker.stdin is not None
        claim = json.loads(worker.stdout.readline())
        assert claim["attempt"] == 1
        # The worker stops answering mid-run: to the control plane it is dead.
        worker.send_signal(signal.SIGSTOP)
        with daemon(dsn, "--stale-after", "500ms") as run:
            wait_for(
                lambda: (
                    scalar(db, "SELECT status FROM office.runs WHERE id = %s", (claim["id"],))
                    == "queued"
                ),
                "the stale claim to be recovered",
            )
            assert run.terminate() == 0
            assert any("stale claimed runs" in m for m in run.messages())
        # Another worker claims it (attempt 2) and finishes it.
        with Office(dsn) as office:
            second = office.claim_run("worker-B", "agent-k")
            assert second is not None and second.id == claim["id"] and second.attempt == 2
            assert office.finish_run(second.id, second.attempt) is True
        # The first worker comes back and reports: refused (attempt 1 is stale).
        worker.send_signal(signal.SIGCONT)
        worker.stdin.write(b"go\n")
        worker.stdin.flush()
        assert json.loads(worker.stdout.readline()) == {"finished": False}
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGCONT)
            worker.kill()
            worker.wait()
    row = db.execute(
        "SELECT status, attempt, claimed_by FROM office.runs WHERE id = %s", (claim["id"],)
    ).fetchone()
    assert row == ("finished", 2, "worker-B")


# --- metrics ---------------------------------------------------------------------------------


def test_the_metrics_endpoint_serves_the_counters(db: psycopg.Connection[Any], dsn: str) -> None:
    make_assignment_backlog(db, "m", tasks=5, agents=2)
    with daemon(dsn, "--metrics-port", "0") as run:
        port = run.metrics_port()
        wait_for(lambda: pending_events(db) == 0, "the events")

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                return str(r.read().decode())

        def shows_the_work() -> str | None:
            text = scrape()
            wanted = (
                'office_events_handled_total{action="enqueued",topic="task.assigned"} 5.0',
                'office_runs{status="queued"} 5.0',
                "office_outbox_pending_events 0.0",
            )
            return text if all(w in text for w in wanted) else None

        text = wait_for(shows_the_work, "the counters to show the work")
        assert run.terminate() == 0
    for name in (
        # the loops
        'office_loop_seconds_bucket{le="0.005",loop="subscriber"}',
        'office_loop_seconds_count{loop="cron"}',
        'office_loop_seconds_count{loop="sweep"}',
        "office_loop_errors_total",
        "office_database_up 1.0",
        # the outbox lag and the other gauges
        "office_outbox_lag_seconds ",
        "office_outbox_pending_events ",
        'office_runs{status="queued"} 5.0',
        # the counters of the earlier issues, served from the start
        "# TYPE office_run_dedup_total counter",
        "# TYPE office_run_dedup_keyless_total counter",
        "# TYPE office_run_coalesced_total counter",
        "# TYPE office_parent_wake_candidates_total counter",
        "# TYPE office_parent_wake_emitted_total counter",
        "# TYPE office_parent_wake_assignee_unresolved_total counter",
        "# TYPE office_loop_routine_run_total counter",
        "# TYPE office_routine_ticks_total counter",
        "# TYPE office_runs_recovered_total counter",
        "# TYPE office_runs_pruned_total counter",
    ):
        assert name in text, name


def test_json_logs_are_one_object_a_line(db: psycopg.Connection[Any], dsn: str) -> None:
    with daemon(dsn) as run:
        wait_for(lambda: any("control plane started" in m for m in run.messages()), "the start")
        assert run.terminate() == 0
        records = run.logs()
    assert not [r for r in records if r.get("level") == "RAW"]
    started = next(r for r in records if r["message"].startswith("control plane started"))
    assert started["logger"] == "controlplane.daemon" and started["level"] == "INFO"
    assert started["loops"] == [
        "subscriber",
        "wakeups",
        "cron",
        "sweep",
        "recovery",
        "prune",
        "stats",
    ]
    assert records[-1]["message"] == "control plane stopped"


def test_run_refuses_a_database_without_office(empty_database: str) -> None:
    result = subprocess.run(
        [str(OFFICECTL), "--dsn", empty_database, "run"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert "office is not installed in this database" in result.stderr
    assert "Traceback" not in result.stderr


# --- the cron loop in process: catch-up after downtime, one winner per tick ----------------------


def _cron_loop(office: Office) -> CronLoop:
    metrics = daemon_metrics_for()
    return CronLoop(
        office,
        batch=100,
        interval=1.0,
        metrics=metrics,
        health=DatabaseHealth(metrics),
        stop=threading.Event(),
    )


def test_cron_catch_up_policies_after_downtime(db: psycopg.Connection[Any], dsn: str) -> None:
    """Down for ten minutes, a minutely trigger fires once on return: under
    enqueue_missed_with_cap the fire carries the missed ticks (at most the
    cap); under skip_missed it says nothing about them."""
    db.execute("SELECT office.upsert_agent('agent-c', 'ws')")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    for policy, cap in (("enqueue_missed_with_cap", 5), ("skip_missed", 25)):
        db.execute(
            """SELECT office.create_routine('ws', %(p)s, '{}', 'agent-c', 'always_create',
                                            id => %(p)s, catch_up_policy => %(p)s,
                                            catch_up_max => %(cap)s)""",
            {"p": policy, "cap": cap},
        )
        db.execute(
            "SELECT office.add_routine_trigger(%s, '* * * * *', 'UTC', %s, id => %s)",
            (policy, now - timedelta(minutes=10), f"t-{policy}"),
        )
    with Office(dsn) as office:
        loop = _cron_loop(office)
        assert loop.iterate() is False
        assert loop.iterate() is False  # nothing due any more: nothing fired again
        assert loop.fired == 2
    rows = dict(
        db.execute(
            """SELECT r.routine_id, w.payload FROM office.routine_runs r
                 JOIN office.wakeup_requests w ON w.id = r.wakeup_request_id"""
        ).fetchall()
    )
    capped = rows["enqueue_missed_with_cap"]
    assert capped["missed_ticks"] == 5 and capped["missed_truncated"] is True
    assert "missed_ticks" not in rows["skip_missed"]
    # Each trigger now waits for its next tick, in the future.
    assert scalar(db, "SELECT bool_and(next_run_at > now()) FROM office.routine_triggers")


def test_one_of_several_cron_loops_wins_each_tick(
    db: psycopg.Connection[Any], dsn: str, concurrently: Any
) -> None:
    db.execute("SELECT office.upsert_agent('agent-t', 'ws')")
    overdue = datetime.now(UTC) - timedelta(minutes=1)
    for i in range(20):
        db.execute(
            "SELECT office.create_routine('ws', %s, '{}', 'agent-t', 'always_create', id => %s)",
            (f"r{i}", f"r{i}"),
        )
        db.execute(
            "SELECT office.add_routine_trigger(%s, '0 0 1 1 *', 'UTC', %s, id => %s)",
            (f"r{i}", overdue, f"t{i}"),
        )
    offices = [Office(dsn) for _ in range(4)]
    try:
        loops = [_cron_loop(office) for office in offices]
        outcomes = concurrently([lambda _conn, loop=loop: loop.iterate() for loop in loops])
        assert [o.error for o in outcomes] == [None] * 4
        assert sum(loop.fired for loop in loops) == 20
    finally:
        for office in offices:
            office.close()
    assert scalar(db, "SELECT count(*) FROM office.routine_runs") == 20
    assert scalar(db, "SELECT count(DISTINCT idempotency_key) FROM office.wakeup_requests") == 20


def test_fire_routine_tick_keeps_the_claim_when_the_dispatch_fails(
    db: psycopg.Connection[Any],
) -> None:
    """A routine that cannot fire (an unfilled placeholder) spends its tick:
    the cron loop does not spin on it."""
    db.execute("SELECT office.upsert_agent('agent-f', 'ws')")
    db.execute(
        """SELECT office.create_routine('ws', 'broken', '{"title": "for {{who}}"}', 'agent-f',
                                        variables => '{"who": {}}', id => 'broken')"""
    )
    tick = datetime.now(UTC) - timedelta(minutes=1)
    db.execute(
        "SELECT office.add_routine_trigger('broken', '0 0 1 1 *', 'UTC', %s, id => 'tb')", (tick,)
    )
    row = db.execute(
        "SELECT claimed, routine_run_id, error_sqlstate, error_message"
        " FROM office.fire_routine_tick('tb', %s, %s)",
        (tick, tick + timedelta(days=365)),
    ).fetchone()
    assert row is not None
    claimed, run_id, sqlstate, message = row
    assert claimed is True and run_id is None and sqlstate == "22023" and "who" in message
    assert scalar(db, "SELECT next_run_at > now() FROM office.routine_triggers WHERE id = 'tb'")
    # A second look at the old tick loses: it is spent.
    assert (
        scalar(
            db,
            "SELECT claimed FROM office.fire_routine_tick('tb', %s, %s)",
            (tick, tick + timedelta(days=1)),
        )
        is False
    )


def test_fire_routine_tick_refuses_bad_arguments_before_claiming(
    db: psycopg.Connection[Any],
) -> None:
    """A bad argument is 22023 and never spends the tick."""
    db.execute("SELECT office.upsert_agent('agent-f', 'ws')")
    db.execute(
        "SELECT office.create_routine('ws', 'r', id => 'r', assignee_agent_profile_id => 'agent-f')"
    )
    tick = datetime.now(UTC) - timedelta(minutes=1)
    db.execute(
        "SELECT office.add_routine_trigger('r', '* * * * *', 'UTC', %s, id => 'tr')", (tick,)
    )
    later = tick + timedelta(minutes=1)
    for args, named in [
        ((tick, later, None, "4713-01-01 BC"), "missed_since"),
        ((tick, later, -1, None), "missed_ticks"),
        ((tick, "infinity", None, None), "following_next_run_at"),
        (("4713-01-01 BC", later, None, None), "observed_next_run_at"),
    ]:
        with pytest.raises(psycopg.Error, match=named) as caught:
            db.execute(
                "SELECT * FROM office.fire_routine_tick('tr', %s, %s, missed_ticks => %s,"
                " missed_since => %s)",
                args,
            )
        assert caught.value.sqlstate == "22023"
    assert scalar(
        db, "SELECT next_run_at = %s FROM office.routine_triggers WHERE id = 'tr'", (tick,)
    )
    assert scalar(db, "SELECT count(*) FROM office.routine_runs") == 0
    for at in ("4713-01-01 BC", "infinity", None):
        with pytest.raises(psycopg.Error) as caught:
            db.execute("SELECT * FROM office.due_routine_triggers(%s)", (at,))
        assert caught.value.sqlstate == "22023"


def test_dispatch_queued_wakeups_waits_for_paused_agents_and_fails_missing_ones(
    db: psycopg.Connection[Any],
) -> None:
    db.execute("SELECT office.upsert_agent('agent-on', 'ws')")
    db.execute("SELECT office.upsert_agent('agent-paused', 'ws', status => 'paused')")
    db.execute("SELECT office.request_wakeup('agent-on', 'manual', 'ping')")
    db.execute("SELECT office.request_wakeup('agent-paused', 'manual', 'ping')")
    db.execute(
        "INSERT INTO office.wakeup_requests (agent_profile_id, source)"
        " VALUES ('agent-gone', 'manual')"
    )
    rows = db.execute(
        "SELECT agent_profile_id, status FROM office.dispatch_queued_wakeups() ORDER BY 1"
    ).fetchall()
    assert rows == [("agent-gone", "failed"), ("agent-on", "claimed")]
    assert db.execute("SELECT * FROM office.dispatch_queued_wakeups()").fetchall() == []
    db.execute("SELECT office.set_agent_status('agent-paused', 'idle')")
    rows = db.execute(
        "SELECT agent_profile_id, status FROM office.dispatch_queued_wakeups()"
    ).fetchall()
    assert rows == [("agent-paused", "claimed")]


def test_daemon_config_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="unknown loop 'nope'"):
        DaemonConfig(dsn="x", disabled=frozenset({"nope"}))
    with pytest.raises(ValueError, match="event_batch must be at least 1"):
        DaemonConfig(dsn="x", event_batch=0)


def test_stats_reads_the_governance_gauges(db: psycopg.Connection[Any], dsn: str) -> None:
    """Runs held by hold, wake decisions by kind and spend against a budget,
    read from the database as the stats loop reads its other gauges."""
    registry = CollectorRegistry()
    metrics = daemon_metrics_for(registry)
    db.execute("SELECT office.upsert_agent('agent-h', 'ws')")
    db.execute("SELECT office.set_wake_policy('agent', 'agent-h', budget => 4)")
    db.execute("SELECT office.enqueue_run('agent-h', 'first')")
    claimed = db.execute("SELECT id, attempt FROM office.claim_run('w')").fetchone()
    assert claimed is not None
    db.execute("SELECT office.record_run_cost(%s, %s, 5)", claimed)
    db.execute("SELECT office.enqueue_run('agent-h', 'second')")
    with Office(dsn, registry=registry) as office:
        loop = StatsLoop(
            office,
            interval=1.0,
            metrics=metrics,
            health=DatabaseHealth(metrics),
            stop=threading.Event(),
        )
        assert loop.iterate() is False

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("office_runs_held", held_by="budget") == 1
    assert value("office_runs_held", held_by="cooldown") == 0
    assert value("office_wake_decisions", decision="budget_exhausted") == 1
    assert value("office_wake_decisions", decision="budget_warning") == 1
    assert value("office_budget_spend_ratio", scope="agent", scope_id="agent-h") == 1.25
