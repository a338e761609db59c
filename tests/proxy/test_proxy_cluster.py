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

from controlplane.cli.main import main
from controlplane.scaleout import cluster
from controlplane.scaleout import shards as shard_topology
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


def _url(keyvalue: str) -> str:
    parts = conninfo_to_dict(keyvalue)
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


@pytest.mark.parametrize("form", ["url", "keyvalue"])
def test_init_with_either_dsn_form_serves_calls_through_the_proxy(
    databases: tuple[str, list[str]], form: str
) -> None:
    proxy, shards = databases
    spelled = [_url(s) if form == "url" else s for s in shards]
    args = ["cluster", "init", "--proxy", _url(proxy) if form == "url" else proxy]
    for shard in spelled:
        args += ["--shard", shard]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    with psycopg.connect(proxy, autocommit=True) as px:
        px.execute("SELECT office.upsert_agent('a-form', 'w-form')")
        part = px.execute("SELECT office._partition('w-form')").fetchone()
    assert part is not None
    with psycopg.connect(shards[part[0] % len(shards)]) as shard_db:
        found = shard_db.execute("SELECT count(*) FROM office.agent_profiles WHERE id = 'a-form'")
        assert found.fetchone() == (1,)
    status = cluster.cluster_status(proxy)
    assert status.versions_agree and [s.error for s in status.shards] == [None, None]


def test_init_that_fails_leaves_nothing_and_a_rerun_converges(
    databases: tuple[str, list[str]],
) -> None:
    proxy, shards = databases
    # The last statement of init fails (an event trigger refusing GRANT).
    with psycopg.connect(proxy, autocommit=True) as px:
        px.execute(
            "CREATE FUNCTION public.no_grant() RETURNS event_trigger LANGUAGE plpgsql"
            " AS $$BEGIN RAISE EXCEPTION 'no grants here'; END$$"
        )
        px.execute(
            "CREATE EVENT TRIGGER no_grant ON ddl_command_end WHEN TAG IN ('GRANT')"
            " EXECUTE FUNCTION public.no_grant()"
        )
    args = ["cluster", "init", "--proxy", proxy, "--shard", shards[0], "--shard", _url(shards[1])]
    failed = CliRunner().invoke(main, args)
    assert failed.exit_code != 0
    with psycopg.connect(proxy, autocommit=True) as px:
        left = px.execute("SELECT count(*) FROM pg_foreign_server WHERE srvname = 'office_cluster'")
        assert left.fetchone() == (0,)
        px.execute("DROP EVENT TRIGGER no_grant")
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    with psycopg.connect(proxy, autocommit=True) as px:
        px.execute("SELECT office.upsert_agent('a-rerun', 'w-rerun')")


def test_a_rerun_converges_on_a_server_left_with_url_dsns(
    databases: tuple[str, list[str]],
) -> None:
    # What an init before URL DSNs were converted left: a server PL/Proxy
    # cannot use. The same init run again respells it.
    proxy, shards = databases
    urls = [_url(s) for s in shards]
    with psycopg.connect(proxy, autocommit=True) as px:
        px.execute("CREATE EXTENSION office_proxy CASCADE")
        px.execute(
            "CREATE SERVER office_cluster FOREIGN DATA WRAPPER plproxy"
            f" OPTIONS (p0 '{urls[0]}', p1 '{urls[1]}', p2 '{urls[0]}', p3 '{urls[1]}')"
        )
    args = ["cluster", "init", "--proxy", proxy, "--shard", urls[0], "--shard", urls[1]]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    with psycopg.connect(proxy, autocommit=True) as px:
        px.execute("SELECT office.upsert_agent('a-url', 'w-url')")


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
