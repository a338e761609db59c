-- office: routines, their cron triggers and their runs (docs/api.md §4;
-- docs/domain.md §1.6, §2.16, §2.17, §3.8, §3.9). The wakeup requests that
-- lightweight fires create are in 50_wakeups.sql.
--
-- A fire (dispatch_routine) renders the routine's task template, records a
-- routine run with the fingerprint of what it would create, applies the
-- concurrency policy, then materialises: a *heavy* routine (its template has
-- a title) creates a task, a *lightweight* one a wakeup request for its
-- assignee.
--
-- The gate (skip_if_active, coalesce_if_active) looks for the newest
-- task_created run of the routine with the same fingerprint. A gated run whose
-- task has become terminal (or vanished, or was archived) is closed on the
-- spot by the conditional close and the gate looks again ("self-heal"), so an
-- older run that is still live keeps gating and a stale one never does. The
-- lookup and the creation of the task are a check-then-act: every gated fire
-- takes a transaction-scoped advisory lock on (routine, fingerprint) before
-- its first lookup, so two fires with one fingerprint never both reach
-- task_created (tests/isolation/specs/routines_gate_race.spec; under READ
-- COMMITTED the second reads after the first committed; a stricter
-- transaction that had to wait gets 40001).
--
-- The conditional close (close_routine_run) is one guarded UPDATE ... WHERE
-- status = 'task_created': the task-terminal trigger of 40_tasks.sql (through
-- sync_routine_run_status) and an inline self-heal may race on one run, and
-- exactly one of them closes it; a replay never turns done into cancelled and
-- never moves completed_at (tests/isolation/specs/routines_close_race.spec).
--
-- Cron: claim_routine_tick is a compare-and-swap on next_run_at; of N
-- claimers of one tick exactly one wins. The claimed tick (the observed
-- next_run_at, not the advanced one) is what the caller hands to
-- dispatch_routine, and routine_key() names it, so a redelivered tick dedups
-- on the wakeup key and a new tick does not. Next ticks are computed in Python
-- (controlplane.cron: cron expression, time zone, catch-up policy); SQL
-- checks the expression's structure and the time zone when a trigger is added.

CREATE TABLE office.routines (
    id                        text PRIMARY KEY
                              CHECK (office._is_id(id)),
    workspace_id              text NOT NULL
                              CHECK (office._is_id(workspace_id)),
    name                      text NOT NULL CHECK (name <> ''),
    task_template             jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(task_template) = 'object'),
    assignee_agent_profile_id text CHECK (assignee_agent_profile_id <> ''),
    concurrency_policy        text NOT NULL DEFAULT 'skip_if_active'
                              CHECK (concurrency_policy IN ('skip_if_active', 'coalesce_if_active',
                                                            'always_create')),
    catch_up_policy           text NOT NULL DEFAULT 'enqueue_missed_with_cap'
                              CHECK (catch_up_policy IN ('skip_missed', 'enqueue_missed_with_cap')),
    catch_up_max              int NOT NULL DEFAULT 25 CHECK (catch_up_max >= 1),
    variables                 jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(variables) = 'object'),
    status                    text NOT NULL DEFAULT 'active'
                              CHECK (status IN ('active', 'paused', 'archived')),
    last_run_at               timestamptz,
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('office.routines', '');
REVOKE ALL ON TABLE office.routines FROM PUBLIC;
COMMENT ON TABLE office.routines IS
    'Routines: a task template (a non-empty title makes the routine heavy: fires create tasks; else lightweight: fires wake the assignee), declared variables, a concurrency policy and a catch-up policy.';

CREATE INDEX idx_routines_workspace ON office.routines (workspace_id);
CREATE TRIGGER routines_05_bounded
    BEFORE INSERT OR UPDATE OF task_template, variables ON office.routines
    FOR EACH ROW EXECUTE FUNCTION office._stored_json_bounded('task_template', 'variables');
-- A new agent must not adopt the assignee of a routine of another workspace
-- (20_agents.sql).
CREATE INDEX idx_routines_assignee ON office.routines (assignee_agent_profile_id)
    WHERE assignee_agent_profile_id IS NOT NULL;

CREATE TABLE office.routine_triggers (
    id              text PRIMARY KEY
                    CHECK (office._is_id(id)),
    routine_id      text NOT NULL REFERENCES office.routines (id) ON DELETE CASCADE,
    kind            text NOT NULL DEFAULT 'cron' CHECK (kind IN ('cron', 'webhook', 'manual')),
    cron_expression text,
    timezone        text NOT NULL DEFAULT 'UTC',
    next_run_at     timestamptz,
    last_fired_at   timestamptz,
    enabled         boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (kind <> 'cron' OR cron_expression IS NOT NULL)
);
SELECT pg_catalog.pg_extension_config_dump('office.routine_triggers', '');
REVOKE ALL ON TABLE office.routine_triggers FROM PUBLIC;
COMMENT ON TABLE office.routine_triggers IS
    'Triggers of a routine. A cron trigger fires at the ticks of cron_expression in timezone; next_run_at is the next tick to claim (NULL: not armed yet), advanced by claim_routine_tick.';

CREATE INDEX idx_routine_triggers_routine ON office.routine_triggers (routine_id);
-- The cron loop's scan for due triggers.
CREATE INDEX idx_routine_triggers_due ON office.routine_triggers (next_run_at) WHERE enabled;

