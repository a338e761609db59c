\echo Use "ALTER EXTENSION office UPDATE TO '0.4.0'" to load this file. \quit
-- office 0.3.0 -> 0.4.0, written by hand: exactly the statements that take a
-- 0.3.0 database to what the capability files install from nothing
-- (tests/test_install_paths.py compares the two catalogs). Sections follow the
-- capability files.
--
-- An upgrade runs with the extension's recorded schema (public for a 0.3.0
-- install) as its search_path: pin it first, for the reason 00_schema.sql gives.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- === validation (05_validation.sql) ==========================================

-- Bounds on everything stored (API.md, Conventions): a value past its bound is
-- 22023 naming the argument, checked before anything is written, so that no
-- 54000 (an index row too large), 22008 (a timestamp out of range) or a
-- failure in a background loop much later reaches anyone.

CREATE FUNCTION office._check_short_text(what text, value text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF length(value) > 200 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s %s is %s characters, more than 200',
                             what, quote_literal(left(value, 40) || '...'), length(value));
    END IF;
    IF value ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s %s contains a control character', what, quote_literal(left(value, 200)));
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_short_text(text, text) IS
    'Internal: returns value when it is NULL or a short word (at most 200 characters, no control character), else raises 22023 naming the argument.';
REVOKE EXECUTE ON FUNCTION office._check_short_text(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_short_text(text, text)
    TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office._check_free_text(what text, value text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(value) > 65536 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is %s bytes, more than 64 KiB (65536 bytes)', what, octet_length(value));
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_free_text(text, text) IS
    'Internal: returns value when it is NULL or at most 64 KiB (octet_length), else raises 22023 naming the argument.';
REVOKE EXECUTE ON FUNCTION office._check_free_text(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_free_text(text, text)
    TO office_producer, office_worker, office_reader, office_admin;

-- An interval argument: given, finite, not negative, at most 100 years.
CREATE OR REPLACE FUNCTION office._check_interval(name text, value interval) RETURNS interval
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL OR NOT isfinite(value) OR value < interval '0' OR value > interval '100 years' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s must be a finite interval from 0 to 100 years, not %s',
                             name, coalesce(value::text, 'NULL'));
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_interval(text, interval) IS
    'Internal: returns value when it is a finite interval from 0 to 100 years, else raises 22023 naming the parameter.';
REVOKE EXECUTE ON FUNCTION office._check_interval(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_interval(text, interval)
    TO office_producer, office_worker, office_reader, office_admin;

-- A timestamp argument: NULL (the caller decides whether that is allowed) or
-- finite and within 1970-01-01 ... 9999-12-31 (UTC).
CREATE FUNCTION office._check_timestamp(name text, value timestamptz) RETURNS timestamptz
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NOT NULL AND (NOT isfinite(value)
                              OR value < timestamptz '1970-01-01 00:00:00+00'
                              OR value >= timestamptz '10000-01-01 00:00:00+00') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s must be a time from 1970-01-01 to 9999-12-31 (UTC), not %s', name, value);
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_timestamp(text, timestamptz) IS
    'Internal: returns value when it is NULL or a finite time from 1970-01-01 to 9999-12-31 UTC, else raises 22023 naming the parameter.';
REVOKE EXECUTE ON FUNCTION office._check_timestamp(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_timestamp(text, timestamptz)
    TO office_producer, office_worker, office_reader, office_admin;

-- A window setting (office.idempotency_window, office.coalesce_window) as an
-- interval, read with current_setting(name, true) so that ALTER DATABASE ...
-- SET works; unset or '' gives the default. A value that is not an interval
-- from 0 to 100 years is 22023 naming the setting. The parse is guarded by an
-- exception block (a subtransaction) only when the setting is set, so the
-- default path of the hot functions pays nothing for it.
CREATE OR REPLACE FUNCTION office._window(name text, fallback interval) RETURNS interval
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text  text := current_setting(name, true);
    v_value interval;
BEGIN
    IF v_text IS NULL OR v_text = '' THEN
        RETURN fallback;
    END IF;
    BEGIN
        v_value := v_text::interval;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting %s = %s is not an interval', name, quote_literal(left(v_text, 200)));
    END;
    IF NOT isfinite(v_value) OR v_value < interval '0' OR v_value > interval '100 years' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting %s = %s must be an interval from 0 to 100 years', name, quote_literal(v_text));
    END IF;
    RETURN v_value;
END
$$;
COMMENT ON FUNCTION office._window(text, interval) IS
    'Internal: the interval setting name (unset or empty: fallback); a value that is not an interval from 0 to 100 years is 22023 naming the setting.';
REVOKE EXECUTE ON FUNCTION office._window(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._window(text, interval)
    TO office_producer, office_worker, office_reader, office_admin;

-- === agents (20_agents.sql) ====================================================
-- (end of agents)

-- === runs (25_counters.sql, 30_runs.sql) =======================================
-- Poison never stops a loop (API.md Conventions): see 70_daemon.sql.
CREATE OR REPLACE FUNCTION office.recover_stale_runs(older_than interval) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count int;
    v_id    text;
    v_msg   text;
    v_state text;
BEGIN
    PERFORM office._check_interval('older_than', recover_stale_runs.older_than);
    -- A run its worker is finishing right now is locked: skip it. A run set
    -- aside (office.poison) is left where it is.
    BEGIN
        WITH stale AS (
            SELECT s.id FROM office.runs s
             WHERE s.status = 'claimed' AND s.claimed_at < now() - recover_stale_runs.older_than
               AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'recovery' AND q.row_id = s.id)
               FOR UPDATE SKIP LOCKED
        )
        UPDATE office.runs r
           SET status = 'queued', claimed_at = NULL, claimed_by = NULL
          FROM stale
         WHERE r.id = stale.id;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        RETURN v_count;
    EXCEPTION WHEN OTHERS THEN
        -- One run the queue cannot take back (say, written by hand with a
        -- reason too long for the queued-runs index: 54000) fails the
        -- statement for all: requeue them one by one and set aside the runs
        -- that fail, so the others are still recovered.
        NULL;
    END;
    v_count := 0;
    FOR v_id IN
        SELECT s.id FROM office.runs s
         WHERE s.status = 'claimed' AND s.claimed_at < now() - recover_stale_runs.older_than
           AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'recovery' AND q.row_id = s.id)
           FOR UPDATE SKIP LOCKED
    LOOP
        BEGIN
            UPDATE office.runs r SET status = 'queued', claimed_at = NULL, claimed_by = NULL WHERE r.id = v_id;
            v_count := v_count + 1;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
            PERFORM office.set_aside('recovery', v_id, v_msg, v_state);
        END;
    END LOOP;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.recover_stale_runs(interval) IS
    'claimed for longer than older_than -> queued (claimed_at, claimed_by cleared; attempt kept, so the old worker is fenced). A run that cannot be requeued is set aside (office.poison, loop recovery) and the others are recovered. Returns the count.';
REVOKE EXECUTE ON FUNCTION office.recover_stale_runs(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.recover_stale_runs(interval) TO office_admin;

-- (end of runs)

-- === tasks (40_tasks.sql) ======================================================
-- (end of tasks)

-- === events (45_events.sql) ====================================================
-- Poison never stops a loop (API.md Conventions): see 70_daemon.sql.
CREATE OR REPLACE FUNCTION office.claim_events(consumer text, max_rows int DEFAULT 100,
                                    visibility interval DEFAULT '30 seconds')
    RETURNS SETOF office.events
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF claim_events.consumer IS NULL OR claim_events.consumer = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'consumer must not be empty';
    END IF;
    IF claim_events.max_rows IS NULL OR claim_events.max_rows < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_rows must be at least 1, not %s', coalesce(claim_events.max_rows::text, 'NULL'));
    END IF;
    PERFORM office._check_interval('visibility', claim_events.visibility);
    -- An event another claimer is taking right now is locked: skip it. One
    -- that was claimed after this statement's snapshot is re-checked on its
    -- newest version (READ COMMITTED), whose visible_at now excludes it.
    RETURN QUERY
    WITH picked AS (
        SELECT p.id
          FROM office.events p
         WHERE p.processed_at IS NULL
           AND (p.visible_at IS NULL OR p.visible_at <= now())
           AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'subscriber' AND q.row_id = p.id::text)
         ORDER BY p.id
         LIMIT claim_events.max_rows
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE office.events e
           SET claimed_by = claim_events.consumer,
               claimed_at = now(),
               visible_at = now() + claim_events.visibility,
               deliveries = e.deliveries + 1
          FROM picked
         WHERE e.id = picked.id
        RETURNING e.*
    )
    SELECT c.* FROM claimed c ORDER BY c.id;
END
$$;
COMMENT ON FUNCTION office.claim_events(text, int, interval) IS
    'Claims up to max_rows pending events, oldest first, for consumer (recorded for diagnosis), hiding them from other claimers for visibility; never waits for and never shares an event with a concurrent claimer. An event not acknowledged in time is claimable again; one set aside (office.poison, loop subscriber) is not, until it is released.';
REVOKE EXECUTE ON FUNCTION office.claim_events(text, int, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.claim_events(text, int, interval) TO office_worker, office_admin;

-- (end of events)

-- === wakeups (50_wakeups.sql) ==================================================
-- (end of wakeups)

-- === routines (55_routines.sql) ================================================
-- (end of routines)

-- === parent wakes (60_parent_wake.sql) =========================================
-- Poison never stops a loop (API.md Conventions): see 70_daemon.sql.
CREATE OR REPLACE FUNCTION office.list_stuck_parents(max_rows int DEFAULT 5, reason text DEFAULT 'task_children_completed')
    RETURNS TABLE (parent_task_id text, assignee_agent_profile_id text, workflow_step_id text,
                   child_set_key text, newest_child_updated_at text)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
BEGIN
    IF list_stuck_parents.max_rows IS NULL OR list_stuck_parents.max_rows < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_rows must be a non-negative integer, not %s',
                             coalesce(list_stuck_parents.max_rows::text, 'NULL'));
    END IF;
    IF list_stuck_parents.reason IS NULL OR list_stuck_parents.reason = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'reason must not be empty';
    END IF;
    IF list_stuck_parents.reason <> 'task_children_completed' THEN
        RETURN QUERY SELECT * FROM office._scan_stuck_parents(list_stuck_parents.max_rows,
                                                              list_stuck_parents.reason);
        RETURN;
    END IF;
    -- Each marked parent once, looked up by id (OFFSET 0 keeps the lookup a
    -- per-parent index probe whatever the statistics say).
    RETURN QUERY
    SELECT s.parent_task_id, s.assignee_agent_profile_id, s.workflow_step_id, s.child_set_key,
           s.newest_child_updated_at
      FROM (SELECT DISTINCT m.parent_task_id AS id FROM office.parent_wake_marks m
             WHERE NOT EXISTS (SELECT FROM office.poison q
                                WHERE q.loop = 'sweep' AND q.row_id = m.parent_task_id)) AS marked
     CROSS JOIN LATERAL (SELECT st.* FROM office._parent_wake_stuck st
                          WHERE st.parent_task_id = marked.id OFFSET 0) AS s
     ORDER BY s.parent_task_id COLLATE "C"
     LIMIT list_stuck_parents.max_rows;
END
$$;
COMMENT ON FUNCTION office.list_stuck_parents(int, text) IS
    'Parents whose finished child wave was not delivered (every candidate condition of DOMAIN.md §2.20, applied before the LIMIT), ordered by parent id (bytewise): parent, assignee, step, child_set_key, newest_child_updated_at. Read from the parents marked since they were last found delivered, leaving out those the sweep set aside (office.poison); another reason than task_children_completed reads every open parent. Negative max_rows or empty reason 22023.';
REVOKE EXECUTE ON FUNCTION office.list_stuck_parents(int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_stuck_parents(int, text)
    TO office_producer, office_reader, office_admin;

CREATE OR REPLACE FUNCTION office.sweep_stuck_parents(max_rows int DEFAULT 5)
    RETURNS SETOF office.reconcile_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_candidate record;
    v_result    office.reconcile_result;
    v_msg       text;
    v_state     text;
BEGIN
    IF sweep_stuck_parents.max_rows IS NULL OR sweep_stuck_parents.max_rows < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_rows must be a non-negative integer, not %s',
                             coalesce(sweep_stuck_parents.max_rows::text, 'NULL'));
    END IF;

    -- Forget the marked parents that are not stuck, as seen by this one
    -- statement: a mark committed after its snapshot is not in it and stays.
    WITH marked AS (
        SELECT DISTINCT m.parent_task_id AS id FROM office.parent_wake_marks m
    ), settled AS (
        SELECT marked.id FROM marked
         WHERE NOT EXISTS (SELECT FROM office._parent_wake_stuck st
                            WHERE st.parent_task_id = marked.id OFFSET 0)
    ), doomed AS (
        SELECT m.id FROM office.parent_wake_marks m JOIN settled ON settled.id = m.parent_task_id
           FOR UPDATE OF m SKIP LOCKED
    )
    DELETE FROM office.parent_wake_marks m USING doomed WHERE m.id = doomed.id;

    FOR v_candidate IN
        SELECT * FROM office.list_stuck_parents(sweep_stuck_parents.max_rows)
    LOOP
        -- Someone holds the parent (a child completing, another sweep): skip
        -- it; its mark stays for the next sweep.
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(
            hashtextextended('office.tasks.children:' || v_candidate.parent_task_id, 0));
        -- Under the lock, a fresh look: another sweep may have delivered it
        -- since the list was read.
        CONTINUE WHEN NOT EXISTS (SELECT FROM office._parent_wake_stuck st
                                   WHERE st.parent_task_id = v_candidate.parent_task_id);
        -- A parent whose reconcile raises (a value written by hand that the
        -- run queue refuses) would take a slot of every tick: set it aside
        -- (its marks stay) and go on with the others.
        BEGIN
            v_result := office.reconcile_parent(v_candidate.parent_task_id, v_candidate.child_set_key,
                                                v_candidate.newest_child_updated_at);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
            PERFORM office.set_aside('sweep', v_candidate.parent_task_id, v_msg, v_state);
            CONTINUE;
        END;
        RETURN NEXT v_result;
    END LOOP;
END
$$;
COMMENT ON FUNCTION office.sweep_stuck_parents(int) IS
    'One tick of the stuck-parent sweep: forgets the marked parents that are not stuck, lists up to max_rows stuck parents and reconciles each (one reconcile_result per parent; a parent another transaction holds, or that was delivered meanwhile, is left for the next tick; one whose reconcile raises is set aside in office.poison, loop sweep, with no result). Negative max_rows 22023.';
REVOKE EXECUTE ON FUNCTION office.sweep_stuck_parents(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.sweep_stuck_parents(int) TO office_producer, office_admin;

-- (end of parent-wake)

-- === daemon (70_daemon.sql) ====================================================
-- Poison (API.md Conventions: nothing a caller stores can stop a loop). The
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
GRANT EXECUTE ON FUNCTION office.set_aside(text, text, text, text) TO office_worker, office_admin;

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

CREATE OR REPLACE FUNCTION office.due_routine_triggers(at timestamptz DEFAULT now(), max_rows int DEFAULT 100)
    RETURNS TABLE (trigger_id text, routine_id text, cron_expression text, timezone text,
                   next_run_at timestamptz, last_fired_at timestamptz, enabled boolean,
                   catch_up_policy text, catch_up_max int)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF due_routine_triggers.at IS NULL OR NOT isfinite(due_routine_triggers.at) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('at must be a finite time, not %s', coalesce(due_routine_triggers.at::text, 'NULL'));
    END IF;
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
    'The cron loop''s scan: enabled cron triggers of active routines that are not armed yet (next_run_at NULL) or due at the given time, and not set aside (office.poison), with their routine''s catch-up policy; unarmed first, then oldest due, at most max_rows. NULL or infinite at, max_rows below 1: 22023.';
REVOKE EXECUTE ON FUNCTION office.due_routine_triggers(timestamptz, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.due_routine_triggers(timestamptz, int)
    TO office_worker, office_reader, office_admin;

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
    -- Oldest first; a request another dispatcher holds is skipped; requests
    -- of agents that do not accept runs wait (they are not picked).
    FOR v_req IN
        SELECT w.id, w.agent_profile_id, a.id IS NULL AS agent_missing
          FROM office.wakeup_requests w
          LEFT JOIN office.agent_profiles a ON a.id = w.agent_profile_id
         WHERE w.status = 'queued'
           AND w.requested_at <= now() - dispatch_queued_wakeups.min_age
           AND (a.id IS NULL OR a.status NOT IN ('paused', 'stopped', 'pending_approval'))
           AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'wakeups' AND q.row_id = w.id)
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
    'The wakeup loop''s step: dispatch_wakeup for up to max_rows queued requests at least min_age old, oldest first, skipping requests another transaction holds, requests set aside (office.poison) and agents that do not accept runs; a request whose agent is gone is failed (agent not found). One row per request: its status after the call (claimed, coalesced, skipped, noop, failed; queued when the dispatch raised because of the agent or a transient failure, set_aside when it raised for any other reason, both with error_message). max_rows below 1, negative min_age: 22023.';
REVOKE EXECUTE ON FUNCTION office.dispatch_queued_wakeups(int, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.dispatch_queued_wakeups(int, interval) TO office_worker, office_admin;

-- daemon_stats returns the poison counts too: a new row type.
DROP FUNCTION office.daemon_stats();
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

-- (end of daemon)

-- === observability (80_observability.sql) ======================================
-- (end of observability)

-- === version ==================================================================

CREATE OR REPLACE FUNCTION office.schema_version() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '0.4.0';
