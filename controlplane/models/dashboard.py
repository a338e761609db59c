"""Typed rows of the dashboard's functions (``sql/85_dashboard.sql``): what
the read-only pages list. Plain text for statuses and policies where the
page only shows them, so a row written by hand never breaks a page."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from controlplane.models.agents import AgentStatus
from controlplane.models.runs import RunStatus

__all__ = [
    "QUEUE_COUNT_CAP",
    "AgentQueue",
    "ParentReceipt",
    "RoutineRunSummary",
    "RoutineSummary",
    "RunStatusCount",
    "TriggerSummary",
    "WakeupRequest",
]

#: ``office.list_agents`` counts an agent's queue up to this many.
QUEUE_COUNT_CAP = 10_001


class RunStatusCount(BaseModel):
    """A row of ``office.run_status_counts()``: the history's statuses are
    an estimate (``exact`` false, no agents or oldest) on a large table."""

    model_config = ConfigDict(frozen=True)

    status: RunStatus
    agents: int | None
    runs: int
    oldest_requested_at: datetime | None
    exact: bool


class AgentQueue(BaseModel):
    """A row of ``office.list_agents``: the profile, its queue, its claim."""

    model_config = ConfigDict(frozen=True)

    id: str
    workspace_id: str
    name: str
    status: AgentStatus
    created_at: datetime
    updated_at: datetime
    #: Counted up to :data:`QUEUE_COUNT_CAP`.
    queued: int
    oldest_queued_at: datetime | None
    claimed_run_id: str | None
    claimed_by: str | None
    claimed_at: datetime | None
    heartbeat_at: datetime | None

    @property
    def queued_text(self) -> str:
        return f"{QUEUE_COUNT_CAP - 1:,}+" if self.queued >= QUEUE_COUNT_CAP else f"{self.queued:,}"


class WakeupRequest(BaseModel):
    """A row of ``office.list_wakeups`` (``office.wakeup_requests``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    agent_profile_id: str
    source: str
    reason: str
    status: str
    coalesced_count: int
    idempotency_key: str | None
    run_id: str | None
    requested_at: datetime


class RoutineSummary(BaseModel):
    """A row of ``office.list_routines`` / ``office.get_routine``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    workspace_id: str
    name: str
    assignee_agent_profile_id: str | None
    concurrency_policy: str
    catch_up_policy: str
    status: str
    last_run_at: datetime | None


class TriggerSummary(BaseModel):
    """A row of ``office.list_routine_triggers``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    kind: str
    cron_expression: str | None
    timezone: str
    next_run_at: datetime | None
    last_fired_at: datetime | None
    enabled: bool


class RoutineRunSummary(BaseModel):
    """A row of ``office.list_routine_runs``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    source: str
    status: str
    linked_task_id: str
    coalesced_into_run_id: str
    wakeup_request_id: str | None
    error_message: str | None
    created_at: datetime


class ParentReceipt(BaseModel):
    """``office.get_parent_receipt``: a parent's wake receipt."""

    model_config = ConfigDict(frozen=True)

    child_set_key: str
    child_generation: str
    delivered_run_id: str
    delivery_operation_id: str
    delivered_at: datetime
