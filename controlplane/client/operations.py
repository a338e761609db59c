"""All the operations of a client, once for both: the flows of each
capability (:mod:`~controlplane.client.runs`, :mod:`~controlplane.client.tasks`,
:mod:`~controlplane.client.events`, :mod:`~controlplane.client.routines`,
:mod:`~controlplane.client.daemon`, :mod:`~controlplane.client.dashboard`,
:mod:`~controlplane.client.policies`) over
the shared core (:class:`controlplane.client.core.OperationsCore`).

Each public method is the definition of the client method of the same name:
its signature and docstring are what :class:`controlplane.client.Office` and
:class:`controlplane.client.AsyncOffice` show in ``help()``, and both run it
with their driver (:mod:`controlplane.client.facade`).
"""

from __future__ import annotations

from controlplane.client.daemon import DaemonOperations
from controlplane.client.dashboard import DashboardOperations
from controlplane.client.events import EventOperations
from controlplane.client.policies import PolicyOperations
from controlplane.client.routines import RoutineOperations
from controlplane.client.runs import RunOperations
from controlplane.client.tasks import TaskOperations

__all__ = ["Operations"]


class Operations(
    RunOperations,
    TaskOperations,
    EventOperations,
    RoutineOperations,
    DaemonOperations,
    DashboardOperations,
    PolicyOperations,
):
    """The I/O-free half of a client: its schema-probe state, its reporter,
    and one flow per operation."""
