"""The statements of routines and wakeup requests
(:mod:`controlplane.client.routines`; docs/api.md §4)."""

from __future__ import annotations

from controlplane.client.queries import Query

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

# The claim and the dispatch in one transaction (the cron loop's fire).
FIRE_ROUTINE_TICK = Query(
    "SELECT * FROM office.fire_routine_tick("
    "trigger_id => %(trigger_id)s, observed_next_run_at => %(observed)s,"
    " following_next_run_at => %(following)s, missed_ticks => %(missed_ticks)s,"
    " missed_since => %(missed_since)s, missed_truncated => %(missed_truncated)s)"
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
