\echo Use "ALTER EXTENSION office UPDATE TO '0.4.0'" to load this file. \quit
-- office 0.3.0 -> 0.4.0, written by hand: exactly the statements that take a
-- 0.3.0 database to what the capability files install from nothing
-- (tests/test_install_paths.py compares the two catalogs). Sections follow the
-- capability files.
--
-- An upgrade runs with the extension's recorded schema (public for a 0.3.0
-- install) as its search_path: pin it first, for the reason 00_schema.sql gives.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- === validation (05_validation.sql) ==========================================

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
CREATE OR REPLACE FUNCTION office._check_interval(name text, value interval) RETURNS interval
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL OR NOT isfinite(value) OR value < interval '0' OR value > interval '100 years' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s must be a finite interval from 0 to 100 years, not %s',
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
CREATE OR REPLACE FUNCTION office._window(name text, fallback interval) RETURNS interval
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

-- === keys (10_keys.sql) =======================================================

-- The SQL-standard bodies are bound when they are created, under the
-- installer's search_path (public, pg_temp for an upgrade of a 0.3.0 install);
-- they now name pg_catalog for every call and operator, and are created again
-- under the pinned path, so a look-alike planted in public before 0.3.0 was
-- installed is no longer bound (issue 10).

CREATE OR REPLACE FUNCTION office.second_precision_text(ts timestamptz)
    RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN pg_catalog.to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS');

CREATE OR REPLACE FUNCTION office.routine_fingerprint(title text, description text, assignee text)
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
-- (end of keys)

-- === agents (20_agents.sql) ====================================================
-- (end of agents)

-- === runs (25_counters.sql, 30_runs.sql) =======================================
-- (end of runs)

-- === tasks (40_tasks.sql) ======================================================
-- (end of tasks)

-- === events (45_events.sql) ====================================================
-- (end of events)

-- === wakeups (50_wakeups.sql) ==================================================
-- (end of wakeups)

-- === routines (55_routines.sql) ================================================
-- (end of routines)

-- === parent wakes (60_parent_wake.sql) =========================================
-- (end of parent-wake)

-- === daemon (70_daemon.sql) ====================================================
-- (end of daemon)

-- === observability (80_observability.sql) ======================================

-- Views are bound when they are created: they now name pg_catalog for every
-- function and operator, and are created again under the pinned path.

CREATE OR REPLACE VIEW office.dedup_stats AS
SELECT c.queue, c.reason, c.kind, pg_catalog.sum(c.total)::bigint AS total
  FROM office.dedup_counters c
 GROUP BY c.queue, c.reason, c.kind;

CREATE OR REPLACE VIEW office.keyless_stats AS
SELECT c.reason, c.cause, pg_catalog.sum(c.total)::bigint AS total
  FROM office.keyless_counters c
 GROUP BY c.reason, c.cause;

CREATE OR REPLACE VIEW office.queue_stats AS
SELECT s.status,
       pg_catalog.count(DISTINCT r.agent_profile_id)::bigint AS agents,
       pg_catalog.count(r.id)::bigint AS runs,
       pg_catalog.min(r.requested_at) AS oldest_requested_at
  FROM (VALUES (1, 'queued'), (2, 'claimed'), (3, 'finished'), (4, 'failed'), (5, 'cancelled'))
       AS s(ord, status)
  LEFT JOIN office.runs r ON r.status OPERATOR(pg_catalog.=) s.status
 GROUP BY s.ord, s.status
 ORDER BY s.ord;

-- (end of observability)

-- === version ==================================================================

CREATE OR REPLACE FUNCTION office.schema_version() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '0.4.0';
