"""Hot-path benchmark: WAL per enqueue, the bulk path, claim + finish.

    bash bench/run.sh hotpath

Three measurements next to a raw floor in the same run (psycopg, autocommit,
prepared statements; the floor table ``public.bench_floor`` has one unique
text index, like ``bench/enqueue.py``'s):

* WAL bytes per fresh-key ``enqueue_run`` (one call per transaction) against
  the floor's ``INSERT … ON CONFLICT DO NOTHING`` with the same keys, read
  from ``pg_current_wal_lsn()`` before and after --wal-calls calls, in three
  phases: right after TRUNCATE + CHECKPOINT (the pages are new), in steady
  state (the next --wal-calls calls, same checkpoint), and right after a
  CHECKPOINT on GROWN existing rows (with full_page_writes on, the first touch
  of each existing page after a checkpoint writes its full image). Where
  ``pg_walinspect`` can be created (PostgreSQL 15 contrib), the steady phase's
  records are also summed by kind and relation: where office's bytes go.
  A third contender is the least any implementation of docs/api.md §3 writes: the
  row ``enqueue_run`` stores (its columns, its payload with ``task_id`` and
  ``agent_profile_id`` copied in, its id default) into a copy of
  ``office.runs`` with only the two unique indexes §3 requires (the id, the
  idempotency key), no claim or coalesce index, no trigger, no CHECK.
* ``enqueue_runs`` of --bulk fresh keys in one call against single
  ``enqueue_run`` calls (one per transaction) and against one set-based
  ``INSERT … SELECT … ON CONFLICT DO NOTHING`` of as many rows into the floor;
  and ``enqueue_runs`` of as many requests over 64 buckets, most of which
  coalesce (the per-element path of ``enqueue_runs``); the same rows inserted
  straight into ``office.runs`` (the row's own ceiling against the floor); and
  the fresh bulk call again once the agents have a backlog of QUEUED runs.
* A ``claim_run`` + ``finish_run`` cycle against a raw queue table claimed
  with ``UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)`` and
  finished with an ``UPDATE``, at 1 and 4 connections.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import psycopg

from bench.common import bench_parser, machine_line, publish, run_sync

AGENTS = 64
QUEUED = 100_000  # runs queued before a claim case: more than a case drains

# The floor tables (a keyed table, a raw queue) and the claim cases' queue:
# statements without parameters, so bench/instructions.py runs them too.
FLOOR_TABLES = (
    "CREATE TABLE IF NOT EXISTS public.bench_floor (k text NOT NULL)",
    "CREATE UNIQUE INDEX IF NOT EXISTS bench_floor_k ON public.bench_floor (k)",
    "CREATE TABLE IF NOT EXISTS public.bench_queue (id bigserial PRIMARY KEY,"
    " status text NOT NULL DEFAULT 'queued', claimed_at timestamptz, finished_at timestamptz)",
    "CREATE INDEX IF NOT EXISTS bench_queue_queued ON public.bench_queue (id)"
    " WHERE status = 'queued'",
)
FILL_QUEUE = (
    "INSERT INTO office.runs (agent_profile_id, reason, task_id, requested_at)"
    f" SELECT 'bench-agent-' || (n % {AGENTS}), 'task_assigned', 'task-' || n,"
    "        now() - interval '1 hour' + n * interval '1 millisecond'"
    f" FROM generate_series(1, {QUEUED}) n"
)

ENQUEUE = "SELECT outcome FROM office.enqueue_run(%s, 'task_assigned', '{}'::jsonb, %s, %s)"
FLOOR = "INSERT INTO public.bench_floor (k) VALUES (%s) ON CONFLICT DO NOTHING"
RAW_CLAIM = (
    "UPDATE public.bench_queue SET status = 'claimed', claimed_at = now()"
    " WHERE id = (SELECT id FROM public.bench_queue WHERE status = 'queued'"
    "             ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
)
ENQUEUE_RUNS = "SELECT count(*) FROM office.enqueue_runs(%s::jsonb)"
SET_FLOOR = (
    "INSERT INTO public.bench_floor (k) SELECT %s || n FROM generate_series(1, %s) n"
    " ON CONFLICT DO NOTHING"
)
# The columns enqueue_runs' set-based path inserts, straight into office.runs
# (its triggers and its id default included), over the same agents.
ROW_SET = (
    "INSERT INTO office.runs (agent_profile_id, reason, idempotency_key, task_id)"
    " SELECT 'bench-agent-' || (n %% %s), 'task_assigned', %s || n, 'task-' || %s || n"
    " FROM generate_series(1, %s) n"
)
RAW_FINISH = "UPDATE public.bench_queue SET status = 'finished', finished_at = now() WHERE id = %s"
# The docs/api.md §3 row with only its two required unique indexes (the module
# docstring): made by reset(), not with FLOOR_TABLES, as it needs office.runs.
CONTRACT_TABLE = (
    "CREATE TABLE IF NOT EXISTS public.bench_contract_row (LIKE office.runs INCLUDING DEFAULTS)",
    "CREATE UNIQUE INDEX IF NOT EXISTS bench_contract_row_id ON public.bench_contract_row (id)",
    "CREATE UNIQUE INDEX IF NOT EXISTS bench_contract_row_key"
    " ON public.bench_contract_row (idempotency_key) WHERE idempotency_key IS NOT NULL",
)
CONTRACT_ROW = (
    "INSERT INTO public.bench_contract_row (agent_profile_id, reason, payload, idempotency_key,"
    " task_id) VALUES (%(agent)s, 'task_assigned', jsonb_build_object('task_id', %(task)s::text,"
    " 'agent_profile_id', %(agent)s::text), %(key)s, %(task)s) ON CONFLICT DO NOTHING"
)

_batch = itertools.count()


def reset(dsn: str) -> None:
    """Empty the floor tables, the contract's row table (each made if it is
    missing) and every office table but the agents, then checkpoint."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in FLOOR_TABLES + CONTRACT_TABLE:
            conn.execute(statement)
        tables = conn.execute(
            "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') FROM pg_tables"
            " WHERE schemaname = 'office' AND tablename <> 'agent_profiles'"
        ).fetchone()
        office_tables = tables[0] if tables else "office.runs"
        conn.execute(
            "TRUNCATE public.bench_floor, public.bench_queue, public.bench_contract_row,"
            f" {office_tables}"
        )
        conn.execute(
            "SELECT office.upsert_agent('bench-agent-' || n, 'bench')"
            " FROM generate_series(0, %s) n",
            (AGENTS - 1,),
        )
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


