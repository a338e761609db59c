"""Routines and their runs through plain SQL: what the routine, wakeup and
routine-race tests all do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.harness import scalar
from tests.scenarios.tasks import Conn, Row, call

TEMPLATE = {"title": "Daily Check - {{day}}", "description": "Run for {{day}}"}
DAY = {"day": {"default": "2026-01-01"}}


@contextmanager
def raises(sqlstate: str, match: str) -> Iterator[None]:
    """The block raises a server error with this SQLSTATE and a message
    matching ``match``."""
    with pytest.raises(psycopg.Error, match=match) as info:
        yield
    assert info.value.sqlstate == sqlstate, info.value


def routine(
    conn: Conn,
    routine_id: str = "R",
    *,
    template: dict[str, Any] | None = None,
    assignee: str | None = "agent-1",
    policy: str = "skip_if_active",
    variables: dict[str, Any] | None = None,
    **args: Any,
) -> Row:
    """A routine of workspace w1 (heavy with TEMPLATE unless told otherwise)."""
    return call(
        conn,
        "create_routine",
        workspace_id="w1",
        name=f"routine {routine_id}",
        task_template=json.dumps(TEMPLATE if template is None else template),
        assignee_agent_profile_id=assignee,
        concurrency_policy=policy,
        variables=json.dumps(DAY if variables is None else variables),
        id=routine_id,
        **args,
    )


def fire(conn: Conn, routine_id: str = "R", source: str = "manual", **args: Any) -> Row:
    """``office.dispatch_routine``: the result row."""
    if "variables" in args:
        args["variables"] = json.dumps(args["variables"])
    return call(conn, "dispatch_routine", routine_id=routine_id, source=source, **args)


def run(conn: Conn, run_id: str) -> Row:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM office.routine_runs WHERE id = %s", [run_id]).fetchone()
    assert row is not None, f"no routine run {run_id}"
    return row


def runs(conn: Conn, routine_id: str = "R") -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM office.routine_runs WHERE routine_id = %s ORDER BY created_at, id",
            [routine_id],
        ).fetchall()


def make_stale(conn: Conn, run_id: str) -> None:
    """Put a closed run back to task_created: the state a missed close leaves
    behind (e.g. the task finished before routines were installed)."""
    conn.execute(
        "UPDATE office.routine_runs SET status = 'task_created', completed_at = NULL WHERE id = %s",
        [run_id],
    )


def counts(conn: Conn, table: str) -> int:
    return int(scalar(conn, f"SELECT count(*) FROM office.{table}"))


def nothing_written(conn: Conn) -> dict[str, int]:
    return {
        table: counts(conn, table)
        for table in ("routines", "routine_triggers", "routine_runs", "wakeup_requests", "tasks")
    }
