"""``officectl migrate`` and ``officectl db …``: the schema and the embedded
default database."""

from __future__ import annotations

import click
from rich.table import Table

from controlplane import embedded
from controlplane.cli.base import Context, json_option, one_line_errors, print_json, stdout
from controlplane.migrate import migrate as run_migrations


@click.command()
@click.option("--target", help="Stop after this migration id (e.g. 0001.office-0.1.0).")
@json_option
@click.pass_obj
@one_line_errors
def migrate(obj: Context, target: str | None, as_json: bool) -> None:
    """Install or upgrade the office schema (yoyo migrations, or ALTER EXTENSION
    UPDATE where office is installed as an extension)."""
    result = run_migrations(obj.database_url(), target=target)
    if as_json:
        print_json({"path": result.path, "applied": result.applied, "version": result.version})
        return
    applied = ", ".join(result.applied) if result.applied else "nothing to apply"
    stdout.print(f"office {result.version} via {result.path}: {applied}")


@click.group()
def db() -> None:
    """The embedded default database."""


@db.command("status")
@json_option
@one_line_errors
def db_status(as_json: bool) -> None:
    """Show where the embedded database lives and whether it runs."""
    status = embedded.EmbeddedDatabase().status()
    if as_json:
        print_json(
            {
                "running": status.running,
                "url": status.url,
                "data": str(status.data_dir),
                "postgres": status.server_version,
            }
        )
        return
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
@click.option(
    "--demo",
    is_flag=True,
    help=f"The demo's database ({embedded.DEMO_DATABASE}) instead of {embedded.DATABASE}.",
)
@one_line_errors
def db_url(demo: bool) -> None:
    """Print the embedded database's URL, starting it if needed."""
    database = embedded.DEMO_DATABASE if demo else embedded.DATABASE
    status = embedded.EmbeddedDatabase().ensure_running(database=database)
    click.echo(status.url_of(database))


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
