-- office: the native definitions of hot-path functions (sql/native/).
--
-- Where the library is installed (the PGXS install with the server's
-- headers), these replace the PL/pgSQL definitions of the same functions
-- made earlier in this script: same name, arguments, result and behaviour,
-- minus the cost of a PL/pgSQL call and its SET search_path clause, which
-- every write of office.runs paid per row (docs/benchmarks.md, "Hot path").
-- They set no search_path: they resolve no names but the qualified ones of
-- their few prepared statements, whose texts name no operator either.
--
-- The handshake: the library's ABI version (sql/native/abi.c, the control
-- file's version) must equal office.schema_version(), or a stale office.so
-- exporting the same symbols would serve rules of another version. On a
-- mismatch the install raises a WARNING naming both and keeps PL/pgSQL.
-- Where the library is absent (a managed PostgreSQL, officectl migrate
-- without superuser, an install without the headers) the PL/pgSQL
-- definitions serve too, silently. office._native_binding() says which
-- serve and why (officectl doctor reports it); the suite runs against both
-- (PostgreSQL 15 with the library, the embedded 18 without).
-- CREATE OR REPLACE keeps each function's grants and comment. The block runs
-- again in an upgrade step (after the step's new schema_version()) where the
-- C definitions may serve already: the PL/pgSQL body handed on is then the
-- one kept under its other name.
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
            CREATE OR REPLACE FUNCTION office._uuid_v7() RETURNS text
                LANGUAGE c VOLATILE PARALLEL SAFE
                AS '$libdir/office', 'office_uuid_v7';
            CREATE OR REPLACE FUNCTION office._run_row_valid(status text, reason text, payload jsonb, idempotency_key text,
                                                             origin text, chain_depth int, priority int)
                RETURNS boolean
                LANGUAGE c IMMUTABLE PARALLEL SAFE
                AS '$libdir/office', 'office_run_row_valid';
            CREATE OR REPLACE FUNCTION office._ready_agents() RETURNS trigger
                LANGUAGE c VOLATILE SECURITY DEFINER
                AS '$libdir/office', 'office_ready_agents';
            CREATE OR REPLACE FUNCTION office._signal_runs(agent_profile_ids text[], run_ids text[]) RETURNS void
                LANGUAGE c VOLATILE
                AS '$libdir/office', 'office_signal_runs';
            CREATE OR REPLACE FUNCTION office._check_short_text(what text, value text) RETURNS text
                LANGUAGE c IMMUTABLE PARALLEL SAFE
                AS '$libdir/office', 'office_check_short_text';
            CREATE OR REPLACE FUNCTION office._count_dedup(queue text, reason text, kind text) RETURNS void
                LANGUAGE c VOLATILE SECURITY DEFINER
                AS '$libdir/office', 'office_count_dedup';
            -- enqueue_run's C definition decides the calls most are (a valid request
            -- with its locks free and the windows at their defaults that is a served
            -- key's dedup, a coalesce or a plain insert) and hands every other call
            -- unchanged to the PL/pgSQL definition, kept here under another name.
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
                  WHERE p.oid IN (pg_catalog.to_regprocedure('office.enqueue_run(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz)'),
                                  pg_catalog.to_regprocedure('office._enqueue_run_plpgsql(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz)'))
                    AND p.prolang = (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname = 'plpgsql')
                  ORDER BY p.proname = 'enqueue_run' DESC LIMIT 1));
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
            -- claim_run's C definition follows the same steps (sql/native/claim.c) and
            -- hands on a worker_id its PL/pgSQL definition refuses, and every call
            -- while a policy that can hold a run exists or a queued run has a priority (the holds and the
            -- priority order are PL/pgSQL's).
            EXECUTE pg_catalog.format(
                $create$CREATE OR REPLACE FUNCTION office._claim_run_plpgsql(worker_id text, agent_profile_id text)
                     RETURNS SETOF office.runs
                     LANGUAGE plpgsql VOLATILE SECURITY DEFINER
                     SET search_path = pg_catalog, pg_temp
                     SET enable_seqscan = off
                     SET enable_bitmapscan = off
                     AS %L$create$,
                (SELECT p.prosrc FROM pg_catalog.pg_proc p
                  WHERE p.oid IN (pg_catalog.to_regprocedure('office.claim_run(text, text)'),
                                  pg_catalog.to_regprocedure('office._claim_run_plpgsql(text, text)'))
                    AND p.prolang = (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname = 'plpgsql')
                  ORDER BY p.proname = 'claim_run' DESC LIMIT 1));
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
