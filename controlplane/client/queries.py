"""Every SQL statement the Python control plane sends on behalf of the office
API: the one place to read, grep and review the client's SQL.

A module of named :class:`Query` constants rather than a ``queries.sql`` file
of named queries (procrastinate's way): each statement also needs its asyncpg
form (``$n``), derived once here at import, and as Python names every use is
checked by mypy and found by grep - a misspelt query is an import error, not
a ``KeyError`` at run time - while the text stays plain SQL, one constant per
statement, with the why of each beside it.

Each statement is written in psycopg's ``%(name)s`` style and calls the SQL
API in named notation. The SQL a client builds itself runs on the caller's
search_path, which may put a schema someone else controls first: it names
``office.`` for every office object (and ``pg_catalog`` where it reads the
catalog).

Sections: the schema probe; runs; agents; tasks; parent wakes; events;
routines and wakeups; the daemon's loops; the demo's checks (read the tables
directly, as their owner); ``officectl stats`` and ``events tail``; the
doctor's (the catalog, the settings, rows read as their owner); the
dedup-index lookups, the bulk fallback's transaction and the session reset
of raw statements.

What stays elsewhere is administration, not office API calls: the catalog
and admin statements of ``migrate``, ``embedded``, ``cluster``, ``proxy``,
``schema`` and ``cli_base``, and the subscriber's own two statements. The
dashboard's reads are this module's sibling,
:mod:`controlplane.client.dashboard_queries`: the same form, kept apart so
this module stays one section per capability of the API.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s")


@dataclass(frozen=True)
class Query:
    """One SQL statement in psycopg form (``%(name)s``) and its asyncpg form
    (``$n``, with the parameter names in ``$n`` order)."""

    text: str
    parametrized: bool = True
    asyncpg_text: str = field(init=False)
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        names: list[str] = []
        if self.parametrized:

            def number(match: re.Match[str]) -> str:
                name = match.group(1)
                if name is None:
                    return "%"
                if name not in names:
                    names.append(name)
                return f"${names.index(name) + 1}"

            converted = _PLACEHOLDER.sub(number, self.text)
        else:
            converted = self.text
        object.__setattr__(self, "asyncpg_text", converted)
        object.__setattr__(self, "names", tuple(names))

    def asyncpg_args(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]


# The SQL a client builds itself runs on the caller's search_path, which may
# put a schema someone else controls first: it names pg_catalog for every
# function and operator (ARCHITECTURE.md, principle 8). pg_attribute, not
# information_schema.columns: the latter hides the columns of a table the
# role has no privilege on, and no office role may read office.runs directly.
PROBE_RUNS_COLUMN = Query(
    "SELECT 1 FROM pg_catalog.pg_attribute"
    " WHERE attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('office.runs')"
    " AND attname OPERATOR(pg_catalog.=) %(column)s"
    " AND attnum OPERATOR(pg_catalog.>) 0 AND NOT attisdropped"
)

ENQUEUE_RUN = Query(
    "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run("
    "agent_profile_id => %(agent_profile_id)s, reason => %(reason)s,"
    " payload => %(payload)s::pg_catalog.jsonb, idempotency_key => %(idempotency_key)s,"
    " task_id => %(task_id)s, entry_triggered => %(entry_triggered)s,"
    " keyless_cause => %(keyless_cause)s, keyless_detail => %(keyless_detail)s)"
)

# The same call for a schema without runs.entry_triggered (0.1.0).
ENQUEUE_RUN_WITHOUT_ENTRY_TRIGGERED = Query(
    "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run("
    "agent_profile_id => %(agent_profile_id)s, reason => %(reason)s,"
    " payload => %(payload)s::pg_catalog.jsonb, idempotency_key => %(idempotency_key)s,"
    " task_id => %(task_id)s,"
    " keyless_cause => %(keyless_cause)s, keyless_detail => %(keyless_detail)s)"
)

ENQUEUE_RUNS = Query(
    "SELECT ordinality, outcome, dedup_kind, run_id"
    " FROM office.enqueue_runs(requests => %(requests)s::pg_catalog.jsonb)"
)

CLAIM_RUN = Query(
    "SELECT * FROM office.claim_run("
    "worker_id => %(worker_id)s, agent_profile_id => %(agent_profile_id)s)"
)

FINISH_RUN = Query(
    "SELECT office.finish_run(run_id => %(run_id)s, attempt => %(attempt)s) AS changed"
)

FAIL_RUN = Query(
    "SELECT office.fail_run(run_id => %(run_id)s, attempt => %(attempt)s,"
    " error_message => %(error_message)s) AS changed"
)

RETRY_RUN = Query(
    "SELECT office.retry_run(run_id => %(run_id)s, attempt => %(attempt)s,"
    " delay => %(delay)s) AS changed"
)

CANCEL_RUN = Query(
    "SELECT office.cancel_run(run_id => %(run_id)s, reason => %(reason)s) AS changed"
)

RECOVER_STALE_RUNS = Query(
    "SELECT office.recover_stale_runs(older_than => %(older_than)s) AS count"
)

HEARTBEAT_RUN = Query(
    "SELECT office.heartbeat_run(run_id => %(run_id)s, attempt => %(attempt)s) AS changed"
)

GET_RUN = Query("SELECT * FROM office.get_run(run_id => %(run_id)s)")

RUN_KEYS = Query(
    "SELECT idempotency_key, recorded_at, how FROM office.run_keys(run_id => %(run_id)s)"
)

# The same three for a schema without leases (before 0.4.0): no heartbeat to
# renew, so "still yours?" is all a worker can be told; the run's row is read
# directly (which only the table's owner may do); its own key is the only key
# it serves there.
HEARTBEAT_RUN_WITHOUT_LEASES = Query(
    "SELECT EXISTS (SELECT FROM office.runs WHERE id = %(run_id)s"
    " AND status = 'claimed' AND attempt = %(attempt)s) AS changed"
)
GET_RUN_WITHOUT_LEASES = Query("SELECT * FROM office.runs WHERE id = %(run_id)s")
RUN_KEYS_WITHOUT_LEASES = Query(
    "SELECT idempotency_key, requested_at AS recorded_at, 'own' AS how FROM office.runs"
    " WHERE id = %(run_id)s AND idempotency_key IS NOT NULL"
)

PRUNE_RUNS = Query("SELECT office.prune_runs(older_than => %(older_than)s) AS count")

UPSERT_AGENT = Query(
    "SELECT * FROM office.upsert_agent(id => %(id)s, workspace_id => %(workspace_id)s,"
    " name => %(name)s, status => %(status)s)"
)

SET_AGENT_STATUS = Query(
    "SELECT * FROM office.set_agent_status(id => %(id)s, status => %(status)s)"
)

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

CLAIM_EVENTS = Query(
    "SELECT * FROM office.claim_events(consumer => %(consumer)s, max_rows => %(max_rows)s,"
    " visibility => %(visibility)s)"
)

ACK_EVENTS = Query("SELECT office.ack_events(ids => %(ids)s::bigint[]) AS count")

CREATE_ROUTINE = Query(
    "SELECT * FROM office.create_routine("
    "workspace_id => %(workspace_id)s, name => %(name)s,"
    " task_template => %(task_template)s::pg_catalog.jsonb,"
    " assignee_agent_profile_id => %(assignee_agent_profile_id)s,"
    " concurrency_policy => %(concurrency_policy)s, variables => %(variables)s::pg_catalog.jsonb,"
    " id => %(id)s, catch_up_policy => %(catch_up_policy)s, catch_up_max => %(catch_up_max)s)"
)

ADD_ROUTINE_TRIGGER = Query(
    "SELECT * FROM office.add_routine_trigger("
    "routine_id => %(routine_id)s, cron_expression => %(cron_expression)s,"
    " timezone => %(timezone)s, next_run_at => %(next_run_at)s, id => %(id)s)"
)

CLAIM_ROUTINE_TICK = Query(
    "SELECT office.claim_routine_tick(trigger_id => %(trigger_id)s,"
    " observed_next_run_at => %(observed_next_run_at)s,"
    " following_next_run_at => %(following_next_run_at)s) AS changed"
)

DISPATCH_ROUTINE = Query(
    "SELECT routine_run_id, status, linked_task_id, coalesced_into_run_id, wakeup_request_id,"
    " wakeup_outcome, run_id, idempotency_key, error_message, workspace_id"
    " FROM office.dispatch_routine("
    "routine_id => %(routine_id)s, source => %(source)s,"
    " variables => %(variables)s::pg_catalog.jsonb,"
    " trigger_id => %(trigger_id)s, claimed_tick => %(claimed_tick)s,"
    " explicit_key => %(explicit_key)s, missed_ticks => %(missed_ticks)s,"
    " missed_since => %(missed_since)s, missed_truncated => %(missed_truncated)s)"
)

CLOSE_ROUTINE_RUN = Query(
    "SELECT office.close_routine_run(routine_run_id => %(routine_run_id)s,"
    " terminal => %(terminal)s) AS changed"
)

SYNC_ROUTINE_RUN_STATUS = Query(
    "SELECT office.sync_routine_run_status(task_id => %(task_id)s,"
    " terminal => %(terminal)s) AS changed"
)

REQUEST_WAKEUP = Query(
    "SELECT outcome, dedup_kind, wakeup_request_id FROM office.request_wakeup("
    "agent_profile_id => %(agent_profile_id)s, source => %(source)s, reason => %(reason)s,"
    " payload => %(payload)s::pg_catalog.jsonb, idempotency_key => %(idempotency_key)s)"
)

DISPATCH_WAKEUP = Query(
    "SELECT status, run_id FROM office.dispatch_wakeup(wakeup_request_id => %(wakeup_request_id)s)"
)

FAIL_WAKEUP = Query(
    "SELECT office.fail_wakeup(wakeup_request_id => %(wakeup_request_id)s,"
    " reason => %(reason)s) AS changed"
)


# --- the daemon's loops (sql/70_daemon.sql) ----------------------------------------

# The database's clock decides what is due (one clock for every daemon): the
# scan's default ``at`` is the transaction's now(), returned with each row.
# A time Python cannot represent (year 1 to 9999, with a day's margin for the
# session's time zone) would fail the whole batch as it loads: it comes as
# NULL, with its text, and only its own row is set aside.
DUE_ROUTINE_TRIGGERS = Query(
    "SELECT now() AS at, t.trigger_id, t.routine_id, t.cron_expression, t.timezone, t.enabled,"
    " t.catch_up_policy, t.catch_up_max,"
    " CASE WHEN t.next_run_at BETWEEN %(lo)s AND %(hi)s THEN t.next_run_at END AS next_run_at,"
    " CASE WHEN t.last_fired_at BETWEEN %(lo)s AND %(hi)s THEN t.last_fired_at END"
    " AS last_fired_at,"
    " CASE WHEN t.next_run_at NOT BETWEEN %(lo)s AND %(hi)s"
    " OR t.last_fired_at NOT BETWEEN %(lo)s AND %(hi)s"
    " THEN format('next_run_at %%s, last_fired_at %%s', t.next_run_at, t.last_fired_at)"
    " END AS unrepresentable"
    " FROM office.due_routine_triggers(max_rows => %(max_rows)s) t"
)
#: The bounds of DUE_ROUTINE_TRIGGERS: the times Python represents.
REPRESENTABLE = {"lo": "0001-01-02 00:00:00+00", "hi": "9999-12-30 00:00:00+00"}

FIRE_ROUTINE_TICK = Query(
    "SELECT * FROM office.fire_routine_tick("
    "trigger_id => %(trigger_id)s, observed_next_run_at => %(observed)s,"
    " following_next_run_at => %(following)s, missed_ticks => %(missed_ticks)s,"
    " missed_since => %(missed_since)s, missed_truncated => %(missed_truncated)s)"
)

SET_ASIDE = Query(
    "SELECT office.set_aside(loop => %(loop)s, row_id => %(row_id)s, reason => %(reason)s,"
    " sqlstate => %(sqlstate)s) AS changed"
)

TAKE_POISON_REPORTS = Query(
    "SELECT row_id, reason, sqlstate FROM office.take_poison_reports(loop => %(loop)s)"
)

DISPATCH_QUEUED_WAKEUPS = Query(
    "SELECT wakeup_request_id, agent_profile_id, status, run_id, error_message"
    " FROM office.dispatch_queued_wakeups(max_rows => %(max_rows)s, min_age => %(min_age)s)"
)

PRUNE_EVENTS = Query("SELECT office.prune_events(older_than => %(older_than)s) AS count")

# As one JSON object without the times of the oldest event and claim: a time
# written by hand outside Python's years would fail to load and stop the
# stats loop (a lag of -infinity comes as the text "-Infinity", which a float
# takes); a schema older than 0.4.0 simply has no poison columns.
DAEMON_STATS = Query(
    "SELECT to_jsonb(s) - 'oldest_pending_event_at' - 'oldest_claimed_at' AS value"
    " FROM office.daemon_stats() s"
)
QUEUE_STATS = Query("SELECT status, runs FROM office.queue_stats")
DEDUP_STATS = Query("SELECT queue, reason, kind, total FROM office.dedup_stats")
SCHEMA_VERSION = Query("SELECT office.schema_version() AS value")


# --- the demo's checks (controlplane.demo) ---------------------------------------------
#
# The demo runs as the tables' owner and checks its invariants against the
# rows themselves, not through the API it is testing. ``p`` is a LIKE pattern
# (the demo's prefix).

DEMO_HANDLED_ASSIGNMENTS = Query(
    "SELECT * FROM office.events"
    " WHERE topic = 'task.assigned' AND task_id LIKE %(p)s AND processed_at IS NOT NULL"
    " ORDER BY id DESC LIMIT 20"
)
DEMO_OPEN_ROUTINE_TASKS = Query(
    "SELECT rr.linked_task_id FROM office.routine_runs rr"
    " WHERE rr.routine_id IN (%(a)s, %(b)s) AND rr.status = 'task_created'"
)
DEMO_RECENT_TICK_KEYS = Query(
    "SELECT idempotency_key FROM office.wakeup_requests"
    " WHERE idempotency_key LIKE %(p)s ORDER BY requested_at DESC LIMIT 10"
)
DEMO_RUN_COUNTS = Query(
    "SELECT count(*) AS runs, count(*) FILTER (WHERE status = 'finished') AS finished,"
    " count(*) FILTER (WHERE status = 'failed') AS failed,"
    " count(*) FILTER (WHERE status IN ('queued', 'claimed')) AS open"
    " FROM office.runs WHERE agent_profile_id LIKE %(p)s"
)
DEMO_WAKEUP_COUNTS = Query(
    "SELECT count(*) FILTER (WHERE status = 'coalesced') AS coalesced,"
    " count(*) FILTER (WHERE status = 'skipped') AS skipped, count(*) AS total"
    " FROM office.wakeup_requests WHERE agent_profile_id LIKE %(p)s"
)
DEMO_FIRE_COUNTS = Query(
    "SELECT count(*) FILTER (WHERE status = 'coalesced') AS coalesced,"
    " count(*) FILTER (WHERE status = 'skipped') AS skipped,"
    " count(*) FILTER (WHERE status IN ('task_created', 'done')) AS materialised,"
    " count(*) FILTER (WHERE source = 'cron') AS cron, count(*) AS total"
    " FROM office.routine_runs WHERE routine_id LIKE %(p)s"
)
# Both of one snapshot: the wave the key and the generation name is the same.
DEMO_CHILD_WAVE = Query(
    "SELECT office.child_set_key(%(p)s) AS k, office.child_generation(%(p)s) AS g"
)
DEMO_RUN_STATE = Query("SELECT status, claimed_by, attempt FROM office.runs WHERE id = %(id)s")
DEMO_PENDING_EVENTS = Query(
    "SELECT count(*) AS n FROM office.events WHERE processed_at IS NULL AND task_id LIKE %(p)s"
)
DEMO_KEYS_HELD_TWICE = Query(
    "SELECT (SELECT count(*) FROM (SELECT idempotency_key FROM office.runs"
    " WHERE idempotency_key IS NOT NULL GROUP BY 1 HAVING count(*) > 1) r) AS runs,"
    " (SELECT count(*) FROM (SELECT idempotency_key FROM office.wakeup_requests"
    " WHERE idempotency_key IS NOT NULL GROUP BY 1 HAVING count(*) > 1) w) AS wakeups"
)
DEMO_RUNS_BY_KEY = Query(
    "SELECT idempotency_key, count(*) AS n FROM office.runs"
    " WHERE idempotency_key = ANY(%(k)s) GROUP BY 1"
)
DEMO_WAKEUPS_BY_KEY = Query(
    "SELECT idempotency_key, count(*) AS n FROM office.wakeup_requests"
    " WHERE idempotency_key = ANY(%(k)s) GROUP BY 1"
)
DEMO_COALESCED_BUCKETS = Query(
    "SELECT DISTINCT agent_profile_id, reason, task_id FROM office.runs"
    " WHERE agent_profile_id LIKE %(p)s AND coalesced_count > 1"
)
DEMO_HELD_ROUTINE_GATES = Query(
    "SELECT count(*) AS n FROM office.routine_runs rr"
    " WHERE rr.routine_id LIKE %(p)s AND rr.status = 'task_created'"
    " AND office.task_terminal_status(rr.linked_task_id) <> ''"
)


# --- officectl stats and events tail (controlplane.cli_observe) ------------------------
#
# Read only: the tail reads office.events by id and never claims or
# acknowledges anything.

OBSERVE_STATS = {
    "dedup_stats": Query(
        "SELECT queue, reason, kind, total FROM office.dedup_stats"
        ' ORDER BY queue COLLATE "C", reason COLLATE "C", kind COLLATE "C"'
    ),
    "keyless_stats": Query(
        "SELECT reason, cause, total FROM office.keyless_stats"
        ' ORDER BY reason COLLATE "C", cause COLLATE "C"'
    ),
    "queue_stats": Query(
        "SELECT status, agents, runs, oldest_requested_at FROM office.queue_stats"
    ),
}
_EVENT_COLUMNS = (
    "id, topic, task_id, payload, created_at, processed_at, claimed_by, claimed_at, deliveries"
)
OBSERVE_NEWEST_EVENTS = Query(
    f"SELECT {_EVENT_COLUMNS} FROM office.events ORDER BY id DESC LIMIT %(limit)s"
)
OBSERVE_NEWEST_EVENT_ID = Query("SELECT coalesce(max(id), 0) AS value FROM office.events")
OBSERVE_EVENTS_AFTER = Query(
    f"SELECT {_EVENT_COLUMNS} FROM office.events WHERE id > %(since)s ORDER BY id LIMIT %(limit)s"
)
OBSERVE_EVENTS_POLL = Query(
    f"SELECT {_EVENT_COLUMNS} FROM office.events"
    " WHERE id > %(last)s OR id = ANY(%(gaps)s::bigint[])"
    " ORDER BY id LIMIT %(rows)s"
)


# --- the doctor's checks (controlplane.doctor) ------------------------------------------
#
# What ``officectl doctor`` reads on its own connection: the catalog (is the
# installation sound?), the session's settings, and - as the owner - rows
# that no office function returns.

DOCTOR_OFFICE_SCHEMA = Query("SELECT count(*) AS value FROM pg_namespace WHERE nspname = 'office'")
DOCTOR_EXTENSION = Query(
    "SELECT e.extversion, a.default_version FROM pg_extension e"
    " LEFT JOIN pg_available_extensions a ON a.name = e.extname"
    " WHERE e.extname = 'office'"
)
DOCTOR_INDEXES = Query(
    "SELECT c.relname, pg_get_indexdef(i.indexrelid) AS definition,"
    " i.indisvalid AND i.indisready AS valid"
    " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = 'office' AND c.relname = ANY(%(names)s)"
)
DOCTOR_ROLES = Query("SELECT rolname FROM pg_roles WHERE rolname = ANY(%(names)s)")
DOCTOR_ADMIN_MEMBER_OF = Query("SELECT pg_has_role('office_admin', %(role)s, 'MEMBER') AS value")
DOCTOR_SCHEMA_USAGE = Query("SELECT has_schema_privilege(%(role)s, 'office', 'USAGE') AS value")
DOCTOR_PUBLIC_ON_SCHEMA = Query(
    "SELECT a.privilege_type FROM pg_namespace n, aclexplode(n.nspacl) a"
    " WHERE n.nspname = 'office' AND a.grantee = 0 ORDER BY 1"
)
DOCTOR_PUBLIC_FUNCTIONS = Query(
    "SELECT p.oid::regprocedure::text AS function FROM pg_proc p"
    " JOIN pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = 'office'"
    " AND (p.proacl IS NULL OR EXISTS ("
    " SELECT FROM aclexplode(p.proacl) a WHERE a.grantee = 0))"
    " ORDER BY 1"
)
DOCTOR_PUBLIC_RELATIONS = Query(
    "SELECT c.oid::regclass::text AS relation,"
    " string_agg(DISTINCT a.privilege_type, ', ') AS privileges"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,"
    " aclexplode(c.relacl) a"
    " WHERE n.nspname = 'office' AND a.grantee = 0"
    " GROUP BY 1 ORDER BY 1"
)
DOCTOR_ADMIN_EXISTS = Query("SELECT count(*) AS value FROM pg_roles WHERE rolname = 'office_admin'")
DOCTOR_ADMIN_DENIED = Query(
    "SELECT p.oid::regprocedure::text AS function FROM pg_proc p"
    " JOIN pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = 'office' AND left(p.proname, 1) <> '_'"
    " AND p.prorettype <> 'trigger'::regtype"
    " AND NOT has_function_privilege('office_admin', p.oid, 'EXECUTE')"
    " ORDER BY 1"
)
DOCTOR_SESSION_SETTING = Query("SELECT current_setting(%(name)s, true) AS value")
DOCTOR_STORED_SETTINGS = Query(
    "SELECT CASE WHEN s.setrole = 0 THEN 'ALTER DATABASE ' || quote_ident(current_database())"
    " WHEN s.setdatabase = 0 THEN 'ALTER ROLE ' || quote_ident(r.rolname)"
    " ELSE 'ALTER ROLE ' || quote_ident(r.rolname)"
    " || ' IN DATABASE ' || quote_ident(current_database()) END AS place,"
    " substr(c.item, length(%(name)s) + 2) AS value"
    " FROM pg_db_role_setting s"
    " LEFT JOIN pg_roles r ON r.oid = s.setrole,"
    " unnest(s.setconfig) AS c(item)"
    " WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database"
    " WHERE datname = current_database()))"
    " AND c.item LIKE %(name)s || '=%%'"
    " ORDER BY 1"
)
DOCTOR_NEGATIVE_INTERVAL = Query("SELECT %(value)s::interval < interval '0' AS value")
DOCTOR_ENTRY_TRIGGERED = Query(
    "SELECT count(*) AS value FROM pg_attribute"
    " WHERE attrelid = 'office.runs'::regclass AND attname = 'entry_triggered'"
    " AND NOT attisdropped"
)


def _across_workspaces(references: str) -> Query:
    """The first ``limit`` rows (and their count) of a query of (row, its
    workspace, what it references, that one's workspace)."""
    return Query(
        "SELECT count(*) OVER () AS total, x.* FROM (" + references + ")"
        " AS x(id, space, other, other_space)"
        ' ORDER BY x.id COLLATE "C", x.other COLLATE "C" LIMIT %(limit)s'
    )


#: Each kind of reference that must stay inside one workspace.
DOCTOR_ACROSS_WORKSPACES = {
    "task parent": _across_workspaces(
        "SELECT t.id, t.workspace_id, p.id, p.workspace_id FROM office.tasks t"
        " JOIN office.tasks p ON p.id = t.parent_id WHERE p.workspace_id <> t.workspace_id"
    ),
    "task blocker": _across_workspaces(
        "SELECT t.id, t.workspace_id, b.id, b.workspace_id FROM office.task_blockers e"
        " JOIN office.tasks t ON t.id = e.task_id JOIN office.tasks b ON b.id = e.blocker_task_id"
        " WHERE b.workspace_id <> t.workspace_id"
    ),
    "task assignee": _across_workspaces(
        "SELECT t.id, t.workspace_id, a.id, a.workspace_id FROM office.tasks t"
        " JOIN office.agent_profiles a ON a.id = t.assignee_agent_profile_id"
        " WHERE a.workspace_id <> t.workspace_id"
    ),
    "routine assignee": _across_workspaces(
        "SELECT r.id, r.workspace_id, a.id, a.workspace_id FROM office.routines r"
        " JOIN office.agent_profiles a ON a.id = r.assignee_agent_profile_id"
        " WHERE a.workspace_id <> r.workspace_id"
    ),
}
DOCTOR_POISON_TABLE = Query("SELECT to_regclass('office.poison') AS value")
DOCTOR_POISON_READABLE = Query("SELECT has_table_privilege('office.poison', 'SELECT') AS value")
DOCTOR_POISON = Query(
    "SELECT loop, row_id, reason, sqlstate, set_aside_at, count(*) OVER () AS total"
    ' FROM office.poison ORDER BY set_aside_at, loop, row_id COLLATE "C" LIMIT %(limit)s'
)


# --- dedup-index recovery, the bulk fallback, raw statements -------------------------

# Who holds a key that a statement collided with (raw INSERT, older schema).
FIND_RUN_BY_KEY = Query(
    "SELECT id, agent_profile_id, reason FROM office.runs"
    " WHERE idempotency_key OPERATOR(pg_catalog.=) %(key)s"
)
FIND_WAKEUP_BY_KEY = Query(
    "SELECT id, agent_profile_id, reason FROM office.wakeup_requests"
    " WHERE idempotency_key OPERATOR(pg_catalog.=) %(key)s"
)

# What a connection that ran raw statements gets before it is reused (the
# default reset of asyncpg pools; psycopg allows several statements here
# because there are no parameters).
RESET_SESSION = Query(
    "CLOSE ALL; UNLISTEN *; RESET ALL; SELECT pg_catalog.pg_advisory_unlock_all()",
    parametrized=False,
)

# The bulk fallback's transaction (see Operations.enqueue_each).
BEGIN = Query("BEGIN")
COMMIT = Query("COMMIT")
ROLLBACK = Query("ROLLBACK")
SAVEPOINT_ELEMENT = Query("SAVEPOINT office_enqueue_element")
ROLLBACK_TO_ELEMENT = Query("ROLLBACK TO SAVEPOINT office_enqueue_element")
