"""Schema 0.1.0 -> 0.2.0: runs.entry_triggered arrives as the second version.

A database created at 0.1.0 has no entry_triggered (column, parameter or
bulk key) and enqueues fine (docs/domain.md §5 scenario 73 at the SQL level);
after ALTER EXTENSION office UPDATE (or the second yoyo migration) rows
written before read false and stay legal coalesce targets (scenario 74) and
the exclusion works (scenarios 69-71). The catalog equality of a fresh and an
upgraded install is tests/install/test_install_paths.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import controlplane
from controlplane import schema
from controlplane.migrate import migrate

Conn = psycopg.Connection[Any]


def enqueue(conn: Conn, reason: str, **kwargs: Any) -> tuple[str, str]:
    """office.enqueue_run for agent a1, in named notation with only the given
    arguments (a 0.1.0 enqueue_run has no entry_triggered)."""
    args = {"reason": reason, **kwargs}
    query = sql.SQL(
        "SELECT outcome, run_id FROM office.enqueue_run(agent_profile_id => 'a1', {})"
    ).format(
        sql.SQL(", ").join(
            sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in args
        )
    )
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return (row[0], row[1])


def has_column(conn: Conn) -> bool:
    row = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = 'office'"
        " AND table_name = 'runs' AND column_name = 'entry_triggered'"
    ).fetchone()
    return row is not None


def version(conn: Conn) -> tuple[str, str]:
    row = conn.execute(
        "SELECT office.schema_version(), extversion FROM pg_extension WHERE extname = 'office'"
    ).fetchone()
    assert row is not None
    return (row[0], row[1])


@pytest.fixture
def old_extension(empty_database: str) -> Iterator[Conn]:
    """A database where office was created at version 0.1.0, with agent a1."""
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION office VERSION '0.1.0'")
        conn.execute("SELECT office.upsert_agent('a1', 'w1')")
        conn.execute("SET office.coalesce_window = '10 minutes'")  # no timing assumption
        yield conn


def test_the_current_version_is_what_every_place_says(db: Conn) -> None:
    # The control file, the package and a fresh install agree (make bump moves
    # them together); the steps below stop at 0.2.0 on purpose.
    current = schema.current_version()
    assert controlplane.__version__ == current
    assert version(db) == (current, current)


def test_0_1_0_has_no_entry_triggered_and_enqueues(old_extension: Conn) -> None:
    conn = old_extension
    assert version(conn) == ("0.1.0", "0.1.0")
    assert not has_column(conn)
    # Scenario 73 in SQL: the call without the flag succeeds, with coalescing
    # as before (no exclusion to apply).
    first = enqueue(conn, "stage_pending")
    assert first[0] == "queued"
    assert enqueue(conn, "stage_pending") == ("coalesced", first[1])
    with pytest.raises(psycopg.errors.UndefinedFunction):
        enqueue(conn, "stage_pending", entry_triggered=True)
    with pytest.raises(psycopg.Error) as info:
        conn.execute(
            "SELECT * FROM office.enqueue_runs(%s::jsonb)",
            [json.dumps([{"agent_profile_id": "a1", "reason": "r", "entry_triggered": True}])],
        )
    assert info.value.sqlstate == "22023"
    assert "entry_triggered" in str(info.value)


def test_update_to_0_2_0_adds_the_column_and_the_exclusion(old_extension: Conn) -> None:
    conn = old_extension
    _, claimed = enqueue(conn, "heartbeat")
    assert conn.execute("SELECT id FROM office.claim_run('w1')").fetchone() == (claimed,)
    _, legacy = enqueue(conn, "stage_pending", payload='{"old": 1}')

    conn.execute("ALTER EXTENSION office UPDATE TO '0.2.0'")
    assert version(conn) == ("0.2.0", "0.2.0")
    column = conn.execute(
        "SELECT is_nullable, column_default FROM information_schema.columns"
        " WHERE table_schema = 'office' AND table_name = 'runs'"
        " AND column_name = 'entry_triggered'"
    ).fetchone()
    assert column == ("NO", "false")

    # Scenario 74: rows written before read false; a queued one is a target.
    flags = conn.execute("SELECT id, entry_triggered FROM office.runs ORDER BY id").fetchall()
    assert sorted(flags) == sorted([(legacy, False), (claimed, False)])
    assert enqueue(conn, "stage_pending", payload='{"new": 1}') == ("coalesced", legacy)

    # Scenarios 69-71 on the upgraded database.
    entry = enqueue(conn, "stage_pending", entry_triggered=True)
    assert entry[0] == "queued" and entry[1] != legacy  # 71: never merges
    conn.execute(
        "UPDATE office.runs SET requested_at = now() - interval '1 hour' WHERE id = %s", [legacy]
    )  # only the entry run is in the window now
    ordinary = enqueue(conn, "stage_pending")
    assert ordinary[0] == "queued" and ordinary[1] != entry[1]  # 70: never a target
    second_entry = enqueue(conn, "stage_pending", entry_triggered=True)
    assert second_entry[0] == "queued"  # 69
    counts = conn.execute(
        "SELECT entry_triggered, coalesced_count FROM office.runs WHERE id = ANY(%s)",
        [[entry[1], second_entry[1]]],
    ).fetchall()
    assert counts == [(True, 1), (True, 1)]

    # The bulk call accepts the key now; a claimed run still claims and finishes.
    rows = conn.execute(
        "SELECT outcome FROM office.enqueue_runs(%s::jsonb)",
        [json.dumps([{"agent_profile_id": "a1", "reason": "r9", "entry_triggered": True}])],
    ).fetchall()
    assert rows == [("queued",)]
    assert conn.execute("SELECT office.finish_run(%s, 1)", [claimed]).fetchone() == (True,)


def test_the_upgraded_enqueue_run_keeps_its_grants(old_extension: Conn) -> None:
    conn = old_extension
    conn.execute("ALTER EXTENSION office UPDATE")
    conn.execute("SET ROLE office_producer")
    try:
        assert enqueue(conn, "r", entry_triggered=True)[0] == "queued"
    finally:
        conn.execute("RESET ROLE")
    conn.execute("SET ROLE office_reader")
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            enqueue(conn, "r")
    finally:
        conn.execute("RESET ROLE")
    functions = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " WHERE p.pronamespace = 'office'::regnamespace AND p.proname = 'enqueue_run'"
    ).fetchall()
    # 0.5.0 replaced the 8-argument signature: no overload is left behind.
    assert functions == [
        (
            "office.enqueue_run(text,text,jsonb,text,text,boolean,text,text,text,text,integer,"
            "timestamp with time zone)",
        )
    ]


def test_the_yoyo_path_goes_through_0_1_0_to_0_2_0(empty_database: str) -> None:
    first = migrate(empty_database, target="0001.office-0.1.0")
    assert (first.applied, first.version) == (["0001.office-0.1.0"], "0.1.0")
    with psycopg.connect(empty_database, autocommit=True) as conn:
        assert not has_column(conn)
        conn.execute("SELECT office.upsert_agent('a1', 'w1')")
        _, legacy = enqueue(conn, "stage_pending")
    second = migrate(empty_database, target="0002.office-0.2.0")
    assert (second.applied, second.version) == (["0002.office-0.2.0"], "0.2.0")
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute("SET office.coalesce_window = '1 hour'")
        assert has_column(conn)
        assert enqueue(conn, "stage_pending", entry_triggered=True)[0] == "queued"
        assert enqueue(conn, "stage_pending") == ("coalesced", legacy)
