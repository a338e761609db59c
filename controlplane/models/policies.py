"""Typed results of the wake policy functions (docs/api.md §9, "Policies")."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

__all__ = ["BudgetPeriod", "PolicyScope", "WakePolicy"]


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
