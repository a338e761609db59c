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
    RETURN '0.5.0';
COMMENT ON FUNCTION office.schema_version() IS
    'The installed office schema version; every upgrade script replaces it.';
REVOKE EXECUTE ON FUNCTION office.schema_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.schema_version()
    TO office_producer, office_worker, office_reader, office_admin;
