"""The dashboard's reads, as typed methods over office's views and functions.

The client (:class:`controlplane.client.Office`) has no read for these yet;
they live here so that the pages hold no SQL. Every query names office's
objects in full, and every list is keyset-paginated with a bound
(:data:`PAGE_SIZE`), so a table of millions of runs costs one index range
per page. Reads of tables (``office.runs``, ``office.agent_profiles``) need
the owner or a superuser: office's roles are granted functions and views
only, and a refused read raises :class:`NotVisible` for the page to say so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from pydantic import BaseModel, ConfigDict

from controlplane.client import Office
from controlplane.models import Agent, Run, RunStatus

#: Rows per page of every list.
PAGE_SIZE = 50

#: The actions of the dashboard: the office function each one calls.
ACTION_FUNCTIONS = {
    "cancel_run": "office.cancel_run(text, text)",
    "pause_agent": "office.set_agent_status(text, text)",
    "resume_agent": "office.set_agent_status(text, text)",
    "fire_routine": (
        "office.dispatch_routine(text, text, jsonb, text, timestamptz, text, int,"
        " timestamptz, boolean)"
    ),
    "sweep": "office.sweep_stuck_parents(int)",
}


class NotVisible(Exception):
    """The connected role may not read what the page shows."""


class QueueStat(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: RunStatus
    agents: int
    runs: int
    oldest_requested_at: datetime | None


class DedupStat(BaseModel):
    model_config = ConfigDict(frozen=True)

    queue: str
    reason: str
    kind: str
    total: int


class KeylessStat(BaseModel):
    model_config = ConfigDict(frozen=True)

    reason: str
    cause: str
    total: int


class DaemonStats(BaseModel):
    """``office.daemon_stats()``."""

    model_config = ConfigDict(frozen=True)

    pending_events: int
    oldest_pending_event_at: datetime | None
    outbox_lag_seconds: float
    queued_wakeups: int
    due_triggers: int
    claimed_runs: int
    oldest_claimed_at: datetime | None
    oldest_claim_age_seconds: float
    poison_rows: int
    poison_by_loop: dict[str, int]


class Connection(BaseModel):
    """What the pages say about the database: never the DSN (it may carry a
    password), only where it is and who the UI is there."""

    model_config = ConfigDict(frozen=True)

    host: str
    port: int
    dbname: str
    role: str
    server_version: str


class RunFilter(BaseModel):
    """The runs list's filters; empty means any."""

    model_config = ConfigDict(frozen=True)

    status: str = ""
    agent: str = ""
    reason: str = ""
    task: str = ""
    key_prefix: str = ""


class RunPage(BaseModel):
    """One page of runs, newest first; ``next_before`` is the id to pass for
    the next page (None on the last)."""

    model_config = ConfigDict(frozen=True)

    runs: list[Run]
    next_before: str | None


def _escape_like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class Dashboard:
    """The reads (and the privilege checks) of the pages, on an office client."""

    def __init__(self, office: Office) -> None:
        self._office = office

    @property
    def office(self) -> Office:
        return self._office

    @contextmanager
    def _cursor(self) -> Iterator[psycopg.Cursor[dict[str, Any]]]:
        with self._office.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            try:
                yield cur
            except psycopg.errors.InsufficientPrivilege as exc:
                raise NotVisible(str(exc).splitlines()[0]) from None

    def _rows(
        self, query: str | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        with self._cursor() as cur:
            return list(cur.execute(query, params).fetchall())

    def connection(self) -> Connection:
        with self._office.pool.connection() as conn:
            info = conn.info
            role = conn.execute("SELECT current_user").fetchone()
            return Connection(
                host=info.host,
                port=info.port,
                dbname=info.dbname,
                role=str(role[0]) if role else "",
                server_version=str(info.server_version),
            )

    def queue_stats(self) -> list[QueueStat]:
        rows = self._rows(
            "SELECT status, agents, runs, oldest_requested_at FROM office.queue_stats"
        )
        return [QueueStat.model_validate(row) for row in rows]

    def dedup_stats(self) -> list[DedupStat]:
        rows = self._rows(
            "SELECT queue, reason, kind, total FROM office.dedup_stats"
            ' ORDER BY queue COLLATE "C", reason COLLATE "C", kind COLLATE "C"'
        )
        return [DedupStat.model_validate(row) for row in rows]

    def keyless_stats(self) -> list[KeylessStat]:
        rows = self._rows(
            "SELECT reason, cause, total FROM office.keyless_stats"
            ' ORDER BY reason COLLATE "C", cause COLLATE "C"'
        )
        return [KeylessStat.model_validate(row) for row in rows]

    def daemon_stats(self) -> DaemonStats:
        (row,) = self._rows("SELECT * FROM office.daemon_stats()")
        return DaemonStats.model_validate(row)

    def runs(self, filters: RunFilter, before: str | None = None) -> RunPage:
        """A page of runs matching ``filters``, newest first (ids are UUIDv7,
        so id order is creation order), keyset on the primary key."""
        conditions: list[sql.Composable] = [sql.SQL("true")]
        params: dict[str, Any] = {"limit": PAGE_SIZE + 1}
        for column, value in (
            ("status", filters.status),
            ("agent_profile_id", filters.agent),
            ("reason", filters.reason),
            ("task_id", filters.task),
        ):
            if value:
                conditions.append(
                    sql.SQL("r.{} = {}").format(sql.Identifier(column), sql.Placeholder(column))
                )
                params[column] = value
        if filters.key_prefix:
            conditions.append(sql.SQL("r.idempotency_key LIKE %(key_prefix)s"))
            params["key_prefix"] = _escape_like(filters.key_prefix) + "%"
        if before:
            conditions.append(sql.SQL("r.id < %(before)s"))
            params["before"] = before
        query = sql.SQL(
            "SELECT r.* FROM office.runs r WHERE {} ORDER BY r.id DESC LIMIT %(limit)s"
        ).format(sql.SQL(" AND ").join(conditions))
        rows = self._rows(query, params)
        runs = [Run.model_validate(row) for row in rows[:PAGE_SIZE]]
        more = len(rows) > PAGE_SIZE
        return RunPage(runs=runs, next_before=runs[-1].id if more and runs else None)

    def agents(self, after: str | None = None) -> list[Agent]:
        """A page of agents by id."""
        rows = self._rows(
            "SELECT a.* FROM office.agent_profiles a"
            " WHERE %(after)s::text IS NULL OR a.id > %(after)s"
            " ORDER BY a.id LIMIT %(limit)s",
            {"after": after, "limit": PAGE_SIZE},
        )
        return [Agent.model_validate(row) for row in rows]

    def may_call(self, action: str) -> bool:
        """Whether the connected role may call the action's function: the
        database decides, the UI only asks."""
        (row,) = self._rows(
            "SELECT pg_catalog.has_function_privilege(current_user, %(fn)s, 'EXECUTE') AS ok",
            {"fn": ACTION_FUNCTIONS[action]},
        )
        return bool(row["ok"])
