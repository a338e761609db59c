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
            MESSAGE = format('%s must be a non-negative interval of at most 100 years, not %s',
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

-- === keys (10_keys.sql) =======================================================

-- The SQL-standard bodies are bound when they are created, under the
-- installer's search_path (public, pg_temp for an upgrade of a 0.3.0 install);
-- they now name pg_catalog for every call and operator, and are created again
-- under the pinned path, so a look-alike planted in public before 0.3.0 was
-- installed is no longer bound (issue 10).

CREATE OR REPLACE FUNCTION office.second_precision_text(ts timestamptz)
    RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN pg_catalog.to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS');

CREATE OR REPLACE FUNCTION office.routine_fingerprint(title text, description text, assignee text)
    RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN pg_catalog.encode(
        pg_catalog.substr(
            pg_catalog.sha256(pg_catalog.convert_to(
                title OPERATOR(pg_catalog.||) '|' OPERATOR(pg_catalog.||) description
                    OPERATOR(pg_catalog.||) '|' OPERATOR(pg_catalog.||) assignee,
                'UTF8')),
            1, 16),
        'hex');
-- (end of keys)
-- === agents (20_agents.sql) ====================================================
CREATE OR REPLACE FUNCTION office.upsert_agent(id text, workspace_id text, name text DEFAULT '',
                                    status text DEFAULT 'idle')
    RETURNS office.agent_profiles
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_id text := upsert_agent.id;
    v_row office.agent_profiles;
BEGIN
    IF v_id IS NULL THEN
        v_id := gen_random_uuid()::text;
    ELSE
        PERFORM office._check_id('agent', v_id);
    END IF;
    PERFORM office._check_id('workspace', upsert_agent.workspace_id);
    PERFORM office._check_free_text('name', upsert_agent.name);
    PERFORM office._check_agent_status(upsert_agent.status);

    -- An existing agent of another workspace: the update trigger refuses the
    -- move (OFW01) before anything is written.
    INSERT INTO office.agent_profiles AS a (id, workspace_id, name, status)
    VALUES (v_id, upsert_agent.workspace_id, coalesce(upsert_agent.name, ''), upsert_agent.status)
    ON CONFLICT (id) DO UPDATE
        SET workspace_id = excluded.workspace_id,
            name = excluded.name,
            status = excluded.status,
            updated_at = now()
    RETURNING a.* INTO v_row;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.upsert_agent(text, text, text, text) IS
    'Inserts the agent or updates its name and status; a NULL id generates one. Bad id, status or a name over 64 KiB: 22023; an existing agent of another workspace: OFW01 (agents never move).';
REVOKE EXECUTE ON FUNCTION office.upsert_agent(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.upsert_agent(text, text, text, text) TO office_producer, office_admin;

-- An agent never changes workspace: the tasks and routines assigned to it are
-- checked against its workspace when they are written (40_tasks.sql,
-- 55_routines.sql), which holds only while that workspace stays put. A new
-- agent (or one renamed to a new id) must not adopt the dangling assignee of
-- a task or routine of another workspace, written by plain SQL.
CREATE FUNCTION office._agents_same_workspace() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_kind  text;
    v_id    text;
    v_space text;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.workspace_id IS DISTINCT FROM OLD.workspace_id THEN
        RAISE EXCEPTION USING ERRCODE = 'OFW01',
            MESSAGE = format('agent %s belongs to workspace %s and cannot move to workspace %s',
                             quote_literal(OLD.id), quote_literal(OLD.workspace_id),
                             quote_literal(NEW.workspace_id));
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.id IS NOT DISTINCT FROM OLD.id THEN
        RETURN NEW;
    END IF;
    -- The insert of an upsert of an existing agent becomes its update: that
    -- agent's old rows are not re-checked.
    IF TG_OP = 'INSERT' AND EXISTS (SELECT FROM office.agent_profiles a WHERE a.id = NEW.id) THEN
        RETURN NEW;
    END IF;
    SELECT 'task', t.id, t.workspace_id INTO v_kind, v_id, v_space
      FROM office.tasks t
     WHERE t.assignee_agent_profile_id = NEW.id AND t.workspace_id <> NEW.workspace_id
     LIMIT 1;
    IF NOT FOUND THEN
        SELECT 'routine', r.id, r.workspace_id INTO v_kind, v_id, v_space
          FROM office.routines r
         WHERE r.assignee_agent_profile_id = NEW.id AND r.workspace_id <> NEW.workspace_id
         LIMIT 1;
    END IF;
    IF v_id IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OFW01',
            MESSAGE = format('agent %s of workspace %s cannot be the assignee of %s %s of workspace %s',
                             quote_literal(NEW.id), quote_literal(NEW.workspace_id), v_kind,
                             quote_literal(v_id), quote_literal(v_space));
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._agents_same_workspace() IS
    'Trigger: an agent never changes workspace (OFW01), and a new agent id must not be the assignee of a task or routine of another workspace (OFW01).';
REVOKE EXECUTE ON FUNCTION office._agents_same_workspace() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._agents_same_workspace() TO office_admin;

CREATE TRIGGER agent_profiles_05_same_workspace
    BEFORE INSERT OR UPDATE OF id, workspace_id ON office.agent_profiles
    FOR EACH ROW EXECUTE FUNCTION office._agents_same_workspace();

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
-- A task's parent, its blockers and its assignee are in the task's workspace
-- (OFW01), for every client. Only what a write changes is checked (a row
-- written before 0.4.0 keeps its old references until they change; officectl
-- doctor lists them). AFTER triggers, so that they read the whole statement
-- (a subtree moved in one UPDATE) and run after the foreign-key checks, which
-- key-share lock the referenced tasks: a task moving to another workspace
-- first locks its own row FOR UPDATE, which waits for every transaction
-- adding a child or an edge to it, then reads them all. An agent never
-- changes workspace (20_agents.sql), so its workspace needs no lock.
CREATE FUNCTION office._tasks_same_workspace() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_moved boolean := TG_OP = 'UPDATE' AND NEW.workspace_id IS DISTINCT FROM OLD.workspace_id;
    v_id    text;
    v_space text;
BEGIN
    IF v_moved THEN
        PERFORM FROM office.tasks t WHERE t.id = NEW.id FOR UPDATE;
    END IF;
    IF NEW.parent_id IS NOT NULL
       AND (TG_OP = 'INSERT' OR v_moved OR NEW.parent_id IS DISTINCT FROM OLD.parent_id) THEN
        SELECT p.workspace_id INTO v_space FROM office.tasks p WHERE p.id = NEW.parent_id;
        IF v_space <> NEW.workspace_id THEN
            RAISE EXCEPTION USING ERRCODE = 'OFW01',
                MESSAGE = format('task %s of workspace %s cannot have parent task %s of workspace %s',
                                 quote_literal(NEW.id), quote_literal(NEW.workspace_id),
                                 quote_literal(NEW.parent_id), quote_literal(v_space));
        END IF;
    END IF;
    IF NEW.assignee_agent_profile_id IS NOT NULL
       AND (TG_OP = 'INSERT' OR v_moved
            OR NEW.assignee_agent_profile_id IS DISTINCT FROM OLD.assignee_agent_profile_id) THEN
        SELECT a.workspace_id INTO v_space
          FROM office.agent_profiles a WHERE a.id = NEW.assignee_agent_profile_id;
        IF v_space <> NEW.workspace_id THEN
            RAISE EXCEPTION USING ERRCODE = 'OFW01',
                MESSAGE = format('task %s of workspace %s cannot be assigned to agent %s of workspace %s',
                                 quote_literal(NEW.id), quote_literal(NEW.workspace_id),
                                 quote_literal(NEW.assignee_agent_profile_id), quote_literal(v_space));
        END IF;
    END IF;
    IF NOT v_moved THEN
        RETURN NULL;
    END IF;
    SELECT c.id, c.workspace_id INTO v_id, v_space
      FROM office.tasks c
     WHERE c.parent_id = NEW.id AND c.workspace_id <> NEW.workspace_id
     ORDER BY c.id COLLATE "C" LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFW01',
            MESSAGE = format('task %s cannot move to workspace %s: its child task %s is in workspace %s',
                             quote_literal(NEW.id), quote_literal(NEW.workspace_id), quote_literal(v_id),
                             quote_literal(v_space));
    END IF;
    SELECT o.id, o.workspace_id INTO v_id, v_space
      FROM office.task_blockers b
      JOIN office.tasks o ON o.id = CASE WHEN b.task_id = NEW.id THEN b.blocker_task_id ELSE b.task_id END
     WHERE (b.task_id = NEW.id OR b.blocker_task_id = NEW.id) AND o.workspace_id <> NEW.workspace_id
     ORDER BY o.id COLLATE "C" LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFW01',
            MESSAGE = format('task %s cannot move to workspace %s: it shares a blocker edge with task %s of workspace %s',
                             quote_literal(NEW.id), quote_literal(NEW.workspace_id), quote_literal(v_id),
                             quote_literal(v_space));
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._tasks_same_workspace() IS
    'Trigger: a task''s parent and assignee (when written) and, when the task moves to another workspace, its children and blocker edges, are in the task''s workspace; else OFW01 naming both workspaces.';
REVOKE EXECUTE ON FUNCTION office._tasks_same_workspace() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_same_workspace() TO office_admin;

CREATE TRIGGER tasks_40_same_workspace_insert
    AFTER INSERT ON office.tasks
    FOR EACH ROW
    WHEN (NEW.parent_id IS NOT NULL OR NEW.assignee_agent_profile_id IS NOT NULL)
    EXECUTE FUNCTION office._tasks_same_workspace();

CREATE TRIGGER tasks_40_same_workspace_update
    AFTER UPDATE OF workspace_id, parent_id, assignee_agent_profile_id ON office.tasks
    FOR EACH ROW
    WHEN (NEW.workspace_id IS DISTINCT FROM OLD.workspace_id
          OR NEW.parent_id IS DISTINCT FROM OLD.parent_id
          OR NEW.assignee_agent_profile_id IS DISTINCT FROM OLD.assignee_agent_profile_id)
    EXECUTE FUNCTION office._tasks_same_workspace();

-- A blocker edge joins two tasks of one workspace. After the foreign-key
-- checks, which key-share lock both tasks (see above).
CREATE FUNCTION office._task_blockers_same_workspace() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_task    text;
    v_blocker text;
BEGIN
    IF TG_OP = 'UPDATE' AND (NEW.task_id, NEW.blocker_task_id)
                            IS NOT DISTINCT FROM (OLD.task_id, OLD.blocker_task_id) THEN
        RETURN NULL;
    END IF;
    SELECT t.workspace_id, b.workspace_id INTO v_task, v_blocker
      FROM office.tasks t, office.tasks b
     WHERE t.id = NEW.task_id AND b.id = NEW.blocker_task_id;
    IF v_task <> v_blocker THEN
        RAISE EXCEPTION USING ERRCODE = 'OFW01',
            MESSAGE = format('task %s of workspace %s cannot be blocked by task %s of workspace %s',
                             quote_literal(NEW.task_id), quote_literal(v_task),
                             quote_literal(NEW.blocker_task_id), quote_literal(v_blocker));
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._task_blockers_same_workspace() IS
    'Trigger: a blocker edge joins two tasks of one workspace, else OFW01 naming both.';
REVOKE EXECUTE ON FUNCTION office._task_blockers_same_workspace() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._task_blockers_same_workspace() TO office_admin;

CREATE TRIGGER task_blockers_40_same_workspace
    AFTER INSERT OR UPDATE OF task_id, blocker_task_id ON office.task_blockers
    FOR EACH ROW EXECUTE FUNCTION office._task_blockers_same_workspace();

CREATE OR REPLACE FUNCTION office.create_task(workspace_id text, id text DEFAULT NULL, title text DEFAULT '',
                                   parent_id text DEFAULT NULL, workflow_step_id text DEFAULT NULL,
                                   assignee_agent_profile_id text DEFAULT NULL, state text DEFAULT 'TODO',
                                   is_office boolean DEFAULT true, is_ephemeral boolean DEFAULT false)
    RETURNS office.task_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_id       text := create_task.id;
    v_parent   text := nullif(create_task.parent_id, '');
    v_assignee text := nullif(create_task.assignee_agent_profile_id, '');
    v_office   boolean := coalesce(create_task.is_office, true);
    v_gen      bigint;
    v_run      office.enqueue_result;
    v_result   office.task_result;
BEGIN
    -- Validate everything before writing anything.
    PERFORM office._check_id('workspace', create_task.workspace_id);
    IF v_id IS NULL THEN
        v_id := gen_random_uuid()::text;
    ELSE
        PERFORM office._check_id('task', v_id);
    END IF;
    PERFORM office._check_free_text('title', create_task.title);
    PERFORM office._check_short_text('workflow_step_id', create_task.workflow_step_id);
    PERFORM office._check_task_state(create_task.state);
    IF v_parent IS NOT NULL AND NOT EXISTS (SELECT FROM office.tasks t WHERE t.id = v_parent) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFT01',
            MESSAGE = format('parent task %s not found', quote_literal(v_parent));
    END IF;
    IF v_assignee IS NOT NULL
       AND NOT EXISTS (SELECT FROM office.agent_profiles a WHERE a.id = v_assignee) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01',
            MESSAGE = format('agent %s not found', quote_literal(v_assignee));
    END IF;

    -- The generation comes from the insert trigger (1 with assignee and step);
    -- a parent or assignee of another workspace is refused there (OFW01). An
    -- explicit id that exists is 23505 naming it (ON CONFLICT waits for a
    -- concurrent creator of the id, then finds the row there).
    INSERT INTO office.tasks AS t (id, workspace_id, parent_id, workflow_step_id, title, state,
                                   assignee_agent_profile_id, is_office, is_ephemeral)
    VALUES (v_id, create_task.workspace_id, v_parent, create_task.workflow_step_id,
            coalesce(create_task.title, ''), create_task.state, v_assignee, v_office,
            coalesce(create_task.is_ephemeral, false))
    ON CONFLICT (id) DO NOTHING
    RETURNING t.assignment_generation INTO v_gen;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('task %s already exists', quote_literal(v_id));
    END IF;

    IF v_assignee IS NOT NULL AND v_office THEN
        v_run := office._wake(v_assignee, 'task_assigned',
                              jsonb_build_object('assignment_generation', v_gen),
                              office.assignment_key(v_id, v_assignee, v_gen), v_id);
    END IF;
    v_result := (v_id, v_gen, v_run.outcome, v_run.dedup_kind, v_run.run_id);
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office.create_task(text, text, text, text, text, text, text, boolean, boolean) IS
    'Creates a task (NULL id: generated). Generation 1 when assignee and step are both set, else 0; an Office task with an assignee gets a task_assigned run keyed assignment_key(task, assignee, generation) (skipped when the agent does not accept runs). Bad id/workspace/state, a title over 64 KiB or a workflow_step_id over 200 characters 22023, an explicit id that exists 23505, unknown parent OFT01, unknown assignee OFA01, a parent or assignee of another workspace OFW01. A task created terminal runs no terminal effects.';
REVOKE EXECUTE ON FUNCTION office.create_task(text, text, text, text, text, text, text, boolean, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.create_task(text, text, text, text, text, text, text, boolean, boolean)
    TO office_producer, office_admin;

CREATE OR REPLACE FUNCTION office.assign_task(task_id text, assignee_agent_profile_id text,
                                   actor_id text DEFAULT NULL, actor_type text DEFAULT 'user')
    RETURNS office.assign_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_new       text := nullif(assign_task.assignee_agent_profile_id, '');
    v_prev      text;
    v_office    boolean;
    v_gen       bigint;
    v_actor     text;
    v_run       office.enqueue_result;
    v_result    office.assign_result;
BEGIN
    PERFORM office._check_short_text('actor_id', assign_task.actor_id);
    IF assign_task.actor_type IS NULL OR assign_task.actor_type NOT IN ('user', 'agent', 'system') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown actor_type %s (expected user, agent or system)',
                             coalesce(quote_literal(assign_task.actor_type), 'NULL'));
    END IF;
    IF v_new IS NOT NULL AND NOT EXISTS (SELECT FROM office.agent_profiles a WHERE a.id = v_new) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01', MESSAGE = format('agent %s not found', quote_literal(v_new));
    END IF;
    -- The row lock serialises concurrent assignments of this task; the
    -- previous assignee read under it is exact.
    SELECT t.assignee_agent_profile_id, t.is_office INTO v_prev, v_office
      FROM office.tasks t
     WHERE t.id = assign_task.task_id
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFT01',
            MESSAGE = format('task %s not found', coalesce(quote_literal(assign_task.task_id), 'NULL'));
    END IF;

    -- The trigger bumps the generation and writes the task.assigned event,
    -- with the actor passed through a transaction-local setting that is
    -- restored right after (a plain UPDATE later in the transaction has none).
    v_actor := current_setting('office.actor', true);
    PERFORM set_config('office.actor',
                       jsonb_build_object('id', assign_task.actor_id, 'type', assign_task.actor_type)::text,
                       true);
    UPDATE office.tasks t
       SET assignee_agent_profile_id = v_new
     WHERE t.id = assign_task.task_id
    RETURNING t.assignment_generation INTO v_gen;
    PERFORM set_config('office.actor', coalesce(v_actor, ''), true);

    IF v_new IS NOT NULL AND v_office THEN
        v_run := office._wake(v_new, 'task_assigned', jsonb_build_object('assignment_generation', v_gen),
                              office.assignment_key(assign_task.task_id, v_new, v_gen),
                              assign_task.task_id);
    END IF;
    v_result := (v_gen, v_prev IS NOT NULL AND v_prev IS DISTINCT FROM v_new,
                 v_run.outcome, v_run.dedup_kind, v_run.run_id);
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office.assign_task(text, text, text, text) IS
    'Writes the assignee (NULL or '''' unassigns): the generation goes up by one and the value this call committed is returned; interrupt when a different, non-empty assignee is replaced; an Office task with an assignee gets a task_assigned run keyed assignment_key(task, assignee, generation) (skipped when the agent does not accept runs). Unknown task OFT01, unknown agent OFA01, an agent of another workspace OFW01, bad actor_type or an actor_id over 200 characters 22023.';
REVOKE EXECUTE ON FUNCTION office.assign_task(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.assign_task(text, text, text, text) TO office_producer, office_admin;

COMMENT ON FUNCTION office.add_blocker(text, text) IS
    'blocker_task_id now blocks task_id. Self-block or an edge closing a cycle (any length) 22023, unknown task OFT01, tasks of two workspaces OFW01, an existing edge is a no-op.';

-- (end of tasks)
-- === events (45_events.sql) ====================================================
-- The actor of a write: the setting office.actor (assign_task sets it for its
-- own update), checked like any argument, since the event outlives the
-- transaction and a subscriber must be able to decode it: a JSON object of
-- exactly "id" (a string of at most 200 characters without control
-- characters, or null) and "type" (user, agent or system), else 22023. Its
-- length is checked before it is parsed, so a deeply nested document never
-- reaches the parser; the parse is guarded (a subtransaction) only when the
-- setting is set.
CREATE FUNCTION office._event_actor() RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text  text := current_setting('office.actor', true);
    v_actor jsonb;
    v_shape constant text := 'a JSON object {"id": <text of at most 200 characters, or null>, '
                             '"type": "user" | "agent" | "system"}';
BEGIN
    IF v_text IS NULL OR v_text = '' THEN
        RETURN NULL;
    END IF;
    IF octet_length(v_text) > 2048 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting office.actor is %s bytes, more than 2048: expected %s',
                             octet_length(v_text), v_shape);
    END IF;
    BEGIN
        v_actor := v_text::jsonb;
    EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting office.actor = %s is not JSON: expected %s',
                             quote_literal(left(v_text, 200)), v_shape);
    END;
    IF jsonb_typeof(v_actor) <> 'object'
       OR (SELECT array_agg(k ORDER BY k COLLATE "C") FROM jsonb_object_keys(v_actor) AS k)
          IS DISTINCT FROM ARRAY['id', 'type']
       OR jsonb_typeof(v_actor -> 'id') NOT IN ('string', 'null')
       OR jsonb_typeof(v_actor -> 'type') <> 'string'
       OR (v_actor ->> 'type') NOT IN ('user', 'agent', 'system') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting office.actor = %s: expected %s', quote_literal(left(v_text, 200)), v_shape);
    END IF;
    PERFORM office._check_short_text('the id of setting office.actor', v_actor ->> 'id');
    RETURN v_actor;
END
$$;
COMMENT ON FUNCTION office._event_actor() IS
    'Internal: the setting office.actor as the actor of an event (NULL when unset); anything but {"id": <text of at most 200 characters, or null>, "type": user|agent|system} is 22023.';
REVOKE EXECUTE ON FUNCTION office._event_actor() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._event_actor() TO office_admin;

CREATE OR REPLACE FUNCTION office._tasks_event_assigned() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_actor jsonb := office._event_actor();
BEGIN
    IF TG_OP = 'INSERT' AND NEW.assignee_agent_profile_id IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO office.events (topic, task_id, payload)
    VALUES ('task.assigned', NEW.id,
            jsonb_build_object(
                'task_id', NEW.id,
                'workspace_id', NEW.workspace_id,
                'agent_profile_id', NEW.assignee_agent_profile_id,
                'assignment_generation', NEW.assignment_generation,
                'previous_agent_profile_id',
                    CASE WHEN TG_OP = 'UPDATE' THEN OLD.assignee_agent_profile_id END,
                'is_office', NEW.is_office,
                'actor', v_actor,
                'db_user', session_user));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._tasks_event_assigned() IS
    'Trigger: appends task.assigned (task_id, workspace_id, agent_profile_id, assignment_generation, previous_agent_profile_id, is_office, actor, db_user) on every write of the assignee and on an insert with one; a malformed office.actor setting is 22023.';
REVOKE EXECUTE ON FUNCTION office._tasks_event_assigned() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_event_assigned() TO office_admin;

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
    PERFORM office._check_short_text('consumer', claim_events.consumer);
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
CREATE OR REPLACE FUNCTION office.request_wakeup(agent_profile_id text, source text, reason text DEFAULT '',
                                      payload jsonb DEFAULT '{}', idempotency_key text DEFAULT NULL)
    RETURNS office.wakeup_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_agent   text := request_wakeup.agent_profile_id;
    v_reason  text := coalesce(request_wakeup.reason, '');
    v_payload jsonb := request_wakeup.payload;
    v_key     text := nullif(request_wakeup.idempotency_key, '');
    v_id      text;
    v_result  office.wakeup_result;
BEGIN
    IF v_agent IS NULL OR v_agent = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'agent_profile_id must not be empty';
    END IF;
    IF request_wakeup.source IS NULL OR request_wakeup.source = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('source of the wakeup of agent %s must not be empty', quote_literal(v_agent));
    END IF;
    -- The reason becomes the reason of the run it makes (dispatch_wakeup):
    -- a short word like enqueue_run's; '' means none.
    PERFORM office._check_short_text('source', request_wakeup.source);
    PERFORM office._check_short_text('reason', v_reason);
    IF v_payload IS NULL OR jsonb_typeof(v_payload) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('payload must be a JSON object, not %s', coalesce(jsonb_typeof(v_payload), 'NULL'));
    END IF;
    IF octet_length(v_payload::text) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('payload is %s bytes, more than 1 MiB (1048576 bytes)', octet_length(v_payload::text));
    END IF;
    IF length(v_key) > 512 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('idempotency_key %s... is %s characters, more than 512',
                             quote_literal(left(v_key, 40)), length(v_key));
    END IF;
    IF NOT EXISTS (SELECT FROM office.agent_profiles a WHERE a.id = v_agent) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01', MESSAGE = format('agent %s not found', quote_literal(v_agent));
    END IF;

    -- ON CONFLICT waits for an in-flight inserter of the key; once it has
    -- committed, DO NOTHING, and the next statement finds the holder. If the
    -- holder vanished meanwhile (rolled back), try again.
    LOOP
        INSERT INTO office.wakeup_requests AS w (agent_profile_id, source, reason, payload, idempotency_key)
        VALUES (v_agent, request_wakeup.source, v_reason, v_payload, v_key)
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING w.id INTO v_id;
        IF v_id IS NOT NULL THEN
            -- office.notify = off silences this NOTIFY too (see enqueue_run).
            IF current_setting('office.notify', true) IS DISTINCT FROM 'off' THEN
                PERFORM pg_notify('office_wakeups', v_id);
            END IF;
            v_result := ('queued', NULL, v_id);
            RETURN v_result;
        END IF;
        SELECT w.id INTO v_id FROM office.wakeup_requests w WHERE w.idempotency_key = v_key;
        IF FOUND THEN
            PERFORM office._count_dedup('wakeup', v_reason, 'durable');
            v_result := ('deduped', 'durable', v_id);
            RETURN v_result;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION office.request_wakeup(text, text, text, jsonb, text) IS
    'Records a queued wakeup request (NOTIFY office_wakeups unless office.notify = off) or, for a key already requested, (deduped, durable, <holder>) counted on queue wakeup. Empty agent or source, a source or reason over 200 characters or with a control character, a NULL or non-object payload, a payload over 1 MiB, a key over 512 characters 22023; unknown agent OFA01.';
REVOKE EXECUTE ON FUNCTION office.request_wakeup(text, text, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.request_wakeup(text, text, text, jsonb, text) TO office_producer, office_admin;

CREATE OR REPLACE FUNCTION office.fail_wakeup(wakeup_request_id text, reason text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM office._check_free_text('reason', fail_wakeup.reason);
    UPDATE office.wakeup_requests w
       SET status = 'failed', reason = coalesce(fail_wakeup.reason, ''), finished_at = now()
     WHERE w.id = fail_wakeup.wakeup_request_id AND w.status = 'queued';
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT FROM office.wakeup_requests w WHERE w.id = fail_wakeup.wakeup_request_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('wakeup request %s not found',
                             coalesce(quote_literal(fail_wakeup.wakeup_request_id), 'NULL'));
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION office.fail_wakeup(text, text) IS
    'queued -> failed with the reason and finished_at; a claimed, coalesced, skipped or failed request is left as it is (false). A reason over 64 KiB 22023; unknown request OFR01.';
REVOKE EXECUTE ON FUNCTION office.fail_wakeup(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.fail_wakeup(text, text) TO office_producer, office_worker, office_admin;

-- (end of wakeups)
-- === routines (55_routines.sql) ================================================
-- A new agent must not adopt the assignee of a routine of another workspace
-- (20_agents.sql).
CREATE INDEX idx_routines_assignee ON office.routines (assignee_agent_profile_id)
    WHERE assignee_agent_profile_id IS NOT NULL;

-- A stored JSON document (a template, declared or resolved variables) is at
-- most 1 MiB as text, like a payload.
CREATE FUNCTION office._check_document(what text, value jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(value::text) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is %s bytes, more than 1 MiB (1048576 bytes)', what, octet_length(value::text));
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_document(text, jsonb) IS
    'Internal: returns value when it is NULL or at most 1 MiB as text, else raises 22023 naming the argument.';
REVOKE EXECUTE ON FUNCTION office._check_document(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_document(text, jsonb) TO office_admin;

-- A routine's assignee is an agent of the routine's workspace (OFW01), for
-- every client; only a write of the assignee or the workspace is checked (a
-- routine written before 0.4.0 is not re-checked; officectl doctor lists it).
-- An agent never changes workspace (20_agents.sql), so no lock is needed.
CREATE FUNCTION office._routines_same_workspace() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_space text;
BEGIN
    SELECT a.workspace_id INTO v_space FROM office.agent_profiles a WHERE a.id = NEW.assignee_agent_profile_id;
    IF v_space <> NEW.workspace_id THEN
        RAISE EXCEPTION USING ERRCODE = 'OFW01',
            MESSAGE = format('routine %s of workspace %s cannot be assigned to agent %s of workspace %s',
                             quote_literal(NEW.id), quote_literal(NEW.workspace_id),
                             quote_literal(NEW.assignee_agent_profile_id), quote_literal(v_space));
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._routines_same_workspace() IS
    'Trigger: a routine''s assignee (when written) is an agent of the routine''s workspace, else OFW01 naming both.';
REVOKE EXECUTE ON FUNCTION office._routines_same_workspace() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._routines_same_workspace() TO office_admin;

CREATE TRIGGER routines_40_same_workspace_insert
    AFTER INSERT ON office.routines
    FOR EACH ROW
    WHEN (NEW.assignee_agent_profile_id IS NOT NULL)
    EXECUTE FUNCTION office._routines_same_workspace();

CREATE TRIGGER routines_40_same_workspace_update
    AFTER UPDATE OF workspace_id, assignee_agent_profile_id ON office.routines
    FOR EACH ROW
    WHEN (NEW.assignee_agent_profile_id IS NOT NULL
          AND (NEW.workspace_id IS DISTINCT FROM OLD.workspace_id
               OR NEW.assignee_agent_profile_id IS DISTINCT FROM OLD.assignee_agent_profile_id))
    EXECUTE FUNCTION office._routines_same_workspace();

CREATE OR REPLACE FUNCTION office.create_routine(workspace_id text, name text, task_template jsonb DEFAULT '{}',
                                      assignee_agent_profile_id text DEFAULT NULL,
                                      concurrency_policy text DEFAULT 'skip_if_active',
                                      variables jsonb DEFAULT '{}', id text DEFAULT NULL,
                                      catch_up_policy text DEFAULT 'enqueue_missed_with_cap',
                                      catch_up_max int DEFAULT 25)
    RETURNS office.routines
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_id       text := create_routine.id;
    v_template jsonb := coalesce(create_routine.task_template, '{}'::jsonb);
    v_vars     jsonb := coalesce(create_routine.variables, '{}'::jsonb);
    v_assignee text := nullif(create_routine.assignee_agent_profile_id, '');
    v_bad      text;
    v_row      office.routines;
BEGIN
    -- Validate everything before writing anything.
    PERFORM office._check_id('workspace', create_routine.workspace_id);
    IF v_id IS NULL THEN
        v_id := gen_random_uuid()::text;
    ELSE
        PERFORM office._check_id('routine', v_id);
    END IF;
    IF create_routine.name IS NULL OR create_routine.name = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('name of routine %s must not be empty', quote_literal(v_id));
    END IF;
    PERFORM office._check_free_text('name', create_routine.name);
    PERFORM office._check_word('concurrency_policy', create_routine.concurrency_policy,
                               ARRAY['skip_if_active', 'coalesce_if_active', 'always_create']);
    PERFORM office._check_word('catch_up_policy', create_routine.catch_up_policy,
                               ARRAY['skip_missed', 'enqueue_missed_with_cap']);
    IF create_routine.catch_up_max IS NULL OR create_routine.catch_up_max < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('catch_up_max must be at least 1, not %s',
                             coalesce(create_routine.catch_up_max::text, 'NULL'));
    END IF;
    IF jsonb_typeof(v_template) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task_template must be a JSON object, not %s', jsonb_typeof(v_template));
    END IF;
    PERFORM office._check_document('task_template', v_template);
    SELECT k INTO v_bad FROM unnest(ARRAY['title', 'description']) AS k
     WHERE jsonb_typeof(v_template -> k) NOT IN ('string', 'null')
     ORDER BY k LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task_template %s must be a JSON string, not %s', v_bad,
                             jsonb_typeof(v_template -> v_bad));
    END IF;
    PERFORM office._check_free_text('task_template title', v_template ->> 'title');
    PERFORM office._check_free_text('task_template description', v_template ->> 'description');
    IF jsonb_typeof(v_vars) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('variables must be a JSON object {name: {"default": value}}, not %s',
                             jsonb_typeof(v_vars));
    END IF;
    PERFORM office._check_document('variables', v_vars);
    SELECT v.key INTO v_bad FROM jsonb_each(v_vars) AS v
     WHERE v.key !~ '^[A-Za-z_][A-Za-z0-9_]*$' OR jsonb_typeof(v.value) <> 'object'
     ORDER BY v.key LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('variable %s must be an identifier declared as {"default": value} (got %s)',
                             quote_literal(v_bad), v_vars -> v_bad);
    END IF;
    -- A placeholder naming an undeclared variable could never be filled.
    SELECT m.match[1] INTO v_bad
      FROM unnest(ARRAY[coalesce(v_template ->> 'title', ''), coalesce(v_template ->> 'description', '')]) AS t(text),
           regexp_matches(t.text, office._template_placeholder(), 'g') AS m(match)
     WHERE NOT v_vars ? m.match[1]
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task_template of routine %s uses {{%s}}, which is not a declared variable',
                             quote_literal(v_id), v_bad);
    END IF;
    IF v_assignee IS NOT NULL
       AND NOT EXISTS (SELECT FROM office.agent_profiles a WHERE a.id = v_assignee) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01', MESSAGE = format('agent %s not found', quote_literal(v_assignee));
    END IF;

    -- An assignee of another workspace is refused by the trigger (OFW01); an
    -- explicit id that exists is 23505 naming it.
    INSERT INTO office.routines AS r (id, workspace_id, name, task_template, assignee_agent_profile_id,
                                      concurrency_policy, catch_up_policy, catch_up_max, variables)
    VALUES (v_id, create_routine.workspace_id, create_routine.name, v_template, v_assignee,
            create_routine.concurrency_policy, create_routine.catch_up_policy, create_routine.catch_up_max,
            v_vars)
    ON CONFLICT (id) DO NOTHING
    RETURNING r.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('routine %s already exists', quote_literal(v_id));
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.create_routine(text, text, jsonb, text, text, jsonb, text, text, int) IS
    'Creates an active routine (NULL id: generated). A template {"title", "description"} with a non-empty title makes it heavy (fires create tasks), else lightweight (fires wake the assignee); variables declares {name: {"default": value}}. Unknown policy, bad id/template/variables, a name, title or description over 64 KiB, a template or variables over 1 MiB 22023; an explicit id that exists 23505; unknown assignee OFA01, an assignee of another workspace OFW01.';
REVOKE EXECUTE ON FUNCTION office.create_routine(text, text, jsonb, text, text, jsonb, text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.create_routine(text, text, jsonb, text, text, jsonb, text, text, int)
    TO office_producer, office_admin;

CREATE OR REPLACE FUNCTION office.add_routine_trigger(routine_id text, cron_expression text, timezone text DEFAULT 'UTC',
                                           next_run_at timestamptz DEFAULT NULL, id text DEFAULT NULL)
    RETURNS office.routine_triggers
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_id  text := add_routine_trigger.id;
    v_tz  text := coalesce(add_routine_trigger.timezone, 'UTC');
    v_row office.routine_triggers;
BEGIN
    IF v_id IS NULL THEN
        v_id := gen_random_uuid()::text;
    ELSE
        PERFORM office._check_id('routine trigger', v_id);
    END IF;
    PERFORM office._check_short_text('cron_expression', add_routine_trigger.cron_expression);
    PERFORM office._check_cron_expression(add_routine_trigger.cron_expression);
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_timezone_names z WHERE z.name = v_tz) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown time zone %s (expected a name of pg_timezone_names, e.g. ''UTC'' or ''Europe/Paris'')',
                             quote_literal(v_tz));
    END IF;
    PERFORM office._check_timestamp('next_run_at', add_routine_trigger.next_run_at);
    -- Key share on the routine: it cannot vanish before the insert.
    PERFORM FROM office.routines r WHERE r.id = add_routine_trigger.routine_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine %s not found', coalesce(quote_literal(add_routine_trigger.routine_id), 'NULL'));
    END IF;

    INSERT INTO office.routine_triggers AS t (id, routine_id, kind, cron_expression, timezone, next_run_at)
    VALUES (v_id, add_routine_trigger.routine_id, 'cron', btrim(add_routine_trigger.cron_expression), v_tz,
            add_routine_trigger.next_run_at)
    ON CONFLICT (id) DO NOTHING
    RETURNING t.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('routine trigger %s already exists', quote_literal(v_id));
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.add_routine_trigger(text, text, text, timestamptz, text) IS
    'Adds an enabled cron trigger to a routine (NULL id: generated). next_run_at is the first tick to claim; NULL leaves the trigger to be armed by the cron loop (controlplane.routines.fire_due). Invalid cron expression (or one over 200 characters) or time zone, a next_run_at outside 1970-01-01 .. 9999-12-31 22023 naming it; an explicit id that exists 23505; unknown routine OFR01.';
REVOKE EXECUTE ON FUNCTION office.add_routine_trigger(text, text, text, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.add_routine_trigger(text, text, text, timestamptz, text)
    TO office_producer, office_admin;

CREATE OR REPLACE FUNCTION office.claim_routine_tick(trigger_id text, observed_next_run_at timestamptz,
                                          following_next_run_at timestamptz)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM office._check_timestamp('observed_next_run_at', observed_next_run_at);
    PERFORM office._check_timestamp('following_next_run_at', following_next_run_at);
    IF following_next_run_at IS NULL OR following_next_run_at <= observed_next_run_at THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('following_next_run_at %s must be finite and later than observed_next_run_at %s',
                             coalesce(following_next_run_at::text, 'NULL'),
                             coalesce(observed_next_run_at::text, 'NULL'));
    END IF;
    -- The compare-and-swap. Concurrent claimers of one tick queue on the row
    -- lock; once the winner commits, each re-checks the condition on the new
    -- row version, which no longer matches. Observed NULL (a trigger not
    -- armed yet) arms it without firing: last_fired_at is left alone.
    UPDATE office.routine_triggers t
       SET next_run_at = claim_routine_tick.following_next_run_at,
           last_fired_at = CASE WHEN claim_routine_tick.observed_next_run_at IS NULL THEN t.last_fired_at
                                ELSE now() END,
           updated_at = now()
     WHERE t.id = claim_routine_tick.trigger_id
       AND t.enabled
       AND t.next_run_at IS NOT DISTINCT FROM claim_routine_tick.observed_next_run_at;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT FROM office.routine_triggers t WHERE t.id = claim_routine_tick.trigger_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine trigger %s not found',
                             coalesce(quote_literal(claim_routine_tick.trigger_id), 'NULL'));
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION office.claim_routine_tick(text, timestamptz, timestamptz) IS
    'Compare-and-swap on next_run_at: if the enabled trigger''s next_run_at is still observed_next_run_at, advance it to following_next_run_at (stamping last_fired_at) and return true; of N concurrent claimers of one tick exactly one wins. Observed NULL arms an unarmed trigger. A NULL following tick, one not later than the observed one, or a time outside 1970-01-01 .. 9999-12-31 22023; unknown trigger OFR01.';
REVOKE EXECUTE ON FUNCTION office.claim_routine_tick(text, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.claim_routine_tick(text, timestamptz, timestamptz)
    TO office_producer, office_worker, office_admin;

CREATE OR REPLACE FUNCTION office.dispatch_routine(routine_id text, source text, variables jsonb DEFAULT '{}',
                                        trigger_id text DEFAULT NULL, claimed_tick timestamptz DEFAULT NULL,
                                        explicit_key text DEFAULT NULL, missed_ticks int DEFAULT NULL,
                                        missed_since timestamptz DEFAULT NULL,
                                        missed_truncated boolean DEFAULT NULL)
    RETURNS office.dispatch_routine_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_routine_id text := dispatch_routine.routine_id;
    v_source     text := dispatch_routine.source;
    v_given      jsonb := coalesce(dispatch_routine.variables, '{}'::jsonb);
    v_trigger    text := nullif(dispatch_routine.trigger_id, '');
    v_explicit   text := nullif(dispatch_routine.explicit_key, '');
    v_routine    office.routines;
    v_bad        text;
    v_vars       jsonb;
    v_title      text;
    v_desc       text;
    v_assignee   text;
    v_heavy      boolean;
    v_fp         text;
    v_run        text;
    v_gated      text;
    v_task       office.task_result;
    v_key        text;
    v_reason     text;
    v_payload    jsonb;
    v_wake       office.wakeup_result;
    v_dispatch   office.wakeup_dispatch_result;
    v_msg        text;
    v_result     office.dispatch_routine_result;
BEGIN
    -- 1. Validate (nothing is written before this block has passed).
    PERFORM office._check_word('source', v_source, ARRAY['cron', 'manual', 'webhook']);
    IF jsonb_typeof(v_given) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('variables must be a JSON object {name: value}, not %s', jsonb_typeof(v_given));
    END IF;
    PERFORM office._check_document('variables', v_given);
    -- The wakeup key it makes must fit the 512 characters of a key.
    IF length('routine:' || v_routine_id || ':' || v_source || ':' || v_explicit) > 512 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('explicit_key %s... is %s characters: its routine key would be longer than 512',
                             quote_literal(left(v_explicit, 40)), length(v_explicit));
    END IF;
    PERFORM office._check_timestamp('claimed_tick', dispatch_routine.claimed_tick);
    PERFORM office._check_timestamp('missed_since', dispatch_routine.missed_since);
    IF dispatch_routine.missed_ticks IS NOT NULL AND dispatch_routine.missed_ticks < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('missed_ticks must not be negative, not %s', dispatch_routine.missed_ticks);
    END IF;
    SELECT r.* INTO v_routine FROM office.routines r WHERE r.id = v_routine_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine %s not found', coalesce(quote_literal(v_routine_id), 'NULL'));
    END IF;
    IF v_routine.status <> 'active' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('routine %s is %s and does not fire', quote_literal(v_routine_id), v_routine.status);
    END IF;
    IF v_trigger IS NOT NULL AND NOT EXISTS (SELECT FROM office.routine_triggers t
                                              WHERE t.id = v_trigger AND t.routine_id = v_routine_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine trigger %s of routine %s not found', quote_literal(v_trigger),
                             quote_literal(v_routine_id));
    END IF;
    SELECT k INTO v_bad FROM jsonb_object_keys(v_given) AS k
     WHERE NOT v_routine.variables ? k ORDER BY k LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('routine %s does not declare variable %s', quote_literal(v_routine_id),
                             quote_literal(v_bad));
    END IF;

    -- 2. Resolve the variables (declared defaults, then the fire's values; a
    -- JSON null is "no value") and render the template.
    SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}'::jsonb) INTO v_vars
      FROM jsonb_each((SELECT coalesce(jsonb_object_agg(d.key, d.value -> 'default'), '{}'::jsonb)
                         FROM jsonb_each(v_routine.variables) AS d
                        WHERE d.value ? 'default') || v_given) AS e
     WHERE jsonb_typeof(e.value) <> 'null';
    v_title := office._render_template(v_routine.task_template ->> 'title', v_vars, 'title', v_routine_id);
    v_desc := office._render_template(v_routine.task_template ->> 'description', v_vars, 'description',
                                      v_routine_id);
    -- What the fire stores (the variables as the run's trigger_payload and in
    -- the wakeup's payload, the title as the task's) within its bounds.
    PERFORM office._check_document('the resolved variables', v_vars);
    PERFORM office._check_free_text('the rendered title', v_title);
    PERFORM office._check_free_text('the rendered description', v_desc);
    v_assignee := v_routine.assignee_agent_profile_id;
    v_heavy := coalesce(v_routine.task_template ->> 'title', '') <> '';
    v_fp := office.routine_fingerprint(v_title, v_desc, coalesce(v_assignee, ''));

    -- 3. The received run, and last_run_at. The touch skips a routine row that
    -- another fire is touching right now (it writes a time as recent): fires
    -- of one routine never queue on its row.
    INSERT INTO office.routine_runs AS r (routine_id, trigger_id, source, trigger_payload, dispatch_fingerprint,
                                          started_at, catch_up_missed_ticks, catch_up_first_missed_at,
                                          catch_up_truncated)
    VALUES (v_routine_id, coalesce(v_trigger, ''), v_source, v_vars, v_fp, now(),
            dispatch_routine.missed_ticks, dispatch_routine.missed_since, dispatch_routine.missed_truncated)
    RETURNING r.id INTO v_run;
    UPDATE office.routines r
       SET last_run_at = greatest(r.last_run_at, now()), updated_at = now()
     WHERE r.id = (SELECT l.id FROM office.routines l WHERE l.id = v_routine_id
                      FOR NO KEY UPDATE SKIP LOCKED);

    v_result := (v_run, NULL, '', '', NULL, NULL, NULL, NULL, NULL, v_routine.workspace_id);

    -- 4. Heavy: the gate, then the task.
    IF v_heavy THEN
        IF v_routine.concurrency_policy <> 'always_create' THEN
            PERFORM office._xact_lock('office.routines.gate:' || v_routine_id || ':' || v_fp);
            v_gated := office._routine_gate(v_routine_id, v_fp, v_routine.concurrency_policy, v_run);
            IF v_gated IS NOT NULL THEN
                SELECT r.status, r.coalesced_into_run_id INTO v_result.status, v_result.coalesced_into_run_id
                  FROM office.routine_runs r WHERE r.id = v_run;
                RETURN v_result;
            END IF;
        END IF;
        v_task := office.create_task(workspace_id => v_routine.workspace_id, title => v_title,
                                     assignee_agent_profile_id => v_assignee);
        UPDATE office.routine_runs r SET status = 'task_created', linked_task_id = v_task.task_id
         WHERE r.id = v_run;
        v_result.status := 'task_created';
        v_result.linked_task_id := v_task.task_id;
        v_result.run_id := v_task.run_id;
        RETURN v_result;
    END IF;

    -- 5. Lightweight: a wakeup for the assignee (none: nothing to wake, done).
    IF v_assignee IS NULL THEN
        UPDATE office.routine_runs r SET status = 'done', completed_at = now() WHERE r.id = v_run;
        v_result.status := 'done';
        RETURN v_result;
    END IF;
    v_key := office.routine_key(v_source, v_routine_id, v_trigger, dispatch_routine.claimed_tick, v_run,
                                v_explicit);
    v_reason := CASE v_source WHEN 'cron' THEN 'routine_dispatch_cron' ELSE 'routine_dispatch_event' END;
    v_payload := jsonb_build_object('routine_id', v_routine_id, 'routine_run_id', v_run);
    IF v_vars <> '{}'::jsonb THEN
        v_payload := v_payload || jsonb_build_object('variables', v_vars);
    END IF;
    IF dispatch_routine.missed_ticks IS NOT NULL THEN
        v_payload := v_payload || jsonb_build_object('missed_ticks', dispatch_routine.missed_ticks);
    END IF;
    IF dispatch_routine.missed_since IS NOT NULL THEN
        v_payload := v_payload || jsonb_build_object(
            'missed_since', to_char(dispatch_routine.missed_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
    END IF;
    IF dispatch_routine.missed_truncated THEN
        v_payload := v_payload || jsonb_build_object('missed_truncated', true);
    END IF;
    IF v_key IS NULL THEN
        PERFORM office._count_keyless(v_reason, 'unresolved');
    END IF;
    v_result.idempotency_key := v_key;

    BEGIN
        v_wake := office.request_wakeup(agent_profile_id => v_assignee, source => 'routine',
                                        reason => v_reason, payload => v_payload, idempotency_key => v_key);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        RAISE WARNING 'create routine wakeup request: routine %: %', v_routine_id, v_msg;
        v_msg := 'create routine wakeup request: ' || v_msg;
        UPDATE office.routine_runs r SET status = 'failed', completed_at = now(), error_message = v_msg
         WHERE r.id = v_run;
        v_result.status := 'failed';
        v_result.error_message := v_msg;
        RETURN v_result;
    END;
    v_result.wakeup_request_id := v_wake.wakeup_request_id;
    v_result.wakeup_outcome := v_wake.outcome;
    IF v_wake.outcome = 'deduped' THEN
        -- Already requested (a redelivered tick): success by another route.
        UPDATE office.routine_runs r
           SET status = 'done', completed_at = now(), wakeup_request_id = v_wake.wakeup_request_id
         WHERE r.id = v_run;
        v_result.status := 'done';
        SELECT w.run_id INTO v_result.run_id FROM office.wakeup_requests w WHERE w.id = v_wake.wakeup_request_id;
        RETURN v_result;
    END IF;

    BEGIN
        v_dispatch := office.dispatch_wakeup(v_wake.wakeup_request_id);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        RAISE WARNING 'dispatch routine wakeup request: routine %, wakeup %: %',
            v_routine_id, v_wake.wakeup_request_id, v_msg;
        -- No poller retries a direct dispatch: leave no healthy-looking
        -- queued request behind.
        PERFORM office.fail_wakeup(v_wake.wakeup_request_id, 'dispatch failed');
        v_msg := 'dispatch routine wakeup request: ' || v_msg;
        UPDATE office.routine_runs r
           SET status = 'failed', completed_at = now(), error_message = v_msg,
               wakeup_request_id = v_wake.wakeup_request_id
         WHERE r.id = v_run;
        v_result.status := 'failed';
        v_result.error_message := v_msg;
        RETURN v_result;
    END;
    UPDATE office.routine_runs r
       SET status = 'done', completed_at = now(), wakeup_request_id = v_wake.wakeup_request_id
     WHERE r.id = v_run;
    v_result.status := 'done';
    v_result.run_id := v_dispatch.run_id;
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office.dispatch_routine(text, text, jsonb, text, timestamptz, text, int, timestamptz, boolean) IS
    'Fires a routine: a received run with the fingerprint of the rendered template, last_run_at touched, the policy (skip/coalesce gate with self-heal, heavy routines), then a task (task_created) or a wakeup keyed routine_key(...) and its dispatch (done; already requested: done; dispatch failure: the wakeup and the run failed, returned, not raised). Unknown source, undeclared variable, unfilled placeholder, routine not active, variables over 1 MiB, a rendered title or description over 64 KiB, a time outside 1970-01-01 .. 9999-12-31 22023; unknown routine or trigger OFR01.';
REVOKE EXECUTE ON FUNCTION office.dispatch_routine(text, text, jsonb, text, timestamptz, text, int, timestamptz, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.dispatch_routine(text, text, jsonb, text, timestamptz, text, int, timestamptz, boolean)
    TO office_producer, office_worker, office_admin;

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
CREATE OR REPLACE FUNCTION office.due_routine_triggers(at timestamptz DEFAULT now(), max_rows int DEFAULT 100)
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

CREATE OR REPLACE FUNCTION office.fire_routine_tick(trigger_id text, observed_next_run_at timestamptz,
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

-- Views are bound when they are created: they now name pg_catalog for every
-- function and operator, and are created again under the pinned path.

CREATE OR REPLACE VIEW office.dedup_stats AS
SELECT c.queue, c.reason, c.kind, pg_catalog.sum(c.total)::bigint AS total
  FROM office.dedup_counters c
 GROUP BY c.queue, c.reason, c.kind;

CREATE OR REPLACE VIEW office.keyless_stats AS
SELECT c.reason, c.cause, pg_catalog.sum(c.total)::bigint AS total
  FROM office.keyless_counters c
 GROUP BY c.reason, c.cause;

CREATE OR REPLACE VIEW office.queue_stats AS
SELECT s.status,
       pg_catalog.count(DISTINCT r.agent_profile_id)::bigint AS agents,
       pg_catalog.count(r.id)::bigint AS runs,
       pg_catalog.min(r.requested_at) AS oldest_requested_at
  FROM (VALUES (1, 'queued'), (2, 'claimed'), (3, 'finished'), (4, 'failed'), (5, 'cancelled'))
       AS s(ord, status)
  LEFT JOIN office.runs r ON r.status OPERATOR(pg_catalog.=) s.status
 GROUP BY s.ord, s.status
 ORDER BY s.ord;

-- (end of observability)
-- === version ==================================================================

CREATE OR REPLACE FUNCTION office.schema_version() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '0.4.0';
