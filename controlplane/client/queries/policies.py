"""The statements of wake policies and spend (:mod:`controlplane.client.policies`;
docs/api.md §9)."""

from __future__ import annotations

from controlplane.client.queries import Query

SET_WAKE_POLICY = Query(
    "SELECT * FROM office.set_wake_policy(scope => %(scope)s, scope_id => %(scope_id)s,"
    " cooldown => %(cooldown)s::pg_catalog.interval, max_runs => %(max_runs)s::pg_catalog.int4,"
    " per => %(per)s::pg_catalog.interval, budget => %(budget)s::pg_catalog.numeric,"
    " budget_period => %(budget_period)s, max_retries => %(max_retries)s::pg_catalog.int4,"
    " retry_backoff => %(retry_backoff)s::pg_catalog.interval[])"
)

CLEAR_WAKE_POLICY = Query(
    "SELECT office.clear_wake_policy(scope => %(scope)s, scope_id => %(scope_id)s) AS changed"
)

RECORD_RUN_COST = Query(
    "SELECT office.record_run_cost(run_id => %(run_id)s, attempt => %(attempt)s::pg_catalog.int4,"
    " amount => %(amount)s::pg_catalog.numeric, worker_id => %(worker_id)s) AS changed"
)

PROBE_WAKE_DECISIONS = Query(
    "SELECT 1 WHERE pg_catalog.to_regprocedure('office.prune_wake_decisions(interval)') IS NOT NULL"
)

PRUNE_WAKE_DECISIONS = Query(
    "SELECT office.prune_wake_decisions(older_than => %(older_than)s) AS count"
)
