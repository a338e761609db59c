"""The daemon: one thread per loop over one connection pool, a Prometheus
endpoint, and a clean stop.

``Daemon(config).run_forever()`` is ``officectl run``: it installs SIGTERM
and SIGINT handlers, starts the loops and waits; on a signal every loop
finishes the iteration it is in (the subscriber its batch: it acknowledges
what it handled, so no claimed event is left hidden) and the process exits
0. ``start()``/``stop()``/``join()`` run it inside another program (the
demo does).

Several daemons may run against one database: events are claimed
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
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from psycopg_pool import ConnectionPool

from controlplane.client import Office
from controlplane.daemon.config import DaemonConfig
from controlplane.daemon.cron import CronLoop
from controlplane.daemon.loop import DatabaseHealth, Loop
from controlplane.daemon.metrics import DaemonMetrics, daemon_metrics_for
from controlplane.daemon.recovery import PruneLoop, RecoveryLoop
from controlplane.daemon.stats import StatsLoop
from controlplane.daemon.subscriber_loop import SubscriberLoop
from controlplane.daemon.sweep import SweepLoop
from controlplane.daemon.wakeups import WakeupLoop
from controlplane.observability import metrics_for, parent_wake_metrics_for, routine_run_counter

__all__ = ["Daemon"]

log = logging.getLogger("controlplane.daemon")


class Daemon:
    """The control plane's background work for one database."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.registry = registry
        self.metrics: DaemonMetrics = daemon_metrics_for(registry)
        self.health = DatabaseHealth(self.metrics)
        self.stop_event = threading.Event()
        self.loops: list[Loop] = []
        self.office: Office | None = None
        self.pool: ConnectionPool[Any] | None = None
        self.metrics_port: int | None = None
        self._server: Any = None
        self._signals = 0

    # --- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Open the pool (without waiting for the database), start the
        metrics endpoint and every enabled loop."""
        cfg = self.config
        names = [name for name in _FACTORIES if cfg.enabled(name)]
        self.pool = ConnectionPool(
            cfg.dsn,
            min_size=1,
            max_size=max(2, len(names) + 1),
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
            name="officectl-run",
        )
        self.office = Office(pool=self.pool, registry=self.registry)
        # Every counter of the clients is served from the start, at zero.
        metrics_for(self.registry)
        parent_wake_metrics_for(self.registry)
        routine_run_counter(self.registry)
        if cfg.metrics_port is not None:
            kwargs: dict[str, Any] = {"addr": cfg.metrics_host}
            if self.registry is not None:
                kwargs["registry"] = self.registry
            self._server, _ = start_http_server(cfg.metrics_port, **kwargs)
            self.metrics_port = int(self._server.server_port)
            log.info(
                "serving metrics on http://%s:%d/metrics",
                cfg.metrics_host,
                self.metrics_port,
                extra={"port": self.metrics_port},
            )
        for name in names:
            loop = _FACTORIES[name](self)
            self.loops.append(loop)
            loop.start()
        log.info(
            "control plane started: %s",
            ", ".join(names),
            extra={"loops": names, "consumer": cfg.consumer},
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
        if self.pool is not None:
            self.pool.close(timeout=5.0)
        return ended

    def run_forever(self) -> int:
        """``officectl run``: start, wait for SIGTERM/SIGINT, stop cleanly.
        Returns the exit status (0)."""
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
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

    def _common(self, interval: float) -> dict[str, Any]:
        assert self.office is not None
        return {
            "interval": interval,
            "metrics": self.metrics,
            "health": self.health,
            "stop": self.stop_event,
            "max_backoff": self.config.max_backoff,
        }

    def loop(self, name: str) -> Loop:
        """The running loop called ``name`` (LookupError if it is not running)."""
        for loop in self.loops:
            if loop.name == name:
                return loop
        raise LookupError(f"no {name} loop is running")


def _subscriber(d: Daemon) -> Loop:
    c = d.config
    assert d.office is not None
    return SubscriberLoop(
        d.office,
        consumer=c.consumer,
        batch=c.event_batch,
        visibility=c.event_visibility,
        **d._common(c.poll_interval),
    )


def _wakeups(d: Daemon) -> Loop:
    c = d.config
    assert d.office is not None
    return WakeupLoop(
        d.office, batch=c.wakeup_batch, min_age=c.wakeup_min_age, **d._common(c.poll_interval)
    )


def _cron(d: Daemon) -> Loop:
    c = d.config
    assert d.office is not None
    return CronLoop(d.office, batch=c.cron_batch, registry=d.registry, **d._common(c.poll_interval))


def _sweep(d: Daemon) -> Loop:
    c = d.config
    assert d.office is not None
    return SweepLoop(d.office, batch=c.sweep_batch, **d._common(c.sweep_interval))


def _recovery(d: Daemon) -> Loop:
    c = d.config
    assert d.office is not None
    return RecoveryLoop(d.office, stale_after=c.stale_after, **d._common(c.recover_interval))


def _prune(d: Daemon) -> Loop:
    c = d.config
    assert d.office is not None
    return PruneLoop(d.office, retention=c.retention, **d._common(c.prune_interval))


def _stats(d: Daemon) -> Loop:
    c = d.config
    assert d.office is not None
    return StatsLoop(d.office, **d._common(c.stats_interval))


_FACTORIES = {
    "subscriber": _subscriber,
    "wakeups": _wakeups,
    "cron": _cron,
    "sweep": _sweep,
    "recovery": _recovery,
    "prune": _prune,
    "stats": _stats,
}
