"""Every prometheus series a process of office declares is documented in
docs/operations.md, and every series that document names is declared (pure
Python, no server).

A series is declared in the metrics module of the process kind that counts
it: the client library in any process (``controlplane/observability.py``),
the daemon (``controlplane/daemon/metrics.py``), the worker
(``controlplane/worker/metrics.py``). This builds each on a fresh registry
and reads the names back, so a series added, renamed or removed without its
documentation fails here."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from controlplane.daemon.metrics import DaemonMetrics
from controlplane.observability import DedupMetrics, ParentWakeMetrics, routine_run_counter
from controlplane.worker.metrics import WorkerMetrics

OPERATIONS = Path(__file__).parents[2] / "docs" / "operations.md"

#: How the document writes a series: an office_ name in backquotes that is not
#: a role, a server, a channel or an extension (those are listed here;
#: ``office_runs`` is both a channel and the daemon's gauge, so it is kept).
NOT_SERIES = {
    "office_producer",
    "office_worker",
    "office_reader",
    "office_admin",
    "office_daemon",
    "office_cron",
    "office_cluster",
    "office_proxy",
    "office_wakeups",
    "office_demo",
}


def declared() -> set[str]:
    registry = CollectorRegistry()
    DedupMetrics(registry)
    ParentWakeMetrics(registry)
    routine_run_counter(registry)
    DaemonMetrics(registry)
    WorkerMetrics(registry)
    return {family.name for family in registry.collect()}


def documented() -> set[str]:
    names = re.findall(r"`(office_[a-z_]+)(?:\{[^}`]*\})?", OPERATIONS.read_text())
    return set(names) - NOT_SERIES


def _base(name: str) -> str:
    # prometheus_client reports a counter's family without its _total suffix.
    return name.removesuffix("_total")


def test_every_declared_series_is_documented() -> None:
    docs = {_base(name) for name in documented()}
    assert sorted(declared() - docs) == []


def test_every_documented_series_is_declared() -> None:
    assert sorted({_base(name) for name in documented()} - declared()) == []


def test_the_scan_finds_series_and_skips_roles() -> None:
    assert "office_worker_runs_total" in documented()
    assert "office_admin" not in documented()
