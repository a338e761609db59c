"""What both workers share: the runs in flight (their leases: heartbeats,
loss, hand-back), the outcome each write records, the logs and metrics, and
the constructor (:class:`WorkerBase`)."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import signal
import socket
import threading
from collections.abc import Callable
from contextvars import Token
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

import asyncpg
from prometheus_client import CollectorRegistry

from controlplane.client import Flow, Operations
from controlplane.daemon.loop import DatabaseHealth, is_connection_error
from controlplane.models import Run
from controlplane.observability import Reporter
from controlplane.worker.context import RunContext, _current
from controlplane.worker.handler import (
    _Kind,
    _one_line,
    _Outcome,
    is_async_handler,
)
from controlplane.worker.metrics import worker_metrics_for

log = logging.getLogger("controlplane.worker")

#: The channel of the wake-up signal (docs/api.md §3); the payload is the agent id.
CHANNEL = "office_runs"

#: Longest wait between two tries of a database call after a failure.
MAX_BACKOFF = 5.0

#: Seconds to wait for a connection the worker opens itself (a shard's LISTEN).
CONNECT_TIMEOUT = 5

#: How long, after the grace period, hand-backs and outcome writes still in
#: progress are retried before the worker gives up (the stale-claim recovery
#: then returns what is left).
HAND_BACK_SECONDS = 10.0


def default_worker_id() -> str:
    """``<hostname>:<pid>``, recorded as ``claimed_by``."""
    return f"{socket.gethostname()}:{os.getpid()}"


# --- what both workers share --------------------------------------------------------


class _State(Enum):
    RUNNING = "running"  # the handler runs
    WRITING = "writing"  # its outcome is being written
    LOST = "lost"  # taken away: nothing is written
    RETURNED = "returned"  # handed back at shutdown: nothing is written
    TIMED_OUT = "timed_out"  # past the timeout: failed retryably, the handler abandoned


@dataclass(eq=False)
class _Slot:
    """One claimed run in flight."""

    run: Run
    state: _State = _State.RUNNING
    task: asyncio.Task[None] | None = None  # AsyncWorker: the handler's task
    abandoned: bool = False  # past the timeout: Worker leaves it its thread, AsyncWorker cancels it
    context: RunContext = field(init=False)

    def __post_init__(self) -> None:
        self.context = RunContext(self.run)

    def enter(self) -> Token[RunContext | None]:
        """Make this run the handler's :func:`current_run_context` (in the
        calling thread or task); the token for :meth:`leave`."""
        return _current.set(self.context)

    def leave(self, token: Token[RunContext | None]) -> None:
        _current.reset(token)


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
        timeout: float | None,
        transient: tuple[type[BaseException], ...],
        registry: CollectorRegistry | None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        for name, value in (("heartbeat", heartbeat), ("poll", poll)):
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value}")
        if not math.isfinite(grace) or grace < 0:
            raise ValueError(f"grace must be a non-negative number of seconds, not {grace}")
        if timeout is not None and (not math.isfinite(timeout) or timeout <= 0):
            raise ValueError(f"timeout must be a positive number of seconds or None, not {timeout}")
        for kind in transient:
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise TypeError(f"transient must name exception types, not {kind!r}")
        self.concurrency = concurrency
        self.agent_profile_id = agent_profile_id or None
        self.worker_id = worker_id or default_worker_id()
        self.heartbeat = float(heartbeat)
        self.poll = float(poll)
        self.grace = float(grace)
        self.timeout = None if timeout is None else float(timeout)
        self.transient = tuple(transient)
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
            return [
                s
                for s in self.slots
                if s.state in (_State.RUNNING, _State.WRITING, _State.TIMED_OUT)
            ]

    def to_write(self, slot: _Slot) -> bool:
        """The handler ended: True when its outcome is to be written (the run
        was neither taken away nor handed back meanwhile)."""
        with self._lock:
            if slot.state is not _State.RUNNING:
                return False
            slot.state = _State.WRITING
            return True

    def time_out(self, slot: _Slot) -> bool:
        """A sync handler is past the timeout: True when its run is to be
        failed retryably now (it was still running: not lost, returned or
        ending), and the handler's thread abandoned (``slot.abandoned``)."""
        with self._lock:
            if slot.state is not _State.RUNNING:
                return False
            slot.state = _State.TIMED_OUT
            slot.abandoned = True
        self.timed_out(slot)
        return True

    def timed_out(self, slot: _Slot) -> None:
        """Tell the handler (its context) and the log that it ran too long."""
        slot.context.cancelled.set()
        log.warning(
            "run %s: the handler ran longer than %g s; failing it retryably",
            slot.run.id,
            self.timeout,
            extra={**_fields(slot.run), "event": "run_timed_out", "timeout": self.timeout},
        )

    def take_back(self) -> tuple[list[_Slot], list[_Slot]]:
        """After the grace period: the runs whose handler still runs (now
        ``RETURNED``: to hand back) and those whose outcome is being written."""
        with self._lock:
            running = [s for s in self.slots if s.state is _State.RUNNING]
            for slot in running:
                slot.state = _State.RETURNED
            writing = [s for s in self.slots if s.state in (_State.WRITING, _State.TIMED_OUT)]
        return running, writing

    def lose(self, slot: _Slot, how: str, *, writing: bool = True) -> bool:
        """The run is no longer ours (a heartbeat or a write was refused):
        one WARNING and one ``lost`` outcome per run. True the first time.
        ``writing`` False: not if its outcome is being written (the write
        tells; a heartbeat refused because that write just committed is
        no loss)."""
        with self._lock:
            if slot.state is not _State.RUNNING and not (
                writing and slot.state in (_State.WRITING, _State.TIMED_OUT)
            ):
                return False
            slot.state = _State.LOST
        slot.context.cancelled.set()
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
        """The heartbeat of one run, fenced by this worker's id where the
        schema can (since 0.5.0). Not the client's probing ``heartbeat_run``:
        the worker needs leases (0.4.0), and a probe that failed during an
        outage would be remembered as "no leases" and quietly stop renewing
        every claim."""
        return self.ops.lease_heartbeat(slot.run.id, slot.run.attempt, self.worker_id)

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
                "run %s failed%s: %s",
                run.id,
                " retryably" if outcome.retryable else "",
                _one_line(outcome.message),
                extra={
                    **fields,
                    "error": _one_line(outcome.message)[:200],
                    "retryable": outcome.retryable,
                },
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

    def failed_call(
        self, what: str, exc: BaseException, streak: int, health: DatabaseHealth | None = None
    ) -> float:
        """Log a failed database call; the seconds to wait before the next try.
        ``health``: a shard's (its listener's), if not the worker's database."""
        delay = _backoff(streak)
        if _is_lost_connection(exc):
            (health or self.health).lost(what, exc, delay)
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

    def listening(self, shard: str | None = None) -> None:
        if shard is None:
            log.info("listening for NOTIFY %s", CHANNEL, extra={"channel": CHANNEL})
        else:
            log.info(
                "listening for NOTIFY %s on shard %s",
                CHANNEL,
                shard,
                extra={"channel": CHANNEL, "shard": shard},
            )

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


