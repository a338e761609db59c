"""``officectl doctor``: is this database's office installation sound?

Each check reads the catalog (nothing is changed) and yields findings: what
it saw and, for anything wrong, what to do about it. A ``problem`` makes the
command exit non-zero; a ``warning`` is worth knowing but does not.

Checks:

* version - ``office.schema_version()`` against this package's version
  (:func:`controlplane.schema.current_version`), and the extension's own
  version where office is an extension;
* indexes - the dedup and routine-gate indexes of docs/api.md exist, are valid and
  have exactly the documented columns and predicates;
* roles and grants - the four office roles exist, ``office_admin`` is a member
  of the other three, each has USAGE on the schema, ``office_admin`` may call
  every API function, and PUBLIC has nothing on the schema or in it;
* settings - ``office.idempotency_window`` and ``office.coalesce_window`` are
  non-negative intervals, ``office.notify`` is ``edge`` (the default),
  ``every`` (or ``on``) or ``off``, wherever they are set (this session,
  ``ALTER DATABASE``/``ALTER ROLE … SET``);
* probes - what mixed-version clients probe for (``runs.entry_triggered``);
* workspaces - rows that reference across workspaces (a task's parent, blocker
  or assignee, a routine's assignee in another workspace): 0.4.0 refuses new
  ones (OFW01) but does not re-check rows written before it.
* poison - the rows the daemon's loops set aside because they cannot process
  them (``office.poison``), one warning each, with the error and how to
  release the row once repaired.
* budgets - a warning for each workspace whose agents no budget caps, and
  for each agent or workspace at 80 % of its budget or more (since 0.5.0).

On a proxy DSN (:mod:`controlplane.scaleout.shards`) every check runs on each shard,
its findings labelled with the shard, and the ``cluster`` check adds a
problem for a shard that cannot be reached and for shards (or the proxy) on
different versions (:mod:`controlplane.doctor.cluster`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from controlplane.client.queries import doctor as q
from controlplane.doctor.cluster import Connect, check_cluster
from controlplane.doctor.findings import Finding, Status, one
from controlplane.doctor.installation import (
    check_admin_can_call,
    check_indexes,
    check_native,
    check_public,
    check_roles,
    check_version,
)
from controlplane.doctor.runtime import (
    check_budgets,
    check_poison,
    check_probes,
    check_settings,
    check_workspaces,
)
from controlplane.scaleout import shards

__all__ = ["CHECKS", "Finding", "Status", "examine", "healthy", "run_checks"]

CHECKS = (
    check_version,
    check_native,
    check_indexes,
    check_roles,
    check_public,
    check_admin_can_call,
    check_settings,
    check_probes,
    check_workspaces,
    check_poison,
    check_budgets,
)


def run_checks(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Every finding for the database of ``conn`` (an autocommit connection)."""
    installed = one(conn, q.DOCTOR_OFFICE_SCHEMA)
    if not installed:
        return [
            Finding(
                check="version",
                status=Status.PROBLEM,
                detail="office is not installed in this database (no schema office)",
                fix="officectl migrate (or CREATE EXTENSION office)",
            )
        ]
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(conn))
    return findings


def examine(dsn: str, connect: Connect) -> list[Finding]:
    """Every finding for the database ``dsn`` names, or for each shard of the
    proxy it names; ``connect`` opens the doctor's connections."""
    with connect(dsn) as conn:
        topology = shards.topology_of(conn, dsn)
        if topology.proxy is None:
            return run_checks(conn)
    return check_cluster(topology, connect, run_checks)


def healthy(findings: Iterable[Finding]) -> bool:
    return all(f.status is not Status.PROBLEM for f in findings)
