"""Scale-out topologies for the proxy tests: a proxy database (``office_proxy``)
and two shard databases (``office``), four partitions over the two shards.

* ``one_cluster``: the proxy and both shards are databases of the test cluster;
* ``two_clusters``: shard 1 lives in a throwaway PostgreSQL cluster
  (``harness.throwaway_cluster``), so connection strings are real and one
  shard can be stopped while the other serves.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import sql

from tests import harness

PARTITIONS = 4


def plproxy_missing() -> str | None:
    """Why the proxy tests cannot run on the test cluster, or None."""
    with psycopg.connect(harness.conninfo("postgres"), autocommit=True) as conn:
        row = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'plproxy'"
        ).fetchone()
        version = conn.info.server_version
    if row is None:
        return f"PL/Proxy is not installed on the test server (PostgreSQL {version // 10000})"
    return None


@dataclass
class Topology:
    name: str
    proxy: str  # conninfo of the proxy database
    shards: list[str]  # conninfo of shard 0 and shard 1
    partition_shard: list[int]  # partition -> index in shards
    cluster: harness.Cluster | None

    def shard_of_workspace(self, workspace_id: str) -> int:
        with psycopg.connect(self.proxy) as conn:
            row = conn.execute("SELECT office._partition(%s)", (workspace_id,)).fetchone()
        assert row is not None
        return self.partition_shard[row[0]]


def _create_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def install_proxy(proxy: str, shards: list[str], partitions: int = PARTITIONS) -> None:
    """``office_proxy`` on ``proxy`` with server office_cluster: partition p on
    shard p % len(shards), a PUBLIC user mapping, usage for the office roles."""
    options = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(f"p{p}"), sql.Literal(shards[p % len(shards)]))
        for p in range(partitions)
    )
    with psycopg.connect(proxy, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION office_proxy CASCADE")
        conn.execute(
            sql.SQL(
                "CREATE SERVER office_cluster FOREIGN DATA WRAPPER plproxy OPTIONS ({})"
            ).format(options)
        )
        conn.execute(
            sql.SQL(
                "CREATE USER MAPPING FOR PUBLIC SERVER office_cluster OPTIONS (user {})"
            ).format(sql.Literal(harness.USER))
        )
        conn.execute(
            "GRANT USAGE ON FOREIGN SERVER office_cluster"
            " TO office_producer, office_worker, office_reader, office_admin"
        )


def _local(dbname: str) -> str:
    return f"host={harness.HOST} port={harness.PORT} user={harness.USER} dbname={dbname}"


@contextmanager
def topology(name: str) -> Iterator[Topology]:
    """``one_cluster`` or ``two_clusters`` (shard 1 in a second cluster)."""
    label = f"office_px_{harness.LABEL}_{os.getpid()}_{name}"
    with ExitStack() as stack:
        cluster = None
        if name == "two_clusters":
            cluster = stack.enter_context(harness.throwaway_cluster())
        shards = [_local(f"{label}_s0"), (cluster.conninfo if cluster else _local)(f"{label}_s1")]
        proxy = _local(f"{label}_proxy")
        for dsn in [*shards, proxy]:
            admin, dbname = dsn.rsplit("dbname=", 1)
            _create_database(admin + "dbname=postgres", dbname)
            stack.callback(_drop_database, admin + "dbname=postgres", dbname)
        for shard in shards:
            with psycopg.connect(shard, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION office")
        install_proxy(proxy, shards)
        yield Topology(
            name=name,
            proxy=proxy,
            shards=shards,
            partition_shard=[p % 2 for p in range(PARTITIONS)],
            cluster=cluster,
        )


def workspaces(topo: Topology) -> list[str]:
    """A workspace of each shard, in shard order."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < len(topo.shards):
        found.setdefault(topo.shard_of_workspace(f"ws{n}"), f"ws{n}")
        n += 1
    return [found[i] for i in range(len(topo.shards))]


def labels(topo: Topology) -> list[str]:
    """The shards' names in the daemon's logs and metrics: their dbname."""
    return [s.rsplit("dbname=", 1)[1] for s in topo.shards]
