"""The operations of tasks and parent wakes (docs/api.md §2, §5): one flow each,
shared by both clients (see :mod:`controlplane.client.core`)."""

from __future__ import annotations

from controlplane.client.core import Flow, OperationsCore
from controlplane.client.queries import tasks as q
from controlplane.models import (
    CHILDREN_COMPLETED,
    ActorType,
    AssignResult,
    ReconcileResult,
    StuckParent,
    Task,
    TaskResult,
    TaskState,
    TaskTerminalStatus,
)

__all__ = ["TaskOperations"]


class TaskOperations(OperationsCore):
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
    ) -> Flow[TaskResult]:
        """``office.create_task``: generation 1 with assignee and step (else
        0), and for an Office task with an assignee its ``task_assigned`` run."""
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
        return (yield from self.one(TaskResult, q.CREATE_TASK, params))

    def assign_task(
        self,
        task_id: str,
        assignee_agent_profile_id: str | None,
        actor_id: str | None = None,
        actor_type: ActorType | str = ActorType.USER,
    ) -> Flow[AssignResult]:
        """``office.assign_task``: the generation this call committed, the
        interrupt flag and the ``task_assigned`` run (None/'' unassigns)."""
        params = {
            "task_id": task_id,
            "assignee_agent_profile_id": assignee_agent_profile_id,
            "actor_id": actor_id,
            "actor_type": str(actor_type),
        }
        return (yield from self.one(AssignResult, q.ASSIGN_TASK, params))

    def move_task(self, task_id: str, state: TaskState | str) -> Flow[Task]:
        """``office.move_task``; the terminal effects run in the same transaction."""
        return (yield from self.one(Task, q.MOVE_TASK, {"task_id": task_id, "state": str(state)}))

    def archive_task(self, task_id: str) -> Flow[Task]:
        """``office.archive_task``: the task, archived."""
        return (yield from self.one(Task, q.ARCHIVE_TASK, {"task_id": task_id}))

    def get_task(self, task_id: str) -> Flow[Task | None]:
        """``office.get_task``: the task, or None."""
        return (yield from self.first(Task, q.GET_TASK, {"task_id": task_id}))

    def add_blocker(self, task_id: str, blocker_task_id: str) -> Flow[None]:
        """``blocker_task_id`` now blocks ``task_id`` (a cycle is InvalidArgument)."""
        yield from self.done(
            q.ADD_BLOCKER, {"task_id": task_id, "blocker_task_id": blocker_task_id}
        )

    def remove_blocker(self, task_id: str, blocker_task_id: str) -> Flow[None]:
        """``blocker_task_id`` no longer blocks ``task_id``."""
        yield from self.done(
            q.REMOVE_BLOCKER, {"task_id": task_id, "blocker_task_id": blocker_task_id}
        )

    def task_terminal_status(self, task_id: str) -> Flow[TaskTerminalStatus]:
        """``office.task_terminal_status``: done, failed, cancelled, '' (open) or missing."""
        value = yield from self.value(q.TASK_TERMINAL_STATUS, {"task_id": task_id})
        return TaskTerminalStatus(value)

    def is_task_terminal(self, task_id: str) -> Flow[bool]:
        """``office.is_task_terminal``."""
        return bool((yield from self.value(q.IS_TASK_TERMINAL, {"task_id": task_id})))

    def child_set_key(self, parent_task_id: str) -> Flow[str]:
        """``office.child_set_key``: the key of the parent's current child set."""
        params = {"parent_task_id": parent_task_id}
        return str((yield from self.value(q.CHILD_SET_KEY, params)))

    def child_generation(self, parent_task_id: str) -> Flow[str]:
        """``office.child_generation``: the generation of the parent's child wave."""
        params = {"parent_task_id": parent_task_id}
        return str((yield from self.value(q.CHILD_GENERATION, params)))

    # parent wakes -------------------------------------------------------------

    def list_stuck_parents(
        self, max_rows: int = 5, reason: str = CHILDREN_COMPLETED
    ) -> Flow[list[StuckParent]]:
        """``office.list_stuck_parents``: parents whose finished child wave
        nobody delivered, ordered by id (every candidate condition applied
        before the limit)."""
        params = {"max_rows": max_rows, "reason": reason}
        return (yield from self.models(StuckParent, q.LIST_STUCK_PARENTS, params))

    def reconcile_parent(
        self, parent_task_id: str, child_set_key: str, newest_child_updated_at: str
    ) -> Flow[ReconcileResult]:
        """``office.reconcile_parent``: wake one stuck parent with the edge
        path's key and write its receipt, or decline (``skipped_reason``)."""
        params = {
            "parent_task_id": parent_task_id,
            "child_set_key": child_set_key,
            "newest_child_updated_at": newest_child_updated_at,
        }
        result = yield from self.one(ReconcileResult, q.RECONCILE_PARENT, params)
        self.reporter.report_reconcile(result)
        return result

    def sweep_stuck_parents(self, max_rows: int = 5) -> Flow[list[ReconcileResult]]:
        """``office.sweep_stuck_parents``: one tick of the stuck-parent sweep
        (counted: candidates, emitted, assignee_unresolved)."""
        params = {"max_rows": max_rows}
        results = yield from self.models(ReconcileResult, q.SWEEP_STUCK_PARENTS, params)
        for result in results:  # the statement has committed: so have the receipts
            self.reporter.report_parent_candidate(result.parent_task_id)
            self.reporter.report_reconcile(result)
        return results
