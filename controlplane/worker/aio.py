"""The asyncio worker: :class:`AsyncWorker` (asyncpg)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import asyncpg

from controlplane.aio import AsyncOffice, drive_async
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


class AsyncWorker(WorkerBase[AsyncOffice, Callable[[Run], Awaitable[object]]]):
    """:class:`Worker` for asyncio: ``await handler(run)`` for claimed runs,
    up to ``concurrency`` at once, on an :class:`AsyncOffice`.

    The heartbeats and the LISTEN connection each hold a connection of
    ``office``'s pool while the worker runs (asyncpg pools do not tell their
    connection settings), so the pool needs ``max_size`` of at least 3. A
    handler whose run is taken away, or still running after the grace
    period, is cancelled. :meth:`stop` may be called from any thread.
    """

    _async_handler = True
    _wrong_handler = "AsyncWorker needs an async def handler (a plain one: Worker)"

    def _setup(self) -> None:
        self._requested = 0  # stop requests so far (1: graceful, 2: now)
        self._loop: asyncio.AbstractEventLoop | None = None
        # Made again by each run(): an asyncio.Event belongs to one loop.
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self._closed = asyncio.Event()  # the end: heartbeats, LISTEN and retries stop
        self._wake = asyncio.Event()

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
            core.health.ok(started)
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
            began = time.perf_counter()
            try:
                changed = await self.office.retry_run(
                    slot.run.id, slot.run.attempt, 0, worker_id=core.worker_id
                )
            except Exception as exc:
                streak += 1
                if not _is_lost_connection(exc) or time.monotonic() >= until:
                    core.not_written(slot, "hand back", exc)
                    break
                await asyncio.sleep(core.failed_call("hand back", exc, streak))
                continue
            core.health.ok(began)
            if changed:
                core.handed_back(slot)
            break
        core.end(slot)

    # the handlers ----------------------------------------------------------------

    async def _handle(self, slot: _Slot) -> None:
        core = self._core
        started = time.perf_counter()
        slot.context.async_recorder = partial(
            self.office.record_run_cost, slot.run.id, slot.run.attempt, worker_id=core.worker_id
        )
        token = slot.enter()
        # The context is told before the handler is cancelled, so a handler
        # that catches the cancellation knows why.
        timer = (
            None
            if core.timeout is None
            else asyncio.get_running_loop().call_later(core.timeout, self._time_out, slot)
        )
        try:
            refuse_undecodable(slot.run)
            await self.handler(slot.run)
        except asyncio.CancelledError:
            if slot.abandoned and slot.state is _State.RUNNING:  # our timeout's cancellation
                outcome = _outcome_of(HandlerTimeout(core.timeout or 0.0), core.transient)
            else:
                core.metrics.handler_seconds.observe(time.perf_counter() - started)
                if slot.state is _State.LOST:  # cancelled by this worker: no longer ours
                    core.end(slot)
                    self._wake.set()
                    return
                if slot.state is _State.RETURNED:  # ended by its hand-back
                    return
                raise
        except Exception as exc:
            outcome = _outcome_of(exc, core.transient)
        else:
            outcome = _outcome_of(None)
        finally:
            slot.leave(token)
            if timer is not None:
                timer.cancel()
        seconds = time.perf_counter() - started
        core.metrics.handler_seconds.observe(seconds)
        try:
            if core.to_write(slot):
                await self._write(slot, outcome, seconds)
        finally:
            if slot.state is not _State.RETURNED:  # a returned run is ended by its hand-back
                core.end(slot)
            self._wake.set()

    def _time_out(self, slot: _Slot) -> None:
        """The handler is past ``timeout``: tell it, then cancel it; its run
        is failed retryably (:class:`HandlerTimeout`)."""
        if slot.state is not _State.RUNNING or slot.task is None:
            return
        slot.abandoned = True
        self._core.timed_out(slot)
        slot.task.cancel()

    async def _write(self, slot: _Slot, outcome: _Outcome, seconds: float) -> None:
        core, run = self._core, slot.run
        streak = 0
        while True:
            began = time.perf_counter()
            try:
                if outcome.kind is _Kind.FINISHED:
                    changed = await self.office.finish_run(
                        run.id, run.attempt, worker_id=core.worker_id
                    )
                elif outcome.kind is _Kind.RETRIED:
                    changed = await self.office.retry_run(
                        run.id, run.attempt, outcome.delay, worker_id=core.worker_id
                    )
                else:
                    changed = await self.office.fail_run(
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
                await self._wait(self._closed, core.failed_call("outcome", exc, streak))
                continue
            core.health.ok(began)
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
        """LISTEN where the runs' NOTIFY is sent: on a connection of the pool,
        or on every shard when the pool's database is a proxy (the claims
        still go through it)."""
        core = self._core
        streak = 0
        while True:
            try:
                async with pool.acquire(timeout=5.0) as conn:
                    topology = await shards.topology_of_async(conn)
                break
            except Exception as exc:
                streak += 1
                if await self._wait(self._closed, core.failed_call("listen", exc, streak)):
                    return
        if topology.proxy is None:
            await self._listen_on(partial(pool.acquire, timeout=5.0), pool.release, None)
            return
        await asyncio.gather(
            *(
                self._listen_on(
                    partial(
                        asyncpg.connect,
                        timeout=CONNECT_TIMEOUT,
                        **shards.asyncpg_arguments(db.conninfo),
                    ),
                    _close,
                    db.label,
                )
                for db in topology.databases
            )
        )

    async def _listen_on(
        self,
        connect: Callable[[], Awaitable[Any]],
        release: Callable[[Any], Awaitable[object]],
        shard: str | None,
    ) -> None:
        """LISTEN on the connections ``connect`` gives (``release`` gives them
        back), reconnecting with backoff, until the worker closes."""
        core = self._core
        health = None if shard is None else DatabaseHealth(None, shard)
        streak = 0

        def on_notify(conn: object, pid: int, channel: str, payload: object) -> None:
            if core.wanted(str(payload)):
                self._wake.set()

        while not self._closed.is_set():
            conn: Any = None
            began = time.perf_counter()
            try:
                conn = await connect()
                await conn.add_listener(CHANNEL, on_notify)
                streak = 0
                if health is not None:
                    health.ok(began)
                core.listening(shard)
                self._wake.set()  # anything sent while nobody listened: claim now
                while not conn.is_closed() and not await self._wait(self._closed, 1.0):
                    pass
                if conn.is_closed():
                    raise ConnectionError("the LISTEN connection was closed")
            except Exception as exc:
                streak += 1
                await self._wait(self._closed, core.failed_call("listen", exc, streak, health))
            finally:
                if conn is not None:
                    if not conn.is_closed():
                        try:
                            await conn.remove_listener(CHANNEL, on_notify)
                        except Exception:
                            conn.terminate()
                    await release(conn)

    def _on_signal(self, signum: int) -> None:
        self.stop(force=self._core.on_signal(signum))


async def _close(conn: asyncpg.Connection[Any]) -> None:
    """Close a shard's LISTEN connection (the worker opened it itself)."""
    if not conn.is_closed():
        await conn.close(timeout=5.0)
