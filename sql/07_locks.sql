-- office: the advisory locks the capabilities take, named in one place.
--
-- Every lock is transaction-scoped, on hashtextextended(name, 0) of a name
-- office.<kind>[:<part>...]. office._lock_key builds every name, so two
-- capabilities that serialise on one resource (the edge path of 40_tasks.sql
-- and the sweep of 60_parent_wake.sql, both on a parent) cannot drift apart.
-- The kinds, and who takes them:
--   tasks.children:<parent>                terminal effect 3, reconcile_parent, the sweep
--   tasks.blockers:<task>                  terminal effect 2
--   task_blockers.graph                    every blocker edge insert (the cycle check)
--   wakeups.agent:<agent>                  dispatch of an agent's wakeup requests
--   routines.gate:<routine>:<fingerprint>  dispatch_routine's concurrency gate
--   runs.claim:<agent>                     claim_run, per candidate agent
--   wake_spend.workspace:<workspace>       record_run_cost, where the workspace has a budget
-- The enqueue locks (runs.key:<key>, runs.bucket:<agent>:<reason>:<task>) are
-- office._run_locks' of 30_runs.sql, and the readiness lock (runs.ready:<agent>)
-- is office._ready_agents', office._unready_agents' and claim_run's (for the
-- agent it has just claimed): the hot path hashes them without a further call.

CREATE FUNCTION office._lock_key(kind text, VARIADIC parts text[] DEFAULT '{}') RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF cardinality(parts) IS DISTINCT FROM (CASE kind WHEN 'tasks.children' THEN 1
                                                      WHEN 'tasks.blockers' THEN 1
                                                      WHEN 'task_blockers.graph' THEN 0
                                                      WHEN 'wakeups.agent' THEN 1
                                                      WHEN 'routines.gate' THEN 2
                                                      WHEN 'runs.claim' THEN 1
                                                      WHEN 'wake_spend.workspace' THEN 1 END) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown lock kind %s with %s parts', coalesce(quote_literal(kind), 'NULL'),
                             coalesce(cardinality(parts), 0));
    END IF;
    -- A NULL part names no resource: no lock (as NULL || text would).
    IF array_position(parts, NULL) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    RETURN 'office.' || kind || CASE WHEN cardinality(parts) = 0 THEN '' ELSE ':' || array_to_string(parts, ':') END;
END
$$;
COMMENT ON FUNCTION office._lock_key(text, text[]) IS
    'Internal: the name of an advisory lock, office.<kind>:<parts joined by ":"> (kinds: tasks.children, tasks.blockers, task_blockers.graph, wakeups.agent, routines.gate, runs.claim, wake_spend.workspace; 07_locks.sql lists who takes each); NULL when a part is NULL; an unknown kind or a wrong number of parts is 22023.';
REVOKE EXECUTE ON FUNCTION office._lock_key(text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._lock_key(text, text[]) TO office_admin;

-- Internal: a transaction-scoped advisory lock on a named resource. Under
-- READ COMMITTED the statements after it read what the previous holder
-- committed; a stricter transaction that had to wait cannot (its snapshot is
-- older), so it gets 40001 and retries.
CREATE FUNCTION office._xact_lock(name text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key bigint := hashtextextended(name, 0);
BEGIN
    IF NOT pg_try_advisory_xact_lock(v_key) THEN
        PERFORM pg_advisory_xact_lock(v_key);
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '40001',
                MESSAGE = format('concurrent change of %s: retry the transaction', name);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION office._xact_lock(text) IS
    'Internal: takes the transaction-scoped advisory lock of a named resource (40001 after a wait outside READ COMMITTED).';
REVOKE EXECUTE ON FUNCTION office._xact_lock(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._xact_lock(text) TO office_admin;
