"""``officectl runs``: list, show, requeue and cancel runs from the command
line, as the dashboard's runs page does (docs/api.md §3).

``list`` takes the filters of the dashboard's runs list (status, agent,
reason, task, key prefix) and pages by id, newest first; ``show`` prints one
run with the keys it serves; ``requeue`` and ``cancel`` call
``requeue_runs`` / ``cancel_runs`` (``office_admin``) on the ids given, or on
ids read one a line from standard input with ``-``, so ids picked from
``runs list --json`` can be piped in (more than 10,000 ids go in several
calls, one transaction each). A run that was not in a state the
action takes is an outcome (counted, exit 0), not an error.

``--json`` prints the same fields as the table, with ``null`` for every
absent value.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from controlplane.cli.base import (
    Context,
    json_option,
    one_line_errors,
    open_office,
    print_json,
    print_record,
    print_table,
)
from controlplane.client import Office
from controlplane.models import Run, RunStatus

#: What ``list_runs`` returns at most per call (its page_size bound).
_PAGE_MAX = 500
#: What ``requeue_runs`` / ``cancel_runs`` take at most per call (docs/api.md §3).
_IDS_MAX = 10_000

_LIST_COLUMNS = (
    "id",
    "status",
    "agent_profile_id",
    "reason",
    "task_id",
    "attempt",
    "idempotency_key",
    "requested_at",
    "finished_at",
)


def list_runs(
    office: Office,
    *,
    status: str | None,
    agent: str | None,
    reason: str | None,
    task: str | None,
    key_prefix: str | None,
    before: str | None,
    limit: int,
) -> list[Run]:
    """Up to ``limit`` runs matching the filters, newest first, older than
    ``before``: the dashboard's pages (``list_runs`` within the window
    ``run_window_end`` bounds), window after window until ``limit`` runs are
    found or the oldest run is reached."""
    found: list[Run] = []
    while len(found) < limit:
        floor = office.run_window_end(before_id=before)
        want = min(limit - len(found), _PAGE_MAX)
        page = office.list_runs(
            status=status,
            agent_profile_id=agent,
            reason=reason,
            task_id=task,
            key_prefix=key_prefix,
            before_id=before,
            not_before_id=floor,
            page_size=want,
        )
        found.extend(page)
        if len(page) == want:
            before = page[-1].id
        elif floor is None:
            break
        else:
            # The window is searched; the next one ends where this began.
            before = floor
    return found


def _ids(run_ids: tuple[str, ...]) -> list[str]:
    """The ids given, ``-`` read as one id a line from standard input."""
    ids: list[str] = []
    for run_id in run_ids:
        if run_id == "-":
            ids.extend(line.strip() for line in sys.stdin if line.strip())
        else:
            ids.append(run_id)
    if not ids:
        raise click.UsageError("no run ids given")
    return ids


def _chunks(ids: list[str]) -> list[list[str]]:
    return [ids[i : i + _IDS_MAX] for i in range(0, len(ids), _IDS_MAX)] or [[]]


@click.group()
def runs() -> None:
    """List, show, requeue and cancel runs."""


@runs.command("list")
@click.option(
    "--status",
    type=click.Choice([s.value for s in RunStatus]),
    help="Only runs in this status.",
)
@click.option("--agent", help="Only runs of this agent.")
@click.option("--reason", help="Only runs for this reason.")
@click.option("--task", help="Only runs about this task.")
@click.option("--key-prefix", help="Only runs whose idempotency key starts with this.")
@click.option("--before", "before", metavar="RUN_ID", help="Only runs older than this one.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Runs at most."
)
@json_option
@click.pass_obj
@one_line_errors
def list_command(
    obj: Context,
    status: str | None,
    agent: str | None,
    reason: str | None,
    task: str | None,
    key_prefix: str | None,
    before: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Runs matching every filter given, newest first (office.list_runs)."""
    with open_office(obj.database_url()) as office:
        found = list_runs(
            office,
            status=status,
            agent=agent,
            reason=reason,
            task=task,
            key_prefix=key_prefix,
            before=before,
            limit=limit,
        )
    if as_json:
        print_json(found)
        return
    print_table(
        "runs",
        _LIST_COLUMNS,
        [[getattr(r, c) for c in _LIST_COLUMNS] for r in found],
        empty="no runs",
    )
    if len(found) == limit:
        click.echo(f"more may follow: --before {found[-1].id}", err=True)


@runs.command("show")
@click.argument("run_id")
@json_option
@click.pass_obj
@one_line_errors
def show(obj: Context, run_id: str, as_json: bool) -> None:
    """RUN_ID with every column and the keys it serves (office.get_run,
    office.run_keys)."""
    with open_office(obj.database_url()) as office:
        run = office.get_run(run_id)
        keys = office.run_keys(run_id) if run is not None else []
    if run is None:
        raise click.ClickException(f"no run {run_id!r}")
    record: dict[str, Any] = {**run.model_dump(), "keys": [k.model_dump() for k in keys]}
    if as_json:
        print_json(record)
    else:
        print_record(f"run {run_id}", record)


def _report(action: str, requested: int, changed: int, as_json: bool) -> None:
    if as_json:
        print_json({"requested": requested, "changed": changed})
    else:
        click.echo(f"{action} {changed} of {requested} run(s)")


@runs.command("requeue")
@click.argument("run_ids", nargs=-1, required=True, metavar="RUN_ID... | -")
@json_option
@click.pass_obj
@one_line_errors
def requeue(obj: Context, run_ids: tuple[str, ...], as_json: bool) -> None:
    """Put failed or cancelled runs back in the queue, in place
    (office.requeue_runs): same row, same keys, the next claim bumps the
    attempt. Runs in another state are left and not counted."""
    ids = _ids(run_ids)
    with open_office(obj.database_url()) as office:
        changed = sum(office.requeue_runs(chunk) for chunk in _chunks(ids))
    _report("requeued", len(ids), changed, as_json)


@runs.command("cancel")
@click.argument("run_ids", nargs=-1, required=True, metavar="RUN_ID... | -")
@click.option("--reason", required=True, help="Stored as the runs' cancel_reason.")
@json_option
@click.pass_obj
@one_line_errors
def cancel(obj: Context, run_ids: tuple[str, ...], reason: str, as_json: bool) -> None:
    """Cancel queued or claimed runs (office.cancel_runs); a claimed run's
    worker then gets false from its next heartbeat or outcome call. Runs in
    another state are left and not counted."""
    ids = _ids(run_ids)
    with open_office(obj.database_url()) as office:
        changed = sum(office.cancel_runs(chunk, reason) for chunk in _chunks(ids))
    _report("cancelled", len(ids), changed, as_json)


COMMANDS = [runs]
