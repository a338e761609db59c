"""The asynchronous client: :class:`AsyncOffice` over asyncpg, with the same
methods and the same results as :class:`controlplane.client.Office`.

Only the I/O differs: the statements, control flow, result building and
reporting are the shared operations (:mod:`controlplane.client.operations`),
driven here with asyncpg instead of psycopg, one line each
(:mod:`controlplane.client.facade`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

import asyncpg
from prometheus_client import CollectorRegistry

from controlplane.client.core import Call, Flow, Reply, rowcount_of
from controlplane.client.facade import FacadeBase, async_method
from controlplane.client.operations import Operations
from controlplane.client.queries.core import RESET_SESSION
from controlplane.errors import wrap_exceptions
from controlplane.models.common import decode_json
from controlplane.observability import Reporter

__all__ = ["AsyncOffice", "drive_async", "perform_asyncpg", "reset_session"]

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
                row[name] = decode_json(row[name])
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


async def drive_async(
    flow: Flow[T],
    conn: Any,
    perform: Callable[[Any, Call], Awaitable[Reply]] = perform_asyncpg,
) -> T:
    """:func:`controlplane.client.core.drive` with awaited I/O."""
    try:
        call = next(flow)
        while True:
            try:
                reply = await perform(conn, call)
            except Exception as exc:
                call = flow.throw(exc)
            else:
                call = flow.send(reply)
    except StopIteration as stop:
        result: T = stop.value
        return result


class AsyncOffice(FacadeBase):
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

    async def _run(self, flow: Flow[T]) -> T:
        """Drive one operation on one pooled connection; after a raw
        statement (:meth:`execute`) the session is reset."""
        if self._pool is None:
            await self.open()
        assert self._pool is not None
        async with self._pool.acquire() as conn:
            raw = False

            async def perform(conn: Any, call: Call) -> Reply:
                nonlocal raw
                raw = raw or call.rowcount
                return await perform_asyncpg(conn, call)

            try:
                return await drive_async(flow, conn, perform)
            finally:
                if raw:
                    await reset_session(conn)

    # the queue -------------------------------------------------------------
    enqueue_run = async_method(Operations.enqueue_run)
    enqueue_runs = async_method(Operations.enqueue_runs)
    claim_run = async_method(Operations.claim_run)
    heartbeat_run = async_method(Operations.heartbeat_run)
    lease_heartbeat = async_method(Operations.lease_heartbeat)
    get_run = async_method(Operations.get_run)
    run_keys = async_method(Operations.run_keys)
    has_leases = async_method(Operations.has_leases)
    finish_run = async_method(Operations.finish_run)
    fail_run = async_method(Operations.fail_run)
    retry_run = async_method(Operations.retry_run)
    cancel_run = async_method(Operations.cancel_run)
    cancel_runs = async_method(Operations.cancel_runs)
    requeue_run = async_method(Operations.requeue_run)
    requeue_runs = async_method(Operations.requeue_runs)
    recover_stale_runs = async_method(Operations.recover_stale_runs)
    prune_runs = async_method(Operations.prune_runs)

    # wake policies and spend -------------------------------------------------
    set_wake_policy = async_method(Operations.set_wake_policy)
    clear_wake_policy = async_method(Operations.clear_wake_policy)
    record_run_cost = async_method(Operations.record_run_cost)
    prune_wake_decisions = async_method(Operations.prune_wake_decisions)
    wake_policies = async_method(Operations.wake_policies)
    explain_agent = async_method(Operations.explain_agent)
    governance_stats = async_method(Operations.governance_stats)
    budget_usage = async_method(Operations.budget_usage)
    governance_snapshot = async_method(Operations.governance_snapshot)

    # agents, the schema, raw statements ------------------------------------
    upsert_agent = async_method(Operations.upsert_agent)
    set_agent_status = async_method(Operations.set_agent_status)
    schema_version = async_method(Operations.schema_version)
    execute = async_method(Operations.execute)

    # tasks -----------------------------------------------------------------
    create_task = async_method(Operations.create_task)
    assign_task = async_method(Operations.assign_task)
    move_task = async_method(Operations.move_task)
    archive_task = async_method(Operations.archive_task)
    get_task = async_method(Operations.get_task)
    add_blocker = async_method(Operations.add_blocker)
    remove_blocker = async_method(Operations.remove_blocker)
    task_terminal_status = async_method(Operations.task_terminal_status)
    is_task_terminal = async_method(Operations.is_task_terminal)
    child_set_key = async_method(Operations.child_set_key)
    child_generation = async_method(Operations.child_generation)

    # parent wakes ----------------------------------------------------------
    list_stuck_parents = async_method(Operations.list_stuck_parents)
    reconcile_parent = async_method(Operations.reconcile_parent)
    sweep_stuck_parents = async_method(Operations.sweep_stuck_parents)

    # events ----------------------------------------------------------------
    claim_events = async_method(Operations.claim_events)
    claim_event_rows = async_method(Operations.claim_event_rows)
    ack_events = async_method(Operations.ack_events)
    prune_events = async_method(Operations.prune_events)

    # routines --------------------------------------------------------------
    create_routine = async_method(Operations.create_routine)
    add_routine_trigger = async_method(Operations.add_routine_trigger)
    claim_routine_tick = async_method(Operations.claim_routine_tick)
    fire_routine_tick = async_method(Operations.fire_routine_tick)
    dispatch_routine = async_method(Operations.dispatch_routine)
    close_routine_run = async_method(Operations.close_routine_run)
    sync_routine_run_status = async_method(Operations.sync_routine_run_status)

    # wakeup requests -------------------------------------------------------
    request_wakeup = async_method(Operations.request_wakeup)
    dispatch_wakeup = async_method(Operations.dispatch_wakeup)
    fail_wakeup = async_method(Operations.fail_wakeup)

    # the daemon's loops, the demo's named reads ----------------------------
    due_routine_triggers = async_method(Operations.due_routine_triggers)
    set_aside = async_method(Operations.set_aside)
    take_poison_reports = async_method(Operations.take_poison_reports)
    dispatch_queued_wakeups = async_method(Operations.dispatch_queued_wakeups)
    daemon_stats = async_method(Operations.daemon_stats)
    queue_stats = async_method(Operations.queue_stats)
    dedup_stats = async_method(Operations.dedup_stats)
    fetch = async_method(Operations.fetch)

    # the dashboard's reads
    list_runs = async_method(Operations.list_runs)
    run_window_end = async_method(Operations.run_window_end)
    run_status_counts = async_method(Operations.run_status_counts)
    list_agents = async_method(Operations.list_agents)
    list_tasks = async_method(Operations.list_tasks)
    list_task_children = async_method(Operations.list_task_children)
    list_task_blockers = async_method(Operations.list_task_blockers)
    get_parent_receipt = async_method(Operations.get_parent_receipt)
    list_routines = async_method(Operations.list_routines)
    get_routine = async_method(Operations.get_routine)
    list_routine_triggers = async_method(Operations.list_routine_triggers)
    list_routine_runs = async_method(Operations.list_routine_runs)
    list_wakeups = async_method(Operations.list_wakeups)
    list_events = async_method(Operations.list_events)
