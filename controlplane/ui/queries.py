"""The dashboard's page logic over the client's typed reads.

Every list is a client method over one of the dashboard's functions
(sql/85_dashboard.sql, :mod:`controlplane.client.dashboard`): keyset-paginated
with a bound (:data:`PAGE_SIZE`), so a table of millions of runs costs one
index range per page, callable by ``office_reader`` and served by a proxy.
The pages' other reads (the counters, ``office.poison``, the privilege
checks) are named statements of :mod:`controlplane.client.queries.dashboard`
run with :meth:`Office.fetch`. What stays here is the pages' own logic: the
runs list's window cursor, a task's view, which actions the role may call,
and a refused read raised as :class:`NotVisible` for the page to say so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from pydantic import BaseModel, ConfigDict

from controlplane.cli.base import describe
from controlplane.client import Office
from controlplane.client.queries import Query
from controlplane.client.queries import dashboard as dq
from controlplane.models import (
    QUEUE_COUNT_CAP,
    AgentQueue,
    Event,
    ParentReceipt,
    RoutineRunSummary,
    RoutineSummary,
    Run,
    RunStatusCount,
    Task,
    TriggerSummary,
    WakeupRequest,
)

__all__ = [
    "ACTION_FUNCTIONS",
    "PAGE_SIZE",
    "QUEUE_COUNT_CAP",
    "Connection",
    "DaemonStats",
    "Dashboard",
    "DedupStat",
    "KeylessStat",
    "NotVisible",
    "Poison",
    "RunFilter",
    "RunPage",
    "TaskView",
]

T = TypeVar("T")

#: Rows per page of every list.
PAGE_SIZE = 50

#: The actions of the dashboard: the office function each one calls.
ACTION_FUNCTIONS = {
    "cancel_run": "office.cancel_run(text, text)",
    "requeue_run": "office.requeue_run(text)",
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


class Poison(BaseModel):
    """A row of ``office.poison`` (granted to office_reader)."""

    model_config = ConfigDict(frozen=True)

    loop: str
    row_id: str
    reason: str
    sqlstate: str | None
    set_aside_at: datetime
    reported_at: datetime | None


class TaskView(BaseModel):
    """A task and what decides its parent wake."""

    model_config = ConfigDict(frozen=True)

    task: Task
    children: list[Task]
    blockers: list[Task]
    child_generation: str | None
    receipt: ParentReceipt | None
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
    def _visible(self) -> Iterator[None]:
        try:
            yield
        except psycopg.errors.InsufficientPrivilege as exc:
            raise NotVisible(describe(exc)) from None

    def _read(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One client read; a refused one is :class:`NotVisible`."""
        with self._visible():
            return method(*args, **kwargs)

    def _fetch(self, query: Query, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return self._read(self._office.fetch, query, params)

    def connection(self) -> Connection:
        (row,) = self._fetch(dq.DASHBOARD_ROLE)
        with self._office.pool.connection() as conn:
            info = conn.info
            return Connection(
                host=info.host,
                port=info.port,
                dbname=info.dbname,
                role=str(row["role"] or ""),
                # libpq's number: 150018 is 15.18 (since PostgreSQL 10).
                server_version=f"{info.server_version // 10000}.{info.server_version % 10000}",
            )

    def queue_stats(self) -> list[RunStatusCount]:
        return self._read(self._office.run_status_counts)

    def dedup_stats(self) -> list[DedupStat]:
        return [DedupStat.model_validate(row) for row in self._fetch(dq.DASHBOARD_DEDUP_STATS)]

    def keyless_stats(self) -> list[KeylessStat]:
        rows = self._fetch(dq.DASHBOARD_KEYLESS_STATS)
        return [KeylessStat.model_validate(row) for row in rows]

    def daemon_stats(self) -> DaemonStats:
        (row,) = self._fetch(dq.DASHBOARD_DAEMON_STATS)
        return DaemonStats.model_validate(row)

    def runs(self, filters: RunFilter, before: str | None = None) -> RunPage:
        """A page of runs matching ``filters``, newest first (ids are UUIDv7,
        so id order is creation order): the matches within the window that
        ``office.run_window_end`` bounds, so a rare filter costs one bounded
        index range per page, not a walk of the table."""
        floor = self._read(self._office.run_window_end, before_id=before)
        runs = self._read(
            self._office.list_runs,
            status=filters.status,
            agent_profile_id=filters.agent,
            reason=filters.reason,
            task_id=filters.task,
            key_prefix=filters.key_prefix,
            before_id=before,
            not_before_id=floor,
            page_size=PAGE_SIZE,
        )
        if len(runs) == PAGE_SIZE:
            return RunPage(runs=runs, next_before=runs[-1].id)
        return RunPage(runs=runs, next_before=floor, window_searched=floor is not None)

    def agents(self, after: str | None = None) -> list[AgentQueue]:
        """A page of agents by id, each with its queue depth, oldest queued
        run and claim (the worker's heartbeat)."""
        return self._read(self._office.list_agents, after_id=after, page_size=PAGE_SIZE)

    def may_call(self, action: str) -> bool:
        """Whether the connected role may call the action's function: the
        database decides, the UI only asks."""
        (row,) = self._fetch(dq.DASHBOARD_MAY_EXECUTE, {"fn": ACTION_FUNCTIONS[action]})
        return bool(row["ok"])

    def wakeups(self, before: str | None = None) -> list[WakeupRequest]:
        return self._read(self._office.list_wakeups, before_id=before, page_size=PAGE_SIZE)

    def events(self, before: int | None = None) -> list[Event]:
        return self._read(self._office.list_events, before_id=before, page_size=PAGE_SIZE)

    def poison(self) -> list[Poison]:
        rows = self._fetch(dq.DASHBOARD_POISON, {"limit": PAGE_SIZE})
        return [Poison.model_validate(r) for r in rows]

    def trigger_poison(self, trigger_ids: list[str]) -> dict[str, Poison]:
        """The triggers of ``trigger_ids`` the cron loop has set aside, by id:
        such a trigger no longer fires, whatever its enabled flag says."""
        if not trigger_ids:
            return {}
        rows = self._fetch(dq.DASHBOARD_TRIGGER_POISON, {"ids": trigger_ids})
        return {
            str(r["row_id"]): Poison.model_validate({"loop": "cron", "reported_at": None, **r})
            for r in rows
        }

    def routines(self, before: str | None = None) -> list[RoutineSummary]:
        return self._read(self._office.list_routines, before_id=before, page_size=PAGE_SIZE)

    def routine(
        self, routine_id: str
    ) -> tuple[RoutineSummary | None, list[TriggerSummary], list[RoutineRunSummary]]:
        """A routine, its triggers and its newest runs (the one holding the
        gate is the task_created one)."""
        found = self._read(self._office.get_routine, routine_id)
        if found is None:
            return None, [], []
        triggers = self._read(self._office.list_routine_triggers, routine_id, PAGE_SIZE)
        runs = self._read(self._office.list_routine_runs, routine_id, PAGE_SIZE)
        return found, triggers, runs

    def tasks(self, before: str | None = None) -> list[Task]:
        return self._read(self._office.list_tasks, before_id=before, page_size=PAGE_SIZE)

    def task(self, task_id: str) -> TaskView | None:
        task = self._read(self._office.get_task, task_id)
        if task is None:
            return None
        children = self._read(self._office.list_task_children, task_id, PAGE_SIZE)
        blockers = self._read(self._office.list_task_blockers, task_id, PAGE_SIZE)
        receipt = self._read(self._office.get_parent_receipt, task_id)
        (extra,) = self._fetch(
            dq.DASHBOARD_TASK_WAKE_STATE,
            {"id": task_id, "size": PAGE_SIZE, "has_children": bool(children)},
        )
        return TaskView(
            task=task,
            children=children,
            blockers=blockers,
            child_generation=extra["generation"],
            receipt=receipt,
            stuck=bool(extra["stuck"]),
        )
