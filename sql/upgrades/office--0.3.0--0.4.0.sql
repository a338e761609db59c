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

-- === agents (20_agents.sql) ====================================================
-- 0.4.0: a generated agent id is time-ordered (office._uuid_v7).
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
-- (end of agents)

-- === runs (25_counters.sql, 30_runs.sql) =======================================
-- 0.4.0: time-ordered run ids; leases (heartbeat_at); remembered keys; the
-- claim index that skips busy agents; counters in exclusive slots.
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

-- Internal: the advisory locks an enqueue request takes, NULL where it takes
-- none: its key's (a keyed request), then its bucket's (a coalescible one:
-- not entry-triggered, key not starting with task_comment:). Arguments as
-- enqueue_run normalises them ('' keys and tasks are NULL). PL/pgSQL, not
-- SQL: a SQL function with a SET clause is planned again at every call,
-- which the enqueue hot path would pay each time.
CREATE FUNCTION office._run_key_lock(idempotency_key text) RETURNS bigint
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE WHEN idempotency_key IS NOT NULL
                THEN hashtextextended('office.runs.key:' || idempotency_key, 0) END;
END
$$;
COMMENT ON FUNCTION office._run_key_lock(text) IS
    'Internal: the advisory lock id of an idempotency key (NULL for none), taken by every keyed enqueue before it looks the key up.';
