"""bench/peers.py measures each peer's enqueue with its dedup key: a key the
peer already holds adds no job, a fresh key adds one. Skipped without the
bench extra (`make bench` installs it; `make test` does not)."""

from __future__ import annotations

import os
import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

pytest.importorskip("pgqueuer")
pytest.importorskip("procrastinate")

from bench import enqueue, peers
from tests import harness

JOBS = {"pgqueuer": "public.pgqueuer", "procrastinate": "public.procrastinate_jobs"}


@pytest.mark.parametrize("name", sorted(peers.PEERS))
def test_a_repeated_key_adds_no_job(dsn: str, name: str) -> None:
    peer = peers.PEERS[name]
    database = f"bench_{name}_{harness.LABEL}_{os.getpid()}"
    peer_dsn = peers.create_database(dsn, peer, database)
    lock = threading.Lock()
    try:
        for driver in peer.drivers:
            peers.reset(peer, peer_dsn, "repeated", "fresh")  # the pool of repeated keys
            pool = {f"pool-{n}" for n in range(enqueue.REPEATED_POOL)}
            used: set[str] = set()

            def key(worker: int, i: int, used: set[str] = used) -> str:
                k = enqueue._key("repeated", worker, i, 0)
                with lock:
                    used.add(k)
                return k

            # Two clients, 9 keys in 10 from the pool: each call's outcome is
            # in the job count, however many calls the loop made.
            peer.run(peer_dsn, driver, 2, 0.3, key)
            with psycopg.connect(peer_dsn) as conn:
                row: Any = conn.execute(f"SELECT count(*) FROM {JOBS[name]}").fetchone()
            assert used - pool, f"{driver}: no fresh key was enqueued"
            assert used & pool, f"{driver}: no repeated key was enqueued"
            assert row[0] == len(pool | used), driver
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
            )
