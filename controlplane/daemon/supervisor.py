"""The daemon: one thread per loop over one connection pool, a Prometheus
endpoint, and a clean stop.

``Daemon(config).run_forever()`` is ``officectl run``: it installs SIGTERM
and SIGINT handlers, starts the loops and waits; on a signal every loop
finishes the iteration it is in (the subscriber its batch: it acknowledges
what it handled, so no claimed event is left hidden) and the process exits
0. ``start()``/``stop()``/``join()`` run it inside another program (the
demo does).

On a proxy DSN (docs/api.md §8) the loops run on every shard of server
``office_cluster`` (:mod:`controlplane.scaleout.shards`): one pool, one set of loops,
one health and one metrics registry per shard, each loop named
``<loop>@<shard>`` and its logs and series labelled ``shard``. A shard that
is away fails and backs off its own loops only, and they converge when it
returns, as on one database.

Several daemons may run against one database (or one proxy): events are claimed
(``claim_events``, SKIP LOCKED), ticks are compare-and-swapped
(``claim_routine_tick``), wakeups and stale claims are taken with SKIP
LOCKED, parent wakes are keyed and receipted - none of them is handled
twice. The pool reconnects on its own; until it does, loops fail and back
off, and :class:`controlplane.daemon.loop.DatabaseHealth` logs the loss and
the return of the database once each.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import FrameType
from typing import Any

import psycopg
from prometheus_client import REGISTRY, CollectorRegistry
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from controlplane.client import Office
from controlplane.daemon.config import DaemonConfig
from controlplane.daemon.cron import CronLoop
from controlplane.daemon.loop import DatabaseHealth, Loop, _one_line
from controlplane.daemon.metrics import DaemonMetrics, ShardMetrics, daemon_metrics_for
from controlplane.daemon.recovery import PruneLoop, RecoveryLoop
from controlplane.daemon.stats import StatsLoop
from controlplane.daemon.subscriber_loop import SubscriberLoop
from controlplane.daemon.sweep import SweepLoop
from controlplane.daemon.wakeups import WakeupLoop
from controlplane.metrics_registry import serve_metrics
from controlplane.observability import metrics_for, parent_wake_metrics_for, routine_run_counter
from controlplane.scaleout import shards
from controlplane.scaleout.shards import Database

__all__ = ["Daemon", "Target"]

log = logging.getLogger("controlplane.daemon")


@dataclass(eq=False)
class Target:
    """One database the loops work on, with its own pool, client, health
    and metrics (a shard of a proxy, or the DSN's own database)."""

    database: Database
    registry: CollectorRegistry | None
    metrics: DaemonMetrics
    health: DatabaseHealth
    pool: ConnectionPool[Any]
    office: Office


class Daemon:
    """The control plane's background work for one database, or for every
    shard of a proxy (``config.databases``)."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.registry = registry
        self.stop_event = threading.Event()
        self.targets: list[Target] = []
        self.loops: list[Loop] = []
        self.metrics_port: int | None = None
        self._server: Any = None
        self._shard_metrics: ShardMetrics | None = None
        self._signals = 0

    # --- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Open the pools (without waiting for the databases), start the
        metrics endpoint and every enabled loop on every database."""
        cfg = self.config
        names = [name for name in _FACTORIES if cfg.enabled(name)]
        databases = list(cfg.databases) or [Database(label=None, conninfo=cfg.dsn)]
        sharded = databases[0].label is not None
        if sharded:
            self._shard_metrics = ShardMetrics()
            (REGISTRY if self.registry is None else self.registry).register(self._shard_metrics)
        for database in databases:
            self.targets.append(self._target(database, len(names)))
        self._serve_metrics()
        for target in self.targets:
            for name in names:
                loop = _FACTORIES[name](self, target)
                self.loops.append(loop)
                loop.start()
        if sharded:
            log.info(
                "control plane started on %d shards: %s; loops %s",
                len(databases),
                ", ".join(f"{d.label} ({d.masked})" for d in databases),
                ", ".join(names),
                extra={
                    "loops": names,
                    "consumer": cfg.consumer,
                    "shards": [d.label for d in databases],
                },
            )
        else:
            log.info(
                "control plane started: %s",
                ", ".join(names),
                extra={"loops": names, "consumer": cfg.consumer},
            )

    def _serve_metrics(self) -> None:
        """Start the metrics endpoint (once), if the config asks for one."""
        cfg = self.config
        if cfg.metrics_port is None or self._server is not None:
            return
        self._server = serve_metrics(cfg.metrics_port, cfg.metrics_host, self.registry)
        self.metrics_port = int(self._server.server_port)
        log.info(
            "serving metrics on http://%s:%d/metrics",
            cfg.metrics_host,
            self.metrics_port,
            extra={"port": self.metrics_port},
        )

    def _target(self, database: Database, loops: int) -> Target:
        cfg = self.config
        registry = self.registry
        if self._shard_metrics is not None and database.label is not None:
            registry = self._shard_metrics.add(database.label)
        metrics = daemon_metrics_for(registry)
        pool: ConnectionPool[Any] = ConnectionPool(
            with_lock_timeout(database.conninfo, cfg.lock_timeout),
            min_size=1,
            max_size=max(2, loops + 1),
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, round(cfg.connect_timeout)),
                "application_name": "officectl run",
            },
            timeout=cfg.connect_timeout,
            # After a restart of the server, a pooled connection is dead until
            # used: check before handing one out. Give up reconnecting in the
            # background after a while; the next request starts afresh, so the
            # wait after the database is back stays short.
            check=ConnectionPool.check_connection,
            reconnect_timeout=max(5.0, cfg.connect_timeout * 2),
            open=True,
            name="officectl-run" + (f"-{database.label}" if database.label else ""),
        )
        # Every counter of the clients is served from the start, at zero.
        metrics_for(registry)
        parent_wake_metrics_for(registry)
        routine_run_counter(registry)
        return Target(
            database=database,
            registry=registry,
            metrics=metrics,
            health=DatabaseHealth(metrics, database.label),
            pool=pool,
            office=Office(pool=pool, registry=registry),
        )

    def stop(self) -> None:
        """Ask every loop to stop after its current iteration."""
        self.stop_event.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the loops (at most ``timeout`` seconds overall), then
        close the pool and the metrics endpoint. True when every loop ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        ended = True
        for loop in self.loops:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not loop.join(left):
                ended = False
                log.warning("%s loop did not stop in time", loop.name, extra={"loop": loop.name})
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for target in self.targets:
            target.pool.close(timeout=5.0)
        if self._shard_metrics is not None:
            (REGISTRY if self.registry is None else self.registry).unregister(self._shard_metrics)
            self._shard_metrics = None
        return ended

    def run_forever(self) -> int:
        """``officectl run``: start, wait for SIGTERM/SIGINT, stop cleanly.
        Returns the exit status (0)."""
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            # Served while the DSN is waited for: a scrape shows the daemon is up.
            self._serve_metrics()
            if not self.config.databases and not self._resolve():
                self.join(0)  # stopped before the database answered
                return 0
            self.start()
            while not self.stop_event.wait(0.5):
                pass
            log.info("stopping: finishing the iterations in progress")
            ended = self.join(self.config.shutdown_timeout)
            log.info("control plane stopped" if ended else "control plane stopped (forced)")
            return 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _resolve(self) -> bool:
        """Find the databases to work on (:func:`controlplane.scaleout.shards.resolve`):
        the DSN's own, or every shard of a proxy. A DSN that does not answer
        yet is asked again with backoff; False when stopped meanwhile."""
        streak = 0
        while True:
            try:
                topology = shards.resolve(self.config.dsn)
            except psycopg.OperationalError as exc:
                streak += 1
                delay = min(self.config.max_backoff, 0.5 * 2 ** min(streak - 1, 10))
                log.log(
                    logging.WARNING if streak == 1 else logging.INFO,
                    "database not reachable yet (%s); asking again in %.1f s",
                    _one_line(exc),
                    delay,
                    extra={"event": "database_unavailable"},
                )
                if self.stop_event.wait(delay):
                    return False
                continue
            if topology.proxy is not None:
                self.config = replace(self.config, databases=tuple(topology.databases))
                log.info(
                    "%s is an office proxy (office_proxy %s): working on its %d shards",
                    shards.mask(self.config.dsn),
                    topology.proxy,
                    len(topology.databases),
                    extra={"shards": topology.labels},
                )
            return True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            log.info("%s received: stopping", name, extra={"signal": name})
        else:
            log.warning("%s received again: stopping without waiting", name)
            raise SystemExit(0)
        self.stop()

    # --- loops ------------------------------------------------------------------

    def _common(self, target: Target, interval: float) -> dict[str, Any]:
        return {
            "interval": interval,
            "metrics": target.metrics,
            "health": target.health,
            "stop": self.stop_event,
            "max_backoff": self.config.max_backoff,
            "shard": target.database.label,
        }

    def loop(self, name: str) -> Loop:
        """The running loop called ``name`` (``cron``; ``cron@shard0`` on a
        shard: LookupError if it is not running)."""
        for loop in self.loops:
            if name in (loop.label, loop.name):
                return loop
        raise LookupError(f"no {name} loop is running")


