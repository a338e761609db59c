"""Typed errors for the SQLSTATEs of API.md §7.

Bad input and broken preconditions are errors; a duplicate, a coalesce or a
policy skip never is (those are outcomes, see ``controlplane.models``). Every
error keeps the server's message, which names the offending value.
"""

from __future__ import annotations


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


ERRORS_BY_SQLSTATE: dict[str, type[OfficeError]] = {
    cls.sqlstate: cls
    for cls in (InvalidArgument, AgentNotFound, AgentNotAcceptingRuns, TaskNotFound, RoutineNotFound)
}


def error_for(sqlstate: str, message: str) -> OfficeError:
    """The typed error for a SQLSTATE of API.md §7 (``OfficeError`` for others)."""
    return ERRORS_BY_SQLSTATE.get(sqlstate, OfficeError)(message, sqlstate=sqlstate)
