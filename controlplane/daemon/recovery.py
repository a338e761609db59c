"""Housekeeping loops.

* recovery: ``recover_stale_runs(stale_after)`` every ``recover_interval`` -
  a claimed run whose worker has not heart-beaten (``heartbeat_run``) for
  ``stale_after`` (default 2 minutes, for workers that heartbeat well inside
  it: its worker died or hangs) goes back to the queue with its ``attempt``
  kept, so another worker claims it (attempt + 1) and the stale worker's late
  ``heartbeat_run``/``finish_run`` is refused. Workers that do not heartbeat
  are recovered by their claim time: they need ``stale_after`` longer than
  the longest run;
* prune: ``prune_runs(retention)``, ``prune_events(retention)`` and
  ``prune_wake_decisions(retention)`` every ``prune_interval`` - finished
  runs, acknowledged events and wake decisions older than the retention
  (default 7 days) are deleted (a schema before 0.5.0 has no decisions). A
  pruned run's key is free again: the durable dedup of an occurrence lasts
  as long as its run is kept.

Poison. A stale run the queue cannot take back (a reason or task id written
by hand, too long for the queued-runs index) is set aside by
``recover_stale_runs`` (``office.poison``, loop ``recovery``) and the others
are recovered. Prune has no row to set aside: its DELETEs compare a status
and a time (never compute with a stored value), no foreign key points at
runs or events, and the only trigger they fire (the parent-wake marks of
deleted runs, per statement) inserts parent ids it filters for NOT NULL -
what a row holds cannot make them fail (tests/daemon/test_poison.py tries).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from controlplane.daemon.config import STALE_AFTER, STALE_AFTER_WITHOUT_LEASES
from controlplane.daemon.loop import Loop

__all__ = ["PruneLoop", "RecoveryLoop"]

log = logging.getLogger("controlplane.daemon")


class RecoveryLoop(Loop):
    name = "recovery"
    poison_kind = "run"

    def __init__(self, *args: Any, stale_after: float | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: None until the first iteration picks the schema's default.
        self.stale_after = None if stale_after is None else timedelta(seconds=stale_after)
        self.recovered = 0

    def threshold(self) -> timedelta:
        """The configured threshold, else the default for the schema: a short
        one where claims are leases, 0.3.0's where nothing renews a claim (a
        short one there would hand every long run to a second worker)."""
        if self.stale_after is None:
            leases = self.office.has_leases()
            seconds = STALE_AFTER if leases else STALE_AFTER_WITHOUT_LEASES
            self.stale_after = timedelta(seconds=seconds)
            log.info(
                "recovering claimed runs without a heartbeat for %s (the default %s)",
                self.stale_after,
                "for heart-beating workers" if leases else "of a schema without leases",
            )
        return self.stale_after

    def iterate(self) -> bool:
        count = self.office.recover_stale_runs(self.threshold())
        if count:
            self.recovered += count
            self.metrics.runs_recovered.inc(count)
            log.warning(
                "returned %d stale claimed runs to the queue (no heartbeat for %s)",
                count,
                self.stale_after,
                extra={"recovered": count},
            )
        return False


class PruneLoop(Loop):
    name = "prune"

    def __init__(self, *args: Any, retention: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retention = timedelta(seconds=retention)

    def iterate(self) -> bool:
        runs = self.office.prune_runs(self.retention)
        events = self.office.prune_events(self.retention)
        decisions = self.office.prune_wake_decisions(self.retention)
        self.metrics.runs_pruned.inc(runs)
        self.metrics.events_pruned.inc(events)
        self.metrics.wake_decisions_pruned.inc(decisions)
        if runs or events or decisions:
            log.info(
                "pruned %d runs, %d events and %d wake decisions older than %s",
                runs,
                events,
                decisions,
                self.retention,
                extra={"runs": runs, "events": events, "wake_decisions": decisions},
            )
        return False
