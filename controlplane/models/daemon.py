"""Typed results of what the daemon's loops call (``sql/70_daemon.sql``): the
cron loop's scan and claim-and-fire, the wakeup loop's batch dispatch, the
rows set aside, and the numbers behind the gauges.

These are read by one daemon that must survive any row (docs/api.md Conventions:
nothing a caller stores can stop a loop), so they stay lenient where a row
written by hand could hold anything: statuses and policies are plain text
here and are checked where a single row can be set aside.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from controlplane.models.routines import DispatchRoutineResult, RoutineTrigger

__all__ = [
    "DaemonStats",
    "DedupStat",
    "DueTrigger",
    "PoisonReport",
    "QueueStat",
    "QueuedWakeupDispatch",
    "RoutineTickResult",
]


class DueTrigger(BaseModel):
    """One row of the cron loop's scan (``office.due_routine_triggers``) as
    the client reads it: ``at`` is the database's now() (one clock for every
    daemon); a time Python cannot represent comes as None, with its text in
    ``unrepresentable``, so only its own row is set aside."""

    model_config = ConfigDict(frozen=True)

    at: datetime
    trigger_id: str
    routine_id: str
    cron_expression: str | None = None
    timezone: str
    enabled: bool
    catch_up_policy: str
    catch_up_max: int
    next_run_at: datetime | None = None
    last_fired_at: datetime | None = None
    unrepresentable: str | None = None

    def trigger(self) -> RoutineTrigger:
        """The trigger this row describes, for :func:`controlplane.cron.plan_tick`."""
        return RoutineTrigger(
            id=self.trigger_id,
            routine_id=self.routine_id,
            cron_expression=self.cron_expression,
            timezone=self.timezone,
            next_run_at=self.next_run_at,
            last_fired_at=self.last_fired_at,
            enabled=self.enabled,
        )


class RoutineTickResult(BaseModel):
    """``office.routine_tick_result``: whether this call won the tick, then
    the dispatch of the fire (its columns are None when not claimed, and
    when the dispatch raised: ``error_message``/``error_sqlstate`` say what,
    and the claim stands - the tick is spent)."""

    model_config = ConfigDict(frozen=True)

    claimed: bool
    routine_run_id: str | None = None
    status: str | None = None
    linked_task_id: str | None = None
    coalesced_into_run_id: str | None = None
    wakeup_request_id: str | None = None
    wakeup_outcome: str | None = None
    run_id: str | None = None
    idempotency_key: str | None = None
    error_message: str | None = None
    workspace_id: str | None = None
    error_sqlstate: str | None = None

    @property
    def dispatch(self) -> DispatchRoutineResult | None:
        """The fire's dispatch, None when the tick was lost or the dispatch raised."""
        if not self.claimed or self.routine_run_id is None:
            return None
        return DispatchRoutineResult.model_validate(
            self.model_dump(exclude={"claimed", "error_sqlstate"})
        )


class QueuedWakeupDispatch(BaseModel):
    """One row of ``office.dispatch_queued_wakeups``: the request and what its
    dispatch did (``queued``: it raised and waits; ``set_aside``: poison)."""

    model_config = ConfigDict(frozen=True)

    wakeup_request_id: str
    agent_profile_id: str | None = None
    status: str
    run_id: str | None = None
    error_message: str | None = None


class PoisonReport(BaseModel):
    """One row of ``office.take_poison_reports``: a row set aside, handed to
    this daemon to log and count once."""

    model_config = ConfigDict(frozen=True)

    row_id: str
    reason: str
    sqlstate: str | None = None


class DaemonStats(BaseModel):
    """``office.daemon_stats()`` without the times of the oldest event and
    claim (a time written by hand outside Python's years would fail to load
    and stop the stats loop; an infinite lag comes as ``-Infinity``, which a
    float takes). A schema older than 0.4.0 has no poison columns."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pending_events: int
    outbox_lag_seconds: float | None = None
    queued_wakeups: int
    due_triggers: int
    claimed_runs: int = 0
    oldest_claim_age_seconds: float | None = None
    poison_rows: int | None = None
    poison_by_loop: dict[str, int] | None = None


class QueueStat(BaseModel):
    """A row of ``office.queue_stats``: runs by status."""

    model_config = ConfigDict(frozen=True)

    status: str
    runs: int


class DedupStat(BaseModel):
    """A row of ``office.dedup_stats``: the database's own dedup counters."""

    model_config = ConfigDict(frozen=True)

    queue: str
    reason: str
    kind: str
    total: int
