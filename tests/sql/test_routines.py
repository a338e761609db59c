"""Routines in SQL (docs/api.md §4; docs/domain.md §1.6, §2.16-§2.17, §3.8-§3.9):
scenarios 38-49 and 55 of docs/domain.md §5 as outcomes returned by SQL, template
rendering, the cron claim, bad input (nothing written) and roles. The wakeup
scenarios (50-54, 56) are in test_wakeups.py, the races in
test_routines_races.py, the clients in tests/client/test_routines_client.py.

The helpers it shares with them are in tests/scenarios/routines.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from controlplane import keys
from tests.harness import scalar
from tests.scenarios.routines import (
    DAY,
    TEMPLATE,
    counts,
    fire,
    make_stale,
    nothing_written,
    raises,
    routine,
    run,
    runs,
)
from tests.scenarios.tasks import Conn, agent, call, move


@pytest.fixture
def heavy(db: Conn) -> Conn:
    """agent-1 and a heavy skip_if_active routine R."""
    agent(db, "agent-1")
    routine(db)
    return db


# --- create_routine and the template ---------------------------------------------------


def test_create_routine_stores_the_routine(db: Conn) -> None:
    agent(db, "agent-1")
    row = routine(db, catch_up_policy="skip_missed", catch_up_max=3)
    assert row["id"] == "R" and row["workspace_id"] == "w1" and row["status"] == "active"
    assert row["task_template"] == TEMPLATE and row["variables"] == DAY
    assert (row["concurrency_policy"], row["catch_up_policy"], row["catch_up_max"]) == (
        "skip_if_active",
        "skip_missed",
        3,
    )
    assert row["last_run_at"] is None
    # Defaults: skip_if_active, enqueue_missed_with_cap, 25; a NULL id is generated.
    plain = call(db, "create_routine", workspace_id="w1", name="plain")
    assert len(plain["id"]) == 36
    assert (plain["concurrency_policy"], plain["catch_up_policy"], plain["catch_up_max"]) == (
        "skip_if_active",
        "enqueue_missed_with_cap",
        25,
    )
    assert plain["task_template"] == {} and plain["assignee_agent_profile_id"] is None


def test_the_fingerprint_is_that_of_the_rendered_template(heavy: Conn) -> None:
    result = fire(heavy)
    row = run(heavy, result["routine_run_id"])
    # docs/domain.md §3.9 vector: the rendered title/description and the assignee.
    assert row["dispatch_fingerprint"] == "2f96d53a31daff926bd991baa67fc4d2"
    assert row["dispatch_fingerprint"] == keys.routine_fingerprint(
        "Daily Check - 2026-01-01", "Run for 2026-01-01", "agent-1"
    )
    assert row["trigger_payload"] == {"day": "2026-01-01"}
    title = scalar(
        heavy, "SELECT title FROM office.tasks WHERE id = %s", [result["linked_task_id"]]
    )
    assert title == "Daily Check - 2026-01-01"
    assert row["started_at"] is not None and row["source"] == "manual"


def test_template_rendering_values_and_one_pass(db: Conn) -> None:
    agent(db, "agent-1")
    routine(
        db,
        template={"title": "{{ a }}/{{b}}/{{c}}/{{a}}", "description": "{{b}}"},
        variables={"a": {"default": "x"}, "b": {"default": 7}, "c": {}},
        policy="always_create",
    )
    result = fire(db, variables={"c": "{{a}}", "b": True})
    title = scalar(db, "SELECT title FROM office.tasks WHERE id = %s", [result["linked_task_id"]])
    # Non-string values render as JSON text; a value is never rendered again.
    assert title == "x/true/{{a}}/x"
    assert run(db, result["routine_run_id"])["trigger_payload"] == {
        "a": "x",
        "b": True,
        "c": "{{a}}",
    }


def test_an_unfilled_placeholder_is_refused_and_writes_nothing(db: Conn) -> None:
    agent(db, "agent-1")
    routine(db, template={"title": "Report {{who}}"}, variables={"who": {}})
    before = nothing_written(db)
    with raises("22023", r"placeholder \{\{who\}\}"):
        fire(db)
    # A JSON null is "no value" too.
    with raises("22023", r"\{\{who\}\}"):
        fire(db, variables={"who": None})
    assert nothing_written(db) == before
    assert fire(db, variables={"who": "ops"})["status"] == "task_created"


def test_an_undeclared_variable_is_refused_and_writes_nothing(heavy: Conn) -> None:
    before = nothing_written(heavy)
    with raises("22023", "does not declare variable 'night'"):
        fire(heavy, variables={"night": "x"})
    with raises("22023", "variables must be a JSON object"):
        call(heavy, "dispatch_routine", routine_id="R", source="manual", variables="[1]")
    assert nothing_written(heavy) == before


def test_a_placeholder_of_an_undeclared_variable_is_refused_at_create(db: Conn) -> None:
    with raises("22023", r"uses \{\{day\}\}"):
        routine(db, assignee=None, variables={})
    assert counts(db, "routines") == 0


# --- scenarios 38-44: the gate and its self-heal ---------------------------------------------


def test_38_skip_if_active(heavy: Conn) -> None:
    first = fire(heavy)
    assert first["status"] == "task_created" and first["linked_task_id"]
    move(heavy, first["linked_task_id"], "IN_PROGRESS")
    second = fire(heavy)
    assert second["status"] == "skipped"
    assert (second["linked_task_id"], second["coalesced_into_run_id"]) == ("", "")
    row = run(heavy, second["routine_run_id"])
    assert row["status"] == "skipped" and row["completed_at"] is not None
    assert counts(heavy, "tasks") == 1


def test_39_coalesce_if_active(db: Conn) -> None:
    agent(db, "agent-1")
    routine(db, policy="coalesce_if_active")
    first = fire(db)
    second = fire(db)
    assert second["status"] == "coalesced"
    assert second["coalesced_into_run_id"] == first["routine_run_id"]
    row = run(db, second["routine_run_id"])
    assert row["coalesced_into_run_id"] == first["routine_run_id"] and row["completed_at"]
    assert run(db, first["routine_run_id"])["status"] == "task_created"
    assert counts(db, "tasks") == 1


def test_40_always_create_never_consults_the_gate(db: Conn) -> None:
    agent(db, "agent-1")
    routine(db, policy="always_create")
    first = fire(db)
    # A run without a linked task would be closed by any gate that looked at it.
    db.execute(
        "UPDATE office.routine_runs SET linked_task_id = '' WHERE id = %s",
        [first["routine_run_id"]],
    )
    second = fire(db)
    third = fire(db)
    assert [second["status"], third["status"]] == ["task_created", "task_created"]
    assert run(db, first["routine_run_id"])["status"] == "task_created"
    assert len({second["linked_task_id"], third["linked_task_id"]}) == 2


def test_41_a_different_fingerprint_is_not_gated(heavy: Conn) -> None:
    first = fire(heavy)
    second = fire(heavy, variables={"day": "2026-01-02"})
    assert [first["status"], second["status"]] == ["task_created", "task_created"]
    prints = [r["dispatch_fingerprint"] for r in runs(heavy)]
    assert prints[0] != prints[1]
    assert prints[1] == keys.routine_fingerprint(
        "Daily Check - 2026-01-02", "Run for 2026-01-02", "agent-1"
    )
    # Another assignee is another fingerprint as well.
    agent(heavy, "agent-2")
    heavy.execute("UPDATE office.routines SET assignee_agent_profile_id = 'agent-2'")
    assert fire(heavy)["status"] == "task_created"


@pytest.mark.parametrize(
    ("finish", "closed_as"),
    [
        ("COMPLETED", "done"),
        ("FAILED", "failed"),
        ("CANCELLED", "cancelled"),
        ("archived", "cancelled"),
        ("missing", "failed"),
    ],
)
def test_42_self_heal_on_a_terminal_task(heavy: Conn, finish: str, closed_as: str) -> None:
    first = fire(heavy)
    task_id = first["linked_task_id"]
    if finish == "archived":
        call(heavy, "archive_task", task_id=task_id)  # no state change: nothing syncs
    elif finish == "missing":
        heavy.execute("DELETE FROM office.tasks WHERE id = %s", [task_id])
    else:
        move(heavy, task_id, finish)
        make_stale(heavy, first["routine_run_id"])
    assert run(heavy, first["routine_run_id"])["status"] == "task_created"
    second = fire(heavy)
    assert second["status"] == "task_created"
    healed = run(heavy, first["routine_run_id"])
    assert healed["status"] == closed_as and healed["completed_at"] is not None


def test_42_a_run_without_a_linked_task_is_closed_as_failed(heavy: Conn) -> None:
    first = fire(heavy)
    heavy.execute(
        "UPDATE office.routine_runs SET linked_task_id = '' WHERE id = %s",
        [first["routine_run_id"]],
    )
    assert fire(heavy)["status"] == "task_created"
    assert run(heavy, first["routine_run_id"])["status"] == "failed"


def test_43_self_heal_loops_to_an_older_live_run(db: Conn) -> None:
    agent(db, "agent-1")
    routine(db, policy="always_create")
    older = fire(db)
    newer = fire(db)
    db.execute("UPDATE office.routines SET concurrency_policy = 'skip_if_active'")
    move(db, older["linked_task_id"], "IN_PROGRESS")
    move(db, newer["linked_task_id"], "COMPLETED")
    make_stale(db, newer["routine_run_id"])
    third = fire(db)
    assert third["status"] == "skipped"
    assert run(db, newer["routine_run_id"])["status"] == "done"
    assert run(db, older["routine_run_id"])["status"] == "task_created"


def test_44_a_long_running_task_keeps_gating(heavy: Conn) -> None:
    first = fire(heavy)
    move(heavy, first["linked_task_id"], "IN_PROGRESS")
    heavy.execute(
        "UPDATE office.routine_runs SET created_at = now() - interval '31 days', "
        " started_at = now() - interval '31 days' WHERE id = %s",
        [first["routine_run_id"]],
    )
    assert fire(heavy)["status"] == "skipped"


def test_45_a_failing_terminal_status_read_fails_closed(heavy: Conn) -> None:
    first = fire(heavy)
    move(heavy, first["linked_task_id"], "COMPLETED")
    make_stale(heavy, first["routine_run_id"])
    # The read fails (a broken replacement of the function, installed the way
    # a faulty upgrade would): the gate logs a WARNING and keeps gating.
    heavy.execute(
        "CREATE OR REPLACE FUNCTION office.task_terminal_status(task_id text) RETURNS text"
        " LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp"
        " AS $$ BEGIN RAISE EXCEPTION 'tasks are unreadable'; END $$"
    )
    notices: list[str] = []
    heavy.add_notice_handler(
        lambda diag: notices.append(f"{diag.severity}: {diag.message_primary}")
    )
    second = fire(heavy)
    assert second["status"] == "skipped"
    assert run(heavy, first["routine_run_id"])["status"] == "task_created"
    assert any(
        n.startswith("WARNING: check linked task terminal state") and "tasks are unreadable" in n
        for n in notices
    ), notices


def test_45_a_failing_close_fails_closed_too(heavy: Conn) -> None:
    first = fire(heavy)
    move(heavy, first["linked_task_id"], "COMPLETED")
    make_stale(heavy, first["routine_run_id"])
    heavy.execute(
        """
        CREATE FUNCTION public.refuse_close() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'routine_runs is read-only'; END $$;
        CREATE TRIGGER refuse_close BEFORE UPDATE ON office.routine_runs FOR EACH ROW
            WHEN (OLD.status = 'task_created') EXECUTE FUNCTION public.refuse_close();
        """
    )
    notices: list[str] = []
    heavy.add_notice_handler(
        lambda diag: notices.append(f"{diag.severity}: {diag.message_primary}")
    )
    assert fire(heavy)["status"] == "skipped"
    assert run(heavy, first["routine_run_id"])["status"] == "task_created"
    assert any(
        n.startswith("WARNING: close out stale active run") and "read-only" in n for n in notices
    ), notices


# --- scenarios 46-49: the conditional close and the sync -----------------------------------


def test_46_the_close_happens_once(heavy: Conn) -> None:
    first = fire(heavy)
    run_id = first["routine_run_id"]
    assert scalar(heavy, "SELECT office.close_routine_run(%s, 'done')", [run_id]) is True
    closed = run(heavy, run_id)
    assert scalar(heavy, "SELECT office.close_routine_run(%s, 'cancelled')", [run_id]) is False
    assert scalar(heavy, "SELECT office.close_routine_run(%s, 'done')", [run_id]) is False
    replayed = run(heavy, run_id)
    assert replayed["status"] == "done"
    assert replayed["completed_at"] == closed["completed_at"]
    # The close never touches a run that was not task_created.
    fire(heavy, variables={"day": "x"})
    skipped = fire(heavy, variables={"day": "x"})["routine_run_id"]
    assert scalar(heavy, "SELECT office.close_routine_run(%s, 'done')", [skipped]) is False
    assert run(heavy, skipped)["status"] == "skipped"


@pytest.mark.parametrize(
    ("terminal", "status"),
    [("done", "done"), ("failed", "failed"), ("missing", "failed"), ("cancelled", "cancelled")],
)
def test_46_terminal_words(heavy: Conn, terminal: str, status: str) -> None:
    run_id = fire(heavy)["routine_run_id"]
    assert scalar(heavy, "SELECT office.close_routine_run(%s, %s)", [run_id, terminal]) is True
    assert run(heavy, run_id)["status"] == status


def test_47_sync_with_an_empty_task_id_is_a_no_op(db: Conn) -> None:
    agent(db, "agent-1")
    routine(db, template={}, variables={})
    light = fire(db)
    assert light["status"] == "done" and light["linked_task_id"] == ""
    # Even a (legacy) active run without a linked task is never touched.
    db.execute(
        "UPDATE office.routine_runs SET status = 'task_created', completed_at = NULL WHERE id = %s",
        [light["routine_run_id"]],
    )
    for task_id in ("", None):
        assert scalar(db, "SELECT office.sync_routine_run_status(%s, 'done')", [task_id]) is False
        assert scalar(db, "SELECT office.sync_routine_run_status(%s, 'bogus')", [task_id]) is False
    assert run(db, light["routine_run_id"])["status"] == "task_created"
    assert scalar(db, "SELECT office.sync_routine_run_status('no-such-task', 'done')") is False


def test_48_the_gate_reopens_every_cycle(heavy: Conn) -> None:
    for _ in range(3):
        result = fire(heavy)
        assert result["status"] == "task_created"
        assert (
            scalar(
                heavy,
                "SELECT office.sync_routine_run_status(%s, 'done')",
                [result["linked_task_id"]],
            )
            is True
        )
    assert [r["status"] for r in runs(heavy)] == ["done", "done", "done"]


@pytest.mark.parametrize(
    ("state", "status"), [("COMPLETED", "done"), ("FAILED", "failed"), ("CANCELLED", "cancelled")]
)
def test_49_a_terminal_move_closes_the_linked_run(heavy: Conn, state: str, status: str) -> None:
    first = fire(heavy)
    move(heavy, first["linked_task_id"], state)
    closed = run(heavy, first["routine_run_id"])
    assert closed["status"] == status and closed["completed_at"] is not None
    assert fire(heavy)["status"] == "task_created"


def test_49_the_sync_happens_before_blocker_and_parent_wakes(heavy: Conn) -> None:
    # Record, as each wake is inserted, the status of the routine run linked
    # to the task whose completion caused it.
    heavy.execute(
        """
        CREATE TABLE public.wake_log (reason text, run_status text);
        CREATE FUNCTION public.log_wake() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO public.wake_log
            SELECT NEW.reason, (SELECT status FROM office.routine_runs
                                 WHERE linked_task_id = current_setting('test.task', true));
            RETURN NEW;
        END $$;
        CREATE TRIGGER log_wake AFTER INSERT ON office.runs
            FOR EACH ROW EXECUTE FUNCTION public.log_wake();
        """
    )
    first = fire(heavy)
    task_id = first["linked_task_id"]
    heavy.execute("SELECT set_config('test.task', %s, false)", [task_id])
    agent(heavy, "agent-2")
    call(
        heavy, "create_task", workspace_id="w1", id="dependent", assignee_agent_profile_id="agent-2"
    )
    call(heavy, "add_blocker", task_id="dependent", blocker_task_id=task_id)
    call(heavy, "create_task", workspace_id="w1", id="parent", assignee_agent_profile_id="agent-2")
    heavy.execute("UPDATE office.tasks SET parent_id = 'parent' WHERE id = %s", [task_id])
    heavy.execute("DELETE FROM public.wake_log")
    move(heavy, task_id, "COMPLETED")
    log = heavy.execute("SELECT reason, run_status FROM public.wake_log ORDER BY reason").fetchall()
    assert log == [("task_blockers_resolved", "done"), ("task_children_completed", "done")]


def test_49_without_the_syncer_a_terminal_move_still_works(heavy: Conn) -> None:
    first = fire(heavy)
    heavy.execute("ALTER EXTENSION office DROP FUNCTION office.sync_routine_run_status(text, text)")
    heavy.execute("DROP FUNCTION office.sync_routine_run_status(text, text)")
    move(heavy, first["linked_task_id"], "COMPLETED")
    assert run(heavy, first["routine_run_id"])["status"] == "task_created"


# --- scenario 55: routine keys and the cron claim ------------------------------------------


@pytest.fixture
def light(db: Conn) -> Conn:
    """agent-1 and a lightweight always_create routine L with cron trigger t1."""
    agent(db, "agent-1")
    routine(db, "L", template={}, variables={}, policy="always_create")
    call(
        db,
        "add_routine_trigger",
        routine_id="L",
        cron_expression="0 12 * * *",
        next_run_at=datetime(2026, 5, 10, 12, tzinfo=UTC),
        id="t1",
    )
    return db


def test_55_two_manual_fires_have_two_keys(light: Conn) -> None:
    first, second = fire(light, "L"), fire(light, "L")
    assert first["idempotency_key"] == f"routine:L:run:{first['routine_run_id']}"
    assert second["idempotency_key"] == f"routine:L:run:{second['routine_run_id']}"
    assert first["wakeup_outcome"] == second["wakeup_outcome"] == "queued"
    assert counts(light, "wakeup_requests") == 2


def test_55_a_redelivered_tick_dedups_and_a_new_tick_does_not(light: Conn) -> None:
    tick = datetime(2026, 5, 10, 12, tzinfo=UTC)
    first = fire(light, "L", "cron", trigger_id="t1", claimed_tick=tick)
    again = fire(light, "L", "cron", trigger_id="t1", claimed_tick=tick)
    assert first["idempotency_key"] == again["idempotency_key"] == "routine:L:t1:tick:1778414400"
    assert first["idempotency_key"] == keys.routine_key("cron", "L", "t1", tick, "ignored")
    assert (again["status"], again["wakeup_outcome"]) == ("done", "deduped")
    assert again["wakeup_request_id"] == first["wakeup_request_id"]
    later = fire(
        light, "L", "cron", trigger_id="t1", claimed_tick=datetime(2026, 5, 11, 12, tzinfo=UTC)
    )
    assert later["idempotency_key"] == "routine:L:t1:tick:1778500800"
    assert later["wakeup_outcome"] == "queued"


def test_55_cron_without_a_tick_is_keyless_unresolved(light: Conn) -> None:
    result = fire(light, "L", "cron", trigger_id="t1")
    assert result["status"] == "done" and result["idempotency_key"] is None
    assert scalar(light, "SELECT idempotency_key FROM office.wakeup_requests") is None
    stats = light.execute("SELECT reason, cause, total FROM office.keyless_stats").fetchall()
    assert stats == [("routine_dispatch_cron", "unresolved", 1)]


def test_55_the_key_names_the_claimed_tick_not_the_advanced_one(light: Conn) -> None:
    tick = datetime(2026, 5, 10, 12, tzinfo=UTC)
    following = datetime(2026, 5, 11, 12, tzinfo=UTC)
    assert (
        scalar(light, "SELECT office.claim_routine_tick('t1', %s, %s)", [tick, following]) is True
    )
    trigger = call(light, "add_routine_trigger", routine_id="L", cron_expression="* * * * *")
    assert trigger["next_run_at"] is None
    stored = scalar(light, "SELECT next_run_at FROM office.routine_triggers WHERE id = 't1'")
    assert stored == following
    result = fire(light, "L", "cron", trigger_id="t1", claimed_tick=tick)
    assert result["idempotency_key"] == "routine:L:t1:tick:1778414400"


def test_55_an_explicit_key_takes_precedence(light: Conn) -> None:
    first = fire(light, "L", "webhook", explicit_key="delivery-9")
    again = fire(light, "L", "webhook", explicit_key="delivery-9")
    assert first["idempotency_key"] == "routine:L:webhook:delivery-9"
    assert again["wakeup_outcome"] == "deduped" and again["status"] == "done"


def test_claim_routine_tick_is_a_compare_and_swap(light: Conn) -> None:
    tick = datetime(2026, 5, 10, 12, tzinfo=UTC)
    following = datetime(2026, 5, 11, 12, tzinfo=UTC)
    claim = "SELECT office.claim_routine_tick('t1', %s, %s)"
    assert scalar(light, claim, [tick, following]) is True
    assert scalar(light, claim, [tick, following]) is False
    row = call(light, "add_routine_trigger", routine_id="L", cron_expression="0 * * * *", id="t2")
    assert row["next_run_at"] is None and row["enabled"] is True and row["kind"] == "cron"
    stamped = light.execute(
        "SELECT next_run_at, last_fired_at IS NOT NULL FROM office.routine_triggers WHERE id = 't1'"
    ).fetchone()
    assert stamped == (following, True)
    # An unarmed trigger is armed by observed NULL, without counting as a fire.
    assert scalar(light, claim.replace("'t1'", "'t2'"), [None, following]) is True
    armed = light.execute(
        "SELECT next_run_at, last_fired_at FROM office.routine_triggers WHERE id = 't2'"
    ).fetchone()
    assert armed == (following, None)
    # A disabled trigger is never claimed.
    light.execute("UPDATE office.routine_triggers SET enabled = false WHERE id = 't1'")
    assert scalar(light, claim, [following, datetime(2026, 5, 12, 12, tzinfo=UTC)]) is False
    with raises("OFR01", "routine trigger 'nope' not found"):
        light.execute(claim.replace("'t1'", "'nope'"), [tick, following])
    with raises("22023", "following_next_run_at"):
        light.execute(claim, [following, tick])


def test_a_fire_touches_last_run_at(heavy: Conn) -> None:
    fire(heavy)
    touched = scalar(heavy, "SELECT last_run_at FROM office.routines WHERE id = 'R'")
    assert touched is not None


def test_catch_up_values_are_recorded_and_carried(light: Conn) -> None:
    since = datetime(2026, 5, 1, 12, tzinfo=UTC)
    result = fire(
        light,
        "L",
        "cron",
        trigger_id="t1",
        claimed_tick=since,
        missed_ticks=9,
        missed_since=since,
        missed_truncated=False,
    )
    row = run(light, result["routine_run_id"])
    assert (
        row["catch_up_missed_ticks"],
        row["catch_up_first_missed_at"],
        row["catch_up_truncated"],
    ) == (
        9,
        since,
        False,
    )
    payload = scalar(light, "SELECT payload FROM office.wakeup_requests")
    assert payload == {
        "routine_id": "L",
        "routine_run_id": result["routine_run_id"],
        "missed_ticks": 9,
        "missed_since": "2026-05-01T12:00:00Z",
    }
    truncated = fire(
        light, "L", "manual", missed_ticks=25, missed_since=since, missed_truncated=True
    )
    payload = scalar(
        light,
        "SELECT payload FROM office.wakeup_requests WHERE id = %s",
        [truncated["wakeup_request_id"]],
    )
    assert payload["missed_truncated"] is True and payload["missed_ticks"] == 25


# --- bad input: nothing written ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"concurrency_policy": "bogus"}, "unknown concurrency_policy 'bogus'"),
        ({"concurrency_policy": None}, "unknown concurrency_policy NULL"),
        ({"catch_up_policy": "summarize"}, "unknown catch_up_policy 'summarize'"),
        ({"catch_up_max": 0}, "catch_up_max must be at least 1"),
        ({"name": ""}, "name of routine"),
        ({"id": "a:b"}, "routine id 'a:b' contains"),
        ({"id": ""}, "routine id must not be empty"),
        ({"workspace_id": ""}, "workspace id must not be empty"),
        ({"task_template": "[]"}, "task_template must be a JSON object"),
        ({"task_template": '{"title": 5}'}, "task_template title must be a JSON string"),
        ({"variables": '{"a": 1}'}, "variable 'a' must be an identifier"),
        ({"variables": '{"a-b": {}}'}, "variable 'a-b' must be an identifier"),
        # Bounds on what is stored (docs/api.md Conventions).
        ({"name": "n" * 65537}, "name is 65537 bytes, more than 64 KiB"),
        (
            {"task_template": json.dumps({"title": "t" * 65537})},
            "task_template title is 65537 bytes",
        ),
        (
            {"task_template": json.dumps({"title": "t", "description": "d" * 65537})},
            "task_template description is",
        ),
        (
            {"task_template": json.dumps({"x": "x" * 1048576})},
            "task_template is .* more than 1 MiB",
        ),
        (
            {"variables": json.dumps({"a": {"default": "x" * 1048576}})},
            "variables is .* more than 1 MiB",
        ),
    ],
)
def test_create_routine_refuses_bad_input(db: Conn, args: dict[str, Any], message: str) -> None:
    agent(db, "agent-1")
    base: dict[str, Any] = {"workspace_id": "w1", "name": "n", "id": "R"}
    with raises("22023", message):
        call(db, "create_routine", **{**base, **args})
    assert counts(db, "routines") == 0


def test_create_routine_refuses_an_unknown_assignee(db: Conn) -> None:
    with raises("OFA01", "agent 'ghost' not found"):
        call(db, "create_routine", workspace_id="w1", name="n", assignee_agent_profile_id="ghost")
    assert counts(db, "routines") == 0


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "cron expression '' must not be empty"),
        ("* * * *", "'\\* \\* \\* \\*': 4 fields, expected 5"),
        ("0 0 * * * *", "6 fields, expected 5"),
        ("60 * * * *", "bad minute field '60'"),
        ("* 24 * * *", "bad hour field '24'"),
        ("* * 0 * *", "bad day-of-month field '0'"),
        ("* * * 13 *", "bad month field '13'"),
        ("* * * * 8", "bad day-of-week field '8'"),
        ("*/0 * * * *", "bad minute field"),
        ("5-1 * * * *", "bad minute field '5-1'"),
        ("1,,2 * * * *", "bad minute field"),
        ("@daily * * * *", "bad minute field"),
        ("* * * FOO *", "bad month field 'FOO'"),
        ("* * * * MON#6", "bad day-of-week field"),
        ("? * * * *", "bad minute field"),
    ],
)
def test_add_routine_trigger_refuses_a_bad_cron_expression(
    light: Conn, expression: str, message: str
) -> None:
    before = counts(light, "routine_triggers")
    with raises("22023", message):
        call(light, "add_routine_trigger", routine_id="L", cron_expression=expression)
    assert counts(light, "routine_triggers") == before


@pytest.mark.parametrize(
    "expression",
    [
        "* * * * *",
        "*/15 9-17 * * MON-FRI",
        "0 0 1,15 * *",
        "30 2 * * *",
        "0 9 L * *",
        "0 9 LW * *",
        "0 9 * * 5L",
        "0 9 * * FRI#2",
        "0 0 * jan,Jul sun",
        "5/10 * * * 7",
    ],
)
def test_add_routine_trigger_accepts_cron_syntax(light: Conn, expression: str) -> None:
    row = call(
        light,
        "add_routine_trigger",
        routine_id="L",
        cron_expression=expression,
        timezone="Europe/Paris",
    )
    assert row["cron_expression"] == expression and row["timezone"] == "Europe/Paris"


def test_add_routine_trigger_refuses_an_unknown_time_zone_and_routine(light: Conn) -> None:
    before = counts(light, "routine_triggers")
    with raises("22023", "unknown time zone 'Mars/Olympus'"):
        call(
            light,
            "add_routine_trigger",
            routine_id="L",
            cron_expression="* * * * *",
            timezone="Mars/Olympus",
        )
    with raises("22023", "unknown time zone 'europe/paris'"):
        call(
            light,
            "add_routine_trigger",
            routine_id="L",
            cron_expression="* * * * *",
            timezone="europe/paris",
        )
    with raises("OFR01", "routine 'nope' not found"):
        call(light, "add_routine_trigger", routine_id="nope", cron_expression="* * * * *")
    with raises("22023", "routine trigger id"):
        call(light, "add_routine_trigger", routine_id="L", cron_expression="* * * * *", id="a,b")
    assert counts(light, "routine_triggers") == before


def test_dispatch_routine_refuses_bad_input_and_writes_nothing(light: Conn) -> None:
    before = nothing_written(light)
    with raises("22023", "unknown source 'email'"):
        fire(light, "L", "email")
    with raises("22023", "unknown source NULL"):
        fire(light, "L", None)  # type: ignore[arg-type]
    with raises("OFR01", "routine 'nope' not found"):
        fire(light, "nope")
    with raises("OFR01", "routine trigger 'ghost' of routine 'L' not found"):
        fire(light, "L", "cron", trigger_id="ghost")
    with raises("22023", "explicit_key"):
        fire(light, "L", "webhook", explicit_key="k" * 500)
    light.execute("UPDATE office.routines SET status = 'paused'")
    with raises("22023", "routine 'L' is paused and does not fire"):
        fire(light, "L")
    assert nothing_written(light) == before


def test_close_and_sync_refuse_bad_input(heavy: Conn) -> None:
    run_id = fire(heavy)["routine_run_id"]
    with raises("22023", "unknown terminal 'closed'"):
        heavy.execute("SELECT office.close_routine_run(%s, 'closed')", [run_id])
    with raises("22023", "unknown terminal ''"):
        heavy.execute("SELECT office.sync_routine_run_status('T', '')")
    with raises("OFR01", "routine run 'nope' not found"):
        heavy.execute("SELECT office.close_routine_run('nope', 'done')")
    assert run(heavy, run_id)["status"] == "task_created"


# --- roles ------------------------------------------------------------------------------------


def test_roles_reach_routines_through_functions_only(heavy: Conn) -> None:
    heavy.execute("SET ROLE office_producer")
    try:
        assert fire(heavy, variables={"day": "p"})["status"] == "task_created"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            heavy.execute("SELECT * FROM office.routine_runs")
    finally:
        heavy.execute("RESET ROLE")
    heavy.execute("SET ROLE office_reader")
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            fire(heavy)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            heavy.execute("SELECT office.close_routine_run('x', 'done')")
    finally:
        heavy.execute("RESET ROLE")
    heavy.execute("SET ROLE office_worker")
    try:
        assert scalar(heavy, "SELECT office.sync_routine_run_status('', 'done')") is False
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            heavy.execute("SELECT office.create_routine('w1', 'n')")
    finally:
        heavy.execute("RESET ROLE")


# --- explicit ids, time bounds, workspaces (docs/api.md Conventions) ---


def test_an_explicit_id_that_exists_is_23505_naming_it(light: Conn) -> None:
    before = nothing_written(light)
    with raises("23505", "routine 'L' already exists"):
        routine(light, "L")
    with raises("23505", "routine trigger 't1' already exists"):
        call(light, "add_routine_trigger", routine_id="L", cron_expression="* * * * *", id="t1")
    assert nothing_written(light) == before


@pytest.mark.parametrize(
    "bad",
    ["4713-01-01 BC", "infinity", "-infinity", "1969-12-31 23:59:59+00", "10000-01-01 00:00+00"],
)
def test_times_outside_1970_9999_are_22023_naming_the_argument(light: Conn, bad: str) -> None:
    before = nothing_written(light)
    with raises("22023", "next_run_at must be a time from 1970-01-01 to 9999-12-31"):
        call(
            light,
            "add_routine_trigger",
            routine_id="L",
            cron_expression="* * * * *",
            next_run_at=bad,
        )
    with raises("22023", "following_next_run_at must be a time"):
        light.execute("SELECT office.claim_routine_tick('t1', NULL, %s)", [bad])
    with raises("22023", "observed_next_run_at must be a time"):
        light.execute("SELECT office.claim_routine_tick('t1', %s, '2030-01-01')", [bad])
    with raises("22023", "claimed_tick must be a time"):
        fire(light, "L", "cron", trigger_id="t1", claimed_tick=bad)
    with raises("22023", "missed_since must be a time"):
        fire(light, "L", "cron", trigger_id="t1", missed_since=bad)
    assert nothing_written(light) == before


def test_a_cron_expression_is_at_most_200_characters(light: Conn) -> None:
    long = ",".join(["0"] * 101) + " * * * *"
    with raises("22023", "cron_expression .* more than 200"):
        call(light, "add_routine_trigger", routine_id="L", cron_expression=long)


def test_a_fire_that_would_store_too_much_is_22023_and_writes_nothing(heavy: Conn) -> None:
    before = nothing_written(heavy)
    with raises("22023", "the rendered title is .* more than 64 KiB"):
        fire(heavy, variables={"day": "d" * 65536})
    with raises("22023", "variables is .* more than 1 MiB"):
        fire(heavy, variables={"day": "d" * 1048576})
    assert nothing_written(heavy) == before


def test_a_routine_assignee_is_an_agent_of_its_workspace(db: Conn) -> None:
    agent(db, "agent-1")
    agent(db, "agent-2", workspace="w2")
    with raises(
        "OFW01",
        "routine 'R' of workspace 'w1' cannot be assigned to agent 'agent-2' of workspace 'w2'",
    ):
        routine(db, assignee="agent-2")
    routine(db)
    for statement in (
        "UPDATE office.routines SET assignee_agent_profile_id = 'agent-2' WHERE id = 'R'",
        "UPDATE office.routines SET workspace_id = 'w3' WHERE id = 'R'",
        "INSERT INTO office.routines (id, workspace_id, name, assignee_agent_profile_id)"
        " VALUES ('R2', 'w2', 'n', 'agent-1')",
    ):
        with pytest.raises(psycopg.Error) as caught:
            db.execute(statement)
        assert caught.value.sqlstate == "OFW01", statement
    assert counts(db, "routines") == 1
    # A routine written before the upgrade keeps its assignee until it changes.
    db.execute("SET session_replication_role = replica")
    db.execute("UPDATE office.routines SET workspace_id = 'w2' WHERE id = 'R'")
    db.execute("SET session_replication_role = origin")
    db.execute("UPDATE office.routines SET name = 'renamed', status = 'paused' WHERE id = 'R'")
