\echo Use "ALTER EXTENSION office UPDATE TO '0.5.0'" to load this file. \quit
-- office 0.4.0 -> 0.5.0, written by hand: exactly the statements that take a
-- 0.4.0 database to what the capability files install from nothing
-- (tests/install/test_install_paths.py compares the two catalogs). Sections follow the
-- capability files.
--
-- Pin the search_path first, for the reason 00_schema.sql gives.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- === validation (05_validation.sql) =========================================
-- Every stored jsonb nests at most 64 levels deep (since 0.5.0): the
-- functions check their arguments, a trigger on each table what the table
-- owner writes directly.
CREATE FUNCTION office._json_depth_ok(value jsonb) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN NOT jsonb_path_exists(value, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")');
END
$$;
COMMENT ON FUNCTION office._json_depth_ok(jsonb) IS
    'Internal: true when value nests at most 64 containers (objects, arrays) deep; NULL for NULL.';
REVOKE EXECUTE ON FUNCTION office._json_depth_ok(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._json_depth_ok(jsonb)
    TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office._check_json_depth(what text, value jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT office._json_depth_ok(value) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s nests more than 64 levels of objects and arrays', what);
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_json_depth(text, jsonb) IS
    'Internal: returns value when it is NULL or nests at most 64 levels deep, else raises 22023 naming the argument.';
REVOKE EXECUTE ON FUNCTION office._check_json_depth(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_json_depth(text, jsonb)
    TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office._check_stored_json(what text, value jsonb) RETURNS void
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(value::text) > 1052672 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is %s bytes, more than 1 MiB and 4 KiB (1052672 bytes)',
                             what, octet_length(value::text));
    END IF;
    PERFORM office._check_json_depth(what, value);
END
$$;
COMMENT ON FUNCTION office._check_stored_json(text, jsonb) IS
    'Internal: raises 22023 naming what (table.column) when value is more than 1 MiB and 4 KiB as text or nests more than 64 levels deep; NULL passes.';
REVOKE EXECUTE ON FUNCTION office._check_stored_json(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_stored_json(text, jsonb)
    TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office._stored_json_bounded() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_row    jsonb := to_jsonb(NEW);
    v_old    jsonb := CASE WHEN TG_OP = 'UPDATE' THEN to_jsonb(OLD) END;
    v_column text;
    v_value  jsonb;
BEGIN
    FOREACH v_column IN ARRAY TG_ARGV LOOP
        v_value := v_row -> v_column;
        CONTINUE WHEN TG_OP = 'UPDATE' AND v_value IS NOT DISTINCT FROM v_old -> v_column;
        PERFORM office._check_stored_json(format('%s.%s', TG_TABLE_NAME, v_column), v_value);
    END LOOP;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._stored_json_bounded() IS
    'Internal: BEFORE INSERT OR UPDATE trigger: the jsonb columns named by its arguments, where written (inserted or changed), are at most 1 MiB and 4 KiB as text and 64 levels deep, else 22023 naming table.column.';
REVOKE EXECUTE ON FUNCTION office._stored_json_bounded() FROM PUBLIC;

-- === locks (07_locks.sql) ====================================================
-- record_run_cost's lock kind wake_spend.workspace.
CREATE OR REPLACE FUNCTION office._lock_key(kind text, VARIADIC parts text[] DEFAULT '{}') RETURNS text
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

-- === keys (10_keys.sql) =======================================================
-- The coalesce exclusion as one predicate (since 0.5.0), which _run_locks and
-- enqueue_run's coalesce lookups (below) test.
CREATE FUNCTION office._never_coalesces(idempotency_key text, entry_triggered boolean)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN entry_triggered IS TRUE OR pg_catalog.starts_with(idempotency_key, 'task_comment:') IS TRUE;
COMMENT ON FUNCTION office._never_coalesces(text, boolean) IS
    'Internal: true when an enqueue request (or a queued run) with this key and entry_triggered never coalesces: entry-triggered, or a task_comment: key (office.comment_key). Never NULL.';
REVOKE EXECUTE ON FUNCTION office._never_coalesces(text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._never_coalesces(text, boolean)
    TO office_producer, office_worker, office_reader, office_admin;

-- === runs (30_runs.sql) =======================================================
-- Lineage and scheduling columns (docs/api.md §9), appended as in 30_runs.sql;
-- every earlier run is system-caused, at depth 0, priority 0, cost 0 (the
-- defaults, so no row is rewritten).
ALTER TABLE office.runs
    ADD COLUMN origin       text NOT NULL DEFAULT 'system',
    ADD COLUMN cause_run_id text,
    ADD COLUMN chain_depth  int NOT NULL DEFAULT 0,
    ADD COLUMN priority     int NOT NULL DEFAULT 0,
    ADD COLUMN cost         numeric NOT NULL DEFAULT 0;
-- The runs CHECK takes the lineage columns too (30_runs.sql says why one
-- function); the new constraint reads every row once, as adding one does.
CREATE FUNCTION office._run_row_valid(status text, reason text, payload jsonb, idempotency_key text,
                                      origin text, chain_depth int, priority int)
    RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN status IN ('queued', 'claimed', 'finished', 'failed', 'cancelled')
       AND reason <> ''
       AND jsonb_typeof(payload) = 'object'
       AND (idempotency_key IS NULL OR (idempotency_key <> '' AND length(idempotency_key) <= 512))
       AND origin IN ('human', 'agent', 'system')
       AND chain_depth >= 0
       AND priority BETWEEN -100 AND 100;
END
$$;
COMMENT ON FUNCTION office._run_row_valid(text, text, jsonb, text, text, int, int) IS
    'Internal: the CHECK of office.runs: a known status, a non-empty reason, an object payload, an idempotency_key that is NULL or 1 to 512 characters, origin human, agent or system, chain_depth at least 0, priority -100 to 100.';
REVOKE EXECUTE ON FUNCTION office._run_row_valid(text, text, jsonb, text, text, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_row_valid(text, text, jsonb, text, text, int, int) TO office_admin;
ALTER TABLE office.runs
    DROP CONSTRAINT runs_row_check,
    ADD CONSTRAINT runs_row_check CHECK (office._run_row_valid(status, reason, payload, idempotency_key,
                                                               origin, chain_depth, priority));
DROP FUNCTION office._run_row_valid(text, text, jsonb, text);
COMMENT ON COLUMN office.runs.origin IS
    'Who caused the run: human, agent or system (docs/api.md §9; system for runs from before 0.5.0).';
COMMENT ON COLUMN office.runs.cause_run_id IS
    'The run during which the causing actor acted, as the producer named it (NULL: none).';
COMMENT ON COLUMN office.runs.chain_depth IS
    'How many agent-caused runs lead to this one: 0 for human and system, else 1 + the cause''s depth (the loop guard reads it, office.max_chain_depth).';
COMMENT ON COLUMN office.runs.priority IS
    'The run''s priority, -100 to 100 (default 0).';
COMMENT ON COLUMN office.runs.cost IS
    'The cost recorded for the run (record_run_cost).';

-- _run_locks tests the exclusion through office._never_coalesces.
CREATE OR REPLACE FUNCTION office._run_locks(agent_profile_ids text[], reasons text[], idempotency_keys text[],
                                  task_ids text[], entry_triggereds boolean[],
                                  OUT key_locks bigint[], OUT bucket_locks bigint[])
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    key_locks := '{}';
    bucket_locks := '{}';
    FOR i IN 1 .. coalesce(cardinality(agent_profile_ids), 0) LOOP
        key_locks[i] := CASE WHEN idempotency_keys[i] IS NOT NULL
                             THEN hashtextextended('office.runs.key:' || idempotency_keys[i], 0) END;
        bucket_locks[i] := CASE WHEN NOT office._never_coalesces(idempotency_keys[i], entry_triggereds[i])
                                THEN hashtextextended('office.runs.bucket:' || agent_profile_ids[i] || ':'
                                                      || reasons[i] || ':' || coalesce(task_ids[i], ''), 0) END;
    END LOOP;
END
$$;
COMMENT ON FUNCTION office._run_locks(text[], text[], text[], text[], boolean[]) IS
    'Internal: the advisory lock ids of enqueue requests (parallel arrays of agent, reason, key, task, entry_triggered): key_locks, taken by every keyed request before it looks its key up (NULL without a key), and bucket_locks (agent, reason, task; NULL when the request never coalesces: office._never_coalesces).';
REVOKE EXECUTE ON FUNCTION office._run_locks(text[], text[], text[], text[], boolean[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_locks(text[], text[], text[], text[], boolean[]) TO office_admin;

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
-- Both enqueue functions check the depth of what they are given;
-- enqueue_runs takes at most 10,000 elements; rows written directly are
-- checked by a trigger when updated and by the readiness trigger
-- (office._ready_agents, below) when inserted.
CREATE TRIGGER runs_05_bounded
    BEFORE UPDATE OF payload, context_snapshot ON office.runs
    FOR EACH ROW
    WHEN (pg_catalog.pg_column_size(NEW.payload) > 512 OR pg_catalog.pg_column_size(NEW.context_snapshot) > 512)
    EXECUTE FUNCTION office._stored_json_bounded('payload', 'context_snapshot');
-- The readiness trigger bounds an inserted run's documents (30_runs.sql).
CREATE OR REPLACE FUNCTION office._ready_agents() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
    SET enable_bitmapscan = off
AS $$
DECLARE
    v_agents text[];
    v_agent  text;
    v_head   timestamptz;
    v_listed timestamptz;
    v_look   boolean;
BEGIN
    IF TG_TABLE_NAME = 'agent_profiles' THEN
        -- (the WHEN clause: it accepts runs, and did not or had another id)
        v_agents := ARRAY[NEW.id];
    ELSIF TG_OP = 'INSERT' THEN
        -- Any run inserted: its documents' bounds (runs_05_bounded says why
        -- here). A value of at most 512 bytes cannot fail them; NEW is the
        -- stored row, whose values may be compressed, so those are checked
        -- whatever their stored size.
        IF pg_column_size(NEW.payload) > 512 OR pg_column_compression(NEW.payload) IS NOT NULL
           OR pg_column_size(NEW.context_snapshot) > 512 OR pg_column_compression(NEW.context_snapshot) IS NOT NULL THEN
            PERFORM office._check_stored_json('runs.payload', NEW.payload),
                    office._check_stored_json('runs.context_snapshot', NEW.context_snapshot);
        END IF;
        -- A run inserted queued (runs_30_ready_insert has no WHEN clause).
        -- Its own requested_at is the head: no lookup on the enqueue path.
        IF NEW.status <> 'queued' THEN
            RETURN NULL;
        END IF;
        v_agents := ARRAY[NEW.agent_profile_id];
        v_head := NEW.requested_at;
    ELSE
        -- A run that became queued again, a claim that ended: the agent's
        -- oldest queued run is the head, looked up below. (Any other
        -- update, a claim among them, readies no agent: runs_30_ready_update
        -- has no WHEN clause.)
        v_agents := '{}';
        IF TG_OP = 'UPDATE' AND NEW.status = 'queued'
           AND (OLD.status <> 'queued' OR OLD.agent_profile_id <> NEW.agent_profile_id
                OR NEW.requested_at < OLD.requested_at
                OR NEW.scheduled_retry_at IS DISTINCT FROM OLD.scheduled_retry_at) THEN
            v_agents := ARRAY[NEW.agent_profile_id];
        END IF;
        IF OLD.status = 'claimed'
           AND (TG_OP = 'DELETE' OR NEW.status <> 'claimed' OR OLD.agent_profile_id <> NEW.agent_profile_id)
           AND OLD.agent_profile_id <> ALL (v_agents) THEN
            v_agents := v_agents || OLD.agent_profile_id;
        END IF;
    END IF;
    FOREACH v_agent IN ARRAY v_agents LOOP
        v_look := current_setting('transaction_isolation') = 'read committed'
                  AND pg_try_advisory_xact_lock_shared(hashtextextended('office.runs.ready:' || v_agent, 0));
        IF TG_TABLE_NAME = 'agent_profiles' OR TG_OP <> 'INSERT' THEN
            -- After the lock, in a statement of its own.
            SELECT q.requested_at INTO v_head
              FROM office.runs q
             WHERE q.agent_profile_id = v_agent AND q.status = 'queued'
             ORDER BY q.requested_at, q.id COLLATE "C"
             LIMIT 1;
            CONTINUE WHEN v_look AND v_head IS NULL;
        END IF;
        -- The look is a plain SELECT (an INSERT ... WHERE NOT EXISTS that
        -- inserts nothing costs several times as much) over the agent's
        -- rows, a few. "Due" is an aggregate's FILTER, not a WHERE clause:
        -- a WHERE due_at IS NULL would let idx_agent_ready_head (partial on
        -- it, in head_at order) serve the query, and against small
        -- statistics the planner took it, reading every listed agent's
        -- entry (sql/30_runs.sql, "Plans").
        IF v_look THEN
            SELECT min(r.head_at) FILTER (WHERE r.due_at IS NULL) INTO v_listed
              FROM office.agent_ready r
             WHERE r.agent_profile_id = v_agent;
            CONTINUE WHEN v_listed <= v_head;
        END IF;
        INSERT INTO office.agent_ready (agent_profile_id, head_at) VALUES (v_agent, coalesce(v_head, now()));
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._ready_agents() IS
    'Trigger: bounds the payload and context_snapshot of a run inserted (1 MiB and 4 KiB as text, 64 levels deep, else 22023 naming runs.column); lists in office.agent_ready the agent of a run inserted queued, of a run queued again or of a claim that ended (when it has queued runs), and an agent that starts accepting runs (when it has queued runs); under its readiness lock, shared, never waiting.';

-- Internal: a key has two homes, two unique indexes: runs.idempotency_key
-- (a run's own key) and run_keys_recorded (a key a coalesce recorded), and
-- an enqueue writes one of them. Under READ COMMITTED the key lock and the
-- statement snapshot taken after it see whatever the other home holds. The
-- snapshot of a REPEATABLE READ or SERIALIZABLE transaction is older: a
-- holder that committed after it began is invisible to the lookup, and a
-- write to the other home meets no conflict, so the key would be served
-- twice. This checks the write against the other home with INSERT ... ON
-- CONFLICT DO NOTHING, which raises 40001 when the row it conflicts with is
-- one the snapshot cannot see, and undoes the probe when there is none. A
-- key recorded on run_id (recorded): the record is written that way, and a
-- probe run with the key is inserted in a subtransaction rolled back on
-- purpose (OFZ99 never leaves this function). A run's own key: the key is
-- recorded on its run and the record deleted. A visible conflict (a writer
-- that bypassed enqueue_run) is 40001 too: retried, the request is deduped.
CREATE FUNCTION office._serve_key_in_snapshot(idempotency_key text, run_id text, agent_profile_id text,
                                              reason text, recorded boolean) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_written boolean;
BEGIN
    INSERT INTO office.run_keys_recorded (idempotency_key, run_id) VALUES ($1, $2)
    ON CONFLICT (idempotency_key) DO NOTHING;
    v_written := FOUND;
    IF v_written AND recorded THEN
        BEGIN
            INSERT INTO office.runs (agent_profile_id, reason, idempotency_key) VALUES ($3, $4, $1)
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
            v_written := FOUND;
            RAISE EXCEPTION USING ERRCODE = 'OFZ99';
        EXCEPTION WHEN SQLSTATE 'OFZ99' THEN
            NULL;
        END;
    ELSIF v_written THEN
        DELETE FROM office.run_keys_recorded k WHERE k.idempotency_key = $1 AND k.run_id = $2;
    END IF;
    IF NOT v_written THEN
        RAISE EXCEPTION USING ERRCODE = '40001',
            MESSAGE = format('idempotency_key %s was served by a concurrent transaction: retry the transaction',
                             quote_literal($1));
    END IF;
END
$$;
COMMENT ON FUNCTION office._serve_key_in_snapshot(text, text, text, text, boolean) IS
    'Internal (outside READ COMMITTED): checks a key enqueue_run serves on run_id against the index it does not write (recorded: the key is recorded on run_id, and no run may hold it; else run_id holds it and no record may): a holder the snapshot cannot see, or any other holder, is 40001 (retry).';
REVOKE EXECUTE ON FUNCTION office._serve_key_in_snapshot(text, text, text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._serve_key_in_snapshot(text, text, text, text, boolean) TO office_admin;

-- enqueue_run takes four more parameters (origin, cause_run_id, priority,
-- not_before): a new signature, so the 8-argument function goes, and with it
-- the PL/pgSQL body 95_native.sql kept for its C definition (the native block
-- at the end binds both again with 12 arguments).
DROP FUNCTION IF EXISTS office._enqueue_run_plpgsql(text, text, jsonb, text, text, boolean, text, text);
DROP FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text);
CREATE FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb DEFAULT '{}',
                                   idempotency_key text DEFAULT NULL, task_id text DEFAULT NULL,
                                   entry_triggered boolean DEFAULT false,
                                   keyless_cause text DEFAULT NULL, keyless_detail text DEFAULT NULL,
                                   origin text DEFAULT NULL, cause_run_id text DEFAULT NULL,
                                   priority int DEFAULT 0, not_before timestamptz DEFAULT NULL)
    RETURNS office.enqueue_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    -- The arguments by position, not as enqueue_run.agent_profile_id: where
    -- the library is installed, sql/95_native.sql keeps this body under
    -- another name (office._enqueue_run_plpgsql).
    v_agent   text := $1;
    v_reason  text := $2;
    v_payload jsonb := $3;
    v_key     text := nullif($4, '');
    v_task    text := nullif($5, '');
    v_entry   boolean := coalesce($6, false);
    v_cause   text := nullif($7, '');
    v_origin  text := $9;
    v_cause_run text := nullif($10, '');
    v_priority  int := coalesce($11, 0);
    v_due     timestamptz := $12;
    v_depth   int;
    v_max_depth int;
    v_workspace text;
    v_status  text;
    v_window  interval;
    v_locks   record;
    v_key_lock    bigint;
    v_bucket_lock bigint;
    v_locked  boolean;
    v_id      text;
    v_at      timestamptz;
    v_hold    text;
    v_newest  text;
    v_target  record;
    v_result  office.enqueue_result;
BEGIN
    -- 1. Validate. Nothing is written before this block has passed.
    IF v_agent IS NULL OR v_agent = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'agent_profile_id must not be empty';
    END IF;
    IF v_reason IS NULL OR v_reason = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('reason must not be empty (agent %s)', quote_literal(v_agent));
    END IF;
    -- Assignments, not PERFORM: an expression is evaluated without starting
    -- a statement (1 % of a fresh enqueue's instructions for the two).
    v_reason := office._check_short_text('reason', v_reason);
    v_task := office._check_short_text('task_id', v_task);
    IF v_payload IS NULL OR jsonb_typeof(v_payload) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('payload must be a JSON object, not %s', coalesce(jsonb_typeof(v_payload), 'NULL'));
    END IF;
    IF octet_length(v_payload::text) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('payload is %s bytes, more than 1 MiB (1048576 bytes)', octet_length(v_payload::text));
    END IF;
    v_payload := office._check_json_depth('payload', v_payload);
    IF length(v_key) > 512 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('idempotency_key %s... is %s characters, more than 512',
                             quote_literal(left(v_key, 40)), length(v_key));
    END IF;
    IF v_cause IS NOT NULL THEN
        IF v_cause NOT IN ('unresolved', 'by_design') THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('unknown keyless_cause %s (expected unresolved or by_design)', quote_literal(v_cause));
        END IF;
        IF v_key IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('keyless_cause %s given together with idempotency_key %s',
                                 quote_literal(v_cause), quote_literal(v_key));
        END IF;
    END IF;
    -- Lineage and scheduling (docs/api.md §9): origin NULL is agent when a
    -- cause is named, else system.
    v_cause_run := office._check_short_text('cause_run_id', v_cause_run);
    IF v_origin IS NULL THEN
        v_origin := CASE WHEN v_cause_run IS NOT NULL THEN 'agent' ELSE 'system' END;
    ELSIF v_origin NOT IN ('human', 'agent', 'system') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown origin %s (expected human, agent or system)', quote_literal(left(v_origin, 200)));
    END IF;
    IF v_priority < -100 OR v_priority > 100 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('priority %s is outside -100 to 100', v_priority);
    END IF;
    -- A time in the past means now.
    v_due := greatest(office._check_timestamp('not_before', v_due), now());
    SELECT a.status, a.workspace_id INTO v_status, v_workspace FROM office.agent_profiles a WHERE a.id = v_agent;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01', MESSAGE = format('agent %s not found', quote_literal(v_agent));
    END IF;
    IF v_status = ANY (office._statuses_refusing_runs()) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA02',
            MESSAGE = format('agent %s is %s and does not accept runs', quote_literal(v_agent), v_status);
    END IF;
    v_depth := office._chain_depth(v_workspace, v_origin, v_cause_run, true);
    -- The guard's setting is read on every call of origin agent, so a bad
    -- value fails the first such call, not the first deep one.
    IF v_origin = 'agent' THEN
        v_max_depth := office._max_chain_depth();
    END IF;

    -- A keyless call reported with a cause is counted whatever its outcome.
    IF v_cause IS NOT NULL THEN
        PERFORM office._count_keyless(v_reason, v_cause);
    END IF;

    v_payload := v_payload || jsonb_build_object('agent_profile_id', v_agent);
    IF v_task IS NOT NULL THEN
        v_payload := v_payload || jsonb_build_object('task_id', v_task);
    END IF;
    v_locks := office._run_locks(ARRAY[v_agent], ARRAY[v_reason], ARRAY[v_key], ARRAY[v_task], ARRAY[v_entry]);
    v_key_lock := v_locks.key_locks[1];
    v_bucket_lock := v_locks.bucket_locks[1];

    -- 2. A served key (own or recorded, any status, any age) is a dedup,
    -- before any coalescing. The key lock makes lookup-then-act atomic per
    -- key: a request that waited reads what the holder committed. A key
    -- another transaction holds is looked up once before waiting: one a
    -- committed run serves is answered at once, so an open transaction
    -- holding the key cannot stall its redeliveries. The window is read on
    -- every keyed call, so a bad setting fails the first one, not the first
    -- duplicate. (The lock is tried first: _run_lock, a function call, only
    -- when another transaction holds it.)
    IF v_key IS NOT NULL THEN
        v_window := office._window('office.idempotency_window', interval '24 hours');
        v_locked := pg_try_advisory_xact_lock(v_key_lock);
        LOOP
            SELECT r.id, r.requested_at INTO v_id, v_at FROM office.runs r WHERE r.idempotency_key = v_key;
            IF v_id IS NULL THEN
                SELECT k.run_id, k.recorded_at INTO v_id, v_at
                  FROM office.run_keys_recorded k WHERE k.idempotency_key = v_key;
            END IF;
            IF v_id IS NOT NULL THEN
                v_result := ('deduped', CASE WHEN v_at > now() - v_window THEN 'windowed' ELSE 'durable' END, v_id);
                PERFORM office._count_dedup('runs', v_reason, v_result.dedup_kind);
                RETURN v_result;
            END IF;
            EXIT WHEN v_locked;
            PERFORM office._run_lock(v_key_lock, v_agent, v_reason, v_key);
            v_locked := true;
        END LOOP;
    END IF;

    -- 2a. The loop guard: an agent-caused request deeper than
    -- office.max_chain_depth is not enqueued. It records no key (so a
    -- redelivery is judged again, by the chain as it is then), and is
    -- counted and written down instead.
    IF v_max_depth > 0 AND v_depth > v_max_depth THEN
        PERFORM office._count_dedup('runs', v_reason, 'guarded');
        PERFORM office._write_wake_decision(v_agent, NULL, 'guarded', v_origin, v_cause_run, v_depth,
                                            jsonb_build_object('reason', v_reason, 'task_id', v_task,
                                                               'idempotency_key', v_key,
                                                               'max_chain_depth', v_max_depth));
        v_result := ('guarded', NULL, NULL);
        RETURN v_result;
    END IF;

    -- 3. Coalesce, unless the request is entry-triggered or comment-keyed.
    IF v_bucket_lock IS NOT NULL THEN
        -- One coalescible enqueue per bucket at a time: the lookup below and
        -- the insert of step 4 are a check-then-act.
        IF NOT pg_try_advisory_xact_lock(v_bucket_lock) THEN
            PERFORM office._run_lock(v_bucket_lock, v_agent, v_reason, NULL);
        END IF;
        v_window := office._window('office.coalesce_window', interval '5 seconds');
        -- What holds the agent's runs now (34_wake_holds.sql): a target it
        -- holds is waiting, a target whatever its age (docs/api.md §9).
        IF EXISTS (SELECT FROM office.wake_policies p
                    WHERE p.budget IS NOT NULL OR p.cooldown IS NOT NULL OR p.max_runs IS NOT NULL) THEN
            SELECT g.held_by INTO v_hold FROM office._agent_hold(v_agent, v_workspace, false) g;
        END IF;
        -- The target is the bucket's newest queued run that may absorb (not
        -- entry-triggered, not comment-keyed), read without a lock; it
        -- absorbs the request if it was requested within the window or is
        -- waiting (its scheduled_retry_at ahead, or a hold for its origin).
        -- Only an eligible target is locked, and one being claimed right now
        -- is skipped (SKIP LOCKED): claimers never wait for us.
        IF v_task IS NULL THEN
            SELECT n.id INTO v_newest
              FROM office.runs n
             WHERE n.agent_profile_id = v_agent AND n.reason = v_reason AND n.task_id IS NULL
               AND n.status COLLATE "C" = 'queued'
               AND NOT office._never_coalesces(n.idempotency_key, n.entry_triggered)
             ORDER BY n.requested_at DESC, n.id COLLATE "C" DESC
             LIMIT 1;
        ELSE
            -- Only idx_run_task_reason serves it: status compared under "C"
            -- (sql/30_runs.sql, "Plans").
            SELECT n.id INTO v_newest
              FROM office.runs n
             WHERE n.agent_profile_id = v_agent AND n.reason = v_reason AND n.task_id = v_task
               AND n.status COLLATE "C" = 'queued'
               AND NOT office._never_coalesces(n.idempotency_key, n.entry_triggered)
             ORDER BY n.requested_at DESC, n.id COLLATE "C" DESC
             LIMIT 1;
        END IF;
        IF v_newest IS NOT NULL THEN
            -- By its primary key only: status compared under "C".
            SELECT t.id,
                   t.scheduled_retry_at > now()
                   OR (v_hold IS NOT NULL AND v_hold <> 'budget' AND t.origin <> 'human') AS waiting
              INTO v_target
              FROM office.runs t
             WHERE t.id = v_newest AND t.status COLLATE "C" = 'queued'
               AND (t.requested_at > now() - v_window OR t.scheduled_retry_at > now()
                    OR (v_hold IS NOT NULL AND (v_hold = 'budget' OR t.origin <> 'human')))
               FOR UPDATE SKIP LOCKED;
            IF FOUND THEN
                -- The merge (docs/api.md §9): the higher priority; an agent
                -- request's deeper chain (a system target becomes agent); a
                -- human request makes the target human and, if it was
                -- waiting, due now (a budget still holds it).
                UPDATE office.runs r
                   SET coalesced_count = r.coalesced_count + 1, payload = v_payload,
                       priority = greatest(r.priority, v_priority),
                       origin = CASE WHEN v_origin = 'human' THEN 'human'
                                     WHEN v_origin = 'agent' AND r.origin = 'system' THEN 'agent'
                                     ELSE r.origin END,
                       chain_depth = CASE WHEN v_origin = 'human' THEN 0
                                          WHEN v_origin = 'agent' THEN greatest(r.chain_depth, v_depth)
                                          ELSE r.chain_depth END,
                       cause_run_id = CASE WHEN v_origin = 'human' THEN NULL
                                           WHEN v_origin = 'agent' AND v_depth > r.chain_depth THEN v_cause_run
                                           ELSE r.cause_run_id END,
                       scheduled_retry_at = CASE WHEN v_origin = 'human' AND v_target.waiting THEN now()
                                                 ELSE r.scheduled_retry_at END
                 WHERE r.id = v_target.id;
                v_id := v_target.id;
                IF v_origin = 'human' AND v_target.waiting THEN
                    PERFORM office._write_wake_decision(v_agent, v_id, 'pulled_forward', 'human', NULL, 0,
                                                        jsonb_build_object('reason', v_reason));
                END IF;
            END IF;
        END IF;
        IF v_id IS NOT NULL THEN
            -- The target serves the incoming key from now on.
            IF v_key IS NOT NULL THEN
                IF current_setting('transaction_isolation') = 'read committed' THEN
                    INSERT INTO office.run_keys_recorded (idempotency_key, run_id) VALUES (v_key, v_id);
                ELSE
                    PERFORM office._serve_key_in_snapshot(v_key, v_id, v_agent, v_reason, true);
                END IF;
            END IF;
            PERFORM office._count_dedup('runs', v_reason, 'coalesced');
            v_result := ('coalesced', NULL, v_id);
            RETURN v_result;
        END IF;
    END IF;

    -- 4. Insert. The key lock already keeps a second inserter of the key
    -- out; the unique index stays the backstop against writers that bypass
    -- this function: ON CONFLICT waits for an in-flight inserter, then DO
    -- NOTHING, and the next statement (a fresh snapshot) finds the holder. If
    -- the holder vanished meanwhile (rolled back, pruned), try again.
    LOOP
        INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id, entry_triggered,
                                 origin, cause_run_id, chain_depth, priority, scheduled_retry_at)
        VALUES (v_agent, v_reason, v_payload, v_key, v_task, v_entry,
                v_origin, v_cause_run, v_depth, v_priority, CASE WHEN v_due > now() THEN v_due END)
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            IF v_key IS NOT NULL AND current_setting('transaction_isolation') <> 'read committed' THEN
                PERFORM office._serve_key_in_snapshot(v_key, v_id, v_agent, v_reason, false);
            END IF;
            -- A run that is not claimable yet wakes no worker (its agent's
            -- readiness row says when it is due).
            IF v_due <= now() THEN
                PERFORM office._signal_runs(ARRAY[v_agent], ARRAY[v_id]);
            END IF;
            v_result := ('queued', NULL, v_id);
            RETURN v_result;
        END IF;
        SELECT r.id INTO v_id FROM office.runs r WHERE r.idempotency_key = v_key;
        IF FOUND THEN
            PERFORM office._count_dedup('runs', v_reason, 'durable');
            v_result := ('deduped', 'durable', v_id);
            RETURN v_result;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz) IS
    'Enqueues a run: a key already served (own or recorded by a coalesce) -> deduped windowed|durable; else coalesce (the key is recorded on the target); else insert. An agent-caused request deeper than office.max_chain_depth -> guarded (no key recorded, no run; counted and written to wake_decisions). Returns (outcome queued|deduped|coalesced|guarded, dedup_kind windowed|durable, run_id); on queued the wake-up signal of office.notify (NOTIFY office_runs, the agent id) unless not_before delays the run. Bad input 22023, unknown agent OFA01, agent not accepting runs OFA02, a cause_run_id of another workspace OFW01.';
REVOKE EXECUTE ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz)
    TO office_producer, office_admin;

CREATE OR REPLACE FUNCTION office.enqueue_runs(requests jsonb)
    RETURNS TABLE (ordinality int, outcome text, dedup_kind text, run_id text)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_elem    jsonb;
    v_ord     int := 0;
    v_bad     text;
    v_res     office.enqueue_result;
    v_state   text;
    v_msg     text;
    v_detail  text;
    v_hint    text;
    v_lock    record;
    v_done    bigint := 0;
    v_valid   boolean;
    v_fast    boolean;
    v_keyed   boolean;
    v_window  interval;
    v_agents  text[];
    v_reasons text[];
    v_payloads jsonb[];
    v_keys    text[];
    v_tasks   text[];
    v_entries boolean[];
    v_causes  text[];
    v_key_locks    bigint[];
    v_bucket_locks bigint[];
    v_new     text[];
    v_not_before timestamptz;
BEGIN
    IF requests IS NULL OR jsonb_typeof(requests) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('enqueue_runs: requests must be a JSON array, not %s',
                             coalesce(jsonb_typeof(requests), 'NULL'));
    END IF;
    IF jsonb_array_length(requests) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('enqueue_runs: %s requests, more than 10,000 in one call', jsonb_array_length(requests));
    END IF;
    -- The elements, normalised as enqueue_run normalises its arguments, and
    -- whether every one of them passes enqueue_run's checks (valid is never
    -- true for an element that enqueue_run or the loop below would refuse;
    -- the loop reports the refusal).
    SELECT coalesce(bool_and(x.valid), true),
           array_agg(x.agent ORDER BY x.n), array_agg(x.reason ORDER BY x.n),
           array_agg(CASE WHEN x.valid THEN x.payload || jsonb_build_object('agent_profile_id', x.agent)
                                        || CASE WHEN x.task IS NOT NULL
                                                THEN jsonb_build_object('task_id', x.task)
                                                ELSE '{}'::jsonb END END ORDER BY x.n),
           array_agg(x.key ORDER BY x.n), array_agg(x.task ORDER BY x.n),
           array_agg(x.entry ORDER BY x.n), array_agg(x.cause ORDER BY x.n)
      INTO v_valid, v_agents, v_reasons, v_payloads, v_keys, v_tasks, v_entries, v_causes
      FROM (SELECT y.*,
                   CASE WHEN y.is_object THEN
                       -- no unknown key; strings where enqueue_run takes text
                       y.value - ARRAY['agent_profile_id', 'reason', 'payload', 'idempotency_key', 'task_id',
                                       'entry_triggered', 'keyless_cause', 'keyless_detail'] = '{}'::jsonb
                       -- an element naming an origin, cause, priority or not_before
                       -- (docs/api.md §9) goes through enqueue_run one by one
                       AND NOT (y.value ?| ARRAY['origin', 'cause_run_id', 'priority', 'not_before'])
                       AND coalesce(jsonb_typeof(y.value -> 'agent_profile_id') = 'string', false)
                       AND coalesce(jsonb_typeof(y.value -> 'reason') = 'string', false)
                       AND coalesce(jsonb_typeof(y.value -> 'idempotency_key') IN ('string', 'null'), true)
                       AND coalesce(jsonb_typeof(y.value -> 'task_id') IN ('string', 'null'), true)
                       AND coalesce(jsonb_typeof(y.value -> 'keyless_cause') IN ('string', 'null'), true)
                       AND coalesce(jsonb_typeof(y.value -> 'keyless_detail') IN ('string', 'null'), true)
                       AND coalesce(jsonb_typeof(y.value -> 'entry_triggered') IN ('boolean', 'null'), true)
                       AND y.agent <> '' AND y.reason <> ''
                       AND length(y.reason) <= 200 AND y.reason !~ '[\u0001-\u001f\u007f-\u009f]'
                       AND coalesce(length(y.task) <= 200 AND y.task !~ '[\u0001-\u001f\u007f-\u009f]', true)
                       AND jsonb_typeof(y.payload) = 'object' AND octet_length(y.payload::text) <= 1048576
                       AND office._json_depth_ok(y.payload)
                       AND coalesce(length(y.key) <= 512, true)
                       AND (y.cause IS NULL OR (y.cause IN ('unresolved', 'by_design') AND y.key IS NULL))
                       -- A LIMIT 1 probe, not EXISTS: PostgreSQL 18 plans that EXISTS
                       -- as a hashed subplan over every agent (a scan of the table).
                       AND coalesce((SELECT true FROM office.agent_profiles a
                                      WHERE a.id = y.agent AND a.status <> ALL (office._statuses_refusing_runs())
                                      LIMIT 1), false)
                   END IS TRUE AS valid
              FROM (SELECT e.n, e.value, jsonb_typeof(e.value) = 'object' AS is_object,
                           e.value ->> 'agent_profile_id' AS agent, e.value ->> 'reason' AS reason,
                           CASE WHEN e.value ? 'payload' THEN e.value -> 'payload' ELSE '{}'::jsonb END AS payload,
                           nullif(e.value ->> 'idempotency_key', '') AS key,
                           nullif(e.value ->> 'task_id', '') AS task,
                           CASE WHEN jsonb_typeof(e.value -> 'entry_triggered') = 'boolean'
                                THEN (e.value ->> 'entry_triggered')::boolean ELSE false END AS entry,
                           nullif(e.value ->> 'keyless_cause', '') AS cause
                      FROM jsonb_array_elements(requests) WITH ORDINALITY AS e(value, n)) AS y
            OFFSET 0) AS x;
    -- (A non-object element has no agent and no key: no lock.)
    SELECT l.key_locks, l.bucket_locks INTO v_key_locks, v_bucket_locks
      FROM office._run_locks(v_agents, v_reasons, v_keys, v_tasks, v_entries) AS l;

    -- Every lock the elements will take, up front and in the global order
    -- (all key locks, then all bucket locks, each by ascending id), so two
    -- bulk calls never hold one lock each while waiting for the other's:
    -- the elements' own enqueue_run then finds its locks held. The locks are
    -- tried in that order and the walk stops at the first one held by
    -- another transaction (LIMIT 1 over the sorted list: none after it is
    -- tried), which is then waited for before the walk goes on after it.
    LOOP
        SELECT l.n, l.id, l.agent, l.reason, l.key INTO v_lock
          FROM (SELECT row_number() OVER (ORDER BY k.cls, k.id) AS n, k.id, k.agent, k.reason, k.key
                  FROM (SELECT DISTINCT ON (k.cls, k.id) k.cls, k.id, k.agent, k.reason, k.key
                          FROM unnest(v_key_locks, v_bucket_locks, v_agents, v_reasons, v_keys)
                                 AS u(key_lock, bucket_lock, agent, reason, key)
                         CROSS JOIN LATERAL (VALUES (0, u.key_lock, u.agent, u.reason, u.key),
                                                    (1, u.bucket_lock, u.agent, u.reason, NULL))
                                 AS k(cls, id, agent, reason, key)
                         WHERE k.id IS NOT NULL
                         ORDER BY k.cls, k.id) AS k
                 ORDER BY k.cls, k.id
                OFFSET 0) AS l
         WHERE l.n > v_done AND NOT pg_try_advisory_xact_lock(l.id)
         LIMIT 1;
        EXIT WHEN NOT FOUND;
        PERFORM office._run_lock(v_lock.id, v_lock.agent, v_lock.reason, v_lock.key);
        v_done := v_lock.n;
    END LOOP;

    -- The set-based path, if it gives what the elements one by one would.
    -- Keyed elements outside READ COMMITTED go one by one: enqueue_run
    -- checks each key against what the snapshot cannot see
    -- (_serve_key_in_snapshot), which the set-based insert does not.
    v_keyed := EXISTS (SELECT FROM unnest(v_keys) AS k WHERE k IS NOT NULL);
    v_fast := v_valid AND coalesce(current_setting('office.notify', true), '') IN ('', 'edge', 'every', 'on', 'off')
              AND (current_setting('transaction_isolation') = 'read committed' OR NOT v_keyed);
    IF v_fast AND v_keyed THEN
        BEGIN
            v_window := office._window('office.idempotency_window', interval '24 hours');
        EXCEPTION WHEN OTHERS THEN
            v_fast := false;  -- the first keyed element reports it below
        END;
    END IF;
    IF v_fast AND EXISTS (SELECT FROM unnest(v_bucket_locks) AS b WHERE b IS NOT NULL) THEN
        BEGIN
            v_window := office._window('office.coalesce_window', interval '5 seconds');
        EXCEPTION WHEN OTHERS THEN
            v_fast := false;  -- the first coalescible element reports it below
        END;
    END IF;
    IF v_fast THEN
        SELECT NOT EXISTS (SELECT FROM unnest(v_keys) AS k WHERE k IS NOT NULL
                            GROUP BY k HAVING count(*) > 1)
           AND NOT EXISTS (SELECT FROM unnest(v_bucket_locks) AS b WHERE b IS NOT NULL
                            GROUP BY b HAVING count(*) > 1)
           -- A key held as a run's own key is met by the insert below.
           AND NOT EXISTS (SELECT FROM unnest(v_keys) AS k
                            WHERE EXISTS (SELECT FROM office.run_keys_recorded c WHERE c.idempotency_key = k))
           -- A queued run in a coalescible element's bucket, younger than the
           -- window (whether or not it could be a target): leave it to enqueue_run.
           -- Lateral probes (LIMIT 1 each), not EXISTS: PostgreSQL 18 made
           -- these EXISTS hashed subplans that read every queued run.
           AND NOT EXISTS (SELECT FROM unnest(v_agents, v_reasons, v_tasks, v_bucket_locks) AS u(agent, reason, task, lock)
                             LEFT JOIN LATERAL (SELECT true AS queued FROM office.runs t
                                                 WHERE u.task IS NULL
                                                   AND t.agent_profile_id = u.agent AND t.reason = u.reason
                                                   AND t.task_id IS NULL AND t.status COLLATE "C" = 'queued'
                                                   AND t.requested_at > now() - v_window
                                                 LIMIT 1) AS b ON true
                             LEFT JOIN LATERAL (SELECT true AS queued FROM office.runs t
                                                 WHERE t.agent_profile_id = u.agent AND t.reason = u.reason
                                                   AND t.task_id = u.task AND t.status COLLATE "C" = 'queued'
                                                   AND t.requested_at > now() - v_window
                                                 LIMIT 1) AS k ON true
                            WHERE u.lock IS NOT NULL AND (b.queued OR k.queued))
           -- A waiting run (scheduled_retry_at set) in a coalescible element's
           -- bucket, or a policy that can hold a run, may make an older run a
           -- target (docs/api.md §9): leave it to enqueue_run too.
           AND NOT EXISTS (SELECT FROM office.wake_policies p
                            WHERE p.budget IS NOT NULL OR p.cooldown IS NOT NULL OR p.max_runs IS NOT NULL)
           AND NOT EXISTS (SELECT FROM unnest(v_agents, v_reasons, v_bucket_locks) AS u(agent, reason, lock)
                             JOIN LATERAL (SELECT true AS waiting FROM office.runs w
                                            WHERE w.agent_profile_id = u.agent AND w.reason = u.reason
                                              AND w.status = 'queued' AND w.scheduled_retry_at IS NOT NULL
                                            LIMIT 1) AS w ON true
                            WHERE u.lock IS NOT NULL)
          INTO v_fast;
    END IF;

    IF v_fast THEN
        BEGIN
            -- A keyless call reported with a cause is counted, as enqueue_run counts it.
            PERFORM office._count_keyless(u.reason, u.cause)
               FROM unnest(v_reasons, v_causes) WITH ORDINALITY AS u(reason, cause, n)
              WHERE u.cause IS NOT NULL
              ORDER BY u.n;
            -- Insert, ids made in element order (so they sort in that order).
            -- No key is a recorded one (above). A key that is a run's own key
            -- (however it was written) is met by the unique index: 23505 ends
            -- the block, and the elements go one by one below, which dedups
            -- them. That is cheaper than looking every key up first, and than
            -- ON CONFLICT (a speculative insert costs about a fifth of the
            -- statement).
            v_new := office._uuid_v7s(cardinality(v_agents));
            INSERT INTO office.runs (id, agent_profile_id, reason, payload, idempotency_key, task_id, entry_triggered)
            SELECT u.id, u.agent, u.reason, u.payload, u.key, u.task, u.entry
              FROM unnest(v_new, v_agents, v_reasons, v_payloads, v_keys, v_tasks, v_entries)
                     AS u(id, agent, reason, payload, key, task, entry);
            PERFORM office._signal_runs(v_agents, v_new);
        EXCEPTION WHEN OTHERS THEN
            -- A key held by a run (above), or anything else that fails: the
            -- block's work is undone and the elements go one by one, which
            -- gives each its outcome or reports the error with its element.
            v_fast := false;
        END;
    END IF;

    IF v_fast THEN
        RETURN QUERY SELECT u.n::int, 'queued'::text, NULL::text, u.id
                       FROM unnest(v_new) WITH ORDINALITY AS u(id, n) ORDER BY u.n;
        RETURN;
    END IF;

    -- One block (one subtransaction) around the elements, not one per
    -- element: its only job is to put the ordinality into the message of
    -- whatever error an element raises, keeping its SQLSTATE.
    BEGIN
        FOR v_elem IN SELECT e.value FROM jsonb_array_elements(requests) WITH ORDINALITY AS e(value, n) ORDER BY e.n
        LOOP
            v_ord := v_ord + 1;
            IF jsonb_typeof(v_elem) <> 'object' THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('element is a JSON %s, not an object', jsonb_typeof(v_elem));
            END IF;
            SELECT k INTO v_bad FROM jsonb_object_keys(v_elem) AS k
             WHERE k NOT IN ('agent_profile_id', 'reason', 'payload', 'idempotency_key', 'task_id',
                             'entry_triggered', 'keyless_cause', 'keyless_detail',
                             'origin', 'cause_run_id', 'priority', 'not_before')
             ORDER BY k LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('unknown key %s', quote_literal(v_bad));
            END IF;
            SELECT f.key INTO v_bad FROM jsonb_each(v_elem) AS f
             WHERE f.key NOT IN ('payload', 'entry_triggered', 'priority')
               AND jsonb_typeof(f.value) NOT IN ('string', 'null')
             ORDER BY f.key LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('%s must be a JSON string, not %s', v_bad, jsonb_typeof(v_elem -> v_bad));
            END IF;
            IF jsonb_typeof(v_elem -> 'entry_triggered') NOT IN ('boolean', 'null') THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('entry_triggered must be a JSON boolean, not %s',
                                     jsonb_typeof(v_elem -> 'entry_triggered'));
            END IF;
            IF jsonb_typeof(v_elem -> 'priority') NOT IN ('number', 'null')
               OR (jsonb_typeof(v_elem -> 'priority') = 'number'
                   AND ((v_elem ->> 'priority')::numeric NOT BETWEEN -100 AND 100
                        OR (v_elem ->> 'priority')::numeric <> trunc((v_elem ->> 'priority')::numeric))) THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('priority must be a JSON integer from -100 to 100, not %s',
                                     left((v_elem -> 'priority')::text, 40));
            END IF;
            BEGIN
                v_not_before := (v_elem ->> 'not_before')::timestamptz;
            EXCEPTION WHEN data_exception THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('not_before must be a timestamptz, not %s',
                                     quote_literal(left(v_elem ->> 'not_before', 80)));
            END;
            v_res := office.enqueue_run(
                agent_profile_id => v_elem ->> 'agent_profile_id',
                reason           => v_elem ->> 'reason',
                payload          => CASE WHEN v_elem ? 'payload' THEN v_elem -> 'payload' ELSE '{}'::jsonb END,
                idempotency_key  => v_elem ->> 'idempotency_key',
                task_id          => v_elem ->> 'task_id',
                entry_triggered  => coalesce((v_elem ->> 'entry_triggered')::boolean, false),
                keyless_cause    => v_elem ->> 'keyless_cause',
                keyless_detail   => v_elem ->> 'keyless_detail',
                origin           => v_elem ->> 'origin',
                cause_run_id     => v_elem ->> 'cause_run_id',
                priority         => coalesce((v_elem ->> 'priority')::numeric::int, 0),
                not_before       => v_not_before);
            ordinality := v_ord;
            outcome := v_res.outcome;
            dedup_kind := v_res.dedup_kind;
            run_id := v_res.run_id;
            RETURN NEXT;
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
        v_detail := concat_ws(' ', nullif(v_detail, ''), nullif(v_hint, ''));
        IF v_detail = '' THEN
            RAISE EXCEPTION USING ERRCODE = v_state,
                MESSAGE = format('enqueue_runs element %s: %s', v_ord, v_msg);
        ELSE
            RAISE EXCEPTION USING ERRCODE = v_state,
                MESSAGE = format('enqueue_runs element %s: %s', v_ord, v_msg), DETAIL = v_detail;
        END IF;
    END;
END
$$;
COMMENT ON FUNCTION office.enqueue_runs(jsonb) IS
    'Bulk enqueue_run: an array of objects with enqueue_run''s parameter names, applied in order; one (ordinality, outcome, dedup_kind, run_id) per element. Takes every element''s locks up front in one global order, so bulk calls never deadlock each other. Any invalid element fails the whole call with its SQLSTATE and ordinality.';
REVOKE EXECUTE ON FUNCTION office.enqueue_runs(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_runs(jsonb) TO office_producer, office_admin;
-- (end of runs)

-- The loop guard's outcome is counted as a dedup kind of its own.
ALTER TABLE office.dedup_counters DROP CONSTRAINT dedup_counters_kind_check,
    ADD CONSTRAINT dedup_counters_kind_check CHECK (kind = ANY ('{windowed,durable,coalesced,guarded}'::text[]));
COMMENT ON VIEW office.dedup_stats IS
    'Suppressed enqueues by queue (runs|wakeup), reason and kind (windowed|durable|coalesced|guarded; coalesced and guarded are queue runs). Counters restart from zero after a crash.';
COMMENT ON FUNCTION office._count_dedup(text, text, text) IS
    'Internal: counts one suppressed enqueue (queue runs|wakeup, kind windowed|durable|coalesced|guarded) in a slot this transaction holds (office._counter_slot).';

-- === governance (35_governance.sql) ===========================================
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

-- (end of governance)

-- === events (45_events.sql) =================================================
CREATE TRIGGER events_05_bounded
    BEFORE INSERT OR UPDATE OF payload ON office.events
    FOR EACH ROW EXECUTE FUNCTION office._stored_json_bounded('payload');

-- === wakeups (50_wakeups.sql) ================================================
-- request_wakeup checks the depth of its payload; a trigger checks its bounds
-- on rows written directly.
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
    PERFORM office._check_json_depth('payload', v_payload);
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
    'Records a queued wakeup request (NOTIFY office_wakeups unless office.notify = off) or, for a key already requested, (deduped, durable, <holder>) counted on queue wakeup. Empty agent or source, a source or reason over 200 characters or with a control character, a NULL or non-object payload, a payload over 1 MiB or nested more than 64 levels deep, a key over 512 characters 22023 (rows written directly are checked by a trigger too); unknown agent OFA01.';
REVOKE EXECUTE ON FUNCTION office.request_wakeup(text, text, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.request_wakeup(text, text, text, jsonb, text) TO office_producer, office_admin;

CREATE FUNCTION office._wakeup_requests_bounded() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_insert boolean := TG_OP = 'INSERT';
BEGIN
    IF v_insert OR NEW.source IS DISTINCT FROM OLD.source THEN
        PERFORM office._check_short_text('source', NEW.source);
    END IF;
    IF v_insert OR NEW.reason IS DISTINCT FROM OLD.reason THEN
        IF NEW.status = 'queued' THEN
            PERFORM office._check_short_text('reason', NEW.reason);
        ELSE
            PERFORM office._check_free_text('reason', NEW.reason);
        END IF;
    END IF;
    IF v_insert OR NEW.payload IS DISTINCT FROM OLD.payload THEN
        IF octet_length(NEW.payload::text) > 1048576 THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('payload is %s bytes, more than 1 MiB (1048576 bytes)', octet_length(NEW.payload::text));
        END IF;
        PERFORM office._check_json_depth('payload', NEW.payload);
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._wakeup_requests_bounded() IS
    'Internal: BEFORE INSERT OR UPDATE trigger of office.wakeup_requests: request_wakeup''s bounds on what a row writes (a queued row''s source and reason short words, a payload at most 1 MiB and 64 levels deep), 22023 naming the value.';
REVOKE EXECUTE ON FUNCTION office._wakeup_requests_bounded() FROM PUBLIC;
CREATE TRIGGER wakeup_requests_05_bounded
    BEFORE INSERT OR UPDATE OF source, reason, payload ON office.wakeup_requests
    FOR EACH ROW EXECUTE FUNCTION office._wakeup_requests_bounded();

-- === routines (55_routines.sql) ==============================================
CREATE OR REPLACE FUNCTION office._check_document(what text, value jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(value::text) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is %s bytes, more than 1 MiB (1048576 bytes)', what, octet_length(value::text));
    END IF;
    RETURN office._check_json_depth(what, value);
END
$$;
COMMENT ON FUNCTION office._check_document(text, jsonb) IS
    'Internal: returns value when it is NULL or at most 1 MiB as text and 64 levels deep, else raises 22023 naming the argument.';
REVOKE EXECUTE ON FUNCTION office._check_document(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_document(text, jsonb) TO office_admin;
CREATE TRIGGER routines_05_bounded
    BEFORE INSERT OR UPDATE OF task_template, variables ON office.routines
    FOR EACH ROW EXECUTE FUNCTION office._stored_json_bounded('task_template', 'variables');
CREATE TRIGGER routine_runs_05_bounded
    BEFORE INSERT OR UPDATE OF trigger_payload ON office.routine_runs
    FOR EACH ROW EXECUTE FUNCTION office._stored_json_bounded('trigger_payload');

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

-- === worker fencing (30_runs.sql) ============================================
-- heartbeat_run, finish_run, fail_run and retry_run take worker_id (and
-- fail_run retryable): new signatures, so the old ones go.
DROP FUNCTION office.heartbeat_run(text, int);
DROP FUNCTION office.finish_run(text, int);
DROP FUNCTION office.fail_run(text, int, text);
DROP FUNCTION office.retry_run(text, int, interval);

-- The outcome calls are fenced by the attempt (the claim's fencing token) and,
-- when the worker gives its worker_id, by claimed_by too: the attempt can be
-- read by anyone who may read the run (get_run), so the attempt alone would
-- let one worker act on another's run.
CREATE FUNCTION office.heartbeat_run(run_id text, attempt int, worker_id text DEFAULT NULL) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_agent text;
    v_workspace text;
BEGIN
    -- The budget hard stop (docs/api.md §9): with no budget anywhere this is
    -- one probe of the empty partial index idx_wake_policies_budget.
    IF EXISTS (SELECT FROM office.wake_policies p WHERE p.budget IS NOT NULL) THEN
        SELECT r.agent_profile_id, a.workspace_id INTO v_agent, v_workspace
          FROM office.runs r JOIN office.agent_profiles a ON a.id = r.agent_profile_id
         WHERE r.id = heartbeat_run.run_id;
        IF FOUND AND office._budget_reached(v_agent, v_workspace) THEN
            -- Put back, not failed: retry_count stays, and the attempt fences
            -- the worker's late outcome.
            UPDATE office.runs r
               SET status = 'queued', claimed_at = NULL, claimed_by = NULL, heartbeat_at = NULL
             WHERE r.id = heartbeat_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = heartbeat_run.attempt
               AND (heartbeat_run.worker_id IS NULL OR r.claimed_by = heartbeat_run.worker_id);
            RETURN false;
        END IF;
    END IF;
    -- heartbeat_at is in no index, so a beat is a HOT update of the row.
    UPDATE office.runs r
       SET heartbeat_at = now()
     WHERE r.id = heartbeat_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = heartbeat_run.attempt
       AND (heartbeat_run.worker_id IS NULL OR r.claimed_by = heartbeat_run.worker_id);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.heartbeat_run(text, int, text) IS
    'While the run is claimed with this attempt (and, when worker_id is given, by that worker): heartbeat_at = now(), true (the lease is renewed); otherwise false: the worker lost the run (recovered, cancelled, re-claimed) and must stop working on it. Also false when the agent''s own or its workspace''s budget is reached in its period: then a claim that matches is put back to queued (claimed_at, claimed_by, heartbeat_at cleared, retry_count kept).';
REVOKE EXECUTE ON FUNCTION office.heartbeat_run(text, int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.heartbeat_run(text, int, text) TO office_worker, office_admin;

CREATE FUNCTION office.finish_run(run_id text, attempt int, worker_id text DEFAULT NULL) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    UPDATE office.runs r
       SET status = 'finished', finished_at = now()
     WHERE r.id = $1 AND r.status COLLATE "C" = 'claimed' AND r.attempt = $2
       AND ($3 IS NULL OR r.claimed_by = $3);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.finish_run(text, int, text) IS
    'claimed -> finished, only if the run is still claimed with this attempt (and, when worker_id is given, by that worker): a stale worker gets false and changes nothing.';
REVOKE EXECUTE ON FUNCTION office.finish_run(text, int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.finish_run(text, int, text) TO office_worker, office_admin;

-- A retryable failure goes back to the queue while retry_count is below
-- max_retries, after a back-off of the retry_count + 1st step (the last one
-- repeating) times a uniform factor in [0.75, 1.25], so runs that failed
-- together do not come back together (docs/api.md §9: the agent's policy,
-- else its workspace's, else 3 retries and {2 min, 10 min, 30 min, 2 h};
-- office._retry_policy of 33_wake_policies.sql).
CREATE FUNCTION office.fail_run(run_id text, attempt int, error_message text,
                                retryable boolean DEFAULT false, worker_id text DEFAULT NULL) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    max_retries int;
    backoff interval[];
BEGIN
    PERFORM office._check_free_text('error_message', fail_run.error_message);
    IF coalesce(fail_run.retryable, false) THEN
        SELECT p.max_retries, p.retry_backoff INTO max_retries, backoff
          FROM office.runs r CROSS JOIN LATERAL office._retry_policy(r.agent_profile_id) p
         WHERE r.id = fail_run.run_id;
        UPDATE office.runs r
           SET status = 'queued', error_message = fail_run.error_message,
               scheduled_retry_at = now() + backoff[least(r.retry_count + 1, cardinality(backoff))]
                                            * (0.75 + 0.5 * random()),
               retry_count = r.retry_count + 1,
               claimed_at = NULL, claimed_by = NULL, heartbeat_at = NULL, finished_at = NULL
         WHERE r.id = fail_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = fail_run.attempt
           AND (fail_run.worker_id IS NULL OR r.claimed_by = fail_run.worker_id)
           AND r.retry_count < max_retries;
        IF FOUND THEN
            RETURN true;
        END IF;
    END IF;
    UPDATE office.runs r
       SET status = 'failed', error_message = fail_run.error_message,
           finished_at = coalesce(r.finished_at, now())
     WHERE r.id = fail_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = fail_run.attempt
       AND (fail_run.worker_id IS NULL OR r.claimed_by = fail_run.worker_id);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.fail_run(text, int, text, boolean, text) IS
    'claimed -> failed with error_message, only if the run is still claimed with this attempt (and, when worker_id is given, by that worker). retryable and retry_count below the agent''s max_retries (its wake policy''s, else its workspace''s, else 3): back to queued instead, claimable after a jittered back-off (the policy''s retry_backoff, else 2 min, 10 min, 30 min, then 2 h; the last step repeating), retry_count + 1, true. error_message over 64 KiB 22023.';
REVOKE EXECUTE ON FUNCTION office.fail_run(text, int, text, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.fail_run(text, int, text, boolean, text) TO office_worker, office_admin;

CREATE FUNCTION office.retry_run(run_id text, attempt int, delay interval, worker_id text DEFAULT NULL) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    PERFORM office._check_interval('delay', retry_run.delay);
    UPDATE office.runs r
       SET status = 'queued', retry_count = r.retry_count + 1,
           scheduled_retry_at = now() + retry_run.delay,
           claimed_at = NULL, claimed_by = NULL, heartbeat_at = NULL, finished_at = NULL
     WHERE r.id = retry_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = retry_run.attempt
       AND (retry_run.worker_id IS NULL OR r.claimed_by = retry_run.worker_id);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.retry_run(text, int, interval, text) IS
    'claimed -> queued in place (key kept), retry_count + 1, claimable again after delay (claimed_at, claimed_by, heartbeat_at cleared); only if still claimed with this attempt (and, when worker_id is given, by that worker). A delay that is not a finite interval from 0 to 100 years 22023.';
REVOKE EXECUTE ON FUNCTION office.retry_run(text, int, interval, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.retry_run(text, int, interval, text) TO office_worker, office_admin;

-- set_aside is the daemon's (its role has office_admin), not a worker's.
REVOKE EXECUTE ON FUNCTION office.set_aside(text, text, text, text) FROM office_worker;

-- === wake policies (33_wake_policies.sql) ====================================
--
-- A policy row is per agent or per workspace; a NULL column means "not set
-- here", so an agent's limit is its own row's value, else its workspace row's,
-- else the default (office._retry_policy for the retry limits). A budget is
-- per scope and both hold: an agent row caps the agent's spend, a workspace
-- row the workspace's total.
--
-- Spend is kept per scope and UTC day whether or not a policy exists, so a
-- budget set later counts what was spent earlier in its period. An agent's
-- spend is one row per day: only recordings of that agent's runs meet on it,
-- and its row lock is what makes exactly one of two racing recordings the one
-- that crosses a threshold. A workspace's spend is striped by slot (a slot the
-- recording transaction holds, office._counter_slot), so recorders of
-- different agents of one workspace never wait on one row; only where the
-- workspace has a budget do they serialise, on the advisory lock
-- wake_spend.workspace:<workspace>, because a crossing must be decided once.

CREATE TABLE office.wake_policies (
    scope         text        NOT NULL CHECK (scope = ANY ('{agent,workspace}'::text[])),
    scope_id      text        NOT NULL CHECK (office._is_id(scope_id)),
    cooldown      interval    CHECK (cooldown >= interval '0' AND cooldown <= interval '100 years'),
    max_runs      int         CHECK (max_runs BETWEEN 1 AND 10000),
    per           interval    CHECK (per > interval '0' AND per <= interval '100 years'),
    budget        numeric     CHECK (budget >= 0 AND budget < 'Infinity'::numeric),
    budget_period text        NOT NULL DEFAULT 'month'
                              CHECK (budget_period = ANY ('{day,week,month}'::text[])),
    max_retries   int         CHECK (max_retries BETWEEN 0 AND 100),
    retry_backoff interval[]  CHECK (cardinality(retry_backoff) BETWEEN 1 AND 32
                                     AND array_ndims(retry_backoff) = 1),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, scope_id),
    CHECK ((max_runs IS NULL) = (per IS NULL))
);
SELECT pg_catalog.pg_extension_config_dump('office.wake_policies', '');
REVOKE ALL ON TABLE office.wake_policies FROM PUBLIC;
GRANT SELECT ON TABLE office.wake_policies TO office_reader, office_admin;
COMMENT ON TABLE office.wake_policies IS
    'Wake policies per agent or workspace (scope, scope_id): cooldown, max_runs per per, budget per budget_period (day, week, month; UTC), max_retries and retry_backoff of retryable failures. NULL = not set here: an agent''s value is its own row''s, else its workspace row''s, else the default. Written by set_wake_policy and clear_wake_policy.';

-- heartbeat_run asks whether any budget exists before it looks further: with
-- no budget row that is one probe of this (empty) index.
CREATE INDEX idx_wake_policies_budget ON office.wake_policies (scope, scope_id)
    WHERE budget IS NOT NULL;

CREATE TABLE office.wake_spend (
    scope    text    NOT NULL CHECK (scope = ANY ('{agent,workspace}'::text[])),
    scope_id text    NOT NULL CHECK (office._is_id(scope_id)),
    day      date    NOT NULL,
    slot     int     NOT NULL DEFAULT 0,
    amount   numeric NOT NULL DEFAULT 0 CHECK (amount >= 0 AND amount < 'Infinity'::numeric),
    PRIMARY KEY (scope, scope_id, day, slot)
);
SELECT pg_catalog.pg_extension_config_dump('office.wake_spend', '');
REVOKE ALL ON TABLE office.wake_spend FROM PUBLIC;
GRANT SELECT ON TABLE office.wake_spend TO office_reader, office_admin;
COMMENT ON TABLE office.wake_spend IS
    'Cost recorded by record_run_cost, per scope (agent, workspace), UTC day and slot (agent rows slot 0; workspace rows striped so that recorders of different agents do not wait on one row): sum the slots for a scope''s spend.';

CREATE FUNCTION office._check_budget_period(budget_period text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF budget_period IS NULL OR NOT (budget_period = ANY ('{day,week,month}'::text[])) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('budget_period must be day, week or month, not %s',
                             coalesce(quote_literal(left(budget_period, 40)), 'NULL'));
    END IF;
    RETURN budget_period;
END
$$;
COMMENT ON FUNCTION office._check_budget_period(text) IS
    'Internal: returns budget_period when it is day, week or month, else raises 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._check_budget_period(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_budget_period(text) TO office_admin;

-- The first day of the budget period that contains now, in UTC (date_trunc's
-- weeks start on Monday).
CREATE FUNCTION office._budget_period_start(budget_period text) RETURNS date
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN date_trunc(budget_period, now() AT TIME ZONE 'UTC')::date;
COMMENT ON FUNCTION office._budget_period_start(text) IS
    'Internal: the UTC day the current budget period (day, week from Monday, month) starts on.';
REVOKE EXECUTE ON FUNCTION office._budget_period_start(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._budget_period_start(text) TO office_admin;

CREATE FUNCTION office._spend(scope text, scope_id text, since date) RETURNS numeric
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(sum(s.amount), 0) FROM office.wake_spend s
     WHERE s.scope = _spend.scope AND s.scope_id = _spend.scope_id AND s.day >= _spend.since
$$;
COMMENT ON FUNCTION office._spend(text, text, date) IS
    'Internal: the spend recorded for a scope (agent, workspace) from the UTC day since on, all slots.';
REVOKE EXECUTE ON FUNCTION office._spend(text, text, date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._spend(text, text, date) TO office_admin;

CREATE FUNCTION office._budget_reached(agent_profile_id text, workspace_id text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (
        SELECT FROM office.wake_policies p
         WHERE p.budget IS NOT NULL
           AND ((p.scope = 'agent' AND p.scope_id = _budget_reached.agent_profile_id)
             OR (p.scope = 'workspace' AND p.scope_id = _budget_reached.workspace_id))
           AND office._spend(p.scope, p.scope_id, office._budget_period_start(p.budget_period)) >= p.budget)
$$;
COMMENT ON FUNCTION office._budget_reached(text, text) IS
    'Internal: whether the agent''s own budget or its workspace''s is reached: the spend recorded in the current period is at least the budget.';
REVOKE EXECUTE ON FUNCTION office._budget_reached(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._budget_reached(text, text) TO office_admin;

-- The defaults serve where neither the agent's row nor its workspace's sets a
-- value (docs/api.md §9, "Automatic retry").
CREATE FUNCTION office._retry_policy(agent_profile_id text, OUT max_retries int, OUT retry_backoff interval[])
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT p.max_retries FROM office.wake_policies p
                      WHERE p.scope = 'agent' AND p.scope_id = _retry_policy.agent_profile_id),
                    (SELECT w.max_retries FROM office.agent_profiles a
                       JOIN office.wake_policies w ON w.scope = 'workspace' AND w.scope_id = a.workspace_id
                      WHERE a.id = _retry_policy.agent_profile_id),
                    3),
           coalesce((SELECT p.retry_backoff FROM office.wake_policies p
                      WHERE p.scope = 'agent' AND p.scope_id = _retry_policy.agent_profile_id),
                    (SELECT w.retry_backoff FROM office.agent_profiles a
                       JOIN office.wake_policies w ON w.scope = 'workspace' AND w.scope_id = a.workspace_id
                      WHERE a.id = _retry_policy.agent_profile_id),
                    ARRAY[interval '2 minutes', interval '10 minutes', interval '30 minutes', interval '2 hours'])
$$;
COMMENT ON FUNCTION office._retry_policy(text) IS
    'Internal: the agent''s max_retries and retry_backoff: its own policy row''s where not NULL, else its workspace row''s, else 3 and {2 min, 10 min, 30 min, 2 h}.';
REVOKE EXECUTE ON FUNCTION office._retry_policy(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._retry_policy(text) TO office_admin;

CREATE FUNCTION office.set_wake_policy(scope text, scope_id text, cooldown interval DEFAULT NULL,
                                       max_runs int DEFAULT NULL, per interval DEFAULT NULL,
                                       budget numeric DEFAULT NULL, budget_period text DEFAULT 'month',
                                       max_retries int DEFAULT NULL, retry_backoff interval[] DEFAULT NULL)
    RETURNS office.wake_policies
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row office.wake_policies;
    v_holding boolean;
BEGIN
    -- Every argument is checked before the row is written.
    IF set_wake_policy.scope IS NULL OR NOT (set_wake_policy.scope = ANY ('{agent,workspace}'::text[])) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('scope must be agent or workspace, not %s',
                             coalesce(quote_literal(left(set_wake_policy.scope, 40)), 'NULL'));
    END IF;
    PERFORM office._check_id(set_wake_policy.scope, set_wake_policy.scope_id);
    IF set_wake_policy.cooldown IS NOT NULL THEN
        PERFORM office._check_interval('cooldown', set_wake_policy.cooldown);
    END IF;
    IF (set_wake_policy.max_runs IS NULL) <> (set_wake_policy.per IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_runs and per come together, not max_runs %s with per %s',
                             coalesce(set_wake_policy.max_runs::text, 'NULL'),
                             coalesce(set_wake_policy.per::text, 'NULL'));
    END IF;
    IF set_wake_policy.max_runs IS NOT NULL AND NOT (set_wake_policy.max_runs BETWEEN 1 AND 10000) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_runs must be from 1 to 10000, not %s', set_wake_policy.max_runs);
    END IF;
    IF set_wake_policy.per IS NOT NULL THEN
        PERFORM office._check_interval('per', set_wake_policy.per);
        IF set_wake_policy.per = interval '0' THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('per must be a positive interval, not %s', set_wake_policy.per);
        END IF;
    END IF;
    IF set_wake_policy.budget IS NOT NULL
       AND NOT (set_wake_policy.budget >= 0 AND set_wake_policy.budget < 'Infinity'::numeric) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('budget must be a finite number of at least 0, not %s', set_wake_policy.budget);
    END IF;
    PERFORM office._check_budget_period(set_wake_policy.budget_period);
    IF set_wake_policy.max_retries IS NOT NULL AND NOT (set_wake_policy.max_retries BETWEEN 0 AND 100) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_retries must be from 0 to 100, not %s', set_wake_policy.max_retries);
    END IF;
    IF set_wake_policy.retry_backoff IS NOT NULL THEN
        IF coalesce(array_ndims(set_wake_policy.retry_backoff), 1) <> 1
           OR NOT (cardinality(set_wake_policy.retry_backoff) BETWEEN 1 AND 32) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('retry_backoff must be a list of 1 to 32 intervals, not %s',
                                 left(set_wake_policy.retry_backoff::text, 80));
        END IF;
        FOR i IN 1 .. cardinality(set_wake_policy.retry_backoff) LOOP
            PERFORM office._check_interval(format('retry_backoff[%s]', i), set_wake_policy.retry_backoff[i]);
        END LOOP;
    END IF;
    -- FOR KEY SHARE: the agent cannot go away before the row is written.
    IF set_wake_policy.scope = 'agent'
       AND NOT EXISTS (SELECT FROM office.agent_profiles a WHERE a.id = set_wake_policy.scope_id FOR KEY SHARE) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01',
            MESSAGE = format('agent %s not found', quote_literal(set_wake_policy.scope_id));
    END IF;
    -- FOR UPDATE: the holds replaced are the ones read here.
    v_holding := EXISTS (SELECT FROM office.wake_policies p
                          WHERE p.scope = set_wake_policy.scope AND p.scope_id = set_wake_policy.scope_id
                            AND (p.budget IS NOT NULL OR p.cooldown IS NOT NULL OR p.max_runs IS NOT NULL)
                            FOR UPDATE);
    INSERT INTO office.wake_policies AS p
           (scope, scope_id, cooldown, max_runs, per, budget, budget_period, max_retries, retry_backoff, updated_at)
    VALUES (set_wake_policy.scope, set_wake_policy.scope_id, set_wake_policy.cooldown, set_wake_policy.max_runs,
            set_wake_policy.per, set_wake_policy.budget, set_wake_policy.budget_period,
            set_wake_policy.max_retries, set_wake_policy.retry_backoff, now())
    ON CONFLICT (scope, scope_id) DO UPDATE
       SET cooldown = EXCLUDED.cooldown, max_runs = EXCLUDED.max_runs, per = EXCLUDED.per,
           budget = EXCLUDED.budget, budget_period = EXCLUDED.budget_period,
           max_retries = EXCLUDED.max_retries, retry_backoff = EXCLUDED.retry_backoff,
           updated_at = EXCLUDED.updated_at
    RETURNING p.* INTO v_row;
    -- A budget, cooldown or run cap that was there may have held the scope's
    -- agents (their readiness rows delayed by claim_run, 34_wake_holds.sql):
    -- ready them, whatever the new row holds.
    IF v_holding THEN
        PERFORM office._ready_scope(set_wake_policy.scope, set_wake_policy.scope_id);
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.set_wake_policy(text, text, interval, int, interval, numeric, text, int, interval[]) IS
    'Inserts or replaces the wake policy of an agent or a workspace (scope agent|workspace, scope_id) and returns it; NULL = not set here. max_runs (1-10000) and per (a positive interval) come together; cooldown, per and each retry_backoff step finite intervals from 0 to 100 years; budget finite and >= 0; budget_period day, week or month; max_retries 0-100; retry_backoff 1-32 intervals. Bad input 22023 naming the argument (nothing written); unknown agent OFA01. Where the row replaced had a budget, cooldown or run cap, the scope''s agents with queued runs are listed again for claim_run (a hold it kept may be lifted).';
REVOKE EXECUTE ON FUNCTION office.set_wake_policy(text, text, interval, int, interval, numeric, text, int, interval[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.set_wake_policy(text, text, interval, int, interval, numeric, text, int, interval[]) TO office_admin;

CREATE FUNCTION office.clear_wake_policy(scope text, scope_id text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_holding boolean;
BEGIN
    DELETE FROM office.wake_policies p
     WHERE p.scope = clear_wake_policy.scope AND p.scope_id = clear_wake_policy.scope_id
    RETURNING p.budget IS NOT NULL OR p.cooldown IS NOT NULL OR p.max_runs IS NOT NULL INTO v_holding;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A hold gone may have held the scope's agents (their readiness rows
    -- delayed by claim_run): ready them.
    IF v_holding THEN
        PERFORM office._ready_scope(clear_wake_policy.scope, clear_wake_policy.scope_id);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION office.clear_wake_policy(text, text) IS
    'Deletes the wake policy of an agent or a workspace; true if there was one. Where it had a budget, cooldown or run cap, the scope''s agents with queued runs are listed again for claim_run (a hold it kept is lifted).';
REVOKE EXECUTE ON FUNCTION office.clear_wake_policy(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.clear_wake_policy(text, text) TO office_admin;

-- The decisions of a recording that takes a scope's spend across 80 % or
-- 100 % of its budget: "across" means this recording's own before and after
-- (before < threshold <= after), read under the scope's serialisation (the
-- agent's day row, the workspace's lock), so of two racing recordings that
-- together cross a threshold exactly one writes its decision.
CREATE FUNCTION office._budget_crossings(scope text, scope_id text, before numeric, after numeric,
                                         budget numeric, budget_period text, since date,
                                         agent_profile_id text, run_id text, origin text,
                                         cause_run_id text, chain_depth int) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_detail jsonb := jsonb_build_object('scope', scope, 'scope_id', scope_id, 'budget', budget,
                                         'budget_period', budget_period, 'period_start', since,
                                         'spent', after);
BEGIN
    IF before < 0.8 * budget AND after >= 0.8 * budget THEN
        PERFORM office._write_wake_decision(agent_profile_id, run_id, 'budget_warning', origin,
                                            cause_run_id, chain_depth, v_detail);
    END IF;
    IF before < budget AND after >= budget THEN
        PERFORM office._write_wake_decision(agent_profile_id, run_id, 'budget_exhausted', origin,
                                            cause_run_id, chain_depth, v_detail);
    END IF;
END
$$;
COMMENT ON FUNCTION office._budget_crossings(text, text, numeric, numeric, numeric, text, date, text, text, text, text, int) IS
    'Internal: writes budget_warning when a recording took a scope''s spend from below 80 % of its budget to 80 % or more, budget_exhausted when from below 100 % to 100 % or more (both when both), under the recording run''s agent.';
REVOKE EXECUTE ON FUNCTION office._budget_crossings(text, text, numeric, numeric, numeric, text, date, text, text, text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._budget_crossings(text, text, numeric, numeric, numeric, text, date, text, text, text, text, int) TO office_admin;

-- Fenced by the attempt alone, so the worker of a run that ended or was put
-- back (a budget stop) can still record its last cost; a given worker_id must
-- be the claim's, or the run must have been put back (claimed_by cleared,
-- and a re-claim would have moved the attempt on).
CREATE FUNCTION office.record_run_cost(run_id text, attempt int, amount numeric, worker_id text DEFAULT NULL)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_run record;
    v_workspace text;
    v_policy record;
    v_since date;
    v_after numeric;
    v_budgeted boolean;
BEGIN
    IF record_run_cost.amount IS NULL
       OR NOT (record_run_cost.amount >= 0 AND record_run_cost.amount < 'Infinity'::numeric) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('amount must be a finite number of at least 0, not %s',
                             coalesce(record_run_cost.amount::text, 'NULL'));
    END IF;
    UPDATE office.runs r
       SET cost = r.cost + record_run_cost.amount
     WHERE r.id = record_run_cost.run_id AND r.attempt = record_run_cost.attempt AND r.attempt > 0
       AND (record_run_cost.worker_id IS NULL OR r.claimed_by IS NULL OR r.claimed_by = record_run_cost.worker_id)
    RETURNING r.agent_profile_id, r.origin, r.cause_run_id, r.chain_depth INTO v_run;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT a.workspace_id INTO v_workspace FROM office.agent_profiles a WHERE a.id = v_run.agent_profile_id;

    -- The agent: one row per day; its lock orders racing recordings.
    INSERT INTO office.wake_spend AS s (scope, scope_id, day, slot, amount)
    VALUES ('agent', v_run.agent_profile_id, v_today, 0, record_run_cost.amount)
    ON CONFLICT (scope, scope_id, day, slot) DO UPDATE SET amount = s.amount + EXCLUDED.amount;
    SELECT p.budget, p.budget_period INTO v_policy FROM office.wake_policies p
     WHERE p.scope = 'agent' AND p.scope_id = v_run.agent_profile_id AND p.budget IS NOT NULL;
    IF FOUND THEN
        v_since := office._budget_period_start(v_policy.budget_period);
        v_after := office._spend('agent', v_run.agent_profile_id, v_since);
        PERFORM office._budget_crossings('agent', v_run.agent_profile_id, v_after - record_run_cost.amount, v_after,
                                         v_policy.budget, v_policy.budget_period, v_since, v_run.agent_profile_id,
                                         record_run_cost.run_id, v_run.origin, v_run.cause_run_id, v_run.chain_depth);
    END IF;

    IF v_workspace IS NOT NULL THEN
        SELECT p.budget, p.budget_period INTO v_policy FROM office.wake_policies p
         WHERE p.scope = 'workspace' AND p.scope_id = v_workspace AND p.budget IS NOT NULL;
        v_budgeted := FOUND;
        IF v_budgeted THEN
            PERFORM office._xact_lock(office._lock_key('wake_spend.workspace', v_workspace));
        END IF;
        INSERT INTO office.wake_spend AS s (scope, scope_id, day, slot, amount)
        VALUES ('workspace', v_workspace, v_today, office._counter_slot(), record_run_cost.amount)
        ON CONFLICT (scope, scope_id, day, slot) DO UPDATE SET amount = s.amount + EXCLUDED.amount;
        IF v_budgeted THEN
            v_since := office._budget_period_start(v_policy.budget_period);
            v_after := office._spend('workspace', v_workspace, v_since);
            PERFORM office._budget_crossings('workspace', v_workspace, v_after - record_run_cost.amount, v_after,
                                             v_policy.budget, v_policy.budget_period, v_since, v_run.agent_profile_id,
                                             record_run_cost.run_id, v_run.origin, v_run.cause_run_id, v_run.chain_depth);
        END IF;
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION office.record_run_cost(text, int, numeric, text) IS
    'Adds amount (finite, >= 0, else 22023) to the run''s cost and to its agent''s and workspace''s spend of the UTC day, while the run carries this attempt: claimed, ended or put back (and, when worker_id is given, claimed by that worker or no longer claimed); true if recorded. A recording that takes a scope''s spend in its budget period across 80 % of its budget writes a budget_warning decision, across 100 % a budget_exhausted one, under the run''s agent.';
REVOKE EXECUTE ON FUNCTION office.record_run_cost(text, int, numeric, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.record_run_cost(text, int, numeric, text) TO office_worker, office_admin;
-- claim_run's budget hard stop (docs/api.md §9): a held agent is no
-- candidate, its readiness rows delayed to the hold's end.
-- enable_bitmapscan = off as well: office.agent_ready is small and churns
-- (a row deleted per claim, inserted per claim end), and against its
-- statistics a bitmap scan plus a sort looks cheaper than walking
-- idx_agent_ready_head in order; but a bitmap scan visits every dead entry
-- again on every call, where an index scan marks them dead once.
CREATE OR REPLACE FUNCTION office.claim_run(worker_id text DEFAULT NULL, agent_profile_id text DEFAULT NULL)
    RETURNS SETOF office.runs
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
    SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    -- $1 and $2, not claim_run.worker_id: 95_native.sql compiles this body
    -- under another name too (office._claim_run_plpgsql).
    v_agent       text := nullif($2, '');
    v_worker      text := office._check_short_text('worker_id', $1);
    v_skip_agents text[] := '{}';
    v_skip_runs   text[] := '{}';
    v_cand_ids    text[];
    v_cand_agents text[];
    v_stale       text[];
    v_held        text[];
    v_hold        text;
    -- A call that has skipped this many agents (their rows removed or
    -- delayed, one readiness lock each, kept to the end of the transaction)
    -- without finding a run answers none; the next call goes on from there,
    -- since the rows it removed are gone. This bounds a call's time and the
    -- locks it takes: ten thousand busy agents listed at once overflowed the
    -- lock table (max_locks_per_transaction) of a small server in one call,
    -- and every call after failed the same way. sql/native/claim.c has it
    -- as OFFICE_CLAIM_SKIP_BOUND (tools/native_constants.py).
    v_skip_bound  constant int := 1000;
    -- Whether any policy can hold a run (34_wake_holds.sql): with none, one
    -- probe of the empty partial index idx_wake_policies_holds.
    v_governed    boolean := EXISTS (SELECT FROM office.wake_policies p
                                      WHERE p.budget IS NOT NULL OR p.cooldown IS NOT NULL OR p.max_runs IS NOT NULL);
    -- Whether any queued run has a priority other than 0: with none, one
    -- probe of the empty partial index idx_run_queued_priority, and the claim
    -- order is the due time alone.
    v_prioritized boolean := EXISTS (SELECT FROM office.runs p WHERE p.status = 'queued' AND p.priority <> 0);
    -- Unfiltered and prioritized, three passes in claim order: 1 the runs of
    -- priority above 0, 2 those of priority 0 (the readiness list), 3 those
    -- below 0.
    v_pass        int := CASE WHEN v_prioritized THEN 1 ELSE 2 END;
    v_cand_id     text;
    v_cand_agent  text;
    v_row         office.runs;
BEGIN
    -- One candidate at a time, oldest first. Without an agent, the agents
    -- looked at are the first 8 of office.agent_ready (oldest head_at first,
    -- those due now): an agent that holds a claim, does not accept runs or
    -- has no due run is not a candidate but a stale row, removed (or
    -- delayed to its due_at) by _unready_agents, and the scan goes on past
    -- it. So a busy agent costs one look after it last became ready, not
    -- one per claim, and the cost does not follow the backlog of busy
    -- agents (nor their number). Of each agent looked at, the oldest due run
    -- (a LIMIT 1 walk of idx_run_agent_queued) is the candidate; the oldest
    -- of those goes first. Across agents the order is the listed head_at,
    -- which is the agent's oldest queued run when it was listed (a run
    -- requested by an older, slower transaction may sort after it).
    -- For each candidate: the agent's advisory lock, taken with pg_try_* (a
    -- claimer busy with this agent makes us skip it, never wait); then, in a
    -- statement of its own (READ COMMITTED: a snapshot taken after the lock),
    -- a look for a claimed run of the agent, which sees any claim committed
    -- before we got the lock; then the row itself with SKIP LOCKED. Every
    -- claimer holds the agent's lock until its transaction ends, so no claim
    -- can be in flight unseen: no 23505 on idx_run_one_claimed_per_agent,
    -- which stays as the backstop in the table. An agent just claimed holds
    -- a claim: its rows in office.agent_ready go (the claim's end readies it
    -- again).
    -- An agent that another claimer is busy with, or that got a claim
    -- meanwhile, is skipped for the next candidate of the list, not for a
    -- new scan (concurrent claimers all find the same oldest candidate, and
    -- the scan is most of a claim's cost: bench/hotpath.py). A candidate run
    -- that is gone (claimed, cancelled, locked) starts a new scan, since its
    -- agent may have an older due run than the next candidate.
    -- Policy holds (docs/api.md §9, 34_wake_holds.sql): of an agent that a
    -- reached budget holds no run is a candidate, and of one that a cooldown
    -- or run cap holds only a human run. An agent held with no candidate is
    -- not stale but held: _hold_agents delays its rows to the hold's end, so
    -- later claims do not look at it again before, as for a busy agent. The
    -- hold is decided again after the agent's claim lock, in a statement of
    -- its own, so two claimers at the moment a hold ends see each other's
    -- claim; and a claim under a run cap is logged (_log_claim).
    -- Priority (docs/api.md §9): passes 1 and 3 walk the prioritized due runs
    -- in claim order (idx_run_queued_priority, which holds only those),
    -- skipping those of busy and refusing agents; pass 2 is the readiness
    -- walk below, over runs of priority 0. A claimer busy with the agent of a
    -- prioritized run makes the others go on to the next run, as below.
    <<scan>>
    LOOP
        IF v_agent IS NULL AND v_pass <> 2 THEN
            SELECT array_agg(c.id ORDER BY c.priority DESC, c.requested_at, c.id COLLATE "C"),
                   array_agg(c.agent_profile_id ORDER BY c.priority DESC, c.requested_at, c.id COLLATE "C")
              INTO v_cand_ids, v_cand_agents
              FROM (SELECT q.id, q.agent_profile_id, q.priority, q.requested_at
                      FROM office.runs q
                     WHERE q.status = 'queued' AND q.priority <> 0
                       AND CASE WHEN v_pass = 1 THEN q.priority > 0 ELSE q.priority < 0 END
                       AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                       AND q.agent_profile_id <> ALL (v_skip_agents) AND q.id <> ALL (v_skip_runs)
                       AND NOT EXISTS (SELECT FROM office.runs x
                                        WHERE x.agent_profile_id = q.agent_profile_id AND x.status = 'claimed')
                       AND EXISTS (SELECT FROM office.agent_profiles p
                                    WHERE p.id = q.agent_profile_id
                                      AND p.status <> ALL (office._statuses_refusing_runs()))
                     ORDER BY q.priority DESC, q.requested_at, q.id COLLATE "C"
                     LIMIT 8) AS c;
            IF v_cand_ids IS NULL THEN
                EXIT scan WHEN v_pass = 3;
                v_pass := 2;
                CONTINUE scan;
            END IF;
        ELSIF v_agent IS NULL THEN
            WITH ready(agent, head_at) AS MATERIALIZED (
                SELECT e.agent_profile_id, min(e.head_at)
                  FROM ((SELECT r.agent_profile_id, r.head_at FROM office.agent_ready r
                          WHERE r.due_at IS NULL AND r.agent_profile_id <> ALL (v_skip_agents)
                          ORDER BY r.head_at, r.agent_profile_id COLLATE "C"
                          LIMIT 8)
                        UNION ALL
                        (SELECT r.agent_profile_id, r.head_at FROM office.agent_ready r
                          WHERE r.due_at <= now() AND r.agent_profile_id <> ALL (v_skip_agents)
                          ORDER BY r.due_at
                          LIMIT 8)) AS e
                 GROUP BY e.agent_profile_id
                 ORDER BY min(e.head_at), e.agent_profile_id COLLATE "C"
                 LIMIT 8
            ),
            -- Materialized, so that busy and paused agents are dropped before
            -- any of their runs is read. Lateral probes, not EXISTS: the
            -- planner may turn an EXISTS into a hashed subplan that reads
            -- every claimed run (one per busy agent) on each call.
            free(agent, ok, hold) AS MATERIALIZED (
                SELECT ready.agent, x.busy IS NULL AND p.accepts IS NOT NULL, h.held_by
                  FROM ready
                  LEFT JOIN LATERAL (SELECT true AS busy FROM office.runs x
                                      WHERE x.agent_profile_id = ready.agent AND x.status = 'claimed'
                                      LIMIT 1) x ON true
                  LEFT JOIN LATERAL (SELECT true AS accepts, p.workspace_id FROM office.agent_profiles p
                                      WHERE p.id = ready.agent
                                        AND p.status <> ALL (office._statuses_refusing_runs())
                                      LIMIT 1) p ON true
                  LEFT JOIN LATERAL (SELECT g.held_by
                                       FROM office._agent_hold(ready.agent, p.workspace_id, false) g
                                      WHERE v_governed AND x.busy IS NULL AND p.accepts IS NOT NULL) h ON true
            )
            SELECT array_agg(c.id ORDER BY c.requested_at, c.id COLLATE "C") FILTER (WHERE c.id IS NOT NULL),
                   array_agg(free.agent ORDER BY c.requested_at, c.id COLLATE "C") FILTER (WHERE c.id IS NOT NULL),
                   array_agg(free.agent) FILTER (WHERE c.id IS NULL AND free.hold IS NULL),
                   array_agg(free.agent) FILTER (WHERE c.id IS NULL AND free.hold IS NOT NULL)
              INTO v_cand_ids, v_cand_agents, v_stale, v_held
              FROM free
              LEFT JOIN LATERAL (SELECT q.id, q.requested_at
                                   FROM office.runs q
                                  WHERE free.ok AND q.status = 'queued' AND q.agent_profile_id = free.agent
                                    AND (NOT v_prioritized OR q.priority = 0)
                                    AND (free.hold IS NULL OR (free.hold <> 'budget' AND q.origin = 'human'))
                                    AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                                    AND q.id <> ALL (v_skip_runs)
                                  ORDER BY q.requested_at, q.id COLLATE "C"
                                  LIMIT 1) c ON true;
            IF v_held IS NOT NULL THEN
                PERFORM office._hold_agents(v_held);
                v_skip_agents := v_skip_agents || v_held;
            END IF;
            IF v_stale IS NOT NULL THEN
                PERFORM office._unready_agents(v_stale);
                v_skip_agents := v_skip_agents || v_stale;
            END IF;
            EXIT scan WHEN v_cand_ids IS NULL AND cardinality(v_skip_agents) >= v_skip_bound;
            CONTINUE scan WHEN v_cand_ids IS NULL AND (v_stale IS NOT NULL OR v_held IS NOT NULL);
        ELSE
            -- One agent: its oldest due run, read in index order (never a
            -- sort of its backlog); nothing when it holds a claim, does not
            -- accept runs or a policy holds it (a cooldown or run cap: its
            -- human runs only).
            IF v_governed THEN
                SELECT g.held_by INTO v_hold
                  FROM office.agent_profiles a
                 CROSS JOIN LATERAL office._agent_hold(a.id, a.workspace_id, false) g
                 WHERE a.id = v_agent;
            END IF;
            IF NOT v_prioritized THEN
                SELECT ARRAY[q.id], ARRAY[q.agent_profile_id] INTO v_cand_ids, v_cand_agents
                  FROM office.runs q
                 WHERE q.status = 'queued' AND q.agent_profile_id = v_agent
                   AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                   AND q.id <> ALL (v_skip_runs)
                   AND NOT EXISTS (SELECT FROM office.runs x WHERE x.agent_profile_id = v_agent AND x.status = 'claimed')
                   AND EXISTS (SELECT FROM office.agent_profiles p
                                WHERE p.id = v_agent AND p.status <> ALL (office._statuses_refusing_runs()))
                   AND (v_hold IS NULL OR (v_hold <> 'budget' AND q.origin = 'human'))
                 ORDER BY q.requested_at, q.id COLLATE "C"
                 LIMIT 1;
            ELSE
                -- In claim order without a sort: the runs above 0, of 0 and
                -- below 0, each part read in index order, the first found.
                SELECT ARRAY[c.id], ARRAY[v_agent] INTO v_cand_ids, v_cand_agents
                  FROM ((SELECT q.id FROM office.runs q
                          WHERE q.status = 'queued' AND q.agent_profile_id = v_agent AND q.priority > 0
                            AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                            AND q.id <> ALL (v_skip_runs)
                            AND (v_hold IS NULL OR (v_hold <> 'budget' AND q.origin = 'human'))
                          ORDER BY q.priority DESC, q.requested_at, q.id COLLATE "C"
                          LIMIT 1)
                        UNION ALL
                        (SELECT q.id FROM office.runs q
                          WHERE q.status = 'queued' AND q.agent_profile_id = v_agent AND q.priority = 0
                            AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                            AND q.id <> ALL (v_skip_runs)
                            AND (v_hold IS NULL OR (v_hold <> 'budget' AND q.origin = 'human'))
                          ORDER BY q.requested_at, q.id COLLATE "C"
                          LIMIT 1)
                        UNION ALL
                        (SELECT q.id FROM office.runs q
                          WHERE q.status = 'queued' AND q.agent_profile_id = v_agent AND q.priority < 0
                            AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                            AND q.id <> ALL (v_skip_runs)
                            AND (v_hold IS NULL OR (v_hold <> 'budget' AND q.origin = 'human'))
                          ORDER BY q.priority DESC, q.requested_at, q.id COLLATE "C"
                          LIMIT 1)
                        LIMIT 1) AS c
                 WHERE NOT EXISTS (SELECT FROM office.runs x WHERE x.agent_profile_id = v_agent AND x.status = 'claimed')
                   AND EXISTS (SELECT FROM office.agent_profiles p
                                WHERE p.id = v_agent AND p.status <> ALL (office._statuses_refusing_runs()));
            END IF;
        END IF;
        IF v_cand_ids IS NULL THEN
            -- The readiness walk found nothing: then the runs below 0.
            EXIT scan WHEN v_agent IS NOT NULL OR v_pass <> 2 OR NOT v_prioritized;
            -- The agents the walk skipped may have runs below 0 (an agent with
            -- no run of priority 0 is one it skipped).
            v_pass := 3;
            v_skip_agents := '{}';
            CONTINUE scan;
        END IF;

        FOR i IN 1 .. cardinality(v_cand_ids) LOOP
            v_cand_id := v_cand_ids[i];
            v_cand_agent := v_cand_agents[i];
            IF NOT pg_try_advisory_xact_lock(hashtextextended(office._lock_key('runs.claim', v_cand_agent), 0)) THEN
                EXIT scan WHEN v_agent IS NOT NULL;
                v_skip_agents := v_skip_agents || v_cand_agent;
                CONTINUE;
            END IF;
            IF EXISTS (SELECT FROM office.runs c WHERE c.agent_profile_id = v_cand_agent AND c.status = 'claimed') THEN
                EXIT scan WHEN v_agent IS NOT NULL;
                v_skip_agents := v_skip_agents || v_cand_agent;
                CONTINUE;
            END IF;
            IF v_governed AND EXISTS (SELECT FROM office.runs l
                                        JOIN office.agent_profiles a ON a.id = l.agent_profile_id
                                       CROSS JOIN LATERAL office._agent_hold(a.id, a.workspace_id, l.origin = 'human') g
                                       WHERE l.id = v_cand_id AND g.held_by IS NOT NULL) THEN
                EXIT scan WHEN v_agent IS NOT NULL;
                v_skip_agents := v_skip_agents || v_cand_agent;
                CONTINUE;
            END IF;
            -- By its primary key only: status compared under "C"
            -- (sql/30_runs.sql, "Plans").
            UPDATE office.runs r
               SET status = 'claimed', claimed_at = now(), claimed_by = v_worker,
                   heartbeat_at = now(), attempt = r.attempt + 1
             WHERE r.id = (SELECT l.id FROM office.runs l
                            WHERE l.id = v_cand_id AND l.status COLLATE "C" = 'queued'
                              AND (l.scheduled_retry_at IS NULL OR l.scheduled_retry_at <= now())
                              FOR UPDATE SKIP LOCKED)
            RETURNING r.* INTO v_row;
            IF FOUND THEN
                -- The agent now holds a claim, in this statement's snapshot
                -- as in every later one of ours: _unready_agents would delete
                -- its rows and leave none to delay. Its lock and delete,
                -- inline: the call was a fifth of a claim + finish cycle's
                -- server time (docs/benchmarks.md). Were we to roll back, the
                -- delete would go with the claim.
                IF current_setting('transaction_isolation') = 'read committed'
                   AND pg_try_advisory_xact_lock(hashtextextended('office.runs.ready:' || v_cand_agent, 0)) THEN
                    DELETE FROM office.agent_ready r WHERE r.agent_profile_id = v_cand_agent;
                END IF;
                IF v_governed THEN
                    PERFORM office._log_claim(v_cand_agent, (SELECT a.workspace_id FROM office.agent_profiles a
                                                              WHERE a.id = v_cand_agent));
                END IF;
                RETURN NEXT v_row;
                RETURN;
            END IF;
            -- Locked by someone else (a cancel, a coalesce) or no longer queued.
            v_skip_runs := v_skip_runs || v_cand_id;
            CONTINUE scan;
        END LOOP;
    END LOOP scan;
END
$$;
COMMENT ON FUNCTION office.claim_run(text, text) IS
    'Claims the first due queued run in claim order, priority DESC then the oldest (optionally of one agent), whose agent accepts runs, has no claimed run and is not held by a wake policy (a reached budget, its own or its workspace''s; for a run not of origin human a cooldown or run cap): status claimed, claimed_at and heartbeat_at now, attempt + 1. 0 or 1 row; never waits for or fails because of another claimer; its cost does not grow with the backlog of agents holding a claim, and a call that skipped 1000 listed agents without finding a run returns none (the next goes on past them). worker_id over 200 characters or with a control character 22023.';
-- (end of wake policies)

-- === wake holds (34_wake_holds.sql) =========================================

-- office: what a wake policy holds, and the answer to "why isn't my agent
-- running?" (docs/api.md §9, "What a policy holds" and "Explain").
--
-- A hold is decided when a run would be claimed, never when it is queued: a
-- held run stays queued, so nothing is lost while an agent waits, and the
-- wakes that pile up meanwhile coalesce into it (§3). One function,
-- office._agent_hold, decides the holds of an agent for claim_run,
-- explain_agent and office.governance_stats alike, in the order explain_agent
-- reports them: budget (any origin), then cooldown and run cap (which a human
-- run bypasses). The run's own holds (paused agent, not_before, a claim in
-- progress) are claim_run's as before.
--
-- A held agent costs claim_run what a busy one costs: one look after it
-- became ready. Its readiness rows are not stale (it has queued runs, and no
-- trigger readies it when the hold ends by time), so they are delayed to the
-- hold's end (office._hold_agents) instead of deleted; a policy change that
-- may lift a hold lists the scope's agents again (office._ready_scope), and
-- a human run inserted meanwhile is listed by the readiness trigger as any
-- run is.

-- claim_run asks whether anything can hold a run before it looks further:
-- with no such policy that is one probe of this (empty) index, and the C
-- definition hands every call on to PL/pgSQL while it has an entry.
CREATE INDEX idx_wake_policies_holds ON office.wake_policies (scope, scope_id)
    WHERE budget IS NOT NULL OR cooldown IS NOT NULL OR max_runs IS NOT NULL;

-- A cooldown counts from the latest end of a claim of the agent: a run that
-- was claimed when it ended keeps claimed_at (finish_run, a final fail_run,
-- cancel_run of a claimed run), while a requeue, retry, recovery or budget
-- stop clears it and a queued run cancelled never had it. So the latest end
-- is one backward probe of this index.
CREATE INDEX idx_run_agent_ended ON office.runs (agent_profile_id, finished_at)
    WHERE claimed_at IS NOT NULL AND finished_at IS NOT NULL;

-- The queued runs of priority other than 0, by agent in claim order: what
-- explain_agent reads before (above 0) and after (below 0) the everyday runs
-- of priority 0, which idx_run_agent_queued has in age order. Partial, so a
-- run of priority 0, the hot path's, writes no entry.
CREATE INDEX idx_run_agent_queued_priority
    ON office.runs (agent_profile_id, priority DESC, requested_at, id COLLATE "C")
    WHERE status = 'queued' AND priority <> 0;
-- ... and across agents, in claim order: claim_run's walk of the runs above
-- 0 before the readiness list and of those below 0 after it (30_runs.sql),
-- and its probe of whether any queued run has a priority at all.
CREATE INDEX idx_run_queued_priority
    ON office.runs (priority DESC, requested_at, id COLLATE "C")
    WHERE status = 'queued' AND priority <> 0;

-- The queued runs that wait on their scheduled_retry_at (a retry's back-off,
-- a not_before), by bucket: a wake coalesces into a waiting run whatever its
-- age (docs/api.md §9), and enqueue_run's C definition, which looks for a
-- target within the coalesce window only, hands a request on to PL/pgSQL
-- when its bucket has an entry here. Partial, so a run due at once writes
-- none.
CREATE INDEX idx_run_waiting ON office.runs (agent_profile_id, reason)
    WHERE status = 'queued' AND scheduled_retry_at IS NOT NULL;

-- The claims of each agent under a cooldown or run cap, one row per agent,
-- kept apart from office.runs so that prune_runs cannot lift a cap and a
-- re-claim counts again: claimed_at lists the claims within the cap's
-- interval (the last one only, under a cooldown alone). Written by every
-- claim of such an agent (office._log_claim). One row, not one per claim, so
-- that it is also what serialises claims under REPEATABLE READ: a claimer
-- whose snapshot predates another claimer's claim writes the row that claim
-- changed and gets a serialization failure (40001) rather than claiming past
-- the cap or inside the cooldown it could not see.
CREATE TABLE office.wake_claims (
    agent_profile_id text          PRIMARY KEY,
    claimed_at       timestamptz[] NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('office.wake_claims', '');
REVOKE ALL ON TABLE office.wake_claims FROM PUBLIC;
GRANT SELECT ON TABLE office.wake_claims TO office_reader, office_admin;
COMMENT ON TABLE office.wake_claims IS
    'Claims of agents under a cooldown or run cap, one row per agent: claimed_at lists its claims within the cap''s interval (re-claims and human runs included). Written by claim_run.';

-- An agent's cooldown and run cap: its own row's values where set, else its
-- workspace row's (max_runs and per come together in a row).
CREATE FUNCTION office._agent_limits(agent_profile_id text, workspace_id text,
                                     OUT cooldown interval, OUT max_runs int, OUT per interval)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(a.cooldown, w.cooldown),
           CASE WHEN a.max_runs IS NOT NULL THEN a.max_runs ELSE w.max_runs END,
           CASE WHEN a.max_runs IS NOT NULL THEN a.per ELSE w.per END
      FROM (SELECT) AS one
      LEFT JOIN office.wake_policies a ON a.scope = 'agent' AND a.scope_id = _agent_limits.agent_profile_id
      LEFT JOIN office.wake_policies w ON w.scope = 'workspace' AND w.scope_id = _agent_limits.workspace_id
$$;
COMMENT ON FUNCTION office._agent_limits(text, text) IS
    'Internal: the agent''s cooldown and run cap (max_runs per per): its own policy row''s where set, else its workspace row''s; NULL where neither sets one.';
REVOKE EXECUTE ON FUNCTION office._agent_limits(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._agent_limits(text, text) TO office_admin;

-- The first hold of a policy on the agent's runs of this origin (human or
-- not), in explain_agent's order: budget, cooldown, run cap; NULLs when none
-- holds. until is when the hold ends by itself: the next budget period (the
-- latest of the reached scopes'), the cooldown's end, the time the oldest
-- counted claim leaves the cap's interval.
CREATE FUNCTION office._agent_hold(agent_profile_id text, workspace_id text, human boolean,
                                   OUT held_by text, OUT until timestamptz, OUT detail text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    SET intervalstyle = 'postgres'
    SET datestyle = 'ISO, YMD'
    SET enable_seqscan = off
AS $$
DECLARE
    v_limits record;
    v_last   timestamptz;
    v_count  int;
BEGIN
    SELECT (office._budget_period_start(p.budget_period) + ('1 ' || p.budget_period)::interval) AT TIME ZONE 'UTC',
           format('the %s budget of %s per %s is reached: %s spent', p.scope, p.budget, p.budget_period, s.spent)
      INTO until, detail
      FROM office.wake_policies p
     CROSS JOIN LATERAL (SELECT office._spend(p.scope, p.scope_id, office._budget_period_start(p.budget_period))
                                AS spent) s
     WHERE p.budget IS NOT NULL
       AND ((p.scope = 'agent' AND p.scope_id = _agent_hold.agent_profile_id)
         OR (p.scope = 'workspace' AND p.scope_id = _agent_hold.workspace_id))
       AND s.spent >= p.budget
     ORDER BY 1 DESC
     LIMIT 1;
    IF FOUND THEN
        held_by := 'budget';
        RETURN;
    END IF;
    until := NULL;
    detail := NULL;
    IF _agent_hold.human THEN
        RETURN;
    END IF;
    SELECT * INTO v_limits FROM office._agent_limits(_agent_hold.agent_profile_id, _agent_hold.workspace_id);
    IF v_limits.cooldown > interval '0' THEN
        SELECT max(r.finished_at) INTO v_last
          FROM office.runs r
         WHERE r.agent_profile_id = _agent_hold.agent_profile_id
           AND r.claimed_at IS NOT NULL AND r.finished_at IS NOT NULL;
        IF v_last + v_limits.cooldown > now() THEN
            held_by := 'cooldown';
            until := v_last + v_limits.cooldown;
            detail := format('cooldown of %s after the run that ended at %s', v_limits.cooldown, v_last);
            RETURN;
        END IF;
    END IF;
    IF v_limits.max_runs IS NOT NULL THEN
        SELECT count(*), (array_agg(t.at ORDER BY t.at DESC))[v_limits.max_runs] + v_limits.per
          INTO v_count, until
          FROM office.wake_claims c
         CROSS JOIN LATERAL unnest(c.claimed_at) AS t (at)
         WHERE c.agent_profile_id = _agent_hold.agent_profile_id AND t.at > now() - v_limits.per;
        IF v_count < v_limits.max_runs THEN
            until := NULL;
        ELSE
            held_by := 'run_cap';
            detail := format('%s runs claimed in the last %s, at most %s', v_count,
                             CASE v_limits.per WHEN interval '1 second' THEN 'second' WHEN interval '1 minute' THEN 'minute'
                                               WHEN interval '1 hour' THEN 'hour' WHEN interval '1 day' THEN 'day'
                                               WHEN interval '7 days' THEN 'week' ELSE v_limits.per::text END,
                             v_limits.max_runs);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION office._agent_hold(text, text, boolean) IS
    'Internal: the first policy hold (budget, cooldown, run_cap) on the agent''s runs of this origin (human: budget only), when it ends by itself and what it is in words; NULLs when none holds.';
REVOKE EXECUTE ON FUNCTION office._agent_hold(text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._agent_hold(text, text, boolean) TO office_admin;

-- Internal: claim_run's record of a claim (above): nothing unless a cooldown
-- or run cap applies to the agent.
CREATE FUNCTION office._log_claim(agent_profile_id text, workspace_id text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_limits record;
BEGIN
    SELECT * INTO v_limits FROM office._agent_limits(_log_claim.agent_profile_id, _log_claim.workspace_id);
    IF v_limits.cooldown IS NULL AND v_limits.per IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO office.wake_claims AS c (agent_profile_id, claimed_at)
    VALUES (_log_claim.agent_profile_id, ARRAY[now()])
    ON CONFLICT (agent_profile_id) DO UPDATE
       SET claimed_at = ARRAY(SELECT t.at FROM unnest(c.claimed_at) AS t (at)
                               WHERE t.at > now() - v_limits.per
                               ORDER BY t.at) || now();
END
$$;
COMMENT ON FUNCTION office._log_claim(text, text) IS
    'Internal (claim_run): records a claim of the agent in office.wake_claims when a cooldown or run cap applies to it, dropping its claims older than the cap''s interval.';
REVOKE EXECUTE ON FUNCTION office._log_claim(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._log_claim(text, text) TO office_admin;

-- Internal: the removal side of the readiness lock above, shared by every
-- claimer that changes readiness rows (office._unready_agents here,
-- office._hold_agents of 34_wake_holds.sql): of these agents, those whose
-- lock it gets at once, exclusive, kept to the end of the transaction; NULL
-- for none, and always NULL outside READ COMMITTED (a stricter snapshot may
-- be older than the lock).
CREATE FUNCTION office._lock_readiness(agents text[]) RETURNS text[]
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked text[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(a.agent) INTO v_locked
      FROM unnest(_lock_readiness.agents) AS a (agent)
     WHERE pg_try_advisory_xact_lock(hashtextextended('office.runs.ready:' || a.agent, 0));
    RETURN v_locked;
END
$$;
COMMENT ON FUNCTION office._lock_readiness(text[]) IS
    'Internal (claim_run): the agents, of these, whose readiness lock this transaction gets at once, exclusive (NULL for none, and outside READ COMMITTED).';
REVOKE EXECUTE ON FUNCTION office._lock_readiness(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._lock_readiness(text[]) TO office_admin;

-- The removal of 0.4.0, its lock taken by office._lock_readiness.
CREATE OR REPLACE FUNCTION office._unready_agents(agents text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked text[] := office._lock_readiness(_unready_agents.agents);
BEGIN
    IF v_locked IS NULL THEN
        RETURN;
    END IF;
    -- Per agent, lateral probes (LIMIT 1 each; an EXISTS could become a
    -- hashed subplan over every claimed or queued run).
    WITH gone AS (
        SELECT a.agent
          FROM unnest(v_locked) AS a (agent)
          LEFT JOIN LATERAL (SELECT true AS busy FROM office.runs c
                              WHERE c.agent_profile_id = a.agent AND c.status = 'claimed'
                              LIMIT 1) c ON true
          LEFT JOIN LATERAL (SELECT true AS accepts FROM office.agent_profiles p
                              WHERE p.id = a.agent AND p.status <> ALL (office._statuses_refusing_runs())
                              LIMIT 1) p ON true
          LEFT JOIN LATERAL (SELECT true AS queued FROM office.runs q
                              WHERE q.agent_profile_id = a.agent AND q.status = 'queued'
                              LIMIT 1) q ON true
         WHERE c.busy OR p.accepts IS NULL OR q.queued IS NULL
    )
    DELETE FROM office.agent_ready r USING gone WHERE r.agent_profile_id = gone.agent;
    WITH later AS (
        SELECT a.agent
          FROM unnest(v_locked) AS a (agent)
          JOIN LATERAL (SELECT true AS queued FROM office.runs q
                         WHERE q.agent_profile_id = a.agent AND q.status = 'queued'
                         LIMIT 1) q ON true
          LEFT JOIN LATERAL (SELECT true AS due FROM office.runs d
                              WHERE d.agent_profile_id = a.agent AND d.status = 'queued'
                                AND (d.scheduled_retry_at IS NULL OR d.scheduled_retry_at <= now())
                              LIMIT 1) d ON true
         WHERE d.due IS NULL
    )
    UPDATE office.agent_ready r
       SET due_at = (SELECT min(q.scheduled_retry_at) FROM office.runs q
                      WHERE q.agent_profile_id = r.agent_profile_id AND q.status = 'queued')
      FROM later
     WHERE r.agent_profile_id = later.agent AND (r.due_at IS NULL OR r.due_at <= now());
END
$$;

-- Internal: claim_run's delay of the readiness rows of agents a policy holds
-- (30_runs.sql, office.agent_ready). Deleting them would be a stall: the
-- hold ending by time readies nobody. So they are delayed to the time the
-- hold ends by itself (for a cooldown or run cap, or earlier when a human run
-- of the agent becomes due then), and until then later claims do not look at
-- them. Under each agent's readiness lock taken exclusive with pg_try_* (a
-- busy lock leaves the rows as they are, and two claimers never wait on one
-- row), and the hold decided again in the UPDATE's own snapshot: a row it
-- can see was inserted by a commit it sees too, so a lifting change's row is
-- never delayed. Nothing under a stricter isolation, whose snapshot may be
-- older than the lock.
CREATE FUNCTION office._hold_agents(agents text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_locked text[] := office._lock_readiness(_hold_agents.agents);
BEGIN
    IF v_locked IS NULL THEN
        RETURN;
    END IF;
    WITH held AS (
        SELECT a.agent,
               CASE WHEN h.held_by = 'budget' THEN h.until
                    ELSE least(h.until, (SELECT min(q.scheduled_retry_at) FROM office.runs q
                                          WHERE q.agent_profile_id = a.agent AND q.status = 'queued'
                                            AND q.origin = 'human'))
               END AS until
          FROM unnest(v_locked) AS a (agent)
          JOIN office.agent_profiles p ON p.id = a.agent
         CROSS JOIN LATERAL office._agent_hold(a.agent, p.workspace_id, false) h
         WHERE h.held_by IS NOT NULL
    )
    UPDATE office.agent_ready r
       SET due_at = held.until
      FROM held
     WHERE r.agent_profile_id = held.agent AND held.until > now()
       AND (r.due_at IS NULL OR r.due_at < held.until);
END
$$;
COMMENT ON FUNCTION office._hold_agents(text[]) IS
    'Internal (claim_run): sets due_at of the office.agent_ready rows of these agents, where a policy holds their runs (office._agent_hold), to when the hold ends by itself; only agents whose readiness lock it gets at once, exclusive; nothing outside READ COMMITTED.';
REVOKE EXECUTE ON FUNCTION office._hold_agents(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._hold_agents(text[]) TO office_admin;

-- Internal: after a change to a policy that may have held agents (their
-- readiness rows delayed by office._hold_agents), an office.agent_ready row
-- for each agent of the scope with a queued run, inserted without a look (a
-- row is never wrong, at worst one look for a claimer), so no claimable agent
-- is left with delayed rows only.
CREATE FUNCTION office._ready_scope(scope text, scope_id text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
BEGIN
    IF _ready_scope.scope = 'agent' THEN
        INSERT INTO office.agent_ready (agent_profile_id, head_at)
        SELECT q.agent_profile_id, q.requested_at
          FROM office.runs q
         WHERE q.agent_profile_id = _ready_scope.scope_id AND q.status = 'queued'
         ORDER BY q.requested_at, q.id COLLATE "C"
         LIMIT 1;
    ELSE
        INSERT INTO office.agent_ready (agent_profile_id, head_at)
        SELECT a.id, q.requested_at
          FROM office.agent_profiles a
          JOIN LATERAL (SELECT q.requested_at FROM office.runs q
                         WHERE q.agent_profile_id = a.id AND q.status = 'queued'
                         ORDER BY q.requested_at, q.id COLLATE "C"
                         LIMIT 1) q ON true
         WHERE a.workspace_id = _ready_scope.scope_id;
    END IF;
END
$$;
COMMENT ON FUNCTION office._ready_scope(text, text) IS
    'Internal (set_wake_policy, clear_wake_policy): inserts an office.agent_ready row for the agent (scope agent) or each agent of the workspace (scope workspace) that has a queued run, head_at its oldest queued run''s requested_at.';
REVOKE EXECUTE ON FUNCTION office._ready_scope(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._ready_scope(text, text) TO office_admin;

-- The words of the holds (detail) are written with intervalstyle and datestyle
-- pinned, so they read alike whatever the session's settings.

-- The hold of one queued run, given its agent's holds: the first of paused,
-- budget, not_before, cooldown, run_cap, claimed (docs/api.md §9).
CREATE FUNCTION office._run_hold(refuses boolean, busy boolean, origin text, scheduled_retry_at timestamptz,
                                 any_hold text, any_until timestamptz, any_detail text,
                                 OUT held_by text, OUT until timestamptz, OUT detail text)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    SET intervalstyle = 'postgres'
    SET datestyle = 'ISO, YMD'
AS $$
    SELECT CASE WHEN refuses THEN 'paused'
                WHEN any_hold = 'budget' THEN 'budget'
                WHEN scheduled_retry_at > now() THEN 'not_before'
                WHEN any_hold IS NOT NULL AND origin IS DISTINCT FROM 'human' THEN any_hold
                WHEN busy THEN 'claimed'
           END,
           CASE WHEN refuses THEN NULL
                WHEN any_hold = 'budget' THEN any_until
                WHEN scheduled_retry_at > now() THEN scheduled_retry_at
                WHEN any_hold IS NOT NULL AND origin IS DISTINCT FROM 'human' THEN any_until
           END,
           CASE WHEN refuses THEN 'the agent does not accept runs'
                WHEN any_hold = 'budget' THEN any_detail
                WHEN scheduled_retry_at > now() THEN format('not before %s', scheduled_retry_at)
                WHEN any_hold IS NOT NULL AND origin IS DISTINCT FROM 'human' THEN any_detail
                WHEN busy THEN 'the agent has a claimed run'
           END
$$;
COMMENT ON FUNCTION office._run_hold(boolean, boolean, text, timestamptz, text, timestamptz, text) IS
    'Internal (explain_agent, office.governance_stats): what holds a queued run, given whether its agent refuses runs or holds a claim and the agent''s first policy hold for non-human runs: the first of paused, budget, not_before, cooldown, run_cap, claimed, with until and detail; NULLs when claimable.';
REVOKE EXECUTE ON FUNCTION office._run_hold(boolean, boolean, text, timestamptz, text, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_hold(boolean, boolean, text, timestamptz, text, timestamptz, text)
    TO office_admin;

CREATE FUNCTION office.explain_agent(agent_profile_id text, max_rows int DEFAULT 50)
    RETURNS TABLE (run_id text, status text, claimable boolean, held_by text, until timestamptz, detail text)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET intervalstyle = 'postgres'
    SET datestyle = 'ISO, YMD'
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_agent   office.agent_profiles;
    v_hold    record;
    v_busy    boolean;
    v_refuses boolean;
    v_left    int;
BEGIN
    IF explain_agent.max_rows IS NULL OR explain_agent.max_rows < 1 OR explain_agent.max_rows > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_rows must be an integer from 1 to 10000, not %s',
                             coalesce(explain_agent.max_rows::text, 'NULL'));
    END IF;
    SELECT a.* INTO v_agent FROM office.agent_profiles a WHERE a.id = explain_agent.agent_profile_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01',
            MESSAGE = format('agent %s not found', coalesce(quote_literal(left(explain_agent.agent_profile_id, 80)), 'NULL'));
    END IF;
    v_refuses := v_agent.status = ANY (office._statuses_refusing_runs());
    SELECT * INTO v_hold FROM office._agent_hold(v_agent.id, v_agent.workspace_id, false);
    RETURN QUERY
    SELECT c.id, c.status, false, NULL::text, NULL::timestamptz,
           format('claimed by %s at %s, attempt %s', coalesce(c.claimed_by, 'a worker'), c.claimed_at, c.attempt)
      FROM office.runs c
     WHERE c.agent_profile_id = v_agent.id AND c.status = 'claimed';
    v_busy := FOUND;
    v_left := explain_agent.max_rows - (CASE WHEN v_busy THEN 1 ELSE 0 END);
    -- Priority DESC, then age: the runs of priority above 0 and below 0 from
    -- idx_run_agent_queued_priority (which holds only those), the everyday
    -- ones of priority 0 from idx_run_agent_queued in age order, each part
    -- read in order and cut at max_rows, so a long backlog is never sorted.
    RETURN QUERY
    SELECT q.id, q.status, h.held_by IS NULL, h.held_by, h.until, h.detail
      FROM (SELECT u.* FROM ((SELECT 1 AS part, q.* FROM office.runs q
              WHERE q.agent_profile_id = v_agent.id AND q.status = 'queued' AND q.priority > 0
              ORDER BY q.priority DESC, q.requested_at, q.id COLLATE "C"
              LIMIT v_left)
            UNION ALL
            (SELECT 2, q.* FROM office.runs q
              WHERE q.agent_profile_id = v_agent.id AND q.status = 'queued' AND q.priority = 0
              ORDER BY q.requested_at, q.id COLLATE "C"
              LIMIT v_left)
            UNION ALL
            (SELECT 3, q.* FROM office.runs q
              WHERE q.agent_profile_id = v_agent.id AND q.status = 'queued' AND q.priority < 0
              ORDER BY q.priority DESC, q.requested_at, q.id COLLATE "C"
              LIMIT v_left)
            ) AS u
             ORDER BY u.part, u.priority DESC, u.requested_at, u.id COLLATE "C"
             LIMIT v_left) AS q
     CROSS JOIN LATERAL office._run_hold(v_refuses, v_busy, q.origin, q.scheduled_retry_at,
                                         v_hold.held_by, v_hold.until, v_hold.detail) h
     ORDER BY q.part, q.priority DESC, q.requested_at, q.id COLLATE "C";
END
$$;
COMMENT ON FUNCTION office.explain_agent(text, int) IS
    'Why the agent''s runs are or are not claimable: its claimed run first (claimable false), then its queued runs by priority DESC, requested_at, id, at most max_rows rows (1-10000, else 22023), each with claimable and what holds it (the first of paused, budget, not_before, cooldown, run_cap, claimed; NULL when claimable), until when the hold ends where known, and detail in words. Unknown agent OFA01.';
REVOKE EXECUTE ON FUNCTION office.explain_agent(text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.explain_agent(text, int)
    TO office_producer, office_worker, office_reader, office_admin;

-- Queued runs held now, by agent and hold, in explain_agent's words (a claim
-- in progress is not counted: it holds the agent's other runs by design).
-- Each agent's policy holds are decided once, then each run's own. A view
-- over a SECURITY DEFINER function, so that readers need no access to the
-- tables and functions it reads.
CREATE FUNCTION office._governance_stats()
    RETURNS TABLE (agent_profile_id text, held_by text, runs bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
    SELECT a.id, h.held_by, count(*)::bigint
      FROM office.agent_profiles a
     CROSS JOIN LATERAL office._agent_hold(a.id, a.workspace_id, false) g
      JOIN office.runs q ON q.agent_profile_id = a.id AND q.status = 'queued'
     CROSS JOIN LATERAL office._run_hold(a.status = ANY (office._statuses_refusing_runs()), false, q.origin,
                                         q.scheduled_retry_at, g.held_by, g.until, g.detail) h
     WHERE h.held_by IS NOT NULL
       AND EXISTS (SELECT FROM office.runs e WHERE e.agent_profile_id = a.id AND e.status = 'queued')
     GROUP BY a.id, h.held_by
$$;
COMMENT ON FUNCTION office._governance_stats() IS
    'Internal (office.governance_stats): queued runs held now, by agent and hold.';
REVOKE EXECUTE ON FUNCTION office._governance_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._governance_stats() TO office_reader, office_admin;

CREATE VIEW office.governance_stats AS
SELECT s.agent_profile_id, s.held_by, s.runs FROM office._governance_stats() AS s;
REVOKE ALL ON TABLE office.governance_stats FROM PUBLIC;
GRANT SELECT ON TABLE office.governance_stats TO office_reader, office_admin;
COMMENT ON VIEW office.governance_stats IS
    'Queued runs held now, by agent and hold (paused, budget, not_before, cooldown, run_cap; a claim in progress not counted), in explain_agent''s words.';

-- === lineage of internal producers (35_governance.sql, 40_tasks.sql, 45_events.sql, 60_parent_wake.sql) ===

CREATE OR REPLACE FUNCTION office._actor_lineage(agent_profile_id text, OUT origin text, OUT cause_run_id text)
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

CREATE OR REPLACE FUNCTION office._wake(agent_profile_id text, reason text, payload jsonb,
                             idempotency_key text, task_id text)
    RETURNS office.enqueue_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_status  text;
    v_result  office.enqueue_result;
    v_lineage record;
BEGIN
    SELECT a.status INTO v_status
      FROM office.agent_profiles a
     WHERE a.id = _wake.agent_profile_id
       FOR SHARE;
    IF NOT FOUND OR v_status = ANY (office._statuses_refusing_runs()) THEN
        v_result := ('skipped', NULL, NULL);
        RETURN v_result;
    END IF;
    SELECT * INTO v_lineage FROM office._actor_lineage(_wake.agent_profile_id);
    RETURN office.enqueue_run(agent_profile_id => _wake.agent_profile_id,
                              reason           => _wake.reason,
                              payload          => _wake.payload,
                              idempotency_key  => _wake.idempotency_key,
                              task_id          => _wake.task_id,
                              origin           => v_lineage.origin,
                              cause_run_id     => v_lineage.cause_run_id);
END
$$;
COMMENT ON FUNCTION office._wake(text, text, jsonb, text, text) IS
    'Internal: enqueue_run for an internal producer, its origin and cause from the setting office.actor (office._actor_lineage); a missing agent or one that does not accept runs is (skipped, NULL, NULL) instead of an error.';
REVOKE EXECUTE ON FUNCTION office._wake(text, text, jsonb, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._wake(text, text, jsonb, text, text) TO office_admin;

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
    -- restored once the wake below has read it too (a plain UPDATE later in
    -- the transaction has none).
    v_actor := current_setting('office.actor', true);
    PERFORM set_config('office.actor',
                       jsonb_build_object('id', assign_task.actor_id, 'type', assign_task.actor_type)::text,
                       true);
    UPDATE office.tasks t
       SET assignee_agent_profile_id = v_new
     WHERE t.id = assign_task.task_id
    RETURNING t.assignment_generation INTO v_gen;

    IF v_new IS NOT NULL AND v_office THEN
        v_run := office._wake(v_new, 'task_assigned', jsonb_build_object('assignment_generation', v_gen),
                              office.assignment_key(assign_task.task_id, v_new, v_gen),
                              assign_task.task_id);
    END IF;
    PERFORM set_config('office.actor', coalesce(v_actor, ''), true);
    v_result := (v_gen, v_prev IS NOT NULL AND v_prev IS DISTINCT FROM v_new,
                 v_run.outcome, v_run.dedup_kind, v_run.run_id);
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office.assign_task(text, text, text, text) IS
    'Writes the assignee (NULL or '''' unassigns): the generation goes up by one and the value this call committed is returned; interrupt when a different, non-empty assignee is replaced; an Office task with an assignee gets a task_assigned run keyed assignment_key(task, assignee, generation) (skipped when the agent does not accept runs). Unknown task OFT01, unknown agent OFA01, an agent of another workspace OFW01, bad actor_type or an actor_id over 200 characters 22023.';
REVOKE EXECUTE ON FUNCTION office.assign_task(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.assign_task(text, text, text, text) TO office_producer, office_admin;

CREATE OR REPLACE FUNCTION office._tasks_event_assigned() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_actor   jsonb := office._event_actor();
    v_lineage record;
BEGIN
    IF TG_OP = 'INSERT' AND NEW.assignee_agent_profile_id IS NULL THEN
        RETURN NULL;
    END IF;
    -- Worked out now: by delivery the actor's claim may have ended.
    SELECT * INTO v_lineage FROM office._actor_lineage(NEW.assignee_agent_profile_id);
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
                'db_user', session_user,
                'origin', v_lineage.origin,
                'cause_run_id', v_lineage.cause_run_id));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._tasks_event_assigned() IS
    'Trigger: appends task.assigned (task_id, workspace_id, agent_profile_id, assignment_generation, previous_agent_profile_id, is_office, actor, db_user, origin, cause_run_id) on every write of the assignee and on an insert with one; a malformed office.actor setting is 22023.';
REVOKE EXECUTE ON FUNCTION office._tasks_event_assigned() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_event_assigned() TO office_admin;

CREATE OR REPLACE FUNCTION office.reconcile_parent(parent_task_id text, child_set_key text, newest_child_updated_at text)
    RETURNS office.reconcile_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_parent   text := reconcile_parent.parent_task_id;
    v_assignee text;
    v_status   text;
    v_set      text;
    v_gen      text;
    v_live     bigint;
    v_open     bigint;
    v_marks    bigint[];
    v_op       text;
    v_writer   text;
    v_run      office.enqueue_result;
    v_result   office.reconcile_result;
BEGIN
    IF reconcile_parent.child_set_key IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('child_set_key of parent %s must not be NULL', coalesce(quote_literal(v_parent), 'NULL'));
    END IF;
    IF reconcile_parent.newest_child_updated_at IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('newest_child_updated_at of parent %s must not be NULL',
                             coalesce(quote_literal(v_parent), 'NULL'));
    END IF;
    PERFORM office._require_task(v_parent);
    -- The edge path's lock: a child completing now waits for this delivery
    -- (and reads after it), and this delivery reads after such a child.
    PERFORM office._xact_lock(office._lock_key('tasks.children', v_parent));

    -- The assignee, re-checked; its row is share-locked so that its status
    -- stays as read until commit.
    SELECT p.assignee_agent_profile_id INTO v_assignee FROM office.tasks p WHERE p.id = v_parent;
    IF NOT FOUND THEN
        PERFORM office._require_task(v_parent);
    END IF;
    IF v_assignee IS NOT NULL THEN
        SELECT a.status INTO v_status FROM office.agent_profiles a WHERE a.id = v_assignee FOR SHARE;
    END IF;
    IF v_status IS NULL OR v_status = ANY (office._statuses_refusing_runs()) THEN
        v_result := (v_parent, false, NULL, 'skipped', NULL, NULL, 'assignee_unresolved');
        RETURN v_result;
    END IF;

    -- The child set re-read (a fresh snapshot, after the lock), with the
    -- marks this read accounts for.
    SELECT w.child_set_key, w.newest_child_updated_at, w.live_children, w.open_children,
           (SELECT array_agg(m.id) FROM office.parent_wake_marks m WHERE m.parent_task_id = v_parent)
      INTO v_set, v_gen, v_live, v_open, v_marks
      FROM office._child_wave(v_parent) AS w;
    IF v_set <> reconcile_parent.child_set_key
       OR v_gen <> reconcile_parent.newest_child_updated_at
       OR v_live = 0 OR v_open > 0 THEN
        v_result := (v_parent, false, NULL, 'skipped', NULL, NULL, 'child_set_changed');
        RETURN v_result;
    END IF;

    v_op := office.wake_operation_id(v_parent, v_set, v_gen);
    v_run := office._wake(v_assignee, 'task_children_completed',
                          jsonb_build_object('child_set_key', v_set, 'child_generation', v_gen,
                                             'operation_id', v_op),
                          v_op, v_parent);
    IF v_run.outcome = 'skipped' THEN
        v_result := (v_parent, false, NULL, 'skipped', NULL, NULL, 'assignee_unresolved');
        RETURN v_result;
    END IF;
    -- The loop guard refused it (docs/api.md §9): no run, so no receipt.
    IF v_run.outcome = 'guarded' THEN
        v_result := (v_parent, false, NULL, 'guarded', NULL, NULL, 'guarded');
        RETURN v_result;
    END IF;

    v_writer := current_setting('office.parent_wake.writer', true);
    PERFORM set_config('office.parent_wake.writer', 'reconcile_parent', true);
    INSERT INTO office.parent_child_wake_receipts AS r
           (parent_task_id, child_set_key, delivered_run_id, delivery_operation_id, delivered_at,
            child_generation)
    VALUES (v_parent, v_set, v_run.run_id, v_op, now(), v_gen)
    ON CONFLICT ON CONSTRAINT parent_child_wake_receipts_pkey DO UPDATE
       SET child_set_key = excluded.child_set_key,
           delivered_run_id = excluded.delivered_run_id,
           delivery_operation_id = excluded.delivery_operation_id,
           delivered_at = excluded.delivered_at,
           child_generation = excluded.child_generation;
    PERFORM set_config('office.parent_wake.writer', coalesce(v_writer, ''), true);

    -- Forget the marks the re-read accounted for (a later one stays; one that
    -- another sweep is deleting is skipped, never waited for).
    DELETE FROM office.parent_wake_marks m
     WHERE m.id IN (SELECT k.id FROM office.parent_wake_marks k
                     WHERE k.id = ANY (v_marks)
                       FOR UPDATE SKIP LOCKED);

    v_result := (v_parent, true, v_op, v_run.outcome, v_run.dedup_kind, v_run.run_id, NULL);
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office.reconcile_parent(text, text, text) IS
    'Wakes one stuck parent: under the edge path''s lock on the parent, re-checks its assignee (skipped, assignee_unresolved) and re-reads its child set and generation (skipped, child_set_changed, unless they equal the arguments and form a finished wave), then enqueues task_children_completed (task_id = the parent) keyed wake_operation_id(parent, child_set_key, generation) and upserts the receipt with the run it landed on (queued, deduped or coalesced), in one transaction; a wake the loop guard refuses writes no receipt (guarded, skipped_reason guarded). Unknown parent OFT01; NULL set or generation 22023.';
REVOKE EXECUTE ON FUNCTION office.reconcile_parent(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.reconcile_parent(text, text, text) TO office_producer, office_admin;

COMMENT ON TYPE office.reconcile_result IS
    'Result of office.reconcile_parent: delivered when a receipt was written; operation_id the wake key; outcome queued|deduped|coalesced (the run the wake landed on) or skipped (run_id NULL, skipped_reason assignee_unresolved or child_set_changed), or guarded (the loop guard: run_id NULL, skipped_reason guarded).';

-- === documents named in the catalog ========================================
-- The contract and the domain notes live in the repository since 0.5.0
-- (docs/api.md, docs/domain.md): the comments and the one function body that
-- cite them name those paths.
CREATE OR REPLACE FUNCTION office._tasks_terminal_effects() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_terminal text;
    v_blocked  text;
    v_ids      text[];
    v_ready    boolean;
    v_assignee text;
    v_key      text;
    v_set      text;
    v_gen      text;
    v_msg      text;
BEGIN
    IF NEW.state IS NOT DISTINCT FROM OLD.state
       OR NEW.state <> ALL (office._task_terminal_states()) THEN
        RETURN NULL;
    END IF;

    -- (1) Close the routine run linked to the task, before anyone is woken
    -- (a dependent routine fire must not see a stale task_created gate).
    -- office.sync_routine_run_status is created later, by 55_routines.sql:
    -- PL/pgSQL resolves the call when it runs. A failure there is reported,
    -- not allowed to undo the move (docs/domain.md §2.15).
    v_terminal := CASE NEW.state WHEN 'COMPLETED' THEN 'done'
                                 WHEN 'FAILED' THEN 'failed'
                                 ELSE 'cancelled' END;
    BEGIN
        PERFORM office.sync_routine_run_status(NEW.id, v_terminal);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        RAISE WARNING 'sync routine run status of task % (%): %', NEW.id, v_terminal, v_msg;
    END;

    -- (2) Wake each dependent whose blockers are now all terminal (FAILED
    -- counts). Lock, then re-read: see the header on lost wakes.
    FOR v_blocked IN
        SELECT b.task_id FROM office.task_blockers b
         WHERE b.blocker_task_id = NEW.id
         ORDER BY b.task_id COLLATE "C"
    LOOP
        PERFORM office._xact_lock(office._lock_key('tasks.blockers', v_blocked));
        SELECT array_agg(b.blocker_task_id ORDER BY b.blocker_task_id COLLATE "C"),
               bool_and(coalesce(t.state = ANY (office._task_terminal_states()), false)),
               (SELECT d.assignee_agent_profile_id FROM office.tasks d WHERE d.id = v_blocked)
          INTO v_ids, v_ready, v_assignee
          FROM office.task_blockers b
          LEFT JOIN office.tasks t ON t.id = b.blocker_task_id
         WHERE b.task_id = v_blocked;
        CONTINUE WHEN v_ids IS NULL OR NOT v_ready OR v_assignee IS NULL;
        PERFORM office._wake(v_assignee, 'task_blockers_resolved',
                             jsonb_build_object('resolved_blocker_task_id', NEW.id,
                                                'blocker_task_ids', to_jsonb(v_ids)),
                             office.blockers_resolved_key(v_blocked, v_ids),
                             v_blocked);
    END LOOP;

    -- (3) Wake the parent when all its children (archived ones included) are
    -- COMPLETED or CANCELLED: FAILED does not complete a parent. The edge
    -- path writes no receipt. Lock the parent, then read the whole wave in
    -- one statement.
    IF NEW.parent_id IS NOT NULL AND NEW.state = ANY (office._task_done_states()) THEN
        PERFORM office._xact_lock(office._lock_key('tasks.children', NEW.parent_id));
        SELECT p.assignee_agent_profile_id, office.child_set_key(p.id), office.child_generation(p.id)
          INTO v_assignee, v_set, v_gen
          FROM office.tasks p
         WHERE p.id = NEW.parent_id
           AND p.is_office
           AND p.archived_at IS NULL
           AND p.assignee_agent_profile_id IS NOT NULL
           AND NOT EXISTS (SELECT FROM office.tasks c
                            WHERE c.parent_id = p.id AND c.state <> ALL (office._task_done_states()));
        -- Only archived children: no wave to report (the sweep skips them too).
        IF FOUND AND v_set <> '' THEN
            v_key := office.wake_operation_id(NEW.parent_id, v_set, v_gen);
            PERFORM office._wake(v_assignee, 'task_children_completed',
                                 jsonb_build_object('child_set_key', v_set, 'child_generation', v_gen,
                                                    'operation_id', v_key),
                                 v_key, NEW.parent_id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION office.assignment_key(text, text, bigint) IS
    'Run key of an assignment occurrence: task_assigned:<task_id>:<agent_profile_id>:<generation> '
    '(docs/domain.md §3.1). NULL in, NULL out; empty id or negative generation is 22023.';

COMMENT ON FUNCTION office.comment_key(text, text) IS
    'Run key of a comment''s wake of an agent: task_comment:<comment_id>:<agent_profile_id>; a run with '
    'such a key never coalesces (docs/api.md §3). NULL in, NULL out; an empty id is 22023.';

COMMENT ON FUNCTION office.blocker_digest(text[]) IS
    'Lowercase hex SHA-256 of the blocker ids sorted bytewise (COLLATE "C") and joined with "," '
    '(docs/domain.md §3.2). An empty array is the digest of the empty string; an empty or NULL '
    'element is 22023.';

COMMENT ON FUNCTION office.blockers_resolved_key(text, text[]) IS
    'Engine operation id of a blockers-resolved wave: blockers_resolved:<blocked_task_id>:'
    '<blocker_digest(blocker_ids)> (docs/domain.md §3.3).';

COMMENT ON FUNCTION office.wake_operation_id(text, text, text) IS
    'Engine operation id of a children-completed wave: task_children_completed:<parent_task_id>:'
    '<sha256hex(parent \0 child ids \0 generation)>; child ids are the child_set_key items '
    'without their last ":" segment (docs/domain.md §3.5).';

COMMENT ON FUNCTION office.second_precision_text(timestamptz) IS
    'The instant as YYYY-MM-DD HH24:MI:SS in UTC (truncated to whole seconds), whatever the '
    'session TimeZone (docs/domain.md §2.22, §3.10).';

COMMENT ON FUNCTION office.routine_fingerprint(text, text, text) IS
    'Routine dispatch fingerprint: the first 16 bytes of sha256(title|description|assignee) as 32 '
    'lowercase hex characters (docs/domain.md §3.9). Empty texts are allowed.';

COMMENT ON FUNCTION office.routine_key(text, text, text, timestamptz, text, text) IS
    'Routine wakeup key (docs/domain.md §3.8): routine:<routine_id>:<source>:<explicit_key> for a '
    'non-empty explicit key; cron with a claimed tick routine:<routine_id>:<trigger_id>:tick:'
    '<unix seconds, floor>; manual/webhook routine:<routine_id>:run:<routine_run_id>; otherwise '
    'NULL (keyless). Never raises for an unknown source.';

COMMENT ON FUNCTION office.child_set_key(text) IS
    'id:STATE of the non-archived children of the parent, ordered by id (bytewise), joined with ","; '''' if none (docs/domain.md §3.4).';

COMMENT ON FUNCTION office.child_generation(text) IS
    'second_precision_text(max(updated_at)) over the non-archived children of the parent (UTC); '''' if none (docs/domain.md §2.19).';

COMMENT ON VIEW office._parent_wake_candidates IS
    'Internal: Office parents (not archived, not ephemeral, not COMPLETED/CANCELLED) with an assignee that accepts runs, at least one non-archived child and all non-archived children COMPLETED/CANCELLED, whose receipt is missing, for another child set key, lost its evidence (legacy) or has another child generation (docs/domain.md §2.20 rules 1-4, 6, 7).';

COMMENT ON VIEW office._parent_wake_stuck IS
    'Internal: the candidates of office._parent_wake_candidates with no task_children_completed run in flight or terminal at/after the newest child change (docs/domain.md §2.20 rule 8): the stuck parents.';

COMMENT ON FUNCTION office.list_stuck_parents(int, text) IS
    'Parents whose finished child wave was not delivered (every candidate condition of docs/domain.md §2.20, applied before the LIMIT), ordered by parent id (bytewise): parent, assignee, step, child_set_key, newest_child_updated_at. Read from the parents marked since they were last found delivered, leaving out those the sweep set aside (office.poison); another reason than task_children_completed reads every open parent. Negative max_rows or empty reason 22023.';

-- === version ==================================================================

CREATE OR REPLACE FUNCTION office.schema_version() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '0.5.0';

-- === native helpers (95_native.sql) ==========================================
-- enqueue_run, claim_run, finish_run and _ready_agents were replaced by
-- their PL/pgSQL definitions above, and _run_row_valid made anew: where the
-- library is installed and its ABI version is the schema's (the handshake of
-- 95_native.sql, after the version above), keep enqueue_run's and
-- claim_run's bodies as the ones their C definitions hand calls to, and bind
-- the C definitions again. office._native_binding() records the result.
DO $native$
DECLARE
    v_schema  text := office.schema_version();
    v_library text;
    v_binding text;
BEGIN
    BEGIN
        CREATE FUNCTION pg_temp.office_abi_version() RETURNS text
            LANGUAGE c STRICT
            AS '$libdir/office', 'office_abi_version';
        v_library := pg_temp.office_abi_version();
        DROP FUNCTION pg_temp.office_abi_version();
    EXCEPTION
        WHEN undefined_file THEN
            v_binding := 'PL/pgSQL only: the office library is not installed on this server';
        WHEN insufficient_privilege THEN
            v_binding := 'PL/pgSQL only: the installing role may not create C functions (not a superuser)';
        WHEN undefined_function THEN
            v_library := 'older than 0.5.0 (it has no ABI version)';
    END;
    IF v_binding IS NULL AND v_library IS DISTINCT FROM v_schema THEN
        v_binding := pg_catalog.format('PL/pgSQL only: the office library is version %s, the schema %s',
                                       v_library, v_schema);
        RAISE WARNING 'office: %', v_binding
            USING HINT = 'Install the library built with these scripts (make install), then reinstall or update the extension.';
    END IF;
    IF v_binding IS NULL THEN
        BEGIN
            EXECUTE pg_catalog.format(
                $create$CREATE OR REPLACE FUNCTION office._enqueue_run_plpgsql(agent_profile_id text, reason text, payload jsonb,
                         idempotency_key text, task_id text, entry_triggered boolean,
                         keyless_cause text, keyless_detail text, origin text, cause_run_id text,
                         priority int, not_before timestamptz)
                     RETURNS office.enqueue_result
                     LANGUAGE plpgsql VOLATILE SECURITY DEFINER
                     SET search_path = pg_catalog, pg_temp
                     SET enable_seqscan = off
                     AS %L$create$,
                (SELECT p.prosrc FROM pg_catalog.pg_proc p
                  WHERE p.oid = 'office.enqueue_run(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz)'::pg_catalog.regprocedure));
            COMMENT ON FUNCTION office._enqueue_run_plpgsql(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz) IS
                'Internal: the PL/pgSQL definition of office.enqueue_run, to which its C definition hands the calls it does not decide itself (sql/95_native.sql).';
            REVOKE EXECUTE ON FUNCTION office._enqueue_run_plpgsql(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz) FROM PUBLIC;
            GRANT EXECUTE ON FUNCTION office._enqueue_run_plpgsql(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz)
                TO office_admin;
            CREATE OR REPLACE FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb DEFAULT '{}',
                                                          idempotency_key text DEFAULT NULL, task_id text DEFAULT NULL,
                                                          entry_triggered boolean DEFAULT false,
                                                          keyless_cause text DEFAULT NULL, keyless_detail text DEFAULT NULL,
                                                          origin text DEFAULT NULL, cause_run_id text DEFAULT NULL,
                                                          priority int DEFAULT 0, not_before timestamptz DEFAULT NULL)
                RETURNS office.enqueue_result
                LANGUAGE c VOLATILE SECURITY DEFINER
                AS '$libdir/office', 'office_enqueue_run';
            EXECUTE pg_catalog.format(
                $create$CREATE OR REPLACE FUNCTION office._claim_run_plpgsql(worker_id text, agent_profile_id text)
                     RETURNS SETOF office.runs
                     LANGUAGE plpgsql VOLATILE SECURITY DEFINER
                     SET search_path = pg_catalog, pg_temp
                     SET enable_seqscan = off
                     SET enable_bitmapscan = off
                     AS %L$create$,
                (SELECT p.prosrc FROM pg_catalog.pg_proc p
                  WHERE p.oid = 'office.claim_run(text, text)'::pg_catalog.regprocedure));
            COMMENT ON FUNCTION office._claim_run_plpgsql(text, text) IS
                'Internal: the PL/pgSQL definition of office.claim_run, to which its C definition hands a worker_id it refuses and every call while a policy that can hold a run exists or a queued run has a priority other than 0 (sql/95_native.sql).';
            REVOKE EXECUTE ON FUNCTION office._claim_run_plpgsql(text, text) FROM PUBLIC;
            GRANT EXECUTE ON FUNCTION office._claim_run_plpgsql(text, text) TO office_admin;
            CREATE OR REPLACE FUNCTION office.claim_run(worker_id text DEFAULT NULL, agent_profile_id text DEFAULT NULL)
                RETURNS SETOF office.runs
                LANGUAGE c VOLATILE SECURITY DEFINER
                AS '$libdir/office', 'office_claim_run';
            CREATE OR REPLACE FUNCTION office.finish_run(run_id text, attempt int, worker_id text DEFAULT NULL)
                RETURNS boolean
                LANGUAGE c VOLATILE SECURITY DEFINER
                AS '$libdir/office', 'office_finish_run';
            CREATE OR REPLACE FUNCTION office._run_row_valid(status text, reason text, payload jsonb, idempotency_key text,
                                                             origin text, chain_depth int, priority int)
                RETURNS boolean
                LANGUAGE c IMMUTABLE PARALLEL SAFE
                AS '$libdir/office', 'office_run_row_valid';
            CREATE OR REPLACE FUNCTION office._ready_agents() RETURNS trigger
                LANGUAGE c VOLATILE SECURITY DEFINER
                AS '$libdir/office', 'office_ready_agents';
            v_binding := pg_catalog.format('native: library %s = schema %s', v_library, v_schema);
        EXCEPTION WHEN undefined_file OR undefined_function OR insufficient_privilege THEN
            v_binding := pg_catalog.format('PL/pgSQL only: binding the library failed: %s', SQLERRM);
        END;
    END IF;
    EXECUTE pg_catalog.format(
        $create$CREATE OR REPLACE FUNCTION office._native_binding() RETURNS text
             LANGUAGE sql IMMUTABLE
             SET search_path = pg_catalog, pg_temp
             RETURN %L$create$, v_binding);
END
$native$;
COMMENT ON FUNCTION office._native_binding() IS
    'Internal: which definitions serve the hot path, as the install found it: "native: library V = schema V", or "PL/pgSQL only: " and why (sql/95_native.sql; officectl doctor reports it).';
REVOKE EXECUTE ON FUNCTION office._native_binding() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._native_binding() TO office_producer, office_worker, office_reader, office_admin;
