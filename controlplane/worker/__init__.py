"""The worker side of the run queue: claim a run, call the handler, keep the
claim alive with heartbeats, write the outcome fenced by the attempt, stop
cleanly (docs/api.md §3).

``Worker(office, handler)`` (threads, psycopg) and
``AsyncWorker(async_office, async_handler)`` (asyncio, asyncpg) share every
decision; only the I/O differs. ``officectl worker`` is a thin wrapper over
them (:mod:`controlplane.cli.worker`).

* **Claims.** Up to ``concurrency`` handlers run at once, each on a run of a
  different agent (``claim_run`` hands out at most one claimed run per
  agent). After a handler ends the worker claims again at once; when
  ``claim_run`` returns nothing it waits for ``NOTIFY office_runs`` or
  ``poll`` seconds, whichever comes first. The ``edge`` signal of
  ``office.notify`` is only sent when no worker is bound to come for the
  agent, which is why claiming again after every handler matters. A lost
  LISTEN connection falls back to polling and reconnects with backoff.
  On a proxy DSN (docs/api.md §8) the claims and every write still go through
  the proxy, and the worker LISTENs on every shard of ``office_cluster``
  (:mod:`controlplane.scaleout.shards`; a proxy relays no NOTIFY), one connection
  each, a shard's loss logged for that shard (docs/scale-out.md says why).
* **Heartbeats.** Every ``heartbeat`` seconds, ``heartbeat_run(id, attempt)``
  for each run in flight, on a connection of the worker's own (a slow
  handler or a busy pool cannot starve it). False means the run was taken
  away (recovered, cancelled, claimed again, stopped by a budget): an async
  handler is cancelled, a sync one is told through its context's
  ``cancelled``; either way its outcome is not written, and one WARNING names
  the run.
* **Outcomes.** The handler returns → ``finish_run``; it raises
  :class:`Retry` → ``retry_run`` with its delay; it raises
  :class:`Transient` (or an exception of a type given as ``transient=``) →
  ``fail_run(..., retryable => true)``, which queues the run again after the
  agent's back-off while its ``max_retries`` allow (docs/api.md §9); anything
  else → ``fail_run`` with ``"<ExceptionType>: <message>"`` cut to 64 KiB.
* **Timeout.** With ``timeout=`` seconds, a handler still running after it
  fails its run retryably (:class:`HandlerTimeout`): an async handler is
  cancelled; a sync one cannot be stopped, so its thread is abandoned to it
  (a new thread takes its place, and what it returns is not written).
* **The run's context.** :func:`current_run_context` gives a handler its
  run and ``cancelled``, an event set when the run is no longer the
  worker's (a refused heartbeat, the timeout): a sync handler checks it
  between steps, since only an async one can be cancelled from outside. Every
  write (and every heartbeat) is fenced by ``attempt`` and, on a 0.5.0
  schema, by the worker's id, so a write that comes late (after an outage,
  after the run was recovered) is exactly right or refused, and no other
  worker's call can act on the run.
* **Shutdown.** :meth:`Worker.stop` (or SIGTERM/SIGINT when ``run`` is in the
  main thread) stops claiming at once; handlers in flight get ``grace``
  seconds, then their runs are handed back with ``retry_run(id, attempt, 0)``.
  ``stop(force=True)`` (a second signal) skips the grace.
* **Database loss.** Every call is retried with backoff; the loss and the
  return are logged once each (:class:`controlplane.daemon.loop.DatabaseHealth`).

Metrics (prometheus_client, the daemon's conventions):
``office_worker_runs_total{outcome}`` (finished, failed, retried, lost,
returned), ``office_worker_handler_seconds``,
``office_worker_heartbeats_total{result}`` (sent, lost),
``office_worker_claim_seconds``, ``office_worker_in_flight``. Logs go to the
``controlplane.worker`` logger; the loss and return of the database to
``controlplane.daemon``, in the daemon's words.
"""

from __future__ import annotations

from controlplane.worker.aio import AsyncWorker
from controlplane.worker.context import RunContext, current_run_context
from controlplane.worker.core import CHANNEL, default_worker_id
from controlplane.worker.handler import (
    HandlerError,
    HandlerTimeout,
    Retry,
    Transient,
    UndecodableRun,
    failure_text,
    is_async_handler,
    load_handler,
)
from controlplane.worker.metrics import WorkerMetrics, worker_metrics_for
from controlplane.worker.sync import Worker

__all__ = [
    "CHANNEL",
    "AsyncWorker",
    "HandlerError",
    "HandlerTimeout",
    "Retry",
    "RunContext",
    "Transient",
    "UndecodableRun",
    "Worker",
    "WorkerMetrics",
    "current_run_context",
    "default_worker_id",
    "failure_text",
    "is_async_handler",
    "load_handler",
    "worker_metrics_for",
]
