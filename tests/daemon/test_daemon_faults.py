"""One run per occurrence under faults: ``officectl run``
killed with SIGKILL mid-batch while producers reassign tasks inside the
coalesce window, restarted, drained; and a claim that outlives the recovery
threshold because its worker heartbeats, next to one whose worker went silent.

An *occurrence* is an assignment, keyed ``assignment_key(task, agent,
generation)``. ``assign_task`` enqueues its run at once (queued, or coalesced
into the agent's queued run of that task) and writes a ``task.assigned``
event; the subscriber turns the event into the same request again, and a
daemon killed before it acknowledged a batch delivers those events a second
time. Whatever the path, a key is served by one run: its own key, or one
remembered by a coalesce (``office.run_keys``). Without remembered keys a
coalesced occurrence's redelivery, landing after its target was claimed or
its window closed, is a second run (0.3.0: dozens per kill).

A worker claims and finishes runs all along, so coalesce targets leave the
queue as they do in production. Every wait is a bounded polling loop on a
condition; the daemon is stopped (SIGSTOP) at a moment it holds claimed,
unacknowledged events, then killed, and the test checks that the kill left
them behind.
"""

from __future__ import annotations

import random
import signal
import subprocess
import threading
from collections import defaultdict
from datetime import timedelta
from functools import partial
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry

from controlplane import keys
from controlplane.client import Office
from controlplane.models import ProducerOutcome
from tests.harness import scalar, wait_for
from tests.scenarios.daemon import daemon

AGENTS = [f"fa-{i}" for i in range(4)]
TASKS = [f"ft-{i}" for i in range(40)]
KILLS = 4
#: Shorter than a production visibility (30 s) so the redeliveries of a
#: killed daemon's batch come back within the test, yet longer than a claim
#: takes to be finished: most redeliveries find their target gone from the
#: queue, the case where a dedup that looked only at queued runs would make
#: a second run.
VISIBILITY = "2s"
SUBSCRIBER_ONLY = [
    arg for loop in ("wakeups", "cron", "sweep", "recovery", "prune") for arg in ("--disable", loop)
]


