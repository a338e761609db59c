"""Cron arithmetic, pure (no I/O): the ticks of a routine trigger and what
one trigger owes at a given moment (the cron loop, :mod:`controlplane.daemon.cron`,
claims and fires it with ``office.fire_routine_tick``).

* :func:`next_tick` and :func:`latest_tick` compute ticks of a 5-field cron
  expression in a time zone (with cronsim, which follows Debian cron across
  DST changes: a job at a fixed local time that falls into the hour skipped
  in spring runs once, right after the jump; one that falls into the hour
  repeated in autumn runs once, at its first occurrence; a job that runs
  every hour runs every elapsed hour);
* :func:`plan_tick` / :func:`due_fires` decide what one trigger owes at a
  given moment under the routine's catch-up policy.

Catch-up. When the loop looks at a trigger, every tick from the stored
``next_run_at`` (the *claimed* tick) up to now is due. One tick due: one fire.
Several (the loop was down): still **one** fire, never a burst -

* ``skip_missed``: the fire stands for the latest due tick only and says
  nothing about the others;
* ``enqueue_missed_with_cap``: the fire carries ``missed_ticks`` (how many
  ticks it stands for, at most ``catch_up_max``), ``missed_since`` (the first
  of them) and ``missed_truncated`` (there were more than ``catch_up_max``).

Either way the fire is keyed with the claimed tick, so a redelivery of the
same claim dedups on the wakeup key and the next claim does not. A trigger
that was never armed (``next_run_at`` NULL) is armed with its next tick, and
fires nothing. An expression or time zone that cannot be computed (say, the
30th of February) gets a plan that re-arms the trigger 24 hours later
(logged at WARNING); the daemon's loop sets such a trigger aside instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from controlplane.errors import InvalidArgument
from controlplane.models.routines import CatchUpPolicy, RoutineTrigger

__all__ = [
    "BROKEN_TRIGGER_RETRY",
    "Fire",
    "TickPlan",
    "due_fires",
    "latest_tick",
    "next_tick",
    "plan_tick",
]

# (The logger keeps the name of the module these functions came from, so
# existing log configuration still selects them.)
log = logging.getLogger("controlplane.routines")

#: How long a trigger whose ticks cannot be computed waits before the next try.
BROKEN_TRIGGER_RETRY = timedelta(hours=24)


# --- cron ticks ---------------------------------------------------------------------


def _zone(timezone: str) -> ZoneInfo:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArgument(f"unknown time zone {timezone!r}") from exc


def _aware(name: str, value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument(f"{name} must be timezone-aware, not {value!r}")
    return value


def _cron(cron_expression: str, timezone: str, start: datetime, reverse: bool = False) -> CronSim:
    if len(cron_expression.split()) != 5:
        raise InvalidArgument(
            f"invalid cron expression {cron_expression!r}: expected 5 fields "
            "(minute hour day-of-month month day-of-week)"
        )
    zone = _zone(timezone)
    try:
        return CronSim(cron_expression, start.astimezone(zone), reverse=reverse)
    except CronSimError as exc:
        raise InvalidArgument(f"invalid cron expression {cron_expression!r}: {exc}") from exc


def _step(ticks: CronSim, cron_expression: str) -> datetime:
    try:
        return next(ticks).astimezone(UTC)
    except StopIteration:
        raise InvalidArgument(
            f"cron expression {cron_expression!r} has no tick within 50 years"
        ) from None


def next_tick(cron_expression: str, timezone: str, after: datetime) -> datetime:
    """The first tick of ``cron_expression`` in ``timezone`` strictly after
    ``after``, in UTC. A bad expression or zone is ``InvalidArgument``."""
    ticks = _cron(cron_expression, timezone, _aware("after", after))
    return _step(ticks, cron_expression)


def latest_tick(cron_expression: str, timezone: str, at_or_before: datetime) -> datetime:
    """The last tick of ``cron_expression`` in ``timezone`` at or before
    ``at_or_before``, in UTC."""
    start = _aware("at_or_before", at_or_before) + timedelta(seconds=1)
    ticks = _cron(cron_expression, timezone, start, reverse=True)
    return _step(ticks, cron_expression)


# --- catch-up and the loop's step ---------------------------------------------------------


@dataclass(frozen=True)
class Fire:
    """One fire a trigger owes. ``tick`` is the claimed tick (the trigger's
    ``next_run_at`` when it was looked at): it goes into the routine key.
    ``scheduled_for`` is the latest due tick the fire stands for. The
    ``missed_*`` fields are set only when catching up under
    ``enqueue_missed_with_cap``."""

    tick: datetime
    scheduled_for: datetime
    missed_ticks: int | None = None
    missed_since: datetime | None = None
    missed_truncated: bool | None = None

    def dispatch_args(self) -> dict[str, Any]:
        """The catch-up arguments of ``dispatch_routine`` (claimed_tick and the
        ``missed_*`` values)."""
        return {
            "claimed_tick": self.tick,
            "missed_ticks": self.missed_ticks,
            "missed_since": self.missed_since,
            "missed_truncated": self.missed_truncated,
        }


@dataclass(frozen=True)
class TickPlan:
    """What to do with one trigger now: claim ``observed`` → ``following``
    (``claim_routine_tick``), then dispatch ``fire`` if there is one.
    ``action`` is ``fire``, ``arm`` (never armed: arm, fire nothing) or
    ``rearm`` (ticks cannot be computed: retry after a day)."""

    trigger_id: str
    observed: datetime | None
    following: datetime
    action: str
    fire: Fire | None = None
    error: str | None = None


def plan_tick(
    trigger: RoutineTrigger,
    now: datetime,
    catch_up_policy: CatchUpPolicy | str = CatchUpPolicy.ENQUEUE_MISSED_WITH_CAP,
    catch_up_max: int = 25,
) -> TickPlan | None:
    """The step the cron loop owes ``trigger`` at ``now`` (None: nothing, it
    is disabled or not due). Pure: no I/O."""
    _aware("now", now)
    policy = CatchUpPolicy(catch_up_policy)
    if catch_up_max < 1:
        raise InvalidArgument(f"catch_up_max must be at least 1, not {catch_up_max}")
    if not trigger.enabled or trigger.cron_expression is None:
        return None
    observed = trigger.next_run_at
    if observed is not None and observed > now:
        return None
    expression, zone = trigger.cron_expression, trigger.timezone
    try:
        following = next_tick(expression, zone, now)
        if observed is None:
            return TickPlan(trigger.id, None, following, "arm")
        # The claimed slot, then the cron ticks after it up to now: count at
        # most catch_up_max of them, and one more to know about truncation.
        later: list[datetime] = []
        ticks = _cron(expression, zone, observed)
        while len(later) < catch_up_max:
            tick = _step(ticks, expression)
            if tick > now:
                break
            later.append(tick)
        due = 1 + len(later)
        truncated = due > catch_up_max
        latest = latest_tick(expression, zone, now) if truncated else (later or [observed])[-1]
    except InvalidArgument as exc:
        rearm = max(now, observed or now) + BROKEN_TRIGGER_RETRY
        log.warning(
            "cron trigger cannot be computed; re-armed in 24 hours",
            extra={"trigger_id": trigger.id, "error": exc.message},
        )
        return TickPlan(trigger.id, observed, rearm, "rearm", error=exc.message)
    latest = max(latest, observed)
    if due == 1:
        fire = Fire(tick=observed, scheduled_for=observed)
    elif policy is CatchUpPolicy.SKIP_MISSED:
        fire = Fire(tick=observed, scheduled_for=latest)
    else:
        fire = Fire(
            tick=observed,
            scheduled_for=latest,
            missed_ticks=min(due, catch_up_max),
            missed_since=observed,
            missed_truncated=truncated,
        )
    return TickPlan(trigger.id, observed, following, "fire", fire)


def due_fires(
    trigger: RoutineTrigger,
    now: datetime,
    catch_up_policy: CatchUpPolicy | str = CatchUpPolicy.ENQUEUE_MISSED_WITH_CAP,
    catch_up_max: int = 25,
) -> list[Fire]:
    """The fires ``trigger`` owes at ``now``: none, or exactly one (missed
    ticks collapse into it as the catch-up policy says)."""
    plan = plan_tick(trigger, now, catch_up_policy, catch_up_max)
    return [plan.fire] if plan is not None and plan.fire is not None else []
