"""Peers benchmark: office against pgqueuer and procrastinate.

    make bench                 # or: bash bench/run.sh peers (needs the bench extra)

Each peer is driven through its own public API, as its users would, with its
dedup key, one job per transaction:

* pgqueuer: ``Queries.enqueue(entrypoint, None, dedupe_key=key,
  on_conflict="skip")``; ``SyncQueries`` over a psycopg connection, ``Queries``
  over an ``AsyncpgDriver``. Its schema is installed by ``Queries.install()``.
* procrastinate: ``task.configure(queueing_lock=key).defer()`` through a
  ``SyncPsycopgConnector`` (its default pool, one connection per thread); a
  repeated key raises ``AlreadyEnqueued``, which the caller catches. It has no
  asyncpg connector (3.x ships psycopg 3, and aiopg / psycopg2 in contrib), so
  it has no asyncpg cells. Its schema is installed by
  ``App.schema_manager.apply_schema()``.

Every peer has a database of its own on the same cluster (dropped and created
here), so no schema mixes with office's. The floor and office are
bench/enqueue.py's cases, measured in the same process and run on --dsn: the
floor a prepared single-row ``INSERT … ON CONFLICT DO NOTHING`` into a table
with one unique index, office ``enqueue_run`` with its defaults; the keys are
enqueue.py's too (fresh: unique in the whole run; repeated: 9 in 10 from a pool
of 100 keys enqueued before the case, through each one's own API).

Two phases (bench/enqueue.py's): ``fresh`` puts every case on freshly truncated
tables right after a CHECKPOINT; ``steady`` first gives every table
STEADY_ROWS keyed rows (office: finished runs; the floor: rows; a peer: jobs
enqueued through its batch API, which stay queued, as nothing consumes them)
and runs the case STEADY_SETTLE seconds unmeasured after the CHECKPOINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from importlib.metadata import version
from typing import Any, Protocol
from urllib.parse import urlsplit

import asyncpg
import psycopg
from pgqueuer.db import AsyncpgDriver, SyncPsycopgDriver
from pgqueuer.queries import Queries, SyncQueries
from procrastinate import App, SyncPsycopgConnector
from procrastinate.exceptions import AlreadyEnqueued
from procrastinate.tasks import Task
from psycopg import sql

from bench import enqueue
from bench.common import (
    Measurement,
    bench_parser,
    machine_line,
    publish,
    run_async,
    run_sync,
    run_threads,
)

KeyFn = Callable[[int, int], str]  # (worker, i) -> the dedup key of that call
#: Keys per batch when a peer's table is filled through its batch API.
CHUNK = 5_000
KINDS = {"fresh": "fresh keys", "repeated": "90% repeated keys"}
TARGET = 1.3  # office over the best peer, every cell


class Peer(Protocol):
    name: str
    database: str
    drivers: tuple[str, ...]

    def install(self, dsn: str) -> None: ...

    def seed(self, dsn: str, keys: list[str]) -> None:
        """Enqueue one job per key through the peer's batch API."""

    def run(
        self, dsn: str, driver: str, connections: int, seconds: float, key: KeyFn
    ) -> Measurement:
        """One keyed enqueue per call, in a closed loop."""


