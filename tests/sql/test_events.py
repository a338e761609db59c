"""The transactional outbox (docs/api.md §6): what the triggers write, and
claim_events / ack_events / prune_events - competing consumers, visibility,
at-least-once, bad input."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.harness import scalar
from tests.scenarios.tasks import (
    Conn,
    agent,
    assign,
    call,
    create,
    events,
    footprint,
    move,
    sqlstate_of,
)


def claim(conn: Conn, consumer: str = "c1", **args: Any) -> list[dict[str, Any]]:
    from psycopg.rows import dict_row

    query = (
        "SELECT * FROM office.claim_events(consumer => %(consumer)s"
        + "".join(f", {name} => %({name})s" for name in args)
        + ")"
    )
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, {"consumer": consumer, **args}).fetchall()


def ack(conn: Conn, ids: list[int]) -> int:
    return int(scalar(conn, "SELECT office.ack_events(%s::bigint[])", [ids]))


def some_events(conn: Conn, n: int) -> list[int]:
    """n task.moved events; their ids."""
    for i in range(n):
        create(conn, f"t{i}")
        move(conn, f"t{i}", "IN_PROGRESS")
    return [e["id"] for e in events(conn)]


# --- what is written ---------------------------------------------------------------


def test_events_are_written_in_the_transaction_of_the_change(db: Conn) -> None:
    agent(db, "A")
    create(db, "T")
    with db.transaction(force_rollback=True):
        assign(db, "T", "A")
        move(db, "T", "IN_PROGRESS")
        assert [e["topic"] for e in events(db)] == ["task.assigned", "task.moved"]
    assert events(db) == []


def test_every_assignee_write_is_an_event_with_its_generation(db: Conn) -> None:
    agent(db, "A")
    agent(db, "B")
    create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    for who in ("A", "B", None, None, "A"):
        assign(db, "T", who)
    payloads = [e["payload"] for e in events(db, "task.assigned")]
    assert [(p["agent_profile_id"], p["assignment_generation"]) for p in payloads] == [
        ("A", 1),
        ("A", 2),
        ("B", 3),
        (None, 4),
        (None, 5),
        ("A", 6),
    ]
    assert all(e["task_id"] == "T" for e in events(db))
    assert set(payloads[0]) == {
        "task_id",
        "workspace_id",
        "agent_profile_id",
        "assignment_generation",
        "previous_agent_profile_id",
        "is_office",
        "actor",
        "db_user",
        "origin",
        "cause_run_id",
    }


def test_moves_are_events_only_when_the_state_changes(db: Conn) -> None:
    create(db, "T")
    move(db, "T", "TODO")
    move(db, "T", "IN_PROGRESS")
    move(db, "T", "IN_PROGRESS")
    move(db, "T", "COMPLETED")
    db.execute("UPDATE office.tasks SET title = 'renamed' WHERE id = 'T'")
    call(db, "archive_task", task_id="T")
    moved = [(e["payload"]["from_state"], e["payload"]["to_state"]) for e in events(db)]
    assert moved == [("TODO", "IN_PROGRESS"), ("IN_PROGRESS", "COMPLETED")]


def test_an_insert_without_assignee_writes_no_event(db: Conn) -> None:
    create(db, "T")
    db.execute("INSERT INTO office.tasks (id, workspace_id) VALUES ('U', 'w1')")
    assert events(db) == []


def test_the_event_table_accepts_only_objects(db: Conn) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("INSERT INTO office.events (topic, payload) VALUES ('x', '[]')")
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("INSERT INTO office.events (topic) VALUES ('')")


# --- claim and ack ---------------------------------------------------------------------


def test_claim_takes_the_oldest_pending_events_in_order(db: Conn) -> None:
    ids = some_events(db, 6)
    first = claim(db, max_rows=4)
    assert [e["id"] for e in first] == ids[:4]
    assert all(e["claimed_by"] == "c1" and e["deliveries"] == 1 for e in first)
    assert all(e["visible_at"] > e["claimed_at"] for e in first)
    second = claim(db, "c2")
    assert [e["id"] for e in second] == ids[4:]
    assert claim(db, "c3") == []


def test_an_unacknowledged_claim_comes_back_after_its_visibility(db: Conn) -> None:
    ids = some_events(db, 1)
    assert [e["id"] for e in claim(db, visibility="1 hour")] == ids
    assert claim(db, "c2") == []
    # Its visibility runs out (moved into the past instead of waiting).
    db.execute("UPDATE office.events SET visible_at = now() - interval '1 second'")
    again = claim(db, "c2")
    assert [e["id"] for e in again] == ids
    assert [(e["deliveries"], e["claimed_by"]) for e in again] == [(2, "c2")]


def test_a_zero_visibility_claim_is_claimable_by_the_next_transaction(db: Conn) -> None:
    ids = some_events(db, 1)
    claim(db, visibility="0")
    assert [e["id"] for e in claim(db, "c2")] == ids


def test_acknowledged_events_are_never_claimed_again(db: Conn) -> None:
    ids = some_events(db, 4)
    claimed = claim(db, visibility="0")
    assert ack(db, [e["id"] for e in claimed[:3]]) == 3
    assert ack(db, [e["id"] for e in claimed[:3]]) == 0  # already acknowledged
    assert ack(db, [10**12]) == 0  # unknown
    assert ack(db, []) == 0
    assert [e["id"] for e in claim(db, "c2")] == ids[3:]
    # Acknowledging without a claim is allowed (at-least-once, any consumer).
    assert ack(db, ids[3:]) == 1
    assert claim(db, "c3", visibility="0") == []


def test_concurrent_claimers_never_get_the_same_event(db: Conn, concurrently: Any) -> None:
    ids = some_events(db, 60)

    def drain(conn: Conn) -> list[int]:
        got: list[int] = []
        while batch := claim(conn, f"c{id(conn)}", max_rows=3):
            got.extend(e["id"] for e in batch)
        return got

    outcomes = concurrently([drain] * 6)
    assert all(o.error is None for o in outcomes), [o.error for o in outcomes]
    claimed = [event_id for o in outcomes for event_id in o.value]
    assert sorted(claimed) == ids  # each exactly once
    assert scalar(db, "SELECT max(deliveries) FROM office.events") == 1


def test_a_claimer_does_not_wait_for_another_claimers_locks(db: Conn) -> None:
    ids = some_events(db, 2)
    with psycopg.connect(db.info.dsn, autocommit=False) as holder:
        first = claim(holder, "holder", max_rows=2)  # locked until holder commits
        db.execute("SET lock_timeout = '1s'")
        rest = claim(db, "other")
        assert [e["id"] for e in rest] == ids[2:]
        assert {e["id"] for e in first}.isdisjoint({e["id"] for e in rest})
        holder.rollback()
    # The holder rolled back: its events are pending and unclaimed again.
    assert [e["id"] for e in claim(db, "third")] == ids[:2]


def test_prune_events_deletes_old_acknowledged_events_only(db: Conn) -> None:
    ids = some_events(db, 2)
    ack(db, ids[:2])
    db.execute(
        "UPDATE office.events SET processed_at = now() - interval '2 days' WHERE id = %s",
        [ids[0]],
    )
    assert scalar(db, "SELECT office.prune_events('1 day')") == 1
    assert [e["id"] for e in events(db)] == ids[1:]


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "args"),
    [
        ("claim_events", {"consumer": ""}),
        ("claim_events", {"consumer": None}),
        ("claim_events", {"consumer": "c", "max_rows": 0}),
        ("claim_events", {"consumer": "c", "max_rows": None}),
        ("claim_events", {"consumer": "c", "visibility": "-1 second"}),
        ("ack_events", {"ids": None}),
        ("prune_events", {"older_than": "-1 day"}),
    ],
)
def test_bad_input_is_22023_and_claims_nothing(
    db: Conn, function: str, args: dict[str, Any]
) -> None:
    some_events(db, 1)
    before = (
        footprint(db),
        scalar(db, "SELECT count(*) FROM office.events WHERE claimed_by IS NULL"),
    )
    assert sqlstate_of(db, function, **args) == "22023"
    after = (
        footprint(db),
        scalar(db, "SELECT count(*) FROM office.events WHERE claimed_by IS NULL"),
    )
    assert after == before


# --- the actor (docs/api.md §6) ----------------------------------------------------------------


def test_the_actor_is_what_the_caller_claims_and_db_user_who_it_is(db: Conn) -> None:
    agent(db, "A")
    create(db, "T")
    assign(db, "T", "A", actor_id="ops", actor_type="system")
    db.execute("DROP ROLE IF EXISTS office_test_events_login")
    db.execute("CREATE ROLE office_test_events_login LOGIN IN ROLE office_producer")
    try:
        with psycopg.connect(
            db.info.dsn, user="office_test_events_login", autocommit=True
        ) as other:
            # Anyone may claim to be root; db_user says who wrote it.
            assign(other, "T", None, actor_id="root", actor_type="system")
    finally:
        db.execute("DROP ROLE office_test_events_login")
    db.execute("UPDATE office.tasks SET assignee_agent_profile_id = 'A' WHERE id = 'T'")
    user = scalar(db, "SELECT session_user")
    payloads = [e["payload"] for e in events(db, "task.assigned")]
    assert [(p["actor"], p["db_user"]) for p in payloads] == [
        ({"id": "ops", "type": "system"}, user),
        ({"id": "root", "type": "system"}, "office_test_events_login"),
        (None, user),
    ]


BAD_ACTORS = [
    "[" * 3000 + "]" * 3000,
    '{"id": ' + "[" * 900 + "]" * 900 + ', "type": "user"}',
    "[]",
    '"root"',
    "not json",
    '{"id": "root"}',
    '{"id": "root", "type": "root"}',
    '{"id": "root", "type": "user", "role": "superuser"}',
    '{"id": 7, "type": "user"}',
    '{"id": "' + "r" * 201 + '", "type": "user"}',
    '{"id": "r\\u0001", "type": "user"}',
]


@pytest.mark.parametrize("actor", BAD_ACTORS, ids=range(len(BAD_ACTORS)))
def test_a_malformed_office_actor_is_22023_and_writes_nothing(db: Conn, actor: str) -> None:
    agent(db, "A")
    create(db, "T")
    before = footprint(db)
    db.execute("SELECT set_config('office.actor', %s, false)", [actor])
    try:
        for write in (
            lambda: db.execute(
                "UPDATE office.tasks SET assignee_agent_profile_id = 'A' WHERE id = 'T'"
            ),
            lambda: create(db, "U", assignee_agent_profile_id="A"),
        ):
            with pytest.raises(psycopg.Error) as caught:
                write()
            assert caught.value.sqlstate == "22023"
            assert "office.actor" in str(caught.value)
            assert footprint(db) == before
        # assign_task claims its own actor, whatever the session says.
        assign(db, "T", "A", actor_id="u1")
    finally:
        db.execute("RESET office.actor")
    assert events(db, "task.assigned")[-1]["payload"]["actor"] == {"id": "u1", "type": "user"}


def test_a_well_formed_office_actor_with_a_null_id_is_accepted(db: Conn) -> None:
    agent(db, "A")
    create(db, "T")
    db.execute("""SET office.actor = '{"type": "agent", "id": null}'""")
    try:
        db.execute("UPDATE office.tasks SET assignee_agent_profile_id = 'A' WHERE id = 'T'")
    finally:
        db.execute("RESET office.actor")
    assert events(db, "task.assigned")[-1]["payload"]["actor"] == {"id": None, "type": "agent"}


def test_a_consumer_is_a_short_word(db: Conn) -> None:
    some_events(db, 1)
    for consumer in ("c" * 201, "c\n1"):
        assert sqlstate_of(db, "claim_events", consumer=consumer) == "22023"
    assert scalar(db, "SELECT count(*) FROM office.events WHERE claimed_by IS NOT NULL") == 0
    assert len(claim(db, "c" * 200)) == 1
