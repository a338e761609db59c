"""The scenarios both Python clients are held to against a real database:
outcomes, counters, logs, typed errors, fencing, bulk enqueue.

Every check is a *scenario* run with :class:`controlplane.client.Office`
(``tests/client/test_client_sync.py``) and with :class:`controlplane.aio.AsyncOffice`
through the blocking adapter :class:`Blocking` (``tests/client/test_client_async.py``),
so both clients are held to the same results.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane.aio import AsyncOffice
from controlplane.errors import (
    AgentNotAcceptingRuns,
    AgentNotFound,
    InvalidArgument,
    OfficeError,
    UniqueViolationError,
)
from controlplane.models import (
    Agent,
    AgentStatus,
    BudgetPeriod,
    BulkEnqueueItem,
    DedupKind,
    DedupQueue,
    EnqueueRequest,
    GovernanceHold,
    KeylessCause,
    PolicyScope,
    QueueOutcome,
    Run,
    RunExplanation,
    RunKey,
    RunKeyHow,
    RunStatus,
    WakePolicy,
)
from controlplane.observability import (
    DEDUP_LOGGER,
    MSG_DURABLE,
    MSG_KEYLESS,
    MSG_WINDOWED,
    RUNS_LOGGER,
)


@dataclass
class Env:
    """What a scenario gets: a client (sync, or the async one made blocking),
    its prometheus registry, a direct connection to the same database, and
    the log capture."""

    office: Any
    registry: CollectorRegistry
    db: psycopg.Connection[Any]
    caplog: pytest.LogCaptureFixture

    # counters ---------------------------------------------------------------

    def dedup(self, reason: str, kind: str, queue: str = "runs") -> float:
        labels = {"reason": reason, "kind": kind, "queue": queue}
        return self.registry.get_sample_value("office_run_dedup_total", labels) or 0.0

    def keyless(self, reason: str, cause: str) -> float:
        labels = {"reason": reason, "cause": cause}
        return self.registry.get_sample_value("office_run_dedup_keyless_total", labels) or 0.0

    def coalesced(self, reason: str) -> float:
        labels = {"reason": reason}
        return self.registry.get_sample_value("office_run_coalesced_total", labels) or 0.0

    # logs -------------------------------------------------------------------

    def dedup_records(self, level: int = logging.INFO) -> list[logging.LogRecord]:
        return [r for r in self.caplog.records if r.name == DEDUP_LOGGER and r.levelno >= level]

    def assert_no_error_logs(self) -> None:
        errors = [r for r in self.caplog.records if r.levelno >= logging.ERROR]
        assert errors == [], [r.getMessage() for r in errors]

    # database ---------------------------------------------------------------

    def runs(self) -> list[dict[str, Any]]:
        cur = self.db.cursor(row_factory=psycopg.rows.dict_row)
        return cur.execute("SELECT * FROM office.runs ORDER BY requested_at, id").fetchall()

    def scalar(self, sql: str, *params: Any) -> Any:
        row = self.db.execute(sql, params).fetchone()
        return None if row is None else row[0]


Scenario = Callable[[Env], None]
SCENARIOS: list[Scenario] = []


def scenario(func: Scenario) -> Scenario:
    SCENARIOS.append(func)
    return func


def agent(env: Env, agent_id: str = "a1", status: str = "idle") -> Agent:
    created: Agent = env.office.upsert_agent(agent_id, "w1", f"agent {agent_id}", status)
    return created


# --- outcomes, counters, logs --------------------------------------------------


@scenario
def queued(env: Env) -> None:
    agent(env)
    env.caplog.set_level(logging.DEBUG, logger="controlplane")
    result = env.office.enqueue_run(
        "a1", "task_comment", {"comment_id": "c9"}, "task_comment:c9:a1"
    )
    assert result.outcome is QueueOutcome.QUEUED
    assert result.dedup_kind is None
    assert result.created
    [row] = env.runs()
    assert row["id"] == result.run_id
    assert row["payload"] == {"comment_id": "c9", "agent_profile_id": "a1"}
    [record] = [r for r in env.caplog.records if r.name == RUNS_LOGGER]
    assert (record.levelno, record.getMessage()) == (logging.INFO, "run queued")
    assert (record.id, record.agent, record.reason) == (result.run_id, "a1", "task_comment")  # type: ignore[attr-defined]
    assert env.dedup_records(logging.DEBUG) == []
    assert env.dedup("task_comment", "windowed") == 0
    assert env.coalesced("task_comment") == 0


@scenario
def windowed_dedup(env: Env) -> None:
    agent(env)
    first = env.office.enqueue_run("a1", "task_assigned", idempotency_key="task_assigned:t1:a1:1")
    env.caplog.clear()
    second = env.office.enqueue_run("a1", "task_assigned", idempotency_key="task_assigned:t1:a1:1")
    assert (second.outcome, second.dedup_kind) == (QueueOutcome.DEDUPED, DedupKind.WINDOWED)
    assert second.run_id == first.run_id
    assert not second.created
    assert len(env.runs()) == 1
    assert env.dedup("task_assigned", "windowed") == 1
    assert env.dedup("task_assigned", "durable") == 0
    [record] = env.dedup_records()
    assert record.levelno == logging.INFO
    assert record.getMessage() == MSG_WINDOWED == "run deduplicated (windowed)"
    assert (record.queue, record.reason, record.key) == (  # type: ignore[attr-defined]
        "runs",
        "task_assigned",
        "task_assigned:t1:a1:1",
    )
    assert (
        env.scalar(
            "SELECT total FROM office.dedup_stats"
            " WHERE reason = 'task_assigned' AND kind = 'windowed'"
        )
        == 1
    )
    env.assert_no_error_logs()


@scenario
def durable_dedup(env: Env) -> None:
    agent(env)
    first = env.office.enqueue_run("a1", "task_children_completed", idempotency_key="wake:p1")
    # A late redelivery: the holder was requested before the 24 h window.
    env.db.execute("UPDATE office.runs SET requested_at = now() - interval '25 hours'")
    env.caplog.clear()
    second = env.office.enqueue_run("a1", "task_children_completed", idempotency_key="wake:p1")
    assert (second.outcome, second.dedup_kind) == (QueueOutcome.DEDUPED, DedupKind.DURABLE)
    assert second.run_id == first.run_id
    assert len(env.runs()) == 1
    assert env.dedup("task_children_completed", "durable") == 1
    assert env.dedup("task_children_completed", "windowed") == 0
    [record] = env.dedup_records()
    assert record.levelno == logging.WARNING
    assert record.getMessage() == MSG_DURABLE == "run deduplicated (durable index)"
    assert (record.queue, record.reason, record.key, record.agent_profile_id) == (  # type: ignore[attr-defined]
        "runs",
        "task_children_completed",
        "wake:p1",
        "a1",
    )
    env.assert_no_error_logs()


@scenario
def coalesced(env: Env) -> None:
    agent(env)
    env.caplog.set_level(logging.DEBUG, logger="controlplane")
    first = env.office.enqueue_run("a1", "task_unblocked", {"n": 1})
    env.caplog.clear()
    second = env.office.enqueue_run("a1", "task_unblocked", {"n": 2})
    assert (second.outcome, second.dedup_kind) == (QueueOutcome.COALESCED, None)
    assert second.run_id == first.run_id
    assert not second.created
    [row] = env.runs()
    assert row["coalesced_count"] == 2
    assert row["payload"] == {"n": 2, "agent_profile_id": "a1"}
    assert env.coalesced("task_unblocked") == 1
    assert env.dedup("task_unblocked", "windowed") == 0
    assert env.dedup("task_unblocked", "durable") == 0
    # Debug only: no INFO/WARNING dedup record for a coalesce.
    assert env.dedup_records(logging.INFO) == []
    [record] = env.dedup_records(logging.DEBUG)
    assert (record.levelno, record.getMessage()) == (logging.DEBUG, "run coalesced")
    env.assert_no_error_logs()


@scenario
def entry_triggered_neither_merges_nor_is_merged(env: Env) -> None:
    agent(env)
    ordinary = env.office.enqueue_run("a1", "stage_pending", task_id="t1")
    entry = env.office.enqueue_run("a1", "stage_pending", task_id="t1", entry_triggered=True)
    later = env.office.enqueue_run("a1", "stage_pending", task_id="t1")
    assert entry.outcome is QueueOutcome.QUEUED
    assert (later.outcome, later.run_id) == (QueueOutcome.COALESCED, ordinary.run_id)
    assert [r["entry_triggered"] for r in env.runs()] == [False, True]


@scenario
def keyless_unresolved_is_counted_and_logged(env: Env) -> None:
    agent(env)
    result = env.office.enqueue_run(
        "a1",
        "task_assigned",
        task_id="t1",
        keyless_cause=KeylessCause.UNRESOLVED,
        keyless_detail="nil_mutation_generation",
    )
    assert result.outcome is QueueOutcome.QUEUED
    assert env.keyless("task_assigned", "unresolved") == 1
    [record] = env.dedup_records()
    assert record.levelno == logging.INFO
    assert record.getMessage() == MSG_KEYLESS == "run enqueued with no dedup key"
    assert (record.reason, record.cause, record.detail) == (  # type: ignore[attr-defined]
        "task_assigned",
        "unresolved",
        "nil_mutation_generation",
    )
    assert (
        env.scalar(
            "SELECT total FROM office.keyless_stats WHERE reason = 'task_assigned'"
            " AND cause = 'unresolved'"
        )
        == 1
    )
    env.assert_no_error_logs()


@scenario
def keyless_by_design_is_counted_not_logged(env: Env) -> None:
    agent(env)
    env.caplog.set_level(logging.DEBUG, logger=DEDUP_LOGGER)
    env.office.enqueue_run("a1", "task_reopened", keyless_cause="by_design")
    second = env.office.enqueue_run("a1", "task_reopened", keyless_cause="by_design")
    # Counted whatever the outcome (the second one coalesced).
    assert second.outcome is QueueOutcome.COALESCED
    assert env.keyless("task_reopened", "by_design") == 2
    assert [r for r in env.dedup_records(logging.DEBUG) if r.getMessage() == MSG_KEYLESS] == []
    # An empty cause means "no cause", as in SQL: nothing counted.
    env.office.enqueue_run("a1", "task_reopened", keyless_cause="")
    assert env.keyless("task_reopened", "by_design") == 2
    assert (
        env.scalar("SELECT sum(total) FROM office.keyless_stats WHERE reason = 'task_reopened'")
        == 2
    )


@scenario
def report_keyless_at_the_decision_site(env: Env) -> None:
    env.office.report_keyless("task_assigned", "unresolved", "event_missing_generation")
    env.office.report_keyless("task_unblocked", KeylessCause.BY_DESIGN)
    assert env.keyless("task_assigned", "unresolved") == 1
    assert env.keyless("task_unblocked", "by_design") == 1
    [record] = env.dedup_records()
    assert record.detail == "event_missing_generation"  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgument, match="sometimes"):
        env.office.report_keyless("task_assigned", "sometimes")


@scenario
def a_keyless_cause_with_a_key_counts_nothing(env: Env) -> None:
    agent(env)
    with pytest.raises(InvalidArgument) as info:
        env.office.enqueue_run(
            "a1", "task_assigned", idempotency_key="k", keyless_cause="unresolved"
        )
    assert (
        info.value.message == "keyless_cause 'unresolved' given together with idempotency_key 'k'"
    )
    assert env.keyless("task_assigned", "unresolved") == 0
    assert env.runs() == []


# --- typed errors, server message kept -----------------------------------------

BAD_ENQUEUES: list[tuple[dict[str, Any], type[OfficeError], str]] = [
    ({"agent_profile_id": ""}, InvalidArgument, "agent_profile_id must not be empty"),
    ({"reason": ""}, InvalidArgument, "reason must not be empty (agent 'a1')"),
    ({"payload": [1, 2]}, InvalidArgument, "payload must be a JSON object, not array"),
    (
        {"idempotency_key": "k" * 513},
        InvalidArgument,
        f"idempotency_key '{'k' * 40}'... is 513 characters, more than 512",
    ),
    (
        {"keyless_cause": "maybe"},
        InvalidArgument,
        "unknown keyless_cause 'maybe' (expected unresolved or by_design)",
    ),
    ({"agent_profile_id": "nobody"}, AgentNotFound, "agent 'nobody' not found"),
    (
        {"agent_profile_id": "p1"},
        AgentNotAcceptingRuns,
        "agent 'p1' is paused and does not accept runs",
    ),
]


@scenario
def each_sqlstate_is_its_typed_error(env: Env) -> None:
    agent(env)
    agent(env, "p1", "paused")
    for overrides, error, message in BAD_ENQUEUES:
        args: dict[str, Any] = {"agent_profile_id": "a1", "reason": "task_assigned", **overrides}
        with pytest.raises(error) as info:
            env.office.enqueue_run(**args)
        assert info.value.message == message
        assert info.value.sqlstate == error.sqlstate
        assert str(info.value) == f"{message} (SQLSTATE {error.sqlstate})"
        assert isinstance(info.value.__cause__, Exception)  # the driver's error, kept
    with pytest.raises(InvalidArgument, match="unknown agent status 'asleep'"):
        env.office.set_agent_status("a1", "asleep")
    with pytest.raises(AgentNotAcceptingRuns):
        env.office.enqueue_runs([{"agent_profile_id": "p1", "reason": "x"}])
    assert env.runs() == []


@scenario
def a_payload_over_one_mib_is_refused(env: Env) -> None:
    agent(env)
    with pytest.raises(InvalidArgument, match="more than 1 MiB"):
        env.office.enqueue_run("a1", "task_assigned", {"blob": "x" * (1 << 20)})
    assert env.runs() == []


# --- raw statements: unique violations -----------------------------------------

RAW_INSERT = (
    "INSERT INTO office.runs (id, agent_profile_id, reason, idempotency_key)"
    " VALUES (%(id)s, %(agent)s, %(reason)s, %(key)s) RETURNING id"
)


@scenario
def raw_insert_on_the_key_index_is_an_outcome(env: Env) -> None:
    agent(env)
    inserted = env.office.execute(
        RAW_INSERT,
        {"id": "r1", "agent": "a1", "reason": "task_comment", "key": "task_comment:c1:a1"},
    )
    assert (inserted.rows, inserted.rowcount, inserted.dedup) == ([{"id": "r1"}], 1, None)
    env.caplog.clear()
    again = env.office.execute(
        RAW_INSERT,
        {"id": "r2", "agent": "a1", "reason": "task_comment", "key": "task_comment:c1:a1"},
    )
    assert again.deduped and again.dedup is not None
    assert (again.rows, again.rowcount) == ([], 0)
    hit = again.dedup
    assert (hit.outcome, hit.dedup_kind) == (QueueOutcome.DEDUPED, DedupKind.DURABLE)
    assert (hit.queue, hit.constraint, hit.key) == (
        DedupQueue.RUNS,
        "idx_run_idempotency",
        "task_comment:c1:a1",
    )
    assert (hit.holder_id, hit.reason, hit.agent_profile_id) == ("r1", "task_comment", "a1")
    assert hit.as_enqueue_result().run_id == "r1"
    assert env.dedup("task_comment", "durable") == 1
    [record] = env.dedup_records()
    assert (record.levelno, record.getMessage()) == (logging.WARNING, MSG_DURABLE)
    assert record.agent_profile_id == "a1"  # type: ignore[attr-defined]
    assert [r["id"] for r in env.runs()] == ["r1"]
    env.assert_no_error_logs()


@scenario
def raw_primary_key_collision_is_a_typed_error(env: Env) -> None:
    agent(env)
    env.office.execute(RAW_INSERT, {"id": "r1", "agent": "a1", "reason": "x", "key": None})
    with pytest.raises(UniqueViolationError) as info:
        env.office.execute(RAW_INSERT, {"id": "r1", "agent": "a1", "reason": "x", "key": "fresh"})
    assert info.value.constraint_name == "runs_pkey"
    assert info.value.sqlstate == "23505"
    assert info.value.message == 'duplicate key value violates unique constraint "runs_pkey"'
    assert env.dedup("x", "durable") == 0
    assert env.dedup_records() == []


@scenario
def raw_statements_return_rows(env: Env) -> None:
    agent(env)
    env.office.enqueue_run("a1", "r", {"k": [1, 2]})
    result = env.office.execute("SELECT payload, status FROM office.runs")
    assert result.rows == [{"payload": {"k": [1, 2], "agent_profile_id": "a1"}, "status": "queued"}]
    assert result.rowcount == 1
    updated = env.office.execute(
        "UPDATE office.runs SET reason = %(reason)s WHERE reason LIKE 'r%%'", {"reason": "s"}
    )
    assert (updated.rows, updated.rowcount) == ([], 1)


# --- claims and fencing ---------------------------------------------------------


@scenario
def claim_recover_reclaim_and_a_stale_finish(env: Env) -> None:
    agent(env)
    queued = env.office.enqueue_run("a1", "task_assigned", idempotency_key="k1")
    claimed = env.office.claim_run("w1")
    assert isinstance(claimed, Run)
    assert (claimed.id, claimed.status, claimed.attempt, claimed.claimed_by) == (
        queued.run_id,
        RunStatus.CLAIMED,
        1,
        "w1",
    )
    assert claimed.payload == {"agent_profile_id": "a1"}
    assert env.office.claim_run("w2") is None  # one claimed run per agent
    assert env.office.recover_stale_runs(timedelta(0)) == 1
    reclaimed = env.office.claim_run("w2", "a1")
    assert reclaimed is not None and (reclaimed.id, reclaimed.attempt) == (queued.run_id, 2)
    assert env.office.finish_run(claimed.id, claimed.attempt) is False  # stale worker
    assert env.office.fail_run(claimed.id, claimed.attempt, "late") is False
    assert env.office.retry_run(claimed.id, claimed.attempt, 0) is False
    assert env.scalar("SELECT status FROM office.runs") == "claimed"
    assert env.office.finish_run(reclaimed.id, reclaimed.attempt) is True
    assert env.scalar("SELECT status FROM office.runs") == "finished"
    assert env.office.finish_run(reclaimed.id, reclaimed.attempt) is False


@scenario
def fail_retry_cancel_prune(env: Env) -> None:
    agent(env)
    agent(env, "a2")
    one = env.office.enqueue_run("a1", "r", idempotency_key="one")
    two = env.office.enqueue_run("a2", "r", idempotency_key="two")
    run = env.office.claim_run(agent_profile_id="a1")
    assert run is not None and run.id == one.run_id
    assert env.office.retry_run(run.id, run.attempt, timedelta(hours=1)) is True
    assert env.office.claim_run(agent_profile_id="a1") is None  # not due yet
    env.db.execute("UPDATE office.runs SET scheduled_retry_at = now() WHERE id = %s", [run.id])
    again = env.office.claim_run(agent_profile_id="a1")
    assert again is not None and (again.attempt, again.retry_count) == (2, 1)
    assert env.office.fail_run(again.id, again.attempt, "boom") is True
    assert env.office.cancel_run(again.id, "too late") is False  # terminal
    assert env.office.cancel_run(two.run_id, "not needed") is True
    with pytest.raises(InvalidArgument, match="older_than must be a non-negative interval"):
        env.office.prune_runs(timedelta(seconds=-1))
    assert env.office.prune_runs(timedelta(0)) == 2
    assert env.runs() == []
    # Their keys are free again.
    assert env.office.enqueue_run("a1", "r", idempotency_key="one").outcome is QueueOutcome.QUEUED


@scenario
def requeue_and_bulk_cancel(env: Env) -> None:
    """requeue_run, requeue_runs, cancel_runs (since 0.5.0)."""
    agent(env)
    agent(env, "a2")
    one = env.office.enqueue_run("a1", "r", idempotency_key="one")
    two = env.office.enqueue_run("a2", "r", idempotency_key="two")
    run = env.office.claim_run(agent_profile_id="a1")
    assert run is not None and run.id == one.run_id
    assert env.office.fail_run(run.id, run.attempt, "boom") is True
    assert env.office.requeue_run(run.id) is True
    assert env.office.requeue_run(run.id) is False  # queued already
    again = env.office.claim_run(agent_profile_id="a1")
    assert again is not None and again.id == run.id and again.attempt == 2
    assert again.error_message == "boom"
    assert env.office.cancel_runs([run.id, two.run_id, "unknown"], "ops") == 2
    assert env.office.cancel_runs([], "ops") == 0
    assert env.office.requeue_runs((two.run_id, run.id)) == 2
    assert env.office.enqueue_run("a2", "r", idempotency_key="two").run_id == two.run_id
    with pytest.raises(InvalidArgument, match="run_ids has 10001 elements"):
        env.office.requeue_runs([f"x{i}" for i in range(10_001)])


@scenario
def heartbeats_renew_the_lease_and_are_fenced(env: Env) -> None:
    agent(env)
    assert env.office.has_leases() is True
    env.office.enqueue_run("a1", "task_comment", idempotency_key="task_comment:c1:a1")
    claimed = env.office.claim_run("w1")
    assert claimed is not None and claimed.heartbeat_at == claimed.claimed_at
    # Claimed an hour ago and silent since: stale by either clock.
    env.db.execute(
        "UPDATE office.runs SET claimed_at = claimed_at - interval '1 hour',"
        " heartbeat_at = heartbeat_at - interval '1 hour'"
    )
    assert env.office.heartbeat_run(claimed.id, claimed.attempt) is True
    renewed = env.office.get_run(claimed.id)
    assert renewed is not None and renewed.heartbeat_at is not None
    assert renewed.claimed_at is not None and renewed.heartbeat_at > renewed.claimed_at
    # The heartbeat, not the claim time, is what recovery reads.
    assert env.office.recover_stale_runs(timedelta(minutes=30)) == 0
    assert env.office.heartbeat_run(claimed.id, claimed.attempt + 1) is False
    assert env.office.heartbeat_run("no-such-run", 1) is False
    assert env.office.finish_run(claimed.id, claimed.attempt) is True
    assert env.office.heartbeat_run(claimed.id, claimed.attempt) is False  # settled
    env.assert_no_error_logs()


@scenario
def outcome_calls_are_fenced_by_the_worker_too(env: Env) -> None:
    agent(env)
    env.office.enqueue_run("a1", "job")
    claimed = env.office.claim_run("w1")
    assert claimed is not None
    # Another worker that read the attempt (get_run shows it) is refused.
    assert env.office.heartbeat_run(claimed.id, claimed.attempt, worker_id="w2") is False
    assert env.office.finish_run(claimed.id, claimed.attempt, worker_id="w2") is False
    assert env.office.retry_run(claimed.id, claimed.attempt, 0, worker_id="w2") is False
    assert env.office.fail_run(claimed.id, claimed.attempt, "x", worker_id="w2") is False
    assert env.office.heartbeat_run(claimed.id, claimed.attempt, worker_id="w1") is True
    # retryable: back to the queue with a back-off, the error kept.
    assert env.office.fail_run(claimed.id, claimed.attempt, "flaky", retryable=True, worker_id="w1")
    again = env.office.get_run(claimed.id)
    assert again is not None and (again.status, again.retry_count) == ("queued", 1)
    assert again.error_message == "flaky" and again.scheduled_retry_at is not None
    env.assert_no_error_logs()


@scenario
def a_recovered_run_fences_its_lost_worker(env: Env) -> None:
    agent(env)
    env.office.enqueue_run("a1", "task_comment", idempotency_key="task_comment:c1:a1")
    lost = env.office.claim_run("w1")
    assert lost is not None
    env.db.execute("UPDATE office.runs SET heartbeat_at = heartbeat_at - interval '1 hour'")
    assert env.office.recover_stale_runs(timedelta(minutes=30)) == 1
    assert env.office.heartbeat_run(lost.id, lost.attempt) is False  # queued again
    second = env.office.claim_run("w2")
    assert second is not None and (second.id, second.attempt) == (lost.id, lost.attempt + 1)
    assert env.office.heartbeat_run(lost.id, lost.attempt) is False  # re-claimed
    assert env.office.finish_run(lost.id, lost.attempt) is False
    assert env.office.heartbeat_run(second.id, second.attempt) is True


@scenario
def get_run_by_id(env: Env) -> None:
    agent(env)
    assert env.office.get_run("no-such-run") is None
    queued = env.office.enqueue_run("a1", "task_assigned", {"n": 1}, "task_assigned:t1:a1:1", "t1")
    assert queued.run_id is not None
    run = env.office.get_run(queued.run_id)
    assert isinstance(run, Run)
    assert (run.id, run.status, run.attempt, run.task_id, run.idempotency_key) == (
        queued.run_id,
        RunStatus.QUEUED,
        0,
        "t1",
        "task_assigned:t1:a1:1",
    )
    assert run.payload == {"n": 1, "task_id": "t1", "agent_profile_id": "a1"}
    assert (run.claimed_at, run.heartbeat_at) == (None, None)
    claimed = env.office.claim_run("w1")
    assert env.office.get_run(queued.run_id) == claimed


@scenario
def run_keys_lists_own_and_coalesced_keys(env: Env) -> None:
    agent(env)
    first = env.office.enqueue_run("a1", "task_assigned", {}, "task_assigned:t1:a1:1", "t1")
    second = env.office.enqueue_run("a1", "task_assigned", {}, "task_assigned:t1:a1:3", "t1")
    assert (second.outcome, second.run_id) == (QueueOutcome.COALESCED, first.run_id)
    assert first.run_id is not None
    run = env.office.get_run(first.run_id)
    assert run is not None
    served = env.office.run_keys(first.run_id)
    assert all(isinstance(key, RunKey) for key in served)
    assert [(k.idempotency_key, k.how) for k in served] == [
        ("task_assigned:t1:a1:1", RunKeyHow.OWN),
        ("task_assigned:t1:a1:3", RunKeyHow.COALESCED),
    ]
    assert served[0].recorded_at == run.requested_at
    assert served[1].recorded_at >= served[0].recorded_at
    # The remembered key outlives the queue: its redelivery after the run
    # finished is a dedup onto it, not a second run.
    claimed = env.office.claim_run("w1")
    assert claimed is not None and env.office.finish_run(claimed.id, claimed.attempt)
    again = env.office.enqueue_run("a1", "task_assigned", {}, "task_assigned:t1:a1:3", "t1")
    assert (again.outcome, again.run_id) == (QueueOutcome.DEDUPED, first.run_id)
    assert len(env.runs()) == 1
    keyless = env.office.enqueue_run("a1", "other")
    assert keyless.run_id is not None and env.office.run_keys(keyless.run_id) == []
    assert env.office.run_keys("no-such-run") == []


# --- bulk -------------------------------------------------------------------------


@scenario
def enqueue_runs_one_outcome_per_element_in_order(env: Env) -> None:
    agent(env)
    env.caplog.clear()
    items = env.office.enqueue_runs(
        [
            EnqueueRequest(
                agent_profile_id="a1", reason="task_comment", idempotency_key="task_comment:c1:a1"
            ),
            {
                "agent_profile_id": "a1",
                "reason": "task_comment",
                "idempotency_key": "task_comment:c1:a1",
            },
            {"agent_profile_id": "a1", "reason": "heartbeat", "keyless_cause": "by_design"},
            {"agent_profile_id": "a1", "reason": "heartbeat", "payload": {"beat": 2}},
            {"agent_profile_id": "a1", "reason": "heartbeat", "entry_triggered": True},
        ]
    )
    assert all(isinstance(item, BulkEnqueueItem) for item in items)
    assert [(i.ordinality, i.outcome, i.dedup_kind) for i in items] == [
        (1, QueueOutcome.QUEUED, None),
        (2, QueueOutcome.DEDUPED, DedupKind.WINDOWED),
        (3, QueueOutcome.QUEUED, None),
        (4, QueueOutcome.COALESCED, None),
        (5, QueueOutcome.QUEUED, None),
    ]
    assert items[1].run_id == items[0].run_id
    assert items[3].run_id == items[2].run_id
    assert env.dedup("task_comment", "windowed") == 1
    assert env.coalesced("heartbeat") == 1
    assert env.keyless("heartbeat", "by_design") == 1
    assert [r.getMessage() for r in env.dedup_records()] == [MSG_WINDOWED]
    assert env.office.enqueue_runs([]) == []


@scenario
def enqueue_runs_fails_whole_on_a_bad_element(env: Env) -> None:
    agent(env)
    with pytest.raises(InvalidArgument) as info:
        env.office.enqueue_runs(
            [
                {"agent_profile_id": "a1", "reason": "r"},
                {"agent_profile_id": "a1", "reason": ""},
            ]
        )
    assert info.value.message == "enqueue_runs element 2: reason must not be empty (agent 'a1')"
    # Refused before the call: a field the API does not have, a wrong type.
    with pytest.raises(InvalidArgument, match=r"^enqueue_runs element 2: colour: Extra inputs"):
        env.office.enqueue_runs(
            [
                {"agent_profile_id": "a1", "reason": "r"},
                {"agent_profile_id": "a1", "reason": "r", "colour": 1},
            ]
        )
    with pytest.raises(InvalidArgument, match="agent_profile_id: Input should be a valid string"):
        env.office.enqueue_run(None, "r")
    assert env.runs() == []
    assert env.coalesced("r") == 0


# --- agents ---------------------------------------------------------------------


@scenario
def agents(env: Env) -> None:
    created = env.office.upsert_agent("a1", "w1", "Ada")
    assert (created.id, created.workspace_id, created.name, created.status) == (
        "a1",
        "w1",
        "Ada",
        AgentStatus.IDLE,
    )
    assert created.accepts_runs
    paused = env.office.set_agent_status("a1", "paused")
    assert paused.status is AgentStatus.PAUSED and not paused.accepts_runs
    renamed = env.office.upsert_agent("a1", "w1", "Ada L.", "idle")
    assert (renamed.name, renamed.status, renamed.created_at) == (
        "Ada L.",
        "idle",
        created.created_at,
    )
    with pytest.raises(AgentNotFound):
        env.office.set_agent_status("nobody", "idle")
    with pytest.raises(InvalidArgument):
        env.office.upsert_agent("a:1", "w1")


# --- the dashboard's reads ----------------------------------------------------------


@scenario
def dashboard_reads_page_and_type_their_rows(env: Env) -> None:
    agent(env, "a1")
    agent(env, "a2")
    env.office.create_task("w1", id="p1", title="parent")
    env.office.create_task("w1", id="c1", title="child", parent_id="p1")
    first = env.office.enqueue_run("a1", "task_assigned", idempotency_key="d1")
    second = env.office.enqueue_run("a2", "task_assigned", idempotency_key="d2")
    # Newest first, one row a page: the next page starts before the last id.
    (page,) = env.office.list_runs(page_size=1)
    assert page.id == second.run_id
    (older,) = env.office.list_runs(before_id=page.id, page_size=1)
    assert older.id == first.run_id
    assert env.office.list_runs(before_id=older.id) == []
    assert [r.id for r in env.office.list_runs(agent_profile_id="a1")] == [first.run_id]
    # Fewer runs than a window: it reaches the oldest run.
    assert env.office.run_window_end() is None
    queues = env.office.list_agents()
    assert [(a.id, a.queued, a.queued_text) for a in queues] == [("a1", 1, "1"), ("a2", 1, "1")]
    assert [t.id for t in env.office.list_task_children("p1")] == ["c1"]
    assert env.office.get_parent_receipt("p1") is None
    assert env.office.get_routine("nothing") is None
    env.assert_no_error_logs()


# --- an older schema that lets the unique violation through -----------------------

# enqueue_run and enqueue_runs as a schema without the durable classification
# would have them: a plain INSERT, so a repeated key reaches the client as a
# unique violation on idx_run_idempotency.
NAIVE_FUNCTIONS = """
ALTER EXTENSION office DROP FUNCTION office.enqueue_run(text, text, jsonb, text, text,
    boolean, text, text, text, text, int, timestamptz);
