"""Typed results of the run queue (docs/api.md §2-§3) for both Python clients.

A duplicate, a coalesce or a guarded request is an *outcome*, never an error: every enqueue
returns an :class:`EnqueueResult` and only ``queued`` means that a run was
created (docs/domain.md §2.1).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from controlplane.models.common import (
    DedupKind,
    DedupQueue,
    KeylessCause,
    QueueOutcome,
    _json_value,
)


class RunStatus(StrEnum):
    QUEUED = "queued"
    CLAIMED = "claimed"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunKeyHow(StrEnum):
    """How a run came to serve a key (``office.run_keys.how``)."""

    OWN = "own"  # its own idempotency_key
    COALESCED = "coalesced"  # a request with this key was coalesced into it


class EnqueueRequest(BaseModel):
    """The arguments of ``office.enqueue_run`` (also one element of
    ``office.enqueue_runs``). Validation is the server's: a bad value comes
    back as the typed error of its SQLSTATE, with the server's message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_profile_id: str
    reason: str
    payload: Any = Field(default_factory=dict)
    idempotency_key: str | None = None
    task_id: str | None = None
    entry_triggered: bool = False
    keyless_cause: KeylessCause | str | None = None
    keyless_detail: str | None = None
    # since 0.5.0 (docs/api.md §9); None leaves each to the server's default
    origin: str | None = None
    cause_run_id: str | None = None
    priority: int | None = None
    not_before: datetime | None = None

    @field_validator("payload", mode="before")
    @classmethod
    def _default_payload(cls, value: Any) -> Any:
        """None means "no payload": the default ``{}``."""
        return {} if value is None else value

    @property
    def governed(self) -> bool:
        """Whether it names an origin, a cause, a priority or a not_before
        (arguments a schema before 0.5.0 does not take)."""
        return (
            self.origin is not None
            or self.cause_run_id is not None
            or self.priority is not None
            or self.not_before is not None
        )

    @property
    def keyless(self) -> bool:
        """No key: an empty key means "no key" (docs/api.md conventions)."""
        return not self.idempotency_key


class EnqueueResult(BaseModel):
    """``office.enqueue_result``: the outcome, how a dedup was decided, and
    the run concerned (the new run, the holder of the key, or the coalesce
    target)."""

    model_config = ConfigDict(frozen=True)

    outcome: QueueOutcome
    dedup_kind: DedupKind | None = None
    run_id: str | None = None

    @property
    def created(self) -> bool:
        """Only ``queued`` counts as "a run was created"."""
        return self.outcome is QueueOutcome.QUEUED


class BulkEnqueueItem(EnqueueResult):
    """One row of ``office.enqueue_runs``: the outcome of the element at
    ``ordinality`` (1-based, input order)."""

    ordinality: int


class DedupHit(BaseModel):
    """A unique violation on a dedup index (``idx_run_idempotency`` or
    ``idx_wakeup_idempotency``) turned into an outcome: ``deduped``/``durable``
    against the row that holds the key."""

    model_config = ConfigDict(frozen=True)

    queue: DedupQueue
    constraint: str
    key: str | None = None
    holder_id: str | None = None  # run id (queue runs) or wakeup request id (queue wakeup)
    reason: str | None = None
    agent_profile_id: str | None = None

    @property
    def outcome(self) -> QueueOutcome:
        return QueueOutcome.DEDUPED

    @property
    def dedup_kind(self) -> DedupKind:
        return DedupKind.DURABLE

    def as_enqueue_result(self) -> EnqueueResult:
        return EnqueueResult(
            outcome=QueueOutcome.DEDUPED, dedup_kind=DedupKind.DURABLE, run_id=self.holder_id
        )


class ExecuteResult(BaseModel):
    """What a raw statement run through ``execute`` gave: its rows (as dicts)
    and row count, or — when it hit a dedup index — the :class:`DedupHit`
    (then ``rows`` is empty and ``rowcount`` 0: the statement changed nothing)."""

    model_config = ConfigDict(frozen=True)

    rows: list[dict[str, Any]] = Field(default_factory=list)
    rowcount: int = 0
    dedup: DedupHit | None = None

    @property
    def deduped(self) -> bool:
        return self.dedup is not None


class Run(BaseModel):
    """A row of ``office.runs`` (docs/api.md §3). Columns the API does not name are
    ignored; ``entry_triggered`` reads as false on a 0.1.0 schema and
    ``heartbeat_at`` (the lease, renewed by ``heartbeat_run``) as None before
    0.4.0."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    agent_profile_id: str
    reason: str
    payload: dict[str, Any] = Field(default_factory=dict)
    status: RunStatus
    coalesced_count: int = 1
    idempotency_key: str | None = None
    entry_triggered: bool = False
    task_id: str | None = None
    context_snapshot: dict[str, Any] = Field(default_factory=dict)
    attempt: int = 0
    claimed_by: str | None = None
    retry_count: int = 0
    scheduled_retry_at: datetime | None = None
    error_message: str | None = None
    cancel_reason: str | None = None
    requested_at: datetime
    claimed_at: datetime | None = None
    finished_at: datetime | None = None
    heartbeat_at: datetime | None = None
    # Wake governance (docs/api.md §9); a schema before 0.5.0 reads as a
    # system run with no cause.
    origin: str = "system"
    cause_run_id: str | None = None
    chain_depth: int = 0
    priority: int = 0
    cost: Decimal = Decimal(0)

    @field_validator("payload", "context_snapshot", mode="before")
    @classmethod
    def _decode_json(cls, value: Any) -> Any:
        return {} if value is None else _json_value(value)


class RunKey(BaseModel):
    """A row of ``office.run_keys``: a key the run serves (a request with it
    is deduped onto the run), since when, and how it came to."""

    model_config = ConfigDict(frozen=True)

    idempotency_key: str
    recorded_at: datetime
    how: RunKeyHow
