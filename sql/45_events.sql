-- office: the transactional event outbox (docs/api.md §6).
--
-- Triggers on office.tasks append an event in the same transaction as the
-- change, whoever makes it (office functions or a plain UPDATE in psql):
--   * task.assigned on every write of assignee_agent_profile_id (and on an
--     INSERT with an assignee): task_id, workspace_id, agent_profile_id (NULL
--     when unassigned), assignment_generation (the value this write
--     committed), previous_agent_profile_id, is_office, actor (what the
--     writer claims: {"id", "type"} from assign_task, or the session setting
--     office.actor for a plain write, NULL when unset) and db_user (the
--     authenticated session_user, which no caller can forge);
--   * task.moved on every change of state: task_id, workspace_id, from_state,
--     to_state.
-- Consumers compete: claim_events hands each pending event to one claimer
-- (FOR UPDATE SKIP LOCKED) and hides it for the visibility timeout; an event
-- not acknowledged by then is claimable again (at-least-once), so handlers
-- must be idempotent (controlplane.subscriber keys its runs).

CREATE TABLE office.events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic        text NOT NULL CHECK (topic <> ''),
    task_id      text,
    payload      jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(payload) = 'object'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz,
    claimed_by   text,
    claimed_at   timestamptz,
    visible_at   timestamptz,
    deliveries   int NOT NULL DEFAULT 0
);
SELECT pg_catalog.pg_extension_config_dump('office.events', '');
SELECT pg_catalog.pg_extension_config_dump('office.events_id_seq', '');
REVOKE ALL ON TABLE office.events FROM PUBLIC;
REVOKE ALL ON SEQUENCE office.events_id_seq FROM PUBLIC;
COMMENT ON TABLE office.events IS
    'Transactional outbox: task.assigned and task.moved, written with the change; claim_events/ack_events consume it at least once.';
COMMENT ON COLUMN office.events.visible_at IS
    'A claimed event is hidden from other claimers until then (claimed_at + visibility).';
COMMENT ON COLUMN office.events.deliveries IS
    'How many times the event was claimed (more than 1: a claim expired unacknowledged).';

-- claim_events: the oldest pending events.
CREATE INDEX idx_events_pending ON office.events (id) WHERE processed_at IS NULL;
-- prune_events.
CREATE INDEX idx_events_processed ON office.events (processed_at) WHERE processed_at IS NOT NULL;
CREATE TRIGGER events_05_bounded
    BEFORE INSERT OR UPDATE OF payload ON office.events
    FOR EACH ROW EXECUTE FUNCTION office._stored_json_bounded('payload');

-- --- triggers -------------------------------------------------------------------

-- The actor of a write: the setting office.actor (assign_task sets it for its
-- own update), checked like any argument, since the event outlives the
-- transaction and a subscriber must be able to decode it: a JSON object of
-- exactly "id" (a string of at most 200 characters without control
-- characters, or null) and "type" (user, agent or system), else 22023. Its
-- length is checked before it is parsed, so a deeply nested document never
-- reaches the parser; the parse is guarded (a subtransaction) only when the
-- setting is set.
CREATE FUNCTION office._event_actor() RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text  text := current_setting('office.actor', true);
    v_actor jsonb;
    v_shape constant text := 'a JSON object {"id": <text of at most 200 characters, or null>, '
                             '"type": "user" | "agent" | "system"}';
BEGIN
    IF v_text IS NULL OR v_text = '' THEN
        RETURN NULL;
    END IF;
    IF octet_length(v_text) > 2048 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting office.actor is %s bytes, more than 2048: expected %s',
                             octet_length(v_text), v_shape);
    END IF;
    BEGIN
        v_actor := v_text::jsonb;
    EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting office.actor = %s is not JSON: expected %s',
                             quote_literal(left(v_text, 200)), v_shape);
    END;
    IF jsonb_typeof(v_actor) <> 'object'
       OR (SELECT array_agg(k ORDER BY k COLLATE "C") FROM jsonb_object_keys(v_actor) AS k)
          IS DISTINCT FROM ARRAY['id', 'type']
       OR jsonb_typeof(v_actor -> 'id') NOT IN ('string', 'null')
       OR jsonb_typeof(v_actor -> 'type') <> 'string'
       OR (v_actor ->> 'type') NOT IN ('user', 'agent', 'system') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('setting office.actor = %s: expected %s', quote_literal(left(v_text, 200)), v_shape);
    END IF;
    PERFORM office._check_short_text('the id of setting office.actor', v_actor ->> 'id');
    RETURN v_actor;
END
$$;
COMMENT ON FUNCTION office._event_actor() IS
    'Internal: the setting office.actor as the actor of an event (NULL when unset); anything but {"id": <text of at most 200 characters, or null>, "type": user|agent|system} is 22023.';
REVOKE EXECUTE ON FUNCTION office._event_actor() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._event_actor() TO office_admin;

CREATE FUNCTION office._tasks_event_assigned() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_actor   jsonb := office._event_actor();
    v_lineage record;
