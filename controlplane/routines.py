"""Routines and wakeup requests (API.md §4; DOMAIN.md §1.5-§1.6, §2.16-§2.18).

Three parts:

* the typed results of the routine and wakeup functions, for both clients;
* cron: :func:`next_tick` and :func:`latest_tick` compute ticks of a 5-field
  cron expression in a time zone (with cronsim, which follows Debian cron
  across DST changes: a job at a fixed local time that falls into the hour
  skipped in spring runs once, right after the jump; one that falls into the
  hour repeated in autumn runs once, at its first occurrence; a job that
  runs every hour runs every elapsed hour);
* the cron loop's step, callable on its own (``officectl run`` drives it):
  :func:`plan_tick` / :func:`due_fires` decide what one trigger owes at a
  given moment under the routine's catch-up policy, and :func:`fire_due`
  (:func:`fire_due_async`) claims the tick with ``claim_routine_tick`` and
  dispatches it with the claimed tick.

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
30th of February) re-arms the trigger 24 hours later (logged at WARNING).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field, field_validator

from controlplane.errors import InvalidArgument
from controlplane.models import DedupKind, DedupQueue, KeylessCause, _json_value
from controlplane.observability import Reporter

if TYPE_CHECKING:
    from controlplane.aio import AsyncOffice
    from controlplane.client import Office

__all__ = [
    "BROKEN_TRIGGER_RETRY",
    "CatchUpPolicy",
    "ConcurrencyPolicy",
    "DispatchRoutineResult",
    "Fire",
    "FireOutcome",
    "Routine",
    "RoutineRunStatus",
    "RoutineSource",
    "RoutineStatus",
    "RoutineTerminal",
    "RoutineTrigger",
    "TickPlan",
    "WakeupDispatchResult",
    "WakeupDispatchStatus",
    "WakeupOutcome",
    "WakeupResult",
    "WakeupStatus",
    "due_fires",
    "fire_due",
    "fire_due_async",
    "latest_tick",
    "next_tick",
    "plan_tick",
]

log = logging.getLogger("controlplane.routines")

#: How long a trigger whose ticks cannot be computed waits before the next try.
BROKEN_TRIGGER_RETRY = timedelta(hours=24)


# --- enums ----------------------------------------------------------------------


class ConcurrencyPolicy(StrEnum):
    SKIP_IF_ACTIVE = "skip_if_active"
    COALESCE_IF_ACTIVE = "coalesce_if_active"
    ALWAYS_CREATE = "always_create"


class CatchUpPolicy(StrEnum):
    SKIP_MISSED = "skip_missed"
    ENQUEUE_MISSED_WITH_CAP = "enqueue_missed_with_cap"


class RoutineStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    ARCHIVED = "archived"


class RoutineSource(StrEnum):
    CRON = "cron"
    MANUAL = "manual"
    WEBHOOK = "webhook"


class RoutineRunStatus(StrEnum):
    RECEIVED = "received"
    TASK_CREATED = "task_created"
    SKIPPED = "skipped"
    COALESCED = "coalesced"
    FAILED = "failed"
    DONE = "done"
    CANCELLED = "cancelled"


class RoutineTerminal(StrEnum):
    """What ``close_routine_run``/``sync_routine_run_status`` accept
    (``missing`` closes as ``failed``)."""

    DONE = "done"
    FAILED = "failed"
    MISSING = "missing"
    CANCELLED = "cancelled"


class WakeupStatus(StrEnum):
    QUEUED = "queued"
    CLAIMED = "claimed"
    COALESCED = "coalesced"
    SKIPPED = "skipped"
    FAILED = "failed"


class WakeupOutcome(StrEnum):
    """What ``request_wakeup`` did: a new request, or the key's holder."""

    QUEUED = "queued"
    DEDUPED = "deduped"


class WakeupDispatchStatus(StrEnum):
    """What ``dispatch_wakeup`` did (``noop``: the request was not queued)."""

    CLAIMED = "claimed"
    COALESCED = "coalesced"
    SKIPPED = "skipped"
    NOOP = "noop"


