"""Growth benchmark: fresh-key ``enqueue_run`` as office.runs grows.

    make bench            # or: bash bench/run.sh growth

For each size (10,000 and 1,000,000 existing runs) and connection count,
office.runs and the floor table are emptied and filled to that size, then
VACUUM ANALYZE and a CHECKPOINT; then, for the floor and for office in turn,
--rounds times, a CHECKPOINT, STEADY_SETTLE seconds of the case unmeasured and
--seconds measured (bench/enqueue.py's "floor, fresh keys" and "enqueue,
fresh keys" cases, one call per transaction); each case's best round counts.
One round each was not enough on this kind of machine: its commit flush time
moves by 2× within minutes, and three single-round runs of the same code gave
slowdowns of 1.89×, 1.30× and 0.78× at one connection (the floor's: 1.78×,
1.12×, 1.00×). The target is office's rate at the smallest size over its rate
at the largest: at most 1.3×. The floor's own slowdown, measured alongside,
tells how much of it is the machine or the bigger indexes of any table.

The fill bypasses the API on purpose: one set-based INSERT into office.runs
as the bench role (the DSN's superuser), because a million ``enqueue_run``
calls would take longer than the whole benchmark. The rows are what a grown
queue holds: finished runs with idempotency keys and tasks (four runs a task),
requested, claimed and finished over the last 30 days, one in ten having
absorbed a coalesced request (coalesced_count 2, its key in
office.run_keys_recorded); and one run in a hundred still queued, keyed,
requested within the last hour, over the 64 agents.
"""

from __future__ import annotations

import psycopg

from bench import enqueue
from bench.common import Measurement, bench_parser, machine_line, publish, run_async, run_sync

SIZES = (10_000, 1_000_000)
TARGET = 1.3
CASES = ("floor, fresh keys", "enqueue, fresh keys")

FILL_RUNS = """
INSERT INTO office.runs (agent_profile_id, reason, status, coalesced_count, idempotency_key,
                         task_id, attempt, claimed_by, requested_at, claimed_at, finished_at)
SELECT 'bench-agent-' || (n %% %(agents)s), 'task_assigned',
       CASE WHEN queued THEN 'queued' ELSE 'finished' END,
       CASE WHEN NOT queued AND n %% 10 = 1 THEN 2 ELSE 1 END,
       'old-' || n, 'task-old-' || n / 4,
       CASE WHEN queued THEN 0 ELSE 1 END,
       CASE WHEN queued THEN NULL ELSE 'bench-worker' END,
       requested,
       CASE WHEN queued THEN NULL ELSE requested + interval '1 second' END,
       CASE WHEN queued THEN NULL ELSE requested + interval '3 seconds' END
FROM generate_series(1, %(size)s) n,
     LATERAL (SELECT n %% 100 = 0 AS queued) q,
     LATERAL (SELECT CASE WHEN queued THEN now() - (n %% 3600) * interval '1 second'
                          ELSE now() - interval '30 days' * (%(size)s - n) / %(size)s
                     END AS requested) r
"""
FILL_RECORDED = """
INSERT INTO office.run_keys_recorded (idempotency_key, run_id, recorded_at)
SELECT idempotency_key || '-coalesced', id, requested_at
FROM office.runs WHERE coalesced_count = 2
"""
FILL_FLOOR = "INSERT INTO public.bench_floor SELECT 'old-' || n FROM generate_series(1, %s) n"


def fill(dsn: str, size: int) -> None:
    """Empty office (but its agents) and the floor, then ``size`` rows in each."""
    enqueue.reset(dsn, "enqueue, fresh keys")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FILL_RUNS, {"agents": enqueue.AGENTS, "size": size})
        conn.execute(FILL_RECORDED)
        conn.execute(FILL_FLOOR, (size,))
        conn.execute("VACUUM ANALYZE")


def measure(dsn: str, driver: str, connections: int, case: str, seconds: float) -> Measurement:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")

    def once(length: float, run: int) -> Measurement:
        if driver == "psycopg":
            return run_sync(dsn, connections, length, enqueue.sync_op(case, run))
        return run_async(dsn, connections, length, enqueue.async_op(case, run))

    return enqueue.settled("steady", seconds, once)


def main() -> None:
    parser = bench_parser(__doc__, "growth")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--connections", default="1,4")
    parser.add_argument("--drivers", default="psycopg")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    rates: dict[tuple[str, int, int, str], float] = {}
    rows = []
    for driver in args.drivers.split(","):
        for connections in (int(c) for c in args.connections.split(",")):
            for size in sizes:
                fill(args.dsn, size)
                for _ in range(args.rounds):
                    for case in CASES:
                        rate = measure(args.dsn, driver, connections, case, args.seconds).rate
                        key = (driver, connections, size, case)
                        rates[key] = max(rates.get(key, 0.0), rate)
                        print(
                            f"{driver:8} {connections} conn {size:>9,} runs {case:22} {rate:7.0f}/s"
                        )
                floor, office = (rates[(driver, connections, size, c)] for c in CASES)
                rows.append(
                    f"| {driver} | {connections} | {size:,} | {floor:,.0f} | {office:,.0f} | "
                    f"{office / floor:.2f}× |"
                )

    small, large = sizes[0], sizes[-1]

    def slowdown(driver: str, connections: int, case: str) -> float:
        at_large = rates[(driver, connections, large, case)]
        return rates[(driver, connections, small, case)] / at_large if at_large else 0.0

    summary = []
    for driver in args.drivers.split(","):
        for connections in (int(c) for c in args.connections.split(",")):
            office = slowdown(driver, connections, "enqueue, fresh keys")
            floor = slowdown(driver, connections, "floor, fresh keys")
            verdict = "met" if office <= TARGET else "**missed**"
            summary.append(
                f"| {driver} | {connections} | {office:.2f}× | ≤ {TARGET:g}× | {verdict} |"
                f" {floor:.2f}× |"
            )

    body = "\n".join(
        [
            f"## Growth: fresh-key `enqueue_run` from {small:,} to {large:,} existing runs",
            "",
            f"Command: `make bench` (`bash bench/run.sh growth`), {args.seconds:g} s per case",
            f"after {enqueue.STEADY_SETTLE:g} s unmeasured and a CHECKPOINT, best of"
            f" {args.rounds} rounds, the floor and office in turn.",
            f"Machine: {machine_line(args.dsn)}.",
            "Settings: the cluster's defaults, `enqueue_run` with its defaults, one call per",
            "transaction. The tables are filled with one set-based INSERT each, bypassing the API",
            "on purpose (see bench/growth.py): finished, keyed runs over 30 days, 1 % queued, a",
            "tenth with a coalesced key; the floor table gets as many rows.",
            "",
            "| driver | connections | existing runs | floor ops/s | enqueue_run ops/s | ratio |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"Slowdown, rate at {small:,} over rate at {large:,} (1.00× = no slowdown):",
            "",
            "| driver | connections | enqueue_run | target | | floor, for the machine |",
            "|---|---|---|---|---|---|",
            *summary,
        ]
    )
    publish(body, "growth", args.write)


if __name__ == "__main__":
    main()
