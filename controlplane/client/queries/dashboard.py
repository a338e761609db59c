"""The dashboard's statements (``sql/85_dashboard.sql`` and the views the
pages read; :mod:`controlplane.client.dashboard` and ``ui/queries.py``).

The read-only pages' reads: each list is keyset-paginated with a bound
(``page_size``), so a table of millions of rows costs one index range per
page; every function is callable by ``office_reader``.
"""

from __future__ import annotations

from controlplane.client.queries import Query

# --- the dashboard's functions (sql/85_dashboard.sql) -----------------------------------

RUN_WINDOW_END = Query("SELECT office.run_window_end(before_id => %(before_id)s) AS value")
LIST_RUNS = Query(
    "SELECT * FROM office.list_runs(status => %(status)s,"
    " agent_profile_id => %(agent_profile_id)s, reason => %(reason)s, task_id => %(task_id)s,"
    " key_prefix => %(key_prefix)s, before_id => %(before_id)s,"
    " not_before_id => %(not_before_id)s, page_size => %(page_size)s)"
)
RUN_STATUS_COUNTS = Query("SELECT * FROM office.run_status_counts()")
LIST_AGENTS = Query(
    "SELECT * FROM office.list_agents(after_id => %(after_id)s, page_size => %(page_size)s)"
)
LIST_TASKS = Query(
    "SELECT * FROM office.list_tasks(before_id => %(before_id)s, page_size => %(page_size)s)"
)
LIST_TASK_CHILDREN = Query(
    "SELECT * FROM office.list_task_children(parent_task_id => %(parent_task_id)s,"
    " page_size => %(page_size)s)"
)
LIST_TASK_BLOCKERS = Query(
    "SELECT * FROM office.list_task_blockers(task_id => %(task_id)s, page_size => %(page_size)s)"
)
GET_PARENT_RECEIPT = Query(
    "SELECT child_set_key, child_generation, delivered_run_id, delivery_operation_id,"
    " delivered_at FROM office.get_parent_receipt(parent_task_id => %(parent_task_id)s)"
)
LIST_ROUTINES = Query(
    "SELECT * FROM office.list_routines(before_id => %(before_id)s, page_size => %(page_size)s)"
)
GET_ROUTINE = Query("SELECT * FROM office.get_routine(routine_id => %(routine_id)s)")
LIST_ROUTINE_TRIGGERS = Query(
    "SELECT * FROM office.list_routine_triggers(routine_id => %(routine_id)s,"
    " page_size => %(page_size)s)"
)
LIST_ROUTINE_RUNS = Query(
    "SELECT * FROM office.list_routine_runs(routine_id => %(routine_id)s,"
    " page_size => %(page_size)s)"
)
LIST_WAKEUPS = Query(
    "SELECT * FROM office.list_wakeups(before_id => %(before_id)s, page_size => %(page_size)s)"
)
LIST_EVENTS = Query(
    "SELECT * FROM office.list_events(before_id => %(before_id)s, page_size => %(page_size)s)"
)

# --- the pages' other reads (views and tables granted to office_reader) -----------------
# Run through ``Office.fetch``: page read models, not API results.

DASHBOARD_DEDUP_STATS = Query(
    "SELECT queue, reason, kind, total FROM office.dedup_stats"
    ' ORDER BY queue COLLATE "C", reason COLLATE "C", kind COLLATE "C"'
)
DASHBOARD_KEYLESS_STATS = Query(
    "SELECT reason, cause, total FROM office.keyless_stats"
    ' ORDER BY reason COLLATE "C", cause COLLATE "C"'
)
DASHBOARD_DAEMON_STATS = Query("SELECT * FROM office.daemon_stats()")
DASHBOARD_POISON = Query(
    "SELECT loop, row_id, reason, sqlstate, set_aside_at, reported_at FROM office.poison"
    " ORDER BY loop, row_id LIMIT %(limit)s"
)
# The cron loop sets a trigger aside under its id (office.poison's key).
DASHBOARD_TRIGGER_POISON = Query(
    "SELECT row_id, reason, sqlstate, set_aside_at FROM office.poison"
    " WHERE loop = 'cron' AND row_id = ANY (%(ids)s)"
)
# The child generation only for a parent (it is a hash of the children), and
# whether the parent is among the first stuck ones the sweep would find.
DASHBOARD_TASK_WAKE_STATE = Query(
    "SELECT CASE WHEN %(has_children)s THEN office.child_generation(%(id)s) END"
    " AS generation, EXISTS (SELECT FROM office.list_stuck_parents(%(size)s) s"
    " WHERE s.parent_task_id = %(id)s) AS stuck"
)
# The database decides what the role may do; the UI only asks.
DASHBOARD_MAY_EXECUTE = Query(
    "SELECT pg_catalog.has_function_privilege(current_user, %(fn)s, 'EXECUTE') AS ok"
)
DASHBOARD_ROLE = Query("SELECT current_user AS role")
# The session set-up of the UI's pool: a page's longest statement.
DASHBOARD_STATEMENT_TIMEOUT = Query(
    "SELECT pg_catalog.set_config('statement_timeout', %(timeout)s, false)"
)