DROP FUNCTION office.enqueue_run(text, text, jsonb, text, text,
    boolean, text, text, text, text, int, timestamptz);
CREATE OR REPLACE FUNCTION office.enqueue_run(agent_profile_id text, reason text,
        payload jsonb DEFAULT '{}', idempotency_key text DEFAULT NULL, task_id text DEFAULT NULL,
        entry_triggered boolean DEFAULT false, keyless_cause text DEFAULT NULL,
        keyless_detail text DEFAULT NULL)
    RETURNS office.enqueue_result LANGUAGE plpgsql AS $$
DECLARE
    v_id text;
BEGIN
    IF NOT EXISTS (SELECT FROM office.agent_profiles a WHERE a.id = $1) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01', MESSAGE = format('agent %s not found', $1);
    END IF;
    INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id)
    VALUES ($1, $2, $3, $4, $5)
    RETURNING id INTO v_id;
    RETURN ROW('queued'::text, NULL::text, v_id)::office.enqueue_result;
END
$$;
CREATE OR REPLACE FUNCTION office.enqueue_runs(requests jsonb)
    RETURNS TABLE (ordinality int, outcome text, dedup_kind text, run_id text)
    LANGUAGE plpgsql AS $$
DECLARE
    e jsonb;
    n int := 0;
    r office.enqueue_result;
