\echo Use "ALTER EXTENSION office UPDATE TO '0.5.0'" to load this file. \quit
-- office 0.4.0 -> 0.5.0, written by hand: exactly the statements that take a
-- 0.4.0 database to what the capability files install from nothing
-- (tests/install/test_install_paths.py compares the two catalogs). Sections follow the
-- capability files.
--
-- Pin the search_path first, for the reason 00_schema.sql gives.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- === runs (30_runs.sql) =======================================================
-- Operator actions on finished runs (since 0.5.0): a failed or cancelled run
-- goes back to queued in place, so the key it serves (its own and the ones
-- recorded by coalescing) stays with it and a redelivery is still a dedup
-- onto this run. Its next claim bumps attempt, as a recovered run's does;
-- retry_count is left (it counts retries the worker asked for).
-- error_message and cancel_reason stay until the run's next outcome writes
-- over them, so an operator can still read why it stopped. The readiness
-- trigger lists the agent again (a run queued again); the wake-up signal is
-- that of a new run (office.notify), the runs being queued and due.
CREATE FUNCTION office.requeue_run(run_id text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_agent text;
BEGIN
    UPDATE office.runs r
       SET status = 'queued', finished_at = NULL, claimed_at = NULL, claimed_by = NULL,
           heartbeat_at = NULL, scheduled_retry_at = NULL
     WHERE r.id = requeue_run.run_id AND r.status IN ('failed', 'cancelled')
    RETURNING r.agent_profile_id INTO v_agent;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM office._signal_runs(ARRAY[v_agent], ARRAY[requeue_run.run_id]);
    RETURN true;
END
$$;
COMMENT ON FUNCTION office.requeue_run(text) IS
    'failed|cancelled -> queued in place (finished_at, claimed_at, claimed_by, heartbeat_at, scheduled_retry_at cleared; error_message, cancel_reason, retry_count and the keys kept; the next claim bumps attempt), with the wake-up signal of a new run (office.notify). False for any other status or an unknown run (since 0.5.0).';
REVOKE EXECUTE ON FUNCTION office.requeue_run(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.requeue_run(text) TO office_admin;

-- Internal: the bound of the bulk run actions' id arrays: NULL is none.
CREATE FUNCTION office._check_run_ids(run_ids text[]) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF cardinality(run_ids) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('run_ids has %s elements, more than 10000', cardinality(run_ids));
    END IF;
    RETURN run_ids;
END
$$;
COMMENT ON FUNCTION office._check_run_ids(text[]) IS
    'Internal: returns run_ids when it is NULL or has at most 10,000 elements, else raises 22023 naming the argument.';
REVOKE EXECUTE ON FUNCTION office._check_run_ids(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_run_ids(text[]) TO office_admin;

-- The bulk forms lock the runs in id order (bytewise) before changing them,
-- so two bulk calls over overlapping runs, in any order, never deadlock each
-- other; a claim or an outcome call touches one run, so it cannot close a
-- cycle with them. A run whose status changed while the call waited for
-- its lock is re-read (READ COMMITTED) and left out if it no longer
-- qualifies.
CREATE FUNCTION office.requeue_runs(run_ids text[]) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_agents text[];
    v_ids    text[];
BEGIN
    PERFORM office._check_run_ids(requeue_runs.run_ids);
    WITH target AS MATERIALIZED (
        SELECT t.id FROM office.runs t
         WHERE t.id = ANY (requeue_runs.run_ids) AND t.status IN ('failed', 'cancelled')
         ORDER BY t.id COLLATE "C"
           FOR UPDATE
    ), changed AS (
        UPDATE office.runs r
           SET status = 'queued', finished_at = NULL, claimed_at = NULL, claimed_by = NULL,
               heartbeat_at = NULL, scheduled_retry_at = NULL
          FROM target
         WHERE r.id = target.id AND r.status IN ('failed', 'cancelled')
        RETURNING r.id, r.agent_profile_id
    )
    SELECT array_agg(c.agent_profile_id ORDER BY c.id COLLATE "C"), array_agg(c.id ORDER BY c.id COLLATE "C")
      INTO v_agents, v_ids
      FROM changed c;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM office._signal_runs(v_agents, v_ids);
    RETURN cardinality(v_ids);
END
$$;
COMMENT ON FUNCTION office.requeue_runs(text[]) IS
    'requeue_run for each of run_ids in one statement, the runs locked in id order; returns the number requeued (unknown ids and other statuses are skipped). More than 10,000 ids 22023 (since 0.5.0).';
REVOKE EXECUTE ON FUNCTION office.requeue_runs(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.requeue_runs(text[]) TO office_admin;

CREATE FUNCTION office.cancel_runs(run_ids text[], reason text) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_count int;
BEGIN
    PERFORM office._check_run_ids(cancel_runs.run_ids);
    PERFORM office._check_free_text('reason', cancel_runs.reason);
    WITH target AS MATERIALIZED (
        SELECT t.id FROM office.runs t
         WHERE t.id = ANY (cancel_runs.run_ids) AND t.status IN ('queued', 'claimed')
         ORDER BY t.id COLLATE "C"
           FOR UPDATE
    )
    UPDATE office.runs r
       SET status = 'cancelled', cancel_reason = cancel_runs.reason, finished_at = now()
      FROM target
     WHERE r.id = target.id AND r.status IN ('queued', 'claimed');
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.cancel_runs(text[], text) IS
    'cancel_run for each of run_ids in one statement, the runs locked in id order: queued|claimed -> cancelled with cancel_reason; returns the number cancelled (unknown ids and other statuses are skipped). More than 10,000 ids, reason over 64 KiB 22023 (since 0.5.0).';
REVOKE EXECUTE ON FUNCTION office.cancel_runs(text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.cancel_runs(text[], text) TO office_admin;
-- (end of runs)

-- === daemon (70_daemon.sql) ===================================================
-- The wakeup loop dispatches the requests it picked in agent order, so two
-- daemons' loops never deadlock on two agents (one global lock order).
CREATE OR REPLACE FUNCTION office.dispatch_queued_wakeups(max_rows int DEFAULT 50, min_age interval DEFAULT '0 seconds')
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

-- === version ==================================================================

CREATE OR REPLACE FUNCTION office.schema_version() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '0.5.0';
