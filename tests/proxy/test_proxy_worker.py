"""``officectl worker`` on a proxy DSN (docs/api.md §8): it claims, heartbeats and
writes outcomes through the proxy and LISTENs for the runs' NOTIFY on every
shard of office_cluster (tests/proxy/topology.py). Skipped where PL/Proxy is
not installed; every wait is a bounded poll for an outcome.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.harness import wait_for
from tests.proxy.topology import Topology, labels, plproxy_missing, topology, workspaces
from tests.scenarios.daemon import DaemonProcess
from tests.scenarios.worker import HANDLERS, Handlers, enqueue, worker

_MISSING = plproxy_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


@pytest.fixture
def topo() -> Iterator[Topology]:
    with topology("one_cluster") as t:
        yield t


@pytest.fixture
def handler_module(tmp_path: Path) -> Handlers:
    (tmp_path / "handlers.py").write_text(HANDLERS)
    return Handlers(tmp_path, tmp_path / "calls.jsonl")


def listening_on_every_shard(process: DaemonProcess, topo: Topology) -> None:
    wanted = {f"listening for NOTIFY office_runs on shard {label}" for label in labels(topo)}
    wait_for(lambda: wanted <= set(process.messages()), "the worker to listen on both shards")


def url(conninfo: str) -> str:
    """``conninfo`` as a URL (an async handler's asyncpg pool reads only URLs)."""
    c = conninfo_to_dict(conninfo)
    return f"postgresql://{c['user']}@{c['host']}:{c['port']}/{c['dbname']}"


@pytest.mark.parametrize("handler", ["handlers:handle", "handlers:ahandle"])
def test_the_worker_runs_the_runs_of_every_shard_once(
    topo: Topology, handler_module: Handlers, handler: str
) -> None:
    ws = workspaces(topo)
    # A long poll: after the first claims, only the shards' NOTIFY wakes it.
    options = ("--concurrency", "3", "--worker-id", "w1", "--poll", "600")
    with (
        ExitStack() as stack,
        worker(url(topo.proxy), handler_module, handler, *options) as w,
    ):
        px = stack.enter_context(psycopg.connect(topo.proxy, autocommit=True))
        shards = [stack.enter_context(psycopg.connect(s, autocommit=True)) for s in topo.shards]
        listening_on_every_shard(w, topo)
        runs: list[str] = []
        for i, space in enumerate(ws):
            for n in range(4):
                agent = f"a{i}-{n}"
                px.execute("SELECT office.upsert_agent(%s, %s)", (agent, space))
                runs += [
                    enqueue(px, agent, f"{i}-{n}-{k}", action="sleep", seconds=0.01)
                    for k in range(3)
                ]

        def finished() -> bool:
            return all(
                db.execute(
                    "SELECT count(*) = 12 FROM office.runs WHERE status = 'finished'"
                ).fetchone()
                == (True,)
                for db in shards
            )

        wait_for(finished, "every run of both shards to finish", timeout=120)
        assert w.terminate() == 0, w.text()[-4000:]
        rows: list[tuple[Any, ...]] = []
        for db in shards:
            rows += db.execute("SELECT id, status, attempt, claimed_by FROM office.runs").fetchall()
    assert sorted(r[0] for r in rows) == sorted(runs)
    assert {r[1:] for r in rows} == {("finished", 1, "w1")}
    calls = handler_module.calls()
    assert sorted(c["id"] for c in calls if c["event"] == "start") == sorted(runs)
