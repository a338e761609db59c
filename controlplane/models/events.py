"""Typed rows of the transactional outbox, ``office.events`` (docs/api.md §6)."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from controlplane.models.common import _json_value

__all__ = ["ClaimedEventRow", "Event", "EventTopic"]


class EventTopic(StrEnum):
    TASK_ASSIGNED = "task.assigned"
    TASK_MOVED = "task.moved"


class Event(BaseModel):
    """A row of ``office.events``, the transactional outbox (docs/api.md §6)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: int
    topic: str
    task_id: str | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    processed_at: datetime | None = None
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    visible_at: datetime | None = None
    deliveries: int = 0

    @field_validator("payload", mode="before")
    @classmethod
    def _decode_payload(cls, value: Any) -> Any:
        return {} if value is None else _json_value(value)


class ClaimedEventRow(BaseModel):
    """A claimed event as values that always load (``claim_event_rows``): the
    payload as its JSON text, a creation time Python cannot represent as
    None. :meth:`decode` makes the :class:`Event`."""

    model_config = ConfigDict(frozen=True)

    id: int
    topic: str
    task_id: str | None = None
    payload: str
    created_at: datetime | None = None
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    visible_at: datetime | None = None
    deliveries: int = 0

    def decode(self) -> Event:
        """The event; raises whatever its values make Python raise (a payload
        nested too deep is a RecursionError, a missing creation time a
        ValidationError)."""
        return Event.model_validate({**self.model_dump(), "payload": json.loads(self.payload)})
