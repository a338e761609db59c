"""The daemon's settings (``officectl run`` options) and the duration syntax
its options accept."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from datetime import timedelta

from controlplane.scaleout.shards import Database

__all__ = [
    "LOOP_NAMES",
    "STALE_AFTER",
    "STALE_AFTER_WITHOUT_LEASES",
    "DaemonConfig",
    "default_consumer",
    "parse_duration",
]

#: Every loop the daemon can run, in start order.
LOOP_NAMES: tuple[str, ...] = (
    "subscriber",
    "wakeups",
    "cron",
    "sweep",
    "recovery",
    "prune",
    "stats",
)

#: The recovery threshold for heart-beating workers (a few missed heartbeats).
STALE_AFTER = 2 * 60.0
#: The threshold against a schema without leases (before 0.4.0): 0.3.0's
#: default, measured from the claim, which nothing there can renew.
STALE_AFTER_WITHOUT_LEASES = 15 * 60.0

_DURATION = re.compile(r"\A\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*\Z")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str | float | int | timedelta) -> float:
    """Seconds from ``1.5``, ``500ms``, ``30s``, ``15m``, ``2h`` or ``7d``
    (a bare number is seconds). A negative or malformed value is ValueError."""
    if isinstance(text, timedelta):
        seconds = text.total_seconds()
    elif isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(text)
        if match is None:
            raise ValueError(
                f"invalid duration {text!r}: expected a number with an optional unit "
                "ms, s, m, h or d (e.g. 500ms, 30s, 15m, 7d)"
            )
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
    if seconds < 0:
        raise ValueError(f"invalid duration {text!r}: must not be negative")
    return seconds


def default_consumer() -> str:
    """The outbox consumer name of this process (recorded on claimed events)."""
    return f"officectl-run@{socket.gethostname()}:{os.getpid()}"


@dataclass
class DaemonConfig:
    """What ``officectl run`` does and how often. Intervals are seconds.

    A loop that found a full batch goes again at once; one that found less
    sleeps its interval. A loop whose iteration failed backs off (doubling
    from ``min(interval, 1 s)`` up to ``max_backoff``).
    """

    dsn: str
    #: Outbox consumer name (default: officectl-run@host:pid).
    consumer: str = field(default_factory=default_consumer)
    #: Poll interval of the subscriber, wakeup and cron loops when idle.
    poll_interval: float = 1.0
    event_batch: int = 100
    #: How long claimed events stay hidden from other consumers.
    event_visibility: float = 30.0
    wakeup_batch: int = 50
    #: Leave a queued wakeup this long to the producer that requested it.
    wakeup_min_age: float = 0.0
    cron_batch: int = 100
    sweep_interval: float = 30.0
    #: Stuck parents reconciled per sweep call (docs/domain.md §2.20: 5 a tick).
    sweep_batch: int = 5
    recover_interval: float = 60.0
    #: A claimed run whose last heartbeat (its claim, if it never sent one) is
    #: older than this is returned to the queue (recover_stale_runs). None:
    #: :data:`STALE_AFTER`, short because workers heartbeat (heartbeat_run), or
    #: :data:`STALE_AFTER_WITHOUT_LEASES` on a schema before 0.4.0, where no
    #: claim can be renewed. A fleet whose workers do not heartbeat must set
    #: it longer than its longest run (docs/operations.md, "Leases").
    stale_after: float | None = None
    prune_interval: float = 3600.0
    #: Finished runs and acknowledged events older than this are deleted.
    retention: float = 7 * 86400.0
    #: How often the gauges (outbox lag, queue sizes) are read.
    stats_interval: float = 5.0
    max_backoff: float = 30.0
    #: Serve Prometheus metrics on this port (None: no HTTP server; 0: any free port).
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: Loops not to run (names of :data:`LOOP_NAMES`).
    disabled: frozenset[str] = frozenset()
    #: Seconds to wait for the loops to finish their iteration on shutdown.
    shutdown_timeout: float = 30.0
    #: Seconds to wait for a connection from the pool before an iteration fails.
    connect_timeout: float = 5.0
    #: The longest a loop's statement waits for a lock (the server's
    #: lock_timeout on the daemon's connections; 0: no limit). A producer's
    #: open transaction can hold a lock an event or a wakeup needs for as long
    #: as it likes: the loop leaves that row for a later pass and goes on with
    #: the others, rather than stall behind it.
    lock_timeout: float = 5.0
    #: The databases the loops run on: empty for ``dsn``'s own (``run_forever``
    #: fills in the shards when ``dsn`` is a proxy, :mod:`controlplane.scaleout.shards`).
    databases: tuple[Database, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.disabled) - set(LOOP_NAMES)
        if unknown:
            raise ValueError(
                f"unknown loop {sorted(unknown)[0]!r} (expected one of {', '.join(LOOP_NAMES)})"
            )
        for name in ("event_batch", "wakeup_batch", "cron_batch", "sweep_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in (
            "poll_interval",
            "event_visibility",
            "sweep_interval",
            "recover_interval",
            "prune_interval",
            "stats_interval",
            "max_backoff",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")
        for name in ("wakeup_min_age", "stale_after", "retention", "lock_timeout"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, not {getattr(self, name)}")

    def enabled(self, loop: str) -> bool:
        return loop not in self.disabled