CREATE TABLE office.routine_runs (
    id                       text PRIMARY KEY DEFAULT office._uuid_v7(),
    routine_id               text NOT NULL REFERENCES office.routines (id) ON DELETE CASCADE,
    trigger_id               text NOT NULL DEFAULT '',
    source                   text NOT NULL CHECK (source IN ('cron', 'manual', 'webhook')),
    status                   text NOT NULL DEFAULT 'received'
                             CHECK (status IN ('received', 'task_created', 'skipped', 'coalesced',
                                               'failed', 'done', 'cancelled')),
    trigger_payload          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(trigger_payload) = 'object'),
    linked_task_id           text NOT NULL DEFAULT '',
    coalesced_into_run_id    text NOT NULL DEFAULT '',
    dispatch_fingerprint     text NOT NULL DEFAULT '',
    started_at               timestamptz,
    completed_at             timestamptz,
    -- clock_timestamp(): "newest" must hold between two runs of one transaction too.
    created_at               timestamptz NOT NULL DEFAULT clock_timestamp(),
    wakeup_request_id        text,
    error_message            text,
    catch_up_missed_ticks    int,
    catch_up_first_missed_at timestamptz,
    catch_up_truncated       boolean
);
SELECT pg_catalog.pg_extension_config_dump('office.routine_runs', '');
REVOKE ALL ON TABLE office.routine_runs FROM PUBLIC;
COMMENT ON TABLE office.routine_runs IS
    'One row per fire: received -> skipped|coalesced|task_created|done|failed; task_created -> done|failed|cancelled only through the conditional close (close_routine_run). Only task_created is active.';
COMMENT ON COLUMN office.routine_runs.trigger_payload IS
    'The resolved variables of the fire (declared defaults overridden by the fire''s values).';