BEGIN
    IF TG_OP = 'INSERT' AND NEW.assignee_agent_profile_id IS NULL THEN
        RETURN NULL;
    END IF;
    -- Worked out now: by delivery the actor's claim may have ended.
    SELECT * INTO v_lineage FROM office._actor_lineage(NEW.assignee_agent_profile_id);
    INSERT INTO office.events (topic, task_id, payload)
    VALUES ('task.assigned', NEW.id,
            jsonb_build_object(
                'task_id', NEW.id,
                'workspace_id', NEW.workspace_id,
                'agent_profile_id', NEW.assignee_agent_profile_id,
                'assignment_generation', NEW.assignment_generation,
                'previous_agent_profile_id',
                    CASE WHEN TG_OP = 'UPDATE' THEN OLD.assignee_agent_profile_id END,
                'is_office', NEW.is_office,
                'actor', v_actor,
                'db_user', session_user,
                'origin', v_lineage.origin,
                'cause_run_id', v_lineage.cause_run_id));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._tasks_event_assigned() IS
    'Trigger: appends task.assigned (task_id, workspace_id, agent_profile_id, assignment_generation, previous_agent_profile_id, is_office, actor, db_user, origin, cause_run_id) on every write of the assignee and on an insert with one; a malformed office.actor setting is 22023.';
REVOKE EXECUTE ON FUNCTION office._tasks_event_assigned() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_event_assigned() TO office_admin;

CREATE TRIGGER tasks_50_event_assigned
    AFTER INSERT OR UPDATE OF assignee_agent_profile_id ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_event_assigned();

CREATE FUNCTION office._tasks_event_moved() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.state IS NOT DISTINCT FROM OLD.state THEN
        RETURN NULL;
    END IF;
    INSERT INTO office.events (topic, task_id, payload)
    VALUES ('task.moved', NEW.id,
            jsonb_build_object('task_id', NEW.id, 'workspace_id', NEW.workspace_id,
                               'from_state', OLD.state, 'to_state', NEW.state));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._tasks_event_moved() IS
    'Trigger: appends task.moved (task_id, workspace_id, from_state, to_state) on every change of state.';
REVOKE EXECUTE ON FUNCTION office._tasks_event_moved() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._tasks_event_moved() TO office_admin;

CREATE TRIGGER tasks_51_event_moved
    AFTER UPDATE OF state ON office.tasks
    FOR EACH ROW EXECUTE FUNCTION office._tasks_event_moved();

-- --- consumers --------------------------------------------------------------------

CREATE FUNCTION office.claim_events(consumer text, max_rows int DEFAULT 100,
                                    visibility interval DEFAULT '30 seconds')
    RETURNS SETOF office.events
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF claim_events.consumer IS NULL OR claim_events.consumer = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'consumer must not be empty';
    END IF;
    PERFORM office._check_short_text('consumer', claim_events.consumer);
    IF claim_events.max_rows IS NULL OR claim_events.max_rows < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('max_rows must be at least 1, not %s', coalesce(claim_events.max_rows::text, 'NULL'));
    END IF;
    PERFORM office._check_interval('visibility', claim_events.visibility);
    -- An event another claimer is taking right now is locked: skip it. One
    -- that was claimed after this statement's snapshot is re-checked on its
    -- newest version (READ COMMITTED), whose visible_at now excludes it.
    RETURN QUERY
    WITH picked AS (
        SELECT p.id
          FROM office.events p
         WHERE p.processed_at IS NULL
           AND (p.visible_at IS NULL OR p.visible_at <= now())
           AND NOT EXISTS (SELECT FROM office.poison q WHERE q.loop = 'subscriber' AND q.row_id = p.id::text)
         ORDER BY p.id
         LIMIT claim_events.max_rows
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE office.events e
           SET claimed_by = claim_events.consumer,
               claimed_at = now(),
               visible_at = now() + claim_events.visibility,
               deliveries = e.deliveries + 1
          FROM picked
         WHERE e.id = picked.id
        RETURNING e.*
    )
    SELECT c.* FROM claimed c ORDER BY c.id;
END
$$;
COMMENT ON FUNCTION office.claim_events(text, int, interval) IS
    'Claims up to max_rows pending events, oldest first, for consumer (recorded for diagnosis), hiding them from other claimers for visibility; never waits for and never shares an event with a concurrent claimer. An event not acknowledged in time is claimable again; one set aside (office.poison, loop subscriber) is not, until it is released.';
REVOKE EXECUTE ON FUNCTION office.claim_events(text, int, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.claim_events(text, int, interval) TO office_worker, office_admin;

CREATE FUNCTION office.ack_events(ids bigint[]) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count int;
BEGIN
    IF ack_events.ids IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'ids must not be NULL';
    END IF;
    UPDATE office.events e
       SET processed_at = now()
     WHERE e.id = ANY (ack_events.ids) AND e.processed_at IS NULL;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.ack_events(bigint[]) IS
    'Marks the events processed; returns how many were acknowledged now (unknown or already processed ids do not count).';
REVOKE EXECUTE ON FUNCTION office.ack_events(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.ack_events(bigint[]) TO office_worker, office_admin;

CREATE FUNCTION office.prune_events(older_than interval) RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count int;
BEGIN
    PERFORM office._check_interval('older_than', prune_events.older_than);
    DELETE FROM office.events e
     WHERE e.processed_at IS NOT NULL AND e.processed_at < now() - prune_events.older_than;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
COMMENT ON FUNCTION office.prune_events(interval) IS
    'Deletes acknowledged events processed longer ago than older_than; returns the count.';
REVOKE EXECUTE ON FUNCTION office.prune_events(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.prune_events(interval) TO office_admin;
