\echo Use "ALTER EXTENSION office UPDATE TO '0.5.0'" to load this file. \quit
-- office 0.4.0 -> 0.5.0, written by hand: exactly the statements that take a
-- 0.4.0 database to what the capability files install from nothing
-- (tests/install/test_install_paths.py compares the two catalogs). Sections follow the
-- capability files.
--
-- Pin the search_path first, for the reason 00_schema.sql gives.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- === version ==================================================================

CREATE OR REPLACE FUNCTION office.schema_version() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '0.5.0';
