"""``officectl cluster``: a scale-out cluster on PL/Proxy (docs/scale-out.md)."""

from __future__ import annotations

import sys

import click
from rich.progress import Progress
from rich.table import Table

from controlplane.cli.base import json_option, one_line_errors, print_json, stdout
from controlplane.scaleout import cluster, partition_move


@click.group("cluster")
def cluster_group() -> None:
    """A proxy database serving the office API over shard databases."""


def _show(status: cluster.ClusterStatus, as_json: bool) -> None:
    if as_json:
        print_json(status)
        return
    table = Table(title=f"office cluster: {status.partitions} partitions", title_justify="left")
    for column in ("shard", "partitions", "version", "agents", "tasks", "runs", "error"):
        table.add_column(column, overflow="fold")
    for s in status.shards:
        table.add_row(
            s.shard,
            ",".join(map(str, s.partitions)),
            s.version or "-",
            *(str(v) if v is not None else "-" for v in (s.agents, s.tasks, s.runs)),
            s.error or "",
        )
    stdout.print(table)
    stdout.print(
        "versions agree"
        if status.versions_agree
        else "PROBLEM: shards unreachable or on different versions"
    )


@cluster_group.command("init")
@click.option("--proxy", "proxy", required=True, help="DSN of the proxy database.")
@click.option("--shard", "shards", required=True, multiple=True, help="DSN of a shard (repeat).")
@click.option("--partitions", type=int, default=None, help="A power of two (default 4).")
@json_option
@one_line_errors
def init_command(
    proxy: str, shards: tuple[str, ...], partitions: int | None, as_json: bool
) -> None:
    """Install office on every shard and office_proxy on the proxy, write server
    office_cluster (partition p on shard p mod shards), its user mapping and grants."""
    try:
        status = cluster.init_cluster(proxy, list(shards), partitions)
    except cluster.ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    _show(status, as_json)


@cluster_group.command("status")
@click.option("--proxy", "proxy", required=True, help="DSN of the proxy database.")
@json_option
@one_line_errors
def status_command(proxy: str, as_json: bool) -> None:
    """Partitions, shards, their versions and rows; exits 1 unless every shard
    answers with one version."""
    try:
        status = cluster.cluster_status(proxy)
    except cluster.ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    _show(status, as_json)
    if not status.versions_agree:
        sys.exit(1)


@cluster_group.command("move")
@click.option("--proxy", "proxy", required=True, help="DSN of the proxy database.")
@click.option("--partition", type=int, required=True, help="The partition to move.")
@click.option(
    "--to",
    "target",
    required=True,
    help="The target shard as office_cluster will name it (libpq key=value string).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Move even with claimed runs or claimed events (their holders must use the proxy).",
)
@click.option(
    "--rehearse", is_flag=True, help="Copy to the target and stop before the server switch."
)
@json_option
@one_line_errors
def move_command(
    proxy: str, partition: int, target: str, force: bool, rehearse: bool, as_json: bool
) -> None:
    """Move one partition's workspaces to another shard database: copy their
    rows, switch server office_cluster, delete them on the source
    (docs/scale-out.md). Writes to the source shard wait while it runs."""
    with Progress(console=stdout, transient=True, disable=as_json) as bar:
        task = bar.add_task(f"partition {partition}", total=len(partition_move.MOVED_TABLES))

        def step(table: str, rows: int) -> None:
            bar.update(task, advance=1, description=f"partition {partition}: {table} ({rows})")

        try:
            result = partition_move.move_partition(
                proxy, partition, target, force=force, rehearse=rehearse, progress=step
            )
        except cluster.ClusterError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        print_json(result)
        return
    table = Table(
        title=f"partition {partition}: {result.source} -> {result.target}", title_justify="left"
    )
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, rows in result.rows.items():
        table.add_row(name, str(rows))
    stdout.print(table)
    stdout.print(
        "switched: the proxy routes the partition to the target"
        if result.switched
        else "rehearsal: copied, not switched; the source still serves the partition"
    )


COMMANDS = [cluster_group]
