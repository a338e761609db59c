"""Parent wakes through plain SQL: stuck parents made by hand, the sweep, the
receipts and the marks; what the parent-wake tests, races and property test
all do."""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row

from tests.harness import scalar
from tests.scenarios.tasks import Conn, Row, agent, call, create

WAKE = "task_children_completed"
T0 = "2026-01-01 00:"  # children are dated explicitly: T0 + "05:00" etc.


def write(conn: Conn, task_id: str, at: str, state: str | None = None, **columns: Any) -> None:
    """A plain UPDATE of a task that also sets updated_at (the trigger keeps
    an explicit value); ``at`` is a minute:second of 2026-01-01 UTC, or a
    full timestamp."""
    stamp = at if " " in at else f"{T0}{at}+00"
    sets = {"updated_at": stamp, **({"state": state} if state else {}), **columns}
    assignments = ", ".join(f"{name} = %({name})s" for name in sets)
    conn.execute(
        f"UPDATE office.tasks SET {assignments} WHERE id = %(task_id)s",
        {**sets, "task_id": task_id},
    )


def stuck_parent(
    conn: Conn,
    parent: str,
    children: dict[str, tuple[str, str]],
    assignee: str | None = "agent-P",
    **parent_args: Any,
) -> None:
    """An Office parent whose children were created already terminal (no
    terminal effects, so no edge-path wake) and dated explicitly:
    ``{"c1": ("COMPLETED", "05:00")}``. The assignee is created idle if new."""
    if (
        assignee is not None
        and scalar(conn, "SELECT count(*) FROM office.agent_profiles WHERE id = %s", [assignee])
        == 0
    ):
        agent(conn, assignee)
    create(conn, parent, assignee_agent_profile_id=assignee, **parent_args)
    for child, (state, at) in children.items():
        create(conn, child, parent_id=parent, state=state)
        write(conn, child, at)


def stuck(conn: Conn, max_rows: int = 100, reason: str = WAKE) -> list[str]:
    rows = conn.execute(
        "SELECT parent_task_id FROM office.list_stuck_parents(%s, %s)", [max_rows, reason]
    ).fetchall()
    return [r[0] for r in rows]


def candidates(conn: Conn, max_rows: int = 100) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM office.list_stuck_parents(%s)", [max_rows]).fetchall()


def scanned(conn: Conn, max_rows: int = 1000, reason: str = WAKE) -> list[str]:
    """The stuck parents read from every open parent, not from the marks."""
    rows = conn.execute(
        "SELECT parent_task_id FROM office._scan_stuck_parents(%s, %s)", [max_rows, reason]
    ).fetchall()
    return [r[0] for r in rows]


def sweep(conn: Conn, max_rows: int = 5) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM office.sweep_stuck_parents(%s)", [max_rows]).fetchall()


def reconcile(conn: Conn, parent: str, child_set_key: str, generation: str) -> Row:
    return call(
        conn,
        "reconcile_parent",
        parent_task_id=parent,
        child_set_key=child_set_key,
        newest_child_updated_at=generation,
    )


def receipt(conn: Conn, parent: str) -> Row | None:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM office.parent_child_wake_receipts WHERE parent_task_id = %s", [parent]
        ).fetchone()


def wakes(conn: Conn, parent: str | None = None) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM office.runs WHERE reason = %(r)s"
            " AND (%(p)s::text IS NULL OR task_id = %(p)s) ORDER BY requested_at, id",
            {"r": WAKE, "p": parent},
        ).fetchall()


def settle(conn: Conn, parent: str | None = None, at: str = "2020-01-01 00:00:00+00") -> None:
    """Finish the parent's wake runs and date them long before the children:
    they no longer hold it back (docs/domain.md §2.20 rule 8)."""
    conn.execute(
        "UPDATE office.runs SET status = 'finished', finished_at = now(), requested_at = %(at)s"
        " WHERE reason = %(r)s AND (%(p)s::text IS NULL OR task_id = %(p)s)",
        {"at": at, "r": WAKE, "p": parent},
    )


def wave(conn: Conn, parent: str) -> tuple[str, str]:
    row = conn.execute(
        "SELECT office.child_set_key(%s), office.child_generation(%s)", [parent, parent]
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def marked(conn: Conn) -> set[str]:
    rows = conn.execute("SELECT DISTINCT parent_task_id FROM office.parent_wake_marks").fetchall()
    return {r[0] for r in rows}
