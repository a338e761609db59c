"""The sans-IO core both clients share: the protocol between an operation
and the driver that runs it, the parameter and result helpers, and the
schema probe and dedup-index recovery every operation may need.

An operation is a generator (a :data:`Flow`) that *yields* the statements it
needs (:class:`Call`) and receives their rows (:class:`Reply`), or has the
translated error thrown into it; it returns its typed result. :func:`drive`
runs one with a blocking ``perform`` (psycopg, :mod:`controlplane.client.sync`);
:func:`controlplane.client.aio.drive_async` awaits asyncpg instead. So the
statements, control flow (schema probe, dedup-index recovery, bulk fallback),
result building and reporting exist once, in :mod:`controlplane.client.operations`.

Unique violations on ``idx_run_idempotency``/``idx_wakeup_idempotency`` are
outcomes (``deduped``/``durable``), however they reach Python; any other
unique violation is :class:`controlplane.errors.UniqueViolationError`; the
SQLSTATEs of docs/api.md §7 are the typed errors of :mod:`controlplane.errors`
(the drivers translate with :func:`controlplane.errors.wrap_exceptions`).

Mixed versions (docs/domain.md §2.23): on first enqueue each client probes once
whether ``office.runs.entry_triggered`` exists. When it does not (a database
still at schema 0.1.0), one ERROR is logged per *process* (logger
``controlplane.compat``, naming ``runs`` and ``entry_triggered``; see
:func:`controlplane.observability.report_missing_column`) and enqueues omit
the ``entry_triggered`` argument, so they succeed with the exclusion inactive.
Likewise ``heartbeat_run``, ``get_run`` and ``run_keys`` probe once for
``office.runs.heartbeat_at`` (schema 0.4.0, which brings the three functions);
before 0.4.0 they log one ERROR naming ``runs`` and ``heartbeat_at`` and fall
back to reading ``office.runs`` (a heartbeat then only tells whether the claim
still holds: nothing can renew it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError

from controlplane.client.queries import Query
from controlplane.client.queries.core import (
    FIND_RUN_BY_KEY,
    FIND_WAKEUP_BY_KEY,
    PROBE_RUNS_COLUMN,
)
from controlplane.errors import DedupIndexHit, InvalidArgument
from controlplane.models import (
    DedupHit,
    DedupQueue,
    EnqueueRequest,
    EnqueueResult,
    KeylessCause,
)
from controlplane.observability import Reporter, report_missing_column

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

log = logging.getLogger("controlplane.client")


# --- the I/O protocol between core and drivers ------------------------------


@dataclass(frozen=True)
class Call:
    """One statement an operation needs. ``rowcount``: a raw statement
    (:meth:`Office.execute`): the caller needs the number of rows affected,
    not just the rows, and the driver resets the session afterwards."""

    query: Query
    params: Mapping[str, Any] = field(default_factory=dict)
    rowcount: bool = False


@dataclass(frozen=True)
class Reply:
    rows: list[dict[str, Any]]
    rowcount: int = -1


Flow = Generator[Call, Reply, T]


def drive(flow: Flow[T], perform: Callable[[Call], Reply]) -> T:
    """Run an operation with a blocking ``perform``: send each reply back,
    throw each (translated) error in. The async twin is
    :func:`controlplane.client.aio.drive_async`."""
    try:
        call = next(flow)
        while True:
            try:
                reply = perform(call)
            except Exception as exc:
                call = flow.throw(exc)
            else:
                call = flow.send(reply)
    except StopIteration as stop:
        result: T = stop.value
        return result


def rowcount_of(status: str | None) -> int:
    """The row count in a command tag (``INSERT 0 1`` → 1, ``BEGIN`` → -1)."""
    last = (status or "").rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else -1


# --- parameters and results -------------------------------------------------


def as_interval(value: timedelta | float | int) -> timedelta:
    """Intervals are ``timedelta``s; a number means seconds."""
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


def enqueue_params(request: EnqueueRequest, with_entry_triggered: bool) -> dict[str, Any]:
    params: dict[str, Any] = {
        "agent_profile_id": request.agent_profile_id,
        "reason": request.reason,
        "payload": json.dumps(request.payload),
        "idempotency_key": request.idempotency_key,
        "task_id": request.task_id,
        "keyless_cause": None if request.keyless_cause is None else str(request.keyless_cause),
        "keyless_detail": request.keyless_detail,
    }
    if with_entry_triggered:
        params["entry_triggered"] = request.entry_triggered
    if request.governed:
        params.update(
            origin=request.origin,
            cause_run_id=request.cause_run_id,
            priority=request.priority,
            not_before=request.not_before,
        )
    return params


def bulk_element(request: EnqueueRequest, with_entry_triggered: bool) -> dict[str, Any]:
    """One element of ``enqueue_runs``: the request's explicitly set fields."""
    element = request.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    element.setdefault("payload", request.payload)
    if not with_entry_triggered:
        element.pop("entry_triggered", None)
    return element


