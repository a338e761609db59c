"""``officectl ui`` on a proxy DSN (docs/api.md §8): over a proxy of two
shards every page answers 200 and the overview's numbers are the sums of
the shards'. Skipped where PL/Proxy is not installed."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from starlette.testclient import TestClient

from controlplane.ui import create_app
from tests.proxy.topology import Topology, plproxy_missing, topology
from tests.scenarios.ui import browse, csrf_of, stat

_MISSING = plproxy_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


@pytest.fixture(scope="module")
def topo() -> Iterator[Topology]:
    with topology("one_cluster") as t:
        yield t


@pytest.fixture(scope="module")
def world(topo: Topology) -> dict[int, str]:
    """A workspace on each shard with an agent, a task assigned to it (an
    event and a run), a routine, a wakeup request, a claimed run, keyed runs
    deduped, and a set-aside row of each shard's own."""
    workspaces: dict[int, str] = {}
    while len(workspaces) < 2:
        ws = f"ws-{uuid.uuid4().hex[:8]}"
        workspaces.setdefault(topo.shard_of_workspace(ws), ws)
    with psycopg.connect(topo.proxy, autocommit=True) as px:
        for shard, ws in workspaces.items():
            agent = f"a-{ws}"
            px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
            px.execute(
                "SELECT office.create_task(%s, %s, assignee_agent_profile_id => %s)",
                (ws, f"t-{ws}", agent),
            )
            px.execute("SELECT office.create_routine(%s, 'r', id => %s)", (ws, f"r-{ws}"))
            px.execute("SELECT office.request_wakeup(%s, 'user', 'ping')", (agent,))
            for _ in range(2):
                px.execute(
                    "SELECT office.enqueue_run(%s, 'mail', idempotency_key => 'k')", (agent,)
                )
            px.execute("SELECT office.claim_run('w', %s)", (agent,))
            with psycopg.connect(topo.shards[shard], autocommit=True) as conn:
                conn.execute("SELECT office.set_aside('prune', %s, 'r')", (f"row-{ws}",))
    return workspaces


@pytest.fixture
def http(topo: Topology, world: dict[int, str]) -> Iterator[TestClient]:
    with browse(create_app(topo.proxy, allow_actions=True)) as client:
        yield client


def _summed(topo: Topology, query: str) -> list[int]:
    """The columns of a one-row query, added over the shards."""
    totals: list[int] = []
    for shard in topo.shards:
        with psycopg.connect(shard) as conn:
            row = conn.execute(query).fetchone()
            assert row is not None
            totals = [a + b for a, b in zip(totals, row, strict=True)] if totals else list(row)
    return totals


def test_the_overview_on_a_proxy_is_the_sum_of_the_shards(topo: Topology, http: TestClient) -> None:
    page = http.get("/")
    assert page.status_code == 200
    for status in ("queued", "claimed", "finished", "failed", "cancelled"):
        (runs,) = _summed(topo, f"SELECT count(*) FROM office.runs WHERE status = '{status}'")
        assert stat(page.text, f"runs-{status}") == runs
    pending, claimed, poison = _summed(
        topo, "SELECT pending_events, claimed_runs, poison_rows FROM office.daemon_stats()"
    )
    assert stat(page.text, "pending_events") == pending >= 2
    assert stat(page.text, "claimed_runs") == claimed >= 2
    assert stat(page.text, "poison_rows") == poison >= 2
    (deduped,) = _summed(
        topo, "SELECT coalesce(sum(total), 0) FROM office.dedup_stats WHERE kind = 'windowed'"
    )
    shown = re.findall(r'<td>windowed</td>\n<td class="num">([0-9]+)</td>', page.text)
    assert sum(int(n) for n in shown) == deduped >= 2
    assert f"{topo.proxy.rsplit('dbname=', 1)[1]} on" in page.text


def test_every_page_renders_on_a_proxy(
    topo: Topology, http: TestClient, world: dict[int, str]
) -> None:
    with psycopg.connect(topo.proxy, autocommit=True) as px:
        run_ids = [r[0] for r in px.execute("SELECT id FROM office.list_runs(page_size => 500)")]
        event_ids = [r[0] for r in px.execute("SELECT id FROM office.list_events(NULL, 500)")]
    (total_runs,) = _summed(topo, "SELECT count(*) FROM office.runs")
    assert http.get("/runs").text.count('<tr class="run">') == total_runs == len(run_ids)
    agents = http.get("/agents").text
    for ws in world.values():
        assert f'<td><span class="ident" title="a-{ws}">a-{ws}' in agents
        for path in (f"/tasks/t-{ws}", f"/routines/r-{ws}", f"/runs?agent=a-{ws}"):
            assert http.get(path).status_code == 200, path
        assert f"r-{ws}" in http.get("/routines").text and f"t-{ws}" in http.get("/tasks").text
    for run_id in run_ids[:1] + run_ids[-1:]:
        assert http.get(f"/runs/{run_id}").status_code == 200
    wakeups = http.get("/wakeups")
    assert wakeups.status_code == 200 and wakeups.text.count('<tr class="row">') == 2
    events = http.get("/events")
    assert events.status_code == 200
    assert events.text.count('<tr class="row">') == len(event_ids) >= 2
    assert all(f'<td class="num">{i}</td>' in events.text for i in event_ids)
    assert events.text.count('data-copy="row-ws-') == 2  # each shard's set-aside row
    older = http.get("/events", params={"after": str(event_ids[0])})
    assert older.status_code == 200 and f'<td class="num">{event_ids[0]}</td>' not in older.text


def test_actions_on_a_proxy_reach_the_shards(
    topo: Topology, http: TestClient, world: dict[int, str]
) -> None:
    agent = f"a-{world[1]}"
    token = csrf_of(http.get("/actions/pause_agent", params={"target": agent}).text)
    paused = http.post("/actions/pause_agent", data={"csrf": token, "target": agent})
    assert '<strong id="outcome">paused</strong>' in paused.text
    with psycopg.connect(topo.shards[1]) as s1:
        row = s1.execute("SELECT status FROM office.agent_profiles WHERE id = %s", (agent,))
        assert row.fetchone() == ("paused",)
    resumed = http.post("/actions/resume_agent", data={"csrf": token, "target": agent})
    assert '<strong id="outcome">idle</strong>' in resumed.text
    swept = http.post("/actions/sweep", data={"csrf": token, "target": ""})
    assert swept.status_code == 200
