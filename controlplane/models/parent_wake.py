"""Typed results of the parent-wake functions (docs/api.md §5) for both Python
clients.

``list_stuck_parents`` returns :class:`StuckParent` rows: Office parents whose
finished child wave nobody delivered (every candidate condition of docs/domain.md
§2.20 is applied in SQL before the limit). ``reconcile_parent`` and each row of
``sweep_stuck_parents`` is a :class:`ReconcileResult`: either the wake was
enqueued - ``outcome`` is the queue's (``queued``, ``deduped``, ``coalesced``:
the run it landed on) and a receipt was written (``delivered``) - or it was
declined with ``outcome`` ``skipped`` (or ``guarded``) and a :class:`SkippedReason`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from controlplane.models.common import DedupKind
from controlplane.models.tasks import ProducerOutcome

__all__ = [
    "CHILDREN_COMPLETED",
    "ReconcileResult",
    "SkippedReason",
    "StuckParent",
]

#: The run reason of a parent wake, and the sweep's default.
CHILDREN_COMPLETED = "task_children_completed"


class SkippedReason(StrEnum):
    """Why ``reconcile_parent`` declined (nothing enqueued, no receipt)."""

    #: The parent has no assignee, or it is missing or does not accept runs.
    ASSIGNEE_UNRESOLVED = "assignee_unresolved"
    #: The child set or its generation is not the one listed (a child was
    #: reopened, recompleted, archived or added since), or not a finished wave.
    CHILD_SET_CHANGED = "child_set_changed"
    #: The loop guard refused the wake (docs/api.md §9): an agent-caused
    #: chain past office.max_chain_depth.
    GUARDED = "guarded"


class StuckParent(BaseModel):
    """A row of ``office.list_stuck_parents``: what ``reconcile_parent`` needs."""

    model_config = ConfigDict(frozen=True)

    parent_task_id: str
    assignee_agent_profile_id: str
    workflow_step_id: str | None = None
    child_set_key: str
    #: ``second_precision_text(max(updated_at))`` of the non-archived children (UTC).
    newest_child_updated_at: str


class ReconcileResult(BaseModel):
    """``office.reconcile_result``."""

    model_config = ConfigDict(frozen=True)

    parent_task_id: str
    #: A receipt was written (the wake was enqueued, deduped or coalesced).
    delivered: bool
    #: ``wake_operation_id(parent, child_set_key, generation)``; None when declined.
    operation_id: str | None = None
    outcome: ProducerOutcome
    dedup_kind: DedupKind | None = None
    run_id: str | None = None
    skipped_reason: SkippedReason | None = None

    @property
    def created(self) -> bool:
        """Only ``queued`` means a new run was created."""
        return self.outcome is ProducerOutcome.QUEUED
