"""The worker's metrics (prometheus_client, the daemon's conventions)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controlplane.daemon.metrics import LOOP_BUCKETS
from controlplane.metrics_registry import per_registry

HANDLER_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
)  # fmt: skip

# --- metrics ----------------------------------------------------------------------


class WorkerMetrics:
    """The worker's metrics, registered in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        r = registry
        self.runs = Counter(
            "office_worker_runs_total",
            "Claimed runs by how they ended: finished, failed, retried, lost"
            " (taken away or refused), returned (handed back at shutdown).",
            ["outcome"],
            registry=r,
        )
        self.handler_seconds = Histogram(
            "office_worker_handler_seconds",
            "Duration of one handler call.",
            buckets=HANDLER_BUCKETS,
            registry=r,
        )
        self.heartbeats = Counter(
            "office_worker_heartbeats_total",
            "Heartbeats of runs in flight: sent (the run is still ours) or lost.",
            ["result"],
            registry=r,
        )
        self.claim_seconds = Histogram(
            "office_worker_claim_seconds",
            "Duration of one claim_run call.",
            buckets=LOOP_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "office_worker_in_flight", "Runs claimed and not yet ended.", registry=r
        )
        # Every series exists from the start, at zero.
        for outcome in ("finished", "failed", "retried", "lost", "returned"):
            self.runs.labels(outcome=outcome)
        for result in ("sent", "lost"):
            self.heartbeats.labels(result=result)


def worker_metrics_for(registry: CollectorRegistry | None = None) -> WorkerMetrics:
    """The worker metrics of ``registry`` (default: the global registry),
    created on first use and shared by every worker in the process."""
    return per_registry(WorkerMetrics, registry)
