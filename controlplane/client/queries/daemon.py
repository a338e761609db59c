"""The statements of the daemon's loops (``sql/70_daemon.sql``,
:mod:`controlplane.client.daemon`)."""

from __future__ import annotations

from controlplane.client.queries import Query

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
