"""office.enqueue_run and office.enqueue_runs (docs/api.md §3): docs/domain.md §5
scenarios 1-15 and 69-74 as outcomes returned by SQL, the windows as settings,
bad input, NOTIFY and roles. "Aged" rows get their requested_at moved back."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

Conn = psycopg.Connection[Any]
Result = tuple[str, str | None, str | None]

MIB = 1024 * 1024


def enqueue(conn: Conn, agent: str | None, reason: str | None, **kwargs: Any) -> Result:
    """Call office.enqueue_run in named notation with only the given arguments."""
    args: dict[str, Any] = {"agent_profile_id": agent, "reason": reason, **kwargs}
    if "payload" in args and isinstance(args["payload"], dict | list):
        args["payload"] = json.dumps(args["payload"])
    query = sql.SQL("SELECT outcome, dedup_kind, run_id FROM office.enqueue_run({})").format(
        sql.SQL(", ").join(
            sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in args
        )
    )
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return (row[0], row[1], row[2])


def run(conn: Conn, run_id: str | None) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM office.runs WHERE id = %s", [run_id]).fetchone()
    assert row is not None, f"no run {run_id}"
    return row


def runs(conn: Conn) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM office.runs ORDER BY requested_at, id").fetchall()


def run_count(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM office.runs").fetchone()
    assert row is not None
    return int(row[0])


def age(conn: Conn, run_id: str | None, interval: str) -> None:
    conn.execute(
        "UPDATE office.runs SET requested_at = now() - %s::interval WHERE id = %s",
        [interval, run_id],
    )


def set_status(conn: Conn, run_id: str | None, status: str) -> None:
    conn.execute("UPDATE office.runs SET status = %s WHERE id = %s", [status, run_id])


def dedup_stats(conn: Conn) -> dict[tuple[str, str, str], int]:
    rows = conn.execute("SELECT queue, reason, kind, total FROM office.dedup_stats").fetchall()
    return {(q, r, k): int(t) for q, r, k, t in rows}


def keyless_stats(conn: Conn) -> dict[tuple[str, str], int]:
    rows = conn.execute("SELECT reason, cause, total FROM office.keyless_stats").fetchall()
    return {(r, c): int(t) for r, c, t in rows}


def counter_rows(conn: Conn) -> int:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM office.dedup_counters)"
        "     + (SELECT count(*) FROM office.keyless_counters)"
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def agent(db: Conn) -> str:
    db.execute("SELECT office.upsert_agent('agent-a', 'ws-1')")
    db.execute("SELECT office.upsert_agent('agent-b', 'ws-1')")
    return "agent-a"


# ---------------------------------------------------------------------------
# The basics


def test_a_new_run_is_queued_with_its_defaults(db: Conn, agent: str) -> None:
    outcome, kind, run_id = enqueue(
        db,
        agent,
        "task_assigned",
        payload={"x": 1},
        task_id="t1",
        idempotency_key="task_assigned:t1:agent-a:1",
    )
    assert (outcome, kind) == ("queued", None)
    row = run(db, run_id)
    assert row["status"] == "queued"
    assert row["coalesced_count"] == 1
    assert row["attempt"] == 0
    assert row["retry_count"] == 0
    assert row["entry_triggered"] is False
    assert row["idempotency_key"] == "task_assigned:t1:agent-a:1"
    assert row["task_id"] == "t1"
    assert row["agent_profile_id"] == agent
    assert row["reason"] == "task_assigned"
    assert row["payload"] == {"x": 1, "task_id": "t1", "agent_profile_id": agent}
    assert row["context_snapshot"] == {}
    assert row["claimed_at"] is None and row["finished_at"] is None


def test_the_typed_arguments_override_the_payload(db: Conn, agent: str) -> None:
    _, _, run_id = enqueue(
        db,
        agent,
        "r",
        payload={"task_id": "other", "agent_profile_id": "x", "k": "v"},
        task_id="t9",
    )
    assert run(db, run_id)["payload"] == {"task_id": "t9", "agent_profile_id": agent, "k": "v"}


def test_an_empty_task_id_is_no_task(db: Conn, agent: str) -> None:
    _, _, run_id = enqueue(db, agent, "r", payload={"task_id": "kept"}, task_id="")
    row = run(db, run_id)
    assert row["task_id"] is None
    assert row["payload"] == {"task_id": "kept", "agent_profile_id": agent}


def test_the_default_payload_is_an_empty_object(db: Conn, agent: str) -> None:
    _, _, run_id = enqueue(db, agent, "r")
    assert run(db, run_id)["payload"] == {"agent_profile_id": agent}


def test_a_running_agent_accepts_runs(db: Conn, agent: str) -> None:
    db.execute("SELECT office.set_agent_status(%s, 'running')", [agent])
    assert enqueue(db, agent, "r")[0] == "queued"


# ---------------------------------------------------------------------------
# Scenario 1: windowed dedup, in any status


@pytest.mark.parametrize("status", ["queued", "claimed", "finished", "failed", "cancelled"])
def test_s01_windowed_dedup_in_any_status(db: Conn, agent: str, status: str) -> None:
    _, _, first = enqueue(db, agent, "task_comment", idempotency_key="K")
    age(db, first, "1 minute")
    set_status(db, first, status)
    assert enqueue(db, agent, "task_comment", idempotency_key="K") == ("deduped", "windowed", first)
    assert run_count(db) == 1
    assert dedup_stats(db) == {("runs", "task_comment", "windowed"): 1}


def test_s01_the_idempotency_window_is_a_setting(db: Conn, agent: str) -> None:
    _, _, first = enqueue(db, agent, "task_comment", idempotency_key="K")
    age(db, first, "2 hours")
    db.execute("SET office.idempotency_window = '1 hour'")
    # Outside the shortened window: the unique index catches it (durable).
    assert enqueue(db, agent, "task_comment", idempotency_key="K") == ("deduped", "durable", first)
    db.execute("SET office.idempotency_window = '3 hours'")
    assert enqueue(db, agent, "task_comment", idempotency_key="K") == ("deduped", "windowed", first)
    db.execute("RESET office.idempotency_window")
    assert enqueue(db, agent, "task_comment", idempotency_key="K") == ("deduped", "windowed", first)


@pytest.mark.parametrize(
    ("setting", "call"),
    [
        # A fresh key: nothing is deduped, the window is read all the same.
        ("office.idempotency_window", {"reason": "task_comment", "idempotency_key": "fresh"}),
        (
            "office.idempotency_window",
            {"reason": "deploy", "idempotency_key": "fresh", "entry_triggered": True},
        ),
        # A coalescible request that finds no target.
        ("office.coalesce_window", {"reason": "heartbeat"}),
    ],
)
def test_a_bad_window_fails_the_first_call_that_could_read_it(
    db: Conn, agent: str, setting: str, call: dict[str, Any]
) -> None:
    db.execute(sql.SQL("SET {} = 'forever'").format(sql.Identifier(*setting.split("."))))
    for bulk in (False, True):
        with pytest.raises(
            psycopg.errors.InvalidParameterValue, match=f"setting {setting} = 'forever'"
        ):
            if bulk:
                db.execute(
                    "SELECT * FROM office.enqueue_runs(%s)",
                    [json.dumps([{"agent_profile_id": agent, **call}])],
                )
            else:
                enqueue(db, agent, **call)
    assert run_count(db) == 0


# ---------------------------------------------------------------------------
# Scenario 2: durable dedup past the window


def test_s02_durable_dedup_past_the_window(db: Conn, agent: str) -> None:
    _, _, first = enqueue(db, agent, "task_comment", idempotency_key="K")
    age(db, first, "25 hours")
    set_status(db, first, "finished")
    assert enqueue(db, agent, "task_comment", idempotency_key="K") == ("deduped", "durable", first)
    assert run_count(db) == 1
    assert dedup_stats(db) == {("runs", "task_comment", "durable"): 1}


# ---------------------------------------------------------------------------
# Scenarios 3 and 4: other insert errors pass through unchanged


def test_s03_a_non_conflict_insert_error_is_returned_unchanged(db: Conn, agent: str) -> None:
    db.execute(
        """
        CREATE FUNCTION public.refuse_run() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION USING ERRCODE = 'XX123', MESSAGE = 'disk says no'; END $$;
        CREATE TRIGGER refuse BEFORE INSERT ON office.runs
            FOR EACH ROW EXECUTE FUNCTION public.refuse_run();
        """
    )
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, agent, "task_comment", idempotency_key="K")
    assert info.value.sqlstate == "XX123"
    assert info.value.diag.message_primary == "disk says no"
    assert run_count(db) == 0
    assert counter_rows(db) == 0


def test_s04_a_primary_key_collision_is_not_a_dedup(db: Conn, agent: str) -> None:
    _, _, first = enqueue(db, agent, "r1", idempotency_key="K1")
    db.execute(
        """
        CREATE FUNCTION public.reuse_id() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN NEW.id := (SELECT id FROM office.runs LIMIT 1); RETURN NEW; END $$;
        CREATE TRIGGER reuse BEFORE INSERT ON office.runs
            FOR EACH ROW EXECUTE FUNCTION public.reuse_id();
        """
    )
    with pytest.raises(psycopg.errors.UniqueViolation) as info:
        enqueue(db, agent, "r2", idempotency_key="K2")
    assert info.value.diag.constraint_name == "runs_pkey"
    assert [r["id"] for r in runs(db)] == [first]
    assert dedup_stats(db) == {}


# ---------------------------------------------------------------------------
# Scenarios 5-11: keys and coalescing


def test_s05_keyless_enqueues_for_different_reasons_both_queue(db: Conn, agent: str) -> None:
    first = enqueue(db, agent, "task_unblocked", idempotency_key="")
    second = enqueue(db, agent, "task_reopened")
    assert (first[0], second[0]) == ("queued", "queued")
    assert first[2] != second[2]
    assert [r["idempotency_key"] for r in runs(db)] == [None, None]


def test_s06_keyless_coalescing(db: Conn, agent: str) -> None:
    _, _, target = enqueue(db, agent, "heartbeat", payload={"n": 1})
    age(db, target, "1 second")
    assert enqueue(db, agent, "heartbeat", payload={"n": 2}) == ("coalesced", None, target)
    row = run(db, target)
    assert row["coalesced_count"] == 2
    assert row["payload"] == {"n": 2, "agent_profile_id": agent}  # replaced, not merged
    assert run_count(db) == 1
    assert dedup_stats(db) == {("runs", "heartbeat", "coalesced"): 1}


def test_s06_coalescing_keeps_requested_at(db: Conn, agent: str) -> None:
    _, _, target = enqueue(db, agent, "heartbeat")
    age(db, target, "3 seconds")
    before = run(db, target)["requested_at"]
    assert enqueue(db, agent, "heartbeat")[0] == "coalesced"
    assert run(db, target)["requested_at"] == before


def test_s06_the_newest_queued_run_is_the_target(db: Conn, agent: str) -> None:
    _, _, older = enqueue(db, agent, "heartbeat", entry_triggered=True)
    _, _, newer = enqueue(db, agent, "heartbeat")
    _, _, oldest = enqueue(db, agent, "heartbeat", entry_triggered=True)
    age(db, oldest, "3 seconds")
    age(db, older, "2 seconds")
    age(db, newer, "1 second")
    db.execute("UPDATE office.runs SET entry_triggered = false")
    assert enqueue(db, agent, "heartbeat") == ("coalesced", None, newer)


def test_s07_the_target_keeps_its_key_and_the_incoming_key_is_recorded(
    db: Conn, agent: str
) -> None:
    # 0.3.0 dropped the incoming key, so a redelivery after the window made a
    # second run; since 0.4.0 the target serves it (docs/api.md §3, step 3).
    _, _, target = enqueue(db, agent, "task_assigned", idempotency_key="K1")
    assert enqueue(db, agent, "task_assigned", idempotency_key="K2") == ("coalesced", None, target)
    assert run(db, target)["idempotency_key"] == "K1"
    assert [r["id"] for r in runs(db)] == [target]
    # Redelivered after the window, once R is claimed: still R's.
    set_status(db, target, "claimed")
    age(db, target, "10 seconds")
    assert enqueue(db, agent, "task_assigned", idempotency_key="K2") == (
        "deduped",
        "windowed",
        target,
    )
    assert [r["id"] for r in runs(db)] == [target]


def test_s08_a_comment_keyed_row_is_never_a_target(db: Conn, agent: str) -> None:
    _, _, comment = enqueue(db, agent, "task_comment", idempotency_key="task_comment:c1:agent-a")
    outcome, _, other = enqueue(db, agent, "task_comment")
    assert outcome == "queued" and other != comment
    assert run(db, comment)["coalesced_count"] == 1


def test_s09_a_comment_keyed_request_never_coalesces(db: Conn, agent: str) -> None:
    _, _, keyless = enqueue(db, agent, "task_comment", payload={"n": 1})
    outcome, _, comment = enqueue(
        db, agent, "task_comment", idempotency_key="task_comment:c2:agent-a", payload={"n": 2}
    )
    assert outcome == "queued" and comment != keyless
    assert run(db, keyless)["coalesced_count"] == 1
    assert run(db, keyless)["payload"]["n"] == 1


def test_s09_only_the_exact_comment_prefix_is_excluded(db: Conn, agent: str) -> None:
    # '_' is not a wildcard: "taskXcomment:" is an ordinary key.
    _, _, target = enqueue(db, agent, "task_comment")
    assert enqueue(db, agent, "task_comment", idempotency_key="taskXcomment:c1")[0] == "coalesced"
    assert run(db, target)["coalesced_count"] == 2


def test_s10_assignment_coalescing_is_task_scoped(db: Conn, agent: str) -> None:
    _, _, t1 = enqueue(db, agent, "task_assigned", task_id="T1")
    outcome, _, t2 = enqueue(db, agent, "task_assigned", task_id="T2")
    assert outcome == "queued" and t2 != t1
    assert enqueue(db, agent, "task_assigned", task_id="T1") == ("coalesced", None, t1)
    assert run(db, t1)["coalesced_count"] == 2
    assert run(db, t2)["coalesced_count"] == 1


def test_s10_every_reason_is_task_scoped_and_no_task_only_joins_no_task(
    db: Conn, agent: str
) -> None:
    # Stricter than the original (docs/api.md §3 step 3): all reasons, both ways.
    _, _, on_t1 = enqueue(db, agent, "task_comment", task_id="T1")
    assert enqueue(db, agent, "task_comment", task_id="T2")[0] == "queued"
    outcome, _, taskless = enqueue(db, agent, "task_comment")
    assert outcome == "queued"
    assert enqueue(db, agent, "task_comment") == ("coalesced", None, taskless)
    assert enqueue(db, agent, "task_comment", task_id="T1") == ("coalesced", None, on_t1)


def test_s10_other_agents_and_reasons_are_other_buckets(db: Conn, agent: str) -> None:
    enqueue(db, agent, "heartbeat")
    assert enqueue(db, "agent-b", "heartbeat")[0] == "queued"
    assert enqueue(db, agent, "budget_alert")[0] == "queued"
    assert run_count(db) == 3


def test_s11_window_boundary(db: Conn, agent: str) -> None:
    _, _, old = enqueue(db, agent, "heartbeat")
    age(db, old, "6 seconds")
    outcome, _, new = enqueue(db, agent, "heartbeat")
    assert outcome == "queued" and new != old
    assert run(db, old)["coalesced_count"] == 1


def test_s11_the_coalesce_window_is_a_setting(db: Conn, agent: str) -> None:
    _, _, old = enqueue(db, agent, "heartbeat")
    age(db, old, "6 seconds")
    db.execute("SET office.coalesce_window = '1 minute'")
    assert enqueue(db, agent, "heartbeat") == ("coalesced", None, old)
    db.execute("SET office.coalesce_window = '0'")  # 0 turns coalescing off
    assert enqueue(db, agent, "heartbeat")[0] == "queued"
    db.execute("SET office.coalesce_window = ''")  # empty: the default
    age(db, old, "1 hour")
    newest = runs(db)[-1]["id"]
    assert enqueue(db, agent, "heartbeat") == ("coalesced", None, newest)


@pytest.mark.parametrize("status", ["claimed", "finished", "failed", "cancelled"])
def test_s11_only_a_queued_run_is_a_target(db: Conn, agent: str, status: str) -> None:
    _, _, first = enqueue(db, agent, "heartbeat")
    set_status(db, first, status)
    outcome, _, second = enqueue(db, agent, "heartbeat")
    assert outcome == "queued" and second != first
    assert run(db, first)["coalesced_count"] == 1


def test_s11_a_run_being_claimed_is_not_a_target(db: Conn, dsn: str, agent: str) -> None:
    _, _, first = enqueue(db, agent, "heartbeat")
    with psycopg.connect(dsn) as worker:  # a claim in progress, not committed
        claimed = worker.execute("SELECT id FROM office.claim_run('w1')").fetchone()
        assert claimed == (first,)
        outcome, _, second = enqueue(db, agent, "heartbeat")  # does not wait
        assert outcome == "queued" and second != first
        worker.commit()
    assert run(db, first)["coalesced_count"] == 1


# ---------------------------------------------------------------------------
# Scenarios 12-15 (the concurrent halves are in test_runs_races.py)


def test_s12_a_second_enqueue_of_a_key_never_errors(db: Conn, agent: str) -> None:
    first = enqueue(db, agent, "task_assigned", idempotency_key="K")
    second = enqueue(db, agent, "task_assigned", idempotency_key="K")
    assert first[0] == "queued"
    assert second == ("deduped", "windowed", first[2])


def test_s13_with_a_neighbour_a_new_key_is_suppressed_and_not_stored(db: Conn, agent: str) -> None:
    # The key is not stored on the row, but recorded as served by it: the
    # second request is a dedup (since 0.4.0), not a second coalesce.
    _, _, neighbour = enqueue(db, agent, "task_assigned", task_id="T")
    assert enqueue(db, agent, "task_assigned", task_id="T", idempotency_key="K")[0] == "coalesced"
    assert enqueue(db, agent, "task_assigned", task_id="T", idempotency_key="K") == (
        "deduped",
        "windowed",
        neighbour,
    )
    assert [r["id"] for r in runs(db)] == [neighbour]
    assert run(db, neighbour)["idempotency_key"] is None


def test_s14_a_durable_conflict_is_an_outcome(db: Conn, agent: str) -> None:
    # Comment keys skip coalescing, so the insert itself meets the index.
    db.execute("SET office.idempotency_window = '0'")
    _, _, first = enqueue(db, agent, "task_comment", idempotency_key="task_comment:c1:agent-a")
    again = enqueue(db, agent, "task_comment", idempotency_key="task_comment:c1:agent-a")
    assert again == ("deduped", "durable", first)
    assert dedup_stats(db) == {("runs", "task_comment", "durable"): 1}


def test_s15_only_queued_outcomes_create_runs(db: Conn, agent: str) -> None:
    rows = db.execute(
        "SELECT ordinality, outcome, dedup_kind, run_id FROM office.enqueue_runs(%s)",
        [
            json.dumps(
                [
                    {"agent_profile_id": agent, "reason": "task_assigned", "idempotency_key": "K"},
                    {"agent_profile_id": agent, "reason": "task_assigned", "idempotency_key": "K"},
                    {"agent_profile_id": agent, "reason": "task_assigned"},
                ]
            )
        ],
    ).fetchall()
    created = run(db, rows[0][3])["id"]
    assert rows == [
        (1, "queued", None, created),
        (2, "deduped", "windowed", created),
        (3, "coalesced", None, created),
    ]
    assert [r["id"] for r in runs(db)] == [created]


def test_s15_an_empty_agent_id_never_reaches_the_queue(db: Conn, agent: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, "", "task_assigned", keyless_cause="unresolved")
    assert info.value.sqlstate == "22023"
    assert run_count(db) == 0
    assert counter_rows(db) == 0


# ---------------------------------------------------------------------------
# Scenarios 69-74: entry-triggered runs (73 needs schema 0.1.0: tests/install/test_upgrade.py)


def test_s69_two_entry_runs_stay_separate(db: Conn, agent: str) -> None:
    first = enqueue(db, agent, "stage_pending", entry_triggered=True, payload={"entry": 1})
    second = enqueue(db, agent, "stage_pending", entry_triggered=True, payload={"entry": 2})
    assert (first[0], second[0]) == ("queued", "queued")
    assert [(r["status"], r["coalesced_count"], r["entry_triggered"]) for r in runs(db)] == [
        ("queued", 1, True),
        ("queued", 1, True),
    ]


def test_s70_an_entry_row_is_never_a_target(db: Conn, agent: str) -> None:
    _, _, entry = enqueue(db, agent, "stage_pending", entry_triggered=True, payload={"e": 1})
    outcome, _, ordinary = enqueue(db, agent, "stage_pending", payload={"o": 1})
    assert outcome == "queued" and ordinary != entry
    row = run(db, entry)
    assert (row["coalesced_count"], row["payload"]) == (1, {"e": 1, "agent_profile_id": agent})
    assert run(db, ordinary)["entry_triggered"] is False


def test_s71_an_entry_request_never_merges(db: Conn, agent: str) -> None:
    _, _, ordinary = enqueue(db, agent, "stage_pending", payload={"o": 1})
    outcome, _, entry = enqueue(db, agent, "stage_pending", entry_triggered=True, payload={"e": 1})
    assert outcome == "queued" and entry != ordinary
    row = run(db, ordinary)
    assert (row["coalesced_count"], row["payload"]) == (1, {"o": 1, "agent_profile_id": agent})
    assert run(db, entry)["entry_triggered"] is True


def test_s72_idempotency_still_applies_to_entry_runs(db: Conn, agent: str) -> None:
    _, _, first = enqueue(db, agent, "stage_pending", idempotency_key="K", entry_triggered=True)
    again = enqueue(db, agent, "stage_pending", idempotency_key="K", entry_triggered=True)
    assert again == ("deduped", "windowed", first)
    age(db, first, "25 hours")
    again = enqueue(db, agent, "stage_pending", idempotency_key="K", entry_triggered=True)
    assert again == ("deduped", "durable", first)
    # An ordinary request with the entry run's key is deduplicated too.
    assert enqueue(db, agent, "stage_pending", idempotency_key="K") == ("deduped", "durable", first)
    assert run_count(db) == 1


def test_s74_a_row_written_without_the_flag_reads_false_and_is_a_target(
    db: Conn, agent: str
) -> None:
    db.execute(
        "INSERT INTO office.runs (id, agent_profile_id, reason) VALUES ('legacy', %s, 'r')",
        [agent],
    )
    assert run(db, "legacy")["entry_triggered"] is False
    assert enqueue(db, agent, "r") == ("coalesced", None, "legacy")


def test_a_null_entry_flag_is_false(db: Conn, agent: str) -> None:
    _, _, first = enqueue(db, agent, "r", entry_triggered=None)
    assert run(db, first)["entry_triggered"] is False
    assert enqueue(db, agent, "r") == ("coalesced", None, first)


# ---------------------------------------------------------------------------
# Keyless counting


def test_a_keyless_cause_is_counted_whatever_the_outcome(db: Conn, agent: str) -> None:
    assert (
        enqueue(
            db,
            agent,
            "task_assigned",
            keyless_cause="unresolved",
            keyless_detail="nil_mutation_generation",
        )[0]
        == "queued"
    )
    assert enqueue(db, agent, "task_assigned", keyless_cause="unresolved")[0] == "coalesced"
    assert enqueue(db, agent, "task_unblocked", keyless_cause="by_design")[0] == "queued"
    assert enqueue(db, agent, "task_unblocked", keyless_cause="")[0] == "coalesced"  # '' = none
    assert keyless_stats(db) == {
        ("task_assigned", "unresolved"): 2,
        ("task_unblocked", "by_design"): 1,
    }


def test_an_empty_key_alone_is_not_counted_as_keyless(db: Conn, agent: str) -> None:
    enqueue(db, agent, "task_assigned", idempotency_key="")
    assert keyless_stats(db) == {}


# ---------------------------------------------------------------------------
# Bad input: SQLSTATE, and nothing written (no run, no counter row)


BAD_INPUT: list[tuple[str, dict[str, Any], str]] = [
    ("empty agent", {"agent_profile_id": ""}, "22023"),
    ("null agent", {"agent_profile_id": None}, "22023"),
    ("unknown agent", {"agent_profile_id": "ghost"}, "OFA01"),
    ("empty reason", {"reason": ""}, "22023"),
    ("null reason", {"reason": None}, "22023"),
    ("null payload", {"payload": None}, "22023"),
    ("array payload", {"payload": "[1, 2]"}, "22023"),
    ("empty array payload", {"payload": "[]"}, "22023"),
    ("number payload", {"payload": "42"}, "22023"),
    ("string payload", {"payload": '"text"'}, "22023"),
    ("json null payload", {"payload": "null"}, "22023"),
    ("513-character key", {"idempotency_key": "k" * 513}, "22023"),
    ("unknown keyless cause", {"keyless_cause": "lazy"}, "22023"),
    ("cause with a key", {"keyless_cause": "unresolved", "idempotency_key": "K"}, "22023"),
    # Bounds (docs/api.md Conventions, since 0.4.0).
    ("201-character reason", {"reason": "r" * 201}, "22023"),
    ("reason with a control character", {"reason": "task\tassigned"}, "22023"),
    ("201-character task_id", {"task_id": "t" * 201}, "22023"),
    ("task_id with a control character", {"task_id": "T\n1"}, "22023"),
]


@pytest.mark.parametrize(
    ("change", "state"), [(c, s) for _, c, s in BAD_INPUT], ids=[name for name, _, _ in BAD_INPUT]
)
def test_bad_input_is_refused_and_writes_nothing(
    db: Conn, agent: str, change: dict[str, Any], state: str
) -> None:
    args: dict[str, Any] = {"agent_profile_id": agent, "reason": "task_assigned", **change}
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, args.pop("agent_profile_id"), args.pop("reason"), **args)
    assert info.value.sqlstate == state
    assert run_count(db) == 0
    assert counter_rows(db) == 0


@pytest.mark.parametrize("status", ["paused", "stopped", "pending_approval"])
def test_an_agent_that_does_not_accept_runs_is_ofa02(db: Conn, agent: str, status: str) -> None:
    db.execute("SELECT office.set_agent_status(%s, %s)", [agent, status])
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, agent, "task_assigned", keyless_cause="unresolved")
    assert info.value.sqlstate == "OFA02"
    assert agent in str(info.value) and status in str(info.value)
    assert run_count(db) == 0
    assert counter_rows(db) == 0


def test_a_bad_input_on_a_known_key_writes_no_counter(db: Conn, agent: str) -> None:
    enqueue(db, agent, "task_assigned", idempotency_key="K")
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, agent, "task_assigned", idempotency_key="K", payload="[]")
    assert info.value.sqlstate == "22023"
    assert counter_rows(db) == 0


def payload_of_size(size: int) -> str:
    """A JSON object whose jsonb text form is exactly ``size`` bytes."""
    skeleton = len('{"x": ""}')
    return json.dumps({"x": "a" * (size - skeleton)})


def test_a_payload_of_exactly_1_mib_is_accepted(db: Conn, agent: str) -> None:
    payload = payload_of_size(MIB)
    size = db.execute("SELECT octet_length(%s::jsonb::text)", [payload]).fetchone()
    assert size == (MIB,)
    assert enqueue(db, agent, "r", payload=payload)[0] == "queued"


def test_a_payload_just_over_1_mib_is_refused(db: Conn, agent: str) -> None:
    payload = payload_of_size(MIB + 1)
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, agent, "r", payload=payload)
    assert info.value.sqlstate == "22023"
    assert "1048577" in str(info.value)
    assert run_count(db) == 0
    assert counter_rows(db) == 0


def test_a_key_of_512_characters_is_accepted(db: Conn, agent: str) -> None:
    _, _, run_id = enqueue(db, agent, "r", idempotency_key="k" * 512)
    assert run(db, run_id)["idempotency_key"] == "k" * 512


def test_errors_name_the_offending_value(db: Conn, agent: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, "ghost-agent", "r")
    assert "ghost-agent" in str(info.value)
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, agent, "r", keyless_cause="lazy")
    assert "lazy" in str(info.value)
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, agent, "r", payload="[1]")
    assert "array" in str(info.value)


# ---------------------------------------------------------------------------
# enqueue_runs


def bulk(conn: Conn, requests: Any) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT ordinality, outcome, dedup_kind, run_id FROM office.enqueue_runs(%s::jsonb)",
        [json.dumps(requests)],
    ).fetchall()


def test_enqueue_runs_takes_every_parameter(db: Conn, agent: str) -> None:
    rows = bulk(
        db,
        [
            {
                "agent_profile_id": agent,
                "reason": "stage_pending",
                "payload": {"a": 1},
                "idempotency_key": None,
                "task_id": "T",
                "entry_triggered": True,
                "keyless_cause": "by_design",
                "keyless_detail": "",
            },
            {
                "agent_profile_id": agent,
                "reason": "stage_pending",
                "task_id": "T",
                "idempotency_key": "K",
                "entry_triggered": False,
            },
        ],
    )
    assert [(o, k) for _, o, k, _ in rows] == [("queued", None), ("queued", None)]
    first, second = run(db, rows[0][3]), run(db, rows[1][3])
    assert first["entry_triggered"] is True and first["task_id"] == "T"
    assert first["payload"] == {"a": 1, "task_id": "T", "agent_profile_id": agent}
    assert second["idempotency_key"] == "K" and second["entry_triggered"] is False
    assert keyless_stats(db) == {("stage_pending", "by_design"): 1}


def test_enqueue_runs_of_an_empty_array_returns_nothing(db: Conn) -> None:
    assert bulk(db, []) == []


@pytest.mark.parametrize("requests", [{"agent_profile_id": "a"}, "text", 3, None])
def test_enqueue_runs_refuses_a_non_array(db: Conn, requests: Any) -> None:
    with pytest.raises(psycopg.Error) as info:
        bulk(db, requests)
    assert info.value.sqlstate == "22023"


@pytest.mark.parametrize(
    ("element", "state", "words"),
    [
        ([1], "22023", "not an object"),
        ("text", "22023", "not an object"),
        ({"agent_profile_id": "agent-a", "reason": "r", "colour": "red"}, "22023", "colour"),
        ({"agent_profile_id": "agent-a", "reason": 7}, "22023", "reason"),
        (
            {"agent_profile_id": "agent-a", "reason": "r", "entry_triggered": "yes"},
            "22023",
            "entry_triggered",
        ),
        ({"agent_profile_id": "agent-a", "reason": "r", "payload": [1]}, "22023", "payload"),
        ({"agent_profile_id": "agent-a", "reason": "r", "payload": None}, "22023", "payload"),
        ({"agent_profile_id": "ghost", "reason": "r"}, "OFA01", "ghost"),
        ({"agent_profile_id": "agent-a", "reason": ""}, "22023", "reason"),
    ],
)
def test_enqueue_runs_fails_whole_with_the_ordinality_of_a_bad_element(
    db: Conn, agent: str, element: Any, state: str, words: str
) -> None:
    good = {"agent_profile_id": agent, "reason": "r", "idempotency_key": "K1"}
    with pytest.raises(psycopg.Error) as info:
        bulk(db, [good, element])
    assert info.value.sqlstate == state
    assert "element 2" in str(info.value)
    assert words in str(info.value)
    assert run_count(db) == 0  # element 1 was rolled back with the call
    assert counter_rows(db) == 0


def test_enqueue_runs_refuses_a_paused_agent_with_ofa02(db: Conn, agent: str) -> None:
    db.execute("SELECT office.set_agent_status('agent-b', 'paused')")
    with pytest.raises(psycopg.Error) as info:
        bulk(
            db,
            [
                {"agent_profile_id": agent, "reason": "r"},
                {"agent_profile_id": agent, "reason": "q"},
                {"agent_profile_id": "agent-b", "reason": "r"},
            ],
        )
    assert info.value.sqlstate == "OFA02"
    assert "element 3" in str(info.value)
    assert run_count(db) == 0


def test_enqueue_runs_elements_see_the_ones_before(db: Conn, agent: str) -> None:
    rows = bulk(
        db,
        [
            {
                "agent_profile_id": agent,
                "reason": "task_comment",
                "idempotency_key": "task_comment:c1:agent-a",
            },
            {
                "agent_profile_id": agent,
                "reason": "task_comment",
                "idempotency_key": "task_comment:c1:agent-a",
            },
            {"agent_profile_id": agent, "reason": "heartbeat"},
            {"agent_profile_id": agent, "reason": "heartbeat", "payload": {"n": 2}},
            {"agent_profile_id": agent, "reason": "heartbeat", "entry_triggered": True},
        ],
    )
    assert [(n, o, k) for n, o, k, _ in rows] == [
        (1, "queued", None),
        (2, "deduped", "windowed"),
        (3, "queued", None),
        (4, "coalesced", None),
        (5, "queued", None),
    ]
    assert rows[1][3] == rows[0][3] and rows[3][3] == rows[2][3]
    assert run(db, rows[2][3])["payload"] == {"n": 2, "agent_profile_id": agent}


def test_a_bound_error_names_the_argument_also_in_a_bulk_call(db: Conn, agent: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, agent, "r", task_id="t" * 201)
    assert info.value.sqlstate == "22023" and "task_id" in str(info.value)
    with pytest.raises(psycopg.Error) as info:
        bulk(
            db,
            [
                {"agent_profile_id": agent, "reason": "r"},
                {"agent_profile_id": agent, "reason": "r" * 201},
            ],
        )
    assert info.value.sqlstate == "22023" and "element 2: reason" in str(info.value)
    assert run_count(db) == 0


def test_reason_and_task_id_of_200_characters_are_accepted(db: Conn, agent: str) -> None:
    assert enqueue(db, agent, "r" * 200, task_id="t" * 200)[0] == "queued"


# ---------------------------------------------------------------------------
# NOTIFY office_runs: after a queued insert only, the agent id as payload
# (0.4.0; 0.3.0 sent the run id). These tests set office.notify = every; the
# edge default is tested in tests/sql/test_runs_notify.py.


def test_notify_only_for_queued_runs(db: Conn, dsn: str, agent: str) -> None:
    db.execute("SET office.notify = every")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN office_runs")
        enqueue(db, agent, "task_comment", idempotency_key="K")
        enqueue(db, agent, "task_comment", idempotency_key="K")  # windowed dedup
        enqueue(db, agent, "task_comment")  # coalesced
        enqueue(db, agent, "task_comment", entry_triggered=True, idempotency_key="K")  # dedup
        enqueue(db, "agent-b", "budget_alert")  # queued
        # Notifications arrive in commit order: once the last one is here, any
        # notification of the suppressed calls would have arrived before it.
        received = []
        for note in listener.notifies(timeout=30):
            assert note.channel == "office_runs"
            received.append(note.payload)
            if note.payload == "agent-b":
                break
    assert received == [agent, "agent-b"]


def test_no_notify_when_the_transaction_rolls_back(db: Conn, dsn: str, agent: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN office_runs")
        with db.transaction(force_rollback=True):
            enqueue(db, agent, "r1")
        enqueue(db, "agent-b", "r2")
        note = next(listener.notifies(timeout=30))
    assert note.payload == "agent-b"


def test_notify_can_be_turned_off(db: Conn, dsn: str, agent: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN office_runs")
        db.execute("SET office.notify = off")
        enqueue(db, agent, "silent")
        db.execute("RESET office.notify")
        enqueue(db, "agent-b", "loud")
        note = next(listener.notifies(timeout=30))
    assert note.payload == "agent-b"


# ---------------------------------------------------------------------------
# Roles


def test_a_producer_enqueues_and_a_reader_cannot(db: Conn, agent: str) -> None:
    db.execute("SET ROLE office_producer")
    try:
        assert enqueue(db, agent, "r")[0] == "queued"
        assert bulk(db, [{"agent_profile_id": agent, "reason": "q"}])[0][1] == "queued"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute("SELECT * FROM office.runs")
    finally:
        db.execute("RESET ROLE")
    db.execute("SET ROLE office_reader")
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            enqueue(db, agent, "r")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bulk(db, [{"agent_profile_id": agent, "reason": "q"}])
    finally:
        db.execute("RESET ROLE")
    assert run_count(db) == 2


def test_a_worker_cannot_enqueue(db: Conn, agent: str) -> None:
    db.execute("SET ROLE office_worker")
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            enqueue(db, agent, "r")
    finally:
        db.execute("RESET ROLE")


def test_an_admin_may_enqueue(db: Conn, agent: str) -> None:
    db.execute("SET ROLE office_admin")
    try:
        assert enqueue(db, agent, "r")[0] == "queued"
    finally:
        db.execute("RESET ROLE")
