-- office: the dashboard's reads (since 0.4.0).
--
-- What `officectl ui` shows, as functions rather than table reads: office's
-- roles are granted functions and views, not tables, so a dashboard that read
-- tables worked only as the owner; and a proxy (docs/api.md §8) has no tables at
-- all, while it can merge what these return from every shard. Every list is
-- one page with a bound (page_size 1..500) and a keyset cursor on an indexed
-- column, so a table of millions of rows costs one index range per page and
-- the dashboard never becomes the load on the database it watches. Each
-- sets enable_seqscan = off for the reason sql/30_runs.sql gives ("Plans"):
-- a plan cached while a table looked empty would read it whole.

-- Internal: the page size of a dashboard list, 22023 outside 1..500.
CREATE FUNCTION office._page_size(page_size int) RETURNS int
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _page_size.page_size IS NULL OR _page_size.page_size NOT BETWEEN 1 AND 500 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('page_size must be between 1 and 500, not %s',
                             coalesce(_page_size.page_size::text, 'NULL'));
    END IF;
    RETURN _page_size.page_size;
END
$$;
COMMENT ON FUNCTION office._page_size(int) IS
    'Internal: page_size itself when it is 1..500; otherwise 22023 naming the value.';
REVOKE EXECUTE ON FUNCTION office._page_size(int) FROM PUBLIC;

