"""Metrics and logs of dedup, coalescing and keyless enqueues (docs/domain.md §4).

The database decides every outcome and counts it in its own views
(``office.dedup_stats``, ``office.keyless_stats``); this module is the
process-side layer over those outcomes: prometheus counters and log records,
the same for both clients (one reporting helper, docs/domain.md §2.6).

Counters (labels in this order):

* ``office_run_dedup_total{reason,kind,queue}`` - a wake suppressed, ``kind``
  ``windowed`` or ``durable``, ``queue`` ``runs`` or ``wakeup``; never for a
  coalesce or an error;
* ``office_run_dedup_keyless_total{reason,cause}`` - a producer went keyless
  on purpose (``unresolved`` or ``by_design``);
* ``office_run_coalesced_total{reason}`` - a request merged into a queued run.

Logs on logger ``controlplane.dedup`` (message text exact, fields as
``extra``):

* windowed dedup: INFO ``run deduplicated (windowed)`` - queue, reason, key;
* durable dedup: WARNING ``run deduplicated (durable index)`` - queue, reason,
  key, agent_profile_id (routine, not an anomaly: a late redelivery lands here);
* keyless ``unresolved``: INFO ``run enqueued with no dedup key`` - reason,
  cause, detail; ``by_design`` is counted, not logged;
* coalesced: DEBUG ``run coalesced`` - agent, reason.

A queued run is logged at INFO ``run queued`` (id, agent, reason) on logger
``controlplane.runs``. Nothing here ever logs at ERROR: a dedup is an outcome.

Parent wakes (docs/domain.md §4), plain counters, logs on ``controlplane.parent_wake``:

* ``office_parent_wake_candidates_total`` - each stuck parent a sweep (or
  ``list_stuck_parents``) handed over; DEBUG ``wake.metric.candidate`` -
  parent_task_id;
* ``office_parent_wake_emitted_total`` - a wake whose receipt committed; INFO
  ``wake.metric.emitted`` - parent_task_id, operation_id;
* ``office_parent_wake_assignee_unresolved_total`` - a reconcile declined
  because the assignee is missing or does not accept runs; DEBUG
  ``wake.metric.assignee_unresolved`` - parent_task_id, reason.

Routine dispatches (docs/domain.md §4), logs on ``controlplane.routines``:

* ``office_loop_routine_run_total{workspace,source,disposition}`` - each
  routine run a client's ``dispatch_routine`` or the daemon's cron loop
  dispatched, by the status it reached; counted in one place,
  :meth:`Reporter.report_routine_run`;
* a failed lightweight fire: WARNING ``create routine wakeup request`` or
  ``dispatch routine wakeup request`` - routine, wakeup_id, error.

Every family of metrics is made once per registry
(:func:`controlplane.metrics_registry.per_registry`).
"""

from __future__ import annotations

import logging
import threading

from prometheus_client import CollectorRegistry, Counter

from controlplane.errors import InvalidArgument
from controlplane.metrics_registry import per_registry
from controlplane.models.common import DedupKind, DedupQueue, KeylessCause, QueueOutcome
from controlplane.models.parent_wake import ReconcileResult, SkippedReason
from controlplane.models.routines import DispatchRoutineResult, RoutineSource
from controlplane.models.runs import EnqueueRequest, EnqueueResult
from controlplane.models.wakeups import WakeupOutcome

DEDUP_LOGGER = "controlplane.dedup"
RUNS_LOGGER = "controlplane.runs"

dedup_log = logging.getLogger(DEDUP_LOGGER)
runs_log = logging.getLogger(RUNS_LOGGER)

MSG_WINDOWED = "run deduplicated (windowed)"
MSG_DURABLE = "run deduplicated (durable index)"
MSG_KEYLESS = "run enqueued with no dedup key"
MSG_COALESCED = "run coalesced"
MSG_GUARDED = "run guarded (loop guard)"
MSG_QUEUED = "run queued"


