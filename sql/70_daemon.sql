-- office: what the control-plane daemon (`officectl run`, controlplane.daemon)
-- needs beyond the API of API.md: the cron loop's scan and its atomic
-- claim-and-fire, the wakeup loop's batch dispatch, and the numbers behind its
-- gauges (outbox lag). Each is one short transaction; none holds a lock
-- across calls, so any number of daemons may run against one database.
--
-- * due_routine_triggers lists what the cron loop must look at; the loop
--   computes ticks in Python (controlplane.routines.plan_tick: cron
--   expression, time zone, catch-up policy) and then
-- * fire_routine_tick claims the tick (claim_routine_tick, the
--   compare-and-swap) and dispatches it with the claimed tick
--   (dispatch_routine) in ONE transaction: a claimed tick is never lost to a
--   crash between the two, and a trigger another daemon is claiming right now
--   is skipped (SKIP LOCKED), never waited for. A dispatch that raises (say,
--   the routine was paused since the scan) keeps the claim - the tick is
--   spent - and is returned with its error, so one broken routine never
--   makes the loop spin on the same tick.
-- * dispatch_queued_wakeups dispatches queued wakeup requests nobody
--   dispatched (dispatch_wakeup), skipping requests another dispatcher holds;
--   a request of an agent that does not accept runs stays queued until it
--   does; one of an agent that no longer exists is failed.
-- * daemon_stats: pending events and the age of the oldest (the outbox lag),
--   queued wakeups, due triggers, claimed runs.

CREATE TYPE office.routine_tick_result AS (
    claimed               boolean,
    routine_run_id        text,
    status                text,
    linked_task_id        text,
    coalesced_into_run_id text,
    wakeup_request_id     text,
    wakeup_outcome        text,
    run_id                text,
    idempotency_key       text,
    error_message         text,
    workspace_id          text,
    error_sqlstate        text);
COMMENT ON TYPE office.routine_tick_result IS
    'Result of office.fire_routine_tick: claimed (this call won the tick), then the columns of office.dispatch_routine_result for the fire (NULL when not claimed), and the SQLSTATE when the dispatch raised (error_message says what; the claim stands).';

CREATE FUNCTION office.due_routine_triggers(at timestamptz DEFAULT now(), max_rows int DEFAULT 100)
    RETURNS TABLE (trigger_id text, routine_id text, cron_expression text, timezone text,
                   next_run_at timestamptz, last_fired_at timestamptz, enabled boolean,
                   catch_up_policy text, catch_up_max int)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF due_routine_triggers.at IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'at must be a time, not NULL';
    END IF;
    PERFORM office._check_timestamp('at', due_routine_triggers.at);
    IF due_routine_triggers.max_rows IS NULL OR due_routine_triggers.max_rows < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_rows must be at least 1, not %s',
                             coalesce(due_routine_triggers.max_rows::text, 'NULL'));
    END IF;
    -- Never armed (NULL) first, then the longest overdue.
    RETURN QUERY
    SELECT t.id, t.routine_id, t.cron_expression, t.timezone, t.next_run_at, t.last_fired_at, t.enabled,
           r.catch_up_policy, r.catch_up_max
      FROM office.routine_triggers t
      JOIN office.routines r ON r.id = t.routine_id
     WHERE t.enabled
       AND t.kind = 'cron'
       AND r.status = 'active'
       AND (t.next_run_at IS NULL OR t.next_run_at <= due_routine_triggers.at)
     ORDER BY t.next_run_at NULLS FIRST, t.id COLLATE "C"
     LIMIT due_routine_triggers.max_rows;
END
$$;
COMMENT ON FUNCTION office.due_routine_triggers(timestamptz, int) IS
    'The cron loop''s scan: enabled cron triggers of active routines that are not armed yet (next_run_at NULL) or due at the given time, with their routine''s catch-up policy; unarmed first, then oldest due, at most max_rows. NULL at or one outside 1970-01-01 .. 9999-12-31, max_rows below 1: 22023.';
