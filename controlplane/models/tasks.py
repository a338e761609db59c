"""Typed results of the task and event functions (docs/api.md §2, §6) for both
Python clients.

``create_task`` and ``assign_task`` are producers: besides the task they
report what happened to the ``task_assigned`` run they asked for. Their
outcome is one of the queue's (``queued``, ``deduped``, ``coalesced``) or
``skipped`` - the assignee does not exist (any more) or does not accept runs,
which never aborts the assignment itself - or ``None`` when no run was due
(no assignee, an unassignment, a non-Office task).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from controlplane.models.common import DedupKind

__all__ = [
    "TASK_STATES",
    "TERMINAL_STATES",
    "ActorType",
    "AssignResult",
    "ProducerOutcome",
    "Task",
    "TaskResult",
    "TaskState",
    "TaskTerminalStatus",
]


class TaskState(StrEnum):
    TODO = "TODO"
    CREATED = "CREATED"
    SCHEDULING = "SCHEDULING"
    IN_PROGRESS = "IN_PROGRESS"
    REVIEW = "REVIEW"
    BLOCKED = "BLOCKED"
    WAITING_FOR_INPUT = "WAITING_FOR_INPUT"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TASK_STATES = frozenset(TaskState)
#: Terminal for blockers (``is_task_terminal``): FAILED counts. A parent's
#: wave needs COMPLETED or CANCELLED children (docs/domain.md §1.1).
TERMINAL_STATES = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED})


class ActorType(StrEnum):
    """Who made an assignment (``assign_task(actor_type => ...)``)."""

    USER = "user"
    AGENT = "agent"
    SYSTEM = "system"


class TaskTerminalStatus(StrEnum):
    """``office.task_terminal_status``: the routine gate's view of a task."""

    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    OPEN = ""
    MISSING = "missing"


class ProducerOutcome(StrEnum):
    """What an internal producer's enqueue did: the queue's outcomes
    (``guarded`` among them, since 0.5.0), or ``skipped`` when the agent is
    missing or does not accept runs."""

    QUEUED = "queued"
    DEDUPED = "deduped"
    COALESCED = "coalesced"
    GUARDED = "guarded"
    SKIPPED = "skipped"


class _ProducerResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    outcome: ProducerOutcome | None = None
    dedup_kind: DedupKind | None = None
    run_id: str | None = None

    @property
    def created(self) -> bool:
        """Only ``queued`` means a run was created."""
        return self.outcome is ProducerOutcome.QUEUED


class TaskResult(_ProducerResult):
    """``office.task_result``: the new task, its generation (1 when created
    with assignee and step, else 0) and its ``task_assigned`` run."""

    task_id: str
    assignment_generation: int


class AssignResult(_ProducerResult):
    """``office.assign_result``: the generation this assignment committed,
    whether the previous (different, non-empty) assignee is to be
    interrupted, and the ``task_assigned`` run."""

    assignment_generation: int
    interrupt: bool


class Task(BaseModel):
    """A row of ``office.tasks`` (docs/api.md §2)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    workspace_id: str
    parent_id: str | None = None
    workflow_step_id: str | None = None
    title: str = ""
    state: TaskState
    assignee_agent_profile_id: str | None = None
    assignment_generation: int = 0
    is_office: bool = True
    is_ephemeral: bool = False
    archived_at: datetime | None = None
    created_at: datetime
    updated_at: datetime

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def archived(self) -> bool:
        return self.archived_at is not None
