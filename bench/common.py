"""Load generation and reporting shared by the benchmarks.

A case is a per-connection operation run in a closed loop for a fixed time on
N connections; its throughput is compared with a raw floor measured in the
same process, on the same cluster, with the same driver and connection count.
Timing lives here and only here: tests never assert on time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import psycopg

SyncOp = Callable[[psycopg.Connection[Any], int, int], None]  # (conn, worker, i)
AsyncOp = Callable[[asyncpg.Connection, int, int], Awaitable[None]]


@dataclass
class Measurement:
    ops: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0


def run_threads(workers: int, seconds: float, op: Callable[[int, int], None]) -> Measurement:
    """``op(worker, i)`` in a closed loop on ``workers`` threads, started together:
    for clients that hold their own connections (a peer's pool, or ``run_sync``'s)."""
    counts = [0] * workers
    barrier = threading.Barrier(workers + 1)
    deadline = [0.0]

    def worker(index: int) -> None:
        i = 0
        barrier.wait()
        while time.perf_counter() < deadline[0]:
            op(index, i)
            i += 1
        counts[index] = i

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    deadline[0] = start + seconds
    barrier.wait()
    for thread in threads:
        thread.join()
    return Measurement(sum(counts), time.perf_counter() - start)


def run_sync(dsn: str, connections: int, seconds: float, op: SyncOp) -> Measurement:
    """``op`` in a closed loop on ``connections`` psycopg connections (one thread each)."""
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(connections)]
    try:
        return run_threads(connections, seconds, lambda index, i: op(conns[index], index, i))
    finally:
        for conn in conns:
            conn.close()


def run_async(dsn: str, connections: int, seconds: float, op: AsyncOp) -> Measurement:
    """``op`` in a closed loop on ``connections`` asyncpg connections (one task each)."""

    async def main() -> Measurement:
        conns = [await asyncpg.connect(dsn) for _ in range(connections)]
        deadline = time.perf_counter() + seconds

        async def worker(index: int) -> int:
            i = 0
            while time.perf_counter() < deadline:
                await op(conns[index], index, i)
                i += 1
            return i

        start = time.perf_counter()
        counts = await asyncio.gather(*(worker(n) for n in range(connections)))
        elapsed = time.perf_counter() - start
        for conn in conns:
            await conn.close()
        return Measurement(sum(counts), elapsed)

    return asyncio.run(main())


def machine_line(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version'), current_setting('fsync'),"
            " current_setting('synchronous_commit')"
        ).fetchone()
    assert row is not None
    cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    # The load says how far the numbers can be trusted on a shared machine.
    load = " / ".join(f"{avg:.1f}" for avg in os.getloadavg())
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, {cpus} cores "
        f"(load average {load} over 1 / 5 / 15 min), "
        f"PostgreSQL {row[0]} (fsync={row[1]}, synchronous_commit={row[2]}), "
        f"Python {platform.python_version()}, psycopg {psycopg.__version__}, "
        f"asyncpg {asyncpg.__version__}"
    )


def write_section(path: Path, name: str, body: str) -> None:
    """Replace (or append) the section between ``<!-- bench:name -->`` markers."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else f"{text.rstrip()}\n\n{block}\n"
    )
    path.write_text(text)


def bench_parser(doc: str | None, section: str) -> argparse.ArgumentParser:
    """The options bench/run.sh gives every benchmark: --dsn, --seconds, --write."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", required=True, help="a postgresql:// URL with office installed")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per measured case")
    parser.add_argument("--write", type=Path, help=f"update this markdown file's {section} section")
    return parser


def publish(body: str, section: str, path: Path | None) -> None:
    """Print a benchmark's markdown and, given a path, write it as its section there."""
    print(body)
    if path is not None:
        write_section(path, section, body)
