-- office: what a wake policy holds, and the answer to "why isn't my agent
-- running?" (docs/api.md §9, "What a policy holds" and "Explain").
--
-- A hold is decided when a run would be claimed, never when it is queued: a
-- held run stays queued, so nothing is lost while an agent waits, and the
-- wakes that pile up meanwhile coalesce into it (§3). One function,
-- office._agent_hold, decides the holds of an agent for claim_run,
-- explain_agent and office.governance_stats alike, in the order explain_agent
-- reports them: budget (any origin), then cooldown and run cap (which a human
-- run bypasses). The run's own holds (paused agent, not_before, a claim in
-- progress) are claim_run's as before.
--
-- A held agent costs claim_run what a busy one costs: one look after it
-- became ready. Its readiness rows are not stale (it has queued runs, and no
-- trigger readies it when the hold ends by time), so they are delayed to the
-- hold's end (office._hold_agents) instead of deleted; a policy change that
-- may lift a hold lists the scope's agents again (office._ready_scope), and
-- a human run inserted meanwhile is listed by the readiness trigger as any
-- run is.

-- claim_run asks whether anything can hold a run before it looks further:
-- with no such policy that is one probe of this (empty) index, and the C
-- definition hands every call on to PL/pgSQL while it has an entry.
CREATE INDEX idx_wake_policies_holds ON office.wake_policies (scope, scope_id)
    WHERE budget IS NOT NULL OR cooldown IS NOT NULL OR max_runs IS NOT NULL;

-- A cooldown counts from the latest end of a claim of the agent: a run that
-- was claimed when it ended keeps claimed_at (finish_run, a final fail_run,
-- cancel_run of a claimed run), while a requeue, retry, recovery or budget
-- stop clears it and a queued run cancelled never had it. So the latest end
-- is one backward probe of this index.
CREATE INDEX idx_run_agent_ended ON office.runs (agent_profile_id, finished_at)
    WHERE claimed_at IS NOT NULL AND finished_at IS NOT NULL;

-- The queued runs of priority other than 0, by agent in claim order: what
-- explain_agent reads before (above 0) and after (below 0) the everyday runs
-- of priority 0, which idx_run_agent_queued has in age order. Partial, so a
-- run of priority 0, the hot path's, writes no entry.
CREATE INDEX idx_run_agent_queued_priority
    ON office.runs (agent_profile_id, priority DESC, requested_at, id COLLATE "C")
    WHERE status = 'queued' AND priority <> 0;
-- ... and across agents, in claim order: claim_run's walk of the runs above
-- 0 before the readiness list and of those below 0 after it (30_runs.sql),
-- and its probe of whether any queued run has a priority at all.
CREATE INDEX idx_run_queued_priority
    ON office.runs (priority DESC, requested_at, id COLLATE "C")
    WHERE status = 'queued' AND priority <> 0;

-- The queued runs that wait on their scheduled_retry_at (a retry's back-off,
-- a not_before), by bucket: a wake coalesces into a waiting run whatever its
-- age (docs/api.md §9), and enqueue_run's C definition, which looks for a
-- target within the coalesce window only, hands a request on to PL/pgSQL
-- when its bucket has an entry here. Partial, so a run due at once writes
-- none.
CREATE INDEX idx_run_waiting ON office.runs (agent_profile_id, reason)
    WHERE status = 'queued' AND scheduled_retry_at IS NOT NULL;