-- Internal: how many runs one page of list_runs may scan (its window). A
-- filter no index serves (an agent's history, a reason, a key prefix) reads
-- at most this many primary-key entries per page, however rare its matches.
CREATE FUNCTION office._run_list_window() RETURNS int
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN 10000;
COMMENT ON FUNCTION office._run_list_window() IS
    'Internal: the number of runs one page of office.list_runs scans at most (10,000); office.run_window_end gives the end of that window.';
REVOKE EXECUTE ON FUNCTION office._run_list_window() FROM PUBLIC;

CREATE FUNCTION office.run_window_end(before_id text DEFAULT NULL) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
BEGIN ATOMIC
    SELECT r.id FROM office.runs r
     WHERE run_window_end.before_id IS NULL OR r.id < run_window_end.before_id
     ORDER BY r.id DESC
    OFFSET office._run_list_window() - 1 LIMIT 1;
END;
COMMENT ON FUNCTION office.run_window_end(text) IS
    'The oldest id of the window list_runs scans before before_id (the newest 10,000 runs older than it; NULL: fewer remain, the window reaches the oldest run). A page that is not full continues with before_id => this id.';
REVOKE EXECUTE ON FUNCTION office.run_window_end(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.run_window_end(text) TO office_reader, office_admin;

-- Runs newest first (ids are time-ordered, docs/api.md Conventions). One page is
-- the matches among the runs in [not_before_id, before_id): a caller takes
-- not_before_id from run_window_end(before_id), so the scan is bounded even
-- when nothing matches; a full page continues from its last id, one that is
-- not full from the window's end. With a task the task's own runs are read
-- (idx_run_task_reason) and the window bounds nothing it would not.
CREATE FUNCTION office.list_runs(status text DEFAULT NULL, agent_profile_id text DEFAULT NULL,
                                 reason text DEFAULT NULL, task_id text DEFAULT NULL,
                                 key_prefix text DEFAULT NULL, before_id text DEFAULT NULL,
                                 not_before_id text DEFAULT NULL, page_size int DEFAULT 50)
    RETURNS SETOF office.runs
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_status text := nullif(list_runs.status, '');
    v_agent  text := nullif(list_runs.agent_profile_id, '');
    v_reason text := nullif(list_runs.reason, '');
    v_task   text := nullif(list_runs.task_id, '');
    v_prefix text := nullif(list_runs.key_prefix, '');
    v_before text := nullif(list_runs.before_id, '');
    v_floor  text := nullif(list_runs.not_before_id, '');
    v_size   int := office._page_size(list_runs.page_size);
BEGIN
    IF v_status NOT IN ('queued', 'claimed', 'finished', 'failed', 'cancelled') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown run status %s (expected queued, claimed, finished, failed or cancelled)',
                             quote_literal(left(v_status, 200)));
    END IF;
    PERFORM office._check_short_text('agent_profile_id', v_agent);
    PERFORM office._check_short_text('reason', v_reason);
    PERFORM office._check_short_text('task_id', v_task);
    PERFORM office._check_short_text('before_id', v_before);
    PERFORM office._check_short_text('not_before_id', v_floor);
    IF length(v_prefix) > 512 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('key_prefix %s... is %s characters, more than 512',
                             quote_literal(left(v_prefix, 40)), length(v_prefix));
    END IF;
    IF v_task IS NOT NULL THEN
        RETURN QUERY
            SELECT r.* FROM office.runs r
             WHERE r.task_id = v_task
               AND (v_before IS NULL OR r.id < v_before) AND (v_floor IS NULL OR r.id >= v_floor)
               AND (v_status IS NULL OR r.status = v_status)
               AND (v_agent IS NULL OR r.agent_profile_id = v_agent)
               AND (v_reason IS NULL OR r.reason = v_reason)
               AND (v_prefix IS NULL OR starts_with(r.idempotency_key, v_prefix))
             ORDER BY r.id DESC
             LIMIT v_size;
        RETURN;
    END IF;
    -- The inner LIMIT is the window's bound when not_before_id is missing
    -- (a caller that did not ask run_window_end still scans a bounded range).
    RETURN QUERY
        SELECT w.* FROM (SELECT r.* FROM office.runs r
                          WHERE (v_before IS NULL OR r.id < v_before)
                            AND (v_floor IS NULL OR r.id >= v_floor)
                          ORDER BY r.id DESC
                          LIMIT office._run_list_window()) w
         WHERE (v_status IS NULL OR w.status = v_status)
           AND (v_agent IS NULL OR w.agent_profile_id = v_agent)
           AND (v_reason IS NULL OR w.reason = v_reason)
           AND (v_prefix IS NULL OR starts_with(w.idempotency_key, v_prefix))
         ORDER BY w.id DESC
         LIMIT v_size;
END
$$;
COMMENT ON FUNCTION office.list_runs(text, text, text, text, text, text, text, int) IS
    'One page of runs, newest first: those with id in [not_before_id, before_id) matching every filter given (status, agent, reason, task, idempotency key prefix; NULL or empty: any), at most page_size (1..500) and at most 10,000 scanned (run_window_end). Unknown status, bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_runs(text, text, text, text, text, text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_runs(text, text, text, text, text, text, text, int)
    TO office_reader, office_admin;

-- Agents by id with what decides whether they wake: the queue depth (counted
-- up to 10,001, so one agent's huge backlog costs a bounded read: the page
-- shows "10,000+"), the oldest queued run and the claim with its heartbeat,
-- which is the worker's health as the database knows it.
CREATE FUNCTION office.list_agents(after_id text DEFAULT NULL, page_size int DEFAULT 50)
    RETURNS TABLE (id text, workspace_id text, name text, status text, created_at timestamptz,
                   updated_at timestamptz, queued int, oldest_queued_at timestamptz,
                   claimed_run_id text, claimed_by text, claimed_at timestamptz,
                   heartbeat_at timestamptz)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_after text := nullif(list_agents.after_id, '');
    v_size  int := office._page_size(list_agents.page_size);
BEGIN
    PERFORM office._check_short_text('after_id', v_after);
    RETURN QUERY
        SELECT a.id, a.workspace_id, a.name, a.status, a.created_at, a.updated_at,
               (SELECT count(*)::int FROM (SELECT FROM office.runs q
                                            WHERE q.agent_profile_id = a.id AND q.status = 'queued'
                                            LIMIT 10001) d),
               (SELECT q.requested_at FROM office.runs q
                 WHERE q.agent_profile_id = a.id AND q.status = 'queued'
                 ORDER BY q.requested_at, q.id COLLATE "C" LIMIT 1),
               c.id, c.claimed_by, c.claimed_at, c.heartbeat_at
          FROM office.agent_profiles a
          LEFT JOIN office.runs c ON c.agent_profile_id = a.id AND c.status = 'claimed'
         WHERE v_after IS NULL OR a.id > v_after
         ORDER BY a.id
         LIMIT v_size;
END
$$;
COMMENT ON FUNCTION office.list_agents(text, int) IS
    'One page of agents by id after after_id, at most page_size (1..500): the profile, queued (runs queued, counted up to 10,001), oldest_queued_at, and the claimed run if any (id, claimed_by, claimed_at, heartbeat_at). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_agents(text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_agents(text, int) TO office_reader, office_admin;

CREATE FUNCTION office.list_tasks(before_id text DEFAULT NULL, page_size int DEFAULT 50)
    RETURNS SETOF office.tasks
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_before text := nullif(list_tasks.before_id, '');
    v_size   int := office._page_size(list_tasks.page_size);
BEGIN
    PERFORM office._check_short_text('before_id', v_before);
    RETURN QUERY SELECT t.* FROM office.tasks t
                  WHERE v_before IS NULL OR t.id < v_before
                  ORDER BY t.id DESC LIMIT v_size;
END
$$;
COMMENT ON FUNCTION office.list_tasks(text, int) IS
    'One page of tasks by id descending, before before_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_tasks(text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_tasks(text, int) TO office_reader, office_admin;

CREATE FUNCTION office.list_task_children(parent_task_id text, after_id text DEFAULT NULL,
                                          page_size int DEFAULT 50)
    RETURNS SETOF office.tasks
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_parent text := office._check_short_text('parent_task_id', list_task_children.parent_task_id);
    v_after  text := nullif(list_task_children.after_id, '');
    v_size   int := office._page_size(list_task_children.page_size);
BEGIN
    PERFORM office._check_short_text('after_id', v_after);
    RETURN QUERY SELECT t.* FROM office.tasks t
                  WHERE t.parent_id = v_parent AND (v_after IS NULL OR t.id > v_after)
                  ORDER BY t.id LIMIT v_size;
END
$$;
COMMENT ON FUNCTION office.list_task_children(text, text, int) IS
    'One page of a task''s children by id, after after_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_task_children(text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_task_children(text, text, int) TO office_reader, office_admin;

CREATE FUNCTION office.list_task_blockers(task_id text, after_id text DEFAULT NULL,
                                          page_size int DEFAULT 50)
    RETURNS SETOF office.tasks
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_task  text := office._check_short_text('task_id', list_task_blockers.task_id);
    v_after text := nullif(list_task_blockers.after_id, '');
    v_size  int := office._page_size(list_task_blockers.page_size);
BEGIN
    PERFORM office._check_short_text('after_id', v_after);
    RETURN QUERY SELECT t.* FROM office.task_blockers b
                   JOIN office.tasks t ON t.id = b.blocker_task_id
                  WHERE b.task_id = v_task AND (v_after IS NULL OR t.id > v_after)
                  ORDER BY t.id LIMIT v_size;
END
$$;
COMMENT ON FUNCTION office.list_task_blockers(text, text, int) IS
    'One page of the tasks that block a task, by id, after after_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_task_blockers(text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_task_blockers(text, text, int) TO office_reader, office_admin;

CREATE FUNCTION office.get_parent_receipt(parent_task_id text)
    RETURNS SETOF office.parent_child_wake_receipts
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
BEGIN ATOMIC
    SELECT p.* FROM office.parent_child_wake_receipts p
     WHERE p.parent_task_id = get_parent_receipt.parent_task_id;
END;
COMMENT ON FUNCTION office.get_parent_receipt(text) IS
    'The parent-wake receipt of a parent task (0 or 1 row): the child set, generation and wake operation it delivered, and the run it landed on.';
REVOKE EXECUTE ON FUNCTION office.get_parent_receipt(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.get_parent_receipt(text) TO office_reader, office_admin;

CREATE FUNCTION office.list_routines(before_id text DEFAULT NULL, page_size int DEFAULT 50)
    RETURNS SETOF office.routines
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_before text := nullif(list_routines.before_id, '');
    v_size   int := office._page_size(list_routines.page_size);
BEGIN
    PERFORM office._check_short_text('before_id', v_before);
    RETURN QUERY SELECT r.* FROM office.routines r
                  WHERE v_before IS NULL OR r.id < v_before
                  ORDER BY r.id DESC LIMIT v_size;
END
$$;
COMMENT ON FUNCTION office.list_routines(text, int) IS
    'One page of routines by id descending, before before_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_routines(text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_routines(text, int) TO office_reader, office_admin;

CREATE FUNCTION office.get_routine(routine_id text) RETURNS SETOF office.routines
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
BEGIN ATOMIC
    SELECT r.* FROM office.routines r WHERE r.id = get_routine.routine_id;
END;
COMMENT ON FUNCTION office.get_routine(text) IS
    'The routine with this id (0 or 1 row).';
REVOKE EXECUTE ON FUNCTION office.get_routine(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.get_routine(text) TO office_reader, office_admin;

CREATE FUNCTION office.list_routine_triggers(routine_id text, after_id text DEFAULT NULL,
                                             page_size int DEFAULT 50)
    RETURNS SETOF office.routine_triggers
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_routine text := office._check_short_text('routine_id', list_routine_triggers.routine_id);
    v_after   text := nullif(list_routine_triggers.after_id, '');
    v_size    int := office._page_size(list_routine_triggers.page_size);
BEGIN
    PERFORM office._check_short_text('after_id', v_after);
    RETURN QUERY SELECT t.* FROM office.routine_triggers t
                  WHERE t.routine_id = v_routine AND (v_after IS NULL OR t.id > v_after)
                  ORDER BY t.id LIMIT v_size;
END
$$;
COMMENT ON FUNCTION office.list_routine_triggers(text, text, int) IS
    'One page of a routine''s triggers by id, after after_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_routine_triggers(text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_routine_triggers(text, text, int) TO office_reader, office_admin;

CREATE FUNCTION office.list_routine_runs(routine_id text, before_id text DEFAULT NULL,
                                         page_size int DEFAULT 50)
    RETURNS SETOF office.routine_runs
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_routine text := office._check_short_text('routine_id', list_routine_runs.routine_id);
    v_before  text := nullif(list_routine_runs.before_id, '');
    v_size    int := office._page_size(list_routine_runs.page_size);
BEGIN
    PERFORM office._check_short_text('before_id', v_before);
    RETURN QUERY SELECT r.* FROM office.routine_runs r
                  WHERE r.routine_id = v_routine AND (v_before IS NULL OR r.id < v_before)
                  ORDER BY r.id DESC LIMIT v_size;
END
$$;
COMMENT ON FUNCTION office.list_routine_runs(text, text, int) IS
    'One page of a routine''s runs, newest first (ids are time-ordered), before before_id, at most page_size (1..500); the task_created one holds the gate. Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_routine_runs(text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_routine_runs(text, text, int) TO office_reader, office_admin;

CREATE FUNCTION office.list_wakeups(before_id text DEFAULT NULL, page_size int DEFAULT 50)
    RETURNS SETOF office.wakeup_requests
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_before text := nullif(list_wakeups.before_id, '');
    v_size   int := office._page_size(list_wakeups.page_size);
BEGIN
    PERFORM office._check_short_text('before_id', v_before);
    RETURN QUERY SELECT w.* FROM office.wakeup_requests w
                  WHERE v_before IS NULL OR w.id < v_before
                  ORDER BY w.id DESC LIMIT v_size;
END
$$;
COMMENT ON FUNCTION office.list_wakeups(text, int) IS
    'One page of wake-up requests, newest first (ids are time-ordered), before before_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_wakeups(text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_wakeups(text, int) TO office_reader, office_admin;

CREATE FUNCTION office.list_events(before_id bigint DEFAULT NULL, page_size int DEFAULT 50)
    RETURNS SETOF office.events
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_size int := office._page_size(list_events.page_size);
BEGIN
    RETURN QUERY SELECT e.* FROM office.events e
                  WHERE list_events.before_id IS NULL OR e.id < list_events.before_id
                  ORDER BY e.id DESC LIMIT v_size;
END
$$;
COMMENT ON FUNCTION office.list_events(bigint, int) IS
    'One page of the outbox, newest first, before before_id, at most page_size (1..500). Bad page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_events(bigint, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_events(bigint, int) TO office_reader, office_admin;

-- Runs per status for the overview without reading the run table whole
-- (office.queue_stats counts every run: a scan of millions of rows). Queued
-- and claimed runs are counted exactly from their partial indexes: a cost
-- that follows the backlog, which is what an operator needs exactly. The
-- finished, failed and cancelled runs are the history; past 10,000 runs
-- (the planner's estimate) they are the estimate of the last ANALYZE
-- (reltuples times the status's frequency), marked exact = false.
CREATE FUNCTION office.run_status_counts()
    RETURNS TABLE (status text, agents bigint, runs bigint, oldest_requested_at timestamptz,
                   exact boolean)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_estimate real;
    v_status   text;
BEGIN
    -- One statement per status, planned with its status as a literal: a
    -- join on a list of statuses, or a parameter in a cached plan, would not
    -- prove a partial index's predicate and would read the table.
    FOREACH v_status IN ARRAY ARRAY['queued', 'claimed', 'finished', 'failed', 'cancelled'] LOOP
        IF v_status = 'finished' THEN
            SELECT c.reltuples INTO v_estimate
              FROM pg_catalog.pg_class c WHERE c.oid = 'office.runs'::regclass;
            EXIT WHEN v_estimate >= 10000;
        END IF;
        RETURN QUERY EXECUTE format(
            'SELECT %L::text, pg_catalog.count(DISTINCT r.agent_profile_id),'
            ' pg_catalog.count(r.id), pg_catalog.min(r.requested_at), true'
            ' FROM office.runs r WHERE r.status OPERATOR(pg_catalog.=) %L', v_status, v_status);
    END LOOP;
    IF v_estimate < 10000 THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT s.status, NULL::bigint,
               round(v_estimate * coalesce(f.freq, 0))::bigint, NULL::timestamptz, false
          FROM (VALUES (3, 'finished'), (4, 'failed'), (5, 'cancelled')) AS s(ord, status)
          LEFT JOIN (SELECT v.val, v.freq
                       FROM pg_catalog.pg_stats st
                      CROSS JOIN LATERAL unnest(st.most_common_vals::text::text[],
                                                st.most_common_freqs) AS v(val, freq)
                      WHERE st.schemaname = 'office' AND st.tablename = 'runs'
                        AND st.attname = 'status') f ON f.val = s.status
         ORDER BY s.ord;
END
$$;
COMMENT ON FUNCTION office.run_status_counts() IS
    'Runs per status without reading the whole run table: queued and claimed exactly (agents, runs, oldest requested_at); finished, failed and cancelled exactly while the table holds under 10,000 runs (planner estimate), else the last ANALYZE''s estimate (agents and oldest NULL, exact false).';
REVOKE EXECUTE ON FUNCTION office.run_status_counts() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.run_status_counts() TO office_reader, office_admin;
