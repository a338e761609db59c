"""The synchronous client (psycopg 3 + psycopg_pool) and everything both
clients share.

Both :class:`Office` and :class:`controlplane.aio.AsyncOffice` are thin
drivers over one I/O-free core, :class:`Operations`: each operation is a
generator that *yields* the statements it needs (:class:`Call`) and receives
their rows (:class:`Reply`), or has the translated error thrown into it. The
sync driver answers with psycopg, the async one with asyncpg; queries, control
flow (schema probe, dedup-index recovery, bulk fallback), result building and
reporting exist once.

Every statement is a named module-level :class:`Query` written in psycopg's
``%(name)s`` style and calls the SQL API in named notation; the asyncpg form
(``$n``) is derived from it.

Unique violations on ``idx_run_idempotency``/``idx_wakeup_idempotency`` are
outcomes (``deduped``/``durable``), however they reach Python; any other
unique violation is :class:`controlplane.errors.UniqueViolationError`; the
SQLSTATEs of API.md §7 are the typed errors of :mod:`controlplane.errors`.

Connections run in autocommit: every call is its own transaction (the SQL
functions are atomic on their own). A pool passed in gets its connections
switched to autocommit when they are checked out.

Mixed versions (DOMAIN.md §2.23): on first enqueue each client probes once
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
import re
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, ClassVar, TypeVar

import psycopg
from prometheus_client import CollectorRegistry
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool
from pydantic import ValidationError

from controlplane.errors import DedupIndexHit, InvalidArgument, OfficeError, wrap_exceptions
from controlplane.models import (
    CHILDREN_COMPLETED,
    ActorType,
    Agent,
    AssignResult,
    BulkEnqueueItem,
    CatchUpPolicy,
    ConcurrencyPolicy,
    DedupHit,
    DedupKind,
    DedupQueue,
    DispatchRoutineResult,
    EnqueueRequest,
    EnqueueResult,
    Event,
    ExecuteResult,
    KeylessCause,
    ReconcileResult,
    Routine,
    RoutineSource,
    RoutineTerminal,
    RoutineTrigger,
    Run,
    RunKey,
    StuckParent,
    Task,
    TaskResult,
    TaskState,
    TaskTerminalStatus,
    WakeupDispatchResult,
    WakeupOutcome,
    WakeupResult,
)
from controlplane.observability import Reporter, report_missing_column

T = TypeVar("T")

log = logging.getLogger("controlplane.client")


# --- statements ---------------------------------------------------------------

_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s")


@dataclass(frozen=True)
class Query:
    """One SQL statement in psycopg form (``%(name)s``) and its asyncpg form
    (``$n``, with the parameter names in ``$n`` order)."""

    text: str
    parametrized: bool = True
    asyncpg_text: str = field(init=False)
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        names: list[str] = []
        if self.parametrized:

            def number(match: re.Match[str]) -> str:
                name = match.group(1)
                if name is None:
                    return "%"
                if name not in names:
                    names.append(name)
                return f"${names.index(name) + 1}"

            converted = _PLACEHOLDER.sub(number, self.text)
        else:
            converted = self.text
        object.__setattr__(self, "asyncpg_text", converted)
        object.__setattr__(self, "names", tuple(names))

    def asyncpg_args(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]


# The SQL a client builds itself runs on the caller's search_path, which may
# put a schema someone else controls first: it names pg_catalog for every
# function and operator (ARCHITECTURE.md, principle 8). pg_attribute, not
# information_schema.columns: the latter hides the columns of a table the
# role has no privilege on, and no office role may read office.runs directly.
PROBE_RUNS_COLUMN = Query(
    "SELECT 1 FROM pg_catalog.pg_attribute"
    " WHERE attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('office.runs')"
    " AND attname OPERATOR(pg_catalog.=) %(column)s"
    " AND attnum OPERATOR(pg_catalog.>) 0 AND NOT attisdropped"
)

ENQUEUE_RUN = Query(
    "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run("
    "agent_profile_id => %(agent_profile_id)s, reason => %(reason)s,"
    " payload => %(payload)s::pg_catalog.jsonb, idempotency_key => %(idempotency_key)s,"
    " task_id => %(task_id)s, entry_triggered => %(entry_triggered)s,"
    " keyless_cause => %(keyless_cause)s, keyless_detail => %(keyless_detail)s)"
)

# The same call for a schema without runs.entry_triggered (0.1.0).
ENQUEUE_RUN_WITHOUT_ENTRY_TRIGGERED = Query(
    "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run("
    "agent_profile_id => %(agent_profile_id)s, reason => %(reason)s,"
    " payload => %(payload)s::pg_catalog.jsonb, idempotency_key => %(idempotency_key)s,"
    " task_id => %(task_id)s,"
    " keyless_cause => %(keyless_cause)s, keyless_detail => %(keyless_detail)s)"
)

ENQUEUE_RUNS = Query(
    "SELECT ordinality, outcome, dedup_kind, run_id"
    " FROM office.enqueue_runs(requests => %(requests)s::pg_catalog.jsonb)"
)

CLAIM_RUN = Query(
    "SELECT * FROM office.claim_run("
    "worker_id => %(worker_id)s, agent_profile_id => %(agent_profile_id)s)"
)

FINISH_RUN = Query(
    "SELECT office.finish_run(run_id => %(run_id)s, attempt => %(attempt)s) AS changed"
)

FAIL_RUN = Query(
    "SELECT office.fail_run(run_id => %(run_id)s, attempt => %(attempt)s,"
    " error_message => %(error_message)s) AS changed"
)

RETRY_RUN = Query(
    "SELECT office.retry_run(run_id => %(run_id)s, attempt => %(attempt)s,"
    " delay => %(delay)s) AS changed"
)

CANCEL_RUN = Query(
    "SELECT office.cancel_run(run_id => %(run_id)s, reason => %(reason)s) AS changed"
)

RECOVER_STALE_RUNS = Query(
    "SELECT office.recover_stale_runs(older_than => %(older_than)s) AS count"
)

HEARTBEAT_RUN = Query(
    "SELECT office.heartbeat_run(run_id => %(run_id)s, attempt => %(attempt)s) AS changed"
)

GET_RUN = Query("SELECT * FROM office.get_run(run_id => %(run_id)s)")

RUN_KEYS = Query(
    "SELECT idempotency_key, recorded_at, how FROM office.run_keys(run_id => %(run_id)s)"
)

# The same three for a schema without leases (before 0.4.0): no heartbeat to
# renew, so "still yours?" is all a worker can be told; the run's row is read
# directly (which only the table's owner may do); its own key is the only key
# it serves there.
HEARTBEAT_RUN_WITHOUT_LEASES = Query(
    "SELECT EXISTS (SELECT FROM office.runs WHERE id = %(run_id)s"
    " AND status = 'claimed' AND attempt = %(attempt)s) AS changed"
)
GET_RUN_WITHOUT_LEASES = Query("SELECT * FROM office.runs WHERE id = %(run_id)s")
RUN_KEYS_WITHOUT_LEASES = Query(
    "SELECT idempotency_key, requested_at AS recorded_at, 'own' AS how FROM office.runs"
    " WHERE id = %(run_id)s AND idempotency_key IS NOT NULL"
)

PRUNE_RUNS = Query("SELECT office.prune_runs(older_than => %(older_than)s) AS count")

UPSERT_AGENT = Query(
    "SELECT * FROM office.upsert_agent(id => %(id)s, workspace_id => %(workspace_id)s,"
    " name => %(name)s, status => %(status)s)"
)

SET_AGENT_STATUS = Query(
    "SELECT * FROM office.set_agent_status(id => %(id)s, status => %(status)s)"
)

CREATE_TASK = Query(
    "SELECT task_id, assignment_generation, outcome, dedup_kind, run_id FROM office.create_task("
    "workspace_id => %(workspace_id)s, id => %(id)s, title => %(title)s,"
    " parent_id => %(parent_id)s, workflow_step_id => %(workflow_step_id)s,"
    " assignee_agent_profile_id => %(assignee_agent_profile_id)s, state => %(state)s,"
    " is_office => %(is_office)s, is_ephemeral => %(is_ephemeral)s)"
)

ASSIGN_TASK = Query(
    "SELECT assignment_generation, interrupt, outcome, dedup_kind, run_id FROM office.assign_task("
    "task_id => %(task_id)s, assignee_agent_profile_id => %(assignee_agent_profile_id)s,"
    " actor_id => %(actor_id)s, actor_type => %(actor_type)s)"
)

MOVE_TASK = Query("SELECT * FROM office.move_task(task_id => %(task_id)s, state => %(state)s)")

ARCHIVE_TASK = Query("SELECT * FROM office.archive_task(task_id => %(task_id)s)")

GET_TASK = Query("SELECT * FROM office.get_task(task_id => %(task_id)s)")

ADD_BLOCKER = Query(
    "SELECT office.add_blocker(task_id => %(task_id)s, blocker_task_id => %(blocker_task_id)s)"
)

REMOVE_BLOCKER = Query(
    "SELECT office.remove_blocker(task_id => %(task_id)s, blocker_task_id => %(blocker_task_id)s)"
)

TASK_TERMINAL_STATUS = Query("SELECT office.task_terminal_status(task_id => %(task_id)s) AS value")

IS_TASK_TERMINAL = Query("SELECT office.is_task_terminal(task_id => %(task_id)s) AS value")

CHILD_SET_KEY = Query("SELECT office.child_set_key(parent_task_id => %(parent_task_id)s) AS value")

CHILD_GENERATION = Query(
    "SELECT office.child_generation(parent_task_id => %(parent_task_id)s) AS value"
)

LIST_STUCK_PARENTS = Query(
    "SELECT parent_task_id, assignee_agent_profile_id, workflow_step_id, child_set_key,"
    " newest_child_updated_at"
    " FROM office.list_stuck_parents(max_rows => %(max_rows)s, reason => %(reason)s)"
)

RECONCILE_PARENT = Query(
    "SELECT parent_task_id, delivered, operation_id, outcome, dedup_kind, run_id, skipped_reason"
    " FROM office.reconcile_parent(parent_task_id => %(parent_task_id)s,"
    " child_set_key => %(child_set_key)s,"
    " newest_child_updated_at => %(newest_child_updated_at)s)"
)

SWEEP_STUCK_PARENTS = Query(
    "SELECT parent_task_id, delivered, operation_id, outcome, dedup_kind, run_id, skipped_reason"
    " FROM office.sweep_stuck_parents(max_rows => %(max_rows)s)"
)

CLAIM_EVENTS = Query(
    "SELECT * FROM office.claim_events(consumer => %(consumer)s, max_rows => %(max_rows)s,"
    " visibility => %(visibility)s)"
)

ACK_EVENTS = Query("SELECT office.ack_events(ids => %(ids)s::bigint[]) AS count")

CREATE_ROUTINE = Query(
    "SELECT * FROM office.create_routine("
    "workspace_id => %(workspace_id)s, name => %(name)s,"
    " task_template => %(task_template)s::pg_catalog.jsonb,"
    " assignee_agent_profile_id => %(assignee_agent_profile_id)s,"
    " concurrency_policy => %(concurrency_policy)s, variables => %(variables)s::pg_catalog.jsonb,"
    " id => %(id)s, catch_up_policy => %(catch_up_policy)s, catch_up_max => %(catch_up_max)s)"
)

ADD_ROUTINE_TRIGGER = Query(
    "SELECT * FROM office.add_routine_trigger("
    "routine_id => %(routine_id)s, cron_expression => %(cron_expression)s,"
    " timezone => %(timezone)s, next_run_at => %(next_run_at)s, id => %(id)s)"
)

CLAIM_ROUTINE_TICK = Query(
    "SELECT office.claim_routine_tick(trigger_id => %(trigger_id)s,"
    " observed_next_run_at => %(observed_next_run_at)s,"
    " following_next_run_at => %(following_next_run_at)s) AS changed"
)

DISPATCH_ROUTINE = Query(
    "SELECT routine_run_id, status, linked_task_id, coalesced_into_run_id, wakeup_request_id,"
    " wakeup_outcome, run_id, idempotency_key, error_message, workspace_id"
    " FROM office.dispatch_routine("
    "routine_id => %(routine_id)s, source => %(source)s,"
    " variables => %(variables)s::pg_catalog.jsonb,"
    " trigger_id => %(trigger_id)s, claimed_tick => %(claimed_tick)s,"
    " explicit_key => %(explicit_key)s, missed_ticks => %(missed_ticks)s,"
    " missed_since => %(missed_since)s, missed_truncated => %(missed_truncated)s)"
)

CLOSE_ROUTINE_RUN = Query(
    "SELECT office.close_routine_run(routine_run_id => %(routine_run_id)s,"
    " terminal => %(terminal)s) AS changed"
)

SYNC_ROUTINE_RUN_STATUS = Query(
    "SELECT office.sync_routine_run_status(task_id => %(task_id)s,"
    " terminal => %(terminal)s) AS changed"
)

REQUEST_WAKEUP = Query(
    "SELECT outcome, dedup_kind, wakeup_request_id FROM office.request_wakeup("
    "agent_profile_id => %(agent_profile_id)s, source => %(source)s, reason => %(reason)s,"
    " payload => %(payload)s::pg_catalog.jsonb, idempotency_key => %(idempotency_key)s)"
)

DISPATCH_WAKEUP = Query(
    "SELECT status, run_id FROM office.dispatch_wakeup(wakeup_request_id => %(wakeup_request_id)s)"
)

FAIL_WAKEUP = Query(
    "SELECT office.fail_wakeup(wakeup_request_id => %(wakeup_request_id)s,"
    " reason => %(reason)s) AS changed"
)

# Who holds a key that a statement collided with (raw INSERT, older schema).
FIND_RUN_BY_KEY = Query(
    "SELECT id, agent_profile_id, reason FROM office.runs"
    " WHERE idempotency_key OPERATOR(pg_catalog.=) %(key)s"
)
FIND_WAKEUP_BY_KEY = Query(
    "SELECT id, agent_profile_id, reason FROM office.wakeup_requests"
    " WHERE idempotency_key OPERATOR(pg_catalog.=) %(key)s"
)

# What a connection that ran raw statements gets before it is reused (the
# default reset of asyncpg pools; psycopg allows several statements here
# because there are no parameters).
RESET_SESSION = Query(
    "CLOSE ALL; UNLISTEN *; RESET ALL; SELECT pg_catalog.pg_advisory_unlock_all()",
    parametrized=False,
)

# The bulk fallback's transaction (see Operations.enqueue_each).
BEGIN = Query("BEGIN")
COMMIT = Query("COMMIT")
ROLLBACK = Query("ROLLBACK")
SAVEPOINT_ELEMENT = Query("SAVEPOINT office_enqueue_element")
ROLLBACK_TO_ELEMENT = Query("ROLLBACK TO SAVEPOINT office_enqueue_element")


# --- the I/O protocol between core and drivers ------------------------------


@dataclass(frozen=True)
class Call:
    """One statement an operation needs. ``rowcount``: the caller needs the
    number of rows affected (raw statements), not just the rows."""

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
    :func:`controlplane.aio.drive_async`."""
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
        )
    except ValidationError as exc:
        raise _invalid(exc) from exc


