"""The stats loop: reads the gauges of :mod:`controlplane.daemon.metrics`
from the database (``office.daemon_stats()``, ``office.queue_stats``,
``office.dedup_stats``) every ``stats_interval``."""

from __future__ import annotations

from typing import Any

from controlplane.daemon.loop import Loop
from controlplane.models import DaemonStats

__all__ = ["HOLDS", "StatsLoop"]

#: What holds a queued run, in explain_agent's words (docs/api.md §9), the
#: claim in progress aside (office.governance_stats does not count it).
HOLDS = ("paused", "budget", "not_before", "cooldown", "run_cap")


class StatsLoop(Loop):
    name = "stats"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last: DaemonStats | None = None

    def iterate(self) -> bool:
        stats = self.office.daemon_stats()
        queue = self.office.queue_stats()
        dedup = self.office.dedup_stats()
        m = self.metrics
        m.outbox_lag.set(stats.outbox_lag_seconds or 0.0)
        m.outbox_pending.set(stats.pending_events)
        m.wakeups_queued.set(stats.queued_wakeups)
        m.triggers_due.set(stats.due_triggers)
        m.oldest_claim_age.set(stats.oldest_claim_age_seconds or 0.0)
        for loop, rows in (stats.poison_by_loop or {}).items():
            m.poison_rows.labels(loop=loop).set(rows)
        for by_status in queue:
            m.runs.labels(status=by_status.status).set(by_status.runs)
        for d in dedup:
            m.dedup_stats.labels(queue=d.queue, reason=d.reason, kind=d.kind).set(d.total)
        governance = self.office.governance_snapshot()
        if governance is not None:
            # A hold that ended reads 0, not its last value.
            for held_by in HOLDS:
                m.runs_held.labels(held_by=held_by).set(governance.held.get(held_by, 0))
            # Pruned decisions and cleared budgets leave their series.
            m.wake_decisions.clear()
            m.budget_spend_ratio.clear()
            for decision, rows in governance.decisions.items():
                m.wake_decisions.labels(decision=decision).set(rows)
            for usage in governance.budgets:
                share = 1.0 if usage.share is None else usage.share
                m.budget_spend_ratio.labels(scope=usage.scope, scope_id=usage.scope_id).set(share)
        self.last = stats
        return False
