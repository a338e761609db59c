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