REVOKE EXECUTE ON FUNCTION office.due_routine_triggers(timestamptz, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.due_routine_triggers(timestamptz, int)
    TO office_worker, office_reader, office_admin;

CREATE FUNCTION office.fire_routine_tick(trigger_id text, observed_next_run_at timestamptz,
                                         following_next_run_at timestamptz, missed_ticks int DEFAULT NULL,
                                         missed_since timestamptz DEFAULT NULL,
                                         missed_truncated boolean DEFAULT NULL)
    RETURNS office.routine_tick_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_routine  text;
    v_dispatch office.dispatch_routine_result;
    v_msg      text;
    v_state    text;
    v_result   office.routine_tick_result;
BEGIN
    IF fire_routine_tick.observed_next_run_at IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('observed_next_run_at of trigger %s must not be NULL (arm a trigger with claim_routine_tick)',
                             coalesce(quote_literal(fire_routine_tick.trigger_id), 'NULL'));
    END IF;
    -- Every argument is checked before the tick is claimed: a bad one must
    -- not spend the tick on a dispatch that can only fail.
    PERFORM office._check_timestamp('observed_next_run_at', fire_routine_tick.observed_next_run_at);
    PERFORM office._check_timestamp('following_next_run_at', fire_routine_tick.following_next_run_at);
    PERFORM office._check_timestamp('missed_since', fire_routine_tick.missed_since);
    IF fire_routine_tick.missed_ticks < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('missed_ticks must not be negative, not %s', fire_routine_tick.missed_ticks);
    END IF;
    -- A trigger another daemon is claiming right now is its business.
    SELECT t.routine_id INTO v_routine
      FROM office.routine_triggers t
     WHERE t.id = fire_routine_tick.trigger_id
       FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        IF NOT EXISTS (SELECT FROM office.routine_triggers t WHERE t.id = fire_routine_tick.trigger_id) THEN
            RAISE EXCEPTION USING ERRCODE = 'OFR01',
                MESSAGE = format('routine trigger %s not found',
                                 coalesce(quote_literal(fire_routine_tick.trigger_id), 'NULL'));
        END IF;
        v_result.claimed := false;
        RETURN v_result;
    END IF;
    IF NOT office.claim_routine_tick(fire_routine_tick.trigger_id, fire_routine_tick.observed_next_run_at,
                                     fire_routine_tick.following_next_run_at) THEN
        v_result.claimed := false;
        RETURN v_result;
    END IF;
    v_result.claimed := true;
    BEGIN
        v_dispatch := office.dispatch_routine(routine_id => v_routine, source => 'cron',
                                              trigger_id => fire_routine_tick.trigger_id,
                                              claimed_tick => fire_routine_tick.observed_next_run_at,
                                              missed_ticks => fire_routine_tick.missed_ticks,
                                              missed_since => fire_routine_tick.missed_since,
                                              missed_truncated => fire_routine_tick.missed_truncated);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
        RAISE WARNING 'routine tick dispatch failed: trigger %, tick %: %',
            fire_routine_tick.trigger_id, fire_routine_tick.observed_next_run_at, v_msg;
        v_result.error_message := v_msg;
        v_result.error_sqlstate := v_state;
        SELECT r.workspace_id INTO v_result.workspace_id FROM office.routines r WHERE r.id = v_routine;
        RETURN v_result;
    END;
    v_result.routine_run_id := v_dispatch.routine_run_id;
    v_result.status := v_dispatch.status;
    v_result.linked_task_id := v_dispatch.linked_task_id;
    v_result.coalesced_into_run_id := v_dispatch.coalesced_into_run_id;
    v_result.wakeup_request_id := v_dispatch.wakeup_request_id;
    v_result.wakeup_outcome := v_dispatch.wakeup_outcome;
    v_result.run_id := v_dispatch.run_id;
    v_result.idempotency_key := v_dispatch.idempotency_key;
    v_result.error_message := v_dispatch.error_message;
    v_result.workspace_id := v_dispatch.workspace_id;
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office.fire_routine_tick(text, timestamptz, timestamptz, int, timestamptz, boolean) IS
    'The cron loop''s step for one due tick, in one transaction: claim_routine_tick(observed -> following) and, for the winner, dispatch_routine(source cron, claimed_tick = observed, the catch-up values). A trigger being claimed by another transaction is skipped (claimed false, no wait). A dispatch that raises keeps the claim and is returned with error_message and error_sqlstate. NULL observed tick, a time outside 1970-01-01 .. 9999-12-31, negative missed_ticks 22023 (before anything is claimed); unknown trigger OFR01.';
REVOKE EXECUTE ON FUNCTION office.fire_routine_tick(text, timestamptz, timestamptz, int, timestamptz, boolean)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.fire_routine_tick(text, timestamptz, timestamptz, int, timestamptz, boolean)
    TO office_worker, office_admin;

CREATE FUNCTION office.dispatch_queued_wakeups(max_rows int DEFAULT 50, min_age interval DEFAULT '0 seconds')
    RETURNS TABLE (wakeup_request_id text, agent_profile_id text, status text, run_id text,
                   error_message text)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_req      record;
    v_dispatch office.wakeup_dispatch_result;
    v_msg      text;
BEGIN
    IF dispatch_queued_wakeups.max_rows IS NULL OR dispatch_queued_wakeups.max_rows < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_rows must be at least 1, not %s',
                             coalesce(dispatch_queued_wakeups.max_rows::text, 'NULL'));
    END IF;
    PERFORM office._check_interval('min_age', dispatch_queued_wakeups.min_age);
    -- Oldest first; a request another dispatcher holds is skipped; requests
    -- of agents that do not accept runs wait (they are not picked).
    FOR v_req IN
        SELECT w.id, w.agent_profile_id, a.id IS NULL AS agent_missing
          FROM office.wakeup_requests w
          LEFT JOIN office.agent_profiles a ON a.id = w.agent_profile_id
         WHERE w.status = 'queued'
           AND w.requested_at <= now() - dispatch_queued_wakeups.min_age
           AND (a.id IS NULL OR a.status NOT IN ('paused', 'stopped', 'pending_approval'))
         ORDER BY w.requested_at, w.id COLLATE "C"
         LIMIT dispatch_queued_wakeups.max_rows
           FOR UPDATE OF w SKIP LOCKED
    LOOP
        wakeup_request_id := v_req.id;
        agent_profile_id := v_req.agent_profile_id;
        error_message := NULL;
        IF v_req.agent_missing THEN
            PERFORM office.fail_wakeup(v_req.id, 'agent not found');
            status := 'failed';
            run_id := NULL;
            error_message := format('agent %s not found', quote_literal(v_req.agent_profile_id));
            RETURN NEXT;
            CONTINUE;
        END IF;
        BEGIN
            v_dispatch := office.dispatch_wakeup(v_req.id);
            status := v_dispatch.status;
            run_id := v_dispatch.run_id;
        EXCEPTION WHEN OTHERS THEN
            -- The agent changed since the scan (paused: the request waits).
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            status := 'queued';
            run_id := NULL;
            error_message := v_msg;
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION office.dispatch_queued_wakeups(int, interval) IS
    'The wakeup loop''s step: dispatch_wakeup for up to max_rows queued requests at least min_age old, oldest first, skipping requests another transaction holds and agents that do not accept runs; a request whose agent is gone is failed (agent not found). One row per request: its status after the call (claimed, coalesced, skipped, noop, failed; queued when the dispatch raised, with error_message). max_rows below 1, negative min_age: 22023.';
