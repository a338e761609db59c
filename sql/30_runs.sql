-- office: the run queue (docs/api.md §3).
--
-- enqueue_run decides in a fixed order: validate -> served key -> coalesce ->
-- insert. Every suppression is an outcome, never an error:
--   * served key: a run already serves the key, as its own key or as one
--     recorded when a request with it coalesced into the run, in any status
--     and whatever its age -> ('deduped', 'windowed') when the run was
--     requested (the key recorded) within office.idempotency_window, else
--     ('deduped', 'durable');
--   * coalesce: a queued run of the same bucket (agent, reason, task_id)
--     requested within office.coalesce_window absorbs the request
--     -> ('coalesced', NULL); the incoming key is recorded as served by it
--     (office.run_keys_recorded), so its redelivery is a dedup, not a run;
--   * durable: the insert meets the unbounded unique index
--     idx_run_idempotency -> ('deduped', 'durable') (a backstop: the lookup
--     above has normally answered already).
-- Concurrency. A key is served by at most one run, ever: every keyed request
-- takes a transaction-scoped advisory lock on its key before it looks the key
-- up, so requests with one key run one at a time and a waiter (READ
-- COMMITTED: a fresh snapshot per statement) finds what the holder did. A
-- coalescible request then takes the advisory lock of its bucket before the
-- coalesce lookup, so two of them never both insert into one bucket. Locks
-- are always taken keys first, then buckets, each class in ascending lock id
-- (enqueue_runs takes all of its elements' locks up front in that order), so
-- no two enqueue calls deadlock; the counters never wait (25_counters.sql).
-- Advisory locks write no WAL and cost a lock-table entry each.
-- Claims are fenced by attempt, serialised per agent without blocking, and
-- kept alive by heartbeats (heartbeat_run); recover_stale_runs requeues a
-- claim whose heartbeat (or claim, if it never beat) is older than a limit.
--
-- Plans. A queue table is often empty when it is analyzed (a fresh install,
-- a drained queue after pruning). PL/pgSQL caches a generic plan per
-- statement, and against "0 rows" statistics that plan is a sequential scan,
-- kept by every long-lived session until the next analyze: each lookup then
-- reads the whole table, and enqueue slows down as the queue grows. Every
-- statement of the hot-path functions below is a keyed lookup that an index
-- serves, so they run with enable_seqscan = off (tests/sql/test_runs_plans.py).
-- The same statistics make a wrong index as cheap as the right one: every
-- index whose partial predicate the WHERE clause implies costs about the
-- same, and one that also yields the ORDER BY wins. A bucket's coalesce
-- lookup then walked idx_run_agent_queued (every queued run of the agent
-- in the window), and claim_run's fetch of a candidate by id scanned that
-- whole index instead of the primary key (and finish_run the claimed
-- runs' index, one entry per busy agent). Where such an index competes, a
-- statement compares status under COLLATE "C": the same test (equality is
-- bytewise under every deterministic collation), but no predicate
-- status = 'queued' is implied by it, so only the intended index can serve.
-- tests/sql/test_runs_plans.py checks that no scan of the hot path reads
-- more than a handful of entries when an agent has hundreds of queued runs.

CREATE TYPE office.enqueue_result AS (outcome text, dedup_kind text, run_id text);
COMMENT ON TYPE office.enqueue_result IS
    'Result of office.enqueue_run: outcome queued|deduped|coalesced, dedup_kind windowed|durable (deduped only), run_id the run created, matched or absorbing the request.';

-- The CHECK of office.runs, one function call: PostgreSQL reads a table's
-- CHECK expressions again from their stored text at every statement that
-- writes the table, so each CHECK is paid by every enqueue, claim and
-- finish. The column CHECKs this replaces (0.4.0) were 9 % of a fresh
-- enqueue's instructions and 11 % of a claim + finish cycle's, mostly that
-- reading; a call is a few nodes to read, and the function, compiled once a
-- session, does the same tests: 5 % and 6.5 % less (callgrind,
-- docs/benchmarks.md). The lineage columns (0.5.0) are tested here too and
-- not in a CHECK of their own, which cost a fresh enqueue about 6 us and a
-- cycle 10 us ("where the no-policy cost of 0.5.0 goes").
CREATE FUNCTION office._run_row_valid(status text, reason text, payload jsonb, idempotency_key text,
                                      origin text, chain_depth int, priority int)
    RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN status IN ('queued', 'claimed', 'finished', 'failed', 'cancelled')
       AND reason <> ''
       AND jsonb_typeof(payload) = 'object'
       AND (idempotency_key IS NULL OR (idempotency_key <> '' AND length(idempotency_key) <= 512))
       AND origin IN ('human', 'agent', 'system')
       AND chain_depth >= 0
       AND priority BETWEEN -100 AND 100;
END
$$;
COMMENT ON FUNCTION office._run_row_valid(text, text, jsonb, text, text, int, int) IS
    'Internal: the CHECK of office.runs: a known status, a non-empty reason, an object payload, an idempotency_key that is NULL or 1 to 512 characters, origin human, agent or system, chain_depth at least 0, priority -100 to 100.';
REVOKE EXECUTE ON FUNCTION office._run_row_valid(text, text, jsonb, text, text, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_row_valid(text, text, jsonb, text, text, int, int) TO office_admin;

-- entry_triggered (0.2.0), heartbeat_at (0.4.0) and the lineage columns
-- origin ... cost (0.5.0, docs/api.md §9) come last on purpose:
-- ALTER TABLE ... ADD COLUMN appends, and a fresh install must have the same
-- column order as an upgraded one.
CREATE TABLE office.runs (
    id                 text PRIMARY KEY DEFAULT office._uuid_v7(),
    agent_profile_id   text NOT NULL,
    reason             text NOT NULL,
    payload            jsonb NOT NULL DEFAULT '{}',
    status             text NOT NULL DEFAULT 'queued',
    coalesced_count    int NOT NULL DEFAULT 1,
    idempotency_key    text,
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
    entry_triggered    boolean NOT NULL DEFAULT false,
    heartbeat_at       timestamptz,
    origin             text NOT NULL DEFAULT 'system',
    cause_run_id       text,
    chain_depth        int NOT NULL DEFAULT 0,
    priority           int NOT NULL DEFAULT 0,
    cost               numeric NOT NULL DEFAULT 0,
    CONSTRAINT runs_row_check CHECK (office._run_row_valid(status, reason, payload, idempotency_key,
                                                           origin, chain_depth, priority))
);
SELECT pg_catalog.pg_extension_config_dump('office.runs', '');
REVOKE ALL ON TABLE office.runs FROM PUBLIC;
COMMENT ON TABLE office.runs IS
    'The run queue: queued -> claimed -> finished|failed|cancelled (claimed -> queued on retry or recovery).';
COMMENT ON COLUMN office.runs.entry_triggered IS
    'True when a step-entry action enqueued the run: it never coalesces into another run and is never a coalesce target (since 0.2.0).';
COMMENT ON COLUMN office.runs.heartbeat_at IS
    'When the worker holding the claim last proved it is alive (claim_run, heartbeat_run); recover_stale_runs reads it (since 0.4.0).';
COMMENT ON COLUMN office.runs.origin IS
    'Who caused the run: human, agent or system (docs/api.md §9; system for runs from before 0.5.0).';
COMMENT ON COLUMN office.runs.cause_run_id IS
    'The run during which the causing actor acted, as the producer named it (NULL: none).';
COMMENT ON COLUMN office.runs.chain_depth IS
    'How many agent-caused runs lead to this one: 0 for human and system, else 1 + the cause''s depth (the loop guard reads it, office.max_chain_depth).';
COMMENT ON COLUMN office.runs.priority IS
    'The run''s priority, -100 to 100 (default 0).';
COMMENT ON COLUMN office.runs.cost IS
    'The cost recorded for the run (record_run_cost).';

-- The durable dedup: one row per key, over every status, with no time bound.
CREATE UNIQUE INDEX idx_run_idempotency ON office.runs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Coalesce-target lookup (newest queued run of a bucket) of a request without
-- a task; one with a task is served by idx_run_task_reason (below). Until
-- 0.4.0 this index held every queued run, (agent, reason, task_id,
-- requested_at DESC), and a run with a task had an entry here and another in
-- idx_run_task_reason: now each run has one of the two (a run's index
-- entries are most of the WAL and of the time of its insert, see
-- docs/benchmarks.md). Its predicate compares status under "C", as the
-- lookup does, so that the lookup implies it and not idx_run_agent_queued's
-- ("Plans" above).
CREATE INDEX idx_run_bucket_queued ON office.runs (agent_profile_id, reason, requested_at DESC)
    WHERE status COLLATE "C" = 'queued' AND task_id IS NULL;
-- claim_run: one agent's oldest queued run (ties by id, bytewise), and the
-- loose scan over the agents that have queued runs (an unfiltered claim
-- visits each such agent once, however long its backlog). It replaced
-- 0.3.0's idx_run_queued (requested_at, id) in 0.4.0: walking that one in
-- time order read every queued run of agents that already hold a claim.
CREATE INDEX idx_run_agent_queued ON office.runs (agent_profile_id, requested_at, id COLLATE "C")
    WHERE status = 'queued';
-- At most one claimed run per agent, ever; also serves the per-agent claimed
-- check of claim_run and the scan of recover_stale_runs (claimed runs are few).
CREATE UNIQUE INDEX idx_run_one_claimed_per_agent ON office.runs (agent_profile_id)
    WHERE status = 'claimed';
-- prune_runs.
CREATE INDEX idx_run_finished ON office.runs (finished_at)
    WHERE status IN ('finished', 'failed', 'cancelled');
-- Runs of one task and reason: the runs evidence of a stuck-parent candidate
-- (docs/domain.md §2.20 rule 8, 60_parent_wake.sql), a task's runs (list_runs), and
-- (with the agent and requested_at, since 0.4.0) the coalesce-target lookup of
-- a request with a task: the bucket's runs within the window, of which the
-- queued one is the target. Over every status, so that lookup also passes the
-- bucket's claimed and finished runs of the window; a bucket gets a new run
-- only when no queued one is there to coalesce into, so they are few. Only
-- runs that name a task are indexed.
CREATE INDEX idx_run_task_reason ON office.runs (task_id, reason, agent_profile_id, requested_at)
    WHERE task_id IS NOT NULL;

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

-- Rows written without the enqueue functions (the table owner's INSERT or
-- UPDATE) meet their bounds on payload and context_snapshot too
-- (05_validation.sql). Not in the CHECK: a CHECK is evaluated on every
-- update of the row, so a run stored deep before 0.5.0 could then no longer
-- be claimed, failed or recovered; a value is checked only when it is
-- written. An inserted row is checked by the readiness trigger
-- (office._ready_agents, below), which every insert fires anyway: a trigger
-- of its own, even one whose WHEN clause skips the everyday payload, cost a
-- fresh enqueue about 6 us, the WHEN read again from its stored text at
-- every statement. An update is checked by this trigger, which a claim or a
-- finish does not fire (they set neither column). Its WHEN skips the
-- everyday payload: a value of at most 512 bytes cannot nest 65 deep
-- (sql/native/validation.c says why), nor reach 1 MiB. (pg_column_size is
-- the stored size: a value copied from another stored row can still be
-- compressed, and so pass unchecked.)
CREATE TRIGGER runs_05_bounded
    BEFORE UPDATE OF payload, context_snapshot ON office.runs
    FOR EACH ROW
    WHEN (pg_catalog.pg_column_size(NEW.payload) > 512 OR pg_catalog.pg_column_size(NEW.context_snapshot) > 512)
    EXECUTE FUNCTION office._stored_json_bounded('payload', 'context_snapshot');

-- --- readiness: which agents claim_run() looks at (since 0.4.0) -------------
--
-- An unfiltered claim_run() finding its candidates in the runs index would
-- loose-scan every agent with queued runs, busy ones included, so its cost
-- would follow the number of agents with a backlog. office.agent_ready
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
        -- Any run inserted: its documents' bounds (runs_05_bounded says why
        -- here). A value of at most 512 bytes cannot fail them; NEW is the
        -- stored row, whose values may be compressed, so those are checked
        -- whatever their stored size.
        IF pg_column_size(NEW.payload) > 512 OR pg_column_compression(NEW.payload) IS NOT NULL
           OR pg_column_size(NEW.context_snapshot) > 512 OR pg_column_compression(NEW.context_snapshot) IS NOT NULL THEN
            PERFORM office._check_stored_json('runs.payload', NEW.payload),
                    office._check_stored_json('runs.context_snapshot', NEW.context_snapshot);
        END IF;
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
    'Trigger: bounds the payload and context_snapshot of a run inserted (1 MiB and 4 KiB as text, 64 levels deep, else 22023 naming runs.column); lists in office.agent_ready the agent of a run inserted queued, of a run queued again or of a claim that ended (when it has queued runs), and an agent that starts accepting runs (when it has queued runs); under its readiness lock, shared, never waiting.';
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
-- Internal: the removal side of the readiness lock above, shared by every
-- claimer that changes readiness rows (office._unready_agents here,
-- office._hold_agents of 34_wake_holds.sql): of these agents, those whose
-- lock it gets at once, exclusive, kept to the end of the transaction; NULL
-- for none, and always NULL outside READ COMMITTED (a stricter snapshot may
-- be older than the lock).
CREATE FUNCTION office._lock_readiness(agents text[]) RETURNS text[]
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked text[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(a.agent) INTO v_locked
      FROM unnest(_lock_readiness.agents) AS a (agent)
     WHERE pg_try_advisory_xact_lock(hashtextextended('office.runs.ready:' || a.agent, 0));
    RETURN v_locked;
END
$$;
COMMENT ON FUNCTION office._lock_readiness(text[]) IS
    'Internal (claim_run): the agents, of these, whose readiness lock this transaction gets at once, exclusive (NULL for none, and outside READ COMMITTED).';
REVOKE EXECUTE ON FUNCTION office._lock_readiness(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._lock_readiness(text[]) TO office_admin;

-- Generic plans, always: against the array of agents the planner's custom
-- plan (one agent, from the array's value) always looked cheaper than the
-- generic one (a set of unknown size), so PL/pgSQL planned both statements
-- again at every call, about 0.4 ms each, most of a claim's time
-- (pg_stat_statements, docs/benchmarks.md). The generic plan is the same
-- lateral probes per agent.
CREATE FUNCTION office._unready_agents(agents text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked text[] := office._lock_readiness(_unready_agents.agents);
BEGIN
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
-- not office._never_coalesces). Arguments as
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
        bucket_locks[i] := CASE WHEN NOT office._never_coalesces(idempotency_keys[i], entry_triggereds[i])
                                THEN hashtextextended('office.runs.bucket:' || agent_profile_ids[i] || ':'
                                                      || reasons[i] || ':' || coalesce(task_ids[i], ''), 0) END;
    END LOOP;
END
$$;
COMMENT ON FUNCTION office._run_locks(text[], text[], text[], text[], boolean[]) IS
    'Internal: the advisory lock ids of enqueue requests (parallel arrays of agent, reason, key, task, entry_triggered): key_locks, taken by every keyed request before it looks its key up (NULL without a key), and bucket_locks (agent, reason, task; NULL when the request never coalesces: office._never_coalesces).';
REVOKE EXECUTE ON FUNCTION office._run_locks(text[], text[], text[], text[], boolean[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_locks(text[], text[], text[], text[], boolean[]) TO office_admin;

-- Internal: the wake-up signal for runs just queued (docs/api.md §3,
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

-- Internal: a key has two homes, two unique indexes: runs.idempotency_key
-- (a run's own key) and run_keys_recorded (a key a coalesce recorded), and
-- an enqueue writes one of them. Under READ COMMITTED the key lock and the
-- statement snapshot taken after it see whatever the other home holds. The
-- snapshot of a REPEATABLE READ or SERIALIZABLE transaction is older: a
-- holder that committed after it began is invisible to the lookup, and a
-- write to the other home meets no conflict, so the key would be served
-- twice. This checks the write against the other home with INSERT ... ON
-- CONFLICT DO NOTHING, which raises 40001 when the row it conflicts with is
-- one the snapshot cannot see, and undoes the probe when there is none. A
-- key recorded on run_id (recorded): the record is written that way, and a
-- probe run with the key is inserted in a subtransaction rolled back on
-- purpose (OFZ99 never leaves this function). A run's own key: the key is
-- recorded on its run and the record deleted. A visible conflict (a writer
-- that bypassed enqueue_run) is 40001 too: retried, the request is deduped.
CREATE FUNCTION office._serve_key_in_snapshot(idempotency_key text, run_id text, agent_profile_id text,
                                              reason text, recorded boolean) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_written boolean;
BEGIN
    INSERT INTO office.run_keys_recorded (idempotency_key, run_id) VALUES ($1, $2)
    ON CONFLICT (idempotency_key) DO NOTHING;
    v_written := FOUND;
    IF v_written AND recorded THEN
        BEGIN
            INSERT INTO office.runs (agent_profile_id, reason, idempotency_key) VALUES ($3, $4, $1)
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
            v_written := FOUND;
            RAISE EXCEPTION USING ERRCODE = 'OFZ99';
        EXCEPTION WHEN SQLSTATE 'OFZ99' THEN
            NULL;
        END;
    ELSIF v_written THEN
        DELETE FROM office.run_keys_recorded k WHERE k.idempotency_key = $1 AND k.run_id = $2;
    END IF;
    IF NOT v_written THEN
        RAISE EXCEPTION USING ERRCODE = '40001',
            MESSAGE = format('idempotency_key %s was served by a concurrent transaction: retry the transaction',
                             quote_literal($1));
    END IF;
END
$$;
COMMENT ON FUNCTION office._serve_key_in_snapshot(text, text, text, text, boolean) IS
    'Internal (outside READ COMMITTED): checks a key enqueue_run serves on run_id against the index it does not write (recorded: the key is recorded on run_id, and no run may hold it; else run_id holds it and no record may): a holder the snapshot cannot see, or any other holder, is 40001 (retry).';
REVOKE EXECUTE ON FUNCTION office._serve_key_in_snapshot(text, text, text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._serve_key_in_snapshot(text, text, text, text, boolean) TO office_admin;

CREATE FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb DEFAULT '{}',
                                   idempotency_key text DEFAULT NULL, task_id text DEFAULT NULL,
                                   entry_triggered boolean DEFAULT false,
                                   keyless_cause text DEFAULT NULL, keyless_detail text DEFAULT NULL,
                                   origin text DEFAULT NULL, cause_run_id text DEFAULT NULL,
                                   priority int DEFAULT 0, not_before timestamptz DEFAULT NULL)
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
    v_origin  text := $9;
    v_cause_run text := nullif($10, '');
    v_priority  int := coalesce($11, 0);
    v_due     timestamptz := $12;
    v_depth   int;
    v_max_depth int;
    v_workspace text;
    v_status  text;
    v_window  interval;
    v_locks   record;
    v_key_lock    bigint;
    v_bucket_lock bigint;
    v_locked  boolean;
    v_id      text;
    v_at      timestamptz;
    v_hold    text;
    v_newest  text;
    v_target  record;
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
    v_payload := office._check_json_depth('payload', v_payload);
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
    -- Lineage and scheduling (docs/api.md §9): origin NULL is agent when a
    -- cause is named, else system.
    v_cause_run := office._check_short_text('cause_run_id', v_cause_run);
    IF v_origin IS NULL THEN
        v_origin := CASE WHEN v_cause_run IS NOT NULL THEN 'agent' ELSE 'system' END;
    ELSIF v_origin NOT IN ('human', 'agent', 'system') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown origin %s (expected human, agent or system)', quote_literal(left(v_origin, 200)));
    END IF;
    IF v_priority < -100 OR v_priority > 100 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('priority %s is outside -100 to 100', v_priority);
    END IF;
    -- A time in the past means now.
    v_due := greatest(office._check_timestamp('not_before', v_due), now());
    SELECT a.status, a.workspace_id INTO v_status, v_workspace FROM office.agent_profiles a WHERE a.id = v_agent;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01', MESSAGE = format('agent %s not found', quote_literal(v_agent));
    END IF;
    IF v_status = ANY (office._statuses_refusing_runs()) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA02',
            MESSAGE = format('agent %s is %s and does not accept runs', quote_literal(v_agent), v_status);
    END IF;
    v_depth := office._chain_depth(v_workspace, v_origin, v_cause_run, true);
    -- The guard's setting is read on every call of origin agent, so a bad
    -- value fails the first such call, not the first deep one.
    IF v_origin = 'agent' THEN
        v_max_depth := office._max_chain_depth();
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
    -- key: a request that waited reads what the holder committed. A key
    -- another transaction holds is looked up once before waiting: one a
    -- committed run serves is answered at once, so an open transaction
    -- holding the key cannot stall its redeliveries. The window is read on
    -- every keyed call, so a bad setting fails the first one, not the first
    -- duplicate. (The lock is tried first: _run_lock, a function call, only
    -- when another transaction holds it.)
    IF v_key IS NOT NULL THEN
        v_window := office._window('office.idempotency_window', interval '24 hours');
        v_locked := pg_try_advisory_xact_lock(v_key_lock);
        LOOP
            SELECT r.id, r.requested_at INTO v_id, v_at FROM office.runs r WHERE r.idempotency_key = v_key;
            IF v_id IS NULL THEN
                SELECT k.run_id, k.recorded_at INTO v_id, v_at
                  FROM office.run_keys_recorded k WHERE k.idempotency_key = v_key;
            END IF;
            IF v_id IS NOT NULL THEN
                v_result := ('deduped', CASE WHEN v_at > now() - v_window THEN 'windowed' ELSE 'durable' END, v_id);
                PERFORM office._count_dedup('runs', v_reason, v_result.dedup_kind);
                RETURN v_result;
            END IF;
            EXIT WHEN v_locked;
            PERFORM office._run_lock(v_key_lock, v_agent, v_reason, v_key);
            v_locked := true;
        END LOOP;
    END IF;

    -- 2a. The loop guard: an agent-caused request deeper than
    -- office.max_chain_depth is not enqueued. It records no key (so a
    -- redelivery is judged again, by the chain as it is then), and is
    -- counted and written down instead.
    IF v_max_depth > 0 AND v_depth > v_max_depth THEN
        PERFORM office._count_dedup('runs', v_reason, 'guarded');
        PERFORM office._write_wake_decision(v_agent, NULL, 'guarded', v_origin, v_cause_run, v_depth,
                                            jsonb_build_object('reason', v_reason, 'task_id', v_task,
                                                               'idempotency_key', v_key,
                                                               'max_chain_depth', v_max_depth));
        v_result := ('guarded', NULL, NULL);
        RETURN v_result;
    END IF;

    -- 3. Coalesce, unless the request is entry-triggered or comment-keyed.
    IF v_bucket_lock IS NOT NULL THEN
        -- One coalescible enqueue per bucket at a time: the lookup below and
        -- the insert of step 4 are a check-then-act.
        IF NOT pg_try_advisory_xact_lock(v_bucket_lock) THEN
            PERFORM office._run_lock(v_bucket_lock, v_agent, v_reason, NULL);
        END IF;
        v_window := office._window('office.coalesce_window', interval '5 seconds');
        -- What holds the agent's runs now (34_wake_holds.sql): a target it
        -- holds is waiting, a target whatever its age (docs/api.md §9).
        IF EXISTS (SELECT FROM office.wake_policies p
                    WHERE p.budget IS NOT NULL OR p.cooldown IS NOT NULL OR p.max_runs IS NOT NULL) THEN
            SELECT g.held_by INTO v_hold FROM office._agent_hold(v_agent, v_workspace, false) g;
        END IF;
        -- The target is the bucket's newest queued run that may absorb (not
        -- entry-triggered, not comment-keyed), read without a lock; it
        -- absorbs the request if it was requested within the window or is
        -- waiting (its scheduled_retry_at ahead, or a hold for its origin).
        -- Only an eligible target is locked, and one being claimed right now
        -- is skipped (SKIP LOCKED): claimers never wait for us.
        IF v_task IS NULL THEN
            SELECT n.id INTO v_newest
              FROM office.runs n
             WHERE n.agent_profile_id = v_agent AND n.reason = v_reason AND n.task_id IS NULL
               AND n.status COLLATE "C" = 'queued'
               AND NOT office._never_coalesces(n.idempotency_key, n.entry_triggered)
             ORDER BY n.requested_at DESC, n.id COLLATE "C" DESC
             LIMIT 1;
        ELSE
            -- Only idx_run_task_reason serves it: status compared under "C"
            -- (sql/30_runs.sql, "Plans").
            SELECT n.id INTO v_newest
              FROM office.runs n
             WHERE n.agent_profile_id = v_agent AND n.reason = v_reason AND n.task_id = v_task
               AND n.status COLLATE "C" = 'queued'
               AND NOT office._never_coalesces(n.idempotency_key, n.entry_triggered)
             ORDER BY n.requested_at DESC, n.id COLLATE "C" DESC
             LIMIT 1;
        END IF;
        IF v_newest IS NOT NULL THEN
            -- By its primary key only: status compared under "C".
            SELECT t.id,
                   t.scheduled_retry_at > now()
                   OR (v_hold IS NOT NULL AND v_hold <> 'budget' AND t.origin <> 'human') AS waiting
              INTO v_target
              FROM office.runs t
             WHERE t.id = v_newest AND t.status COLLATE "C" = 'queued'
               AND (t.requested_at > now() - v_window OR t.scheduled_retry_at > now()
                    OR (v_hold IS NOT NULL AND (v_hold = 'budget' OR t.origin <> 'human')))
               FOR UPDATE SKIP LOCKED;
            IF FOUND THEN
                -- The merge (docs/api.md §9): the higher priority; an agent
                -- request's deeper chain (a system target becomes agent); a
                -- human request makes the target human and, if it was
                -- waiting, due now (a budget still holds it).
                UPDATE office.runs r
                   SET coalesced_count = r.coalesced_count + 1, payload = v_payload,
                       priority = greatest(r.priority, v_priority),
                       origin = CASE WHEN v_origin = 'human' THEN 'human'
                                     WHEN v_origin = 'agent' AND r.origin = 'system' THEN 'agent'
                                     ELSE r.origin END,
                       chain_depth = CASE WHEN v_origin = 'human' THEN 0
                                          WHEN v_origin = 'agent' THEN greatest(r.chain_depth, v_depth)
                                          ELSE r.chain_depth END,
                       cause_run_id = CASE WHEN v_origin = 'human' THEN NULL
                                           WHEN v_origin = 'agent' AND v_depth > r.chain_depth THEN v_cause_run
                                           ELSE r.cause_run_id END,
                       scheduled_retry_at = CASE WHEN v_origin = 'human' AND v_target.waiting THEN now()
                                                 ELSE r.scheduled_retry_at END
                 WHERE r.id = v_target.id;
                v_id := v_target.id;
                IF v_origin = 'human' AND v_target.waiting THEN
                    PERFORM office._write_wake_decision(v_agent, v_id, 'pulled_forward', 'human', NULL, 0,
                                                        jsonb_build_object('reason', v_reason));
                END IF;
            END IF;
        END IF;
        IF v_id IS NOT NULL THEN
            -- The target serves the incoming key from now on.
            IF v_key IS NOT NULL THEN
                IF current_setting('transaction_isolation') = 'read committed' THEN
                    INSERT INTO office.run_keys_recorded (idempotency_key, run_id) VALUES (v_key, v_id);
                ELSE
                    PERFORM office._serve_key_in_snapshot(v_key, v_id, v_agent, v_reason, true);
                END IF;
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
        INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id, entry_triggered,
                                 origin, cause_run_id, chain_depth, priority, scheduled_retry_at)
        VALUES (v_agent, v_reason, v_payload, v_key, v_task, v_entry,
                v_origin, v_cause_run, v_depth, v_priority, CASE WHEN v_due > now() THEN v_due END)
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            IF v_key IS NOT NULL AND current_setting('transaction_isolation') <> 'read committed' THEN
                PERFORM office._serve_key_in_snapshot(v_key, v_id, v_agent, v_reason, false);
            END IF;
            -- A run that is not claimable yet wakes no worker (its agent's
            -- readiness row says when it is due).
            IF v_due <= now() THEN
                PERFORM office._signal_runs(ARRAY[v_agent], ARRAY[v_id]);
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
COMMENT ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz) IS
    'Enqueues a run: a key already served (own or recorded by a coalesce) -> deduped windowed|durable; else coalesce (the key is recorded on the target); else insert. An agent-caused request deeper than office.max_chain_depth -> guarded (no key recorded, no run; counted and written to wake_decisions). Returns (outcome queued|deduped|coalesced|guarded, dedup_kind windowed|durable, run_id); on queued the wake-up signal of office.notify (NOTIFY office_runs, the agent id) unless not_before delays the run. Bad input 22023, unknown agent OFA01, agent not accepting runs OFA02, a cause_run_id of another workspace OFW01.';
REVOKE EXECUTE ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_run(text, text, jsonb, text, text, boolean, text, text, text, text, int, timestamptz)
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
CREATE FUNCTION office.enqueue_runs(requests jsonb)
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
    v_keyed   boolean;
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
    v_not_before timestamptz;
BEGIN
    IF requests IS NULL OR jsonb_typeof(requests) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('enqueue_runs: requests must be a JSON array, not %s',
                             coalesce(jsonb_typeof(requests), 'NULL'));
    END IF;
    IF jsonb_array_length(requests) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('enqueue_runs: %s requests, more than 10,000 in one call', jsonb_array_length(requests));
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
                       -- an element naming an origin, cause, priority or not_before
                       -- (docs/api.md §9) goes through enqueue_run one by one
                       AND NOT (y.value ?| ARRAY['origin', 'cause_run_id', 'priority', 'not_before'])
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
                       AND office._json_depth_ok(y.payload)
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
    -- Keyed elements outside READ COMMITTED go one by one: enqueue_run
    -- checks each key against what the snapshot cannot see
    -- (_serve_key_in_snapshot), which the set-based insert does not.
    v_keyed := EXISTS (SELECT FROM unnest(v_keys) AS k WHERE k IS NOT NULL);
    v_fast := v_valid AND coalesce(current_setting('office.notify', true), '') IN ('', 'edge', 'every', 'on', 'off')
              AND (current_setting('transaction_isolation') = 'read committed' OR NOT v_keyed);
    IF v_fast AND v_keyed THEN
        BEGIN
            v_window := office._window('office.idempotency_window', interval '24 hours');
        EXCEPTION WHEN OTHERS THEN
            v_fast := false;  -- the first keyed element reports it below
        END;
    END IF;
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
           -- A waiting run (scheduled_retry_at set) in a coalescible element's
           -- bucket, or a policy that can hold a run, may make an older run a
           -- target (docs/api.md §9): leave it to enqueue_run too.
           AND NOT EXISTS (SELECT FROM office.wake_policies p
                            WHERE p.budget IS NOT NULL OR p.cooldown IS NOT NULL OR p.max_runs IS NOT NULL)
           AND NOT EXISTS (SELECT FROM unnest(v_agents, v_reasons, v_bucket_locks) AS u(agent, reason, lock)
                             JOIN LATERAL (SELECT true AS waiting FROM office.runs w
                                            WHERE w.agent_profile_id = u.agent AND w.reason = u.reason
                                              AND w.status = 'queued' AND w.scheduled_retry_at IS NOT NULL
                                            LIMIT 1) AS w ON true
                            WHERE u.lock IS NOT NULL)
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
                             'entry_triggered', 'keyless_cause', 'keyless_detail',
                             'origin', 'cause_run_id', 'priority', 'not_before')
             ORDER BY k LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('unknown key %s', quote_literal(v_bad));
            END IF;
            SELECT f.key INTO v_bad FROM jsonb_each(v_elem) AS f
             WHERE f.key NOT IN ('payload', 'entry_triggered', 'priority')
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
            IF jsonb_typeof(v_elem -> 'priority') NOT IN ('number', 'null')
               OR (jsonb_typeof(v_elem -> 'priority') = 'number'
                   AND ((v_elem ->> 'priority')::numeric NOT BETWEEN -100 AND 100
                        OR (v_elem ->> 'priority')::numeric <> trunc((v_elem ->> 'priority')::numeric))) THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('priority must be a JSON integer from -100 to 100, not %s',
                                     left((v_elem -> 'priority')::text, 40));
            END IF;
            BEGIN
                v_not_before := (v_elem ->> 'not_before')::timestamptz;
            EXCEPTION WHEN data_exception THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('not_before must be a timestamptz, not %s',
                                     quote_literal(left(v_elem ->> 'not_before', 80)));
            END;
            v_res := office.enqueue_run(
                agent_profile_id => v_elem ->> 'agent_profile_id',
                reason           => v_elem ->> 'reason',
                payload          => CASE WHEN v_elem ? 'payload' THEN v_elem -> 'payload' ELSE '{}'::jsonb END,
                idempotency_key  => v_elem ->> 'idempotency_key',
                task_id          => v_elem ->> 'task_id',
                entry_triggered  => coalesce((v_elem ->> 'entry_triggered')::boolean, false),
                keyless_cause    => v_elem ->> 'keyless_cause',
                keyless_detail   => v_elem ->> 'keyless_detail',
                origin           => v_elem ->> 'origin',
                cause_run_id     => v_elem ->> 'cause_run_id',
                priority         => coalesce((v_elem ->> 'priority')::numeric::int, 0),
                not_before       => v_not_before);
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

-- enable_bitmapscan = off as well: office.agent_ready is small and churns
-- (a row deleted per claim, inserted per claim end), and against its
-- statistics a bitmap scan plus a sort looks cheaper than walking
-- idx_agent_ready_head in order; but a bitmap scan visits every dead entry
-- again on every call, where an index scan marks them dead once.
CREATE FUNCTION office.claim_run(worker_id text DEFAULT NULL, agent_profile_id text DEFAULT NULL)
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
    v_held        text[];
    v_hold        text;
    -- A call that has skipped this many agents (their rows removed or
    -- delayed, one readiness lock each, kept to the end of the transaction)
    -- without finding a run answers none; the next call goes on from there,
    -- since the rows it removed are gone. This bounds a call's time and the
    -- locks it takes: ten thousand busy agents listed at once overflowed the
    -- lock table (max_locks_per_transaction) of a small server in one call,
    -- and every call after failed the same way. sql/native/claim.c has it
    -- as OFFICE_CLAIM_SKIP_BOUND (tools/native_constants.py).
    v_skip_bound  constant int := 1000;
    -- Whether any policy can hold a run (34_wake_holds.sql): with none, one
    -- probe of the empty partial index idx_wake_policies_holds.
    v_governed    boolean := EXISTS (SELECT FROM office.wake_policies p
                                      WHERE p.budget IS NOT NULL OR p.cooldown IS NOT NULL OR p.max_runs IS NOT NULL);
    -- Whether any queued run has a priority other than 0: with none, one
    -- probe of the empty partial index idx_run_queued_priority, and the claim
    -- order is the due time alone.
    v_prioritized boolean := EXISTS (SELECT FROM office.runs p WHERE p.status = 'queued' AND p.priority <> 0);
    -- Unfiltered and prioritized, three passes in claim order: 1 the runs of
    -- priority above 0, 2 those of priority 0 (the readiness list), 3 those
    -- below 0.
    v_pass        int := CASE WHEN v_prioritized THEN 1 ELSE 2 END;
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
    -- Policy holds (docs/api.md §9, 34_wake_holds.sql): of an agent that a
    -- reached budget holds no run is a candidate, and of one that a cooldown
    -- or run cap holds only a human run. An agent held with no candidate is
    -- not stale but held: _hold_agents delays its rows to the hold's end, so
    -- later claims do not look at it again before, as for a busy agent. The
    -- hold is decided again after the agent's claim lock, in a statement of
    -- its own, so two claimers at the moment a hold ends see each other's
    -- claim; and a claim under a run cap is logged (_log_claim).
    -- Priority (docs/api.md §9): passes 1 and 3 walk the prioritized due runs
    -- in claim order (idx_run_queued_priority, which holds only those),
    -- skipping those of busy and refusing agents; pass 2 is the readiness
    -- walk below, over runs of priority 0. A claimer busy with the agent of a
    -- prioritized run makes the others go on to the next run, as below.
    <<scan>>
    LOOP
        IF v_agent IS NULL AND v_pass <> 2 THEN
            SELECT array_agg(c.id ORDER BY c.priority DESC, c.requested_at, c.id COLLATE "C"),
                   array_agg(c.agent_profile_id ORDER BY c.priority DESC, c.requested_at, c.id COLLATE "C")
              INTO v_cand_ids, v_cand_agents
              FROM (SELECT q.id, q.agent_profile_id, q.priority, q.requested_at
                      FROM office.runs q
                     WHERE q.status = 'queued' AND q.priority <> 0
                       AND CASE WHEN v_pass = 1 THEN q.priority > 0 ELSE q.priority < 0 END
                       AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                       AND q.agent_profile_id <> ALL (v_skip_agents) AND q.id <> ALL (v_skip_runs)
                       AND NOT EXISTS (SELECT FROM office.runs x
                                        WHERE x.agent_profile_id = q.agent_profile_id AND x.status = 'claimed')
                       AND EXISTS (SELECT FROM office.agent_profiles p
                                    WHERE p.id = q.agent_profile_id
                                      AND p.status <> ALL (office._statuses_refusing_runs()))
                     ORDER BY q.priority DESC, q.requested_at, q.id COLLATE "C"
                     LIMIT 8) AS c;
            IF v_cand_ids IS NULL THEN
                EXIT scan WHEN v_pass = 3;
                v_pass := 2;
                CONTINUE scan;
            END IF;
        ELSIF v_agent IS NULL THEN
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
            free(agent, ok, hold) AS MATERIALIZED (
                SELECT ready.agent, x.busy IS NULL AND p.accepts IS NOT NULL, h.held_by
                  FROM ready
                  LEFT JOIN LATERAL (SELECT true AS busy FROM office.runs x
                                      WHERE x.agent_profile_id = ready.agent AND x.status = 'claimed'
                                      LIMIT 1) x ON true
                  LEFT JOIN LATERAL (SELECT true AS accepts, p.workspace_id FROM office.agent_profiles p
                                      WHERE p.id = ready.agent
                                        AND p.status <> ALL (office._statuses_refusing_runs())
                                      LIMIT 1) p ON true
                  LEFT JOIN LATERAL (SELECT g.held_by
                                       FROM office._agent_hold(ready.agent, p.workspace_id, false) g
                                      WHERE v_governed AND x.busy IS NULL AND p.accepts IS NOT NULL) h ON true
            )
            SELECT array_agg(c.id ORDER BY c.requested_at, c.id COLLATE "C") FILTER (WHERE c.id IS NOT NULL),
                   array_agg(free.agent ORDER BY c.requested_at, c.id COLLATE "C") FILTER (WHERE c.id IS NOT NULL),
                   array_agg(free.agent) FILTER (WHERE c.id IS NULL AND free.hold IS NULL),
                   array_agg(free.agent) FILTER (WHERE c.id IS NULL AND free.hold IS NOT NULL)
              INTO v_cand_ids, v_cand_agents, v_stale, v_held
              FROM free
              LEFT JOIN LATERAL (SELECT q.id, q.requested_at
                                   FROM office.runs q
                                  WHERE free.ok AND q.status = 'queued' AND q.agent_profile_id = free.agent
                                    AND (NOT v_prioritized OR q.priority = 0)
                                    AND (free.hold IS NULL OR (free.hold <> 'budget' AND q.origin = 'human'))
                                    AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                                    AND q.id <> ALL (v_skip_runs)
                                  ORDER BY q.requested_at, q.id COLLATE "C"
                                  LIMIT 1) c ON true;
            IF v_held IS NOT NULL THEN
                PERFORM office._hold_agents(v_held);
                v_skip_agents := v_skip_agents || v_held;
            END IF;
            IF v_stale IS NOT NULL THEN
                PERFORM office._unready_agents(v_stale);
                v_skip_agents := v_skip_agents || v_stale;
            END IF;
            EXIT scan WHEN v_cand_ids IS NULL AND cardinality(v_skip_agents) >= v_skip_bound;
            CONTINUE scan WHEN v_cand_ids IS NULL AND (v_stale IS NOT NULL OR v_held IS NOT NULL);
        ELSE
            -- One agent: its oldest due run, read in index order (never a
            -- sort of its backlog); nothing when it holds a claim, does not
            -- accept runs or a policy holds it (a cooldown or run cap: its
            -- human runs only).
            IF v_governed THEN
                SELECT g.held_by INTO v_hold
                  FROM office.agent_profiles a
                 CROSS JOIN LATERAL office._agent_hold(a.id, a.workspace_id, false) g
                 WHERE a.id = v_agent;
            END IF;
            IF NOT v_prioritized THEN
                SELECT ARRAY[q.id], ARRAY[q.agent_profile_id] INTO v_cand_ids, v_cand_agents
                  FROM office.runs q
                 WHERE q.status = 'queued' AND q.agent_profile_id = v_agent
                   AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                   AND q.id <> ALL (v_skip_runs)
                   AND NOT EXISTS (SELECT FROM office.runs x WHERE x.agent_profile_id = v_agent AND x.status = 'claimed')
                   AND EXISTS (SELECT FROM office.agent_profiles p
                                WHERE p.id = v_agent AND p.status <> ALL (office._statuses_refusing_runs()))
                   AND (v_hold IS NULL OR (v_hold <> 'budget' AND q.origin = 'human'))
                 ORDER BY q.requested_at, q.id COLLATE "C"
                 LIMIT 1;
            ELSE
                -- In claim order without a sort: the runs above 0, of 0 and
                -- below 0, each part read in index order, the first found.
                SELECT ARRAY[c.id], ARRAY[v_agent] INTO v_cand_ids, v_cand_agents
                  FROM ((SELECT q.id FROM office.runs q
                          WHERE q.status = 'queued' AND q.agent_profile_id = v_agent AND q.priority > 0
                            AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                            AND q.id <> ALL (v_skip_runs)
                            AND (v_hold IS NULL OR (v_hold <> 'budget' AND q.origin = 'human'))
                          ORDER BY q.priority DESC, q.requested_at, q.id COLLATE "C"
                          LIMIT 1)
                        UNION ALL
                        (SELECT q.id FROM office.runs q
                          WHERE q.status = 'queued' AND q.agent_profile_id = v_agent AND q.priority = 0
                            AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                            AND q.id <> ALL (v_skip_runs)
                            AND (v_hold IS NULL OR (v_hold <> 'budget' AND q.origin = 'human'))
                          ORDER BY q.requested_at, q.id COLLATE "C"
                          LIMIT 1)
                        UNION ALL
                        (SELECT q.id FROM office.runs q
                          WHERE q.status = 'queued' AND q.agent_profile_id = v_agent AND q.priority < 0
                            AND (q.scheduled_retry_at IS NULL OR q.scheduled_retry_at <= now())
                            AND q.id <> ALL (v_skip_runs)
                            AND (v_hold IS NULL OR (v_hold <> 'budget' AND q.origin = 'human'))
                          ORDER BY q.priority DESC, q.requested_at, q.id COLLATE "C"
                          LIMIT 1)
                        LIMIT 1) AS c
                 WHERE NOT EXISTS (SELECT FROM office.runs x WHERE x.agent_profile_id = v_agent AND x.status = 'claimed')
                   AND EXISTS (SELECT FROM office.agent_profiles p
                                WHERE p.id = v_agent AND p.status <> ALL (office._statuses_refusing_runs()));
            END IF;
        END IF;
        IF v_cand_ids IS NULL THEN
            -- The readiness walk found nothing: then the runs below 0.
            EXIT scan WHEN v_agent IS NOT NULL OR v_pass <> 2 OR NOT v_prioritized;
            -- The agents the walk skipped may have runs below 0 (an agent with
            -- no run of priority 0 is one it skipped).
            v_pass := 3;
            v_skip_agents := '{}';
            CONTINUE scan;
        END IF;

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
            IF v_governed AND EXISTS (SELECT FROM office.runs l
                                        JOIN office.agent_profiles a ON a.id = l.agent_profile_id
                                       CROSS JOIN LATERAL office._agent_hold(a.id, a.workspace_id, l.origin = 'human') g
                                       WHERE l.id = v_cand_id AND g.held_by IS NOT NULL) THEN
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
                IF v_governed THEN
                    PERFORM office._log_claim(v_cand_agent, (SELECT a.workspace_id FROM office.agent_profiles a
                                                              WHERE a.id = v_cand_agent));
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
    'Claims the first due queued run in claim order, priority DESC then the oldest (optionally of one agent), whose agent accepts runs, has no claimed run and is not held by a wake policy (a reached budget, its own or its workspace''s; for a run not of origin human a cooldown or run cap): status claimed, claimed_at and heartbeat_at now, attempt + 1. 0 or 1 row; never waits for or fails because of another claimer; its cost does not grow with the backlog of agents holding a claim, and a call that skipped 1000 listed agents without finding a run returns none (the next goes on past them). worker_id over 200 characters or with a control character 22023.';
REVOKE EXECUTE ON FUNCTION office.claim_run(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.claim_run(text, text) TO office_worker, office_admin;

-- The outcome calls are fenced by the attempt (the claim's fencing token) and,
-- when the worker gives its worker_id, by claimed_by too: the attempt can be
-- read by anyone who may read the run (get_run), so the attempt alone would
-- let one worker act on another's run.
CREATE FUNCTION office.heartbeat_run(run_id text, attempt int, worker_id text DEFAULT NULL) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_agent text;
    v_workspace text;
BEGIN
    -- The budget hard stop (docs/api.md §9): with no budget anywhere this is
    -- one probe of the empty partial index idx_wake_policies_budget.
    IF EXISTS (SELECT FROM office.wake_policies p WHERE p.budget IS NOT NULL) THEN
        SELECT r.agent_profile_id, a.workspace_id INTO v_agent, v_workspace
          FROM office.runs r JOIN office.agent_profiles a ON a.id = r.agent_profile_id
         WHERE r.id = heartbeat_run.run_id;
        IF FOUND AND office._budget_reached(v_agent, v_workspace) THEN
            -- Put back, not failed: retry_count stays, and the attempt fences
            -- the worker's late outcome.
            UPDATE office.runs r
               SET status = 'queued', claimed_at = NULL, claimed_by = NULL, heartbeat_at = NULL
             WHERE r.id = heartbeat_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = heartbeat_run.attempt
               AND (heartbeat_run.worker_id IS NULL OR r.claimed_by = heartbeat_run.worker_id);
            RETURN false;
        END IF;
    END IF;
    -- heartbeat_at is in no index, so a beat is a HOT update of the row.
    UPDATE office.runs r
       SET heartbeat_at = now()
     WHERE r.id = heartbeat_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = heartbeat_run.attempt
       AND (heartbeat_run.worker_id IS NULL OR r.claimed_by = heartbeat_run.worker_id);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.heartbeat_run(text, int, text) IS
    'While the run is claimed with this attempt (and, when worker_id is given, by that worker): heartbeat_at = now(), true (the lease is renewed); otherwise false: the worker lost the run (recovered, cancelled, re-claimed) and must stop working on it. Also false when the agent''s own or its workspace''s budget is reached in its period: then a claim that matches is put back to queued (claimed_at, claimed_by, heartbeat_at cleared, retry_count kept).';
REVOKE EXECUTE ON FUNCTION office.heartbeat_run(text, int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.heartbeat_run(text, int, text) TO office_worker, office_admin;

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

CREATE FUNCTION office.finish_run(run_id text, attempt int, worker_id text DEFAULT NULL) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    UPDATE office.runs r
       SET status = 'finished', finished_at = now()
     WHERE r.id = $1 AND r.status COLLATE "C" = 'claimed' AND r.attempt = $2
       AND ($3 IS NULL OR r.claimed_by = $3);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.finish_run(text, int, text) IS
    'claimed -> finished, only if the run is still claimed with this attempt (and, when worker_id is given, by that worker): a stale worker gets false and changes nothing.';
REVOKE EXECUTE ON FUNCTION office.finish_run(text, int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.finish_run(text, int, text) TO office_worker, office_admin;

-- A retryable failure goes back to the queue while retry_count is below
-- max_retries, after a back-off of the retry_count + 1st step (the last one
-- repeating) times a uniform factor in [0.75, 1.25], so runs that failed
-- together do not come back together (docs/api.md §9: the agent's policy,
-- else its workspace's, else 3 retries and {2 min, 10 min, 30 min, 2 h};
-- office._retry_policy of 33_wake_policies.sql).
CREATE FUNCTION office.fail_run(run_id text, attempt int, error_message text,
                                retryable boolean DEFAULT false, worker_id text DEFAULT NULL) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    max_retries int;
    backoff interval[];
BEGIN
    PERFORM office._check_free_text('error_message', fail_run.error_message);
    IF coalesce(fail_run.retryable, false) THEN
        SELECT p.max_retries, p.retry_backoff INTO max_retries, backoff
          FROM office.runs r CROSS JOIN LATERAL office._retry_policy(r.agent_profile_id) p
         WHERE r.id = fail_run.run_id;
        UPDATE office.runs r
           SET status = 'queued', error_message = fail_run.error_message,
               scheduled_retry_at = now() + backoff[least(r.retry_count + 1, cardinality(backoff))]
                                            * (0.75 + 0.5 * random()),
               retry_count = r.retry_count + 1,
               claimed_at = NULL, claimed_by = NULL, heartbeat_at = NULL, finished_at = NULL
         WHERE r.id = fail_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = fail_run.attempt
           AND (fail_run.worker_id IS NULL OR r.claimed_by = fail_run.worker_id)
           AND r.retry_count < max_retries;
        IF FOUND THEN
            RETURN true;
        END IF;
    END IF;
    UPDATE office.runs r
       SET status = 'failed', error_message = fail_run.error_message,
           finished_at = coalesce(r.finished_at, now())
     WHERE r.id = fail_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = fail_run.attempt
       AND (fail_run.worker_id IS NULL OR r.claimed_by = fail_run.worker_id);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.fail_run(text, int, text, boolean, text) IS
    'claimed -> failed with error_message, only if the run is still claimed with this attempt (and, when worker_id is given, by that worker). retryable and retry_count below the agent''s max_retries (its wake policy''s, else its workspace''s, else 3): back to queued instead, claimable after a jittered back-off (the policy''s retry_backoff, else 2 min, 10 min, 30 min, then 2 h; the last step repeating), retry_count + 1, true. error_message over 64 KiB 22023.';
REVOKE EXECUTE ON FUNCTION office.fail_run(text, int, text, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.fail_run(text, int, text, boolean, text) TO office_worker, office_admin;

CREATE FUNCTION office.retry_run(run_id text, attempt int, delay interval, worker_id text DEFAULT NULL) RETURNS boolean
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
     WHERE r.id = retry_run.run_id AND r.status COLLATE "C" = 'claimed' AND r.attempt = retry_run.attempt
       AND (retry_run.worker_id IS NULL OR r.claimed_by = retry_run.worker_id);
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION office.retry_run(text, int, interval, text) IS
    'claimed -> queued in place (key kept), retry_count + 1, claimable again after delay (claimed_at, claimed_by, heartbeat_at cleared); only if still claimed with this attempt (and, when worker_id is given, by that worker). A delay that is not a finite interval from 0 to 100 years 22023.';
REVOKE EXECUTE ON FUNCTION office.retry_run(text, int, interval, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.retry_run(text, int, interval, text) TO office_worker, office_admin;

CREATE FUNCTION office.cancel_run(run_id text, reason text) RETURNS boolean
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
    'Deletes finished, failed and cancelled runs whose finished_at is older than older_than (their own and recorded keys become free). Returns the count.';
REVOKE EXECUTE ON FUNCTION office.prune_runs(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.prune_runs(interval) TO office_admin;

-- Operator actions on finished runs (since 0.5.0): a failed or cancelled run
-- goes back to queued in place, so the key it serves (its own and the ones
-- recorded by coalescing) stays with it and a redelivery is still a dedup
-- onto this run. Its next claim bumps attempt, as a recovered run's does;
-- retry_count is left (it counts retries the worker asked for).
-- error_message and cancel_reason stay until the run's next outcome writes
-- over them, so an operator can still read why it stopped. The readiness
-- trigger lists the agent again (a run queued again); the wake-up signal is
-- that of a new run (office.notify), the runs being queued and due.
CREATE FUNCTION office.requeue_run(run_id text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_agent text;
BEGIN
    UPDATE office.runs r
       SET status = 'queued', finished_at = NULL, claimed_at = NULL, claimed_by = NULL,
           heartbeat_at = NULL, scheduled_retry_at = NULL
     WHERE r.id = requeue_run.run_id AND r.status IN ('failed', 'cancelled')
    RETURNING r.agent_profile_id INTO v_agent;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM office._signal_runs(ARRAY[v_agent], ARRAY[requeue_run.run_id]);
    RETURN true;
END
$$;
COMMENT ON FUNCTION office.requeue_run(text) IS
    'failed|cancelled -> queued in place (finished_at, claimed_at, claimed_by, heartbeat_at, scheduled_retry_at cleared; error_message, cancel_reason, retry_count and the keys kept; the next claim bumps attempt), with the wake-up signal of a new run (office.notify). False for any other status or an unknown run (since 0.5.0).';
REVOKE EXECUTE ON FUNCTION office.requeue_run(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.requeue_run(text) TO office_admin;

-- Internal: the bound of the bulk run actions' id arrays: NULL is none.
CREATE FUNCTION office._check_run_ids(run_ids text[]) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF cardinality(run_ids) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('run_ids has %s elements, more than 10000', cardinality(run_ids));
    END IF;
    RETURN run_ids;
END
$$;
COMMENT ON FUNCTION office._check_run_ids(text[]) IS
    'Internal: returns run_ids when it is NULL or has at most 10,000 elements, else raises 22023 naming the argument.';
REVOKE EXECUTE ON FUNCTION office._check_run_ids(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_run_ids(text[]) TO office_admin;

-- The bulk forms lock the runs in id order (bytewise) before changing them,
-- so two bulk calls over overlapping runs, in any order, never deadlock each
-- other; a claim or an outcome call touches one run, so it cannot close a
-- cycle with them. A run whose status changed while the call waited for
-- its lock is re-read (READ COMMITTED) and left out if it no longer
-- qualifies.
CREATE FUNCTION office.requeue_runs(run_ids text[]) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_agents text[];
    v_ids    text[];
BEGIN
    PERFORM office._check_run_ids(requeue_runs.run_ids);
    WITH target AS MATERIALIZED (
        SELECT t.id FROM office.runs t
         WHERE t.id = ANY (requeue_runs.run_ids) AND t.status IN ('failed', 'cancelled')
         ORDER BY t.id COLLATE "C"
           FOR UPDATE
    ), changed AS (
        UPDATE office.runs r
           SET status = 'queued', finished_at = NULL, claimed_at = NULL, claimed_by = NULL,
               heartbeat_at = NULL, scheduled_retry_at = NULL
          FROM target
         WHERE r.id = target.id AND r.status IN ('failed', 'cancelled')
        RETURNING r.id, r.agent_profile_id
    )
    SELECT array_agg(c.agent_profile_id ORDER BY c.id COLLATE "C"), array_agg(c.id ORDER BY c.id COLLATE "C")
      INTO v_agents, v_ids
      FROM changed c;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM office._signal_runs(v_agents, v_ids);
    RETURN cardinality(v_ids);
END
$$;
COMMENT ON FUNCTION office.requeue_runs(text[]) IS
    'requeue_run for each of run_ids in one statement, the runs locked in id order; returns the number requeued (unknown ids and other statuses are skipped). More than 10,000 ids 22023 (since 0.5.0).';
REVOKE EXECUTE ON FUNCTION office.requeue_runs(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.requeue_runs(text[]) TO office_admin;

CREATE FUNCTION office.cancel_runs(run_ids text[], reason text) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_count int;
BEGIN
    PERFORM office._check_run_ids(cancel_runs.run_ids);
    PERFORM office._check_free_text('reason', cancel_runs.reason);
    WITH target AS MATERIALIZED (
        SELECT t.id FROM office.runs t
         WHERE t.id = ANY (cancel_runs.run_ids) AND t.status IN ('queued', 'claimed')
         ORDER BY t.id COLLATE "C"
           FOR UPDATE
    )
    UPDATE office.runs r
       SET status = 'cancelled', cancel_reason = cancel_runs.reason, finished_at = now()
      FROM target
     WHERE r.id = target.id AND r.status IN ('queued', 'claimed');
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.cancel_runs(text[], text) IS
    'cancel_run for each of run_ids in one statement, the runs locked in id order: queued|claimed -> cancelled with cancel_reason; returns the number cancelled (unknown ids and other statuses are skipped). More than 10,000 ids, reason over 64 KiB 22023 (since 0.5.0).';
REVOKE EXECUTE ON FUNCTION office.cancel_runs(text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.cancel_runs(text[], text) TO office_admin;
