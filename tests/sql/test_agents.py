"""Agent profiles (docs/api.md §2): upsert_agent, set_agent_status, id validation
(docs/api.md Conventions) and who may call them."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]


def sqlstate_of(conn: Conn, query: str, params: Any = None) -> str | None:
    """Run ``query``; return the SQLSTATE it failed with (None if it succeeded)."""
    try:
        conn.execute(query, params)
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def agent_count(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM office.agent_profiles").fetchone()
    assert row is not None
    return int(row[0])


def test_upsert_agent_inserts_with_defaults(db: Conn) -> None:
    row = db.execute(
        "SELECT id, workspace_id, name, status, created_at = updated_at"
        "  FROM office.upsert_agent('agent-1', 'ws-1')"
    ).fetchone()
    assert row == ("agent-1", "ws-1", "", "idle", True)


def test_upsert_agent_updates_an_existing_agent(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('agent-1', 'ws-1', 'first', 'idle')")
    db.execute("UPDATE office.agent_profiles SET updated_at = now() - interval '1 hour'")
    row = db.execute(
        "SELECT id, workspace_id, name, status, updated_at > created_at"
        "  FROM office.upsert_agent('agent-1', 'ws-1', 'second', 'running')"
    ).fetchone()
    assert row == ("agent-1", "ws-1", "second", "running", True)
    assert agent_count(db) == 1


def test_upsert_agent_with_null_id_generates_a_uuid(db: Conn) -> None:
    row = db.execute("SELECT id FROM office.upsert_agent(NULL, 'ws-1', 'gen')").fetchone()
    assert row is not None
    assert str(uuid.UUID(row[0])) == row[0]


@pytest.mark.parametrize(
    "bad_id",
    ["", "a" * 201, "a,b", "a:b", "tab\there", "nl\nhere", "del\x7fhere", "c1\x85here"],
    ids=["empty", "201-chars", "comma", "colon", "tab", "newline", "del", "c1-control"],
)
def test_upsert_agent_rejects_a_bad_agent_id(db: Conn, bad_id: str) -> None:
    assert sqlstate_of(db, "SELECT office.upsert_agent(%s, 'ws-1')", [bad_id]) == "22023"
    assert agent_count(db) == 0


@pytest.mark.parametrize("bad_ws", [None, "", "w" * 201, "w,1", "w:1", "w\x01"])
def test_upsert_agent_rejects_a_bad_workspace_id(db: Conn, bad_ws: str | None) -> None:
    assert sqlstate_of(db, "SELECT office.upsert_agent('agent-1', %s)", [bad_ws]) == "22023"
    assert agent_count(db) == 0


def test_an_id_of_200_characters_is_accepted(db: Conn) -> None:
    long_id = "a" * 200
    row = db.execute("SELECT id FROM office.upsert_agent(%s, 'ws-1')", [long_id]).fetchone()
    assert row == (long_id,)


def test_the_error_names_the_bad_id(db: Conn) -> None:
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT office.upsert_agent('bad:id', 'ws-1')")
    assert info.value.sqlstate == "22023"
    assert "bad:id" in str(info.value)


@pytest.mark.parametrize("status", ["idle", "running", "paused", "stopped", "pending_approval"])
def test_every_agent_status_is_accepted(db: Conn, status: str) -> None:
    row = db.execute("SELECT status FROM office.upsert_agent('a1', 'w1', '', %s)", [status])
    assert row.fetchone() == (status,)


@pytest.mark.parametrize("status", [None, "", "sleeping", "IDLE"])
def test_upsert_agent_rejects_an_unknown_status(db: Conn, status: str | None) -> None:
    assert sqlstate_of(db, "SELECT office.upsert_agent('a1', 'w1', '', %s)", [status]) == "22023"
    assert agent_count(db) == 0


def test_set_agent_status_changes_the_status(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    row = db.execute("SELECT id, status FROM office.set_agent_status('a1', 'paused')").fetchone()
    assert row == ("a1", "paused")
    stored = db.execute("SELECT status FROM office.agent_profiles WHERE id = 'a1'").fetchone()
    assert stored == ("paused",)


def test_set_agent_status_of_an_unknown_agent_is_ofa01(db: Conn) -> None:
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT office.set_agent_status('ghost', 'paused')")
    assert info.value.sqlstate == "OFA01"
    assert "ghost" in str(info.value)


@pytest.mark.parametrize("status", [None, "", "asleep"])
def test_set_agent_status_rejects_an_unknown_status(db: Conn, status: str | None) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    assert sqlstate_of(db, "SELECT office.set_agent_status('a1', %s)", [status]) == "22023"
    stored = db.execute("SELECT status FROM office.agent_profiles WHERE id = 'a1'").fetchone()
    assert stored == ("idle",)


def test_a_plain_insert_of_a_bad_id_is_refused_by_the_table(db: Conn) -> None:
    # The CHECK constraints hold for clients that bypass the functions.
    state = sqlstate_of(
        db, "INSERT INTO office.agent_profiles (id, workspace_id) VALUES ('a:b', 'w')"
    )
    assert state == "23514"


def test_a_producer_manages_agents_and_a_reader_cannot(db: Conn) -> None:
    db.execute("SET ROLE office_producer")
    try:
        db.execute("SELECT office.upsert_agent('a1', 'w1')")
        db.execute("SELECT office.set_agent_status('a1', 'paused')")
    finally:
        db.execute("RESET ROLE")
    db.execute("SET ROLE office_reader")
    try:
        assert sqlstate_of(db, "SELECT office.upsert_agent('a2', 'w1')") == "42501"
        assert sqlstate_of(db, "SELECT office.set_agent_status('a1', 'idle')") == "42501"
        assert sqlstate_of(db, "SELECT * FROM office.agent_profiles") == "42501"
    finally:
        db.execute("RESET ROLE")
    assert db.execute("SELECT id, status FROM office.agent_profiles").fetchall() == [
        ("a1", "paused")
    ]


# --- bounds and workspaces (docs/api.md Conventions) ---------------------------------


def test_a_name_over_64_kib_is_22023_and_writes_nothing(db: Conn) -> None:
    assert sqlstate_of(db, "SELECT office.upsert_agent('a1', 'w1', %s)", ["x" * 65537]) == "22023"
    assert agent_count(db) == 0
    db.execute("SELECT office.upsert_agent('a1', 'w1', %s)", ["x" * 65536])
    assert agent_count(db) == 1


def test_upsert_agent_never_moves_an_agent_to_another_workspace(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1', 'first')")
    with pytest.raises(psycopg.Error) as caught:
        db.execute("SELECT office.upsert_agent('a1', 'w2', 'second')")
    assert caught.value.sqlstate == "OFW01"
    assert "'a1'" in str(caught.value) and "'w1'" in str(caught.value)
    assert "'w2'" in str(caught.value)
    stored = db.execute("SELECT workspace_id, name FROM office.agent_profiles").fetchall()
    assert stored == [("w1", "first")]


def test_a_plain_update_never_moves_an_agent_either(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    state = sqlstate_of(db, "UPDATE office.agent_profiles SET workspace_id = 'w2' WHERE id = 'a1'")
    assert state == "OFW01"
    # Writing the workspace it already has is no move.
    db.execute("UPDATE office.agent_profiles SET workspace_id = 'w1', name = 'n' WHERE id = 'a1'")


def test_a_new_agent_cannot_adopt_an_assignee_of_another_workspace(db: Conn) -> None:
    # Plain SQL may name an agent that does not exist yet.
    db.execute(
        "INSERT INTO office.tasks (id, workspace_id, assignee_agent_profile_id)"
        " VALUES ('t1', 'w1', 'ghost')"
    )
    db.execute(
        "INSERT INTO office.routines (id, workspace_id, name, assignee_agent_profile_id)"
        " VALUES ('r1', 'w3', 'n', 'phantom')"
    )
    assert sqlstate_of(db, "SELECT office.upsert_agent('ghost', 'w2')") == "OFW01"
    assert (
        sqlstate_of(
            db, "INSERT INTO office.agent_profiles (id, workspace_id) VALUES ('phantom', 'w2')"
        )
        == "OFW01"
    )
    db.execute("SELECT office.upsert_agent('other', 'w2')")
    assert (
        sqlstate_of(db, "UPDATE office.agent_profiles SET id = 'ghost' WHERE id = 'other'")
        == "OFW01"
    )
    # In the right workspace it is welcome.
    db.execute("SELECT office.upsert_agent('ghost', 'w1')")
    db.execute("SELECT office.upsert_agent('phantom', 'w3')")
    assert agent_count(db) == 3


def test_an_agent_with_rows_from_before_the_upgrade_can_still_be_upserted(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    # A cross-workspace row written before 0.4.0 (triggers off, as a restore would).
    db.execute("SET session_replication_role = replica")
    db.execute(
        "INSERT INTO office.tasks (id, workspace_id, assignee_agent_profile_id)"
        " VALUES ('t1', 'w2', 'a1')"
    )
    db.execute("SET session_replication_role = origin")
    row = db.execute("SELECT status FROM office.upsert_agent('a1', 'w1', '', 'paused')").fetchone()
    assert row == ("paused",)