class DedupMetrics:
    """The three counters, registered in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.dedup = Counter(
            "office_run_dedup_total",
            "Wakes suppressed by dedup (windowed lookup or durable unique index).",
            ["reason", "kind", "queue"],
            registry=registry,
        )
        self.keyless = Counter(
            "office_run_dedup_keyless_total",
            "Enqueues a producer made without a dedup key, by cause.",
            ["reason", "cause"],
            registry=registry,
        )
        self.coalesced = Counter(
            "office_run_coalesced_total",
            "Requests merged into an already queued run.",
            ["reason"],
            registry=registry,
        )


def metrics_for(registry: CollectorRegistry | None = None) -> DedupMetrics:
    """The counters of ``registry`` (default: prometheus_client's global
    registry), created on first use and shared by every client using it."""
    return per_registry(DedupMetrics, registry)


# --- parent wakes (docs/domain.md §4) ---------------------------------------------

PARENT_WAKE_LOGGER = "controlplane.parent_wake"
parent_wake_log = logging.getLogger(PARENT_WAKE_LOGGER)

MSG_WAKE_CANDIDATE = "wake.metric.candidate"
MSG_WAKE_EMITTED = "wake.metric.emitted"
MSG_WAKE_ASSIGNEE_UNRESOLVED = "wake.metric.assignee_unresolved"


class ParentWakeMetrics:
    """The three parent-wake counters (no labels), registered in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.candidates = Counter(
            "office_parent_wake_candidates_total",
            "Stuck parents handed to the sweep (list_stuck_parents rows, sweep results).",
            registry=registry,
        )
        self.emitted = Counter(
            "office_parent_wake_emitted_total",
            "Parent wakes whose receipt committed (queued, deduped or coalesced).",
            registry=registry,
        )
        self.assignee_unresolved = Counter(
            "office_parent_wake_assignee_unresolved_total",
            "Parent wakes declined because the assignee is missing or does not accept runs.",
            registry=registry,
        )


def parent_wake_metrics_for(registry: CollectorRegistry | None = None) -> ParentWakeMetrics:
    """The parent-wake counters of ``registry`` (default: the global one),
    created on first use and shared by every client using it."""
    return per_registry(ParentWakeMetrics, registry)


# --- routine dispatches (docs/domain.md §4) ---------------------------------------

ROUTINES_LOGGER = "controlplane.routines"
routines_log = logging.getLogger(ROUTINES_LOGGER)

MSG_CREATE_FAILED = "create routine wakeup request"
MSG_DISPATCH_FAILED = "dispatch routine wakeup request"


def _routine_run_counter(registry: CollectorRegistry) -> Counter:
    return Counter(
        "office_loop_routine_run_total",
        "Routine runs dispatched, by the status they reached.",
        ["workspace", "source", "disposition"],
        registry=registry,
    )


def routine_run_counter(registry: CollectorRegistry | None = None) -> Counter:
    """``office_loop_routine_run_total{workspace,source,disposition}`` of
    ``registry``, created on first use (counted only by
    :meth:`Reporter.report_routine_run`)."""
    return per_registry(_routine_run_counter, registry)


def wakeup_reason(source: RoutineSource | str) -> str:
    """The reason of a routine's wakeup request (as ``dispatch_routine`` sets it)."""
    return "routine_dispatch_cron" if str(source) == "cron" else "routine_dispatch_event"


