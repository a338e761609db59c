"""``controlplane.worker`` as a library: ``Worker`` and ``AsyncWorker`` in
this process, against real PostgreSQL (the command's behaviour is in
``tests/daemon/test_worker.py``)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from controlplane.aio import AsyncOffice
from controlplane.client import Office
from controlplane.models import Run
from controlplane.worker import (
    AsyncWorker,
    HandlerError,
    Retry,
    Transient,
    Worker,
    current_run_context,
    failure_text,
    load_handler,
)
from tests.harness import wait_for


def _setup(db: psycopg.Connection[Any], runs: int = 1) -> list[str]:
    db.execute("SELECT office.upsert_agent('a1', 'ws')")
    return [
        str(
            db.execute(
                "SELECT run_id FROM office.enqueue_run('a1', 'task_comment',"
                " idempotency_key => %s)",
                (f"task_comment:c{i}:a1",),
            ).fetchone()[0]  # type: ignore[index]
        )
        for i in range(runs)
    ]


def _status(db: psycopg.Connection[Any], run_id: str) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT status, attempt, error_message FROM office.runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert row is not None
    return tuple(row)


async def _work_until(
    db: psycopg.Connection[Any],
    dsn: str,
    handle: Callable[[Run], Awaitable[None]],
    run_id: str,
    status: str,
) -> None:
    """An AsyncWorker with ``handle`` until ``run_id`` is ``status`` (bounded
    polling, 30 s), then stopped."""
    async with AsyncOffice(dsn) as office:
        worker = AsyncWorker(office, handle, poll=0.1, registry=CollectorRegistry())
        task = asyncio.create_task(worker.run())
        for _ in range(600):
            if _status(db, run_id)[0] == status:
                break
            await asyncio.sleep(0.05)
        worker.stop()
        await asyncio.wait_for(task, 30)


def _lost_warnings(caplog: pytest.LogCaptureFixture, run_id: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "controlplane.worker" and r.levelno == logging.WARNING and run_id in r.message
    ]


def test_a_handler_that_stops_the_worker(db: psycopg.Connection[Any], dsn: str) -> None:
    (run_id,) = _setup(db)
    seen: list[Run] = []
    with Office(dsn) as office:

        def handle(run: Run) -> None:
            seen.append(run)
            worker.stop()

        worker = Worker(office, handle, poll=0.1, registry=CollectorRegistry())
        worker.run()  # returns: stopped from the handler, outside the main thread's signals
    assert [r.id for r in seen] == [run_id]
    assert seen[0].attempt == 1 and seen[0].claimed_by == worker.worker_id
    assert _status(db, run_id) == ("finished", 1, None)


def test_a_sync_handler_whose_run_is_cancelled_finishes_but_writes_nothing(
    db: psycopg.Connection[Any], dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "controlplane.worker")
    (run_id,) = _setup(db)
    release, ended = threading.Event(), threading.Event()

    def handle(run: Run) -> None:
        release.wait(30)
        ended.set()

    with Office(dsn) as office:
        worker = Worker(office, handle, heartbeat=0.2, poll=0.1, registry=CollectorRegistry())
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            wait_for(lambda: _status(db, run_id)[0] == "claimed", "the claim")
            assert db.execute("SELECT office.cancel_run(%s, 'not needed')", (run_id,)).fetchone()
            wait_for(lambda: _lost_warnings(caplog, run_id), "the heartbeat to tell")
            release.set()  # the sync handler was left to run: it ends now
            wait_for(ended.is_set, "the handler to end")
        finally:
            release.set()
            worker.stop()
            thread.join(30)
    assert not thread.is_alive()
    assert _status(db, run_id)[0] == "cancelled"
    assert len(_lost_warnings(caplog, run_id)) == 1


async def test_an_async_handler_whose_run_is_cancelled_is_cancelled(
    db: psycopg.Connection[Any], dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "controlplane.worker")
    (run_id, other) = _setup(db, 2)
    cancelled: list[str] = []
    done: list[str] = []

    async def handle(run: Run) -> None:
        if run.id == other:
            done.append(run.id)
            return
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(run.id)
            raise

    async with AsyncOffice(dsn) as office:
        worker = AsyncWorker(office, handle, heartbeat=0.2, poll=0.1, registry=CollectorRegistry())
        task = asyncio.create_task(worker.run())
        for _ in range(600):
            if _status(db, run_id)[0] == "claimed":
                break
            await asyncio.sleep(0.05)
        db.execute("SELECT office.cancel_run(%s, 'not needed')", (run_id,))
        for _ in range(600):  # the worker goes on: the agent's next run
            if done:
                break
            await asyncio.sleep(0.05)
        # stop() is a plain method, callable from another thread.
        threading.Thread(target=worker.stop).start()
        await asyncio.wait_for(task, 30)
    assert cancelled == [run_id] and done == [other]
    assert _status(db, run_id)[0] == "cancelled"
    assert _status(db, other) == ("finished", 1, None)
    assert len(_lost_warnings(caplog, run_id)) == 1


async def test_async_worker_retry_and_failure(db: psycopg.Connection[Any], dsn: str) -> None:
    retried, failed = _setup(db, 2)

    async def handle(run: Run) -> None:
        if run.id == retried:
            raise Retry(3600)
        raise KeyError("missing")

    await _work_until(db, dsn, handle, failed, "failed")
    assert _status(db, retried) == ("queued", 1, None)
    assert _status(db, failed) == ("failed", 1, "KeyError: 'missing'")


def test_the_wrong_kind_of_handler_or_bad_settings_are_refused(dsn: str) -> None:
    async def coroutine(run: Run) -> None:
        pass

    def plain(run: Run) -> None:
        pass

    with Office(dsn) as office:
        with pytest.raises(TypeError, match="AsyncWorker"):
            Worker(office, coroutine)
        bads: list[dict[str, Any]] = [
            {"concurrency": 0},
            {"heartbeat": 0},
            {"poll": -1},
            {"grace": -1},
        ]
        for bad in bads:
            with pytest.raises(ValueError, match=next(iter(bad))):
                Worker(office, plain, **bad)
    with pytest.raises(TypeError, match="async def"):
        AsyncWorker(AsyncOffice(dsn), plain)  # type: ignore[arg-type]


def test_retry_delays_and_failure_texts() -> None:
    assert Retry(2.5).delay == 2.5
    for bad in (-1, float("nan"), float("inf"), 1e12):
        with pytest.raises(ValueError, match="Retry delay"):
            Retry(bad)
    assert failure_text(ValueError("boom")) == "ValueError: boom"
    assert failure_text(RuntimeError("a\x00b")) == "RuntimeError: a\\x00b"
    text = failure_text(ValueError("€" * 30_000))  # 3 bytes each: the cut falls inside one
    assert len(text.encode()) <= 64 * 1024 and text.endswith("€")
    assert len(text.encode()) > 64 * 1024 - 3


def test_load_handler_names_what_failed(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mod_ok.py").write_text("class K:\n    def m(self, run): pass\nk = K()\n")
    monkeypatch.chdir(tmp_path)
    assert callable(load_handler("mod_ok:k.m"))
    with pytest.raises(HandlerError, match="'mod_ok' has no attribute 'nope'"):
        load_handler("mod_ok:nope")
    with pytest.raises(HandlerError, match="module:function"):
        load_handler("mod_ok")


def _plant_deep_run(db: psycopg.Connection[Any]) -> str:
    """A run whose payload nests 1,200 levels deep, as 0.4.0 stored them
    (0.5.0 refuses such a write: the run is inserted shallow, and listed as
    ready, then given the payload with the update's bound off)."""
    db.execute("SELECT office.upsert_agent('a1', 'ws')")
    row = db.execute(
        "INSERT INTO office.runs (agent_profile_id, reason) VALUES ('a1', 'deep') RETURNING id"
    ).fetchone()
    assert row is not None
    db.execute("ALTER TABLE office.runs DISABLE TRIGGER runs_05_bounded")
    db.execute(
        "UPDATE office.runs SET payload = jsonb_build_object('deep',"
        " (repeat('[', 1200) || repeat(']', 1200))::jsonb) WHERE id = %s",
        [row[0]],
    )
    db.execute("ALTER TABLE office.runs ENABLE TRIGGER runs_05_bounded")
    return str(row[0])


def test_a_run_the_client_cannot_decode_is_failed_once(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    # 0.4.0: claim_run committed, the client raised RecursionError, the run
    # was recovered and claimed again and again, and the agent's healthy runs
    # never ran.
    deep = _plant_deep_run(db)
    (healthy,) = _setup(db)
    seen: list[str] = []
    with Office(dsn) as office:

        def handle(run: Run) -> None:
            seen.append(run.id)
            worker.stop()

        worker = Worker(office, handle, poll=0.1, registry=CollectorRegistry())
        worker.run()
    assert seen == [healthy]
    status, attempt, error = _status(db, deep)
    assert (status, attempt) == ("failed", 1)
    assert error.startswith(f"UndecodableRun: run {deep}: payload cannot be decoded")
    assert _status(db, healthy) == ("finished", 1, None)


async def test_the_async_worker_fails_a_run_it_cannot_decode_once(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    deep = _plant_deep_run(db)
    (healthy,) = _setup(db)
    seen: list[str] = []

    async def handle(run: Run) -> None:
        seen.append(run.id)

    await _work_until(db, dsn, handle, healthy, "finished")
    assert seen == [healthy]
    status, attempt, error = _status(db, deep)
    assert (status, attempt) == ("failed", 1)
    assert error.startswith(f"UndecodableRun: run {deep}: payload cannot be decoded")


def _retry_state(db: psycopg.Connection[Any], run_id: str) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT status, retry_count, error_message,"
        " scheduled_retry_at > now() + interval '1 minute'"
        " FROM office.runs WHERE id = %s",
        (run_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _work_sync_until(
    db: psycopg.Connection[Any],
    office: Office,
    handle: Callable[[Run], None],
    done: Callable[[], bool],
    **options: Any,
) -> Worker:
    """A Worker with ``handle`` in a thread until ``done()``, then stopped."""
    worker = Worker(office, handle, poll=0.1, registry=CollectorRegistry(), **options)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(done, "the worker")
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    return worker


class UpstreamBusy(Exception):
    pass


def test_transient_failures_are_failed_retryably(db: psycopg.Connection[Any], dsn: str) -> None:
    marked, named, plain = _setup(db, 3)

    def handle(run: Run) -> None:
        if run.id == marked:
            raise Transient("rate limited")
        if run.id == named:
            raise UpstreamBusy("503")
        raise KeyError("missing")

    with Office(dsn) as office:
        _work_sync_until(
            db,
            office,
            handle,
            lambda: (
                all(
                    _status(db, r)[0] != "claimed" and _status(db, r)[1] == 1
                    for r in (marked, named, plain)
                )
                and _status(db, plain)[0] == "failed"
            ),
            transient=(UpstreamBusy,),
        )
    # Queued again after the default back-off (2 minutes x 0.75..1.25), once.
    assert _retry_state(db, marked) == ("queued", 1, "Transient: rate limited", True)
    assert _retry_state(db, named) == ("queued", 1, "UpstreamBusy: 503", True)
    assert _retry_state(db, plain)[:3] == ("failed", 0, "KeyError: 'missing'")


async def test_an_async_handler_past_its_timeout_is_cancelled_and_its_run_failed_retryably(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    (run_id,) = _setup(db)
    seen: list[str] = []

    async def handle(run: Run) -> None:
        context = current_run_context()
        assert context.run.id == run.id
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled" if context.cancelled.is_set() else "cancelled, not told")
            raise

    async with AsyncOffice(dsn) as office:
        worker = AsyncWorker(office, handle, poll=0.1, timeout=0.3, registry=CollectorRegistry())
        task = asyncio.create_task(worker.run())
        for _ in range(600):
            if _status(db, run_id)[0] == "queued" and _status(db, run_id)[1] == 1:
                break
            await asyncio.sleep(0.05)
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert seen == ["cancelled"]
    assert _retry_state(db, run_id) == (
        "queued",
        1,
        "HandlerTimeout: the handler ran longer than 0.3 s",
        True,
    )


def test_a_sync_handler_past_its_timeout_is_abandoned_and_another_thread_goes_on(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    stuck, after = _setup(db, 2)
    db.execute("SELECT office.upsert_agent('a2', 'ws')")
    release = threading.Event()
    told: list[bool] = []
    ended: list[str] = []

    def handle(run: Run) -> None:
        if run.id == stuck:
            context = current_run_context()
            context.cancelled.wait(30)  # a cooperative handler stops when told
            told.append(context.cancelled.is_set())
            release.wait(30)
        ended.append(run.id)

    with Office(dsn) as office:
        try:
            _work_sync_until(
                db,
                office,
                handle,
                # concurrency 1: the agent's next run is handled while the
                # abandoned handler still holds its thread
                lambda: _status(db, after)[0] == "finished",
                timeout=0.3,
            )
            assert ended == [after] and told == [True]
        finally:
            release.set()
    wait_for(lambda: ended == [after, stuck], "the abandoned handler to end")
    # What the abandoned handler returned was not written.
    assert _retry_state(db, stuck) == (
        "queued",
        1,
        "HandlerTimeout: the handler ran longer than 0.3 s",
        True,
    )


def test_the_run_context_exists_only_in_a_handler_and_tells_a_lost_run(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    with pytest.raises(RuntimeError, match="handler"):
        current_run_context()
    (run_id,) = _setup(db)
    told: list[bool] = []

    def handle(run: Run) -> None:
        context = current_run_context()
        db.execute("SELECT office.cancel_run(%s, 'not needed')", (run.id,))
        told.append(context.cancelled.wait(30))

    with Office(dsn) as office:
        _work_sync_until(db, office, handle, lambda: bool(told), heartbeat=0.2)
    assert told == [True]
    assert _status(db, run_id)[0] == "cancelled"


def test_bad_timeouts_and_transient_types_are_refused(dsn: str) -> None:
    def plain(run: Run) -> None:
        pass

    with Office(dsn) as office:
        for bad in (0, -1, float("inf"), float("nan")):
            with pytest.raises(ValueError, match="timeout"):
                Worker(office, plain, timeout=bad)
        with pytest.raises(TypeError, match="transient"):
            Worker(office, plain, transient=("KeyError",))  # type: ignore[arg-type]


def _cost(db: psycopg.Connection[Any], run_id: str) -> Any:
    row = db.execute("SELECT cost FROM office.runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return row[0]


def test_a_sync_handler_records_its_cost_and_a_reached_budget_stops_it(
    db: psycopg.Connection[Any], dsn: str
) -> None:
    (run_id,) = _setup(db)
    db.execute("SELECT office.set_wake_policy('agent', 'a1', budget => 1, budget_period => 'day')")
    told: list[bool] = []
    recorded: list[bool] = []

    def handle(run: Run) -> None:
        context = current_run_context()
        if run.attempt > 1:  # claim holds are not built yet: a stopped run can come back
            context.cancelled.wait(30)
            return
        recorded.append(context.record_cost(0.25))
        recorded.append(context.record_cost(1))  # past the budget of 1
        told.append(context.cancelled.wait(30))  # the next heartbeat stops it

    with Office(dsn) as office:
        _work_sync_until(db, office, handle, lambda: bool(told), heartbeat=0.2)
    assert recorded == [True, True] and told == [True]
    assert str(_cost(db, run_id)) == "1.25"
    decisions = db.execute(
        "SELECT decision FROM office.wake_decisions WHERE run_id = %s ORDER BY id", (run_id,)
    ).fetchall()
    assert [d[0] for d in decisions] == ["budget_warning", "budget_exhausted"]
    # The first attempt's outcome was never written: it was stopped, not finished.
    assert db.execute(
        "SELECT count(*) FROM office.runs WHERE id = %s AND status = 'finished'", (run_id,)
    ).fetchone() == (0,)


async def test_an_async_handler_awaits_arecord_cost(db: psycopg.Connection[Any], dsn: str) -> None:
    (run_id,) = _setup(db)
    wrong: list[str] = []

    async def handle(run: Run) -> None:
        context = current_run_context()
        assert await context.arecord_cost(0.5)
        try:
            context.record_cost(1)
        except RuntimeError as exc:
            wrong.append(str(exc))

    await _work_until(db, dsn, handle, run_id, "finished")
    assert str(_cost(db, run_id)) == "0.5"
    assert wrong and "arecord_cost" in wrong[0]
