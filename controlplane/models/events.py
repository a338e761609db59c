"""Typed rows of the transactional outbox, ``office.events`` (API.md §6)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from controlplane.models.common import _json_value

__all__ = ["Event", "EventTopic"]


class EventTopic(StrEnum):
    TASK_ASSIGNED = "task.assigned"
    TASK_MOVED = "task.moved"


class Event(BaseModel):
    """A row of ``office.events``, the transactional outbox (API.md §6)."""

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
