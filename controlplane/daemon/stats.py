"""The stats loop: reads the gauges of :mod:`controlplane.daemon.metrics`
from the database (``office.daemon_stats()``, ``office.queue_stats``,
``office.dedup_stats``) every ``stats_interval``."""

from __future__ import annotations

from typing import Any

from controlplane.daemon.loop import Loop
from controlplane.models import DaemonStats

__all__ = ["StatsLoop"]


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
        self.last = stats
        return False
