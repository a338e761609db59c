"""``officectl doctor``: the checks of :mod:`controlplane.doctor` as a table
(or JSON), exit status 1 when any finding is a problem."""

from __future__ import annotations

import sys

import click
from rich.table import Table

from controlplane import doctor
from controlplane.cli.base import Context, connect, json_option, one_line_errors, print_json, stdout

STYLE = {
    doctor.Status.OK: "[green]ok[/green]",
    doctor.Status.WARNING: "[yellow]warning[/yellow]",
    doctor.Status.PROBLEM: "[bold red]PROBLEM[/bold red]",
}


@click.command("doctor")
@click.option("--problems-only", is_flag=True, help="Leave out the checks that passed.")
@json_option
@click.pass_obj
@one_line_errors
def doctor_command(obj: Context, problems_only: bool, as_json: bool) -> None:
    """Check the installation: schema version against this package, the dedup
    and routine indexes with their predicates, roles and grants (nothing for
    PUBLIC), the window and NOTIFY settings, and the probes clients rely on.
    On a proxy DSN, every shard of office_cluster, and that all are reachable
    and on one version. Exits 1 if anything is a problem; each finding says
    what to do."""
    findings = doctor.examine(obj.database_url(), connect)
    ok = doctor.healthy(findings)
    shown = [f for f in findings if f.status is not doctor.Status.OK] if problems_only else findings
    if as_json:
        print_json({"ok": ok, "findings": shown})
    else:
        table = Table(title="office doctor", title_justify="left")
        sharded = any(f.shard for f in findings)
        table.add_column("status")
        if sharded:
            table.add_column("shard")
        table.add_column("check")
        table.add_column("finding", overflow="fold")
        table.add_column("what to do", overflow="fold")
        for finding in shown:
            where = [finding.shard or "(cluster)"] if sharded else []
            table.add_row(STYLE[finding.status], *where, finding.check, finding.detail, finding.fix)
        stdout.print(table)
        problems = sum(f.status is doctor.Status.PROBLEM for f in findings)
        stdout.print("no problems found" if ok else f"{problems} problem(s) found")
    if not ok:
        sys.exit(1)


COMMANDS = [doctor_command]
