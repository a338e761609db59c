"""Tasks, agents, blockers, runs and events through plain SQL: what the task,
blocker, event, subscriber, routine and parent-wake tests all do."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

Conn = psycopg.Connection[Any]
Row = dict[str, Any]


def call(conn: Conn, function: str, **args: Any) -> Row:
    """``SELECT * FROM office.<function>(name => value, ...)``: the one row."""
    query = sql.SQL("SELECT * FROM office.{}({})").format(
        sql.Identifier(function),
        sql.SQL(", ").join(
            sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in args
        ),
    )
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(query, args).fetchone()
    assert row is not None
    return row


def agent(conn: Conn, agent_id: str, status: str = "idle", workspace: str = "w1") -> str:
    call(conn, "upsert_agent", id=agent_id, workspace_id=workspace, status=status)
    return agent_id


def create(conn: Conn, task_id: str, workspace: str = "w1", **args: Any) -> Row:
    return call(conn, "create_task", workspace_id=workspace, id=task_id, **args)


def assign(conn: Conn, task_id: str, agent_id: str | None, **args: Any) -> Row:
    return call(conn, "assign_task", task_id=task_id, assignee_agent_profile_id=agent_id, **args)


def move(conn: Conn, task_id: str, state: str) -> Row:
    return call(conn, "move_task", task_id=task_id, state=state)


def task(conn: Conn, task_id: str) -> Row:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM office.tasks WHERE id = %s", [task_id]).fetchone()
    assert row is not None, f"no task {task_id}"
    return row


def runs(conn: Conn, reason: str | None = None) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM office.runs WHERE %(reason)s::text IS NULL OR reason = %(reason)s"
            " ORDER BY requested_at, id",
            {"reason": reason},
        ).fetchall()


def run_keys(conn: Conn, reason: str | None = None) -> list[str | None]:
    return [r["idempotency_key"] for r in runs(conn, reason)]


def events(conn: Conn, topic: str | None = None) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM office.events WHERE %(topic)s::text IS NULL OR topic = %(topic)s"
            " ORDER BY id",
            {"topic": topic},
        ).fetchall()


def claim_and_age(conn: Conn, run_id: str, interval: str | None = None) -> None:
    """Mark a run claimed (and optionally requested long ago): no longer a
    coalesce target, and past the windows when aged."""
    conn.execute(
        "UPDATE office.runs SET status = 'claimed', claimed_at = now(),"
        " requested_at = requested_at - coalesce(%s::interval, '0'), attempt = attempt + 1"
        " WHERE id = %s",
        [interval, run_id],
    )


def keyless_stats(conn: Conn) -> dict[tuple[str, str], int]:
    rows = conn.execute("SELECT reason, cause, total FROM office.keyless_stats").fetchall()
    return {(r, c): int(t) for r, c, t in rows}


def footprint(conn: Conn) -> dict[str, Any]:
    """Everything a task function may write, to show that bad input wrote nothing."""
    counts = conn.execute(
        "SELECT (SELECT count(*) FROM office.tasks), (SELECT count(*) FROM office.task_blockers),"
        " (SELECT count(*) FROM office.events), (SELECT count(*) FROM office.runs),"
        " (SELECT coalesce(sum(assignment_generation), 0) FROM office.tasks),"
        " (SELECT coalesce(max(updated_at)::text, '') FROM office.tasks)"
    ).fetchone()
    assert counts is not None
    return dict(
        zip(["tasks", "blockers", "events", "runs", "generations", "updated"], counts, strict=True)
    )


def sqlstate_of(conn: Conn, function: str, **args: Any) -> str | None:
    with pytest.raises(psycopg.Error) as caught:
        call(conn, function, **args)
    return caught.value.sqlstate


def block(conn: Conn, blocked: str, blocker: str) -> None:
    call(conn, "add_blocker", task_id=blocked, blocker_task_id=blocker)
