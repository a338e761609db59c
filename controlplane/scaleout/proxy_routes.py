"""How each public function of the shard API is served on the proxy: the
routing table :func:`controlplane.scaleout.proxy.generate` writes the PL/Proxy
wrappers from (:mod:`controlplane.scaleout.proxy_wrappers`). A shard function missing
from :data:`ROUTES` fails the generation, so a new one cannot be forgotten.

Routing kinds:

* ``("workspace", arg)`` / ``("entity", kind, arg)``: one call on the
  partition of the workspace, or of the entity (``office._route``);
* ``("scope", scope, scope_id)``: a policy call, on the partition of the
  agent (scope ``agent``) or of the workspace (scope ``workspace``);
* ``"local"``: a pure key builder, copied and run on the proxy itself;
* ``"sum"``: every shard, counts added;
* ``"max"``: every shard, the greatest value (NULL when every shard says NULL);
* ``("ordered", arg, order)``: every shard, merged rows ordered and limited;
* ``("budget", arg)``: the shards in turn (from a random one), each given
  what is left of the limit, so the work done in all is at most the limit;
* ``"merge"``: every shard, the rows merged as one database's (text columns
  group, counts added, the oldest timestamp, the greatest lag, ``exact`` only
  when every shard is, jsonb counts added per key);
* ``"claim"``: ``claim_run``; routed by agent, or the shards in turn (from a
  random one) until one returns a run;
* ``("events_page", before, size)`` / ``("events_ack", ids)``: a page of events
  merged newest first / ids acknowledged on the shards they name. Event ids
  through the proxy are ``local_id * partitions + partition`` (a budget route
  returning events encodes them too);
* ``("poison", loop, row_id)``: a set-aside row, by its loop's kind of row;
* ``("split", elements, key, ordinal)``: a bulk call split by the shard of
  the ``key`` (the agent) of each of its ``elements``, the outcomes in
  element order by their ``ordinal`` column;
* ``"version"``: the version every shard runs.
"""

from __future__ import annotations

Route = str | tuple[str, ...]

