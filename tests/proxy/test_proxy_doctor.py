"""``officectl doctor`` on a proxy DSN (docs/api.md §8): every check on every shard
of office_cluster, findings labelled by shard, and a problem (exit status 1)
for a shard that is stopped or broken (tests/proxy/topology.py). Skipped
where PL/Proxy is not installed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from controlplane import schema
from tests.proxy.topology import Topology, labels, plproxy_missing, topology
from tests.scenarios.daemon import OFFICECTL, ROOT

_MISSING = plproxy_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


@pytest.fixture
def topo(request: pytest.FixtureRequest) -> Iterator[Topology]:
    with topology(getattr(request, "param", "one_cluster")) as t:
        yield t


def doctor(dsn: str, *options: str) -> tuple[int, dict[str, Any], str]:
    """``officectl --dsn DSN doctor --json``: exit status, report, stderr."""
    result = subprocess.run(
        [str(OFFICECTL), "--dsn", dsn, "doctor", "--json", *options],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout), result.stderr


def problems(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["status"] == "problem"]


def test_doctor_on_a_healthy_proxy_checks_every_shard(topo: Topology) -> None:
    code, report, _ = doctor(topo.proxy)
    assert code == 0 and report["ok"] is True and problems(report) == [], report
    for label in labels(topo):
        checks = {f["check"] for f in report["findings"] if f["shard"] == label}
        assert {"version", "indexes", "roles", "grants", "settings", "probes"} <= checks, label
    cluster = [f for f in report["findings"] if f["check"] == "cluster"]
    assert [f["status"] for f in cluster] == ["ok"]
    assert f"all on office {schema.current_version()}" in cluster[0]["detail"]

    table = subprocess.run(
        [str(OFFICECTL), "--dsn", topo.proxy, "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert table.returncode == 0 and "no problems found" in table.stdout


def test_doctor_fails_naming_the_shard_whose_install_is_broken(topo: Topology) -> None:
    with psycopg.connect(topo.shards[1], autocommit=True) as shard:
        shard.execute("DROP INDEX office.idx_run_idempotency")
    code, report, _ = doctor(topo.proxy, "--problems-only")
    assert code == 1 and report["ok"] is False
    found = problems(report)
    assert [(f["check"], f["shard"]) for f in found] == [("indexes", labels(topo)[1])], found
    assert "idx_run_idempotency" in found[0]["detail"]


@pytest.mark.parametrize("topo", ["two_clusters"], indirect=True)
def test_doctor_fails_naming_the_shard_that_is_stopped(topo: Topology) -> None:
    cluster = topo.cluster
    assert cluster is not None
    cluster.stop()
    try:
        code, report, _ = doctor(topo.proxy)
    finally:
        cluster.start()  # the topology drops its databases at the end
    assert code == 1 and report["ok"] is False
    found = problems(report)
    assert [(f["check"], f["shard"]) for f in found] == [("cluster", labels(topo)[1])], found
    assert "cannot be reached" in found[0]["detail"]
    # The other shard was checked as usual.
    assert any(
        f["shard"] == labels(topo)[0] and f["check"] == "indexes" for f in report["findings"]
    )


def test_doctor_fails_when_the_shards_run_different_versions(topo: Topology) -> None:
    with psycopg.connect(topo.shards[1], autocommit=True) as shard:
        # A shard left behind by an upgrade, as far as its version says.
        shard.execute(
            "CREATE OR REPLACE FUNCTION office.schema_version() RETURNS text"
            " LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp RETURN '0.3.0'"
        )
    code, report, _ = doctor(topo.proxy)
    assert code == 1
    cluster = [f for f in problems(report) if f["check"] == "cluster"]
    assert len(cluster) == 1 and cluster[0]["shard"] is None, report
    assert f"{labels(topo)[0]} {schema.current_version()}" in cluster[0]["detail"]
    assert f"{labels(topo)[1]} 0.3.0" in cluster[0]["detail"]
    assert any(f["check"] == "version" and f["shard"] == labels(topo)[1] for f in problems(report))
