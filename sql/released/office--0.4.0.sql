\echo Use "CREATE EXTENSION office" to load this file. \quit
-- office: the schema, the roles, and the version stamp.
--
-- Everything lives in schema office, which this script creates (so it belongs
-- to the extension and goes with DROP EXTENSION). The same text
-- also installs as plain SQL through `officectl migrate` (controlplane.schema
-- strips the \echo guard and the pg_extension_config_dump calls), so every
-- statement here must be valid in both settings and must be idempotent where
-- it touches cluster-wide objects (roles are shared by all databases).

-- Nothing in this script may resolve a name through the installer's
-- search_path: SQL-standard bodies, views, defaults, constraints and indexes
-- are bound when they are created, and a planted public.convert_to(text, text)
-- or public.count(text) would otherwise be bound in place of pg_catalog's (and
-- run later, as the installer, by whoever calls or reads it). Transaction-
-- local: CREATE EXTENSION restores the caller's setting after the script, and
-- the plain path (a yoyo migration) runs in a transaction.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- CREATE EXTENSION creates schema office itself (office.control names it);
-- the plain path creates it here. Either way it must be the installer's and
-- empty: a schema planted beforehand by another role would let that role
-- replace every object installed into it.
DO $schema$
DECLARE
    v_owner oid;
BEGIN
    SELECT n.nspowner INTO v_owner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'office';
    IF NOT FOUND THEN
        CREATE SCHEMA office;
        RETURN;
    END IF;
    IF NOT v_owner IN (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname IN (session_user, current_user)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('schema office already exists and belongs to role %s, not to the installer %s',
                                        v_owner::regrole, session_user),
            HINT = 'Drop or rename that schema, then install office again.';
    END IF;
    -- Another role allowed to create in it could add an overload of an office
    -- function that a caller's untyped arguments would prefer.
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
               WHERE n.nspname = 'office' AND a.privilege_type = 'CREATE'
                 AND a.grantee <> n.nspowner) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'schema office already exists and lets roles other than its owner create in it',
            HINT = 'Revoke CREATE on schema office from them, or drop that schema, then install office again.';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.relnamespace = 'office'::regnamespace)
       OR EXISTS (SELECT FROM pg_catalog.pg_proc f WHERE f.pronamespace = 'office'::regnamespace)
       OR EXISTS (SELECT FROM pg_catalog.pg_type t WHERE t.typnamespace = 'office'::regnamespace)
       OR EXISTS (SELECT FROM pg_catalog.pg_operator o WHERE o.oprnamespace = 'office'::regnamespace) THEN
        RAISE EXCEPTION USING ERRCODE = '42P06',
            MESSAGE = 'schema office already exists and is not empty',
            HINT = 'Install office into a database without a schema named office.';
    END IF;
END
$schema$;
COMMENT ON SCHEMA office IS 'office: convergent agent-run scheduling (see office.schema_version())';

-- Roles are cluster-wide, so a second database (or a test clone) must find
-- them already there, and two databases installing office at the same moment
-- must not fail on each other's CREATE ROLE (the loser sees a unique violation
-- on pg_authid once the winner commits; tests/isolation/specs/roles_race.spec).
-- NOLOGIN: people log in as their own roles and are granted one of these.
CREATE FUNCTION office._ensure_role(role_name text) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = role_name) THEN
        RETURN false;
    END IF;
    EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', role_name);
    RETURN true;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN
        RETURN false;  -- created concurrently by another installer
END
$fn$;
COMMENT ON FUNCTION office._ensure_role(text) IS
    'Internal: create a NOLOGIN role unless it exists (safe against a concurrent installer).';
REVOKE EXECUTE ON FUNCTION office._ensure_role(text) FROM PUBLIC;

SELECT office._ensure_role(r)
FROM pg_catalog.unnest(ARRAY['office_producer', 'office_worker', 'office_reader', 'office_admin']) AS r;

-- An admin can act as every other office role.
DO $grant$
BEGIN
    IF NOT pg_catalog.pg_has_role('office_admin', 'office_producer', 'MEMBER') THEN
        GRANT office_producer, office_worker, office_reader TO office_admin;
    END IF;
END
$grant$;

-- Nobody but the owner and the office roles may even look into the schema.
REVOKE ALL ON SCHEMA office FROM PUBLIC;
GRANT USAGE ON SCHEMA office TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office.schema_version() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '0.4.0';
COMMENT ON FUNCTION office.schema_version() IS
    'The installed office schema version; every upgrade script replaces it.';
REVOKE EXECUTE ON FUNCTION office.schema_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.schema_version()
    TO office_producer, office_worker, office_reader, office_admin;
-- office: argument validation shared by every capability.
--
-- An id of a workspace, agent, task or routine is 1-200 characters with no
-- ',', no ':' and no control character: those are the separators inside keys,
-- and an id containing one would let two different occurrences share a key
-- (API.md, Conventions). The tables check it (office._is_id, the one place
-- the rule is written); functions that create an entity check it first with
-- office._check_id, which says which rule the id breaks (22023); a lookup by
-- such an id simply finds nothing.

-- PL/pgSQL, not SQL: a SQL function with a SET clause is planned again at
-- every call, and this one runs for every row written.
CREATE FUNCTION office._is_id(value text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN length(value) BETWEEN 1 AND 200 AND value !~ '[,:\u0001-\u001f\u007f-\u009f]';
END
$$;
COMMENT ON FUNCTION office._is_id(text) IS
    'Internal: whether value is a valid id (1-200 characters, no comma, colon or control character); NULL for NULL. The CHECK of every id column.';
REVOKE EXECUTE ON FUNCTION office._is_id(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._is_id(text)
    TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office._check_id(kind text, value text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL OR length(value) = 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s id must not be empty', kind);
    END IF;
    IF length(value) > 200 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s id %s is longer than 200 characters (%s)',
                             kind, quote_literal(left(value, 40) || '...'), length(value));
    END IF;
    IF NOT office._is_id(value) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s id %s contains a '','', a '':'' or a control character',
                             kind, quote_literal(value));
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_id(text, text) IS
    'Internal: returns value when it is a valid id of the given kind (1-200 characters, no comma, colon or control character), else raises 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._check_id(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_id(text, text)
    TO office_producer, office_worker, office_reader, office_admin;

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
CREATE FUNCTION office._check_interval(name text, value interval) RETURNS interval
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
CREATE FUNCTION office._window(name text, fallback interval) RETURNS interval
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

-- Generated ids are time-ordered UUIDs (RFC 9562 version 7) in text form
-- (API.md, Conventions): ids generated later sort later, bytewise, so inserts
-- into an id index stay at its right edge instead of touching random pages.
-- PostgreSQL 15 has no uuidv7(). Layout: 48 bits of Unix time in
-- milliseconds, the version nibble 7, 12 bits of sub-millisecond time (RFC
-- 9562 §6.2 method 3: the microsecond of clock_timestamp() within its
-- millisecond, scaled to 4096 steps), then the variant bits 10 and 62 random
-- bits, taken from gen_random_uuid() (which already carries that variant).
-- So ids made a microsecond or more apart sort in the order they were made;
-- two made within one microsecond (on different backends: one call takes
-- longer than that) sort at random. No state is kept: a monotonic counter
-- would cost a setting write per id, about as much as the rest of the function.
CREATE FUNCTION office._uuid_v7() RETURNS text
    LANGUAGE plpgsql VOLATILE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_us  bigint := (date_part('epoch', clock_timestamp()) * 1000000)::bigint;
    v_hex text := lpad(to_hex(v_us / 1000), 12, '0');
BEGIN
    RETURN substr(v_hex, 1, 8) || '-' || substr(v_hex, 9, 4) || '-7'
        || lpad(to_hex((v_us % 1000) * 4096 / 1000), 3, '0') || '-'
        || right(gen_random_uuid()::text, 17);
END
$$;
COMMENT ON FUNCTION office._uuid_v7() IS
    'Internal: a new time-ordered UUID (RFC 9562 version 7) as text: ids made later (a microsecond or more apart) sort later, bytewise. The default of every generated id.';
REVOKE EXECUTE ON FUNCTION office._uuid_v7() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._uuid_v7()
    TO office_producer, office_worker, office_reader, office_admin;

-- Internal: n new ids of _uuid_v7's layout at once, in increasing order, for
-- a set-based insert (enqueue_runs): one statement, where n calls of
-- _uuid_v7() cost a function call each (about 6 us, most of it the call and
-- its SET clause, against well under 1 us for the expression). The last id
-- has the current microsecond and each one before it the microsecond before,
-- so they are strictly ordered and none is from the future; the caller has
-- spent more than n microseconds on its n elements before it asks (reading
-- and checking each), so they also sort after every id it made earlier.
CREATE FUNCTION office._uuid_v7s(n int) RETURNS text[]
    LANGUAGE plpgsql VOLATILE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_us bigint := (date_part('epoch', clock_timestamp()) * 1000000)::bigint - n;
BEGIN
    RETURN ARRAY(SELECT substr(t.hex, 1, 8) || '-' || substr(t.hex, 9, 4) || '-7'
                        || lpad(to_hex((t.us % 1000) * 4096 / 1000), 3, '0') || '-'
                        || right(gen_random_uuid()::text, 17)
                   FROM (SELECT v_us + i AS us, lpad(to_hex((v_us + i) / 1000), 12, '0') AS hex
                           FROM generate_series(1, n) AS i) AS t
                  ORDER BY t.us);
END
$$;
COMMENT ON FUNCTION office._uuid_v7s(int) IS
    'Internal: n new time-ordered UUIDs (the layout of office._uuid_v7) in increasing order, the last one of the current microsecond and each earlier one a microsecond before: the ids of a set-based insert.';
REVOKE EXECUTE ON FUNCTION office._uuid_v7s(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._uuid_v7s(int) TO office_admin;
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
                                                      WHEN 'runs.claim' THEN 1 END) THEN
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
    'Internal: the name of an advisory lock, office.<kind>:<parts joined by ":"> (kinds: tasks.children, tasks.blockers, task_blockers.graph, wakeups.agent, routines.gate, runs.claim; 07_locks.sql lists who takes each); NULL when a part is NULL; an unknown kind or a wrong number of parts is 22023.';
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

-- office: the key builders of API.md §1 (formats and vectors: DOMAIN.md §3).
--
-- Pure functions: IMMUTABLE, PARALLEL SAFE, never SECURITY DEFINER, pinned to
-- search_path = pg_catalog, pg_temp so a caller's schemas cannot shadow
-- sha256/encode/to_char/|| and friends. The two SQL-standard bodies are bound
-- when they are created, before their own search_path applies, so they name
-- pg_catalog for every call and operator (ARCHITECTURE.md, principle 8). The Python twins in
-- controlplane/keys.py must return byte-identical text; both are checked
-- against tests/vectors/keys.json.
--
-- Rules shared by every builder: a NULL argument gives NULL (routine_key: a
-- NULL source or routine_id; its other arguments are optional); an empty id,
-- an empty or NULL element of blocker_ids or a negative generation is 22023.
-- The builders only concatenate: they do not police ':' or ',' inside ids
-- (that happens where an id is created).
--
-- NUL bytes appear only inside hash inputs, which are built as bytea
-- (decode('00', 'hex') is one NUL byte, independent of
-- standard_conforming_strings); PG text never holds them.

-- task_assigned:<task>:<agent>:<generation>  (DOMAIN.md §3.1)
CREATE FUNCTION office.assignment_key(task_id text, agent_profile_id text, generation bigint)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF task_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.assignment_key: task_id must not be empty (got %L)', task_id);
    END IF;
    IF agent_profile_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.assignment_key: agent_profile_id must not be empty (got %L)',
                             agent_profile_id);
    END IF;
    IF generation < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.assignment_key: generation must not be negative (got %s)',
                             generation);
    END IF;
    RETURN 'task_assigned:' || task_id || ':' || agent_profile_id || ':' || generation::text;
END
$fn$;
COMMENT ON FUNCTION office.assignment_key(text, text, bigint) IS
    'Run key of an assignment occurrence: task_assigned:<task_id>:<agent_profile_id>:<generation> '
    '(DOMAIN.md §3.1). NULL in, NULL out; empty id or negative generation is 22023.';
REVOKE EXECUTE ON FUNCTION office.assignment_key(text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.assignment_key(text, text, bigint)
    TO office_producer, office_worker, office_reader, office_admin;

-- task_comment:<comment>:<agent>  (API.md §3): the key of a comment's wake of
-- an agent. Its prefix is what enqueue_run tests to keep such a run out of
-- coalescing (office._run_locks, the coalesce lookups), so it is built
-- here rather than written by hand.
CREATE FUNCTION office.comment_key(comment_id text, agent_profile_id text)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF comment_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.comment_key: comment_id must not be empty (got %L)', comment_id);
    END IF;
    IF agent_profile_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.comment_key: agent_profile_id must not be empty (got %L)',
                             agent_profile_id);
    END IF;
    RETURN 'task_comment:' || comment_id || ':' || agent_profile_id;
END
$fn$;
COMMENT ON FUNCTION office.comment_key(text, text) IS
    'Run key of a comment''s wake of an agent: task_comment:<comment_id>:<agent_profile_id>; a run with '
    'such a key never coalesces (API.md §3). NULL in, NULL out; an empty id is 22023.';
REVOKE EXECUTE ON FUNCTION office.comment_key(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.comment_key(text, text)
    TO office_producer, office_worker, office_reader, office_admin;

-- sha256hex(join(sort_bytewise(ids), ','))  (DOMAIN.md §2.13, §3.2)
CREATE FUNCTION office.blocker_digest(blocker_ids text[])
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    bad_position bigint;
    bad_value text;
    joined text;
BEGIN
    IF array_ndims(blocker_ids) > 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.blocker_digest: blocker_ids must be one-dimensional (got %L)',
                             blocker_ids::text);
    END IF;
    SELECT u.position, u.blocker_id INTO bad_position, bad_value
      FROM unnest(blocker_ids) WITH ORDINALITY AS u(blocker_id, position)
     WHERE u.blocker_id IS NULL OR u.blocker_id = ''
     ORDER BY u.position
     LIMIT 1;
    IF bad_position IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.blocker_digest: blocker_ids element %s must be a non-empty id '
                             '(got %s in blocker_ids %L)',
                             bad_position, quote_nullable(bad_value), blocker_ids::text);
    END IF;
    SELECT string_agg(u.blocker_id, ',' ORDER BY u.blocker_id COLLATE "C") INTO joined
      FROM unnest(blocker_ids) AS u(blocker_id);
    RETURN encode(sha256(convert_to(coalesce(joined, ''), 'UTF8')), 'hex');
END
$fn$;
COMMENT ON FUNCTION office.blocker_digest(text[]) IS
    'Lowercase hex SHA-256 of the blocker ids sorted bytewise (COLLATE "C") and joined with "," '
    '(DOMAIN.md §3.2). An empty array is the digest of the empty string; an empty or NULL '
    'element is 22023.';
REVOKE EXECUTE ON FUNCTION office.blocker_digest(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.blocker_digest(text[])
    TO office_producer, office_worker, office_reader, office_admin;

-- blockers_resolved:<blocked>:<digest>  (DOMAIN.md §3.3)
CREATE FUNCTION office.blockers_resolved_key(blocked_task_id text, blocker_ids text[])
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF blocked_task_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.blockers_resolved_key: blocked_task_id must not be empty (got %L)',
                             blocked_task_id);
    END IF;
    RETURN 'blockers_resolved:' || blocked_task_id || ':' || office.blocker_digest(blocker_ids);
END
$fn$;
COMMENT ON FUNCTION office.blockers_resolved_key(text, text[]) IS
    'Engine operation id of a blockers-resolved wave: blockers_resolved:<blocked_task_id>:'
    '<blocker_digest(blocker_ids)> (DOMAIN.md §3.3).';
REVOKE EXECUTE ON FUNCTION office.blockers_resolved_key(text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.blockers_resolved_key(text, text[])
    TO office_producer, office_worker, office_reader, office_admin;

-- task_children_completed:<parent>:<sha256hex(parent \0 child-ids \0 generation)>  (DOMAIN.md §3.5)
CREATE FUNCTION office.wake_operation_id(parent_task_id text, child_set_key text, generation text)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    nul constant bytea := decode('00', 'hex');
    canonical text;
BEGIN
    IF parent_task_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.wake_operation_id: parent_task_id must not be empty (got %L)',
                             parent_task_id);
    END IF;
    -- Each non-empty element of the child set key, with everything from its
    -- last ':' removed (the state), in the order given.
    SELECT string_agg(regexp_replace(u.element, ':[^:]*$', ''), ',' ORDER BY u.position)
      INTO canonical
      FROM unnest(string_to_array(child_set_key, ',')) WITH ORDINALITY AS u(element, position)
     WHERE u.element <> '';
    RETURN 'task_children_completed:' || parent_task_id || ':'
        || encode(sha256(convert_to(parent_task_id, 'UTF8') || nul
                         || convert_to(coalesce(canonical, ''), 'UTF8') || nul
                         || convert_to(generation, 'UTF8')), 'hex');
END
$fn$;
COMMENT ON FUNCTION office.wake_operation_id(text, text, text) IS
    'Engine operation id of a children-completed wave: task_children_completed:<parent_task_id>:'
    '<sha256hex(parent \0 child ids \0 generation)>; child ids are the child_set_key items '
    'without their last ":" segment (DOMAIN.md §3.5).';
