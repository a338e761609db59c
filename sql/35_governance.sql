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
