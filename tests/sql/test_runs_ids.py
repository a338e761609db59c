"""Generated ids are time-ordered UUIDs, RFC 9562 version 7, in text form
(docs/api.md, Conventions, since 0.4.0): runs, wakeup requests, routine runs, and
agents, tasks, routines and triggers created without an id. The upgrade
leaves the ids of existing rows alone."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]


def check_v7(text: str, near: datetime) -> None:
    value = uuid.UUID(text)
    assert str(value) == text  # the canonical lowercase text form
    assert value.version == 7
    assert value.variant == uuid.RFC_4122  # variant bits 10
    millis = int.from_bytes(value.bytes[:6], "big")
    made = datetime.fromtimestamp(millis / 1000, UTC)
    assert abs(made - near) < timedelta(minutes=5)


def now(db: Conn) -> datetime:
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    at: datetime = row[0]
    return at


def test_ids_generated_later_sort_later_bytewise(db: Conn) -> None:
    # One statement per id, as callers make them: each later than the one before.
    ids = [db.execute("SELECT office._uuid_v7()").fetchone()[0] for _ in range(200)]  # type: ignore[index]
    assert ids == sorted(ids, key=lambda s: s.encode())
    assert len(set(ids)) == 200
    in_db = db.execute(
        'SELECT array_agg(i ORDER BY i COLLATE "C") = array_agg(i ORDER BY n)'
        " FROM unnest(%s::text[]) WITH ORDINALITY AS u(i, n)",
        [ids],
    ).fetchone()
    assert in_db == (True,)
    for text in ids[:3]:
        check_v7(text, now(db))


def test_a_batch_of_ids_is_in_order_and_sorts_before_the_next_id(db: Conn) -> None:
    # _uuid_v7s: the ids of a set-based insert (enqueue_runs), made at once.
    row = db.execute("SELECT office._uuid_v7s(5000)").fetchone()
    assert row is not None
    batch: list[str] = row[0]
    assert len(set(batch)) == 5000
    assert batch == sorted(batch, key=lambda s: s.encode())
    # None is from the future: an id made by a later statement sorts after all.
    later = db.execute("SELECT office._uuid_v7()").fetchone()
    assert later is not None and batch[-1].encode() < later[0].encode()
    for text in (batch[0], batch[-1]):
        check_v7(text, now(db))


def random_bits(db: Conn, n: int) -> list[str]:
    """The random tails (the last 62 bits: after the variant) of n new ids."""
    row = db.execute(
        "SELECT array_agg(right(office._uuid_v7(), 16)) FROM generate_series(1, %s)", [n]
    ).fetchone()
    assert row is not None
    tails: list[str] = row[0]
    return tails


def test_the_random_bits_differ_within_one_statement_and_between_sessions(
    db: Conn, dsn: str
) -> None:
    # The C definition draws its random bytes a pool at a time (sql/native/
    # ids.c): 10,000 ids use up many pools, and no two tails may repeat, in
    # one statement (ids made in one microsecond differ by these bits alone)
    # or in two sessions started alike (no pool is shared between backends).
    ours = random_bits(db, 10000)
    assert len(set(ours)) == 10000
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        one, two = random_bits(first, 600), random_bits(second, 600)
    assert len(set(ours) | set(one) | set(two)) == 11200


def test_every_generated_id_is_a_uuid_v7(db: Conn) -> None:
    at = now(db)
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    agent = db.execute("SELECT id FROM office.upsert_agent(NULL, 'w1')").fetchone()
    run = db.execute("SELECT run_id FROM office.enqueue_run('a1', 'r')").fetchone()
    wakeup = db.execute(
        "SELECT wakeup_request_id FROM office.request_wakeup('a1', 'manual')"
    ).fetchone()
    task = db.execute("SELECT task_id FROM office.create_task('w1')").fetchone()
    routine = db.execute(
        "SELECT id FROM office.create_routine('w1', 'daily', assignee_agent_profile_id => 'a1')"
    ).fetchone()
    assert routine is not None
    trigger = db.execute(
        "SELECT id FROM office.add_routine_trigger(%s, '0 9 * * *')", [routine[0]]
    ).fetchone()
    routine_run = db.execute(
        "SELECT routine_run_id FROM office.dispatch_routine(%s, 'manual')", [routine[0]]
    ).fetchone()
    for row in (agent, run, wakeup, task, routine, trigger, routine_run):
        assert row is not None
        check_v7(row[0], at)


def test_an_explicit_id_is_kept(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    assert db.execute("SELECT task_id FROM office.create_task('w1', id => 'T-1')").fetchone() == (
        "T-1",
    )


def test_the_upgrade_keeps_existing_ids_and_generates_v7_after(empty_database: str) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION office VERSION '0.3.0'")
        conn.execute("SELECT office.upsert_agent('a1', 'w1')")
        old = conn.execute("SELECT run_id FROM office.enqueue_run('a1', 'r1')").fetchone()
        assert old is not None and uuid.UUID(old[0]).version == 4
        conn.execute("ALTER EXTENSION office UPDATE TO '0.4.0'")
        assert conn.execute("SELECT id FROM office.runs").fetchall() == [old]
        new = conn.execute("SELECT run_id FROM office.enqueue_run('a1', 'r2')").fetchone()
        assert new is not None
        check_v7(new[0], now(conn))
