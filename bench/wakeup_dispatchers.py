"""The wakeup loop with 1, 2 and 4 dispatchers: time to drain, and deadlocks.

    bash bench/run.sh wakeup_dispatchers

6,000 wakeup requests of 200 agents are queued (``request_wakeup``, oldest
first in a shuffled agent order), then N connections each call
``dispatch_queued_wakeups(50)`` in its own transaction until none is left,
as N daemons' wakeup loops do. Reported per N: the seconds to drain, the
ratio to one dispatcher's time (measured in the same run on the same
cluster), and the deadlocks (``40P01``) the dispatchers met. Target: 0
deadlocks, and 2 and 4 dispatchers no slower than one.

The same drain is then run by pgbench (``-c N``, one
``dispatch_queued_wakeups(50)`` a transaction, each client its
share of the batches and a few to spare), which counts deadlocks as failed
transactions: the effect shows without this module's client code.
"""

from __future__ import annotations

import math
import os
import random
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from bench.common import bench_parser, machine_line, publish
from bench.pgbench_enqueue import default_pgbench

REQUESTS = 6_000
AGENTS = 200
BATCH = 50
DISPATCHERS = (1, 2, 4)


def _fill(dsn: str) -> None:
    agents = [f"bench-agent-{i:03d}" for i in range(AGENTS)]
    order = [agents[i % AGENTS] for i in range(REQUESTS)]
    random.Random(7).shuffle(order)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET office.notify = off")
        conn.execute("TRUNCATE office.wakeup_requests, office.runs CASCADE")
        for agent in agents:
            conn.execute("SELECT office.upsert_agent(%s, %s)", [agent, "bench"])
        with conn.transaction():
            for n, agent in enumerate(order):
                conn.execute(
                    "SELECT office.request_wakeup(%s, 'user', 'bench', '{}'::jsonb,"
                    " idempotency_key => %s)",
                    [agent, f"bench:{n}"],
                )


def _drain(dsn: str, dispatchers: int) -> tuple[float, int]:
    deadlocks = [0] * dispatchers

    def loop(slot: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET office.notify = off")
            while True:
                try:
                    with conn.transaction():
                        rows = conn.execute(
                            "SELECT 1 FROM office.dispatch_queued_wakeups(%s)", [BATCH]
                        ).fetchall()
                except psycopg.errors.DeadlockDetected:
                    deadlocks[slot] += 1
                    continue
                if rows:
                    continue
                left = conn.execute(
                    "SELECT count(*) FROM office.wakeup_requests WHERE status = 'queued'"
                ).fetchone()
                if left is not None and left[0] == 0:
                    return

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(dispatchers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, sum(deadlocks)


def _queued(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM office.wakeup_requests WHERE status = 'queued'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _pgbench_transactions(dispatchers: int) -> int:
    """Each client's share of the batches the queue holds, and a few to spare."""
    return math.ceil(REQUESTS / BATCH / dispatchers) + 5


def _pgbench_drain(binary: str, dsn: str, dispatchers: int) -> tuple[float, int, int]:
    """pgbench's drain: seconds, failed (deadlocked) transactions, requests left queued."""
    transactions = _pgbench_transactions(dispatchers)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "dispatch.sql"
        script.write_text(f"SELECT count(*) FROM office.dispatch_queued_wakeups({BATCH});\n")
        env = dict(os.environ, PGOPTIONS="-c office.notify=off")
        start = time.perf_counter()
        out = subprocess.run(
            [
                binary,
                "-n",
                "-f",
                str(script),
                "-c",
                str(dispatchers),
                "-j",
                str(dispatchers),
                "-t",
                str(transactions),
                "--failures-detailed",
                dsn,
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
        seconds = time.perf_counter() - start
    failed = re.search(r"number of failed transactions: (\d+)", out)
    return seconds, int(failed.group(1)) if failed else 0, _queued(dsn)


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser(__doc__, "wakeup_dispatchers")
    parser.add_argument("--pgbench", default=default_pgbench(), help="the pgbench binary")
    args = parser.parse_args(argv)
    results: dict[int, tuple[float, int]] = {}
    for dispatchers in DISPATCHERS:
        _fill(args.dsn)
        results[dispatchers] = _drain(args.dsn, dispatchers)
    pgbench: dict[int, tuple[float, int, int]] = {}
    if args.pgbench is not None:
        for dispatchers in DISPATCHERS:
            _fill(args.dsn)
            pgbench[dispatchers] = _pgbench_drain(args.pgbench, args.dsn, dispatchers)
    base = results[1][0]
    lines = [
        "## The wakeup loop with several dispatchers",
        "",
        "`bash bench/run.sh wakeup_dispatchers`: "
        f"{REQUESTS:,} wakeup requests of {AGENTS} agents, drained by N connections "
        f"calling `dispatch_queued_wakeups({BATCH})`.",
        "",
        machine_line(args.dsn),
        "",
        "| dispatchers | seconds to drain | vs one | deadlocks (40P01) |",
        "|---:|---:|---:|---:|",
    ]
    for dispatchers, (seconds, deadlocks) in results.items():
        lines.append(f"| {dispatchers} | {seconds:.2f} | {seconds / base:.2f}× | {deadlocks} |")
    if pgbench:
        pg_base = pgbench[1][0]
        lines += [
            "",
            "The same drain by pgbench (`-c N -j N -t T`, T each client's share of the "
            f"{math.ceil(REQUESTS / BATCH)} batches and 5 to spare, one"
            f" `dispatch_queued_wakeups({BATCH})` a transaction, `--failures-detailed`;"
            " a queue left unfinished would show in the last column):",
            "",
            "| clients | seconds | vs one | failed transactions | left queued |",
            "|---:|---:|---:|---:|---:|",
        ]
        for dispatchers, (seconds, failed, left) in pgbench.items():
            lines.append(
                f"| {dispatchers} | {seconds:.2f} | {seconds / pg_base:.2f}× | {failed} | {left} |"
            )
    publish("\n".join(lines) + "\n", "wakeup_dispatchers", args.write)


if __name__ == "__main__":
    main()
