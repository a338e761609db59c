"""``officectl``: the operator's command line.

Every command takes the database from ``--dsn`` / ``OFFICE_DSN``; without one
it starts (or reuses) the embedded default database and says where it is.
Errors are one line (with the SQLSTATE when the server gave one) unless
``--debug`` is set.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
import psycopg
from rich.console import Console
from rich.table import Table

from controlplane import embedded, keys
from controlplane.errors import OfficeError
from controlplane.migrate import migrate as run_migrations

F = TypeVar("F", bound=Callable[..., Any])

stdout = Console()
stderr = Console(stderr=True)


@dataclass
class Context:
    dsn: str | None
    debug: bool

    def database_url(self) -> str:
        """The explicit DSN, or the embedded database (started if needed)."""
        if self.dsn:
            return self.dsn
        status = embedded.EmbeddedDatabase().ensure_running()
        stderr.print(
            f"[dim]using the embedded PostgreSQL {status.server_version} at {status.url} "
            f"(data: {status.data_dir})[/dim]"
        )
        return status.url


def one_line_errors(func: F) -> F:
    """Turn known failures into one clear line and exit status 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context().find_object(Context)
        try:
            return func(*args, **kwargs)
        except (OfficeError, embedded.EmbeddedError, psycopg.Error, ValueError, LookupError) as exc:
            if ctx is not None and ctx.debug:
                raise
            raise click.ClickException(_describe(exc)) from None

    return wrapper  # type: ignore[return-value]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, psycopg.Error):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{first} (SQLSTATE {exc.sqlstate})" if exc.sqlstate else first
    return str(exc)


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


@main.command()
@click.option("--target", help="Stop after this migration id (e.g. 0001.office-0.1.0).")
@click.pass_obj
@one_line_errors
def migrate(obj: Context, target: str | None) -> None:
    """Install or upgrade the office schema (yoyo migrations, or ALTER EXTENSION
    UPDATE where office is installed as an extension)."""
    result = run_migrations(obj.database_url(), target=target)
    applied = ", ".join(result.applied) if result.applied else "nothing to apply"
    stdout.print(f"office {result.version} via {result.path}: {applied}")


@main.group()
def db() -> None:
    """The embedded default database."""


@db.command("status")
@one_line_errors
def db_status() -> None:
    """Show where the embedded database lives and whether it runs."""
    status = embedded.EmbeddedDatabase().status()
    table = Table(show_header=False, box=None)
    table.add_row("state", "running" if status.running else "stopped")
    table.add_row("url", status.url)
    table.add_row("data", str(status.data_dir))
    table.add_row("postgres", status.server_version)
    stdout.print(table)


@db.command("start")
@click.option(
    "--port", type=int, help="TCP port on 127.0.0.1 (default OFFICE_EMBEDDED_PORT or 54329)."
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="NAME=VALUE",
    help="A server setting for this start (repeatable), e.g. --set fsync=off.",
)
@one_line_errors
def db_start(port: int | None, settings: tuple[str, ...]) -> None:
    """Start the embedded database (initialising it and installing office first)."""
    parsed = {}
    for item in settings:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--set expects NAME=VALUE, got {item!r}")
        parsed[name] = value
    status = embedded.EmbeddedDatabase(port=port).ensure_running(parsed)
    stdout.print(f"embedded PostgreSQL {status.server_version} running at {status.url}")


@db.command("url")
@one_line_errors
def db_url() -> None:
    """Print the embedded database's URL, starting it if needed."""
    status = embedded.EmbeddedDatabase().ensure_running()
    click.echo(status.url)


@db.command("stop")
@one_line_errors
def db_stop() -> None:
    """Stop the embedded database."""
    stopped = embedded.EmbeddedDatabase().stop()
    stdout.print("stopped" if stopped else "not running")


@db.command("reset")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@one_line_errors
def db_reset(yes: bool) -> None:
    """Stop the embedded database and delete all its data."""
    database = embedded.EmbeddedDatabase()
    if not yes:
        click.confirm(f"delete {database.data_dir} and everything in it?", abort=True)
    database.reset()
    stdout.print(f"deleted {database.data_dir}")


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