class Reporter:
    """Counts and logs enqueue outcomes into one registry. Both clients own
    one and call :meth:`report_enqueue` after every enqueue."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.metrics = metrics_for(registry)

    @property
    def parent_wake(self) -> ParentWakeMetrics:
        return parent_wake_metrics_for(self.metrics.registry)

    def report_parent_candidate(self, parent_task_id: str) -> None:
        """One stuck parent handed over for reconciling."""
        self.parent_wake.candidates.inc()
        if parent_wake_log.isEnabledFor(logging.DEBUG):
            parent_wake_log.debug(MSG_WAKE_CANDIDATE, extra={"parent_task_id": parent_task_id})

    def report_reconcile(self, result: ReconcileResult) -> None:
        """A reconcile's outcome: emitted (its receipt committed with the
        statement that returned it) or declined for the assignee."""
        if result.delivered:
            self.parent_wake.emitted.inc()
            parent_wake_log.info(
                MSG_WAKE_EMITTED,
                extra={
                    "parent_task_id": result.parent_task_id,
                    "operation_id": result.operation_id,
                },
            )
        elif result.skipped_reason is SkippedReason.ASSIGNEE_UNRESOLVED:
            self.parent_wake.assignee_unresolved.inc()
            if parent_wake_log.isEnabledFor(logging.DEBUG):
                parent_wake_log.debug(
                    MSG_WAKE_ASSIGNEE_UNRESOLVED,
                    extra={
                        "parent_task_id": result.parent_task_id,
                        "reason": result.skipped_reason.value,
                    },
                )

    def report_routine_run(self, workspace_id: str | None, source: str, disposition: str) -> None:
        """One routine run dispatched (by a client or the cron loop): the one
        place ``office_loop_routine_run_total`` is counted."""
        routine_run_counter(self.metrics.registry).labels(
            workspace=workspace_id or "", source=source, disposition=disposition
        ).inc()

    def report_dispatch(self, routine_id: str, source: str, result: DispatchRoutineResult) -> None:
        """What a client reports for one fire (the database has counted its
        own): the disposition, a wakeup dedup, a keyless wakeup, a failure
        (WARNING, docs/domain.md §4: the create or the dispatch of its wakeup
        request failed)."""
        self.report_routine_run(result.workspace_id, source, result.status.value)
        reason = wakeup_reason(source)
        if result.wakeup_outcome is WakeupOutcome.DEDUPED:
            self.report_dedup(
                queue=DedupQueue.WAKEUP,
                reason=reason,
                kind=DedupKind.DURABLE,
                key=result.idempotency_key,
            )
        if result.wakeup_request_id is not None and result.idempotency_key is None:
            self.report_keyless(reason, KeylessCause.UNRESOLVED, "routine_cron_without_tick")
        if not result.failed:
            return
        if result.wakeup_request_id is None:
            routines_log.warning(
                MSG_CREATE_FAILED, extra={"routine": routine_id, "error": result.error_message}
            )
        else:
            routines_log.warning(
                MSG_DISPATCH_FAILED,
                extra={
                    "routine": routine_id,
                    "wakeup_id": result.wakeup_request_id,
                    "error": result.error_message,
                },
            )

    def report_enqueue(
        self,
        request: EnqueueRequest,
        result: EnqueueResult,
        queue: DedupQueue = DedupQueue.RUNS,
    ) -> None:
        """Report one enqueue: the keyless cause it declared (if any), then
        its outcome."""
        # The server has validated the cause by now; '' means "none", as in SQL.
        if request.keyless_cause and request.keyless:
            self.report_keyless(request.reason, request.keyless_cause, request.keyless_detail)
        if result.outcome is QueueOutcome.DEDUPED:
            self.report_dedup(
                queue=queue,
                reason=request.reason,
                kind=result.dedup_kind or DedupKind.DURABLE,
                key=request.idempotency_key,
                agent_profile_id=request.agent_profile_id,
            )
        elif result.outcome is QueueOutcome.COALESCED:
            self.metrics.coalesced.labels(reason=request.reason).inc()
            if dedup_log.isEnabledFor(logging.DEBUG):
                dedup_log.debug(
                    MSG_COALESCED,
                    extra={
                        "agent": request.agent_profile_id,
                        "reason": request.reason,
                        "run_id": result.run_id,
                    },
                )
        elif result.outcome is QueueOutcome.GUARDED:
            # The server counted it (dedup_stats kind guarded) and wrote a
            # wake decision; a cascade cut short is worth an operator's look.
            runs_log.warning(
                MSG_GUARDED,
                extra={
                    "agent": request.agent_profile_id,
                    "reason": request.reason,
                    "cause_run_id": request.cause_run_id,
                },
            )
        elif runs_log.isEnabledFor(logging.INFO):
            runs_log.info(
                MSG_QUEUED,
                extra={
                    "id": result.run_id,
                    "agent": request.agent_profile_id,
                    "reason": request.reason,
                },
            )

    def report_dedup(
        self,
        *,
        queue: DedupQueue | str,
        reason: str,
        kind: DedupKind | str,
        key: str | None,
        agent_profile_id: str | None = None,
    ) -> None:
        """Count and log one suppressed wake."""
        kind = DedupKind(kind)
        queue = DedupQueue(queue)
        self.metrics.dedup.labels(reason=reason, kind=kind.value, queue=queue.value).inc()
        if kind is DedupKind.WINDOWED:
            dedup_log.info(MSG_WINDOWED, extra={"queue": queue.value, "reason": reason, "key": key})
        else:
            dedup_log.warning(
                MSG_DURABLE,
                extra={
                    "queue": queue.value,
                    "reason": reason,
                    "key": key,
                    "agent_profile_id": agent_profile_id,
                },
            )

    def report_keyless(
        self, reason: str, cause: KeylessCause | str, detail: str | None = None
    ) -> None:
        """``ReportKeylessEnqueue``: a producer decided to enqueue without a
        key. ``unresolved`` is counted and logged at INFO; ``by_design`` is
        counted only. An unknown cause is ``InvalidArgument`` (22023)."""
        try:
            keyless_cause = KeylessCause(cause)
        except ValueError:
            raise InvalidArgument(
                f"unknown keyless cause {cause!r} (expected unresolved or by_design)"
            ) from None
        self.metrics.keyless.labels(reason=reason, cause=keyless_cause.value).inc()
        if keyless_cause is KeylessCause.UNRESOLVED:
            dedup_log.info(
                MSG_KEYLESS,
                extra={"reason": reason, "cause": keyless_cause.value, "detail": detail or ""},
            )


def report_enqueue(
    request: EnqueueRequest,
    result: EnqueueResult,
    *,
    queue: DedupQueue = DedupQueue.RUNS,
    registry: CollectorRegistry | None = None,
) -> None:
    """Module-level form of :meth:`Reporter.report_enqueue`."""
    Reporter(registry).report_enqueue(request, result, queue)


def report_keyless(
    reason: str,
    cause: KeylessCause | str,
    detail: str | None = None,
    *,
    registry: CollectorRegistry | None = None,
) -> None:
    """Module-level form of :meth:`Reporter.report_keyless`."""
    Reporter(registry).report_keyless(reason, cause, detail)


# --- schema compatibility (docs/domain.md §2.23) -------------------------------

COMPAT_LOGGER = "controlplane.compat"
compat_log = logging.getLogger(COMPAT_LOGGER)

_missing_column_lock = threading.Lock()
_missing_columns_logged: set[tuple[str, str]] = set()


def report_missing_column(table: str, column: str, consequence: str) -> bool:
    """Log at ERROR that ``office.<table>.<column>`` is absent - exactly once
    per process (docs/domain.md §4: "exactly once per process start"), however many
    clients probe. Returns whether this call logged."""
    with _missing_column_lock:
        if (table, column) in _missing_columns_logged:
            return False
        _missing_columns_logged.add((table, column))
    compat_log.error(
        "office schema is missing column %s.%s: %s; upgrade the database "
        "(ALTER EXTENSION office UPDATE or officectl migrate)",
        table,
        column,
        consequence,
        extra={"table": table, "column": column},
    )
    return True


def forget_missing_columns() -> None:
    """Forget which missing columns were logged, so the next probe logs again
    (for tests, and for a process that re-points its clients at another
    database)."""
    with _missing_column_lock:
        _missing_columns_logged.clear()
