"""What a handler can ask about the run it is working on:
:func:`current_run_context` returns the :class:`RunContext` of the run this
thread (sync handler) or task (async handler) handles.

The context says when the run is no longer this worker's (``cancelled``:
a heartbeat was refused — the run was recovered, cancelled, stopped by a
budget — or the handler's ``timeout`` passed). An async handler is also
cancelled then; a sync handler cannot be interrupted from outside (Python
threads cannot be stopped safely), so a long one checks ``cancelled`` between
its steps and returns: whatever it returns is not written."""

from __future__ import annotations

import threading
from contextvars import ContextVar
from dataclasses import dataclass, field

from controlplane.models import Run


@dataclass(eq=False)
class RunContext:
    """The run a handler works on, and whether it is still its to work on."""

    run: Run
    cancelled: threading.Event = field(default_factory=threading.Event)


_current: ContextVar[RunContext | None] = ContextVar("office_run_context", default=None)


def current_run_context() -> RunContext:
    """The context of the run the calling handler works on; RuntimeError
    outside a handler of :class:`~controlplane.worker.Worker` or
    :class:`~controlplane.worker.AsyncWorker`."""
    context = _current.get()
    if context is None:
        raise RuntimeError("no run is being handled here: call this from a worker's handler")
    return context
