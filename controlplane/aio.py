"""The asynchronous client (asyncpg): the same methods and the same results as
:class:`controlplane.client.Office`.

Only the I/O differs: the statements, control flow, result building and
reporting are the shared :class:`controlplane.client.Operations` flows, driven
here with asyncpg instead of psycopg.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

import asyncpg
from prometheus_client import CollectorRegistry

from controlplane.client import (
    ADD_BLOCKER,
    ARCHIVE_TASK,
    CANCEL_RUN,
    CHILD_GENERATION,
    CHILD_SET_KEY,
    CLAIM_ROUTINE_TICK,
    CLOSE_ROUTINE_RUN,
    FAIL_RUN,
    FAIL_WAKEUP,
    FINISH_RUN,
    IS_TASK_TERMINAL,
    MOVE_TASK,
    PRUNE_RUNS,
    RECOVER_STALE_RUNS,
    REMOVE_BLOCKER,
    RESET_SESSION,
    RETRY_RUN,
    SET_AGENT_STATUS,
    SYNC_ROUTINE_RUN_STATUS,
    TASK_TERMINAL_STATUS,
    UPSERT_AGENT,
    Call,
    Flow,
    Operations,
    Reply,
    as_interval,
    as_requests,
    make_request,
    rowcount_of,
)
from controlplane.errors import wrap_exceptions
from controlplane.models import (
    CHILDREN_COMPLETED,
    ActorType,
    Agent,
    AssignResult,
    BulkEnqueueItem,
    CatchUpPolicy,
    ConcurrencyPolicy,
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
    WakeupResult,
)
from controlplane.observability import Reporter

T = TypeVar("T")

_JSON_TYPES = frozenset({"json", "jsonb"})


async def perform_asyncpg(conn: Any, call: Call) -> Reply:
    """Run one :class:`Call` on an asyncpg connection. Raw statements
    (``rowcount``) go through a prepared statement for the command tag, and
    their json/jsonb columns are decoded as psycopg does."""
    query = call.query
    args = query.asyncpg_args(call.params) if query.parametrized else []
    async with wrap_exceptions():
        if not call.rowcount:
            records = await conn.fetch(query.asyncpg_text, *args)
            return Reply([dict(record) for record in records])
        statement = await conn.prepare(query.asyncpg_text)
        records = await statement.fetch(*args)
        rowcount = rowcount_of(statement.get_statusmsg())
        json_columns = {
            attribute.name
            for attribute in statement.get_attributes()
            if attribute.type.name in _JSON_TYPES
        }
    rows = []
    for record in records:
        row = dict(record)
        for name in json_columns:
            if isinstance(row.get(name), str):
                row[name] = json.loads(row[name])
        rows.append(row)
    return Reply(rows, rowcount)


async def reset_session(conn: Any) -> None:
    """After a raw statement: :func:`controlplane.client.reset_session` for
    asyncpg (roll back, then the session reset; a connection that cannot be
    reset is terminated, so the pool replaces it)."""
    try:
        if conn.is_in_transaction():
            await conn.execute("ROLLBACK")
        await conn.execute(RESET_SESSION.text)
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
        conn.terminate()


async def drive_async(flow: Flow[T], conn: Any) -> T:
    """:func:`controlplane.client.drive` with awaited I/O."""
    try:
        call = next(flow)
        while True:
            try:
                reply = await perform_asyncpg(conn, call)
            except Exception as exc:
                call = flow.throw(exc)
            else:
                call = flow.send(reply)
    except StopIteration as stop:
        result: T = stop.value
        return result


class AsyncOffice:
    """The office client over an asyncpg pool.

    ``AsyncOffice(dsn)`` opens its own pool on first use (or
    ``await office.open()`` / ``async with AsyncOffice(dsn) as office``) and
    closes it in :meth:`close`; ``AsyncOffice(pool=pool)`` borrows one.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: asyncpg.Pool | None = None,
        min_size: int = 1,
        max_size: int = 4,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if (dsn is None) == (pool is None):
            raise ValueError("pass either a dsn or a pool")
        self._dsn = dsn
        self._pool: asyncpg.Pool | None = pool
        self._owns_pool = pool is None
        self._min_size = min_size
        self._max_size = max_size
        self._ops = Operations(Reporter(registry))

    async def open(self) -> AsyncOffice:
        if self._pool is None:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_size,
                max_size=self._max_size,
                reset=self._keep_session,
            )
        return self

    @staticmethod
    async def _keep_session(conn: asyncpg.Connection) -> None:
        """The release-time reset of an owned pool: nothing beyond asyncpg's
        own rollback of an open transaction. Its default (``RESET ALL``,
        ``UNLISTEN *``, advisory unlock) costs one more round trip per
        checkout, which nearly halves enqueue throughput; the named operations
        leave no session state, and :meth:`execute` resets after itself."""

    @property
    def pool(self) -> asyncpg.Pool | None:
        return self._pool

    async def close(self) -> None:
        """Close the pool if this client opened it."""
        if self._owns_pool and self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def __aenter__(self) -> AsyncOffice:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _run(self, flow: Flow[T], *, raw: bool = False) -> T:
        if self._pool is None:
            await self.open()
        assert self._pool is not None
        async with self._pool.acquire() as conn:
            try:
                return await drive_async(flow, conn)
            finally:
                if raw:
                    await reset_session(conn)

    # the queue ------------------------------------------------------------

    async def enqueue_run(
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
        return await self._run(self._ops.enqueue_run(request))

    async def enqueue_runs(
        self, requests: Iterable[EnqueueRequest | Mapping[str, Any]]
    ) -> list[BulkEnqueueItem]:
        """``office.enqueue_runs``: one outcome per request, in input order."""
        return await self._run(self._ops.enqueue_runs(as_requests(requests)))

    async def claim_run(
        self, worker_id: str | None = None, agent_profile_id: str | None = None
    ) -> Run | None:
        """The claimed run (``attempt`` is the fencing token), or None."""
        return await self._run(self._ops.claim_run(worker_id, agent_profile_id))

    async def heartbeat_run(self, run_id: str, attempt: int) -> bool:
        """``office.heartbeat_run``: renew the lease on a claimed run. False:
        the run is no longer this claim's - stop working on it."""
        return await self._run(self._ops.heartbeat_run(run_id, attempt))

    async def get_run(self, run_id: str) -> Run | None:
        """``office.get_run``: the run, or None."""
        return await self._run(self._ops.get_run(run_id))

    async def run_keys(self, run_id: str) -> list[RunKey]:
        """``office.run_keys``: the keys the run serves, oldest first."""
        return await self._run(self._ops.run_keys(run_id))

    async def has_leases(self) -> bool:
        """Whether the schema has leases (``office.runs.heartbeat_at``, 0.4.0);
        probed once per client."""
        return await self._run(self._ops.probe("heartbeat_at"))

    async def finish_run(self, run_id: str, attempt: int) -> bool:
        params = {"run_id": run_id, "attempt": attempt}
        return await self._run(self._ops.changed(FINISH_RUN, params))

    async def fail_run(self, run_id: str, attempt: int, error_message: str) -> bool:
        params = {"run_id": run_id, "attempt": attempt, "error_message": error_message}
        return await self._run(self._ops.changed(FAIL_RUN, params))

    async def retry_run(self, run_id: str, attempt: int, delay: timedelta | float) -> bool:
        params = {"run_id": run_id, "attempt": attempt, "delay": as_interval(delay)}
        return await self._run(self._ops.changed(RETRY_RUN, params))

    async def cancel_run(self, run_id: str, reason: str) -> bool:
        params = {"run_id": run_id, "reason": reason}
        return await self._run(self._ops.changed(CANCEL_RUN, params))

    async def recover_stale_runs(self, older_than: timedelta | float) -> int:
        params = {"older_than": as_interval(older_than)}
        return await self._run(self._ops.count(RECOVER_STALE_RUNS, params))

    async def prune_runs(self, older_than: timedelta | float) -> int:
        params = {"older_than": as_interval(older_than)}
        return await self._run(self._ops.count(PRUNE_RUNS, params))

    # agents -----------------------------------------------------------------

    async def upsert_agent(
        self, id: str, workspace_id: str, name: str = "", status: str = "idle"
    ) -> Agent:
        params = {"id": id, "workspace_id": workspace_id, "name": name, "status": status}
        return await self._run(self._ops.agent(UPSERT_AGENT, params))

    async def set_agent_status(self, id: str, status: str) -> Agent:
        return await self._run(self._ops.agent(SET_AGENT_STATUS, {"id": id, "status": status}))

    # tasks ------------------------------------------------------------------

    async def create_task(
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
        return await self._run(
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

    async def assign_task(
        self,
        task_id: str,
        assignee_agent_profile_id: str | None,
        actor_id: str | None = None,
        actor_type: ActorType | str = ActorType.USER,
    ) -> AssignResult:
        """``office.assign_task``: the generation this call committed, the
        interrupt flag and the ``task_assigned`` run (None/'' unassigns)."""
        return await self._run(
            self._ops.assign_task(task_id, assignee_agent_profile_id, actor_id, actor_type)
        )

    async def move_task(self, task_id: str, state: TaskState | str) -> Task:
        """``office.move_task``; the terminal effects run in the same transaction."""
        params = {"task_id": task_id, "state": str(state)}
        return await self._run(self._ops.task(MOVE_TASK, params))

    async def archive_task(self, task_id: str) -> Task:
        return await self._run(self._ops.task(ARCHIVE_TASK, {"task_id": task_id}))

    async def get_task(self, task_id: str) -> Task | None:
        return await self._run(self._ops.get_task(task_id))

    async def add_blocker(self, task_id: str, blocker_task_id: str) -> None:
        """``blocker_task_id`` now blocks ``task_id`` (a cycle is InvalidArgument)."""
        params = {"task_id": task_id, "blocker_task_id": blocker_task_id}
        await self._run(self._ops.done(ADD_BLOCKER, params))

    async def remove_blocker(self, task_id: str, blocker_task_id: str) -> None:
        params = {"task_id": task_id, "blocker_task_id": blocker_task_id}
        await self._run(self._ops.done(REMOVE_BLOCKER, params))

    async def task_terminal_status(self, task_id: str) -> TaskTerminalStatus:
        value = await self._run(self._ops.value(TASK_TERMINAL_STATUS, {"task_id": task_id}))
        return TaskTerminalStatus(value)

    async def is_task_terminal(self, task_id: str) -> bool:
        return bool(await self._run(self._ops.value(IS_TASK_TERMINAL, {"task_id": task_id})))

    async def child_set_key(self, parent_task_id: str) -> str:
        params = {"parent_task_id": parent_task_id}
        return str(await self._run(self._ops.value(CHILD_SET_KEY, params)))

    async def child_generation(self, parent_task_id: str) -> str:
        params = {"parent_task_id": parent_task_id}
        return str(await self._run(self._ops.value(CHILD_GENERATION, params)))

    # parent wakes -------------------------------------------------------------

    async def list_stuck_parents(
        self, max_rows: int = 5, reason: str = CHILDREN_COMPLETED
    ) -> list[StuckParent]:
        """``office.list_stuck_parents``: parents whose finished child wave
        nobody delivered, ordered by id (every candidate condition applied
        before the limit)."""
        return await self._run(self._ops.list_stuck_parents(max_rows, reason))

    async def reconcile_parent(
        self, parent_task_id: str, child_set_key: str, newest_child_updated_at: str
    ) -> ReconcileResult:
        """``office.reconcile_parent``: wake one stuck parent with the edge
        path's key and write its receipt, or decline (``skipped_reason``)."""
        return await self._run(
            self._ops.reconcile_parent(parent_task_id, child_set_key, newest_child_updated_at)
        )

    async def sweep_stuck_parents(self, max_rows: int = 5) -> list[ReconcileResult]:
        """``office.sweep_stuck_parents``: one tick of the stuck-parent sweep
        (counted: candidates, emitted, assignee_unresolved)."""
        return await self._run(self._ops.sweep_stuck_parents(max_rows))

    # events -----------------------------------------------------------------

    async def claim_events(
        self, consumer: str, max_rows: int = 100, visibility: timedelta | float = 30
    ) -> list[Event]:
        """``office.claim_events``: up to ``max_rows`` pending events, hidden
        from other consumers for ``visibility`` (seconds or a timedelta)."""
        return await self._run(self._ops.claim_events(consumer, max_rows, visibility))

    async def ack_events(self, ids: Iterable[int]) -> int:
        """``office.ack_events``: how many of ``ids`` were acknowledged now."""
        return await self._run(self._ops.ack_events(ids))

    # routines and wakeups ---------------------------------------------------

    async def create_routine(
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
        return await self._run(
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

    async def add_routine_trigger(
        self,
        routine_id: str,
        cron_expression: str,
        timezone: str = "UTC",
        next_run_at: datetime | None = None,
        id: str | None = None,
    ) -> RoutineTrigger:
        """``office.add_routine_trigger``: a cron trigger (``next_run_at``
        None: armed by the cron loop, see :func:`controlplane.routines.fire_due_async`)."""
        return await self._run(
            self._ops.add_routine_trigger(routine_id, cron_expression, timezone, next_run_at, id)
        )

    async def claim_routine_tick(
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
        return await self._run(self._ops.changed(CLAIM_ROUTINE_TICK, params))

    async def dispatch_routine(
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
        return await self._run(
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

    async def close_routine_run(self, routine_run_id: str, terminal: RoutineTerminal | str) -> bool:
        """``office.close_routine_run``: the conditional close (only while
        ``task_created``); True if this call closed the run."""
        params = {"routine_run_id": routine_run_id, "terminal": str(terminal)}
        return await self._run(self._ops.changed(CLOSE_ROUTINE_RUN, params))

    async def sync_routine_run_status(self, task_id: str, terminal: RoutineTerminal | str) -> bool:
        """``office.sync_routine_run_status``: closes the newest run linked to
        the task ('' is a no-op)."""
        params = {"task_id": task_id, "terminal": str(terminal)}
        return await self._run(self._ops.changed(SYNC_ROUTINE_RUN_STATUS, params))

    async def request_wakeup(
        self,
        agent_profile_id: str,
        source: str,
        reason: str = "",
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> WakeupResult:
        """``office.request_wakeup``: queued, or deduped (durable) on the key."""
        return await self._run(
            self._ops.request_wakeup(agent_profile_id, source, reason, payload, idempotency_key)
        )

    async def dispatch_wakeup(self, wakeup_request_id: str) -> WakeupDispatchResult:
        """``office.dispatch_wakeup``: claimed, coalesced, skipped or noop;
        an agent that does not accept runs is ``AgentNotAcceptingRuns``."""
        return await self._run(self._ops.dispatch_wakeup(wakeup_request_id))

    async def fail_wakeup(self, wakeup_request_id: str, reason: str) -> bool:
        """``office.fail_wakeup``: only a queued request fails."""
        params = {"wakeup_request_id": wakeup_request_id, "reason": reason}
        return await self._run(self._ops.changed(FAIL_WAKEUP, params))

    # observability and raw statements ---------------------------------------

    def report_keyless(
        self, reason: str, cause: KeylessCause | str, detail: str | None = None
    ) -> None:
        """``ReportKeylessEnqueue`` (no I/O, so not a coroutine)."""
        self._ops.report_keyless(reason, cause, detail)

    async def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> ExecuteResult:
        """Run one raw statement (``%(name)s`` parameters, as for
        :meth:`Office.execute`) through the same error translation: a hit on a
        dedup index is returned as ``ExecuteResult.dedup``, never raised. Each
        call is its own transaction; its session state is reset afterwards."""
        return await self._run(self._ops.execute(sql, params), raw=True)
