"""What a handler says: return (finish), raise :class:`Retry` (retry), raise
:class:`Transient` or a type given as ``transient=`` (fail retryably) or raise
anything else (fail); and loading one from ``module:attribute``."""

from __future__ import annotations

import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from controlplane.models import Run
from controlplane.models.common import undecodable

#: ``fail_run``'s ``error_message`` bound (docs/api.md: free texts at most 64 KiB).
ERROR_MESSAGE_BYTES = 64 * 1024

#: The longest ``Retry`` delay the server takes: 100 years, as PostgreSQL
#: compares intervals (1200 months of 30 days).
MAX_RETRY_DELAY = 1200 * 30 * 86400.0

# --- what a handler says ------------------------------------------------------------


class Retry(Exception):
    """Raised by a handler: put the run back in the queue, claimable again in
    ``delay`` seconds (``retry_run``)."""

    def __init__(self, delay: float = 0.0) -> None:
        seconds = float(delay)
        if not math.isfinite(seconds) or not 0.0 <= seconds <= MAX_RETRY_DELAY:
            raise ValueError(f"Retry delay {delay!r} must be between 0 and 100 years of seconds")
        super().__init__(seconds)
        self.delay = seconds

    def __str__(self) -> str:
        return f"retry in {self.delay:g} s"


class Transient(Exception):
    """Raised by a handler: the failure may pass (a rate limit, a timeout
    upstream). The run is failed retryably, ``fail_run(..., retryable =>
    true)``: it is queued again after a jittered back-off while the agent's
    ``max_retries`` allow (docs/api.md §9), and fails for good after that.
    Workers take more such types with ``transient=``."""


class HandlerTimeout(Transient):
    """The handler ran longer than the worker's ``timeout``: the run is
    failed retryably with this message (an async handler is cancelled; a
    sync one is abandoned, its thread left to end on its own)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the handler ran longer than {seconds:g} s")


def failure_text(exc: BaseException) -> str:
    """``fail_run``'s message for an exception: its bare class name, ``": "``
    and its message, cut to 64 KiB (bytes, on a character boundary). A NUL,
    which PostgreSQL text cannot hold, is spelled ``\\x00``."""
    text = f"{type(exc).__name__}: {exc}".replace("\x00", "\\x00")
    return text.encode()[:ERROR_MESSAGE_BYTES].decode(errors="ignore")


class UndecodableRun(Exception):
    """A claimed run whose payload or context_snapshot the client could not
    decode (:func:`controlplane.models.common.decode_json`): it is failed at
    once with this message, its handler never called, so it is not claimed
    again and again."""


def refuse_undecodable(run: Run) -> None:
    """Raise :class:`UndecodableRun` for a run the handler cannot be given."""
    for field in ("payload", "context_snapshot"):
        why = undecodable(getattr(run, field))
        if why is not None:
            raise UndecodableRun(f"run {run.id}: {field} cannot be decoded ({why})")


class _Kind(Enum):
    FINISHED = "finished"
    FAILED = "failed"
    RETRIED = "retried"


@dataclass(frozen=True)
class _Outcome:
    kind: _Kind
    delay: float = 0.0
    message: str = ""
    retryable: bool = False  # FAILED: fail_run(..., retryable => true)


def _outcome_of(
    exc: BaseException | None, transient: tuple[type[BaseException], ...] = ()
) -> _Outcome:
    if exc is None:
        return _Outcome(_Kind.FINISHED)
    if isinstance(exc, Retry):
        return _Outcome(_Kind.RETRIED, delay=exc.delay)
    return _Outcome(
        _Kind.FAILED,
        message=failure_text(exc),
        retryable=isinstance(exc, (Transient, *transient)),
    )


# --- the handler ------------------------------------------------------------------


class HandlerError(Exception):
    """A handler named ``module:function`` that cannot be used; the message is
    one line naming what failed."""


def load_handler(spec: str) -> Callable[[Run], Any]:
    """Import ``module:function`` (``function`` may be dotted, ``obj.method``)
    with the current directory first on ``sys.path``. Every failure is a
    :class:`HandlerError` with one line naming the module or the function."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise HandlerError(f"handler {spec!r} must be written module:function")
    cwd = os.getcwd()
    if not sys.path or sys.path[0] != cwd:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise HandlerError(
            f"cannot import handler module {module_name!r}: {_one_line(failure_text(exc))}"
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise HandlerError(
                f"handler {spec!r}: {module_name!r} has no attribute {attribute!r}"
            ) from None
    if not callable(target):
        raise HandlerError(f"handler {spec!r} is not callable (it is {type(target).__name__})")
    return target  # type: ignore[no-any-return]


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """An ``async def`` (or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - the method, not callable()
    )


def _one_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else text
