"""Poison never stops a loop (docs/api.md Conventions), against real PostgreSQL
and a real daemon (``officectl run`` in a subprocess, as in test_daemon.py).

For each loop: the worst value the API still accepts, and rows the owner
wrote straight into the tables that the loop cannot process, next to healthy
work. The daemon does the healthy work (waited for by bounded polling, never
a timed assertion), sets each poison row aside in ``office.poison``, logs it
once at ERROR with its id, counts it once (``office_poison_total{loop}`` and
``office.daemon_stats``), keeps doing new work, and ``officectl doctor`` lists
it. Prune has no poison row: its test throws the worst rows at it and checks
that it deletes what it should and never fails.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from controlplane import doctor
from controlplane.client import Office
from controlplane.event_subscriber import EventSubscriber
from tests.harness import scalar, wait_for
from tests.scenarios.daemon import DaemonProcess, daemon

#: The loops a test does not exercise, disabled so that each test sees its own.
OTHERS = ("subscriber", "wakeups", "cron", "sweep", "recovery", "prune")

#: 200 characters, the longest id the API takes.
LONG = "x" * 200

#: A text the run queue's btree indexes cannot hold (3,200 bytes that do not
#: compress): what only a hand-written row can carry.
UNINDEXABLE = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 100) g)"

#: A JSON document nested deeper than Python's decoder goes.
DEEP_JSON = "repeat('[', 3000) || repeat(']', 3000)"


@contextmanager
def stored_before_the_bounds(db: psycopg.Connection[Any]) -> Iterator[None]:
    """Rows the tables' bound triggers (05_validation.sql) now refuse, written
    as 0.4.0 stored them: an upgraded database still holds such rows, and the
    loops must keep treating them as poison."""
    with db.transaction():
        db.execute("SET LOCAL session_replication_role = replica")
        yield


def only(loop: str) -> list[str]:
    return [arg for other in OTHERS if other != loop for arg in ("--disable", other)]


@contextmanager
def poisoned_daemon(dsn: str, loop: str, *options: str) -> Iterator[tuple[DaemonProcess, int]]:
    with daemon(dsn, "--metrics-port", "0", *only(loop), *options) as run:
        yield run, run.metrics_port()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def sample(text: str, name: str, loop: str) -> float:
    match = re.search(rf'^{name}{{loop="{loop}"}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def poison_logs(run: DaemonProcess, loop: str) -> list[dict[str, Any]]:
    return [r for r in run.logs() if r.get("event") == "poison" and r.get("loop") == loop]


def assert_set_aside_once(
    db: psycopg.Connection[Any],
    run: DaemonProcess,
    port: int,
    loop: str,
    ids: set[str],
    more_work: Callable[[], Callable[[], Any]],
) -> None:
    """Each of ``ids`` is set aside, logged once at ERROR with its id and
    counted once, while the loop goes on with ``more_work`` (which returns
    the condition of that work being done), and doctor lists them."""
    wait_for(
        lambda: {r["row_id"] for r in poison_logs(run, loop)} >= ids,
        f"the {loop} loop to report {sorted(ids)}",
    )
    # New work after the poison: the loop is alive and not stuck on it.
    wait_for(more_work(), f"the {loop} loop to do new work after the poison")

    def gauge_shows_them() -> str | None:
        text = scrape(port)
        return text if sample(text, "office_poison_rows", loop) == len(ids) else None

    text = wait_for(gauge_shows_them, "the poison gauge")
    records = poison_logs(run, loop)
    assert sorted(r["row_id"] for r in records) == sorted(ids), records
    assert {r["level"] for r in records} == {"ERROR"}
    assert all(r["row_id"] in r["message"] for r in records)
    assert sample(text, "office_poison_total", loop) == len(ids)
    assert run.proc.poll() is None, run.text()[-4000:]
    assert run.terminate() == 0, run.text()[-4000:]

    stats = db.execute("SELECT poison_rows, poison_by_loop FROM office.daemon_stats()").fetchone()
    assert stats is not None and stats[0] == len(ids) and stats[1][loop] == len(ids)
    stored = {r[0] for r in db.execute("SELECT row_id FROM office.poison WHERE loop = %s", (loop,))}
    assert stored == ids
    assert scalar(db, "SELECT bool_and(reported_at IS NOT NULL) FROM office.poison")
    findings = [f for f in doctor.run_checks(db) if f.check == "poison"]
    assert all(f.status is doctor.Status.WARNING for f in findings)
    for row_id in ids:
        assert any(row_id in f.detail and "release_poison" in f.fix for f in findings), findings


# --- subscriber ------------------------------------------------------------------------------


def assign_by_update(db: psycopg.Connection[Any], task: str, agent: str) -> None:
    """A task.assigned event and no run: the subscriber is the only producer."""
    db.execute("SELECT office.create_task('ws', id => %s)", (task,))
    db.execute(
        "UPDATE office.tasks SET assignee_agent_profile_id = %s WHERE id = %s", (agent, task)
    )


def assigned_runs(db: psycopg.Connection[Any], task: str) -> int:
    return int(
        scalar(
            db,
            "SELECT count(*) FROM office.runs WHERE task_id = %s AND reason = 'task_assigned'",
            (task,),
        )
    )


def test_subscriber_sets_aside_what_it_cannot_decode(db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("SELECT office.upsert_agent('agent-s', 'ws')")
    db.execute("SELECT office.upsert_agent(%s, 'ws')", (LONG,))
    # Written by hand, first in the outbox: a payload too deep for Python's
    # JSON decoder (the 0.3.0 reproducer: RecursionError, the batch never
    # acknowledged) and a creation time Python cannot represent.
    with stored_before_the_bounds(db):
        deep = scalar(
            db,
            f"""INSERT INTO office.events (topic, task_id, payload)
                VALUES ('task.assigned', 'nowhere',
                        jsonb_build_object('task_id', 'nowhere', 'actor', ({DEEP_JSON})::jsonb))
                RETURNING id""",
        )
    ancient = scalar(
        db,
        """INSERT INTO office.events (topic, task_id, created_at)
           VALUES ('task.moved', 'nowhere', '4713-01-01 BC') RETURNING id""",
    )
    # The worst the API takes: ids of 200 characters.
    task = "t" * 200
    assign_by_update(db, task, LONG)
    assign_by_update(db, "healthy-1", "agent-s")

    def more_work() -> Callable[[], Any]:
        assign_by_update(db, "healthy-2", "agent-s")
        return lambda: assigned_runs(db, "healthy-2") == 1

    with poisoned_daemon(dsn, "subscriber", "--event-batch", "2") as (run, port):
        wait_for(lambda: assigned_runs(db, "healthy-1") == 1, "the healthy event")
        wait_for(lambda: assigned_runs(db, task) == 1, "the event with the longest ids")
        assert_set_aside_once(db, run, port, "subscriber", {str(deep), str(ancient)}, more_work)
    # Set aside, not acknowledged: nothing else is pending, and the lag is 0.
    stats = db.execute("SELECT pending_events, outbox_lag_seconds FROM office.daemon_stats()")
    assert stats.fetchone() == (0, 0.0)
    assert scalar(db, "SELECT count(*) FROM office.events WHERE processed_at IS NULL") == 2


def test_a_handler_failing_every_time_is_set_aside(db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("SELECT office.upsert_agent('agent-h', 'ws')")
    assign_by_update(db, "T", "agent-h")
    with Office(dsn) as office:
        check_give_up(db, EventSubscriber(office, visibility=0, give_up_after=2))


def check_give_up(db: psycopg.Connection[Any], subscriber: EventSubscriber) -> None:

    def broken(event: Any) -> Any:
        raise RuntimeError(f"cannot handle {event.id}")

    subscriber.handlers["task.assigned"] = broken
    first = subscriber.run_once()
    assert first.set_aside == [] and first.acked == 0
    second = subscriber.run_once()
    [event_id] = second.set_aside
    assert second.acked == 0
    reason = scalar(db, "SELECT reason FROM office.poison WHERE row_id = %s", (str(event_id),))
    assert reason.startswith("handler failed 2 times: RuntimeError: cannot handle")
    # Out of the way now: the next batch does not see it.
    assert subscriber.run_once().claimed == 0
    # Released, it is claimed again.
    assert scalar(db, "SELECT office.release_poison('subscriber', %s)", (str(event_id),))
    assert subscriber.run_once().claimed == 1


# --- wakeups -------------------------------------------------------------------------------


def test_wakeups_sets_aside_a_request_that_fails_every_dispatch(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    db.execute("SELECT office.upsert_agent('agent-w', 'ws')")
    db.execute("SELECT office.upsert_agent('agent-p', 'ws')")
    # Six requests written by hand, older than everything: a reason the run
    # queue cannot index (54000 on every dispatch). Without setting them
    # aside they would fill every batch of five, first in line, forever.
    with stored_before_the_bounds(db):
        poison = {
            r[0]
            for r in db.execute(
                f"""INSERT INTO office.wakeup_requests
                           (id, agent_profile_id, source, reason, requested_at)
                    SELECT 'poison-' || n, 'agent-p', 'manual', {UNINDEXABLE},
                           now() - interval '1 day'
                      FROM generate_series(1, 6) n
                    RETURNING id"""
            )
        }
    # The worst the API takes: the longest agent id and reason it accepts,
    # a payload of almost 1 MiB.
    db.execute("SELECT office.upsert_agent(%s, 'ws')", (LONG,))
    worst = scalar(
        db,
        """SELECT (office.request_wakeup(%s, 'manual', %s,
                   jsonb_build_object('blob', repeat('b', 1000000)))).wakeup_request_id""",
        (LONG, "r" * 200),
    )
    healthy = scalar(
        db, "SELECT (office.request_wakeup('agent-w', 'manual', 'ping')).wakeup_request_id"
    )

    def status(request: str) -> str:
        return str(
            scalar(db, "SELECT status FROM office.wakeup_requests WHERE id = %s", (request,))
        )

    def more_work() -> Callable[[], Any]:
        db.execute("SELECT office.upsert_agent('agent-w2', 'ws')")
        later = scalar(
            db, "SELECT (office.request_wakeup('agent-w2', 'manual', 'ping')).wakeup_request_id"
        )
        return lambda: status(later) == "claimed"

    with poisoned_daemon(dsn, "wakeups", "--wakeup-batch", "5") as (run, port):
        wait_for(lambda: status(healthy) == "claimed", "the healthy request")
        wait_for(lambda: status(worst) == "claimed", "the request with the longest values")
        assert_set_aside_once(db, run, port, "wakeups", poison, more_work)
    # Still queued (nothing was decided about them), not counted as waiting.
    assert {status(p) for p in poison} == {"queued"}
    assert scalar(db, "SELECT queued_wakeups FROM office.daemon_stats()") == 0
    # Repaired and released, one is dispatched like any other.
    db.execute("UPDATE office.wakeup_requests SET reason = 'ping' WHERE id = 'poison-1'")
    assert scalar(db, "SELECT office.release_poison('wakeups', 'poison-1')")
    rows = db.execute("SELECT wakeup_request_id, status FROM office.dispatch_queued_wakeups()")
    assert rows.fetchall() == [("poison-1", "claimed")]


# --- cron --------------------------------------------------------------------------------


def routine(db: psycopg.Connection[Any], name: str) -> None:
    db.execute(
        "SELECT office.create_routine('ws', %s, '{}', 'agent-c', 'always_create', id => %s)",
        (name, name),
    )


def fired(db: psycopg.Connection[Any], trigger: str) -> int:
    return int(
        scalar(db, "SELECT count(*) FROM office.routine_runs WHERE trigger_id = %s", (trigger,))
    )


def test_cron_sets_aside_a_trigger_it_cannot_evaluate(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    db.execute("SELECT office.upsert_agent('agent-c', 'ws')")
    for name in ("healthy", "worst", "broken", "later"):
        routine(db, name)
    overdue = datetime.now(UTC) - timedelta(minutes=1)
    # Written by hand: a tick Python cannot represent (the 0.3.0 reproducer:
    # the scan itself failed, every iteration), a time zone and a cron
    # expression that cannot be evaluated.
    db.execute(
        """INSERT INTO office.routine_triggers
                  (id, routine_id, cron_expression, timezone, next_run_at)
           VALUES ('t-bc', 'broken', '* * * * *', 'UTC', '4713-01-01 BC'),
                  ('t-zone', 'broken', '* * * * *', 'Nowhere/Zone', %(due)s),
                  ('t-expr', 'broken', '99 * * * *', 'UTC', %(due)s)""",
        {"due": overdue},
    )
    # The worst the API takes: the earliest tick it accepts, 56 years of
    # minutely catch-up (capped), under the longest trigger id.
    db.execute(
        "SELECT office.add_routine_trigger('worst', '* * * * *', 'UTC',"
        " '1970-01-01 00:00:00+00', id => %s)",
        (LONG,),
    )
    db.execute(
        "SELECT office.add_routine_trigger('healthy', '0 0 1 1 *', 'UTC', %s, id => 't-ok')",
        (overdue,),
    )

    def more_work() -> Callable[[], Any]:
        db.execute(
            "SELECT office.add_routine_trigger('later', '0 0 1 1 *', 'UTC', %s, id => 't-later')",
            (overdue,),
        )
        return lambda: fired(db, "t-later") == 1

    with poisoned_daemon(dsn, "cron", "--cron-batch", "2") as (run, port):
        wait_for(lambda: fired(db, "t-ok") == 1, "the healthy trigger to fire")
        wait_for(lambda: fired(db, LONG) == 1, "the earliest tick to fire")
        assert_set_aside_once(db, run, port, "cron", {"t-bc", "t-zone", "t-expr"}, more_work)
    assert scalar(db, "SELECT due_triggers FROM office.daemon_stats()") == 0
    # Left as they were: nothing was claimed or re-armed for them.
    assert (
        scalar(
            db,
            "SELECT count(*) FROM office.routine_triggers"
            " WHERE id IN ('t-zone', 't-expr') AND next_run_at = %s",
            (overdue,),
        )
        == 2
    )


# --- sweep ----------------------------------------------------------------------------------


def wide_parent(db: psycopg.Connection[Any], parent: str, *, by_hand: bool) -> None:
    """A parent with 5,000 finished children of 200-character ids: their
    child set key makes the wake's payload more than 1 MiB, which the run
    queue refuses (22023), so its reconcile raises every time."""
    db.execute("SELECT office.create_task('ws', id => %s)", (parent,))
    child = "substr(%(parent)s || '-' || n || '-' || repeat('c', 200), 1, 200)"
    if by_hand:
        db.execute(
            f"""INSERT INTO office.tasks (id, workspace_id, parent_id, state)
                SELECT {child}, 'ws', %(parent)s, 'COMPLETED' FROM generate_series(1, 5000) n""",
            {"parent": parent},
        )
    else:
        db.execute(
            f"""SELECT office.create_task('ws', id => {child}, parent_id => %(parent)s,
                                          state => 'COMPLETED')
                  FROM generate_series(1, 5000) n""",
            {"parent": parent},
        )
    # Assigned after its wave finished: only the sweep can wake it.
    db.execute(
        "UPDATE office.tasks SET assignee_agent_profile_id = 'agent-sw' WHERE id = %s", (parent,)
    )


def stuck_parent(db: psycopg.Connection[Any], parent: str) -> None:
    db.execute("SELECT office.create_task('ws', id => %s)", (parent,))
    db.execute(
        "SELECT office.create_task('ws', id => %s, parent_id => %s, state => 'COMPLETED')",
        (f"{parent}-child", parent),
    )
    db.execute(
        "UPDATE office.tasks SET assignee_agent_profile_id = 'agent-sw' WHERE id = %s", (parent,)
    )


def woken(db: psycopg.Connection[Any], parent: str) -> bool:
    return bool(
        scalar(
            db,
            "SELECT count(*) FROM office.runs"
            " WHERE task_id = %s AND reason = 'task_children_completed'",
            (parent,),
        )
    )


def test_sweep_sets_aside_a_parent_whose_reconcile_raises(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    db.execute("SELECT office.upsert_agent('agent-sw', 'ws')")
    # Both sort before the healthy parent, and a sweep takes one parent: a
    # parent that raised every time would hold the only slot.
    wide_parent(db, "p-a-api", by_hand=False)
    wide_parent(db, "p-b-hand", by_hand=True)
    stuck_parent(db, "p-c-healthy")

    def more_work() -> Callable[[], Any]:
        stuck_parent(db, "p-d-later")
        return lambda: woken(db, "p-d-later")

    with poisoned_daemon(dsn, "sweep", "--sweep-batch", "1") as (run, port):
        wait_for(lambda: woken(db, "p-c-healthy"), "the healthy parent to be woken")
        assert_set_aside_once(db, run, port, "sweep", {"p-a-api", "p-b-hand"}, more_work)
    reason = scalar(db, "SELECT reason FROM office.poison WHERE row_id = 'p-a-api'")
    assert "more than 1 MiB" in reason
    # Its marks stay (released, it is looked at again); it is no longer listed.
    assert scalar(
        db, "SELECT count(*) FROM office.parent_wake_marks WHERE parent_task_id = 'p-a-api'"
    )
    assert db.execute("SELECT * FROM office.list_stuck_parents(10)").fetchall() == []


# --- recovery -------------------------------------------------------------------------------


def test_recovery_sets_aside_a_run_the_queue_cannot_take_back(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    for agent in ("agent-r", "agent-x", LONG):
        db.execute("SELECT office.upsert_agent(%s, 'ws')", (agent,))
    # Written by hand: a claimed run whose reason the queued-runs index cannot
    # hold, so requeueing it fails (54000) - in 0.3.0, for every stale run.
    db.execute(
        f"""INSERT INTO office.runs (id, agent_profile_id, reason, status, attempt, claimed_at)
            VALUES ('r-poison', 'agent-x', {UNINDEXABLE}, 'claimed', 1, now() - interval '1 day')"""
    )
    # The worst the API takes: the longest agent id, reason and task id.
    worst = scalar(
        db,
        "SELECT (office.enqueue_run(%s, %s, task_id => %s)).run_id",
        (LONG, "r" * 200, "t" * 200),
    )
    healthy = scalar(db, "SELECT (office.enqueue_run('agent-r', 'ping')).run_id")
    for agent in (LONG, "agent-r"):
        db.execute("SELECT office.claim_run('dead-worker', %s)", (agent,))

    def status(run_id: str) -> str:
        return str(scalar(db, "SELECT status FROM office.runs WHERE id = %s", (run_id,)))

    def more_work() -> Callable[[], Any]:
        db.execute("SELECT office.claim_run('dead-worker', 'agent-r')")
        return lambda: status(healthy) == "queued"

    with poisoned_daemon(dsn, "recovery", "--stale-after", "300ms") as (run, port):
        wait_for(lambda: status(healthy) == "queued", "the healthy stale claim")
        wait_for(lambda: status(worst) == "queued", "the claim with the longest values")
        assert_set_aside_once(db, run, port, "recovery", {"r-poison"}, more_work)
    assert status("r-poison") == "claimed"
    assert "index row size" in scalar(db, "SELECT reason FROM office.poison")


# --- prune ------------------------------------------------------------------------------------


def test_prune_has_no_poison_row(db: psycopg.Connection[Any], dsn: str) -> None:
    """Prune's DELETEs compare a status and a time, nothing points at runs or
    events, and their one trigger filters what it inserts: the worst rows the
    owner can write are deleted (or, never finished, kept) without a failure."""
    db.execute("SELECT office.upsert_agent('agent-q', 'ws')")
    with stored_before_the_bounds(db):
        db.execute(
            f"""INSERT INTO office.runs (id, agent_profile_id, reason, status, task_id, finished_at,
                                         payload)
                VALUES ('q-unindexable', 'agent-q', {UNINDEXABLE}, 'finished', NULL,
                        now() - interval '30 days', '{{}}'),
                       ('q-bc', 'agent-q', 'x', 'failed', NULL, '4713-01-01 BC', '{{}}'),
                       ('q-minus-infinity', 'agent-q', 'x', 'cancelled', NULL, '-infinity', '{{}}'),
                       ('q-infinity', 'agent-q', 'x', 'finished', NULL, 'infinity', '{{}}'),
                       ('q-no-time', 'agent-q', 'x', 'finished', NULL, NULL, '{{}}'),
                       ('q-orphan-wake', 'agent-q', 'task_children_completed', 'finished',
                        'no-task', now() - interval '30 days',
                        jsonb_build_object('deep', ({DEEP_JSON})::jsonb))"""
        )
        db.execute(
            f"""INSERT INTO office.events (topic, payload, processed_at, created_at)
                VALUES ('task.assigned', jsonb_build_object('deep', ({DEEP_JSON})::jsonb),
                        now() - interval '30 days', '4713-01-01 BC'),
                       ('task.moved', '{{}}', '-infinity', 'infinity')"""
        )
    gone = {"q-unindexable", "q-bc", "q-minus-infinity", "q-orphan-wake"}
    with daemon(dsn, "--metrics-port", "0", *only("prune"), "--prune-interval", "100ms",
                "--retention", "7d") as run:  # fmt: skip
        port = run.metrics_port()
        wait_for(
            lambda: (
                scalar(db, "SELECT count(*) FROM office.runs WHERE id = ANY(%s)", (list(gone),))
                == 0
                and scalar(db, "SELECT count(*) FROM office.events") == 0
            ),
            "the old rows to be pruned",
        )
        # A few more iterations, then: never an error, nothing set aside.
        wait_for(
            lambda: sample(scrape(port), "office_loop_seconds_count", "prune") >= 5,
            "more prune iterations",
        )
        text = scrape(port)
        assert sample(text, "office_loop_errors_total", "prune") == 0
        assert run.terminate() == 0
        assert not [r for r in run.logs() if r.get("level") == "ERROR"], run.text()[-4000:]
    kept = {r[0] for r in db.execute("SELECT id FROM office.runs")}
    assert kept == {"q-infinity", "q-no-time"}
    assert scalar(db, "SELECT count(*) FROM office.poison") == 0


# --- the functions ------------------------------------------------------------------------------


def test_set_aside_refuses_bad_arguments_and_skips_transient_failures(
    db: psycopg.Connection[Any],
) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="loop must be one of"):
        db.execute("SELECT office.set_aside('nope', '1', 'x')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="row_id must not be empty"):
        db.execute("SELECT office.set_aside('cron', '', 'x')")
    # A conflict with another transaction says nothing about the row.
    for sqlstate in ("40001", "40P01", "55P03", "53200"):
        assert scalar(db, "SELECT office.set_aside('cron', 't', 'x', %s)", (sqlstate,)) is False
    assert scalar(db, "SELECT office.set_aside('cron', 't', repeat('x', 5000), '22023')") is True
    assert scalar(db, "SELECT office.set_aside('cron', 't', 'again')") is False
    assert scalar(db, "SELECT length(reason) FROM office.poison") == 1000
    assert [r[0] for r in db.execute("SELECT row_id FROM office.take_poison_reports('cron')")] == [
        "t"
    ]
    assert db.execute("SELECT * FROM office.take_poison_reports('cron')").fetchall() == []
    assert scalar(db, "SELECT office.release_poison('cron', 't')") is True
    assert scalar(db, "SELECT office.release_poison('cron', 't')") is False


def test_doctor_names_the_sqlstate_of_a_set_aside_row_once(db: psycopg.Connection[Any]) -> None:
    """The loops store the one-line error, which already ends with its
    SQLSTATE; a reason without one gets it from the sqlstate column."""
    db.execute(
        "SELECT office.set_aside('cron', 't1', 'bad cron expression (SQLSTATE 22023)', '22023')"
    )
    db.execute("SELECT office.set_aside('sweep', 'P1', 'bad parent', '22023')")
    details = {
        f.detail.split(" set aside ")[1].split(" ")[0:3][-1]: f.detail
        for f in doctor.run_checks(db)
        if f.check == "poison"
    }
    assert len(details) == 2
    for detail in details.values():
        assert detail.count("(SQLSTATE 22023)") == 1, detail


def test_doctor_says_nothing_is_set_aside(db: psycopg.Connection[Any]) -> None:
    [finding] = [f for f in doctor.run_checks(db) if f.check == "poison"]
    assert finding.status is doctor.Status.OK
    assert json.loads(finding.model_dump_json())["detail"].startswith("no row set aside")


def test_stats_reads_its_gauges_whatever_the_times(db: psycopg.Connection[Any], dsn: str) -> None:
    """The oldest pending event and the oldest claim, written by hand
    outside Python's years, do not stop the stats loop."""
    db.execute("SELECT office.upsert_agent('agent-g', 'ws')")
    db.execute("INSERT INTO office.events (topic, created_at) VALUES ('task.moved', 'infinity')")
    db.execute(
        "INSERT INTO office.runs (agent_profile_id, reason, status, attempt, claimed_at)"
        " VALUES ('agent-g', 'x', 'claimed', 1, '4713-01-01 BC')"
    )
    with daemon(dsn, "--metrics-port", "0", *only("none")) as run:
        port = run.metrics_port()
        wait_for(lambda: "office_outbox_pending_events 1.0" in scrape(port), "the gauges")
        text = scrape(port)
        assert "office_outbox_lag_seconds -Inf" in text
        assert sample(text, "office_loop_errors_total", "stats") == 0
        assert run.terminate() == 0
