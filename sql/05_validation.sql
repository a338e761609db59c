-- office: argument validation shared by every capability.
--
-- An id of a workspace, agent, task or routine is 1-200 characters with no
-- ',', no ':' and no control character: those are the separators inside keys,
-- and an id containing one would let two different occurrences share a key
-- (docs/api.md, Conventions). The tables check it (office._is_id, the one place
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

-- Bounds on everything stored (docs/api.md, Conventions): a value past its bound is
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

-- A stored JSON document nests at most 64 containers deep (docs/api.md,
-- Conventions). PostgreSQL takes far deeper ones, but clients cannot read
-- them back: Python's decoder gives up near 1,000 levels, so a deep payload
-- was claimed, not decoded, recovered and claimed again forever. 64 is far
-- past any document a producer means to send. .**{64} reaches the items 64
-- levels below the root: a container there is the 65th level.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is planned again at
-- every call, and the runs' CHECK calls this one on every write.
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

-- The same bounds on rows written without the functions (the table owner's
-- INSERT or UPDATE): a BEFORE trigger on every table with a stored jsonb
-- checks the columns it names (TG_ARGV), 1 MiB as text (and 4 KiB for the
-- fields the functions add to what they were given: agent_profile_id,
-- task_id) and 64 levels deep, 22023 naming table.column
-- (office._check_stored_json, which office.runs' readiness trigger calls for
-- an inserted run, 30_runs.sql). An UPDATE that leaves a column as it was
-- does not check it: a row stored before 0.5.0 bounded the depth stays
-- writable (claimed, failed, paused).
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
-- (docs/api.md, Conventions): ids generated later sort later, bytewise, so inserts
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
