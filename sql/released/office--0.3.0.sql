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
--
-- Plans. A queue table is often empty when it is analyzed (a fresh install,
-- a drained queue after pruning). PL/pgSQL caches a generic plan per
-- statement, and against "0 rows" statistics that plan is a sequential scan,
-- kept by every long-lived session until the next analyze: each lookup then
-- reads the whole table, and enqueue slows down as the queue grows. Every
-- statement of the hot-path functions below is a keyed lookup that an index
-- serves, so they run with enable_seqscan = off (tests/test_runs_plans.py).

CREATE TYPE office.enqueue_result AS (outcome text, dedup_kind text, run_id text);
COMMENT ON TYPE office.enqueue_result IS
    'Result of office.enqueue_run: outcome queued|deduped|coalesced, dedup_kind windowed|durable (deduped only), run_id the run created, matched or absorbing the request.';

-- entry_triggered is the last column on purpose: it arrived with 0.2.0
-- (ALTER TABLE ... ADD COLUMN appends), and a fresh install must have the
-- same column order as an upgraded one.
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
    finished_at        timestamptz,
    entry_triggered    boolean NOT NULL DEFAULT false
);
SELECT pg_catalog.pg_extension_config_dump('office.runs', '');
REVOKE ALL ON TABLE office.runs FROM PUBLIC;
COMMENT ON TABLE office.runs IS
    'The run queue: queued -> claimed -> finished|failed|cancelled (claimed -> queued on retry or recovery).';
COMMENT ON COLUMN office.runs.entry_triggered IS
    'True when a step-entry action enqueued the run: it never coalesces into another run and is never a coalesce target (since 0.2.0).';

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
                                   entry_triggered boolean DEFAULT false,
                                   keyless_cause text DEFAULT NULL, keyless_detail text DEFAULT NULL)
    RETURNS office.enqueue_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_agent   text := enqueue_run.agent_profile_id;
    v_reason  text := enqueue_run.reason;
    v_payload jsonb := enqueue_run.payload;
    v_key     text := nullif(enqueue_run.idempotency_key, '');
    v_task    text := nullif(enqueue_run.task_id, '');
    v_entry   boolean := coalesce(enqueue_run.entry_triggered, false);
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

    -- 3. Coalesce, unless the request is entry-triggered or comment-keyed.
    IF NOT v_entry AND (v_key IS NULL OR NOT starts_with(v_key, 'task_comment:')) THEN
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
                              AND NOT t.entry_triggered
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
                              AND NOT t.entry_triggered
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
        INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id, entry_triggered)
        VALUES (v_agent, v_reason, v_payload, v_key, v_task, v_entry)
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            -- NOTIFY takes a cluster-wide lock at commit and holds it through
            -- the WAL flush, so notifying producers commit one at a time
            -- (docs/benchmarks.md). Fleets whose workers poll claim_run can
            -- turn it off per database, role or session: office.notify = off.
            IF current_setting('office.notify', true) IS DISTINCT FROM 'off' THEN
                PERFORM pg_notify('office_runs', v_id);
            END IF;
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
    'Enqueues a run: windowed dedup -> coalesce -> insert (durable dedup on idx_run_idempotency). Returns (outcome queued|deduped|coalesced, dedup_kind windowed|durable, run_id); NOTIFY office_runs on queued. Bad input 22023, unknown agent OFA01, agent not accepting runs OFA02.';
REVOKE EXECUTE ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text)
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
    'Bulk enqueue_run: an array of objects with enqueue_run''s parameter names, applied in order; one (ordinality, outcome, dedup_kind, run_id) per element. Any invalid element fails the whole call with its SQLSTATE and ordinality.';
