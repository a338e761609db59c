
-- office: the key builders of docs/api.md §1 (formats and vectors: docs/domain.md §3).
--
-- Pure functions: IMMUTABLE, PARALLEL SAFE, never SECURITY DEFINER, pinned to
-- search_path = pg_catalog, pg_temp so a caller's schemas cannot shadow
-- sha256/encode/to_char/|| and friends. The two SQL-standard bodies are bound
-- when they are created, before their own search_path applies, so they name
-- pg_catalog for every call and operator (docs/architecture.md, principle 8). The Python twins in
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

-- task_assigned:<task>:<agent>:<generation>  (docs/domain.md §3.1)
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
    '(docs/domain.md §3.1). NULL in, NULL out; empty id or negative generation is 22023.';
REVOKE EXECUTE ON FUNCTION office.assignment_key(text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.assignment_key(text, text, bigint)
    TO office_producer, office_worker, office_reader, office_admin;

-- task_comment:<comment>:<agent>  (docs/api.md §3): the key of a comment's wake of
-- an agent. Its prefix is what office._never_coalesces (below) tests to keep
-- such a run out of coalescing, so it is built here rather than written by
-- hand.
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
    'such a key never coalesces (docs/api.md §3). NULL in, NULL out; an empty id is 22023.';
REVOKE EXECUTE ON FUNCTION office.comment_key(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.comment_key(text, text)
    TO office_producer, office_worker, office_reader, office_admin;

-- The coalesce exclusion, the one place it is written: a request that is
-- entry-triggered, or whose key is a comment's (office.comment_key), never
-- coalesces and is never a coalesce target (docs/api.md §3). enqueue_run's
-- locks and coalesce lookups test it; the native enqueue_run mirrors it once
-- (sql/native/enqueue.c, never_coalesces, with the prefix generated into
-- sql/native/constants.h from this function). A RETURN body without a SET
-- clause, unlike the rest of the schema: its names are bound when it is
-- created, so the search_path of a caller cannot rebind them, and a planner
-- inlines it into a lookup's WHERE clause instead of calling it per row.
CREATE FUNCTION office._never_coalesces(idempotency_key text, entry_triggered boolean)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN entry_triggered IS TRUE OR pg_catalog.starts_with(idempotency_key, 'task_comment:') IS TRUE;
COMMENT ON FUNCTION office._never_coalesces(text, boolean) IS
    'Internal: true when an enqueue request (or a queued run) with this key and entry_triggered never coalesces: entry-triggered, or a task_comment: key (office.comment_key). Never NULL.';
REVOKE EXECUTE ON FUNCTION office._never_coalesces(text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._never_coalesces(text, boolean)
    TO office_producer, office_worker, office_reader, office_admin;

-- sha256hex(join(sort_bytewise(ids), ','))  (docs/domain.md §2.13, §3.2)
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
    '(docs/domain.md §3.2). An empty array is the digest of the empty string; an empty or NULL '
    'element is 22023.';
REVOKE EXECUTE ON FUNCTION office.blocker_digest(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.blocker_digest(text[])
    TO office_producer, office_worker, office_reader, office_admin;

-- blockers_resolved:<blocked>:<digest>  (docs/domain.md §3.3)
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
    '<blocker_digest(blocker_ids)> (docs/domain.md §3.3).';
REVOKE EXECUTE ON FUNCTION office.blockers_resolved_key(text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.blockers_resolved_key(text, text[])
    TO office_producer, office_worker, office_reader, office_admin;

-- task_children_completed:<parent>:<sha256hex(parent \0 child-ids \0 generation)>  (docs/domain.md §3.5)
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
    'without their last ":" segment (docs/domain.md §3.5).';
REVOKE EXECUTE ON FUNCTION office.wake_operation_id(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.wake_operation_id(text, text, text)
    TO office_producer, office_worker, office_reader, office_admin;

-- YYYY-MM-DD HH24:MI:SS in UTC, truncated  (docs/domain.md §2.22, §3.10)
CREATE FUNCTION office.second_precision_text(ts timestamptz)
    RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN pg_catalog.to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS');
COMMENT ON FUNCTION office.second_precision_text(timestamptz) IS
    'The instant as YYYY-MM-DD HH24:MI:SS in UTC (truncated to whole seconds), whatever the '
    'session TimeZone (docs/domain.md §2.22, §3.10).';
REVOKE EXECUTE ON FUNCTION office.second_precision_text(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.second_precision_text(timestamptz)
    TO office_producer, office_worker, office_reader, office_admin;

-- hex(sha256(title|description|assignee)[0:16])  (docs/domain.md §3.9)
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
    'lowercase hex characters (docs/domain.md §3.9). Empty texts are allowed.';
REVOKE EXECUTE ON FUNCTION office.routine_fingerprint(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.routine_fingerprint(text, text, text)
    TO office_producer, office_worker, office_reader, office_admin;

-- Routine wakeup key  (docs/domain.md §3.8)
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
    'Routine wakeup key (docs/domain.md §3.8): routine:<routine_id>:<source>:<explicit_key> for a '
    'non-empty explicit key; cron with a claimed tick routine:<routine_id>:<trigger_id>:tick:'
    '<unix seconds, floor>; manual/webhook routine:<routine_id>:run:<routine_run_id>; otherwise '
    'NULL (keyless). Never raises for an unknown source.';
REVOKE EXECUTE ON FUNCTION office.routine_key(text, text, text, timestamptz, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.routine_key(text, text, text, timestamptz, text, text)
    TO office_producer, office_worker, office_reader, office_admin;
