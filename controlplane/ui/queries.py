"""The dashboard's reads, as typed methods over office's views and functions.

The client (:class:`controlplane.client.Office`) has no read for these yet;
they live here so that the pages hold no SQL. Every list is a call of one of
the dashboard's functions (sql/85_dashboard.sql): keyset-paginated with a
bound (:data:`PAGE_SIZE`), so a table of millions of runs costs one index
range per page, callable by ``office_reader`` and served by a proxy. What
is still read from a view or table (the counters, ``office.poison``) is
granted to ``office_reader``; a refused read raises :class:`NotVisible` for
the page to say so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from pydantic import BaseModel, ConfigDict

from controlplane.cli_base import describe
from controlplane.client import Office
from controlplane.models import AgentStatus, Run, RunStatus, Task

#: Rows per page of every list.
PAGE_SIZE = 50

#: ``office.list_agents`` counts an agent's queue up to this many.
QUEUE_COUNT_CAP = 10_001

#: The actions of the dashboard: the office function each one calls.
ACTION_FUNCTIONS = {
    "cancel_run": "office.cancel_run(text, text)",
    "pause_agent": "office.set_agent_status(text, text)",
    "resume_agent": "office.set_agent_status(text, text)",
    "fire_routine": (
        "office.dispatch_routine(text, text, jsonb, text, timestamptz, text, int,"
        " timestamptz, boolean)"
    ),
    "sweep": "office.sweep_stuck_parents(int)",
}


class NotVisible(Exception):
    """The connected role may not read what the page shows."""


class QueueStat(BaseModel):
    """A row of ``office.run_status_counts()``: the history's statuses are
    an estimate (``exact`` false, no agents or oldest) on a large table."""

    model_config = ConfigDict(frozen=True)

    status: RunStatus
    agents: int | None
    runs: int
    oldest_requested_at: datetime | None
    exact: bool


class DedupStat(BaseModel):
    model_config = ConfigDict(frozen=True)

    queue: str
    reason: str
    kind: str
    total: int


class KeylessStat(BaseModel):
    model_config = ConfigDict(frozen=True)

    reason: str
    cause: str
    total: int


class DaemonStats(BaseModel):
    """``office.daemon_stats()``."""

    model_config = ConfigDict(frozen=True)

    pending_events: int
    oldest_pending_event_at: datetime | None
    outbox_lag_seconds: float
    queued_wakeups: int
    due_triggers: int
    claimed_runs: int
    oldest_claimed_at: datetime | None
    oldest_claim_age_seconds: float
    poison_rows: int
    poison_by_loop: dict[str, int]


class Connection(BaseModel):
    """What the pages say about the database: never the DSN (it may carry a
    password), only where it is and who the UI is there."""

    model_config = ConfigDict(frozen=True)

    host: str
    port: int
    dbname: str
    role: str
    server_version: str


class RunFilter(BaseModel):
    """The runs list's filters; empty means any."""

    model_config = ConfigDict(frozen=True)

    status: str = ""
    agent: str = ""
    reason: str = ""
    task: str = ""
    key_prefix: str = ""


class RunPage(BaseModel):
    """One page of runs, newest first; ``next_before`` is the id to pass for
    the next page (None on the last). A page that is not full but has a
    ``next_before`` searched its whole window (``office.run_window_end``):
    older runs are there, not yet searched."""

    model_config = ConfigDict(frozen=True)

    runs: list[Run]
    next_before: str | None
    window_searched: bool = False


class AgentQueue(BaseModel):
    """A row of ``office.list_agents``: the profile, its queue, its claim."""

    model_config = ConfigDict(frozen=True)

    id: str
    workspace_id: str
    name: str
    status: AgentStatus
    created_at: datetime
    updated_at: datetime
    #: Counted up to :data:`QUEUE_COUNT_CAP`.
    queued: int
    oldest_queued_at: datetime | None
    claimed_run_id: str | None
    claimed_by: str | None
    claimed_at: datetime | None
    heartbeat_at: datetime | None

    @property
    def queued_text(self) -> str:
        return f"{QUEUE_COUNT_CAP - 1:,}+" if self.queued >= QUEUE_COUNT_CAP else f"{self.queued:,}"


class Wakeup(BaseModel):
    """A row of ``office.wakeup_requests``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    agent_profile_id: str
    source: str
    reason: str
    status: str
    coalesced_count: int
    idempotency_key: str | None
    run_id: str | None
    requested_at: datetime


class Event(BaseModel):
    """A row of ``office.events`` (the outbox)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: int
    topic: str
    task_id: str | None
    created_at: datetime
    processed_at: datetime | None
    claimed_by: str | None
    deliveries: int


