"""The dashboard's database: a pool opened on first use and dropped when the
server goes away, so the pages come back by themselves when it does."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from controlplane.cli.base import describe
from controlplane.client import Office
from controlplane.client.queries.dashboard import DASHBOARD_STATEMENT_TIMEOUT
from controlplane.ui.queries import Dashboard

#: Seconds a page waits for the database before it shows the banner.
CONNECT_TIMEOUT = 3.0
#: The longest statement a page may run. Lists are keyset pages on primary
#: keys, but a filter that matches almost nothing walks the key to its end;
#: past this the page says so instead of loading the database it watches.
STATEMENT_TIMEOUT = "5s"


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.execute(DASHBOARD_STATEMENT_TIMEOUT.text, {"timeout": STATEMENT_TIMEOUT})


class DatabaseDown(Exception):
    """The database could not be reached (or went away mid-page)."""


class Database:
    """A pool opened on first use and dropped when the server goes away, so
    the dashboard comes back by itself when the database does."""

    def __init__(self, dsn: str, timeout: float = CONNECT_TIMEOUT) -> None:
        self._dsn = dsn
        self._timeout = timeout
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Any] | None = None
        self._office: Office | None = None

    def _open(self) -> Office:
        with self._lock:
            if self._office is None:
                pool: ConnectionPool[Any] = ConnectionPool(
                    self._dsn,
                    min_size=1,
                    max_size=4,
                    kwargs={"autocommit": True, "connect_timeout": max(1, int(self._timeout))},
                    timeout=self._timeout,
                    # A connection the server dropped is found at checkout,
                    # not by the page that would use it.
                    check=ConnectionPool.check_connection,
                    configure=_configure,
                    open=False,
                    name="office-ui",
                )
                try:
                    pool.open(wait=True, timeout=self._timeout)
                except PoolTimeout:
                    pool.close()
                    raise DatabaseDown("the database does not answer") from None
                self._pool, self._office = pool, Office(pool=pool)
            return self._office

    def discard(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
            self._pool = self._office = None

    @contextmanager
    def dashboard(self) -> Iterator[Dashboard]:
        office = self._open()
        try:
            yield Dashboard(office)
        except psycopg.errors.QueryCanceled:
            raise  # statement_timeout: the page says so; the database is up
        except (psycopg.OperationalError, PoolTimeout) as exc:
            self.discard()
            raise DatabaseDown(describe(exc)) from None

    def close(self) -> None:
        self.discard()
