"""The producer commands of ``officectl``: ``enqueue``, ``assign``, ``move``,
``fire-routine`` and ``sweep``.

Each calls one function of the SQL API through the :class:`Office` client and
prints what it returned. A duplicate, a coalesce or a skip is an outcome and
exits 0; bad input exits 1 with one line carrying the SQLSTATE.
"""

from __future__ import annotations

import json
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
from controlplane.models import ActorType, KeylessCause, RoutineSource


def _json_object_text(value: str, option: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{option} is not valid JSON: {exc}") from None


def _assignments(items: tuple[str, ...], option: str) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"{option} expects NAME=VALUE, got {item!r}")
        parsed[name] = value
    return parsed


@click.command()
@click.argument("agent")
@click.argument("reason")
@click.option("--key", "idempotency_key", help="Idempotency key ('' or absent: keyless).")
@click.option("--task", "task_id", help="The task this run is about.")
@click.option("--payload", default="{}", show_default=True, help="A JSON object.")
@click.option("--entry-triggered", is_flag=True, help="Never coalesce this request.")
@click.option(
    "--keyless-cause",
    type=click.Choice([c.value for c in KeylessCause]),
    help="Count a keyless request in office.keyless_stats with this cause.",
)
@json_option
@click.pass_obj
@one_line_errors
def enqueue(
    obj: Context,
    agent: str,
    reason: str,
    idempotency_key: str | None,
    task_id: str | None,
    payload: str,
    entry_triggered: bool,
    keyless_cause: str | None,
    as_json: bool,
) -> None:
    """Ask for a run of AGENT for REASON (office.enqueue_run): queued, deduped
    (windowed or durable) or coalesced."""
    with open_office(obj.database_url()) as office:
        result = office.enqueue_run(
            agent,
            reason,
            _json_object_text(payload, "--payload"),
            idempotency_key=idempotency_key,
            task_id=task_id,
            entry_triggered=entry_triggered,
            keyless_cause=keyless_cause,
        )
    if as_json:
        print_json(result)
    else:
        print_record("enqueue_run", result.model_dump())


@click.command()
@click.argument("task")
@click.argument("agent")
@click.option("--actor-id", help="Who made the assignment (recorded on the event).")
@click.option(
    "--actor-type",
    type=click.Choice([a.value for a in ActorType]),
    default=ActorType.USER.value,
    show_default=True,
)
@json_option
@click.pass_obj
@one_line_errors
def assign(
    obj: Context, task: str, agent: str, actor_id: str | None, actor_type: str, as_json: bool
) -> None:
    """Assign TASK to AGENT ('' unassigns) (office.assign_task): prints the
    generation this assignment committed and its task_assigned run."""
    with open_office(obj.database_url()) as office:
        result = office.assign_task(task, agent, actor_id=actor_id, actor_type=actor_type)
    if as_json:
        print_json(result)
    else:
        print_record(f"assign_task {task}", result.model_dump())


@click.command()
@click.argument("task")
@click.argument("state", metavar="STATE")
@json_option
@click.pass_obj
@one_line_errors
def move(obj: Context, task: str, state: str, as_json: bool) -> None:
    """Move TASK to STATE (office.move_task); a terminal state runs the
    terminal effects (routine close, blockers resolved, parent wake).

    STATE: TODO CREATED SCHEDULING IN_PROGRESS REVIEW BLOCKED WAITING_FOR_INPUT
    COMPLETED FAILED CANCELLED."""
    with open_office(obj.database_url()) as office:
        result = office.move_task(task, state)
    if as_json:
        print_json(result)
    else:
        print_record(f"move_task {task}", result.model_dump())


@click.command("fire-routine")
@click.argument("routine")
@click.option(
    "--source",
    type=click.Choice([s.value for s in RoutineSource]),
    default=RoutineSource.MANUAL.value,
    show_default=True,
)
@click.option(
    "--var",
    "variables",
    multiple=True,
    metavar="NAME=VALUE",
    help="A declared routine variable (repeatable; the value is text).",
)
@click.option("--explicit-key", help="Key the fire routine:<id>:<source>:<key> (dedups repeats).")
@json_option
@click.pass_obj
@one_line_errors
def fire_routine(
    obj: Context,
    routine: str,
    source: str,
    variables: tuple[str, ...],
    explicit_key: str | None,
    as_json: bool,
) -> None:
    """Fire ROUTINE once (office.dispatch_routine): task_created, done,
    skipped, coalesced or failed."""
    with open_office(obj.database_url()) as office:
        result = office.dispatch_routine(
            routine,
            source,
            _assignments(variables, "--var"),
            explicit_key=explicit_key,
        )
    # The result type stores '' for "no task" and "no run" (as the routine
    # run's row does); the command's JSON says null for every absent value.
    record = result.model_dump()
    for field in ("linked_task_id", "coalesced_into_run_id"):
        record[field] = record[field] or None
    if as_json:
        print_json(record)
    else:
        print_record(f"dispatch_routine {routine}", record)


@click.command()
@click.option(
    "--max-rows", type=click.IntRange(min=1), default=5, show_default=True, help="Parents per run."
)
@json_option
@click.pass_obj
@one_line_errors
def sweep(obj: Context, max_rows: int, as_json: bool) -> None:
    """Wake stuck parents once (office.sweep_stuck_parents): one line per
    parent, delivered or skipped with the reason."""
    with open_office(obj.database_url()) as office:
        results = office.sweep_stuck_parents(max_rows)
    if as_json:
        print_json(results)
        return
    columns = list(results[0].model_dump()) if results else []
    print_table(
        "sweep_stuck_parents",
        columns,
        [list(r.model_dump().values()) for r in results],
        empty="no stuck parents",
    )


COMMANDS = [enqueue, assign, move, fire_routine, sweep]
