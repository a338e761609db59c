"""Typed results of the agent functions (docs/api.md §2)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

__all__ = ["Agent", "AgentStatus"]


class AgentStatus(StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    PENDING_APPROVAL = "pending_approval"


class Agent(BaseModel):
    """A row of ``office.agent_profiles`` (docs/api.md §2)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    workspace_id: str
    name: str = ""
    status: AgentStatus
    created_at: datetime
    updated_at: datetime

    @property
    def accepts_runs(self) -> bool:
        return self.status not in (
            AgentStatus.PAUSED,
            AgentStatus.STOPPED,
            AgentStatus.PENDING_APPROVAL,
        )
