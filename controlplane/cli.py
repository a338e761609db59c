"""``officectl``: the operator's command line.

Every command takes the database from ``--dsn`` / ``OFFICE_DSN``; without one
it starts (or reuses) the embedded default database and says where it is.
Errors are one line (with the SQLSTATE when the server gave one) unless
``--debug`` is set.

The commands live in ``cli_*.py`` modules (shared helpers in
``controlplane.cli_base``) and are registered on the group here.
"""

from __future__ import annotations

import logging
import sys

import click
import psycopg
from rich.table import Table

from controlplane import cli_doctor, cli_observe, cli_queue, keys
from controlplane.cli_base import Context, one_line_errors, stdout
from controlplane.cli_db import db, migrate

__all__ = ["Context", "main", "one_line_errors"]


@click.group()
@click.option(
    "--dsn",
    envvar="OFFICE_DSN",
    help="postgresql:// URL of the database (default: the embedded database).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx: click.Context, dsn: str | None, debug: bool) -> None:
    """office: one agent run per occurrence, decided in PostgreSQL."""
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING)
    ctx.obj = Context(dsn=dsn, debug=debug)


main.add_command(migrate)
main.add_command(db)
for _command in (*cli_queue.COMMANDS, *cli_observe.COMMANDS, *cli_doctor.COMMANDS):
    main.add_command(_command)


@main.command()
@click.pass_obj
@one_line_errors
def demo(obj: Context) -> None:
    """Start the database, install office, and show the keys of a sample task."""
    url = obj.database_url()
    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SELECT office.schema_version()").fetchone()
        rows = conn.execute(_DEMO_KEYS_QUERY).fetchall()
    table = Table(title=f"office {version[0] if version else '?'}: keys for task task-1")
    table.add_column("occurrence")
    table.add_column("key (SQL)", overflow="fold")
    table.add_column("Python twin", justify="center")
    python_keys = _demo_keys_python()
    for (occurrence, sql_key), py_key in zip(rows, python_keys, strict=True):
        table.add_row(occurrence, sql_key, "yes" if sql_key == py_key else "NO")
    stdout.print(table)
    if any(sql_key != py_key for (_, sql_key), py_key in zip(rows, python_keys, strict=True)):
        sys.exit(1)


_DEMO_KEYS_QUERY = """
SELECT * FROM (VALUES
  ('assigned to agent-A (generation 1)', office.assignment_key('task-1', 'agent-A', 1)),
  ('reassigned to agent-B (generation 2)', office.assignment_key('task-1', 'agent-B', 2)),
  ('blockers b1, b2 resolved', office.blockers_resolved_key('task-1', ARRAY['b2', 'b1'])),
  ('children completed', office.wake_operation_id(
      'task-1', 'child-a:COMPLETED,child-b:CANCELLED', '2026-01-01 00:10:00')),
  ('cron tick 2026-05-10 12:00 UTC', office.routine_key(
      'cron', 'routine-1', 'trigger-1', timestamptz '2026-05-10 12:00:00+00', NULL))
) AS demo(occurrence, key)
"""


def _demo_keys_python() -> list[str | None]:
    from datetime import UTC, datetime

    return [
        keys.assignment_key("task-1", "agent-A", 1),
        keys.assignment_key("task-1", "agent-B", 2),
        keys.blockers_resolved_key("task-1", ["b2", "b1"]),
        keys.wake_operation_id(
            "task-1", "child-a:COMPLETED,child-b:CANCELLED", "2026-01-01 00:10:00"
        ),
        keys.routine_key(
            "cron", "routine-1", "trigger-1", datetime(2026, 5, 10, 12, tzinfo=UTC), None
        ),
    ]
