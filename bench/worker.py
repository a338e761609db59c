"""Worker benchmark: end-to-end runs per second of ``controlplane.worker``
with a no-op handler, against a raw claim+finish loop, and the wake-up
latency from enqueue to handler start at low load.

    bash bench/run.sh worker

Throughput: a backlog of queued runs over 64 agents; each case runs for
--seconds and counts the runs finished in that window (after a short
warm-up). The floor is a hand-written loop of ``claim_run`` + ``finish_run``
on as many psycopg connections (one thread each), measured in the same run;
``Worker`` adds the handler threads, heartbeats and its bookkeeping.

Latency: one idle worker (``--poll 30``: only a NOTIFY wakes it early); a
producer enqueues one run at a time into the empty queue, at random
intervals; the latency is the time from the ``enqueue_run`` call to the
handler's first line (one process, one clock), and ``claimed_at -
requested_at`` as the database recorded it. Then the same with
``office.notify = off`` and a 1 s poll.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import threading
import time
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry
from psycopg_pool import ConnectionPool

from bench.common import Measurement, bench_parser, machine_line, publish, run_sync
from controlplane.aio import AsyncOffice
from controlplane.client import Office
from controlplane.models import Run
from controlplane.worker import AsyncWorker, Worker

AGENTS = 64
CLAIM_SQL = "SELECT id, attempt FROM office.claim_run(%s)"
FINISH_SQL = "SELECT office.finish_run(%s, %s)"


def reset(dsn: str, backlog: int) -> None:
    """No runs but ``backlog`` queued ones (inserted directly: the setup is
    not what is measured), 64 agents."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') FROM pg_tables"
            " WHERE schemaname = 'office' AND tablename <> 'agent_profiles'"
        ).fetchone()
        conn.execute(f"TRUNCATE {tables[0] if tables else 'office.runs'}")
        conn.execute(
            "SELECT office.upsert_agent('bench-agent-' || n, 'bench')"
            " FROM generate_series(0, %s) n",
            (AGENTS - 1,),
        )
        if backlog:
            conn.execute(
                "INSERT INTO office.runs (agent_profile_id, reason, requested_at)"
                " SELECT 'bench-agent-' || (n %% %s), 'task_comment',"
                "        now() - interval '1 hour' + n * interval '1 millisecond'"
                " FROM generate_series(1, %s) n",
                (AGENTS, backlog),
            )
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


# --- throughput ----------------------------------------------------------------------


