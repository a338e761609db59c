"""``officectl run`` (the control-plane daemon) and ``officectl demo``."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from controlplane import embedded
from controlplane.cli.base import Context, dsn_option, one_line_errors, require_function
from controlplane.daemon import LOOP_NAMES, Daemon, DaemonConfig, configure_logging, parse_duration

__all__ = ["demo", "run"]

log = logging.getLogger("controlplane.daemon")


class Duration(click.ParamType[float]):
    """Seconds, or a number with a unit: 500ms, 30s, 15m, 2h, 7d."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()


@click.command()
@dsn_option()
@click.option(
    "--metrics-port",
    type=int,
    envvar="OFFICE_METRICS_PORT",
    help="Serve Prometheus metrics on this port (0: any free port; default: none).",
)
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Metrics address.")
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.option(
    "--poll-interval",
    type=DURATION,
    default="1s",
    show_default=True,
    help="Idle poll of the event, wakeup and cron loops.",
)
@click.option("--event-batch", type=int, default=100, show_default=True)
@click.option(
    "--event-visibility",
    type=DURATION,
    default="30s",
    show_default=True,
    help="How long claimed events stay hidden from other consumers.",
)
@click.option("--consumer", help="Outbox consumer name (default officectl-run@host:pid).")
@click.option("--wakeup-batch", type=int, default=50, show_default=True)
@click.option(
    "--wakeup-min-age",
    type=DURATION,
    default="0s",
    show_default=True,
    help="Leave queued wakeups this long to their producer.",
)
@click.option("--cron-batch", type=int, default=100, show_default=True)
@click.option("--sweep-interval", type=DURATION, default="30s", show_default=True)
@click.option("--sweep-batch", type=int, default=5, show_default=True)
@click.option("--recover-interval", type=DURATION, default="1m", show_default=True)
@click.option(
    "--stale-after",
    type=DURATION,
    help="Return claimed runs without a heartbeat for this long to the queue"
    " (recover_stale_runs). Default 2m, for workers that call heartbeat_run;"
    " if they do not, set it longer than the longest run. (Default 15m against a"
    " schema before 0.4.0, where claims cannot be renewed.)",
)
@click.option("--prune-interval", type=DURATION, default="1h", show_default=True)
@click.option(
    "--retention",
    type=DURATION,
    default="7d",
    show_default=True,
    help="Delete finished runs and acknowledged events older than this (prune_runs).",
)
@click.option("--stats-interval", type=DURATION, default="5s", show_default=True)
@click.option("--max-backoff", type=DURATION, default="30s", show_default=True)
@click.option(
    "--lock-timeout",
    type=DURATION,
    default="5s",
    show_default=True,
    help="The longest a loop waits for a lock a producer's transaction holds;"
    " the row is left for a later pass (0: no limit).",
)
@click.option(
    "--shutdown-timeout",
    type=DURATION,
    default="30s",
    show_default=True,
    help="How long to wait for the loops to finish on SIGTERM/SIGINT.",
)
@click.option(
    "--disable",
    "disabled",
    multiple=True,
    type=click.Choice(LOOP_NAMES),
    help="Do not run this loop (repeatable).",
)
@click.pass_obj
@one_line_errors
def run(
    obj: Context,
    metrics_port: int | None,
    metrics_host: str,
    log_format: str,
    log_level: str,
    poll_interval: float,
    event_batch: int,
    event_visibility: float,
    consumer: str | None,
    wakeup_batch: int,
    wakeup_min_age: float,
    cron_batch: int,
    sweep_interval: float,
    sweep_batch: int,
    recover_interval: float,
    stale_after: float | None,
    prune_interval: float,
    retention: float,
    stats_interval: float,
    max_backoff: float,
    lock_timeout: float,
    shutdown_timeout: float,
    disabled: tuple[str, ...],
) -> None:
    """Run the control plane: the event subscriber, wakeup dispatch, routine
    cron, the stuck-parent sweep, stale-claim recovery and pruning, until
    SIGTERM or SIGINT. Any number may run against one database. On a proxy
    DSN (office_proxy) the loops run on every shard of office_cluster."""
    configure_logging(log_format, "DEBUG" if obj.debug else log_level.upper())
    url = obj.database_url()
    settings: dict[str, Any] = {}
    if consumer:
        settings["consumer"] = consumer
    config = DaemonConfig(
        dsn=url,
        poll_interval=poll_interval,
        event_batch=event_batch,
        event_visibility=event_visibility,
        wakeup_batch=wakeup_batch,
        wakeup_min_age=wakeup_min_age,
        cron_batch=cron_batch,
        sweep_interval=sweep_interval,
        sweep_batch=sweep_batch,
        recover_interval=recover_interval,
        stale_after=stale_after,
        prune_interval=prune_interval,
        retention=retention,
        stats_interval=stats_interval,
        max_backoff=max_backoff,
        lock_timeout=lock_timeout,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        disabled=frozenset(disabled),
        shutdown_timeout=shutdown_timeout,
        **settings,
    )
    require_function(
        url,
        "office.claim_events(text, integer, interval)",
        "office is not installed in this database: run `officectl migrate`"
        " (or CREATE EXTENSION office) first",
        log,
    )
    sys.exit(Daemon(config).run_forever())


@click.command()
@dsn_option()
@click.option(
    "--seconds",
    type=float,
    default=15.0,
    show_default=True,
    help="How long the producers race.",
)
@click.option("--seed", type=int, default=None, help="Seed of the producers' choices.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable report.")
@click.option(
    "--ui",
    "with_ui",
    is_flag=True,
    help="After the race, keep the dashboard (officectl ui) up on the demo's database.",
)
@click.option("--ui-port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.pass_obj
@one_line_errors
def demo(
    obj: Context,
    seconds: float,
    seed: int | None,
    as_json: bool,
    with_ui: bool,
    ui_port: int,
) -> None:
    """Race producers, workers and the control plane against one database
    for a few seconds, then show what was suppressed and check the
    invariants (exit status 1 if one fails)."""
    from controlplane.demo import run_demo

    # Without --dsn, a database of the demo's own in the embedded cluster: the
    # default one (officectl db url, the README's quick start) stays as it was.
    url = obj.database_url(embedded.DEMO_DATABASE)
    report = run_demo(url, seconds=seconds, seed=seed, as_json=as_json, debug=obj.debug)
    if with_ui:
        from controlplane.cli.ui import serve

        # Read-only on 127.0.0.1: the demo's data is there to look at.
        serve(url, host="127.0.0.1", port=ui_port, allow_actions=False)
    sys.exit(0 if report.ok else 1)
