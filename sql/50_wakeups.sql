-- office: wakeup requests (docs/api.md §4; docs/domain.md §1.5, §2.18).
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
    id               text PRIMARY KEY DEFAULT office._uuid_v7(),
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

-- Rows written without request_wakeup (the table owner's INSERT or UPDATE)
-- meet its bounds too, on what they write: a queued request's source and
-- reason become a run's, so they are short words (a failure writes its text
-- into reason, a free text); the payload is at most 1 MiB and 64 levels
-- deep. A value an UPDATE leaves as it was is not checked, so a request
-- stored before 0.5.0 can still be dispatched, failed or set aside.
CREATE FUNCTION office._wakeup_requests_bounded() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_insert boolean := TG_OP = 'INSERT';
BEGIN
    IF v_insert OR NEW.source IS DISTINCT FROM OLD.source THEN
        PERFORM office._check_short_text('source', NEW.source);
    END IF;
    IF v_insert OR NEW.reason IS DISTINCT FROM OLD.reason THEN
        IF NEW.status = 'queued' THEN
            PERFORM office._check_short_text('reason', NEW.reason);
        ELSE
            PERFORM office._check_free_text('reason', NEW.reason);
        END IF;
    END IF;
    IF v_insert OR NEW.payload IS DISTINCT FROM OLD.payload THEN
        IF octet_length(NEW.payload::text) > 1048576 THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('payload is %s bytes, more than 1 MiB (1048576 bytes)', octet_length(NEW.payload::text));
        END IF;
        PERFORM office._check_json_depth('payload', NEW.payload);
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._wakeup_requests_bounded() IS
    'Internal: BEFORE INSERT OR UPDATE trigger of office.wakeup_requests: request_wakeup''s bounds on what a row writes (a queued row''s source and reason short words, a payload at most 1 MiB and 64 levels deep), 22023 naming the value.';
REVOKE EXECUTE ON FUNCTION office._wakeup_requests_bounded() FROM PUBLIC;
CREATE TRIGGER wakeup_requests_05_bounded
    BEFORE INSERT OR UPDATE OF source, reason, payload ON office.wakeup_requests
    FOR EACH ROW EXECUTE FUNCTION office._wakeup_requests_bounded();

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
    PERFORM office._check_json_depth('payload', v_payload);
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
    'Records a queued wakeup request (NOTIFY office_wakeups unless office.notify = off) or, for a key already requested, (deduped, durable, <holder>) counted on queue wakeup. Empty agent or source, a source or reason over 200 characters or with a control character, a NULL or non-object payload, a payload over 1 MiB or nested more than 64 levels deep, a key over 512 characters 22023 (rows written directly are checked by a trigger too); unknown agent OFA01.';
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

CREATE FUNCTION office.fail_wakeup(wakeup_request_id text, reason text) RETURNS boolean
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
