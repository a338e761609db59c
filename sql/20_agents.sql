-- office: agent profiles (docs/api.md §2).
--
-- An agent is the thing a run wakes. Its status decides whether it accepts
-- runs: paused, stopped and pending_approval agents do not (OFA02).

CREATE TABLE office.agent_profiles (
    id           text PRIMARY KEY
                 CHECK (office._is_id(id)),
    workspace_id text NOT NULL
                 CHECK (office._is_id(workspace_id)),
    name         text NOT NULL DEFAULT '',
    status       text NOT NULL DEFAULT 'idle'
                 CHECK (status IN ('idle', 'running', 'paused', 'stopped', 'pending_approval')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('office.agent_profiles', '');
REVOKE ALL ON TABLE office.agent_profiles FROM PUBLIC;
COMMENT ON TABLE office.agent_profiles IS
    'Agents that runs wake; status paused, stopped or pending_approval refuses new runs (OFA02).';

CREATE INDEX idx_agent_profiles_workspace ON office.agent_profiles (workspace_id);

-- The statuses of an agent that does not accept runs, written once. Callers
-- test status = ANY (...) or <> ALL (...): the function is IMMUTABLE with no
-- argument, so the planner folds the call into the constant array, and the
-- plan is the one an IN list written in place would get.
CREATE FUNCTION office._statuses_refusing_runs() RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN ARRAY['paused', 'stopped', 'pending_approval'];
COMMENT ON FUNCTION office._statuses_refusing_runs() IS
    'Internal: the agent statuses that refuse new runs (paused, stopped, pending_approval; OFA02).';
REVOKE EXECUTE ON FUNCTION office._statuses_refusing_runs() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._statuses_refusing_runs()
    TO office_producer, office_worker, office_reader, office_admin;

-- Internal: 22023 unless status is one of the agent statuses.
CREATE FUNCTION office._check_agent_status(status text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF status IS NULL OR status NOT IN ('idle', 'running', 'paused', 'stopped', 'pending_approval') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown agent status %s (expected idle, running, paused, stopped or pending_approval)',
                             coalesce(quote_literal(status), 'NULL'));
    END IF;
    RETURN status;
END
$$;
COMMENT ON FUNCTION office._check_agent_status(text) IS
    'Internal: returns status when it is an agent status, else raises 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._check_agent_status(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_agent_status(text)
    TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office.upsert_agent(id text, workspace_id text, name text DEFAULT '',
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
        v_id := office._uuid_v7();
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

CREATE FUNCTION office.set_agent_status(id text, status text)
    RETURNS office.agent_profiles
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row office.agent_profiles;
BEGIN
    PERFORM office._check_agent_status(set_agent_status.status);
    UPDATE office.agent_profiles AS a
       SET status = set_agent_status.status, updated_at = now()
     WHERE a.id = set_agent_status.id
    RETURNING a.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01',
            MESSAGE = format('agent %s not found', coalesce(quote_literal(set_agent_status.id), 'NULL'));
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.set_agent_status(text, text) IS
    'Sets the status of an agent (idle, running, paused, stopped, pending_approval); unknown agent OFA01, unknown status 22023.';
REVOKE EXECUTE ON FUNCTION office.set_agent_status(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.set_agent_status(text, text) TO office_producer, office_admin;

-- --- workspaces do not mix (docs/api.md, Conventions) ------------------------------

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
