"""Typed results of the routine functions (docs/api.md §4; docs/domain.md §1.5,
§2.16-§2.18): routines, their cron triggers and one dispatch."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from controlplane.models.common import _json_value
from controlplane.models.wakeups import WakeupOutcome

__all__ = [
    "CatchUpPolicy",
    "ConcurrencyPolicy",
    "DispatchRoutineResult",
    "Routine",
    "RoutineRunStatus",
    "RoutineSource",
    "RoutineStatus",
    "RoutineTerminal",
    "RoutineTrigger",
]


class ConcurrencyPolicy(StrEnum):
    SKIP_IF_ACTIVE = "skip_if_active"
    COALESCE_IF_ACTIVE = "coalesce_if_active"
    ALWAYS_CREATE = "always_create"


class CatchUpPolicy(StrEnum):
    SKIP_MISSED = "skip_missed"
    ENQUEUE_MISSED_WITH_CAP = "enqueue_missed_with_cap"


class RoutineStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    ARCHIVED = "archived"


class RoutineSource(StrEnum):
    CRON = "cron"
    MANUAL = "manual"
    WEBHOOK = "webhook"


class RoutineRunStatus(StrEnum):
    RECEIVED = "received"
    TASK_CREATED = "task_created"
    SKIPPED = "skipped"
    COALESCED = "coalesced"
    FAILED = "failed"
    DONE = "done"
    CANCELLED = "cancelled"


class RoutineTerminal(StrEnum):
    """What ``close_routine_run``/``sync_routine_run_status`` accept
    (``missing`` closes as ``failed``)."""

    DONE = "done"
    FAILED = "failed"
    MISSING = "missing"
    CANCELLED = "cancelled"


class Routine(BaseModel):
    """A row of ``office.routines``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    workspace_id: str
    name: str
    task_template: dict[str, Any] = Field(default_factory=dict)
    assignee_agent_profile_id: str | None = None
    concurrency_policy: ConcurrencyPolicy
    catch_up_policy: CatchUpPolicy
    catch_up_max: int
    variables: dict[str, Any] = Field(default_factory=dict)
    status: RoutineStatus
    last_run_at: datetime | None = None
    created_at: datetime
    updated_at: datetime

    @field_validator("task_template", "variables", mode="before")
    @classmethod
    def _decode_json(cls, value: Any) -> Any:
        return {} if value is None else _json_value(value)

    @property
    def heavy(self) -> bool:
        """Fires create tasks (the template has a non-empty title); else
        they wake the assignee."""
        return bool(self.task_template.get("title"))


class RoutineTrigger(BaseModel):
    """A row of ``office.routine_triggers``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    routine_id: str
    kind: str = "cron"
    cron_expression: str | None = None
    timezone: str = "UTC"
    next_run_at: datetime | None = None
    last_fired_at: datetime | None = None
    enabled: bool = True
    created_at: datetime | None = None
    updated_at: datetime | None = None


class DispatchRoutineResult(BaseModel):
    """``office.dispatch_routine_result``: the routine run and the status it
    reached. ``linked_task_id`` and ``coalesced_into_run_id`` are ``''`` when
    there is none (as stored); a dispatch failure is ``status`` ``failed``
    with ``error_message``, not an exception."""

    model_config = ConfigDict(frozen=True)

    routine_run_id: str
    status: RoutineRunStatus
    linked_task_id: str = ""
    coalesced_into_run_id: str = ""
    wakeup_request_id: str | None = None
    wakeup_outcome: WakeupOutcome | None = None
    run_id: str | None = None
    idempotency_key: str | None = None
    error_message: str | None = None
    workspace_id: str | None = None

    @property
    def task_created(self) -> bool:
        return self.status is RoutineRunStatus.TASK_CREATED

    @property
    def failed(self) -> bool:
        return self.status is RoutineRunStatus.FAILED
