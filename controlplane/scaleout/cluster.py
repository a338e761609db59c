"""A scale-out cluster: one proxy database (``office_proxy``) over shard
databases (``office``), as docs/api.md §8 and docs/scale-out.md describe.

:func:`init_cluster` writes what a DBA would otherwise write by hand (both
extensions, server ``office_cluster`` with partition ``p`` on shard
``p % shards``, the user mapping, the grants) and checks that every shard runs
one version; :func:`cluster_status` reads it back with the rows each shard
holds.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import BaseModel

from controlplane.client.queries import shards as shard_queries
from controlplane.client.sync import fetch_rows
from controlplane.scaleout.shards import SERVER, mapping_login, mask, partition_connstrs

log = logging.getLogger(__name__)

OFFICE_ROLES = ("office_producer", "office_worker", "office_reader", "office_admin")


class ClusterError(RuntimeError):
    """The cluster cannot be written or read as asked."""


class ShardStatus(BaseModel):
    shard: str  # the connection string, password masked
    partitions: list[int]
    version: str | None  # None when the shard cannot be reached
    error: str | None
    agents: int | None
    tasks: int | None
    runs: int | None


class ClusterStatus(BaseModel):
    partitions: int
    shards: list[ShardStatus]
    versions_agree: bool


def _version(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS office")
        row = conn.execute("SELECT office.schema_version()").fetchone()
    assert row is not None
    return str(row[0])


def plproxy_conninfo(dsn: str) -> str:
    """``dsn`` (key=value or a ``postgresql://`` URL) as key=value: PL/Proxy
    appends ``user=...`` to a partition's string, which would extend a URL's
    database name."""
    try:
        parts = conninfo_to_dict(dsn)
        # A key=value string stays as written, so a server init wrote earlier
        # still compares equal to its shards.
        return make_conninfo("", **parts) if "://" in dsn.split("=", 1)[0] else dsn
    except psycopg.ProgrammingError as exc:
        raise ClusterError(f"not a connection string: {mask(dsn)}: {exc}") from exc


def init_cluster(proxy: str, shards: list[str], partitions: int | None = None) -> ClusterStatus:
    """Install ``office`` on every shard and ``office_proxy`` on ``proxy`` with
    server office_cluster over them. ``partitions`` (a power of two, at least
    the number of shards; default 4 or the next power of two) can exceed the
    shards, so a shard can later be split without rehashing a workspace."""
    if not shards:
        raise ClusterError("a cluster needs at least one --shard")
    count = partitions or max(4, 1 << (len(shards) - 1).bit_length())
    if count < len(shards) or count & (count - 1):
        raise ClusterError(
            f"--partitions must be a power of two >= the {len(shards)} shards, not {count}"
        )
    shards = [plproxy_conninfo(shard) for shard in shards]
    versions = {shard: _version(shard) for shard in shards}
    if len(set(versions.values())) != 1:
        raise ClusterError(f"the shards run different office versions: {versions}")
    wanted = {f"p{p}": shards[p % len(shards)] for p in range(count)}
    # One transaction, checked by a call through the proxy before it commits:
    # an init that fails leaves nothing behind, so a re-run starts afresh.
    with psycopg.connect(proxy) as conn, conn.transaction():
        conn.execute("CREATE EXTENSION IF NOT EXISTS office_proxy CASCADE")
        existing = conn.execute(
            "SELECT srvoptions FROM pg_foreign_server WHERE srvname = %s", (SERVER,)
        ).fetchone()
        if existing is not None:
            have = dict(o.split("=", 1) for o in existing[0] or [] if o.startswith("p"))
            if {k: plproxy_conninfo(v) for k, v in have.items()} != wanted:
                raise ClusterError(
                    f"server {SERVER} exists with other partitions; see docs/scale-out.md"
                    " to move a partition"
                )
            respelled = [k for k, v in have.items() if v != wanted[k]]
            if respelled:
                # The same shards in another spelling (a URL): the form PL/Proxy can use.
                conn.execute(
                    sql.SQL("ALTER SERVER {} OPTIONS ({})").format(
                        sql.Identifier(SERVER),
                        sql.SQL(", ").join(
                            sql.SQL("SET {} {}").format(sql.Identifier(k), sql.Literal(wanted[k]))
                            for k in respelled
                        ),
                    )
                )
        else:
            options = sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(k), sql.Literal(v))
                for k, v in wanted.items()
            )
            conn.execute(
                sql.SQL("CREATE SERVER {} FOREIGN DATA WRAPPER plproxy OPTIONS ({})").format(
                    sql.Identifier(SERVER), options
                )
            )
        user = conn.execute("SELECT current_user").fetchone()
        assert user is not None
        conn.execute(
            sql.SQL(
                "CREATE USER MAPPING IF NOT EXISTS FOR PUBLIC SERVER {} OPTIONS (user {})"
            ).format(sql.Identifier(SERVER), sql.Literal(user[0]))
        )
        conn.execute(
            sql.SQL("GRANT USAGE ON FOREIGN SERVER {} TO {}").format(
                sql.Identifier(SERVER), sql.SQL(", ").join(map(sql.Identifier, OFFICE_ROLES))
            )
        )
        row = conn.execute("SELECT office.schema_version()").fetchone()
    log.info("cluster over %d shards, %d partitions, office %s", len(shards), count, row)
    return cluster_status(proxy)


def with_user(connstr: str, user: str | None) -> str:
    """A shard's connection string as office_cluster holds it, with the user
    of the proxy's mapping unless it names one itself."""
    if user is None or "user" in conninfo_to_dict(connstr):
        return connstr
    return make_conninfo(connstr, user=user)


def _shard_status(connstr: str, user: str | None, parts: tuple[int, ...]) -> ShardStatus:
    try:
        with psycopg.connect(with_user(connstr, user), autocommit=True, connect_timeout=5) as conn:
            row: Any = conn.execute(
                "SELECT office.schema_version(),"
                " (SELECT count(*) FROM office.agent_profiles),"
                " (SELECT count(*) FROM office.tasks), (SELECT count(*) FROM office.runs)"
            ).fetchone()
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ShardStatus(
            shard=mask(connstr),
            partitions=list(parts),
            version=None,
            error=first,
            agents=None,
            tasks=None,
            runs=None,
        )
    return ShardStatus(
        shard=mask(connstr),
        partitions=list(parts),
        version=row[0],
        error=None,
        agents=row[1],
        tasks=row[2],
        runs=row[3],
    )


def shard_connstrs(proxy: str) -> tuple[list[tuple[str, tuple[int, ...]]], str | None]:
    """The shard connection strings of office_cluster with their partitions
    (shards.partition_connstrs), and the user of the mapping PL/Proxy itself
    uses (the current user's, else PUBLIC's: the query the daemon and the
    worker read their shards with)."""
    with psycopg.connect(proxy, autocommit=True) as conn:
        rows = fetch_rows(conn, shard_queries.CLUSTER_SERVER, {"server": SERVER})
    if not rows:
        raise ClusterError(f"no server {SERVER} on this database: run officectl cluster init")
    user = mapping_login(rows[0]["mapping"] or []).get("user")
    return partition_connstrs(rows[0]["options"] or []), user


def cluster_status(proxy: str) -> ClusterStatus:
    """Partitions, shards, versions and rows per shard of the proxy's cluster."""
    shards, user = shard_connstrs(proxy)
    statuses = [_shard_status(connstr, user, parts) for connstr, parts in shards]
    versions = {s.version for s in statuses}
    return ClusterStatus(
        partitions=sum(len(p) for _, p in shards),
        shards=statuses,
        versions_agree=len(versions) == 1 and None not in versions,
    )