REVOKE EXECUTE ON FUNCTION office.enqueue_runs(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_runs(jsonb) TO office_producer, office_admin;

CREATE FUNCTION office.claim_run(worker_id text DEFAULT NULL, agent_profile_id text DEFAULT NULL)
    RETURNS SETOF office.runs
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
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
    SET enable_seqscan = off
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
    SET enable_seqscan = off
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
    SET enable_seqscan = off
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
    SET enable_seqscan = off
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
    id               text PRIMARY KEY DEFAULT gen_random_uuid()::text,
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
    v_payload jsonb := coalesce(request_wakeup.payload, '{}'::jsonb);
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
    IF jsonb_typeof(v_payload) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('payload must be a JSON object, not %s', jsonb_typeof(v_payload));
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
    'Records a queued wakeup request (NOTIFY office_wakeups unless office.notify = off) or, for a key already requested, (deduped, durable, <holder>) counted on queue wakeup. Empty agent or source, non-object payload, key over 512 characters 22023; unknown agent OFA01.';
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
    IF v_status IN ('paused', 'stopped', 'pending_approval') THEN
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

    PERFORM office._xact_lock('office.wakeups.agent:' || v_req.agent_profile_id);
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
    PERFORM pg_notify('office_runs', v_run);
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
    'queued -> failed with the reason and finished_at; a claimed, coalesced, skipped or failed request is left as it is (false). Unknown request OFR01.';
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
-- (controlplane.routines: cron expression, time zone, catch-up policy); SQL
-- checks the expression's structure and the time zone when a trigger is added.

CREATE TABLE office.routines (
    id                        text PRIMARY KEY
                              CHECK (length(id) BETWEEN 1 AND 200 AND id !~ '[,:\u0001-\u001f\u007f-\u009f]'),
    workspace_id              text NOT NULL
                              CHECK (length(workspace_id) BETWEEN 1 AND 200
                                     AND workspace_id !~ '[,:\u0001-\u001f\u007f-\u009f]'),
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

CREATE TABLE office.routine_triggers (
    id              text PRIMARY KEY
                    CHECK (length(id) BETWEEN 1 AND 200 AND id !~ '[,:\u0001-\u001f\u007f-\u009f]'),
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
    id                       text PRIMARY KEY DEFAULT gen_random_uuid()::text,
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
-- controlplane.routines (cronsim) computes: *, a, a-b, with an optional /step;
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
        v_id := gen_random_uuid()::text;
    ELSE
        PERFORM office._check_id('routine', v_id);
    END IF;
    IF create_routine.name IS NULL OR create_routine.name = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('name of routine %s must not be empty', quote_literal(v_id));
    END IF;
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
    SELECT k INTO v_bad FROM unnest(ARRAY['title', 'description']) AS k
     WHERE jsonb_typeof(v_template -> k) NOT IN ('string', 'null')
     ORDER BY k LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task_template %s must be a JSON string, not %s', v_bad,
                             jsonb_typeof(v_template -> v_bad));
    END IF;
    IF jsonb_typeof(v_vars) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('variables must be a JSON object {name: {"default": value}}, not %s',
                             jsonb_typeof(v_vars));
    END IF;
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

    INSERT INTO office.routines AS r (id, workspace_id, name, task_template, assignee_agent_profile_id,
                                      concurrency_policy, catch_up_policy, catch_up_max, variables)
    VALUES (v_id, create_routine.workspace_id, create_routine.name, v_template, v_assignee,
            create_routine.concurrency_policy, create_routine.catch_up_policy, create_routine.catch_up_max,
            v_vars)
    RETURNING r.* INTO v_row;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.create_routine(text, text, jsonb, text, text, jsonb, text, text, int) IS
    'Creates an active routine (NULL id: generated). A template {"title", "description"} with a non-empty title makes it heavy (fires create tasks), else lightweight (fires wake the assignee); variables declares {name: {"default": value}}. Unknown policy, bad id/template/variables 22023; unknown assignee OFA01.';
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
        v_id := gen_random_uuid()::text;
    ELSE
        PERFORM office._check_id('routine trigger', v_id);
    END IF;
    PERFORM office._check_cron_expression(add_routine_trigger.cron_expression);
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_timezone_names z WHERE z.name = v_tz) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown time zone %s (expected a name of pg_timezone_names, e.g. ''UTC'' or ''Europe/Paris'')',
                             quote_literal(v_tz));
    END IF;
    IF add_routine_trigger.next_run_at IS NOT NULL AND NOT isfinite(add_routine_trigger.next_run_at) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('next_run_at must be finite, not %s', add_routine_trigger.next_run_at);
    END IF;
    -- Key share on the routine: it cannot vanish before the insert.
    PERFORM FROM office.routines r WHERE r.id = add_routine_trigger.routine_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine %s not found', coalesce(quote_literal(add_routine_trigger.routine_id), 'NULL'));
    END IF;

    INSERT INTO office.routine_triggers AS t (id, routine_id, kind, cron_expression, timezone, next_run_at)
    VALUES (v_id, add_routine_trigger.routine_id, 'cron', btrim(add_routine_trigger.cron_expression), v_tz,
            add_routine_trigger.next_run_at)
    RETURNING t.* INTO v_row;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.add_routine_trigger(text, text, text, timestamptz, text) IS
    'Adds an enabled cron trigger to a routine (NULL id: generated). next_run_at is the first tick to claim; NULL leaves the trigger to be armed by the cron loop (controlplane.routines.fire_due). Invalid cron expression or time zone 22023 naming it; unknown routine OFR01.';
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
    IF following_next_run_at IS NULL OR NOT isfinite(following_next_run_at)
       OR following_next_run_at <= observed_next_run_at THEN
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
    'Compare-and-swap on next_run_at: if the enabled trigger''s next_run_at is still observed_next_run_at, advance it to following_next_run_at (stamping last_fired_at) and return true; of N concurrent claimers of one tick exactly one wins. Observed NULL arms an unarmed trigger. Unknown trigger OFR01.';
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
    -- The wakeup key it makes must fit the 512 characters of a key.
    IF length('routine:' || v_routine_id || ':' || v_source || ':' || v_explicit) > 512 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('explicit_key %s... is %s characters: its routine key would be longer than 512',
                             quote_literal(left(v_explicit, 40)), length(v_explicit));
    END IF;
    IF dispatch_routine.claimed_tick IS NOT NULL AND NOT isfinite(dispatch_routine.claimed_tick) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('claimed_tick must be finite, not %s', dispatch_routine.claimed_tick);
    END IF;
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
            PERFORM office._xact_lock('office.routines.gate:' || v_routine_id || ':' || v_fp);
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
    'Fires a routine: a received run with the fingerprint of the rendered template, last_run_at touched, the policy (skip/coalesce gate with self-heal, heavy routines), then a task (task_created) or a wakeup keyed routine_key(...) and its dispatch (done; already requested: done; dispatch failure: the wakeup and the run failed, returned, not raised). Unknown source, undeclared variable, unfilled placeholder, routine not active 22023; unknown routine or trigger OFR01.';
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

