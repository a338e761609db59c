"""The doctor on a proxy DSN (docs/api.md §8): every check of
:func:`controlplane.doctor.run_checks` on each shard of ``office_cluster``,
each finding labelled with its shard, a problem for a shard that cannot be
reached, and the versions: every shard on one, the proxy's the same."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from controlplane import schema
from controlplane.client.queries import doctor as q
from controlplane.client.queries.runs import SCHEMA_VERSION
from controlplane.doctor.findings import Finding, Status, one
from controlplane.scaleout.shards import Database, Topology

__all__ = ["check_cluster"]

#: Opens an autocommit connection for the doctor (``officectl``'s own).
Connect = Callable[[str], psycopg.Connection[Any]]

CheckAll = Callable[[psycopg.Connection[Any]], list[Finding]]


def check_cluster(topology: Topology, connect: Connect, check_all: CheckAll) -> list[Finding]:
    """The findings of every shard of ``topology`` (``check_all`` on each),
    then the cluster's own: reachable shards, one version everywhere."""
    findings: list[Finding] = []
    versions: dict[str, str] = {}
    for database in topology.databases:
        label = str(database.label)
        try:
            with connect(database.conninfo) as conn:
                found = check_all(conn)
                if one(conn, q.DOCTOR_OFFICE_SCHEMA):
                    versions[label] = str(one(conn, SCHEMA_VERSION))
        except psycopg.Error as exc:
            findings.append(_failed(database, exc))
            continue
        findings.extend(f.model_copy(update={"shard": label}) for f in found)
    findings.extend(_versions(topology, versions))
    return findings


def _failed(database: Database, exc: psycopg.Error) -> Finding:
    """A shard that could not be reached (or checked: a statement failed)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    parts = ", ".join(f"p{p}" for p in database.partitions)
    what = (
        "cannot be reached"
        if isinstance(exc, psycopg.OperationalError)
        else f"could not be checked ({exc.sqlstate})"
    )
    return Finding(
        check="cluster",
        status=Status.PROBLEM,
        shard=database.label,
        detail=(
            f"shard {database.label} ({database.masked}, partitions {parts}) {what}:"
            f" {first}; calls for its workspaces fail and its background work waits"
        ),
        fix=(
            "start it, or correct its connection string in server office_cluster"
            " (ALTER SERVER office_cluster OPTIONS (SET pN '…'))"
        ),
    )


def _versions(topology: Topology, versions: dict[str, str]) -> list[Finding]:
    shards = len(topology.databases)
    found = set(versions.values())
    if len(found) > 1:
        listed = ", ".join(f"{label} {version}" for label, version in versions.items())
        return [
            Finding(
                check="cluster",
                status=Status.PROBLEM,
                detail=(
                    f"the shards run different office versions ({listed}):"
                    " office.schema_version() on the proxy fails with 55000"
                ),
                fix="officectl migrate on each shard, then upgrade office_proxy to match",
            )
        ]
    if len(versions) < shards:
        return []  # an unreachable or bare shard has its own problem above
    version = found.pop() if found else "?"
    if topology.proxy != version:
        return [
            Finding(
                check="cluster",
                status=Status.PROBLEM,
                detail=f"office_proxy {topology.proxy} over shards running office {version}",
                fix=(
                    "ALTER EXTENSION office_proxy UPDATE on the proxy (this package ships"
                    f" office {schema.current_version()})"
                ),
            )
        ]
    partitions = sum(len(d.partitions) for d in topology.databases)
    return [
        Finding(
            check="cluster",
            status=Status.OK,
            detail=(
                f"office_proxy {topology.proxy} over {shards} shards"
                f" ({', '.join(topology.labels)}; {partitions} partitions), all on office {version}"
            ),
        )
    ]