def with_lock_timeout(conninfo: str, seconds: float) -> str:
    """``conninfo`` (key=value or URL) with the server's lock_timeout set for
    the session, after any ``options`` of its own. Set at connect, not by a
    SET: it survives the session reset a pooled connection gets."""
    params = conninfo_to_dict(conninfo)
    options = f"{params.get('options') or ''} -c lock_timeout={round(seconds * 1000)}"
    params["options"] = options.strip()
    return make_conninfo("", **params)


def _subscriber(d: Daemon, t: Target) -> Loop:
    c = d.config
    return SubscriberLoop(
        t.office,
        consumer=c.consumer,
        batch=c.event_batch,
        visibility=c.event_visibility,
        **d._common(t, c.poll_interval),
    )


def _wakeups(d: Daemon, t: Target) -> Loop:
    c = d.config
    return WakeupLoop(
        t.office, batch=c.wakeup_batch, min_age=c.wakeup_min_age, **d._common(t, c.poll_interval)
    )


def _cron(d: Daemon, t: Target) -> Loop:
    c = d.config
    return CronLoop(
        t.office, batch=c.cron_batch, registry=t.registry, **d._common(t, c.poll_interval)
    )


def _sweep(d: Daemon, t: Target) -> Loop:
    c = d.config
    return SweepLoop(t.office, batch=c.sweep_batch, **d._common(t, c.sweep_interval))


def _recovery(d: Daemon, t: Target) -> Loop:
    c = d.config
    return RecoveryLoop(t.office, stale_after=c.stale_after, **d._common(t, c.recover_interval))


def _prune(d: Daemon, t: Target) -> Loop:
    c = d.config
    return PruneLoop(t.office, retention=c.retention, **d._common(t, c.prune_interval))


def _stats(d: Daemon, t: Target) -> Loop:
    c = d.config
    return StatsLoop(t.office, **d._common(t, c.stats_interval))


_FACTORIES: dict[str, Callable[[Daemon, Target], Loop]] = {
    "subscriber": _subscriber,
    "wakeups": _wakeups,
    "cron": _cron,
    "sweep": _sweep,
    "recovery": _recovery,
    "prune": _prune,
    "stats": _stats,
}
