-- office: tasks, blockers, assignment generations and terminal effects
-- (docs/api.md §2, the child-set readers of §5; docs/domain.md §1.1-§1.3, §2.8-§2.15, §2.19).
--
-- The rules live in triggers so that they hold for every client, a plain
-- INSERT or UPDATE in psql included:
--   * every write of assignee_agent_profile_id (UPDATE OF fires whenever the
--     column is in the SET list, even with the value it already has) bumps
--     assignment_generation by one in the writing transaction; a row update
--     takes the row lock, so concurrent reassignments of one task serialise and
--     commit distinct generations. An INSERT starts at 1 when both assignee
--     and step are set, else 0. The generation is never written by hand.
--   * a change of state into COMPLETED, FAILED or CANCELLED runs, in this
--     order: (1) office.sync_routine_run_status(task, terminal) of
--     55_routines.sql, which closes the routine run linked to the task;
--     (2) the blockers-resolved wake of each dependent whose
--     blockers are now all terminal; (3) the children-completed wake of the
--     parent when all its children are COMPLETED or CANCELLED.
--   * a blocker edge that would close a cycle is refused (22023).
-- The event outbox (task.assigned, task.moved) is written by the triggers of
-- 45_events.sql.
--
-- Lost wakes. Two transactions completing the two blockers of one task (or
-- two children of one parent) at the same moment would each see the other's
-- task as not yet terminal (READ COMMITTED: uncommitted rows are invisible)
-- and wake nobody. Each terminal transition therefore takes a
-- transaction-scoped advisory lock on every dependent (and on the parent)
-- before it re-reads the states; the lock is held until commit, so the second
-- transaction reads after the first has committed, in a statement with a fresh
-- snapshot, and sees both tasks terminal (tests/isolation/specs/
-- tasks_blockers_race.spec). These guarantees are for READ COMMITTED, the
-- default; a transaction at a stricter level that has to wait for such a lock
-- fails with 40001 instead (its snapshot could not see the other's commit).
--
-- Internal producers (create_task, assign_task, the terminal effects) never
-- abort the caller's change because of the woken agent: a missing agent or
-- one that does not accept runs gives the outcome 'skipped' and no run.

CREATE TYPE office.task_result AS (
    task_id text, assignment_generation bigint, outcome text, dedup_kind text, run_id text);
COMMENT ON TYPE office.task_result IS
    'Result of office.create_task: the task id, its assignment generation, and the outcome of its task_assigned run (NULL when none was due; skipped when the assignee does not accept runs).';

CREATE TYPE office.assign_result AS (
    assignment_generation bigint, interrupt boolean, outcome text, dedup_kind text, run_id text);
COMMENT ON TYPE office.assign_result IS
    'Result of office.assign_task: the generation this call committed, whether the previous assignee is to be interrupted, and the outcome of the task_assigned run (NULL when none was due).';

CREATE TABLE office.tasks (
    id                        text PRIMARY KEY
                              CHECK (office._is_id(id)),
    workspace_id              text NOT NULL
                              CHECK (office._is_id(workspace_id)),
    parent_id                 text REFERENCES office.tasks (id) ON DELETE SET NULL
                              CHECK (parent_id <> id),
    workflow_step_id          text,
    title                     text NOT NULL DEFAULT '',
    state                     text NOT NULL DEFAULT 'TODO'
                              CHECK (state IN ('TODO', 'CREATED', 'SCHEDULING', 'IN_PROGRESS', 'REVIEW',
                                               'BLOCKED', 'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED',
                                               'CANCELLED')),
    assignee_agent_profile_id text,
    assignment_generation     bigint NOT NULL DEFAULT 0 CHECK (assignment_generation >= 0),
    is_office                 boolean NOT NULL DEFAULT true,
    is_ephemeral              boolean NOT NULL DEFAULT false,
    archived_at               timestamptz,
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('office.tasks', '');
REVOKE ALL ON TABLE office.tasks FROM PUBLIC;
COMMENT ON TABLE office.tasks IS
    'Tasks. Triggers bump assignment_generation on every write of the assignee, stamp updated_at on every write, write the task.assigned/task.moved events and run the terminal effects.';
COMMENT ON COLUMN office.tasks.assignment_generation IS
    'Bumped by one on every committed write of assignee_agent_profile_id (same agent and unassign included); the generation of assignment_key. Maintained by trigger, never written by hand.';

CREATE INDEX idx_tasks_parent_id ON office.tasks (parent_id);
CREATE INDEX idx_tasks_workspace ON office.tasks (workspace_id);
-- The parents of an agent, when it starts accepting runs again (the sweep's
-- marks, 60_parent_wake.sql). The assignee changes rarely, so this index keeps
-- state changes HOT (an index on, or predicated on, state or updated_at would
-- make every task write update every index of office.tasks).
CREATE INDEX idx_tasks_assignee ON office.tasks (assignee_agent_profile_id)
    WHERE assignee_agent_profile_id IS NOT NULL;

CREATE TABLE office.task_blockers (
    task_id         text NOT NULL REFERENCES office.tasks (id) ON DELETE CASCADE,
    blocker_task_id text NOT NULL REFERENCES office.tasks (id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, blocker_task_id),
    CHECK (task_id <> blocker_task_id)
);
SELECT pg_catalog.pg_extension_config_dump('office.task_blockers', '');
REVOKE ALL ON TABLE office.task_blockers FROM PUBLIC;
COMMENT ON TABLE office.task_blockers IS
    'blocker_task_id blocks task_id. Edges survive resolution; the graph stays acyclic (trigger).';

-- The tasks a task blocks (terminal effects, cycle search).
CREATE INDEX idx_task_blockers_blocker ON office.task_blockers (blocker_task_id);

-- The task states a blocker counts as done in (terminal: FAILED counts) and
-- those a child counts as finished in for its parent's wave (FAILED does not
-- complete a parent), written once; folded into constants like
-- office._statuses_refusing_runs.
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

-- Internal: 22023 unless state is a task state.
CREATE FUNCTION office._check_task_state(state text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF state IS NULL OR state NOT IN ('TODO', 'CREATED', 'SCHEDULING', 'IN_PROGRESS', 'REVIEW', 'BLOCKED',
                                      'WAITING_FOR_INPUT', 'COMPLETED', 'FAILED', 'CANCELLED') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown task state %s (expected TODO, CREATED, SCHEDULING, IN_PROGRESS, REVIEW, '
                             'BLOCKED, WAITING_FOR_INPUT, COMPLETED, FAILED or CANCELLED)',
                             coalesce(quote_literal(state), 'NULL'));
    END IF;
    RETURN state;
END
$$;
COMMENT ON FUNCTION office._check_task_state(text) IS
    'Internal: returns state when it is a task state, else raises 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._check_task_state(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_task_state(text)
    TO office_producer, office_worker, office_reader, office_admin;

-- Internal: the enqueue of an internal producer. A missing agent, or one that
-- does not accept runs, is the outcome 'skipped' (no run, nothing raised).
-- Its origin and cause come from the actor (office._actor_lineage), so a
-- chain through tasks is guarded like one through enqueue_run.
-- The agent row is share-locked so its status cannot change between this
-- check and enqueue_run's own (which would otherwise raise OFA02 and abort
-- the caller's change).
CREATE FUNCTION office._wake(agent_profile_id text, reason text, payload jsonb,
                             idempotency_key text, task_id text)
    RETURNS office.enqueue_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_status  text;
    v_result  office.enqueue_result;
    v_lineage record;
BEGIN
    SELECT a.status INTO v_status
      FROM office.agent_profiles a
     WHERE a.id = _wake.agent_profile_id
       FOR SHARE;
    IF NOT FOUND OR v_status = ANY (office._statuses_refusing_runs()) THEN
        v_result := ('skipped', NULL, NULL);
        RETURN v_result;
    END IF;
    SELECT * INTO v_lineage FROM office._actor_lineage(_wake.agent_profile_id);
    RETURN office.enqueue_run(agent_profile_id => _wake.agent_profile_id,
                              reason           => _wake.reason,
                              payload          => _wake.payload,
                              idempotency_key  => _wake.idempotency_key,
                              task_id          => _wake.task_id,
                              origin           => v_lineage.origin,
                              cause_run_id     => v_lineage.cause_run_id);
END
$$;
COMMENT ON FUNCTION office._wake(text, text, jsonb, text, text) IS
    'Internal: enqueue_run for an internal producer, its origin and cause from the setting office.actor (office._actor_lineage); a missing agent or one that does not accept runs is (skipped, NULL, NULL) instead of an error.';
REVOKE EXECUTE ON FUNCTION office._wake(text, text, jsonb, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._wake(text, text, jsonb, text, text) TO office_admin;

-- --- readers ------------------------------------------------------------------

-- The wave of a parent: its non-archived children, read in one place for the
-- readers below, the sweep's candidates and reconcile_parent
-- (60_parent_wake.sql), so that every path derives the same child set key,
-- generation and hence wake_operation_id. PL/pgSQL, not SQL: a SQL function
-- with a SET clause is planned again at every call (once per candidate
-- parent in a sweep).
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

CREATE FUNCTION office.child_set_key(parent_task_id text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    RETURN (SELECT w.child_set_key FROM office._child_wave(child_set_key.parent_task_id) AS w);
COMMENT ON FUNCTION office.child_set_key(text) IS
    'id:STATE of the non-archived children of the parent, ordered by id (bytewise), joined with ","; '''' if none (docs/domain.md §3.4).';
REVOKE EXECUTE ON FUNCTION office.child_set_key(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.child_set_key(text) TO office_reader, office_admin;

CREATE FUNCTION office.child_generation(parent_task_id text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    RETURN (SELECT w.newest_child_updated_at FROM office._child_wave(child_generation.parent_task_id) AS w);
COMMENT ON FUNCTION office.child_generation(text) IS
    'second_precision_text(max(updated_at)) over the non-archived children of the parent (UTC); '''' if none (docs/domain.md §2.19).';
REVOKE EXECUTE ON FUNCTION office.child_generation(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.child_generation(text) TO office_reader, office_admin;

CREATE FUNCTION office.task_terminal_status(task_id text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    RETURN coalesce((SELECT CASE
                              WHEN t.archived_at IS NOT NULL THEN 'cancelled'
                              WHEN t.state = 'COMPLETED' THEN 'done'
                              WHEN t.state = 'FAILED' THEN 'failed'
                              WHEN t.state = 'CANCELLED' THEN 'cancelled'
                              ELSE ''
                            END
                       FROM office.tasks t
                      WHERE t.id = task_terminal_status.task_id),
                    'missing');
COMMENT ON FUNCTION office.task_terminal_status(text) IS
    'The routine gate''s view of a task: cancelled if archived (any state), else done (COMPLETED), failed (FAILED), cancelled (CANCELLED), '''' otherwise; missing when there is no such task.';
REVOKE EXECUTE ON FUNCTION office.task_terminal_status(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.task_terminal_status(text) TO office_reader, office_admin;

CREATE FUNCTION office.is_task_terminal(task_id text) RETURNS boolean
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
COMMENT ON FUNCTION office.is_task_terminal(text) IS
    'Whether the task is COMPLETED, FAILED or CANCELLED (the blocker terminal set); unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.is_task_terminal(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.is_task_terminal(text) TO office_reader, office_admin;

CREATE FUNCTION office.get_task(task_id text) RETURNS SETOF office.tasks
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT t.* FROM office.tasks t WHERE t.id = get_task.task_id;
END;
COMMENT ON FUNCTION office.get_task(text) IS
    'The task row, or no row when there is no such task.';
REVOKE EXECUTE ON FUNCTION office.get_task(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.get_task(text)
    TO office_producer, office_worker, office_reader, office_admin;

-- --- triggers: generation and updated_at -------------------------------------

-- BEFORE INSERT: normalise empty references to NULL; the generation starts at
-- 1 when both assignee and step are set, else 0. An explicit non-zero
-- generation is kept (a restore of existing rows must never reset it).
CREATE FUNCTION office._tasks_before_insert() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.assignee_agent_profile_id := nullif(NEW.assignee_agent_profile_id, '');
    NEW.parent_id := nullif(NEW.parent_id, '');
    IF NEW.assignment_generation = 0
       AND NEW.assignee_agent_profile_id IS NOT NULL
       AND coalesce(NEW.workflow_step_id, '') <> '' THEN
        NEW.assignment_generation := 1;
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._tasks_before_insert() IS
    'Trigger: a new task''s assignment_generation is 1 when assignee and step are both non-empty, else 0; empty assignee/parent become NULL.';
REVOKE EXECUTE ON FUNCTION office._tasks_before_insert() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_before_insert() TO office_admin;

CREATE TRIGGER tasks_10_before_insert
    BEFORE INSERT ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_before_insert();

-- BEFORE UPDATE (every update): the generation is not written by hand;
-- updated_at is stamped unless the statement sets it itself.
CREATE FUNCTION office._tasks_before_update() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.assignment_generation IS DISTINCT FROM OLD.assignment_generation THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('assignment_generation of task %s is maintained by office (write '
                             'assignee_agent_profile_id instead); got %s, have %s',
                             quote_literal(OLD.id), coalesce(NEW.assignment_generation::text, 'NULL'),
                             OLD.assignment_generation);
    END IF;
    NEW.assignee_agent_profile_id := nullif(NEW.assignee_agent_profile_id, '');
    NEW.parent_id := nullif(NEW.parent_id, '');
    IF NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._tasks_before_update() IS
    'Trigger: refuses a hand-written assignment_generation (22023), stamps updated_at, turns an empty assignee/parent into NULL.';
REVOKE EXECUTE ON FUNCTION office._tasks_before_update() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_before_update() TO office_admin;

CREATE TRIGGER tasks_10_before_update
    BEFORE UPDATE ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_before_update();

-- BEFORE UPDATE OF assignee_agent_profile_id: fires whenever the column is in
-- the SET list (also for the value it already has: that is the point), after
-- tasks_10_before_update (triggers fire in name order).
CREATE FUNCTION office._tasks_bump_generation() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.assignment_generation := OLD.assignment_generation + 1;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION office._tasks_bump_generation() IS
    'Trigger: every write of assignee_agent_profile_id bumps assignment_generation by one in the writing transaction.';
REVOKE EXECUTE ON FUNCTION office._tasks_bump_generation() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_bump_generation() TO office_admin;

CREATE TRIGGER tasks_20_bump_generation
    BEFORE UPDATE OF assignee_agent_profile_id ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_bump_generation();

-- --- trigger: terminal effects -----------------------------------------------

CREATE FUNCTION office._tasks_terminal_effects() RETURNS trigger
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
    -- not allowed to undo the move (docs/domain.md §2.15).
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
REVOKE EXECUTE ON FUNCTION office._tasks_terminal_effects() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_terminal_effects() TO office_admin;

CREATE TRIGGER tasks_60_terminal_effects
    AFTER UPDATE OF state ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_terminal_effects();

-- --- trigger: acyclic blocker graph ------------------------------------------

-- A new edge (task_id, blocker_task_id) closes a cycle when task_id already
-- blocks blocker_task_id, directly or through others. The search and the
-- insert are a check-then-act, so every edge insert takes one lock on the
-- blocker graph first: two edges that would only together form a cycle are
-- never checked at the same time. (One lock for the whole graph, not one per
-- workspace: edges may join tasks of different workspaces, and a cycle through
-- several workspaces would slip between per-workspace locks. Edges are added
-- rarely.)
CREATE FUNCTION office._task_blockers_acyclic() RETURNS trigger
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
COMMENT ON FUNCTION office._task_blockers_acyclic() IS
    'Trigger: refuses (22023) a self-block and an edge that would close a cycle of any length, under a lock on the blocker graph.';
REVOKE EXECUTE ON FUNCTION office._task_blockers_acyclic() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._task_blockers_acyclic() TO office_admin;

CREATE TRIGGER task_blockers_10_acyclic
    BEFORE INSERT OR UPDATE OF task_id, blocker_task_id ON office.task_blockers
    FOR EACH ROW EXECUTE FUNCTION office._task_blockers_acyclic();

-- --- triggers: workspaces do not mix (docs/api.md, Conventions) -------------------

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

-- --- producer functions --------------------------------------------------------

CREATE FUNCTION office.create_task(workspace_id text, id text DEFAULT NULL, title text DEFAULT '',
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

CREATE FUNCTION office.assign_task(task_id text, assignee_agent_profile_id text,
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
    -- restored once the wake below has read it too (a plain UPDATE later in
    -- the transaction has none).
    v_actor := current_setting('office.actor', true);
    PERFORM set_config('office.actor',
                       jsonb_build_object('id', assign_task.actor_id, 'type', assign_task.actor_type)::text,
                       true);
    UPDATE office.tasks t
       SET assignee_agent_profile_id = v_new
     WHERE t.id = assign_task.task_id
    RETURNING t.assignment_generation INTO v_gen;

    IF v_new IS NOT NULL AND v_office THEN
        v_run := office._wake(v_new, 'task_assigned', jsonb_build_object('assignment_generation', v_gen),
                              office.assignment_key(assign_task.task_id, v_new, v_gen),
                              assign_task.task_id);
    END IF;
    PERFORM set_config('office.actor', coalesce(v_actor, ''), true);
    v_result := (v_gen, v_prev IS NOT NULL AND v_prev IS DISTINCT FROM v_new,
                 v_run.outcome, v_run.dedup_kind, v_run.run_id);
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office.assign_task(text, text, text, text) IS
    'Writes the assignee (NULL or '''' unassigns): the generation goes up by one and the value this call committed is returned; interrupt when a different, non-empty assignee is replaced; an Office task with an assignee gets a task_assigned run keyed assignment_key(task, assignee, generation) (skipped when the agent does not accept runs). Unknown task OFT01, unknown agent OFA01, an agent of another workspace OFW01, bad actor_type or an actor_id over 200 characters 22023.';
REVOKE EXECUTE ON FUNCTION office.assign_task(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.assign_task(text, text, text, text) TO office_producer, office_admin;

CREATE FUNCTION office.move_task(task_id text, state text) RETURNS office.tasks
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row office.tasks;
BEGIN
    PERFORM office._check_task_state(move_task.state);
    UPDATE office.tasks t SET state = move_task.state WHERE t.id = move_task.task_id
    RETURNING t.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFT01',
            MESSAGE = format('task %s not found', coalesce(quote_literal(move_task.task_id), 'NULL'));
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.move_task(text, text) IS
    'Sets the state; a change into COMPLETED, FAILED or CANCELLED runs the terminal effects in the same transaction (trigger). Unknown state 22023, unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.move_task(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.move_task(text, text) TO office_producer, office_admin;

CREATE FUNCTION office.archive_task(task_id text) RETURNS office.tasks
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row office.tasks;
BEGIN
    UPDATE office.tasks t SET archived_at = coalesce(t.archived_at, now())
     WHERE t.id = archive_task.task_id
    RETURNING t.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFT01',
            MESSAGE = format('task %s not found', coalesce(quote_literal(archive_task.task_id), 'NULL'));
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.archive_task(text) IS
    'Sets archived_at (kept when already archived). Unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.archive_task(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.archive_task(text) TO office_producer, office_admin;

-- Internal: OFT01 unless the task exists.
CREATE FUNCTION office._require_task(task_id text) RETURNS text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF NOT EXISTS (SELECT FROM office.tasks t WHERE t.id = _require_task.task_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFT01',
            MESSAGE = format('task %s not found', coalesce(quote_literal(_require_task.task_id), 'NULL'));
    END IF;
    RETURN _require_task.task_id;
END
$$;
COMMENT ON FUNCTION office._require_task(text) IS
    'Internal: returns task_id when the task exists, else raises OFT01 naming it.';
REVOKE EXECUTE ON FUNCTION office._require_task(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._require_task(text) TO office_admin;

CREATE FUNCTION office.add_blocker(task_id text, blocker_task_id text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM office._require_task(add_blocker.task_id);
    PERFORM office._require_task(add_blocker.blocker_task_id);
    IF add_blocker.task_id = add_blocker.blocker_task_id THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task %s cannot block itself', quote_literal(add_blocker.task_id));
    END IF;
    IF EXISTS (SELECT FROM office.task_blockers b
                WHERE b.task_id = add_blocker.task_id AND b.blocker_task_id = add_blocker.blocker_task_id) THEN
        RETURN;
    END IF;
    -- The trigger refuses a cycle (under the graph lock).
    INSERT INTO office.task_blockers (task_id, blocker_task_id)
    VALUES (add_blocker.task_id, add_blocker.blocker_task_id)
    ON CONFLICT (task_id, blocker_task_id) DO NOTHING;
END
$$;
COMMENT ON FUNCTION office.add_blocker(text, text) IS
    'blocker_task_id now blocks task_id. Self-block or an edge closing a cycle (any length) 22023, unknown task OFT01, tasks of two workspaces OFW01, an existing edge is a no-op.';
REVOKE EXECUTE ON FUNCTION office.add_blocker(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.add_blocker(text, text) TO office_producer, office_admin;

CREATE FUNCTION office.remove_blocker(task_id text, blocker_task_id text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM office._require_task(remove_blocker.task_id);
    PERFORM office._require_task(remove_blocker.blocker_task_id);
    DELETE FROM office.task_blockers b
     WHERE b.task_id = remove_blocker.task_id AND b.blocker_task_id = remove_blocker.blocker_task_id;
END
$$;
COMMENT ON FUNCTION office.remove_blocker(text, text) IS
    'blocker_task_id no longer blocks task_id (no-op when it did not). Unknown task OFT01.';
REVOKE EXECUTE ON FUNCTION office.remove_blocker(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.remove_blocker(text, text) TO office_producer, office_admin;
