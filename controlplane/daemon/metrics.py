"""The daemon's own Prometheus metrics, next to the counters of the clients
(``office_run_dedup_total``, ``office_run_dedup_keyless_total``,
``office_run_coalesced_total``, the parent-wake counters and
``office_loop_routine_run_total``, which the clients of the daemon increment
in the same registry).

Loops:

* ``office_loop_seconds{loop}`` - histogram of iteration durations;
* ``office_loop_errors_total{loop}`` - iterations that failed;
* ``office_loop_last_success_timestamp_seconds{loop}`` - when each loop last
  completed an iteration (alert when it stops moving);
* ``office_database_up`` - 1 while the last database call succeeded.

Work done:

* ``office_events_handled_total{topic,action}`` - outbox events, by what the
  subscriber did (enqueued, skipped, ignored, failed);
* ``office_wakeups_dispatched_total{status}`` - queued wakeups the daemon
  dispatched (claimed, coalesced, skipped, noop, failed, queued = raised,
  set_aside = raised and set aside as poison);
* ``office_routine_ticks_total{outcome}`` - cron ticks: fired, lost (another
  daemon claimed it), armed, rearmed, error;
* ``office_runs_recovered_total``, ``office_runs_pruned_total``,
  ``office_events_pruned_total``, ``office_wake_decisions_pruned_total``;
* ``office_poison_total{loop}`` - rows a loop set aside because it cannot
  process them (``office.poison``), each counted once, by the daemon that
  reported it: alert on any increase.

Gauges read from the database every ``stats_interval``:

* ``office_outbox_lag_seconds`` - age of the oldest unacknowledged event (0
  when none): the one to alert on;
* ``office_outbox_pending_events``, ``office_wakeups_queued``,
  ``office_routine_triggers_due``, ``office_runs{status}``,
  ``office_oldest_claim_age_seconds``;
* ``office_poison_rows{loop}`` - rows set aside now (released rows leave it);
* ``office_dedup_stats{queue,reason,kind}`` - the database's own dedup
  counters (``office.dedup_stats``): every suppression, whichever client made
  it. Durable dedup is normal (a late redelivery lands there); it is not an
  anomaly to alert on.
* ``office_runs_held{held_by}`` - queued runs a hold keeps from being claimed
  now (``office.governance_stats``: paused, budget, not_before, cooldown,
  run_cap), summed over agents;
* ``office_wake_decisions{decision}`` - rows of ``office.wake_decisions`` by
  decision (guarded, pulled_forward, budget_warning, budget_exhausted), until
  pruned: alert on guarded rising (a loop cut short) and on budget_exhausted;
* ``office_budget_spend_ratio{scope,scope_id}`` - spend in the current period
  over the budget, per scope with a budget (1 = reached: its runs are held; a
  budget of 0 reads 1).

On a proxy DSN (the loops run on every shard, :mod:`controlplane.scaleout.shards`)
each shard's loops and clients count in a registry of their own, and
:class:`ShardMetrics` serves all of them with a ``shard`` label added: the
same names, one series per shard (a gauge of one shard never overwrites
another's).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["DaemonMetrics", "ShardMetrics", "daemon_metrics_for"]

LOOP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class DaemonMetrics:
    """The daemon's metrics, registered in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        r = registry
        self.loop_seconds = Histogram(
            "office_loop_seconds",
            "Duration of one iteration of a control-plane loop.",
            ["loop"],
            buckets=LOOP_BUCKETS,
            registry=r,
        )
        self.loop_errors = Counter(
            "office_loop_errors_total", "Loop iterations that failed.", ["loop"], registry=r
        )
        self.loop_last_success = Gauge(
            "office_loop_last_success_timestamp_seconds",
            "Unix time of the last iteration of a loop that completed.",
            ["loop"],
            registry=r,
        )
        self.database_up = Gauge(
            "office_database_up", "1 while the last database call succeeded, else 0.", registry=r
        )
        self.events = Counter(
            "office_events_handled_total",
            "Outbox events handled by the subscriber, by topic and action.",
            ["topic", "action"],
            registry=r,
        )
        self.wakeups = Counter(
            "office_wakeups_dispatched_total",
            "Queued wakeup requests dispatched by the daemon, by the status they reached.",
            ["status"],
            registry=r,
        )
        self.ticks = Counter(
            "office_routine_ticks_total",
            "Cron ticks looked at: fired, lost (claimed by another daemon), armed, rearmed, error.",
            ["outcome"],
            registry=r,
        )
        self.runs_recovered = Counter(
            "office_runs_recovered_total",
            "Stale claimed runs returned to the queue (recover_stale_runs).",
            registry=r,
        )
        self.runs_pruned = Counter(
            "office_runs_pruned_total", "Finished runs deleted (prune_runs).", registry=r
        )
        self.events_pruned = Counter(
            "office_events_pruned_total", "Acknowledged events deleted (prune_events).", registry=r
        )
        self.wake_decisions_pruned = Counter(
            "office_wake_decisions_pruned_total",
            "Wake decisions deleted (prune_wake_decisions).",
            registry=r,
        )
        self.poison = Counter(
            "office_poison_total",
            "Rows a loop set aside because it cannot process them (office.poison), by loop.",
            ["loop"],
            registry=r,
        )
        self.outbox_lag = Gauge(
            "office_outbox_lag_seconds",
            "Age of the oldest unacknowledged outbox event (0 when there is none).",
            registry=r,
        )
        self.outbox_pending = Gauge(
            "office_outbox_pending_events", "Unacknowledged outbox events.", registry=r
        )
        self.wakeups_queued = Gauge(
            "office_wakeups_queued", "Wakeup requests waiting to be dispatched.", registry=r
        )
        self.triggers_due = Gauge(
            "office_routine_triggers_due", "Cron triggers due (or not armed) now.", registry=r
        )
        self.runs = Gauge("office_runs", "Runs by status.", ["status"], registry=r)
        self.poison_rows = Gauge(
            "office_poison_rows",
            "Rows set aside (office.poison) now, by loop, whichever daemon set them aside.",
            ["loop"],
            registry=r,
        )
        self.oldest_claim_age = Gauge(
            "office_oldest_claim_age_seconds",
            "Age of the oldest claimed run (0 when none): a worker may be stuck.",
            registry=r,
        )
        self.dedup_stats = Gauge(
            "office_dedup_stats",
            "The database's dedup counters (office.dedup_stats), every client included.",
            ["queue", "reason", "kind"],
            registry=r,
        )
        self.runs_held = Gauge(
            "office_runs_held",
            "Queued runs held from being claimed now, by hold (office.governance_stats).",
            ["held_by"],
            registry=r,
        )
        self.wake_decisions = Gauge(
            "office_wake_decisions",
            "Rows of office.wake_decisions by decision, until pruned.",
            ["decision"],
            registry=r,
        )
        self.budget_spend_ratio = Gauge(
            "office_budget_spend_ratio",
            "Spend in the current period over the budget, per scope with a budget.",
            ["scope", "scope_id"],
            registry=r,
        )