class PgQueuer:
    name = f"pgqueuer {version('pgqueuer')}"
    database = "bench_pgqueuer"
    drivers: tuple[str, ...] = ("psycopg", "asyncpg")
    entrypoint = "bench"

    def install(self, dsn: str) -> None:
        async def install() -> None:
            conn = await asyncpg.connect(dsn)
            try:
                await Queries(AsyncpgDriver(conn)).install()
            finally:
                await conn.close()

        asyncio.run(install())

    def seed(self, dsn: str, keys: list[str]) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            queries = SyncQueries(SyncPsycopgDriver(conn))
            for low in range(0, len(keys), CHUNK):
                chunk: list[str | None] = list(keys[low : low + CHUNK])
                n = len(chunk)
                queries.enqueue(
                    [self.entrypoint] * n, [None] * n, [0] * n, dedupe_key=chunk, on_conflict="skip"
                )

    def run(
        self, dsn: str, driver: str, connections: int, seconds: float, key: KeyFn
    ) -> Measurement:
        if driver == "psycopg":
            sync_queries: dict[int, SyncQueries] = {}

            def op(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
                if i == 0:
                    sync_queries[worker] = SyncQueries(SyncPsycopgDriver(conn))
                sync_queries[worker].enqueue(
                    self.entrypoint, None, dedupe_key=key(worker, i), on_conflict="skip"
                )

            return run_sync(dsn, connections, seconds, op)

        queries: dict[int, Queries] = {}

        async def async_op(conn: asyncpg.Connection, worker: int, i: int) -> None:
            if i == 0:
                queries[worker] = Queries(AsyncpgDriver(conn))
            await queries[worker].enqueue(
                self.entrypoint, None, dedupe_key=key(worker, i), on_conflict="skip"
            )

        return run_async(dsn, connections, seconds, async_op)


def _job() -> None:
    """The task procrastinate defers (never run: nothing consumes the queue)."""


class Procrastinate:
    name = f"procrastinate {version('procrastinate')}"
    database = "bench_procrastinate"
    drivers: tuple[str, ...] = ("psycopg",)

    def _app(
        self, dsn: str, connections: int
    ) -> tuple[App, SyncPsycopgConnector, Task[Any, Any, Any]]:
        connector = SyncPsycopgConnector(conninfo=dsn, min_size=connections, max_size=connections)
        app = App(connector=connector)
        return app, connector, app.task(name="bench_job")(_job)

    def install(self, dsn: str) -> None:
        app, _, _ = self._app(dsn, 1)
        with app.open():
            app.schema_manager.apply_schema()

    def seed(self, dsn: str, keys: list[str]) -> None:
        app, _, task = self._app(dsn, 1)
        with app.open():
            for low in range(0, len(keys), CHUNK):
                jobs = [
                    task.configure(queueing_lock=k).make_new_job() for k in keys[low : low + CHUNK]
                ]
                app.job_manager.batch_defer_jobs(jobs)

    def run(
        self, dsn: str, driver: str, connections: int, seconds: float, key: KeyFn
    ) -> Measurement:
        assert driver in self.drivers
        app, connector, task = self._app(dsn, connections)
        with app.open():
            connector.pool.wait()  # every connection open before the clock starts

            def op(worker: int, i: int) -> None:
                # A repeated lock is the dedup: its job is still waiting.
                with contextlib.suppress(AlreadyEnqueued):
                    task.configure(queueing_lock=key(worker, i)).defer()

            return run_threads(connections, seconds, op)


PEERS: dict[str, Peer] = {"pgqueuer": PgQueuer(), "procrastinate": Procrastinate()}


def database_dsn(dsn: str, database: str) -> str:
    """``dsn`` (a postgresql:// URL, as asyncpg needs) naming another database."""
    return urlsplit(dsn)._replace(path=f"/{database}").geturl()


def create_database(dsn: str, peer: Peer, name: str) -> str:
    """A new, empty database ``name`` with ``peer``'s schema installed; its DSN."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        database = sql.Identifier(name)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(database))
    peer_dsn = database_dsn(dsn, name)
    peer.install(peer_dsn)
    return peer_dsn


def reset(peer: Peer, dsn: str, kind: str, phase: str) -> None:
    """Empty every table of the peer's database, then enqueue what the case
    needs before it starts, as bench/enqueue.py's ``reset`` does for office."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') FROM pg_tables"
            " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchone()
        assert row is not None and row[0]
        conn.execute(f"TRUNCATE {row[0]}")
    keys = [f"old-{n}" for n in range(enqueue.STEADY_ROWS)] if phase == "steady" else []
    if kind == "repeated":
        keys += [f"pool-{n}" for n in range(enqueue.REPEATED_POOL)]
    peer.seed(dsn, keys)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


def measure(
    peer: Peer, dsn: str, driver: str, connections: int, kind: str, seconds: float, phase: str
) -> Measurement:
    reset(peer, dsn, kind, phase)

    def once(length: float, run: int) -> Measurement:
        return peer.run(
            dsn, driver, connections, length, lambda w, i: enqueue._key(kind, w, i, run)
        )

    return enqueue.settled(phase, seconds, once)


def cell(
    dsn: str,
    peers: dict[Peer, str],
    driver: str,
    connections: int,
    kind: str,
    seconds: float,
    phase: str,
    rounds: int,
) -> tuple[float, float, dict[str, float | None]]:
    """(floor, office, each peer's rate or None without the driver) in one cell:
    the best of ``rounds`` rounds, each measuring every contender in turn (on a
    shared machine, load only ever slows a closed loop down)."""
    label = KINDS[kind]
    floor = office = 0.0
    rates: dict[str, float | None] = {
        peer.name: (0.0 if driver in peer.drivers else None) for peer in peers
    }
    for _ in range(rounds):
        args = (dsn, driver, connections)
        floor = max(floor, enqueue.measure(*args, f"floor, {label}", seconds, phase).rate)
        office = max(office, enqueue.measure(*args, f"enqueue, {label}", seconds, phase).rate)
        for peer, peer_dsn in peers.items():
            best = rates[peer.name]
            if best is not None:
                result = measure(peer, peer_dsn, driver, connections, kind, seconds, phase)
                rates[peer.name] = max(best, result.rate)
    return floor, office, rates


