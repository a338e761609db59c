"""Typed errors for the SQLSTATEs of docs/api.md §7.

Bad input and broken preconditions are errors; a duplicate, a coalesce or a
policy skip never is (those are outcomes, see ``controlplane.models``). Every
error keeps the server's message, which names the offending value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import TracebackType

import asyncpg
import psycopg


class OfficeError(Exception):
    """Base of every office error; ``sqlstate`` is the server's (or the
    equivalent Python-side) SQLSTATE."""

    sqlstate: str = ""

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if sqlstate is not None:
            self.sqlstate = sqlstate

    def __str__(self) -> str:
        return f"{self.message} (SQLSTATE {self.sqlstate})" if self.sqlstate else self.message


class InvalidArgument(OfficeError, ValueError):
    """22023: an argument is invalid (empty required text, bad payload, unknown
    state/status/policy/cause, key or payload too long, …)."""

    sqlstate = "22023"


class AgentNotFound(OfficeError, LookupError):
    sqlstate = "OFA01"


class AgentNotAcceptingRuns(OfficeError):
    """OFA02: the agent is paused, stopped or pending approval."""

    sqlstate = "OFA02"


class TaskNotFound(OfficeError, LookupError):
    sqlstate = "OFT01"


class RoutineNotFound(OfficeError, LookupError):
    """OFR01: routine, routine trigger, routine run or wakeup request not found."""

    sqlstate = "OFR01"


class WorkspaceMismatch(OfficeError):
    """OFW01: a reference across workspaces (a task's parent, blocker or
    assignee, a routine's assignee), or an agent moved to another workspace."""

    sqlstate = "OFW01"


ERRORS_BY_SQLSTATE: dict[str, type[OfficeError]] = {
    cls.sqlstate: cls
    for cls in (
        InvalidArgument,
        AgentNotFound,
        AgentNotAcceptingRuns,
        TaskNotFound,
        RoutineNotFound,
        WorkspaceMismatch,
    )
}


def error_for(sqlstate: str, message: str) -> OfficeError:
    """The typed error for a SQLSTATE of docs/api.md §7 (``OfficeError`` for others)."""
    return ERRORS_BY_SQLSTATE.get(sqlstate, OfficeError)(message, sqlstate=sqlstate)


# --- driver errors -> domain ------------------------------------------------

UNIQUE_VIOLATION = "23505"

#: The unique indexes that *are* the durable dedup, and the queue each guards.
DEDUP_INDEXES: dict[str, str] = {
    "idx_run_idempotency": "runs",
    "idx_wakeup_idempotency": "wakeup",
}


class UniqueViolationError(OfficeError):
    """23505 on anything but a dedup index (e.g. a primary-key collision on
    ``runs_pkey``): a real error, unlike a hit on ``idx_run_idempotency``."""

    sqlstate = UNIQUE_VIOLATION

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        constraint_name: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message, sqlstate=sqlstate)
        self.constraint_name = constraint_name
        self.detail = detail


class DedupIndexHit(Exception):
    """A unique violation on a dedup index (:data:`DEDUP_INDEXES`).

    Not an :class:`OfficeError` on purpose: a duplicate is an outcome. The
    clients catch it and return ``deduped``/``durable``; it only escapes from
    :class:`wrap_exceptions` used on its own.
    """

    def __init__(
        self, message: str, *, constraint_name: str, detail: str | None, table_name: str | None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.constraint_name = constraint_name
        self.detail = detail
        self.table_name = table_name

    @property
    def queue(self) -> str:
        return DEDUP_INDEXES[self.constraint_name]

    @property
    def key(self) -> str | None:
        """The conflicting key, from the server's detail
        (``Key (idempotency_key)=(<key>) already exists.``); None when the
        server withheld it."""
        if self.detail is None:
            return None
        match = _KEY_DETAIL.match(self.detail)
        return match.group(1) if match else None


_KEY_DETAIL = re.compile(r"\AKey \(idempotency_key\)=\((.*)\) already exists\.\Z", re.DOTALL)


@dataclass(frozen=True)
class _ServerError:
    """The fields both drivers expose, read the same way."""

    sqlstate: str
    message: str
    constraint_name: str | None
    detail: str | None
    table_name: str | None


def _server_error(exc: BaseException) -> _ServerError | None:
    if isinstance(exc, psycopg.Error):
        if exc.sqlstate is None:  # client-side (connection, programming) errors
            return None
        diag = exc.diag
        return _ServerError(
            exc.sqlstate,
            diag.message_primary or str(exc),
            diag.constraint_name,
            diag.message_detail,
            diag.table_name,
        )
    if isinstance(exc, asyncpg.PostgresError):
        sqlstate = getattr(exc, "sqlstate", None)
        if not sqlstate:
            return None
        return _ServerError(
            sqlstate,
            getattr(exc, "message", None) or str(exc),
            getattr(exc, "constraint_name", None),
            getattr(exc, "detail", None),
            getattr(exc, "table_name", None),
        )
    return None


def translate(exc: BaseException) -> BaseException | None:
    """The domain exception for a psycopg/asyncpg server error, or None when
    it stays as it is.

    * a SQLSTATE of docs/api.md §7 → its typed error, with the server's message;
    * 23505 on a dedup index → :class:`DedupIndexHit` (the clients turn it
      into an outcome);
    * any other 23505 → :class:`UniqueViolationError`;
    * anything else → None (the driver's error is raised unchanged).
    """
    err = _server_error(exc)
    if err is None:
        return None
    if err.sqlstate == UNIQUE_VIOLATION:
        if err.constraint_name in DEDUP_INDEXES:
            return DedupIndexHit(
                err.message,
                constraint_name=err.constraint_name,
                detail=err.detail,
                table_name=err.table_name,
            )
        return UniqueViolationError(
            err.message, constraint_name=err.constraint_name, detail=err.detail
        )
    if err.sqlstate in ERRORS_BY_SQLSTATE:
        return error_for(err.sqlstate, err.message)
    return None


class wrap_exceptions:
    """Translate driver errors raised inside the block (see :func:`translate`).

    Usable as ``with wrap_exceptions():`` (also inside coroutines) and as
    ``async with wrap_exceptions():``. The driver's exception stays attached
    as ``__cause__``.
    """

    def __enter__(self) -> wrap_exceptions:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            return
        translated = translate(exc)
        if translated is not None:
            raise translated from exc

    async def __aenter__(self) -> wrap_exceptions:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
