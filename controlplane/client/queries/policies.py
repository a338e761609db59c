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

WAKE_POLICIES = Query(
    "SELECT p.* FROM office.wake_policies p"
    " WHERE (%(scope)s::pg_catalog.text IS NULL OR p.scope = %(scope)s)"
    " AND (%(scope_id)s::pg_catalog.text IS NULL OR p.scope_id = %(scope_id)s)"
    ' ORDER BY p.scope, p.scope_id COLLATE "C"'
)

EXPLAIN_AGENT = Query(
    "SELECT run_id, status, claimable, held_by, until, detail"
    " FROM office.explain_agent(agent_profile_id => %(agent_profile_id)s,"
    " max_rows => %(max_rows)s::pg_catalog.int4)"
)

GOVERNANCE_STATS = Query(
    "SELECT agent_profile_id, held_by, runs FROM office.governance_stats"
    ' ORDER BY agent_profile_id COLLATE "C", held_by'
)

# The spend of every scope with a budget in its current period (UTC days,
# weeks from Monday), read from the tables office_reader may read: the
# daemon's spend gauge and the doctor's budget warnings.
BUDGET_USAGE = Query(
    "SELECT p.scope, p.scope_id, p.budget, p.budget_period,"
    " coalesce(s.spent, 0) AS spent FROM office.wake_policies p"
    " LEFT JOIN LATERAL (SELECT pg_catalog.sum(w.amount) AS spent FROM office.wake_spend w"
    " WHERE w.scope = p.scope AND w.scope_id = p.scope_id"
    " AND w.day >= pg_catalog.date_trunc(p.budget_period,"
    " pg_catalog.now() AT TIME ZONE 'UTC')::pg_catalog.date) s ON true"
    ' WHERE p.budget IS NOT NULL ORDER BY p.scope, p.scope_id COLLATE "C"'
)

# Workspaces with agents that no budget caps: neither the workspace's nor
# the agent's own.
UNBUDGETED_WORKSPACES = Query(
    "SELECT a.workspace_id AS workspace, count(*) AS agents FROM office.agent_profiles a"
    " WHERE NOT EXISTS (SELECT FROM office.wake_policies p WHERE p.budget IS NOT NULL"
    " AND p.scope = 'workspace' AND p.scope_id = a.workspace_id)"
    " AND NOT EXISTS (SELECT FROM office.wake_policies p WHERE p.budget IS NOT NULL"
    " AND p.scope = 'agent' AND p.scope_id = a.id)"
    ' GROUP BY a.workspace_id ORDER BY a.workspace_id COLLATE "C"'
)

WAKE_DECISION_COUNTS = Query(
    "SELECT decision, count(*) AS decisions FROM office.wake_decisions GROUP BY decision"
    " ORDER BY decision"
)

GOVERNANCE_PRESENT = Query(
    "SELECT 1 WHERE pg_catalog.to_regclass('office.governance_stats') IS NOT NULL"
)