-- The claims of each agent under a cooldown or run cap, one row per agent,
-- kept apart from office.runs so that prune_runs cannot lift a cap and a
-- re-claim counts again: claimed_at lists the claims within the cap's
-- interval (the last one only, under a cooldown alone). Written by every
-- claim of such an agent (office._log_claim). One row, not one per claim, so
-- that it is also what serialises claims under REPEATABLE READ: a claimer
-- whose snapshot predates another claimer's claim writes the row that claim
-- changed and gets a serialization failure (40001) rather than claiming past
-- the cap or inside the cooldown it could not see.
CREATE TABLE office.wake_claims (
    agent_profile_id text          PRIMARY KEY,
    claimed_at       timestamptz[] NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('office.wake_claims', '');
REVOKE ALL ON TABLE office.wake_claims FROM PUBLIC;
GRANT SELECT ON TABLE office.wake_claims TO office_reader, office_admin;
COMMENT ON TABLE office.wake_claims IS
    'Claims of agents under a cooldown or run cap, one row per agent: claimed_at lists its claims within the cap''s interval (re-claims and human runs included). Written by claim_run.';

-- An agent's cooldown and run cap: its own row's values where set, else its
-- workspace row's (max_runs and per come together in a row).
CREATE FUNCTION office._agent_limits(agent_profile_id text, workspace_id text,
                                     OUT cooldown interval, OUT max_runs int, OUT per interval)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(a.cooldown, w.cooldown),
           CASE WHEN a.max_runs IS NOT NULL THEN a.max_runs ELSE w.max_runs END,
           CASE WHEN a.max_runs IS NOT NULL THEN a.per ELSE w.per END
      FROM (SELECT) AS one
      LEFT JOIN office.wake_policies a ON a.scope = 'agent' AND a.scope_id = _agent_limits.agent_profile_id
      LEFT JOIN office.wake_policies w ON w.scope = 'workspace' AND w.scope_id = _agent_limits.workspace_id
$$;
COMMENT ON FUNCTION office._agent_limits(text, text) IS
    'Internal: the agent''s cooldown and run cap (max_runs per per): its own policy row''s where set, else its workspace row''s; NULL where neither sets one.';
REVOKE EXECUTE ON FUNCTION office._agent_limits(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._agent_limits(text, text) TO office_admin;

-- The first hold of a policy on the agent's runs of this origin (human or
-- not), in explain_agent's order: budget, cooldown, run cap; NULLs when none
-- holds. until is when the hold ends by itself: the next budget period (the
-- latest of the reached scopes'), the cooldown's end, the time the oldest
-- counted claim leaves the cap's interval.
CREATE FUNCTION office._agent_hold(agent_profile_id text, workspace_id text, human boolean,
                                   OUT held_by text, OUT until timestamptz, OUT detail text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    SET intervalstyle = 'postgres'
    SET datestyle = 'ISO, YMD'
    SET enable_seqscan = off
AS $$
DECLARE
    v_limits record;
    v_last   timestamptz;
    v_count  int;
BEGIN
    SELECT (office._budget_period_start(p.budget_period) + ('1 ' || p.budget_period)::interval) AT TIME ZONE 'UTC',
           format('the %s budget of %s per %s is reached: %s spent', p.scope, p.budget, p.budget_period, s.spent)
      INTO until, detail
      FROM office.wake_policies p
     CROSS JOIN LATERAL (SELECT office._spend(p.scope, p.scope_id, office._budget_period_start(p.budget_period))
                                AS spent) s
     WHERE p.budget IS NOT NULL
       AND ((p.scope = 'agent' AND p.scope_id = _agent_hold.agent_profile_id)
         OR (p.scope = 'workspace' AND p.scope_id = _agent_hold.workspace_id))
       AND s.spent >= p.budget
     ORDER BY 1 DESC
     LIMIT 1;
    IF FOUND THEN
        held_by := 'budget';
        RETURN;
    END IF;
    until := NULL;
    detail := NULL;
    IF _agent_hold.human THEN
        RETURN;
    END IF;
    SELECT * INTO v_limits FROM office._agent_limits(_agent_hold.agent_profile_id, _agent_hold.workspace_id);
    IF v_limits.cooldown > interval '0' THEN
        SELECT max(r.finished_at) INTO v_last
          FROM office.runs r
         WHERE r.agent_profile_id = _agent_hold.agent_profile_id
           AND r.claimed_at IS NOT NULL AND r.finished_at IS NOT NULL;
        IF v_last + v_limits.cooldown > now() THEN
            held_by := 'cooldown';
            until := v_last + v_limits.cooldown;
            detail := format('cooldown of %s after the run that ended at %s', v_limits.cooldown, v_last);
            RETURN;
        END IF;
    END IF;
    IF v_limits.max_runs IS NOT NULL THEN
        SELECT count(*), (array_agg(t.at ORDER BY t.at DESC))[v_limits.max_runs] + v_limits.per
          INTO v_count, until
          FROM office.wake_claims c
         CROSS JOIN LATERAL unnest(c.claimed_at) AS t (at)
         WHERE c.agent_profile_id = _agent_hold.agent_profile_id AND t.at > now() - v_limits.per;
        IF v_count < v_limits.max_runs THEN
            until := NULL;
        ELSE
            held_by := 'run_cap';
            detail := format('%s runs claimed in the last %s, at most %s', v_count,
                             CASE v_limits.per WHEN interval '1 second' THEN 'second' WHEN interval '1 minute' THEN 'minute'
                                               WHEN interval '1 hour' THEN 'hour' WHEN interval '1 day' THEN 'day'
                                               WHEN interval '7 days' THEN 'week' ELSE v_limits.per::text END,
                             v_limits.max_runs);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION office._agent_hold(text, text, boolean) IS
    'Internal: the first policy hold (budget, cooldown, run_cap) on the agent''s runs of this origin (human: budget only), when it ends by itself and what it is in words; NULLs when none holds.';
REVOKE EXECUTE ON FUNCTION office._agent_hold(text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._agent_hold(text, text, boolean) TO office_admin;

-- Internal: claim_run's record of a claim (above): nothing unless a cooldown
-- or run cap applies to the agent.
CREATE FUNCTION office._log_claim(agent_profile_id text, workspace_id text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_limits record;
BEGIN
    SELECT * INTO v_limits FROM office._agent_limits(_log_claim.agent_profile_id, _log_claim.workspace_id);
    IF v_limits.cooldown IS NULL AND v_limits.per IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO office.wake_claims AS c (agent_profile_id, claimed_at)
    VALUES (_log_claim.agent_profile_id, ARRAY[now()])
    ON CONFLICT (agent_profile_id) DO UPDATE
       SET claimed_at = ARRAY(SELECT t.at FROM unnest(c.claimed_at) AS t (at)
                               WHERE t.at > now() - v_limits.per
                               ORDER BY t.at) || now();
END
$$;
COMMENT ON FUNCTION office._log_claim(text, text) IS
    'Internal (claim_run): records a claim of the agent in office.wake_claims when a cooldown or run cap applies to it, dropping its claims older than the cap''s interval.';
REVOKE EXECUTE ON FUNCTION office._log_claim(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._log_claim(text, text) TO office_admin;

-- Internal: claim_run's delay of the readiness rows of agents a policy holds
-- (30_runs.sql, office.agent_ready). Deleting them would be a stall: the
-- hold ending by time readies nobody. So they are delayed to the time the
-- hold ends by itself (for a cooldown or run cap, or earlier when a human run
-- of the agent becomes due then), and until then later claims do not look at
-- them. Under each agent's readiness lock taken exclusive with pg_try_* (a
-- busy lock leaves the rows as they are, and two claimers never wait on one
-- row), and the hold decided again in the UPDATE's own snapshot: a row it
-- can see was inserted by a commit it sees too, so a lifting change's row is
-- never delayed. Nothing under a stricter isolation, whose snapshot may be
-- older than the lock.
CREATE FUNCTION office._hold_agents(agents text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
DECLARE
    v_locked text[] := office._lock_readiness(_hold_agents.agents);
BEGIN
    IF v_locked IS NULL THEN
        RETURN;
    END IF;
    WITH held AS (
        SELECT a.agent,
               CASE WHEN h.held_by = 'budget' THEN h.until
                    ELSE least(h.until, (SELECT min(q.scheduled_retry_at) FROM office.runs q
                                          WHERE q.agent_profile_id = a.agent AND q.status = 'queued'
                                            AND q.origin = 'human'))
               END AS until
          FROM unnest(v_locked) AS a (agent)
          JOIN office.agent_profiles p ON p.id = a.agent
         CROSS JOIN LATERAL office._agent_hold(a.agent, p.workspace_id, false) h
         WHERE h.held_by IS NOT NULL
    )
    UPDATE office.agent_ready r
       SET due_at = held.until
      FROM held
     WHERE r.agent_profile_id = held.agent AND held.until > now()
       AND (r.due_at IS NULL OR r.due_at < held.until);
END
$$;
COMMENT ON FUNCTION office._hold_agents(text[]) IS
    'Internal (claim_run): sets due_at of the office.agent_ready rows of these agents, where a policy holds their runs (office._agent_hold), to when the hold ends by itself; only agents whose readiness lock it gets at once, exclusive; nothing outside READ COMMITTED.';
REVOKE EXECUTE ON FUNCTION office._hold_agents(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._hold_agents(text[]) TO office_admin;

-- Internal: after a change to a policy that may have held agents (their
-- readiness rows delayed by office._hold_agents), an office.agent_ready row
-- for each agent of the scope with a queued run, inserted without a look (a
-- row is never wrong, at worst one look for a claimer), so no claimable agent
-- is left with delayed rows only.
CREATE FUNCTION office._ready_scope(scope text, scope_id text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
BEGIN
    IF _ready_scope.scope = 'agent' THEN
        INSERT INTO office.agent_ready (agent_profile_id, head_at)
        SELECT q.agent_profile_id, q.requested_at
          FROM office.runs q
         WHERE q.agent_profile_id = _ready_scope.scope_id AND q.status = 'queued'
         ORDER BY q.requested_at, q.id COLLATE "C"
         LIMIT 1;
    ELSE
        INSERT INTO office.agent_ready (agent_profile_id, head_at)
        SELECT a.id, q.requested_at
          FROM office.agent_profiles a
          JOIN LATERAL (SELECT q.requested_at FROM office.runs q
                         WHERE q.agent_profile_id = a.id AND q.status = 'queued'
                         ORDER BY q.requested_at, q.id COLLATE "C"
                         LIMIT 1) q ON true
         WHERE a.workspace_id = _ready_scope.scope_id;
    END IF;
END
$$;
COMMENT ON FUNCTION office._ready_scope(text, text) IS
    'Internal (set_wake_policy, clear_wake_policy): inserts an office.agent_ready row for the agent (scope agent) or each agent of the workspace (scope workspace) that has a queued run, head_at its oldest queued run''s requested_at.';
REVOKE EXECUTE ON FUNCTION office._ready_scope(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._ready_scope(text, text) TO office_admin;

-- The words of the holds (detail) are written with intervalstyle and datestyle
-- pinned, so they read alike whatever the session's settings.

-- The hold of one queued run, given its agent's holds: the first of paused,
-- budget, not_before, cooldown, run_cap, claimed (docs/api.md §9).
CREATE FUNCTION office._run_hold(refuses boolean, busy boolean, origin text, scheduled_retry_at timestamptz,
                                 any_hold text, any_until timestamptz, any_detail text,
                                 OUT held_by text, OUT until timestamptz, OUT detail text)
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    SET intervalstyle = 'postgres'
    SET datestyle = 'ISO, YMD'
AS $$
    SELECT CASE WHEN refuses THEN 'paused'
                WHEN any_hold = 'budget' THEN 'budget'
                WHEN scheduled_retry_at > now() THEN 'not_before'
                WHEN any_hold IS NOT NULL AND origin IS DISTINCT FROM 'human' THEN any_hold
                WHEN busy THEN 'claimed'
           END,
           CASE WHEN refuses THEN NULL
                WHEN any_hold = 'budget' THEN any_until
                WHEN scheduled_retry_at > now() THEN scheduled_retry_at
                WHEN any_hold IS NOT NULL AND origin IS DISTINCT FROM 'human' THEN any_until
           END,
           CASE WHEN refuses THEN 'the agent does not accept runs'
                WHEN any_hold = 'budget' THEN any_detail
                WHEN scheduled_retry_at > now() THEN format('not before %s', scheduled_retry_at)
                WHEN any_hold IS NOT NULL AND origin IS DISTINCT FROM 'human' THEN any_detail
                WHEN busy THEN 'the agent has a claimed run'
           END
$$;
COMMENT ON FUNCTION office._run_hold(boolean, boolean, text, timestamptz, text, timestamptz, text) IS
    'Internal (explain_agent, office.governance_stats): what holds a queued run, given whether its agent refuses runs or holds a claim and the agent''s first policy hold for non-human runs: the first of paused, budget, not_before, cooldown, run_cap, claimed, with until and detail; NULLs when claimable.';
REVOKE EXECUTE ON FUNCTION office._run_hold(boolean, boolean, text, timestamptz, text, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._run_hold(boolean, boolean, text, timestamptz, text, timestamptz, text)
    TO office_admin;

CREATE FUNCTION office.explain_agent(agent_profile_id text, max_rows int DEFAULT 50)
    RETURNS TABLE (run_id text, status text, claimable boolean, held_by text, until timestamptz, detail text)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET intervalstyle = 'postgres'
    SET datestyle = 'ISO, YMD'
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_agent   office.agent_profiles;
    v_hold    record;
    v_busy    boolean;
    v_refuses boolean;
    v_left    int;
BEGIN
    IF explain_agent.max_rows IS NULL OR explain_agent.max_rows < 1 OR explain_agent.max_rows > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_rows must be an integer from 1 to 10000, not %s',
                             coalesce(explain_agent.max_rows::text, 'NULL'));
    END IF;
    SELECT a.* INTO v_agent FROM office.agent_profiles a WHERE a.id = explain_agent.agent_profile_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01',
            MESSAGE = format('agent %s not found', coalesce(quote_literal(left(explain_agent.agent_profile_id, 80)), 'NULL'));
    END IF;
    v_refuses := v_agent.status = ANY (office._statuses_refusing_runs());
    SELECT * INTO v_hold FROM office._agent_hold(v_agent.id, v_agent.workspace_id, false);
    RETURN QUERY
    SELECT c.id, c.status, false, NULL::text, NULL::timestamptz,
           format('claimed by %s at %s, attempt %s', coalesce(c.claimed_by, 'a worker'), c.claimed_at, c.attempt)
      FROM office.runs c
     WHERE c.agent_profile_id = v_agent.id AND c.status = 'claimed';
    v_busy := FOUND;
    v_left := explain_agent.max_rows - (CASE WHEN v_busy THEN 1 ELSE 0 END);
    -- Priority DESC, then age: the runs of priority above 0 and below 0 from
    -- idx_run_agent_queued_priority (which holds only those), the everyday
    -- ones of priority 0 from idx_run_agent_queued in age order, each part
    -- read in order and cut at max_rows, so a long backlog is never sorted.
    RETURN QUERY
    SELECT q.id, q.status, h.held_by IS NULL, h.held_by, h.until, h.detail
      FROM (SELECT u.* FROM ((SELECT 1 AS part, q.* FROM office.runs q
              WHERE q.agent_profile_id = v_agent.id AND q.status = 'queued' AND q.priority > 0
              ORDER BY q.priority DESC, q.requested_at, q.id COLLATE "C"
              LIMIT v_left)
            UNION ALL
            (SELECT 2, q.* FROM office.runs q
              WHERE q.agent_profile_id = v_agent.id AND q.status = 'queued' AND q.priority = 0
              ORDER BY q.requested_at, q.id COLLATE "C"
              LIMIT v_left)
            UNION ALL
            (SELECT 3, q.* FROM office.runs q
              WHERE q.agent_profile_id = v_agent.id AND q.status = 'queued' AND q.priority < 0
              ORDER BY q.priority DESC, q.requested_at, q.id COLLATE "C"
              LIMIT v_left)
            ) AS u
             ORDER BY u.part, u.priority DESC, u.requested_at, u.id COLLATE "C"
             LIMIT v_left) AS q
     CROSS JOIN LATERAL office._run_hold(v_refuses, v_busy, q.origin, q.scheduled_retry_at,
                                         v_hold.held_by, v_hold.until, v_hold.detail) h
     ORDER BY q.part, q.priority DESC, q.requested_at, q.id COLLATE "C";
END
$$;
COMMENT ON FUNCTION office.explain_agent(text, int) IS
    'Why the agent''s runs are or are not claimable: its claimed run first (claimable false), then its queued runs by priority DESC, requested_at, id, at most max_rows rows (1-10000, else 22023), each with claimable and what holds it (the first of paused, budget, not_before, cooldown, run_cap, claimed; NULL when claimable), until when the hold ends where known, and detail in words. Unknown agent OFA01.';
REVOKE EXECUTE ON FUNCTION office.explain_agent(text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.explain_agent(text, int)
    TO office_producer, office_worker, office_reader, office_admin;

-- Queued runs held now, by agent and hold, in explain_agent's words (a claim
-- in progress is not counted: it holds the agent's other runs by design).
-- Each agent's policy holds are decided once, then each run's own. A view
-- over a SECURITY DEFINER function, so that readers need no access to the
-- tables and functions it reads.
CREATE FUNCTION office._governance_stats()
    RETURNS TABLE (agent_profile_id text, held_by text, runs bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
    SELECT a.id, h.held_by, count(*)::bigint
      FROM office.agent_profiles a
     CROSS JOIN LATERAL office._agent_hold(a.id, a.workspace_id, false) g
      JOIN office.runs q ON q.agent_profile_id = a.id AND q.status = 'queued'
     CROSS JOIN LATERAL office._run_hold(a.status = ANY (office._statuses_refusing_runs()), false, q.origin,
                                         q.scheduled_retry_at, g.held_by, g.until, g.detail) h
     WHERE h.held_by IS NOT NULL
       AND EXISTS (SELECT FROM office.runs e WHERE e.agent_profile_id = a.id AND e.status = 'queued')
     GROUP BY a.id, h.held_by
$$;
COMMENT ON FUNCTION office._governance_stats() IS
    'Internal (office.governance_stats): queued runs held now, by agent and hold.';
REVOKE EXECUTE ON FUNCTION office._governance_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._governance_stats() TO office_reader, office_admin;

CREATE VIEW office.governance_stats AS
SELECT s.agent_profile_id, s.held_by, s.runs FROM office._governance_stats() AS s;
REVOKE ALL ON TABLE office.governance_stats FROM PUBLIC;
GRANT SELECT ON TABLE office.governance_stats TO office_reader, office_admin;
COMMENT ON VIEW office.governance_stats IS
    'Queued runs held now, by agent and hold (paused, budget, not_before, cooldown, run_cap; a claim in progress not counted), in explain_agent''s words.';