COMMENT ON COLUMN office.routine_runs.linked_task_id IS
    'The task a heavy fire created; '''' for every other run (lightweight runs never link a task).';

-- The gate: the newest active run of a routine with one fingerprint.
CREATE INDEX idx_office_routine_runs_active_fingerprint
    ON office.routine_runs (routine_id, dispatch_fingerprint, created_at DESC)
    WHERE status = 'task_created';
-- sync_routine_run_status: the newest run linked to a task.
CREATE INDEX idx_office_routine_runs_linked_task
    ON office.routine_runs (linked_task_id, created_at DESC)
    WHERE linked_task_id <> '';
-- list_routine_runs (the dashboard's routine page): a routine's runs, newest
-- first, and the cascade when a routine is deleted (since 0.4.0).
CREATE INDEX idx_routine_runs_routine ON office.routine_runs (routine_id, id);
CREATE TRIGGER routine_runs_05_bounded
    BEFORE INSERT OR UPDATE OF trigger_payload ON office.routine_runs
    FOR EACH ROW EXECUTE FUNCTION office._stored_json_bounded('trigger_payload');

CREATE TYPE office.dispatch_routine_result AS (
    routine_run_id        text,
    status                text,
    linked_task_id        text,
    coalesced_into_run_id text,
    wakeup_request_id     text,
    wakeup_outcome        text,
    run_id                text,
    idempotency_key       text,
    error_message         text,
    workspace_id          text);
COMMENT ON TYPE office.dispatch_routine_result IS
    'Result of office.dispatch_routine: the routine run and the status it reached (task_created, skipped, coalesced, done, failed), the task it created, the run it coalesced into, the wakeup request (lightweight; on a dedup the holder), wakeup_outcome queued|deduped, the agent run that was woken (if any), the wakeup key, why it failed, and the routine''s workspace.';

-- --- validation helpers ----------------------------------------------------------

-- The placeholder syntax of task templates: {{name}}, spaces allowed inside
-- the braces, name an identifier.
CREATE FUNCTION office._template_placeholder() RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN '\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}';
COMMENT ON FUNCTION office._template_placeholder() IS
    'Internal: the regular expression of a template placeholder ({{name}}; group 1 is the name).';
REVOKE EXECUTE ON FUNCTION office._template_placeholder() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._template_placeholder() TO office_admin;

-- Renders one template text: each {{name}} is replaced by the value of name
-- in vars (a JSON string as its text, any other JSON value as its JSON text),
-- in one pass (a value containing {{x}} is not rendered again). A placeholder
-- without a value is 22023.
CREATE FUNCTION office._render_template(template text, vars jsonb, what text, routine_id text)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_pattern constant text := office._template_placeholder();
    v_parts   text[];
    v_result  text;
    v_name    text;
    v_value   jsonb;
    v_i       int := 1;
BEGIN
    IF template IS NULL OR template = '' THEN
        RETURN '';
    END IF;
    v_parts := regexp_split_to_array(template, v_pattern);
    v_result := v_parts[1];
    FOR v_name IN
        SELECT m.match[1] FROM regexp_matches(template, v_pattern, 'g') WITH ORDINALITY AS m(match, n)
         ORDER BY m.n
    LOOP
        v_value := vars -> v_name;
        IF v_value IS NULL OR jsonb_typeof(v_value) = 'null' THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('placeholder {{%s}} in the %s of routine %s has no value (declare a default or pass the variable)',
                                 v_name, what, quote_literal(routine_id));
        END IF;
        v_i := v_i + 1;
        v_result := v_result
            || CASE jsonb_typeof(v_value) WHEN 'string' THEN v_value #>> '{}' ELSE v_value::text END
            || v_parts[v_i];
    END LOOP;
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office._render_template(text, jsonb, text, text) IS
    'Internal: the template text with each {{name}} replaced (one pass) by the value of name in vars; an unfilled placeholder is 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._render_template(text, jsonb, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._render_template(text, jsonb, text, text) TO office_admin;

-- One comma-separated term of one cron field, upper-cased. Accepts what
-- controlplane.cron (cronsim) computes: *, a, a-b, with an optional /step;
-- month and day-of-week names; L and LW in day-of-month; nL and n#k in
-- day-of-week.
CREATE FUNCTION office._cron_term_ok(field int, term text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lo    int := (ARRAY[0, 0, 1, 1, 0])[field];
    v_hi    int := (ARRAY[59, 23, 31, 12, 7])[field];
    v_names text[] := CASE field
                          WHEN 4 THEN ARRAY['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN',
                                            'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC']
                          WHEN 5 THEN ARRAY['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT']
                          ELSE ARRAY[]::text[] END;
    v_base  text := term;
    v_step  text;
    v_a     int;
    v_b     int;
BEGIN
    IF term IS NULL OR term = '' THEN
        RETURN false;
    END IF;
    IF field = 3 AND term IN ('L', 'LW') THEN
        RETURN true;
    END IF;
    IF field = 5 AND term ~ '^[0-7]L$' THEN
        RETURN true;
    END IF;
    IF field = 5 AND strpos(term, '#') > 0 THEN
        RETURN split_part(term, '#', 2) ~ '^[1-5]$'
           AND office._cron_value(split_part(term, '#', 1), v_lo, v_hi, v_names) IS NOT NULL;
    END IF;
    IF strpos(term, '/') > 0 THEN
        v_base := split_part(term, '/', 1);
        v_step := substr(term, strpos(term, '/') + 1);
        IF v_step !~ '^[0-9]{1,9}$' OR v_step::int = 0 THEN
            RETURN false;
        END IF;
    END IF;
    IF v_base = '*' THEN
        RETURN true;
    END IF;
    IF strpos(v_base, '-') > 0 THEN
        v_a := office._cron_value(split_part(v_base, '-', 1), v_lo, v_hi, v_names);
        v_b := office._cron_value(substr(v_base, strpos(v_base, '-') + 1), v_lo, v_hi, v_names);
        RETURN v_a IS NOT NULL AND v_b IS NOT NULL AND v_a <= v_b;
    END IF;
    RETURN office._cron_value(v_base, v_lo, v_hi, v_names) IS NOT NULL;
END
$$;
COMMENT ON FUNCTION office._cron_term_ok(int, text) IS
    'Internal: whether one upper-cased term is valid in cron field 1-5 (minute, hour, day-of-month, month, day-of-week).';
REVOKE EXECUTE ON FUNCTION office._cron_term_ok(int, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._cron_term_ok(int, text) TO office_admin;

-- A number in [lo, hi] or one of names (1-based for months, 0-based for days).
CREATE FUNCTION office._cron_value(value text, lo int, hi int, names text[]) RETURNS int
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_position int;
BEGIN
    IF value ~ '^[0-9]{1,9}$' THEN
        RETURN CASE WHEN value::int BETWEEN lo AND hi THEN value::int END;
    END IF;
    v_position := array_position(names, value);
    IF v_position IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN CASE WHEN lo = 0 THEN v_position - 1 ELSE v_position END;
END
$$;
COMMENT ON FUNCTION office._cron_value(text, int, int, text[]) IS
    'Internal: the value of one cron number or name within [lo, hi], else NULL.';
REVOKE EXECUTE ON FUNCTION office._cron_value(text, int, int, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._cron_value(text, int, int, text[]) TO office_admin;

-- The structure of a 5-field cron expression; 22023 naming the expression
-- and the offending field otherwise. (Whether it ever fires, e.g. on
-- February 30th, is for the next-tick computation to find out.)
CREATE FUNCTION office._check_cron_expression(cron_expression text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_names  constant text[] := ARRAY['minute', 'hour', 'day-of-month', 'month', 'day-of-week'];
    v_fields text[];
    v_term   text;
BEGIN
    IF cron_expression IS NULL OR btrim(cron_expression) = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('cron expression %s must not be empty', coalesce(quote_literal(cron_expression), 'NULL'));
    END IF;
    v_fields := regexp_split_to_array(btrim(cron_expression), '\s+');
    IF array_length(v_fields, 1) <> 5 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('invalid cron expression %s: %s fields, expected 5 (minute hour day-of-month month day-of-week)',
                             quote_literal(cron_expression), array_length(v_fields, 1));
    END IF;
    FOR i IN 1..5 LOOP
        FOREACH v_term IN ARRAY string_to_array(upper(v_fields[i]), ',') LOOP
            IF NOT office._cron_term_ok(i, v_term) THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('invalid cron expression %s: bad %s field %s',
                                     quote_literal(cron_expression), v_names[i], quote_literal(v_fields[i]));
            END IF;
        END LOOP;
    END LOOP;
    RETURN cron_expression;
END
$$;
COMMENT ON FUNCTION office._check_cron_expression(text) IS
    'Internal: returns the expression when it is a structurally valid 5-field cron expression, else raises 22023 naming it and the bad field.';
REVOKE EXECUTE ON FUNCTION office._check_cron_expression(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_cron_expression(text) TO office_admin;

-- 22023 unless the value is one of the allowed words.
CREATE FUNCTION office._check_word(what text, value text, allowed text[]) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL OR NOT value = ANY (allowed) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown %s %s (expected %s)', what, coalesce(quote_literal(value), 'NULL'),
                             array_to_string(allowed, ', '));
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION office._check_word(text, text, text[]) IS
    'Internal: returns value when it is one of allowed, else raises 22023 naming it.';
REVOKE EXECUTE ON FUNCTION office._check_word(text, text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_word(text, text, text[]) TO office_admin;

-- A stored JSON document (a template, declared or resolved variables) is at
-- most 1 MiB as text and 64 levels deep, like a payload.
CREATE FUNCTION office._check_document(what text, value jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(value::text) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is %s bytes, more than 1 MiB (1048576 bytes)', what, octet_length(value::text));
    END IF;
    RETURN office._check_json_depth(what, value);
END
$$;
COMMENT ON FUNCTION office._check_document(text, jsonb) IS
    'Internal: returns value when it is NULL or at most 1 MiB as text and 64 levels deep, else raises 22023 naming the argument.';
REVOKE EXECUTE ON FUNCTION office._check_document(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._check_document(text, jsonb) TO office_admin;

-- --- workspaces do not mix (docs/api.md, Conventions) ----------------------------------

-- A routine's assignee is an agent of the routine's workspace (OFW01), for
-- every client; only a write of the assignee or the workspace is checked (a
-- routine written before 0.4.0 is not re-checked; officectl doctor lists it).
-- An agent never changes workspace (20_agents.sql), so no lock is needed.
CREATE FUNCTION office._routines_same_workspace() RETURNS trigger
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_space text;
BEGIN
    SELECT a.workspace_id INTO v_space FROM office.agent_profiles a WHERE a.id = NEW.assignee_agent_profile_id;
    IF v_space <> NEW.workspace_id THEN
        RAISE EXCEPTION USING ERRCODE = 'OFW01',
            MESSAGE = format('routine %s of workspace %s cannot be assigned to agent %s of workspace %s',
                             quote_literal(NEW.id), quote_literal(NEW.workspace_id),
                             quote_literal(NEW.assignee_agent_profile_id), quote_literal(v_space));
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION office._routines_same_workspace() IS
    'Trigger: a routine''s assignee (when written) is an agent of the routine''s workspace, else OFW01 naming both.';
REVOKE EXECUTE ON FUNCTION office._routines_same_workspace() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._routines_same_workspace() TO office_admin;

CREATE TRIGGER routines_40_same_workspace_insert
    AFTER INSERT ON office.routines
    FOR EACH ROW
    WHEN (NEW.assignee_agent_profile_id IS NOT NULL)
    EXECUTE FUNCTION office._routines_same_workspace();

CREATE TRIGGER routines_40_same_workspace_update
    AFTER UPDATE OF workspace_id, assignee_agent_profile_id ON office.routines
    FOR EACH ROW
    WHEN (NEW.assignee_agent_profile_id IS NOT NULL
          AND (NEW.workspace_id IS DISTINCT FROM OLD.workspace_id
               OR NEW.assignee_agent_profile_id IS DISTINCT FROM OLD.assignee_agent_profile_id))
    EXECUTE FUNCTION office._routines_same_workspace();

-- --- create_routine, add_routine_trigger ---------------------------------------------

CREATE FUNCTION office.create_routine(workspace_id text, name text, task_template jsonb DEFAULT '{}',
                                      assignee_agent_profile_id text DEFAULT NULL,
                                      concurrency_policy text DEFAULT 'skip_if_active',
                                      variables jsonb DEFAULT '{}', id text DEFAULT NULL,
                                      catch_up_policy text DEFAULT 'enqueue_missed_with_cap',
                                      catch_up_max int DEFAULT 25)
    RETURNS office.routines
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_id       text := create_routine.id;
    v_template jsonb := coalesce(create_routine.task_template, '{}'::jsonb);
    v_vars     jsonb := coalesce(create_routine.variables, '{}'::jsonb);
    v_assignee text := nullif(create_routine.assignee_agent_profile_id, '');
    v_bad      text;
    v_row      office.routines;
BEGIN
    -- Validate everything before writing anything.
    PERFORM office._check_id('workspace', create_routine.workspace_id);
    IF v_id IS NULL THEN
        v_id := office._uuid_v7();
    ELSE
        PERFORM office._check_id('routine', v_id);
    END IF;
    IF create_routine.name IS NULL OR create_routine.name = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('name of routine %s must not be empty', quote_literal(v_id));
    END IF;
    PERFORM office._check_free_text('name', create_routine.name);
    PERFORM office._check_word('concurrency_policy', create_routine.concurrency_policy,
                               ARRAY['skip_if_active', 'coalesce_if_active', 'always_create']);
    PERFORM office._check_word('catch_up_policy', create_routine.catch_up_policy,
                               ARRAY['skip_missed', 'enqueue_missed_with_cap']);
    IF create_routine.catch_up_max IS NULL OR create_routine.catch_up_max < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('catch_up_max must be at least 1, not %s',
                             coalesce(create_routine.catch_up_max::text, 'NULL'));
    END IF;
    IF jsonb_typeof(v_template) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task_template must be a JSON object, not %s', jsonb_typeof(v_template));
    END IF;
    PERFORM office._check_document('task_template', v_template);
    SELECT k INTO v_bad FROM unnest(ARRAY['title', 'description']) AS k
     WHERE jsonb_typeof(v_template -> k) NOT IN ('string', 'null')
     ORDER BY k LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task_template %s must be a JSON string, not %s', v_bad,
                             jsonb_typeof(v_template -> v_bad));
    END IF;
    PERFORM office._check_free_text('task_template title', v_template ->> 'title');
    PERFORM office._check_free_text('task_template description', v_template ->> 'description');
    IF jsonb_typeof(v_vars) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('variables must be a JSON object {name: {"default": value}}, not %s',
                             jsonb_typeof(v_vars));
    END IF;
    PERFORM office._check_document('variables', v_vars);
    SELECT v.key INTO v_bad FROM jsonb_each(v_vars) AS v
     WHERE v.key !~ '^[A-Za-z_][A-Za-z0-9_]*$' OR jsonb_typeof(v.value) <> 'object'
     ORDER BY v.key LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('variable %s must be an identifier declared as {"default": value} (got %s)',
                             quote_literal(v_bad), v_vars -> v_bad);
    END IF;
    -- A placeholder naming an undeclared variable could never be filled.
    SELECT m.match[1] INTO v_bad
      FROM unnest(ARRAY[coalesce(v_template ->> 'title', ''), coalesce(v_template ->> 'description', '')]) AS t(text),
           regexp_matches(t.text, office._template_placeholder(), 'g') AS m(match)
     WHERE NOT v_vars ? m.match[1]
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('task_template of routine %s uses {{%s}}, which is not a declared variable',
                             quote_literal(v_id), v_bad);
    END IF;
    IF v_assignee IS NOT NULL
       AND NOT EXISTS (SELECT FROM office.agent_profiles a WHERE a.id = v_assignee) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFA01', MESSAGE = format('agent %s not found', quote_literal(v_assignee));
    END IF;

    -- An assignee of another workspace is refused by the trigger (OFW01); an
    -- explicit id that exists is 23505 naming it.
    INSERT INTO office.routines AS r (id, workspace_id, name, task_template, assignee_agent_profile_id,
                                      concurrency_policy, catch_up_policy, catch_up_max, variables)
    VALUES (v_id, create_routine.workspace_id, create_routine.name, v_template, v_assignee,
            create_routine.concurrency_policy, create_routine.catch_up_policy, create_routine.catch_up_max,
            v_vars)
    ON CONFLICT (id) DO NOTHING
    RETURNING r.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('routine %s already exists', quote_literal(v_id));
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.create_routine(text, text, jsonb, text, text, jsonb, text, text, int) IS
    'Creates an active routine (NULL id: generated). A template {"title", "description"} with a non-empty title makes it heavy (fires create tasks), else lightweight (fires wake the assignee); variables declares {name: {"default": value}}. Unknown policy, bad id/template/variables, a name, title or description over 64 KiB, a template or variables over 1 MiB 22023; an explicit id that exists 23505; unknown assignee OFA01, an assignee of another workspace OFW01.';
REVOKE EXECUTE ON FUNCTION office.create_routine(text, text, jsonb, text, text, jsonb, text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.create_routine(text, text, jsonb, text, text, jsonb, text, text, int)
    TO office_producer, office_admin;

CREATE FUNCTION office.add_routine_trigger(routine_id text, cron_expression text, timezone text DEFAULT 'UTC',
                                           next_run_at timestamptz DEFAULT NULL, id text DEFAULT NULL)
    RETURNS office.routine_triggers
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_id  text := add_routine_trigger.id;
    v_tz  text := coalesce(add_routine_trigger.timezone, 'UTC');
    v_row office.routine_triggers;
BEGIN
    IF v_id IS NULL THEN
        v_id := office._uuid_v7();
    ELSE
        PERFORM office._check_id('routine trigger', v_id);
    END IF;
    PERFORM office._check_short_text('cron_expression', add_routine_trigger.cron_expression);
    PERFORM office._check_cron_expression(add_routine_trigger.cron_expression);
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_timezone_names z WHERE z.name = v_tz) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('unknown time zone %s (expected a name of pg_timezone_names, e.g. ''UTC'' or ''Europe/Paris'')',
                             quote_literal(v_tz));
    END IF;
    PERFORM office._check_timestamp('next_run_at', add_routine_trigger.next_run_at);
    -- Key share on the routine: it cannot vanish before the insert.
    PERFORM FROM office.routines r WHERE r.id = add_routine_trigger.routine_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine %s not found', coalesce(quote_literal(add_routine_trigger.routine_id), 'NULL'));
    END IF;

    INSERT INTO office.routine_triggers AS t (id, routine_id, kind, cron_expression, timezone, next_run_at)
    VALUES (v_id, add_routine_trigger.routine_id, 'cron', btrim(add_routine_trigger.cron_expression), v_tz,
            add_routine_trigger.next_run_at)
    ON CONFLICT (id) DO NOTHING
    RETURNING t.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('routine trigger %s already exists', quote_literal(v_id));
    END IF;
    RETURN v_row;
END
$$;
COMMENT ON FUNCTION office.add_routine_trigger(text, text, text, timestamptz, text) IS
    'Adds an enabled cron trigger to a routine (NULL id: generated). next_run_at is the first tick to claim; NULL leaves the trigger to be armed by the cron loop (controlplane.daemon.cron, which fires its ticks with office.fire_routine_tick). Invalid cron expression (or one over 200 characters) or time zone, a next_run_at outside 1970-01-01 .. 9999-12-31 22023 naming it; an explicit id that exists 23505; unknown routine OFR01.';
REVOKE EXECUTE ON FUNCTION office.add_routine_trigger(text, text, text, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.add_routine_trigger(text, text, text, timestamptz, text)
    TO office_producer, office_admin;

-- --- cron claim --------------------------------------------------------------------

CREATE FUNCTION office.claim_routine_tick(trigger_id text, observed_next_run_at timestamptz,
                                          following_next_run_at timestamptz)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM office._check_timestamp('observed_next_run_at', observed_next_run_at);
    PERFORM office._check_timestamp('following_next_run_at', following_next_run_at);
    IF following_next_run_at IS NULL OR following_next_run_at <= observed_next_run_at THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('following_next_run_at %s must be finite and later than observed_next_run_at %s',
                             coalesce(following_next_run_at::text, 'NULL'),
                             coalesce(observed_next_run_at::text, 'NULL'));
    END IF;
    -- The compare-and-swap. Concurrent claimers of one tick queue on the row
    -- lock; once the winner commits, each re-checks the condition on the new
    -- row version, which no longer matches. Observed NULL (a trigger not
    -- armed yet) arms it without firing: last_fired_at is left alone.
    UPDATE office.routine_triggers t
       SET next_run_at = claim_routine_tick.following_next_run_at,
           last_fired_at = CASE WHEN claim_routine_tick.observed_next_run_at IS NULL THEN t.last_fired_at
                                ELSE now() END,
           updated_at = now()
     WHERE t.id = claim_routine_tick.trigger_id
       AND t.enabled
       AND t.next_run_at IS NOT DISTINCT FROM claim_routine_tick.observed_next_run_at;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT FROM office.routine_triggers t WHERE t.id = claim_routine_tick.trigger_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine trigger %s not found',
                             coalesce(quote_literal(claim_routine_tick.trigger_id), 'NULL'));
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION office.claim_routine_tick(text, timestamptz, timestamptz) IS
    'Compare-and-swap on next_run_at: if the enabled trigger''s next_run_at is still observed_next_run_at, advance it to following_next_run_at (stamping last_fired_at) and return true; of N concurrent claimers of one tick exactly one wins. Observed NULL arms an unarmed trigger. A NULL following tick, one not later than the observed one, or a time outside 1970-01-01 .. 9999-12-31 22023; unknown trigger OFR01.';
REVOKE EXECUTE ON FUNCTION office.claim_routine_tick(text, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.claim_routine_tick(text, timestamptz, timestamptz)
    TO office_producer, office_worker, office_admin;

-- --- the conditional close and the task-terminal sync ------------------------------

CREATE FUNCTION office.close_routine_run(routine_run_id text, terminal text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_status text;
BEGIN
    v_status := CASE office._check_word('terminal', close_routine_run.terminal,
                                        ARRAY['done', 'failed', 'missing', 'cancelled'])
                    WHEN 'missing' THEN 'failed'
                    ELSE close_routine_run.terminal END;
    -- The one guarded statement: whoever updates second (the row lock makes
    -- it wait, then re-checks status) changes nothing.
    UPDATE office.routine_runs r
       SET status = v_status, completed_at = now()
     WHERE r.id = close_routine_run.routine_run_id AND r.status = 'task_created';
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT FROM office.routine_runs r WHERE r.id = close_routine_run.routine_run_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine run %s not found',
                             coalesce(quote_literal(close_routine_run.routine_run_id), 'NULL'));
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION office.close_routine_run(text, text) IS
    'The conditional close: terminal done|failed|missing (-> failed)|cancelled sets the status and completed_at only while the run is task_created; true if this call closed it. Unknown terminal 22023, unknown run OFR01.';
REVOKE EXECUTE ON FUNCTION office.close_routine_run(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.close_routine_run(text, text)
    TO office_producer, office_worker, office_admin;

CREATE FUNCTION office.sync_routine_run_status(task_id text, terminal text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_run text;
BEGIN
    -- Lightweight runs have linked_task_id = '': an empty id must never find them.
    IF sync_routine_run_status.task_id IS NULL OR sync_routine_run_status.task_id = '' THEN
        RETURN false;
    END IF;
    PERFORM office._check_word('terminal', sync_routine_run_status.terminal,
                               ARRAY['done', 'failed', 'missing', 'cancelled']);
    SELECT r.id INTO v_run
      FROM office.routine_runs r
     WHERE r.linked_task_id = sync_routine_run_status.task_id
     ORDER BY r.created_at DESC, r.id COLLATE "C" DESC
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    RETURN office.close_routine_run(v_run, sync_routine_run_status.terminal);
END
$$;
COMMENT ON FUNCTION office.sync_routine_run_status(text, text) IS
    'Closes (conditional close) the newest routine run linked to the task; true if this call closed it. An empty or NULL task id is a no-op (false). Called by the task-terminal trigger before blockers and parents are woken.';
REVOKE EXECUTE ON FUNCTION office.sync_routine_run_status(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.sync_routine_run_status(text, text)
    TO office_producer, office_worker, office_admin;

-- --- dispatch ------------------------------------------------------------------------

-- Internal: the policy loop with self-heal (docs/api.md §4) for one received run
-- of a heavy skip/coalesce routine. Returns NULL to proceed, or the status the
-- run got (skipped, coalesced). The caller holds the (routine, fingerprint)
-- lock.
CREATE FUNCTION office._routine_gate(routine_id text, fingerprint text, policy text, run_id text)
    RETURNS text
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_active   office.routine_runs;
    v_terminal text;
    v_step     text;
    v_msg      text;
BEGIN
    LOOP
        SELECT r.* INTO v_active
          FROM office.routine_runs r
         WHERE r.routine_id = _routine_gate.routine_id
           AND r.dispatch_fingerprint = _routine_gate.fingerprint
           AND r.status = 'task_created'
         ORDER BY r.created_at DESC, r.id COLLATE "C" DESC
         LIMIT 1;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        -- Self-heal. A run without a linked task can never finish: close it
        -- as failed. Else a terminal (or archived, or missing) task closes
        -- its run. Either way, look again: an older live run keeps gating.
        -- A failure to read or close fails closed: the run keeps gating.
        v_step := 'check linked task terminal state';
        BEGIN
            IF v_active.linked_task_id = '' THEN
                v_terminal := 'missing';
            ELSE
                v_terminal := office.task_terminal_status(v_active.linked_task_id);
            END IF;
            IF v_terminal <> '' THEN
                v_step := 'close out stale active run';
                PERFORM office.close_routine_run(v_active.id, v_terminal);
                CONTINUE;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            RAISE WARNING '%: routine run % of routine % (task %): %',
                v_step, v_active.id, _routine_gate.routine_id, v_active.linked_task_id, v_msg;
        END;
        IF _routine_gate.policy = 'coalesce_if_active' THEN
            UPDATE office.routine_runs r
               SET status = 'coalesced', coalesced_into_run_id = v_active.id, completed_at = now()
             WHERE r.id = _routine_gate.run_id;
            RETURN 'coalesced';
        END IF;
        UPDATE office.routine_runs r
           SET status = 'skipped', completed_at = now()
         WHERE r.id = _routine_gate.run_id;
        RETURN 'skipped';
    END LOOP;
END
$$;
COMMENT ON FUNCTION office._routine_gate(text, text, text, text) IS
    'Internal: the skip/coalesce gate with self-heal for one received run; NULL to proceed, else the status given to the run (skipped|coalesced).';
REVOKE EXECUTE ON FUNCTION office._routine_gate(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office._routine_gate(text, text, text, text) TO office_admin;

CREATE FUNCTION office.dispatch_routine(routine_id text, source text, variables jsonb DEFAULT '{}',
                                        trigger_id text DEFAULT NULL, claimed_tick timestamptz DEFAULT NULL,
                                        explicit_key text DEFAULT NULL, missed_ticks int DEFAULT NULL,
                                        missed_since timestamptz DEFAULT NULL,
                                        missed_truncated boolean DEFAULT NULL)
    RETURNS office.dispatch_routine_result
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_routine_id text := dispatch_routine.routine_id;
    v_source     text := dispatch_routine.source;
    v_given      jsonb := coalesce(dispatch_routine.variables, '{}'::jsonb);
    v_trigger    text := nullif(dispatch_routine.trigger_id, '');
    v_explicit   text := nullif(dispatch_routine.explicit_key, '');
    v_routine    office.routines;
    v_bad        text;
    v_vars       jsonb;
    v_title      text;
    v_desc       text;
    v_assignee   text;
    v_heavy      boolean;
    v_fp         text;
    v_run        text;
    v_gated      text;
    v_task       office.task_result;
    v_key        text;
    v_reason     text;
    v_payload    jsonb;
    v_wake       office.wakeup_result;
    v_dispatch   office.wakeup_dispatch_result;
    v_msg        text;
    v_result     office.dispatch_routine_result;
BEGIN
    -- 1. Validate (nothing is written before this block has passed).
    PERFORM office._check_word('source', v_source, ARRAY['cron', 'manual', 'webhook']);
    IF jsonb_typeof(v_given) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('variables must be a JSON object {name: value}, not %s', jsonb_typeof(v_given));
    END IF;
    PERFORM office._check_document('variables', v_given);
    -- The wakeup key it makes must fit the 512 characters of a key.
    IF length('routine:' || v_routine_id || ':' || v_source || ':' || v_explicit) > 512 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('explicit_key %s... is %s characters: its routine key would be longer than 512',
                             quote_literal(left(v_explicit, 40)), length(v_explicit));
    END IF;
    PERFORM office._check_timestamp('claimed_tick', dispatch_routine.claimed_tick);
    PERFORM office._check_timestamp('missed_since', dispatch_routine.missed_since);
    IF dispatch_routine.missed_ticks IS NOT NULL AND dispatch_routine.missed_ticks < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('missed_ticks must not be negative, not %s', dispatch_routine.missed_ticks);
    END IF;
    SELECT r.* INTO v_routine FROM office.routines r WHERE r.id = v_routine_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine %s not found', coalesce(quote_literal(v_routine_id), 'NULL'));
    END IF;
    IF v_routine.status <> 'active' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('routine %s is %s and does not fire', quote_literal(v_routine_id), v_routine.status);
    END IF;
    IF v_trigger IS NOT NULL AND NOT EXISTS (SELECT FROM office.routine_triggers t
                                              WHERE t.id = v_trigger AND t.routine_id = v_routine_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'OFR01',
            MESSAGE = format('routine trigger %s of routine %s not found', quote_literal(v_trigger),
                             quote_literal(v_routine_id));
    END IF;
    SELECT k INTO v_bad FROM jsonb_object_keys(v_given) AS k
     WHERE NOT v_routine.variables ? k ORDER BY k LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('routine %s does not declare variable %s', quote_literal(v_routine_id),
                             quote_literal(v_bad));
    END IF;

    -- 2. Resolve the variables (declared defaults, then the fire's values; a
    -- JSON null is "no value") and render the template.
    SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}'::jsonb) INTO v_vars
      FROM jsonb_each((SELECT coalesce(jsonb_object_agg(d.key, d.value -> 'default'), '{}'::jsonb)
                         FROM jsonb_each(v_routine.variables) AS d
                        WHERE d.value ? 'default') || v_given) AS e
     WHERE jsonb_typeof(e.value) <> 'null';
    v_title := office._render_template(v_routine.task_template ->> 'title', v_vars, 'title', v_routine_id);
    v_desc := office._render_template(v_routine.task_template ->> 'description', v_vars, 'description',
                                      v_routine_id);
    -- What the fire stores (the variables as the run's trigger_payload and in
    -- the wakeup's payload, the title as the task's) within its bounds.
    PERFORM office._check_document('the resolved variables', v_vars);
    PERFORM office._check_free_text('the rendered title', v_title);
    PERFORM office._check_free_text('the rendered description', v_desc);
    v_assignee := v_routine.assignee_agent_profile_id;
    v_heavy := coalesce(v_routine.task_template ->> 'title', '') <> '';
    v_fp := office.routine_fingerprint(v_title, v_desc, coalesce(v_assignee, ''));

    -- 3. The received run, and last_run_at. The touch skips a routine row that
    -- another fire is touching right now (it writes a time as recent): fires
    -- of one routine never queue on its row.
    INSERT INTO office.routine_runs AS r (routine_id, trigger_id, source, trigger_payload, dispatch_fingerprint,
                                          started_at, catch_up_missed_ticks, catch_up_first_missed_at,
                                          catch_up_truncated)
    VALUES (v_routine_id, coalesce(v_trigger, ''), v_source, v_vars, v_fp, now(),
            dispatch_routine.missed_ticks, dispatch_routine.missed_since, dispatch_routine.missed_truncated)
    RETURNING r.id INTO v_run;
    UPDATE office.routines r
       SET last_run_at = greatest(r.last_run_at, now()), updated_at = now()
     WHERE r.id = (SELECT l.id FROM office.routines l WHERE l.id = v_routine_id
                      FOR NO KEY UPDATE SKIP LOCKED);

    v_result := (v_run, NULL, '', '', NULL, NULL, NULL, NULL, NULL, v_routine.workspace_id);

    -- 4. Heavy: the gate, then the task.
    IF v_heavy THEN
        IF v_routine.concurrency_policy <> 'always_create' THEN
            PERFORM office._xact_lock(office._lock_key('routines.gate', v_routine_id, v_fp));
            v_gated := office._routine_gate(v_routine_id, v_fp, v_routine.concurrency_policy, v_run);
            IF v_gated IS NOT NULL THEN
                SELECT r.status, r.coalesced_into_run_id INTO v_result.status, v_result.coalesced_into_run_id
                  FROM office.routine_runs r WHERE r.id = v_run;
                RETURN v_result;
            END IF;
        END IF;
        v_task := office.create_task(workspace_id => v_routine.workspace_id, title => v_title,
                                     assignee_agent_profile_id => v_assignee);
        UPDATE office.routine_runs r SET status = 'task_created', linked_task_id = v_task.task_id
         WHERE r.id = v_run;
        v_result.status := 'task_created';
        v_result.linked_task_id := v_task.task_id;
        v_result.run_id := v_task.run_id;
        RETURN v_result;
    END IF;

    -- 5. Lightweight: a wakeup for the assignee (none: nothing to wake, done).
    IF v_assignee IS NULL THEN
        UPDATE office.routine_runs r SET status = 'done', completed_at = now() WHERE r.id = v_run;
        v_result.status := 'done';
        RETURN v_result;
    END IF;
    v_key := office.routine_key(v_source, v_routine_id, v_trigger, dispatch_routine.claimed_tick, v_run,
                                v_explicit);
    v_reason := CASE v_source WHEN 'cron' THEN 'routine_dispatch_cron' ELSE 'routine_dispatch_event' END;
    v_payload := jsonb_build_object('routine_id', v_routine_id, 'routine_run_id', v_run);
    IF v_vars <> '{}'::jsonb THEN
        v_payload := v_payload || jsonb_build_object('variables', v_vars);
    END IF;
    IF dispatch_routine.missed_ticks IS NOT NULL THEN
        v_payload := v_payload || jsonb_build_object('missed_ticks', dispatch_routine.missed_ticks);
    END IF;
    IF dispatch_routine.missed_since IS NOT NULL THEN
        v_payload := v_payload || jsonb_build_object(
            'missed_since', to_char(dispatch_routine.missed_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
    END IF;
    IF dispatch_routine.missed_truncated THEN
        v_payload := v_payload || jsonb_build_object('missed_truncated', true);
    END IF;
    IF v_key IS NULL THEN
        PERFORM office._count_keyless(v_reason, 'unresolved');
    END IF;
    v_result.idempotency_key := v_key;

    BEGIN
        v_wake := office.request_wakeup(agent_profile_id => v_assignee, source => 'routine',
                                        reason => v_reason, payload => v_payload, idempotency_key => v_key);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        RAISE WARNING 'create routine wakeup request: routine %: %', v_routine_id, v_msg;
        v_msg := 'create routine wakeup request: ' || v_msg;
        UPDATE office.routine_runs r SET status = 'failed', completed_at = now(), error_message = v_msg
         WHERE r.id = v_run;
        v_result.status := 'failed';
        v_result.error_message := v_msg;
        RETURN v_result;
    END;
    v_result.wakeup_request_id := v_wake.wakeup_request_id;
    v_result.wakeup_outcome := v_wake.outcome;
    IF v_wake.outcome = 'deduped' THEN
        -- Already requested (a redelivered tick): success by another route.
        UPDATE office.routine_runs r
           SET status = 'done', completed_at = now(), wakeup_request_id = v_wake.wakeup_request_id
         WHERE r.id = v_run;
        v_result.status := 'done';
        SELECT w.run_id INTO v_result.run_id FROM office.wakeup_requests w WHERE w.id = v_wake.wakeup_request_id;
        RETURN v_result;
    END IF;

    BEGIN
        v_dispatch := office.dispatch_wakeup(v_wake.wakeup_request_id);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        RAISE WARNING 'dispatch routine wakeup request: routine %, wakeup %: %',
            v_routine_id, v_wake.wakeup_request_id, v_msg;
        -- No poller retries a direct dispatch: leave no healthy-looking
        -- queued request behind.
        PERFORM office.fail_wakeup(v_wake.wakeup_request_id, 'dispatch failed');
        v_msg := 'dispatch routine wakeup request: ' || v_msg;
        UPDATE office.routine_runs r
           SET status = 'failed', completed_at = now(), error_message = v_msg,
               wakeup_request_id = v_wake.wakeup_request_id
         WHERE r.id = v_run;
        v_result.status := 'failed';
        v_result.error_message := v_msg;
        RETURN v_result;
    END;
    UPDATE office.routine_runs r
       SET status = 'done', completed_at = now(), wakeup_request_id = v_wake.wakeup_request_id
     WHERE r.id = v_run;
    v_result.status := 'done';
    v_result.run_id := v_dispatch.run_id;
    RETURN v_result;
END
$$;
COMMENT ON FUNCTION office.dispatch_routine(text, text, jsonb, text, timestamptz, text, int, timestamptz, boolean) IS
    'Fires a routine: a received run with the fingerprint of the rendered template, last_run_at touched, the policy (skip/coalesce gate with self-heal, heavy routines), then a task (task_created) or a wakeup keyed routine_key(...) and its dispatch (done; already requested: done; dispatch failure: the wakeup and the run failed, returned, not raised). Unknown source, undeclared variable, unfilled placeholder, routine not active, variables over 1 MiB, a rendered title or description over 64 KiB, a time outside 1970-01-01 .. 9999-12-31 22023; unknown routine or trigger OFR01.';
REVOKE EXECUTE ON FUNCTION office.dispatch_routine(text, text, jsonb, text, timestamptz, text, int, timestamptz, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION office.dispatch_routine(text, text, jsonb, text, timestamptz, text, int, timestamptz, boolean)
    TO office_producer, office_worker, office_admin;