class Poison(BaseModel):
    """A row of ``office.poison`` (granted to office_reader)."""

    model_config = ConfigDict(frozen=True)

    loop: str
    row_id: str
    reason: str
    sqlstate: str | None
    set_aside_at: datetime
    reported_at: datetime | None


class Routine(BaseModel):
    """A row of ``office.routines``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    workspace_id: str
    name: str
    assignee_agent_profile_id: str | None
    concurrency_policy: str
    catch_up_policy: str
    status: str
    last_run_at: datetime | None


class Trigger(BaseModel):
    """A row of ``office.routine_triggers``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    kind: str
    cron_expression: str | None
    timezone: str
    next_run_at: datetime | None
    last_fired_at: datetime | None
    enabled: bool


class RoutineRun(BaseModel):
    """A row of ``office.routine_runs``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    source: str
    status: str
    linked_task_id: str
    coalesced_into_run_id: str
    wakeup_request_id: str | None
    error_message: str | None
    created_at: datetime


class Receipt(BaseModel):
    """A parent's ``office.parent_child_wake_receipts`` row."""

    model_config = ConfigDict(frozen=True)

    child_set_key: str
    child_generation: str
    delivered_run_id: str
    delivery_operation_id: str
    delivered_at: datetime


class TaskView(BaseModel):
    """A task and what decides its parent wake."""

    model_config = ConfigDict(frozen=True)

    task: Task
    children: list[Task]
    blockers: list[Task]
    child_generation: str | None
    receipt: Receipt | None
    #: Among the first :data:`PAGE_SIZE` stuck parents list_stuck_parents finds.
    stuck: bool