# --- the operations, once for both clients ----------------------------------


class Operations:
    """The I/O-free half of a client: its schema-probe state, its reporter,
    and one flow per operation."""

    #: What a client loses on a schema without a column of ``office.runs``
    #: (logged once per process, at ERROR, by the probe that finds it absent).
    MISSING_COLUMN_CONSEQUENCES: ClassVar[Mapping[str, str]] = {
        "entry_triggered": (
            "runs enqueued with entry_triggered may be coalesced (the exclusion is inactive)"
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

    # schema probe ---------------------------------------------------------

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

    # dedup-index recovery -------------------------------------------------

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

    # the queue ------------------------------------------------------------

    def enqueue_run(self, request: EnqueueRequest) -> Flow[EnqueueResult]:
        with_entry = yield from self.probe("entry_triggered")
        query = ENQUEUE_RUN if with_entry else ENQUEUE_RUN_WITHOUT_ENTRY_TRIGGERED
        try:
            reply = yield Call(query, enqueue_params(request, with_entry))
            result = enqueue_result(reply.rows[0])
        except DedupIndexHit as hit:  # a schema whose enqueue_run lets it through
            dedup = yield from self.dedup_hit(hit, request.idempotency_key)
            result = dedup.as_enqueue_result()
        self.reporter.report_enqueue(request, result)
        return result

    def enqueue_runs(self, requests: list[EnqueueRequest]) -> Flow[list[BulkEnqueueItem]]:
        if not requests:
            return []
        with_entry = yield from self.probe("entry_triggered")
        elements = [bulk_element(request, with_entry) for request in requests]
        try:
            reply = yield Call(ENQUEUE_RUNS, {"requests": json.dumps(elements)})
            items = [BulkEnqueueItem.model_validate(row) for row in reply.rows]
        except DedupIndexHit:  # a schema whose enqueue_runs lets it through
            items = yield from self.enqueue_each(requests, with_entry)
        for item in items:
            self.reporter.report_enqueue(requests[item.ordinality - 1], item)
        return items

    def enqueue_each(
        self, requests: list[EnqueueRequest], with_entry: bool
    ) -> Flow[list[BulkEnqueueItem]]:
        """The bulk call element by element, in one transaction, each element
        behind a savepoint so a dedup-index hit becomes its outcome; any
        other error rolls everything back (the bulk contract)."""
        query = ENQUEUE_RUN if with_entry else ENQUEUE_RUN_WITHOUT_ENTRY_TRIGGERED
        items: list[BulkEnqueueItem] = []
        yield Call(BEGIN)
        try:
            for ordinality, request in enumerate(requests, start=1):
                yield Call(SAVEPOINT_ELEMENT)
                try:
                    reply = yield Call(query, enqueue_params(request, with_entry))
                    result = enqueue_result(reply.rows[0])
                except DedupIndexHit as hit:
                    yield Call(ROLLBACK_TO_ELEMENT)
                    dedup = yield from self.dedup_hit(hit, request.idempotency_key)
                    result = dedup.as_enqueue_result()
                except OfficeError as exc:
                    raise type(exc)(
                        f"element {ordinality}: {exc.message}", sqlstate=exc.sqlstate
                    ) from exc
                items.append(BulkEnqueueItem(ordinality=ordinality, **result.model_dump()))
            yield Call(COMMIT)
        except Exception:
            yield Call(ROLLBACK)
            raise
        return items

    def claim_run(self, worker_id: str | None, agent_profile_id: str | None) -> Flow[Run | None]:
        reply = yield Call(
            CLAIM_RUN, {"worker_id": worker_id, "agent_profile_id": agent_profile_id}
        )
        return Run.model_validate(reply.rows[0]) if reply.rows else None

    # Leases and run lookups (0.4.0), with their fallbacks on an older schema.

    def heartbeat_run(self, run_id: str, attempt: int) -> Flow[bool]:
        leases = yield from self.probe("heartbeat_at")
        query = HEARTBEAT_RUN if leases else HEARTBEAT_RUN_WITHOUT_LEASES
        return (yield from self.changed(query, {"run_id": run_id, "attempt": attempt}))

    def get_run(self, run_id: str) -> Flow[Run | None]:
        leases = yield from self.probe("heartbeat_at")
        reply = yield Call(GET_RUN if leases else GET_RUN_WITHOUT_LEASES, {"run_id": run_id})
        return Run.model_validate(reply.rows[0]) if reply.rows else None

    def run_keys(self, run_id: str) -> Flow[list[RunKey]]:
        leases = yield from self.probe("heartbeat_at")
        reply = yield Call(RUN_KEYS if leases else RUN_KEYS_WITHOUT_LEASES, {"run_id": run_id})
        return [RunKey.model_validate(row) for row in reply.rows]

    def changed(self, query: Query, params: Mapping[str, Any]) -> Flow[bool]:
        reply = yield Call(query, params)
        return bool(reply.rows[0]["changed"])

    def count(self, query: Query, params: Mapping[str, Any]) -> Flow[int]:
        reply = yield Call(query, params)
        return int(reply.rows[0]["count"])

    def agent(self, query: Query, params: Mapping[str, Any]) -> Flow[Agent]:
        reply = yield Call(query, params)
        return Agent.model_validate(reply.rows[0])

    def value(self, query: Query, params: Mapping[str, Any]) -> Flow[Any]:
        reply = yield Call(query, params)
        return reply.rows[0]["value"]

    def done(self, query: Query, params: Mapping[str, Any]) -> Flow[None]:
        yield Call(query, params)

    # tasks and events -----------------------------------------------------

    def create_task(
        self,
        workspace_id: str,
        id: str | None,
        title: str,
        parent_id: str | None,
        workflow_step_id: str | None,
        assignee_agent_profile_id: str | None,
        state: TaskState | str,
        is_office: bool,
        is_ephemeral: bool,
    ) -> Flow[TaskResult]:
        params = {
            "workspace_id": workspace_id,
            "id": id,
            "title": title,
            "parent_id": parent_id,
            "workflow_step_id": workflow_step_id,
            "assignee_agent_profile_id": assignee_agent_profile_id,
            "state": str(state),
            "is_office": is_office,
            "is_ephemeral": is_ephemeral,
        }
        reply = yield Call(CREATE_TASK, params)
        return TaskResult.model_validate(reply.rows[0])

    def assign_task(
        self,
        task_id: str,
        assignee_agent_profile_id: str | None,
        actor_id: str | None,
        actor_type: ActorType | str,
    ) -> Flow[AssignResult]:
        params = {
            "task_id": task_id,
            "assignee_agent_profile_id": assignee_agent_profile_id,
            "actor_id": actor_id,
            "actor_type": str(actor_type),
        }
        reply = yield Call(ASSIGN_TASK, params)
        return AssignResult.model_validate(reply.rows[0])

    def task(self, query: Query, params: Mapping[str, Any]) -> Flow[Task]:
        reply = yield Call(query, params)
        return Task.model_validate(reply.rows[0])

    def get_task(self, task_id: str) -> Flow[Task | None]:
        reply = yield Call(GET_TASK, {"task_id": task_id})
        return Task.model_validate(reply.rows[0]) if reply.rows else None

    def claim_events(
        self, consumer: str, max_rows: int, visibility: timedelta | float
    ) -> Flow[list[Event]]:
        params = {"consumer": consumer, "max_rows": max_rows, "visibility": as_interval(visibility)}
        reply = yield Call(CLAIM_EVENTS, params)
        return [Event.model_validate(row) for row in reply.rows]

    def ack_events(self, ids: Iterable[int]) -> Flow[int]:
        return (yield from self.count(ACK_EVENTS, {"ids": list(ids)}))

    def report_keyless(self, reason: str, cause: KeylessCause | str, detail: str | None) -> None:
        self.reporter.report_keyless(reason, cause, detail)

    # parent wakes -----------------------------------------------------------

    def list_stuck_parents(self, max_rows: int, reason: str) -> Flow[list[StuckParent]]:
        reply = yield Call(LIST_STUCK_PARENTS, {"max_rows": max_rows, "reason": reason})
        return [StuckParent.model_validate(row) for row in reply.rows]

    def reconcile_parent(
        self, parent_task_id: str, child_set_key: str, newest_child_updated_at: str
    ) -> Flow[ReconcileResult]:
        params = {
            "parent_task_id": parent_task_id,
            "child_set_key": child_set_key,
            "newest_child_updated_at": newest_child_updated_at,
        }
        reply = yield Call(RECONCILE_PARENT, params)
        result = ReconcileResult.model_validate(reply.rows[0])
        self.reporter.report_reconcile(result)
        return result

    def sweep_stuck_parents(self, max_rows: int) -> Flow[list[ReconcileResult]]:
        reply = yield Call(SWEEP_STUCK_PARENTS, {"max_rows": max_rows})
        results = [ReconcileResult.model_validate(row) for row in reply.rows]
        for result in results:  # the statement has committed: so have the receipts
            self.reporter.report_parent_candidate(result.parent_task_id)
            self.reporter.report_reconcile(result)
        return results

    # routines and wakeups -----------------------------------------------------

    def create_routine(
        self,
        workspace_id: str,
        name: str,
        task_template: Mapping[str, Any] | None,
        assignee_agent_profile_id: str | None,
        concurrency_policy: ConcurrencyPolicy | str,
        variables: Mapping[str, Any] | None,
        id: str | None,
        catch_up_policy: CatchUpPolicy | str,
        catch_up_max: int,
    ) -> Flow[Routine]:
        params = {
            "workspace_id": workspace_id,
            "name": name,
            "task_template": json.dumps(dict(task_template or {})),
            "assignee_agent_profile_id": assignee_agent_profile_id,
            "concurrency_policy": str(concurrency_policy),
            "variables": json.dumps(dict(variables or {})),
            "id": id,
            "catch_up_policy": str(catch_up_policy),
            "catch_up_max": catch_up_max,
        }
        reply = yield Call(CREATE_ROUTINE, params)
        return Routine.model_validate(reply.rows[0])

    def add_routine_trigger(
        self,
        routine_id: str,
        cron_expression: str,
        timezone: str,
        next_run_at: datetime | None,
        id: str | None,
    ) -> Flow[RoutineTrigger]:
        params = {
            "routine_id": routine_id,
            "cron_expression": cron_expression,
            "timezone": timezone,
            "next_run_at": next_run_at,
            "id": id,
        }
        reply = yield Call(ADD_ROUTINE_TRIGGER, params)
        return RoutineTrigger.model_validate(reply.rows[0])

    def dispatch_routine(
        self,
        routine_id: str,
        source: RoutineSource | str,
        variables: Mapping[str, Any] | None,
        trigger_id: str | None,
        claimed_tick: datetime | None,
        explicit_key: str | None,
        missed_ticks: int | None,
        missed_since: datetime | None,
        missed_truncated: bool | None,
    ) -> Flow[DispatchRoutineResult]:
        params = {
            "routine_id": routine_id,
            "source": str(source),
            "variables": json.dumps(dict(variables or {})),
            "trigger_id": trigger_id,
            "claimed_tick": claimed_tick,
            "explicit_key": explicit_key,
            "missed_ticks": missed_ticks,
            "missed_since": missed_since,
            "missed_truncated": missed_truncated,
        }
        reply = yield Call(DISPATCH_ROUTINE, params)
        result = DispatchRoutineResult.model_validate(reply.rows[0])
        self.reporter.report_dispatch(routine_id, str(source), result)
        return result

    def request_wakeup(
        self,
        agent_profile_id: str,
        source: str,
        reason: str,
        payload: Mapping[str, Any] | None,
        idempotency_key: str | None,
    ) -> Flow[WakeupResult]:
        params = {
            "agent_profile_id": agent_profile_id,
            "source": source,
            "reason": reason,
            "payload": json.dumps(dict(payload or {})),
            "idempotency_key": idempotency_key,
        }
        reply = yield Call(REQUEST_WAKEUP, params)
        result = WakeupResult.model_validate(reply.rows[0])
        if result.outcome is WakeupOutcome.DEDUPED:
            self.reporter.report_dedup(
                queue=DedupQueue.WAKEUP,
                reason=reason,
                kind=DedupKind.DURABLE,
                key=idempotency_key,
                agent_profile_id=agent_profile_id,
            )
        return result

    def dispatch_wakeup(self, wakeup_request_id: str) -> Flow[WakeupDispatchResult]:
        reply = yield Call(DISPATCH_WAKEUP, {"wakeup_request_id": wakeup_request_id})
        return WakeupDispatchResult.model_validate(reply.rows[0])

    # raw statements ---------------------------------------------------------

    def execute(self, sql: str, params: Mapping[str, Any] | None) -> Flow[ExecuteResult]:
        query = Query(sql, parametrized=params is not None)
        try:
            reply = yield Call(query, params or {}, rowcount=True)
        except DedupIndexHit as hit:
            dedup = yield from self.dedup_hit(hit)
            self.reporter.report_dedup(
                queue=dedup.queue,
                reason=dedup.reason or "unknown",
                kind=DedupKind.DURABLE,
                key=dedup.key,
                agent_profile_id=dedup.agent_profile_id,
            )
            return ExecuteResult(dedup=dedup)
        return ExecuteResult(rows=reply.rows, rowcount=reply.rowcount)


# --- the synchronous client ---------------------------------------------------


def perform_psycopg(conn: psycopg.Connection[Any], call: Call) -> Reply:
    with wrap_exceptions(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(call.query.text, call.params if call.query.parametrized else None)
        rows = cur.fetchall() if cur.description is not None else []
        return Reply(rows, cur.rowcount)


def reset_session(conn: psycopg.Connection[Any]) -> None:
    """After a raw statement: give the connection back as a fresh one would
    be (no open transaction, no session settings, listens or session locks).
    The named operations leave no session state, so only raw statements pay
    for this round trip. (Not a pool ``reset`` callback: with one,
    psycopg_pool returns every connection through a worker thread, which
    costs more than the reset.) A connection that cannot be reset is closed,
    so the pool replaces it."""
    try:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        conn.execute(RESET_SESSION.text)
    except psycopg.Error:
        conn.close()


class Office:
    """The office client over psycopg 3 and a ``psycopg_pool`` pool.

    ``Office(dsn)`` owns its pool (closed by :meth:`close` or the ``with``
    block); ``Office(pool=pool)`` borrows one and leaves it open. Metrics go to
    ``registry`` (default: prometheus_client's global registry).
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: ConnectionPool[Any] | None = None,
        min_size: int = 1,
        max_size: int = 4,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if (dsn is None) == (pool is None):
            raise ValueError("pass either a dsn or a pool")
        if pool is None:
            pool = ConnectionPool(
                dsn or "",
                min_size=min_size,
                max_size=max_size,
                kwargs={"autocommit": True},
                open=True,
                name="office",
            )
            self._owns_pool = True
        else:
            self._owns_pool = False
        self._pool: ConnectionPool[Any] = pool
        self._ops = Operations(Reporter(registry))

    @property
    def pool(self) -> ConnectionPool[Any]:
        return self._pool

    def close(self) -> None:
        """Close the pool if this client opened it."""
        if self._owns_pool:
            self._pool.close()

    def __enter__(self) -> Office:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, flow: Flow[T], *, raw: bool = False) -> T:
        with self._pool.connection() as conn:
            if not conn.autocommit:
                conn.autocommit = True
            try:
                return drive(flow, lambda call: perform_psycopg(conn, call))
            finally:
                if raw:
                    reset_session(conn)

    # the queue ------------------------------------------------------------

    def enqueue_run(
        self,
        agent_profile_id: str,
        reason: str,
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        task_id: str | None = None,
        entry_triggered: bool = False,
        keyless_cause: KeylessCause | str | None = None,
        keyless_detail: str | None = None,
    ) -> EnqueueResult:
        """``office.enqueue_run``: queued, deduped (windowed/durable) or
        coalesced - never an error for a duplicate."""
        request = make_request(
            agent_profile_id,
            reason,
            payload,
            idempotency_key,
            task_id,
            entry_triggered,
            keyless_cause,
            keyless_detail,
        )
        return self._run(self._ops.enqueue_run(request))

    def enqueue_runs(
        self, requests: Iterable[EnqueueRequest | Mapping[str, Any]]
    ) -> list[BulkEnqueueItem]:
        """``office.enqueue_runs``: one outcome per request, in input order."""
        return self._run(self._ops.enqueue_runs(as_requests(requests)))

    def claim_run(
        self, worker_id: str | None = None, agent_profile_id: str | None = None
    ) -> Run | None:
        """The claimed run (``attempt`` is the fencing token), or None."""
        return self._run(self._ops.claim_run(worker_id, agent_profile_id))

    def heartbeat_run(self, run_id: str, attempt: int) -> bool:
        """``office.heartbeat_run``: renew the lease on a claimed run (the
        recovery threshold counts from the last heartbeat). False: the run is
        no longer this claim's (recovered, cancelled, re-claimed) - stop
        working on it."""
        return self._run(self._ops.heartbeat_run(run_id, attempt))

    def get_run(self, run_id: str) -> Run | None:
        """``office.get_run``: the run, or None."""
        return self._run(self._ops.get_run(run_id))

    def run_keys(self, run_id: str) -> list[RunKey]:
        """``office.run_keys``: the keys the run serves, oldest first - its
        own and those it absorbed by coalescing."""
        return self._run(self._ops.run_keys(run_id))

    def has_leases(self) -> bool:
        """Whether the schema has leases (``office.runs.heartbeat_at`` and
        ``heartbeat_run``, since 0.4.0): probed once per client; absent is
        logged once per process (ERROR)."""
        return self._run(self._ops.probe("heartbeat_at"))

    def finish_run(self, run_id: str, attempt: int) -> bool:
        return self._run(self._ops.changed(FINISH_RUN, {"run_id": run_id, "attempt": attempt}))

    def fail_run(self, run_id: str, attempt: int, error_message: str) -> bool:
        params = {"run_id": run_id, "attempt": attempt, "error_message": error_message}
        return self._run(self._ops.changed(FAIL_RUN, params))

    def retry_run(self, run_id: str, attempt: int, delay: timedelta | float) -> bool:
        params = {"run_id": run_id, "attempt": attempt, "delay": as_interval(delay)}
        return self._run(self._ops.changed(RETRY_RUN, params))

    def cancel_run(self, run_id: str, reason: str) -> bool:
        return self._run(self._ops.changed(CANCEL_RUN, {"run_id": run_id, "reason": reason}))

    def recover_stale_runs(self, older_than: timedelta | float) -> int:
        params = {"older_than": as_interval(older_than)}
        return self._run(self._ops.count(RECOVER_STALE_RUNS, params))

    def prune_runs(self, older_than: timedelta | float) -> int:
        return self._run(self._ops.count(PRUNE_RUNS, {"older_than": as_interval(older_than)}))

    # agents -----------------------------------------------------------------

    def upsert_agent(
        self, id: str, workspace_id: str, name: str = "", status: str = "idle"
    ) -> Agent:
        params = {"id": id, "workspace_id": workspace_id, "name": name, "status": status}
        return self._run(self._ops.agent(UPSERT_AGENT, params))

    def set_agent_status(self, id: str, status: str) -> Agent:
        return self._run(self._ops.agent(SET_AGENT_STATUS, {"id": id, "status": status}))

    # tasks ------------------------------------------------------------------

    def create_task(
        self,
        workspace_id: str,
        id: str | None = None,
        title: str = "",
        parent_id: str | None = None,
        workflow_step_id: str | None = None,
        assignee_agent_profile_id: str | None = None,
        state: TaskState | str = TaskState.TODO,
        is_office: bool = True,
        is_ephemeral: bool = False,
    ) -> TaskResult:
        """``office.create_task``: generation 1 with assignee and step (else
        0), and for an Office task with an assignee its ``task_assigned`` run."""
        return self._run(
            self._ops.create_task(
                workspace_id,
                id,
                title,
                parent_id,
                workflow_step_id,
                assignee_agent_profile_id,
                state,
                is_office,
                is_ephemeral,
            )
        )

    def assign_task(
        self,
        task_id: str,
        assignee_agent_profile_id: str | None,
        actor_id: str | None = None,
        actor_type: ActorType | str = ActorType.USER,
    ) -> AssignResult:
        """``office.assign_task``: the generation this call committed, the
        interrupt flag and the ``task_assigned`` run (None/'' unassigns)."""
        return self._run(
            self._ops.assign_task(task_id, assignee_agent_profile_id, actor_id, actor_type)
        )

    def move_task(self, task_id: str, state: TaskState | str) -> Task:
        """``office.move_task``; the terminal effects run in the same transaction."""
        return self._run(self._ops.task(MOVE_TASK, {"task_id": task_id, "state": str(state)}))

    def archive_task(self, task_id: str) -> Task:
        return self._run(self._ops.task(ARCHIVE_TASK, {"task_id": task_id}))

    def get_task(self, task_id: str) -> Task | None:
        return self._run(self._ops.get_task(task_id))

    def add_blocker(self, task_id: str, blocker_task_id: str) -> None:
        """``blocker_task_id`` now blocks ``task_id`` (a cycle is InvalidArgument)."""
        params = {"task_id": task_id, "blocker_task_id": blocker_task_id}
        self._run(self._ops.done(ADD_BLOCKER, params))

    def remove_blocker(self, task_id: str, blocker_task_id: str) -> None:
        params = {"task_id": task_id, "blocker_task_id": blocker_task_id}
        self._run(self._ops.done(REMOVE_BLOCKER, params))

    def task_terminal_status(self, task_id: str) -> TaskTerminalStatus:
        value = self._run(self._ops.value(TASK_TERMINAL_STATUS, {"task_id": task_id}))
        return TaskTerminalStatus(value)

    def is_task_terminal(self, task_id: str) -> bool:
        return bool(self._run(self._ops.value(IS_TASK_TERMINAL, {"task_id": task_id})))

    def child_set_key(self, parent_task_id: str) -> str:
        return str(self._run(self._ops.value(CHILD_SET_KEY, {"parent_task_id": parent_task_id})))

    def child_generation(self, parent_task_id: str) -> str:
        params = {"parent_task_id": parent_task_id}
        return str(self._run(self._ops.value(CHILD_GENERATION, params)))

    # parent wakes -------------------------------------------------------------

    def list_stuck_parents(
        self, max_rows: int = 5, reason: str = CHILDREN_COMPLETED
    ) -> list[StuckParent]:
        """``office.list_stuck_parents``: parents whose finished child wave
        nobody delivered, ordered by id (every candidate condition applied
        before the limit)."""
        return self._run(self._ops.list_stuck_parents(max_rows, reason))

    def reconcile_parent(
        self, parent_task_id: str, child_set_key: str, newest_child_updated_at: str
    ) -> ReconcileResult:
        """``office.reconcile_parent``: wake one stuck parent with the edge
        path's key and write its receipt, or decline (``skipped_reason``)."""
        return self._run(
            self._ops.reconcile_parent(parent_task_id, child_set_key, newest_child_updated_at)
        )

    def sweep_stuck_parents(self, max_rows: int = 5) -> list[ReconcileResult]:
        """``office.sweep_stuck_parents``: one tick of the stuck-parent sweep
        (counted: candidates, emitted, assignee_unresolved)."""
        return self._run(self._ops.sweep_stuck_parents(max_rows))

    # events -----------------------------------------------------------------

    def claim_events(
        self, consumer: str, max_rows: int = 100, visibility: timedelta | float = 30
    ) -> list[Event]:
        """``office.claim_events``: up to ``max_rows`` pending events, hidden
        from other consumers for ``visibility`` (seconds or a timedelta)."""
        return self._run(self._ops.claim_events(consumer, max_rows, visibility))

    def ack_events(self, ids: Iterable[int]) -> int:
        """``office.ack_events``: how many of ``ids`` were acknowledged now."""
        return self._run(self._ops.ack_events(ids))

    # routines and wakeups ---------------------------------------------------

    def create_routine(
        self,
        workspace_id: str,
        name: str,
        task_template: Mapping[str, Any] | None = None,
        assignee_agent_profile_id: str | None = None,
        concurrency_policy: ConcurrencyPolicy | str = ConcurrencyPolicy.SKIP_IF_ACTIVE,
        variables: Mapping[str, Any] | None = None,
        id: str | None = None,
        catch_up_policy: CatchUpPolicy | str = CatchUpPolicy.ENQUEUE_MISSED_WITH_CAP,
        catch_up_max: int = 25,
    ) -> Routine:
        """``office.create_routine``: a template with a title makes it heavy
        (fires create tasks), else lightweight (fires wake the assignee);
        ``variables`` declares ``{name: {"default": value}}``."""
        return self._run(
            self._ops.create_routine(
                workspace_id,
                name,
                task_template,
                assignee_agent_profile_id,
                concurrency_policy,
                variables,
                id,
                catch_up_policy,
                catch_up_max,
            )
        )

    def add_routine_trigger(
        self,
        routine_id: str,
        cron_expression: str,
        timezone: str = "UTC",
        next_run_at: datetime | None = None,
        id: str | None = None,
    ) -> RoutineTrigger:
        """``office.add_routine_trigger``: a cron trigger (``next_run_at``
        None: armed by the cron loop, see :func:`controlplane.routines.fire_due`)."""
        return self._run(
            self._ops.add_routine_trigger(routine_id, cron_expression, timezone, next_run_at, id)
        )

    def claim_routine_tick(
        self,
        trigger_id: str,
        observed_next_run_at: datetime | None,
        following_next_run_at: datetime,
    ) -> bool:
        """``office.claim_routine_tick``: the compare-and-swap on
        ``next_run_at``; True for the one caller that won the tick."""
        params = {
            "trigger_id": trigger_id,
            "observed_next_run_at": observed_next_run_at,
            "following_next_run_at": following_next_run_at,
        }
        return self._run(self._ops.changed(CLAIM_ROUTINE_TICK, params))

    def dispatch_routine(
        self,
        routine_id: str,
        source: RoutineSource | str,
        variables: Mapping[str, Any] | None = None,
        trigger_id: str | None = None,
        claimed_tick: datetime | None = None,
        explicit_key: str | None = None,
        missed_ticks: int | None = None,
        missed_since: datetime | None = None,
        missed_truncated: bool | None = None,
    ) -> DispatchRoutineResult:
        """``office.dispatch_routine``: one fire; skipped, coalesced and a
        failed wakeup dispatch are statuses of the result, not errors."""
        return self._run(
            self._ops.dispatch_routine(
                routine_id,
                source,
                variables,
                trigger_id,
                claimed_tick,
                explicit_key,
                missed_ticks,
                missed_since,
                missed_truncated,
            )
        )

    def close_routine_run(self, routine_run_id: str, terminal: RoutineTerminal | str) -> bool:
        """``office.close_routine_run``: the conditional close (only while
        ``task_created``); True if this call closed the run."""
        params = {"routine_run_id": routine_run_id, "terminal": str(terminal)}
        return self._run(self._ops.changed(CLOSE_ROUTINE_RUN, params))

    def sync_routine_run_status(self, task_id: str, terminal: RoutineTerminal | str) -> bool:
        """``office.sync_routine_run_status``: closes the newest run linked to
        the task ('' is a no-op)."""
        params = {"task_id": task_id, "terminal": str(terminal)}
        return self._run(self._ops.changed(SYNC_ROUTINE_RUN_STATUS, params))

    def request_wakeup(
        self,
        agent_profile_id: str,
        source: str,
        reason: str = "",
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> WakeupResult:
        """``office.request_wakeup``: queued, or deduped (durable) on the key."""
        return self._run(
            self._ops.request_wakeup(agent_profile_id, source, reason, payload, idempotency_key)
        )

    def dispatch_wakeup(self, wakeup_request_id: str) -> WakeupDispatchResult:
        """``office.dispatch_wakeup``: claimed, coalesced, skipped or noop;
        an agent that does not accept runs is ``AgentNotAcceptingRuns``."""
        return self._run(self._ops.dispatch_wakeup(wakeup_request_id))

    def fail_wakeup(self, wakeup_request_id: str, reason: str) -> bool:
        """``office.fail_wakeup``: only a queued request fails."""
        params = {"wakeup_request_id": wakeup_request_id, "reason": reason}
        return self._run(self._ops.changed(FAIL_WAKEUP, params))

    # observability and raw statements ---------------------------------------

    def report_keyless(
        self, reason: str, cause: KeylessCause | str, detail: str | None = None
    ) -> None:
        """``ReportKeylessEnqueue`` at a producer's decision site (Python-side
        metric and log; ``enqueue_run(keyless_cause=...)`` also counts it in
        the database)."""
        self._ops.report_keyless(reason, cause, detail)

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> ExecuteResult:
        """Run one raw statement (``%(name)s`` parameters) through the same
        error translation: a hit on a dedup index is returned as
        ``ExecuteResult.dedup`` (counted and logged), never raised. Each call
        is its own transaction, and session state it sets (``SET``,
        ``LISTEN``, session advisory locks) is reset when it returns."""
        return self._run(self._ops.execute(sql, params), raw=True)
