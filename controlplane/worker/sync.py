"""The threaded worker: :class:`Worker` (psycopg)."""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from types import FrameType
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from controlplane.client import Office, drive, perform_psycopg
from controlplane.daemon.logs import set_shard
from controlplane.daemon.loop import DatabaseHealth
from controlplane.models import Run
from controlplane.scaleout import shards
from controlplane.worker.core import (
    _VERB,
    CHANNEL,
    CONNECT_TIMEOUT,
    HAND_BACK_SECONDS,
    WorkerBase,
    _backoff,
    _is_lost_connection,
    _Slot,
    _State,
)
from controlplane.worker.handler import (
    HandlerTimeout,
    _Kind,
    _Outcome,
    _outcome_of,
    refuse_undecodable,
)

# --- the threaded worker ------------------------------------------------------------


class Worker(WorkerBase[Office, Callable[[Run], object]]):
    """Runs ``handler(run)`` for claimed runs, on ``concurrency`` threads.

    ``office``'s pool serves the claims and the outcome writes; the
    heartbeats and the LISTEN connection use two connections of the
    worker's own (opened with the pool's ``conninfo`` and ``kwargs``, see
    :meth:`_connect`).
    :meth:`run` blocks until :meth:`stop` (or SIGTERM/SIGINT when called in
    the main thread); a sync handler cannot be interrupted, so a handler
    that outlives the grace period keeps its thread (a daemon thread) but
    writes nothing.
    """

    _async_handler = False
    _wrong_handler = "an async def handler needs AsyncWorker (and an AsyncOffice)"

    def _setup(self) -> None:
        self._stop = threading.Event()
        self._force = threading.Event()
        self._closed = threading.Event()  # the end: heartbeats, LISTEN and retries stop
        self._wake = threading.Event()
        self._work: queue.SimpleQueue[_Slot | None] = queue.SimpleQueue()

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
        helpers = [
            threading.Thread(target=self._heartbeats, name="office-heartbeat"),
            threading.Thread(target=self._listen, name="office-listen"),
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
            core.health.ok(started)
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
            began = time.perf_counter()
            try:
                changed = self.office.retry_run(
                    slot.run.id, slot.run.attempt, 0, worker_id=core.worker_id
                )
            except Exception as exc:
                streak += 1
                if not _is_lost_connection(exc) or time.monotonic() >= until:
                    core.not_written(slot, "hand back", exc)
                    break
                time.sleep(core.failed_call("hand back", exc, streak))
                continue
            core.health.ok(began)
            if changed:
                core.handed_back(slot)
            break
        core.end(slot)

    # the handler threads ----------------------------------------------------------

    def _handle(self) -> None:
        while (slot := self._work.get()) is not None:
            timer = None
            if self._core.timeout is not None:
                timer = threading.Timer(self._core.timeout, self._time_out, (slot,))
                timer.daemon = True
                timer.start()
            started = time.perf_counter()
            slot.context.recorder = partial(
                self.office.record_run_cost,
                slot.run.id,
                slot.run.attempt,
                worker_id=self._core.worker_id,
            )
            token = slot.enter()
            try:
                refuse_undecodable(slot.run)
                self.handler(slot.run)
            except BaseException as exc:  # SystemExit from a handler fails its run too
                outcome = _outcome_of(exc, self._core.transient)
            else:
                outcome = _outcome_of(None)
            finally:
                slot.leave(token)
                if timer is not None:
                    timer.cancel()
            seconds = time.perf_counter() - started
            self._core.metrics.handler_seconds.observe(seconds)
            if self._core.to_write(slot):
                self._write(slot, outcome, seconds)
            if slot.state is not _State.RETURNED:  # a returned run is ended by its hand-back
                self._core.end(slot)
            self._wake.set()
            if slot.abandoned:  # another thread took this one's place at the timeout
                return

    def _time_out(self, slot: _Slot) -> None:
        """The timer of a handler past ``timeout``: a sync handler cannot be
        stopped, so its run is failed retryably now, and a new handler
        thread takes the place of the one left to it."""
        core = self._core
        if not core.time_out(slot):
            return
        threading.Thread(target=self._handle, name="office-worker-replacement", daemon=True).start()
        assert core.timeout is not None
        self._write(slot, _outcome_of(HandlerTimeout(core.timeout), core.transient), core.timeout)
        core.end(slot)
        self._wake.set()

    def _write(self, slot: _Slot, outcome: _Outcome, seconds: float) -> None:
        core, run = self._core, slot.run
        streak = 0
        while True:
            began = time.perf_counter()
            try:
                if outcome.kind is _Kind.FINISHED:
                    changed = self.office.finish_run(run.id, run.attempt, worker_id=core.worker_id)
                elif outcome.kind is _Kind.RETRIED:
                    changed = self.office.retry_run(
                        run.id, run.attempt, outcome.delay, worker_id=core.worker_id
                    )
                else:
                    changed = self.office.fail_run(
                        run.id,
                        run.attempt,
                        outcome.message,
                        retryable=outcome.retryable,
                        worker_id=core.worker_id,
                    )
            except Exception as exc:
                streak += 1
                if not _is_lost_connection(exc) or self._closed.is_set():
                    core.not_written(slot, _VERB[outcome.kind], exc)
                    return
                self._closed.wait(core.failed_call("outcome", exc, streak))
                continue
            core.health.ok(began)
            core.written(slot, outcome, changed, seconds)
            return

    # heartbeats and wake-ups --------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        """A connection of the worker's own (heartbeats, LISTEN), in autocommit,
        with the settings of ``office``'s pool (and :data:`CONNECT_TIMEOUT`
        unless they name one). Each try is a connection attempt, retried on
        the worker's backoff, so the first try after the server is back
        succeeds. A pool would reconnect in the background on a backoff of its
        own, counting each connection it waits to reopen as one of its slots:
        a caller could time out on it while the server was back, a timeout
        the health would count as a second loss of the outage that the claims
        had already seen end."""
        pool = self.office.pool
        # As the pool reads them: a string and a dict, or callables giving them.
        conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
        kwargs = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
        settings = {
            "connect_timeout": CONNECT_TIMEOUT,
            **conninfo_to_dict(conninfo),
            **(kwargs or {}),
            "autocommit": True,
        }
        return psycopg.connect(**settings)

    def _checked(self, conn: psycopg.Connection[Any] | None) -> psycopg.Connection[Any]:
        """``conn`` if it still answers, else a new connection: one that a
        server restart ended while nothing was sent on it is no loss (the
        server may well be back by now)."""
        if conn is not None:
            try:
                ConnectionPool.check_connection(conn)
                return conn
            except psycopg.Error:
                conn.close()
        return self._connect()

    def _heartbeats(self) -> None:
        core = self._core
        streak = 0
        conn: psycopg.Connection[Any] | None = None  # held across rounds
        try:
            while not self._closed.wait(_backoff(streak) if streak else core.heartbeat):
                try:
                    conn = self._checked(conn)
                    for slot in core.beating():
                        core.beaten(slot, drive(core.beat(slot), partial(perform_psycopg, conn)))
                except Exception as exc:
                    streak += 1
                    core.failed_call("heartbeat", exc, streak)
                    if conn is not None:
                        conn.close()
                        conn = None
                    continue
                streak = 0
        finally:
            if conn is not None:
                conn.close()

    def _listen(self) -> None:
        """LISTEN where the runs' NOTIFY is sent: on the worker's database, or
        on every shard when it is a proxy (the claims still go through it)."""
        core = self._core
        streak = 0
        while not self._closed.is_set():
            try:
                with self._connect() as conn:
                    topology = shards.topology_of(conn)
                break
            except Exception as exc:
                streak += 1
                self._closed.wait(core.failed_call("listen", exc, streak))
        else:
            return
        if topology.proxy is None:
            self._listen_on(self._connect, None)
            return
        threads = [
            threading.Thread(
                target=self._listen_on,
                args=(
                    partial(psycopg.connect, db.conninfo, connect_timeout=CONNECT_TIMEOUT),
                    db.label,
                ),
                name=f"office-listen-{db.label}",
            )
            for db in topology.databases
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _listen_on(
        self,
        connect: Callable[[], AbstractContextManager[psycopg.Connection[Any]]],
        shard: str | None,
    ) -> None:
        """LISTEN on the connections ``connect`` opens, reconnecting with
        backoff, until the worker closes (a shard's loss is its own health's)."""
        core = self._core
        set_shard(shard)
        health = None if shard is None else DatabaseHealth(None, shard)
        streak = 0
        while not self._closed.is_set():
            began = time.perf_counter()
            try:
                with connect() as conn:
                    conn.autocommit = True
                    conn.execute(f"LISTEN {CHANNEL}")
                    streak = 0
                    if health is not None:
                        health.ok(began)
                    core.listening(shard)
                    # Anything sent while nobody listened: claim now.
                    self._wake.set()
                    while not self._closed.is_set():
                        for notify in conn.notifies(timeout=0.5):
                            if core.wanted(notify.payload):
                                self._wake.set()
            except Exception as exc:
                streak += 1
                self._closed.wait(core.failed_call("listen", exc, streak, health))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop(force=self._core.on_signal(signum))


# --- the asyncio worker -------------------------------------------------------------
