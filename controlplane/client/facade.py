"""How a client method is made from an operation: once, for both clients.

Every client method is one line, ``name = sync_method(Operations.name)`` in
:class:`controlplane.client.sync.Office` and ``name = async_method(...)`` in
:class:`controlplane.client.aio.AsyncOffice`: the method runs the
operation's flow with the client's driver (``_run``). Its signature (without
the flow's ``Flow[...]`` wrapper) and docstring are the operation's, so
``help(Office.enqueue_run)`` shows what a user calls, and mypy sees the
operation's parameters (a ``ParamSpec``) and its result type.

Two tables of one-liners rather than one table: a blocking and an awaitable
result cannot share one static type; ``tests/unit/test_client_facades.py`` checks
that both tables and :class:`~controlplane.client.operations.Operations`
name the same methods.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from controlplane.client.core import Flow
from controlplane.client.operations import Operations
from controlplane.models import KeylessCause

__all__ = ["AsyncRunner", "FacadeBase", "SyncRunner", "async_method", "sync_method"]

P = ParamSpec("P")
T = TypeVar("T")


class SyncRunner(Protocol):
    _ops: Operations

    def _run(self, flow: Flow[T]) -> T: ...


class AsyncRunner(Protocol):
    _ops: Operations

    async def _run(self, flow: Flow[T]) -> T: ...


def _signature(operation: Callable[..., Any]) -> inspect.Signature:
    """The operation's signature as the client's: ``Flow[X]`` becomes ``X``
    (annotations are strings: ``from __future__ import annotations``)."""
    signature = inspect.signature(operation)
    returns = signature.return_annotation
    if isinstance(returns, str) and returns.startswith("Flow[") and returns.endswith("]"):
        signature = signature.replace(return_annotation=returns[len("Flow[") : -1])
    return signature


def sync_method(
    operation: Callable[Concatenate[Operations, P], Flow[T]],
) -> Callable[Concatenate[SyncRunner, P], T]:
    """The blocking client method of ``operation``."""

    @functools.wraps(operation)
    def method(self: SyncRunner, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(operation(self._ops, *args, **kwargs))

    method.__signature__ = _signature(operation)  # type: ignore[attr-defined]
    return method


def async_method(
    operation: Callable[Concatenate[Operations, P], Flow[T]],
) -> Callable[Concatenate[AsyncRunner, P], Coroutine[Any, Any, T]]:
    """The awaitable client method of ``operation``."""

    @functools.wraps(operation)
    async def method(self: AsyncRunner, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(operation(self._ops, *args, **kwargs))

    method.__signature__ = _signature(operation)  # type: ignore[attr-defined]
    return method


class FacadeBase:
    """What both clients share beyond their operations."""

    _ops: Operations

    def report_keyless(
        self, reason: str, cause: KeylessCause | str, detail: str | None = None
    ) -> None:
        """``ReportKeylessEnqueue`` at a producer's decision site (Python-side
        metric and log; ``enqueue_run(keyless_cause=...)`` also counts it in
        the database). No I/O, so a plain method in both clients."""
        self._ops.reporter.report_keyless(reason, cause, detail)
