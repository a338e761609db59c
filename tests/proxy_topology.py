"""Scale-out topologies for the proxy tests: a proxy database (``office_proxy``)
and two shard databases (``office``), four partitions over the two shards.

* ``one_cluster``: the proxy and both shards are databases of the test cluster;
* ``two_clusters``: shard 1 lives in a second PostgreSQL cluster that this
  module starts (data on /dev/shm, a free port, as the ``postgres`` OS user)
  and stops, so connection strings are real and one shard can be stopped
  while the other serves.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from tests import harness

PARTITIONS = 4


def pg_bindir() -> Path:
    """The binaries of the test cluster's PostgreSQL (for the second cluster)."""
    explicit = os.environ.get("OFFICE_TEST_PG_BINDIR")
    if explicit:
        return Path(explicit)
    pg_config = os.environ.get("PG_CONFIG")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], check=True, capture_output=True, text=True)
        return Path(out.stdout.strip())
    return Path("/usr/lib/postgresql/15/bin")


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


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.getuid() == 0 else cmd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SecondCluster:
    """A throwaway PostgreSQL cluster of the test server's installation."""

    data: Path
    port: int
    bindir: Path

    def start(self) -> None:
        subprocess.run(
            _as_postgres(
                [
                    str(self.bindir / "pg_ctl"),
                    "-D",
                    str(self.data / "data"),
                    "-w",
                    "-l",
                    str(self.data / "log"),
                    "-o",
                    f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} "
                    "-c fsync=off -c synchronous_commit=off -c max_connections=100",
                    "start",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        subprocess.run(
            _as_postgres(
                [
                    str(self.bindir / "pg_ctl"),
                    "-D",
                    str(self.data / "data"),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                ]
            ),
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def conninfo(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={harness.USER} dbname={dbname}"


@contextmanager
def second_cluster() -> Iterator[SecondCluster]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    data = Path(tempfile.mkdtemp(prefix=f"office-proxy-{os.getpid()}-", dir=base))
    if os.getuid() == 0:
        shutil.chown(data, "postgres")
    cluster = SecondCluster(data=data, port=_free_port(), bindir=pg_bindir())
    initdb = [str(cluster.bindir / "initdb"), "-D", str(data / "data"), "-U", harness.USER]
    subprocess.run(
        _as_postgres([*initdb, "--auth=trust", "-E", "UTF8"]),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(data, ignore_errors=True)


@dataclass
class Topology:
    name: str
    proxy: str  # conninfo of the proxy database
    shards: list[str]  # conninfo of shard 0 and shard 1
    partition_shard: list[int]  # partition -> index in shards
    cluster: SecondCluster | None

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
        cluster = stack.enter_context(second_cluster()) if name == "two_clusters" else None
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
