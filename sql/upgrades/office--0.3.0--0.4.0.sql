\echo Use "ALTER EXTENSION office UPDATE TO '0.4.0'" to load this file. \quit
-- office 0.3.0 -> 0.4.0, written by hand: exactly the statements that take a
-- 0.3.0 database to what the capability files install from nothing
-- (tests/install/test_install_paths.py compares the two catalogs). Sections follow the
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

CREATE OR REPLACE FUNCTION office._check_id(kind text, value text) RETURNS text
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

-- (end of keys)
-- === agents (20_agents.sql) ====================================================
CREATE OR REPLACE FUNCTION office.upsert_agent(id text, workspace_id text, name text DEFAULT '',
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

CREATE FUNCTION office._statuses_refusing_runs() RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN ARRAY['paused', 'stopped', 'pending_approval'];
COMMENT ON FUNCTION office._statuses_refusing_runs() IS
    'Internal: the agent statuses that refuse new runs (paused, stopped, pending_approval; OFA02).';
REVOKE EXECUTE ON FUNCTION office._statuses_refusing_runs() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._statuses_refusing_runs()
    TO office_producer, office_worker, office_reader, office_admin;

-- The id rule, written once (office._is_id).
ALTER TABLE office.agent_profiles
    DROP CONSTRAINT agent_profiles_id_check,
    ADD CONSTRAINT agent_profiles_id_check CHECK (office._is_id(id)),
    DROP CONSTRAINT agent_profiles_workspace_id_check,
    ADD CONSTRAINT agent_profiles_workspace_id_check CHECK (office._is_id(workspace_id));

-- (end of agents)
-- === runs (25_counters.sql, 30_runs.sql) =======================================
-- Poison never stops a loop (API.md Conventions): see 70_daemon.sql.
CREATE OR REPLACE FUNCTION office.recover_stale_runs(older_than interval) RETURNS int
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
-- 0.4.0: time-ordered run ids; leases (heartbeat_at); remembered keys; the
-- claim index that skips busy agents; counters in exclusive slots; one
-- CHECK, a function call, for the four column CHECKs (30_runs.sql says why).
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
ALTER TABLE office.runs
    DROP CONSTRAINT runs_reason_check,
    DROP CONSTRAINT runs_payload_check,
    DROP CONSTRAINT runs_status_check,
    DROP CONSTRAINT runs_idempotency_key_check,
    ADD CONSTRAINT runs_row_check CHECK (office._run_row_valid(status, reason, payload, idempotency_key));
ALTER TABLE office.runs ALTER COLUMN id SET DEFAULT office._uuid_v7();
ALTER TABLE office.runs ADD COLUMN heartbeat_at timestamptz;
-- A claim made before 0.4.0 beat last when it was made.
UPDATE office.runs SET heartbeat_at = claimed_at WHERE status = 'claimed';

COMMENT ON COLUMN office.runs.heartbeat_at IS
    'When the worker holding the claim last proved it is alive (claim_run, heartbeat_run); recover_stale_runs reads it (since 0.4.0).';

DROP INDEX office.idx_run_queued;

-- claim_run: one agent's oldest queued run (ties by id, bytewise), and the
-- loose scan over the agents that have queued runs (an unfiltered claim
-- visits each such agent once, however long its backlog). It replaced
-- 0.3.0's idx_run_queued (requested_at, id) in 0.4.0: walking that one in
-- time order read every queued run of agents that already hold a claim.
CREATE INDEX idx_run_agent_queued ON office.runs (agent_profile_id, requested_at, id COLLATE "C")
    WHERE status = 'queued';

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

-- The label CHECKs as one array constant each (25_counters.sql says why).
ALTER TABLE office.dedup_counters
    DROP CONSTRAINT dedup_counters_queue_check,
    DROP CONSTRAINT dedup_counters_kind_check,
    ADD CONSTRAINT dedup_counters_queue_check CHECK (queue = ANY ('{runs,wakeup}'::text[])),
    ADD CONSTRAINT dedup_counters_kind_check CHECK (kind = ANY ('{windowed,durable,coalesced}'::text[]));
ALTER TABLE office.keyless_counters
    DROP CONSTRAINT keyless_counters_cause_check,
    ADD CONSTRAINT keyless_counters_cause_check CHECK (cause = ANY ('{unresolved,by_design}'::text[]));

CREATE OR REPLACE FUNCTION office._count_dedup(queue text, reason text, kind text) RETURNS void
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

CREATE OR REPLACE FUNCTION office._count_keyless(reason text, cause text) RETURNS void
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

CREATE OR REPLACE FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb DEFAULT '{}',
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
CREATE OR REPLACE FUNCTION office.enqueue_runs(requests jsonb)
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

CREATE OR REPLACE FUNCTION office.claim_run(worker_id text DEFAULT NULL, agent_profile_id text DEFAULT NULL)
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

-- Its claim check compares status under "C" (30_runs.sql, "Plans").
CREATE OR REPLACE FUNCTION office.finish_run(run_id text, attempt int) RETURNS boolean
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

CREATE OR REPLACE FUNCTION office.fail_run(run_id text, attempt int, error_message text) RETURNS boolean
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

CREATE OR REPLACE FUNCTION office.retry_run(run_id text, attempt int, delay interval) RETURNS boolean
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

CREATE OR REPLACE FUNCTION office.cancel_run(run_id text, reason text) RETURNS boolean
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

CREATE OR REPLACE FUNCTION office.prune_runs(older_than interval) RETURNS int
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
-- Every agent with queued runs gets a row (a busy or paused one is a false
-- positive the first claimers remove).
INSERT INTO office.agent_ready (agent_profile_id, head_at)
SELECT r.agent_profile_id, min(r.requested_at)
  FROM office.runs r
 WHERE r.status = 'queued'
 GROUP BY r.agent_profile_id;
-- A run with a task has one entry for its bucket and the sweep's evidence,
-- not two (since 0.4.0, 30_runs.sql): idx_run_task_reason gains the agent and
-- requested_at and serves the coalesce lookup of a request with a task;
-- idx_run_bucket_queued keeps only the runs without one.
DROP INDEX office.idx_run_bucket_queued;
CREATE INDEX idx_run_bucket_queued ON office.runs (agent_profile_id, reason, requested_at DESC)
    WHERE status COLLATE "C" = 'queued' AND task_id IS NULL;
DROP INDEX office.idx_run_task_reason;
CREATE INDEX idx_run_task_reason ON office.runs (task_id, reason, agent_profile_id, requested_at)
    WHERE task_id IS NOT NULL;
-- (end of runs)
-- === tasks (40_tasks.sql) ======================================================
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

CREATE OR REPLACE FUNCTION office.create_task(workspace_id text, id text DEFAULT NULL, title text DEFAULT '',
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

CREATE OR REPLACE FUNCTION office.assign_task(task_id text, assignee_agent_profile_id text,
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

COMMENT ON FUNCTION office.add_blocker(text, text) IS
    'blocker_task_id now blocks task_id. Self-block or an edge closing a cycle (any length) 22023, unknown task OFT01, tasks of two workspaces OFW01, an existing edge is a no-op.';

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

CREATE OR REPLACE FUNCTION office._wake(agent_profile_id text, reason text, payload jsonb,
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

CREATE OR REPLACE FUNCTION office.child_set_key(parent_task_id text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    RETURN (SELECT w.child_set_key FROM office._child_wave(child_set_key.parent_task_id) AS w);

CREATE OR REPLACE FUNCTION office.child_generation(parent_task_id text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    RETURN (SELECT w.newest_child_updated_at FROM office._child_wave(child_generation.parent_task_id) AS w);

CREATE OR REPLACE FUNCTION office.is_task_terminal(task_id text) RETURNS boolean
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

CREATE OR REPLACE FUNCTION office._tasks_terminal_effects() RETURNS trigger
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

CREATE OR REPLACE FUNCTION office._task_blockers_acyclic() RETURNS trigger
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

-- The id rule, written once (office._is_id).
ALTER TABLE office.tasks
    DROP CONSTRAINT tasks_id_check,
    ADD CONSTRAINT tasks_id_check CHECK (office._is_id(id)),
    DROP CONSTRAINT tasks_workspace_id_check,
    ADD CONSTRAINT tasks_workspace_id_check CHECK (office._is_id(workspace_id));

-- (end of tasks)
-- === events (45_events.sql) ====================================================
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

CREATE OR REPLACE FUNCTION office._tasks_event_assigned() RETURNS trigger
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

CREATE OR REPLACE FUNCTION office.claim_events(consumer text, max_rows int DEFAULT 100,
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

-- (end of events)
-- === wakeups (50_wakeups.sql) ==================================================
CREATE OR REPLACE FUNCTION office.request_wakeup(agent_profile_id text, source text, reason text DEFAULT '',
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

CREATE OR REPLACE FUNCTION office.fail_wakeup(wakeup_request_id text, reason text) RETURNS boolean
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

-- 0.4.0: time-ordered request ids (existing rows keep theirs); dispatch_wakeup
-- signals as office.notify says.
ALTER TABLE office.wakeup_requests ALTER COLUMN id SET DEFAULT office._uuid_v7();
CREATE OR REPLACE FUNCTION office.dispatch_wakeup(wakeup_request_id text) RETURNS office.wakeup_dispatch_result
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
-- (end of wakeups)
-- === routines (55_routines.sql) ================================================
-- A new agent must not adopt the assignee of a routine of another workspace
-- (20_agents.sql).
CREATE INDEX idx_routines_assignee ON office.routines (assignee_agent_profile_id)
    WHERE assignee_agent_profile_id IS NOT NULL;

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

CREATE OR REPLACE FUNCTION office.create_routine(workspace_id text, name text, task_template jsonb DEFAULT '{}',
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

CREATE OR REPLACE FUNCTION office.add_routine_trigger(routine_id text, cron_expression text, timezone text DEFAULT 'UTC',
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

CREATE OR REPLACE FUNCTION office.claim_routine_tick(trigger_id text, observed_next_run_at timestamptz,
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

CREATE OR REPLACE FUNCTION office.dispatch_routine(routine_id text, source text, variables jsonb DEFAULT '{}',
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

-- 0.4.0: time-ordered routine run ids (existing rows keep theirs); generated
-- routine and trigger ids are time-ordered too.
ALTER TABLE office.routine_runs ALTER COLUMN id SET DEFAULT office._uuid_v7();
-- The id rule, written once (office._is_id).
ALTER TABLE office.routines
    DROP CONSTRAINT routines_id_check,
    ADD CONSTRAINT routines_id_check CHECK (office._is_id(id)),
    DROP CONSTRAINT routines_workspace_id_check,
    ADD CONSTRAINT routines_workspace_id_check CHECK (office._is_id(workspace_id));

ALTER TABLE office.routine_triggers
    DROP CONSTRAINT routine_triggers_id_check,
    ADD CONSTRAINT routine_triggers_id_check CHECK (office._is_id(id));

-- list_routine_runs (the dashboard's routine page): a routine's runs, newest
-- first, and the cascade when a routine is deleted (since 0.4.0).
CREATE INDEX idx_routine_runs_routine ON office.routine_runs (routine_id, id);

-- (end of routines)
-- === parent wakes (60_parent_wake.sql) =========================================
-- Poison never stops a loop (API.md Conventions): see 70_daemon.sql.
CREATE OR REPLACE FUNCTION office.list_stuck_parents(max_rows int DEFAULT 5, reason text DEFAULT 'task_children_completed')
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

CREATE OR REPLACE FUNCTION office.sweep_stuck_parents(max_rows int DEFAULT 5)
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
CREATE OR REPLACE FUNCTION office._tasks_parent_wake_mark() RETURNS trigger
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

CREATE OR REPLACE FUNCTION office._agents_parent_wake_mark() RETURNS trigger
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

CREATE OR REPLACE FUNCTION office._runs_parent_wake_mark() RETURNS trigger
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

CREATE OR REPLACE FUNCTION office.mark_all_parents() RETURNS bigint
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

CREATE OR REPLACE FUNCTION office.reconcile_parent(parent_task_id text, child_set_key text, newest_child_updated_at text)
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

-- The candidates read the wave from office._child_wave and the shared
-- state lists; the mark triggers test the shared lists.
CREATE OR REPLACE VIEW office._parent_wake_candidates AS
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

DROP TRIGGER tasks_70_parent_wake_mark_insert ON office.tasks;
CREATE TRIGGER tasks_70_parent_wake_mark_insert
    AFTER INSERT ON office.tasks
    FOR EACH ROW
    WHEN (NEW.parent_id IS NOT NULL AND NEW.archived_at IS NULL
          AND NEW.state = ANY (office._task_done_states()))
    EXECUTE FUNCTION office._tasks_parent_wake_mark();

DROP TRIGGER tasks_70_parent_wake_mark_update ON office.tasks;
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

DROP TRIGGER agent_profiles_70_parent_wake_mark_insert ON office.agent_profiles;
CREATE TRIGGER agent_profiles_70_parent_wake_mark_insert
    AFTER INSERT ON office.agent_profiles
    FOR EACH ROW
    WHEN (NEW.status <> ALL (office._statuses_refusing_runs()))
    EXECUTE FUNCTION office._agents_parent_wake_mark();

DROP TRIGGER agent_profiles_70_parent_wake_mark_update ON office.agent_profiles;
CREATE TRIGGER agent_profiles_70_parent_wake_mark_update
    AFTER UPDATE ON office.agent_profiles
    FOR EACH ROW
    WHEN (NEW.status <> ALL (office._statuses_refusing_runs())
          AND (OLD.status = ANY (office._statuses_refusing_runs()) OR OLD.id IS DISTINCT FROM NEW.id))
    EXECUTE FUNCTION office._agents_parent_wake_mark();

-- The reason only: the function tests the rest; only the columns it
-- compares (60_parent_wake.sql).
DROP TRIGGER runs_70_parent_wake_mark_update ON office.runs;
CREATE TRIGGER runs_70_parent_wake_mark_update
    AFTER UPDATE OF status, requested_at, task_id, reason ON office.runs
    FOR EACH ROW
    WHEN (OLD.reason = 'task_children_completed')
    EXECUTE FUNCTION office._runs_parent_wake_mark();

-- (end of parent-wake)
-- === daemon (70_daemon.sql) ====================================================
CREATE OR REPLACE FUNCTION office.due_routine_triggers(at timestamptz DEFAULT now(), max_rows int DEFAULT 100)
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

CREATE OR REPLACE FUNCTION office.fire_routine_tick(trigger_id text, observed_next_run_at timestamptz,
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

CREATE OR REPLACE FUNCTION office.dispatch_queued_wakeups(max_rows int DEFAULT 50, min_age interval DEFAULT '0 seconds')
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

-- daemon_stats returns the poison counts too: a new row type.
DROP FUNCTION office.daemon_stats();
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
-- === dashboard (85_dashboard.sql) ==============================================
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

-- (end of dashboard)
-- === native helpers (95_native.sql) ==========================================
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

-- === version ==================================================================

CREATE OR REPLACE FUNCTION office.schema_version() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '0.4.0';
