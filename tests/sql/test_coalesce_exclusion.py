"""office._never_coalesces, the coalesce exclusion written once (sql/10_keys.sql):
its truth table, that a comment's key built by office.comment_key is what it
excludes, and that the planner inlines it into the coalesce lookup instead of
calling it per row."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]


@pytest.mark.parametrize(
    ("key", "entry_triggered", "never"),
    [
        (None, False, False),
        (None, None, False),
        (None, True, True),
        ("k1", False, False),
        ("k1", True, True),
        ("", False, False),
        ("task_comment:c1:a1", False, True),
        ("task_comment:", None, True),
        ("task_comment", False, False),
        ("TASK_COMMENT:c1:a1", False, False),
        (" task_comment:c1:a1", False, False),
    ],
)
def test_truth_table(db: Conn, key: str | None, entry_triggered: bool | None, never: bool) -> None:
    row = db.execute("SELECT office._never_coalesces(%s, %s)", [key, entry_triggered]).fetchone()
    assert row == (never,)


def test_a_comment_key_never_coalesces(db: Conn) -> None:
    row = db.execute(
        "SELECT office._never_coalesces(office.comment_key('c9', 'a9'), false)"
    ).fetchone()
    assert row == (True,)


def test_the_lookup_inlines_the_predicate(db: Conn) -> None:
    plan = "\n".join(
        str(row[0])
        for row in db.execute(
            "EXPLAIN (VERBOSE, COSTS OFF) SELECT t.id FROM office.runs t"
            " WHERE t.agent_profile_id = 'a' AND t.reason = 'r' AND t.task_id IS NULL"
            " AND t.status COLLATE \"C\" = 'queued'"
            " AND NOT office._never_coalesces(t.idempotency_key, t.entry_triggered)"
        ).fetchall()
    )
    assert "_never_coalesces" not in plan, plan
    assert "starts_with" in plan, plan