def enqueue_result(row: Mapping[str, Any]) -> EnqueueResult:
    return EnqueueResult.model_validate(dict(row))


def _invalid(error: ValidationError, where: str = "") -> InvalidArgument:
    """A request the model refuses (a wrong type, an unknown field) is bad
    input, reported like the server's 22023."""
    problems = "; ".join(
        f"{'.'.join(str(part) for part in e['loc']) or 'request'}: {e['msg']}"
        for e in error.errors()
    )
    return InvalidArgument(f"{where}{problems}")


def as_requests(requests: Iterable[EnqueueRequest | Mapping[str, Any]]) -> list[EnqueueRequest]:
    """The elements of a bulk call as requests; a bad one is ``InvalidArgument``
    naming its ordinality, as ``enqueue_runs`` does."""
    converted = []
    for ordinality, request in enumerate(requests, start=1):
        if isinstance(request, EnqueueRequest):
            converted.append(request)
            continue
        try:
            converted.append(EnqueueRequest.model_validate(dict(request)))
        except ValidationError as exc:
            raise _invalid(exc, f"enqueue_runs element {ordinality}: ") from exc
    return converted


def make_request(
    agent_profile_id: str,
    reason: str,
    payload: Mapping[str, Any] | None,
    idempotency_key: str | None,
    task_id: str | None,
    entry_triggered: bool,
    keyless_cause: KeylessCause | str | None,
    keyless_detail: str | None,
    origin: str | None = None,
    cause_run_id: str | None = None,
    priority: int | None = None,
    not_before: datetime | None = None,
) -> EnqueueRequest:
    try:
        return EnqueueRequest(
            agent_profile_id=agent_profile_id,
            reason=reason,
            payload=payload,
            idempotency_key=idempotency_key,
            task_id=task_id,
            entry_triggered=entry_triggered,
            keyless_cause=keyless_cause,
            keyless_detail=keyless_detail,
            origin=origin,
            cause_run_id=cause_run_id,
            priority=priority,
            not_before=not_before,
        )
    except ValidationError as exc:
        raise _invalid(exc) from exc


# --- what every operation may need ------------------------------------------