# --- rows and results --------------------------------------------------------------


class Routine(BaseModel):
    """A row of ``office.routines``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    workspace_id: str
    name: str
    task_template: dict[str, Any] = Field(default_factory=dict)
    assignee_agent_profile_id: str | None = None
    concurrency_policy: ConcurrencyPolicy
    catch_up_policy: CatchUpPolicy
    catch_up_max: int
    variables: dict[str, Any] = Field(default_factory=dict)
    status: RoutineStatus
    last_run_at: datetime | None = None
    created_at: datetime
    updated_at: datetime

    @field_validator("task_template", "variables", mode="before")
    @classmethod
    def _decode_json(cls, value: Any) -> Any:
        return {} if value is None else _json_value(value)

    @property
    def heavy(self) -> bool:
        """Fires create tasks (the template has a non-empty title); else
        they wake the assignee."""
        return bool(self.task_template.get("title"))


class RoutineTrigger(BaseModel):
    """A row of ``office.routine_triggers``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    routine_id: str
    kind: str = "cron"
    cron_expression: str | None = None
    timezone: str = "UTC"
    next_run_at: datetime | None = None
    last_fired_at: datetime | None = None
    enabled: bool = True
    created_at: datetime | None = None
    updated_at: datetime | None = None


class DispatchRoutineResult(BaseModel):
    """``office.dispatch_routine_result``: the routine run and the status it
    reached. ``linked_task_id`` and ``coalesced_into_run_id`` are ``''`` when
    there is none (as stored); a dispatch failure is ``status`` ``failed``
    with ``error_message``, not an exception."""

    model_config = ConfigDict(frozen=True)

    routine_run_id: str
    status: RoutineRunStatus
    linked_task_id: str = ""
    coalesced_into_run_id: str = ""
    wakeup_request_id: str | None = None
    wakeup_outcome: WakeupOutcome | None = None
    run_id: str | None = None
    idempotency_key: str | None = None
    error_message: str | None = None
    workspace_id: str | None = None

    @property
    def task_created(self) -> bool:
        return self.status is RoutineRunStatus.TASK_CREATED

    @property
    def failed(self) -> bool:
        return self.status is RoutineRunStatus.FAILED


class WakeupResult(BaseModel):
    """``office.wakeup_result``: a new request, or (deduped, durable) and the
    request that holds the key."""

    model_config = ConfigDict(frozen=True)

    outcome: WakeupOutcome
    dedup_kind: DedupKind | None = None
    wakeup_request_id: str

    @property
    def created(self) -> bool:
        return self.outcome is WakeupOutcome.QUEUED


class WakeupDispatchResult(BaseModel):
    """``office.wakeup_dispatch_result``."""

    model_config = ConfigDict(frozen=True)

    status: WakeupDispatchStatus
    run_id: str | None = None


# --- metrics and logs of dispatches --------------------------------------------------

MSG_CREATE_FAILED = "create routine wakeup request"
MSG_DISPATCH_FAILED = "dispatch routine wakeup request"

_metrics_lock = threading.Lock()
_counters: dict[int, tuple[CollectorRegistry, Counter]] = {}


def routine_run_counter(registry: CollectorRegistry) -> Counter:
    """``office_loop_routine_run_total{workspace,source,disposition}`` of
    ``registry``, created on first use."""
    with _metrics_lock:
        entry = _counters.get(id(registry))
        if entry is None or entry[0] is not registry:
            counter = Counter(
                "office_loop_routine_run_total",
                "Routine runs dispatched, by the status they reached.",
                ["workspace", "source", "disposition"],
                registry=registry,
            )
            entry = (registry, counter)
            _counters[id(registry)] = entry
        return entry[1]


def wakeup_reason(source: RoutineSource | str) -> str:
    """The reason of a routine's wakeup request (as ``dispatch_routine`` sets it)."""
    return "routine_dispatch_cron" if str(source) == "cron" else "routine_dispatch_event"