def raw_loop(dsn: str, connections: int, seconds: float, backlog: int) -> Measurement:
    reset(dsn, backlog)

    def op(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
        row = conn.execute(CLAIM_SQL, (f"raw-{worker}",), prepare=True).fetchone()
        if row is not None:
            conn.execute(FINISH_SQL, row, prepare=True)

    return run_sync(dsn, connections, seconds, op)


def _finished(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("office_worker_runs_total", {"outcome": "finished"}) or 0.0


def _window(registry: CollectorRegistry, seconds: float, warmup: float) -> Measurement:
    """Runs finished during ``seconds``, after ``warmup``."""
    time.sleep(warmup)
    first, start = _finished(registry), time.perf_counter()
    time.sleep(seconds)
    last, elapsed = _finished(registry), time.perf_counter() - start
    return Measurement(int(last - first), elapsed)


def worker_rate(
    dsn: str, concurrency: int, seconds: float, backlog: int, warmup: float
) -> Measurement:
    reset(dsn, backlog)
    registry = CollectorRegistry()
    pool: ConnectionPool[Any] = ConnectionPool(
        dsn, min_size=concurrency + 1, max_size=concurrency + 1, kwargs={"autocommit": True}
    )
    with Office(pool=pool, registry=registry) as office:
        worker = Worker(
            office, lambda run: None, concurrency=concurrency, poll=0.05, registry=registry
        )
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            return _window(registry, seconds, warmup)
        finally:
            worker.stop()
            thread.join()
            pool.close()


def async_worker_rate(
    dsn: str, concurrency: int, seconds: float, backlog: int, warmup: float
) -> Measurement:
    reset(dsn, backlog)
    registry = CollectorRegistry()

    async def noop(run: Run) -> None:
        pass

    async def main() -> Measurement:
        async with AsyncOffice(
            dsn, min_size=concurrency + 3, max_size=concurrency + 3, registry=registry
        ) as office:
            worker = AsyncWorker(
                office, noop, concurrency=concurrency, poll=0.05, registry=registry
            )
            task = asyncio.create_task(worker.run())
            try:
                return await asyncio.to_thread(_window, registry, seconds, warmup)
            finally:
                worker.stop()
                await task

    return asyncio.run(main())


# --- wake-up latency -------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency(dsn: str, runs: int, notify: bool, poll: float) -> tuple[list[float], list[float]]:
    """Seconds from the enqueue call to the handler's start, and
    ``claimed_at - requested_at``, for ``runs`` runs enqueued one at a time
    into an empty queue."""
    reset(dsn, 0)
    started: dict[str, float] = {}
    arrived = threading.Event()

    def handle(run: Run) -> None:
        started[run.id] = time.perf_counter()
        arrived.set()

    rng = random.Random(7)
    sent: dict[str, float] = {}
    with (
        Office(dsn, registry=CollectorRegistry()) as office,
        psycopg.connect(dsn, autocommit=True) as producer,
    ):
        if not notify:
            producer.execute("SET office.notify = off")
        worker = Worker(office, handle, poll=poll, registry=CollectorRegistry())
        thread = threading.Thread(target=worker.run)
        thread.start()
        time.sleep(1.0)  # listening, past its first (empty) claim
        try:
            for i in range(runs):
                arrived.clear()
                before = time.perf_counter()
                row = producer.execute(
                    "SELECT run_id FROM office.enqueue_run(%s, 'task_comment',"
                    " idempotency_key => %s)",
                    (f"bench-agent-{i % AGENTS}", f"task_comment:lat{i}:a"),
                ).fetchone()
                assert row is not None
                sent[str(row[0])] = before
                arrived.wait(poll + 5)
                # Low load: the worker is idle again. Without NOTIFY, the next
                # run arrives anywhere in the worker's poll interval.
                time.sleep(rng.uniform(0.02, 0.1) if notify else rng.uniform(0.0, poll))
        finally:
            worker.stop()
            thread.join()
        recorded = producer.execute(
            "SELECT extract(epoch FROM claimed_at - requested_at)::float8 FROM office.runs"
        ).fetchall()
    return [started[r] - sent[r] for r in sent if r in started], [float(r[0]) for r in recorded]


def main() -> None:
    parser = bench_parser(__doc__, "worker")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--latency-runs", type=int, default=200)
    args = parser.parse_args()
    s, w, b = args.seconds, args.warmup, args.backlog

    rows = []
    for concurrency in (1, 4):
        raw = raw_loop(args.dsn, concurrency, s, b)
        print(f"raw claim+finish, {concurrency}: {raw.rate:,.0f}/s", flush=True)
        for name, measure in (("Worker", worker_rate), ("AsyncWorker", async_worker_rate)):
            result = measure(args.dsn, concurrency, s, b, w)
            print(f"{name}, {concurrency}: {result.rate:,.0f}/s", flush=True)
            rows.append(
                f"| {name}, no-op handler | {concurrency} | {result.rate:,.0f} "
                f"| {raw.rate:,.0f} | {result.rate / raw.rate if raw.rate else 0:.2f}× |"
            )

    latencies = []
    cases = ((True, 30.0, args.latency_runs), (False, 1.0, max(20, args.latency_runs // 5)))
    for notify, poll, runs in cases:
        to_handler, recorded = latency(args.dsn, runs, notify, poll)
        how = "NOTIFY (`edge`), `--poll 30`" if notify else "`office.notify = off`, `--poll 1`"
        line = (
            f"| {how} | {len(to_handler)} | {_percentile(to_handler, 0.5) * 1000:,.1f} "
            f"| {_percentile(to_handler, 0.99) * 1000:,.1f} "
            f"| {statistics.median(recorded) * 1000:,.1f} "
            f"| {_percentile(recorded, 0.99) * 1000:,.1f} |"
        )
        print(line, flush=True)
        latencies.append(line)

    body = "\n".join(
        [
            "## Worker: end-to-end runs and wake-up latency",
            "",
            f"Command: `bash bench/run.sh worker`, {s:g} s per case after {w:g} s of warm-up.",
            f"Machine: {machine_line(args.dsn)}.",
            "",
            f"Throughput: {b:,} queued runs over {AGENTS} agents; runs finished per second.",
            "The floor is a raw loop of `claim_run` + `finish_run` (two prepared statements)",
            "on as many psycopg connections as the worker's concurrency, in the same run.",
            "",
            "| case | concurrency | runs/s | raw claim+finish runs/s | ratio |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "Wake-up latency at low load: one idle worker (concurrency 1), one run at a time",
            "enqueued into the empty queue 20-100 ms after the previous one was handled",
            "(without NOTIFY: at a random point of the worker's poll interval).",
            "*To handler* is from the `enqueue_run` call to the handler's first line (one",
            "process, one clock); *claimed − requested* is what the database recorded.",
            "",
            "| wake-up | runs | to handler p50 ms | p99 ms | claimed − requested p50 ms | p99 ms |",
            "|---|---|---|---|---|---|",
            *latencies,
        ]
    )
    publish(body, "worker", args.write)


if __name__ == "__main__":
    main()