ROUTES: dict[str, Route] = {
    "upsert_agent": ("workspace", "workspace_id"),
    "create_task": ("workspace", "workspace_id"),
    "create_routine": ("workspace", "workspace_id"),
    "enqueue_run": ("entity", "agent", "agent_profile_id"),
    "request_wakeup": ("entity", "agent", "agent_profile_id"),
    "set_agent_status": ("entity", "agent", "id"),
    "add_blocker": ("entity", "task", "task_id"),
    "remove_blocker": ("entity", "task", "task_id"),
    "archive_task": ("entity", "task", "task_id"),
    "assign_task": ("entity", "task", "task_id"),
    "get_task": ("entity", "task", "task_id"),
    "is_task_terminal": ("entity", "task", "task_id"),
    "move_task": ("entity", "task", "task_id"),
    "task_terminal_status": ("entity", "task", "task_id"),
    "sync_routine_run_status": ("entity", "task", "task_id"),
    "reconcile_parent": ("entity", "task", "parent_task_id"),
    "child_generation": ("entity", "task", "parent_task_id"),
    "child_set_key": ("entity", "task", "parent_task_id"),
    "add_routine_trigger": ("entity", "routine", "routine_id"),
    "dispatch_routine": ("entity", "routine", "routine_id"),
    "claim_routine_tick": ("entity", "trigger", "trigger_id"),
    "fire_routine_tick": ("entity", "trigger", "trigger_id"),
    "close_routine_run": ("entity", "routine_run", "routine_run_id"),
    "cancel_run": ("entity", "run", "run_id"),
    "fail_run": ("entity", "run", "run_id"),
    "finish_run": ("entity", "run", "run_id"),
    "get_run": ("entity", "run", "run_id"),
    "heartbeat_run": ("entity", "run", "run_id"),
    "retry_run": ("entity", "run", "run_id"),
    "requeue_run": ("entity", "run", "run_id"),
    "run_keys": ("entity", "run", "run_id"),
    "record_run_cost": ("entity", "run", "run_id"),
    "set_wake_policy": ("scope", "scope", "scope_id"),
    "clear_wake_policy": ("scope", "scope", "scope_id"),
    "explain_agent": ("entity", "agent", "agent_profile_id"),
    "dispatch_wakeup": ("entity", "wakeup", "wakeup_request_id"),
    "fail_wakeup": ("entity", "wakeup", "wakeup_request_id"),
    "assignment_key": "local",
    "blocker_digest": "local",
    "blockers_resolved_key": "local",
    "comment_key": "local",
    "routine_fingerprint": "local",
    "routine_key": "local",
    "second_precision_text": "local",
    "wake_operation_id": "local",
    "recover_stale_runs": "sum",
    "prune_events": "sum",
    "prune_runs": "sum",
    "prune_wake_decisions": "sum",
    # Bulk run actions: every shard gets every id and changes the runs it
    # holds (an id it does not know is skipped), so the counts add up.
    "requeue_runs": "sum",
    "cancel_runs": "sum",
    "mark_all_parents": "sum",
    "list_stuck_parents": ("ordered", "max_rows", 'parent_task_id COLLATE "C"'),
    "due_routine_triggers": (
        "ordered",
        "max_rows",
        'next_run_at NULLS FIRST, trigger_id COLLATE "C"',
    ),
    "sweep_stuck_parents": ("budget", "max_rows"),
    "dispatch_queued_wakeups": ("budget", "max_rows"),
    "take_poison_reports": ("budget", "max_rows"),
    "claim_run": "claim",
    # The dashboard's reads (sql/85_dashboard.sql): lists merged newest first
    # (or by id) and cut to the page; the run window ends where the newest of
    # the shards' windows ends, so no shard's runs are skipped or repeated.
    "list_runs": ("ordered", "page_size", "id DESC"),
    "run_window_end": "max",
    "list_agents": ("ordered", "page_size", "id"),
    "list_tasks": ("ordered", "page_size", "id DESC"),
    "list_routines": ("ordered", "page_size", "id DESC"),
    "list_wakeups": ("ordered", "page_size", "id DESC"),
    "list_task_children": ("entity", "task", "parent_task_id"),
    "list_task_blockers": ("entity", "task", "task_id"),
    "get_parent_receipt": ("entity", "task", "parent_task_id"),
    "get_routine": ("entity", "routine", "routine_id"),
    "list_routine_triggers": ("entity", "routine", "routine_id"),
    "list_routine_runs": ("entity", "routine", "routine_id"),
    "schema_version": "version",
    # Events: ids through the proxy are local_id * partitions + partition
    # (office._event_groups), so they are unique and name their shard.
    "claim_events": ("budget", "max_rows"),
    "list_events": ("events_page", "before_id", "page_size"),
    "ack_events": ("events_ack", "ids"),
    # A set-aside row: by the loop's kind of row (POISON_ROWS).
    "set_aside": ("poison", "loop", "row_id"),
    "release_poison": ("poison", "loop", "row_id"),
    "enqueue_runs": ("split", "requests", "agent_profile_id", "ordinality"),
    "daemon_stats": "merge",
    "run_status_counts": "merge",
}


# The entity kind of the rows each loop sets aside (sql/70_daemon.sql,
# office.poison): a row of another loop (prune, or one no shard knows) goes to
# partition 0; the subscriber's rows are events (office._event_groups).
POISON_ROWS: dict[str, str] = {
    "wakeups": "wakeup",
    "cron": "trigger",
    "sweep": "task",
    "recovery": "run",
}


# An entity route's second choice when its entity is unknown: (kind, argument)
# whose partition gets the call instead of partition 0. The shard's
# assign_task checks the agent before the task, so an unknown task must reach
# the agent's shard to be answered OFT01 as on one database, not OFA01 by a
# shard that does not hold the agent.
FALLBACKS: dict[str, tuple[str, str]] = {
    "assign_task": ("agent", "assignee_agent_profile_id"),
}


# What one database refuses across workspaces and a shard cannot see when the
# other entity lives on another shard: (kind, argument, SQLSTATE) checked on
# the proxy before the call (office._checked_partition).
CHECKS: dict[str, list[tuple[str, str, str]]] = {
    "upsert_agent": [("agent", "id", "OFW01")],
    "create_task": [
        ("task", "id", "23505"),
        ("task", "parent_id", "OFW01"),
        ("agent", "assignee_agent_profile_id", "OFW01"),
    ],
    "create_routine": [
        ("routine", "id", "23505"),
        ("agent", "assignee_agent_profile_id", "OFW01"),
    ],
    "assign_task": [("agent", "assignee_agent_profile_id", "OFW01")],
    "enqueue_run": [("run", "cause_run_id", "OFW01")],
    "add_blocker": [("task", "blocker_task_id", "OFW01")],
}