def _lsn(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def _wal_bytes(conn: psycopg.Connection[Any], start: str, end: str) -> int:
    row = conn.execute("SELECT %s::pg_lsn - %s::pg_lsn", (end, start)).fetchone()
    assert row is not None
    return int(row[0])


#: Existing rows of the 'after CHECKPOINT on existing rows' phase, in both tables.
GROWN = 100_000
WAL_PHASES = ("after CHECKPOINT", "steady", f"after CHECKPOINT on {GROWN:,} rows")


def _grow(conn: psycopg.Connection[Any], also_contract: bool = False) -> None:
    """GROWN keyed rows in both tables (finished runs, so none is a coalesce
    target), and the same runs in the contract table if asked, then a
    CHECKPOINT: the next writes touch pages that exist."""
    conn.execute(
        "INSERT INTO public.bench_floor (k) SELECT 'old-' || n FROM generate_series(1, %s) n",
        (GROWN,),
    )
    conn.execute(
        "INSERT INTO office.runs (agent_profile_id, reason, status, idempotency_key, task_id,"
        " requested_at, finished_at)"
        " SELECT 'bench-agent-' || (n %% %s), 'task_assigned', 'finished', 'old-' || n,"
        "        'task-old-' || n, now() - interval '1 day', now() - interval '1 day'"
        " FROM generate_series(1, %s) n",
        (AGENTS, GROWN),
    )
    if also_contract:
        conn.execute("INSERT INTO public.bench_contract_row SELECT * FROM office.runs")
    conn.execute("VACUUM ANALYZE")
    conn.execute("CHECKPOINT")


def _fill_queue(conn: psycopg.Connection[Any]) -> None:
    """QUEUED queued runs over the AGENTS agents, in requested order (the
    claim cases' queue), analyzed and checkpointed."""
    conn.execute(FILL_QUEUE)
    conn.execute("VACUUM ANALYZE")
    conn.execute("CHECKPOINT")


def _walinspect(conn: psycopg.Connection[Any]) -> bool:
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    except psycopg.Error:
        return False
    return True


#: pg_walinspect's records between two LSNs, summed by kind and relation.
WAL_RECORDS = """
SELECT r.resource_manager || ' ' || r.record_type AS kind,
       coalesce(c.relname, '') AS relation, count(*), sum(r.record_length), sum(r.fpi_length)
  FROM pg_get_wal_records_info(%s, %s) r
  LEFT JOIN pg_class c
    ON c.relfilenode = nullif(substring(r.block_ref FROM 'rel \\d+/\\d+/(\\d+)'), '')::oid
 GROUP BY 1, 2
 ORDER BY 4 DESC
"""


def wal_per_call(
    dsn: str, calls: int
) -> tuple[dict[str, tuple[float, float, float]], list[tuple[str, str, float, float, float]]]:
    """(enqueue_run, floor, the contract row) WAL bytes per call in each of
    WAL_PHASES, and pg_walinspect's steady-phase records of enqueue_run per
    call (kind, relation, records, bytes, full-page image bytes; empty
    without it)."""
    out: dict[str, list[float]] = {phase: [] for phase in WAL_PHASES}
    records: list[tuple[str, str, float, float, float]] = []
    batch = next(_batch)
    # The LSN counts every backend's WAL: autovacuum's and autoanalyze's
    # (pg_statistic) would land in whichever batch they run during.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET autovacuum = off")
        conn.execute("SELECT pg_reload_conf()")
    try:
        _wal_batches(dsn, calls, batch, out, records)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET autovacuum")
            conn.execute("SELECT pg_reload_conf()")
    return {phase: (v[0], v[1], v[2]) for phase, v in out.items()}, records


def _wal_batches(
    dsn: str,
    calls: int,
    batch: int,
    out: dict[str, list[float]],
    records: list[tuple[str, str, float, float, float]],
) -> None:
    for kind in ("enqueue", "floor", "contract"):
        reset(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            inspect = kind == "enqueue" and _walinspect(conn)
            for phase in WAL_PHASES:
                if phase == WAL_PHASES[2]:
                    reset(dsn)
                    _grow(conn, also_contract=kind == "contract")
                start = _lsn(conn)
                for i in range(calls):
                    # The same keys for all: each key index pays the same splits.
                    key = f"wal-{batch}-{WAL_PHASES.index(phase)}-{i}"
                    agent = f"bench-agent-{i % AGENTS}"
                    if kind == "enqueue":
                        conn.execute(ENQUEUE, (agent, key, "task-" + key), prepare=True)
                    elif kind == "floor":
                        conn.execute(FLOOR, (key,), prepare=True)
                    else:
                        row = {"agent": agent, "key": key, "task": "task-" + key}
                        conn.execute(CONTRACT_ROW, row, prepare=True)
                end = _lsn(conn)
                out[phase].append(_wal_bytes(conn, start, end) / calls)
                if inspect and phase == "steady":
                    records[:] = [
                        (str(k), str(rel), n / calls, size / calls, fpi / calls)
                        for k, rel, n, size, fpi in conn.execute(WAL_RECORDS, (start, end))
                    ]


def _backend_cpu(pid: int) -> float | None:
    """Seconds the server process ``pid`` has run on a CPU (Linux, same host), or None."""
    try:
        with open(f"/proc/{pid}/schedstat") as stat:
            return int(stat.read().split()[0]) / 1e9
    except OSError:
        return None


def bulk(dsn: str, size: int, rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    """Rows per second: enqueue_runs of ``size`` fresh keys, ``size`` single calls,
    and one set-based floor insert of ``size`` rows (best of ``rounds``); and, when
    the server runs on this host, the backend's CPU milliseconds of the one-call
    cases (least of ``rounds``): what a loaded machine's clock cannot resolve."""
    cpu: dict[str, float] = {}
    best = {
        "enqueue_runs": 0.0,
        "enqueue_runs, coalescing": 0.0,
        "single enqueue_run": 0.0,
        "set-based floor": 0.0,
        "runs row, set-based": 0.0,
        "enqueue_runs, backlog": 0.0,
    }

    def fresh(batch: int) -> str:
        """``size`` requests of fresh keys and tasks over the AGENTS agents."""
        return json.dumps(
            [
                {
                    "agent_profile_id": f"bench-agent-{i % AGENTS}",
                    "reason": "task_assigned",
                    "idempotency_key": f"bulk-{batch}-{i}",
                    "task_id": f"task-bulk-{batch}-{i}",
                }
                for i in range(size)
            ]
        )

    reset(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pid = int(row[0])

        def timed(case: str, statement: str, params: tuple[Any, ...]) -> float:
            """Run ``statement``; its rows per second (and its CPU into ``cpu``)."""
            before, start = _backend_cpu(pid), time.perf_counter()
            conn.execute(statement, params)
            elapsed, after = time.perf_counter() - start, _backend_cpu(pid)
            if before is not None and after is not None:
                cpu[case] = min(cpu.get(case, float("inf")), (after - before) * 1000)
            return size / elapsed

        for _ in range(rounds):
            batch = next(_batch)
            keys = [f"bulk-{batch}-{i}" for i in range(size)]
            rate = timed("enqueue_runs", ENQUEUE_RUNS, (fresh(batch),))
            best["enqueue_runs"] = max(best["enqueue_runs"], rate)

            # The same without task ids: 64 buckets, so most elements coalesce
            # into the run an earlier element made (the per-element path).
            coalescing = json.dumps(
                [
                    {
                        "agent_profile_id": f"bench-agent-{i % AGENTS}",
                        "reason": f"bulk-{batch}",
                        "idempotency_key": "c" + k,
                    }
                    for i, k in enumerate(keys)
                ]
            )
            rate = timed("enqueue_runs, coalescing", ENQUEUE_RUNS, (coalescing,))
            best["enqueue_runs, coalescing"] = max(best["enqueue_runs, coalescing"], rate)

            start = time.perf_counter()
            for i, k in enumerate(keys):
                conn.execute(
                    ENQUEUE, (f"bench-agent-{i % AGENTS}", "s" + k, "task-s" + k), prepare=True
                )
            rate = size / (time.perf_counter() - start)
            best["single enqueue_run"] = max(best["single enqueue_run"], rate)

            rate = timed("set-based floor", SET_FLOOR, (f"setfloor-{batch}-", size))
            best["set-based floor"] = max(best["set-based floor"], rate)

            # The row enqueue_runs stores, inserted straight: its ceiling.
            prefix = f"row-{batch}-"
            rate = timed("runs row, set-based", ROW_SET, (AGENTS, prefix, prefix, size))
            best["runs row, set-based"] = max(best["runs row, set-based"], rate)

        # The same bulk call when its agents have a backlog (the claim cases'
        # queue, analyzed): its probes must not read what the agents hold.
        _fill_queue(conn)
        for _ in range(rounds):
            rate = timed("enqueue_runs, backlog", ENQUEUE_RUNS, (fresh(next(_batch)),))
            best["enqueue_runs, backlog"] = max(best["enqueue_runs, backlog"], rate)
    return best, cpu


def claim_cycles(dsn: str, connections: int, seconds: float) -> tuple[float, float]:
    """(claim_run + finish_run, raw SKIP LOCKED claim + finish) cycles per second."""

    def office_op(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
        row = conn.execute(
            "SELECT id, attempt FROM office.claim_run(%s)", (f"w{worker}",), prepare=True
        ).fetchone()
        if row is not None:
            conn.execute("SELECT office.finish_run(%s, %s)", row, prepare=True)

    def raw_op(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
        row = conn.execute(RAW_CLAIM, prepare=True).fetchone()
        if row is not None:
            conn.execute(RAW_FINISH, row, prepare=True)

    rates = []
    for op in (office_op, raw_op):
        reset(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Both queues are filled the same way, in requested order.
            conn.execute(
                "INSERT INTO public.bench_queue (status)"
                " SELECT 'queued' FROM generate_series(1, %s)",
                (QUEUED,),
            )
            _fill_queue(conn)
        rates.append(run_sync(dsn, connections, seconds, op).rate)
    return rates[0], rates[1]


def main() -> None:
    parser = bench_parser(__doc__, "hotpath")
    parser.add_argument("--wal-calls", type=int, default=2000)
    parser.add_argument("--bulk", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--no-claim",
        action="store_true",
        help="leave out the claim + finish cycles (the WAL and bulk parts need no timed loop)",
    )
    args = parser.parse_args()

    wal, records = wal_per_call(args.dsn, args.wal_calls)
    wal_rows = []
    for phase, (office, floor, contract) in wal.items():
        verdict = "met" if office <= 2 * floor else "**missed**"
        wal_rows.append(
            f"| {phase} | {office:,.0f} | {floor:,.0f} | {office / floor:.2f}× | ≤ 2× | {verdict}"
            f" | {contract:,.0f} ({contract / floor:.2f}×) |"
        )
        print(
            f"WAL {phase:34} enqueue {office:7.0f} B  floor {floor:7.0f} B"
            f"  contract row {contract:7.0f} B",
            flush=True,
        )
    record_rows = [
        f"| {kind} | {relation or '—'} | {n:.2f} | {size:,.1f} | {fpi:,.1f} |"
        for kind, relation, n, size, fpi in records
        if size >= 1
    ]
    breakdown = (
        [
            "",
            "Where the steady phase's bytes of `enqueue_run` go (`pg_walinspect`, per call;"
            " FPI = full-page images, included in the bytes):",
            "",
            "| record | relation | records | bytes | FPI bytes |",
            "|---|---|---|---|---|",
            *record_rows,
        ]
        if record_rows
        else []
    )

    def met(value: float, target: float) -> str:
        return "met" if value >= target else "**missed**"

    rates, cpu = bulk(args.dsn, args.bulk, args.rounds)
    many, coalescing, single, floor, row, backlog = (
        rates["enqueue_runs"],
        rates["enqueue_runs, coalescing"],
        rates["single enqueue_run"],
        rates["set-based floor"],
        rates["runs row, set-based"],
        rates["enqueue_runs, backlog"],
    )
    print(f"bulk {rates} backend CPU ms {cpu}", flush=True)
    cpu_rows = (
        [
            "",
            "The same one-call cases in the backend's CPU time (`/proc/<pid>/schedstat` of the"
            " server process, least of the rounds; the client's clock on a loaded machine"
            " mostly measures the load):",
            "",
            "| path | CPU ms | ratio | target | |",
            "|---|---|---|---|---|",
            f"| `enqueue_runs`, one call, set-based | {cpu['enqueue_runs']:.1f} | — | — | — |",
            "| `enqueue_runs`, one call, element by element | "
            f"{cpu['enqueue_runs, coalescing']:.1f} | — | — | — |",
            f"| `enqueue_runs`, one call, {QUEUED:,} runs queued | "
            f"{cpu['enqueue_runs, backlog']:.1f} | — | — | — |",
            f"| the runs row alone, set-based | {cpu['runs row, set-based']:.1f} | "
            f"{cpu['set-based floor'] / cpu['runs row, set-based']:.2f}× (set-based / row)"
            " | — | — |",
            f"| set-based floor | {cpu['set-based floor']:.1f} | "
            f"{cpu['set-based floor'] / cpu['enqueue_runs']:.2f}× (set-based / bulk) | ≥ 0.30× | "
            f"{met(cpu['set-based floor'] / cpu['enqueue_runs'], 0.3)} |",
        ]
        if len(cpu) == 5
        else []
    )

    claim_rows = []
    for connections in () if args.no_claim else (1, 4):
        office, raw = claim_cycles(args.dsn, connections, args.seconds)
        ratio = office / raw if raw else 0.0
        verdict = "met" if ratio >= 0.6 else "**missed**"
        claim_rows.append(
            f"| {connections} | {office:,.0f} | {raw:,.0f} | {ratio:.2f}× | ≥ 0.60× | {verdict} |"
        )
        print(f"claim {connections} conn office {office:7.0f}/s raw {raw:7.0f}/s", flush=True)
    claim = (
        [
            "",
            "Claim + finish cycles per second (100,000 queued runs over 64 agents for office;",
            "100,000 queued rows for the raw queue; one cycle = two statements):",
            "",
            "| connections | claim_run + finish_run | raw SKIP LOCKED claim + UPDATE"
            " | ratio | target | |",
            "|---|---|---|---|---|---|",
            *claim_rows,
        ]
        if claim_rows
        else []
    )

    body = "\n".join(
        [
            "## Hot path: WAL per enqueue, the bulk path, claim + finish",
            "",
            "Command: `make bench` (`bash bench/run.sh hotpath`),"
            + (" no claim cases," if args.no_claim else f" {args.seconds:g} s per claim case,"),
            f"{args.wal_calls} calls per WAL phase, best of {args.rounds} bulk rounds of "
            f"{args.bulk} rows.",
            f"Machine: {machine_line(args.dsn)}.",
            "",
            "WAL bytes per fresh-key call, one call per transaction (`pg_current_wal_lsn()`",
            "before and after, the same keys for both; 'after CHECKPOINT' is the first batch on a",
            "truncated table, 'steady' the next batch, and the last phase a batch right after a",
            f"CHECKPOINT on {GROWN:,} existing rows, whose pages it touches write full images).",
            "The last column is the least any implementation of docs/api.md §3 writes: the row",
            "`enqueue_run` stores, into a copy of `office.runs` with only the two unique indexes",
            "§3 requires (id, idempotency key), `ON CONFLICT DO NOTHING`; no claim or coalesce",
            "index, trigger or CHECK. Its ratio is to the floor:",
            "",
            "| phase | enqueue_run B/call | floor B/call | ratio | target | |"
            " the contract's row alone B/call |",
            "|---|---|---|---|---|---|---|",
            *wal_rows,
            *breakdown,
            "",
            f"Bulk, {args.bulk} fresh keys (rows per second, best round):",
            "",
            "| path | rows/s | ratio | target | |",
            "|---|---|---|---|---|",
            f"| `enqueue_runs`, one call (distinct fresh keys and buckets: set-based) | {many:,.0f}"
            " | — | — | — |",
            f"| `enqueue_runs`, one call, 64 buckets (most elements coalesce: element by element)"
            f" | {coalescing:,.0f} | {coalescing / single:.2f}× (bulk / single) | — | — |",
            f"| single `enqueue_run` calls, one per transaction | {single:,.0f} | "
            f"{many / single:.2f}× (bulk / single) | ≥ 10× | {met(many / single, 10)} |",
            f"| `enqueue_runs`, one call, {QUEUED:,} runs queued over the {AGENTS} agents"
            f" (analyzed) | {backlog:,.0f} | {backlog / many:.2f}× (backlog / empty) | — | — |",
            f"| set-based `INSERT … SELECT … ON CONFLICT DO NOTHING` (floor) | {floor:,.0f} | "
            f"{many / floor:.2f}× (bulk / set-based) | ≥ 0.30× | {met(many / floor, 0.3)} |",
            f"| the runs row alone: the same `INSERT … SELECT` into `office.runs` (its"
            f" triggers and id default) | {row:,.0f} | {row / floor:.2f}× (row / set-based) |"
            " — | — |",
            *cpu_rows,
            *claim,
        ]
    )
    publish(body, "hotpath", args.write)


if __name__ == "__main__":
    main()