class OperationsCore:
    """The I/O-free state of a client: its schema-probe answers, its
    reporter, and the building blocks of the operations."""

    #: What a client loses on a schema without a column of ``office.runs``
    #: (logged once per process, at ERROR, by the probe that finds it absent).
    MISSING_COLUMN_CONSEQUENCES: ClassVar[Mapping[str, str]] = {
        "entry_triggered": (
            "runs enqueued with entry_triggered may be coalesced (the exclusion is inactive)"
        ),
        "origin": (
            "enqueue_run takes no origin, cause_run_id, priority or not_before (schema 0.5.0)"
        ),
        "heartbeat_at": (
            "heartbeat_run cannot renew a claim, so recover_stale_runs recovers a run by its"
            " claim time (its threshold must exceed the longest run); get_run reads office.runs"
            " directly and run_keys lists only a run's own key"
        ),
    }

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.columns: dict[str, bool] = {}  # office.runs column -> present, once probed
        self.worker_fence: bool | None = None  # the outcome calls take worker_id, once probed

    def probe(self, column: str = "entry_triggered") -> Flow[bool]:
        """Whether ``office.runs.<column>`` exists; asked once per client
        and column, a probe error counts as absent."""
        present = self.columns.get(column)
        if present is None:
            try:
                reply = yield Call(PROBE_RUNS_COLUMN, {"column": column})
                present = bool(reply.rows)
            except Exception as exc:
                log.warning("column probe office.runs.%s failed: %s", column, exc)
                present = False
            if not present:
                report_missing_column("runs", column, self.MISSING_COLUMN_CONSEQUENCES[column])
            self.columns[column] = present
        return present

    def dedup_hit(self, hit: DedupIndexHit, key: str | None = None) -> Flow[DedupHit]:
        """The outcome of a statement that hit a dedup index: look up who
        holds the key (None when it cannot be read)."""
        queue = DedupQueue(hit.queue)
        key = hit.key if hit.key is not None else key
        holder: Mapping[str, Any] = {}
        if key is not None:
            lookup = FIND_RUN_BY_KEY if queue is DedupQueue.RUNS else FIND_WAKEUP_BY_KEY
            try:
                reply = yield Call(lookup, {"key": key})
                holder = reply.rows[0] if reply.rows else {}
            except Exception as exc:
                log.debug("could not look up the holder of key %r: %s", key, exc)
        return DedupHit(
            queue=queue,
            constraint=hit.constraint_name,
            key=key,
            holder_id=holder.get("id"),
            reason=holder.get("reason"),
            agent_profile_id=holder.get("agent_profile_id"),
        )

    # One statement, one shape of answer.

    def rows(
        self, query: Query, params: Mapping[str, Any] | None = None
    ) -> Flow[list[dict[str, Any]]]:
        reply = yield Call(query, params or {})
        return reply.rows

    def changed(self, query: Query, params: Mapping[str, Any]) -> Flow[bool]:
        reply = yield Call(query, params)
        return bool(reply.rows[0]["changed"])

    def count(self, query: Query, params: Mapping[str, Any]) -> Flow[int]:
        reply = yield Call(query, params)
        return int(reply.rows[0]["count"])

    # One statement, its rows as a result model: every flow that only maps
    # its arguments to the statement's named parameters and validates what
    # comes back is one of these three. (What such flows still share - a
    # dict of ``{"name": name}`` pairs - is each statement's parameter list,
    # data that differs in every one, not logic.)

    def one(self, model: type[M], query: Query, params: Mapping[str, Any]) -> Flow[M]:
        """The statement's single row as ``model`` (the SQL function always
        returns one, or raises)."""
        reply = yield Call(query, params)
        return model.model_validate(reply.rows[0])

    def first(self, model: type[M], query: Query, params: Mapping[str, Any]) -> Flow[M | None]:
        """The statement's row as ``model``, or None without one."""
        reply = yield Call(query, params)
        return model.model_validate(reply.rows[0]) if reply.rows else None

    def models(
        self, model: type[M], query: Query, params: Mapping[str, Any] | None = None
    ) -> Flow[list[M]]:
        """Every row of the statement as ``model``, in its order."""
        reply = yield Call(query, params or {})
        return [model.model_validate(row) for row in reply.rows]

    def value(self, query: Query, params: Mapping[str, Any] | None = None) -> Flow[Any]:
        reply = yield Call(query, params or {})
        return reply.rows[0]["value"]

    def done(self, query: Query, params: Mapping[str, Any]) -> Flow[None]:
        yield Call(query, params)
