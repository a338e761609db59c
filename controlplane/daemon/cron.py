"""The cron loop: fires routines at their ticks.

Each iteration lists the due triggers (``office.due_routine_triggers``: not
armed yet, or ``next_run_at`` passed, routines ``active``), plans each with
:func:`controlplane.cron.plan_tick` - the next tick, and the catch-up
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
triggers that can fire. (A plan of :func:`controlplane.cron.plan_tick` for
an uncomputable trigger re-arms it a day later instead.)
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry

from controlplane.cron import TickPlan, next_tick, plan_tick
from controlplane.daemon.loop import Loop, is_connection_error
from controlplane.errors import RoutineNotFound
from controlplane.event_subscriber import poison_reason
from controlplane.models import DispatchRoutineResult, DueTrigger, RoutineSource, RoutineTrigger
from controlplane.observability import Reporter

__all__ = ["CronLoop", "TickOutcome"]

log = logging.getLogger("controlplane.daemon.cron")


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
        rows = self.office.due_routine_triggers(self.batch)
        failed = 0
        for row in rows:
            if self.stop.is_set():
                return False
            if row.unrepresentable is not None:
                self.set_aside(row.trigger_id, f"time out of range: {row.unrepresentable}")
                continue
            try:
                self.look_at(row)
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
                if not self.set_aside(row.trigger_id, str(exc), sqlstate):
                    log.warning(
                        "cron trigger step failed: %s",
                        exc,
                        extra={"trigger_id": row.trigger_id, "routine": row.routine_id},
                    )
        return len(rows) >= self.batch and failed < len(rows)

    def look_at(self, row: DueTrigger) -> None:
        """Plan one scanned trigger at the scan's time and take its step."""
        trigger = row.trigger()
        if trigger.cron_expression is not None:
            # Uncomputable ticks: set aside here, never re-armed daily.
            next_tick(trigger.cron_expression, trigger.timezone, row.at)
        plan = plan_tick(trigger, row.at, row.catch_up_policy, row.catch_up_max)
        if plan is not None:
            self.step(trigger, plan)

    def set_aside(self, trigger_id: str, reason: str, sqlstate: str | None = None) -> bool:
        """``office.set_aside`` for a trigger; False when the failure was
        transient (or the trigger already set aside)."""
        return self.office.set_aside(self.name, trigger_id, poison_reason(reason), sqlstate)

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
        assert plan.observed is not None  # a fire is only planned for an armed trigger
        tick = self.office.fire_routine_tick(
            trigger.id,
            plan.observed,
            plan.following,
            fire.missed_ticks,
            fire.missed_since,
            fire.missed_truncated,
        )
        if not tick.claimed:
            self.metrics.ticks.labels(outcome=TickOutcome.LOST).inc()
            return TickOutcome.LOST
        result = tick.dispatch
        if result is None:
            self.metrics.ticks.labels(outcome=TickOutcome.ERROR).inc()
            self.reporter.report_routine_run(tick.workspace_id, RoutineSource.CRON, "failed")
            log.warning(
                "routine tick dispatch failed; the tick is spent",
                extra={
                    "routine": trigger.routine_id,
                    "trigger_id": trigger.id,
                    "tick": fire.tick.isoformat(),
                    "error": tick.error_message,
                    "sqlstate": tick.error_sqlstate,
                },
            )
            return TickOutcome.ERROR
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
        self.reporter.report_dispatch(routine_id, RoutineSource.CRON.value, result)
