-- office: wake policies and spend (docs/api.md §9, "Policies").
--
-- A policy row is per agent or per workspace; a NULL column means "not set
-- here", so an agent's limit is its own row's value, else its workspace row's,
-- else the default (office._retry_policy for the retry limits). A budget is
-- per scope and both hold: an agent row caps the agent's spend, a workspace
-- row the workspace's total.
--
-- Spend is kept per scope and UTC day whether or not a policy exists, so a
-- budget set later counts what was spent earlier in its period. An agent's
-- spend is one row per day: only recordings of that agent's runs meet on it,
-- and its row lock is what makes exactly one of two racing recordings the one
-- that crosses a threshold. A workspace's spend is striped by slot (a slot the
-- recording transaction holds, office._counter_slot), so recorders of
-- different agents of one workspace never wait on one row; only where the
-- workspace has a budget do they serialise, on the advisory lock
-- wake_spend.workspace:<workspace>, because a crossing must be decided once.

CREATE TABLE office.wake_policies (
    scope         text        NOT NULL CHECK (scope = ANY ('{agent,workspace}'::text[])),
    scope_id      text        NOT NULL CHECK (office._is_id(scope_id)),
    cooldown      interval    CHECK (cooldown >= interval '0' AND cooldown <= interval '100 years'),
    max_runs      int         CHECK (max_runs BETWEEN 1 AND 10000),
    per           interval    CHECK (per > interval '0' AND per <= interval '100 years'),
    budget        numeric     CHECK (budget >= 0 AND budget < 'Infinity'::numeric),
    budget_period text        NOT NULL DEFAULT 'month'
                              CHECK (budget_period = ANY ('{day,week,month}'::text[])),
    max_retries   int         CHECK (max_retries BETWEEN 0 AND 100),
    retry_backoff interval[]  CHECK (cardinality(retry_backoff) BETWEEN 1 AND 32
                                     AND array_ndims(retry_backoff) = 1),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, scope_id),
    CHECK ((max_runs IS NULL) = (per IS NULL))
);
SELECT pg_catalog.pg_extension_config_dump('office.wake_policies', '');
REVOKE ALL ON TABLE office.wake_policies FROM PUBLIC;
GRANT SELECT ON TABLE office.wake_policies TO office_reader, office_admin;
COMMENT ON TABLE office.wake_policies IS
    'Wake policies per agent or workspace (scope, scope_id): cooldown, max_runs per per, budget per budget_period (day, week, month; UTC), max_retries and retry_backoff of retryable failures. NULL = not set here: an agent''s value is its own row''s, else its workspace row''s, else the default. Written by set_wake_policy and clear_wake_policy.';

-- heartbeat_run asks whether any budget exists before it looks further: with
-- no budget row that is one probe of this (empty) index.
CREATE INDEX idx_wake_policies_budget ON office.wake_policies (scope, scope_id)
    WHERE budget IS NOT NULL;

CREATE TABLE office.wake_spend (
    scope    text    NOT NULL CHECK (scope = ANY ('{agent,workspace}'::text[])),
    scope_id text    NOT NULL CHECK (office._is_id(scope_id)),
    day      date    NOT NULL,
    slot     int     NOT NULL DEFAULT 0,
    amount   numeric NOT NULL DEFAULT 0 CHECK (amount >= 0 AND amount < 'Infinity'::numeric),
    PRIMARY KEY (scope, scope_id, day, slot)
);
SELECT pg_catalog.pg_extension_config_dump('office.wake_spend', '');
REVOKE ALL ON TABLE office.wake_spend FROM PUBLIC;
GRANT SELECT ON TABLE office.wake_spend TO office_reader, office_admin;
COMMENT ON TABLE office.wake_spend IS
    'Cost recorded by record_run_cost, per scope (agent, workspace), UTC day and slot (agent rows slot 0; workspace rows striped so that recorders of different agents do not wait on one row): sum the slots for a scope''s spend.';

