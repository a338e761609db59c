"""Run-queue benchmark: office.enqueue_run and claim/finish against a raw floor.

    make bench            # or: bash bench/run.sh enqueue

For each driver (psycopg, asyncpg) and connection count (1, 4), every case runs
for --seconds in a closed loop, --rounds times with the cases in turn, and its
best round is divided by the best round of a floor measured alongside: a
prepared single-row ``INSERT … ON CONFLICT DO NOTHING`` into a table with one
unique index, on the same driver and connections (fresh keys for the
fresh-key cases, 90 % repeated keys for the repeated-key case). One round was
not enough on this kind of machine: its commit flush time moves by 2× within
minutes, and a single round once had the psycopg floor at 1,303/s between
rounds of 2,500/s, which put office at "1.39× the floor".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import psycopg

from bench.common import (
    Measurement,
    bench_parser,
    machine_line,
    publish,
    run_async,
    run_sync,
)

AGENTS = 64
REPEATED_POOL = 100  # keys that 90 % of the repeated-key operations reuse

FLOOR_SQL = "INSERT INTO public.bench_floor (k) VALUES ({}) ON CONFLICT DO NOTHING"
ENQUEUE_SQL = "SELECT outcome FROM office.enqueue_run({}, {}, '{{}}'::jsonb, {}, {})"
CLAIM_SQL = "SELECT id, attempt FROM office.claim_run({})"
FINISH_SQL = "SELECT office.finish_run({}, {})"

_run_counter = itertools.count()


def _params(driver: str, n: int) -> list[str]:
    return ["%s"] * n if driver == "psycopg" else [f"${i + 1}" for i in range(n)]


@dataclass(frozen=True)
class Case:
    name: str
    floor: str  # which floor it is divided by
    target: float | None


CASES = [
    Case("enqueue, fresh keys", "floor, fresh keys", 0.75),
    Case("enqueue, fresh keys, office.notify = off", "floor, fresh keys", None),
    # "The floor" of the targets is one durable single-row insert; a
    # repeated key is also shown against a floor that repeats its keys too
    # (a conflicting insert writes nothing, so it is a much harder bar).
    Case("enqueue, 90% repeated keys", "floor, fresh keys", 1.0),
    Case("enqueue, 90% repeated keys", "floor, 90% repeated keys", None),
    Case("enqueue, one coalescing bucket", "floor, fresh keys", None),
    Case("claim_run + finish_run cycle", "floor, fresh keys", None),
]


def _key(kind: str, worker: int, i: int, run: int) -> str:
    """Fresh keys are unique in the whole benchmark; repeated keys come 9 times
    in 10 from a pool that exists before the case starts."""
    if kind == "repeated" and i % 10:
        return f"pool-{(worker * 7 + i) % REPEATED_POOL}"
    return f"fresh-{run}-{worker}-{i}"


#: Rows in each table before a steady-state case (finished runs for office).
STEADY_ROWS = 100_000
#: Unmeasured seconds of a steady-state case after its checkpoint: the first
#: touch of each page after a checkpoint is a full-page write, and a grown
#: table's first seconds pay for them.
STEADY_SETTLE = 2.0


def reset(dsn: str, case: str, phase: str = "fresh") -> None:
    """Empty every office table but the agents, then set up what ``case`` needs;
    in the ``steady`` phase both the floor and office.runs start with
    STEADY_ROWS rows (runs finished, keyed, so they are not coalesce targets)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.bench_floor (k text NOT NULL)")
        conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS bench_floor_k ON public.bench_floor (k)")
        tables = conn.execute(
            "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') FROM pg_tables"
            " WHERE schemaname = 'office' AND tablename <> 'agent_profiles'"
        ).fetchone()
        conn.execute(f"TRUNCATE public.bench_floor, {tables[0] if tables else 'office.runs'}")
        conn.execute(
            "SELECT office.upsert_agent('bench-agent-' || n, 'bench')"
            " FROM generate_series(0, %s) n",
            (AGENTS - 1,),
        )
        if phase == "steady":
            conn.execute(
                "INSERT INTO public.bench_floor SELECT 'old-' || n FROM generate_series(1, %s) n",
                (STEADY_ROWS,),
            )
            conn.execute(
                "INSERT INTO office.runs (agent_profile_id, reason, status, idempotency_key,"
                " task_id, requested_at, finished_at)"
                " SELECT 'bench-agent-' || (n %% %s), 'task_assigned', 'finished', 'old-' || n,"
                "        'task-old-' || n, now() - interval '1 day', now() - interval '1 day'"
                " FROM generate_series(1, %s) n",
                (AGENTS, STEADY_ROWS),
            )
        if case == "floor, 90% repeated keys":
            conn.execute(
                "INSERT INTO public.bench_floor SELECT 'pool-' || n FROM generate_series(0, %s) n",
                (REPEATED_POOL - 1,),
            )
        elif case == "enqueue, 90% repeated keys":
            conn.execute(
                "SELECT office.enqueue_run('bench-agent-' || (n %% %s), 'task_assigned', '{}',"
                " 'pool-' || n, 'task-pool-' || n) FROM generate_series(0, %s) n",
                (AGENTS, REPEATED_POOL - 1),
            )
        elif case == "claim_run + finish_run cycle":
            # Enough queued runs that the queue never runs dry during the case.
            conn.execute(
                "INSERT INTO office.runs (agent_profile_id, reason, requested_at)"
                " SELECT 'bench-agent-' || (n %% %s), 'task_assigned',"
                "        now() - interval '1 hour' + n * interval '1 millisecond'"
                " FROM generate_series(1, 200000) n",
                (AGENTS,),
            )
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


