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

CREATE FUNCTION office.recover_stale_runs(older_than interval) RETURNS int
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
    -- A run its worker is finishing right now is locked: skip it. A run set
    -- aside (office.poison) is left where it is.
    BEGIN
        WITH stale AS (
            SELECT s.id FROM office.runs s
             WHERE s.status = 'claimed' AND s.claimed_at < now() - recover_stale_runs.older_than
               AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'recovery' AND q.row_id = s.id)
               FOR UPDATE SKIP LOCKED
        )
        UPDATE office.runs r
           SET status = 'queued', claimed_at = NULL, claimed_by = NULL
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
         WHERE s.status = 'claimed' AND s.claimed_at < now() - recover_stale_runs.older_than
           AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'recovery' AND q.row_id = s.id)
           FOR UPDATE SKIP LOCKED
    LOOP
        BEGIN
            UPDATE office.runs r SET status = 'queued', claimed_at = NULL, claimed_by = NULL WHERE r.id = v_id;
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
    'claimed for longer than older_than -> queued (claimed_at, claimed_by cleared; attempt kept, so the old worker is fenced). A run that cannot be requeued is set aside (office.poison, loop recovery) and the others are recovered. Returns the count.';
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
