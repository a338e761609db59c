"""The operations the daemon's loops run (``sql/70_daemon.sql``) and the
named reads of the demo's checks: one flow each, shared by both clients (see
:mod:`controlplane.client.core`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from controlplane.client.core import Flow, OperationsCore, as_interval
from controlplane.client.queries import Query
from controlplane.client.queries import daemon as q
from controlplane.models import (
    DaemonStats,
    DedupStat,
    DueTrigger,
    PoisonReport,
    QueuedWakeupDispatch,
    QueueStat,
)

__all__ = ["DaemonOperations"]


class DaemonOperations(OperationsCore):
    def due_routine_triggers(self, max_rows: int = 100) -> Flow[list[DueTrigger]]:
        """``office.due_routine_triggers``: the cron loop's scan, at the
        database's now() (returned as ``at`` with each row); a time Python
        cannot represent comes as None with its text in ``unrepresentable``."""
        params = {"max_rows": max_rows, **q.REPRESENTABLE}
        return (yield from self.models(DueTrigger, q.DUE_ROUTINE_TRIGGERS, params))

    def set_aside(
        self, loop: str, row_id: str, reason: str, sqlstate: str | None = None
    ) -> Flow[bool]:
        """``office.set_aside``: put a row a loop cannot process in
        ``office.poison``; False when the failure was transient (or the row
        already set aside)."""
        params = {"loop": loop, "row_id": row_id, "reason": reason, "sqlstate": sqlstate}
        return (yield from self.changed(q.SET_ASIDE, params))

    def take_poison_reports(self, loop: str) -> Flow[list[PoisonReport]]:
        """``office.take_poison_reports``: the rows of ``loop`` set aside since
        the last report, each handed to exactly one caller."""
        return (yield from self.models(PoisonReport, q.TAKE_POISON_REPORTS, {"loop": loop}))

    def dispatch_queued_wakeups(
        self, max_rows: int = 50, min_age: timedelta | float = 0
    ) -> Flow[list[QueuedWakeupDispatch]]:
        """``office.dispatch_queued_wakeups``: dispatch queued wakeup requests
        nobody dispatched (older than ``min_age``), oldest first."""
        params = {"max_rows": max_rows, "min_age": as_interval(min_age)}
        return (yield from self.models(QueuedWakeupDispatch, q.DISPATCH_QUEUED_WAKEUPS, params))

    def daemon_stats(self) -> Flow[DaemonStats]:
        """``office.daemon_stats()``: the numbers behind the daemon's gauges."""
        value = yield from self.value(q.DAEMON_STATS)
        return DaemonStats.model_validate(json.loads(value) if isinstance(value, str) else value)

    def queue_stats(self) -> Flow[list[QueueStat]]:
        """``office.queue_stats``: runs by status."""
        return (yield from self.models(QueueStat, q.QUEUE_STATS))

    def dedup_stats(self) -> Flow[list[DedupStat]]:
        """``office.dedup_stats``: the database's own dedup counters."""
        return (yield from self.models(DedupStat, q.DEDUP_STATS))

    def fetch(
        self, query: Query, params: Mapping[str, Any] | None = None
    ) -> Flow[list[dict[str, Any]]]:
        """The rows of one named statement of :mod:`controlplane.client.queries`
        (``queries/demo.py``, ``queries/dashboard.py``: the demo's checks,
        which read the tables as their owner; the dashboard's page reads)."""
        return (yield from self.rows(query, params))
