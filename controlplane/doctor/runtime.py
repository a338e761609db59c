"""The doctor's checks of what the installation runs with: the settings,
the probes clients rely on, rows across workspaces, rows set aside, budgets
(see :mod:`controlplane.doctor`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

from controlplane.client.queries import doctor as q
from controlplane.client.queries import policies as pq
from controlplane.doctor.findings import Finding, Status, one, rows
from controlplane.models import BudgetUsage

WINDOW_SETTINGS = {
    "office.idempotency_window": "24 hours",
    "office.coalesce_window": "5 seconds",
}
NOTIFY_SETTING = "office.notify"
#: What office._signal_runs takes (docs/api.md §3): edge (the default, also when
#: empty), every, on (the 0.3.0 spelling of every), off; anything else fails
#: every enqueue with 22023.
NOTIFY_VALUES = ("edge", "every", "on", "off", "")


# --- settings --------------------------------------------------------------------------


def _setting_sources(conn: psycopg.Connection[Any], name: str) -> list[tuple[str, str]]:
    """Every place ``name`` is set for this database: this session (which sees
    postgresql.conf and the settings of this database and role), and each
    ``ALTER DATABASE``/``ALTER ROLE … SET`` that applies here."""
    sources: list[tuple[str, str]] = []
    session = one(conn, q.DOCTOR_SESSION_SETTING, {"name": name})
    if session:
        sources.append(("this session", str(session)))
    stored = [
        (str(row["place"]), str(row["value"]))
        for row in rows(conn, q.DOCTOR_STORED_SETTINGS, {"name": name})
    ]
    if sources and any(value == sources[0][1] for _, value in stored):
        sources = []  # the session only shows one of those
    return sources + stored


def _interval_problem(conn: psycopg.Connection[Any], value: str) -> str | None:
    try:
        negative = one(conn, q.DOCTOR_NEGATIVE_INTERVAL, {"value": value})
    except psycopg.Error as exc:
        return f"is not an interval ({exc.sqlstate})"
    return "is negative" if negative else None


def _reset_fix(name: str, where: str) -> str:
    if where == "this session":
        return f"fix it where it is set (postgresql.conf, PGOPTIONS, the connection): {name}"
    return f"{where} SET {name} = '…' (or {where} RESET {name})"


def check_settings(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    for name, default in WINDOW_SETTINGS.items():
        sources = _setting_sources(conn, name)
        bad = False
        for where, value in sources:
            problem = _interval_problem(conn, value) if value else None
            if problem:
                bad = True
                yield Finding(
                    check="settings",
                    status=Status.PROBLEM,
                    detail=(
                        f"{name} = {value!r} ({where}) {problem}: "
                        "every enqueue under it fails or misjudges its window"
                    ),
                    fix=_reset_fix(name, where),
                )
        if not bad:
            shown = ", ".join(f"{v!r} ({w})" for w, v in sources) or f"default {default}"
            yield Finding(check="settings", status=Status.OK, detail=f"{name}: {shown}")
    sources = _setting_sources(conn, NOTIFY_SETTING)
    bad = False
    for where, value in sources:
        if value not in NOTIFY_VALUES:
            bad = True
            yield Finding(
                check="settings",
                status=Status.PROBLEM,
                detail=(
                    f"{NOTIFY_SETTING} = {value!r} ({where}): every call under it that queues"
                    " a run fails with 22023 (it must be edge, every or off; on means every)"
                ),
                fix=(
                    "set it to 'edge' (the default), 'every' or 'off': "
                    f"{_reset_fix(NOTIFY_SETTING, where)}"
                ),
            )
    if not bad:
        shown = ", ".join(f"{v!r} ({w})" for w, v in sources) or "default edge"
        yield Finding(
            check="settings",
            status=Status.OK,
            detail=f"{NOTIFY_SETTING}: {shown}",
        )


# --- probes ----------------------------------------------------------------------------


def check_probes(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    present = one(conn, q.DOCTOR_ENTRY_TRIGGERED)
    if present:
        yield Finding(check="probes", status=Status.OK, detail="office.runs.entry_triggered")
    else:
        yield Finding(
            check="probes",
            status=Status.PROBLEM,
            detail=(
                "office.runs.entry_triggered is missing: clients fall back and cannot "
                "keep entry-triggered runs from coalescing"
            ),
            fix="officectl migrate (the column arrives with office 0.2.0)",
        )


# --- workspaces -------------------------------------------------------------------------

#: How many cross-workspace rows a finding names (the count is always exact).
WORKSPACE_SAMPLE = 10


def check_workspaces(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    found = False
    for what, query in q.DOCTOR_ACROSS_WORKSPACES.items():
        try:
            sample_rows = rows(conn, query, {"limit": WORKSPACE_SAMPLE})
        except psycopg.errors.InsufficientPrivilege:
            # The office roles reach tables through functions only; this
            # check reads them directly, as the owner or a superuser can.
            yield Finding(
                check="workspaces",
                status=Status.WARNING,
                detail="this role cannot read the office tables: cross-workspace rows not checked",
                fix="run officectl doctor as the owner of schema office or a superuser",
            )
            return
        if not sample_rows:
            continue
        found = True
        sample = "; ".join(
            f"{r['id']} ({r['space']}) -> {r['other']} ({r['other_space']})" for r in sample_rows
        )
        yield Finding(
            check="workspaces",
            status=Status.WARNING,
            detail=(
                f"{sample_rows[0]['total']} {what} reference(s) across workspaces,"
                f" written before 0.4.0: {sample}"
            ),
            fix=(
                "reassign, re-parent or unblock them within one workspace (a write that keeps"
                " them is refused with OFW01); sharding by workspace needs none left"
            ),
        )
    if not found:
        yield Finding(
            check="workspaces",
            status=Status.OK,
            detail="no task or routine references another workspace",
        )


# --- poison ----------------------------------------------------------------------------

#: How many set-aside rows are listed one by one (the rest are counted).
POISON_LISTED = 50

#: What the row id of each loop's set-aside rows is, and where to look at it.
POISON_ROWS = {
    "subscriber": "event {id} (SELECT * FROM office.events WHERE id = {id})",
    "wakeups": "wakeup request {id!r} (office.wakeup_requests)",
    "cron": "routine trigger {id!r} (office.routine_triggers)",
    "sweep": "parent task {id!r} (office.tasks)",
    "recovery": "run {id!r} (office.runs)",
    "prune": "row {id!r}",
}


def check_poison(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    if one(conn, q.DOCTOR_POISON_TABLE) is None:
        return  # before 0.4.0 (the version check says so)
    if not one(conn, q.DOCTOR_POISON_READABLE):
        yield Finding(
            check="poison",
            status=Status.WARNING,
            detail="cannot read office.poison (the rows the daemon set aside) as this role",
            fix="run officectl doctor as a member of office_reader or office_admin",
        )
        return
    poison = rows(conn, q.DOCTOR_POISON, {"limit": POISON_LISTED})
    if not poison:
        yield Finding(
            check="poison",
            status=Status.OK,
            detail="no row set aside by the daemon's loops (office.poison is empty)",
        )
        return
    for row in poison:
        loop, row_id, reason = row["loop"], row["row_id"], row["reason"]
        sqlstate, set_aside_at = row["sqlstate"], row["set_aside_at"]
        what = POISON_ROWS[loop].format(id=row_id)
        yield Finding(
            check="poison",
            status=Status.WARNING,
            detail=(
                f"the {loop} loop set aside {what} at {set_aside_at:%Y-%m-%d %H:%M:%S%z}: "
                f"{reason}" + _sqlstate_suffix(reason, sqlstate)
            ),
            fix=(
                f"repair or delete the row, then SELECT office.release_poison('{loop}', "
                f"{_literal(row_id)}) to have the loop process it again"
                " (docs/operations.md, Poison)"
            ),
        )
    total = int(poison[0]["total"])
    if total > len(poison):
        yield Finding(
            check="poison",
            status=Status.WARNING,
            detail=f"{total - len(poison)} more rows set aside (SELECT * FROM office.poison)",
        )


def _sqlstate_suffix(reason: str, sqlstate: str | None) -> str:
    """`` (SQLSTATE x)`` after a set-aside reason, unless the reason already
    says it: the daemon's loops store the one-line error, which carries it."""
    if not sqlstate or f"(SQLSTATE {sqlstate})" in reason:
        return ""
    return f" (SQLSTATE {sqlstate})"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# --- budgets ---------------------------------------------------------------------------

