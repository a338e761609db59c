-- office: the native definitions of hot-path helpers (sql/office.c).
--
-- Where the library is installed (the PGXS install with the server's
-- headers), these replace the PL/pgSQL definitions of the same functions
-- made earlier in this script: same name, arguments, result and behaviour,
-- minus the cost of a PL/pgSQL call and its SET search_path clause, which
-- every write of office.runs paid per row (docs/benchmarks.md, "Hot path,
-- issue 13, sixth pass"). They resolve no names, so they set no search_path.
-- Where it is not (a managed PostgreSQL, officectl migrate without
-- superuser, an install without the headers), or is a library without these
-- symbols, nothing changes: the PL/pgSQL definitions serve, and the suite
-- runs against both (PostgreSQL 15 with the library, the embedded 18 without).
-- CREATE OR REPLACE keeps each function's grants and comment.
DO $native$
BEGIN
    CREATE OR REPLACE FUNCTION office._uuid_v7() RETURNS text
        LANGUAGE c VOLATILE PARALLEL SAFE
        AS '$libdir/office', 'office_uuid_v7';
    CREATE OR REPLACE FUNCTION office._run_row_valid(status text, reason text, payload jsonb, idempotency_key text)
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
EXCEPTION WHEN undefined_file OR undefined_function OR insufficient_privilege THEN
    NULL;
END
$native$;
