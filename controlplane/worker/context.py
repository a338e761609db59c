"""What a handler can ask about the run it is working on:
:func:`current_run_context` returns the :class:`RunContext` of the run this
thread (sync handler) or task (async handler) handles.

The context says when the run is no longer this worker's (``cancelled``:
a heartbeat was refused — the run was recovered, cancelled, stopped by a
budget — or the handler's ``timeout`` passed). An async handler is also
cancelled then; a sync handler cannot be interrupted from outside (Python
threads cannot be stopped safely), so a long one checks ``cancelled`` between
its steps and returns: whatever it returns is not written.

It also records what the run costs as it goes (``record_cost`` in a sync
handler, ``await arecord_cost`` in an async one): ``record_run_cost`` fenced
by the run's attempt and the worker's id, so a budget (docs/api.md §9) sees
the spend while the run is still working, and its next heartbeat stops it
once the budget is reached."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from decimal import Decimal

from controlplane.models import Run


@dataclass(eq=False)
class RunContext:
    """The run a handler works on, and whether it is still its to work on."""

    run: Run
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: Set by the worker that handles the run: Worker the first, AsyncWorker the second.
    recorder: Callable[[Decimal | float | int], bool] | None = None
    async_recorder: Callable[[Decimal | float | int], Awaitable[bool]] | None = None

    def record_cost(self, amount: Decimal | float | int) -> bool:
        """Add ``amount`` (finite, >= 0) to the run's cost and its agent's and
        workspace's spend (``record_run_cost``); True if recorded. In a sync
        handler (:class:`~controlplane.worker.Worker`)."""
        if self.recorder is None:
            raise RuntimeError(
                "record_cost is for a sync handler: an async one awaits arecord_cost"
            )
        return self.recorder(amount)

    async def arecord_cost(self, amount: Decimal | float | int) -> bool:
        """:meth:`record_cost` in an async handler
        (:class:`~controlplane.worker.AsyncWorker`)."""
        if self.async_recorder is None:
            raise RuntimeError("arecord_cost is for an async handler: a sync one calls record_cost")
        return await self.async_recorder(amount)


_current: ContextVar[RunContext | None] = ContextVar("office_run_context", default=None)


def current_run_context() -> RunContext:
    """The context of the run the calling handler works on; RuntimeError
    outside a handler of :class:`~controlplane.worker.Worker` or
    :class:`~controlplane.worker.AsyncWorker`."""
    context = _current.get()
    if context is None:
        raise RuntimeError("no run is being handled here: call this from a worker's handler")
    return context
