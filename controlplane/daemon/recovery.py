"""Housekeeping loops.

* recovery: ``recover_stale_runs(stale_after)`` every ``recover_interval`` -
  a run claimed longer than ``stale_after`` (default 15 minutes: its worker
  died or hangs) goes back to the queue with its ``attempt`` kept, so another
  worker claims it (attempt + 1) and the stale worker's late ``finish_run``
  is refused;
* prune: ``prune_runs(retention)`` and ``prune_events(retention)`` every
  ``prune_interval`` - finished runs and acknowledged events older than the
  retention (default 7 days) are deleted. A pruned run's key is free again:
  the durable dedup of an occurrence lasts as long as its run is kept.

Poison. A stale run the queue cannot take back (a reason or task id written
by hand, too long for the queued-runs index) is set aside by
``recover_stale_runs`` (``office.poison``, loop ``recovery``) and the others
are recovered. Prune has no row to set aside: its DELETEs compare a status
and a time (never compute with a stored value), no foreign key points at
runs or events, and the only trigger they fire (the parent-wake marks of
deleted runs, per statement) inserts parent ids it filters for NOT NULL -
what a row holds cannot make them fail (tests/test_poison.py tries).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from controlplane.daemon.loop import Loop, fetch

__all__ = ["PruneLoop", "RecoveryLoop"]

log = logging.getLogger("controlplane.daemon")

PRUNE_EVENTS = "SELECT office.prune_events(older_than => %(older_than)s) AS count"


class RecoveryLoop(Loop):
    name = "recovery"
    poison_kind = "run"

    def __init__(self, *args: Any, stale_after: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stale_after = timedelta(seconds=stale_after)
        self.recovered = 0

    def iterate(self) -> bool:
        count = self.office.recover_stale_runs(self.stale_after)
        if count:
            self.recovered += count
            self.metrics.runs_recovered.inc(count)
            log.warning(
                "returned %d stale claimed runs to the queue (claimed longer than %s)",
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
        events = int(fetch(self.office, PRUNE_EVENTS, {"older_than": self.retention})[0]["count"])
        self.metrics.runs_pruned.inc(runs)
        self.metrics.events_pruned.inc(events)
        if runs or events:
            log.info(
                "pruned %d runs and %d events older than %s",
                runs,
                events,
                self.retention,
                extra={"runs": runs, "events": events},
            )
        return False
