"""The statements of tasks and parent wakes (:mod:`controlplane.client.tasks`;
docs/api.md §2, §5)."""

from __future__ import annotations

from controlplane.client.queries import Query

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
