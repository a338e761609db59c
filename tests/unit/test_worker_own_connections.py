"""The threaded worker's heartbeats and listener open their connections
themselves, with the settings of ``office``'s pool, and retry with the
worker's backoff. A pool of their own would reconnect in the background on a
backoff of its own, counting each connection it waits to reopen as one of its
slots: after a server restart they could wait on that pool until it timed out
(a ``PoolTimeout``, a second loss of one outage) while the claims, on
``office``'s pool, had already logged the return. Pure Python: the server is
a port that refuses connections, so each of their tries must log that refusal
(a pool of theirs would log its own wait instead)."""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from controlplane.client import Office
from controlplane.models import Run
from controlplane.worker import Worker
from tests.harness import wait_for

OWN = ("heartbeat", "listen")


def _nothing(run: Run) -> None:
    raise AssertionError("no run can be claimed from a server that refuses connections")


def test_the_heartbeats_and_the_listener_connect_themselves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="controlplane")
    with socket.socket() as refusing:
        refusing.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
        port = refusing.getsockname()[1]
        pool: ConnectionPool[Any] = ConnectionPool(
            f"host=127.0.0.1 port={port} user=office dbname=office",
            kwargs={"autocommit": True},
            timeout=1.0,
            open=False,
        )
        pool.open(wait=False)
        worker = Worker(Office(pool=pool), _nothing, heartbeat=0.1, poll=0.1)
        thread = threading.Thread(target=worker.run, name="test-worker")
        thread.start()
        try:

            def tries() -> list[logging.LogRecord]:
                records = [r for r in caplog.records if getattr(r, "loop", None) in OWN]
                return records if {getattr(r, "loop", None) for r in records} == set(OWN) else []

            records = wait_for(tries, "a failed try of the heartbeats and of the listener")
        finally:
            worker.stop(force=True)
            thread.join()
            pool.close()
    assert all(f"port {port} failed" in r.getMessage() for r in records), [
        r.getMessage() for r in records
    ]