REVOKE EXECUTE ON FUNCTION office.dispatch_queued_wakeups(int, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.dispatch_queued_wakeups(int, interval) TO office_worker, office_admin;

CREATE FUNCTION office.daemon_stats()
    RETURNS TABLE (pending_events bigint, oldest_pending_event_at timestamptz, outbox_lag_seconds double precision,
                   queued_wakeups bigint, due_triggers bigint, claimed_runs bigint,
                   oldest_claimed_at timestamptz, oldest_claim_age_seconds double precision)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.pending, o.created_at,
           coalesce(extract(epoch FROM now() - o.created_at)::double precision, 0),
           (SELECT count(*) FROM office.wakeup_requests w WHERE w.status = 'queued'),
           (SELECT count(*) FROM office.routine_triggers t JOIN office.routines r ON r.id = t.routine_id
             WHERE t.enabled AND t.kind = 'cron' AND r.status = 'active'
               AND (t.next_run_at IS NULL OR t.next_run_at <= now())),
           c.claimed, c.oldest,
           coalesce(extract(epoch FROM now() - c.oldest)::double precision, 0)
      FROM (SELECT count(*) AS pending FROM office.events p WHERE p.processed_at IS NULL) e
      LEFT JOIN LATERAL (SELECT p.created_at FROM office.events p WHERE p.processed_at IS NULL
                          ORDER BY p.id LIMIT 1) o ON true
      CROSS JOIN (SELECT count(*) AS claimed, min(r.claimed_at) AS oldest
                    FROM office.runs r WHERE r.status = 'claimed') c
$$;
COMMENT ON FUNCTION office.daemon_stats() IS
    'Gauges of the control plane: unacknowledged events, when the oldest was written and its age in seconds (the outbox lag, 0 when none), queued wakeup requests, cron triggers due now, claimed runs, the oldest claim and its age in seconds (0 when none).';
REVOKE EXECUTE ON FUNCTION office.daemon_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.daemon_stats() TO office_worker, office_reader, office_admin;