_lock = threading.Lock()
_by_registry: dict[int, DaemonMetrics] = {}


def daemon_metrics_for(registry: CollectorRegistry | None = None) -> DaemonMetrics:
    """The daemon metrics of ``registry`` (default: the global registry),
    created on first use and shared by every daemon in the process."""
    target = REGISTRY if registry is None else registry
    with _lock:
        metrics = _by_registry.get(id(target))
        if metrics is None or metrics.registry is not target:
            metrics = DaemonMetrics(target)
            _by_registry[id(target)] = metrics
        return metrics


class ShardMetrics(Collector):
    """Every metric of the shards' registries, each sample labelled with its
    shard, as one collector of the served registry."""

    def __init__(self) -> None:
        self._registries: dict[str, CollectorRegistry] = {}

    def add(self, shard: str) -> CollectorRegistry:
        """A new registry for ``shard``'s loops and clients."""
        registry = CollectorRegistry(auto_describe=True)
        self._registries[shard] = registry
        return registry

    def describe(self) -> list[Metric]:
        # Nothing to check against the served registry's names: the shards'
        # metrics are served only through this collector.
        return []

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for shard, registry in self._registries.items():
            for family in registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                merged.samples.extend(
                    s._replace(labels={**s.labels, "shard": shard}) for s in family.samples
                )
        yield from families.values()
