-- office: wake governance (docs/api.md §9): the record of its decisions.
--
-- Every governance decision that is not a plain enqueue outcome is written
-- to office.wake_decisions, so an operator can see why a wake did not run
-- (guarded: a chain of agent wakes deeper than office.max_chain_depth),
-- ran early (pulled_forward: a human request freed a waiting run) or was
-- warned about (budget_warning, budget_exhausted). Rows are written by
-- office._write_wake_decision in the transaction of the decision, so a
-- decision that rolls back leaves no row; prune_wake_decisions removes old
-- ones. No foreign keys: a decision outlives its run (prune_runs) and its
-- agent, and a guarded request has no run at all.

CREATE TABLE office.wake_decisions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at               timestamptz NOT NULL DEFAULT now(),
    agent_profile_id text NOT NULL,
    run_id           text,
    decision         text NOT NULL
                     CHECK (decision = ANY ('{guarded,pulled_forward,budget_warning,budget_exhausted}'::text[])),
    origin           text NOT NULL CHECK (origin = ANY ('{human,agent,system}'::text[])),
    cause_run_id     text,
    chain_depth      int NOT NULL DEFAULT 0 CHECK (chain_depth >= 0),
    detail           jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(detail) = 'object')
);
SELECT pg_catalog.pg_extension_config_dump('office.wake_decisions', '');
SELECT pg_catalog.pg_extension_config_dump('office.wake_decisions_id_seq', '');
REVOKE ALL ON TABLE office.wake_decisions FROM PUBLIC;
REVOKE ALL ON SEQUENCE office.wake_decisions_id_seq FROM PUBLIC;
GRANT SELECT ON TABLE office.wake_decisions TO office_reader, office_admin;
COMMENT ON TABLE office.wake_decisions IS
    'One row per wake-governance decision (docs/api.md §9): guarded, pulled_forward, budget_warning, budget_exhausted, with the agent, the run (NULL for guarded), the request''s origin, cause and chain depth, and details; prune_wake_decisions deletes old rows.';
-- prune_wake_decisions.
CREATE INDEX idx_wake_decisions_at ON office.wake_decisions (at);
-- What the table owner writes directly meets the bounds of every stored
-- jsonb (05_validation.sql); a detail of at most 512 bytes cannot exceed them.
CREATE TRIGGER wake_decisions_05_bounded
    BEFORE INSERT OR UPDATE OF detail ON office.wake_decisions
    FOR EACH ROW
    WHEN (pg_catalog.pg_column_size(NEW.detail) > 512)
    EXECUTE FUNCTION office._stored_json_bounded('detail');

-- The one writer of decisions, for every producer of one. Its callers have
-- validated what they pass; a NULL origin, depth or detail is the column's
-- neutral value rather than an error, so recording a decision can never be
-- what fails the caller's call.
CREATE FUNCTION office._write_wake_decision(agent_profile_id text, run_id text, decision text, origin text,
                                            cause_run_id text, chain_depth int, detail jsonb)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO office.wake_decisions (agent_profile_id, run_id, decision, origin, cause_run_id, chain_depth, detail)
    VALUES ($1, $2, $3, coalesce($4, 'system'), $5, coalesce($6, 0), coalesce($7, '{}'));
END
$$;
COMMENT ON FUNCTION office._write_wake_decision(text, text, text, text, text, int, jsonb) IS
    'Internal: records one wake-governance decision in office.wake_decisions (origin NULL = system, chain_depth NULL = 0, detail NULL = {}).';
