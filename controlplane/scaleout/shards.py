"""Which databases the background work of a DSN runs on: the one place that
decides it for ``officectl run``, the worker and ``officectl doctor``.

A DSN names either a database with ``office`` (the work runs there) or a
proxy database (docs/api.md §8: the ``office_proxy`` extension, server
``office_cluster``), whose own functions route calls but hold no rows: the
outboxes, the due ticks, the queued wakeups and the ``NOTIFY`` of the runs
are on the shards. For a proxy the work runs on each shard database
directly: the partitions of ``office_cluster`` that name one connection
string are one database, reached as the user mapping says (the current
user's, else PUBLIC's; its ``user`` and ``password`` are added to the
connection string, as PL/Proxy adds them).

The shard connection strings are used from where ``officectl`` runs, so
they must reach the shards from there too (a string without ``host`` means
the local socket of this machine).
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import BaseModel, ConfigDict

from controlplane.client.queries import shards as q
from controlplane.client.sync import fetch_rows

__all__ = [
    "SERVER",
    "Database",
    "ShardsError",
    "Topology",
    "asyncpg_arguments",
    "mask",
    "resolve",
    "topology_of",
    "topology_of_async",
]

#: The PL/Proxy server of the cluster (docs/api.md §8).
SERVER = "office_cluster"

_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)|(://[^:/@]*:)([^@]*)(@)")


class ShardsError(LookupError):
    """The DSN is a proxy whose cluster cannot be read."""


def mask(conninfo: str) -> str:
    """``conninfo`` (key=value or URI) with its password replaced by ``***``."""

    def hide(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return f"{match.group(1)}***"
        return f"{match.group(3)}***{match.group(5)}"

    return _PASSWORD.sub(hide, conninfo)


class Database(BaseModel):
    """One database the work runs on."""

    model_config = ConfigDict(frozen=True)

    #: The shard's name in logs, metrics and findings (its ``dbname``, with
    #: host and port where two shards share one); None for the DSN's own
    #: database.
    label: str | None
    #: How to connect (it may hold a password: show :attr:`masked`).
    conninfo: str
    #: The partitions of office_cluster it holds (empty for the DSN's own).
    partitions: tuple[int, ...] = ()

    @property
    def masked(self) -> str:
        return mask(self.conninfo)


class Topology(BaseModel):
    """The databases of a DSN: itself, or the shards of the proxy it names."""

    #: The version of ``office_proxy`` when the DSN is a proxy, else None.
    proxy: str | None
    databases: list[Database]

    @property
    def labels(self) -> list[str]:
        return [d.label for d in self.databases if d.label is not None]


def resolve(dsn: str, *, connect_timeout: int = 5) -> Topology:
    """The :class:`Topology` of ``dsn``, read on a connection of its own
    (psycopg's errors when it cannot be reached)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout) as conn:
        return topology_of(conn, dsn)


def topology_of(conn: psycopg.Connection[Any], dsn: str = "") -> Topology:
    """The :class:`Topology` of the database of ``conn``; ``dsn`` (how it was
    opened) is the conninfo of the one :class:`Database` of a DSN that is not
    a proxy."""
    extension = fetch_rows(conn, q.PROXY_EXTENSION)
    server = fetch_rows(conn, q.CLUSTER_SERVER, {"server": SERVER}) if extension else []
    return _topology(extension, server, dsn)


async def topology_of_async(conn: Any, dsn: str = "") -> Topology:
    """:func:`topology_of` on an asyncpg connection (or a pool's proxy of one)."""
    extension = [dict(r) for r in await conn.fetch(q.PROXY_EXTENSION.asyncpg_text)]
    server = (
        [dict(r) for r in await conn.fetch(q.CLUSTER_SERVER.asyncpg_text, SERVER)]
        if extension
        else []
    )
    return _topology(extension, server, dsn)


def asyncpg_arguments(conninfo: str) -> dict[str, Any]:
    """``asyncpg.connect`` keywords for a libpq connection string (asyncpg
    reads only URIs, PL/Proxy's partitions are key=value strings)."""
    given = conninfo_to_dict(conninfo)
    names = {"host": "host", "port": "port", "user": "user", "password": "password"}
    arguments: dict[str, Any] = {
        mine: given[theirs] for theirs, mine in names.items() if given.get(theirs)
    }
    if given.get("dbname"):
        arguments["database"] = given["dbname"]
    if "port" in arguments:
        arguments["port"] = int(arguments["port"])
    return arguments


def _topology(extension: list[dict[str, Any]], server: list[dict[str, Any]], dsn: str) -> Topology:
    if not extension:
        return Topology(proxy=None, databases=[Database(label=None, conninfo=dsn)])
    if not server:
        raise ShardsError(
            f"this database is an office proxy but has no server {SERVER}:"
            " run officectl cluster init (docs/scale-out.md)"
        )
    return Topology(
        proxy=str(extension[0]["value"]),
        databases=_shards(server[0]["options"] or [], server[0]["mapping"] or []),
    )


def partition_connstrs(options: list[str]) -> list[tuple[str, tuple[int, ...]]]:
    """The connection strings of office_cluster's ``pN=`` options as the
    server holds them, each with the partitions that name it (one database),
    ordered by their lowest partition."""
    partitions: dict[str, list[int]] = {}
    for option in options:
        name, _, value = option.partition("=")
        if name[:1] == "p" and name[1:].isdigit():
            partitions.setdefault(value, []).append(int(name[1:]))
    return sorted(
        ((connstr, tuple(sorted(parts))) for connstr, parts in partitions.items()),
        key=lambda item: item[1][0],
    )


def mapping_login(mapping: list[str]) -> dict[str, str]:
    """The ``user`` and ``password`` options of a user mapping (CLUSTER_SERVER's
    ``mapping``: the one PL/Proxy itself would use)."""
    return {
        name: value
        for name, _, value in (o.partition("=") for o in mapping)
        if name in ("user", "password")
    }


def _shards(options: list[str], mapping: list[str]) -> list[Database]:
    """The shard databases of the server's options, each with its partitions."""
    login = mapping_login(mapping)
    ordered = partition_connstrs(options)
    where = [conninfo_to_dict(connstr) for connstr, _ in ordered]
    names = [str(w.get("dbname") or w.get("user") or login.get("user") or "shard") for w in where]
    labels = [
        name
        if names.count(name) == 1
        else f"{name}@{where[i].get('host') or 'local'}:{where[i].get('port') or 5432}"
        for i, name in enumerate(names)
    ]
    return [
        Database(
            label=label,
            conninfo=make_conninfo(connstr, **login),
            partitions=parts,
        )
        for label, (connstr, parts) in zip(labels, ordered, strict=True)
    ]
