"""The cron loop: fires routines at their ticks.

Each iteration lists the due triggers (``office.due_routine_triggers``: not
armed yet, or ``next_run_at`` passed, routines ``active``), plans each with
:func:`controlplane.routines.plan_tick` - the next tick, and the catch-up
policy of the routine after downtime (one fire standing for every missed
tick: ``skip_missed`` says nothing about them, ``enqueue_missed_with_cap``
carries ``missed_ticks``/``missed_since``/``missed_truncated``) - and then:

* a trigger never armed is armed with its next tick (``claim_routine_tick``
  from NULL), firing nothing; one whose ticks cannot be computed is re-armed
  a day later;
* a due tick is claimed and dispatched in one transaction
  (``office.fire_routine_tick``: ``claim_routine_tick`` observed → following,
  then ``dispatch_routine`` with the claimed tick). Of several daemons looking
  at one tick exactly one wins the compare-and-swap; the others count it as
  ``lost``. The claimed tick names the fire's wakeup key, so even a fire
  delivered twice would be one wakeup.

Poison: a trigger the loop cannot process - a time Python cannot represent
(``next_run_at`` '4713-01-01 BC', written by hand), a cron expression or a
time zone that cannot be evaluated, a step that fails for any reason but a
conflict with another transaction - is set aside (``office.poison``, loop
``cron``): the scan leaves it out, so it never takes a slot ahead of the
triggers that can fire. (Outside the daemon, ``fire_due`` re-arms an
uncomputable trigger a day later instead.)
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry

from controlplane.daemon.loop import Loop, fetch, is_connection_error
from controlplane.errors import RoutineNotFound
from controlplane.event_subscriber import poison_reason
from controlplane.observability import Reporter
from controlplane.routines import (
    DispatchRoutineResult,
    RoutineSource,
    RoutineTrigger,
    TickPlan,
    next_tick,
    plan_tick,
    report_dispatch,
    routine_run_counter,
)

__all__ = ["DUE_ROUTINE_TRIGGERS", "FIRE_ROUTINE_TICK", "CronLoop", "TickOutcome"]

log = logging.getLogger("controlplane.daemon.cron")

# The database's clock decides what is due (one clock for every daemon): the
# scan's default ``at`` is the transaction's now(), returned with each row.
# A time Python cannot represent (year 1 to 9999, with a day's margin for the
# session's time zone) would fail the whole batch as it loads: it comes as
# NULL, with its text, and only its own row is set aside.
DUE_ROUTINE_TRIGGERS = """
SELECT now() AS at, t.trigger_id, t.routine_id, t.cron_expression, t.timezone, t.enabled,
       t.catch_up_policy, t.catch_up_max,
       CASE WHEN t.next_run_at BETWEEN %(lo)s AND %(hi)s THEN t.next_run_at END AS next_run_at,
       CASE WHEN t.last_fired_at BETWEEN %(lo)s AND %(hi)s THEN t.last_fired_at END
           AS last_fired_at,
       CASE WHEN t.next_run_at NOT BETWEEN %(lo)s AND %(hi)s
              OR t.last_fired_at NOT BETWEEN %(lo)s AND %(hi)s
            THEN format('next_run_at %%s, last_fired_at %%s', t.next_run_at, t.last_fired_at)
       END AS unrepresentable
  FROM office.due_routine_triggers(max_rows => %(max_rows)s) t
"""
REPRESENTABLE = {"lo": "0001-01-02 00:00:00+00", "hi": "9999-12-30 00:00:00+00"}
SET_ASIDE = "SELECT office.set_aside('cron', %(row_id)s, %(reason)s, %(sqlstate)s) AS new"
FIRE_ROUTINE_TICK = """
SELECT * FROM office.fire_routine_tick(
    trigger_id => %(trigger_id)s, observed_next_run_at => %(observed)s,
    following_next_run_at => %(following)s, missed_ticks => %(missed_ticks)s,
    missed_since => %(missed_since)s, missed_truncated => %(missed_truncated)s)
