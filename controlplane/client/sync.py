"""The synchronous client: :class:`Office` over psycopg 3 and psycopg_pool.

Its methods are the shared operations (:mod:`controlplane.client.operations`)
driven with psycopg, one line each (:mod:`controlplane.client.facade`).
Connections run in autocommit: every call is its own transaction (the SQL
functions are atomic on their own). A pool passed in gets its connections
switched to autocommit when they are checked out.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from prometheus_client import CollectorRegistry
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool

from controlplane.client.core import Call, Flow, Reply, drive
from controlplane.client.facade import FacadeBase, sync_method
from controlplane.client.operations import Operations
from controlplane.client.queries import Query
from controlplane.client.queries.core import RESET_SESSION
from controlplane.errors import wrap_exceptions
from controlplane.models.common import decode_json
from controlplane.observability import Reporter

__all__ = ["Office", "fetch_rows", "perform_psycopg", "reset_session"]

T = TypeVar("T")


def perform_psycopg(conn: psycopg.Connection[Any], call: Call) -> Reply:
    with wrap_exceptions(), conn.cursor(row_factory=dict_row) as cur:
        set_json_loads(decode_json, cur)
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


def fetch_rows(
    conn: psycopg.Connection[Any], query: Query, params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The rows of one named query on a connection of the caller's own (the
    doctor's and ``officectl``'s observers, which inspect one session and
    need no pool). The driver's errors stay as they are: these callers
    report them, there is no outcome to make of them."""
    with conn.cursor(row_factory=dict_row) as cur:
        set_json_loads(decode_json, cur)
        cur.execute(query.text, params or {})
        return cur.fetchall() if cur.description is not None else []


class Office(FacadeBase):
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

    def _run(self, flow: Flow[T]) -> T:
        """Drive one operation on one pooled connection; after a raw
        statement (:meth:`execute`) the session is reset."""
        with self._pool.connection() as conn:
            if not conn.autocommit:
                conn.autocommit = True
            raw = False

            def perform(call: Call) -> Reply:
                nonlocal raw
                raw = raw or call.rowcount
                return perform_psycopg(conn, call)

            try:
                return drive(flow, perform)
            finally:
                if raw:
                    reset_session(conn)

    # the queue -------------------------------------------------------------
    enqueue_run = sync_method(Operations.enqueue_run)
    enqueue_runs = sync_method(Operations.enqueue_runs)
    claim_run = sync_method(Operations.claim_run)
    heartbeat_run = sync_method(Operations.heartbeat_run)
    lease_heartbeat = sync_method(Operations.lease_heartbeat)
    get_run = sync_method(Operations.get_run)
    run_keys = sync_method(Operations.run_keys)
    has_leases = sync_method(Operations.has_leases)
    finish_run = sync_method(Operations.finish_run)
    fail_run = sync_method(Operations.fail_run)
    retry_run = sync_method(Operations.retry_run)
    cancel_run = sync_method(Operations.cancel_run)
    cancel_runs = sync_method(Operations.cancel_runs)
    requeue_run = sync_method(Operations.requeue_run)
    requeue_runs = sync_method(Operations.requeue_runs)
    recover_stale_runs = sync_method(Operations.recover_stale_runs)
    prune_runs = sync_method(Operations.prune_runs)

    # wake policies and spend -------------------------------------------------
    set_wake_policy = sync_method(Operations.set_wake_policy)
    clear_wake_policy = sync_method(Operations.clear_wake_policy)
    record_run_cost = sync_method(Operations.record_run_cost)
    prune_wake_decisions = sync_method(Operations.prune_wake_decisions)
    wake_policies = sync_method(Operations.wake_policies)
    explain_agent = sync_method(Operations.explain_agent)
    governance_stats = sync_method(Operations.governance_stats)
    budget_usage = sync_method(Operations.budget_usage)
    governance_snapshot = sync_method(Operations.governance_snapshot)

    # agents, the schema, raw statements ------------------------------------
    upsert_agent = sync_method(Operations.upsert_agent)
    set_agent_status = sync_method(Operations.set_agent_status)
    schema_version = sync_method(Operations.schema_version)
    execute = sync_method(Operations.execute)

    # tasks -----------------------------------------------------------------
    create_task = sync_method(Operations.create_task)
    assign_task = sync_method(Operations.assign_task)
    move_task = sync_method(Operations.move_task)
    archive_task = sync_method(Operations.archive_task)
    get_task = sync_method(Operations.get_task)
    add_blocker = sync_method(Operations.add_blocker)
    remove_blocker = sync_method(Operations.remove_blocker)
    task_terminal_status = sync_method(Operations.task_terminal_status)
    is_task_terminal = sync_method(Operations.is_task_terminal)
    child_set_key = sync_method(Operations.child_set_key)
    child_generation = sync_method(Operations.child_generation)

    # parent wakes ----------------------------------------------------------
    list_stuck_parents = sync_method(Operations.list_stuck_parents)
    reconcile_parent = sync_method(Operations.reconcile_parent)
    sweep_stuck_parents = sync_method(Operations.sweep_stuck_parents)

    # events ----------------------------------------------------------------
    claim_events = sync_method(Operations.claim_events)
    claim_event_rows = sync_method(Operations.claim_event_rows)
    ack_events = sync_method(Operations.ack_events)
    prune_events = sync_method(Operations.prune_events)

    # routines --------------------------------------------------------------
    create_routine = sync_method(Operations.create_routine)
    add_routine_trigger = sync_method(Operations.add_routine_trigger)
    claim_routine_tick = sync_method(Operations.claim_routine_tick)
    fire_routine_tick = sync_method(Operations.fire_routine_tick)
    dispatch_routine = sync_method(Operations.dispatch_routine)
    close_routine_run = sync_method(Operations.close_routine_run)
    sync_routine_run_status = sync_method(Operations.sync_routine_run_status)

    # wakeup requests -------------------------------------------------------
    request_wakeup = sync_method(Operations.request_wakeup)
    dispatch_wakeup = sync_method(Operations.dispatch_wakeup)
    fail_wakeup = sync_method(Operations.fail_wakeup)

    # the daemon's loops, the demo's named reads ----------------------------
    due_routine_triggers = sync_method(Operations.due_routine_triggers)
    set_aside = sync_method(Operations.set_aside)
    take_poison_reports = sync_method(Operations.take_poison_reports)
    dispatch_queued_wakeups = sync_method(Operations.dispatch_queued_wakeups)
    daemon_stats = sync_method(Operations.daemon_stats)
    queue_stats = sync_method(Operations.queue_stats)
    dedup_stats = sync_method(Operations.dedup_stats)
    fetch = sync_method(Operations.fetch)

    # the dashboard's reads
    list_runs = sync_method(Operations.list_runs)
    run_window_end = sync_method(Operations.run_window_end)
    run_status_counts = sync_method(Operations.run_status_counts)
    list_agents = sync_method(Operations.list_agents)
    list_tasks = sync_method(Operations.list_tasks)
    list_task_children = sync_method(Operations.list_task_children)
    list_task_blockers = sync_method(Operations.list_task_blockers)
    get_parent_receipt = sync_method(Operations.get_parent_receipt)
    list_routines = sync_method(Operations.list_routines)
    get_routine = sync_method(Operations.get_routine)
    list_routine_triggers = sync_method(Operations.list_routine_triggers)
    list_routine_runs = sync_method(Operations.list_routine_runs)
    list_wakeups = sync_method(Operations.list_wakeups)
    list_events = sync_method(Operations.list_events)