REVOKE EXECUTE ON FUNCTION office._write_wake_decision(text, text, text, text, text, int, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._write_wake_decision(text, text, text, text, text, int, jsonb) TO office_admin;

CREATE FUNCTION office.prune_wake_decisions(older_than interval) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count int;
BEGIN
    PERFORM office._check_interval('older_than', prune_wake_decisions.older_than);
    DELETE FROM office.wake_decisions d WHERE d.at < now() - prune_wake_decisions.older_than;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.prune_wake_decisions(interval) IS
    'Deletes wake decisions made longer ago than older_than; returns the count.';
REVOKE EXECUTE ON FUNCTION office.prune_wake_decisions(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.prune_wake_decisions(interval) TO office_admin;

-- --- lineage: who caused a run, and how deep its chain is -------------------------
--
-- A run's chain_depth counts the agent-caused wakes that lead to it: 0 for a
-- human or system origin (a human action starts a new chain), else 1 + the
-- depth of its cause when the cause is a run of the woken agent's workspace,
-- else 1 (a cause that names no run here: pruned, made up, or on another
-- shard). The loop guard of enqueue_run compares it with
-- office.max_chain_depth.

-- office.max_chain_depth, read with current_setting(name, true) so that
-- ALTER DATABASE ... SET works; unset or '' is the default 20, 0 turns the
-- guard off, and anything but a non-negative integer is 22023 naming the
-- setting. A value beyond int's range is as good as no limit: a depth is an int.
CREATE FUNCTION office._max_chain_depth() RETURNS int
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text := btrim(current_setting('office.max_chain_depth', true));
BEGIN
    IF v_text IS NULL OR v_text = '' THEN
        RETURN 20;
    END IF;
    IF v_text !~ '^[0-9]+$' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting office.max_chain_depth = %s must be an integer >= 0 (0 turns the loop guard off)',
                             quote_literal(left(v_text, 200)));
    END IF;
    RETURN least(v_text::numeric, 2147483647)::int;
END
$$;
COMMENT ON FUNCTION office._max_chain_depth() IS
    'Internal: the setting office.max_chain_depth (unset or empty: 20; 0: no loop guard); a value that is not an integer >= 0 is 22023 naming the setting.';
REVOKE EXECUTE ON FUNCTION office._max_chain_depth() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._max_chain_depth() TO office_admin;

-- The chain depth of a request of origin into workspace_id caused by
-- cause_run_id (NULL: none). strict (an explicit cause of enqueue_run): a
-- cause that is a run of another workspace is OFW01, a reference across
-- workspaces; internal producers pass false and treat it as unknown. The
-- cause is looked up by its primary key, whatever the origin, so that an
-- explicit cause is refused alike for every origin.
CREATE FUNCTION office._chain_depth(workspace_id text, origin text, cause_run_id text, strict boolean)
    RETURNS int
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_depth     int;
    v_workspace text;
BEGIN
    IF $3 IS NULL THEN
        RETURN CASE WHEN $2 = 'agent' THEN 1 ELSE 0 END;
    END IF;
    SELECT r.chain_depth, a.workspace_id INTO v_depth, v_workspace
      FROM office.runs r LEFT JOIN office.agent_profiles a ON a.id = r.agent_profile_id
     WHERE r.id = $3;
    IF $4 AND v_workspace IS DISTINCT FROM $1 AND v_workspace IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OFW01',
            MESSAGE = format('cause_run_id %s is a run of workspace %s, not of workspace %s',
                             quote_literal($3), quote_literal(v_workspace), quote_literal($1));
    END IF;
    IF $2 <> 'agent' THEN
        RETURN 0;
    END IF;
    IF v_workspace = $1 THEN
        RETURN least(v_depth::bigint + 1, 2147483647)::int;
    END IF;
    RETURN 1;
END
$$;
COMMENT ON FUNCTION office._chain_depth(text, text, text, boolean) IS
    'Internal: the chain_depth of a request of origin into workspace_id caused by cause_run_id: 0 for human and system; for agent 1 + the cause''s depth when the cause is a run of that workspace, else 1; strict: a cause of another workspace is OFW01.';
REVOKE EXECUTE ON FUNCTION office._chain_depth(text, text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._chain_depth(text, text, text, boolean) TO office_admin;

-- The origin and cause of an internal producer's wake of an agent, from the
-- actor it knows (docs/api.md §9, "Origin and cause"): the setting
-- office.actor, which create_task, assign_task (for its own update and
-- wake), the triggers and plain writes carry. A user with an id is human; an
-- agent is agent, caused by the run it holds claimed in the woken agent's
-- workspace, else by none (depth 1); a system actor, or none, is system.
CREATE FUNCTION office._actor_lineage(agent_profile_id text, OUT origin text, OUT cause_run_id text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_actor jsonb := office._event_actor();
BEGIN
    origin := 'system';
    IF v_actor ->> 'type' = 'user' AND coalesce(v_actor ->> 'id', '') <> '' THEN
        origin := 'human';
    ELSIF v_actor ->> 'type' = 'agent' THEN
        origin := 'agent';
        SELECT r.id INTO cause_run_id
          FROM office.runs r
          JOIN office.agent_profiles actor ON actor.id = r.agent_profile_id
          JOIN office.agent_profiles woken ON woken.id = _actor_lineage.agent_profile_id
         WHERE r.agent_profile_id = v_actor ->> 'id' AND r.status = 'claimed'
           AND actor.workspace_id = woken.workspace_id
         LIMIT 1;
    END IF;
END
$$;
COMMENT ON FUNCTION office._actor_lineage(text) IS
    'Internal: the origin (human, agent, system) and cause_run_id of an internal producer''s wake of this agent, from the setting office.actor: a user with an id is human; an agent is agent, caused by its claimed run in the woken agent''s workspace (else none); otherwise system.';
REVOKE EXECUTE ON FUNCTION office._actor_lineage(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._actor_lineage(text) TO office_admin;
