"""The stats loop: reads the gauges of :mod:`controlplane.daemon.metrics`
from the database (``office.daemon_stats()``, ``office.queue_stats``,
``office.dedup_stats``) every ``stats_interval``."""

from __future__ import annotations

from typing import Any

from controlplane.daemon.loop import Loop, fetch

__all__ = ["DAEMON_STATS", "StatsLoop"]

# As one JSON object without the times of the oldest event and claim: a time
# written by hand outside Python's years would fail to load and stop this
# loop (a lag of -infinity comes as the text "-Infinity", which float() takes);
# a schema older than 0.4.0 simply has no poison_by_loop.
DAEMON_STATS = (
    "SELECT to_jsonb(s) - 'oldest_pending_event_at' - 'oldest_claimed_at' AS stats"
    " FROM office.daemon_stats() s"
)
QUEUE_STATS = "SELECT status, runs FROM office.queue_stats"
DEDUP_STATS = "SELECT queue, reason, kind, total FROM office.dedup_stats"


class StatsLoop(Loop):
    name = "stats"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last: dict[str, Any] = {}

    def iterate(self) -> bool:
        stats: dict[str, Any] = fetch(self.office, DAEMON_STATS)[0]["stats"]
        queue = fetch(self.office, QUEUE_STATS)
        dedup = fetch(self.office, DEDUP_STATS)
        m = self.metrics
        m.outbox_lag.set(float(stats["outbox_lag_seconds"] or 0.0))
        m.outbox_pending.set(int(stats["pending_events"]))
        m.wakeups_queued.set(int(stats["queued_wakeups"]))
        m.triggers_due.set(int(stats["due_triggers"]))
        m.oldest_claim_age.set(float(stats["oldest_claim_age_seconds"] or 0.0))
        for loop, rows in (stats.get("poison_by_loop") or {}).items():
            m.poison_rows.labels(loop=loop).set(int(rows))
        for row in queue:
            m.runs.labels(status=row["status"]).set(int(row["runs"]))
        for row in dedup:
            m.dedup_stats.labels(queue=row["queue"], reason=row["reason"], kind=row["kind"]).set(
                int(row["total"])
            )
        self.last = stats
        return False
