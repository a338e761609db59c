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
    RETURN '0.1.0';
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
-- (API.md, Conventions). Functions that create an entity check its id here
-- (22023); a lookup by such an id simply finds nothing.

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
    IF value ~ '[,:\u0001-\u001f\u007f-\u009f]' THEN
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

-- office: the key builders of API.md §1 (formats and vectors: DOMAIN.md §3).
--
-- Pure functions: IMMUTABLE, PARALLEL SAFE, never SECURITY DEFINER, pinned to
-- search_path = pg_catalog, pg_temp so a caller's schemas cannot shadow
-- sha256/encode/to_char/|| and friends. The Python twins in
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
    RETURN to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS');
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
    RETURN encode(substr(sha256(convert_to(title || '|' || description || '|' || assignee, 'UTF8')),
                         1, 16), 'hex');
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
                 CHECK (length(id) BETWEEN 1 AND 200 AND id !~ '[,:\u0001-\u001f\u007f-\u009f]'),
    workspace_id text NOT NULL
                 CHECK (length(workspace_id) BETWEEN 1 AND 200
                        AND workspace_id !~ '[,:\u0001-\u001f\u007f-\u009f]'),
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
        v_id := gen_random_uuid()::text;
    ELSE
        PERFORM office._check_id('agent', v_id);
    END IF;
    PERFORM office._check_id('workspace', upsert_agent.workspace_id);
    PERFORM office._check_agent_status(upsert_agent.status);

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
    'Inserts the agent or updates its workspace, name and status; a NULL id generates one. Bad id or status: 22023.';
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
-- office: the counters behind office.dedup_stats and office.keyless_stats
-- (API.md §6; the views themselves are in 80_observability.sql).
--
-- Counting must not make concurrent enqueues wait on one counter row. Each
-- counter is striped: a backend adds to the row of its own slot
-- (pg_backend_pid() % 64), so two enqueues only meet on a counter row when
-- their backends share a slot and count the same label at the same moment.
-- The views sum the slots.
--
-- The tables are UNLOGGED: a transaction that writes nothing else (a windowed
-- dedup writes only its counter) then commits without waiting for a WAL
-- flush, so counting does not turn a read-only dedup into a durable write.
-- The price: after a crash (not after a clean restart) the counters start
-- again from zero, like any process-local metric would, and standbys see
-- them empty.

CREATE UNLOGGED TABLE office.dedup_counters (
    slot   int    NOT NULL,
    queue  text   NOT NULL CHECK (queue IN ('runs', 'wakeup')),
    reason text   NOT NULL,
    kind   text   NOT NULL CHECK (kind IN ('windowed', 'durable', 'coalesced')),
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
    cause  text   NOT NULL CHECK (cause IN ('unresolved', 'by_design')),
    total  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (slot, reason, cause)
);
SELECT pg_catalog.pg_extension_config_dump('office.keyless_counters', '');
REVOKE ALL ON TABLE office.keyless_counters FROM PUBLIC;
COMMENT ON TABLE office.keyless_counters IS
    'Striped keyless-enqueue counters (one row per backend slot and label); read office.keyless_stats instead.';