def log_dispatch_failure(routine_id: str, result: DispatchRoutineResult) -> None:
    """WARNING for a failed lightweight fire (DOMAIN.md §4): the create or the
    dispatch of its wakeup request failed."""
    if not result.failed:
        return
    if result.wakeup_request_id is None:
        log.warning(
            MSG_CREATE_FAILED,
            extra={"routine": routine_id, "error": result.error_message},
        )
    else:
        log.warning(
            MSG_DISPATCH_FAILED,
            extra={
                "routine": routine_id,
                "wakeup_id": result.wakeup_request_id,
                "error": result.error_message,
            },
        )


def report_dispatch(
    reporter: Reporter, routine_id: str, source: str, result: DispatchRoutineResult
) -> None:
    """What a client reports for one fire (the database has counted its own):
    the disposition counter, a wakeup dedup, a keyless wakeup, a failure log."""
    routine_run_counter(reporter.metrics.registry).labels(
        workspace=result.workspace_id or "", source=source, disposition=result.status.value
    ).inc()
    reason = wakeup_reason(source)
    if result.wakeup_outcome is WakeupOutcome.DEDUPED:
        reporter.report_dedup(
            queue=DedupQueue.WAKEUP,
            reason=reason,
            kind=DedupKind.DURABLE,
            key=result.idempotency_key,
        )
    if result.wakeup_request_id is not None and result.idempotency_key is None:
        reporter.report_keyless(reason, KeylessCause.UNRESOLVED, "routine_cron_without_tick")
    log_dispatch_failure(routine_id, result)


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


@dataclass(frozen=True)
class FireOutcome:
    """What :func:`fire_due` did: the plan, whether this caller won the
    claim, and the dispatch (only for a won claim with a fire)."""

    plan: TickPlan
    claimed: bool
    dispatch: DispatchRoutineResult | None = None


def fire_due(
    office: Office,
    trigger: RoutineTrigger,
    now: datetime,
    catch_up_policy: CatchUpPolicy | str = CatchUpPolicy.ENQUEUE_MISSED_WITH_CAP,
    catch_up_max: int = 25,
    variables: dict[str, Any] | None = None,
) -> FireOutcome | None:
    """One step of the cron loop for one trigger: plan, claim the tick
    (compare-and-swap: of several loops looking at one trigger exactly one
    wins), and the winner dispatches with the claimed tick. None when the
    trigger owes nothing. Pass the routine's ``catch_up_policy`` and
    ``catch_up_max``."""
    plan = plan_tick(trigger, now, catch_up_policy, catch_up_max)
    if plan is None:
        return None
    claimed = office.claim_routine_tick(trigger.id, plan.observed, plan.following)
    if not claimed or plan.fire is None:
        return FireOutcome(plan, claimed)
    dispatch = office.dispatch_routine(
        trigger.routine_id,
        RoutineSource.CRON,
        variables=variables,
        trigger_id=trigger.id,
        **plan.fire.dispatch_args(),
    )
    return FireOutcome(plan, claimed, dispatch)


async def fire_due_async(
    office: AsyncOffice,
    trigger: RoutineTrigger,
    now: datetime,
    catch_up_policy: CatchUpPolicy | str = CatchUpPolicy.ENQUEUE_MISSED_WITH_CAP,
    catch_up_max: int = 25,
    variables: dict[str, Any] | None = None,
) -> FireOutcome | None:
    """:func:`fire_due` with an :class:`controlplane.aio.AsyncOffice`."""
    plan = plan_tick(trigger, now, catch_up_policy, catch_up_max)
    if plan is None:
        return None
    claimed = await office.claim_routine_tick(trigger.id, plan.observed, plan.following)
    if not claimed or plan.fire is None:
        return FireOutcome(plan, claimed)
    dispatch = await office.dispatch_routine(
        trigger.routine_id,
        RoutineSource.CRON,
        variables=variables,
        trigger_id=trigger.id,
        **plan.fire.dispatch_args(),
    )
    return FireOutcome(plan, claimed, dispatch)
