"""The office clients: :class:`Office` (psycopg 3, blocking) and
:class:`AsyncOffice` (asyncpg), the same methods over one sans-IO core.

* :mod:`~controlplane.client.queries` - every statement, named, in one place:
  a module per capability (``queries/runs.py`` for ``runs.py``, ...);
* :mod:`~controlplane.client.core` - the protocol between an operation and
  its driver (:class:`Call`, :class:`Reply`, :data:`Flow`, :func:`drive`),
  the schema probe and the dedup-index recovery;
* :mod:`~controlplane.client.operations` - one flow per client method
  (by capability: ``runs``, ``tasks``, ``routines``, ``daemon``, ``dashboard``);
* :mod:`~controlplane.client.facade` - how a method is made from a flow;
* :mod:`~controlplane.client.sync` and :mod:`~controlplane.client.aio` - the
  two drivers and their clients.
"""

from controlplane.client.aio import AsyncOffice
from controlplane.client.core import Call, Flow, Reply, as_interval, drive
from controlplane.client.operations import Operations
from controlplane.client.queries import Query
from controlplane.client.queries.runs import HEARTBEAT_RUN
from controlplane.client.sync import Office, perform_psycopg

__all__ = [
    "HEARTBEAT_RUN",
    "AsyncOffice",
    "Call",
    "Flow",
    "Office",
    "Operations",
    "Query",
    "Reply",
    "as_interval",
    "drive",
    "perform_psycopg",
]
