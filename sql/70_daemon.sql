-- office: what the control-plane daemon (`officectl run`, controlplane.daemon)
-- needs beyond the API of docs/api.md: the cron loop's scan and its atomic
-- claim-and-fire, the wakeup loop's batch dispatch, and the numbers behind its
-- gauges (outbox lag). Each is one short transaction; none holds a lock
-- across calls, so any number of daemons may run against one database.
--
-- * due_routine_triggers lists what the cron loop must look at; the loop
--   computes ticks in Python (controlplane.cron.plan_tick: cron
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
--   queued wakeups, due triggers, claimed runs, rows set aside.
--
-- Poison (docs/api.md Conventions: nothing a caller stores can stop a loop). The
-- owner can write anything into the tables, bypassing every check of the
-- functions, so each loop must survive a row it cannot process: an
-- undecodable payload, a time Python cannot represent, a value that makes
-- its statement fail every time. Such a row is set aside in office.poison
-- (the dead letters: one row per loop and row id, with the error) by
-- office.set_aside, which the SQL loops call on a failing row and the daemon
-- calls for what it cannot decode. Each loop's scan leaves set-aside rows out,
-- so they never take a slot ahead of healthy work; take_poison_reports hands
-- each new one to exactly one daemon, which logs it once and counts it
-- (office_poison_total); officectl doctor lists them; release_poison puts a
-- row back in its loop's way once it was repaired.

CREATE TABLE office.poison (
    loop         text NOT NULL
                 CHECK (loop IN ('subscriber', 'wakeups', 'cron', 'sweep', 'recovery', 'prune')),
    row_id       text NOT NULL CHECK (row_id <> ''),
    reason       text NOT NULL,
    sqlstate     text,
    set_aside_at timestamptz NOT NULL DEFAULT now(),
    reported_at  timestamptz,
    PRIMARY KEY (loop, row_id)
);
SELECT pg_catalog.pg_extension_config_dump('office.poison', '');
REVOKE ALL ON TABLE office.poison FROM PUBLIC;
GRANT SELECT ON TABLE office.poison TO office_reader, office_admin;
COMMENT ON TABLE office.poison IS
    'Rows a background loop could not process, set aside (dead letters): the loop (subscriber: office.events.id; wakeups: wakeup_requests.id; cron: routine_triggers.id; sweep: the parent task id; recovery: runs.id), the row''s id, the error and its SQLSTATE (NULL: the daemon could not decode the row), when, and when a daemon logged and counted it. Each loop''s scan leaves these rows out until release_poison.';
-- take_poison_reports: the rows no daemon has reported yet (few, if any).
CREATE INDEX idx_poison_unreported ON office.poison (loop) WHERE reported_at IS NULL;

-- A failure that says nothing about the row: a conflict with a concurrent
-- transaction (class 40, 55P03), resources (53), the system (58). Such a row
-- is tried again; any other failure comes from the row's own values, which
-- the next attempt would meet again.
CREATE FUNCTION office._transient_sqlstate(sqlstate text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN coalesce(left(sqlstate, 2) IN ('40', '53', '58') OR sqlstate = '55P03', false);
END
$$;
COMMENT ON FUNCTION office._transient_sqlstate(text) IS
    'Internal: true for a SQLSTATE that says nothing about the row being processed (classes 40, 53, 58 and 55P03): the row is tried again rather than set aside.';
REVOKE EXECUTE ON FUNCTION office._transient_sqlstate(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._transient_sqlstate(text) TO office_admin;

CREATE FUNCTION office.set_aside(loop text, row_id text, reason text, sqlstate text DEFAULT NULL)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF set_aside.loop IS NULL
       OR set_aside.loop NOT IN ('subscriber', 'wakeups', 'cron', 'sweep', 'recovery', 'prune') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('loop must be one of subscriber, wakeups, cron, sweep, recovery, prune, not %s',
                             coalesce(quote_literal(left(set_aside.loop, 40)), 'NULL'));
    END IF;
    IF set_aside.row_id IS NULL OR set_aside.row_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'row_id must not be empty';
    END IF;
    -- Not the 200 characters of an id: the owner may have written a longer
    -- one by hand, and it must still be set aside. 2600 bytes is what any
    -- row id the tables' btree keys can hold fits into.
    IF octet_length(set_aside.row_id) > 2600 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('row_id is %s bytes, more than 2600', octet_length(set_aside.row_id));
    END IF;
    IF office._transient_sqlstate(set_aside.sqlstate) THEN
        RETURN false;
    END IF;
    -- The reason quotes the failure, which may quote the poison value itself:
    -- keep it short enough to store whatever it is.
    INSERT INTO office.poison AS q (loop, row_id, reason, sqlstate)
    VALUES (set_aside.loop, set_aside.row_id, left(coalesce(set_aside.reason, ''), 1000),
            left(set_aside.sqlstate, 5))
    ON CONFLICT ON CONSTRAINT poison_pkey DO NOTHING;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.set_aside(text, text, text, text) IS
    'Sets a row its loop cannot process aside in office.poison (reason cut to 1000 characters): the loop''s scan leaves it out from now on. True when it was set aside now; false when it already was, or when sqlstate is transient (class 40, 53, 58, 55P03: the row is tried again). Unknown loop, empty row_id 22023.';
REVOKE EXECUTE ON FUNCTION office.set_aside(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.set_aside(text, text, text, text) TO office_admin;

CREATE FUNCTION office.take_poison_reports(loop text, max_rows int DEFAULT 100)
    RETURNS TABLE (row_id text, reason text, sqlstate text)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF take_poison_reports.max_rows IS NULL OR take_poison_reports.max_rows < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_rows must be at least 1, not %s',
                             coalesce(take_poison_reports.max_rows::text, 'NULL'));
    END IF;
    -- Whoever sets a row aside (a daemon, a loop function called by hand),
    -- exactly one daemon reports it: a row another one is taking is skipped.
    RETURN QUERY
    WITH picked AS (
        SELECT q.loop, q.row_id FROM office.poison q
         WHERE q.loop = take_poison_reports.loop AND q.reported_at IS NULL
         ORDER BY q.set_aside_at, q.row_id COLLATE "C"
         LIMIT take_poison_reports.max_rows
           FOR UPDATE SKIP LOCKED
    )
    UPDATE office.poison q SET reported_at = now()
      FROM picked
     WHERE q.loop = picked.loop AND q.row_id = picked.row_id
    RETURNING q.row_id, q.reason, q.sqlstate;
END
$$;
COMMENT ON FUNCTION office.take_poison_reports(text, int) IS
    'The rows of loop set aside and not reported yet (at most max_rows), stamped reported_at: each is handed to exactly one caller, the daemon, which logs and counts it once. max_rows below 1: 22023.';
REVOKE EXECUTE ON FUNCTION office.take_poison_reports(text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.take_poison_reports(text, int) TO office_worker, office_admin;

CREATE FUNCTION office.release_poison(loop text, row_id text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    DELETE FROM office.poison q WHERE q.loop = release_poison.loop AND q.row_id = release_poison.row_id;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.release_poison(text, text) IS
    'Puts a set-aside row back in its loop''s way (after repairing it): its next scan processes it again, and sets it aside again if it still fails. False when the row was not set aside.';
REVOKE EXECUTE ON FUNCTION office.release_poison(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.release_poison(text, text) TO office_admin;

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
       AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'cron' AND q.row_id = t.id)
     ORDER BY t.next_run_at NULLS FIRST, t.id COLLATE "C"
     LIMIT due_routine_triggers.max_rows;
END
$$;
COMMENT ON FUNCTION office.due_routine_triggers(timestamptz, int) IS
    'The cron loop''s scan: enabled cron triggers of active routines that are not armed yet (next_run_at NULL) or due at the given time, and not set aside (office.poison), with their routine''s catch-up policy; unarmed first, then oldest due, at most max_rows. NULL at or one outside 1970-01-01 .. 9999-12-31, max_rows below 1: 22023.';
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
    v_state    text;
BEGIN
    IF dispatch_queued_wakeups.max_rows IS NULL OR dispatch_queued_wakeups.max_rows < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_rows must be at least 1, not %s',
                             coalesce(dispatch_queued_wakeups.max_rows::text, 'NULL'));
    END IF;
    PERFORM office._check_interval('min_age', dispatch_queued_wakeups.min_age);
    -- The oldest requests are picked; a request another dispatcher holds is
    -- skipped; requests of agents that do not accept runs wait (they are not
    -- picked). The picked ones are dispatched in agent order: each dispatch
    -- takes its agent's lock until commit, so two dispatchers that took
    -- agents in the order of their requests' ages would deadlock on two
    -- agents each holds one of. One global order cannot.
    FOR v_req IN
        SELECT picked.id, picked.agent_profile_id, picked.agent_missing
          FROM (SELECT w.id, w.agent_profile_id, w.requested_at, a.id IS NULL AS agent_missing
                  FROM office.wakeup_requests w
                  LEFT JOIN office.agent_profiles a ON a.id = w.agent_profile_id
                 WHERE w.status = 'queued'
                   AND w.requested_at <= now() - dispatch_queued_wakeups.min_age
                   AND (a.id IS NULL OR a.status <> ALL (office._statuses_refusing_runs()))
                   AND NOT EXISTS (SELECT FROM office.poison q
                                    WHERE q.loop = 'wakeups' AND q.row_id = w.id)
                 ORDER BY w.requested_at, w.id COLLATE "C"
                 LIMIT dispatch_queued_wakeups.max_rows
                   FOR UPDATE OF w SKIP LOCKED) picked
         ORDER BY picked.agent_profile_id COLLATE "C", picked.requested_at, picked.id COLLATE "C"
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
            -- The agent changed since the scan (paused: the request waits), or
            -- a transient failure: tried again. Anything else comes from the
            -- request's own values (say, a reason too long for the run
            -- queue's index: 54000) and would fail every attempt, ahead of
            -- every younger request: set aside.
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
            status := 'queued';
            run_id := NULL;
            error_message := v_msg;
            IF v_state NOT IN ('OFA01', 'OFA02')
               AND office.set_aside('wakeups', v_req.id, v_msg, v_state) THEN
                status := 'set_aside';
            END IF;
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION office.dispatch_queued_wakeups(int, interval) IS
    'The wakeup loop''s step: dispatch_wakeup for the oldest max_rows queued requests at least min_age old, dispatched in agent order (so two dispatchers never deadlock), skipping requests another transaction holds, requests set aside (office.poison) and agents that do not accept runs; a request whose agent is gone is failed (agent not found). One row per request: its status after the call (claimed, coalesced, skipped, noop, failed; queued when the dispatch raised because of the agent or a transient failure, set_aside when it raised for any other reason, both with error_message). max_rows below 1, negative min_age: 22023.';
REVOKE EXECUTE ON FUNCTION office.dispatch_queued_wakeups(int, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.dispatch_queued_wakeups(int, interval) TO office_worker, office_admin;

CREATE FUNCTION office.daemon_stats()
    RETURNS TABLE (pending_events bigint, oldest_pending_event_at timestamptz, outbox_lag_seconds double precision,
                   queued_wakeups bigint, due_triggers bigint, claimed_runs bigint,
                   oldest_claimed_at timestamptz, oldest_claim_age_seconds double precision,
                   poison_rows bigint, poison_by_loop jsonb)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
    -- Set-aside rows are not work waiting: they are counted on their own and
    -- never make the outbox lag grow. The ages subtract epochs: a time written
    -- by hand may be infinite, which timestamp subtraction refuses.
    SELECT e.pending, o.created_at,
           coalesce((extract(epoch FROM now()) - extract(epoch FROM o.created_at))::double precision, 0),
           (SELECT count(*) FROM office.wakeup_requests w WHERE w.status = 'queued'
               AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'wakeups' AND q.row_id = w.id)),
           (SELECT count(*) FROM office.routine_triggers t JOIN office.routines r ON r.id = t.routine_id
             WHERE t.enabled AND t.kind = 'cron' AND r.status = 'active'
               AND (t.next_run_at IS NULL OR t.next_run_at <= now())
               AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'cron' AND q.row_id = t.id)),
           c.claimed, c.oldest,
           coalesce((extract(epoch FROM now()) - extract(epoch FROM c.oldest))::double precision, 0),
           (SELECT count(*) FROM office.poison),
           (SELECT jsonb_object_agg(l.loop, (SELECT count(*) FROM office.poison q WHERE q.loop = l.loop))
              FROM unnest(ARRAY['subscriber', 'wakeups', 'cron', 'sweep', 'recovery', 'prune']) AS l (loop))
      FROM (SELECT count(*) AS pending FROM office.events p WHERE p.processed_at IS NULL
               AND NOT EXISTS (SELECT FROM office.poison q
                                WHERE q.loop = 'subscriber' AND q.row_id = p.id::text)) e
      LEFT JOIN LATERAL (SELECT p.created_at FROM office.events p WHERE p.processed_at IS NULL
                            AND NOT EXISTS (SELECT FROM office.poison q
                                             WHERE q.loop = 'subscriber' AND q.row_id = p.id::text)
                          ORDER BY p.id LIMIT 1) o ON true
      CROSS JOIN (SELECT count(*) AS claimed, min(r.claimed_at) AS oldest
                    FROM office.runs r WHERE r.status = 'claimed') c
$$;
COMMENT ON FUNCTION office.daemon_stats() IS
    'Gauges of the control plane: unacknowledged events, when the oldest was written and its age in seconds (the outbox lag, 0 when none), queued wakeup requests, cron triggers due now, claimed runs, the oldest claim and its age in seconds (0 when none), and the rows set aside (office.poison): in all and by loop. Set-aside events, wakeups and triggers are not counted as pending, queued or due.';
REVOKE EXECUTE ON FUNCTION office.daemon_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.daemon_stats() TO office_worker, office_reader, office_admin;