-- The runs evidence of a candidate (DOMAIN.md §2.20 rule 8): runs of one task
-- and reason. Only runs that name a task are indexed.
CREATE INDEX idx_run_task_reason ON office.runs (task_id, reason) WHERE task_id IS NOT NULL;

-- The parents of an agent, when it starts accepting runs again. The assignee
-- changes rarely, so this index keeps state changes HOT (an index on, or
-- predicated on, state or updated_at would make every task write update
-- every index of office.tasks).
CREATE INDEX idx_tasks_assignee ON office.tasks (assignee_agent_profile_id)
    WHERE assignee_agent_profile_id IS NOT NULL;

-- --- the candidate conditions, once ------------------------------------------------

-- Conditions 1-4 and 6-7 of DOMAIN.md §2.20 with the computed fields. The
-- child set key is the expression of office.child_set_key and the generation
-- that of office.child_generation, so the sweep and the edge path derive the
-- same operation id.
CREATE VIEW office._parent_wake_candidates AS
SELECT p.id AS parent_task_id,
       p.assignee_agent_profile_id,
       p.workflow_step_id,
       k.child_set_key,
       k.newest_child_updated_at
  FROM office.tasks p
  JOIN office.agent_profiles a ON a.id = p.assignee_agent_profile_id
 CROSS JOIN LATERAL (
        SELECT coalesce(string_agg(c.id || ':' || c.state, ',' ORDER BY c.id COLLATE "C"), '')
                   AS child_set_key,
               coalesce(office.second_precision_text(max(c.updated_at)), '') AS newest_child_updated_at,
               count(*) AS live_children,
               count(*) FILTER (WHERE c.state NOT IN ('COMPLETED', 'CANCELLED')) AS open_children
          FROM office.tasks c
         WHERE c.parent_id = p.id AND c.archived_at IS NULL) AS k
  LEFT JOIN office.parent_child_wake_receipts r ON r.parent_task_id = p.id
 WHERE p.archived_at IS NULL
   AND NOT p.is_ephemeral
   AND p.state NOT IN ('COMPLETED', 'CANCELLED')
   AND p.is_office
   AND k.live_children > 0
   AND k.open_children = 0
   AND a.status NOT IN ('paused', 'stopped', 'pending_approval')
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
       AND ((NEW.archived_at IS NULL AND NEW.state IN ('COMPLETED', 'CANCELLED'))
            OR NEW.archived_at IS DISTINCT FROM OLD.archived_at) THEN
        INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (NEW.parent_id);
    END IF;
    -- As a parent: it became eligible (reopened, unarchived, assigned, ...).
    IF (NEW.state, NEW.archived_at, NEW.is_office, NEW.is_ephemeral, NEW.assignee_agent_profile_id)
           IS DISTINCT FROM
       (OLD.state, OLD.archived_at, OLD.is_office, OLD.is_ephemeral, OLD.assignee_agent_profile_id)
       AND NEW.archived_at IS NULL AND NEW.is_office AND NOT NEW.is_ephemeral
       AND NEW.state NOT IN ('COMPLETED', 'CANCELLED') AND NEW.assignee_agent_profile_id IS NOT NULL
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
          AND NEW.state IN ('COMPLETED', 'CANCELLED'))
    EXECUTE FUNCTION office._tasks_parent_wake_mark();

