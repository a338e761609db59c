"""``officectl policy`` and ``officectl explain``: wake governance from the
command line (docs/api.md §9, docs/operations.md "Governing wakes").

``policy set SCOPE ID`` replaces the whole policy of an agent or a workspace
(``office.set_wake_policy``: what an option leaves out is not set any more,
as in SQL); ``policy show`` prints the policies (all, or of one scope and
id); ``policy clear SCOPE ID`` deletes one. ``explain AGENT`` prints
``office.explain_agent``: the agent's claimed run, then its queued runs in
claim order, each with what holds it and until when, and the runs held now
across agents (``office.governance_stats``) with ``--all``.

Durations take the daemon's units (``30s``, ``15m``, ``2h``, ``7d``).
``--json`` prints the same fields as the tables, ``null`` for every absent
value.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import click

from controlplane.cli.base import (
    Context,
    json_option,
    one_line_errors,
    open_office,
    print_json,
    print_table,
)
from controlplane.cli.run import DURATION
from controlplane.models import BudgetPeriod, PolicyScope, WakePolicy

_POLICY_COLUMNS = ("scope", "scope_id", "cooldown", "run cap", "budget", "retries", "back-off")
_EXPLAIN_COLUMNS = ("run_id", "status", "claimable", "held_by", "until", "detail")
_SCOPES = click.Choice([s.value for s in PolicyScope])


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def _policy_cells(row: WakePolicy) -> list[Any]:
    """A policy as the table's cells: each limit in words, durations as
    h:mm:ss (``--json`` has every column as stored)."""
    cap = None if row.max_runs is None else f"{row.max_runs} per {row.per}"
    budget = None if row.budget is None else f"{row.budget} per {row.budget_period}"
    backoff = None if row.retry_backoff is None else ", ".join(str(s) for s in row.retry_backoff)
    cooldown = None if row.cooldown is None else str(row.cooldown)
    return [row.scope, row.scope_id, cooldown, cap, budget, row.max_retries, backoff]


def _budget(value: str | None) -> Decimal | None:
    if value is None:
        return None
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise click.BadParameter(f"{value!r} is not a number", param_hint="--budget") from None
    if not number.is_finite():
        raise click.BadParameter(f"{value!r} is not a finite number", param_hint="--budget")
    return number


@click.group()
def policy() -> None:
    """Set, show and clear wake policies (cooldowns, run caps, budgets, retries)."""


@policy.command("set")
@click.argument("scope", type=_SCOPES)
@click.argument("scope_id")
@click.option("--cooldown", type=DURATION, help="Time between a run's end and the next claim.")
@click.option("--max-runs", type=click.IntRange(1, 10_000), help="Claims at most per --per.")
@click.option("--per", type=DURATION, help="The interval of --max-runs.")
@click.option("--budget", help="Spend at most this much per --budget-period (a hard stop).")
@click.option(
    "--budget-period",
    type=click.Choice([p.value for p in BudgetPeriod]),
    default=BudgetPeriod.MONTH.value,
    show_default=True,
    help="The UTC period of --budget.",
)
@click.option("--max-retries", type=click.IntRange(0, 100), help="Retryable failures retried.")
@click.option(
    "--retry-backoff",
    type=DURATION,
    multiple=True,
    help="A back-off step; repeat for each retry (the last one repeats).",
)
@json_option
@click.pass_obj
@one_line_errors
def set_command(
    obj: Context,
    scope: str,
    scope_id: str,
    cooldown: float | None,
    max_runs: int | None,
    per: float | None,
    budget: str | None,
    budget_period: str,
    max_retries: int | None,
    retry_backoff: tuple[float, ...],
    as_json: bool,
) -> None:
    """Replace the policy of SCOPE (agent or workspace) SCOPE_ID
    (office.set_wake_policy): an option left out is not set here any more."""
    if (max_runs is None) != (per is None):
        raise click.UsageError("--max-runs and --per come together")
    with open_office(obj.database_url()) as office:
        row = office.set_wake_policy(
            scope,
            scope_id,
            cooldown=_seconds(cooldown),
            max_runs=max_runs,
            per=_seconds(per),
            budget=_budget(budget),
            budget_period=budget_period,
            max_retries=max_retries,
            retry_backoff=[timedelta(seconds=s) for s in retry_backoff] or None,
        )
    if as_json:
        print_json(row)
    else:
        print_table("wake policy", _POLICY_COLUMNS, [_policy_cells(row)])


@policy.command("show")
@click.argument("scope", type=_SCOPES, required=False)
@click.argument("scope_id", required=False)
@json_option
@click.pass_obj
@one_line_errors
def show(obj: Context, scope: str | None, scope_id: str | None, as_json: bool) -> None:
    """The wake policies, or those of SCOPE (and SCOPE_ID)."""
    with open_office(obj.database_url()) as office:
        rows = office.wake_policies(scope, scope_id)
    if as_json:
        print_json(rows)
        return
    print_table(
        "wake policies",
        _POLICY_COLUMNS,
        [_policy_cells(r) for r in rows],
        empty="no wake policies",
    )


@policy.command("clear")
@click.argument("scope", type=_SCOPES)
@click.argument("scope_id")
@json_option
@click.pass_obj
@one_line_errors
def clear(obj: Context, scope: str, scope_id: str, as_json: bool) -> None:
    """Delete the policy of SCOPE SCOPE_ID (office.clear_wake_policy)."""
    with open_office(obj.database_url()) as office:
        cleared = office.clear_wake_policy(scope, scope_id)
    if as_json:
        print_json({"cleared": cleared})
    else:
        click.echo(f"cleared the policy of {scope} {scope_id}" if cleared else "no such policy")


@click.command()
@click.argument("agent")
@click.option(
    "--limit",
    type=click.IntRange(1, 10_000),
    default=50,
    show_default=True,
    help="Runs at most.",
)
@click.option("--all", "with_stats", is_flag=True, help="Also the runs held now, by agent.")
@json_option
@click.pass_obj
@one_line_errors
def explain(obj: Context, agent: str, limit: int, with_stats: bool, as_json: bool) -> None:
    """Why AGENT's runs are or are not running (office.explain_agent): its
    claimed run, then its queued runs in claim order, each with what holds
    it and until when."""
    with open_office(obj.database_url()) as office:
        rows = office.explain_agent(agent, max_rows=limit)
        stats = office.governance_stats() if with_stats else None
    if as_json:
        record: dict[str, Any] = {"agent": agent, "runs": rows}
        if stats is not None:
            record["held"] = stats
        print_json(record)
        return
    print_table(
        f"agent {agent}",
        _EXPLAIN_COLUMNS,
        [[getattr(r, c) for c in _EXPLAIN_COLUMNS] for r in rows],
        empty="no queued or claimed runs",
    )
    if stats is not None:
        print_table(
            "runs held now",
            ("agent_profile_id", "held_by", "runs"),
            [[s.agent_profile_id, s.held_by, s.runs] for s in stats],
            empty="no runs held",
        )


COMMANDS = [policy, explain]
