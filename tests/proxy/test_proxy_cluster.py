"""``officectl cluster init`` and ``status`` on fresh databases of the test
cluster (skipped where PL/Proxy is not installed)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.conninfo import conninfo_to_dict

from controlplane import cluster
from controlplane import shards as shard_topology
from controlplane.cli import main
from tests import harness
from tests.proxy.topology import _create_database, _drop_database, _local, plproxy_missing

_MISSING = plproxy_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


@pytest.fixture
def databases() -> Iterator[tuple[str, list[str]]]:
    label = f"office_pxc_{harness.LABEL}_{os.getpid()}"
    names = [f"{label}_proxy", f"{label}_a", f"{label}_b"]
    admin = harness.conninfo("postgres")
    for name in names:
        _create_database(admin, name)
    try:
        yield _local(names[0]), [_local(n) for n in names[1:]]
    finally:
        for name in names:
            _drop_database(admin, name)


def test_init_writes_a_cluster_that_serves_and_status_reads_it(
    databases: tuple[str, list[str]],
) -> None:
    proxy, shards = databases
    args = ["cluster", "init", "--proxy", proxy, "--json"]
    for shard in shards:
        args += ["--shard", shard]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    status = json.loads(result.output)
    assert status["partitions"] == 4 and status["versions_agree"] is True
    assert [s["partitions"] for s in status["shards"]] == [[0, 2], [1, 3]]

    with psycopg.connect(proxy, autocommit=True) as px:
        px.execute("SELECT office.upsert_agent('a1', 'w1')")
    again = CliRunner().invoke(main, [*args])  # idempotent: same cluster
    assert again.exit_code == 0, again.output
    status = json.loads(
        CliRunner().invoke(main, ["cluster", "status", "--proxy", proxy, "--json"]).output
    )
    assert sum(s["agents"] for s in status["shards"]) == 1


def test_init_refuses_a_partition_count_that_is_not_a_power_of_two(
    databases: tuple[str, list[str]],
) -> None:
    proxy, shards = databases
    result = CliRunner().invoke(
        main, ["cluster", "init", "--proxy", proxy, "--shard", shards[0], "--partitions", "3"]
    )
    assert result.exit_code != 0 and "power of two" in result.output


def test_status_fails_when_a_shard_is_unreachable(databases: tuple[str, list[str]]) -> None:
    proxy, shards = databases
    CliRunner().invoke(
        main, ["cluster", "init", "--proxy", proxy, "--shard", shards[0], "--shard", shards[1]]
    )
    _drop_database(harness.conninfo("postgres"), shards[1].rsplit("dbname=", 1)[1])
    result = CliRunner().invoke(main, ["cluster", "status", "--proxy", proxy])
    assert result.exit_code == 1 and "PROBLEM" in result.output


def test_status_reads_the_mapping_pl_proxy_uses(databases: tuple[str, list[str]]) -> None:
    # PL/Proxy connects with the current user's mapping, else PUBLIC's; status
    # and moves (cluster.shard_connstrs) read the same one as the daemon and
    # the worker (shards.resolve), not another role's that the owner can see.
    proxy, shards = databases
    args = ["cluster", "init", "--proxy", proxy, "--shard", shards[0], "--shard", shards[1]]
    assert CliRunner().invoke(main, args).exit_code == 0
    with psycopg.connect(proxy, autocommit=True) as px:
        px.execute(
            "CREATE USER MAPPING FOR office_reader SERVER office_cluster"
            " OPTIONS (user 'office_pxc_someone_else')"
        )
    connstrs, user = cluster.shard_connstrs(proxy)
    assert user == harness.USER  # PUBLIC's, as cluster init wrote it
    assert [c for c, _ in connstrs] == shards
    workers = shard_topology.resolve(proxy).databases
    assert [conninfo_to_dict(d.conninfo).get("user") for d in workers] == [user, user]