CREATE FUNCTION office._count_dedup(queue text, reason text, kind text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO office.dedup_counters AS c (slot, queue, reason, kind, total)
    VALUES (pg_backend_pid() % 64, _count_dedup.queue, _count_dedup.reason, _count_dedup.kind, 1)
    ON CONFLICT (slot, queue, reason, kind) DO UPDATE SET total = c.total + 1;
END
$$;
COMMENT ON FUNCTION office._count_dedup(text, text, text) IS
    'Internal: counts one suppressed enqueue (queue runs|wakeup, kind windowed|durable|coalesced) in this backend''s stripe.';
REVOKE EXECUTE ON FUNCTION office._count_dedup(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._count_dedup(text, text, text) TO office_admin;

CREATE FUNCTION office._count_keyless(reason text, cause text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO office.keyless_counters AS c (slot, reason, cause, total)
    VALUES (pg_backend_pid() % 64, _count_keyless.reason, _count_keyless.cause, 1)
    ON CONFLICT (slot, reason, cause) DO UPDATE SET total = c.total + 1;
END
$$;
COMMENT ON FUNCTION office._count_keyless(text, text) IS
    'Internal: counts one keyless enqueue reported with a cause (unresolved|by_design) in this backend''s stripe.';
REVOKE EXECUTE ON FUNCTION office._count_keyless(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._count_keyless(text, text) TO office_admin;
-- office: the run queue (API.md §3).
--
-- enqueue_run decides in a fixed order: validate -> windowed lookup ->
-- coalesce -> insert -> classify. Every suppression is an outcome, never an
-- error:
--   * windowed: a run with the key was requested within
--     office.idempotency_window (any status) -> ('deduped', 'windowed');
--   * coalesce: a queued run of the same bucket (agent, reason, task_id)
--     requested within office.coalesce_window absorbs the request
--     -> ('coalesced', NULL); the incoming key is stored nowhere;
--   * durable: the insert meets the unbounded unique index
--     idx_run_idempotency -> ('deduped', 'durable').
-- Concurrency: keyed requests converge on idx_run_idempotency (ON CONFLICT
-- waits for an in-flight inserter of the key, then does nothing); coalescible
-- requests take a transaction-scoped advisory lock on their bucket before the
-- coalesce lookup, so two of them never both insert into one bucket.
-- Claims are fenced by attempt and serialised per agent without blocking.

CREATE TYPE office.enqueue_result AS (outcome text, dedup_kind text, run_id text);
COMMENT ON TYPE office.enqueue_result IS
    'Result of office.enqueue_run: outcome queued|deduped|coalesced, dedup_kind windowed|durable (deduped only), run_id the run created, matched or absorbing the request.';

CREATE TABLE office.runs (
    id                 text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    agent_profile_id   text NOT NULL,
    reason             text NOT NULL CHECK (reason <> ''),
    payload            jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(payload) = 'object'),
    status             text NOT NULL DEFAULT 'queued'
                       CHECK (status IN ('queued', 'claimed', 'finished', 'failed', 'cancelled')),
    coalesced_count    int NOT NULL DEFAULT 1,
    idempotency_key    text CHECK (idempotency_key <> '' AND length(idempotency_key) <= 512),
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
    finished_at        timestamptz
);
SELECT pg_catalog.pg_extension_config_dump('office.runs', '');
REVOKE ALL ON TABLE office.runs FROM PUBLIC;
COMMENT ON TABLE office.runs IS
    'The run queue: queued -> claimed -> finished|failed|cancelled (claimed -> queued on retry or recovery).';

-- The durable dedup: one row per key, over every status, with no time bound.
CREATE UNIQUE INDEX idx_run_idempotency ON office.runs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Coalesce-target lookup (newest queued run of a bucket) and claim_run for one agent.
CREATE INDEX idx_run_bucket_queued ON office.runs (agent_profile_id, reason, task_id, requested_at DESC)
    WHERE status = 'queued';
-- claim_run: the oldest queued run (ties by id, bytewise).
CREATE INDEX idx_run_queued ON office.runs (requested_at, id COLLATE "C") WHERE status = 'queued';
-- At most one claimed run per agent, ever; also serves the per-agent claimed
-- check of claim_run and the scan of recover_stale_runs (claimed runs are few).
CREATE UNIQUE INDEX idx_run_one_claimed_per_agent ON office.runs (agent_profile_id)
    WHERE status = 'claimed';
-- prune_runs.
CREATE INDEX idx_run_finished ON office.runs (finished_at)
    WHERE status IN ('finished', 'failed', 'cancelled');

-- Internal: a window setting (office.idempotency_window, office.coalesce_window)
-- as an interval, read with current_setting(name, true) so that
-- ALTER DATABASE ... SET works; unset or '' gives the default.
CREATE FUNCTION office._window(name text, fallback interval) RETURNS interval
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN coalesce(nullif(current_setting(name, true), '')::interval, fallback);
COMMENT ON FUNCTION office._window(text, interval) IS
    'Internal: the interval setting name (unset or empty: fallback).';
REVOKE EXECUTE ON FUNCTION office._window(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._window(text, interval)
    TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb DEFAULT '{}',
                                   idempotency_key text DEFAULT NULL, task_id text DEFAULT NULL,
                                   keyless_cause text DEFAULT NULL, keyless_detail text DEFAULT NULL)
    RETURNS office.enqueue_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_agent   text := enqueue_run.agent_profile_id;
    v_reason  text := enqueue_run.reason;
    v_payload jsonb := enqueue_run.payload;
    v_key     text := nullif(enqueue_run.idempotency_key, '');
    v_task    text := nullif(enqueue_run.task_id, '');
    v_cause   text := nullif(enqueue_run.keyless_cause, '');
    v_status  text;
    v_window  interval;
    v_lock    bigint;
    v_id      text;
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
    IF v_status IN ('paused', 'stopped', 'pending_approval') THEN
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

    -- 2. Windowed lookup (any status), through idx_run_idempotency.
    IF v_key IS NOT NULL THEN
        v_window := office._window('office.idempotency_window', interval '24 hours');
        SELECT r.id INTO v_id
          FROM office.runs r
         WHERE r.idempotency_key = v_key AND r.requested_at > now() - v_window;
        IF FOUND THEN
            PERFORM office._count_dedup('runs', v_reason, 'windowed');
            v_result := ('deduped', 'windowed', v_id);
            RETURN v_result;
        END IF;
    END IF;

    -- 3. Coalesce, unless the request is comment-keyed.
    IF v_key IS NULL OR NOT starts_with(v_key, 'task_comment:') THEN
        -- One coalescible enqueue per bucket at a time: the lookup below and
        -- the insert of step 4 are a check-then-act. A waiter reads again
        -- with a fresh snapshot (READ COMMITTED) after the holder committed.
        v_lock := hashtextextended('office.runs.bucket:' || v_agent || ':' || v_reason || ':'
                                   || coalesce(v_task, ''), 0);
        IF NOT pg_try_advisory_xact_lock(v_lock) THEN
            PERFORM pg_advisory_xact_lock(v_lock);
            -- Under REPEATABLE READ or SERIALIZABLE our snapshot cannot see
            -- what the holder just committed: ask the caller to retry.
            IF current_setting('transaction_isolation') <> 'read committed' THEN
                RAISE EXCEPTION USING ERRCODE = '40001',
                    MESSAGE = format('concurrent enqueue for agent %s, reason %s: retry the transaction',
                                     quote_literal(v_agent), quote_literal(v_reason));
            END IF;
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
                              AND t.status = 'queued' AND t.requested_at > now() - v_window
                              AND (t.idempotency_key IS NULL
                                   OR NOT starts_with(t.idempotency_key, 'task_comment:'))
                            ORDER BY t.requested_at DESC, t.id COLLATE "C" DESC
                            LIMIT 1
                              FOR UPDATE SKIP LOCKED)
            RETURNING r.id INTO v_id;
        ELSE
            UPDATE office.runs r
               SET coalesced_count = r.coalesced_count + 1, payload = v_payload
             WHERE r.id = (SELECT t.id
                             FROM office.runs t
                            WHERE t.agent_profile_id = v_agent AND t.reason = v_reason
                              AND t.task_id = v_task
                              AND t.status = 'queued' AND t.requested_at > now() - v_window
                              AND (t.idempotency_key IS NULL
                                   OR NOT starts_with(t.idempotency_key, 'task_comment:'))
                            ORDER BY t.requested_at DESC, t.id COLLATE "C" DESC
                            LIMIT 1
                              FOR UPDATE SKIP LOCKED)
            RETURNING r.id INTO v_id;
        END IF;
        IF v_id IS NOT NULL THEN
            PERFORM office._count_dedup('runs', v_reason, 'coalesced');
            v_result := ('coalesced', NULL, v_id);
            RETURN v_result;
        END IF;
    END IF;

    -- 4. Insert and classify. ON CONFLICT waits for an in-flight inserter of
    -- the key; once it has committed, DO NOTHING, and the next statement (a
    -- fresh snapshot) finds the holder. If the holder vanished meanwhile
    -- (rolled back, pruned), try the insert again.
    LOOP
        INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id)
        VALUES (v_agent, v_reason, v_payload, v_key, v_task)
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM pg_notify('office_runs', v_id);
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
COMMENT ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, text, text) IS
    'Enqueues a run: windowed dedup -> coalesce -> insert (durable dedup on idx_run_idempotency). Returns (outcome queued|deduped|coalesced, dedup_kind windowed|durable, run_id); NOTIFY office_runs on queued. Bad input 22023, unknown agent OFA01, agent not accepting runs OFA02.';