#: The share of a budget from which the doctor warns (the budget_warning
#: decision's threshold, docs/api.md §9).
BUDGET_WARNING_SHARE = 0.8
#: Workspaces without a budget listed one by one; the rest are counted.
UNBUDGETED_LISTED = 10


def check_budgets(conn: psycopg.Connection[Any]) -> Iterator[Finding]:
    """Warns about each workspace whose agents no budget caps, and each scope
    at 80 % of its budget or more (docs/operations.md, "Governing wakes")."""
    if one(conn, q.DOCTOR_WAKE_SPEND_TABLE) is None:
        return  # before 0.5.0 (the version check says so)
    if not one(conn, q.DOCTOR_BUDGETS_READABLE):
        yield Finding(
            check="budgets",
            status=Status.WARNING,
            detail="cannot read the agents, wake policies and spend as this role",
            fix="run officectl doctor as the owner of the database, which alone reads its agents",
        )
        return
    unbudgeted = rows(conn, pq.UNBUDGETED_WORKSPACES)
    for row in unbudgeted[:UNBUDGETED_LISTED]:
        yield Finding(
            check="budgets",
            status=Status.WARNING,
            detail=(
                f"workspace {row['workspace']!r} has no budget, nor do {row['agents']} of its"
                " agents: nothing stops their spend"
            ),
            fix=(
                f"officectl policy set workspace {row['workspace']} --budget AMOUNT"
                " (docs/operations.md, Governing wakes)"
            ),
        )
    if len(unbudgeted) > UNBUDGETED_LISTED:
        yield Finding(
            check="budgets",
            status=Status.WARNING,
            detail=f"{len(unbudgeted) - UNBUDGETED_LISTED} more workspaces have no budget",
            fix="officectl policy show; set a budget per workspace",
        )
    near = 0
    for usage in (BudgetUsage.model_validate(r) for r in rows(conn, pq.BUDGET_USAGE)):
        share = usage.share
        if share is not None and share < BUDGET_WARNING_SHARE:
            continue
        near += 1
        if share is None:
            detail = f"{usage.scope} {usage.scope_id!r} has a budget of 0: no run of it is claimed"
        else:
            detail = (
                f"{usage.scope} {usage.scope_id!r} has spent {usage.spent} of its budget of"
                f" {usage.budget} this {usage.budget_period} ({share:.0%}); at 100 % no run of"
                " it is claimed until the next period"
            )
        yield Finding(
            check="budgets",
            status=Status.WARNING,
            detail=detail,
            fix=(
                f"officectl policy set {usage.scope} {usage.scope_id} --budget AMOUNT"
                " to raise it, or let the period end"
            ),
        )
    if not unbudgeted and not near:
        yield Finding(
            check="budgets",
            status=Status.OK,
            detail="every workspace has a budget, and none is at 80 % or more",
        )
