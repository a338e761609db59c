"""The reads of the dashboard's functions (``sql/85_dashboard.sql``): one
flow each, shared by both clients (see :mod:`controlplane.client.core`).
Every list is one keyset page, newest first unless said otherwise: pass the
last key of a page as ``before_id`` (``after_id``) for the next."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from controlplane.client.core import Flow, OperationsCore
from controlplane.client.queries import dashboard as dq
from controlplane.models import (
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

__all__ = ["DashboardOperations"]

M = TypeVar("M", bound=BaseModel)

#: The functions' own default page size.
PAGE_SIZE = 50


class DashboardOperations(OperationsCore):
    def list_runs(
        self,
        status: str | None = None,
        agent_profile_id: str | None = None,
        reason: str | None = None,
        task_id: str | None = None,
        key_prefix: str | None = None,
        before_id: str | None = None,
        not_before_id: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> Flow[list[Run]]:
        """``office.list_runs``: runs matching the filters (None or empty: any), newest
        first, older than ``before_id`` and not older than ``not_before_id``."""
        params = {
            "status": status,
            "agent_profile_id": agent_profile_id,
            "reason": reason,
            "task_id": task_id,
            "key_prefix": key_prefix,
            "before_id": before_id,
            "not_before_id": not_before_id,
            "page_size": page_size,
        }
        return (yield from self.models(Run, dq.LIST_RUNS, params))

    def run_window_end(self, before_id: str | None = None) -> Flow[str | None]:
        """``office.run_window_end``: the oldest run id a page of
        ``list_runs`` before ``before_id`` searches to (None: to the start)."""
        value = yield from self.value(dq.RUN_WINDOW_END, {"before_id": before_id})
        return None if value is None else str(value)

    def run_status_counts(self) -> Flow[list[RunStatusCount]]:
        """``office.run_status_counts()``: runs by status (the history's an
        estimate on a large table)."""
        return (yield from self.models(RunStatusCount, dq.RUN_STATUS_COUNTS, {}))

    def list_agents(
        self, after_id: str | None = None, page_size: int = PAGE_SIZE
    ) -> Flow[list[AgentQueue]]:
        """``office.list_agents``: agents by id, each with its queue and claim."""
        params = {"after_id": after_id, "page_size": page_size}
        return (yield from self.models(AgentQueue, dq.LIST_AGENTS, params))

    def list_tasks(
        self, before_id: str | None = None, page_size: int = PAGE_SIZE
    ) -> Flow[list[Task]]:
        """``office.list_tasks``: tasks, newest first."""
        params = {"before_id": before_id, "page_size": page_size}
        return (yield from self.models(Task, dq.LIST_TASKS, params))

    def list_task_children(
        self, parent_task_id: str, page_size: int = PAGE_SIZE
    ) -> Flow[list[Task]]:
        """``office.list_task_children``: a parent's children."""
        params = {"parent_task_id": parent_task_id, "page_size": page_size}
        return (yield from self.models(Task, dq.LIST_TASK_CHILDREN, params))

    def list_task_blockers(self, task_id: str, page_size: int = PAGE_SIZE) -> Flow[list[Task]]:
        """``office.list_task_blockers``: the tasks that block a task."""
        params = {"task_id": task_id, "page_size": page_size}
        return (yield from self.models(Task, dq.LIST_TASK_BLOCKERS, params))

    def get_parent_receipt(self, parent_task_id: str) -> Flow[ParentReceipt | None]:
        """``office.get_parent_receipt``: the parent's wake receipt, or None."""
        params = {"parent_task_id": parent_task_id}
        return (yield from self.first(ParentReceipt, dq.GET_PARENT_RECEIPT, params))

    def list_routines(
        self, before_id: str | None = None, page_size: int = PAGE_SIZE
    ) -> Flow[list[RoutineSummary]]:
        """``office.list_routines``: routines, newest first."""
        params = {"before_id": before_id, "page_size": page_size}
        return (yield from self.models(RoutineSummary, dq.LIST_ROUTINES, params))

    def get_routine(self, routine_id: str) -> Flow[RoutineSummary | None]:
        """``office.get_routine``: the routine, or None."""
        params = {"routine_id": routine_id}
        return (yield from self.first(RoutineSummary, dq.GET_ROUTINE, params))

    def list_routine_triggers(
        self, routine_id: str, page_size: int = PAGE_SIZE
    ) -> Flow[list[TriggerSummary]]:
        """``office.list_routine_triggers``: a routine's triggers."""
        params = {"routine_id": routine_id, "page_size": page_size}
        return (yield from self.models(TriggerSummary, dq.LIST_ROUTINE_TRIGGERS, params))

    def list_routine_runs(
        self, routine_id: str, page_size: int = PAGE_SIZE
    ) -> Flow[list[RoutineRunSummary]]:
        """``office.list_routine_runs``: a routine's runs, newest first."""
        params = {"routine_id": routine_id, "page_size": page_size}
        return (yield from self.models(RoutineRunSummary, dq.LIST_ROUTINE_RUNS, params))

    def list_wakeups(
        self, before_id: str | None = None, page_size: int = PAGE_SIZE
    ) -> Flow[list[WakeupRequest]]:
        """``office.list_wakeups``: wakeup requests, newest first."""
        params = {"before_id": before_id, "page_size": page_size}
        return (yield from self.models(WakeupRequest, dq.LIST_WAKEUPS, params))

    def list_events(
        self, before_id: int | None = None, page_size: int = PAGE_SIZE
    ) -> Flow[list[Event]]:
        """``office.list_events``: outbox events, newest first."""
        params = {"before_id": before_id, "page_size": page_size}
        return (yield from self.models(Event, dq.LIST_EVENTS, params))
