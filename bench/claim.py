"""claim_run benchmark: its cost as the backlog of agents that hold a claim grows.

    bash bench/run.sh claim

An agent that already holds a claimed run cannot be given another, so its
queued runs are work ``claim_run`` must skip. With 0, 50,000 and 200,000
queued runs of such *busy* agents, three cases run for --seconds each in a
closed loop on one connection:

* ``claim_run()`` that finds nothing (every agent with queued runs is busy);
* ``claim_run(worker, agent)`` for one busy agent (its share of the backlog,
  nothing claimable);
* ``claim_run()`` + ``finish_run`` cycling through the runs of free agents
  (a fixed number of them queued), next to the busy backlog.

Each is compared with itself at 0: the time per call at N divided by the
time at 0 (target ≤ 1.5× at 200,000). The backlog is made with
``office.enqueue_run`` (keyless, one task per run so nothing coalesces),
never by writing the table, so whatever the queue maintains for
``claim_run`` is maintained.
"""

from __future__ import annotations

from typing import Any

import psycopg

from bench.common import bench_parser, machine_line, publish, run_sync

BUSY_AGENTS = 64
FREE_AGENTS = 64
#: Queued runs of the free agents before each cycle case: more than a case
#: can drain, so the cycle never runs dry.
FREE_RUNS = 40_000
SIZES = (0, 50_000, 200_000)
TARGET = 1.5

CLAIM_ANY = "SELECT id FROM office.claim_run(%s)"
CLAIM_AGENT = "SELECT id FROM office.claim_run(%s, %s)"
CLAIM = "SELECT id, attempt FROM office.claim_run(%s)"
FINISH = "SELECT office.finish_run(%s, %s)"

CASES = ("claim_run(), nothing claimable", "claim_run(worker, busy agent)", "claim + finish cycle")


#: Runs per enqueue statement: each holds its bucket's transaction lock to
#: the end of the statement, and a lock table holds a few thousand.
CHUNK = 2_000


def enqueue(
    conn: psycopg.Connection[Any], prefix: str, agents: int, first: int, count: int
) -> None:
    """``count`` keyless runs spread over the prefix's agents, each with a
    task of its own (so none coalesces), numbered from ``first``."""
    conn.execute("SET office.notify = off")  # nobody listens
    for low in range(first, first + count, CHUNK):
        high = min(low + CHUNK, first + count) - 1
        conn.execute(
            "SELECT count(office.enqueue_run(%(prefix)s || (n %% %(agents)s), 'bench',"
            " task_id => 'bench-task-' || n))"
            " FROM generate_series(%(low)s::bigint, %(high)s::bigint) n",
            {"prefix": prefix, "agents": agents, "low": low, "high": high},
        )


def settle(conn: psycopg.Connection[Any]) -> None:
    conn.execute("VACUUM ANALYZE office.runs")
    conn.execute("CHECKPOINT")


def setup(dsn: str) -> None:
    """Every busy agent holds one claimed run; no other run exists."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE office.runs CASCADE")  # and what refers to runs
        for prefix, count in (("bench-busy-", BUSY_AGENTS), ("bench-free-", FREE_AGENTS)):
            conn.execute(
                "SELECT office.upsert_agent(%s || n, 'bench') FROM generate_series(0, %s) n",
                (prefix, count - 1),
            )
        for n in range(BUSY_AGENTS):
            conn.execute(
                "SELECT office.enqueue_run(%s, 'bench', task_id => 'bench-claimed')",
                (f"bench-busy-{n}",),
            )
            conn.execute("SELECT office.claim_run('holder', %s)", (f"bench-busy-{n}",))
        settle(conn)


def refill_free(dsn: str, start: int) -> None:
    """Exactly FREE_RUNS queued runs of free agents (none claimed)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "DELETE FROM office.runs"
            " WHERE agent_profile_id LIKE 'bench-free-%' AND status <> 'queued'"
        )
        queued = conn.execute(
            "SELECT count(*) FROM office.runs"
            " WHERE agent_profile_id LIKE 'bench-free-%' AND status = 'queued'"
        ).fetchone()
        missing = FREE_RUNS - (queued[0] if queued else 0)
        if missing > 0:
            enqueue(conn, "bench-free-", FREE_AGENTS, start, missing)
        settle(conn)


def remove_free(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM office.runs WHERE agent_profile_id LIKE 'bench-free-%'")
        settle(conn)


def op(case: str) -> Any:
    def call(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
        if case == CASES[0]:
            row = conn.execute(CLAIM_ANY, (f"w{worker}",), prepare=True).fetchone()
            assert row is None, "every agent with queued runs holds a claim"
        elif case == CASES[1]:
            row = conn.execute(CLAIM_AGENT, (f"w{worker}", "bench-busy-0"), prepare=True).fetchone()
            assert row is None, "the agent holds a claim"
        else:
            row = conn.execute(CLAIM, (f"w{worker}",), prepare=True).fetchone()
            assert row is not None, "the free agents' runs ran out"
            conn.execute(FINISH, row, prepare=True)

    return call


def main() -> None:
    parser = bench_parser(__doc__, "claim")
    parser.add_argument("--warmup", type=float, default=3.0)
    args = parser.parse_args()

    setup(args.dsn)
    rates: dict[tuple[int, str], float] = {}
    backlog = 0
    serial = 1_000_000_000  # task ids of the free agents' runs, apart from the backlog's
    for size in SIZES:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            enqueue(conn, "bench-busy-", BUSY_AGENTS, backlog, size - backlog)
            backlog = size
            settle(conn)
        for case in CASES:
            if case == CASES[2]:
                refill_free(args.dsn, serial)
                serial += FREE_RUNS
            elif size == SIZES[0] and case == CASES[0]:
                run_sync(args.dsn, 1, args.warmup, op(case))  # WAL segments, caches
            result = run_sync(args.dsn, 1, args.seconds, op(case))
            if case == CASES[2]:
                remove_free(args.dsn)
            rates[(size, case)] = result.rate
            print(f"{size:>8,} busy-agent runs  {case:32} {result.rate:9.0f}/s", flush=True)

    rows = []
    for case in CASES:
        base = rates[(SIZES[0], case)]
        cells = []
        for size in SIZES:
            rate = rates[(size, case)]
            cells.append(f"{1000 / rate:.3f} ms ({base / rate:.2f}×)" if rate else "—")
        growth = base / rates[(SIZES[-1], case)] if rates[(SIZES[-1], case)] else float("inf")
        verdict = "met" if growth <= TARGET else "**missed**"
        rows.append(f"| {case} | {' | '.join(cells)} | ≤ {TARGET}× | {verdict} |")

    header = " | ".join(f"{size:,} queued" for size in SIZES)
    body = "\n".join(
        [
            "## `claim_run` as the backlog of busy agents grows",
            "",
            f"Command: `bash bench/run.sh claim`, {args.seconds:g} s per case, one connection.",
            f"Machine: {machine_line(args.dsn)}.",
            "",
            f"{BUSY_AGENTS} busy agents each hold a claimed run; their queued runs (the backlog)",
            "are what `claim_run` must skip. The cycle case claims and finishes the runs of",
            f"{FREE_AGENTS} free agents ({FREE_RUNS:,} queued before it starts). Each cell is the",
            "time per call and, in brackets, that time divided by the time with no backlog.",
            "",
            f"| case | {header} | target | |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    publish(body, "claim", args.write)


if __name__ == "__main__":
    main()