class Dashboard:
    """The reads (and the privilege checks) of the pages, on an office client."""

    def __init__(self, office: Office) -> None:
        self._office = office

    @property
    def office(self) -> Office:
        return self._office

    @contextmanager
    def _cursor(self) -> Iterator[psycopg.Cursor[dict[str, Any]]]:
        with self._office.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            try:
                yield cur
            except psycopg.errors.InsufficientPrivilege as exc:
                raise NotVisible(describe(exc)) from None

    def _rows(self, query: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        with self._cursor() as cur:
            return list(cur.execute(query, params).fetchall())

    def connection(self) -> Connection:
        with self._office.pool.connection() as conn:
            info = conn.info
            role = conn.execute("SELECT current_user").fetchone()
            return Connection(
                host=info.host,
                port=info.port,
                dbname=info.dbname,
                role=str(role[0]) if role else "",
                # libpq's number: 150018 is 15.18 (since PostgreSQL 10).
                server_version=f"{info.server_version // 10000}.{info.server_version % 10000}",
            )

    def queue_stats(self) -> list[QueueStat]:
        rows = self._rows("SELECT * FROM office.run_status_counts()")
        return [QueueStat.model_validate(row) for row in rows]

    def dedup_stats(self) -> list[DedupStat]:
        rows = self._rows(
            "SELECT queue, reason, kind, total FROM office.dedup_stats"
            ' ORDER BY queue COLLATE "C", reason COLLATE "C", kind COLLATE "C"'
        )
        return [DedupStat.model_validate(row) for row in rows]

    def keyless_stats(self) -> list[KeylessStat]:
        rows = self._rows(
            "SELECT reason, cause, total FROM office.keyless_stats"
            ' ORDER BY reason COLLATE "C", cause COLLATE "C"'
        )
        return [KeylessStat.model_validate(row) for row in rows]

    def daemon_stats(self) -> DaemonStats:
        (row,) = self._rows("SELECT * FROM office.daemon_stats()")
        return DaemonStats.model_validate(row)

    def runs(self, filters: RunFilter, before: str | None = None) -> RunPage:
        """A page of runs matching ``filters``, newest first (ids are UUIDv7,
        so id order is creation order): the matches within the window that
        ``office.run_window_end`` bounds, so a rare filter costs one bounded
        index range per page, not a walk of the table."""
        (floor,) = self._rows(
            "SELECT office.run_window_end(before_id => %(before)s) AS id", {"before": before}
        )
        rows = self._rows(
            "SELECT * FROM office.list_runs(status => %(status)s,"
            " agent_profile_id => %(agent)s, reason => %(reason)s, task_id => %(task)s,"
            " key_prefix => %(key_prefix)s, before_id => %(before)s,"
            " not_before_id => %(floor)s, page_size => %(size)s)",
            {**filters.model_dump(), "before": before, "floor": floor["id"], "size": PAGE_SIZE},
        )
        runs = [Run.model_validate(row) for row in rows]
        if len(runs) == PAGE_SIZE:
            return RunPage(runs=runs, next_before=runs[-1].id)
        return RunPage(runs=runs, next_before=floor["id"], window_searched=floor["id"] is not None)

    def agents(self, after: str | None = None) -> list[AgentQueue]:
        """A page of agents by id, each with its queue depth, oldest queued
        run and claim (the worker's heartbeat)."""
        rows = self._rows(
            "SELECT * FROM office.list_agents(after_id => %(after)s, page_size => %(size)s)",
            {"after": after, "size": PAGE_SIZE},
        )
        return [AgentQueue.model_validate(row) for row in rows]

    def may_call(self, action: str) -> bool:
        """Whether the connected role may call the action's function: the
        database decides, the UI only asks."""
        (row,) = self._rows(
            "SELECT pg_catalog.has_function_privilege(current_user, %(fn)s, 'EXECUTE') AS ok",
            {"fn": ACTION_FUNCTIONS[action]},
        )
        return bool(row["ok"])

    def _list(self, function: str, before: str | int | None) -> list[dict[str, Any]]:
        """A page of one of the dashboard's list functions, newest first
        (``before`` is the last key of the previous page)."""
        return self._rows(
            f"SELECT * FROM office.{function}(before_id => %(before)s, page_size => %(size)s)",
            {"before": before, "size": PAGE_SIZE},
        )

    def wakeups(self, before: str | None = None) -> list[Wakeup]:
        return [Wakeup.model_validate(r) for r in self._list("list_wakeups", before)]

    def events(self, before: int | None = None) -> list[Event]:
        return [Event.model_validate(r) for r in self._list("list_events", before)]

    def poison(self) -> list[Poison]:
        rows = self._rows(
            "SELECT loop, row_id, reason, sqlstate, set_aside_at, reported_at FROM office.poison"
            " ORDER BY loop, row_id LIMIT %(limit)s",
            {"limit": PAGE_SIZE},
        )
        return [Poison.model_validate(r) for r in rows]

    def routines(self, before: str | None = None) -> list[Routine]:
        return [Routine.model_validate(r) for r in self._list("list_routines", before)]

    def routine(self, routine_id: str) -> tuple[Routine | None, list[Trigger], list[RoutineRun]]:
        """A routine, its triggers and its newest runs (the one holding the
        gate is the task_created one)."""
        params = {"id": routine_id, "size": PAGE_SIZE}
        found = self._rows("SELECT * FROM office.get_routine(routine_id => %(id)s)", params)
        if not found:
            return None, [], []
        triggers = self._rows(
            "SELECT * FROM office.list_routine_triggers(routine_id => %(id)s,"
            " page_size => %(size)s)",
            params,
        )
        runs = self._rows(
            "SELECT * FROM office.list_routine_runs(routine_id => %(id)s, page_size => %(size)s)",
            params,
        )
        return (
            Routine.model_validate(found[0]),
            [Trigger.model_validate(r) for r in triggers],
            [RoutineRun.model_validate(r) for r in runs],
        )

    def tasks(self, before: str | None = None) -> list[Task]:
        return [Task.model_validate(r) for r in self._list("list_tasks", before)]

    def task(self, task_id: str) -> TaskView | None:
        task = self._office.get_task(task_id)
        if task is None:
            return None
        params = {"id": task_id, "size": PAGE_SIZE}
        children = self._rows(
            "SELECT * FROM office.list_task_children(parent_task_id => %(id)s,"
            " page_size => %(size)s)",
            params,
        )
        blockers = self._rows(
            "SELECT * FROM office.list_task_blockers(task_id => %(id)s, page_size => %(size)s)",
            params,
        )
        receipt = self._rows(
            "SELECT child_set_key, child_generation, delivered_run_id, delivery_operation_id,"
            " delivered_at FROM office.get_parent_receipt(parent_task_id => %(id)s)",
            params,
        )
        (extra,) = self._rows(
            "SELECT CASE WHEN %(has_children)s THEN office.child_generation(%(id)s) END"
            " AS generation, EXISTS (SELECT FROM office.list_stuck_parents(%(size)s) s"
            " WHERE s.parent_task_id = %(id)s) AS stuck",
            {**params, "has_children": bool(children)},
        )
        return TaskView(
            task=task,
            children=[Task.model_validate(r) for r in children],
            blockers=[Task.model_validate(r) for r in blockers],
            child_generation=extra["generation"],
            receipt=Receipt.model_validate(receipt[0]) if receipt else None,
            stuck=bool(extra["stuck"]),
        )
