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
    RETURN '0.2.0';
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