"""


class TickOutcome:
    FIRED = "fired"
    LOST = "lost"
    ARMED = "armed"
    REARMED = "rearmed"
    ERROR = "error"


class CronLoop(Loop):
    name = "cron"
    poison_kind = "routine trigger"

    def __init__(
        self, *args: Any, batch: int, registry: CollectorRegistry | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.batch = batch
        self.reporter = Reporter(registry)
        #: How many fires this loop won.
        self.fired = 0

    def iterate(self) -> bool:
        rows = fetch(self.office, DUE_ROUTINE_TRIGGERS, {"max_rows": self.batch, **REPRESENTABLE})
        failed = 0
        for row in rows:
            if self.stop.is_set():
                return False
            if row["unrepresentable"] is not None:
                self.set_aside(row["trigger_id"], f"time out of range: {row['unrepresentable']}")
                continue
            try:
                trigger = RoutineTrigger(
                    id=row["trigger_id"],
                    routine_id=row["routine_id"],
                    cron_expression=row["cron_expression"],
                    timezone=row["timezone"],
                    next_run_at=row["next_run_at"],
                    last_fired_at=row["last_fired_at"],
                    enabled=row["enabled"],
                )
                if trigger.cron_expression is not None:
                    # Uncomputable ticks: set aside here, never re-armed daily.
                    next_tick(trigger.cron_expression, trigger.timezone, row["at"])
                plan = plan_tick(trigger, row["at"], row["catch_up_policy"], row["catch_up_max"])
                if plan is not None:
                    self.step(trigger, plan)
            except RoutineNotFound:
                # Deleted since the scan: nothing left to do or to set aside.
                continue
            except Exception as exc:
                if is_connection_error(exc):
                    raise
                # One trigger's trouble must not hold up the others: a conflict
                # with another transaction is tried again next iteration,
                # anything else comes from the trigger's values and sets it aside.
                failed += 1
                self.metrics.ticks.labels(outcome=TickOutcome.ERROR).inc()
                sqlstate = getattr(exc, "sqlstate", None) or None
                if not self.set_aside(row["trigger_id"], str(exc), sqlstate):
                    log.warning(
                        "cron trigger step failed: %s",
                        exc,
                        extra={"trigger_id": row["trigger_id"], "routine": row["routine_id"]},
                    )
        return len(rows) >= self.batch and failed < len(rows)

    def set_aside(self, trigger_id: str, reason: str, sqlstate: str | None = None) -> bool:
        """``office.set_aside`` for a trigger; False when the failure was
        transient (or the trigger already set aside)."""
        params = {"row_id": trigger_id, "reason": poison_reason(reason), "sqlstate": sqlstate}
        return bool(fetch(self.office, SET_ASIDE, params)[0]["new"])

    def step(self, trigger: RoutineTrigger, plan: TickPlan) -> str:
        """Arm, re-arm, or claim-and-fire one trigger; returns the outcome."""
        if plan.fire is None:
            won = self.office.claim_routine_tick(trigger.id, plan.observed, plan.following)
            outcome = TickOutcome.ARMED if plan.action == "arm" else TickOutcome.REARMED
            if not won:
                outcome = TickOutcome.LOST
            self.metrics.ticks.labels(outcome=outcome).inc()
            return outcome
        fire = plan.fire
        params = {
            "trigger_id": trigger.id,
            "observed": plan.observed,
            "following": plan.following,
            "missed_ticks": fire.missed_ticks,
            "missed_since": fire.missed_since,
            "missed_truncated": fire.missed_truncated,
        }
        row = fetch(self.office, FIRE_ROUTINE_TICK, params)[0]
        if not row["claimed"]:
            self.metrics.ticks.labels(outcome=TickOutcome.LOST).inc()
            return TickOutcome.LOST
        if row["routine_run_id"] is None:
            self.metrics.ticks.labels(outcome=TickOutcome.ERROR).inc()
            routine_run_counter(self.reporter.metrics.registry).labels(
                workspace=row["workspace_id"] or "", source="cron", disposition="failed"
            ).inc()
            log.warning(
                "routine tick dispatch failed; the tick is spent",
                extra={
                    "routine": trigger.routine_id,
                    "trigger_id": trigger.id,
                    "tick": fire.tick.isoformat(),
                    "error": row["error_message"],
                    "sqlstate": row["error_sqlstate"],
                },
            )
            return TickOutcome.ERROR
        result = DispatchRoutineResult.model_validate(
            {k: v for k, v in row.items() if k not in ("claimed", "error_sqlstate")}
        )
        self.report(trigger.routine_id, result)
        self.metrics.ticks.labels(outcome=TickOutcome.FIRED).inc()
        self.fired += 1
        log.info(
            "routine fired",
            extra={
                "routine": trigger.routine_id,
                "trigger_id": trigger.id,
                "tick": fire.tick.isoformat(),
                "status": result.status.value,
                "missed_ticks": fire.missed_ticks,
            },
        )
        return TickOutcome.FIRED

    def report(self, routine_id: str, result: DispatchRoutineResult) -> None:
        """What the clients report for a fire (``Office.dispatch_routine``)."""
        report_dispatch(self.reporter, routine_id, RoutineSource.CRON.value, result)