def main() -> None:
    parser = bench_parser(__doc__, "peers")
    parser.add_argument("--connections", default="1,4")
    parser.add_argument("--drivers", default="psycopg,asyncpg")
    parser.add_argument("--phases", default="fresh,steady", help="fresh, steady or both")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of every cell, each contender in turn; the best round of each counts",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=3.0,
        help="seconds of the floor, office and each peer, unmeasured, before the measured runs",
    )
    args = parser.parse_args()
    # procrastinate warns that an App made in __main__ is not importable by its
    # workers; none runs here.
    logging.getLogger("procrastinate").setLevel(logging.ERROR)

    peers = {
        PEERS[name]: create_database(args.dsn, PEERS[name], PEERS[name].database)
        for name in args.peers.split(",")
    }
    drivers = args.drivers.split(",")
    connection_counts = [int(c) for c in args.connections.split(",")]

    # As in bench/enqueue.py: a fresh cluster creates its WAL segments as they
    # fill, and whichever case writes WAL first would pay for it.
    for case in ("floor, fresh keys", "enqueue, fresh keys"):
        enqueue.measure(args.dsn, "psycopg", 1, case, args.warmup)
    for peer, peer_dsn in peers.items():
        measure(peer, peer_dsn, "psycopg", 1, "fresh", args.warmup, "fresh")

    sections = []
    for phase in args.phases.split(","):
        rows = []
        for kind, label in KINDS.items():
            for connections in connection_counts:
                for driver in drivers:
                    floor, office, rates = cell(
                        args.dsn, peers, driver, connections, kind, args.seconds, phase, args.rounds
                    )
                    print(
                        f"{phase:6} {label:17} {connections} conn {driver:8} floor {floor:7.0f}/s"
                        f"  office {office:7.0f}/s  "
                        + "  ".join(
                            f"{n} " + ("—" if r is None else f"{r:7.0f}/s")
                            for n, r in rates.items()
                        ),
                        flush=True,
                    )
                    rows.append(_row(label, connections, driver, floor, office, rates))
        sections.append(_table(phase, [p.name for p in peers], rows))

    body = "\n".join(
        [
            "## Peers: office against pgqueuer and procrastinate",
            "",
            f"Command: `make bench` (`bash bench/run.sh peers`), {args.seconds:g} s per case,"
            f" best of {args.rounds} round(s) a cell, {args.warmup:g} s warm-up of each"
            " contender first.",
            f"Machine: {machine_line(args.dsn)}.",
            "Versions: " + ", ".join(p.name for p in peers) + ", each in a database of its own on",
            "the same cluster. Settings: the cluster's defaults; office `enqueue_run` with its",
            "defaults (`office.notify` on); one enqueue per transaction.",
            "",
            "Each rate is enqueues per second summed over the connections; the ratio divides it",
            "by the floor (a prepared single-row `INSERT … ON CONFLICT DO NOTHING`, keys of the",
            "same kind) measured in the same run, driver and connection count. The last column is",
            f"office's rate over the best peer's in that cell (target ≥ {TARGET:g}×). pgqueuer:",
            '`Queries.enqueue(..., dedupe_key=key, on_conflict="skip")`; procrastinate:',
            "`task.configure(queueing_lock=key).defer()`, `AlreadyEnqueued` caught; it has no",
            "asyncpg connector (—).",
            "",
            *sections,
        ]
    )
    publish(body, "peers", args.write)


def _row(
    label: str,
    connections: int,
    driver: str,
    floor: float,
    office: float,
    rates: dict[str, float | None],
) -> str:
    def cell(rate: float | None) -> str:
        if rate is None:
            return "—"
        return f"{rate:,.0f} ({rate / floor:.2f}×)" if floor else f"{rate:,.0f}"

    best = max((r for r in rates.values() if r is not None), default=0.0)
    lead = office / best if best else 0.0
    verdict = "met" if lead >= TARGET else "**missed**"
    peers = " | ".join(cell(r) for r in rates.values())
    return (
        f"| {label} | {connections} | {driver} | {floor:,.0f} | {cell(office)} | {peers}"
        f" | {lead:.2f}× | {verdict} |"
    )


def _table(phase: str, names: list[str], rows: list[str]) -> str:
    title = (
        "Fresh: every case on freshly truncated tables right after a CHECKPOINT."
        if phase == "fresh"
        else f"Steady: every case on {enqueue.STEADY_ROWS:,} existing keyed rows, after a "
        f"CHECKPOINT and {enqueue.STEADY_SETTLE:g} s of the case unmeasured."
    )
    return "\n".join(
        [
            title,
            "",
            "| keys | connections | driver | floor ops/s | office | "
            + " | ".join(names)
            + " | office / best peer | |",
            "|---|---|---|---|---|" + "---|" * len(names) + "---|---|",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    main()
