-- office_proxy: the routing core, written by hand. The public functions that
-- follow it in office_proxy--<version>.sql are generated from a shard's
-- catalog by controlplane/scaleout/proxy.py (python -m controlplane.scaleout.proxy), so their
-- names, parameters, defaults, result types, comments and grants are the
-- shard's. Routing and merging are explained in docs/scale-out.md.
\echo Use "CREATE EXTENSION office_proxy CASCADE" to load this file. \quit

COMMENT ON SCHEMA office IS 'office API on a PL/Proxy proxy: every call runs on the shards of server office_cluster';

-- The proxy has the four office roles too (cluster-wide; a proxy in the
-- shards' cluster finds them already there).
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['office_producer', 'office_worker', 'office_reader', 'office_admin'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created concurrently by another installer
            END;
        END IF;
    END LOOP;
    IF NOT pg_catalog.pg_has_role('office_admin', 'office_producer', 'MEMBER') THEN
        GRANT office_producer, office_worker, office_reader TO office_admin;
    END IF;
END
$roles$;
REVOKE ALL ON SCHEMA office FROM PUBLIC;
GRANT USAGE ON SCHEMA office TO office_producer, office_worker, office_reader, office_admin;

-- The partitions of office_cluster, read from its SQL/MED options so that
-- `officectl cluster init` (or a DBA) only writes the server.
CREATE FUNCTION office._partitions() RETURNS integer
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.count(*)::integer
      FROM pg_catalog.pg_foreign_server s, pg_catalog.unnest(s.srvoptions) AS o(opt)
     WHERE s.srvname = 'office_cluster' AND o.opt ~ '^p[0-9]+='
$$;
COMMENT ON FUNCTION office._partitions() IS
    'Internal: the number of partitions (p0, p1, ... options) of server office_cluster.';

-- A NULL workspace goes to partition 0, whose shard then refuses it with its
-- own SQLSTATE (a NULL hash would be PL/Proxy''s XX000 instead).
CREATE FUNCTION office._partition(workspace_id text) RETURNS integer
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(pg_catalog.hashtext(workspace_id) & (office._partitions() - 1), 0)
$$;
COMMENT ON FUNCTION office._partition(text) IS
    'The partition of a workspace: hashtext(workspace_id) & (partitions - 1) (docs/api.md §8).';

-- One partition per shard database: partitions naming the same connection
-- string are one database, asked once.
CREATE FUNCTION office._shards() RETURNS TABLE(part integer, shard text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.min(p.part), p.connstr
      FROM (SELECT pg_catalog.substr(pg_catalog.split_part(o.opt, '=', 1), 2)::integer AS part,
                   pg_catalog.substr(o.opt, pg_catalog.strpos(o.opt, '=') + 1) AS connstr
              FROM pg_catalog.pg_foreign_server s, pg_catalog.unnest(s.srvoptions) AS o(opt)
             WHERE s.srvname = 'office_cluster' AND o.opt ~ '^p[0-9]+=') p
     GROUP BY p.connstr
     ORDER BY 1
$$;
COMMENT ON FUNCTION office._shards() IS
    'Internal: the shard databases of office_cluster, each with its lowest partition.';

-- A shard's name in error messages: its connection string without a password.
CREATE FUNCTION office._shard_name(shard text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.regexp_replace(shard, 'password=\S*', 'password=***', 'g')
$$;
COMMENT ON FUNCTION office._shard_name(text) IS
    'Internal: a shard connection string fit for an error message (password masked).';

-- Whether an error of a PL/Proxy call says its shard could not be reached:
-- a connection failure (08xxx), or PL/Proxy's own failure to connect, which
-- it raises as XX000 without a REMOTE ERROR (an error the shard raised
-- always carries one, with the shard's SQLSTATE).
CREATE FUNCTION office._unreachable(sqlstate text, message text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT sqlstate LIKE '08%'
        OR (sqlstate = 'XX000' AND message NOT LIKE '%REMOTE ERROR:%'
            AND message ~ 'PQconnect|connect timeout|connection')
$$;
COMMENT ON FUNCTION office._unreachable(text, text) IS
    'Internal: true for the error of a PL/Proxy call whose shard could not be reached (08xxx, or PL/Proxy''s XX000 connection failure, never a shard''s own error).';

-- Where entities live, asked of one shard: the workspace of each id it
-- holds. The kinds are the entities docs/api.md §8 routes by id. (Argument names
-- must not match a column: PL/Proxy substitutes them into the SELECT.)
CREATE FUNCTION office._locate(_part integer, _kind text, _eids text[])
    RETURNS TABLE(entity_id text, workspace_id text)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT a.id AS entity_id, a.workspace_id FROM office.agent_profiles a WHERE $2 = 'agent' AND a.id = ANY ($3)
    UNION ALL SELECT t.id, t.workspace_id FROM office.tasks t WHERE $2 = 'task' AND t.id = ANY ($3)
    UNION ALL SELECT r.id, r.workspace_id FROM office.routines r WHERE $2 = 'routine' AND r.id = ANY ($3)
    UNION ALL SELECT g.id, r.workspace_id FROM office.routine_triggers g JOIN office.routines r ON r.id = g.routine_id
               WHERE $2 = 'trigger' AND g.id = ANY ($3)
    UNION ALL SELECT x.id, r.workspace_id FROM office.routine_runs x JOIN office.routines r ON r.id = x.routine_id
               WHERE $2 = 'routine_run' AND x.id = ANY ($3)
    UNION ALL SELECT x.id, a.workspace_id FROM office.runs x JOIN office.agent_profiles a ON a.id = x.agent_profile_id
               WHERE $2 = 'run' AND x.id = ANY ($3)
    UNION ALL SELECT x.id, a.workspace_id FROM office.wakeup_requests x JOIN office.agent_profiles a ON a.id = x.agent_profile_id
               WHERE $2 = 'wakeup' AND x.id = ANY ($3);
$$;
COMMENT ON FUNCTION office._locate(integer, text, text[]) IS
    'Internal: the workspace of each entity (agent, task, routine, trigger, routine_run, run, wakeup) of the ids the shard of a partition holds.';

-- The workspaces of entities, found by asking the shards in turn, each for
-- the ids not found yet (no directory on the proxy: nothing to roll back,
-- nothing to rebuild); an id no shard knows has no row. A shard that cannot
-- be asked is skipped; if an id is found nowhere else the call fails with
-- 08006 naming the shard, since the entity may live there.
CREATE FUNCTION office._workspaces_of(kind text, entity_ids text[])
    RETURNS TABLE(entity_id text, workspace_id text)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
    v_left text[] := ARRAY(SELECT DISTINCT i FROM pg_catalog.unnest(entity_ids) AS i WHERE i IS NOT NULL);
    v_ids text[];
    v_workspaces text[];
    v_down text[] := '{}';
BEGIN
    FOR s IN SELECT * FROM office._shards() LOOP
        EXIT WHEN pg_catalog.cardinality(v_left) = 0;
        BEGIN
            SELECT pg_catalog.array_agg(l.entity_id), pg_catalog.array_agg(l.workspace_id)
              INTO v_ids, v_workspaces
              FROM office._locate(s.part, kind, v_left) AS l;
        EXCEPTION WHEN OTHERS THEN
            v_down := v_down || office._shard_name(s.shard);
            CONTINUE;
        END;
        RETURN QUERY SELECT * FROM unnest(v_ids, v_workspaces);  -- (the multi-array form is not schema-qualifiable)
        v_left := ARRAY(SELECT pg_catalog.unnest(v_left) EXCEPT SELECT pg_catalog.unnest(v_ids));
    END LOOP;
    IF pg_catalog.cardinality(v_left) > 0 AND pg_catalog.cardinality(v_down) > 0 THEN
        RAISE EXCEPTION USING ERRCODE = '08006',
            MESSAGE = pg_catalog.format('office_proxy: cannot locate %s %s: shard %s unreachable',
                                        kind, pg_catalog.array_to_string(v_left, ', '),
                                        pg_catalog.array_to_string(v_down, ', '));
    END IF;
END
$$;
COMMENT ON FUNCTION office._workspaces_of(text, text[]) IS
    'The workspaces of entities of one kind (agent, task, routine, trigger, routine_run, run, wakeup) by their ids, asked of the shards in turn: a row per id some shard knows; 08006 naming the shard when an id may live on an unreachable one.';

-- The workspace of one entity (office._workspaces_of); NULL for an id no
-- shard knows.
CREATE FUNCTION office._workspace_of(kind text, entity_id text) RETURNS text
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT w.workspace_id FROM office._workspaces_of(kind, ARRAY[entity_id]) AS w
$$;
COMMENT ON FUNCTION office._workspace_of(text, text) IS
    'The workspace of an entity (kind agent, task, routine, trigger, routine_run, run, wakeup) by its id, asked of the shards in turn; NULL for an id no shard knows; 08006 naming the shard when it may live on an unreachable one.';

-- An id no shard knows goes to partition 0, whose shard answers as one
-- database would (its outcome word or its SQLSTATE).
CREATE FUNCTION office._route(kind text, entity_id text) RETURNS integer
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(office._partition(office._workspace_of(kind, entity_id)), 0)
$$;
COMMENT ON FUNCTION office._route(text, text) IS
    'The partition of an entity by its id (office._workspace_of); 0 for an id no shard knows.';

-- The partition of a call's workspace, after the checks one database makes
-- across workspaces that a shard cannot make about another shard: checks is
-- {kind, id, sqlstate, ...}; an entity of another partition is refused with
-- that SQLSTATE (OFW01 for a reference across workspaces, 23505 for an
-- explicit id that exists). Two concurrent calls on two shards can still
-- both pass (no lock spans shards), and a check against an unreachable shard
-- is skipped with a WARNING: docs/scale-out.md.
CREATE FUNCTION office._checked_partition(workspace_id text, checks text[]) RETURNS integer
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_part integer := office._partition(workspace_id);
    v_other text;
    i integer;
BEGIN
    IF workspace_id IS NULL THEN
        RETURN v_part;
    END IF;
    FOR i IN 1 .. pg_catalog.cardinality(checks) / 3 LOOP
        CONTINUE WHEN coalesce(checks[3 * i - 1], '') = '';
        BEGIN
            v_other := office._workspace_of(checks[3 * i - 2], checks[3 * i - 1]);
        EXCEPTION WHEN SQLSTATE '08006' THEN
            -- A stopped shard must not stop the others' workspaces: the check
            -- is skipped (docs/scale-out.md, failure semantics).
            RAISE WARNING '%, check skipped', SQLERRM;
            CONTINUE;
        END;
        IF v_other IS NOT NULL AND office._partition(v_other) <> v_part THEN
            RAISE EXCEPTION USING ERRCODE = checks[3 * i],
                MESSAGE = pg_catalog.format('%s %L is of workspace %L, not of workspace %L',
                                            checks[3 * i - 2], checks[3 * i - 1], v_other, workspace_id);
        END IF;
    END LOOP;
    RETURN v_part;
END
$$;
COMMENT ON FUNCTION office._checked_partition(text, text[]) IS
    'Internal: the partition of a workspace after refusing entities of other partitions (checks: kind, id, sqlstate triples).';

-- The lowest partition of the shard a partition lives on: the partition
-- that stands for the shard (office._shards), where calls that concern the
-- shard rather than one workspace go.
CREATE FUNCTION office._home(_part integer) RETURNS integer
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.part FROM office._shards() AS s
     WHERE s.shard = (SELECT pg_catalog.substr(o.opt, pg_catalog.strpos(o.opt, '=') + 1)
                        FROM pg_catalog.pg_foreign_server f, pg_catalog.unnest(f.srvoptions) AS o(opt)
                       WHERE f.srvname = 'office_cluster' AND o.opt LIKE 'p' || _part || '=%')
$$;
COMMENT ON FUNCTION office._home(integer) IS
    'Internal: the lowest partition of the shard database of a partition (NULL for a partition office_cluster does not have).';

-- Merging a jsonb of counts per key (daemon_stats.poison_by_loop) over the
-- shards: the counts of a key are added.
CREATE FUNCTION office._jsonb_add(a jsonb, b jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE STRICT
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(pg_catalog.jsonb_object_agg(u.key, u.total), '{}')
      FROM (SELECT e.key, pg_catalog.sum(e.value::numeric) AS total
              FROM (SELECT * FROM pg_catalog.jsonb_each_text(a)
                    UNION ALL SELECT * FROM pg_catalog.jsonb_each_text(b)) AS e
             GROUP BY e.key) AS u
$$;
COMMENT ON FUNCTION office._jsonb_add(jsonb, jsonb) IS
    'Internal: two objects of counts as one, the counts of a key added (the state function of office._jsonb_sum).';
CREATE AGGREGATE office._jsonb_sum(jsonb) (SFUNC = office._jsonb_add, STYPE = jsonb);
COMMENT ON AGGREGATE office._jsonb_sum(jsonb) IS
    'Internal: objects of counts as one, the counts of each key added (NULL when every input is NULL).';

-- Event ids through the proxy. A shard's event ids are its own sequence, so
-- two shards have the same ones; the proxy returns local_id * P + p (P the
-- partition count, p the partition of the event's task's workspace, or the
-- shard's lowest partition when the task is unknown), which no other event
-- of any shard has, and which names its shard: partition id & (P - 1), local
-- id id / P. Ordering by it orders one shard's events as their local ids do.
-- The groups of an id array by partition, each with its local ids (ids is
-- NULL: one group, partition 0, NULL, for the shard's own 22023).
CREATE FUNCTION office._event_groups(ids bigint[]) RETURNS TABLE(part integer, local_ids bigint[])
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 0, NULL::bigint[] WHERE ids IS NULL
    UNION ALL
    SELECT (i & (office._partitions() - 1))::integer, pg_catalog.array_agg(i / office._partitions())
      FROM pg_catalog.unnest(ids) AS i
     WHERE i IS NOT NULL
     GROUP BY 1
$$;
COMMENT ON FUNCTION office._event_groups(bigint[]) IS
    'Internal: proxy event ids (local_id * partitions + partition) grouped by partition, as local ids.';

-- enqueue_runs split by shard (docs/api.md §8): the elements grouped by the
-- shard of their agent's workspace (its lowest partition), in the order of
-- each group's first element, each group's elements in element order with
-- their ordinalities in the whole call. An element whose agent no shard
-- knows (or that has none, or is no object) goes to partition 0, whose shard
-- answers as one database would; so does a requests that is no array.
CREATE FUNCTION office._split_requests(requests jsonb, agent_key text)
    RETURNS TABLE(part integer, elements jsonb, ordinalities integer[])
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_agents text[];
BEGIN
    IF pg_catalog.jsonb_typeof(requests) IS DISTINCT FROM 'array' THEN
        RETURN QUERY SELECT 0, requests, NULL::integer[];
        RETURN;
    END IF;
    v_agents := ARRAY(SELECT DISTINCT e.value ->> agent_key FROM pg_catalog.jsonb_array_elements(requests) AS e
                       WHERE pg_catalog.jsonb_typeof(e.value -> agent_key) = 'string');
    RETURN QUERY
    SELECT g.part, pg_catalog.jsonb_agg(g.value ORDER BY g.n), pg_catalog.array_agg(g.n::integer ORDER BY g.n)
      FROM (SELECT e.n, e.value,
                   coalesce(office._home(office._partition(w.workspace_id)), 0) AS part
              FROM pg_catalog.jsonb_array_elements(requests) WITH ORDINALITY AS e(value, n)
              LEFT JOIN office._workspaces_of('agent', v_agents) AS w
                ON pg_catalog.jsonb_typeof(e.value -> agent_key) = 'string'
               AND w.entity_id = e.value ->> agent_key) AS g
     GROUP BY g.part
     ORDER BY pg_catalog.min(g.n);
END
$$;
COMMENT ON FUNCTION office._split_requests(jsonb, text) IS
    'Internal: the elements of a bulk call grouped by the shard (lowest partition) of their agent''s workspace, partition 0 for an agent no shard knows, with their ordinalities; groups in the order of their first element.';

-- Generated by controlplane/scaleout/proxy.py from a shard's catalog: do not edit.

CREATE TYPE office.agent_profiles AS (
    id text,
    workspace_id text,
    name text,
    status text,
    created_at timestamp with time zone,
    updated_at timestamp with time zone
);
CREATE TYPE office.assign_result AS (
    assignment_generation bigint,
    interrupt boolean,
    outcome text,
    dedup_kind text,
    run_id text
);
CREATE TYPE office.dispatch_routine_result AS (
    routine_run_id text,
    status text,
    linked_task_id text,
    coalesced_into_run_id text,
    wakeup_request_id text,
    wakeup_outcome text,
    run_id text,
    idempotency_key text,
    error_message text,
    workspace_id text
);
CREATE TYPE office.enqueue_result AS (
    outcome text,
    dedup_kind text,
    run_id text
);
CREATE TYPE office.events AS (
    id bigint,
    topic text,
    task_id text,
    payload jsonb,
    created_at timestamp with time zone,
    processed_at timestamp with time zone,
    claimed_by text,
    claimed_at timestamp with time zone,
    visible_at timestamp with time zone,
    deliveries integer
);
CREATE TYPE office.parent_child_wake_receipts AS (
    parent_task_id text,
    child_set_key text,
    delivered_run_id text,
    delivery_operation_id text,
    delivered_at timestamp with time zone,
    child_generation text
);
CREATE TYPE office.reconcile_result AS (
    parent_task_id text,
    delivered boolean,
    operation_id text,
    outcome text,
    dedup_kind text,
    run_id text,
    skipped_reason text
);
CREATE TYPE office.routine_runs AS (
    id text,
    routine_id text,
    trigger_id text,
    source text,
    status text,
    trigger_payload jsonb,
    linked_task_id text,
    coalesced_into_run_id text,
    dispatch_fingerprint text,
    started_at timestamp with time zone,
    completed_at timestamp with time zone,
    created_at timestamp with time zone,
    wakeup_request_id text,
    error_message text,
    catch_up_missed_ticks integer,
    catch_up_first_missed_at timestamp with time zone,
    catch_up_truncated boolean
);
CREATE TYPE office.routine_tick_result AS (
    claimed boolean,
    routine_run_id text,
    status text,
    linked_task_id text,
    coalesced_into_run_id text,
    wakeup_request_id text,
    wakeup_outcome text,
    run_id text,
    idempotency_key text,
    error_message text,
    workspace_id text,
    error_sqlstate text
);
CREATE TYPE office.routine_triggers AS (
    id text,
    routine_id text,
    kind text,
    cron_expression text,
    timezone text,
    next_run_at timestamp with time zone,
    last_fired_at timestamp with time zone,
    enabled boolean,
    created_at timestamp with time zone,
    updated_at timestamp with time zone
);
CREATE TYPE office.routines AS (
    id text,
    workspace_id text,
    name text,
    task_template jsonb,
    assignee_agent_profile_id text,
    concurrency_policy text,
    catch_up_policy text,
    catch_up_max integer,
    variables jsonb,
    status text,
    last_run_at timestamp with time zone,
    created_at timestamp with time zone,
    updated_at timestamp with time zone
);
CREATE TYPE office.runs AS (
    id text,
    agent_profile_id text,
    reason text,
    payload jsonb,
    status text,
    coalesced_count integer,
    idempotency_key text,
    task_id text,
    context_snapshot jsonb,
    attempt integer,
    claimed_by text,
    retry_count integer,
    scheduled_retry_at timestamp with time zone,
    error_message text,
    cancel_reason text,
    requested_at timestamp with time zone,
    claimed_at timestamp with time zone,
    finished_at timestamp with time zone,
    entry_triggered boolean,
    heartbeat_at timestamp with time zone,
    origin text,
    cause_run_id text,
    chain_depth integer,
    priority integer,
    cost numeric
);
CREATE TYPE office.task_result AS (
    task_id text,
    assignment_generation bigint,
    outcome text,
    dedup_kind text,
    run_id text
);
CREATE TYPE office.tasks AS (
    id text,
    workspace_id text,
    parent_id text,
    workflow_step_id text,
    title text,
    state text,
    assignee_agent_profile_id text,
    assignment_generation bigint,
    is_office boolean,
    is_ephemeral boolean,
    archived_at timestamp with time zone,
    created_at timestamp with time zone,
    updated_at timestamp with time zone
);
CREATE TYPE office.wake_policies AS (
    scope text,
    scope_id text,
    cooldown interval,
    max_runs integer,
    per interval,
    budget numeric,
    budget_period text,
    max_retries integer,
    retry_backoff interval[],
    updated_at timestamp with time zone
);
CREATE TYPE office.wakeup_dispatch_result AS (
    status text,
    run_id text
);
CREATE TYPE office.wakeup_requests AS (
    id text,
    agent_profile_id text,
    source text,
    reason text,
    payload jsonb,
    status text,
    coalesced_count integer,
    idempotency_key text,
    run_id text,
    requested_at timestamp with time zone,
    claimed_at timestamp with time zone,
    finished_at timestamp with time zone
);
CREATE TYPE office.wakeup_result AS (
    outcome text,
    dedup_kind text,
    wakeup_request_id text
);

CREATE FUNCTION office._ev_ack_events(_part integer, _parts integer, _home integer, _a1 bigint[]) RETURNS integer
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.ack_events(CASE WHEN $4 IS NOT NULL THEN ARRAY(
        SELECT e.id FROM office.events e LEFT JOIN office.tasks t ON t.id = e.task_id
         WHERE e.id = ANY ($4) AND coalesce(pg_catalog.hashtext(t.workspace_id) & ($2 - 1), $3) = $1) END) AS ack_events;
$$;
COMMENT ON FUNCTION office._ev_ack_events(integer, integer, integer, bigint[]) IS
    'Internal: office.ack_events on the shard of partition _part (ev).';
REVOKE EXECUTE ON FUNCTION office._ev_ack_events(integer, integer, integer, bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._ev_ack_events(integer, integer, integer, bigint[]) TO office_admin, office_worker;
CREATE FUNCTION office.ack_events(ids bigint[]) RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(pg_catalog.sum(office._ev_ack_events(g.part, office._partitions(), office._home(g.part), g.local_ids)), 0)::integer
      FROM office._event_groups($1) g
$fn$;
COMMENT ON FUNCTION office.ack_events(ids bigint[]) IS
    'Marks the events processed; returns how many were acknowledged now (unknown or already processed ids do not count).';
REVOKE EXECUTE ON FUNCTION office.ack_events(ids bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.ack_events(ids bigint[]) TO office_admin, office_worker;

CREATE FUNCTION office._on_add_blocker(_part integer, _a1 text, _a2 text) RETURNS void
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.add_blocker($2, $3) AS add_blocker;
$$;
COMMENT ON FUNCTION office._on_add_blocker(integer, text, text) IS
    'Internal: office.add_blocker on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_add_blocker(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_add_blocker(integer, text, text) TO office_admin, office_producer;
CREATE FUNCTION office.add_blocker(task_id text, blocker_task_id text) RETURNS void
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_add_blocker(office._checked_partition(office._workspace_of('task', $1), ARRAY['task', $2, 'OFW01']), $1, $2)
$fn$;
COMMENT ON FUNCTION office.add_blocker(task_id text, blocker_task_id text) IS
    'blocker_task_id now blocks task_id. Self-block or an edge closing a cycle (any length) 22023, unknown task OFT01, tasks of two workspaces OFW01, an existing edge is a no-op.';
REVOKE EXECUTE ON FUNCTION office.add_blocker(task_id text, blocker_task_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.add_blocker(task_id text, blocker_task_id text) TO office_admin, office_producer;

CREATE FUNCTION office._on_add_routine_trigger(_part integer, _a1 text, _a2 text, _a3 text, _a4 timestamp with time zone, _a5 text) RETURNS office.routine_triggers
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.add_routine_trigger($2, $3, $4, $5, $6);
$$;
COMMENT ON FUNCTION office._on_add_routine_trigger(integer, text, text, text, timestamp with time zone, text) IS
    'Internal: office.add_routine_trigger on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_add_routine_trigger(integer, text, text, text, timestamp with time zone, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_add_routine_trigger(integer, text, text, text, timestamp with time zone, text) TO office_admin, office_producer;
CREATE FUNCTION office.add_routine_trigger(routine_id text, cron_expression text, timezone text DEFAULT 'UTC'::text, next_run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, id text DEFAULT NULL::text) RETURNS office.routine_triggers
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_add_routine_trigger(office._route('routine', $1), $1, $2, $3, $4, $5)
$fn$;
COMMENT ON FUNCTION office.add_routine_trigger(routine_id text, cron_expression text, timezone text, next_run_at timestamp with time zone, id text) IS
    'Adds an enabled cron trigger to a routine (NULL id: generated). next_run_at is the first tick to claim; NULL leaves the trigger to be armed by the cron loop (controlplane.daemon.cron, which fires its ticks with office.fire_routine_tick). Invalid cron expression (or one over 200 characters) or time zone, a next_run_at outside 1970-01-01 .. 9999-12-31 22023 naming it; an explicit id that exists 23505; unknown routine OFR01.';
REVOKE EXECUTE ON FUNCTION office.add_routine_trigger(routine_id text, cron_expression text, timezone text, next_run_at timestamp with time zone, id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.add_routine_trigger(routine_id text, cron_expression text, timezone text, next_run_at timestamp with time zone, id text) TO office_admin, office_producer;

CREATE FUNCTION office._on_archive_task(_part integer, _a1 text) RETURNS office.tasks
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.archive_task($2);
$$;
COMMENT ON FUNCTION office._on_archive_task(integer, text) IS
    'Internal: office.archive_task on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_archive_task(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_archive_task(integer, text) TO office_admin, office_producer;
CREATE FUNCTION office.archive_task(task_id text) RETURNS office.tasks
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_archive_task(office._route('task', $1), $1)
$fn$;
COMMENT ON FUNCTION office.archive_task(task_id text) IS
    'Sets archived_at (kept when already archived). Unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.archive_task(task_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.archive_task(task_id text) TO office_admin, office_producer;

CREATE FUNCTION office._on_assign_task(_part integer, _a1 text, _a2 text, _a3 text, _a4 text) RETURNS office.assign_result
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.assign_task($2, $3, $4, $5);
$$;
COMMENT ON FUNCTION office._on_assign_task(integer, text, text, text, text) IS
    'Internal: office.assign_task on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_assign_task(integer, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_assign_task(integer, text, text, text, text) TO office_admin, office_producer;
CREATE FUNCTION office.assign_task(task_id text, assignee_agent_profile_id text, actor_id text DEFAULT NULL::text, actor_type text DEFAULT 'user'::text) RETURNS office.assign_result
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_assign_task(office._checked_partition(coalesce(office._workspace_of('task', $1), office._workspace_of('agent', $2)), ARRAY['agent', $2, 'OFW01']), $1, $2, $3, $4)
$fn$;
COMMENT ON FUNCTION office.assign_task(task_id text, assignee_agent_profile_id text, actor_id text, actor_type text) IS
    'Writes the assignee (NULL or '''' unassigns): the generation goes up by one and the value this call committed is returned; interrupt when a different, non-empty assignee is replaced; an Office task with an assignee gets a task_assigned run keyed assignment_key(task, assignee, generation) (skipped when the agent does not accept runs). Unknown task OFT01, unknown agent OFA01, an agent of another workspace OFW01, bad actor_type or an actor_id over 200 characters 22023.';
REVOKE EXECUTE ON FUNCTION office.assign_task(task_id text, assignee_agent_profile_id text, actor_id text, actor_type text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.assign_task(task_id text, assignee_agent_profile_id text, actor_id text, actor_type text) TO office_admin, office_producer;

CREATE FUNCTION office.assignment_key(task_id text, agent_profile_id text, generation bigint)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE STRICT
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
COMMENT ON FUNCTION office.assignment_key(task_id text, agent_profile_id text, generation bigint) IS
    'Run key of an assignment occurrence: task_assigned:<task_id>:<agent_profile_id>:<generation> (docs/domain.md §3.1). NULL in, NULL out; empty id or negative generation is 22023.';
REVOKE EXECUTE ON FUNCTION office.assignment_key(task_id text, agent_profile_id text, generation bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.assignment_key(task_id text, agent_profile_id text, generation bigint) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office.blocker_digest(blocker_ids text[])
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE STRICT
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
COMMENT ON FUNCTION office.blocker_digest(blocker_ids text[]) IS
    'Lowercase hex SHA-256 of the blocker ids sorted bytewise (COLLATE "C") and joined with "," (docs/domain.md §3.2). An empty array is the digest of the empty string; an empty or NULL element is 22023.';
REVOKE EXECUTE ON FUNCTION office.blocker_digest(blocker_ids text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.blocker_digest(blocker_ids text[]) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office.blockers_resolved_key(blocked_task_id text, blocker_ids text[])
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE STRICT
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF blocked_task_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('office.blockers_resolved_key: blocked_task_id must not be empty (got %L)',
                             blocked_task_id);
    END IF;
    RETURN 'blockers_resolved:' || blocked_task_id || ':' || office.blocker_digest(blocker_ids);
END
$function$;
COMMENT ON FUNCTION office.blockers_resolved_key(blocked_task_id text, blocker_ids text[]) IS
    'Engine operation id of a blockers-resolved wave: blockers_resolved:<blocked_task_id>:<blocker_digest(blocker_ids)> (docs/domain.md §3.3).';
REVOKE EXECUTE ON FUNCTION office.blockers_resolved_key(blocked_task_id text, blocker_ids text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.blockers_resolved_key(blocked_task_id text, blocker_ids text[]) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office._on_cancel_run(_part integer, _a1 text, _a2 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.cancel_run($2, $3) AS cancel_run;
$$;
COMMENT ON FUNCTION office._on_cancel_run(integer, text, text) IS
    'Internal: office.cancel_run on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_cancel_run(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_cancel_run(integer, text, text) TO office_admin, office_worker;
CREATE FUNCTION office.cancel_run(run_id text, reason text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_cancel_run(office._route('run', $1), $1, $2)
$fn$;
COMMENT ON FUNCTION office.cancel_run(run_id text, reason text) IS
    'queued|claimed -> cancelled with cancel_reason; a finished, failed or cancelled run is untouched (false). reason over 64 KiB 22023.';
REVOKE EXECUTE ON FUNCTION office.cancel_run(run_id text, reason text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.cancel_run(run_id text, reason text) TO office_admin, office_worker;

CREATE FUNCTION office._all_cancel_runs(_part integer, _a1 text[], _a2 text) RETURNS SETOF integer
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT office.cancel_runs($2, $3) AS cancel_runs;
$$;
COMMENT ON FUNCTION office._all_cancel_runs(integer, text[], text) IS
    'Internal: office.cancel_runs on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_cancel_runs(integer, text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_cancel_runs(integer, text[], text) TO office_admin;
CREATE FUNCTION office.cancel_runs(run_ids text[], reason text) RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(pg_catalog.sum(n), 0)::integer FROM office._all_cancel_runs(0, $1, $2) AS n
$fn$;
COMMENT ON FUNCTION office.cancel_runs(run_ids text[], reason text) IS
    'cancel_run for each of run_ids in one statement, the runs locked in id order: queued|claimed -> cancelled with cancel_reason; returns the number cancelled (unknown ids and other statuses are skipped). More than 10,000 ids, reason over 64 KiB 22023 (since 0.5.0).';
REVOKE EXECUTE ON FUNCTION office.cancel_runs(run_ids text[], reason text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.cancel_runs(run_ids text[], reason text) TO office_admin;

CREATE FUNCTION office._on_child_generation(_part integer, _a1 text) RETURNS text
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.child_generation($2) AS child_generation;
$$;
COMMENT ON FUNCTION office._on_child_generation(integer, text) IS
    'Internal: office.child_generation on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_child_generation(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_child_generation(integer, text) TO office_admin, office_reader;
CREATE FUNCTION office.child_generation(parent_task_id text) RETURNS text
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_child_generation(office._route('task', $1), $1)
$fn$;
COMMENT ON FUNCTION office.child_generation(parent_task_id text) IS
    'second_precision_text(max(updated_at)) over the non-archived children of the parent (UTC); '''' if none (docs/domain.md §2.19).';
REVOKE EXECUTE ON FUNCTION office.child_generation(parent_task_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.child_generation(parent_task_id text) TO office_admin, office_reader;

CREATE FUNCTION office._on_child_set_key(_part integer, _a1 text) RETURNS text
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.child_set_key($2) AS child_set_key;
$$;
COMMENT ON FUNCTION office._on_child_set_key(integer, text) IS
    'Internal: office.child_set_key on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_child_set_key(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_child_set_key(integer, text) TO office_admin, office_reader;
CREATE FUNCTION office.child_set_key(parent_task_id text) RETURNS text
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_child_set_key(office._route('task', $1), $1)
$fn$;
COMMENT ON FUNCTION office.child_set_key(parent_task_id text) IS
    'id:STATE of the non-archived children of the parent, ordered by id (bytewise), joined with ","; '''' if none (docs/domain.md §3.4).';
REVOKE EXECUTE ON FUNCTION office.child_set_key(parent_task_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.child_set_key(parent_task_id text) TO office_admin, office_reader;

CREATE FUNCTION office._ev_claim_events(_part integer, _parts integer, _home integer, _a1 text, _a2 integer, _a3 interval) RETURNS SETOF office.events
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT e.id * $2 + coalesce(pg_catalog.hashtext(t.workspace_id) & ($2 - 1), $3) AS id, e.topic, e.task_id, e.payload, e.created_at, e.processed_at, e.claimed_by, e.claimed_at, e.visible_at, e.deliveries
      FROM office.claim_events($4, $5, $6) e
      LEFT JOIN office.tasks t ON t.id = e.task_id;
$$;
COMMENT ON FUNCTION office._ev_claim_events(integer, integer, integer, text, integer, interval) IS
    'Internal: office.claim_events on the shard of partition _part (ev).';
REVOKE EXECUTE ON FUNCTION office._ev_claim_events(integer, integer, integer, text, integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._ev_claim_events(integer, integer, integer, text, integer, interval) TO office_admin, office_worker;
CREATE FUNCTION office.claim_events(consumer text, max_rows integer DEFAULT 100, visibility interval DEFAULT '00:00:30'::interval) RETURNS SETOF office.events
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    v_left integer := $2;
    v_n integer;
BEGIN
    IF v_left IS NULL OR v_left < 1 THEN  -- the shard's own answer (22023, or none)
        RETURN QUERY SELECT * FROM office._ev_claim_events(0, office._partitions(), 0, $1, $2, $3);
        RETURN;
    END IF;
    FOR s IN SELECT * FROM office._shards() ORDER BY pg_catalog.random() LOOP
        EXIT WHEN v_left = 0;
        BEGIN
            RETURN QUERY SELECT * FROM office._ev_claim_events(s.part, office._partitions(), s.part, $1, v_left, $3);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_left := v_left - v_n;
        EXCEPTION WHEN OTHERS THEN
            IF NOT office._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
            RAISE WARNING 'office_proxy: shard % skipped: %',
                office._shard_name(s.shard), SQLERRM;
        END;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION office.claim_events(consumer text, max_rows integer, visibility interval) IS
    'Claims up to max_rows pending events, oldest first, for consumer (recorded for diagnosis), hiding them from other claimers for visibility; never waits for and never shares an event with a concurrent claimer. An event not acknowledged in time is claimable again; one set aside (office.poison, loop subscriber) is not, until it is released.';
REVOKE EXECUTE ON FUNCTION office.claim_events(consumer text, max_rows integer, visibility interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.claim_events(consumer text, max_rows integer, visibility interval) TO office_admin, office_worker;

CREATE FUNCTION office._on_claim_routine_tick(_part integer, _a1 text, _a2 timestamp with time zone, _a3 timestamp with time zone) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.claim_routine_tick($2, $3, $4) AS claim_routine_tick;
$$;
COMMENT ON FUNCTION office._on_claim_routine_tick(integer, text, timestamp with time zone, timestamp with time zone) IS
    'Internal: office.claim_routine_tick on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_claim_routine_tick(integer, text, timestamp with time zone, timestamp with time zone) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_claim_routine_tick(integer, text, timestamp with time zone, timestamp with time zone) TO office_admin, office_producer, office_worker;
CREATE FUNCTION office.claim_routine_tick(trigger_id text, observed_next_run_at timestamp with time zone, following_next_run_at timestamp with time zone) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_claim_routine_tick(office._route('trigger', $1), $1, $2, $3)
$fn$;
COMMENT ON FUNCTION office.claim_routine_tick(trigger_id text, observed_next_run_at timestamp with time zone, following_next_run_at timestamp with time zone) IS
    'Compare-and-swap on next_run_at: if the enabled trigger''s next_run_at is still observed_next_run_at, advance it to following_next_run_at (stamping last_fired_at) and return true; of N concurrent claimers of one tick exactly one wins. Observed NULL arms an unarmed trigger. A NULL following tick, one not later than the observed one, or a time outside 1970-01-01 .. 9999-12-31 22023; unknown trigger OFR01.';
REVOKE EXECUTE ON FUNCTION office.claim_routine_tick(trigger_id text, observed_next_run_at timestamp with time zone, following_next_run_at timestamp with time zone) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.claim_routine_tick(trigger_id text, observed_next_run_at timestamp with time zone, following_next_run_at timestamp with time zone) TO office_admin, office_producer, office_worker;

CREATE FUNCTION office._on_claim_run(_part integer, _a1 text, _a2 text) RETURNS SETOF office.runs
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.claim_run($2, $3);
$$;
COMMENT ON FUNCTION office._on_claim_run(integer, text, text) IS
    'Internal: office.claim_run on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_claim_run(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_claim_run(integer, text, text) TO office_admin, office_worker;
CREATE FUNCTION office.claim_run(worker_id text DEFAULT NULL::text, agent_profile_id text DEFAULT NULL::text) RETURNS SETOF office.runs
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
BEGIN
    IF $2 IS NOT NULL THEN
        RETURN QUERY SELECT * FROM office._on_claim_run(office._route('agent', $2), $1, $2);
        RETURN;
    END IF;
    FOR s IN SELECT * FROM office._shards() ORDER BY pg_catalog.random() LOOP
        BEGIN
            RETURN QUERY SELECT * FROM office._on_claim_run(s.part, $1, $2);
            IF FOUND THEN RETURN; END IF;
        EXCEPTION WHEN OTHERS THEN
            IF NOT office._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
            RAISE WARNING 'office_proxy: shard % skipped: %',
                office._shard_name(s.shard), SQLERRM;
        END;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION office.claim_run(worker_id text, agent_profile_id text) IS
    'Claims the first due queued run in claim order, priority DESC then the oldest (optionally of one agent), whose agent accepts runs, has no claimed run and is not held by a wake policy (a reached budget, its own or its workspace''s; for a run not of origin human a cooldown or run cap): status claimed, claimed_at and heartbeat_at now, attempt + 1. 0 or 1 row; never waits for or fails because of another claimer; its cost does not grow with the backlog of agents holding a claim, and a call that skipped 1000 listed agents without finding a run returns none (the next goes on past them). worker_id over 200 characters or with a control character 22023.';
REVOKE EXECUTE ON FUNCTION office.claim_run(worker_id text, agent_profile_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.claim_run(worker_id text, agent_profile_id text) TO office_admin, office_worker;

CREATE FUNCTION office._on_clear_wake_policy(_part integer, _a1 text, _a2 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.clear_wake_policy($2, $3) AS clear_wake_policy;
$$;
COMMENT ON FUNCTION office._on_clear_wake_policy(integer, text, text) IS
    'Internal: office.clear_wake_policy on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_clear_wake_policy(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_clear_wake_policy(integer, text, text) TO office_admin;
CREATE FUNCTION office.clear_wake_policy(scope text, scope_id text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_clear_wake_policy(CASE $1 WHEN 'agent' THEN office._route('agent', $2) WHEN 'workspace' THEN coalesce(office._partition($2), 0) ELSE 0 END, $1, $2)
$fn$;
COMMENT ON FUNCTION office.clear_wake_policy(scope text, scope_id text) IS
    'Deletes the wake policy of an agent or a workspace; true if there was one. Where it had a budget, cooldown or run cap, the scope''s agents with queued runs are listed again for claim_run (a hold it kept is lifted).';
REVOKE EXECUTE ON FUNCTION office.clear_wake_policy(scope text, scope_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.clear_wake_policy(scope text, scope_id text) TO office_admin;

CREATE FUNCTION office._on_close_routine_run(_part integer, _a1 text, _a2 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.close_routine_run($2, $3) AS close_routine_run;
$$;
COMMENT ON FUNCTION office._on_close_routine_run(integer, text, text) IS
    'Internal: office.close_routine_run on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_close_routine_run(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_close_routine_run(integer, text, text) TO office_admin, office_producer, office_worker;
CREATE FUNCTION office.close_routine_run(routine_run_id text, terminal text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_close_routine_run(office._route('routine_run', $1), $1, $2)
$fn$;
COMMENT ON FUNCTION office.close_routine_run(routine_run_id text, terminal text) IS
    'The conditional close: terminal done|failed|missing (-> failed)|cancelled sets the status and completed_at only while the run is task_created; true if this call closed it. Unknown terminal 22023, unknown run OFR01.';
REVOKE EXECUTE ON FUNCTION office.close_routine_run(routine_run_id text, terminal text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.close_routine_run(routine_run_id text, terminal text) TO office_admin, office_producer, office_worker;

CREATE FUNCTION office.comment_key(comment_id text, agent_profile_id text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE STRICT
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
COMMENT ON FUNCTION office.comment_key(comment_id text, agent_profile_id text) IS
    'Run key of a comment''s wake of an agent: task_comment:<comment_id>:<agent_profile_id>; a run with such a key never coalesces (docs/api.md §3). NULL in, NULL out; an empty id is 22023.';
REVOKE EXECUTE ON FUNCTION office.comment_key(comment_id text, agent_profile_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.comment_key(comment_id text, agent_profile_id text) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office._on_create_routine(_part integer, _a1 text, _a2 text, _a3 jsonb, _a4 text, _a5 text, _a6 jsonb, _a7 text, _a8 text, _a9 integer) RETURNS office.routines
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.create_routine($2, $3, $4, $5, $6, $7, $8, $9, $10);
$$;
COMMENT ON FUNCTION office._on_create_routine(integer, text, text, jsonb, text, text, jsonb, text, text, integer) IS
    'Internal: office.create_routine on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_create_routine(integer, text, text, jsonb, text, text, jsonb, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_create_routine(integer, text, text, jsonb, text, text, jsonb, text, text, integer) TO office_admin, office_producer;
CREATE FUNCTION office.create_routine(workspace_id text, name text, task_template jsonb DEFAULT '{}'::jsonb, assignee_agent_profile_id text DEFAULT NULL::text, concurrency_policy text DEFAULT 'skip_if_active'::text, variables jsonb DEFAULT '{}'::jsonb, id text DEFAULT NULL::text, catch_up_policy text DEFAULT 'enqueue_missed_with_cap'::text, catch_up_max integer DEFAULT 25) RETURNS office.routines
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_create_routine(office._checked_partition($1, ARRAY['routine', $7, '23505', 'agent', $4, 'OFW01']), $1, $2, $3, $4, $5, $6, $7, $8, $9)
$fn$;
COMMENT ON FUNCTION office.create_routine(workspace_id text, name text, task_template jsonb, assignee_agent_profile_id text, concurrency_policy text, variables jsonb, id text, catch_up_policy text, catch_up_max integer) IS
    'Creates an active routine (NULL id: generated). A template {"title", "description"} with a non-empty title makes it heavy (fires create tasks), else lightweight (fires wake the assignee); variables declares {name: {"default": value}}. Unknown policy, bad id/template/variables, a name, title or description over 64 KiB, a template or variables over 1 MiB 22023; an explicit id that exists 23505; unknown assignee OFA01, an assignee of another workspace OFW01.';
REVOKE EXECUTE ON FUNCTION office.create_routine(workspace_id text, name text, task_template jsonb, assignee_agent_profile_id text, concurrency_policy text, variables jsonb, id text, catch_up_policy text, catch_up_max integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.create_routine(workspace_id text, name text, task_template jsonb, assignee_agent_profile_id text, concurrency_policy text, variables jsonb, id text, catch_up_policy text, catch_up_max integer) TO office_admin, office_producer;

CREATE FUNCTION office._on_create_task(_part integer, _a1 text, _a2 text, _a3 text, _a4 text, _a5 text, _a6 text, _a7 text, _a8 boolean, _a9 boolean) RETURNS office.task_result
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.create_task($2, $3, $4, $5, $6, $7, $8, $9, $10);
$$;
COMMENT ON FUNCTION office._on_create_task(integer, text, text, text, text, text, text, text, boolean, boolean) IS
    'Internal: office.create_task on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_create_task(integer, text, text, text, text, text, text, text, boolean, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_create_task(integer, text, text, text, text, text, text, text, boolean, boolean) TO office_admin, office_producer;
CREATE FUNCTION office.create_task(workspace_id text, id text DEFAULT NULL::text, title text DEFAULT ''::text, parent_id text DEFAULT NULL::text, workflow_step_id text DEFAULT NULL::text, assignee_agent_profile_id text DEFAULT NULL::text, state text DEFAULT 'TODO'::text, is_office boolean DEFAULT true, is_ephemeral boolean DEFAULT false) RETURNS office.task_result
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_create_task(office._checked_partition($1, ARRAY['task', $2, '23505', 'task', $4, 'OFW01', 'agent', $6, 'OFW01']), $1, $2, $3, $4, $5, $6, $7, $8, $9)
$fn$;
COMMENT ON FUNCTION office.create_task(workspace_id text, id text, title text, parent_id text, workflow_step_id text, assignee_agent_profile_id text, state text, is_office boolean, is_ephemeral boolean) IS
    'Creates a task (NULL id: generated). Generation 1 when assignee and step are both set, else 0; an Office task with an assignee gets a task_assigned run keyed assignment_key(task, assignee, generation) (skipped when the agent does not accept runs). Bad id/workspace/state, a title over 64 KiB or a workflow_step_id over 200 characters 22023, an explicit id that exists 23505, unknown parent OFT01, unknown assignee OFA01, a parent or assignee of another workspace OFW01. A task created terminal runs no terminal effects.';
REVOKE EXECUTE ON FUNCTION office.create_task(workspace_id text, id text, title text, parent_id text, workflow_step_id text, assignee_agent_profile_id text, state text, is_office boolean, is_ephemeral boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.create_task(workspace_id text, id text, title text, parent_id text, workflow_step_id text, assignee_agent_profile_id text, state text, is_office boolean, is_ephemeral boolean) TO office_admin, office_producer;

CREATE FUNCTION office._all_daemon_stats(_part integer) RETURNS TABLE(pending_events bigint, oldest_pending_event_at timestamp with time zone, outbox_lag_seconds double precision, queued_wakeups bigint, due_triggers bigint, claimed_runs bigint, oldest_claimed_at timestamp with time zone, oldest_claim_age_seconds double precision, poison_rows bigint, poison_by_loop jsonb)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.daemon_stats();
$$;
COMMENT ON FUNCTION office._all_daemon_stats(integer) IS
    'Internal: office.daemon_stats on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_daemon_stats(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_daemon_stats(integer) TO office_admin, office_reader, office_worker;
CREATE FUNCTION office.daemon_stats() RETURNS TABLE(pending_events bigint, oldest_pending_event_at timestamp with time zone, outbox_lag_seconds double precision, queued_wakeups bigint, due_triggers bigint, claimed_runs bigint, oldest_claimed_at timestamp with time zone, oldest_claim_age_seconds double precision, poison_rows bigint, poison_by_loop jsonb)
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN pg_catalog.count(*) = pg_catalog.count(pending_events) THEN pg_catalog.sum(pending_events)::bigint END AS pending_events,
           pg_catalog.min(oldest_pending_event_at) AS oldest_pending_event_at,
           pg_catalog.max(outbox_lag_seconds) AS outbox_lag_seconds,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(queued_wakeups) THEN pg_catalog.sum(queued_wakeups)::bigint END AS queued_wakeups,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(due_triggers) THEN pg_catalog.sum(due_triggers)::bigint END AS due_triggers,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(claimed_runs) THEN pg_catalog.sum(claimed_runs)::bigint END AS claimed_runs,
           pg_catalog.min(oldest_claimed_at) AS oldest_claimed_at,
           pg_catalog.max(oldest_claim_age_seconds) AS oldest_claim_age_seconds,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(poison_rows) THEN pg_catalog.sum(poison_rows)::bigint END AS poison_rows,
           office._jsonb_sum(poison_by_loop) AS poison_by_loop
      FROM office._all_daemon_stats(0) WITH ORDINALITY AS r(pending_events, oldest_pending_event_at, outbox_lag_seconds, queued_wakeups, due_triggers, claimed_runs, oldest_claimed_at, oldest_claim_age_seconds, poison_rows, poison_by_loop, _n)
$fn$;
COMMENT ON FUNCTION office.daemon_stats() IS
    'Gauges of the control plane: unacknowledged events, when the oldest was written and its age in seconds (the outbox lag, 0 when none), queued wakeup requests, cron triggers due now, claimed runs, the oldest claim and its age in seconds (0 when none), and the rows set aside (office.poison): in all and by loop. Set-aside events, wakeups and triggers are not counted as pending, queued or due.';
REVOKE EXECUTE ON FUNCTION office.daemon_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.daemon_stats() TO office_admin, office_reader, office_worker;

CREATE FUNCTION office._on_dispatch_queued_wakeups(_part integer, _a1 integer, _a2 interval) RETURNS TABLE(wakeup_request_id text, agent_profile_id text, status text, run_id text, error_message text)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.dispatch_queued_wakeups($2, $3);
$$;
COMMENT ON FUNCTION office._on_dispatch_queued_wakeups(integer, integer, interval) IS
    'Internal: office.dispatch_queued_wakeups on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_dispatch_queued_wakeups(integer, integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_dispatch_queued_wakeups(integer, integer, interval) TO office_admin, office_worker;
CREATE FUNCTION office.dispatch_queued_wakeups(max_rows integer DEFAULT 50, min_age interval DEFAULT '00:00:00'::interval) RETURNS TABLE(wakeup_request_id text, agent_profile_id text, status text, run_id text, error_message text)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    v_left integer := $1;
    v_n integer;
BEGIN
    IF v_left IS NULL OR v_left < 1 THEN  -- the shard's own answer (22023, or none)
        RETURN QUERY SELECT * FROM office._on_dispatch_queued_wakeups(0, $1, $2);
        RETURN;
    END IF;
    FOR s IN SELECT * FROM office._shards() ORDER BY pg_catalog.random() LOOP
        EXIT WHEN v_left = 0;
        BEGIN
            RETURN QUERY SELECT * FROM office._on_dispatch_queued_wakeups(s.part, v_left, $2);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_left := v_left - v_n;
        EXCEPTION WHEN OTHERS THEN
            IF NOT office._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
            RAISE WARNING 'office_proxy: shard % skipped: %',
                office._shard_name(s.shard), SQLERRM;
        END;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION office.dispatch_queued_wakeups(max_rows integer, min_age interval) IS
    'The wakeup loop''s step: dispatch_wakeup for the oldest max_rows queued requests at least min_age old, dispatched in agent order (so two dispatchers never deadlock), skipping requests another transaction holds, requests set aside (office.poison) and agents that do not accept runs; a request whose agent is gone is failed (agent not found). One row per request: its status after the call (claimed, coalesced, skipped, noop, failed; queued when the dispatch raised because of the agent or a transient failure, set_aside when it raised for any other reason, both with error_message). max_rows below 1, negative min_age: 22023.';
REVOKE EXECUTE ON FUNCTION office.dispatch_queued_wakeups(max_rows integer, min_age interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.dispatch_queued_wakeups(max_rows integer, min_age interval) TO office_admin, office_worker;

CREATE FUNCTION office._on_dispatch_routine(_part integer, _a1 text, _a2 text, _a3 jsonb, _a4 text, _a5 timestamp with time zone, _a6 text, _a7 integer, _a8 timestamp with time zone, _a9 boolean) RETURNS office.dispatch_routine_result
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.dispatch_routine($2, $3, $4, $5, $6, $7, $8, $9, $10);
$$;
COMMENT ON FUNCTION office._on_dispatch_routine(integer, text, text, jsonb, text, timestamp with time zone, text, integer, timestamp with time zone, boolean) IS
    'Internal: office.dispatch_routine on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_dispatch_routine(integer, text, text, jsonb, text, timestamp with time zone, text, integer, timestamp with time zone, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_dispatch_routine(integer, text, text, jsonb, text, timestamp with time zone, text, integer, timestamp with time zone, boolean) TO office_admin, office_producer, office_worker;
CREATE FUNCTION office.dispatch_routine(routine_id text, source text, variables jsonb DEFAULT '{}'::jsonb, trigger_id text DEFAULT NULL::text, claimed_tick timestamp with time zone DEFAULT NULL::timestamp with time zone, explicit_key text DEFAULT NULL::text, missed_ticks integer DEFAULT NULL::integer, missed_since timestamp with time zone DEFAULT NULL::timestamp with time zone, missed_truncated boolean DEFAULT NULL::boolean) RETURNS office.dispatch_routine_result
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_dispatch_routine(office._route('routine', $1), $1, $2, $3, $4, $5, $6, $7, $8, $9)
$fn$;
COMMENT ON FUNCTION office.dispatch_routine(routine_id text, source text, variables jsonb, trigger_id text, claimed_tick timestamp with time zone, explicit_key text, missed_ticks integer, missed_since timestamp with time zone, missed_truncated boolean) IS
    'Fires a routine: a received run with the fingerprint of the rendered template, last_run_at touched, the policy (skip/coalesce gate with self-heal, heavy routines), then a task (task_created) or a wakeup keyed routine_key(...) and its dispatch (done; already requested: done; dispatch failure: the wakeup and the run failed, returned, not raised). Unknown source, undeclared variable, unfilled placeholder, routine not active, variables over 1 MiB, a rendered title or description over 64 KiB, a time outside 1970-01-01 .. 9999-12-31 22023; unknown routine or trigger OFR01.';
REVOKE EXECUTE ON FUNCTION office.dispatch_routine(routine_id text, source text, variables jsonb, trigger_id text, claimed_tick timestamp with time zone, explicit_key text, missed_ticks integer, missed_since timestamp with time zone, missed_truncated boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.dispatch_routine(routine_id text, source text, variables jsonb, trigger_id text, claimed_tick timestamp with time zone, explicit_key text, missed_ticks integer, missed_since timestamp with time zone, missed_truncated boolean) TO office_admin, office_producer, office_worker;

CREATE FUNCTION office._on_dispatch_wakeup(_part integer, _a1 text) RETURNS office.wakeup_dispatch_result
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.dispatch_wakeup($2);
$$;
COMMENT ON FUNCTION office._on_dispatch_wakeup(integer, text) IS
    'Internal: office.dispatch_wakeup on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_dispatch_wakeup(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_dispatch_wakeup(integer, text) TO office_admin, office_producer, office_worker;
CREATE FUNCTION office.dispatch_wakeup(wakeup_request_id text) RETURNS office.wakeup_dispatch_result
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_dispatch_wakeup(office._route('wakeup', $1), $1)
$fn$;
COMMENT ON FUNCTION office.dispatch_wakeup(wakeup_request_id text) IS
    'Dispatches a queued wakeup request against the agent''s newest queued/claimed run under the policy (source routine: the routine''s; else coalesce): a new run (claimed), coalesced into it (context_snapshot || payload), or skipped (policy:skip_if_active). Not queued: noop. Agent not accepting runs: OFA02, the request stays queued. Unknown request OFR01, unknown agent OFA01.';
REVOKE EXECUTE ON FUNCTION office.dispatch_wakeup(wakeup_request_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.dispatch_wakeup(wakeup_request_id text) TO office_admin, office_producer, office_worker;

CREATE FUNCTION office._all_due_routine_triggers(_part integer, _a1 timestamp with time zone, _a2 integer) RETURNS TABLE(trigger_id text, routine_id text, cron_expression text, timezone text, next_run_at timestamp with time zone, last_fired_at timestamp with time zone, enabled boolean, catch_up_policy text, catch_up_max integer)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.due_routine_triggers($2, $3);
$$;
COMMENT ON FUNCTION office._all_due_routine_triggers(integer, timestamp with time zone, integer) IS
    'Internal: office.due_routine_triggers on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_due_routine_triggers(integer, timestamp with time zone, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_due_routine_triggers(integer, timestamp with time zone, integer) TO office_admin, office_reader, office_worker;
CREATE FUNCTION office.due_routine_triggers(at timestamp with time zone DEFAULT now(), max_rows integer DEFAULT 100) RETURNS TABLE(trigger_id text, routine_id text, cron_expression text, timezone text, next_run_at timestamp with time zone, last_fired_at timestamp with time zone, enabled boolean, catch_up_policy text, catch_up_max integer)
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._all_due_routine_triggers(0, $1, $2) ORDER BY next_run_at NULLS FIRST, trigger_id COLLATE "C" LIMIT CASE WHEN $2 > 0 THEN $2 END
$fn$;
COMMENT ON FUNCTION office.due_routine_triggers(at timestamp with time zone, max_rows integer) IS
    'The cron loop''s scan: enabled cron triggers of active routines that are not armed yet (next_run_at NULL) or due at the given time, and not set aside (office.poison), with their routine''s catch-up policy; unarmed first, then oldest due, at most max_rows. NULL at or one outside 1970-01-01 .. 9999-12-31, max_rows below 1: 22023.';
REVOKE EXECUTE ON FUNCTION office.due_routine_triggers(at timestamp with time zone, max_rows integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.due_routine_triggers(at timestamp with time zone, max_rows integer) TO office_admin, office_reader, office_worker;

CREATE FUNCTION office._on_enqueue_run(_part integer, _a1 text, _a2 text, _a3 jsonb, _a4 text, _a5 text, _a6 boolean, _a7 text, _a8 text, _a9 text, _a10 text, _a11 integer, _a12 timestamp with time zone) RETURNS office.enqueue_result
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.enqueue_run($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13);
$$;
COMMENT ON FUNCTION office._on_enqueue_run(integer, text, text, jsonb, text, text, boolean, text, text, text, text, integer, timestamp with time zone) IS
    'Internal: office.enqueue_run on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_enqueue_run(integer, text, text, jsonb, text, text, boolean, text, text, text, text, integer, timestamp with time zone) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_enqueue_run(integer, text, text, jsonb, text, text, boolean, text, text, text, text, integer, timestamp with time zone) TO office_admin, office_producer;
CREATE FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb DEFAULT '{}'::jsonb, idempotency_key text DEFAULT NULL::text, task_id text DEFAULT NULL::text, entry_triggered boolean DEFAULT false, keyless_cause text DEFAULT NULL::text, keyless_detail text DEFAULT NULL::text, origin text DEFAULT NULL::text, cause_run_id text DEFAULT NULL::text, priority integer DEFAULT 0, not_before timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS office.enqueue_result
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_enqueue_run(office._checked_partition(office._workspace_of('agent', $1), ARRAY['run', $10, 'OFW01']), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
$fn$;
COMMENT ON FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb, idempotency_key text, task_id text, entry_triggered boolean, keyless_cause text, keyless_detail text, origin text, cause_run_id text, priority integer, not_before timestamp with time zone) IS
    'Enqueues a run: a key already served (own or recorded by a coalesce) -> deduped windowed|durable; else coalesce (the key is recorded on the target); else insert. An agent-caused request deeper than office.max_chain_depth -> guarded (no key recorded, no run; counted and written to wake_decisions). Returns (outcome queued|deduped|coalesced|guarded, dedup_kind windowed|durable, run_id); on queued the wake-up signal of office.notify (NOTIFY office_runs, the agent id) unless not_before delays the run. Bad input 22023, unknown agent OFA01, agent not accepting runs OFA02, a cause_run_id of another workspace OFW01.';
REVOKE EXECUTE ON FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb, idempotency_key text, task_id text, entry_triggered boolean, keyless_cause text, keyless_detail text, origin text, cause_run_id text, priority integer, not_before timestamp with time zone) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_run(agent_profile_id text, reason text, payload jsonb, idempotency_key text, task_id text, entry_triggered boolean, keyless_cause text, keyless_detail text, origin text, cause_run_id text, priority integer, not_before timestamp with time zone) TO office_admin, office_producer;

CREATE FUNCTION office._on_enqueue_runs(_part integer, _a1 jsonb) RETURNS TABLE(ordinality integer, outcome text, dedup_kind text, run_id text)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.enqueue_runs($2);
$$;
COMMENT ON FUNCTION office._on_enqueue_runs(integer, jsonb) IS
    'Internal: office.enqueue_runs on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_enqueue_runs(integer, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_enqueue_runs(integer, jsonb) TO office_admin, office_producer;
CREATE FUNCTION office.enqueue_runs(requests jsonb) RETURNS TABLE(ordinality integer, outcome text, dedup_kind text, run_id text)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    g record;
    v_out jsonb := '[]';
    v_state text;
    v_msg text;
    v_detail text;
    v_n integer;
BEGIN
    FOR g IN SELECT * FROM office._split_requests($1, 'agent_profile_id') LOOP
        BEGIN
            v_out := v_out || coalesce((
                SELECT pg_catalog.jsonb_agg(pg_catalog.to_jsonb(r)
                       || pg_catalog.jsonb_build_object('ordinality', g.ordinalities[r.ordinality]))
                  FROM office._on_enqueue_runs(g.part, g.elements) r), '[]');
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL;
            v_n := pg_catalog.substring(v_msg, 'enqueue_runs element ([0-9]+):')::integer;
            IF v_n IS NOT NULL AND g.ordinalities IS NOT NULL THEN
                v_msg := pg_catalog.regexp_replace(v_msg, 'enqueue_runs element [0-9]+:',
                                                   'enqueue_runs element ' || g.ordinalities[v_n] || ':');
            END IF;
            IF v_detail = '' THEN
                RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg;
            END IF;
            RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg, DETAIL = v_detail;
        END;
    END LOOP;
    RETURN QUERY SELECT x.* FROM pg_catalog.jsonb_to_recordset(v_out) AS x(ordinality integer, outcome text, dedup_kind text, run_id text)
                  ORDER BY x.ordinality;
END
$fn$;
COMMENT ON FUNCTION office.enqueue_runs(requests jsonb) IS
    'Bulk enqueue_run: an array of objects with enqueue_run''s parameter names, applied in order; one (ordinality, outcome, dedup_kind, run_id) per element. Takes every element''s locks up front in one global order, so bulk calls never deadlock each other. Any invalid element fails the whole call with its SQLSTATE and ordinality.';
REVOKE EXECUTE ON FUNCTION office.enqueue_runs(requests jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.enqueue_runs(requests jsonb) TO office_admin, office_producer;

CREATE FUNCTION office._on_explain_agent(_part integer, _a1 text, _a2 integer) RETURNS TABLE(run_id text, status text, claimable boolean, held_by text, until timestamp with time zone, detail text)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.explain_agent($2, $3);
$$;
COMMENT ON FUNCTION office._on_explain_agent(integer, text, integer) IS
    'Internal: office.explain_agent on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_explain_agent(integer, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_explain_agent(integer, text, integer) TO office_admin, office_producer, office_reader, office_worker;
CREATE FUNCTION office.explain_agent(agent_profile_id text, max_rows integer DEFAULT 50) RETURNS TABLE(run_id text, status text, claimable boolean, held_by text, until timestamp with time zone, detail text)
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_explain_agent(office._route('agent', $1), $1, $2)
$fn$;
COMMENT ON FUNCTION office.explain_agent(agent_profile_id text, max_rows integer) IS
    'Why the agent''s runs are or are not claimable: its claimed run first (claimable false), then its queued runs by priority DESC, requested_at, id, at most max_rows rows (1-10000, else 22023), each with claimable and what holds it (the first of paused, budget, not_before, cooldown, run_cap, claimed; NULL when claimable), until when the hold ends where known, and detail in words. Unknown agent OFA01.';
REVOKE EXECUTE ON FUNCTION office.explain_agent(agent_profile_id text, max_rows integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.explain_agent(agent_profile_id text, max_rows integer) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office._on_fail_run(_part integer, _a1 text, _a2 integer, _a3 text, _a4 boolean, _a5 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.fail_run($2, $3, $4, $5, $6) AS fail_run;
$$;
COMMENT ON FUNCTION office._on_fail_run(integer, text, integer, text, boolean, text) IS
    'Internal: office.fail_run on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_fail_run(integer, text, integer, text, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_fail_run(integer, text, integer, text, boolean, text) TO office_admin, office_worker;
CREATE FUNCTION office.fail_run(run_id text, attempt integer, error_message text, retryable boolean DEFAULT false, worker_id text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_fail_run(office._route('run', $1), $1, $2, $3, $4, $5)
$fn$;
COMMENT ON FUNCTION office.fail_run(run_id text, attempt integer, error_message text, retryable boolean, worker_id text) IS
    'claimed -> failed with error_message, only if the run is still claimed with this attempt (and, when worker_id is given, by that worker). retryable and retry_count below the agent''s max_retries (its wake policy''s, else its workspace''s, else 3): back to queued instead, claimable after a jittered back-off (the policy''s retry_backoff, else 2 min, 10 min, 30 min, then 2 h; the last step repeating), retry_count + 1, true. error_message over 64 KiB 22023.';
REVOKE EXECUTE ON FUNCTION office.fail_run(run_id text, attempt integer, error_message text, retryable boolean, worker_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.fail_run(run_id text, attempt integer, error_message text, retryable boolean, worker_id text) TO office_admin, office_worker;

CREATE FUNCTION office._on_fail_wakeup(_part integer, _a1 text, _a2 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.fail_wakeup($2, $3) AS fail_wakeup;
$$;
COMMENT ON FUNCTION office._on_fail_wakeup(integer, text, text) IS
    'Internal: office.fail_wakeup on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_fail_wakeup(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_fail_wakeup(integer, text, text) TO office_admin, office_producer, office_worker;
CREATE FUNCTION office.fail_wakeup(wakeup_request_id text, reason text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_fail_wakeup(office._route('wakeup', $1), $1, $2)
$fn$;
COMMENT ON FUNCTION office.fail_wakeup(wakeup_request_id text, reason text) IS
    'queued -> failed with the reason and finished_at; a claimed, coalesced, skipped or failed request is left as it is (false). A reason over 64 KiB 22023; unknown request OFR01.';
REVOKE EXECUTE ON FUNCTION office.fail_wakeup(wakeup_request_id text, reason text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.fail_wakeup(wakeup_request_id text, reason text) TO office_admin, office_producer, office_worker;

CREATE FUNCTION office._on_finish_run(_part integer, _a1 text, _a2 integer, _a3 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.finish_run($2, $3, $4) AS finish_run;
$$;
COMMENT ON FUNCTION office._on_finish_run(integer, text, integer, text) IS
    'Internal: office.finish_run on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_finish_run(integer, text, integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_finish_run(integer, text, integer, text) TO office_admin, office_worker;
CREATE FUNCTION office.finish_run(run_id text, attempt integer, worker_id text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_finish_run(office._route('run', $1), $1, $2, $3)
$fn$;
COMMENT ON FUNCTION office.finish_run(run_id text, attempt integer, worker_id text) IS
    'claimed -> finished, only if the run is still claimed with this attempt (and, when worker_id is given, by that worker): a stale worker gets false and changes nothing.';
REVOKE EXECUTE ON FUNCTION office.finish_run(run_id text, attempt integer, worker_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.finish_run(run_id text, attempt integer, worker_id text) TO office_admin, office_worker;

CREATE FUNCTION office._on_fire_routine_tick(_part integer, _a1 text, _a2 timestamp with time zone, _a3 timestamp with time zone, _a4 integer, _a5 timestamp with time zone, _a6 boolean) RETURNS office.routine_tick_result
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.fire_routine_tick($2, $3, $4, $5, $6, $7);
$$;
COMMENT ON FUNCTION office._on_fire_routine_tick(integer, text, timestamp with time zone, timestamp with time zone, integer, timestamp with time zone, boolean) IS
    'Internal: office.fire_routine_tick on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_fire_routine_tick(integer, text, timestamp with time zone, timestamp with time zone, integer, timestamp with time zone, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_fire_routine_tick(integer, text, timestamp with time zone, timestamp with time zone, integer, timestamp with time zone, boolean) TO office_admin, office_worker;
CREATE FUNCTION office.fire_routine_tick(trigger_id text, observed_next_run_at timestamp with time zone, following_next_run_at timestamp with time zone, missed_ticks integer DEFAULT NULL::integer, missed_since timestamp with time zone DEFAULT NULL::timestamp with time zone, missed_truncated boolean DEFAULT NULL::boolean) RETURNS office.routine_tick_result
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_fire_routine_tick(office._route('trigger', $1), $1, $2, $3, $4, $5, $6)
$fn$;
COMMENT ON FUNCTION office.fire_routine_tick(trigger_id text, observed_next_run_at timestamp with time zone, following_next_run_at timestamp with time zone, missed_ticks integer, missed_since timestamp with time zone, missed_truncated boolean) IS
    'The cron loop''s step for one due tick, in one transaction: claim_routine_tick(observed -> following) and, for the winner, dispatch_routine(source cron, claimed_tick = observed, the catch-up values). A trigger being claimed by another transaction is skipped (claimed false, no wait). A dispatch that raises keeps the claim and is returned with error_message and error_sqlstate. NULL observed tick, a time outside 1970-01-01 .. 9999-12-31, negative missed_ticks 22023 (before anything is claimed); unknown trigger OFR01.';
REVOKE EXECUTE ON FUNCTION office.fire_routine_tick(trigger_id text, observed_next_run_at timestamp with time zone, following_next_run_at timestamp with time zone, missed_ticks integer, missed_since timestamp with time zone, missed_truncated boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.fire_routine_tick(trigger_id text, observed_next_run_at timestamp with time zone, following_next_run_at timestamp with time zone, missed_ticks integer, missed_since timestamp with time zone, missed_truncated boolean) TO office_admin, office_worker;

CREATE FUNCTION office._on_get_parent_receipt(_part integer, _a1 text) RETURNS SETOF office.parent_child_wake_receipts
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.get_parent_receipt($2);
$$;
COMMENT ON FUNCTION office._on_get_parent_receipt(integer, text) IS
    'Internal: office.get_parent_receipt on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_get_parent_receipt(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_get_parent_receipt(integer, text) TO office_admin, office_reader;
CREATE FUNCTION office.get_parent_receipt(parent_task_id text) RETURNS SETOF office.parent_child_wake_receipts
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_get_parent_receipt(office._route('task', $1), $1)
$fn$;
COMMENT ON FUNCTION office.get_parent_receipt(parent_task_id text) IS
    'The parent-wake receipt of a parent task (0 or 1 row): the child set, generation and wake operation it delivered, and the run it landed on.';
REVOKE EXECUTE ON FUNCTION office.get_parent_receipt(parent_task_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.get_parent_receipt(parent_task_id text) TO office_admin, office_reader;

CREATE FUNCTION office._on_get_routine(_part integer, _a1 text) RETURNS SETOF office.routines
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.get_routine($2);
$$;
COMMENT ON FUNCTION office._on_get_routine(integer, text) IS
    'Internal: office.get_routine on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_get_routine(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_get_routine(integer, text) TO office_admin, office_reader;
CREATE FUNCTION office.get_routine(routine_id text) RETURNS SETOF office.routines
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_get_routine(office._route('routine', $1), $1)
$fn$;
COMMENT ON FUNCTION office.get_routine(routine_id text) IS
    'The routine with this id (0 or 1 row).';
REVOKE EXECUTE ON FUNCTION office.get_routine(routine_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.get_routine(routine_id text) TO office_admin, office_reader;

CREATE FUNCTION office._on_get_run(_part integer, _a1 text) RETURNS SETOF office.runs
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.get_run($2);
$$;
COMMENT ON FUNCTION office._on_get_run(integer, text) IS
    'Internal: office.get_run on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_get_run(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_get_run(integer, text) TO office_admin, office_producer, office_reader, office_worker;
CREATE FUNCTION office.get_run(run_id text) RETURNS SETOF office.runs
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_get_run(office._route('run', $1), $1)
$fn$;
COMMENT ON FUNCTION office.get_run(run_id text) IS
    'The run with this id (0 or 1 row).';
REVOKE EXECUTE ON FUNCTION office.get_run(run_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.get_run(run_id text) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office._on_get_task(_part integer, _a1 text) RETURNS SETOF office.tasks
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.get_task($2);
$$;
COMMENT ON FUNCTION office._on_get_task(integer, text) IS
    'Internal: office.get_task on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_get_task(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_get_task(integer, text) TO office_admin, office_producer, office_reader, office_worker;
CREATE FUNCTION office.get_task(task_id text) RETURNS SETOF office.tasks
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_get_task(office._route('task', $1), $1)
$fn$;
COMMENT ON FUNCTION office.get_task(task_id text) IS
    'The task row, or no row when there is no such task.';
REVOKE EXECUTE ON FUNCTION office.get_task(task_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.get_task(task_id text) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office._on_heartbeat_run(_part integer, _a1 text, _a2 integer, _a3 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.heartbeat_run($2, $3, $4) AS heartbeat_run;
$$;
COMMENT ON FUNCTION office._on_heartbeat_run(integer, text, integer, text) IS
    'Internal: office.heartbeat_run on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_heartbeat_run(integer, text, integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_heartbeat_run(integer, text, integer, text) TO office_admin, office_worker;
CREATE FUNCTION office.heartbeat_run(run_id text, attempt integer, worker_id text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_heartbeat_run(office._route('run', $1), $1, $2, $3)
$fn$;
COMMENT ON FUNCTION office.heartbeat_run(run_id text, attempt integer, worker_id text) IS
    'While the run is claimed with this attempt (and, when worker_id is given, by that worker): heartbeat_at = now(), true (the lease is renewed); otherwise false: the worker lost the run (recovered, cancelled, re-claimed) and must stop working on it. Also false when the agent''s own or its workspace''s budget is reached in its period: then a claim that matches is put back to queued (claimed_at, claimed_by, heartbeat_at cleared, retry_count kept).';
REVOKE EXECUTE ON FUNCTION office.heartbeat_run(run_id text, attempt integer, worker_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.heartbeat_run(run_id text, attempt integer, worker_id text) TO office_admin, office_worker;

CREATE FUNCTION office._on_is_task_terminal(_part integer, _a1 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.is_task_terminal($2) AS is_task_terminal;
$$;
COMMENT ON FUNCTION office._on_is_task_terminal(integer, text) IS
    'Internal: office.is_task_terminal on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_is_task_terminal(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_is_task_terminal(integer, text) TO office_admin, office_reader;
CREATE FUNCTION office.is_task_terminal(task_id text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_is_task_terminal(office._route('task', $1), $1)
$fn$;
COMMENT ON FUNCTION office.is_task_terminal(task_id text) IS
    'Whether the task is COMPLETED, FAILED or CANCELLED (the blocker terminal set); unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.is_task_terminal(task_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.is_task_terminal(task_id text) TO office_admin, office_reader;

CREATE FUNCTION office._all_list_agents(_part integer, _a1 text, _a2 integer) RETURNS TABLE(id text, workspace_id text, name text, status text, created_at timestamp with time zone, updated_at timestamp with time zone, queued integer, oldest_queued_at timestamp with time zone, claimed_run_id text, claimed_by text, claimed_at timestamp with time zone, heartbeat_at timestamp with time zone)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.list_agents($2, $3);
$$;
COMMENT ON FUNCTION office._all_list_agents(integer, text, integer) IS
    'Internal: office.list_agents on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_list_agents(integer, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_list_agents(integer, text, integer) TO office_admin, office_reader;
CREATE FUNCTION office.list_agents(after_id text DEFAULT NULL::text, page_size integer DEFAULT 50) RETURNS TABLE(id text, workspace_id text, name text, status text, created_at timestamp with time zone, updated_at timestamp with time zone, queued integer, oldest_queued_at timestamp with time zone, claimed_run_id text, claimed_by text, claimed_at timestamp with time zone, heartbeat_at timestamp with time zone)
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._all_list_agents(0, $1, $2) ORDER BY id LIMIT CASE WHEN $2 > 0 THEN $2 END
$fn$;
COMMENT ON FUNCTION office.list_agents(after_id text, page_size integer) IS
    'One page of agents by id after after_id, at most page_size (1..500): the profile, queued (runs queued, counted up to 10,001), oldest_queued_at, and the claimed run if any (id, claimed_by, claimed_at, heartbeat_at). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_agents(after_id text, page_size integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_agents(after_id text, page_size integer) TO office_admin, office_reader;

CREATE FUNCTION office._ev_list_events(_part integer, _parts integer, _home integer, _a1 bigint, _a2 integer) RETURNS SETOF office.events
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT e.id * $2 + coalesce(pg_catalog.hashtext(t.workspace_id) & ($2 - 1), $3) AS id, e.topic, e.task_id, e.payload, e.created_at, e.processed_at, e.claimed_by, e.claimed_at, e.visible_at, e.deliveries
      FROM (SELECT * FROM office.list_events($4 + 1, 1) x WHERE x.id = $4
             UNION ALL SELECT * FROM office.list_events($4, $5)) e
      LEFT JOIN office.tasks t ON t.id = e.task_id;
$$;
COMMENT ON FUNCTION office._ev_list_events(integer, integer, integer, bigint, integer) IS
    'Internal: office.list_events on the shard of partition _part (ev).';
REVOKE EXECUTE ON FUNCTION office._ev_list_events(integer, integer, integer, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._ev_list_events(integer, integer, integer, bigint, integer) TO office_admin, office_reader;
CREATE FUNCTION office.list_events(before_id bigint DEFAULT NULL::bigint, page_size integer DEFAULT 50) RETURNS SETOF office.events
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT e.* FROM office._shards() s CROSS JOIN LATERAL office._ev_list_events(s.part, office._partitions(), s.part, $1 / office._partitions(), $2) e
     WHERE $1 IS NULL OR e.id < $1
     ORDER BY e.id DESC LIMIT CASE WHEN $2 > 0 THEN $2 END
$fn$;
COMMENT ON FUNCTION office.list_events(before_id bigint, page_size integer) IS
    'One page of the outbox, newest first, before before_id, at most page_size (1..500). Bad page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_events(before_id bigint, page_size integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_events(before_id bigint, page_size integer) TO office_admin, office_reader;

CREATE FUNCTION office._on_list_routine_runs(_part integer, _a1 text, _a2 text, _a3 integer) RETURNS SETOF office.routine_runs
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.list_routine_runs($2, $3, $4);
$$;
COMMENT ON FUNCTION office._on_list_routine_runs(integer, text, text, integer) IS
    'Internal: office.list_routine_runs on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_list_routine_runs(integer, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_list_routine_runs(integer, text, text, integer) TO office_admin, office_reader;
CREATE FUNCTION office.list_routine_runs(routine_id text, before_id text DEFAULT NULL::text, page_size integer DEFAULT 50) RETURNS SETOF office.routine_runs
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_list_routine_runs(office._route('routine', $1), $1, $2, $3)
$fn$;
COMMENT ON FUNCTION office.list_routine_runs(routine_id text, before_id text, page_size integer) IS
    'One page of a routine''s runs, newest first (ids are time-ordered), before before_id, at most page_size (1..500); the task_created one holds the gate. Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_routine_runs(routine_id text, before_id text, page_size integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_routine_runs(routine_id text, before_id text, page_size integer) TO office_admin, office_reader;

CREATE FUNCTION office._on_list_routine_triggers(_part integer, _a1 text, _a2 text, _a3 integer) RETURNS SETOF office.routine_triggers
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.list_routine_triggers($2, $3, $4);
$$;
COMMENT ON FUNCTION office._on_list_routine_triggers(integer, text, text, integer) IS
    'Internal: office.list_routine_triggers on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_list_routine_triggers(integer, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_list_routine_triggers(integer, text, text, integer) TO office_admin, office_reader;
CREATE FUNCTION office.list_routine_triggers(routine_id text, after_id text DEFAULT NULL::text, page_size integer DEFAULT 50) RETURNS SETOF office.routine_triggers
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_list_routine_triggers(office._route('routine', $1), $1, $2, $3)
$fn$;
COMMENT ON FUNCTION office.list_routine_triggers(routine_id text, after_id text, page_size integer) IS
    'One page of a routine''s triggers by id, after after_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_routine_triggers(routine_id text, after_id text, page_size integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_routine_triggers(routine_id text, after_id text, page_size integer) TO office_admin, office_reader;

CREATE FUNCTION office._all_list_routines(_part integer, _a1 text, _a2 integer) RETURNS SETOF office.routines
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.list_routines($2, $3);
$$;
COMMENT ON FUNCTION office._all_list_routines(integer, text, integer) IS
    'Internal: office.list_routines on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_list_routines(integer, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_list_routines(integer, text, integer) TO office_admin, office_reader;
CREATE FUNCTION office.list_routines(before_id text DEFAULT NULL::text, page_size integer DEFAULT 50) RETURNS SETOF office.routines
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._all_list_routines(0, $1, $2) ORDER BY id DESC LIMIT CASE WHEN $2 > 0 THEN $2 END
$fn$;
COMMENT ON FUNCTION office.list_routines(before_id text, page_size integer) IS
    'One page of routines by id descending, before before_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_routines(before_id text, page_size integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_routines(before_id text, page_size integer) TO office_admin, office_reader;

CREATE FUNCTION office._all_list_runs(_part integer, _a1 text, _a2 text, _a3 text, _a4 text, _a5 text, _a6 text, _a7 text, _a8 integer) RETURNS SETOF office.runs
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.list_runs($2, $3, $4, $5, $6, $7, $8, $9);
$$;
COMMENT ON FUNCTION office._all_list_runs(integer, text, text, text, text, text, text, text, integer) IS
    'Internal: office.list_runs on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_list_runs(integer, text, text, text, text, text, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_list_runs(integer, text, text, text, text, text, text, text, integer) TO office_admin, office_reader;
CREATE FUNCTION office.list_runs(status text DEFAULT NULL::text, agent_profile_id text DEFAULT NULL::text, reason text DEFAULT NULL::text, task_id text DEFAULT NULL::text, key_prefix text DEFAULT NULL::text, before_id text DEFAULT NULL::text, not_before_id text DEFAULT NULL::text, page_size integer DEFAULT 50) RETURNS SETOF office.runs
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._all_list_runs(0, $1, $2, $3, $4, $5, $6, $7, $8) ORDER BY id DESC LIMIT CASE WHEN $8 > 0 THEN $8 END
$fn$;
COMMENT ON FUNCTION office.list_runs(status text, agent_profile_id text, reason text, task_id text, key_prefix text, before_id text, not_before_id text, page_size integer) IS
    'One page of runs, newest first: those with id in [not_before_id, before_id) matching every filter given (status, agent, reason, task, idempotency key prefix; NULL or empty: any), at most page_size (1..500) and at most 10,000 scanned (run_window_end). Unknown status, bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_runs(status text, agent_profile_id text, reason text, task_id text, key_prefix text, before_id text, not_before_id text, page_size integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_runs(status text, agent_profile_id text, reason text, task_id text, key_prefix text, before_id text, not_before_id text, page_size integer) TO office_admin, office_reader;

CREATE FUNCTION office._all_list_stuck_parents(_part integer, _a1 integer, _a2 text) RETURNS TABLE(parent_task_id text, assignee_agent_profile_id text, workflow_step_id text, child_set_key text, newest_child_updated_at text)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.list_stuck_parents($2, $3);
$$;
COMMENT ON FUNCTION office._all_list_stuck_parents(integer, integer, text) IS
    'Internal: office.list_stuck_parents on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_list_stuck_parents(integer, integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_list_stuck_parents(integer, integer, text) TO office_admin, office_producer, office_reader;
CREATE FUNCTION office.list_stuck_parents(max_rows integer DEFAULT 5, reason text DEFAULT 'task_children_completed'::text) RETURNS TABLE(parent_task_id text, assignee_agent_profile_id text, workflow_step_id text, child_set_key text, newest_child_updated_at text)
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._all_list_stuck_parents(0, $1, $2) ORDER BY parent_task_id COLLATE "C" LIMIT CASE WHEN $1 > 0 THEN $1 END
$fn$;
COMMENT ON FUNCTION office.list_stuck_parents(max_rows integer, reason text) IS
    'Parents whose finished child wave was not delivered (every candidate condition of docs/domain.md §2.20, applied before the LIMIT), ordered by parent id (bytewise): parent, assignee, step, child_set_key, newest_child_updated_at. Read from the parents marked since they were last found delivered, leaving out those the sweep set aside (office.poison); another reason than task_children_completed reads every open parent. Negative max_rows or empty reason 22023.';
REVOKE EXECUTE ON FUNCTION office.list_stuck_parents(max_rows integer, reason text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_stuck_parents(max_rows integer, reason text) TO office_admin, office_producer, office_reader;

CREATE FUNCTION office._on_list_task_blockers(_part integer, _a1 text, _a2 text, _a3 integer) RETURNS SETOF office.tasks
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.list_task_blockers($2, $3, $4);
$$;
COMMENT ON FUNCTION office._on_list_task_blockers(integer, text, text, integer) IS
    'Internal: office.list_task_blockers on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_list_task_blockers(integer, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_list_task_blockers(integer, text, text, integer) TO office_admin, office_reader;
CREATE FUNCTION office.list_task_blockers(task_id text, after_id text DEFAULT NULL::text, page_size integer DEFAULT 50) RETURNS SETOF office.tasks
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_list_task_blockers(office._route('task', $1), $1, $2, $3)
$fn$;
COMMENT ON FUNCTION office.list_task_blockers(task_id text, after_id text, page_size integer) IS
    'One page of the tasks that block a task, by id, after after_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_task_blockers(task_id text, after_id text, page_size integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_task_blockers(task_id text, after_id text, page_size integer) TO office_admin, office_reader;

CREATE FUNCTION office._on_list_task_children(_part integer, _a1 text, _a2 text, _a3 integer) RETURNS SETOF office.tasks
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.list_task_children($2, $3, $4);
$$;
COMMENT ON FUNCTION office._on_list_task_children(integer, text, text, integer) IS
    'Internal: office.list_task_children on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_list_task_children(integer, text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_list_task_children(integer, text, text, integer) TO office_admin, office_reader;
CREATE FUNCTION office.list_task_children(parent_task_id text, after_id text DEFAULT NULL::text, page_size integer DEFAULT 50) RETURNS SETOF office.tasks
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_list_task_children(office._route('task', $1), $1, $2, $3)
$fn$;
COMMENT ON FUNCTION office.list_task_children(parent_task_id text, after_id text, page_size integer) IS
    'One page of a task''s children by id, after after_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_task_children(parent_task_id text, after_id text, page_size integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_task_children(parent_task_id text, after_id text, page_size integer) TO office_admin, office_reader;

CREATE FUNCTION office._all_list_tasks(_part integer, _a1 text, _a2 integer) RETURNS SETOF office.tasks
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.list_tasks($2, $3);
$$;
COMMENT ON FUNCTION office._all_list_tasks(integer, text, integer) IS
    'Internal: office.list_tasks on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_list_tasks(integer, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_list_tasks(integer, text, integer) TO office_admin, office_reader;
CREATE FUNCTION office.list_tasks(before_id text DEFAULT NULL::text, page_size integer DEFAULT 50) RETURNS SETOF office.tasks
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._all_list_tasks(0, $1, $2) ORDER BY id DESC LIMIT CASE WHEN $2 > 0 THEN $2 END
$fn$;
COMMENT ON FUNCTION office.list_tasks(before_id text, page_size integer) IS
    'One page of tasks by id descending, before before_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_tasks(before_id text, page_size integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_tasks(before_id text, page_size integer) TO office_admin, office_reader;

CREATE FUNCTION office._all_list_wakeups(_part integer, _a1 text, _a2 integer) RETURNS SETOF office.wakeup_requests
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.list_wakeups($2, $3);
$$;
COMMENT ON FUNCTION office._all_list_wakeups(integer, text, integer) IS
    'Internal: office.list_wakeups on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_list_wakeups(integer, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_list_wakeups(integer, text, integer) TO office_admin, office_reader;
CREATE FUNCTION office.list_wakeups(before_id text DEFAULT NULL::text, page_size integer DEFAULT 50) RETURNS SETOF office.wakeup_requests
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._all_list_wakeups(0, $1, $2) ORDER BY id DESC LIMIT CASE WHEN $2 > 0 THEN $2 END
$fn$;
COMMENT ON FUNCTION office.list_wakeups(before_id text, page_size integer) IS
    'One page of wake-up requests, newest first (ids are time-ordered), before before_id, at most page_size (1..500). Bad text or page_size 22023.';
REVOKE EXECUTE ON FUNCTION office.list_wakeups(before_id text, page_size integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_wakeups(before_id text, page_size integer) TO office_admin, office_reader;

CREATE FUNCTION office._all_mark_all_parents(_part integer) RETURNS SETOF bigint
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT office.mark_all_parents() AS mark_all_parents;
$$;
COMMENT ON FUNCTION office._all_mark_all_parents(integer) IS
    'Internal: office.mark_all_parents on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_mark_all_parents(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_mark_all_parents(integer) TO office_admin;
CREATE FUNCTION office.mark_all_parents() RETURNS bigint
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(pg_catalog.sum(n), 0)::bigint FROM office._all_mark_all_parents(0) AS n
$fn$;
COMMENT ON FUNCTION office.mark_all_parents() IS
    'Marks every open Office parent for the stuck-parent sweep (after rows were loaded with triggers disabled, e.g. session_replication_role = replica); the next sweep reads them all once. Returns how many were marked.';
REVOKE EXECUTE ON FUNCTION office.mark_all_parents() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.mark_all_parents() TO office_admin;

CREATE FUNCTION office._on_move_task(_part integer, _a1 text, _a2 text) RETURNS office.tasks
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.move_task($2, $3);
$$;
COMMENT ON FUNCTION office._on_move_task(integer, text, text) IS
    'Internal: office.move_task on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_move_task(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_move_task(integer, text, text) TO office_admin, office_producer;
CREATE FUNCTION office.move_task(task_id text, state text) RETURNS office.tasks
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_move_task(office._route('task', $1), $1, $2)
$fn$;
COMMENT ON FUNCTION office.move_task(task_id text, state text) IS
    'Sets the state; a change into COMPLETED, FAILED or CANCELLED runs the terminal effects in the same transaction (trigger). Unknown state 22023, unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.move_task(task_id text, state text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.move_task(task_id text, state text) TO office_admin, office_producer;

CREATE FUNCTION office._all_prune_events(_part integer, _a1 interval) RETURNS SETOF integer
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT office.prune_events($2) AS prune_events;
$$;
COMMENT ON FUNCTION office._all_prune_events(integer, interval) IS
    'Internal: office.prune_events on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_prune_events(integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_prune_events(integer, interval) TO office_admin;
CREATE FUNCTION office.prune_events(older_than interval) RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(pg_catalog.sum(n), 0)::integer FROM office._all_prune_events(0, $1) AS n
$fn$;
COMMENT ON FUNCTION office.prune_events(older_than interval) IS
    'Deletes acknowledged events processed longer ago than older_than; returns the count.';
REVOKE EXECUTE ON FUNCTION office.prune_events(older_than interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.prune_events(older_than interval) TO office_admin;

CREATE FUNCTION office._all_prune_runs(_part integer, _a1 interval) RETURNS SETOF integer
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT office.prune_runs($2) AS prune_runs;
$$;
COMMENT ON FUNCTION office._all_prune_runs(integer, interval) IS
    'Internal: office.prune_runs on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_prune_runs(integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_prune_runs(integer, interval) TO office_admin;
CREATE FUNCTION office.prune_runs(older_than interval) RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(pg_catalog.sum(n), 0)::integer FROM office._all_prune_runs(0, $1) AS n
$fn$;
COMMENT ON FUNCTION office.prune_runs(older_than interval) IS
    'Deletes finished, failed and cancelled runs whose finished_at is older than older_than (their own and recorded keys become free). Returns the count.';
REVOKE EXECUTE ON FUNCTION office.prune_runs(older_than interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.prune_runs(older_than interval) TO office_admin;

CREATE FUNCTION office._all_prune_wake_decisions(_part integer, _a1 interval) RETURNS SETOF integer
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT office.prune_wake_decisions($2) AS prune_wake_decisions;
$$;
COMMENT ON FUNCTION office._all_prune_wake_decisions(integer, interval) IS
    'Internal: office.prune_wake_decisions on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_prune_wake_decisions(integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_prune_wake_decisions(integer, interval) TO office_admin;
CREATE FUNCTION office.prune_wake_decisions(older_than interval) RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(pg_catalog.sum(n), 0)::integer FROM office._all_prune_wake_decisions(0, $1) AS n
$fn$;
COMMENT ON FUNCTION office.prune_wake_decisions(older_than interval) IS
    'Deletes wake decisions made longer ago than older_than; returns the count.';
REVOKE EXECUTE ON FUNCTION office.prune_wake_decisions(older_than interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.prune_wake_decisions(older_than interval) TO office_admin;

CREATE FUNCTION office._on_reconcile_parent(_part integer, _a1 text, _a2 text, _a3 text) RETURNS office.reconcile_result
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.reconcile_parent($2, $3, $4);
$$;
COMMENT ON FUNCTION office._on_reconcile_parent(integer, text, text, text) IS
    'Internal: office.reconcile_parent on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_reconcile_parent(integer, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_reconcile_parent(integer, text, text, text) TO office_admin, office_producer;
CREATE FUNCTION office.reconcile_parent(parent_task_id text, child_set_key text, newest_child_updated_at text) RETURNS office.reconcile_result
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_reconcile_parent(office._route('task', $1), $1, $2, $3)
$fn$;
COMMENT ON FUNCTION office.reconcile_parent(parent_task_id text, child_set_key text, newest_child_updated_at text) IS
    'Wakes one stuck parent: under the edge path''s lock on the parent, re-checks its assignee (skipped, assignee_unresolved) and re-reads its child set and generation (skipped, child_set_changed, unless they equal the arguments and form a finished wave), then enqueues task_children_completed (task_id = the parent) keyed wake_operation_id(parent, child_set_key, generation) and upserts the receipt with the run it landed on (queued, deduped or coalesced), in one transaction; a wake the loop guard refuses writes no receipt (guarded, skipped_reason guarded). Unknown parent OFT01; NULL set or generation 22023.';
REVOKE EXECUTE ON FUNCTION office.reconcile_parent(parent_task_id text, child_set_key text, newest_child_updated_at text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.reconcile_parent(parent_task_id text, child_set_key text, newest_child_updated_at text) TO office_admin, office_producer;

CREATE FUNCTION office._on_record_run_cost(_part integer, _a1 text, _a2 integer, _a3 numeric, _a4 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.record_run_cost($2, $3, $4, $5) AS record_run_cost;
$$;
COMMENT ON FUNCTION office._on_record_run_cost(integer, text, integer, numeric, text) IS
    'Internal: office.record_run_cost on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_record_run_cost(integer, text, integer, numeric, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_record_run_cost(integer, text, integer, numeric, text) TO office_admin, office_worker;
CREATE FUNCTION office.record_run_cost(run_id text, attempt integer, amount numeric, worker_id text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_record_run_cost(office._route('run', $1), $1, $2, $3, $4)
$fn$;
COMMENT ON FUNCTION office.record_run_cost(run_id text, attempt integer, amount numeric, worker_id text) IS
    'Adds amount (finite, >= 0, else 22023) to the run''s cost and to its agent''s and workspace''s spend of the UTC day, while the run carries this attempt: claimed, ended or put back (and, when worker_id is given, claimed by that worker or no longer claimed); true if recorded. A recording that takes a scope''s spend in its budget period across 80 % of its budget writes a budget_warning decision, across 100 % a budget_exhausted one, under the run''s agent.';
REVOKE EXECUTE ON FUNCTION office.record_run_cost(run_id text, attempt integer, amount numeric, worker_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.record_run_cost(run_id text, attempt integer, amount numeric, worker_id text) TO office_admin, office_worker;

CREATE FUNCTION office._all_recover_stale_runs(_part integer, _a1 interval) RETURNS SETOF integer
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT office.recover_stale_runs($2) AS recover_stale_runs;
$$;
COMMENT ON FUNCTION office._all_recover_stale_runs(integer, interval) IS
    'Internal: office.recover_stale_runs on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_recover_stale_runs(integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_recover_stale_runs(integer, interval) TO office_admin;
CREATE FUNCTION office.recover_stale_runs(older_than interval) RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(pg_catalog.sum(n), 0)::integer FROM office._all_recover_stale_runs(0, $1) AS n
$fn$;
COMMENT ON FUNCTION office.recover_stale_runs(older_than interval) IS
    'A claimed run whose heartbeat_at (its claimed_at if it never sent one) is older than older_than -> queued (claimed_at, claimed_by, heartbeat_at cleared; attempt kept, so its next claim fences the lost worker). A run that cannot be requeued is set aside (office.poison, loop recovery) and the others are recovered. Also repairs office.agent_ready (a claimable agent left out by a path that bypassed its triggers). Returns the count of runs recovered.';
REVOKE EXECUTE ON FUNCTION office.recover_stale_runs(older_than interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.recover_stale_runs(older_than interval) TO office_admin;

CREATE FUNCTION office._ev_release_poison(_part integer, _parts integer, _home integer, _a1 text, _a2 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT CASE WHEN EXISTS (
        SELECT FROM office.events e LEFT JOIN office.tasks t ON t.id = e.task_id
         WHERE e.id = $5::bigint AND coalesce(pg_catalog.hashtext(t.workspace_id) & ($2 - 1), $3) <> $1)
    THEN false ELSE office.release_poison($4, $5) END AS release_poison;
$$;
COMMENT ON FUNCTION office._ev_release_poison(integer, integer, integer, text, text) IS
    'Internal: office.release_poison on the shard of partition _part (ev).';
REVOKE EXECUTE ON FUNCTION office._ev_release_poison(integer, integer, integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._ev_release_poison(integer, integer, integer, text, text) TO office_admin;
CREATE FUNCTION office._on_release_poison(_part integer, _a1 text, _a2 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.release_poison($2, $3) AS release_poison;
$$;
COMMENT ON FUNCTION office._on_release_poison(integer, text, text) IS
    'Internal: office.release_poison on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_release_poison(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_release_poison(integer, text, text) TO office_admin;
CREATE FUNCTION office.release_poison(loop text, row_id text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_id bigint;
    v_part integer;
    v_kind text;
BEGIN
    IF $1 = 'subscriber' AND $2 ~ '^[1-9][0-9]{0,17}$' THEN
        v_id := $2::bigint;
        v_part := (v_id & (office._partitions() - 1))::integer;
        RETURN office._ev_release_poison(v_part, office._partitions(), office._home(v_part), $1, (v_id / office._partitions())::text);
    END IF;
    v_kind := CASE $1 WHEN 'wakeups' THEN 'wakeup' WHEN 'cron' THEN 'trigger' WHEN 'sweep' THEN 'task' WHEN 'recovery' THEN 'run' END;
    v_part := CASE WHEN v_kind IS NOT NULL THEN office._route(v_kind, $2) ELSE 0 END;
    RETURN office._on_release_poison(v_part, $1, $2);
END
$fn$;
COMMENT ON FUNCTION office.release_poison(loop text, row_id text) IS
    'Puts a set-aside row back in its loop''s way (after repairing it): its next scan processes it again, and sets it aside again if it still fails. False when the row was not set aside.';
REVOKE EXECUTE ON FUNCTION office.release_poison(loop text, row_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.release_poison(loop text, row_id text) TO office_admin;

CREATE FUNCTION office._on_remove_blocker(_part integer, _a1 text, _a2 text) RETURNS void
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.remove_blocker($2, $3) AS remove_blocker;
$$;
COMMENT ON FUNCTION office._on_remove_blocker(integer, text, text) IS
    'Internal: office.remove_blocker on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_remove_blocker(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_remove_blocker(integer, text, text) TO office_admin, office_producer;
CREATE FUNCTION office.remove_blocker(task_id text, blocker_task_id text) RETURNS void
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_remove_blocker(office._route('task', $1), $1, $2)
$fn$;
COMMENT ON FUNCTION office.remove_blocker(task_id text, blocker_task_id text) IS
    'blocker_task_id no longer blocks task_id (no-op when it did not). Unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.remove_blocker(task_id text, blocker_task_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.remove_blocker(task_id text, blocker_task_id text) TO office_admin, office_producer;

CREATE FUNCTION office._on_request_wakeup(_part integer, _a1 text, _a2 text, _a3 text, _a4 jsonb, _a5 text) RETURNS office.wakeup_result
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.request_wakeup($2, $3, $4, $5, $6);
$$;
COMMENT ON FUNCTION office._on_request_wakeup(integer, text, text, text, jsonb, text) IS
    'Internal: office.request_wakeup on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_request_wakeup(integer, text, text, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_request_wakeup(integer, text, text, text, jsonb, text) TO office_admin, office_producer;
CREATE FUNCTION office.request_wakeup(agent_profile_id text, source text, reason text DEFAULT ''::text, payload jsonb DEFAULT '{}'::jsonb, idempotency_key text DEFAULT NULL::text) RETURNS office.wakeup_result
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_request_wakeup(office._route('agent', $1), $1, $2, $3, $4, $5)
$fn$;
COMMENT ON FUNCTION office.request_wakeup(agent_profile_id text, source text, reason text, payload jsonb, idempotency_key text) IS
    'Records a queued wakeup request (NOTIFY office_wakeups unless office.notify = off) or, for a key already requested, (deduped, durable, <holder>) counted on queue wakeup. Empty agent or source, a source or reason over 200 characters or with a control character, a NULL or non-object payload, a payload over 1 MiB or nested more than 64 levels deep, a key over 512 characters 22023 (rows written directly are checked by a trigger too); unknown agent OFA01.';
REVOKE EXECUTE ON FUNCTION office.request_wakeup(agent_profile_id text, source text, reason text, payload jsonb, idempotency_key text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.request_wakeup(agent_profile_id text, source text, reason text, payload jsonb, idempotency_key text) TO office_admin, office_producer;

CREATE FUNCTION office._on_requeue_run(_part integer, _a1 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.requeue_run($2) AS requeue_run;
$$;
COMMENT ON FUNCTION office._on_requeue_run(integer, text) IS
    'Internal: office.requeue_run on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_requeue_run(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_requeue_run(integer, text) TO office_admin;
CREATE FUNCTION office.requeue_run(run_id text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_requeue_run(office._route('run', $1), $1)
$fn$;
COMMENT ON FUNCTION office.requeue_run(run_id text) IS
    'failed|cancelled -> queued in place (finished_at, claimed_at, claimed_by, heartbeat_at, scheduled_retry_at cleared; error_message, cancel_reason, retry_count and the keys kept; the next claim bumps attempt), with the wake-up signal of a new run (office.notify). False for any other status or an unknown run (since 0.5.0).';
REVOKE EXECUTE ON FUNCTION office.requeue_run(run_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.requeue_run(run_id text) TO office_admin;

CREATE FUNCTION office._all_requeue_runs(_part integer, _a1 text[]) RETURNS SETOF integer
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT office.requeue_runs($2) AS requeue_runs;
$$;
COMMENT ON FUNCTION office._all_requeue_runs(integer, text[]) IS
    'Internal: office.requeue_runs on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_requeue_runs(integer, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_requeue_runs(integer, text[]) TO office_admin;
CREATE FUNCTION office.requeue_runs(run_ids text[]) RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(pg_catalog.sum(n), 0)::integer FROM office._all_requeue_runs(0, $1) AS n
$fn$;
COMMENT ON FUNCTION office.requeue_runs(run_ids text[]) IS
    'requeue_run for each of run_ids in one statement, the runs locked in id order; returns the number requeued (unknown ids and other statuses are skipped). More than 10,000 ids 22023 (since 0.5.0).';
REVOKE EXECUTE ON FUNCTION office.requeue_runs(run_ids text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.requeue_runs(run_ids text[]) TO office_admin;

CREATE FUNCTION office._on_retry_run(_part integer, _a1 text, _a2 integer, _a3 interval, _a4 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.retry_run($2, $3, $4, $5) AS retry_run;
$$;
COMMENT ON FUNCTION office._on_retry_run(integer, text, integer, interval, text) IS
    'Internal: office.retry_run on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_retry_run(integer, text, integer, interval, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_retry_run(integer, text, integer, interval, text) TO office_admin, office_worker;
CREATE FUNCTION office.retry_run(run_id text, attempt integer, delay interval, worker_id text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_retry_run(office._route('run', $1), $1, $2, $3, $4)
$fn$;
COMMENT ON FUNCTION office.retry_run(run_id text, attempt integer, delay interval, worker_id text) IS
    'claimed -> queued in place (key kept), retry_count + 1, claimable again after delay (claimed_at, claimed_by, heartbeat_at cleared); only if still claimed with this attempt (and, when worker_id is given, by that worker). A delay that is not a finite interval from 0 to 100 years 22023.';
REVOKE EXECUTE ON FUNCTION office.retry_run(run_id text, attempt integer, delay interval, worker_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.retry_run(run_id text, attempt integer, delay interval, worker_id text) TO office_admin, office_worker;

CREATE FUNCTION office.routine_fingerprint(title text, description text, assignee text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
 SET search_path TO 'pg_catalog', 'pg_temp'
RETURN encode(substr(sha256(convert_to(((((title || '|'::text) || description) || '|'::text) || assignee), 'UTF8'::name)), 1, 16), 'hex'::text);
COMMENT ON FUNCTION office.routine_fingerprint(title text, description text, assignee text) IS
    'Routine dispatch fingerprint: the first 16 bytes of sha256(title|description|assignee) as 32 lowercase hex characters (docs/domain.md §3.9). Empty texts are allowed.';
REVOKE EXECUTE ON FUNCTION office.routine_fingerprint(title text, description text, assignee text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.routine_fingerprint(title text, description text, assignee text) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office.routine_key(source text, routine_id text, trigger_id text, claimed_tick timestamp with time zone, routine_run_id text, explicit_key text DEFAULT NULL::text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
COMMENT ON FUNCTION office.routine_key(source text, routine_id text, trigger_id text, claimed_tick timestamp with time zone, routine_run_id text, explicit_key text) IS
    'Routine wakeup key (docs/domain.md §3.8): routine:<routine_id>:<source>:<explicit_key> for a non-empty explicit key; cron with a claimed tick routine:<routine_id>:<trigger_id>:tick:<unix seconds, floor>; manual/webhook routine:<routine_id>:run:<routine_run_id>; otherwise NULL (keyless). Never raises for an unknown source.';
REVOKE EXECUTE ON FUNCTION office.routine_key(source text, routine_id text, trigger_id text, claimed_tick timestamp with time zone, routine_run_id text, explicit_key text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.routine_key(source text, routine_id text, trigger_id text, claimed_tick timestamp with time zone, routine_run_id text, explicit_key text) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office._on_run_keys(_part integer, _a1 text) RETURNS TABLE(idempotency_key text, recorded_at timestamp with time zone, how text)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.run_keys($2);
$$;
COMMENT ON FUNCTION office._on_run_keys(integer, text) IS
    'Internal: office.run_keys on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_run_keys(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_run_keys(integer, text) TO office_admin, office_producer, office_reader, office_worker;
CREATE FUNCTION office.run_keys(run_id text) RETURNS TABLE(idempotency_key text, recorded_at timestamp with time zone, how text)
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_run_keys(office._route('run', $1), $1)
$fn$;
COMMENT ON FUNCTION office.run_keys(run_id text) IS
    'The idempotency keys a run serves, by recorded_at: its own (how own, recorded_at its requested_at), then those recorded when requests with them coalesced into it (how coalesced). None for a keyless or unknown run.';
REVOKE EXECUTE ON FUNCTION office.run_keys(run_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.run_keys(run_id text) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office._all_run_status_counts(_part integer) RETURNS TABLE(status text, agents bigint, runs bigint, oldest_requested_at timestamp with time zone, exact boolean)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.run_status_counts();
$$;
COMMENT ON FUNCTION office._all_run_status_counts(integer) IS
    'Internal: office.run_status_counts on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_run_status_counts(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_run_status_counts(integer) TO office_admin, office_reader;
CREATE FUNCTION office.run_status_counts() RETURNS TABLE(status text, agents bigint, runs bigint, oldest_requested_at timestamp with time zone, exact boolean)
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT status,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(agents) THEN pg_catalog.sum(agents)::bigint END AS agents,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(runs) THEN pg_catalog.sum(runs)::bigint END AS runs,
           pg_catalog.min(oldest_requested_at) AS oldest_requested_at,
           pg_catalog.bool_and(exact) AS exact
      FROM office._all_run_status_counts(0) WITH ORDINALITY AS r(status, agents, runs, oldest_requested_at, exact, _n)
     GROUP BY status
     ORDER BY pg_catalog.min(_n)
$fn$;
COMMENT ON FUNCTION office.run_status_counts() IS
    'Runs per status without reading the whole run table: queued and claimed exactly (agents, runs, oldest requested_at); finished, failed and cancelled exactly while the table holds under 10,000 runs (planner estimate), else the last ANALYZE''s estimate (agents and oldest NULL, exact false).';
REVOKE EXECUTE ON FUNCTION office.run_status_counts() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.run_status_counts() TO office_admin, office_reader;

CREATE FUNCTION office._all_run_window_end(_part integer, _a1 text) RETURNS SETOF text
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT office.run_window_end($2) AS run_window_end;
$$;
COMMENT ON FUNCTION office._all_run_window_end(integer, text) IS
    'Internal: office.run_window_end on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_run_window_end(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_run_window_end(integer, text) TO office_admin, office_reader;
CREATE FUNCTION office.run_window_end(before_id text DEFAULT NULL::text) RETURNS text
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT pg_catalog.max(x) FROM office._all_run_window_end(0, $1) AS x
$fn$;
COMMENT ON FUNCTION office.run_window_end(before_id text) IS
    'The oldest id of the window list_runs scans before before_id (the newest 10,000 runs older than it; NULL: fewer remain, the window reaches the oldest run). A page that is not full continues with before_id => this id.';
REVOKE EXECUTE ON FUNCTION office.run_window_end(before_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.run_window_end(before_id text) TO office_admin, office_reader;

CREATE FUNCTION office._all_schema_version(_part integer) RETURNS SETOF text
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT office.schema_version() AS schema_version;
$$;
COMMENT ON FUNCTION office._all_schema_version(integer) IS
    'Internal: office.schema_version on the shard of partition _part (all).';
REVOKE EXECUTE ON FUNCTION office._all_schema_version(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_schema_version(integer) TO office_admin, office_producer, office_reader, office_worker;
CREATE FUNCTION office.schema_version() RETURNS text
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v text[];
BEGIN
    SELECT pg_catalog.array_agg(DISTINCT x) INTO v FROM office._all_schema_version(0) AS x;
    IF pg_catalog.cardinality(v) <> 1 THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = pg_catalog.format(
                'office_proxy: the shards run different office versions: %s', v);
    END IF;
    RETURN v[1];
END
$fn$;
COMMENT ON FUNCTION office.schema_version() IS
    'The installed office schema version; every upgrade script replaces it.';
REVOKE EXECUTE ON FUNCTION office.schema_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.schema_version() TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office.second_precision_text(ts timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
 SET search_path TO 'pg_catalog', 'pg_temp'
RETURN to_char((ts AT TIME ZONE 'UTC'::text), 'YYYY-MM-DD HH24:MI:SS'::text);
COMMENT ON FUNCTION office.second_precision_text(ts timestamp with time zone) IS
    'The instant as YYYY-MM-DD HH24:MI:SS in UTC (truncated to whole seconds), whatever the session TimeZone (docs/domain.md §2.22, §3.10).';
REVOKE EXECUTE ON FUNCTION office.second_precision_text(ts timestamp with time zone) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.second_precision_text(ts timestamp with time zone) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office._on_set_agent_status(_part integer, _a1 text, _a2 text) RETURNS office.agent_profiles
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.set_agent_status($2, $3);
$$;
COMMENT ON FUNCTION office._on_set_agent_status(integer, text, text) IS
    'Internal: office.set_agent_status on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_set_agent_status(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_set_agent_status(integer, text, text) TO office_admin, office_producer;
CREATE FUNCTION office.set_agent_status(id text, status text) RETURNS office.agent_profiles
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_set_agent_status(office._route('agent', $1), $1, $2)
$fn$;
COMMENT ON FUNCTION office.set_agent_status(id text, status text) IS
    'Sets the status of an agent (idle, running, paused, stopped, pending_approval); unknown agent OFA01, unknown status 22023.';
REVOKE EXECUTE ON FUNCTION office.set_agent_status(id text, status text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.set_agent_status(id text, status text) TO office_admin, office_producer;

CREATE FUNCTION office._ev_set_aside(_part integer, _parts integer, _home integer, _a1 text, _a2 text, _a3 text, _a4 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT CASE WHEN EXISTS (
        SELECT FROM office.events e LEFT JOIN office.tasks t ON t.id = e.task_id
         WHERE e.id = $5::bigint AND coalesce(pg_catalog.hashtext(t.workspace_id) & ($2 - 1), $3) <> $1)
    THEN false ELSE office.set_aside($4, $5, $6, $7) END AS set_aside;
$$;
COMMENT ON FUNCTION office._ev_set_aside(integer, integer, integer, text, text, text, text) IS
    'Internal: office.set_aside on the shard of partition _part (ev).';
REVOKE EXECUTE ON FUNCTION office._ev_set_aside(integer, integer, integer, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._ev_set_aside(integer, integer, integer, text, text, text, text) TO office_admin;
CREATE FUNCTION office._on_set_aside(_part integer, _a1 text, _a2 text, _a3 text, _a4 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.set_aside($2, $3, $4, $5) AS set_aside;
$$;
COMMENT ON FUNCTION office._on_set_aside(integer, text, text, text, text) IS
    'Internal: office.set_aside on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_set_aside(integer, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_set_aside(integer, text, text, text, text) TO office_admin;
CREATE FUNCTION office.set_aside(loop text, row_id text, reason text, sqlstate text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_id bigint;
    v_part integer;
    v_kind text;
BEGIN
    IF $1 = 'subscriber' AND $2 ~ '^[1-9][0-9]{0,17}$' THEN
        v_id := $2::bigint;
        v_part := (v_id & (office._partitions() - 1))::integer;
        RETURN office._ev_set_aside(v_part, office._partitions(), office._home(v_part), $1, (v_id / office._partitions())::text, $3, $4);
    END IF;
    v_kind := CASE $1 WHEN 'wakeups' THEN 'wakeup' WHEN 'cron' THEN 'trigger' WHEN 'sweep' THEN 'task' WHEN 'recovery' THEN 'run' END;
    v_part := CASE WHEN v_kind IS NOT NULL THEN office._route(v_kind, $2) ELSE 0 END;
    RETURN office._on_set_aside(v_part, $1, $2, $3, $4);
END
$fn$;
COMMENT ON FUNCTION office.set_aside(loop text, row_id text, reason text, sqlstate text) IS
    'Sets a row its loop cannot process aside in office.poison (reason cut to 1000 characters): the loop''s scan leaves it out from now on. True when it was set aside now; false when it already was, or when sqlstate is transient (class 40, 53, 58, 55P03: the row is tried again). Unknown loop, empty row_id 22023.';
REVOKE EXECUTE ON FUNCTION office.set_aside(loop text, row_id text, reason text, sqlstate text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.set_aside(loop text, row_id text, reason text, sqlstate text) TO office_admin;

CREATE FUNCTION office._on_set_wake_policy(_part integer, _a1 text, _a2 text, _a3 interval, _a4 integer, _a5 interval, _a6 numeric, _a7 text, _a8 integer, _a9 interval[]) RETURNS office.wake_policies
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.set_wake_policy($2, $3, $4, $5, $6, $7, $8, $9, $10);
$$;
COMMENT ON FUNCTION office._on_set_wake_policy(integer, text, text, interval, integer, interval, numeric, text, integer, interval[]) IS
    'Internal: office.set_wake_policy on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_set_wake_policy(integer, text, text, interval, integer, interval, numeric, text, integer, interval[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_set_wake_policy(integer, text, text, interval, integer, interval, numeric, text, integer, interval[]) TO office_admin;
CREATE FUNCTION office.set_wake_policy(scope text, scope_id text, cooldown interval DEFAULT NULL::interval, max_runs integer DEFAULT NULL::integer, per interval DEFAULT NULL::interval, budget numeric DEFAULT NULL::numeric, budget_period text DEFAULT 'month'::text, max_retries integer DEFAULT NULL::integer, retry_backoff interval[] DEFAULT NULL::interval[]) RETURNS office.wake_policies
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_set_wake_policy(CASE $1 WHEN 'agent' THEN office._route('agent', $2) WHEN 'workspace' THEN coalesce(office._partition($2), 0) ELSE 0 END, $1, $2, $3, $4, $5, $6, $7, $8, $9)
$fn$;
COMMENT ON FUNCTION office.set_wake_policy(scope text, scope_id text, cooldown interval, max_runs integer, per interval, budget numeric, budget_period text, max_retries integer, retry_backoff interval[]) IS
    'Inserts or replaces the wake policy of an agent or a workspace (scope agent|workspace, scope_id) and returns it; NULL = not set here. max_runs (1-10000) and per (a positive interval) come together; cooldown, per and each retry_backoff step finite intervals from 0 to 100 years; budget finite and >= 0; budget_period day, week or month; max_retries 0-100; retry_backoff 1-32 intervals. Bad input 22023 naming the argument (nothing written); unknown agent OFA01. Where the row replaced had a budget, cooldown or run cap, the scope''s agents with queued runs are listed again for claim_run (a hold it kept may be lifted).';
REVOKE EXECUTE ON FUNCTION office.set_wake_policy(scope text, scope_id text, cooldown interval, max_runs integer, per interval, budget numeric, budget_period text, max_retries integer, retry_backoff interval[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.set_wake_policy(scope text, scope_id text, cooldown interval, max_runs integer, per interval, budget numeric, budget_period text, max_retries integer, retry_backoff interval[]) TO office_admin;

CREATE FUNCTION office._on_sweep_stuck_parents(_part integer, _a1 integer) RETURNS SETOF office.reconcile_result
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.sweep_stuck_parents($2);
$$;
COMMENT ON FUNCTION office._on_sweep_stuck_parents(integer, integer) IS
    'Internal: office.sweep_stuck_parents on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_sweep_stuck_parents(integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_sweep_stuck_parents(integer, integer) TO office_admin, office_producer;
CREATE FUNCTION office.sweep_stuck_parents(max_rows integer DEFAULT 5) RETURNS SETOF office.reconcile_result
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    v_left integer := $1;
    v_n integer;
BEGIN
    IF v_left IS NULL OR v_left < 1 THEN  -- the shard's own answer (22023, or none)
        RETURN QUERY SELECT * FROM office._on_sweep_stuck_parents(0, $1);
        RETURN;
    END IF;
    FOR s IN SELECT * FROM office._shards() ORDER BY pg_catalog.random() LOOP
        EXIT WHEN v_left = 0;
        BEGIN
            RETURN QUERY SELECT * FROM office._on_sweep_stuck_parents(s.part, v_left);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_left := v_left - v_n;
        EXCEPTION WHEN OTHERS THEN
            IF NOT office._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
            RAISE WARNING 'office_proxy: shard % skipped: %',
                office._shard_name(s.shard), SQLERRM;
        END;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION office.sweep_stuck_parents(max_rows integer) IS
    'One tick of the stuck-parent sweep: forgets the marked parents that are not stuck, lists up to max_rows stuck parents and reconciles each (one reconcile_result per parent; a parent another transaction holds, or that was delivered meanwhile, is left for the next tick; one whose reconcile raises is set aside in office.poison, loop sweep, with no result). Negative max_rows 22023.';
REVOKE EXECUTE ON FUNCTION office.sweep_stuck_parents(max_rows integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.sweep_stuck_parents(max_rows integer) TO office_admin, office_producer;

CREATE FUNCTION office._on_sync_routine_run_status(_part integer, _a1 text, _a2 text) RETURNS boolean
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.sync_routine_run_status($2, $3) AS sync_routine_run_status;
$$;
COMMENT ON FUNCTION office._on_sync_routine_run_status(integer, text, text) IS
    'Internal: office.sync_routine_run_status on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_sync_routine_run_status(integer, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_sync_routine_run_status(integer, text, text) TO office_admin, office_producer, office_worker;
CREATE FUNCTION office.sync_routine_run_status(task_id text, terminal text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_sync_routine_run_status(office._route('task', $1), $1, $2)
$fn$;
COMMENT ON FUNCTION office.sync_routine_run_status(task_id text, terminal text) IS
    'Closes (conditional close) the newest routine run linked to the task; true if this call closed it. An empty or NULL task id is a no-op (false). Called by the task-terminal trigger before blockers and parents are woken.';
REVOKE EXECUTE ON FUNCTION office.sync_routine_run_status(task_id text, terminal text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.sync_routine_run_status(task_id text, terminal text) TO office_admin, office_producer, office_worker;

CREATE FUNCTION office._ev_take_poison_reports(_part integer, _parts integer, _home integer, _a1 text, _a2 integer) RETURNS TABLE(row_id text, reason text, sqlstate text)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT CASE WHEN $4 = 'subscriber' AND p.row_id ~ '^[1-9][0-9]{0,17}$' THEN (p.row_id::bigint * $2 + coalesce(pg_catalog.hashtext(t.workspace_id) & ($2 - 1), $3))::text ELSE p.row_id END AS row_id, p.reason, p.sqlstate
      FROM office.take_poison_reports($4, $5) p
      LEFT JOIN office.events e ON e.id = CASE WHEN $4 = 'subscriber' AND p.row_id ~ '^[1-9][0-9]{0,17}$' THEN p.row_id::bigint END
      LEFT JOIN office.tasks t ON t.id = e.task_id;
$$;
COMMENT ON FUNCTION office._ev_take_poison_reports(integer, integer, integer, text, integer) IS
    'Internal: office.take_poison_reports on the shard of partition _part (ev).';
REVOKE EXECUTE ON FUNCTION office._ev_take_poison_reports(integer, integer, integer, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._ev_take_poison_reports(integer, integer, integer, text, integer) TO office_admin, office_worker;
CREATE FUNCTION office.take_poison_reports(loop text, max_rows integer DEFAULT 100) RETURNS TABLE(row_id text, reason text, sqlstate text)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    s record;
    v_left integer := $2;
    v_n integer;
BEGIN
    IF v_left IS NULL OR v_left < 1 THEN  -- the shard's own answer (22023, or none)
        RETURN QUERY SELECT * FROM office._ev_take_poison_reports(0, office._partitions(), 0, $1, $2);
        RETURN;
    END IF;
    FOR s IN SELECT * FROM office._shards() ORDER BY pg_catalog.random() LOOP
        EXIT WHEN v_left = 0;
        BEGIN
            RETURN QUERY SELECT * FROM office._ev_take_poison_reports(s.part, office._partitions(), s.part, $1, v_left);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_left := v_left - v_n;
        EXCEPTION WHEN OTHERS THEN
            IF NOT office._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
            RAISE WARNING 'office_proxy: shard % skipped: %',
                office._shard_name(s.shard), SQLERRM;
        END;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION office.take_poison_reports(loop text, max_rows integer) IS
    'The rows of loop set aside and not reported yet (at most max_rows), stamped reported_at: each is handed to exactly one caller, the daemon, which logs and counts it once. max_rows below 1: 22023.';
REVOKE EXECUTE ON FUNCTION office.take_poison_reports(loop text, max_rows integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.take_poison_reports(loop text, max_rows integer) TO office_admin, office_worker;

CREATE FUNCTION office._on_task_terminal_status(_part integer, _a1 text) RETURNS text
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT office.task_terminal_status($2) AS task_terminal_status;
$$;
COMMENT ON FUNCTION office._on_task_terminal_status(integer, text) IS
    'Internal: office.task_terminal_status on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_task_terminal_status(integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_task_terminal_status(integer, text) TO office_admin, office_reader;
CREATE FUNCTION office.task_terminal_status(task_id text) RETURNS text
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT office._on_task_terminal_status(office._route('task', $1), $1)
$fn$;
COMMENT ON FUNCTION office.task_terminal_status(task_id text) IS
    'The routine gate''s view of a task: cancelled if archived (any state), else done (COMPLETED), failed (FAILED), cancelled (CANCELLED), '''' otherwise; missing when there is no such task.';
REVOKE EXECUTE ON FUNCTION office.task_terminal_status(task_id text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.task_terminal_status(task_id text) TO office_admin, office_reader;

CREATE FUNCTION office._on_upsert_agent(_part integer, _a1 text, _a2 text, _a3 text, _a4 text) RETURNS office.agent_profiles
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT * FROM office.upsert_agent($2, $3, $4, $5);
$$;
COMMENT ON FUNCTION office._on_upsert_agent(integer, text, text, text, text) IS
    'Internal: office.upsert_agent on the shard of partition _part (on).';
REVOKE EXECUTE ON FUNCTION office._on_upsert_agent(integer, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._on_upsert_agent(integer, text, text, text, text) TO office_admin, office_producer;
CREATE FUNCTION office.upsert_agent(id text, workspace_id text, name text DEFAULT ''::text, status text DEFAULT 'idle'::text) RETURNS office.agent_profiles
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM office._on_upsert_agent(office._checked_partition($2, ARRAY['agent', $1, 'OFW01']), $1, $2, $3, $4)
$fn$;
COMMENT ON FUNCTION office.upsert_agent(id text, workspace_id text, name text, status text) IS
    'Inserts the agent or updates its name and status; a NULL id generates one. Bad id, status or a name over 64 KiB: 22023; an existing agent of another workspace: OFW01 (agents never move).';
REVOKE EXECUTE ON FUNCTION office.upsert_agent(id text, workspace_id text, name text, status text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.upsert_agent(id text, workspace_id text, name text, status text) TO office_admin, office_producer;

CREATE FUNCTION office.wake_operation_id(parent_task_id text, child_set_key text, generation text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE STRICT
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
COMMENT ON FUNCTION office.wake_operation_id(parent_task_id text, child_set_key text, generation text) IS
    'Engine operation id of a children-completed wave: task_children_completed:<parent_task_id>:<sha256hex(parent \0 child ids \0 generation)>; child ids are the child_set_key items without their last ":" segment (docs/domain.md §3.5).';
REVOKE EXECUTE ON FUNCTION office.wake_operation_id(parent_task_id text, child_set_key text, generation text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.wake_operation_id(parent_task_id text, child_set_key text, generation text) TO office_admin, office_producer, office_reader, office_worker;

CREATE FUNCTION office._all_dedup_stats(_part integer) RETURNS TABLE(queue text, reason text, kind text, total bigint)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.dedup_stats;
$$;
COMMENT ON FUNCTION office._all_dedup_stats(integer) IS
    'Internal: office.dedup_stats of every shard.';
REVOKE EXECUTE ON FUNCTION office._all_dedup_stats(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_dedup_stats(integer) TO office_admin, office_reader;
CREATE VIEW office.dedup_stats AS
    SELECT queue,
           reason,
           kind,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(total) THEN pg_catalog.sum(total)::bigint END AS total
      FROM office._all_dedup_stats(0) WITH ORDINALITY AS r(queue, reason, kind, total, _n)
     GROUP BY queue, reason, kind
     ORDER BY pg_catalog.min(_n);
COMMENT ON VIEW office.dedup_stats IS
    'Suppressed enqueues by queue (runs|wakeup), reason and kind (windowed|durable|coalesced|guarded; coalesced and guarded are queue runs). Counters restart from zero after a crash.';
REVOKE ALL ON office.dedup_stats FROM PUBLIC;
GRANT SELECT ON office.dedup_stats TO office_admin, office_reader;
CREATE FUNCTION office._all_governance_stats(_part integer) RETURNS TABLE(agent_profile_id text, held_by text, runs bigint)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.governance_stats;
$$;
COMMENT ON FUNCTION office._all_governance_stats(integer) IS
    'Internal: office.governance_stats of every shard.';
REVOKE EXECUTE ON FUNCTION office._all_governance_stats(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_governance_stats(integer) TO office_admin, office_reader;
CREATE VIEW office.governance_stats AS
    SELECT agent_profile_id,
           held_by,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(runs) THEN pg_catalog.sum(runs)::bigint END AS runs
      FROM office._all_governance_stats(0) WITH ORDINALITY AS r(agent_profile_id, held_by, runs, _n)
     GROUP BY agent_profile_id, held_by
     ORDER BY pg_catalog.min(_n);
COMMENT ON VIEW office.governance_stats IS
    'Queued runs held now, by agent and hold (paused, budget, not_before, cooldown, run_cap; a claim in progress not counted), in explain_agent''s words.';
REVOKE ALL ON office.governance_stats FROM PUBLIC;
GRANT SELECT ON office.governance_stats TO office_admin, office_reader;
CREATE FUNCTION office._all_keyless_stats(_part integer) RETURNS TABLE(reason text, cause text, total bigint)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.keyless_stats;
$$;
COMMENT ON FUNCTION office._all_keyless_stats(integer) IS
    'Internal: office.keyless_stats of every shard.';
REVOKE EXECUTE ON FUNCTION office._all_keyless_stats(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_keyless_stats(integer) TO office_admin, office_reader;
CREATE VIEW office.keyless_stats AS
    SELECT reason,
           cause,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(total) THEN pg_catalog.sum(total)::bigint END AS total
      FROM office._all_keyless_stats(0) WITH ORDINALITY AS r(reason, cause, total, _n)
     GROUP BY reason, cause
     ORDER BY pg_catalog.min(_n);
COMMENT ON VIEW office.keyless_stats IS
    'Keyless enqueues reported with a cause, by reason and cause (unresolved|by_design). Counters restart from zero after a crash.';
REVOKE ALL ON office.keyless_stats FROM PUBLIC;
GRANT SELECT ON office.keyless_stats TO office_admin, office_reader;
CREATE FUNCTION office._all_queue_stats(_part integer) RETURNS TABLE(status text, agents bigint, runs bigint, oldest_requested_at timestamp with time zone)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON ALL;
    SELECT * FROM office.queue_stats;
$$;
COMMENT ON FUNCTION office._all_queue_stats(integer) IS
    'Internal: office.queue_stats of every shard.';
REVOKE EXECUTE ON FUNCTION office._all_queue_stats(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_queue_stats(integer) TO office_admin, office_reader;
CREATE VIEW office.queue_stats AS
    SELECT status,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(agents) THEN pg_catalog.sum(agents)::bigint END AS agents,
           CASE WHEN pg_catalog.count(*) = pg_catalog.count(runs) THEN pg_catalog.sum(runs)::bigint END AS runs,
           pg_catalog.min(oldest_requested_at) AS oldest_requested_at
      FROM office._all_queue_stats(0) WITH ORDINALITY AS r(status, agents, runs, oldest_requested_at, _n)
     GROUP BY status
     ORDER BY pg_catalog.min(_n);
COMMENT ON VIEW office.queue_stats IS
    'Runs per status (every status, zero included): distinct agents, runs, and the oldest requested_at.';
REVOKE ALL ON office.queue_stats FROM PUBLIC;
GRANT SELECT ON office.queue_stats TO office_admin, office_reader;

CREATE FUNCTION office._all_poison(_part integer, _parts integer, _home integer) RETURNS TABLE(loop text, row_id text, reason text, sqlstate text, set_aside_at timestamp with time zone, reported_at timestamp with time zone)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT p.loop, CASE WHEN p.loop = 'subscriber' AND p.row_id ~ '^[1-9][0-9]{0,17}$' THEN (p.row_id::bigint * $2 + coalesce(pg_catalog.hashtext(t.workspace_id) & ($2 - 1), $3))::text ELSE p.row_id END AS row_id, p.reason, p.sqlstate, p.set_aside_at, p.reported_at
      FROM office.poison p
      LEFT JOIN office.events e ON e.id = CASE WHEN p.loop = 'subscriber' AND p.row_id ~ '^[1-9][0-9]{0,17}$' THEN p.row_id::bigint END
      LEFT JOIN office.tasks t ON t.id = e.task_id;
$$;
COMMENT ON FUNCTION office._all_poison(integer, integer, integer) IS
    'Internal: office.poison of the shard of partition _part'
    ' (subscriber rows by their event''s id through the proxy).';
REVOKE EXECUTE ON FUNCTION office._all_poison(integer, integer, integer) FROM PUBLIC;
CREATE VIEW office.poison AS
    SELECT p.* FROM office._shards() s
     CROSS JOIN LATERAL office._all_poison(s.part, office._partitions(), s.part) p;
COMMENT ON VIEW office.poison IS
    'Rows a background loop could not process, set aside (dead letters): the loop (subscriber: office.events.id; wakeups: wakeup_requests.id; cron: routine_triggers.id; sweep: the parent task id; recovery: runs.id), the row''s id, the error and its SQLSTATE (NULL: the daemon could not decode the row), when, and when a daemon logged and counted it. Each loop''s scan leaves these rows out until release_poison.';
REVOKE ALL ON office.poison FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_poison(integer, integer, integer) TO office_admin, office_reader;
GRANT SELECT ON office.poison TO office_admin, office_reader;

CREATE FUNCTION office._all_wake_decisions(_part integer, _parts integer, _home integer) RETURNS TABLE(id bigint, at timestamp with time zone, agent_profile_id text, run_id text, decision text, origin text, cause_run_id text, chain_depth integer, detail jsonb)
    LANGUAGE plproxy
    SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER 'office_cluster';
    RUN ON _part;
    SELECT d.id * $2 + coalesce(pg_catalog.hashtext(a.workspace_id) & ($2 - 1), $3) AS id, d.at, d.agent_profile_id, d.run_id, d.decision, d.origin, d.cause_run_id, d.chain_depth, d.detail
      FROM office.wake_decisions d
      LEFT JOIN office.agent_profiles a ON a.id = d.agent_profile_id;
$$;
COMMENT ON FUNCTION office._all_wake_decisions(integer, integer, integer) IS
    'Internal: office.wake_decisions of the shard of partition _part'
    ' (ids as the proxy returns them).';
REVOKE EXECUTE ON FUNCTION office._all_wake_decisions(integer, integer, integer) FROM PUBLIC;
CREATE VIEW office.wake_decisions AS
    SELECT d.* FROM office._shards() s
     CROSS JOIN LATERAL office._all_wake_decisions(s.part, office._partitions(), s.part) d;
COMMENT ON VIEW office.wake_decisions IS
    'One row per wake-governance decision (docs/api.md §9): guarded, pulled_forward, budget_warning, budget_exhausted, with the agent, the run (NULL for guarded), the request''s origin, cause and chain depth, and details; prune_wake_decisions deletes old rows.';
REVOKE ALL ON office.wake_decisions FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._all_wake_decisions(integer, integer, integer) TO office_admin, office_reader;
GRANT SELECT ON office.wake_decisions TO office_admin, office_reader;