REVOKE EXECUTE ON FUNCTION office.wake_operation_id(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.wake_operation_id(text, text, text)
    TO office_producer, office_worker, office_reader, office_admin;

-- YYYY-MM-DD HH24:MI:SS in UTC, truncated  (DOMAIN.md §2.22, §3.10)
CREATE FUNCTION office.second_precision_text(ts timestamptz)
    RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN pg_catalog.to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS');
COMMENT ON FUNCTION office.second_precision_text(timestamptz) IS
    'The instant as YYYY-MM-DD HH24:MI:SS in UTC (truncated to whole seconds), whatever the '
    'session TimeZone (DOMAIN.md §2.22, §3.10).';
REVOKE EXECUTE ON FUNCTION office.second_precision_text(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.second_precision_text(timestamptz)
    TO office_producer, office_worker, office_reader, office_admin;

-- hex(sha256(title|description|assignee)[0:16])  (DOMAIN.md §3.9)
CREATE FUNCTION office.routine_fingerprint(title text, description text, assignee text)
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
COMMENT ON FUNCTION office.routine_fingerprint(text, text, text) IS
    'Routine dispatch fingerprint: the first 16 bytes of sha256(title|description|assignee) as 32 '
    'lowercase hex characters (DOMAIN.md §3.9). Empty texts are allowed.';
REVOKE EXECUTE ON FUNCTION office.routine_fingerprint(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.routine_fingerprint(text, text, text)
    TO office_producer, office_worker, office_reader, office_admin;

-- Routine wakeup key  (DOMAIN.md §3.8)
CREATE FUNCTION office.routine_key(source text, routine_id text, trigger_id text,
                                   claimed_tick timestamptz, routine_run_id text,
                                   explicit_key text DEFAULT NULL)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF source IS NULL OR routine_id IS NULL THEN
        RETURN NULL;
    END IF;
    IF routine_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.routine_key: routine_id must not be empty (got %L)', routine_id);
    END IF;
    -- An explicit (delivery) key takes precedence over the source rules.
    IF explicit_key IS NOT NULL AND explicit_key <> '' THEN
        RETURN 'routine:' || routine_id || ':' || source || ':' || explicit_key;
    END IF;
    IF source = 'cron' THEN
        -- Keyless without a claimed tick (and without a trigger to name).
        IF claimed_tick IS NULL OR trigger_id IS NULL OR trigger_id = '' THEN
            RETURN NULL;
        END IF;
        IF NOT isfinite(claimed_tick) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('office.routine_key: claimed_tick must be finite (got %L)',
                                 claimed_tick::text);
        END IF;
        RETURN 'routine:' || routine_id || ':' || trigger_id || ':tick:'
            || floor(extract(epoch FROM claimed_tick))::bigint::text;
    END IF;
    IF source IN ('manual', 'webhook') THEN
        IF routine_run_id IS NULL OR routine_run_id = '' THEN
            RETURN NULL;
        END IF;
        RETURN 'routine:' || routine_id || ':run:' || routine_run_id;
    END IF;
    -- Unknown source: keyless here; office.dispatch_routine refuses it.
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION office.routine_key(text, text, text, timestamptz, text, text) IS
    'Routine wakeup key (DOMAIN.md §3.8): routine:<routine_id>:<source>:<explicit_key> for a '
    'non-empty explicit key; cron with a claimed tick routine:<routine_id>:<trigger_id>:tick:'
    '<unix seconds, floor>; manual/webhook routine:<routine_id>:run:<routine_run_id>; otherwise '
    'NULL (keyless). Never raises for an unknown source.';
REVOKE EXECUTE ON FUNCTION office.routine_key(text, text, text, timestamptz, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.routine_key(text, text, text, timestamptz, text, text)
    TO office_producer, office_worker, office_reader, office_admin;
-- office: agent profiles (API.md §2).
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

-- --- workspaces do not mix (API.md, Conventions) ------------------------------

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
-- office: the counters behind office.dedup_stats and office.keyless_stats
-- (API.md §6; the views themselves are in 80_observability.sql).
--
-- Counting must not make concurrent enqueues wait on one counter row, and it
-- must not add a lock that two transactions can take in opposite orders (a
-- bulk enqueue counts several labels; API.md §7 promises that no two enqueue
-- calls deadlock). Each counter is striped by slot, and a transaction writes
-- only in slots it holds exclusively: office._counter_slot() takes a
-- transaction-scoped advisory lock on a free slot (trying, never waiting:
-- its backend's own pg_backend_pid() % 64 first, then the next ones). Two
-- live transactions therefore never touch one counter row, so counting never
-- waits and cannot deadlock, in any order of labels. The views sum the slots.
--
-- The tables are UNLOGGED: a transaction that writes nothing else (a windowed
-- dedup writes only its counter) then commits without waiting for a WAL
-- flush, so counting does not turn a read-only dedup into a durable write.
-- The price: after a crash (not after a clean restart) the counters start
-- again from zero, like any process-local metric would, and standbys see
-- them empty.
--
-- The label CHECKs compare with one array constant, not an IN list:
-- PostgreSQL reads a table's CHECKs again from their stored text at every
-- statement that writes it (every count), and an IN list is stored as one
-- node per element (0.4.0: 2.4 % of a deduped enqueue's instructions).

CREATE UNLOGGED TABLE office.dedup_counters (
    slot   int    NOT NULL,
    queue  text   NOT NULL CHECK (queue = ANY ('{runs,wakeup}'::text[])),
    reason text   NOT NULL,
    kind   text   NOT NULL CHECK (kind = ANY ('{windowed,durable,coalesced}'::text[])),
    total  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (slot, queue, reason, kind)
);
SELECT pg_catalog.pg_extension_config_dump('office.dedup_counters', '');
REVOKE ALL ON TABLE office.dedup_counters FROM PUBLIC;
COMMENT ON TABLE office.dedup_counters IS
    'Striped dedup/coalesce counters (one row per backend slot and label); read office.dedup_stats instead.';

CREATE UNLOGGED TABLE office.keyless_counters (
    slot   int    NOT NULL,
    reason text   NOT NULL,
    cause  text   NOT NULL CHECK (cause = ANY ('{unresolved,by_design}'::text[])),
    total  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (slot, reason, cause)
);
SELECT pg_catalog.pg_extension_config_dump('office.keyless_counters', '');
REVOKE ALL ON TABLE office.keyless_counters FROM PUBLIC;
COMMENT ON TABLE office.keyless_counters IS
    'Striped keyless-enqueue counters (one row per backend slot and label); read office.keyless_stats instead.';

-- The advisory locks of the slots live in their own space: the two-int form
-- of pg_try_advisory_xact_lock with this first key (no bigint-keyed lock of
-- office can equal a two-int one).
CREATE FUNCTION office._counter_slot() RETURNS int
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_first int := pg_backend_pid() % 64;
BEGIN
    FOR i IN 0..63 LOOP
        -- Re-taking a slot this transaction already holds succeeds at once.
        IF pg_try_advisory_xact_lock(1868981101, (v_first + i) % 64) THEN
            RETURN (v_first + i) % 64;
        END IF;
    END LOOP;
    -- More than 64 transactions counting at this moment: a slot of this
    -- backend's own (no two live backends share a pid), still never shared.
    RETURN 64 + pg_backend_pid();
END
$$;
COMMENT ON FUNCTION office._counter_slot() IS
    'Internal: a counter slot this transaction holds exclusively (a transaction-scoped advisory lock taken without waiting), so counting never waits on or deadlocks with another transaction.';
REVOKE EXECUTE ON FUNCTION office._counter_slot() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._counter_slot() TO office_admin;

CREATE FUNCTION office._count_dedup(queue text, reason text, kind text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO office.dedup_counters AS c (slot, queue, reason, kind, total)
    VALUES (office._counter_slot(), _count_dedup.queue, _count_dedup.reason, _count_dedup.kind, 1)
    ON CONFLICT (slot, queue, reason, kind) DO UPDATE SET total = c.total + 1;
END
$$;
COMMENT ON FUNCTION office._count_dedup(text, text, text) IS
    'Internal: counts one suppressed enqueue (queue runs|wakeup, kind windowed|durable|coalesced) in a slot this transaction holds (office._counter_slot).';
REVOKE EXECUTE ON FUNCTION office._count_dedup(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._count_dedup(text, text, text) TO office_admin;

CREATE FUNCTION office._count_keyless(reason text, cause text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO office.keyless_counters AS c (slot, reason, cause, total)
    VALUES (office._counter_slot(), _count_keyless.reason, _count_keyless.cause, 1)
    ON CONFLICT (slot, reason, cause) DO UPDATE SET total = c.total + 1;
END
$$;
COMMENT ON FUNCTION office._count_keyless(text, text) IS
    'Internal: counts one keyless enqueue reported with a cause (unresolved|by_design) in a slot this transaction holds (office._counter_slot).';
REVOKE EXECUTE ON FUNCTION office._count_keyless(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._count_keyless(text, text) TO office_admin;
-- office: the run queue (API.md §3).
--
-- enqueue_run decides in a fixed order: validate -> served key -> coalesce ->
-- insert. Every suppression is an outcome, never an error:
--   * served key: a run already serves the key, as its own key or as one
--     recorded when a request with it coalesced into the run, in any status
--     and whatever its age -> ('deduped', 'windowed') when the run was
--     requested (the key recorded) within office.idempotency_window, else
--     ('deduped', 'durable');
--   * coalesce: a queued run of the same bucket (agent, reason, task_id)
--     requested within office.coalesce_window absorbs the request
--     -> ('coalesced', NULL); the incoming key is recorded as served by it
--     (office.run_keys_recorded), so its redelivery is a dedup, not a run;
--   * durable: the insert meets the unbounded unique index
--     idx_run_idempotency -> ('deduped', 'durable') (a backstop: the lookup
--     above has normally answered already).
-- Concurrency. A key is served by at most one run, ever: every keyed request
-- takes a transaction-scoped advisory lock on its key before it looks the key
-- up, so requests with one key run one at a time and a waiter (READ
-- COMMITTED: a fresh snapshot per statement) finds what the holder did. A
-- coalescible request then takes the advisory lock of its bucket before the
-- coalesce lookup, so two of them never both insert into one bucket. Locks
-- are always taken keys first, then buckets, each class in ascending lock id
-- (enqueue_runs takes all of its elements' locks up front in that order), so
-- no two enqueue calls deadlock; the counters never wait (25_counters.sql).
-- Advisory locks write no WAL and cost a lock-table entry each.
-- Claims are fenced by attempt, serialised per agent without blocking, and
-- kept alive by heartbeats (heartbeat_run); recover_stale_runs requeues a
-- claim whose heartbeat (or claim, if it never beat) is older than a limit.
--
-- Plans. A queue table is often empty when it is analyzed (a fresh install,
-- a drained queue after pruning). PL/pgSQL caches a generic plan per
-- statement, and against "0 rows" statistics that plan is a sequential scan,
-- kept by every long-lived session until the next analyze: each lookup then
-- reads the whole table, and enqueue slows down as the queue grows. Every
-- statement of the hot-path functions below is a keyed lookup that an index
-- serves, so they run with enable_seqscan = off (tests/sql/test_runs_plans.py).
-- The same statistics make a wrong index as cheap as the right one: every
-- index whose partial predicate the WHERE clause implies costs about the
-- same, and one that also yields the ORDER BY wins. A bucket's coalesce
-- lookup then walked idx_run_agent_queued (every queued run of the agent
-- in the window), and claim_run's fetch of a candidate by id scanned that
-- whole index instead of the primary key (and finish_run the claimed
-- runs' index, one entry per busy agent). Where such an index competes, a
-- statement compares status under COLLATE "C": the same test (equality is
-- bytewise under every deterministic collation), but no predicate
-- status = 'queued' is implied by it, so only the intended index can serve.
-- tests/sql/test_runs_plans.py checks that no scan of the hot path reads
-- more than a handful of entries when an agent has hundreds of queued runs.

CREATE TYPE office.enqueue_result AS (outcome text, dedup_kind text, run_id text);
COMMENT ON TYPE office.enqueue_result IS
    'Result of office.enqueue_run: outcome queued|deduped|coalesced, dedup_kind windowed|durable (deduped only), run_id the run created, matched or absorbing the request.';

-- The CHECK of office.runs, one function call: PostgreSQL reads a table's
-- CHECK expressions again from their stored text at every statement that
-- writes the table. The four column CHECKs this replaces (0.4.0) were 9 %
-- of a fresh enqueue's instructions and 11 % of a claim + finish cycle's,
-- mostly that reading; a call is a few nodes to read, and the function,
-- compiled once a session, does the same tests: 5 % and 6.5 % less
-- (callgrind, docs/benchmarks.md).
CREATE FUNCTION office._run_row_valid(status text, reason text, payload jsonb, idempotency_key text)
    RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN status IN ('queued', 'claimed', 'finished', 'failed', 'cancelled')
       AND reason <> ''
       AND jsonb_typeof(payload) = 'object'
       AND (idempotency_key IS NULL OR (idempotency_key <> '' AND length(idempotency_key) <= 512));
END
$$;
COMMENT ON FUNCTION office._run_row_valid(text, text, jsonb, text) IS
    'Internal: the CHECK of office.runs: a known status, a non-empty reason, an object payload, an idempotency_key that is NULL or 1 to 512 characters.';
REVOKE EXECUTE ON FUNCTION office._run_row_valid(text, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_row_valid(text, text, jsonb, text) TO office_admin;

-- entry_triggered (0.2.0) and heartbeat_at (0.4.0) come last on purpose:
-- ALTER TABLE ... ADD COLUMN appends, and a fresh install must have the same
-- column order as an upgraded one.
CREATE TABLE office.runs (
    id                 text PRIMARY KEY DEFAULT office._uuid_v7(),
    agent_profile_id   text NOT NULL,
    reason             text NOT NULL,
    payload            jsonb NOT NULL DEFAULT '{}',
    status             text NOT NULL DEFAULT 'queued',
    coalesced_count    int NOT NULL DEFAULT 1,
    idempotency_key    text,
    task_id            text,
    context_snapshot   jsonb NOT NULL DEFAULT '{}',
    attempt            int NOT NULL DEFAULT 0,
    claimed_by         text,
    retry_count        int NOT NULL DEFAULT 0,
    scheduled_retry_at timestamptz,
    error_message      text,
    cancel_reason      text,
    requested_at       timestamptz NOT NULL DEFAULT now(),
    claimed_at         timestamptz,
    finished_at        timestamptz,
    entry_triggered    boolean NOT NULL DEFAULT false,
    heartbeat_at       timestamptz,
    CONSTRAINT runs_row_check CHECK (office._run_row_valid(status, reason, payload, idempotency_key))
);
SELECT pg_catalog.pg_extension_config_dump('office.runs', '');
REVOKE ALL ON TABLE office.runs FROM PUBLIC;
COMMENT ON TABLE office.runs IS
    'The run queue: queued -> claimed -> finished|failed|cancelled (claimed -> queued on retry or recovery).';
COMMENT ON COLUMN office.runs.entry_triggered IS
    'True when a step-entry action enqueued the run: it never coalesces into another run and is never a coalesce target (since 0.2.0).';
COMMENT ON COLUMN office.runs.heartbeat_at IS
    'When the worker holding the claim last proved it is alive (claim_run, heartbeat_run); recover_stale_runs reads it (since 0.4.0).';

-- The durable dedup: one row per key, over every status, with no time bound.
CREATE UNIQUE INDEX idx_run_idempotency ON office.runs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Coalesce-target lookup (newest queued run of a bucket) of a request without
-- a task; one with a task is served by idx_run_task_reason (below). Until
-- 0.4.0 this index held every queued run, (agent, reason, task_id,
-- requested_at DESC), and a run with a task had an entry here and another in
-- idx_run_task_reason: now each run has one of the two (a run's index
-- entries are most of the WAL and of the time of its insert, see
-- docs/benchmarks.md). Its predicate compares status under "C", as the
-- lookup does, so that the lookup implies it and not idx_run_agent_queued's
-- ("Plans" above).
CREATE INDEX idx_run_bucket_queued ON office.runs (agent_profile_id, reason, requested_at DESC)
    WHERE status COLLATE "C" = 'queued' AND task_id IS NULL;
-- claim_run: one agent's oldest queued run (ties by id, bytewise), and the
-- loose scan over the agents that have queued runs (an unfiltered claim
-- visits each such agent once, however long its backlog). It replaced
-- 0.3.0's idx_run_queued (requested_at, id) in 0.4.0: walking that one in
-- time order read every queued run of agents that already hold a claim.
CREATE INDEX idx_run_agent_queued ON office.runs (agent_profile_id, requested_at, id COLLATE "C")
    WHERE status = 'queued';
-- At most one claimed run per agent, ever; also serves the per-agent claimed
-- check of claim_run and the scan of recover_stale_runs (claimed runs are few).
CREATE UNIQUE INDEX idx_run_one_claimed_per_agent ON office.runs (agent_profile_id)
    WHERE status = 'claimed';
-- prune_runs.
CREATE INDEX idx_run_finished ON office.runs (finished_at)
    WHERE status IN ('finished', 'failed', 'cancelled');
-- Runs of one task and reason: the runs evidence of a stuck-parent candidate
-- (DOMAIN.md §2.20 rule 8, 60_parent_wake.sql), a task's runs (list_runs), and
-- (with the agent and requested_at, since 0.4.0) the coalesce-target lookup of
-- a request with a task: the bucket's runs within the window, of which the
-- queued one is the target. Over every status, so that lookup also passes the
-- bucket's claimed and finished runs of the window; a bucket gets a new run
-- only when no queued one is there to coalesce into, so they are few. Only
-- runs that name a task are indexed.
CREATE INDEX idx_run_task_reason ON office.runs (task_id, reason, agent_profile_id, requested_at)
    WHERE task_id IS NOT NULL;

-- Keys absorbed by a coalesce, recorded as served by the run they coalesced
-- into (since 0.4.0): a redelivery of such a request is a dedup onto that
-- run for as long as it exists; pruning the run frees them. A key is in at
-- most one of runs.idempotency_key and this table (enqueue_run's key lock).
CREATE TABLE office.run_keys_recorded (
    idempotency_key text PRIMARY KEY CHECK (idempotency_key <> '' AND length(idempotency_key) <= 512),
    run_id          text NOT NULL REFERENCES office.runs (id) ON DELETE CASCADE,
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('office.run_keys_recorded', '');
REVOKE ALL ON TABLE office.run_keys_recorded FROM PUBLIC;
COMMENT ON TABLE office.run_keys_recorded IS
    'Idempotency keys of requests that coalesced into a run, served by that run from then on (run_keys lists them); deleted with the run.';
-- run_keys, and the cascade when prune_runs deletes runs.
CREATE INDEX idx_run_keys_recorded_run ON office.run_keys_recorded (run_id);

-- --- readiness: which agents claim_run() looks at (since 0.4.0) -------------
--
-- An unfiltered claim_run() used to find its candidates in the runs index:
-- a loose scan over every agent with queued runs, busy ones included, so its
-- cost followed the number of agents with a backlog. office.agent_ready
-- lists the agents that *may* have a claimable run, and claim_run() walks it
-- oldest first instead. Rows are hints, not truth:
--   * a false positive (an agent that is busy, paused, gone or without a due
--     run) costs a claimer one look, and the claimer removes it (or, when the
--     agent's queued runs all wait on scheduled_retry_at, sets due_at, so it
--     is looked at again when the earliest of them is due);
--   * a false negative (a free, accepting agent with a due queued run and no
--     row) would be a stall: claim_run() would never hand its runs out. None
--     may outlast the commit of the transaction that made the run claimable.
-- An agent may have several rows (readiers only ever insert, see below);
-- head_at is a lower bound of the requested_at of its oldest queued run when
-- the row is written, the order claim_run() walks in.
--
-- Readying. Every change that can make an agent's run claimable is a
-- readier, caught by triggers so that no path is missed, plain SQL included:
-- a run inserted queued (enqueue_run, enqueue_runs, dispatch_wakeup, an
-- INSERT), a run that becomes queued again (retry_run, recover_stale_runs),
-- a claim that ends (finish_run, fail_run, cancel_run, retry_run, recovery,
-- a deleted claimed run), an agent that starts accepting runs (created, or
-- resumed from paused/stopped/pending_approval). A readier takes the agent's
-- readiness lock (advisory, hashtextextended('office.runs.ready:' || agent))
-- SHARED with pg_try_* and, when it gets it (READ COMMITTED), looks in fresh
-- statements: a claim end first looks for a queued run of the agent (none:
-- nothing to do), then every readier inserts a row unless a due one with an
-- older head_at is there (so the everyday enqueue for an agent that already
-- has a row writes nothing). When it does not get the lock (a claimer is
-- removing the agent's rows right now) or runs under a stricter isolation
-- (its snapshot may predate what it must see), it inserts a row without
-- looking. Readiers never wait: not for claimers, not for each other (there
-- is no unique key to wait on, hence the duplicates; a REPEATABLE READ
-- producer adds one per run, all removed at the agent's next claim).
--
-- Removal (claim_run only, READ COMMITTED only): the claimer takes the
-- agent's readiness lock EXCLUSIVE with pg_try_* (never waits; a miss leaves
-- the rows for later) and keeps it to the end of its transaction; then ONE
-- statement deletes the agent's rows if, in its snapshot, the agent holds a
-- claim, does not accept runs (or is gone) or has no queued run; another
-- sets due_at on what is left when none of its queued runs is due. Why no
-- stall survives: take the commit C after which the agent stays claimable.
-- C was a readier. (1) If it inserted a row, that row commits with C, and a
-- delete that sees the row sees C too, so it finds the agent claimable and
-- keeps it. (2) If it found a due row instead, it held the shared lock from
-- before that look to its commit: a claimer holding the exclusive lock
-- before had committed its delete before the look (locks are released after
-- commit), so the row C saw was not deleted by it; one that gets the lock
-- after C sees C in its statement. So a claimer that deletes an agent's
-- last row always saw it non-claimable in the snapshot of the very statement
-- that deleted it, and the next change that makes it claimable readies it
-- again. Time alone (a scheduled_retry_at passing) needs no readier: while
-- the agent has queued runs its rows are only delayed (due_at), never
-- deleted. tests/isolation/specs/runs_ready_race.spec stages the race the lock
-- closes (an enqueue, a finish and a claimer removing the row), and
-- runs_ready_race_nolock.spec the stall without it.
--
-- Backstop: a path that bypasses the triggers (session_replication_role =
-- replica, disabled triggers, a restore with --disable-triggers) can leave
-- a claimable agent without a row. office._repair_agent_ready(), run by
-- recover_stale_runs (the daemon's recovery loop, every minute by default),
-- inserts the rows such agents lack; so such a run waits at most one
-- recovery interval for an unfiltered claim_run() (claim_run(worker, agent)
-- never reads the table).
CREATE TABLE office.agent_ready (
    agent_profile_id text NOT NULL,
    head_at          timestamptz NOT NULL,
    due_at           timestamptz
);
SELECT pg_catalog.pg_extension_config_dump('office.agent_ready', '');
-- No key (see above): a publication FOR ALL TABLES would refuse its deletes
-- without a replica identity, and claim_run deletes from it.
ALTER TABLE office.agent_ready REPLICA IDENTITY FULL;
REVOKE ALL ON TABLE office.agent_ready FROM PUBLIC;
COMMENT ON TABLE office.agent_ready IS
    'Agents that may have a claimable run, the list an unfiltered claim_run() walks (oldest head_at first); written by triggers on runs and agent_profiles, cleaned by claim_run, repaired by recover_stale_runs. Hints: false positives and duplicates are allowed, never a claimable agent left out (since 0.4.0).';
COMMENT ON COLUMN office.agent_ready.head_at IS
    'A lower bound of the requested_at of the agent''s oldest queued run when the row was written: the order claim_run() looks at agents in.';
COMMENT ON COLUMN office.agent_ready.due_at IS
    'NULL: look now. Otherwise the agent''s queued runs all wait on scheduled_retry_at, the earliest until then: claim_run() looks at the row again from that time.';
-- The readiers' look (an agent's row with an older head_at) and the
-- claimers' removal, by agent.
CREATE INDEX idx_agent_ready_agent ON office.agent_ready (agent_profile_id, head_at);
-- claim_run(): the rows to look at now, oldest first ...
CREATE INDEX idx_agent_ready_head ON office.agent_ready (head_at, agent_profile_id COLLATE "C")
    WHERE due_at IS NULL;
-- ... and the delayed ones, by when they are due.
CREATE INDEX idx_agent_ready_due ON office.agent_ready (due_at) WHERE due_at IS NOT NULL;

-- Trigger: the readier of office.agent_ready (above), for both tables whose
-- changes make a run claimable. One function, so the hot path (a queued
-- insert) pays one PL/pgSQL call. Its statements are keyed probes (LIMIT 1
-- or EXISTS) that an index answers in order: no seqscan, no bitmap scan
-- (which reads every entry of the key, then sorts), whatever the statistics.
CREATE FUNCTION office._ready_agents() RETURNS trigger
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
    'Trigger: lists in office.agent_ready the agent of a run inserted queued, of a run queued again or of a claim that ended (when it has queued runs), and an agent that starts accepting runs (when it has queued runs); under its readiness lock, shared, never waiting.';
REVOKE EXECUTE ON FUNCTION office._ready_agents() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._ready_agents() TO office_admin;

-- No WHEN clause: PostgreSQL reads one again from its stored text at every
-- statement that may fire the trigger, about 3 % of a fresh enqueue_run
-- (docs/benchmarks.md); the function tests the status itself.
CREATE TRIGGER runs_30_ready_insert
    AFTER INSERT ON office.runs
    FOR EACH ROW
    EXECUTE FUNCTION office._ready_agents();

-- It readies for a run that is queued after the update (queued again, moved
-- to another agent, re-dated earlier, its retry time changed) and for a
-- claim that ended or moved; the function tells these apart from an update
-- that changed none of it, such as a claim (queued -> claimed). A coalesce
-- or a heartbeat sets none of the columns, so does not fire it. No WHEN
-- clause: one is read again from its stored text at every statement that
-- may fire the trigger, and even the short one this had (NEW.status =
-- 'queued' OR OLD.status = 'claimed') cost a claim and a finish more than
-- the C function's own tests (docs/benchmarks.md, "eighth pass"; where the
-- function is PL/pgSQL, a claim now calls it, which was not measured).
CREATE TRIGGER runs_30_ready_update
    AFTER UPDATE OF status, agent_profile_id, requested_at, scheduled_retry_at ON office.runs
    FOR EACH ROW
    EXECUTE FUNCTION office._ready_agents();

CREATE TRIGGER runs_30_ready_delete
    AFTER DELETE ON office.runs
    FOR EACH ROW
    WHEN (OLD.status = 'claimed')
    EXECUTE FUNCTION office._ready_agents();

CREATE TRIGGER agent_profiles_30_ready_insert
    AFTER INSERT ON office.agent_profiles
    FOR EACH ROW
    WHEN (NEW.status <> ALL (office._statuses_refusing_runs()))
    EXECUTE FUNCTION office._ready_agents();

CREATE TRIGGER agent_profiles_30_ready_update
    AFTER UPDATE OF id, status ON office.agent_profiles
    FOR EACH ROW
    WHEN (NEW.status <> ALL (office._statuses_refusing_runs())
          AND (OLD.status = ANY (office._statuses_refusing_runs()) OR OLD.id IS DISTINCT FROM NEW.id))
    EXECUTE FUNCTION office._ready_agents();

-- Internal: claim_run's removal of agents' rows from office.agent_ready
-- (above): under each agent's readiness lock taken exclusive with pg_try_*
-- (an agent whose lock is busy keeps its rows), one statement deletes them
-- where the agent holds a claim, does not accept runs or has no queued run;
-- another sets due_at where none of its queued runs is due. Each decides in
-- its own snapshot, taken after the locks. Nothing under a stricter
-- isolation, whose snapshot may be older than the locks.
-- Generic plans, always: against the array of agents the planner's custom
-- plan (one agent, from the array's value) always looked cheaper than the
-- generic one (a set of unknown size), so PL/pgSQL planned both statements
-- again at every call, about 0.4 ms each, most of a claim's time
-- (pg_stat_statements, docs/benchmarks.md). The generic plan is the same
-- lateral probes per agent.
CREATE FUNCTION office._unready_agents(agents text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked text[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN;
    END IF;
    SELECT array_agg(a.agent) INTO v_locked
      FROM unnest(_unready_agents.agents) AS a (agent)
     WHERE pg_try_advisory_xact_lock(hashtextextended('office.runs.ready:' || a.agent, 0));
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
COMMENT ON FUNCTION office._unready_agents(text[]) IS
    'Internal (claim_run): removes from office.agent_ready the rows of these agents that hold a claim, do not accept runs or have no queued run, and sets due_at on those whose queued runs are all delayed; only agents whose readiness lock it gets at once, exclusive; nothing outside READ COMMITTED.';
REVOKE EXECUTE ON FUNCTION office._unready_agents(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._unready_agents(text[]) TO office_admin;

-- Internal: the backstop of office.agent_ready (above). A loose scan of
-- idx_run_agent_queued (one index descent per agent with queued runs) finds
-- the agents that are free, accept runs and have no row at all, and inserts
-- one each (without the lock: a row is never wrong, only possibly useless).
-- recover_stale_runs runs it, so a claimable agent a bypassing path left out
-- waits at most one recovery interval. Returns how many it inserted.
CREATE FUNCTION office._repair_agent_ready() RETURNS int
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_count int;
BEGIN
    WITH RECURSIVE agents(agent) AS (
        (SELECT q.agent_profile_id FROM office.runs q
          WHERE q.status = 'queued' ORDER BY q.agent_profile_id LIMIT 1)
        UNION ALL
        SELECT (SELECT q.agent_profile_id FROM office.runs q
                 WHERE q.status = 'queued' AND q.agent_profile_id > agents.agent
                 ORDER BY q.agent_profile_id LIMIT 1)
          FROM agents WHERE agents.agent IS NOT NULL
    )
    INSERT INTO office.agent_ready (agent_profile_id, head_at)
    SELECT agents.agent,
           (SELECT q.requested_at FROM office.runs q
             WHERE q.agent_profile_id = agents.agent AND q.status = 'queued'
             ORDER BY q.requested_at, q.id COLLATE "C" LIMIT 1)
      FROM agents
     WHERE agents.agent IS NOT NULL
       AND NOT EXISTS (SELECT FROM office.agent_ready r WHERE r.agent_profile_id = agents.agent)
       AND NOT EXISTS (SELECT FROM office.runs c WHERE c.agent_profile_id = agents.agent AND c.status = 'claimed')
       AND EXISTS (SELECT FROM office.agent_profiles p
                    WHERE p.id = agents.agent AND p.status <> ALL (office._statuses_refusing_runs()));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office._repair_agent_ready() IS
    'Internal (recover_stale_runs): inserts an office.agent_ready row for every free, accepting agent with queued runs that has none (left out by a path that bypassed the triggers). Returns the count.';
REVOKE EXECUTE ON FUNCTION office._repair_agent_ready() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._repair_agent_ready() TO office_admin;

-- Internal: takes one enqueue lock (a key's or a bucket's). Under READ
-- COMMITTED the statements after it read what the previous holder
-- committed; a stricter transaction that had to wait cannot (its snapshot is
-- older), so it is told to retry (40001) rather than serve a key twice or
-- insert a second run into a bucket.
CREATE FUNCTION office._run_lock(lock_id bigint, agent_profile_id text, reason text, idempotency_key text)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(lock_id) THEN
        PERFORM pg_advisory_xact_lock(lock_id);
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            IF idempotency_key IS NOT NULL THEN
                RAISE EXCEPTION USING ERRCODE = '40001',
                    MESSAGE = format('concurrent enqueue of idempotency_key %s: retry the transaction',
                                     quote_literal(idempotency_key));
            END IF;
            RAISE EXCEPTION USING ERRCODE = '40001',
                MESSAGE = format('concurrent enqueue for agent %s, reason %s: retry the transaction',
                                 quote_literal(agent_profile_id), quote_literal(reason));
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION office._run_lock(bigint, text, text, text) IS
    'Internal: takes an enqueue lock (a key''s when idempotency_key is given, else a bucket''s), waiting if needed; after a wait outside READ COMMITTED 40001 (retry).';
REVOKE EXECUTE ON FUNCTION office._run_lock(bigint, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_lock(bigint, text, text, text) TO office_admin;

-- Internal: the advisory locks enqueue requests take, NULL where one takes
-- none: its key's (a keyed request), then its bucket's (a coalescible one:
-- not entry-triggered, key not starting with task_comment:). Arguments as
-- enqueue_run normalises them ('' keys and tasks are NULL), one element per
-- request: enqueue_run passes its one, enqueue_runs all of its elements in
-- one call (a call per element cost it more than the hashing: about 6 ms of
-- 1,000 elements). PL/pgSQL, not SQL: a SQL function with a SET clause is
-- planned again at every call, which the enqueue hot path would pay each time.
CREATE FUNCTION office._run_locks(agent_profile_ids text[], reasons text[], idempotency_keys text[],
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
        bucket_locks[i] := CASE WHEN NOT coalesce(entry_triggereds[i], false)
                                     AND (idempotency_keys[i] IS NULL
                                          OR NOT starts_with(idempotency_keys[i], 'task_comment:'))
                                THEN hashtextextended('office.runs.bucket:' || agent_profile_ids[i] || ':'
                                                      || reasons[i] || ':' || coalesce(task_ids[i], ''), 0) END;
    END LOOP;
END
$$;
COMMENT ON FUNCTION office._run_locks(text[], text[], text[], text[], boolean[]) IS
    'Internal: the advisory lock ids of enqueue requests (parallel arrays of agent, reason, key, task, entry_triggered): key_locks, taken by every keyed request before it looks its key up (NULL without a key), and bucket_locks (agent, reason, task; NULL when the request never coalesces: entry-triggered, task_comment: key).';
REVOKE EXECUTE ON FUNCTION office._run_locks(text[], text[], text[], text[], boolean[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_locks(text[], text[], text[], text[], boolean[]) TO office_admin;

-- Internal: the wake-up signal for runs just queued (API.md §3,
-- office.notify). NOTIFY takes a cluster-wide lock at commit and holds it
-- through the WAL flush, so notifying producers commit one at a time
-- (docs/benchmarks.md). 'edge' (the default) signals only when no worker is
-- already bound to come for the agent: it has no claimed run and no other
-- claimable queued run (a worker that finds work keeps claiming until it gets
-- nothing). 'every' (or 'on', the 0.3.0 spelling) signals every queued run;
-- 'off' never. The payload is the agent id.
-- _signal_runs takes the runs of one call in the order they were queued and
-- signals as if each had been signalled right after its own insert: for an
-- agent's first run of the call, "other" queued runs are the ones that were
-- there before the call, so all of the call's runs are left out of the edge
-- probe; its later runs would find that first one and send nothing, so they
-- are skipped. The runs are ones the caller has just inserted queued and due
-- (enqueue_run, enqueue_runs, dispatch_wakeup), so an agent with k of them
-- has another claimable run exactly when it has more than k queued due runs:
-- a probe that reads at most k + 1 of its entries, where "not one of the
-- call's ids" would compare every queued run with every id of the call
-- (enqueue_runs of 1,000 runs: most of the signal's time). One run (the
-- single enqueue) keeps its own probe: a set-based statement measured 2-3x
-- slower there, its planning or its aggregate costing more than the probes.
-- No bitmap scan: the probe's LIMIT (k + 1) is not known when it is planned,
-- and against the statistics of a backlog (a few hundred queued runs an
-- agent, a bulk call over many agents) a bitmap scan looked cheaper; it
-- reads every queued run of the agent before the LIMIT applies, so a bulk
-- call cost what the backlog held (tests/sql/test_runs_plans.py).
CREATE FUNCTION office._signal_runs(agent_profile_ids text[], run_ids text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
    SET enable_bitmapscan = off
AS $$
DECLARE
    v_mode  text := coalesce(nullif(current_setting('office.notify', true), ''), 'edge');
    v_agent text;
BEGIN
    IF v_mode NOT IN ('edge', 'every', 'on') THEN
        IF v_mode = 'off' THEN
            RETURN;
        END IF;
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting office.notify = %s must be edge, every or off', quote_literal(left(v_mode, 200)));
    END IF;
    IF cardinality(agent_profile_ids) = 1 THEN
        v_agent := agent_profile_ids[1];
        IF v_mode = 'edge'
           AND (EXISTS (SELECT FROM office.runs c WHERE c.agent_profile_id = v_agent AND c.status = 'claimed')
                OR EXISTS (SELECT FROM office.runs q
                            WHERE q.agent_profile_id = v_agent AND q.status = 'queued'
                              AND q.id <> run_ids[1]
                              AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now()))) THEN
            RETURN;
        END IF;
        PERFORM pg_notify('office_runs', v_agent);
        RETURN;
    END IF;
    -- Each agent once, in the order of its first run; lateral probes (LIMIT
    -- each), not EXISTS, which may become a hashed subplan over every
    -- claimed run.
    FOR v_agent IN
        SELECT a.agent
          FROM (SELECT u.agent, min(u.n) AS first, count(*) AS runs
                  FROM unnest(agent_profile_ids) WITH ORDINALITY AS u(agent, n)
                 GROUP BY u.agent) AS a
          LEFT JOIN LATERAL (SELECT true AS busy FROM office.runs c
                              WHERE v_mode = 'edge' AND c.agent_profile_id = a.agent AND c.status = 'claimed'
                              LIMIT 1) AS c ON true
          LEFT JOIN LATERAL (SELECT count(*) AS due
                               FROM (SELECT FROM office.runs q
                                      WHERE v_mode = 'edge' AND q.agent_profile_id = a.agent AND q.status = 'queued'
                                        AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                                      LIMIT a.runs + 1) AS d) AS q ON true
         WHERE c.busy IS NULL AND q.due <= a.runs
         ORDER BY a.first
    LOOP
        PERFORM pg_notify('office_runs', v_agent);
    END LOOP;
END
$$;
COMMENT ON FUNCTION office._signal_runs(text[], text[]) IS
    'Internal: NOTIFY office_runs with the agent id for runs just queued (agent ids and run ids in the order they were queued), as office.notify says: edge (default: only when the agent has no claimed and no other claimable queued run), every (or on), off; another value 22023 naming the setting.';
REVOKE EXECUTE ON FUNCTION office._signal_runs(text[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._signal_runs(text[], text[]) TO office_admin;

-- The signal for one run (dispatch_wakeup).
CREATE FUNCTION office._signal_run(agent_profile_id text, run_id text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM office._signal_runs(ARRAY[agent_profile_id], ARRAY[run_id]);
END
$$;
COMMENT ON FUNCTION office._signal_run(text, text) IS
    'Internal: the wake-up signal of office._signal_runs for one run just queued.';
REVOKE EXECUTE ON FUNCTION office._signal_run(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._signal_run(text, text) TO office_admin;

CREATE FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb DEFAULT '{}',
                                   idempotency_key text DEFAULT NULL, task_id text DEFAULT NULL,
                                   entry_triggered boolean DEFAULT false,
                                   keyless_cause text DEFAULT NULL, keyless_detail text DEFAULT NULL)
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
    v_status  text;
    v_window  interval;
    v_locks   record;
    v_key_lock    bigint;
    v_bucket_lock bigint;
    v_id      text;
    v_at      timestamptz;
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
    SELECT a.status INTO v_status FROM office.agent_profiles a WHERE a.id = v_agent;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01', MESSAGE = format('agent %s not found', quote_literal(v_agent));
    END IF;
    IF v_status = ANY (office._statuses_refusing_runs()) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA02',
            MESSAGE = format('agent %s is %s and does not accept runs', quote_literal(v_agent), v_status);
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
    -- key: a request that waited reads what the holder committed.
    -- (Each lock is tried here first: _run_lock, a function call, only when
    -- another transaction holds it.)
    IF v_key IS NOT NULL THEN
        IF NOT pg_try_advisory_xact_lock(v_key_lock) THEN
            PERFORM office._run_lock(v_key_lock, v_agent, v_reason, v_key);
        END IF;
        SELECT r.id, r.requested_at INTO v_id, v_at FROM office.runs r WHERE r.idempotency_key = v_key;
        IF v_id IS NULL THEN
            SELECT k.run_id, k.recorded_at INTO v_id, v_at
              FROM office.run_keys_recorded k WHERE k.idempotency_key = v_key;
        END IF;
        IF v_id IS NOT NULL THEN
            v_window := office._window('office.idempotency_window', interval '24 hours');
            v_result := ('deduped', CASE WHEN v_at > now() - v_window THEN 'windowed' ELSE 'durable' END, v_id);
            PERFORM office._count_dedup('runs', v_reason, v_result.dedup_kind);
            RETURN v_result;
        END IF;
    END IF;

    -- 3. Coalesce, unless the request is entry-triggered or comment-keyed.
    IF v_bucket_lock IS NOT NULL THEN
        -- One coalescible enqueue per bucket at a time: the lookup below and
        -- the insert of step 4 are a check-then-act.
        IF NOT pg_try_advisory_xact_lock(v_bucket_lock) THEN
            PERFORM office._run_lock(v_bucket_lock, v_agent, v_reason, NULL);
        END IF;
        v_window := office._window('office.coalesce_window', interval '5 seconds');
        -- A target being claimed right now is skipped (SKIP LOCKED): a
        -- claimed run is never a target, and claimers never wait for us.
        IF v_task IS NULL THEN
            UPDATE office.runs r
               SET coalesced_count = r.coalesced_count + 1, payload = v_payload
             WHERE r.id = (SELECT t.id
                             FROM office.runs t
                            WHERE t.agent_profile_id = v_agent AND t.reason = v_reason
                              AND t.task_id IS NULL
                              AND t.status COLLATE "C" = 'queued' AND t.requested_at > now() - v_window
                              AND NOT t.entry_triggered
                              AND (t.idempotency_key IS NULL
                                   OR NOT starts_with(t.idempotency_key, 'task_comment:'))
                            ORDER BY t.requested_at DESC, t.id COLLATE "C" DESC
                            LIMIT 1
                              FOR UPDATE SKIP LOCKED)
            RETURNING r.id INTO v_id;
        ELSE
            -- Only idx_run_task_reason serves it: status compared under "C"
            -- (sql/30_runs.sql, "Plans").
            UPDATE office.runs r
               SET coalesced_count = r.coalesced_count + 1, payload = v_payload
             WHERE r.id = (SELECT t.id
                             FROM office.runs t
                            WHERE t.agent_profile_id = v_agent AND t.reason = v_reason
                              AND t.task_id = v_task
                              AND t.status COLLATE "C" = 'queued' AND t.requested_at > now() - v_window
                              AND NOT t.entry_triggered
                              AND (t.idempotency_key IS NULL
                                   OR NOT starts_with(t.idempotency_key, 'task_comment:'))
                            ORDER BY t.requested_at DESC, t.id COLLATE "C" DESC
                            LIMIT 1
                              FOR UPDATE SKIP LOCKED)
            RETURNING r.id INTO v_id;
        END IF;
        IF v_id IS NOT NULL THEN
            -- The target serves the incoming key from now on.
            IF v_key IS NOT NULL THEN
                INSERT INTO office.run_keys_recorded (idempotency_key, run_id) VALUES (v_key, v_id);
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
        INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id, entry_triggered)
        VALUES (v_agent, v_reason, v_payload, v_key, v_task, v_entry)
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM office._signal_runs(ARRAY[v_agent], ARRAY[v_id]);
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
COMMENT ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text) IS
    'Enqueues a run: a key already served (own or recorded by a coalesce) -> deduped windowed|durable; else coalesce (the key is recorded on the target); else insert. Returns (outcome queued|deduped|coalesced, dedup_kind windowed|durable, run_id); on queued the wake-up signal of office.notify (NOTIFY office_runs, the agent id). Bad input 22023, unknown agent OFA01, agent not accepting runs OFA02.';
REVOKE EXECUTE ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text)
    TO office_producer, office_admin;

-- enqueue_runs applies its elements in order, each seeing the ones before it,
-- with the outcomes, counts and errors of as many enqueue_run calls. It takes
-- every lock its elements will take first, in the global order. Then, in the
-- common case, it does the work set-based: when every element is valid, its
-- agent accepts runs, no key is repeated in the call or already served, no
-- coalescible element shares its bucket with another and none finds a
-- target, each element's enqueue_run would be a plain insert that no other
-- element affects, so one INSERT ... SELECT gives the same runs, in order.
-- Anything else (a coalesce, a dedup, a bad element, a bad setting) runs the
-- elements one by one through enqueue_run, which gives the exact outcome or
-- the exact error; the locks are held, so what was checked still holds.
CREATE FUNCTION office.enqueue_runs(requests jsonb)
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
BEGIN
    IF requests IS NULL OR jsonb_typeof(requests) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('enqueue_runs: requests must be a JSON array, not %s',
                             coalesce(jsonb_typeof(requests), 'NULL'));
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
    v_fast := v_valid AND coalesce(current_setting('office.notify', true), '') IN ('', 'edge', 'every', 'on', 'off');
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
                             'entry_triggered', 'keyless_cause', 'keyless_detail')
             ORDER BY k LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('unknown key %s', quote_literal(v_bad));
            END IF;
            SELECT f.key INTO v_bad FROM jsonb_each(v_elem) AS f
             WHERE f.key NOT IN ('payload', 'entry_triggered')
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
            v_res := office.enqueue_run(
                agent_profile_id => v_elem ->> 'agent_profile_id',
                reason           => v_elem ->> 'reason',
                payload          => CASE WHEN v_elem ? 'payload' THEN v_elem -> 'payload' ELSE '{}'::jsonb END,
                idempotency_key  => v_elem ->> 'idempotency_key',
                task_id          => v_elem ->> 'task_id',
                entry_triggered  => coalesce((v_elem ->> 'entry_triggered')::boolean, false),
                keyless_cause    => v_elem ->> 'keyless_cause',
                keyless_detail   => v_elem ->> 'keyless_detail');
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

-- enable_bitmapscan = off as well: office.agent_ready is small and churns
-- (a row deleted per claim, inserted per claim end), and against its
-- statistics a bitmap scan plus a sort looks cheaper than walking
-- idx_agent_ready_head in order; but a bitmap scan visits every dead entry
-- again on every call, where an index scan marks them dead once.
CREATE FUNCTION office.claim_run(worker_id text DEFAULT NULL, agent_profile_id text DEFAULT NULL)
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
    <<scan>>
    LOOP
        IF v_agent IS NULL THEN
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
            free(agent, ok) AS MATERIALIZED (
                SELECT ready.agent, x.busy IS NULL AND p.accepts IS NOT NULL
                  FROM ready
                  LEFT JOIN LATERAL (SELECT true AS busy FROM office.runs x
                                      WHERE x.agent_profile_id = ready.agent AND x.status = 'claimed'
                                      LIMIT 1) x ON true
                  LEFT JOIN LATERAL (SELECT true AS accepts FROM office.agent_profiles p
                                      WHERE p.id = ready.agent
                                        AND p.status <> ALL (office._statuses_refusing_runs())
                                      LIMIT 1) p ON true
            )
            SELECT array_agg(c.id ORDER BY c.requested_at, c.id COLLATE "C") FILTER (WHERE c.id IS NOT NULL),
                   array_agg(free.agent ORDER BY c.requested_at, c.id COLLATE "C") FILTER (WHERE c.id IS NOT NULL),
                   array_agg(free.agent) FILTER (WHERE c.id IS NULL)
              INTO v_cand_ids, v_cand_agents, v_stale
              FROM free
              LEFT JOIN LATERAL (SELECT q.id, q.requested_at
                                   FROM office.runs q
                                  WHERE free.ok AND q.status = 'queued' AND q.agent_profile_id = free.agent
                                    AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                                    AND q.id <> ALL (v_skip_runs)
                                  ORDER BY q.requested_at, q.id COLLATE "C"
                                  LIMIT 1) c ON true;
            IF v_stale IS NOT NULL THEN
                PERFORM office._unready_agents(v_stale);
                v_skip_agents := v_skip_agents || v_stale;
                CONTINUE scan WHEN v_cand_ids IS NULL;
            END IF;
        ELSE
            -- One agent: its oldest due run, read in index order (never a
            -- sort of its backlog); nothing when it holds a claim or does not
            -- accept runs.
            SELECT ARRAY[q.id], ARRAY[q.agent_profile_id] INTO v_cand_ids, v_cand_agents
              FROM office.runs q
             WHERE q.status = 'queued' AND q.agent_profile_id = v_agent
               AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
               AND q.id <> ALL (v_skip_runs)
               AND NOT EXISTS (SELECT FROM office.runs x WHERE x.agent_profile_id = v_agent AND x.status = 'claimed')
               AND EXISTS (SELECT FROM office.agent_profiles p
                            WHERE p.id = v_agent AND p.status <> ALL (office._statuses_refusing_runs()))
             ORDER BY q.requested_at, q.id COLLATE "C"
             LIMIT 1;
        END IF;
        EXIT WHEN v_cand_ids IS NULL;

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
    'Claims the oldest due queued run (optionally of one agent) whose agent accepts runs and has no claimed run: status claimed, claimed_at and heartbeat_at now, attempt + 1. 0 or 1 row; never waits for or fails because of another claimer; its cost does not grow with the backlog of agents holding a claim. worker_id over 200 characters or with a control character 22023.';
REVOKE EXECUTE ON FUNCTION office.claim_run(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.claim_run(text, text) TO office_worker, office_admin;

CREATE FUNCTION office.heartbeat_run(run_id text, attempt int) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    -- heartbeat_at is in no index, so a beat is a HOT update of the row.
    UPDATE office.runs r
       SET heartbeat_at = now()
     WHERE r.id = heartbeat_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = heartbeat_run.attempt;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.heartbeat_run(text, int) IS
    'While the run is claimed with this attempt: heartbeat_at = now(), true (the lease is renewed); otherwise false: the worker lost the run (recovered, cancelled, re-claimed) and must stop working on it.';
REVOKE EXECUTE ON FUNCTION office.heartbeat_run(text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.heartbeat_run(text, int) TO office_worker, office_admin;

CREATE FUNCTION office.get_run(run_id text) RETURNS SETOF office.runs
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.* FROM office.runs r WHERE r.id = get_run.run_id
$$;
COMMENT ON FUNCTION office.get_run(text) IS
    'The run with this id (0 or 1 row).';
REVOKE EXECUTE ON FUNCTION office.get_run(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.get_run(text) TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office.run_keys(run_id text)
    RETURNS TABLE (idempotency_key text, recorded_at timestamptz, how text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT k.idempotency_key, k.recorded_at, k.how
      FROM (SELECT r.idempotency_key, r.requested_at AS recorded_at, 'own' AS how, 0 AS ord
              FROM office.runs r
             WHERE r.id = run_keys.run_id AND r.idempotency_key IS NOT NULL
            UNION ALL
            SELECT c.idempotency_key, c.recorded_at, 'coalesced', 1
              FROM office.run_keys_recorded c
             WHERE c.run_id = run_keys.run_id) AS k
     ORDER BY k.recorded_at, k.ord, k.idempotency_key COLLATE "C"
$$;
COMMENT ON FUNCTION office.run_keys(text) IS
    'The idempotency keys a run serves, by recorded_at: its own (how own, recorded_at its requested_at), then those recorded when requests with them coalesced into it (how coalesced). None for a keyless or unknown run.';
REVOKE EXECUTE ON FUNCTION office.run_keys(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.run_keys(text) TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office.finish_run(run_id text, attempt int) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    UPDATE office.runs r
       SET status = 'finished', finished_at = now()
     WHERE r.id = finish_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = finish_run.attempt;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.finish_run(text, int) IS
    'claimed -> finished, only if the run is still claimed with this attempt (a stale worker gets false and changes nothing).';
REVOKE EXECUTE ON FUNCTION office.finish_run(text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.finish_run(text, int) TO office_worker, office_admin;

CREATE FUNCTION office.fail_run(run_id text, attempt int, error_message text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    PERFORM office._check_free_text('error_message', fail_run.error_message);
    UPDATE office.runs r
       SET status = 'failed', error_message = fail_run.error_message,
           finished_at = coalesce(r.finished_at, now())
     WHERE r.id = fail_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = fail_run.attempt;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.fail_run(text, int, text) IS
    'claimed -> failed with error_message, only if the run is still claimed with this attempt. error_message over 64 KiB 22023.';
REVOKE EXECUTE ON FUNCTION office.fail_run(text, int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.fail_run(text, int, text) TO office_worker, office_admin;

CREATE FUNCTION office.retry_run(run_id text, attempt int, delay interval) RETURNS boolean
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
     WHERE r.id = retry_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = retry_run.attempt;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.retry_run(text, int, interval) IS
    'claimed -> queued in place (key kept), retry_count + 1, claimable again after delay (claimed_at, claimed_by, heartbeat_at cleared); only if still claimed with this attempt. A delay that is not a finite interval from 0 to 100 years 22023.';
REVOKE EXECUTE ON FUNCTION office.retry_run(text, int, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.retry_run(text, int, interval) TO office_worker, office_admin;

CREATE FUNCTION office.cancel_run(run_id text, reason text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    PERFORM office._check_free_text('reason', cancel_run.reason);
    UPDATE office.runs r
       SET status = 'cancelled', cancel_reason = cancel_run.reason, finished_at = now()
     WHERE r.id = cancel_run.run_id AND r.status IN ('queued', 'claimed');
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.cancel_run(text, text) IS
    'queued|claimed -> cancelled with cancel_reason; a finished, failed or cancelled run is untouched (false). reason over 64 KiB 22023.';
REVOKE EXECUTE ON FUNCTION office.cancel_run(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.cancel_run(text, text) TO office_worker, office_admin;

CREATE FUNCTION office.recover_stale_runs(older_than interval) RETURNS int
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
    -- The periodic backstop of office.agent_ready (see there); the runs
    -- requeued below are readied by its trigger.
    PERFORM office._repair_agent_ready();
    -- A lease lapses when the worker's last heartbeat (its claim, if it
    -- never sent one) is older than the limit. A run its worker is finishing
    -- or heart-beating right now is locked: skip it. A run set aside
    -- (office.poison) is left where it is.
    BEGIN
        WITH stale AS (
            SELECT s.id FROM office.runs s
             WHERE s.status = 'claimed'
               AND coalesce(s.heartbeat_at, s.claimed_at) < now() - recover_stale_runs.older_than
               AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'recovery' AND q.row_id = s.id)
               FOR UPDATE SKIP LOCKED
        )
        UPDATE office.runs r
           SET status = 'queued', claimed_at = NULL, claimed_by = NULL, heartbeat_at = NULL
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
         WHERE s.status = 'claimed'
           AND coalesce(s.heartbeat_at, s.claimed_at) < now() - recover_stale_runs.older_than
           AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'recovery' AND q.row_id = s.id)
           FOR UPDATE SKIP LOCKED
    LOOP
        BEGIN
            UPDATE office.runs r
               SET status = 'queued', claimed_at = NULL, claimed_by = NULL, heartbeat_at = NULL
             WHERE r.id = v_id;
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
    'A claimed run whose heartbeat_at (its claimed_at if it never sent one) is older than older_than -> queued (claimed_at, claimed_by, heartbeat_at cleared; attempt kept, so its next claim fences the lost worker). A run that cannot be requeued is set aside (office.poison, loop recovery) and the others are recovered. Also repairs office.agent_ready (a claimable agent left out by a path that bypassed its triggers). Returns the count of runs recovered.';
REVOKE EXECUTE ON FUNCTION office.recover_stale_runs(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.recover_stale_runs(interval) TO office_admin;

CREATE FUNCTION office.prune_runs(older_than interval) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count int;
BEGIN
    PERFORM office._check_interval('older_than', prune_runs.older_than);
    DELETE FROM office.runs r
     WHERE r.status IN ('finished', 'failed', 'cancelled')
       AND r.finished_at < now() - prune_runs.older_than;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.prune_runs(interval) IS
    'Deletes finished, failed and cancelled runs whose finished_at is older than older_than (their own and recorded keys become free). Returns the count.';
REVOKE EXECUTE ON FUNCTION office.prune_runs(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.prune_runs(interval) TO office_admin;
-- office: tasks, blockers, assignment generations and terminal effects
-- (API.md §2, the child-set readers of §5; DOMAIN.md §1.1-§1.3, §2.8-§2.15, §2.19).
--
-- The rules live in triggers so that they hold for every client, a plain
-- INSERT or UPDATE in psql included:
--   * every write of assignee_agent_profile_id (UPDATE OF fires whenever the
--     column is in the SET list, even with the value it already has) bumps
--     assignment_generation by one in the writing transaction; a row update
--     takes the row lock, so concurrent reassignments of one task serialise and
--     commit distinct generations. An INSERT starts at 1 when both assignee
--     and step are set, else 0. The generation is never written by hand.
--   * a change of state into COMPLETED, FAILED or CANCELLED runs, in this
--     order: (1) office.sync_routine_run_status(task, terminal) of
--     55_routines.sql, which closes the routine run linked to the task;
--     (2) the blockers-resolved wake of each dependent whose
--     blockers are now all terminal; (3) the children-completed wake of the
--     parent when all its children are COMPLETED or CANCELLED.
--   * a blocker edge that would close a cycle is refused (22023).
-- The event outbox (task.assigned, task.moved) is written by the triggers of
-- 45_events.sql.
--
-- Lost wakes. Two transactions completing the two blockers of one task (or
-- two children of one parent) at the same moment would each see the other's
-- task as not yet terminal (READ COMMITTED: uncommitted rows are invisible)
-- and wake nobody. Each terminal transition therefore takes a
-- transaction-scoped advisory lock on every dependent (and on the parent)
-- before it re-reads the states; the lock is held until commit, so the second
-- transaction reads after the first has committed, in a statement with a fresh
-- snapshot, and sees both tasks terminal (tests/isolation/specs/
-- tasks_blockers_race.spec). These guarantees are for READ COMMITTED, the
-- default; a transaction at a stricter level that has to wait for such a lock
-- fails with 40001 instead (its snapshot could not see the other's commit).
--
-- Internal producers (create_task, assign_task, the terminal effects) never
-- abort the caller's change because of the woken agent: a missing agent or
-- one that does not accept runs gives the outcome 'skipped' and no run.

CREATE TYPE office.task_result AS (
    task_id text, assignment_generation bigint, outcome text, dedup_kind text, run_id text);
COMMENT ON TYPE office.task_result IS
    'Result of office.create_task: the task id, its assignment generation, and the outcome of its task_assigned run (NULL when none was due; skipped when the assignee does not accept runs).';

CREATE TYPE office.assign_result AS (
    assignment_generation bigint, interrupt boolean, outcome text, dedup_kind text, run_id text);
COMMENT ON TYPE office.assign_result IS
    'Result of office.assign_task: the generation this call committed, whether the previous assignee is to be interrupted, and the outcome of the task_assigned run (NULL when none was due).';

CREATE TABLE office.tasks (
    id                        text PRIMARY KEY
                              CHECK (office._is_id(id)),
    workspace_id              text NOT NULL
                              CHECK (office._is_id(workspace_id)),
    parent_id                 text REFERENCES office.tasks (id) ON DELETE SET NULL
                              CHECK (parent_id <> id),
    workflow_step_id          text,
    title                     text NOT NULL DEFAULT '',
    state                     text NOT NULL DEFAULT 'TODO'
                              CHECK (state IN ('TODO', 'CREATED', 'SCHEDULING', 'IN_PROGRESS', 'REVIEW',
                                               'BLOCKED', 'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED',
                                               'CANCELLED')),
    assignee_agent_profile_id text,
    assignment_generation     bigint NOT NULL DEFAULT 0 CHECK (assignment_generation >= 0),
    is_office                 boolean NOT NULL DEFAULT true,
    is_ephemeral              boolean NOT NULL DEFAULT false,
    archived_at               timestamptz,
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('office.tasks', '');
REVOKE ALL ON TABLE office.tasks FROM PUBLIC;
COMMENT ON TABLE office.tasks IS
    'Tasks. Triggers bump assignment_generation on every write of the assignee, stamp updated_at on every write, write the task.assigned/task.moved events and run the terminal effects.';
COMMENT ON COLUMN office.tasks.assignment_generation IS
    'Bumped by one on every committed write of assignee_agent_profile_id (same agent and unassign included); the generation of assignment_key. Maintained by trigger, never written by hand.';

CREATE INDEX idx_tasks_parent_id ON office.tasks (parent_id);
CREATE INDEX idx_tasks_workspace ON office.tasks (workspace_id);
-- The parents of an agent, when it starts accepting runs again (the sweep's
-- marks, 60_parent_wake.sql). The assignee changes rarely, so this index keeps
-- state changes HOT (an index on, or predicated on, state or updated_at would
-- make every task write update every index of office.tasks).
CREATE INDEX idx_tasks_assignee ON office.tasks (assignee_agent_profile_id)
    WHERE assignee_agent_profile_id IS NOT NULL;

CREATE TABLE office.task_blockers (
    task_id         text NOT NULL REFERENCES office.tasks (id) ON DELETE CASCADE,
    blocker_task_id text NOT NULL REFERENCES office.tasks (id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, blocker_task_id),
    CHECK (task_id <> blocker_task_id)
);
SELECT pg_catalog.pg_extension_config_dump('office.task_blockers', '');
REVOKE ALL ON TABLE office.task_blockers FROM PUBLIC;
COMMENT ON TABLE office.task_blockers IS
    'blocker_task_id blocks task_id. Edges survive resolution; the graph stays acyclic (trigger).';

-- The tasks a task blocks (terminal effects, cycle search).
CREATE INDEX idx_task_blockers_blocker ON office.task_blockers (blocker_task_id);

-- The task states a blocker counts as done in (terminal: FAILED counts) and
-- those a child counts as finished in for its parent's wave (FAILED does not
-- complete a parent), written once; folded into constants like
-- office._statuses_refusing_runs.
CREATE FUNCTION office._task_terminal_states() RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN ARRAY['COMPLETED', 'FAILED', 'CANCELLED'];
COMMENT ON FUNCTION office._task_terminal_states() IS
    'Internal: the terminal task states (COMPLETED, FAILED, CANCELLED): a move into one runs the terminal effects; a blocker in one no longer blocks.';
REVOKE EXECUTE ON FUNCTION office._task_terminal_states() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._task_terminal_states()
    TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office._task_done_states() RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN ARRAY['COMPLETED', 'CANCELLED'];
COMMENT ON FUNCTION office._task_done_states() IS
    'Internal: the states in which a child counts as finished for its parent''s wave (COMPLETED, CANCELLED; not FAILED).';
REVOKE EXECUTE ON FUNCTION office._task_done_states() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._task_done_states()
    TO office_producer, office_worker, office_reader, office_admin;

-- Internal: 22023 unless state is a task state.
CREATE FUNCTION office._check_task_state(state text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF state IS NULL OR state NOT IN ('TODO', 'CREATED', 'SCHEDULING', 'IN_PROGRESS', 'REVIEW', 'BLOCKED',
                                      'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED', 'CANCELLED') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown task state %s (expected TODO, CREATED, SCHEDULING, IN_PROGRESS, REVIEW, '
                             'BLOCKED, WAITING_FOR_INPUT, COMPLETED, FAILED or CANCELLED)',
                             coalesce(quote_literal(state), 'NULL'));
    END IF;
    RETURN state;
END
$$;
COMMENT ON FUNCTION office._check_task_state(text) IS
    'Internal: returns state when it is a task state, else raises 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._check_task_state(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_task_state(text)
    TO office_producer, office_worker, office_reader, office_admin;

-- Internal: the enqueue of an internal producer. A missing agent, or one that
-- does not accept runs, is the outcome 'skipped' (no run, nothing raised).
-- The agent row is share-locked so its status cannot change between this
-- check and enqueue_run's own (which would otherwise raise OFA02 and abort
-- the caller's change).
CREATE FUNCTION office._wake(agent_profile_id text, reason text, payload jsonb,
                             idempotency_key text, task_id text)
    RETURNS office.enqueue_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_status text;
    v_result office.enqueue_result;
BEGIN
    SELECT a.status INTO v_status
      FROM office.agent_profiles a
     WHERE a.id = _wake.agent_profile_id
       FOR SHARE;
    IF NOT FOUND OR v_status = ANY (office._statuses_refusing_runs()) THEN
        v_result := ('skipped', NULL, NULL);
        RETURN v_result;
    END IF;
    RETURN office.enqueue_run(agent_profile_id => _wake.agent_profile_id,
                              reason           => _wake.reason,
                              payload          => _wake.payload,
                              idempotency_key  => _wake.idempotency_key,
                              task_id          => _wake.task_id);
END
$$;
COMMENT ON FUNCTION office._wake(text, text, jsonb, text, text) IS
    'Internal: enqueue_run for an internal producer; a missing agent or one that does not accept runs is (skipped, NULL, NULL) instead of an error.';
REVOKE EXECUTE ON FUNCTION office._wake(text, text, jsonb, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._wake(text, text, jsonb, text, text) TO office_admin;

-- --- readers ------------------------------------------------------------------

-- The wave of a parent: its non-archived children, read in one place for the
-- readers below, the sweep's candidates and reconcile_parent
-- (60_parent_wake.sql), so that every path derives the same child set key,
-- generation and hence wake_operation_id. PL/pgSQL, not SQL: a SQL function
-- with a SET clause is planned again at every call (once per candidate
-- parent in a sweep).
CREATE FUNCTION office._child_wave(parent_task_id text)
    RETURNS TABLE (child_set_key text, newest_child_updated_at text, live_children bigint,
                   open_children bigint)
    LANGUAGE plpgsql STABLE ROWS 1
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT coalesce(string_agg(c.id || ':' || c.state, ',' ORDER BY c.id COLLATE "C"), ''),
           coalesce(office.second_precision_text(max(c.updated_at)), ''),
           count(*),
           count(*) FILTER (WHERE c.state <> ALL (office._task_done_states()))
      FROM office.tasks c
     WHERE c.parent_id = _child_wave.parent_task_id AND c.archived_at IS NULL;
END
$$;
COMMENT ON FUNCTION office._child_wave(text) IS
    'Internal: one row for the parent''s non-archived children: child_set_key (id:STATE ordered by id bytewise, joined with ","), newest_child_updated_at (second_precision_text of the newest updated_at, UTC), live_children and open_children (not COMPLETED/CANCELLED); '''' and 0 when there are none.';
REVOKE EXECUTE ON FUNCTION office._child_wave(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._child_wave(text) TO office_admin;

CREATE FUNCTION office.child_set_key(parent_task_id text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    RETURN (SELECT w.child_set_key FROM office._child_wave(child_set_key.parent_task_id) AS w);
COMMENT ON FUNCTION office.child_set_key(text) IS
    'id:STATE of the non-archived children of the parent, ordered by id (bytewise), joined with ","; '''' if none (DOMAIN.md §3.4).';
REVOKE EXECUTE ON FUNCTION office.child_set_key(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.child_set_key(text) TO office_reader, office_admin;

CREATE FUNCTION office.child_generation(parent_task_id text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    RETURN (SELECT w.newest_child_updated_at FROM office._child_wave(child_generation.parent_task_id) AS w);
COMMENT ON FUNCTION office.child_generation(text) IS
    'second_precision_text(max(updated_at)) over the non-archived children of the parent (UTC); '''' if none (DOMAIN.md §2.19).';
REVOKE EXECUTE ON FUNCTION office.child_generation(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.child_generation(text) TO office_reader, office_admin;

CREATE FUNCTION office.task_terminal_status(task_id text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    RETURN coalesce((SELECT CASE
                              WHEN t.archived_at IS NOT NULL THEN 'cancelled'
                              WHEN t.state = 'COMPLETED' THEN 'done'
                              WHEN t.state = 'FAILED' THEN 'failed'
                              WHEN t.state = 'CANCELLED' THEN 'cancelled'
                              ELSE ''
                            END
                       FROM office.tasks t
                      WHERE t.id = task_terminal_status.task_id),
                    'missing');
COMMENT ON FUNCTION office.task_terminal_status(text) IS
    'The routine gate''s view of a task: cancelled if archived (any state), else done (COMPLETED), failed (FAILED), cancelled (CANCELLED), '''' otherwise; missing when there is no such task.';
REVOKE EXECUTE ON FUNCTION office.task_terminal_status(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.task_terminal_status(text) TO office_reader, office_admin;

CREATE FUNCTION office.is_task_terminal(task_id text) RETURNS boolean
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_state text;
BEGIN
    SELECT t.state INTO v_state FROM office.tasks t WHERE t.id = is_task_terminal.task_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFT01',
            MESSAGE = format('task %s not found', coalesce(quote_literal(is_task_terminal.task_id), 'NULL'));
    END IF;
    RETURN v_state = ANY (office._task_terminal_states());
END
$$;
COMMENT ON FUNCTION office.is_task_terminal(text) IS
    'Whether the task is COMPLETED, FAILED or CANCELLED (the blocker terminal set); unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.is_task_terminal(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.is_task_terminal(text) TO office_reader, office_admin;

CREATE FUNCTION office.get_task(task_id text) RETURNS SETOF office.tasks
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT t.* FROM office.tasks t WHERE t.id = get_task.task_id;
END;
COMMENT ON FUNCTION office.get_task(text) IS
    'The task row, or no row when there is no such task.';
REVOKE EXECUTE ON FUNCTION office.get_task(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.get_task(text)
    TO office_producer, office_worker, office_reader, office_admin;

-- --- triggers: generation and updated_at -------------------------------------

-- BEFORE INSERT: normalise empty references to NULL; the generation starts at
-- 1 when both assignee and step are set, else 0. An explicit non-zero
-- generation is kept (a restore of existing rows must never reset it).
CREATE FUNCTION office._tasks_before_insert() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.assignee_agent_profile_id := nullif(NEW.assignee_agent_profile_id, '');
    NEW.parent_id := nullif(NEW.parent_id, '');
    IF NEW.assignment_generation = 0
       AND NEW.assignee_agent_profile_id IS NOT NULL
       AND coalesce(NEW.workflow_step_id, '') <> '' THEN
        NEW.assignment_generation := 1;
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._tasks_before_insert() IS
    'Trigger: a new task''s assignment_generation is 1 when assignee and step are both non-empty, else 0; empty assignee/parent become NULL.';
REVOKE EXECUTE ON FUNCTION office._tasks_before_insert() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_before_insert() TO office_admin;

CREATE TRIGGER tasks_10_before_insert
    BEFORE INSERT ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_before_insert();

-- BEFORE UPDATE (every update): the generation is not written by hand;
-- updated_at is stamped unless the statement sets it itself.
CREATE FUNCTION office._tasks_before_update() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.assignment_generation IS DISTINCT FROM OLD.assignment_generation THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('assignment_generation of task %s is maintained by office (write '
                             'assignee_agent_profile_id instead); got %s, have %s',
                             quote_literal(OLD.id), coalesce(NEW.assignment_generation::text, 'NULL'),
                             OLD.assignment_generation);
    END IF;
    NEW.assignee_agent_profile_id := nullif(NEW.assignee_agent_profile_id, '');
    NEW.parent_id := nullif(NEW.parent_id, '');
    IF NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._tasks_before_update() IS
    'Trigger: refuses a hand-written assignment_generation (22023), stamps updated_at, turns an empty assignee/parent into NULL.';
REVOKE EXECUTE ON FUNCTION office._tasks_before_update() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_before_update() TO office_admin;

CREATE TRIGGER tasks_10_before_update
    BEFORE UPDATE ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_before_update();

-- BEFORE UPDATE OF assignee_agent_profile_id: fires whenever the column is in
-- the SET list (also for the value it already has: that is the point), after
-- tasks_10_before_update (triggers fire in name order).
CREATE FUNCTION office._tasks_bump_generation() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.assignment_generation := OLD.assignment_generation + 1;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._tasks_bump_generation() IS
    'Trigger: every write of assignee_agent_profile_id bumps assignment_generation by one in the writing transaction.';
REVOKE EXECUTE ON FUNCTION office._tasks_bump_generation() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_bump_generation() TO office_admin;

CREATE TRIGGER tasks_20_bump_generation
    BEFORE UPDATE OF assignee_agent_profile_id ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_bump_generation();

-- --- trigger: terminal effects -----------------------------------------------

CREATE FUNCTION office._tasks_terminal_effects() RETURNS trigger
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
    -- not allowed to undo the move (DOMAIN.md §2.15).
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
COMMENT ON FUNCTION office._tasks_terminal_effects() IS
    'Trigger: on a change of state into COMPLETED, FAILED or CANCELLED, (1) sync_routine_run_status, (2) task_blockers_resolved for each dependent whose blockers are all terminal, (3) task_children_completed for an Office parent whose children are all COMPLETED/CANCELLED.';
REVOKE EXECUTE ON FUNCTION office._tasks_terminal_effects() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_terminal_effects() TO office_admin;

CREATE TRIGGER tasks_60_terminal_effects
    AFTER UPDATE OF state ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_terminal_effects();

-- --- trigger: acyclic blocker graph ------------------------------------------

-- A new edge (task_id, blocker_task_id) closes a cycle when task_id already
-- blocks blocker_task_id, directly or through others. The search and the
-- insert are a check-then-act, so every edge insert takes one lock on the
-- blocker graph first: two edges that would only together form a cycle are
-- never checked at the same time. (One lock for the whole graph, not one per
-- workspace: edges may join tasks of different workspaces, and a cycle through
-- several workspaces would slip between per-workspace locks. Edges are added
-- rarely.)
CREATE FUNCTION office._task_blockers_acyclic() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.task_id = NEW.blocker_task_id THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task %s cannot block itself', quote_literal(NEW.task_id));
    END IF;
    PERFORM office._xact_lock(office._lock_key('task_blockers.graph'));
    IF EXISTS (
        WITH RECURSIVE upstream(id) AS (
            SELECT b.blocker_task_id FROM office.task_blockers b WHERE b.task_id = NEW.blocker_task_id
            UNION
            SELECT b.blocker_task_id FROM office.task_blockers b JOIN upstream u ON b.task_id = u.id
        )
        SELECT FROM upstream WHERE upstream.id = NEW.task_id
    ) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task %s blocking task %s would close a cycle (%s already blocks %s)',
                             quote_literal(NEW.blocker_task_id), quote_literal(NEW.task_id),
                             quote_literal(NEW.task_id), quote_literal(NEW.blocker_task_id));
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._task_blockers_acyclic() IS
    'Trigger: refuses (22023) a self-block and an edge that would close a cycle of any length, under a lock on the blocker graph.';
REVOKE EXECUTE ON FUNCTION office._task_blockers_acyclic() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._task_blockers_acyclic() TO office_admin;

CREATE TRIGGER task_blockers_10_acyclic
    BEFORE INSERT OR UPDATE OF task_id, blocker_task_id ON office.task_blockers
    FOR EACH ROW EXECUTE FUNCTION office._task_blockers_acyclic();

-- --- triggers: workspaces do not mix (API.md, Conventions) -------------------

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

-- --- producer functions --------------------------------------------------------

CREATE FUNCTION office.create_task(workspace_id text, id text DEFAULT NULL, title text DEFAULT '',
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
        v_id := office._uuid_v7();
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

CREATE FUNCTION office.assign_task(task_id text, assignee_agent_profile_id text,
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

CREATE FUNCTION office.move_task(task_id text, state text) RETURNS office.tasks
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row office.tasks;
BEGIN
    PERFORM office._check_task_state(move_task.state);
    UPDATE office.tasks t SET state = move_task.state WHERE t.id = move_task.task_id
    RETURNING t.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFT01',
            MESSAGE = format('task %s not found', coalesce(quote_literal(move_task.task_id), 'NULL'));
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.move_task(text, text) IS
    'Sets the state; a change into COMPLETED, FAILED or CANCELLED runs the terminal effects in the same transaction (trigger). Unknown state 22023, unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.move_task(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.move_task(text, text) TO office_producer, office_admin;

CREATE FUNCTION office.archive_task(task_id text) RETURNS office.tasks
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row office.tasks;
BEGIN
    UPDATE office.tasks t SET archived_at = coalesce(t.archived_at, now())
     WHERE t.id = archive_task.task_id
    RETURNING t.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFT01',
            MESSAGE = format('task %s not found', coalesce(quote_literal(archive_task.task_id), 'NULL'));
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.archive_task(text) IS
    'Sets archived_at (kept when already archived). Unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.archive_task(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.archive_task(text) TO office_producer, office_admin;

-- Internal: OFT01 unless the task exists.
CREATE FUNCTION office._require_task(task_id text) RETURNS text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF NOT EXISTS (SELECT FROM office.tasks t WHERE t.id = _require_task.task_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFT01',
            MESSAGE = format('task %s not found', coalesce(quote_literal(_require_task.task_id), 'NULL'));
    END IF;
    RETURN _require_task.task_id;
END
$$;
COMMENT ON FUNCTION office._require_task(text) IS
    'Internal: returns task_id when the task exists, else raises OFT01 naming it.';
REVOKE EXECUTE ON FUNCTION office._require_task(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._require_task(text) TO office_admin;

CREATE FUNCTION office.add_blocker(task_id text, blocker_task_id text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM office._require_task(add_blocker.task_id);
    PERFORM office._require_task(add_blocker.blocker_task_id);
    IF add_blocker.task_id = add_blocker.blocker_task_id THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task %s cannot block itself', quote_literal(add_blocker.task_id));
    END IF;
    IF EXISTS (SELECT FROM office.task_blockers b
                WHERE b.task_id = add_blocker.task_id AND b.blocker_task_id = add_blocker.blocker_task_id) THEN
        RETURN;
    END IF;
    -- The trigger refuses a cycle (under the graph lock).
    INSERT INTO office.task_blockers (task_id, blocker_task_id)
    VALUES (add_blocker.task_id, add_blocker.blocker_task_id)
    ON CONFLICT (task_id, blocker_task_id) DO NOTHING;
END
$$;
COMMENT ON FUNCTION office.add_blocker(text, text) IS
    'blocker_task_id now blocks task_id. Self-block or an edge closing a cycle (any length) 22023, unknown task OFT01, tasks of two workspaces OFW01, an existing edge is a no-op.';
REVOKE EXECUTE ON FUNCTION office.add_blocker(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.add_blocker(text, text) TO office_producer, office_admin;

CREATE FUNCTION office.remove_blocker(task_id text, blocker_task_id text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM office._require_task(remove_blocker.task_id);
    PERFORM office._require_task(remove_blocker.blocker_task_id);
    DELETE FROM office.task_blockers b
     WHERE b.task_id = remove_blocker.task_id AND b.blocker_task_id = remove_blocker.blocker_task_id;
END
$$;
COMMENT ON FUNCTION office.remove_blocker(text, text) IS
    'blocker_task_id no longer blocks task_id (no-op when it did not). Unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.remove_blocker(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.remove_blocker(text, text) TO office_producer, office_admin;
-- office: the transactional event outbox (API.md §6).
--
-- Triggers on office.tasks append an event in the same transaction as the
-- change, whoever makes it (office functions or a plain UPDATE in psql):
--   * task.assigned on every write of assignee_agent_profile_id (and on an
--     INSERT with an assignee): task_id, workspace_id, agent_profile_id (NULL
--     when unassigned), assignment_generation (the value this write
--     committed), previous_agent_profile_id, is_office, actor (what the
--     writer claims: {"id", "type"} from assign_task, or the session setting
--     office.actor for a plain write, NULL when unset) and db_user (the
--     authenticated session_user, which no caller can forge);
--   * task.moved on every change of state: task_id, workspace_id, from_state,
--     to_state.
-- Consumers compete: claim_events hands each pending event to one claimer
-- (FOR UPDATE SKIP LOCKED) and hides it for the visibility timeout; an event
-- not acknowledged by then is claimable again (at-least-once), so handlers
-- must be idempotent (controlplane.subscriber keys its runs).

CREATE TABLE office.events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic        text NOT NULL CHECK (topic <> ''),
    task_id      text,
    payload      jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(payload) = 'object'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz,
    claimed_by   text,
    claimed_at   timestamptz,
    visible_at   timestamptz,
    deliveries   int NOT NULL DEFAULT 0
);
SELECT pg_catalog.pg_extension_config_dump('office.events', '');
SELECT pg_catalog.pg_extension_config_dump('office.events_id_seq', '');
REVOKE ALL ON TABLE office.events FROM PUBLIC;
REVOKE ALL ON SEQUENCE office.events_id_seq FROM PUBLIC;
COMMENT ON TABLE office.events IS
    'Transactional outbox: task.assigned and task.moved, written with the change; claim_events/ack_events consume it at least once.';
COMMENT ON COLUMN office.events.visible_at IS
    'A claimed event is hidden from other claimers until then (claimed_at + visibility).';
COMMENT ON COLUMN office.events.deliveries IS
    'How many times the event was claimed (more than 1: a claim expired unacknowledged).';

-- claim_events: the oldest pending events.
CREATE INDEX idx_events_pending ON office.events (id) WHERE processed_at IS NULL;
-- prune_events.
CREATE INDEX idx_events_processed ON office.events (processed_at) WHERE processed_at IS NOT NULL;

-- --- triggers -------------------------------------------------------------------

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

CREATE FUNCTION office._tasks_event_assigned() RETURNS trigger
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

CREATE TRIGGER tasks_50_event_assigned
    AFTER INSERT OR UPDATE OF assignee_agent_profile_id ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_event_assigned();

CREATE FUNCTION office._tasks_event_moved() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.state IS NOT DISTINCT FROM OLD.state THEN
        RETURN NULL;
    END IF;
    INSERT INTO office.events (topic, task_id, payload)
    VALUES ('task.moved', NEW.id,
            jsonb_build_object('task_id', NEW.id, 'workspace_id', NEW.workspace_id,
                               'from_state', OLD.state, 'to_state', NEW.state));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._tasks_event_moved() IS
    'Trigger: appends task.moved (task_id, workspace_id, from_state, to_state) on every change of state.';
REVOKE EXECUTE ON FUNCTION office._tasks_event_moved() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_event_moved() TO office_admin;

CREATE TRIGGER tasks_51_event_moved
    AFTER UPDATE OF state ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_event_moved();

-- --- consumers --------------------------------------------------------------------

CREATE FUNCTION office.claim_events(consumer text, max_rows int DEFAULT 100,
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

CREATE FUNCTION office.ack_events(ids bigint[]) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count int;
BEGIN
    IF ack_events.ids IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'ids must not be NULL';
    END IF;
    UPDATE office.events e
       SET processed_at = now()
     WHERE e.id = ANY (ack_events.ids) AND e.processed_at IS NULL;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.ack_events(bigint[]) IS
    'Marks the events processed; returns how many were acknowledged now (unknown or already processed ids do not count).';
REVOKE EXECUTE ON FUNCTION office.ack_events(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.ack_events(bigint[]) TO office_worker, office_admin;

CREATE FUNCTION office.prune_events(older_than interval) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count int;
BEGIN
    PERFORM office._check_interval('older_than', prune_events.older_than);
    DELETE FROM office.events e
     WHERE e.processed_at IS NOT NULL AND e.processed_at < now() - prune_events.older_than;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.prune_events(interval) IS
    'Deletes acknowledged events processed longer ago than older_than; returns the count.';
REVOKE EXECUTE ON FUNCTION office.prune_events(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.prune_events(interval) TO office_admin;
-- office: wakeup requests (API.md §4; DOMAIN.md §1.5, §2.18).
--
-- A wakeup request asks for an agent to be woken; dispatch_wakeup turns it
-- into a run of the queue, or folds it into the agent's in-flight run:
--   queued -> claimed    a fresh run was created (run_id)
--   queued -> coalesced  merged into the agent's newest queued/claimed run
--                        (coalesced_count + 1, payload merged into its
--                        context_snapshot, the request's keys winning)
--   queued -> skipped    skip_if_active and the agent has an in-flight run
--   queued -> failed     fail_wakeup, only while still queued
-- Every terminal state stamps finished_at. The durable dedup is the unbounded
-- unique index idx_wakeup_idempotency: a second request with a key is the
-- outcome ('deduped', 'durable', <holder>), counted on queue 'wakeup' under
-- the request's reason. There is no windowed lookup and no coalescing on
-- insert. Dispatches for one agent are serialised by a transaction-scoped
-- advisory lock, so two of them never both create a run where one would
-- coalesce into the other.

CREATE TYPE office.wakeup_result AS (outcome text, dedup_kind text, wakeup_request_id text);
COMMENT ON TYPE office.wakeup_result IS
    'Result of office.request_wakeup: outcome queued|deduped, dedup_kind durable (deduped only), the new request or the holder of the key.';

CREATE TYPE office.wakeup_dispatch_result AS (status text, run_id text);
COMMENT ON TYPE office.wakeup_dispatch_result IS
    'Result of office.dispatch_wakeup: status claimed (a new run), coalesced (into run_id), skipped or noop (the request was not queued), and the run concerned.';

CREATE TABLE office.wakeup_requests (
    id               text PRIMARY KEY DEFAULT office._uuid_v7(),
    agent_profile_id text NOT NULL CHECK (agent_profile_id <> ''),
    source           text NOT NULL CHECK (source <> ''),
    reason           text NOT NULL DEFAULT '',
    payload          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(payload) = 'object'),
    status           text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'claimed', 'coalesced', 'skipped', 'failed')),
    coalesced_count  int NOT NULL DEFAULT 1,
    idempotency_key  text CHECK (idempotency_key <> '' AND length(idempotency_key) <= 512),
    run_id           text,
    requested_at     timestamptz NOT NULL DEFAULT now(),
    claimed_at       timestamptz,
    finished_at      timestamptz
);
SELECT pg_catalog.pg_extension_config_dump('office.wakeup_requests', '');
REVOKE ALL ON TABLE office.wakeup_requests FROM PUBLIC;
COMMENT ON TABLE office.wakeup_requests IS
    'Requests to wake an agent: queued -> claimed|coalesced|skipped|failed (dispatch_wakeup, fail_wakeup). One request per idempotency key, ever.';
COMMENT ON COLUMN office.wakeup_requests.reason IS
    'Why the agent is woken (e.g. routine_dispatch_cron); replaced by policy:skip_if_active on a skip and by the failure text on a failure.';

-- The durable dedup: one request per key, whatever its status, no time bound.
CREATE UNIQUE INDEX idx_wakeup_idempotency ON office.wakeup_requests (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX idx_wakeup_agent_status ON office.wakeup_requests (agent_profile_id, status);

CREATE FUNCTION office.request_wakeup(agent_profile_id text, source text, reason text DEFAULT '',
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

CREATE FUNCTION office.dispatch_wakeup(wakeup_request_id text) RETURNS office.wakeup_dispatch_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_req      office.wakeup_requests;
    v_status   text;
    v_policy   text;
    v_target   text;
    v_run      text;
    v_result   office.wakeup_dispatch_result;
BEGIN
    -- The request's row lock serialises dispatches of one request.
    SELECT w.* INTO v_req FROM office.wakeup_requests w WHERE w.id = dispatch_wakeup.wakeup_request_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('wakeup request %s not found',
                             coalesce(quote_literal(dispatch_wakeup.wakeup_request_id), 'NULL'));
    END IF;
    IF v_req.status <> 'queued' THEN
        v_result := ('noop', v_req.run_id);
        RETURN v_result;
    END IF;
    -- The agent must accept runs; otherwise raise and leave the request queued.
    SELECT a.status INTO v_status FROM office.agent_profiles a WHERE a.id = v_req.agent_profile_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01',
            MESSAGE = format('agent %s not found', quote_literal(v_req.agent_profile_id));
    END IF;
    IF v_status = ANY (office._statuses_refusing_runs()) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA02',
            MESSAGE = format('agent %s is %s and does not accept runs', quote_literal(v_req.agent_profile_id),
                             v_status);
    END IF;

    -- The policy: a routine's own (always_create/always_enqueue -> always,
    -- skip_if_active -> skip, anything else -> coalesce); other sources coalesce.
    v_policy := 'coalesce';
    IF v_req.source = 'routine' THEN
        SELECT CASE r.concurrency_policy
                   WHEN 'always_create' THEN 'always'
                   WHEN 'always_enqueue' THEN 'always'
                   WHEN 'skip_if_active' THEN 'skip'
                   ELSE 'coalesce' END
          INTO v_policy
          FROM office.routines r
         WHERE r.id = v_req.payload ->> 'routine_id';
        v_policy := coalesce(v_policy, 'coalesce');
    END IF;

    PERFORM office._xact_lock(office._lock_key('wakeups.agent', v_req.agent_profile_id));
    IF v_policy <> 'always' THEN
        LOOP
            SELECT r.id INTO v_target
              FROM office.runs r
             WHERE r.agent_profile_id = v_req.agent_profile_id AND r.status IN ('queued', 'claimed')
             ORDER BY r.requested_at DESC, r.id COLLATE "C" DESC
             LIMIT 1;
            EXIT WHEN NOT FOUND;
            IF v_policy = 'skip' THEN
                UPDATE office.wakeup_requests w
                   SET status = 'skipped', reason = 'policy:skip_if_active', finished_at = now()
                 WHERE w.id = v_req.id;
                v_result := ('skipped', NULL);
                RETURN v_result;
            END IF;
            -- Guarded: a run that finished since the lookup is not a target;
            -- then look again.
            UPDATE office.runs r
               SET coalesced_count = r.coalesced_count + 1,
                   context_snapshot = r.context_snapshot || v_req.payload
             WHERE r.id = v_target AND r.status IN ('queued', 'claimed')
            RETURNING r.id INTO v_run;
            IF v_run IS NOT NULL THEN
                UPDATE office.wakeup_requests w
                   SET status = 'coalesced', run_id = v_run, claimed_at = now(), finished_at = now()
                 WHERE w.id = v_req.id;
                v_result := ('coalesced', v_run);
                RETURN v_result;
            END IF;
        END LOOP;
    END IF;

    INSERT INTO office.runs AS r (agent_profile_id, reason, payload, context_snapshot)
    VALUES (v_req.agent_profile_id, coalesce(nullif(v_req.reason, ''), v_req.source), '{}', v_req.payload)
    RETURNING r.id INTO v_run;
    PERFORM office._signal_run(v_req.agent_profile_id, v_run);
    UPDATE office.wakeup_requests w
       SET status = 'claimed', run_id = v_run, claimed_at = now(), finished_at = now()
     WHERE w.id = v_req.id;
    v_result := ('claimed', v_run);
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office.dispatch_wakeup(text) IS
    'Dispatches a queued wakeup request against the agent''s newest queued/claimed run under the policy (source routine: the routine''s; else coalesce): a new run (claimed), coalesced into it (context_snapshot || payload), or skipped (policy:skip_if_active). Not queued: noop. Agent not accepting runs: OFA02, the request stays queued. Unknown request OFR01, unknown agent OFA01.';
REVOKE EXECUTE ON FUNCTION office.dispatch_wakeup(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.dispatch_wakeup(text) TO office_producer, office_worker, office_admin;

CREATE FUNCTION office.fail_wakeup(wakeup_request_id text, reason text) RETURNS boolean
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
-- office: routines, their cron triggers and their runs (API.md §4;
-- DOMAIN.md §1.6, §2.16, §2.17, §3.8, §3.9). The wakeup requests that
-- lightweight fires create are in 50_wakeups.sql.
--
-- A fire (dispatch_routine) renders the routine's task template, records a
-- routine run with the fingerprint of what it would create, applies the
-- concurrency policy, then materialises: a *heavy* routine (its template has
-- a title) creates a task, a *lightweight* one a wakeup request for its
-- assignee.
--
-- The gate (skip_if_active, coalesce_if_active) looks for the newest
-- task_created run of the routine with the same fingerprint. A gated run whose
-- task has become terminal (or vanished, or was archived) is closed on the
-- spot by the conditional close and the gate looks again ("self-heal"), so an
-- older run that is still live keeps gating and a stale one never does. The
-- lookup and the creation of the task are a check-then-act: every gated fire
-- takes a transaction-scoped advisory lock on (routine, fingerprint) before
-- its first lookup, so two fires with one fingerprint never both reach
-- task_created (tests/isolation/specs/routines_gate_race.spec; under READ
-- COMMITTED the second reads after the first committed; a stricter
-- transaction that had to wait gets 40001).
--
-- The conditional close (close_routine_run) is one guarded UPDATE ... WHERE
-- status = 'task_created': the task-terminal trigger of 40_tasks.sql (through
-- sync_routine_run_status) and an inline self-heal may race on one run, and
-- exactly one of them closes it; a replay never turns done into cancelled and
-- never moves completed_at (tests/isolation/specs/routines_close_race.spec).
--
-- Cron: claim_routine_tick is a compare-and-swap on next_run_at; of N
-- claimers of one tick exactly one wins. The claimed tick (the observed
-- next_run_at, not the advanced one) is what the caller hands to
-- dispatch_routine, and routine_key() names it, so a redelivered tick dedups
-- on the wakeup key and a new tick does not. Next ticks are computed in Python
-- (controlplane.cron: cron expression, time zone, catch-up policy); SQL
-- checks the expression's structure and the time zone when a trigger is added.

CREATE TABLE office.routines (
    id                        text PRIMARY KEY
                              CHECK (office._is_id(id)),
    workspace_id              text NOT NULL
                              CHECK (office._is_id(workspace_id)),
    name                      text NOT NULL CHECK (name <> ''),
    task_template             jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(task_template) = 'object'),
    assignee_agent_profile_id text CHECK (assignee_agent_profile_id <> ''),
    concurrency_policy        text NOT NULL DEFAULT 'skip_if_active'
                              CHECK (concurrency_policy IN ('skip_if_active', 'coalesce_if_active',
                                                            'always_create')),
    catch_up_policy           text NOT NULL DEFAULT 'enqueue_missed_with_cap'
                              CHECK (catch_up_policy IN ('skip_missed', 'enqueue_missed_with_cap')),
    catch_up_max              int NOT NULL DEFAULT 25 CHECK (catch_up_max >= 1),
    variables                 jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(variables) = 'object'),
    status                    text NOT NULL DEFAULT 'active'
                              CHECK (status IN ('active', 'paused', 'archived')),
    last_run_at               timestamptz,
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('office.routines', '');
REVOKE ALL ON TABLE office.routines FROM PUBLIC;
COMMENT ON TABLE office.routines IS
    'Routines: a task template (a non-empty title makes the routine heavy: fires create tasks; else lightweight: fires wake the assignee), declared variables, a concurrency policy and a catch-up policy.';

CREATE INDEX idx_routines_workspace ON office.routines (workspace_id);
-- A new agent must not adopt the assignee of a routine of another workspace
-- (20_agents.sql).
CREATE INDEX idx_routines_assignee ON office.routines (assignee_agent_profile_id)
    WHERE assignee_agent_profile_id IS NOT NULL;

CREATE TABLE office.routine_triggers (
    id              text PRIMARY KEY
                    CHECK (office._is_id(id)),
    routine_id      text NOT NULL REFERENCES office.routines (id) ON DELETE CASCADE,
    kind            text NOT NULL DEFAULT 'cron' CHECK (kind IN ('cron', 'webhook', 'manual')),
    cron_expression text,
    timezone        text NOT NULL DEFAULT 'UTC',
    next_run_at     timestamptz,
    last_fired_at   timestamptz,
    enabled         boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (kind <> 'cron' OR cron_expression IS NOT NULL)
);
SELECT pg_catalog.pg_extension_config_dump('office.routine_triggers', '');
REVOKE ALL ON TABLE office.routine_triggers FROM PUBLIC;
COMMENT ON TABLE office.routine_triggers IS
    'Triggers of a routine. A cron trigger fires at the ticks of cron_expression in timezone; next_run_at is the next tick to claim (NULL: not armed yet), advanced by claim_routine_tick.';

CREATE INDEX idx_routine_triggers_routine ON office.routine_triggers (routine_id);
-- The cron loop's scan for due triggers.
CREATE INDEX idx_routine_triggers_due ON office.routine_triggers (next_run_at) WHERE enabled;

CREATE TABLE office.routine_runs (
    id                       text PRIMARY KEY DEFAULT office._uuid_v7(),
    routine_id               text NOT NULL REFERENCES office.routines (id) ON DELETE CASCADE,
    trigger_id               text NOT NULL DEFAULT '',
    source                   text NOT NULL CHECK (source IN ('cron', 'manual', 'webhook')),
    status                   text NOT NULL DEFAULT 'received'
                             CHECK (status IN ('received', 'task_created', 'skipped', 'coalesced',
                                               'failed', 'done', 'cancelled')),
    trigger_payload          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(trigger_payload) = 'object'),
    linked_task_id           text NOT NULL DEFAULT '',
    coalesced_into_run_id    text NOT NULL DEFAULT '',
    dispatch_fingerprint     text NOT NULL DEFAULT '',
    started_at               timestamptz,
    completed_at             timestamptz,
    -- clock_timestamp(): "newest" must hold between two runs of one transaction too.
    created_at               timestamptz NOT NULL DEFAULT clock_timestamp(),
    wakeup_request_id        text,
    error_message            text,
    catch_up_missed_ticks    int,
    catch_up_first_missed_at timestamptz,
    catch_up_truncated       boolean
);
SELECT pg_catalog.pg_extension_config_dump('office.routine_runs', '');
REVOKE ALL ON TABLE office.routine_runs FROM PUBLIC;
COMMENT ON TABLE office.routine_runs IS
    'One row per fire: received -> skipped|coalesced|task_created|done|failed; task_created -> done|failed|cancelled only through the conditional close (close_routine_run). Only task_created is active.';
COMMENT ON COLUMN office.routine_runs.trigger_payload IS
    'The resolved variables of the fire (declared defaults overridden by the fire''s values).';
COMMENT ON COLUMN office.routine_runs.linked_task_id IS
    'The task a heavy fire created; '''' for every other run (lightweight runs never link a task).';

-- The gate: the newest active run of a routine with one fingerprint.
CREATE INDEX idx_office_routine_runs_active_fingerprint
    ON office.routine_runs (routine_id, dispatch_fingerprint, created_at DESC)
    WHERE status = 'task_created';
-- sync_routine_run_status: the newest run linked to a task.
CREATE INDEX idx_office_routine_runs_linked_task
    ON office.routine_runs (linked_task_id, created_at DESC)
    WHERE linked_task_id <> '';
-- list_routine_runs (the dashboard's routine page): a routine's runs, newest
-- first, and the cascade when a routine is deleted (since 0.4.0).
CREATE INDEX idx_routine_runs_routine ON office.routine_runs (routine_id, id);

CREATE TYPE office.dispatch_routine_result AS (
    routine_run_id        text,
    status                text,
    linked_task_id        text,
    coalesced_into_run_id text,
    wakeup_request_id     text,
    wakeup_outcome        text,
    run_id                text,
    idempotency_key       text,
    error_message         text,
    workspace_id          text);
COMMENT ON TYPE office.dispatch_routine_result IS
    'Result of office.dispatch_routine: the routine run and the status it reached (task_created, skipped, coalesced, done, failed), the task it created, the run it coalesced into, the wakeup request (lightweight; on a dedup the holder), wakeup_outcome queued|deduped, the agent run that was woken (if any), the wakeup key, why it failed, and the routine''s workspace.';

-- --- validation helpers ----------------------------------------------------------

-- The placeholder syntax of task templates: {{name}}, spaces allowed inside
-- the braces, name an identifier.
CREATE FUNCTION office._template_placeholder() RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}';
COMMENT ON FUNCTION office._template_placeholder() IS
    'Internal: the regular expression of a template placeholder ({{name}}; group 1 is the name).';
REVOKE EXECUTE ON FUNCTION office._template_placeholder() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._template_placeholder() TO office_admin;

-- Renders one template text: each {{name}} is replaced by the value of name
-- in vars (a JSON string as its text, any other JSON value as its JSON text),
-- in one pass (a value containing {{x}} is not rendered again). A placeholder
-- without a value is 22023.
CREATE FUNCTION office._render_template(template text, vars jsonb, what text, routine_id text)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pattern constant text := office._template_placeholder();
    v_parts   text[];
    v_result  text;
    v_name    text;
    v_value   jsonb;
    v_i       int := 1;
BEGIN
    IF template IS NULL OR template = '' THEN
        RETURN '';
    END IF;
    v_parts := regexp_split_to_array(template, v_pattern);
    v_result := v_parts[1];
    FOR v_name IN
        SELECT m.match[1] FROM regexp_matches(template, v_pattern, 'g') WITH ORDINALITY AS m(match, n)
         ORDER BY m.n
    LOOP
        v_value := vars -> v_name;
        IF v_value IS NULL OR jsonb_typeof(v_value) = 'null' THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('placeholder {{%s}} in the %s of routine %s has no value (declare a default or pass the variable)',
                                 v_name, what, quote_literal(routine_id));
        END IF;
        v_i := v_i + 1;
        v_result := v_result
            || CASE jsonb_typeof(v_value) WHEN 'string' THEN v_value #>> '{}' ELSE v_value::text END
            || v_parts[v_i];
    END LOOP;
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office._render_template(text, jsonb, text, text) IS
    'Internal: the template text with each {{name}} replaced (one pass) by the value of name in vars; an unfilled placeholder is 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._render_template(text, jsonb, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._render_template(text, jsonb, text, text) TO office_admin;

-- One comma-separated term of one cron field, upper-cased. Accepts what
-- controlplane.cron (cronsim) computes: *, a, a-b, with an optional /step;
-- month and day-of-week names; L and LW in day-of-month; nL and n#k in
-- day-of-week.
CREATE FUNCTION office._cron_term_ok(field int, term text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lo    int := (ARRAY[0, 0, 1, 1, 0])[field];
    v_hi    int := (ARRAY[59, 23, 31, 12, 7])[field];
    v_names text[] := CASE field
                          WHEN 4 THEN ARRAY['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN',
                                            'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC']
                          WHEN 5 THEN ARRAY['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT']
                          ELSE ARRAY[]::text[] END;
    v_base  text := term;
    v_step  text;
    v_a     int;
    v_b     int;
BEGIN
    IF term IS NULL OR term = '' THEN
        RETURN false;
    END IF;
    IF field = 3 AND term IN ('L', 'LW') THEN
        RETURN true;
    END IF;
    IF field = 5 AND term ~ '^[0-7]L$' THEN
        RETURN true;
    END IF;
    IF field = 5 AND strpos(term, '#') > 0 THEN
        RETURN split_part(term, '#', 2) ~ '^[1-5]$'
           AND office._cron_value(split_part(term, '#', 1), v_lo, v_hi, v_names) IS NOT NULL;
    END IF;
    IF strpos(term, '/') > 0 THEN
        v_base := split_part(term, '/', 1);
        v_step := substr(term, strpos(term, '/') + 1);
        IF v_step !~ '^[0-9]{1,9}$' OR v_step::int = 0 THEN
            RETURN false;
        END IF;
    END IF;
    IF v_base = '*' THEN
        RETURN true;
    END IF;
    IF strpos(v_base, '-') > 0 THEN
        v_a := office._cron_value(split_part(v_base, '-', 1), v_lo, v_hi, v_names);
        v_b := office._cron_value(substr(v_base, strpos(v_base, '-') + 1), v_lo, v_hi, v_names);
        RETURN v_a IS NOT NULL AND v_b IS NOT NULL AND v_a <= v_b;
    END IF;
    RETURN office._cron_value(v_base, v_lo, v_hi, v_names) IS NOT NULL;
END
$$;
COMMENT ON FUNCTION office._cron_term_ok(int, text) IS
    'Internal: whether one upper-cased term is valid in cron field 1-5 (minute, hour, day-of-month, month, day-of-week).';
REVOKE EXECUTE ON FUNCTION office._cron_term_ok(int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._cron_term_ok(int, text) TO office_admin;

-- A number in [lo, hi] or one of names (1-based for months, 0-based for days).
CREATE FUNCTION office._cron_value(value text, lo int, hi int, names text[]) RETURNS int
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_position int;
BEGIN
    IF value ~ '^[0-9]{1,9}$' THEN
        RETURN CASE WHEN value::int BETWEEN lo AND hi THEN value::int END;
    END IF;
    v_position := array_position(names, value);
    IF v_position IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN CASE WHEN lo = 0 THEN v_position - 1 ELSE v_position END;
END
$$;
COMMENT ON FUNCTION office._cron_value(text, int, int, text[]) IS
    'Internal: the value of one cron number or name within [lo, hi], else NULL.';
REVOKE EXECUTE ON FUNCTION office._cron_value(text, int, int, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._cron_value(text, int, int, text[]) TO office_admin;

-- The structure of a 5-field cron expression; 22023 naming the expression
-- and the offending field otherwise. (Whether it ever fires, e.g. on
-- February 30th, is for the next-tick computation to find out.)
CREATE FUNCTION office._check_cron_expression(cron_expression text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_names  constant text[] := ARRAY['minute', 'hour', 'day-of-month', 'month', 'day-of-week'];
    v_fields text[];
    v_term   text;
BEGIN
    IF cron_expression IS NULL OR btrim(cron_expression) = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('cron expression %s must not be empty', coalesce(quote_literal(cron_expression), 'NULL'));
    END IF;
    v_fields := regexp_split_to_array(btrim(cron_expression), '\s+');
    IF array_length(v_fields, 1) <> 5 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('invalid cron expression %s: %s fields, expected 5 (minute hour day-of-month month day-of-week)',
                             quote_literal(cron_expression), array_length(v_fields, 1));
    END IF;
    FOR i IN 1..5 LOOP
        FOREACH v_term IN ARRAY string_to_array(upper(v_fields[i]), ',') LOOP
            IF NOT office._cron_term_ok(i, v_term) THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('invalid cron expression %s: bad %s field %s',
                                     quote_literal(cron_expression), v_names[i], quote_literal(v_fields[i]));
            END IF;
        END LOOP;
    END LOOP;
    RETURN cron_expression;
END
$$;
COMMENT ON FUNCTION office._check_cron_expression(text) IS
    'Internal: returns the expression when it is a structurally valid 5-field cron expression, else raises 22023 naming it and the bad field.';
REVOKE EXECUTE ON FUNCTION office._check_cron_expression(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_cron_expression(text) TO office_admin;

-- 22023 unless the value is one of the allowed words.
CREATE FUNCTION office._check_word(what text, value text, allowed text[]) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL OR NOT value = ANY (allowed) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown %s %s (expected %s)', what, coalesce(quote_literal(value), 'NULL'),
                             array_to_string(allowed, ', '));
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_word(text, text, text[]) IS
    'Internal: returns value when it is one of allowed, else raises 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._check_word(text, text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_word(text, text, text[]) TO office_admin;

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

-- --- workspaces do not mix (API.md, Conventions) ----------------------------------

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

-- --- create_routine, add_routine_trigger ---------------------------------------------

CREATE FUNCTION office.create_routine(workspace_id text, name text, task_template jsonb DEFAULT '{}',
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
        v_id := office._uuid_v7();
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

CREATE FUNCTION office.add_routine_trigger(routine_id text, cron_expression text, timezone text DEFAULT 'UTC',
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
        v_id := office._uuid_v7();
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
    'Adds an enabled cron trigger to a routine (NULL id: generated). next_run_at is the first tick to claim; NULL leaves the trigger to be armed by the cron loop (controlplane.daemon.cron, which fires its ticks with office.fire_routine_tick). Invalid cron expression (or one over 200 characters) or time zone, a next_run_at outside 1970-01-01 .. 9999-12-31 22023 naming it; an explicit id that exists 23505; unknown routine OFR01.';
REVOKE EXECUTE ON FUNCTION office.add_routine_trigger(text, text, text, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.add_routine_trigger(text, text, text, timestamptz, text)
    TO office_producer, office_admin;

-- --- cron claim --------------------------------------------------------------------

CREATE FUNCTION office.claim_routine_tick(trigger_id text, observed_next_run_at timestamptz,
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

-- --- the conditional close and the task-terminal sync ------------------------------

CREATE FUNCTION office.close_routine_run(routine_run_id text, terminal text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_status text;
BEGIN
    v_status := CASE office._check_word('terminal', close_routine_run.terminal,
                                        ARRAY['done', 'failed', 'missing', 'cancelled'])
                    WHEN 'missing' THEN 'failed'
                    ELSE close_routine_run.terminal END;
    -- The one guarded statement: whoever updates second (the row lock makes
    -- it wait, then re-checks status) changes nothing.
    UPDATE office.routine_runs r
       SET status = v_status, completed_at = now()
     WHERE r.id = close_routine_run.routine_run_id AND r.status = 'task_created';
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT FROM office.routine_runs r WHERE r.id = close_routine_run.routine_run_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine run %s not found',
                             coalesce(quote_literal(close_routine_run.routine_run_id), 'NULL'));
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION office.close_routine_run(text, text) IS
    'The conditional close: terminal done|failed|missing (-> failed)|cancelled sets the status and completed_at only while the run is task_created; true if this call closed it. Unknown terminal 22023, unknown run OFR01.';
REVOKE EXECUTE ON FUNCTION office.close_routine_run(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.close_routine_run(text, text)
    TO office_producer, office_worker, office_admin;

CREATE FUNCTION office.sync_routine_run_status(task_id text, terminal text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_run text;
BEGIN
    -- Lightweight runs have linked_task_id = '': an empty id must never find them.
    IF sync_routine_run_status.task_id IS NULL OR sync_routine_run_status.task_id = '' THEN
        RETURN false;
    END IF;
    PERFORM office._check_word('terminal', sync_routine_run_status.terminal,
                               ARRAY['done', 'failed', 'missing', 'cancelled']);
    SELECT r.id INTO v_run
      FROM office.routine_runs r
     WHERE r.linked_task_id = sync_routine_run_status.task_id
     ORDER BY r.created_at DESC, r.id COLLATE "C" DESC
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    RETURN office.close_routine_run(v_run, sync_routine_run_status.terminal);
END
$$;
COMMENT ON FUNCTION office.sync_routine_run_status(text, text) IS
    'Closes (conditional close) the newest routine run linked to the task; true if this call closed it. An empty or NULL task id is a no-op (false). Called by the task-terminal trigger before blockers and parents are woken.';
REVOKE EXECUTE ON FUNCTION office.sync_routine_run_status(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.sync_routine_run_status(text, text)
    TO office_producer, office_worker, office_admin;

-- --- dispatch ------------------------------------------------------------------------

-- Internal: the policy loop with self-heal (API.md §4) for one received run
-- of a heavy skip/coalesce routine. Returns NULL to proceed, or the status the
-- run got (skipped, coalesced). The caller holds the (routine, fingerprint)
-- lock.
CREATE FUNCTION office._routine_gate(routine_id text, fingerprint text, policy text, run_id text)
    RETURNS text
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_active   office.routine_runs;
    v_terminal text;
    v_step     text;
    v_msg      text;
BEGIN
    LOOP
        SELECT r.* INTO v_active
          FROM office.routine_runs r
         WHERE r.routine_id = _routine_gate.routine_id
           AND r.dispatch_fingerprint = _routine_gate.fingerprint
           AND r.status = 'task_created'
         ORDER BY r.created_at DESC, r.id COLLATE "C" DESC
         LIMIT 1;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        -- Self-heal. A run without a linked task can never finish: close it
        -- as failed. Else a terminal (or archived, or missing) task closes
        -- its run. Either way, look again: an older live run keeps gating.
        -- A failure to read or close fails closed: the run keeps gating.
        v_step := 'check linked task terminal state';
        BEGIN
            IF v_active.linked_task_id = '' THEN
                v_terminal := 'missing';
            ELSE
                v_terminal := office.task_terminal_status(v_active.linked_task_id);
            END IF;
            IF v_terminal <> '' THEN
                v_step := 'close out stale active run';
                PERFORM office.close_routine_run(v_active.id, v_terminal);
                CONTINUE;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            RAISE WARNING '%: routine run % of routine % (task %): %',
                v_step, v_active.id, _routine_gate.routine_id, v_active.linked_task_id, v_msg;
        END;
        IF _routine_gate.policy = 'coalesce_if_active' THEN
            UPDATE office.routine_runs r
               SET status = 'coalesced', coalesced_into_run_id = v_active.id, completed_at = now()
             WHERE r.id = _routine_gate.run_id;
            RETURN 'coalesced';
        END IF;
        UPDATE office.routine_runs r
           SET status = 'skipped', completed_at = now()
         WHERE r.id = _routine_gate.run_id;
        RETURN 'skipped';
    END LOOP;
END
$$;
COMMENT ON FUNCTION office._routine_gate(text, text, text, text) IS
    'Internal: the skip/coalesce gate with self-heal for one received run; NULL to proceed, else the status given to the run (skipped|coalesced).';
REVOKE EXECUTE ON FUNCTION office._routine_gate(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._routine_gate(text, text, text, text) TO office_admin;

CREATE FUNCTION office.dispatch_routine(routine_id text, source text, variables jsonb DEFAULT '{}',
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
            PERFORM office._xact_lock(office._lock_key('routines.gate', v_routine_id, v_fp));
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
-- office: parent wakes that survive reopened children (API.md §5; DOMAIN.md
-- §1.7, §2.19-§2.22, §3.4-§3.5, §3.10).
--
-- The edge path (40_tasks.sql, terminal effect 3) wakes a parent when its last
-- child completes, keyed wake_operation_id(parent, child_set_key(parent),
-- child_generation(parent)), and writes no receipt. The sweep here catches
-- every parent the edge path could not wake (no assignee then, an agent that
-- was paused, a wave completed by archiving its last open child, a run that
-- was lost): list_stuck_parents applies every candidate condition of
-- DOMAIN.md §2.20 in SQL before its LIMIT, so a parent that is not stuck never
-- takes a slot; reconcile_parent wakes one parent with the very key the edge
-- path derives and records a receipt in the same transaction. Both paths take
-- the same transaction-scoped advisory lock on the parent
-- ('office.tasks.children:<parent>'), so they serialise, and whichever comes
-- second lands on the first one's run through idx_run_idempotency.
--
-- Generations. child_generation is second_precision_text(max(updated_at))
-- over the non-archived children, in UTC whatever the session TimeZone, and
-- every comparison against it is between two texts of that one format: a
-- child reopened and completed again with an identical child set key is a
-- new generation, hence a new operation id, a new run and a new receipt.
-- (A reopen and recomplete inside the second of the previous generation, or
-- of the delivered run's requested_at, is masked: DOMAIN.md §2.20 "Known
-- limitation".)
--
-- Cost. A sweep must not read every task, nor every open parent, each tick:
-- most parents are done, or have delivered waves. office.parent_wake_marks
-- holds the parents that need a look: triggers add a row whenever something
-- changes that can turn a parent into a candidate (a finished child written,
-- a child archived, moved or deleted, the parent's own eligibility, its
-- agent starting to accept runs again, a children-completed run leaving
-- flight or disappearing, a receipt edited by hand); sweep_stuck_parents
-- forgets the marked parents that are not candidates and reconcile_parent
-- forgets the one it delivered. Invariant: every candidate is marked. So a
-- sweep costs the number of parents touched since the previous one, not the
-- number of tasks (docs/parent-wake.md has the plans, bench/sweep.py the
-- numbers). The marks are insert-only: a mark is deleted only by a statement
-- whose snapshot saw it (and so saw the change that wrote it), and deleters
-- skip a mark someone else is deleting, so forgetting never races a new mark
-- and never waits.

-- --- tables and indexes ---------------------------------------------------------

CREATE TYPE office.reconcile_result AS (
    parent_task_id text, delivered boolean, operation_id text, outcome text, dedup_kind text,
    run_id text, skipped_reason text);
COMMENT ON TYPE office.reconcile_result IS
    'Result of office.reconcile_parent: delivered when a receipt was written; operation_id the wake key; outcome queued|deduped|coalesced (the run the wake landed on) or skipped (run_id NULL, skipped_reason assignee_unresolved or child_set_changed).';

CREATE TABLE office.parent_child_wake_receipts (
    parent_task_id        text PRIMARY KEY REFERENCES office.tasks (id) ON DELETE CASCADE,
    child_set_key         text NOT NULL,
    delivered_run_id      text NOT NULL DEFAULT '',
    delivery_operation_id text NOT NULL DEFAULT '',
    delivered_at          timestamptz NOT NULL DEFAULT now(),
    child_generation      text NOT NULL DEFAULT ''
);
SELECT pg_catalog.pg_extension_config_dump('office.parent_child_wake_receipts', '');
REVOKE ALL ON TABLE office.parent_child_wake_receipts FROM PUBLIC;
COMMENT ON TABLE office.parent_child_wake_receipts IS
    'One receipt per parent, upserted by reconcile_parent: the child set key, generation and wake operation id it delivered, and the run the wake landed on. The edge path writes none.';
COMMENT ON COLUMN office.parent_child_wake_receipts.delivered_run_id IS
    'The run the wake landed on (queued, deduped or coalesced into); '''' on a legacy receipt.';
COMMENT ON COLUMN office.parent_child_wake_receipts.delivery_operation_id IS
    'wake_operation_id(parent, child_set_key, child_generation) of the delivery; '''' on a legacy receipt (then a delivered_run_id matching no run re-admits the parent).';
COMMENT ON COLUMN office.parent_child_wake_receipts.child_generation IS
    'The child generation (second_precision_text, UTC) delivered; '''' on a legacy receipt, which re-admits the parent.';

CREATE TABLE office.parent_wake_marks (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    parent_task_id text NOT NULL,
    marked_at      timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('office.parent_wake_marks', '');
SELECT pg_catalog.pg_extension_config_dump('office.parent_wake_marks_id_seq', '');
REVOKE ALL ON TABLE office.parent_wake_marks FROM PUBLIC;
REVOKE ALL ON SEQUENCE office.parent_wake_marks_id_seq FROM PUBLIC;
COMMENT ON TABLE office.parent_wake_marks IS
    'Parents that need a look by the stuck-parent sweep (maintained by triggers, insert-only; a parent may have several rows). Every candidate of list_stuck_parents is here; sweep_stuck_parents forgets the others.';

CREATE INDEX idx_parent_wake_marks_parent ON office.parent_wake_marks (parent_task_id);

-- (The sweep also reads office.runs by idx_run_task_reason, 30_runs.sql, and
-- office.tasks by idx_tasks_assignee, 40_tasks.sql.)


-- --- the candidate conditions, once ------------------------------------------------

-- Conditions 1-4 and 6-7 of DOMAIN.md §2.20 with the computed fields. The
-- child set key and the generation come from office._child_wave, as those of
-- office.child_set_key and office.child_generation do, so the sweep and the
-- edge path derive the same operation id.
CREATE VIEW office._parent_wake_candidates AS
SELECT p.id AS parent_task_id,
       p.assignee_agent_profile_id,
       p.workflow_step_id,
       k.child_set_key,
       k.newest_child_updated_at
  FROM office.tasks p
  JOIN office.agent_profiles a ON a.id = p.assignee_agent_profile_id
 CROSS JOIN LATERAL office._child_wave(p.id) AS k
  LEFT JOIN office.parent_child_wake_receipts r ON r.parent_task_id = p.id
 WHERE p.archived_at IS NULL
   AND NOT p.is_ephemeral
   AND p.state <> ALL (office._task_done_states())
   AND p.is_office
   AND k.live_children > 0
   AND k.open_children = 0
   AND a.status <> ALL (office._statuses_refusing_runs())
   AND (r.child_set_key IS DISTINCT FROM k.child_set_key
        OR (coalesce(r.delivery_operation_id, '') = ''
            AND NOT EXISTS (SELECT FROM office.runs x WHERE x.id = r.delivered_run_id))
        OR k.newest_child_updated_at <> coalesce(r.child_generation, ''));
REVOKE ALL ON office._parent_wake_candidates FROM PUBLIC;
COMMENT ON VIEW office._parent_wake_candidates IS
    'Internal: Office parents (not archived, not ephemeral, not COMPLETED/CANCELLED) with an assignee that accepts runs, at least one non-archived child and all non-archived children COMPLETED/CANCELLED, whose receipt is missing, for another child set key, lost its evidence (legacy) or has another child generation (DOMAIN.md §2.20 rules 1-4, 6, 7).';

-- ... and rule 8 for the sweep's reason: no task_children_completed run in
-- flight, and none finished, failed or cancelled at or after the newest child
-- change.
CREATE VIEW office._parent_wake_stuck AS
SELECT v.*
  FROM office._parent_wake_candidates v
 WHERE NOT EXISTS (
        SELECT FROM office.runs w
         WHERE w.task_id = v.parent_task_id
           AND w.reason = 'task_children_completed'
           AND (w.status IN ('queued', 'claimed')
                OR (w.status IN ('finished', 'failed', 'cancelled')
                    AND office.second_precision_text(w.requested_at) >= v.newest_child_updated_at)));
REVOKE ALL ON office._parent_wake_stuck FROM PUBLIC;
COMMENT ON VIEW office._parent_wake_stuck IS
    'Internal: the candidates of office._parent_wake_candidates with no task_children_completed run in flight or terminal at/after the newest child change (DOMAIN.md §2.20 rule 8): the stuck parents.';

-- --- marks -----------------------------------------------------------------------

-- Trigger on office.tasks (the WHEN clauses of the triggers below keep the
-- function away from writes that cannot create a candidate, such as progress
-- on an open child: that parent has an open child).
CREATE FUNCTION office._tasks_parent_wake_mark() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A live child created COMPLETED or CANCELLED (the WHEN clause).
        INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (NEW.parent_id);
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (OLD.parent_id);
        RETURN NULL;
    END IF;
    -- As a child: the old parent lost a child; the new parent has a finished
    -- child written (its state, its generation), or one archived/unarchived.
    IF OLD.parent_id IS NOT NULL AND OLD.parent_id IS DISTINCT FROM NEW.parent_id THEN
        INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (OLD.parent_id);
    END IF;
    IF NEW.parent_id IS NOT NULL
       AND ((NEW.archived_at IS NULL AND NEW.state = ANY (office._task_done_states()))
            OR NEW.archived_at IS DISTINCT FROM OLD.archived_at) THEN
        INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (NEW.parent_id);
    END IF;
    -- As a parent: it became eligible (reopened, unarchived, assigned, ...).
    IF (NEW.state, NEW.archived_at, NEW.is_office, NEW.is_ephemeral, NEW.assignee_agent_profile_id)
           IS DISTINCT FROM
       (OLD.state, OLD.archived_at, OLD.is_office, OLD.is_ephemeral, OLD.assignee_agent_profile_id)
       AND NEW.archived_at IS NULL AND NEW.is_office AND NOT NEW.is_ephemeral
       AND NEW.state <> ALL (office._task_done_states()) AND NEW.assignee_agent_profile_id IS NOT NULL
       AND EXISTS (SELECT FROM office.tasks c WHERE c.parent_id = NEW.id) THEN
        INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (NEW.id);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._tasks_parent_wake_mark() IS
    'Trigger: marks for the stuck-parent sweep the parent of a finished child that was written, created, archived, moved or deleted, and a parent whose own eligibility changed.';
REVOKE EXECUTE ON FUNCTION office._tasks_parent_wake_mark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_parent_wake_mark() TO office_admin;

CREATE TRIGGER tasks_70_parent_wake_mark_insert
    AFTER INSERT ON office.tasks
    FOR EACH ROW
    WHEN (NEW.parent_id IS NOT NULL AND NEW.archived_at IS NULL
          AND NEW.state = ANY (office._task_done_states()))
    EXECUTE FUNCTION office._tasks_parent_wake_mark();

CREATE TRIGGER tasks_70_parent_wake_mark_update
    AFTER UPDATE ON office.tasks
    FOR EACH ROW
    WHEN ((NEW.parent_id IS NOT NULL
           AND ((NEW.archived_at IS NULL AND NEW.state = ANY (office._task_done_states()))
                OR NEW.archived_at IS DISTINCT FROM OLD.archived_at))
          OR OLD.parent_id IS DISTINCT FROM NEW.parent_id
          OR ((NEW.state, NEW.archived_at, NEW.is_office, NEW.is_ephemeral,
               NEW.assignee_agent_profile_id)
                  IS DISTINCT FROM
              (OLD.state, OLD.archived_at, OLD.is_office, OLD.is_ephemeral,
               OLD.assignee_agent_profile_id)
              AND NEW.archived_at IS NULL AND NEW.is_office AND NOT NEW.is_ephemeral
              AND NEW.state <> ALL (office._task_done_states())
              AND NEW.assignee_agent_profile_id IS NOT NULL))
    EXECUTE FUNCTION office._tasks_parent_wake_mark();

CREATE TRIGGER tasks_70_parent_wake_mark_delete
    AFTER DELETE ON office.tasks
    FOR EACH ROW
    WHEN (OLD.parent_id IS NOT NULL)
    EXECUTE FUNCTION office._tasks_parent_wake_mark();

-- Trigger on office.agent_profiles: an agent that starts accepting runs (or
-- appears, for a dangling assignee) makes its open parents worth a look.
CREATE FUNCTION office._agents_parent_wake_mark() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
BEGIN
    INSERT INTO office.parent_wake_marks (parent_task_id)
    SELECT p.id
      FROM office.tasks p
     WHERE p.assignee_agent_profile_id = NEW.id
       AND p.archived_at IS NULL AND p.is_office AND NOT p.is_ephemeral
       AND p.state <> ALL (office._task_done_states())
       AND EXISTS (SELECT FROM office.tasks c WHERE c.parent_id = p.id);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._agents_parent_wake_mark() IS
    'Trigger: when an agent appears or starts accepting runs again, marks its open parents for the stuck-parent sweep.';
REVOKE EXECUTE ON FUNCTION office._agents_parent_wake_mark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._agents_parent_wake_mark() TO office_admin;

CREATE TRIGGER agent_profiles_70_parent_wake_mark_insert
    AFTER INSERT ON office.agent_profiles
    FOR EACH ROW
    WHEN (NEW.status <> ALL (office._statuses_refusing_runs()))
    EXECUTE FUNCTION office._agents_parent_wake_mark();

CREATE TRIGGER agent_profiles_70_parent_wake_mark_update
    AFTER UPDATE ON office.agent_profiles
    FOR EACH ROW
    WHEN (NEW.status <> ALL (office._statuses_refusing_runs())
          AND (OLD.status = ANY (office._statuses_refusing_runs()) OR OLD.id IS DISTINCT FROM NEW.id))
    EXECUTE FUNCTION office._agents_parent_wake_mark();

-- Triggers on office.runs: a children-completed run that leaves flight
-- (finished, failed, cancelled), is re-dated, re-targeted or deleted (pruned)
-- no longer holds its parent back the way it did. A new run only adds
-- evidence, and a claim keeps the run in flight: neither marks.
CREATE FUNCTION office._runs_parent_wake_mark() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        -- (the WHEN clause: a task_children_completed run) Of a task, and it
        -- left flight, was re-dated or was re-targeted.
        IF OLD.task_id IS NOT NULL
           AND ((OLD.status IN ('queued', 'claimed') AND NEW.status NOT IN ('queued', 'claimed'))
                OR NEW.requested_at IS DISTINCT FROM OLD.requested_at
                OR NEW.task_id IS DISTINCT FROM OLD.task_id
                OR NEW.reason IS DISTINCT FROM OLD.reason) THEN
            INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (OLD.task_id);
        END IF;
        RETURN NULL;
    END IF;
    -- DELETE, per statement (prune_runs deletes many): the open parents only.
    INSERT INTO office.parent_wake_marks (parent_task_id)
    SELECT p.id
      FROM (SELECT DISTINCT g.task_id FROM office_parent_wake_gone_runs g
             WHERE g.reason = 'task_children_completed' AND g.task_id IS NOT NULL) AS gone
      JOIN office.tasks p ON p.id = gone.task_id
     WHERE p.archived_at IS NULL AND p.is_office AND NOT p.is_ephemeral
       AND p.state <> ALL (office._task_done_states());
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._runs_parent_wake_mark() IS
    'Trigger: marks for the stuck-parent sweep the parent of a task_children_completed run that left flight, was re-dated or re-targeted (per row) or was deleted (per statement).';
REVOKE EXECUTE ON FUNCTION office._runs_parent_wake_mark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._runs_parent_wake_mark() TO office_admin;

-- The WHEN clause names the reason only, the rest is tested in the
-- function: a WHEN clause is read again from its stored text at every
-- statement that may fire the trigger (every claim and finish), and the
-- whole condition there cost those statements more than calling the
-- function for the few task_children_completed runs (docs/benchmarks.md).
-- Only the columns the function compares: an update of none of them (a
-- coalesce, a heartbeat) cannot change what it tests, and does not fire it.
CREATE TRIGGER runs_70_parent_wake_mark_update
    AFTER UPDATE OF status, requested_at, task_id, reason ON office.runs
    FOR EACH ROW
    WHEN (OLD.reason = 'task_children_completed')
    EXECUTE FUNCTION office._runs_parent_wake_mark();

CREATE TRIGGER runs_70_parent_wake_mark_delete
    AFTER DELETE ON office.runs
    REFERENCING OLD TABLE AS office_parent_wake_gone_runs
    FOR EACH STATEMENT
    EXECUTE FUNCTION office._runs_parent_wake_mark();

-- Trigger on the receipts: a receipt written, changed or deleted by anyone
-- but reconcile_parent (an operator forcing a redelivery, a restore) may
-- re-admit its parent.
CREATE FUNCTION office._receipts_parent_wake_mark() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
BEGIN
    IF coalesce(current_setting('office.parent_wake.writer', true), '') <> 'reconcile_parent' THEN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (OLD.parent_task_id);
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.parent_task_id IS DISTINCT FROM OLD.parent_task_id THEN
            INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (NEW.parent_task_id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._receipts_parent_wake_mark() IS
    'Trigger: a receipt written, changed or deleted outside reconcile_parent marks its parent for the stuck-parent sweep.';
REVOKE EXECUTE ON FUNCTION office._receipts_parent_wake_mark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._receipts_parent_wake_mark() TO office_admin;

CREATE TRIGGER parent_child_wake_receipts_70_mark
    AFTER INSERT OR UPDATE OR DELETE ON office.parent_child_wake_receipts
    FOR EACH ROW EXECUTE FUNCTION office._receipts_parent_wake_mark();

CREATE FUNCTION office.mark_all_parents() RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    INSERT INTO office.parent_wake_marks (parent_task_id)
    SELECT p.id
      FROM office.tasks p
     WHERE p.archived_at IS NULL AND p.is_office AND NOT p.is_ephemeral
       AND p.state <> ALL (office._task_done_states())
       AND EXISTS (SELECT FROM office.tasks c WHERE c.parent_id = p.id);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.mark_all_parents() IS
    'Marks every open Office parent for the stuck-parent sweep (after rows were loaded with triggers disabled, e.g. session_replication_role = replica); the next sweep reads them all once. Returns how many were marked.';
REVOKE EXECUTE ON FUNCTION office.mark_all_parents() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.mark_all_parents() TO office_admin;

-- --- the sweep -----------------------------------------------------------------------

-- Internal: list_stuck_parents without the marks, for any reason: every open
-- parent is read (the slow path; also the reference the marks are tested
-- against).
CREATE FUNCTION office._scan_stuck_parents(max_rows int, reason text)
    RETURNS TABLE (parent_task_id text, assignee_agent_profile_id text, workflow_step_id text,
                   child_set_key text, newest_child_updated_at text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT v.parent_task_id, v.assignee_agent_profile_id, v.workflow_step_id, v.child_set_key,
           v.newest_child_updated_at
      FROM office._parent_wake_candidates v
     WHERE NOT EXISTS (
            SELECT FROM office.runs w
             WHERE w.task_id = v.parent_task_id
               AND w.reason = _scan_stuck_parents.reason
               AND (w.status IN ('queued', 'claimed')
                    OR (w.status IN ('finished', 'failed', 'cancelled')
                        AND office.second_precision_text(w.requested_at) >= v.newest_child_updated_at)))
     ORDER BY v.parent_task_id COLLATE "C"
     LIMIT _scan_stuck_parents.max_rows;
END;
COMMENT ON FUNCTION office._scan_stuck_parents(int, text) IS
    'Internal: the stuck parents for any run reason, read from every open parent rather than from the marks (list_stuck_parents for reasons other than task_children_completed).';
REVOKE EXECUTE ON FUNCTION office._scan_stuck_parents(int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._scan_stuck_parents(int, text) TO office_admin;

CREATE FUNCTION office.list_stuck_parents(max_rows int DEFAULT 5, reason text DEFAULT 'task_children_completed')
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

CREATE FUNCTION office.reconcile_parent(parent_task_id text, child_set_key text, newest_child_updated_at text)
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
    'Wakes one stuck parent: under the edge path''s lock on the parent, re-checks its assignee (skipped, assignee_unresolved) and re-reads its child set and generation (skipped, child_set_changed, unless they equal the arguments and form a finished wave), then enqueues task_children_completed (task_id = the parent) keyed wake_operation_id(parent, child_set_key, generation) and upserts the receipt with the run it landed on (queued, deduped or coalesced), in one transaction. Unknown parent OFT01; NULL set or generation 22023.';
REVOKE EXECUTE ON FUNCTION office.reconcile_parent(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.reconcile_parent(text, text, text) TO office_producer, office_admin;

CREATE FUNCTION office.sweep_stuck_parents(max_rows int DEFAULT 5)
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
            hashtextextended(office._lock_key('tasks.children', v_candidate.parent_task_id), 0));
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
-- office: what the control-plane daemon (`officectl run`, controlplane.daemon)
-- needs beyond the API of API.md: the cron loop's scan and its atomic
-- claim-and-fire, the wakeup loop's batch dispatch, and the numbers behind its
-- gauges (outbox lag). Each is one short transaction; none holds a lock
-- across calls, so any number of daemons may run against one database.
--
-- * due_routine_triggers lists what the cron loop must look at; the loop
--   computes ticks in Python (controlplane.cron.plan_tick: cron
--   expression, time zone, catch-up policy) and then
-- * fire_routine_tick claims the tick (claim_routine_tick, the
--   compare-and-swap) and dispatches it with the claimed tick
--   (dispatch_routine) in ONE transaction: a claimed tick is never lost to a
--   crash between the two, and a trigger another daemon is claiming right now
--   is skipped (SKIP LOCKED), never waited for. A dispatch that raises (say,
--   the routine was paused since the scan) keeps the claim - the tick is
--   spent - and is returned with its error, so one broken routine never
--   makes the loop spin on the same tick.
-- * dispatch_queued_wakeups dispatches queued wakeup requests nobody
--   dispatched (dispatch_wakeup), skipping requests another dispatcher holds;
--   a request of an agent that does not accept runs stays queued until it
--   does; one of an agent that no longer exists is failed.
-- * daemon_stats: pending events and the age of the oldest (the outbox lag),
--   queued wakeups, due triggers, claimed runs, rows set aside.
--
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
    -- Not the 200 characters of an id: the owner may have written a longer
    -- one by hand, and it must still be set aside. 2600 bytes is what any
    -- row id the tables' btree keys can hold fits into.
    IF octet_length(set_aside.row_id) > 2600 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('row_id is %s bytes, more than 2600', octet_length(set_aside.row_id));
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

CREATE TYPE office.routine_tick_result AS (
    claimed               boolean,
    routine_run_id        text,
    status                text,
    linked_task_id        text,
    coalesced_into_run_id text,
    wakeup_request_id     text,
    wakeup_outcome        text,
    run_id                text,
    idempotency_key       text,
    error_message         text,
    workspace_id          text,
    error_sqlstate        text);
COMMENT ON TYPE office.routine_tick_result IS
    'Result of office.fire_routine_tick: claimed (this call won the tick), then the columns of office.dispatch_routine_result for the fire (NULL when not claimed), and the SQLSTATE when the dispatch raised (error_message says what; the claim stands).';

CREATE FUNCTION office.due_routine_triggers(at timestamptz DEFAULT now(), max_rows int DEFAULT 100)
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

CREATE FUNCTION office.fire_routine_tick(trigger_id text, observed_next_run_at timestamptz,
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

CREATE FUNCTION office.dispatch_queued_wakeups(max_rows int DEFAULT 50, min_age interval DEFAULT '0 seconds')
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
           AND (a.id IS NULL OR a.status <> ALL (office._statuses_refusing_runs()))
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
-- office: observability views (API.md §6).
--
-- dedup_stats and keyless_stats sum the striped counters of 25_counters.sql;
-- queue_stats reads office.runs. Readers get SELECT on the views only.
--
-- A view is bound when it is created, under the installer's search_path, so
-- every function and operator is named in pg_catalog (ARCHITECTURE.md,
-- principle 8): a planted public.count(text) is then never chosen.

CREATE VIEW office.dedup_stats AS
SELECT c.queue, c.reason, c.kind, pg_catalog.sum(c.total)::bigint AS total
  FROM office.dedup_counters c
 GROUP BY c.queue, c.reason, c.kind;
COMMENT ON VIEW office.dedup_stats IS
    'Suppressed enqueues by queue (runs|wakeup), reason and kind (windowed|durable|coalesced; coalesced is queue runs). Counters restart from zero after a crash.';
REVOKE ALL ON office.dedup_stats FROM PUBLIC;
GRANT SELECT ON office.dedup_stats TO office_reader, office_admin;

CREATE VIEW office.keyless_stats AS
SELECT c.reason, c.cause, pg_catalog.sum(c.total)::bigint AS total
  FROM office.keyless_counters c
 GROUP BY c.reason, c.cause;
COMMENT ON VIEW office.keyless_stats IS
    'Keyless enqueues reported with a cause, by reason and cause (unresolved|by_design). Counters restart from zero after a crash.';
REVOKE ALL ON office.keyless_stats FROM PUBLIC;
GRANT SELECT ON office.keyless_stats TO office_reader, office_admin;

CREATE VIEW office.queue_stats AS
SELECT s.status,
       pg_catalog.count(DISTINCT r.agent_profile_id)::bigint AS agents,
       pg_catalog.count(r.id)::bigint AS runs,
       pg_catalog.min(r.requested_at) AS oldest_requested_at
  FROM (VALUES (1, 'queued'), (2, 'claimed'), (3, 'finished'), (4, 'failed'), (5, 'cancelled'))
       AS s(ord, status)
  LEFT JOIN office.runs r ON r.status OPERATOR(pg_catalog.=) s.status
 GROUP BY s.ord, s.status
 ORDER BY s.ord;
COMMENT ON VIEW office.queue_stats IS
    'Runs per status (every status, zero included): distinct agents, runs, and the oldest requested_at.';
REVOKE ALL ON office.queue_stats FROM PUBLIC;
GRANT SELECT ON office.queue_stats TO office_reader, office_admin;
-- office: the dashboard's reads (since 0.4.0).
--
-- What `officectl ui` shows, as functions rather than table reads: office's
-- roles are granted functions and views, not tables, so a dashboard that read
-- tables worked only as the owner; and a proxy (API.md §8) has no tables at
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

-- Runs newest first (ids are time-ordered, API.md Conventions). One page is
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
-- office: the native definitions of hot-path functions (sql/native/).
--
-- Where the library is installed (the PGXS install with the server's
-- headers), these replace the PL/pgSQL definitions of the same functions
-- made earlier in this script: same name, arguments, result and behaviour,
-- minus the cost of a PL/pgSQL call and its SET search_path clause, which
-- every write of office.runs paid per row (docs/benchmarks.md, "Hot path,
-- issue 13, sixth pass"). They set no search_path: they resolve no names
-- but the qualified ones of their few prepared statements, whose texts name
-- no operator either.
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
                 keyless_cause text, keyless_detail text)
             RETURNS office.enqueue_result
             LANGUAGE plpgsql VOLATILE SECURITY DEFINER
             SET search_path = pg_catalog, pg_temp
             SET enable_seqscan = off
             AS %L$create$,
        (SELECT p.prosrc FROM pg_catalog.pg_proc p
          WHERE p.oid = 'office.enqueue_run(text, text, jsonb, text, text, boolean, text, text)'::pg_catalog.regprocedure));
    COMMENT ON FUNCTION office._enqueue_run_plpgsql(text, text, jsonb, text, text, boolean, text, text) IS
        'Internal: the PL/pgSQL definition of office.enqueue_run, to which its C definition hands the calls it does not decide itself (sql/95_native.sql).';
    REVOKE EXECUTE ON FUNCTION office._enqueue_run_plpgsql(text, text, jsonb, text, text, boolean, text, text) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION office._enqueue_run_plpgsql(text, text, jsonb, text, text, boolean, text, text)
        TO office_admin;
    CREATE OR REPLACE FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb DEFAULT '{}',
                                                  idempotency_key text DEFAULT NULL, task_id text DEFAULT NULL,
                                                  entry_triggered boolean DEFAULT false,
                                                  keyless_cause text DEFAULT NULL, keyless_detail text DEFAULT NULL)
        RETURNS office.enqueue_result
        LANGUAGE c VOLATILE SECURITY DEFINER
        AS '$libdir/office', 'office_enqueue_run';
    -- claim_run's C definition follows the same steps (sql/native/claim.c) and
    -- hands on only a worker_id its PL/pgSQL definition refuses.
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
        'Internal: the PL/pgSQL definition of office.claim_run, to which its C definition hands a worker_id it refuses (sql/95_native.sql).';
    REVOKE EXECUTE ON FUNCTION office._claim_run_plpgsql(text, text) FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION office._claim_run_plpgsql(text, text) TO office_admin;
    CREATE OR REPLACE FUNCTION office.claim_run(worker_id text DEFAULT NULL, agent_profile_id text DEFAULT NULL)
        RETURNS SETOF office.runs
        LANGUAGE c VOLATILE SECURITY DEFINER
        AS '$libdir/office', 'office_claim_run';
    CREATE OR REPLACE FUNCTION office.finish_run(run_id text, attempt int) RETURNS boolean
        LANGUAGE c VOLATILE SECURITY DEFINER
        AS '$libdir/office', 'office_finish_run';
EXCEPTION WHEN undefined_file OR undefined_function OR insufficient_privilege THEN
    NULL;
END
$native$;
