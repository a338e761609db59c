"""Typed results of the wake policy functions (docs/api.md §9, "Policies")."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

__all__ = [
    "BudgetPeriod",
    "BudgetUsage",
    "GovernanceHold",
    "GovernanceSnapshot",
    "PolicyScope",
    "RunExplanation",
    "WakePolicy",
]


class PolicyScope(StrEnum):
    AGENT = "agent"
    WORKSPACE = "workspace"


class BudgetPeriod(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


class WakePolicy(BaseModel):
    """A row of ``office.wake_policies``: ``None`` is "not set here" (the
    agent's value is its own row's, else its workspace row's, else the
    default)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    scope: PolicyScope
    scope_id: str
    cooldown: timedelta | None = None
    max_runs: int | None = None
    per: timedelta | None = None
    budget: Decimal | None = None
    budget_period: BudgetPeriod = BudgetPeriod.MONTH
    max_retries: int | None = None
    retry_backoff: list[timedelta] | None = None
    updated_at: datetime


class RunExplanation(BaseModel):
    """A row of ``office.explain_agent``: one run of the agent, whether it
    can be claimed now and, when not, what holds it (``paused``, ``budget``,
    ``not_before``, ``cooldown``, ``run_cap``, ``claimed``) and until when."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str
    status: str
    claimable: bool
    held_by: str | None = None
    until: datetime | None = None
    detail: str | None = None


class GovernanceHold(BaseModel):
    """A row of ``office.governance_stats``: queued runs of an agent held now
    by one kind of hold."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    agent_profile_id: str
    held_by: str
    runs: int


class BudgetUsage(BaseModel):
    """A scope's spend against its budget in the current period."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    scope: PolicyScope
    scope_id: str
    budget: Decimal
    budget_period: BudgetPeriod
    spent: Decimal

    @property
    def share(self) -> float | None:
        """Spend over budget (1.0 = reached); None for a budget of 0."""
        return None if self.budget == 0 else float(self.spent / self.budget)


class GovernanceSnapshot(BaseModel):
    """What the daemon's stats loop reads of wake governance: runs held now
    by hold, wake decisions by kind, and spend against every budget."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    held: dict[str, int]
    decisions: dict[str, int]
    budgets: list[BudgetUsage]