class Fleet:
    """Producers reassigning random tasks among a few agents (so A→B→A
    inside the coalesce window is common), and one worker draining runs,
    each on its own client, until :meth:`stop`."""

    def __init__(self, dsn: str, producers: int = 2) -> None:
        self.dsn = dsn
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        #: key → the run each producer call was answered with (queued: the
        #: new run; coalesced/deduped: the run that now serves the key).
        self.answered: dict[str, set[str]] = defaultdict(set)
        self.coalesced = 0
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._guard, args=(self._produce, seed), daemon=True)
            for seed in range(producers)
        ]
        self.threads.append(threading.Thread(target=self._guard, args=(self._work, 0), daemon=True))

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in self.threads)
        assert self.errors == [], self.errors

    def _guard(self, body: Any, seed: int) -> None:
        try:
            with Office(self.dsn, min_size=1, max_size=1, registry=CollectorRegistry()) as office:
                body(office, seed)
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)

    def _produce(self, office: Office, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stopping.is_set():
            task, agent = rng.choice(TASKS), rng.choice(AGENTS)
            result = office.assign_task(task, agent)
            key = keys.assignment_key(task, agent, result.assignment_generation)
            assert key is not None and result.run_id is not None, result
            with self.lock:
                self.answered[key].add(result.run_id)
                self.coalesced += result.outcome is ProducerOutcome.COALESCED
            self.stopping.wait(0.003)

    def _work(self, office: Office, seed: int) -> None:
        while not self.stopping.is_set():
            run = office.claim_run(f"fault-worker-{seed}")
            if run is None:
                self.stopping.wait(0.02)
                continue
            office.finish_run(run.id, run.attempt)


def in_flight(db: psycopg.Connection[Any], consumer: str) -> int:
    """Events the consumer claimed and has not acknowledged yet."""
    return int(
        scalar(
            db,
            """SELECT count(*) FROM office.events
                WHERE claimed_by = %s AND processed_at IS NULL AND visible_at > now()""",
            (consumer,),
        )
    )


def acked_by(db: psycopg.Connection[Any], consumer: str) -> int:
    return int(
        scalar(
            db,
            "SELECT count(*) FROM office.events WHERE claimed_by = %s AND processed_at IS NOT NULL",
            (consumer,),
        )
    )


def daemon_statements(db: psycopg.Connection[Any]) -> int:
    """Statements an ``officectl run`` of this database is running now."""
    return int(
        scalar(
            db,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'officectl run' AND state = 'active'",
        )
    )


def freeze_holding(
    db: psycopg.Connection[Any], proc: subprocess.Popen[bytes], consumer: str
) -> None:
    """Stop the daemon (SIGSTOP) at a moment it holds claimed, unacknowledged
    events: what a kill that follows leaves behind. Seeing it hold a batch
    and then killing it is not enough: it may acknowledge the batch in
    between (once the backlog is drained, it then holds nothing)."""
    for _ in range(20):
        wait_for(partial(in_flight, db, consumer), "the daemon to hold a batch")
        proc.send_signal(signal.SIGSTOP)
        # A statement sent before the stop still runs to its end (an
        # acknowledgement may commit): count once none is running.
        wait_for(lambda: daemon_statements(db) == 0, "the stopped daemon's statements to end")
        if in_flight(db, consumer) > 0:
            return
        proc.send_signal(signal.SIGCONT)
    raise AssertionError("the daemon never held a batch when stopped")


def serving(db: psycopg.Connection[Any], answered: dict[str, set[str]]) -> dict[str, set[str]]:
    """key → every run that serves it: its own key, a key recorded by a
    coalesce (``office.run_keys``, when the schema has it), and the run the
    producer was answered with."""
    served: dict[str, set[str]] = defaultdict(set)
    for key, run_ids in answered.items():
        served[key] |= run_ids
    rows = db.execute(
        "SELECT idempotency_key, id FROM office.runs"
        " WHERE reason = 'task_assigned' AND idempotency_key IS NOT NULL"
    ).fetchall()
    if scalar(db, "SELECT to_regproc('office.run_keys') IS NOT NULL"):
        rows += db.execute(
            """SELECT k.idempotency_key, r.id FROM office.runs r
                CROSS JOIN LATERAL office.run_keys(r.id) k
                WHERE r.reason = 'task_assigned'"""
        ).fetchall()
    for key, run_id in rows:
        served[key].add(run_id)
    return served


def occurrences(db: psycopg.Connection[Any]) -> set[str]:
    """Every assignment that should have woken its agent: each
    ``task.assigned`` event with an assignee (every agent accepts runs)."""
    rows = db.execute(
        """SELECT payload->>'task_id', payload->>'agent_profile_id',
                  (payload->>'assignment_generation')::bigint
             FROM office.events
            WHERE topic = 'task.assigned' AND payload->>'agent_profile_id' IS NOT NULL"""
    ).fetchall()
    found = {keys.assignment_key(task, agent, generation) for task, agent, generation in rows}
    return {key for key in found if key is not None}


def test_sigkill_mid_batch_while_producers_reassign_makes_no_second_run(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    for agent in AGENTS:
        db.execute("SELECT office.upsert_agent(%s, 'ws')", (agent,))
    for task in TASKS:
        db.execute(
            "SELECT office.create_task('ws', id => %s, workflow_step_id => 's',"
            " assignee_agent_profile_id => %s)",
            (task, AGENTS[0]),
        )
    fleet = Fleet(dsn)
    fleet.start()
    killed_holding = []
    try:
        for cycle in range(KILLS):
            consumer = f"killed-{cycle}"
            options = ("--consumer", consumer, "--event-visibility", VISIBILITY)
            # The producers ran while no daemon did: it starts on a backlog
            # (and on the redeliveries of the previous one, once visible).
            with daemon(dsn, *options, *SUBSCRIBER_ONLY, "--event-batch", "50") as run:
                wait_for(partial(acked_by, db, consumer), "the daemon's first batch")
                freeze_holding(db, run.proc, consumer)
                run.proc.send_signal(signal.SIGKILL)
                assert run.proc.wait(30) == -signal.SIGKILL
            killed_holding.append(in_flight(db, consumer))
    finally:
        fleet.stop()

    with daemon(
        dsn, "--consumer", "drain", "--event-visibility", VISIBILITY, *SUBSCRIBER_ONLY
    ) as run:
        wait_for(
            lambda: scalar(db, "SELECT count(*) = 0 FROM office.events WHERE processed_at IS NULL"),
            "the outbox to drain",
            timeout=120,
        )
        assert run.terminate() == 0, run.text()[-4000:]

    # Each kill left events claimed and unacknowledged (mid-batch), which
    # the next daemon delivered again.
    assert all(held > 0 for held in killed_holding), killed_holding
    assert scalar(db, "SELECT count(*) FROM office.events WHERE deliveries > 1") > 0
    # The producers did coalesce inside the window: the case under test.
    assert fleet.coalesced > 0

    expected = occurrences(db)
    assert set(fleet.answered) <= expected
    served = serving(db, fleet.answered)
    twice = sorted(key for key in expected if len(served[key]) > 1)
    never = sorted(key for key in expected if not served[key])
    assert (len(twice), len(never)) == (0, 0), (twice[:10], never[:10])
    # And no task_assigned run serves a key that is no occurrence.
    assert set(served) <= expected


# --- leases: a heart-beating claim is kept, a silent one recovered ---------------------------

RECOVERY_ONLY = [
    arg
    for loop in ("subscriber", "wakeups", "cron", "sweep", "prune", "stats")
    for arg in ("--disable", loop)
]
#: The daemon's threshold here, and how often the worker heartbeats: twenty
#: heartbeats to a threshold, so only a stall of the whole test process for
#: two seconds could make one late.
THRESHOLD = "2s"
BEAT = 0.1


def status(db: psycopg.Connection[Any], run_id: str) -> str:
    return str(scalar(db, "SELECT status FROM office.runs WHERE id = %s", (run_id,)))


def test_a_heartbeating_claim_outlives_the_threshold_and_a_silent_one_is_recovered(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    for agent in ("lease-a", "lease-b"):
        db.execute("SELECT office.upsert_agent(%s, 'ws')", (agent,))
        db.execute(
            "SELECT office.enqueue_run(%s, 'task_comment', idempotency_key => %s)",
            (agent, f"task_comment:c1:{agent}"),
        )
    stopping = threading.Event()
    beats: list[bool] = []

    def heartbeat(run_id: str, attempt: int) -> None:
        with Office(dsn, min_size=1, max_size=1, registry=CollectorRegistry()) as worker:
            while not stopping.is_set():
                beats.append(worker.heartbeat_run(run_id, attempt))
                stopping.wait(BEAT)

    with Office(dsn, registry=CollectorRegistry()) as office:
        kept = office.claim_run("worker-a", "lease-a")
        lost = office.claim_run("worker-b", "lease-b")  # never heart-beats
        assert kept is not None and lost is not None
        beating = threading.Thread(target=heartbeat, args=(kept.id, kept.attempt), daemon=True)
        beating.start()
        try:
            with daemon(dsn, "--stale-after", THRESHOLD, *RECOVERY_ONLY) as run:
                wait_for(lambda: status(db, lost.id) == "queued", "the silent claim's recovery")
                # Claimed well past the threshold, heart-beating all along
                # (or, were the lease broken, recovered: then stop waiting).
                wait_for(
                    lambda: scalar(
                        db,
                        "SELECT status <> 'claimed' OR now() - claimed_at > interval '6 seconds'"
                        " FROM office.runs WHERE id = %s",
                        (kept.id,),
                    ),
                    "the kept claim to be three thresholds old",
                )
                assert status(db, kept.id) == "claimed", "a heart-beating claim was recovered"
                assert office.recover_stale_runs(timedelta(seconds=4)) == 0
                assert status(db, kept.id) == "claimed"
                assert run.terminate() == 0, run.text()[-4000:]
        finally:
            stopping.set()
            beating.join(30)
        assert beats and all(beats), beats
        still = office.get_run(kept.id)
        assert still is not None
        assert (still.status, still.attempt, still.claimed_by) == ("claimed", 1, "worker-a")

        # The silent worker lost its run: another claims it, and the late
        # calls of the first are refused.
        second = office.claim_run("worker-c", "lease-b")
        assert second is not None and (second.id, second.attempt) == (lost.id, 2)
        assert office.heartbeat_run(lost.id, lost.attempt) is False
        assert office.finish_run(lost.id, lost.attempt) is False
        assert office.finish_run(second.id, second.attempt) is True

        # The first worker stopped heart-beating: now it is its run that goes.
        with daemon(dsn, "--stale-after", THRESHOLD, *RECOVERY_ONLY) as run:
            wait_for(lambda: status(db, kept.id) == "queued", "the stopped claim's recovery")
            assert run.terminate() == 0
        assert office.finish_run(kept.id, kept.attempt) is False
        assert office.heartbeat_run(kept.id, kept.attempt) is False
