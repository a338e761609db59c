"""``officectl run`` on a proxy DSN (docs/api.md §8): the loops run on every shard
of office_cluster (tests/proxy/topology.py: two shards, four partitions).

Daemons run as subprocesses, as in tests/daemon/test_daemon.py; the work is made on
the shards directly (a plain UPDATE assigns tasks: one task.assigned event
each and no run, so the subscriber is the only producer), and every wait is
a bounded poll for an outcome. Skipped where PL/Proxy is not installed.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import psycopg
import pytest

from tests.harness import scalar, wait_for
from tests.proxy.topology import Topology, labels, plproxy_missing, topology, workspaces
from tests.scenarios.daemon import (
    assert_each_assignment_has_one_run,
    assignment_dedups,
    daemon,
    make_assignment_backlog,
    pending_events,
)

_MISSING = plproxy_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

#: Only the subscriber: the outbox is what these tests follow.
ONLY_SUBSCRIBER = tuple(
    arg for loop in ("wakeups", "cron", "sweep", "recovery", "prune") for arg in ("--disable", loop)
)


@pytest.fixture
def topo(request: pytest.FixtureRequest) -> Iterator[Topology]:
    name = getattr(request, "param", "one_cluster")
    with topology(name) as t:
        yield t


@pytest.fixture
def shards(topo: Topology) -> Iterator[list[psycopg.Connection[Any]]]:
    """A direct connection to each shard (shard 0, shard 1)."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(psycopg.connect(s, autocommit=True, connect_timeout=5))
            for s in topo.shards
        ]


def acknowledged(db: psycopg.Connection[Any]) -> int:
    return int(scalar(db, "SELECT count(*) FROM office.events WHERE processed_at IS NOT NULL"))


def started(run: Any) -> None:
    wait_for(
        lambda: any("control plane started on 2 shards" in m for m in run.messages()),
        "the daemon to start on both shards",
    )