REVOKE EXECUTE ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, text, text)
    TO office_producer, office_admin;

CREATE FUNCTION office.enqueue_runs(requests jsonb)
    RETURNS TABLE (ordinality int, outcome text, dedup_kind text, run_id text)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_elem   jsonb;
    v_ord    int := 0;
    v_bad    text;
    v_res    office.enqueue_result;
    v_state  text;
    v_msg    text;
    v_detail text;
    v_hint   text;
BEGIN
    IF requests IS NULL OR jsonb_typeof(requests) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('enqueue_runs: requests must be a JSON array, not %s',
                             coalesce(jsonb_typeof(requests), 'NULL'));
    END IF;
    -- One block (one subtransaction) around the whole loop, not one per
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
                             'keyless_cause', 'keyless_detail')
             ORDER BY k LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('unknown key %s', quote_literal(v_bad));
            END IF;
            SELECT f.key INTO v_bad FROM jsonb_each(v_elem) AS f
             WHERE f.key <> 'payload'
               AND jsonb_typeof(f.value) NOT IN ('string', 'null')
             ORDER BY f.key LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('%s must be a JSON string, not %s', v_bad, jsonb_typeof(v_elem -> v_bad));
            END IF;
            v_res := office.enqueue_run(
                agent_profile_id => v_elem ->> 'agent_profile_id',
                reason           => v_elem ->> 'reason',
                payload          => CASE WHEN v_elem ? 'payload' THEN v_elem -> 'payload' ELSE '{}'::jsonb END,
                idempotency_key  => v_elem ->> 'idempotency_key',
                task_id          => v_elem ->> 'task_id',
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
    'Bulk enqueue_run: an array of objects with enqueue_run''s parameter names, applied in order; one (ordinality, outcome, dedup_kind, run_id) per element. Any invalid element fails the whole call with its SQLSTATE and ordinality.';
REVOKE EXECUTE ON FUNCTION office.enqueue_runs(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_runs(jsonb) TO office_producer, office_admin;

CREATE FUNCTION office.claim_run(worker_id text DEFAULT NULL, agent_profile_id text DEFAULT NULL)
    RETURNS SETOF office.runs
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_agent       text := claim_run.agent_profile_id;
    v_skip_agents text[] := '{}';
    v_skip_runs   text[] := '{}';
    v_cand_id     text;
    v_cand_agent  text;
    v_row         office.runs;
BEGIN
    -- One candidate at a time, oldest first (each lookup is a LIMIT 1 walk of
    -- idx_run_queued, or of idx_run_bucket_queued for one agent). For each: a
    -- per-agent advisory lock taken with pg_try_* (a claimer busy with this
    -- agent makes us skip the agent, never wait), then a fresh look for a
    -- claimed run of the agent (one may have committed after the candidate
    -- lookup's snapshot), then the row itself with SKIP LOCKED.
    -- idx_run_one_claimed_per_agent backs the rule up in the table.
    LOOP
        IF v_agent IS NULL THEN
            SELECT q.id, q.agent_profile_id INTO v_cand_id, v_cand_agent
              FROM office.runs q
             WHERE q.status = 'queued'
               AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
               AND q.agent_profile_id <> ALL (v_skip_agents)
               AND q.id <> ALL (v_skip_runs)
               AND NOT EXISTS (SELECT FROM office.runs c
                                WHERE c.agent_profile_id = q.agent_profile_id AND c.status = 'claimed')
             ORDER BY q.requested_at, q.id COLLATE "C"
             LIMIT 1;
        ELSE
            SELECT q.id, q.agent_profile_id INTO v_cand_id, v_cand_agent
              FROM office.runs q
             WHERE q.status = 'queued' AND q.agent_profile_id = v_agent
               AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
               AND q.agent_profile_id <> ALL (v_skip_agents)
               AND q.id <> ALL (v_skip_runs)
               AND NOT EXISTS (SELECT FROM office.runs c
                                WHERE c.agent_profile_id = q.agent_profile_id AND c.status = 'claimed')
             ORDER BY q.requested_at, q.id COLLATE "C"
             LIMIT 1;
        END IF;
        EXIT WHEN NOT FOUND;

        IF NOT pg_try_advisory_xact_lock(hashtextextended('office.runs.claim:' || v_cand_agent, 0))
           OR EXISTS (SELECT FROM office.runs c
                       WHERE c.agent_profile_id = v_cand_agent AND c.status = 'claimed') THEN
            v_skip_agents := v_skip_agents || v_cand_agent;
            CONTINUE;
        END IF;
        UPDATE office.runs r
           SET status = 'claimed', claimed_at = now(), claimed_by = claim_run.worker_id,
               attempt = r.attempt + 1
         WHERE r.id = (SELECT l.id FROM office.runs l
                        WHERE l.id = v_cand_id AND l.status = 'queued'
                          AND (l.scheduled_retry_at IS NULL OR l.scheduled_retry_at <= now())
                          FOR UPDATE SKIP LOCKED)
        RETURNING r.* INTO v_row;
        IF FOUND THEN
            RETURN NEXT v_row;
            RETURN;
        END IF;
        -- Locked by someone else (a cancel, a coalesce) or no longer queued.
        v_skip_runs := v_skip_runs || v_cand_id;
    END LOOP;
END
$$;
COMMENT ON FUNCTION office.claim_run(text, text) IS
    'Claims the oldest queued run (optionally of one agent) that is due and whose agent has no claimed run: status claimed, attempt + 1. 0 or 1 row; never waits for another claimer.';
REVOKE EXECUTE ON FUNCTION office.claim_run(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.claim_run(text, text) TO office_worker, office_admin;

CREATE FUNCTION office.finish_run(run_id text, attempt int) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    UPDATE office.runs r
       SET status = 'finished', finished_at = now()
     WHERE r.id = finish_run.run_id AND r.status = 'claimed' AND r.attempt = finish_run.attempt;
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
AS $$
#variable_conflict use_column
BEGIN
    UPDATE office.runs r
       SET status = 'failed', error_message = fail_run.error_message,
           finished_at = coalesce(r.finished_at, now())
     WHERE r.id = fail_run.run_id AND r.status = 'claimed' AND r.attempt = fail_run.attempt;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.fail_run(text, int, text) IS
    'claimed -> failed with error_message, only if the run is still claimed with this attempt.';
REVOKE EXECUTE ON FUNCTION office.fail_run(text, int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.fail_run(text, int, text) TO office_worker, office_admin;

CREATE FUNCTION office.retry_run(run_id text, attempt int, delay interval) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF retry_run.delay IS NULL OR retry_run.delay < interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('delay must be a non-negative interval, not %s', coalesce(retry_run.delay::text, 'NULL'));
    END IF;
    UPDATE office.runs r
       SET status = 'queued', retry_count = r.retry_count + 1,
           scheduled_retry_at = now() + retry_run.delay,
           claimed_at = NULL, claimed_by = NULL, finished_at = NULL
     WHERE r.id = retry_run.run_id AND r.status = 'claimed' AND r.attempt = retry_run.attempt;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.retry_run(text, int, interval) IS
    'claimed -> queued in place (key kept), retry_count + 1, claimable again after delay; only if still claimed with this attempt. Negative delay 22023.';
REVOKE EXECUTE ON FUNCTION office.retry_run(text, int, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.retry_run(text, int, interval) TO office_worker, office_admin;

CREATE FUNCTION office.cancel_run(run_id text, reason text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    UPDATE office.runs r
       SET status = 'cancelled', cancel_reason = cancel_run.reason, finished_at = now()
     WHERE r.id = cancel_run.run_id AND r.status IN ('queued', 'claimed');
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.cancel_run(text, text) IS
    'queued|claimed -> cancelled with cancel_reason; a finished, failed or cancelled run is untouched (false).';
REVOKE EXECUTE ON FUNCTION office.cancel_run(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.cancel_run(text, text) TO office_worker, office_admin;

-- Internal: 22023 unless the interval is given and not negative.
CREATE FUNCTION office._check_interval(name text, value interval) RETURNS interval
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL OR value < interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s must be a non-negative interval, not %s', name, coalesce(value::text, 'NULL'));
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_interval(text, interval) IS
    'Internal: returns value when it is a non-negative interval, else raises 22023 naming the parameter.';
REVOKE EXECUTE ON FUNCTION office._check_interval(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_interval(text, interval)
    TO office_producer, office_worker, office_reader, office_admin;

CREATE FUNCTION office.recover_stale_runs(older_than interval) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count int;
BEGIN
    PERFORM office._check_interval('older_than', recover_stale_runs.older_than);
    -- A run its worker is finishing right now is locked: skip it.
    WITH stale AS (
        SELECT s.id FROM office.runs s
         WHERE s.status = 'claimed' AND s.claimed_at < now() - recover_stale_runs.older_than
           FOR UPDATE SKIP LOCKED
    )
    UPDATE office.runs r
       SET status = 'queued', claimed_at = NULL, claimed_by = NULL
      FROM stale
     WHERE r.id = stale.id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.recover_stale_runs(interval) IS
    'claimed for longer than older_than -> queued (claimed_at, claimed_by cleared; attempt kept, so the old worker is fenced). Returns the count.';
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
    'Deletes finished, failed and cancelled runs whose finished_at is older than older_than (their keys become free). Returns the count.';
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
--     order: (1) office.sync_routine_run_status(task, terminal) when that
--     function exists (the routines capability plugs in without touching this
--     trigger); (2) the blockers-resolved wake of each dependent whose
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
                              CHECK (length(id) BETWEEN 1 AND 200 AND id !~ '[,:\u0001-\u001f\u007f-\u009f]'),
    workspace_id              text NOT NULL
                              CHECK (length(workspace_id) BETWEEN 1 AND 200
                                     AND workspace_id !~ '[,:\u0001-\u001f\u007f-\u009f]'),
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
    IF NOT FOUND OR v_status IN ('paused', 'stopped', 'pending_approval') THEN
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

CREATE FUNCTION office.child_set_key(parent_task_id text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    RETURN (SELECT coalesce(string_agg(c.id || ':' || c.state, ',' ORDER BY c.id COLLATE "C"), '')
              FROM office.tasks c
             WHERE c.parent_id = child_set_key.parent_task_id AND c.archived_at IS NULL);
COMMENT ON FUNCTION office.child_set_key(text) IS
    'id:STATE of the non-archived children of the parent, ordered by id (bytewise), joined with ","; '''' if none (DOMAIN.md §3.4).';
REVOKE EXECUTE ON FUNCTION office.child_set_key(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.child_set_key(text) TO office_reader, office_admin;

CREATE FUNCTION office.child_generation(parent_task_id text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    RETURN (SELECT coalesce(office.second_precision_text(max(c.updated_at)), '')
              FROM office.tasks c
             WHERE c.parent_id = child_generation.parent_task_id AND c.archived_at IS NULL);
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
    RETURN v_state IN ('COMPLETED', 'FAILED', 'CANCELLED');
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
       OR NEW.state NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN
        RETURN NULL;
    END IF;

    -- (1) Close the routine run linked to the task, before anyone is woken
    -- (a dependent routine fire must not see a stale task_created gate).
    -- Present once the routines capability is installed; a failure there is
    -- reported, not allowed to undo the move (DOMAIN.md §2.15).
    IF to_regprocedure('office.sync_routine_run_status(text,text)') IS NOT NULL THEN
        v_terminal := CASE NEW.state WHEN 'COMPLETED' THEN 'done'
                                     WHEN 'FAILED' THEN 'failed'
                                     ELSE 'cancelled' END;
        BEGIN
            EXECUTE 'SELECT office.sync_routine_run_status($1, $2)' USING NEW.id, v_terminal;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            RAISE WARNING 'sync routine run status of task % (%): %', NEW.id, v_terminal, v_msg;
        END;
    END IF;

    -- (2) Wake each dependent whose blockers are now all terminal (FAILED
    -- counts). Lock, then re-read: see the header on lost wakes.
    FOR v_blocked IN
        SELECT b.task_id FROM office.task_blockers b
         WHERE b.blocker_task_id = NEW.id
         ORDER BY b.task_id COLLATE "C"
    LOOP
        PERFORM office._xact_lock('office.tasks.blockers:' || v_blocked);
        SELECT array_agg(b.blocker_task_id ORDER BY b.blocker_task_id COLLATE "C"),
               bool_and(coalesce(t.state IN ('COMPLETED', 'FAILED', 'CANCELLED'), false)),
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
    IF NEW.parent_id IS NOT NULL AND NEW.state IN ('COMPLETED', 'CANCELLED') THEN
        PERFORM office._xact_lock('office.tasks.children:' || NEW.parent_id);
        SELECT p.assignee_agent_profile_id, office.child_set_key(p.id), office.child_generation(p.id)
          INTO v_assignee, v_set, v_gen
          FROM office.tasks p
         WHERE p.id = NEW.parent_id
           AND p.is_office
           AND p.archived_at IS NULL
           AND p.assignee_agent_profile_id IS NOT NULL
           AND NOT EXISTS (SELECT FROM office.tasks c
                            WHERE c.parent_id = p.id AND c.state NOT IN ('COMPLETED', 'CANCELLED'));
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
    'Trigger: on a change of state into COMPLETED, FAILED or CANCELLED, (1) sync_routine_run_status when installed, (2) task_blockers_resolved for each dependent whose blockers are all terminal, (3) task_children_completed for an Office parent whose children are all COMPLETED/CANCELLED.';
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
    PERFORM office._xact_lock('office.task_blockers.graph');
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
        v_id := gen_random_uuid()::text;
    ELSE
        PERFORM office._check_id('task', v_id);
    END IF;
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

    -- The generation comes from the insert trigger (1 with assignee and step).
    INSERT INTO office.tasks AS t (id, workspace_id, parent_id, workflow_step_id, title, state,
                                   assignee_agent_profile_id, is_office, is_ephemeral)
    VALUES (v_id, create_task.workspace_id, v_parent, create_task.workflow_step_id,
            coalesce(create_task.title, ''), create_task.state, v_assignee, v_office,
            coalesce(create_task.is_ephemeral, false))
    RETURNING t.assignment_generation INTO v_gen;

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
    'Creates a task (NULL id: generated). Generation 1 when assignee and step are both set, else 0; an Office task with an assignee gets a task_assigned run keyed assignment_key(task, assignee, generation) (skipped when the agent does not accept runs). Bad id/workspace/state 22023, unknown parent OFT01, unknown assignee OFA01. A task created terminal runs no terminal effects.';
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
    'Writes the assignee (NULL or '''' unassigns): the generation goes up by one and the value this call committed is returned; interrupt when a different, non-empty assignee is replaced; an Office task with an assignee gets a task_assigned run keyed assignment_key(task, assignee, generation) (skipped when the agent does not accept runs). Unknown task OFT01, unknown agent OFA01, bad actor_type 22023.';
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
    'blocker_task_id now blocks task_id. Self-block or an edge closing a cycle (any length) 22023, unknown task OFT01, an existing edge is a no-op.';
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
--     committed), previous_agent_profile_id, is_office, and actor
--     ({"id", "type"} from assign_task; NULL for a plain UPDATE);
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

CREATE FUNCTION office._tasks_event_assigned() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_actor jsonb := nullif(current_setting('office.actor', true), '')::jsonb;
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
                'actor', v_actor));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._tasks_event_assigned() IS
    'Trigger: appends task.assigned (task_id, workspace_id, agent_profile_id, assignment_generation, previous_agent_profile_id, is_office, actor) on every write of the assignee and on an insert with one.';
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
    'Claims up to max_rows pending events, oldest first, for consumer (recorded for diagnosis), hiding them from other claimers for visibility; never waits for and never shares an event with a concurrent claimer. An event not acknowledged in time is claimable again.';
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
-- office: observability views (API.md §6).
--
-- dedup_stats and keyless_stats sum the striped counters of 25_counters.sql;
-- queue_stats reads office.runs. Readers get SELECT on the views only.

CREATE VIEW office.dedup_stats AS
SELECT c.queue, c.reason, c.kind, sum(c.total)::bigint AS total
  FROM office.dedup_counters c
 GROUP BY c.queue, c.reason, c.kind;
COMMENT ON VIEW office.dedup_stats IS
    'Suppressed enqueues by queue (runs|wakeup), reason and kind (windowed|durable|coalesced; coalesced is queue runs). Counters restart from zero after a crash.';
REVOKE ALL ON office.dedup_stats FROM PUBLIC;
GRANT SELECT ON office.dedup_stats TO office_reader, office_admin;

CREATE VIEW office.keyless_stats AS
SELECT c.reason, c.cause, sum(c.total)::bigint AS total
  FROM office.keyless_counters c
 GROUP BY c.reason, c.cause;
COMMENT ON VIEW office.keyless_stats IS
    'Keyless enqueues reported with a cause, by reason and cause (unresolved|by_design). Counters restart from zero after a crash.';
REVOKE ALL ON office.keyless_stats FROM PUBLIC;
GRANT SELECT ON office.keyless_stats TO office_reader, office_admin;

CREATE VIEW office.queue_stats AS
SELECT s.status,
       count(DISTINCT r.agent_profile_id)::bigint AS agents,
       count(r.id)::bigint AS runs,
       min(r.requested_at) AS oldest_requested_at
  FROM (VALUES (1, 'queued'), (2, 'claimed'), (3, 'finished'), (4, 'failed'), (5, 'cancelled'))
       AS s(ord, status)
  LEFT JOIN office.runs r ON r.status = s.status
 GROUP BY s.ord, s.status
 ORDER BY s.ord;
COMMENT ON VIEW office.queue_stats IS
    'Runs per status (every status, zero included): distinct agents, runs, and the oldest requested_at.';
REVOKE ALL ON office.queue_stats FROM PUBLIC;
GRANT SELECT ON office.queue_stats TO office_reader, office_admin;