REVOKE EXECUTE ON FUNCTION office._run_key_lock(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_key_lock(text) TO office_admin;

CREATE FUNCTION office._run_bucket_lock(agent_profile_id text, reason text, idempotency_key text,
                                        task_id text, entry_triggered boolean) RETURNS bigint
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE WHEN NOT coalesce(entry_triggered, false)
                     AND (idempotency_key IS NULL OR NOT starts_with(idempotency_key, 'task_comment:'))
                THEN hashtextextended('office.runs.bucket:' || agent_profile_id || ':' || reason || ':'
                                      || coalesce(task_id, ''), 0) END;
END
$$;
COMMENT ON FUNCTION office._run_bucket_lock(text, text, text, text, boolean) IS
    'Internal: the advisory lock id of an enqueue request''s bucket (agent, reason, task), NULL when the request never coalesces (entry-triggered, task_comment: key).';
REVOKE EXECUTE ON FUNCTION office._run_bucket_lock(text, text, text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_bucket_lock(text, text, text, text, boolean) TO office_admin;

-- Internal: the wake-up signal for a run just queued for an agent (API.md §3,
-- office.notify). NOTIFY takes a cluster-wide lock at commit and holds it
-- through the WAL flush, so notifying producers commit one at a time
-- (docs/benchmarks.md). 'edge' (the default) signals only when no worker is
-- already bound to come for the agent: it has no claimed run and no other
-- claimable queued run (a worker that finds work keeps claiming until it gets
-- nothing). 'every' (or 'on', the 0.3.0 spelling) signals every queued run;
-- 'off' never. The payload is the agent id.
CREATE FUNCTION office._signal_run(agent_profile_id text, run_id text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_mode text := coalesce(nullif(current_setting('office.notify', true), ''), 'edge');
BEGIN
    IF v_mode = 'edge' THEN
        IF EXISTS (SELECT FROM office.runs c
                    WHERE c.agent_profile_id = _signal_run.agent_profile_id AND c.status = 'claimed')
           OR EXISTS (SELECT FROM office.runs q
                       WHERE q.agent_profile_id = _signal_run.agent_profile_id AND q.status = 'queued'
                         AND q.id <> _signal_run.run_id
                         AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())) THEN
            RETURN;
        END IF;
    ELSIF v_mode NOT IN ('every', 'on') THEN
        IF v_mode = 'off' THEN
            RETURN;
        END IF;
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting office.notify = %s must be edge, every or off', quote_literal(left(v_mode, 200)));
    END IF;
    PERFORM pg_notify('office_runs', _signal_run.agent_profile_id);
END
$$;
COMMENT ON FUNCTION office._signal_run(text, text) IS
    'Internal: NOTIFY office_runs with the agent id for a run just queued, as office.notify says: edge (default: only when the agent has no claimed and no other claimable queued run), every (or on), off; another value 22023 naming the setting.';
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
    v_agent   text := enqueue_run.agent_profile_id;
    v_reason  text := enqueue_run.reason;
    v_payload jsonb := enqueue_run.payload;
    v_key     text := nullif(enqueue_run.idempotency_key, '');
    v_task    text := nullif(enqueue_run.task_id, '');
    v_entry   boolean := coalesce(enqueue_run.entry_triggered, false);
    v_cause   text := nullif(enqueue_run.keyless_cause, '');
    v_status  text;
    v_window  interval;
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
    PERFORM office._check_short_text('reason', v_reason);
    PERFORM office._check_short_text('task_id', v_task);
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
    v_key_lock := office._run_key_lock(v_key);
    v_bucket_lock := office._run_bucket_lock(v_agent, v_reason, v_key, v_task, v_entry);

    -- 2. A served key (own or recorded, any status, any age) is a dedup,
    -- before any coalescing. The key lock makes lookup-then-act atomic per
    -- key: a request that waited reads what the holder committed.
    IF v_key IS NOT NULL THEN
        PERFORM office._run_lock(v_key_lock, v_agent, v_reason, v_key);
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
        PERFORM office._run_lock(v_bucket_lock, v_agent, v_reason, NULL);
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
            PERFORM office._signal_run(v_agent, v_id);
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

CREATE OR REPLACE FUNCTION office.enqueue_runs(requests jsonb)
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
    v_lock   record;
BEGIN
    IF requests IS NULL OR jsonb_typeof(requests) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('enqueue_runs: requests must be a JSON array, not %s',
                             coalesce(jsonb_typeof(requests), 'NULL'));
    END IF;
    -- Every lock the elements will take, up front and in the global order
    -- (all key locks, then all bucket locks, each by ascending id), so two
    -- bulk calls never hold one lock each while waiting for the other's:
    -- the elements' own enqueue_run then finds its locks held. Elements
    -- are normalised as enqueue_run normalises its arguments; a malformed
    -- one fails in the loop below and its locks go with the transaction.
    FOR v_lock IN
        SELECT DISTINCT ON (k.cls, k.id) k.id, k.agent, k.reason, k.key
          FROM (SELECT x.agent, x.reason, x.key, office._run_key_lock(x.key) AS key_lock,
                       office._run_bucket_lock(x.agent, x.reason, x.key, x.task, x.entry) AS bucket_lock
                  FROM (SELECT e.value ->> 'agent_profile_id' AS agent, e.value ->> 'reason' AS reason,
                               nullif(e.value ->> 'idempotency_key', '') AS key,
                               nullif(e.value ->> 'task_id', '') AS task,
                               CASE WHEN jsonb_typeof(e.value -> 'entry_triggered') = 'boolean'
                                    THEN (e.value ->> 'entry_triggered')::boolean END AS entry
                          FROM jsonb_array_elements(requests) AS e(value)
                         WHERE jsonb_typeof(e.value) = 'object') AS x) AS r
         CROSS JOIN LATERAL (VALUES (0, r.key_lock, r.agent, r.reason, r.key),
                                    (1, r.bucket_lock, r.agent, r.reason, NULL)) AS k(cls, id, agent, reason, key)
         WHERE k.id IS NOT NULL
         ORDER BY k.cls, k.id
    LOOP
        PERFORM office._run_lock(v_lock.id, v_lock.agent, v_lock.reason, v_lock.key);
    END LOOP;
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
    'Bulk enqueue_run: an array of objects with enqueue_run''s parameter names, applied in order; one (ordinality, outcome, dedup_kind, run_id) per element. Takes every element''s locks up front in one global order, so bulk calls never deadlock each other. Any invalid element fails the whole call with its SQLSTATE and ordinality.';
REVOKE EXECUTE ON FUNCTION office.enqueue_runs(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_runs(jsonb) TO office_producer, office_admin;

CREATE OR REPLACE FUNCTION office.claim_run(worker_id text DEFAULT NULL, agent_profile_id text DEFAULT NULL)
    RETURNS SETOF office.runs
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_agent       text := nullif(claim_run.agent_profile_id, '');
    v_skip_agents text[] := '{}';
    v_skip_runs   text[] := '{}';
    v_cand_id     text;
    v_cand_agent  text;
    v_row         office.runs;
BEGIN
    PERFORM office._check_short_text('worker_id', claim_run.worker_id);
    -- One candidate at a time, oldest first. Without an agent, a loose scan
    -- of idx_run_agent_queued visits each agent that has queued runs once
    -- (one index descent per agent, not one row per queued run), keeps the
    -- agents that accept runs and hold no claim, and takes the oldest due run
    -- of each (a LIMIT 1 walk of the same index); the oldest of those is the
    -- candidate. So the cost follows the number of agents with a backlog, not
    -- the backlog of agents that already hold a claim.
    -- For each candidate: the agent's advisory lock, taken with pg_try_* (a
    -- claimer busy with this agent makes us skip it, never wait); then, in a
    -- statement of its own (READ COMMITTED: a snapshot taken after the lock),
    -- a look for a claimed run of the agent, which sees any claim committed
    -- before we got the lock; then the row itself with SKIP LOCKED. Every
    -- claimer holds the agent's lock until its transaction ends, so no claim
    -- can be in flight unseen: no 23505 on idx_run_one_claimed_per_agent,
    -- which stays as the backstop in the table.
    LOOP
        IF v_agent IS NULL THEN
            WITH RECURSIVE agents(agent) AS (
                (SELECT q.agent_profile_id FROM office.runs q
                  WHERE q.status = 'queued' ORDER BY q.agent_profile_id LIMIT 1)
                UNION ALL
                SELECT (SELECT q.agent_profile_id FROM office.runs q
                         WHERE q.status = 'queued' AND q.agent_profile_id > agents.agent
                         ORDER BY q.agent_profile_id LIMIT 1)
                  FROM agents WHERE agents.agent IS NOT NULL
            ),
            -- Materialized, so that busy and paused agents are dropped before
            -- any of their runs is read.
            free(agent) AS MATERIALIZED (
                SELECT agents.agent FROM agents
                 WHERE agents.agent IS NOT NULL AND agents.agent <> ALL (v_skip_agents)
                   AND NOT EXISTS (SELECT FROM office.runs x
                                    WHERE x.agent_profile_id = agents.agent AND x.status = 'claimed')
                   AND EXISTS (SELECT FROM office.agent_profiles p
                                WHERE p.id = agents.agent
                                  AND p.status NOT IN ('paused', 'stopped', 'pending_approval'))
            )
            SELECT c.id, c.agent_profile_id INTO v_cand_id, v_cand_agent
              FROM free
             CROSS JOIN LATERAL (SELECT q.id, q.agent_profile_id, q.requested_at
                                   FROM office.runs q
                                  WHERE q.status = 'queued' AND q.agent_profile_id = free.agent
                                    AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                                    AND q.id <> ALL (v_skip_runs)
                                  ORDER BY q.requested_at, q.id COLLATE "C"
                                  LIMIT 1) c
             ORDER BY c.requested_at, c.id COLLATE "C"
             LIMIT 1;
        ELSE
            -- One agent: its oldest due run, read in index order (never a
            -- sort of its backlog); nothing when it holds a claim or does not
            -- accept runs.
            SELECT q.id, q.agent_profile_id INTO v_cand_id, v_cand_agent
              FROM office.runs q
             WHERE q.status = 'queued' AND q.agent_profile_id = v_agent
               AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
               AND q.id <> ALL (v_skip_runs)
               AND NOT EXISTS (SELECT FROM office.runs x WHERE x.agent_profile_id = v_agent AND x.status = 'claimed')
               AND EXISTS (SELECT FROM office.agent_profiles p
                            WHERE p.id = v_agent AND p.status NOT IN ('paused', 'stopped', 'pending_approval'))
             ORDER BY q.requested_at, q.id COLLATE "C"
             LIMIT 1;
        END IF;
        EXIT WHEN NOT FOUND;

        IF NOT pg_try_advisory_xact_lock(hashtextextended('office.runs.claim:' || v_cand_agent, 0)) THEN
            EXIT WHEN v_agent IS NOT NULL;
            v_skip_agents := v_skip_agents || v_cand_agent;
            CONTINUE;
        END IF;
        IF EXISTS (SELECT FROM office.runs c WHERE c.agent_profile_id = v_cand_agent AND c.status = 'claimed') THEN
            EXIT WHEN v_agent IS NOT NULL;
            v_skip_agents := v_skip_agents || v_cand_agent;
            CONTINUE;
        END IF;
        UPDATE office.runs r
           SET status = 'claimed', claimed_at = now(), claimed_by = claim_run.worker_id,
               heartbeat_at = now(), attempt = r.attempt + 1
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
     WHERE r.id = heartbeat_run.run_id AND r.status = 'claimed' AND r.attempt = heartbeat_run.attempt;
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
     WHERE r.id = fail_run.run_id AND r.status = 'claimed' AND r.attempt = fail_run.attempt;
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
     WHERE r.id = retry_run.run_id AND r.status = 'claimed' AND r.attempt = retry_run.attempt;
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

CREATE OR REPLACE FUNCTION office.recover_stale_runs(older_than interval) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count int;
BEGIN
    PERFORM office._check_interval('older_than', recover_stale_runs.older_than);
    -- A lease lapses when the worker's last heartbeat (its claim, if it
    -- never sent one) is older than the limit. A run its worker is finishing
    -- or heart-beating right now is locked: skip it.
    WITH stale AS (
        SELECT s.id FROM office.runs s
         WHERE s.status = 'claimed'
           AND coalesce(s.heartbeat_at, s.claimed_at) < now() - recover_stale_runs.older_than
           FOR UPDATE SKIP LOCKED
    )
    UPDATE office.runs r
       SET status = 'queued', claimed_at = NULL, claimed_by = NULL, heartbeat_at = NULL
      FROM stale
     WHERE r.id = stale.id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.recover_stale_runs(interval) IS
    'A claimed run whose heartbeat_at (its claimed_at if it never sent one) is older than older_than -> queued (claimed_at, claimed_by, heartbeat_at cleared; attempt kept, so its next claim fences the lost worker). Returns the count.';
REVOKE EXECUTE ON FUNCTION office.recover_stale_runs(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.recover_stale_runs(interval) TO office_admin;

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
-- (end of runs)

-- === tasks (40_tasks.sql) ======================================================
-- 0.4.0: a generated task id is time-ordered (office._uuid_v7).
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
-- (end of tasks)

-- === events (45_events.sql) ====================================================
-- (end of events)

-- === wakeups (50_wakeups.sql) ==================================================
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
-- 0.4.0: time-ordered routine run ids (existing rows keep theirs); generated
-- routine and trigger ids are time-ordered too.
ALTER TABLE office.routine_runs ALTER COLUMN id SET DEFAULT office._uuid_v7();
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
-- (end of routines)

-- === parent wakes (60_parent_wake.sql) =========================================
-- (end of parent-wake)

-- === daemon (70_daemon.sql) ====================================================
-- (end of daemon)

-- === observability (80_observability.sql) ======================================
-- (end of observability)

-- === version ==================================================================

CREATE OR REPLACE FUNCTION office.schema_version() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '0.4.0';