def test_the_daemon_drains_every_shard_and_a_kill_loses_nothing(
    topo: Topology, shards: list[psycopg.Connection[Any]]
) -> None:
    for i, (db, ws) in enumerate(zip(shards, workspaces(topo), strict=True)):
        make_assignment_backlog(db, f"k{i}", tasks=1000, agents=20, workspace=ws)
    options = ("--event-batch", "50", "--event-visibility", "2s", *ONLY_SUBSCRIBER)
    with daemon(topo.proxy, *options) as first:
        started(first)
        wait_for(lambda: all(acknowledged(db) for db in shards), "work on both shards")
        first.proc.kill()  # mid-way: what it claimed and did not acknowledge comes back
        first.proc.wait()
    with daemon(topo.proxy, *options, "--metrics-port", "0") as second:
        port = second.metrics_port()
        wait_for(
            lambda: all(pending_events(db) == 0 for db in shards), "both outboxes", timeout=180
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert second.terminate() == 0, second.text()[-4000:]
        records = second.logs()
    for i, db in enumerate(shards):
        assert assert_each_assignment_has_one_run(db, f"k{i}") == 1000
    # Each shard's loops, logs and series are its own, named by its database.
    for label in labels(topo):
        assert any(r.get("shard") == label for r in records), label
        assert re.search(rf'^office_database_up{{shard="{label}"}} 1\.0$', metrics, re.M), label
        assert re.search(
            rf'^office_loop_seconds_count{{loop="subscriber",shard="{label}"}} ', metrics, re.M
        ), label
    start = next(r for r in records if r["message"].startswith("control plane started"))
    assert start["shards"] == labels(topo) and "password" not in start["message"]


@pytest.mark.parametrize("topo", ["two_clusters"], indirect=True)
def test_a_stopped_shard_waits_while_the_other_drains_and_catches_up_when_back(
    topo: Topology, shards: list[psycopg.Connection[Any]]
) -> None:
    cluster = topo.cluster
    assert cluster is not None  # shard 1 lives there
    ws = workspaces(topo)
    make_assignment_backlog(shards[1], "b1", tasks=1500, agents=20, workspace=ws[1])
    options = ("--event-batch", "20", "--event-visibility", "2s", *ONLY_SUBSCRIBER)
    try:
        with daemon(topo.proxy, *options) as run:
            started(run)
            wait_for(lambda: acknowledged(shards[1]), "work on shard 1")
            cluster.stop()  # mid-backlog
            make_assignment_backlog(shards[0], "d0", tasks=300, agents=10, workspace=ws[0])
            wait_for(lambda: pending_events(shards[0]) == 0, "shard 0 while shard 1 is down")
            wait_for(
                lambda: any(
                    "database connection lost" in r.get("message", "")
                    and r.get("shard") == labels(topo)[1]
                    for r in run.logs()
                ),
                "shard 1's loss to be logged",
            )
            cluster.start()
            with psycopg.connect(topo.shards[1], autocommit=True) as db:
                wait_for(lambda: pending_events(db) == 0, "shard 1 after its return", timeout=120)
            wait_for(lambda: "database connection restored" in run.text(), "the return logged")
            assert run.terminate() == 0, run.text()[-4000:]
    finally:
        if not _up(topo.shards[1]):
            cluster.start()  # the topology drops its databases at the end
    assert assert_each_assignment_has_one_run(shards[0], "d0") == 300
    with psycopg.connect(topo.shards[1], autocommit=True) as db:
        assert assert_each_assignment_has_one_run(db, "b1") == 1500


def _up(conninfo: str) -> bool:
    try:
        psycopg.connect(conninfo, connect_timeout=5).close()
    except psycopg.OperationalError:
        return False
    return True


def test_two_daemons_on_one_proxy_handle_each_occurrence_once(
    topo: Topology, shards: list[psycopg.Connection[Any]]
) -> None:
    options = ("--event-batch", "10", "--cron-batch", "5", "--wakeup-batch", "5")
    ws = workspaces(topo)
    with (
        daemon(topo.proxy, *options, "--consumer", "first") as first,
        daemon(topo.proxy, *options, "--consumer", "second") as second,
    ):
        for run in (first, second):
            started(run)
        overdue = datetime.now(UTC) - timedelta(minutes=1)
        with psycopg.connect(topo.proxy, autocommit=True) as px:
            for i, db in enumerate(shards):
                make_assignment_backlog(db, f"ev{i}", tasks=200, agents=10, workspace=ws[i])
                for n in range(10):
                    # A heavy routine per tick (a second fire would be a second task).
                    name = f"routine-{i}-{n}"
                    px.execute(
                        "SELECT office.create_routine(%s, %s, %s::jsonb, %s, 'always_create',"
                        " id => %s)",
                        (ws[i], name, json.dumps({"title": name}), f"ev{i}-agent-0", name),
                    )
                    px.execute(
                        "SELECT office.add_routine_trigger(%s, '0 0 1 1 *', 'UTC', %s, id => %s)",
                        (name, overdue, f"trigger-{i}-{n}"),
                    )
                    agent = f"wk{i}-agent-{n}"
                    px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws[i]))
                    px.execute("SELECT office.request_wakeup(%s, 'manual', 'ping')", (agent,))
        for db in shards:
            wait_for(partial(lambda d: pending_events(d) == 0, db), "the outboxes")
            wait_for(
                partial(
                    scalar,
                    db,
                    "SELECT count(*) = 0 FROM office.routine_triggers WHERE next_run_at <= now()",
                ),
                "every tick",
            )
            wait_for(
                partial(
                    scalar,
                    db,
                    "SELECT count(*) = 0 FROM office.wakeup_requests WHERE status = 'queued'",
                ),
                "every wakeup",
            )
        assert first.terminate() == 0, first.text()[-4000:]
        assert second.terminate() == 0, second.text()[-4000:]
    consumers: set[str] = set()
    for i, db in enumerate(shards):
        assert scalar(db, "SELECT count(*) FROM office.events WHERE deliveries <> 1") == 0
        consumers |= {r[0] for r in db.execute("SELECT DISTINCT claimed_by FROM office.events")}
        assert assert_each_assignment_has_one_run(db, f"ev{i}") == 200
        # The event of each task a routine created is a dedup (create_task queued its run).
        assert assignment_dedups(db) == 10
        per_trigger = db.execute(
            "SELECT trigger_id, count(*) FROM office.routine_runs GROUP BY trigger_id"
        ).fetchall()
        assert sorted(per_trigger) == sorted((f"trigger-{i}-{n}", 1) for n in range(10))
        rows = db.execute("SELECT status, run_id FROM office.wakeup_requests").fetchall()
        assert {status for status, _ in rows} == {"claimed"}
        assert len({run_id for _, run_id in rows}) == 10
    assert consumers == {"first", "second"}