# --- the constructor both workers share --------------------------------------------

OfficeT = TypeVar("OfficeT")
HandlerT = TypeVar("HandlerT", bound=Callable[..., object])


class WorkerBase(Generic[OfficeT, HandlerT]):
    """What :class:`~controlplane.worker.Worker` and
    :class:`~controlplane.worker.AsyncWorker` are made of: the office, the
    handler (of the kind this worker calls) and the :class:`_Core` of their
    settings; each adds its own I/O state in :meth:`_setup`."""

    #: Whether this worker awaits its handler, and what it says to a handler
    #: of the other kind.
    _async_handler: ClassVar[bool]
    _wrong_handler: ClassVar[str]

    def __init__(
        self,
        office: OfficeT,
        handler: HandlerT,
        *,
        concurrency: int = 1,
        agent_profile_id: str | None = None,
        worker_id: str | None = None,
        heartbeat: float = 10.0,
        poll: float = 1.0,
        grace: float = 30.0,
        timeout: float | None = None,
        transient: tuple[type[BaseException], ...] = (),
        registry: CollectorRegistry | None = None,
    ) -> None:
        if is_async_handler(handler) != self._async_handler:
            raise TypeError(self._wrong_handler)
        self.office = office
        self.handler = handler
        self._core = _Core(
            concurrency=concurrency,
            agent_profile_id=agent_profile_id,
            worker_id=worker_id,
            heartbeat=heartbeat,
            poll=poll,
            grace=grace,
            timeout=timeout,
            transient=transient,
            registry=registry,
        )
        self._setup()

    def _setup(self) -> None:
        """The worker's own events and queues, before anything runs."""
        raise NotImplementedError

    @property
    def worker_id(self) -> str:
        return self._core.worker_id
