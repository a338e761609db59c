"""Typed results of the wakeup-request functions (docs/api.md §4; docs/domain.md §1.6)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from controlplane.models.common import DedupKind

__all__ = [
    "WakeupDispatchResult",
    "WakeupDispatchStatus",
    "WakeupOutcome",
    "WakeupResult",
    "WakeupStatus",
]


class WakeupStatus(StrEnum):
    QUEUED = "queued"
    CLAIMED = "claimed"
    COALESCED = "coalesced"
    SKIPPED = "skipped"
    FAILED = "failed"


class WakeupOutcome(StrEnum):
    """What ``request_wakeup`` did: a new request, or the key's holder."""

    QUEUED = "queued"
    DEDUPED = "deduped"


class WakeupDispatchStatus(StrEnum):
    """What ``dispatch_wakeup`` did (``noop``: the request was not queued)."""

    CLAIMED = "claimed"
    COALESCED = "coalesced"
    SKIPPED = "skipped"
    NOOP = "noop"


class WakeupResult(BaseModel):
    """``office.wakeup_result``: a new request, or (deduped, durable) and the
    request that holds the key."""

    model_config = ConfigDict(frozen=True)

    outcome: WakeupOutcome
    dedup_kind: DedupKind | None = None
    wakeup_request_id: str

    @property
    def created(self) -> bool:
        return self.outcome is WakeupOutcome.QUEUED


class WakeupDispatchResult(BaseModel):
    """``office.wakeup_dispatch_result``."""

    model_config = ConfigDict(frozen=True)

    status: WakeupDispatchStatus
    run_id: str | None = None
