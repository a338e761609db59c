-- office: parent wakes that survive reopened children (docs/api.md §5; docs/domain.md
-- §1.7, §2.19-§2.22, §3.4-§3.5, §3.10).
--
-- The edge path (40_tasks.sql, terminal effect 3) wakes a parent when its last
-- child completes, keyed wake_operation_id(parent, child_set_key(parent),
-- child_generation(parent)), and writes no receipt. The sweep here catches
-- every parent the edge path could not wake (no assignee then, an agent that
-- was paused, a wave completed by archiving its last open child, a run that
-- was lost): list_stuck_parents applies every candidate condition of
-- docs/domain.md §2.20 in SQL before its LIMIT, so a parent that is not stuck never
-- takes a slot; reconcile_parent wakes one parent with the very key the edge
-- path derives and records a receipt in the same transaction. Both paths take
-- the same transaction-scoped advisory lock on the parent
-- ('office.tasks.children:<parent>'), so they serialise, and whichever comes
-- second lands on the first one's run through idx_run_idempotency.
--
-- Generations. child_generation is second_precision_text(max(updated_at))
-- over the non-archived children, in UTC whatever the session TimeZone, and
-- every comparison against it is between two texts of that one format: a
-- child reopened and completed again with an identical child set key is a
-- new generation, hence a new operation id, a new run and a new receipt.
-- (A reopen and recomplete inside the second of the previous generation, or
-- of the delivered run's requested_at, is masked: docs/domain.md §2.20 "Known
-- limitation".)
--
-- Cost. A sweep must not read every task, nor every open parent, each tick:
-- most parents are done, or have delivered waves. office.parent_wake_marks
-- holds the parents that need a look: triggers add a row whenever something
-- changes that can turn a parent into a candidate (a finished child written,
-- a child archived, moved or deleted, the parent's own eligibility, its
-- agent starting to accept runs again, a children-completed run leaving
-- flight or disappearing, a receipt edited by hand); sweep_stuck_parents
-- forgets the marked parents that are not candidates and reconcile_parent
-- forgets the one it delivered. Invariant: every candidate is marked. So a
-- sweep costs the number of parents touched since the previous one, not the
-- number of tasks (docs/parent-wake.md has the plans, bench/sweep.py the
-- numbers). The marks are insert-only: a mark is deleted only by a statement
-- whose snapshot saw it (and so saw the change that wrote it), and deleters
-- skip a mark someone else is deleting, so forgetting never races a new mark
-- and never waits.

-- --- tables and indexes ---------------------------------------------------------

CREATE TYPE office.reconcile_result AS (
    parent_task_id text, delivered boolean, operation_id text, outcome text, dedup_kind text,
    run_id text, skipped_reason text);
COMMENT ON TYPE office.reconcile_result IS
    'Result of office.reconcile_parent: delivered when a receipt was written; operation_id the wake key; outcome queued|deduped|coalesced (the run the wake landed on) or skipped (run_id NULL, skipped_reason assignee_unresolved or child_set_changed), or guarded (the loop guard: run_id NULL, skipped_reason guarded).';

CREATE TABLE office.parent_child_wake_receipts (
    parent_task_id        text PRIMARY KEY REFERENCES office.tasks (id) ON DELETE CASCADE,
    child_set_key         text NOT NULL,
    delivered_run_id      text NOT NULL DEFAULT '',
    delivery_operation_id text NOT NULL DEFAULT '',
    delivered_at          timestamptz NOT NULL DEFAULT now(),
    child_generation      text NOT NULL DEFAULT ''
);
SELECT pg_catalog.pg_extension_config_dump('office.parent_child_wake_receipts', '');
REVOKE ALL ON TABLE office.parent_child_wake_receipts FROM PUBLIC;
COMMENT ON TABLE office.parent_child_wake_receipts IS
    'One receipt per parent, upserted by reconcile_parent: the child set key, generation and wake operation id it delivered, and the run the wake landed on. The edge path writes none.';
COMMENT ON COLUMN office.parent_child_wake_receipts.delivered_run_id IS
    'The run the wake landed on (queued, deduped or coalesced into); '''' on a legacy receipt.';
COMMENT ON COLUMN office.parent_child_wake_receipts.delivery_operation_id IS
    'wake_operation_id(parent, child_set_key, child_generation) of the delivery; '''' on a legacy receipt (then a delivered_run_id matching no run re-admits the parent).';
COMMENT ON COLUMN office.parent_child_wake_receipts.child_generation IS
    'The child generation (second_precision_text, UTC) delivered; '''' on a legacy receipt, which re-admits the parent.';

CREATE TABLE office.parent_wake_marks (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    parent_task_id text NOT NULL,
    marked_at      timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('office.parent_wake_marks', '');
SELECT pg_catalog.pg_extension_config_dump('office.parent_wake_marks_id_seq', '');
REVOKE ALL ON TABLE office.parent_wake_marks FROM PUBLIC;
REVOKE ALL ON SEQUENCE office.parent_wake_marks_id_seq FROM PUBLIC;
COMMENT ON TABLE office.parent_wake_marks IS
    'Parents that need a look by the stuck-parent sweep (maintained by triggers, insert-only; a parent may have several rows). Every candidate of list_stuck_parents is here; sweep_stuck_parents forgets the others.';

CREATE INDEX idx_parent_wake_marks_parent ON office.parent_wake_marks (parent_task_id);

-- (The sweep also reads office.runs by idx_run_task_reason, 30_runs.sql, and
-- office.tasks by idx_tasks_assignee, 40_tasks.sql.)


-- --- the candidate conditions, once ------------------------------------------------

-- Conditions 1-4 and 6-7 of docs/domain.md §2.20 with the computed fields. The
-- child set key and the generation come from office._child_wave, as those of
-- office.child_set_key and office.child_generation do, so the sweep and the
-- edge path derive the same operation id.
CREATE VIEW office._parent_wake_candidates AS
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
REVOKE ALL ON office._parent_wake_candidates FROM PUBLIC;
COMMENT ON VIEW office._parent_wake_candidates IS
    'Internal: Office parents (not archived, not ephemeral, not COMPLETED/CANCELLED) with an assignee that accepts runs, at least one non-archived child and all non-archived children COMPLETED/CANCELLED, whose receipt is missing, for another child set key, lost its evidence (legacy) or has another child generation (docs/domain.md §2.20 rules 1-4, 6, 7).';

-- ... and rule 8 for the sweep's reason: no task_children_completed run in
-- flight, and none finished, failed or cancelled at or after the newest child
-- change.
CREATE VIEW office._parent_wake_stuck AS
SELECT v.*
  FROM office._parent_wake_candidates v
 WHERE NOT EXISTS (
        SELECT FROM office.runs w
         WHERE w.task_id = v.parent_task_id
           AND w.reason = 'task_children_completed'
           AND (w.status IN ('queued', 'claimed')
                OR (w.status IN ('finished', 'failed', 'cancelled')
                    AND office.second_precision_text(w.requested_at) >= v.newest_child_updated_at)));
REVOKE ALL ON office._parent_wake_stuck FROM PUBLIC;
COMMENT ON VIEW office._parent_wake_stuck IS
    'Internal: the candidates of office._parent_wake_candidates with no task_children_completed run in flight or terminal at/after the newest child change (docs/domain.md §2.20 rule 8): the stuck parents.';

-- --- marks -----------------------------------------------------------------------

-- Trigger on office.tasks (the WHEN clauses of the triggers below keep the
-- function away from writes that cannot create a candidate, such as progress
-- on an open child: that parent has an open child).
CREATE FUNCTION office._tasks_parent_wake_mark() RETURNS trigger
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
COMMENT ON FUNCTION office._tasks_parent_wake_mark() IS
    'Trigger: marks for the stuck-parent sweep the parent of a finished child that was written, created, archived, moved or deleted, and a parent whose own eligibility changed.';
REVOKE EXECUTE ON FUNCTION office._tasks_parent_wake_mark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_parent_wake_mark() TO office_admin;

CREATE TRIGGER tasks_70_parent_wake_mark_insert
    AFTER INSERT ON office.tasks
    FOR EACH ROW
    WHEN (NEW.parent_id IS NOT NULL AND NEW.archived_at IS NULL
          AND NEW.state = ANY (office._task_done_states()))
    EXECUTE FUNCTION office._tasks_parent_wake_mark();

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

CREATE TRIGGER tasks_70_parent_wake_mark_delete
    AFTER DELETE ON office.tasks
    FOR EACH ROW
    WHEN (OLD.parent_id IS NOT NULL)
    EXECUTE FUNCTION office._tasks_parent_wake_mark();

-- Trigger on office.agent_profiles: an agent that starts accepting runs (or
-- appears, for a dangling assignee) makes its open parents worth a look.
CREATE FUNCTION office._agents_parent_wake_mark() RETURNS trigger
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
COMMENT ON FUNCTION office._agents_parent_wake_mark() IS
    'Trigger: when an agent appears or starts accepting runs again, marks its open parents for the stuck-parent sweep.';
REVOKE EXECUTE ON FUNCTION office._agents_parent_wake_mark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._agents_parent_wake_mark() TO office_admin;

CREATE TRIGGER agent_profiles_70_parent_wake_mark_insert
    AFTER INSERT ON office.agent_profiles
    FOR EACH ROW
    WHEN (NEW.status <> ALL (office._statuses_refusing_runs()))
    EXECUTE FUNCTION office._agents_parent_wake_mark();

CREATE TRIGGER agent_profiles_70_parent_wake_mark_update
    AFTER UPDATE ON office.agent_profiles
    FOR EACH ROW
    WHEN (NEW.status <> ALL (office._statuses_refusing_runs())
          AND (OLD.status = ANY (office._statuses_refusing_runs()) OR OLD.id IS DISTINCT FROM NEW.id))
    EXECUTE FUNCTION office._agents_parent_wake_mark();

-- Triggers on office.runs: a children-completed run that leaves flight
-- (finished, failed, cancelled), is re-dated, re-targeted or deleted (pruned)
-- no longer holds its parent back the way it did. A new run only adds
-- evidence, and a claim keeps the run in flight: neither marks.
CREATE FUNCTION office._runs_parent_wake_mark() RETURNS trigger
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
COMMENT ON FUNCTION office._runs_parent_wake_mark() IS
    'Trigger: marks for the stuck-parent sweep the parent of a task_children_completed run that left flight, was re-dated or re-targeted (per row) or was deleted (per statement).';
REVOKE EXECUTE ON FUNCTION office._runs_parent_wake_mark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._runs_parent_wake_mark() TO office_admin;

-- The WHEN clause names the reason only, the rest is tested in the
-- function: a WHEN clause is read again from its stored text at every
-- statement that may fire the trigger (every claim and finish), and the
-- whole condition there cost those statements more than calling the
-- function for the few task_children_completed runs (docs/benchmarks.md).
-- Only the columns the function compares: an update of none of them (a
-- coalesce, a heartbeat) cannot change what it tests, and does not fire it.
CREATE TRIGGER runs_70_parent_wake_mark_update
    AFTER UPDATE OF status, requested_at, task_id, reason ON office.runs
    FOR EACH ROW
    WHEN (OLD.reason = 'task_children_completed')
    EXECUTE FUNCTION office._runs_parent_wake_mark();

CREATE TRIGGER runs_70_parent_wake_mark_delete
    AFTER DELETE ON office.runs
    REFERENCING OLD TABLE AS office_parent_wake_gone_runs
    FOR EACH STATEMENT
    EXECUTE FUNCTION office._runs_parent_wake_mark();

-- Trigger on the receipts: a receipt written, changed or deleted by anyone
-- but reconcile_parent (an operator forcing a redelivery, a restore) may
-- re-admit its parent.
CREATE FUNCTION office._receipts_parent_wake_mark() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
AS $$
BEGIN
    IF coalesce(current_setting('office.parent_wake.writer', true), '') <> 'reconcile_parent' THEN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (OLD.parent_task_id);
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.parent_task_id IS DISTINCT FROM OLD.parent_task_id THEN
            INSERT INTO office.parent_wake_marks (parent_task_id) VALUES (NEW.parent_task_id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._receipts_parent_wake_mark() IS
    'Trigger: a receipt written, changed or deleted outside reconcile_parent marks its parent for the stuck-parent sweep.';
REVOKE EXECUTE ON FUNCTION office._receipts_parent_wake_mark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._receipts_parent_wake_mark() TO office_admin;

CREATE TRIGGER parent_child_wake_receipts_70_mark
    AFTER INSERT OR UPDATE OR DELETE ON office.parent_child_wake_receipts
    FOR EACH ROW EXECUTE FUNCTION office._receipts_parent_wake_mark();

CREATE FUNCTION office.mark_all_parents() RETURNS bigint
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
COMMENT ON FUNCTION office.mark_all_parents() IS
    'Marks every open Office parent for the stuck-parent sweep (after rows were loaded with triggers disabled, e.g. session_replication_role = replica); the next sweep reads them all once. Returns how many were marked.';
REVOKE EXECUTE ON FUNCTION office.mark_all_parents() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.mark_all_parents() TO office_admin;

-- --- the sweep -----------------------------------------------------------------------

-- Internal: list_stuck_parents without the marks, for any reason: every open
-- parent is read (the slow path; also the reference the marks are tested
-- against).
CREATE FUNCTION office._scan_stuck_parents(max_rows int, reason text)
    RETURNS TABLE (parent_task_id text, assignee_agent_profile_id text, workflow_step_id text,
                   child_set_key text, newest_child_updated_at text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT v.parent_task_id, v.assignee_agent_profile_id, v.workflow_step_id, v.child_set_key,
           v.newest_child_updated_at
      FROM office._parent_wake_candidates v
     WHERE NOT EXISTS (
            SELECT FROM office.runs w
             WHERE w.task_id = v.parent_task_id
               AND w.reason = _scan_stuck_parents.reason
               AND (w.status IN ('queued', 'claimed')
                    OR (w.status IN ('finished', 'failed', 'cancelled')
                        AND office.second_precision_text(w.requested_at) >= v.newest_child_updated_at)))
     ORDER BY v.parent_task_id COLLATE "C"
     LIMIT _scan_stuck_parents.max_rows;
END;
COMMENT ON FUNCTION office._scan_stuck_parents(int, text) IS
    'Internal: the stuck parents for any run reason, read from every open parent rather than from the marks (list_stuck_parents for reasons other than task_children_completed).';
REVOKE EXECUTE ON FUNCTION office._scan_stuck_parents(int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._scan_stuck_parents(int, text) TO office_admin;

CREATE FUNCTION office.list_stuck_parents(max_rows int DEFAULT 5, reason text DEFAULT 'task_children_completed')
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
    'Parents whose finished child wave was not delivered (every candidate condition of docs/domain.md §2.20, applied before the LIMIT), ordered by parent id (bytewise): parent, assignee, step, child_set_key, newest_child_updated_at. Read from the parents marked since they were last found delivered, leaving out those the sweep set aside (office.poison); another reason than task_children_completed reads every open parent. Negative max_rows or empty reason 22023.';
REVOKE EXECUTE ON FUNCTION office.list_stuck_parents(int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.list_stuck_parents(int, text)
    TO office_producer, office_reader, office_admin;

CREATE FUNCTION office.reconcile_parent(parent_task_id text, child_set_key text, newest_child_updated_at text)
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
    -- The loop guard refused it (docs/api.md §9): no run, so no receipt.
    IF v_run.outcome = 'guarded' THEN
        v_result := (v_parent, false, NULL, 'guarded', NULL, NULL, 'guarded');
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
COMMENT ON FUNCTION office.reconcile_parent(text, text, text) IS
    'Wakes one stuck parent: under the edge path''s lock on the parent, re-checks its assignee (skipped, assignee_unresolved) and re-reads its child set and generation (skipped, child_set_changed, unless they equal the arguments and form a finished wave), then enqueues task_children_completed (task_id = the parent) keyed wake_operation_id(parent, child_set_key, generation) and upserts the receipt with the run it landed on (queued, deduped or coalesced), in one transaction; a wake the loop guard refuses writes no receipt (guarded, skipped_reason guarded). Unknown parent OFT01; NULL set or generation 22023.';
REVOKE EXECUTE ON FUNCTION office.reconcile_parent(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.reconcile_parent(text, text, text) TO office_producer, office_admin;

CREATE FUNCTION office.sweep_stuck_parents(max_rows int DEFAULT 5)
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