def sync_op(case: str, run: int) -> Any:
    floor, enqueue = FLOOR_SQL.format("%s"), ENQUEUE_SQL.format(*_params("psycopg", 4))
    claim, finish = CLAIM_SQL.format("%s"), FINISH_SQL.format("%s", "%s")

    def op(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
        if i == 0 and case.endswith("office.notify = off"):
            conn.execute("SET office.notify = off")
        if case.startswith("floor"):
            kind = "repeated" if "repeated" in case else "fresh"
            conn.execute(floor, (_key(kind, worker, i, run),), prepare=True)
        elif case == "enqueue, one coalescing bucket":
            conn.execute(enqueue, ("bench-agent-0", "heartbeat", None, None), prepare=True)
        elif case == "claim_run + finish_run cycle":
            row = conn.execute(claim, (f"w{worker}",), prepare=True).fetchone()
            if row is not None:
                conn.execute(finish, row, prepare=True)
        else:
            kind = "repeated" if "repeated" in case else "fresh"
            key = _key(kind, worker, i, run)
            agent = f"bench-agent-{worker % AGENTS}"
            conn.execute(enqueue, (agent, "task_assigned", key, "task-" + key), prepare=True)

    return op


def async_op(case: str, run: int) -> Any:
    floor, enqueue = FLOOR_SQL.format("$1"), ENQUEUE_SQL.format(*_params("asyncpg", 4))
    claim, finish = CLAIM_SQL.format("$1"), FINISH_SQL.format("$1", "$2")

    async def op(conn: asyncpg.Connection, worker: int, i: int) -> None:
        if i == 0 and case.endswith("office.notify = off"):
            await conn.execute("SET office.notify = off")
        if case.startswith("floor"):
            kind = "repeated" if "repeated" in case else "fresh"
            await conn.execute(floor, _key(kind, worker, i, run))
        elif case == "enqueue, one coalescing bucket":
            await conn.fetchval(enqueue, "bench-agent-0", "heartbeat", None, None)
        elif case == "claim_run + finish_run cycle":
            row = await conn.fetchrow(claim, f"w{worker}")
            if row is not None:
                await conn.fetchval(finish, row[0], row[1])
        else:
            kind = "repeated" if "repeated" in case else "fresh"
            key = _key(kind, worker, i, run)
            agent = f"bench-agent-{worker % AGENTS}"
            await conn.fetchval(enqueue, agent, "task_assigned", key, "task-" + key)

    return op


def settled(phase: str, seconds: float, once: Callable[[float, int], Measurement]) -> Measurement:
    """``once(length, run)`` measured for ``seconds``; in the ``steady`` phase
    after STEADY_SETTLE unmeasured seconds of it. Each call gets a run number of
    its own, so the measured fresh keys never repeat the settle's."""
    if phase == "steady":
        once(STEADY_SETTLE, next(_run_counter))
    return once(seconds, next(_run_counter))


def measure(
    dsn: str, driver: str, connections: int, case: str, seconds: float, phase: str = "fresh"
) -> Measurement:
    """``case`` for ``seconds``: in the ``fresh`` phase on a truncated table right
    after a CHECKPOINT (as the peers are measured), in the ``steady`` phase on a
    grown table after STEADY_SETTLE unmeasured seconds of the same case."""
    reset(dsn, case, phase)

    def once(length: float, run: int) -> Measurement:
        if driver == "psycopg":
            return run_sync(dsn, connections, length, sync_op(case, run))
        return run_async(dsn, connections, length, async_op(case, run))

    return settled(phase, seconds, once)


def main() -> None:
    parser = bench_parser(__doc__, "enqueue")
    parser.add_argument("--connections", default="1,4")
    parser.add_argument("--drivers", default="psycopg,asyncpg")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warmup",
        type=float,
        default=3.0,
        help="seconds of each case, unmeasured, before the measured runs",
    )
    parser.add_argument(
        "--phase",
        choices=("fresh", "steady"),
        default="fresh",
        help="fresh: every case on a truncated table right after a CHECKPOINT; steady: on "
        f"{STEADY_ROWS:,} existing rows after {STEADY_SETTLE:g} s of the case unmeasured",
    )
    parser.add_argument(
        "--case",
        action="append",
        choices=sorted({c.name for c in CASES}),
        help="measure only this case and its floor (repeatable; e.g. to compare two schemas)",
    )
    args = parser.parse_args()

    chosen = [c for c in CASES if args.case is None or c.name in args.case]
    floors = list(dict.fromkeys(c.floor for c in chosen))
    cases = list(dict.fromkeys(floors + [c.name for c in chosen]))
    # A fresh cluster creates (and fsyncs) its WAL segments as they fill up;
    # without a warm-up, whichever case writes WAL first pays for that.
    for case in cases:
        measure(args.dsn, "psycopg", 1, case, args.warmup)
    rows = []
    rates: dict[tuple[str, int, str], float] = {}
    for driver in args.drivers.split(","):
        for connections in (int(c) for c in args.connections.split(",")):
            for _ in range(args.rounds):
                for case in cases:
                    result = measure(args.dsn, driver, connections, case, args.seconds, args.phase)
                    key = (driver, connections, case)
                    rates[key] = max(rates.get(key, 0.0), result.rate)
                    print(
                        f"{driver:8} {connections} conn  {case:34} {result.rate:9.0f}/s", flush=True
                    )
            for c in chosen:
                floor = rates[(driver, connections, c.floor)]
                rate = rates[(driver, connections, c.name)]
                ratio = rate / floor if floor else 0.0
                verdict = (
                    "—" if c.target is None else ("met" if ratio >= c.target else "**missed**")
                )
                target = "—" if c.target is None else f"≥ {c.target:.2f}×"
                rows.append(
                    f"| {c.name} | {driver} | {connections} | {rate:,.0f} | {c.floor} "
                    f"{floor:,.0f} | {ratio:.2f}× | {target} | {verdict} |"
                )

    scaling = []
    for driver in args.drivers.split(","):
        for case in [
            "floor, 90% repeated keys",
            "enqueue, 90% repeated keys",
            "floor, fresh keys",
            "enqueue, fresh keys",
        ]:
            one, four = rates.get((driver, 1, case)), rates.get((driver, 4, case))
            if one and four:
                scaling.append(
                    f"| {case} | {driver} | {one:,.0f} | {four:,.0f} | {four / one:.2f}× |"
                )

    bench_name = "enqueue" if args.phase == "fresh" else "enqueue_steady"
    body = "\n".join(
        [
            "## Run queue: `office.enqueue_run`, claim and finish"
            + ("" if args.phase == "fresh" else ", steady state"),
            "",
            f"Command: `make bench` (`bash bench/run.sh {bench_name}`),"
            f" {args.seconds:g} s per case, best of {args.rounds} rounds, the cases in turn.",
            "Phase: "
            + (
                "every case on a freshly truncated table right after a CHECKPOINT."
                if args.phase == "fresh"
                else f"steady: every case on {STEADY_ROWS:,} existing rows (finished runs for "
                f"office), after a CHECKPOINT and {STEADY_SETTLE:g} s of the case unmeasured."
            ),
            f"Machine: {machine_line(args.dsn)}.",
            "",
            f"A warm-up runs every case for {args.warmup:g} s first "
            "(a fresh cluster would otherwise",
            "pay for creating its WAL segments in whichever case runs first).",
            "Each rate is operations per second summed over the connections (its best round);",
            "the ratio divides it by the floor named beside it, measured in the same rounds with",
            "the same driver and connection count. A claim+finish cycle is two statements",
            "(claim_run, finish_run).",
            "",
            "| case | driver | connections | ops/s | floor ops/s | ratio | target | |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "Scaling from 1 to 4 connections (the dedup counters must not serialise repeated-key",
            "enqueues on one counter row: their scaling should follow the floor's):",
            "",
            "| case | driver | 1 connection | 4 connections | 4 / 1 |",
            "|---|---|---|---|---|",
            *scaling,
        ]
    )
    publish(body, bench_name, args.write)


if __name__ == "__main__":
    main()
