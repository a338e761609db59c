"""The demo's checks (read by :mod:`controlplane.demo.reads`, one typed
function each over ``Office.fetch``).

The demo runs as the tables' owner and checks its invariants against the
rows themselves, not through the API it is testing. ``p`` is a LIKE pattern
(the demo's prefix)."""

from __future__ import annotations

from controlplane.client.queries import Query

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
# The wake decisions of the demo's governance agents (controlplane.demo.governance).
DEMO_WAKE_DECISIONS = Query(
    "SELECT decision, agent_profile_id, chain_depth FROM office.wake_decisions"
    " WHERE agent_profile_id LIKE %(p)s ORDER BY id"
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
