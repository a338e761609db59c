"""The operations of wake policies and spend (docs/api.md §9): one flow each,
shared by both clients (see :mod:`controlplane.client.core`). Their
docstrings are the clients' own."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from decimal import Decimal

from controlplane.client.core import Call, Flow, OperationsCore, as_interval
from controlplane.client.queries import policies as q
from controlplane.models import (
    BudgetPeriod,
    BudgetUsage,
    GovernanceHold,
    GovernanceSnapshot,
    PolicyScope,
    RunExplanation,
    WakePolicy,
)

__all__ = ["PolicyOperations"]


def _interval(value: timedelta | float | None) -> timedelta | None:
    return None if value is None else as_interval(value)


def _number(value: Decimal | float | int | None) -> Decimal | None:
    # Through str, so 0.1 is 0.1 and not the binary float's expansion.
    return None if value is None else Decimal(str(value))


class PolicyOperations(OperationsCore):
    def set_wake_policy(
        self,
        scope: PolicyScope | str,
        scope_id: str,
        cooldown: timedelta | float | None = None,
        max_runs: int | None = None,
        per: timedelta | float | None = None,
        budget: Decimal | float | None = None,
        budget_period: BudgetPeriod | str = BudgetPeriod.MONTH,
        max_retries: int | None = None,
        retry_backoff: Sequence[timedelta | float] | None = None,
    ) -> Flow[WakePolicy]:
        """``office.set_wake_policy`` (since 0.5.0): insert or replace the
        policy of an agent or a workspace; ``None`` is "not set here"."""
        params = {
            "scope": str(scope),
            "scope_id": scope_id,
            "cooldown": _interval(cooldown),
            "max_runs": max_runs,
            "per": _interval(per),
            "budget": _number(budget),
            "budget_period": str(budget_period),
            "max_retries": max_retries,
            "retry_backoff": None
            if retry_backoff is None
            else [as_interval(step) for step in retry_backoff],
        }
        return (yield from self.one(WakePolicy, q.SET_WAKE_POLICY, params))

    def clear_wake_policy(self, scope: PolicyScope | str, scope_id: str) -> Flow[bool]:
        """``office.clear_wake_policy`` (since 0.5.0): True if there was a
        policy and it is gone."""
        params = {"scope": str(scope), "scope_id": scope_id}
        return (yield from self.changed(q.CLEAR_WAKE_POLICY, params))

    def record_run_cost(
        self,
        run_id: str,
        attempt: int,
        amount: Decimal | float | int,
        worker_id: str | None = None,
    ) -> Flow[bool]:
        """``office.record_run_cost`` (since 0.5.0): add ``amount`` to the
        run's cost and its agent's and workspace's spend; True if recorded
        (the attempt matches, claimed or not any more; and the worker's, when
        given, while it holds the claim)."""
        params = {
            "run_id": run_id,
            "attempt": attempt,
            "amount": _number(amount),
            "worker_id": worker_id,
        }
        return (yield from self.changed(q.RECORD_RUN_COST, params))

    def prune_wake_decisions(self, older_than: timedelta | float) -> Flow[int]:
        """``office.prune_wake_decisions`` (since 0.5.0): wake decisions made
        longer ago than ``older_than`` deleted; the count. 0 on a schema
        before 0.5.0, which has none (so the daemon's prune loop can call it
        on any schema)."""
        reply = yield Call(q.PROBE_WAKE_DECISIONS, {})
        if not reply.rows:
            return 0
        return (
            yield from self.count(q.PRUNE_WAKE_DECISIONS, {"older_than": as_interval(older_than)})
        )

    def wake_policies(
        self, scope: PolicyScope | str | None = None, scope_id: str | None = None
    ) -> Flow[list[WakePolicy]]:
        """The rows of ``office.wake_policies`` (since 0.5.0), of one scope
        and id when given, by scope and id."""
        params = {"scope": None if scope is None else str(scope), "scope_id": scope_id}
        return (yield from self.models(WakePolicy, q.WAKE_POLICIES, params))

    def explain_agent(
        self, agent_profile_id: str, max_rows: int = 50
    ) -> Flow[list[RunExplanation]]:
        """``office.explain_agent`` (since 0.5.0): the agent's claimed run,
        then its queued runs in claim order, each with what holds it."""
        params = {"agent_profile_id": agent_profile_id, "max_rows": max_rows}
        return (yield from self.models(RunExplanation, q.EXPLAIN_AGENT, params))

    def governance_stats(self) -> Flow[list[GovernanceHold]]:
        """``office.governance_stats`` (since 0.5.0): queued runs held now,
        by agent and hold."""
        return (yield from self.models(GovernanceHold, q.GOVERNANCE_STATS))

    def budget_usage(self) -> Flow[list[BudgetUsage]]:
        """Every budget (since 0.5.0) with the spend recorded in its current
        period."""
        return (yield from self.models(BudgetUsage, q.BUDGET_USAGE))

    def governance_snapshot(self) -> Flow[GovernanceSnapshot | None]:
        """Runs held now by hold, wake decisions by kind and spend against
        every budget, for the daemon's gauges; None on a schema before 0.5.0."""
        present = yield Call(q.GOVERNANCE_PRESENT, {})
        if not present.rows:
            return None
        held: dict[str, int] = {}
        for hold in (yield from self.governance_stats()):
            held[hold.held_by] = held.get(hold.held_by, 0) + hold.runs
        decisions = yield Call(q.WAKE_DECISION_COUNTS, {})
        return GovernanceSnapshot(
            held=held,
            decisions={str(r["decision"]): int(r["decisions"]) for r in decisions.rows},
            budgets=(yield from self.budget_usage()),
        )
