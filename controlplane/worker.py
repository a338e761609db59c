"""The worker side of the run queue: claim a run, call the handler, keep the
claim alive with heartbeats, write the outcome fenced by the attempt, stop
cleanly (API.md §3).

``Worker(office, handler)`` (threads, psycopg) and
``AsyncWorker(async_office, async_handler)`` (asyncio, asyncpg) share every
decision; only the I/O differs. ``officectl worker`` is a thin wrapper over
them (:mod:`controlplane.cli_worker`).

* **Claims.** Up to ``concurrency`` handlers run at once, each on a run of a
  different agent (``claim_run`` hands out at most one claimed run per
  agent). After a handler ends the worker claims again at once; when
  ``claim_run`` returns nothing it waits for ``NOTIFY office_runs`` or
  ``poll`` seconds, whichever comes first. The ``edge`` signal of
  ``office.notify`` is only sent when no worker is bound to come for the
  agent, which is why claiming again after every handler matters. A lost
  LISTEN connection falls back to polling and reconnects with backoff.
* **Heartbeats.** Every ``heartbeat`` seconds, ``heartbeat_run(id, attempt)``
  for each run in flight, on a connection of the worker's own (a slow
  handler or a busy pool cannot starve it). False means the run was taken
  away (recovered, cancelled, claimed again): an async handler is cancelled,
  a sync one is left to finish; either way its outcome is not written, and
  one WARNING names the run.
* **Outcomes.** The handler returns → ``finish_run``; it raises
  :class:`Retry` → ``retry_run`` with its delay; anything else →
  ``fail_run`` with ``"<ExceptionType>: <message>"`` cut to 64 KiB. Every
  write is fenced by ``attempt``, so a write that comes late (after an
  outage, after the run was recovered) is exactly right or refused.
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

import asyncio
import importlib
import inspect
import logging
import math
import os
import queue
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from functools import partial
from types import FrameType
from typing import Any

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from psycopg_pool import ConnectionPool

from controlplane.aio import AsyncOffice, drive_async
from controlplane.client import HEARTBEAT_RUN, Flow, Office, Operations, drive, perform_psycopg
from controlplane.daemon.loop import DatabaseHealth, is_connection_error
from controlplane.daemon.metrics import LOOP_BUCKETS
from controlplane.metrics_registry import per_registry
from controlplane.models import Run
from controlplane.observability import Reporter

__all__ = [
    "CHANNEL",
    "AsyncWorker",
    "HandlerError",
    "Retry",
    "Worker",
    "WorkerMetrics",
    "default_worker_id",
    "failure_text",
    "is_async_handler",
    "load_handler",
    "worker_metrics_for",
]

log = logging.getLogger("controlplane.worker")

#: The channel of the wake-up signal (API.md §3); the payload is the agent id.
CHANNEL = "office_runs"

#: ``fail_run``'s ``error_message`` bound (API.md: free texts at most 64 KiB).
ERROR_MESSAGE_BYTES = 64 * 1024

#: The longest ``Retry`` delay the server takes: 100 years, as PostgreSQL
#: compares intervals (1200 months of 30 days).
MAX_RETRY_DELAY = 1200 * 30 * 86400.0

#: Longest wait between two tries of a database call after a failure.
MAX_BACKOFF = 5.0

#: How long, after the grace period, hand-backs and outcome writes still in
#: progress are retried before the worker gives up (the stale-claim recovery
#: then returns what is left).
HAND_BACK_SECONDS = 10.0

HANDLER_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
)  # fmt: skip


# --- what a handler says ------------------------------------------------------------


class Retry(Exception):
    """Raised by a handler: put the run back in the queue, claimable again in
    ``delay`` seconds (``retry_run``)."""

    def __init__(self, delay: float = 0.0) -> None:
        seconds = float(delay)
        if not math.isfinite(seconds) or not 0.0 <= seconds <= MAX_RETRY_DELAY:
            raise ValueError(f"Retry delay {delay!r} must be between 0 and 100 years of seconds")
        super().__init__(seconds)
        self.delay = seconds

    def __str__(self) -> str:
        return f"retry in {self.delay:g} s"


def failure_text(exc: BaseException) -> str:
    """``fail_run``'s message for an exception: its bare class name, ``": "``
    and its message, cut to 64 KiB (bytes, on a character boundary). A NUL,
    which PostgreSQL text cannot hold, is spelled ``\\x00``."""
    text = f"{type(exc).__name__}: {exc}".replace("\x00", "\\x00")
    return text.encode()[:ERROR_MESSAGE_BYTES].decode(errors="ignore")


class _Kind(Enum):
    FINISHED = "finished"
    FAILED = "failed"
    RETRIED = "retried"


@dataclass(frozen=True)
class _Outcome:
    kind: _Kind
    delay: float = 0.0
    message: str = ""


def _outcome_of(exc: BaseException | None) -> _Outcome:
    if exc is None:
        return _Outcome(_Kind.FINISHED)
    if isinstance(exc, Retry):
        return _Outcome(_Kind.RETRIED, delay=exc.delay)
    return _Outcome(_Kind.FAILED, message=failure_text(exc))


# --- the handler ------------------------------------------------------------------


class HandlerError(Exception):
    """A handler named ``module:function`` that cannot be used; the message is
    one line naming what failed."""


def load_handler(spec: str) -> Callable[[Run], Any]:
    """Import ``module:function`` (``function`` may be dotted, ``obj.method``)
    with the current directory first on ``sys.path``. Every failure is a
    :class:`HandlerError` with one line naming the module or the function."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise HandlerError(f"handler {spec!r} must be written module:function")
    cwd = os.getcwd()
    if not sys.path or sys.path[0] != cwd:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise HandlerError(
            f"cannot import handler module {module_name!r}: {_one_line(failure_text(exc))}"
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise HandlerError(
                f"handler {spec!r}: {module_name!r} has no attribute {attribute!r}"
            ) from None
    if not callable(target):
        raise HandlerError(f"handler {spec!r} is not callable (it is {type(target).__name__})")
    return target  # type: ignore[no-any-return]


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """An ``async def`` (or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - the method, not callable()
    )


def default_worker_id() -> str:
    """``<hostname>:<pid>``, recorded as ``claimed_by``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _one_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else text


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


# --- what both workers share --------------------------------------------------------


class _State(Enum):
    RUNNING = "running"  # the handler runs
    WRITING = "writing"  # its outcome is being written
    LOST = "lost"  # taken away: nothing is written
    RETURNED = "returned"  # handed back at shutdown: nothing is written


@dataclass(eq=False)
class _Slot:
    """One claimed run in flight."""

    run: Run
    state: _State = _State.RUNNING
    task: asyncio.Task[None] | None = None  # AsyncWorker: the handler's task


def _is_lost_connection(exc: BaseException) -> bool:
    """A lost or unreachable database, for either driver (retry with
    backoff), as opposed to a failed statement."""
    return is_connection_error(exc) or isinstance(
        exc,
        OSError
        | TimeoutError
        | asyncpg.PostgresConnectionError
        | asyncpg.OperatorInterventionError
        | asyncpg.InterfaceError,
    )


class _Core:
    """The decisions and bookkeeping of a worker, whatever its I/O: the runs
    in flight and their states, the outcome each write records, the logs
    and metrics."""

    def __init__(
        self,
        *,
        concurrency: int,
        agent_profile_id: str | None,
        worker_id: str | None,
        heartbeat: float,
        poll: float,
        grace: float,
        registry: CollectorRegistry | None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        for name, value in (("heartbeat", heartbeat), ("poll", poll)):
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value}")
        if not math.isfinite(grace) or grace < 0:
            raise ValueError(f"grace must be a non-negative number of seconds, not {grace}")
        self.concurrency = concurrency
        self.agent_profile_id = agent_profile_id or None
        self.worker_id = worker_id or default_worker_id()
        self.heartbeat = float(heartbeat)
        self.poll = float(poll)
        self.grace = float(grace)
        self.registry = registry
        self.metrics = worker_metrics_for(registry)
        self.health = DatabaseHealth(None)
        self.ops = Operations(Reporter(registry))
        self.slots: list[_Slot] = []
        self.signals = 0
        self._lock = threading.Lock()

    # the runs in flight ---------------------------------------------------------

    def begin(self, run: Run) -> _Slot:
        slot = _Slot(run)
        with self._lock:
            self.slots.append(slot)
        self.metrics.in_flight.inc()
        log.debug(
            "run %s claimed (agent %s, attempt %d)",
            run.id,
            run.agent_profile_id,
            run.attempt,
            extra=_fields(run),
        )
        return slot

    def end(self, slot: _Slot) -> None:
        """The run is no longer in flight (idempotent: whoever gets there first)."""
        with self._lock:
            if slot not in self.slots:
                return
            self.slots.remove(slot)
        self.metrics.in_flight.dec()

    def holds(self, slot: _Slot) -> bool:
        with self._lock:
            return slot in self.slots

    def in_flight(self) -> int:
        with self._lock:
            return len(self.slots)

    def beating(self) -> list[_Slot]:
        """The runs to send a heartbeat for: still ours, handler running or
        its outcome not yet written."""
        with self._lock:
            return [s for s in self.slots if s.state in (_State.RUNNING, _State.WRITING)]

    def to_write(self, slot: _Slot) -> bool:
        """The handler ended: True when its outcome is to be written (the run
        was neither taken away nor handed back meanwhile)."""
        with self._lock:
            if slot.state is not _State.RUNNING:
                return False
            slot.state = _State.WRITING
            return True

    def take_back(self) -> tuple[list[_Slot], list[_Slot]]:
        """After the grace period: the runs whose handler still runs (now
        ``RETURNED``: to hand back) and those whose outcome is being written."""
        with self._lock:
            running = [s for s in self.slots if s.state is _State.RUNNING]
            for slot in running:
                slot.state = _State.RETURNED
            writing = [s for s in self.slots if s.state is _State.WRITING]
        return running, writing

    def lose(self, slot: _Slot, how: str, *, writing: bool = True) -> bool:
        """The run is no longer ours (a heartbeat or a write was refused):
        one WARNING and one ``lost`` outcome per run. True the first time.
        ``writing`` False: not if its outcome is being written (the write
        tells; a heartbeat refused because that write just committed is
        no loss)."""
        with self._lock:
            if slot.state is not _State.RUNNING and not (writing and slot.state is _State.WRITING):
                return False
            slot.state = _State.LOST
        self.metrics.runs.labels(outcome="lost").inc()
        run = slot.run
        log.warning(
            "run %s lost (%s): it was recovered, cancelled or claimed again;"
            " its outcome is not written",
            run.id,
            how,
            extra={**_fields(run), "event": "run_lost"},
        )
        return True

    # heartbeats ---------------------------------------------------------------

    def beat(self, slot: _Slot) -> Flow[bool]:
        """The heartbeat of one run. Straight ``office.heartbeat_run``, not the
        client's probing ``heartbeat_run``: the worker needs leases (0.4.0),
        and a probe that failed during an outage would be remembered as "no
        leases" and quietly stop renewing every claim."""
        params = {"run_id": slot.run.id, "attempt": slot.run.attempt}
        return self.ops.changed(HEARTBEAT_RUN, params)

    def beaten(self, slot: _Slot, renewed: bool) -> bool:
        """Count a heartbeat; True when it told that the run was lost."""
        if renewed:
            self.metrics.heartbeats.labels(result="sent").inc()
            return False
        self.metrics.heartbeats.labels(result="lost").inc()
        return self.lose(slot, "heartbeat refused", writing=False)

    # outcomes -----------------------------------------------------------------

    def written(self, slot: _Slot, outcome: _Outcome, changed: bool, seconds: float) -> None:
        """The fenced write returned ``changed``."""
        run = slot.run
        if not changed:
            self.lose(slot, f"{_VERB[outcome.kind]} refused")
            return
        self.metrics.runs.labels(outcome=outcome.kind.value).inc()
        fields = {**_fields(run), "outcome": outcome.kind.value, "seconds": round(seconds, 3)}
        if outcome.kind is _Kind.FINISHED:
            log.info("run %s finished in %.3f s", run.id, seconds, extra=fields)
        elif outcome.kind is _Kind.RETRIED:
            log.info(
                "run %s retried: claimable again in %g s",
                run.id,
                outcome.delay,
                extra={**fields, "delay": outcome.delay},
            )
        else:
            log.info(
                "run %s failed: %s",
                run.id,
                _one_line(outcome.message),
                extra={**fields, "error": _one_line(outcome.message)[:200]},
            )

    def not_written(self, slot: _Slot, what: str, exc: BaseException) -> None:
        """A write that will not be retried (a failed statement, or the
        database still away after the shutdown deadline)."""
        log.error(
            "could not %s run %s: %s; the stale-claim recovery will return it",
            what,
            slot.run.id,
            _one_line(str(exc)) or type(exc).__name__,
            extra={**_fields(slot.run), "error": type(exc).__name__},
        )

    def handed_back(self, slot: _Slot) -> None:
        self.metrics.runs.labels(outcome="returned").inc()
        log.warning(
            "run %s handed back to the queue: its handler was still running after the grace period",
            slot.run.id,
            extra={**_fields(slot.run), "event": "run_returned"},
        )

    # the rest ------------------------------------------------------------------

    def wanted(self, payload: str) -> bool:
        """Whether a NOTIFY (payload: the agent id) concerns this worker."""
        return self.agent_profile_id is None or payload == self.agent_profile_id

    def failed_call(self, what: str, exc: BaseException, streak: int) -> float:
        """Log a failed database call; the seconds to wait before the next try."""
        delay = _backoff(streak)
        if _is_lost_connection(exc):
            self.health.lost(what, exc, delay)
        else:
            log.error(
                "%s failed: %s; retrying in %.1f s",
                what,
                _one_line(str(exc)) or type(exc).__name__,
                delay,
                extra={"loop": what, "error": type(exc).__name__},
            )
        return delay

    def started(self, kind: str) -> None:
        log.info(
            "%s %s started: concurrency %d%s, heartbeat every %g s, poll every %g s",
            kind,
            self.worker_id,
            self.concurrency,
            f", agent {self.agent_profile_id}" if self.agent_profile_id else "",
            self.heartbeat,
            self.poll,
            extra={
                "worker_id": self.worker_id,
                "concurrency": self.concurrency,
                "agent_profile_id": self.agent_profile_id,
            },
        )

    def listening(self) -> None:
        log.info("listening for NOTIFY %s", CHANNEL, extra={"channel": CHANNEL})

    def stopping(self) -> None:
        count = self.in_flight()
        log.info(
            "stopping: no more claims; %d run(s) in flight get %g s to finish",
            count,
            self.grace,
            extra={"in_flight": count, "grace": self.grace},
        )

    def stopped(self) -> None:
        log.info("worker %s stopped", self.worker_id, extra={"worker_id": self.worker_id})

    def on_signal(self, signum: int) -> bool:
        """A SIGTERM/SIGINT: True when it is the second (skip the grace)."""
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            log.info("%s received: stopping", name, extra={"signal": name})
            return False
        log.warning("%s received again: handing back the runs in flight now", name)
        return True


_VERB = {_Kind.FINISHED: "finish", _Kind.FAILED: "fail", _Kind.RETRIED: "retry"}


def _fields(run: Run) -> dict[str, Any]:
    return {"run_id": run.id, "agent_profile_id": run.agent_profile_id, "attempt": run.attempt}


def _backoff(streak: int) -> float:
    """Doubling from 0.1 s up to :data:`MAX_BACKOFF`, ±20 % jitter."""
    return float(min(MAX_BACKOFF, 0.1 * 2 ** min(streak - 1, 10)) * random.uniform(0.8, 1.2))


# --- the threaded worker ------------------------------------------------------------


class Worker:
    """Runs ``handler(run)`` for claimed runs, on ``concurrency`` threads.

    ``office``'s pool serves the claims and the outcome writes; the
    heartbeats and the LISTEN connection use two connections of the
    worker's own (opened with the pool's ``conninfo`` and ``kwargs``).
    :meth:`run` blocks until :meth:`stop` (or SIGTERM/SIGINT when called in
    the main thread); a sync handler cannot be interrupted, so a handler
    that outlives the grace period keeps its thread (a daemon thread) but
    writes nothing.
    """

    def __init__(
        self,
        office: Office,
        handler: Callable[[Run], object],
        *,
        concurrency: int = 1,
        agent_profile_id: str | None = None,
        worker_id: str | None = None,
        heartbeat: float = 10.0,
        poll: float = 1.0,
        grace: float = 30.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if is_async_handler(handler):
            raise TypeError("an async def handler needs AsyncWorker (and an AsyncOffice)")
        self.office = office
        self.handler = handler
        self._core = _Core(
            concurrency=concurrency,
            agent_profile_id=agent_profile_id,
            worker_id=worker_id,
            heartbeat=heartbeat,
            poll=poll,
            grace=grace,
            registry=registry,
        )
        self._stop = threading.Event()
        self._force = threading.Event()
        self._closed = threading.Event()  # the end: heartbeats, LISTEN and retries stop
        self._wake = threading.Event()
        self._work: queue.SimpleQueue[_Slot | None] = queue.SimpleQueue()

    @property
    def worker_id(self) -> str:
        return self._core.worker_id

    def stop(self, *, force: bool = False) -> None:
        """Stop claiming (the runs in flight get ``grace`` seconds); with
        ``force``, hand them back without waiting. Callable from any thread,
        and from a handler."""
        self._stop.set()
        if force:
            self._force.set()
        self._wake.set()

    def run(self) -> None:
        """Claim and handle runs until stopped; then let the runs in flight
        finish (``grace``), hand back what is left, and return."""
        core = self._core
        in_main = threading.current_thread() is threading.main_thread()
        previous = (
            {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
            if in_main
            else {}
        )
        own = ConnectionPool(
            self.office.pool.conninfo,
            kwargs=self.office.pool.kwargs,
            min_size=2,
            max_size=2,
            timeout=max(1.0, min(core.heartbeat, 5.0)),
            check=ConnectionPool.check_connection,
            reconnect_timeout=10.0,
            open=False,
            name="office-worker",
        )
        own.open(wait=False)
        helpers = [
            threading.Thread(target=self._heartbeats, args=(own,), name="office-heartbeat"),
            threading.Thread(target=self._listen, args=(own,), name="office-listen"),
        ]
        handlers = [
            threading.Thread(target=self._handle, name=f"office-worker-{n}", daemon=True)
            for n in range(core.concurrency)
        ]
        try:
            for thread in (*helpers, *handlers):
                thread.start()
            core.started("worker")
            self._dispatch()
            self._shutdown()
        finally:
            self._closed.set()
            for _ in handlers:
                self._work.put(None)
            for thread in helpers:
                thread.join(10.0)
            own.close(timeout=5.0)
            for sig, previous_handler in previous.items():
                signal.signal(sig, previous_handler)
            core.stopped()

    # the claim loop -------------------------------------------------------------

    def _dispatch(self) -> None:
        core = self._core
        streak = 0
        while not self._stop.is_set():
            if core.in_flight() >= core.concurrency:
                self._wake.wait()
                self._wake.clear()
                continue
            self._wake.clear()
            started = time.perf_counter()
            try:
                run = self.office.claim_run(core.worker_id, core.agent_profile_id)
            except Exception as exc:
                streak += 1
                self._stop.wait(core.failed_call("claim", exc, streak))
                continue
            core.metrics.claim_seconds.observe(time.perf_counter() - started)
            core.health.ok()
            streak = 0
            if run is None:
                self._wake.wait(core.poll)
            else:
                self._work.put(core.begin(run))

    def _shutdown(self) -> None:
        core = self._core
        core.stopping()
        deadline = time.monotonic() + core.grace
        while core.in_flight() and not self._force.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._wake.wait(left)
            self._wake.clear()
        returned, writing = core.take_back()
        until = time.monotonic() + HAND_BACK_SECONDS
        for slot in returned:
            self._hand_back(slot, until)
        # Outcome writes in progress (the database may be away) get until the
        # same deadline; their threads give up at ``_closed``.
        while any(core.holds(s) for s in writing) and time.monotonic() < until:
            self._wake.wait(0.1)
            self._wake.clear()

    def _hand_back(self, slot: _Slot, until: float) -> None:
        core = self._core
        streak = 0
        while True:
            try:
                changed = self.office.retry_run(slot.run.id, slot.run.attempt, 0)
            except Exception as exc:
                streak += 1
                if not _is_lost_connection(exc) or time.monotonic() >= until:
                    core.not_written(slot, "hand back", exc)
                    break
                time.sleep(core.failed_call("hand back", exc, streak))
                continue
            core.health.ok()
            if changed:
                core.handed_back(slot)
            break
        core.end(slot)

    # the handler threads ----------------------------------------------------------

    def _handle(self) -> None:
        while (slot := self._work.get()) is not None:
            started = time.perf_counter()
            try:
                self.handler(slot.run)
            except BaseException as exc:  # SystemExit from a handler fails its run too
                outcome = _outcome_of(exc)
            else:
                outcome = _outcome_of(None)
            seconds = time.perf_counter() - started
            self._core.metrics.handler_seconds.observe(seconds)
            if self._core.to_write(slot):
                self._write(slot, outcome, seconds)
            if slot.state is not _State.RETURNED:  # a returned run is ended by its hand-back
                self._core.end(slot)
            self._wake.set()

    def _write(self, slot: _Slot, outcome: _Outcome, seconds: float) -> None:
        core, run = self._core, slot.run
        streak = 0
        while True:
            try:
                if outcome.kind is _Kind.FINISHED:
                    changed = self.office.finish_run(run.id, run.attempt)
                elif outcome.kind is _Kind.RETRIED:
                    changed = self.office.retry_run(run.id, run.attempt, outcome.delay)
                else:
                    changed = self.office.fail_run(run.id, run.attempt, outcome.message)
            except Exception as exc:
                streak += 1
                if not _is_lost_connection(exc) or self._closed.is_set():
                    core.not_written(slot, _VERB[outcome.kind], exc)
                    return
                self._closed.wait(core.failed_call("outcome", exc, streak))
                continue
            core.health.ok()
            core.written(slot, outcome, changed, seconds)
            return

    # heartbeats and wake-ups --------------------------------------------------------

    def _heartbeats(self, own: ConnectionPool[Any]) -> None:
        core = self._core
        streak = 0
        while not self._closed.wait(_backoff(streak) if streak else core.heartbeat):
            try:
                with own.connection() as conn:
                    conn.autocommit = True
                    for slot in core.beating():
                        core.beaten(slot, drive(core.beat(slot), partial(perform_psycopg, conn)))
            except Exception as exc:
                streak += 1
                core.failed_call("heartbeat", exc, streak)
                continue
            streak = 0

    def _listen(self, own: ConnectionPool[Any]) -> None:
        core = self._core
        streak = 0
        while not self._closed.is_set():
            try:
                with own.connection() as conn:
                    conn.autocommit = True
                    conn.execute(f"LISTEN {CHANNEL}")
                    streak = 0
                    core.listening()
                    # Anything sent while nobody listened: claim now.
                    self._wake.set()
                    while not self._closed.is_set():
                        for notify in conn.notifies(timeout=0.5):
                            if core.wanted(notify.payload):
                                self._wake.set()
            except Exception as exc:
                streak += 1
                self._closed.wait(core.failed_call("listen", exc, streak))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop(force=self._core.on_signal(signum))


# --- the asyncio worker -------------------------------------------------------------


class AsyncWorker:
    """:class:`Worker` for asyncio: ``await handler(run)`` for claimed runs,
    up to ``concurrency`` at once, on an :class:`AsyncOffice`.

    The heartbeats and the LISTEN connection each hold a connection of
    ``office``'s pool while the worker runs (asyncpg pools do not tell their
    connection settings), so the pool needs ``max_size`` of at least 3. A
    handler whose run is taken away, or still running after the grace
    period, is cancelled. :meth:`stop` may be called from any thread.
    """

    def __init__(
        self,
        office: AsyncOffice,
        handler: Callable[[Run], Awaitable[object]],
        *,
        concurrency: int = 1,
        agent_profile_id: str | None = None,
        worker_id: str | None = None,
        heartbeat: float = 10.0,
        poll: float = 1.0,
        grace: float = 30.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if not is_async_handler(handler):
            raise TypeError("AsyncWorker needs an async def handler (a plain one: Worker)")
        self.office = office
        self.handler = handler
        self._core = _Core(
            concurrency=concurrency,
            agent_profile_id=agent_profile_id,
            worker_id=worker_id,
            heartbeat=heartbeat,
            poll=poll,
            grace=grace,
            registry=registry,
        )
        self._requested = 0  # stop requests so far (1: graceful, 2: now)
        self._loop: asyncio.AbstractEventLoop | None = None
        # Made again by each run(): an asyncio.Event belongs to one loop.
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self._closed = asyncio.Event()  # the end: heartbeats, LISTEN and retries stop
        self._wake = asyncio.Event()

    @property
    def worker_id(self) -> str:
        return self._core.worker_id

    def stop(self, *, force: bool = False) -> None:
        """Stop claiming (the runs in flight get ``grace`` seconds); with
        ``force``, cancel them and hand them back without waiting. A plain
        method, callable from any thread or task."""
        self._requested = 2 if force else max(self._requested, 1)
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._apply_stop()
        else:
            loop.call_soon_threadsafe(self._apply_stop)

    def _apply_stop(self) -> None:
        if self._requested:
            self._stop.set()
            self._wake.set()
        if self._requested > 1:
            self._force.set()

    async def run(self) -> None:
        """Claim and handle runs until stopped; then let the runs in flight
        finish (``grace``), hand back (and cancel) what is left, and return."""
        core = self._core
        streak = 0
        while True:  # a database that is away at the start is waited for
            try:
                await self.office.open()
                break
            except Exception as exc:
                if not _is_lost_connection(exc):
                    raise
                streak += 1
                await asyncio.sleep(core.failed_call("connect", exc, streak))
                if self._requested:
                    return
        pool = self.office.pool
        assert pool is not None
        if pool.get_max_size() < 3:
            raise ValueError(
                f"AsyncWorker needs a pool of at least 3 connections, not {pool.get_max_size()}"
            )
        self._stop, self._force = asyncio.Event(), asyncio.Event()
        self._closed, self._wake = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._apply_stop()  # a stop() that came before run()
        signals: list[int] = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
                signals.append(sig)
        helpers = [
            asyncio.create_task(self._heartbeats(pool), name="office-worker-heartbeat"),
            asyncio.create_task(self._listen(pool), name="office-worker-listen"),
        ]
        try:
            core.started("async worker")
            await self._dispatch()
            await self._shutdown()
        finally:
            self._closed.set()
            tasks = [slot.task for slot in list(core.slots) if slot.task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*helpers, *tasks, return_exceptions=True)
            for signum in signals:
                loop.remove_signal_handler(signum)
            self._loop = None
            core.stopped()

    async def _wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        """``event.wait()`` for at most ``timeout`` seconds: True if it was set."""
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # the claim loop -------------------------------------------------------------

    async def _dispatch(self) -> None:
        core = self._core
        streak = 0
        while not self._stop.is_set():
            if core.in_flight() >= core.concurrency:
                await self._wake.wait()
                self._wake.clear()
                continue
            self._wake.clear()
            started = time.perf_counter()
            try:
                run = await self.office.claim_run(core.worker_id, core.agent_profile_id)
            except Exception as exc:
                streak += 1
                await self._wait(self._stop, core.failed_call("claim", exc, streak))
                continue
            core.metrics.claim_seconds.observe(time.perf_counter() - started)
            core.health.ok()
            streak = 0
            if run is None:
                await self._wait(self._wake, core.poll)
            else:
                slot = core.begin(run)
                slot.task = asyncio.create_task(self._handle(slot), name=f"office-run-{run.id}")

    async def _shutdown(self) -> None:
        core = self._core
        core.stopping()
        deadline = time.monotonic() + core.grace
        while core.in_flight() and not self._force.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await self._wait(self._wake, left)
            self._wake.clear()
        returned, writing = core.take_back()
        for slot in returned:
            if slot.task is not None:
                slot.task.cancel()
        until = time.monotonic() + HAND_BACK_SECONDS
        for slot in returned:
            await self._hand_back(slot, until)
        pending = [s.task for s in writing if s.task is not None]
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, until - time.monotonic()))

    async def _hand_back(self, slot: _Slot, until: float) -> None:
        core = self._core
        streak = 0
        while True:
            try:
                changed = await self.office.retry_run(slot.run.id, slot.run.attempt, 0)
            except Exception as exc:
                streak += 1
                if not _is_lost_connection(exc) or time.monotonic() >= until:
                    core.not_written(slot, "hand back", exc)
                    break
                await asyncio.sleep(core.failed_call("hand back", exc, streak))
                continue
            core.health.ok()
            if changed:
                core.handed_back(slot)
            break
        core.end(slot)

    # the handlers ----------------------------------------------------------------

    async def _handle(self, slot: _Slot) -> None:
        core = self._core
        started = time.perf_counter()
        try:
            await self.handler(slot.run)
        except asyncio.CancelledError:
            core.metrics.handler_seconds.observe(time.perf_counter() - started)
            if slot.state is _State.LOST:  # cancelled by this worker: no longer ours
                core.end(slot)
                self._wake.set()
                return
            if slot.state is _State.RETURNED:  # ended by its hand-back
                return
            raise
        except Exception as exc:
            outcome = _outcome_of(exc)
        else:
            outcome = _outcome_of(None)
        seconds = time.perf_counter() - started
        core.metrics.handler_seconds.observe(seconds)
        try:
            if core.to_write(slot):
                await self._write(slot, outcome, seconds)
        finally:
            if slot.state is not _State.RETURNED:  # a returned run is ended by its hand-back
                core.end(slot)
            self._wake.set()

    async def _write(self, slot: _Slot, outcome: _Outcome, seconds: float) -> None:
        core, run = self._core, slot.run
        streak = 0
        while True:
            try:
                if outcome.kind is _Kind.FINISHED:
                    changed = await self.office.finish_run(run.id, run.attempt)
                elif outcome.kind is _Kind.RETRIED:
                    changed = await self.office.retry_run(run.id, run.attempt, outcome.delay)
                else:
                    changed = await self.office.fail_run(run.id, run.attempt, outcome.message)
            except Exception as exc:
                streak += 1
                if not _is_lost_connection(exc) or self._closed.is_set():
                    core.not_written(slot, _VERB[outcome.kind], exc)
                    return
                await self._wait(self._closed, core.failed_call("outcome", exc, streak))
                continue
            core.health.ok()
            core.written(slot, outcome, changed, seconds)
            return

    # heartbeats and wake-ups --------------------------------------------------------

    async def _heartbeats(self, pool: asyncpg.Pool) -> None:
        core = self._core
        streak = 0
        # Held from the start (before handlers can crowd the pool) and
        # across rounds; a failed round gives it back, the next takes another.
        conn: Any = None
        try:
            while True:
                try:
                    if conn is None:
                        conn = await pool.acquire(timeout=5.0)
                    for slot in core.beating():
                        lost = core.beaten(slot, await drive_async(core.beat(slot), conn))
                        if lost and slot.task is not None:
                            slot.task.cancel()
                    streak = 0
                except Exception as exc:
                    streak += 1
                    core.failed_call("heartbeat", exc, streak)
                    if conn is not None:
                        held, conn = conn, None
                        await pool.release(held)  # the pool replaces a broken one
                wait = _backoff(streak) if streak else core.heartbeat
                if await self._wait(self._closed, wait):
                    break
        finally:
            if conn is not None:
                await pool.release(conn)

    async def _listen(self, pool: asyncpg.Pool) -> None:
        core = self._core
        streak = 0

        def on_notify(conn: object, pid: int, channel: str, payload: object) -> None:
            if core.wanted(str(payload)):
                self._wake.set()

        while not self._closed.is_set():
            conn: Any = None
            try:
                conn = await pool.acquire(timeout=5.0)
                await conn.add_listener(CHANNEL, on_notify)
                streak = 0
                core.listening()
                self._wake.set()  # anything sent while nobody listened: claim now
                while not conn.is_closed() and not await self._wait(self._closed, 1.0):
                    pass
                if conn.is_closed():
                    raise ConnectionError("the LISTEN connection was closed")
            except Exception as exc:
                streak += 1
                await self._wait(self._closed, core.failed_call("listen", exc, streak))
            finally:
                if conn is not None:
                    if not conn.is_closed():
                        try:
                            await conn.remove_listener(CHANNEL, on_notify)
                        except Exception:
                            conn.terminate()
                    await pool.release(conn)

    def _on_signal(self, signum: int) -> None:
        self.stop(force=self._core.on_signal(signum))
