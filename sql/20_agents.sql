-- office: agent profiles (API.md §2).
--
-- An agent is the thing a run wakes. Its status decides whether it accepts
-- runs: paused, stopped and pending_approval agents do not (OFA02).

CREATE TABLE office.agent_profiles (
    id           text PRIMARY KEY
                 CHECK (length(id) BETWEEN 1 AND 200 AND id !~ '[,:\u0001-\u001f\u007f-\u009f]'),
    workspace_id text NOT NULL
                 CHECK (length(workspace_id) BETWEEN 1 AND 200
                        AND workspace_id !~ '[,:\u0001-\u001f\u007f-\u009f]'),
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
    PERFORM office._check_agent_status(upsert_agent.status);

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
    'Inserts the agent or updates its workspace, name and status; a NULL id generates one. Bad id or status: 22023.';
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