CREATE FUNCTION office._check_budget_period(budget_period text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF budget_period IS NULL OR NOT (budget_period = ANY ('{day,week,month}'::text[])) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('budget_period must be day, week or month, not %s',
                             coalesce(quote_literal(left(budget_period, 40)), 'NULL'));
    END IF;
    RETURN budget_period;
END
$$;
COMMENT ON FUNCTION office._check_budget_period(text) IS
    'Internal: returns budget_period when it is day, week or month, else raises 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._check_budget_period(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_budget_period(text) TO office_admin;

-- The first day of the budget period that contains now, in UTC (date_trunc's
-- weeks start on Monday).
CREATE FUNCTION office._budget_period_start(budget_period text) RETURNS date
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN date_trunc(budget_period, now() AT TIME ZONE 'UTC')::date;
COMMENT ON FUNCTION office._budget_period_start(text) IS
    'Internal: the UTC day the current budget period (day, week from Monday, month) starts on.';
REVOKE EXECUTE ON FUNCTION office._budget_period_start(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._budget_period_start(text) TO office_admin;

CREATE FUNCTION office._spend(scope text, scope_id text, since date) RETURNS numeric
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(sum(s.amount), 0) FROM office.wake_spend s
     WHERE s.scope = _spend.scope AND s.scope_id = _spend.scope_id AND s.day >= _spend.since
$$;
COMMENT ON FUNCTION office._spend(text, text, date) IS
    'Internal: the spend recorded for a scope (agent, workspace) from the UTC day since on, all slots.';
REVOKE EXECUTE ON FUNCTION office._spend(text, text, date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._spend(text, text, date) TO office_admin;

CREATE FUNCTION office._budget_reached(agent_profile_id text, workspace_id text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (
        SELECT FROM office.wake_policies p
         WHERE p.budget IS NOT NULL
           AND ((p.scope = 'agent' AND p.scope_id = _budget_reached.agent_profile_id)
             OR (p.scope = 'workspace' AND p.scope_id = _budget_reached.workspace_id))
           AND office._spend(p.scope, p.scope_id, office._budget_period_start(p.budget_period)) >= p.budget)
$$;
COMMENT ON FUNCTION office._budget_reached(text, text) IS
    'Internal: whether the agent''s own budget or its workspace''s is reached: the spend recorded in the current period is at least the budget.';
REVOKE EXECUTE ON FUNCTION office._budget_reached(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._budget_reached(text, text) TO office_admin;

-- The defaults serve where neither the agent's row nor its workspace's sets a
-- value (docs/api.md §9, "Automatic retry").
CREATE FUNCTION office._retry_policy(agent_profile_id text, OUT max_retries int, OUT retry_backoff interval[])
    LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT p.max_retries FROM office.wake_policies p
                      WHERE p.scope = 'agent' AND p.scope_id = _retry_policy.agent_profile_id),
                    (SELECT w.max_retries FROM office.agent_profiles a
                       JOIN office.wake_policies w ON w.scope = 'workspace' AND w.scope_id = a.workspace_id
                      WHERE a.id = _retry_policy.agent_profile_id),
                    3),
           coalesce((SELECT p.retry_backoff FROM office.wake_policies p
                      WHERE p.scope = 'agent' AND p.scope_id = _retry_policy.agent_profile_id),
                    (SELECT w.retry_backoff FROM office.agent_profiles a
                       JOIN office.wake_policies w ON w.scope = 'workspace' AND w.scope_id = a.workspace_id
                      WHERE a.id = _retry_policy.agent_profile_id),
                    ARRAY[interval '2 minutes', interval '10 minutes', interval '30 minutes', interval '2 hours'])
$$;
COMMENT ON FUNCTION office._retry_policy(text) IS
    'Internal: the agent''s max_retries and retry_backoff: its own policy row''s where not NULL, else its workspace row''s, else 3 and {2 min, 10 min, 30 min, 2 h}.';
REVOKE EXECUTE ON FUNCTION office._retry_policy(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._retry_policy(text) TO office_admin;

CREATE FUNCTION office.set_wake_policy(scope text, scope_id text, cooldown interval DEFAULT NULL,
                                       max_runs int DEFAULT NULL, per interval DEFAULT NULL,
                                       budget numeric DEFAULT NULL, budget_period text DEFAULT 'month',
                                       max_retries int DEFAULT NULL, retry_backoff interval[] DEFAULT NULL)
    RETURNS office.wake_policies
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row office.wake_policies;
    v_holding boolean;
BEGIN
    -- Every argument is checked before the row is written.
    IF set_wake_policy.scope IS NULL OR NOT (set_wake_policy.scope = ANY ('{agent,workspace}'::text[])) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('scope must be agent or workspace, not %s',
                             coalesce(quote_literal(left(set_wake_policy.scope, 40)), 'NULL'));
    END IF;
    PERFORM office._check_id(set_wake_policy.scope, set_wake_policy.scope_id);
    IF set_wake_policy.cooldown IS NOT NULL THEN
        PERFORM office._check_interval('cooldown', set_wake_policy.cooldown);
    END IF;
    IF (set_wake_policy.max_runs IS NULL) <> (set_wake_policy.per IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_runs and per come together, not max_runs %s with per %s',
                             coalesce(set_wake_policy.max_runs::text, 'NULL'),
                             coalesce(set_wake_policy.per::text, 'NULL'));
    END IF;
    IF set_wake_policy.max_runs IS NOT NULL AND NOT (set_wake_policy.max_runs BETWEEN 1 AND 10000) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_runs must be from 1 to 10000, not %s', set_wake_policy.max_runs);
    END IF;
    IF set_wake_policy.per IS NOT NULL THEN
        PERFORM office._check_interval('per', set_wake_policy.per);
        IF set_wake_policy.per = interval '0' THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('per must be a positive interval, not %s', set_wake_policy.per);
        END IF;
    END IF;
    IF set_wake_policy.budget IS NOT NULL
       AND NOT (set_wake_policy.budget >= 0 AND set_wake_policy.budget < 'Infinity'::numeric) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('budget must be a finite number of at least 0, not %s', set_wake_policy.budget);
    END IF;
    PERFORM office._check_budget_period(set_wake_policy.budget_period);
    IF set_wake_policy.max_retries IS NOT NULL AND NOT (set_wake_policy.max_retries BETWEEN 0 AND 100) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_retries must be from 0 to 100, not %s', set_wake_policy.max_retries);
    END IF;
    IF set_wake_policy.retry_backoff IS NOT NULL THEN
        IF coalesce(array_ndims(set_wake_policy.retry_backoff), 1) <> 1
           OR NOT (cardinality(set_wake_policy.retry_backoff) BETWEEN 1 AND 32) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('retry_backoff must be a list of 1 to 32 intervals, not %s',
                                 left(set_wake_policy.retry_backoff::text, 80));
        END IF;
        FOR i IN 1 .. cardinality(set_wake_policy.retry_backoff) LOOP
            PERFORM office._check_interval(format('retry_backoff[%s]', i), set_wake_policy.retry_backoff[i]);
        END LOOP;
    END IF;
    -- FOR KEY SHARE: the agent cannot go away before the row is written.
    IF set_wake_policy.scope = 'agent'
       AND NOT EXISTS (SELECT FROM office.agent_profiles a WHERE a.id = set_wake_policy.scope_id FOR KEY SHARE) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01',
            MESSAGE = format('agent %s not found', quote_literal(set_wake_policy.scope_id));
    END IF;
    -- FOR UPDATE: the holds replaced are the ones read here.
    v_holding := EXISTS (SELECT FROM office.wake_policies p
                          WHERE p.scope = set_wake_policy.scope AND p.scope_id = set_wake_policy.scope_id
                            AND (p.budget IS NOT NULL OR p.cooldown IS NOT NULL OR p.max_runs IS NOT NULL)
                            FOR UPDATE);
    INSERT INTO office.wake_policies AS p
           (scope, scope_id, cooldown, max_runs, per, budget, budget_period, max_retries, retry_backoff, updated_at)
    VALUES (set_wake_policy.scope, set_wake_policy.scope_id, set_wake_policy.cooldown, set_wake_policy.max_runs,
            set_wake_policy.per, set_wake_policy.budget, set_wake_policy.budget_period,
            set_wake_policy.max_retries, set_wake_policy.retry_backoff, now())
    ON CONFLICT (scope, scope_id) DO UPDATE
       SET cooldown = EXCLUDED.cooldown, max_runs = EXCLUDED.max_runs, per = EXCLUDED.per,
           budget = EXCLUDED.budget, budget_period = EXCLUDED.budget_period,
           max_retries = EXCLUDED.max_retries, retry_backoff = EXCLUDED.retry_backoff,
           updated_at = EXCLUDED.updated_at
    RETURNING p.* INTO v_row;
    -- A budget, cooldown or run cap that was there may have held the scope's
    -- agents (their readiness rows delayed by claim_run, 34_wake_holds.sql):
    -- ready them, whatever the new row holds.
    IF v_holding THEN
        PERFORM office._ready_scope(set_wake_policy.scope, set_wake_policy.scope_id);
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.set_wake_policy(text, text, interval, int, interval, numeric, text, int, interval[]) IS
    'Inserts or replaces the wake policy of an agent or a workspace (scope agent|workspace, scope_id) and returns it; NULL = not set here. max_runs (1-10000) and per (a positive interval) come together; cooldown, per and each retry_backoff step finite intervals from 0 to 100 years; budget finite and >= 0; budget_period day, week or month; max_retries 0-100; retry_backoff 1-32 intervals. Bad input 22023 naming the argument (nothing written); unknown agent OFA01. Where the row replaced had a budget, cooldown or run cap, the scope''s agents with queued runs are listed again for claim_run (a hold it kept may be lifted).';
REVOKE EXECUTE ON FUNCTION office.set_wake_policy(text, text, interval, int, interval, numeric, text, int, interval[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.set_wake_policy(text, text, interval, int, interval, numeric, text, int, interval[]) TO office_admin;

CREATE FUNCTION office.clear_wake_policy(scope text, scope_id text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_holding boolean;
BEGIN
    DELETE FROM office.wake_policies p
     WHERE p.scope = clear_wake_policy.scope AND p.scope_id = clear_wake_policy.scope_id
    RETURNING p.budget IS NOT NULL OR p.cooldown IS NOT NULL OR p.max_runs IS NOT NULL INTO v_holding;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A hold gone may have held the scope's agents (their readiness rows
    -- delayed by claim_run): ready them.
    IF v_holding THEN
        PERFORM office._ready_scope(clear_wake_policy.scope, clear_wake_policy.scope_id);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION office.clear_wake_policy(text, text) IS
    'Deletes the wake policy of an agent or a workspace; true if there was one. Where it had a budget, cooldown or run cap, the scope''s agents with queued runs are listed again for claim_run (a hold it kept is lifted).';
REVOKE EXECUTE ON FUNCTION office.clear_wake_policy(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.clear_wake_policy(text, text) TO office_admin;

-- The decisions of a recording that takes a scope's spend across 80 % or
-- 100 % of its budget: "across" means this recording's own before and after
-- (before < threshold <= after), read under the scope's serialisation (the
-- agent's day row, the workspace's lock), so of two racing recordings that
-- together cross a threshold exactly one writes its decision.
CREATE FUNCTION office._budget_crossings(scope text, scope_id text, before numeric, after numeric,
                                         budget numeric, budget_period text, since date,
                                         agent_profile_id text, run_id text, origin text,
                                         cause_run_id text, chain_depth int) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_detail jsonb := jsonb_build_object('scope', scope, 'scope_id', scope_id, 'budget', budget,
                                         'budget_period', budget_period, 'period_start', since,
                                         'spent', after);
BEGIN
    IF before < 0.8 * budget AND after >= 0.8 * budget THEN
        PERFORM office._write_wake_decision(agent_profile_id, run_id, 'budget_warning', origin,
                                            cause_run_id, chain_depth, v_detail);
    END IF;
    IF before < budget AND after >= budget THEN
        PERFORM office._write_wake_decision(agent_profile_id, run_id, 'budget_exhausted', origin,
                                            cause_run_id, chain_depth, v_detail);
    END IF;
END
$$;
COMMENT ON FUNCTION office._budget_crossings(text, text, numeric, numeric, numeric, text, date, text, text, text, text, int) IS
    'Internal: writes budget_warning when a recording took a scope''s spend from below 80 % of its budget to 80 % or more, budget_exhausted when from below 100 % to 100 % or more (both when both), under the recording run''s agent.';
REVOKE EXECUTE ON FUNCTION office._budget_crossings(text, text, numeric, numeric, numeric, text, date, text, text, text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._budget_crossings(text, text, numeric, numeric, numeric, text, date, text, text, text, text, int) TO office_admin;

-- Fenced by the attempt alone, so the worker of a run that ended or was put
-- back (a budget stop) can still record its last cost; a given worker_id must
-- be the claim's, or the run must have been put back (claimed_by cleared,
-- and a re-claim would have moved the attempt on).
CREATE FUNCTION office.record_run_cost(run_id text, attempt int, amount numeric, worker_id text DEFAULT NULL)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_run record;
    v_workspace text;
    v_policy record;
    v_since date;
    v_after numeric;
    v_budgeted boolean;
BEGIN
    IF record_run_cost.amount IS NULL
       OR NOT (record_run_cost.amount >= 0 AND record_run_cost.amount < 'Infinity'::numeric) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('amount must be a finite number of at least 0, not %s',
                             coalesce(record_run_cost.amount::text, 'NULL'));
    END IF;
    UPDATE office.runs r
       SET cost = r.cost + record_run_cost.amount
     WHERE r.id = record_run_cost.run_id AND r.attempt = record_run_cost.attempt AND r.attempt > 0
       AND (record_run_cost.worker_id IS NULL OR r.claimed_by IS NULL OR r.claimed_by = record_run_cost.worker_id)
    RETURNING r.agent_profile_id, r.origin, r.cause_run_id, r.chain_depth INTO v_run;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT a.workspace_id INTO v_workspace FROM office.agent_profiles a WHERE a.id = v_run.agent_profile_id;

    -- The agent: one row per day; its lock orders racing recordings.
    INSERT INTO office.wake_spend AS s (scope, scope_id, day, slot, amount)
    VALUES ('agent', v_run.agent_profile_id, v_today, 0, record_run_cost.amount)
    ON CONFLICT (scope, scope_id, day, slot) DO UPDATE SET amount = s.amount + EXCLUDED.amount;
    SELECT p.budget, p.budget_period INTO v_policy FROM office.wake_policies p
     WHERE p.scope = 'agent' AND p.scope_id = v_run.agent_profile_id AND p.budget IS NOT NULL;
    IF FOUND THEN
        v_since := office._budget_period_start(v_policy.budget_period);
        v_after := office._spend('agent', v_run.agent_profile_id, v_since);
        PERFORM office._budget_crossings('agent', v_run.agent_profile_id, v_after - record_run_cost.amount, v_after,
                                         v_policy.budget, v_policy.budget_period, v_since, v_run.agent_profile_id,
                                         record_run_cost.run_id, v_run.origin, v_run.cause_run_id, v_run.chain_depth);
    END IF;

    IF v_workspace IS NOT NULL THEN
        SELECT p.budget, p.budget_period INTO v_policy FROM office.wake_policies p
         WHERE p.scope = 'workspace' AND p.scope_id = v_workspace AND p.budget IS NOT NULL;
        v_budgeted := FOUND;
        IF v_budgeted THEN
            PERFORM office._xact_lock(office._lock_key('wake_spend.workspace', v_workspace));
        END IF;
        INSERT INTO office.wake_spend AS s (scope, scope_id, day, slot, amount)
        VALUES ('workspace', v_workspace, v_today, office._counter_slot(), record_run_cost.amount)
        ON CONFLICT (scope, scope_id, day, slot) DO UPDATE SET amount = s.amount + EXCLUDED.amount;
        IF v_budgeted THEN
            v_since := office._budget_period_start(v_policy.budget_period);
            v_after := office._spend('workspace', v_workspace, v_since);
            PERFORM office._budget_crossings('workspace', v_workspace, v_after - record_run_cost.amount, v_after,
                                             v_policy.budget, v_policy.budget_period, v_since, v_run.agent_profile_id,
                                             record_run_cost.run_id, v_run.origin, v_run.cause_run_id, v_run.chain_depth);
        END IF;
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION office.record_run_cost(text, int, numeric, text) IS
    'Adds amount (finite, >= 0, else 22023) to the run''s cost and to its agent''s and workspace''s spend of the UTC day, while the run carries this attempt: claimed, ended or put back (and, when worker_id is given, claimed by that worker or no longer claimed); true if recorded. A recording that takes a scope''s spend in its budget period across 80 % of its budget writes a budget_warning decision, across 100 % a budget_exhausted one, under the run''s agent.';
REVOKE EXECUTE ON FUNCTION office.record_run_cost(text, int, numeric, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.record_run_cost(text, int, numeric, text) TO office_worker, office_admin;