CREATE TRIGGER tasks_70_parent_wake_mark_update
    AFTER UPDATE ON office.tasks
    FOR EACH ROW
    WHEN ((NEW.parent_id IS NOT NULL
           AND ((NEW.archived_at IS NULL AND NEW.state IN ('COMPLETED', 'CANCELLED'))
                OR NEW.archived_at IS DISTINCT FROM OLD.archived_at))
          OR OLD.parent_id IS DISTINCT FROM NEW.parent_id
          OR ((NEW.state, NEW.archived_at, NEW.is_office, NEW.is_ephemeral,
               NEW.assignee_agent_profile_id)
                  IS DISTINCT FROM
              (OLD.state, OLD.archived_at, OLD.is_office, OLD.is_ephemeral,
               OLD.assignee_agent_profile_id)
              AND NEW.archived_at IS NULL AND NEW.is_office AND NOT NEW.is_ephemeral
              AND NEW.state NOT IN ('COMPLETED', 'CANCELLED')
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
       AND p.state NOT IN ('COMPLETED', 'CANCELLED')
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
    WHEN (NEW.status NOT IN ('paused', 'stopped', 'pending_approval'))
    EXECUTE FUNCTION office._agents_parent_wake_mark();

CREATE TRIGGER agent_profiles_70_parent_wake_mark_update
    AFTER UPDATE ON office.agent_profiles
    FOR EACH ROW
    WHEN (NEW.status NOT IN ('paused', 'stopped', 'pending_approval')
          AND (OLD.status IN ('paused', 'stopped', 'pending_approval') OR OLD.id IS DISTINCT FROM NEW.id))
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
        -- (the WHEN clause: a task_children_completed run of a task)
        INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (OLD.task_id);
        RETURN NULL;
    END IF;
    -- DELETE, per statement (prune_runs deletes many): the open parents only.
    INSERT INTO office.parent_wake_marks (parent_task_id)
    SELECT p.id
      FROM (SELECT DISTINCT g.task_id FROM office_parent_wake_gone_runs g
             WHERE g.reason = 'task_children_completed' AND g.task_id IS NOT NULL) AS gone
      JOIN office.tasks p ON p.id = gone.task_id
     WHERE p.archived_at IS NULL AND p.is_office AND NOT p.is_ephemeral
       AND p.state NOT IN ('COMPLETED', 'CANCELLED');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._runs_parent_wake_mark() IS
    'Trigger: marks for the stuck-parent sweep the parent of a task_children_completed run that left flight, was re-dated or re-targeted (per row) or was deleted (per statement).';
REVOKE EXECUTE ON FUNCTION office._runs_parent_wake_mark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._runs_parent_wake_mark() TO office_admin;

CREATE TRIGGER runs_70_parent_wake_mark_update
    AFTER UPDATE ON office.runs
    FOR EACH ROW
    WHEN (OLD.reason = 'task_children_completed' AND OLD.task_id IS NOT NULL
          AND ((OLD.status IN ('queued', 'claimed') AND NEW.status NOT IN ('queued', 'claimed'))
               OR NEW.requested_at IS DISTINCT FROM OLD.requested_at
               OR NEW.task_id IS DISTINCT FROM OLD.task_id
               OR NEW.reason IS DISTINCT FROM OLD.reason))
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
       AND p.state NOT IN ('COMPLETED', 'CANCELLED')
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
      FROM (SELECT DISTINCT m.parent_task_id AS id FROM office.parent_wake_marks m) AS marked
     CROSS JOIN LATERAL (SELECT st.* FROM office._parent_wake_stuck st
                          WHERE st.parent_task_id = marked.id OFFSET 0) AS s
     ORDER BY s.parent_task_id COLLATE "C"
     LIMIT list_stuck_parents.max_rows;
END
$$;
COMMENT ON FUNCTION office.list_stuck_parents(int, text) IS
    'Parents whose finished child wave was not delivered (every candidate condition of DOMAIN.md §2.20, applied before the LIMIT), ordered by parent id (bytewise): parent, assignee, step, child_set_key, newest_child_updated_at. Read from the parents marked since they were last found delivered; another reason than task_children_completed reads every open parent. Negative max_rows or empty reason 22023.';
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
    PERFORM office._xact_lock('office.tasks.children:' || v_parent);

    -- The assignee, re-checked; its row is share-locked so that its status
    -- stays as read until commit.
    SELECT p.assignee_agent_profile_id INTO v_assignee FROM office.tasks p WHERE p.id = v_parent;
    IF NOT FOUND THEN
        PERFORM office._require_task(v_parent);
    END IF;
    IF v_assignee IS NOT NULL THEN
        SELECT a.status INTO v_status FROM office.agent_profiles a WHERE a.id = v_assignee FOR SHARE;
    END IF;
    IF v_status IS NULL OR v_status IN ('paused', 'stopped', 'pending_approval') THEN
        v_result := (v_parent, false, NULL, 'skipped', NULL, NULL, 'assignee_unresolved');
        RETURN v_result;
    END IF;

    -- The child set re-read (a fresh snapshot, after the lock), with the
    -- marks this read accounts for.
    SELECT coalesce(string_agg(c.id || ':' || c.state, ',' ORDER BY c.id COLLATE "C"), ''),
           coalesce(office.second_precision_text(max(c.updated_at)), ''),
           count(*),
           count(*) FILTER (WHERE c.state NOT IN ('COMPLETED', 'CANCELLED')),
           (SELECT array_agg(m.id) FROM office.parent_wake_marks m WHERE m.parent_task_id = v_parent)
      INTO v_set, v_gen, v_live, v_open, v_marks
      FROM office.tasks c
     WHERE c.parent_id = v_parent AND c.archived_at IS NULL;
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
            hashtextextended('office.tasks.children:' || v_candidate.parent_task_id, 0));
        -- Under the lock, a fresh look: another sweep may have delivered it
        -- since the list was read.
        CONTINUE WHEN NOT EXISTS (SELECT FROM office._parent_wake_stuck st
                                   WHERE st.parent_task_id = v_candidate.parent_task_id);
        RETURN NEXT office.reconcile_parent(v_candidate.parent_task_id, v_candidate.child_set_key,
                                            v_candidate.newest_child_updated_at);
    END LOOP;
END
$$;
COMMENT ON FUNCTION office.sweep_stuck_parents(int) IS
    'One tick of the stuck-parent sweep: forgets the marked parents that are not stuck, lists up to max_rows stuck parents and reconciles each (one reconcile_result per parent; a parent another transaction holds, or that was delivered meanwhile, is left for the next tick). Negative max_rows 22023.';
REVOKE EXECUTE ON FUNCTION office.sweep_stuck_parents(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.sweep_stuck_parents(int) TO office_producer, office_admin;
-- office: what the control-plane daemon (`officectl run`, controlplane.daemon)
-- needs beyond the API of API.md: the cron loop's scan and its atomic
-- claim-and-fire, the wakeup loop's batch dispatch, and the numbers behind its
-- gauges (outbox lag). Each is one short transaction; none holds a lock
-- across calls, so any number of daemons may run against one database.
--
-- * due_routine_triggers lists what the cron loop must look at; the loop
--   computes ticks in Python (controlplane.routines.plan_tick: cron
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
--   queued wakeups, due triggers, claimed runs.

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
    IF due_routine_triggers.at IS NULL OR NOT isfinite(due_routine_triggers.at) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('at must be a finite time, not %s', coalesce(due_routine_triggers.at::text, 'NULL'));
    END IF;
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
     ORDER BY t.next_run_at NULLS FIRST, t.id COLLATE "C"
     LIMIT due_routine_triggers.max_rows;
END
$$;
COMMENT ON FUNCTION office.due_routine_triggers(timestamptz, int) IS
    'The cron loop''s scan: enabled cron triggers of active routines that are not armed yet (next_run_at NULL) or due at the given time, with their routine''s catch-up policy; unarmed first, then oldest due, at most max_rows. NULL or infinite at, max_rows below 1: 22023.';
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
    'The cron loop''s step for one due tick, in one transaction: claim_routine_tick(observed -> following) and, for the winner, dispatch_routine(source cron, claimed_tick = observed, the catch-up values). A trigger being claimed by another transaction is skipped (claimed false, no wait). A dispatch that raises keeps the claim and is returned with error_message and error_sqlstate. NULL observed tick 22023; unknown trigger OFR01.';
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
           AND (a.id IS NULL OR a.status NOT IN ('paused', 'stopped', 'pending_approval'))
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
            -- The agent changed since the scan (paused: the request waits).
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            status := 'queued';
            run_id := NULL;
            error_message := v_msg;
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION office.dispatch_queued_wakeups(int, interval) IS
    'The wakeup loop''s step: dispatch_wakeup for up to max_rows queued requests at least min_age old, oldest first, skipping requests another transaction holds and agents that do not accept runs; a request whose agent is gone is failed (agent not found). One row per request: its status after the call (claimed, coalesced, skipped, noop, failed; queued when the dispatch raised, with error_message). max_rows below 1, negative min_age: 22023.';
REVOKE EXECUTE ON FUNCTION office.dispatch_queued_wakeups(int, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.dispatch_queued_wakeups(int, interval) TO office_worker, office_admin;

CREATE FUNCTION office.daemon_stats()
    RETURNS TABLE (pending_events bigint, oldest_pending_event_at timestamptz, outbox_lag_seconds double precision,
                   queued_wakeups bigint, due_triggers bigint, claimed_runs bigint,
                   oldest_claimed_at timestamptz, oldest_claim_age_seconds double precision)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.pending, o.created_at,
           coalesce(extract(epoch FROM now() - o.created_at)::double precision, 0),
           (SELECT count(*) FROM office.wakeup_requests w WHERE w.status = 'queued'),
           (SELECT count(*) FROM office.routine_triggers t JOIN office.routines r ON r.id = t.routine_id
             WHERE t.enabled AND t.kind = 'cron' AND r.status = 'active'
               AND (t.next_run_at IS NULL OR t.next_run_at <= now())),
           c.claimed, c.oldest,
           coalesce(extract(epoch FROM now() - c.oldest)::double precision, 0)
      FROM (SELECT count(*) AS pending FROM office.events p WHERE p.processed_at IS NULL) e
      LEFT JOIN LATERAL (SELECT p.created_at FROM office.events p WHERE p.processed_at IS NULL
                          ORDER BY p.id LIMIT 1) o ON true
      CROSS JOIN (SELECT count(*) AS claimed, min(r.claimed_at) AS oldest
                    FROM office.runs r WHERE r.status = 'claimed') c
$$;
COMMENT ON FUNCTION office.daemon_stats() IS
    'Gauges of the control plane: unacknowledged events, when the oldest was written and its age in seconds (the outbox lag, 0 when none), queued wakeup requests, cron triggers due now, claimed runs, the oldest claim and its age in seconds (0 when none).';
REVOKE EXECUTE ON FUNCTION office.daemon_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.daemon_stats() TO office_worker, office_reader, office_admin;
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
