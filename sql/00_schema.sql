\echo Use "CREATE EXTENSION office" to load this file. \quit
-- office: the schema, the roles, and the version stamp.
--
-- Everything lives in schema office, which this script creates (so it belongs
-- to the extension and goes with DROP EXTENSION). The same text
-- also installs as plain SQL through `officectl migrate` (controlplane.schema
-- strips the \echo guard and the pg_extension_config_dump calls), so every
-- statement here must be valid in both settings and must be idempotent where
-- it touches cluster-wide objects (roles are shared by all databases).

CREATE SCHEMA office;
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
    RETURN '0.3.0';
COMMENT ON FUNCTION office.schema_version() IS
    'The installed office schema version; every upgrade script replaces it.';
REVOKE EXECUTE ON FUNCTION office.schema_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.schema_version()
    TO office_producer, office_worker, office_reader, office_admin;
