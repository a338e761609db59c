"""``officectl worker HANDLER``: a thin wrapper over
:class:`controlplane.worker.Worker` (a plain handler, psycopg) and
:class:`controlplane.worker.AsyncWorker` (an ``async def`` handler, asyncpg).

The handler is imported before anything else: one that cannot be used is one
line on stderr naming it and exit status 2, with nothing touched. SIGTERM or
SIGINT stops the worker (a second one skips the grace period); it exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import click
from psycopg_pool import ConnectionPool

from controlplane import embedded
from controlplane.aio import AsyncOffice
from controlplane.cli.base import CONNECT_TIMEOUT, Context, one_line_errors, require_function
from controlplane.client import Office
from controlplane.daemon import configure_logging
from controlplane.metrics_registry import serve_metrics
from controlplane.models import Run
from controlplane.worker import (
    AsyncWorker,
    HandlerError,
    Worker,
    is_async_handler,
    load_handler,
    worker_metrics_for,
)

__all__ = ["COMMANDS", "worker"]

log = logging.getLogger("controlplane.worker")

SECONDS = click.FloatRange(min=0.0, min_open=True)


class HandlerUnusable(click.ClickException):
    """The handler cannot be imported or called: exit status 2."""

    exit_code = 2


def _database(obj: Context) -> str:
    """The group's DSN, or the embedded database (logged, so that with
    ``--log-format json`` every line is JSON)."""
    if obj.dsn:
        return obj.dsn
    status = embedded.EmbeddedDatabase().ensure_running()
    log.info(
        "using the embedded PostgreSQL %s at %s (data: %s)",
        status.server_version,
        status.url,
        status.data_dir,
        extra={"url": status.url},
    )
    return status.url


@click.command()
@click.argument("handler_spec", metavar="HANDLER")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Handlers in flight at once (each on another agent).",
)
@click.option("--agent", "agent_profile_id", help="Claim only this agent's runs.")
@click.option("--worker-id", help="Recorded as claimed_by (default: <hostname>:<pid>).")
@click.option(
    "--heartbeat",
    type=SECONDS,
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between heartbeats of a run in flight.",
)
@click.option(
    "--poll",
    type=SECONDS,
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds an idle worker waits for a NOTIFY before claiming again.",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0.0),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds the runs in flight get to finish on SIGTERM/SIGINT.",
)
@click.option(
    "--timeout",
    type=SECONDS,
    default=None,
    metavar="SECONDS",
    help="Fail a run retryably when its handler runs longer (an async handler is"
    " cancelled, a sync one abandoned); default: no limit.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    help="Serve Prometheus metrics on this port (0: any free port; default: none).",
)
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Metrics address.")
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.pass_obj
@one_line_errors
def worker(
    obj: Context,
    handler_spec: str,
    concurrency: int,
    agent_profile_id: str | None,
    worker_id: str | None,
    heartbeat: float,
    poll: float,
    grace: float,
    timeout: float | None,
    metrics_port: int | None,
    metrics_host: str,
    log_format: str,
) -> None:
    """Run HANDLER (module:function, a plain function or an async def) for
    every claimed run: returning finishes the run, raising
    controlplane.worker.Retry(delay) retries it, raising
    controlplane.worker.Transient fails it retryably (queued again after the
    agent's back-off while retries are left), raising anything else fails
    it. Heartbeats keep the claim; SIGTERM/SIGINT stops claiming, gives the
    runs in flight --grace seconds and hands back the rest."""
    try:
        handler = load_handler(handler_spec)
    except HandlerError as exc:
        raise HandlerUnusable(str(exc)) from None
    configure_logging(log_format, logging.DEBUG if obj.debug else logging.INFO)
    url = _database(obj)
    require_function(
        url,
        # get_run came with leases (0.4.0); heartbeat_run's signature changed since
        "office.get_run(text)",
        "office 0.4.0 is not installed in this database (no office.get_run):"
        " run `officectl migrate` (or ALTER EXTENSION office UPDATE) first",
        log,
    )
    options: dict[str, Any] = {
        "concurrency": concurrency,
        "agent_profile_id": agent_profile_id,
        "worker_id": worker_id,
        "heartbeat": heartbeat,
        "poll": poll,
        "grace": grace,
        "timeout": timeout,
    }
    worker_metrics_for()  # every series is served from the start
    server = None
    if metrics_port is not None:
        server = serve_metrics(metrics_port, metrics_host)
        port = int(server.server_port)
        log.info(
            "serving metrics on http://%s:%d/metrics", metrics_host, port, extra={"port": port}
        )
    try:
        if is_async_handler(handler):
            asyncio.run(_run_async(url, handler, options))
        else:
            _run_sync(url, handler, options)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    sys.exit(0)


def _run_sync(url: str, handler: Callable[[Run], object], options: dict[str, Any]) -> None:
    pool: ConnectionPool[Any] = ConnectionPool(
        url,
        min_size=1,
        max_size=options["concurrency"] + 1,  # the claims, and each handler's outcome
        kwargs={
            "autocommit": True,
            "connect_timeout": CONNECT_TIMEOUT,
            "application_name": "officectl worker",
        },
        timeout=CONNECT_TIMEOUT,
        # Checked before each checkout, as the daemon's pool is: one more
        # round trip per claim and per outcome, against a first call on each
        # connection left dead by a server restart failing after the worker
        # had logged the database restored, which logged one outage as
        # several losses (and retried the call).
        check=ConnectionPool.check_connection,
        reconnect_timeout=2 * CONNECT_TIMEOUT,
        open=False,
        name="officectl-worker",
    )
    pool.open(wait=False)  # a database that is away is waited for, not fatal
    try:
        Worker(Office(pool=pool), handler, **options).run()
    finally:
        pool.close(timeout=5.0)


async def _run_async(
    url: str, handler: Callable[[Run], Awaitable[object]], options: dict[str, Any]
) -> None:
    # The claims and outcomes, plus the two connections the worker holds
    # (heartbeats, LISTEN).
    office = AsyncOffice(url, min_size=1, max_size=options["concurrency"] + 3)
    try:
        await AsyncWorker(office, handler, **options).run()
    finally:
        await office.close()


COMMANDS = (worker,)
