"""``officectl``: the operator's command line.

Every command takes the database from ``--dsn`` / ``OFFICE_DSN``; without one
it starts (or reuses) the embedded default database and says where it is.
Errors are one line (with the SQLSTATE when the server gave one) unless
``--debug`` is set.

The commands live in the other modules of this package, one per group of
commands (shared helpers in :mod:`controlplane.cli.base`), and are registered
on the group here.
"""

from __future__ import annotations

import logging

import click

from controlplane import __version__
from controlplane.cli import cluster, doctor, observe, policy, queue, run, runs, ui, worker
from controlplane.cli.base import Context, dsn_option, one_line_errors
from controlplane.cli.db import db, migrate

__all__ = ["Context", "main", "one_line_errors"]


@click.group()
@click.version_option(__version__, "--version", prog_name="officectl")
@dsn_option(on_group=True)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx: click.Context, dsn: str | None, debug: bool) -> None:
    """office: one agent run per occurrence, decided in PostgreSQL."""
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING)
    ctx.obj = Context(dsn=dsn, debug=debug)


main.add_command(migrate)
main.add_command(db)
for _command in (
    *queue.COMMANDS,
    *runs.COMMANDS,
    *policy.COMMANDS,
    *observe.COMMANDS,
    *doctor.COMMANDS,
    *cluster.COMMANDS,
):
    main.add_command(_command)
main.add_command(run.run)
main.add_command(run.demo)
for _command in worker.COMMANDS:
    main.add_command(_command)
for _command in ui.COMMANDS:
    main.add_command(_command)