BEGIN
    FOR e IN SELECT value FROM jsonb_array_elements(requests) LOOP
        n := n + 1;
        r := office.enqueue_run(e ->> 'agent_profile_id', e ->> 'reason', '{}',
                                e ->> 'idempotency_key');
        ordinality := n; outcome := r.outcome; dedup_kind := r.dedup_kind; run_id := r.run_id;
        RETURN NEXT;
    END LOOP;
END
$$;
"""


@scenario
def an_older_schemas_unique_violation_is_an_outcome(env: Env) -> None:
    agent(env)
    env.db.execute(NAIVE_FUNCTIONS)
    first = env.office.enqueue_run("a1", "task_assigned", idempotency_key="k1")
    assert first.outcome is QueueOutcome.QUEUED
    env.caplog.clear()
    second = env.office.enqueue_run("a1", "task_assigned", idempotency_key="k1")
    assert (second.outcome, second.dedup_kind, second.run_id) == (
        QueueOutcome.DEDUPED,
        DedupKind.DURABLE,
        first.run_id,
    )
    assert env.dedup("task_assigned", "durable") == 1
    assert [(r.levelno, r.getMessage()) for r in env.dedup_records()] == [
        (logging.WARNING, MSG_DURABLE)
    ]
    # The bulk path: the whole call fails on element 2, the client replays it
    # element by element (one transaction, a savepoint each).
    items = env.office.enqueue_runs(
        [
            {"agent_profile_id": "a1", "reason": "task_assigned", "idempotency_key": "k2"},
            {"agent_profile_id": "a1", "reason": "task_assigned", "idempotency_key": "k1"},
            {"agent_profile_id": "a1", "reason": "task_assigned", "idempotency_key": "k2"},
        ]
    )
    assert [(i.ordinality, i.outcome, i.dedup_kind) for i in items] == [
        (1, QueueOutcome.QUEUED, None),
        (2, QueueOutcome.DEDUPED, DedupKind.DURABLE),
        (3, QueueOutcome.DEDUPED, DedupKind.DURABLE),
    ]
    assert items[1].run_id == first.run_id
    assert items[2].run_id == items[0].run_id
    assert sorted(r["idempotency_key"] for r in env.runs()) == ["k1", "k2"]
    assert env.dedup("task_assigned", "durable") == 3
    # Any other error still rolls the whole replay back.
    with pytest.raises(AgentNotFound) as info:
        env.office.enqueue_runs(
            [
                {"agent_profile_id": "a1", "reason": "task_assigned", "idempotency_key": "k3"},
                {"agent_profile_id": "a1", "reason": "task_assigned", "idempotency_key": "k1"},
                {"agent_profile_id": "nobody", "reason": "x", "idempotency_key": "k4"},
            ]
        )
    assert info.value.message == "element 3: agent nobody not found"
    assert sorted(r["idempotency_key"] for r in env.runs()) == ["k1", "k2"]
    env.assert_no_error_logs()


# --- wake policies and spend (docs/api.md §9) ------------------------------------


@scenario
def wake_policy_set_replace_clear(env: Env) -> None:
    agent(env)
    policy = env.office.set_wake_policy(
        "agent",
        "a1",
        cooldown=timedelta(minutes=1),
        max_runs=3,
        per=3600,
        budget=12.5,
        budget_period=BudgetPeriod.WEEK,
        max_retries=2,
        retry_backoff=[10, timedelta(minutes=5)],
    )
    assert isinstance(policy, WakePolicy)
    assert (policy.scope, policy.scope_id) == (PolicyScope.AGENT, "a1")
    assert (policy.max_runs, policy.per) == (3, timedelta(hours=1))
    assert (policy.budget, policy.budget_period) == (Decimal("12.5"), BudgetPeriod.WEEK)
    assert policy.retry_backoff == [timedelta(seconds=10), timedelta(minutes=5)]
    replaced = env.office.set_wake_policy(PolicyScope.WORKSPACE, "w1", max_retries=0)
    assert (replaced.budget, replaced.budget_period, replaced.max_retries) == (
        None,
        BudgetPeriod.MONTH,
        0,
    )
    with pytest.raises(InvalidArgument) as info:
        env.office.set_wake_policy("agent", "a1", max_runs=3)
    assert "max_runs and per" in info.value.message
    with pytest.raises(AgentNotFound):
        env.office.set_wake_policy("agent", "nobody", max_retries=1)
    assert env.office.clear_wake_policy("agent", "a1") is True
    assert env.office.clear_wake_policy("agent", "a1") is False
    assert env.scalar("SELECT count(*) FROM office.wake_policies") == 1
    env.assert_no_error_logs()


@scenario
def run_cost_recorded(env: Env) -> None:
    agent(env)
    env.office.set_wake_policy("agent", "a1", budget=Decimal("1"))
    env.office.enqueue_run("a1", "work")
    claimed = env.office.claim_run("wk", "a1")
    assert claimed is not None
    assert env.office.record_run_cost(claimed.id, claimed.attempt, 0.1, worker_id="wk") is True
    assert env.office.record_run_cost(claimed.id, claimed.attempt, 1, worker_id="other") is False
    assert env.office.record_run_cost(claimed.id, claimed.attempt + 1, 1) is False
    with pytest.raises(InvalidArgument):
        env.office.record_run_cost(claimed.id, claimed.attempt, float("nan"))
    assert env.scalar("SELECT cost FROM office.runs WHERE id = %s", claimed.id) == Decimal("0.1")
    assert env.office.record_run_cost(claimed.id, claimed.attempt, Decimal("0.9"), "wk") is True
    # The budget is reached: the heartbeat stops the run and puts it back.
    assert env.office.heartbeat_run(claimed.id, claimed.attempt, worker_id="wk") is False
    assert env.scalar("SELECT status FROM office.runs WHERE id = %s", claimed.id) == "queued"
    assert (
        env.scalar("SELECT count(*) FROM office.wake_decisions WHERE decision = 'budget_exhausted'")
        == 1
    )
    env.assert_no_error_logs()


@scenario
def governed_enqueue_and_the_loop_guard(env: Env) -> None:
    agent(env)
    soon = datetime.now(UTC) + timedelta(hours=1)
    first = env.office.enqueue_run("a1", "work", origin="human", priority=7, not_before=soon)
    assert first.outcome is QueueOutcome.QUEUED and first.run_id is not None
    assert env.scalar("SELECT origin FROM office.runs WHERE id = %s", first.run_id) == "human"
    assert env.scalar("SELECT priority FROM office.runs WHERE id = %s", first.run_id) == 7
    delay = env.scalar("SELECT scheduled_retry_at FROM office.runs WHERE id = %s", first.run_id)
    assert delay == soon
    # A chain of agent-caused wakes, each caused by the last, up to the
    # default office.max_chain_depth (20): the next one is guarded.
    cause = first.run_id
    for depth in range(1, 21):
        step = env.office.enqueue_run("a1", f"step{depth}", cause_run_id=cause)
        assert step.outcome is QueueOutcome.QUEUED and step.run_id is not None
        cause = step.run_id
    assert env.scalar("SELECT chain_depth FROM office.runs WHERE id = %s", cause) == 20
    guarded = env.office.enqueue_run("a1", "again", idempotency_key="k-guard", cause_run_id=cause)
    assert (guarded.outcome, guarded.run_id, guarded.dedup_kind) == (
        QueueOutcome.GUARDED,
        None,
        None,
    )
    assert env.scalar("SELECT count(*) FROM office.runs WHERE idempotency_key = 'k-guard'") == 0
    assert env.scalar("SELECT count(*) FROM office.wake_decisions WHERE decision = 'guarded'") == 1
    with pytest.raises(InvalidArgument):
        env.office.enqueue_run("a1", "work", priority=101)
    env.assert_no_error_logs()


@scenario
def explain_agent_and_governance_stats(env: Env) -> None:
    agent(env)
    assert env.office.explain_agent("a1") == []
    env.office.set_wake_policy("agent", "a1", budget=Decimal("0"))
    queued_run = env.office.enqueue_run("a1", "work")
    [row] = env.office.explain_agent("a1", max_rows=5)
    assert isinstance(row, RunExplanation)
    assert (row.run_id, row.status, row.claimable, row.held_by) == (
        queued_run.run_id,
        "queued",
        False,
        "budget",
    )
    assert row.until is not None and row.detail is not None
    assert env.office.claim_run("wk") is None
    assert env.office.governance_stats() == [
        GovernanceHold(agent_profile_id="a1", held_by="budget", runs=1)
    ]
    assert [p.scope_id for p in env.office.wake_policies()] == ["a1"]
    assert env.office.wake_policies("workspace") == []
    with pytest.raises(AgentNotFound):
        env.office.explain_agent("nobody")
    with pytest.raises(InvalidArgument):
        env.office.explain_agent("a1", max_rows=0)
    env.assert_no_error_logs()


def check_raw_session_state_does_not_outlive_the_call(office: Any) -> None:
    """``office`` has a pool of exactly one connection."""
    query = "SELECT pg_backend_pid() AS pid, current_setting('TimeZone') AS tz"
    before = office.execute(query)
    office.execute("SET TimeZone = 'Pacific/Chatham'")
    assert office.execute(query).rows == before.rows  # the same connection, reset
    # A transaction a raw statement opens ends with the call.
    office.execute("BEGIN")
    office.execute("SELECT pg_current_xact_id()")  # would stay assigned in an open transaction
    assert office.execute("SELECT pg_current_xact_id_if_assigned() AS xid").rows == [{"xid": None}]
    assert office.execute(query).rows == before.rows


class Blocking:
    """An :class:`AsyncOffice` whose coroutine methods run to completion on a
    private event loop, so the synchronous scenarios can drive it."""

    def __init__(self, office: AsyncOffice, loop: asyncio.AbstractEventLoop) -> None:
        self._office = office
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._office, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(attribute(*args, **kwargs))

        return call
