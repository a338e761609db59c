"""The wakeup loop: dispatches queued wakeup requests that nobody dispatched
(``office.dispatch_queued_wakeups``: ``dispatch_wakeup`` for each, oldest
first, in one short transaction, skipping requests another dispatcher holds).

Requests of an agent that does not accept runs wait until it does; a request
whose agent is gone is failed. Dispatching twice is harmless: the second
dispatch of a request is a ``noop``. A request whose dispatch fails for any
other reason than its agent or a conflict (say, a reason written by hand too
long for the run queue) would fail every attempt, first in line: it is set
aside (``office.poison``, loop ``wakeups``; status ``set_aside``).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from controlplane.daemon.loop import Loop

__all__ = ["WakeupLoop"]

log = logging.getLogger("controlplane.daemon.wakeups")


class WakeupLoop(Loop):
    name = "wakeups"
    poison_kind = "wakeup request"

    def __init__(self, *args: Any, batch: int, min_age: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch = batch
        self.min_age = timedelta(seconds=min_age)

    def iterate(self) -> bool:
        rows = self.office.dispatch_queued_wakeups(self.batch, self.min_age)
        progressed = False
        for row in rows:
            self.metrics.wakeups.labels(status=row.status).inc()
            # (A request set aside is logged once, as poison, by report_poison.)
            if row.error_message and row.status != "set_aside":
                log.warning(
                    "dispatch wakeup request: %s",
                    row.error_message,
                    extra={
                        "wakeup_id": row.wakeup_request_id,
                        "agent_profile_id": row.agent_profile_id,
                        "status": row.status,
                    },
                )
            if row.status != "queued":
                progressed = True
        return len(rows) >= self.batch and progressed
