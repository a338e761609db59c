"""The fence of a partition move (controlplane/scaleout/partition_move.py): after the
proxy routes the partition to the target, no session may still write the
partition's rows on the source, or a key answered on the target gets a
second run there, which comes back when the partition does.

Locks held by the move's source transaction cannot do it alone: a writer
that has read a row of the partition but not yet asked for a write lock, or
that waits on another writer's advisory lock, is not blocked by the move; and
a call the proxy routed before the switch may reach the source after the
move's commit. So, after the switch:

1. every proxy transaction that began before it (its PL/Proxy calls may use
   the old route: the server's options are re-read when a transaction starts)
   is waited out, the source sessions that wait on the move's locks ended so
   that those calls fail and are retried by their callers on the new route,
   and the ones still open after ``PROXY_GRACE`` seconds are ended;
2. the move takes ACCESS EXCLUSIVE on the source's moved tables, ending every
   session that holds or waits for a lock on them, or holds a snapshot: once
   it is granted, no other transaction has read the partition's rows, and any
   that tries waits for the move's commit and then finds them deleted.

Ended calls fail with a connection error and write nothing; a retry reaches
the target (docs/scale-out.md "Move a partition")."""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors, sql

PROXY_GRACE = 10.0  # seconds a proxy transaction older than the switch may take to end
_POLL = 0.02

_END_WAITERS = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
    " WHERE pg_backend_pid() = ANY (pg_blocking_pids(pid))"
)


def _terminate(cur: psycopg.Cursor[Any], query: str, params: Any = None) -> None:
    # pg_stat_activity is read once per transaction unless its snapshot is
    # cleared, and the move's source transaction reads it again and again.
    cur.execute("SELECT pg_stat_clear_snapshot()")
    cur.execute(query, params)


def switched_at(proxy: psycopg.Connection[Any]) -> datetime:
    """A time on the proxy's clock after the switch committed."""
    row = proxy.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def wait_out_proxy(
    proxy: psycopg.Connection[Any], since: datetime, src: psycopg.Cursor[Any]
) -> int:
    """Step 1: wait until no proxy transaction begun before ``since`` is open,
    ending meanwhile the source sessions blocked by the move (``src`` is its
    transaction there); returns how many proxy sessions had to be ended."""
    older = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND xact_start < %s"
    )
    deadline = time.monotonic() + PROXY_GRACE
    while True:
        _terminate(src, _END_WAITERS)
        pids = [r[0] for r in proxy.execute(older, (since,)).fetchall()]
        if not pids:
            return 0
        if time.monotonic() > deadline:
            proxy.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
            return len(pids)
        time.sleep(_POLL)


def exclusive(src: psycopg.Cursor[Any], tables: Iterable[str]) -> None:
    """Step 2: ACCESS EXCLUSIVE on ``tables`` (office schema) in the move's
    source transaction, which holds SHARE on them."""
    names = list(tables)
    lock = sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
        sql.SQL(", ").join(sql.Identifier("office", t) for t in names)
    )
    holders = (
        "SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a"
        " WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()"
        " AND ((a.backend_type = 'client backend' AND a.backend_xmin IS NOT NULL)"
        "      OR a.pid IN (SELECT l.pid FROM pg_locks l WHERE l.relation = ANY (%s::regclass[])))"
    )
    # Shorter than deadlock_timeout: a session that read a table and then
    # waits on the move's SHARE lock is a deadlock with this request, and the
    # lock timeout must end the attempt before the detector ends the move.
    src.execute(
        "SELECT set_config('lock_timeout', least(100, setting::int / 2)::text || 'ms', true)"
        " FROM pg_settings WHERE name = 'deadlock_timeout'"
    )
    regclasses = [f"office.{t}" for t in names]
    while True:
        _terminate(src, holders, (regclasses,))
        src.execute("SAVEPOINT fence")
        try:
            src.execute(lock)
        except errors.LockNotAvailable:
            src.execute("ROLLBACK TO SAVEPOINT fence")
            continue
        src.execute("RELEASE SAVEPOINT fence")
        src.execute("SET LOCAL lock_timeout = 0")
        return
