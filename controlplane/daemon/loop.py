"""One background loop of the daemon, run in its own thread.

Each iteration is short and holds nothing across iterations (no transaction,
no lock): an iteration is one or a few autocommit calls of the SQL API. A
loop whose iteration found a full batch goes again at once; otherwise it
sleeps its interval. A failing iteration is logged and the loop backs off
(doubling, with jitter, up to ``max_backoff``); it never ends the process. A
lost database connection is logged once by :class:`DatabaseHealth` (and its
return once), whichever loop notices first. On a proxy DSN each shard has its
loops, its health and its metrics (:mod:`controlplane.scaleout.shards`): a loop
knows its ``shard``, names it in its thread and its logs, and a shard that
is away fails only its own loops.

A row a loop cannot process is set aside in ``office.poison`` (by the loop's
SQL function, or by the loop itself for what it cannot decode) and its scan
leaves it out from then on. After each iteration a loop that has rows to set
aside takes the new ones of its own (``office.take_poison_reports``: each is
handed to exactly one daemon) and logs each once at ERROR with the row's id
and counts it (``office_poison_total{loop}``), whoever set it aside.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from abc import ABC, abstractmethod

import psycopg

from controlplane.client import Office
from controlplane.daemon.logs import set_shard
from controlplane.daemon.metrics import DaemonMetrics

__all__ = ["DatabaseHealth", "Loop", "is_connection_error"]

log = logging.getLogger("controlplane.daemon")

#: A schema older than 0.4.0 has no office.poison: look again this often.
POISON_RECHECK = 300.0
UNDEFINED_FUNCTION = "42883"


def is_connection_error(exc: BaseException) -> bool:
    """A lost or unreachable database (including a pool timeout and an
    administrator shutdown of the server), as opposed to a failed statement."""
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


class DatabaseHealth:
    """Whether the database answered the last call, shared by every loop:
    logs the loss and the return of the connection once each (and sets
    ``office_database_up`` when given the daemon's metrics; a worker has none).
    ``shard``: the shard of a proxy this is the health of (named in the logs)."""

    #: Seconds after a loss during which a success is not taken as the return.
    SETTLE = 1.0

    def __init__(self, metrics: DaemonMetrics | None, shard: str | None = None) -> None:
        self.metrics = metrics
        self.shard = shard
        self._where = f"shard {shard}: " if shard else ""
        self._fields = {"shard": shard} if shard else {}
        self._lock = threading.Lock()
        self._up: bool | None = None
        self._down_since = 0.0

    @property
    def up(self) -> bool:
        return bool(self._up)

    def ok(self, started: float) -> None:
        """A call begun at ``started`` (``time.perf_counter()``) succeeded. One
        begun before the loss was recorded, or within :attr:`SETTLE` seconds
        after it, is not the connection's return: a thread can get the reply
        of a call that succeeded just before an outage after another thread
        has logged the outage, and a server shutting down ends its backends
        one by one, so a pooled connection whose backend has not ended yet
        still answers after another's loss was logged. Taking either as the
        return would log one outage as two."""
        with self._lock:
            was = self._up
            if was is False and started < self._down_since + self.SETTLE:
                return
            self._up = True
        if self.metrics is not None:
            self.metrics.database_up.set(1)
        if was is False:
            log.warning(
                "%sdatabase connection restored after %.1f s",
                self._where,
                time.perf_counter() - self._down_since,
                extra={"event": "database_restored", **self._fields},
            )

    def lost(self, loop: str, exc: BaseException, retry_in: float) -> None:
        with self._lock:
            was = self._up
            self._up = False
            if was is not False:
                self._down_since = time.perf_counter()
        if self.metrics is not None:
            self.metrics.database_up.set(0)
        if was is not False:
            log.warning(
                "%sdatabase connection lost (%s loop): %s; reconnecting with backoff",
                self._where,
                loop,
                _one_line(exc),
                extra={"event": "database_lost", "loop": loop, **self._fields},
            )
        else:
            log.info(
                "%sdatabase still unavailable (%s loop): %s; next try in %.1f s",
                self._where,
                loop,
                _one_line(exc),
                retry_in,
                extra={"event": "database_unavailable", "loop": loop, **self._fields},
            )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Loop(ABC):
    """A named loop: :meth:`iterate` until :attr:`stop` is set."""

    #: The loop's name (a label of its metrics).
    name: str = "loop"
    #: What the ids of the rows this loop sets aside name (None: it has no
    #: rows it could set aside, and reports none).
    poison_kind: str | None = None

    def __init__(
        self,
        office: Office,
        *,
        interval: float,
        metrics: DaemonMetrics,
        health: DatabaseHealth,
        stop: threading.Event,
        max_backoff: float = 30.0,
        shard: str | None = None,
    ) -> None:
        self.office = office
        #: The shard of a proxy this loop works on (None: the DSN's database).
        self.shard = shard
        #: The loop's name in logs and thread names: ``cron@shard0`` on a shard.
        self.label = f"{self.name}@{shard}" if shard else self.name
        self.interval = interval
        self.metrics = metrics
        self.health = health
        self.stop = stop
        self.max_backoff = max(max_backoff, min(interval, 1.0))
        self.iterations = 0
        self.failures = 0
        self._thread: threading.Thread | None = None
        self._no_poison_until = 0.0

    @abstractmethod
    def iterate(self) -> bool:
        """One iteration; True when more work is waiting (go again at once)."""

    # --- running ---------------------------------------------------------------

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name=f"office-{self.label}", daemon=True)
        self._thread = thread
        thread.start()
        return thread

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has ended."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def run(self) -> None:
        """The loop: iterate, time it, sleep or back off; returns once
        :attr:`stop` is set (after the iteration in progress)."""
        set_shard(self.shard)
        streak = 0
        log.debug("%s loop started (every %.3g s)", self.label, self.interval)
        while not self.stop.is_set():
            started = time.perf_counter()
            try:
                more = self.iterate()
                self.report_poison()
            except Exception as exc:
                self.metrics.loop_seconds.labels(loop=self.name).observe(
                    time.perf_counter() - started
                )
                self.metrics.loop_errors.labels(loop=self.name).inc()
                self.failures += 1
                streak += 1
                delay = self.backoff(streak)
                if is_connection_error(exc):
                    self.health.lost(self.label, exc, delay)
                else:
                    log.error(
                        "%s loop iteration failed: %s; retrying in %.1f s",
                        self.label,
                        _one_line(exc),
                        delay,
                        exc_info=log.isEnabledFor(logging.DEBUG),
                        extra={"loop": self.name, "error": type(exc).__name__},
                    )
                self.stop.wait(delay)
                continue
            self.metrics.loop_seconds.labels(loop=self.name).observe(time.perf_counter() - started)
            self.metrics.loop_last_success.labels(loop=self.name).set(time.time())
            self.iterations += 1
            self.health.ok(started)
            if streak:
                log.info(
                    "%s loop recovered after %d failed iterations",
                    self.label,
                    streak,
                    extra={"loop": self.name},
                )
                streak = 0
            if not more:
                self.stop.wait(self.interval)
        log.debug("%s loop stopped", self.label)

    def report_poison(self) -> int:
        """Log once at ERROR and count each row of this loop set aside since
        the last report (by any daemon or by hand); returns how many."""
        if self.poison_kind is None or time.monotonic() < self._no_poison_until:
            return 0
        try:
            rows = self.office.take_poison_reports(self.name)
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != UNDEFINED_FUNCTION:
                raise
            # A schema older than this daemon (officectl migrate pending):
            # the loop works, there is just nothing to report from.
            if not self._no_poison_until:
                log.warning(
                    "%s loop: office.take_poison_reports is missing (schema older than 0.4.0);"
                    " rows set aside are not reported until officectl migrate",
                    self.name,
                    extra={"loop": self.name},
                )
            self._no_poison_until = time.monotonic() + POISON_RECHECK
            return 0
        for row in rows:
            self.metrics.poison.labels(loop=self.name).inc()
            log.error(
                "%s loop set aside %s %s: %s",
                self.name,
                self.poison_kind,
                row.row_id,
                row.reason,
                extra={
                    "event": "poison",
                    "loop": self.name,
                    "row_id": row.row_id,
                    "sqlstate": row.sqlstate,
                },
            )
        return len(rows)

    def backoff(self, streak: int) -> float:
        """Seconds to wait after the ``streak``-th failure in a row: doubling
        from ``min(interval, 1 s)``, at most ``max_backoff``, ±20 % jitter."""
        base = max(0.05, min(self.interval, 1.0))
        delay = min(self.max_backoff, base * 2 ** min(streak - 1, 30))
        return float(delay * random.uniform(0.8, 1.2))
