"""The statements of the run queue, the agents and the schema version
(:mod:`controlplane.client.runs`; docs/api.md §2-§3), and the bulk fallback's
transaction."""

from __future__ import annotations

from controlplane.client.queries import Query

ENQUEUE_RUN = Query(
    "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run("
    "agent_profile_id => %(agent_profile_id)s, reason => %(reason)s,"
    " payload => %(payload)s::pg_catalog.jsonb, idempotency_key => %(idempotency_key)s,"
    " task_id => %(task_id)s, entry_triggered => %(entry_triggered)s,"
    " keyless_cause => %(keyless_cause)s, keyless_detail => %(keyless_detail)s)"
)

# The call with the arguments of 0.5.0 (docs/api.md §9), made only when one
# of them is given, so that other calls still work on an older schema.
ENQUEUE_RUN_GOVERNED = Query(
    "SELECT outcome, dedup_kind, run_id FROM office.enqueue_run("
    "agent_profile_id => %(agent_profile_id)s, reason => %(reason)s,"
    " payload => %(payload)s::pg_catalog.jsonb, idempotency_key => %(idempotency_key)s,"
    " task_id => %(task_id)s, entry_triggered => %(entry_triggered)s,"
    " keyless_cause => %(keyless_cause)s, keyless_detail => %(keyless_detail)s,"
    " origin => %(origin)s, cause_run_id => %(cause_run_id)s,"
    " priority => %(priority)s::pg_catalog.int4,"
    " not_before => %(not_before)s::pg_catalog.timestamptz)"
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

# An operator's run actions (since 0.5.0): the id arrays are text[].
REQUEUE_RUN = Query("SELECT office.requeue_run(run_id => %(run_id)s) AS changed")

REQUEUE_RUNS = Query(
    "SELECT office.requeue_runs(run_ids => %(run_ids)s::pg_catalog.text[]) AS count"
)

CANCEL_RUNS = Query(
    "SELECT office.cancel_runs(run_ids => %(run_ids)s::pg_catalog.text[],"
    " reason => %(reason)s) AS count"
)

RECOVER_STALE_RUNS = Query(
    "SELECT office.recover_stale_runs(older_than => %(older_than)s) AS count"
)

HEARTBEAT_RUN = Query(
    "SELECT office.heartbeat_run(run_id => %(run_id)s, attempt => %(attempt)s) AS changed"
)

# The outcome calls fenced by the worker as well as the attempt (since
# 0.5.0), and the probe for them: fail_run's five-argument form came with it.
PROBE_WORKER_FENCE = Query(
    "SELECT 1 WHERE pg_catalog.to_regprocedure("
    "'office.fail_run(text, integer, text, boolean, text)') IS NOT NULL"
)
HEARTBEAT_RUN_FENCED = Query(
    "SELECT office.heartbeat_run(run_id => %(run_id)s, attempt => %(attempt)s,"
    " worker_id => %(worker_id)s) AS changed"
)
FINISH_RUN_FENCED = Query(
    "SELECT office.finish_run(run_id => %(run_id)s, attempt => %(attempt)s,"
    " worker_id => %(worker_id)s) AS changed"
)
FAIL_RUN_FENCED = Query(
    "SELECT office.fail_run(run_id => %(run_id)s, attempt => %(attempt)s,"
    " error_message => %(error_message)s, retryable => %(retryable)s,"
    " worker_id => %(worker_id)s) AS changed"
)
RETRY_RUN_FENCED = Query(
    "SELECT office.retry_run(run_id => %(run_id)s, attempt => %(attempt)s,"
    " delay => %(delay)s, worker_id => %(worker_id)s) AS changed"
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

SCHEMA_VERSION = Query("SELECT office.schema_version() AS value")

# The bulk fallback's transaction (see RunOperations._enqueue_each).
BEGIN = Query("BEGIN")
COMMIT = Query("COMMIT")
ROLLBACK = Query("ROLLBACK")
SAVEPOINT_ELEMENT = Query("SAVEPOINT office_enqueue_element")
ROLLBACK_TO_ELEMENT = Query("ROLLBACK TO SAVEPOINT office_enqueue_element")
