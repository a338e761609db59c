"""The proxy's merged, event, poison and bulk routes (docs/api.md §8,
docs/scale-out.md) against real PL/Proxy over two shards: each answer
compared with the direct calls on the shards it merges. Skipped where
PL/Proxy is not installed (the embedded PostgreSQL 18)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest

from tests import harness
from tests.proxy.topology import PARTITIONS, Topology, plproxy_missing

_MISSING = plproxy_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


def _workspace_on(topo: Topology, shard: int) -> str:
    while True:
        ws = f"ws-{uuid.uuid4().hex[:10]}"
        if topo.shard_of_workspace(ws) == shard:
            return ws


def _partition(px: psycopg.Connection[Any], ws: str) -> int:
    row = px.execute("SELECT office._partition(%s)", (ws,)).fetchone()
    assert row is not None
    return int(row[0])


def _shard_rows(topo: Topology, query: str, *args: Any) -> list[list[Any]]:
    out = []
    for shard in topo.shards:
        with psycopg.connect(shard, autocommit=True) as conn:
            out.append(conn.execute(query, args).fetchall())
    return out


def _agent_with_events(px: psycopg.Connection[Any], ws: str, tasks: int = 3) -> str:
    """An agent of ``ws`` and ``tasks`` tasks assigned to it (an event each)."""
    agent = f"a-{ws}"
    px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
    for i in range(tasks):
        px.execute(
            "SELECT office.create_task(%s, %s, assignee_agent_profile_id => %s)",
            (ws, f"t{i}-{ws}", agent),
        )
    return agent


def _drain_events(px: psycopg.Connection[Any]) -> None:
    """Acknowledge every pending event, so a test sees only its own."""
    while ids := [r[0] for r in px.execute("SELECT id FROM office.claim_events('drain', 500)")]:
        px.execute("SELECT office.ack_events(%s)", (ids,))


# --- daemon_stats and run_status_counts ------------------------------------------------


def test_daemon_stats_are_the_merge_of_the_shards(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    for shard in (0, 1):
        agent = _agent_with_events(px, _workspace_on(topo, shard))
        px.execute("SELECT office.claim_run('w', %s)", (agent,))
        with psycopg.connect(topo.shards[shard], autocommit=True) as conn:
            conn.execute("SELECT office.set_aside('prune', %s, 'r')", (f"row-{agent}",))
    query = "SELECT * FROM office.daemon_stats()"
    before = [rows[0] for rows in _shard_rows(topo, query)]
    merged = px.execute(query).fetchall()
    after = [rows[0] for rows in _shard_rows(topo, query)]
    assert len(merged) == 1
    (pending, oldest_event, lag, wakeups, due, claimed, oldest_claim, age, poison, by_loop) = (
        merged[0]
    )
    # Counts and the oldest times do not move between the calls (nothing else writes).
    for index in (0, 3, 4, 5, 8):
        assert merged[0][index] == sum(row[index] for row in before) == sum(r[index] for r in after)
    assert pending >= 6 and claimed >= 2 and poison >= 2
    assert oldest_event == min(r[1] for r in before if r[1] is not None)
    assert oldest_claim == min(r[6] for r in before if r[6] is not None)
    # Lags and ages are the greatest shard's, read between the two direct reads.
    assert max(r[2] for r in before) <= lag <= max(r[2] for r in after)
    assert max(r[7] for r in before) <= age <= max(r[7] for r in after)
    assert (
        by_loop == {loop: sum(row[9][loop] for row in before) for loop in before[0][9]}
        and by_loop["prune"] >= 2
    )
    assert (wakeups, due) == (sum(r[3] for r in before), sum(r[4] for r in before))


def _status_counts(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute("SELECT * FROM office.run_status_counts()")]


def test_run_status_counts_add_up_and_an_estimate_stays_one(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    for shard in (0, 1):
        agent = _agent_with_events(px, _workspace_on(topo, shard), tasks=2)
        px.execute("SELECT office.claim_run('w', %s)", (agent,))
    by_shard = _shard_rows(topo, "SELECT * FROM office.run_status_counts()")
    merged = _status_counts(px)
    assert (
        [r[0] for r in merged]
        == [r[0] for r in by_shard[0]]
        == [
            "queued",
            "claimed",
            "finished",
            "failed",
            "cancelled",
        ]
    )
    for row, parts in zip(merged, zip(*by_shard, strict=True), strict=True):
        assert row[1] == sum(p[1] for p in parts) and row[2] == sum(p[2] for p in parts)
        olds = [p[3] for p in parts if p[3] is not None]
        assert row[3] == (min(olds) if olds else None) and row[4] is True
    assert merged[1][2] >= 2  # claimed on both shards

    # Shard 0's history past the estimate threshold: its rows are estimates,
    # so the merged rows are too (exact false, agents unknown), counts added.
    with psycopg.connect(topo.shards[0], autocommit=True) as s0:
        s0.execute(
            "INSERT INTO office.runs (id, agent_profile_id, reason, status, finished_at)"
            " SELECT office._uuid_v7(), 'history', 'bulk', 'finished', now()"
            " FROM generate_series(1, 12000)"
        )
        s0.execute("ANALYZE office.runs")
    try:
        estimated = {r[0]: r for r in _status_counts(px)}
        by_shard = _shard_rows(topo, "SELECT * FROM office.run_status_counts()")
        shard_finished = [next(r for r in rows if r[0] == "finished") for rows in by_shard]
        assert shard_finished[0][4] is False and shard_finished[1][4] is True
        finished = estimated["finished"]
        assert finished[4] is False and finished[1] is None
        assert finished[2] == sum(r[2] for r in shard_finished) >= 10_000
        assert estimated["queued"][4] is True
    finally:
        with psycopg.connect(topo.shards[0], autocommit=True) as s0:
            s0.execute("DELETE FROM office.runs WHERE agent_profile_id = 'history'")
            s0.execute("ANALYZE office.runs")


# --- wake decisions -------------------------------------------------------------------


def test_wake_decisions_are_every_shards_with_unique_ids_and_prune_adds_up(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    workspaces = [_workspace_on(topo, shard) for shard in (0, 1)]
    for index, ws in enumerate(workspaces):
        px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
        with psycopg.connect(topo.shards[index], autocommit=True) as conn:
            for agent in (f"a-{ws}", "nobody"):  # a known agent, and one no shard knows
                conn.execute(
                    "SELECT office._write_wake_decision("
                    "%s, NULL, 'guarded', 'agent', NULL, 21, NULL)",
                    (agent,),
                )
    local = _shard_rows(topo, "SELECT id, agent_profile_id FROM office.wake_decisions")
    assert {r[0] for r in local[0]} & {r[0] for r in local[1]}, "the shards' own ids collide"
    through = px.execute(
        "SELECT id, agent_profile_id, decision FROM office.wake_decisions"
    ).fetchall()
    ids = [r[0] for r in through]
    assert len(ids) == len(set(ids)) == sum(len(rows) for rows in local)
    for decision_id, agent, decision in through:
        part, local_id = _decode(decision_id)
        assert decision == "guarded"
        assert (local_id, agent) in local[topo.partition_shard[part]]
        if agent != "nobody":  # the decision's partition is its agent's workspace's
            assert part == _partition(px, agent.removeprefix("a-"))
    with px.transaction():
        px.execute("SET LOCAL ROLE office_reader")
        assert len(px.execute("SELECT id FROM office.wake_decisions").fetchall()) == len(ids)
    for shard in topo.shards:
        with psycopg.connect(shard, autocommit=True) as conn:
            conn.execute("UPDATE office.wake_decisions SET at = now() - interval '2 days'")
    row = px.execute("SELECT office.prune_wake_decisions('1 day')").fetchone()
    assert row == (len(ids),)
    assert px.execute("SELECT count(*) FROM office.wake_decisions").fetchone() == (0,)


# --- holds and explain_agent ------------------------------------------------------------


def test_holds_and_explain_agent_through_the_proxy_agree_with_the_shard(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    """A budget set through the proxy holds the agent's runs on its shard;
    explain_agent through the proxy is the shard's answer, governance_stats
    the sum, a cause of another partition OFW01, and claims go by priority
    across the shards."""
    workspaces = [_workspace_on(topo, shard) for shard in (0, 1)]
    agents = [f"a-{ws}" for ws in workspaces]
    for agent, ws in zip(agents, workspaces, strict=True):
        px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
    px.execute("SELECT office.set_wake_policy('agent', %s, budget => 0)", (agents[1],))
    px.execute("SELECT office.enqueue_run(%s, 'plain')", (agents[0],))
    held = px.execute("SELECT run_id FROM office.enqueue_run(%s, 'held')", (agents[1],)).fetchone()
    assert held is not None
    explain = "SELECT run_id, status, claimable, held_by, until FROM office.explain_agent(%s)"
    through = px.execute(explain, (agents[1],)).fetchall()
    with psycopg.connect(topo.shards[1]) as s1:
        assert through == s1.execute(explain, (agents[1],)).fetchall()
    assert [(r[0], r[2], r[3]) for r in through] == [(held[0], False, "budget")]
    stats = px.execute("SELECT agent_profile_id, held_by, runs FROM office.governance_stats")
    assert stats.fetchall() == [(agents[1], "budget", 1)]
    with pytest.raises(psycopg.Error) as info:
        px.execute("SELECT office.explain_agent('nobody')")
    assert info.value.sqlstate == "OFA01"
    # A cause on the other partition: refused by the proxy as OFW01.
    with pytest.raises(psycopg.Error) as info:
        px.execute(
            "SELECT office.enqueue_run(%s, 'caused', cause_run_id => %s)", (agents[0], held[0])
        )
    assert info.value.sqlstate == "OFW01"
    # The budget holds the shard-1 run whichever shard a claim starts on.
    claimed = [px.execute("SELECT reason FROM office.claim_run('w')").fetchone() for _ in range(3)]
    assert claimed[0] == ("plain",) and claimed[1:] == [None, None]


# --- events ---------------------------------------------------------------------------


def _decode(event_id: int) -> tuple[int, int]:
    """(partition, local id) of an event id through the proxy."""
    return event_id % PARTITIONS, event_id // PARTITIONS


def test_event_ids_are_unique_across_shards_and_name_their_shard(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    workspaces = [_workspace_on(topo, shard) for shard in (0, 1, 0, 1)]
    for ws in workspaces:
        _agent_with_events(px, ws)
    local = _shard_rows(topo, "SELECT id, task_id FROM office.events")
    local_ids = [{r[0] for r in rows} for rows in local]
    assert local_ids[0] & local_ids[1], "the shards' own event ids collide"
    through = px.execute("SELECT id, task_id FROM office.list_events(NULL, 500)").fetchall()
    ids = [r[0] for r in through]
    assert len(ids) == len(set(ids)) == sum(len(rows) for rows in local)
    assert ids == sorted(ids, reverse=True)
    tasks = {task: ws for ws in workspaces for task in (f"t{i}-{ws}" for i in range(3))}
    for event_id, task_id in through:
        part, local_id = _decode(event_id)
        shard = topo.partition_shard[part]
        assert (local_id, task_id) in local[shard]
        if task_id in tasks:  # the event's partition is its workspace's
            assert part == _partition(px, tasks[task_id])


def test_list_events_pages_are_the_merged_list_cut(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    for shard in (0, 1):
        _agent_with_events(px, _workspace_on(topo, shard), tasks=4)
    everything = [r[0] for r in px.execute("SELECT id FROM office.list_events(NULL, 500)")]
    seen: list[int] = []
    before = None
    while page := [r[0] for r in px.execute("SELECT id FROM office.list_events(%s, 3)", (before,))]:
        assert len(page) <= 3
        seen += page
        before = page[-1]
    assert seen == everything
    # Any before_id, not only one the proxy returned: exactly the ids below it.
    for cut in (everything[0] + 1, everything[len(everything) // 2], everything[-1], 1):
        page = [r[0] for r in px.execute("SELECT id FROM office.list_events(%s, 5)", (cut,))]
        assert page == [i for i in everything if i < cut][:5]


def test_claimed_events_are_acknowledged_on_the_shards_they_name(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    _drain_events(px)
    for shard in (0, 1):
        _agent_with_events(px, _workspace_on(topo, shard), tasks=3)
    first = px.execute("SELECT id, task_id, deliveries FROM office.claim_events('c', 4)").fetchall()
    rest = px.execute("SELECT id, task_id FROM office.claim_events('c', 100)").fetchall()
    assert len(first) == 4 and len(rest) == 2 and all(r[2] == 1 for r in first)
    claimed = [r[0] for r in first] + [r[0] for r in rest]
    assert len(set(claimed)) == 6
    assert px.execute("SELECT id FROM office.claim_events('c', 100)").fetchall() == []
    assert {topo.partition_shard[_decode(i)[0]] for i in claimed} == {0, 1}

    # An id the proxy never returned (a real local id, another partition of
    # its shard) acknowledges nothing, as an unknown id on one database.
    part, local_id = _decode(claimed[0])
    other = next(
        p
        for p in range(PARTITIONS)
        if p != part and topo.partition_shard[p] == topo.partition_shard[part]
    )
    assert px.execute(
        "SELECT office.ack_events(%s)", ([local_id * PARTITIONS + other],)
    ).fetchone() == (0,)
    # Ids of both shards: exactly those are acknowledged, once.
    acked = [claimed[0], claimed[-1], claimed[2]]
    assert px.execute("SELECT office.ack_events(%s)", ([*acked, acked[0]],)).fetchone() == (3,)
    assert px.execute("SELECT office.ack_events(%s)", (acked,)).fetchone() == (0,)
    processed = _shard_rows(topo, "SELECT id FROM office.events WHERE processed_at IS NULL")
    open_ids = {(shard, r[0]) for shard, rows in enumerate(processed) for r in rows}
    for event_id in claimed:
        part, local_id = _decode(event_id)
        assert ((topo.partition_shard[part], local_id) in open_ids) == (event_id not in acked)
    px.execute("SELECT office.ack_events(%s)", (claimed,))


def test_concurrent_claimers_through_the_proxy_never_share_an_event(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    _drain_events(px)
    for shard in (0, 1, 0, 1):
        _agent_with_events(px, _workspace_on(topo, shard), tasks=5)

    def claim(conn: psycopg.Connection[Any]) -> list[int]:
        got: list[int] = []
        while batch := [r[0] for r in conn.execute("SELECT id FROM office.claim_events('c', 3)")]:
            got += batch
        return got

    outcomes = harness.run_concurrently(topo.proxy, [claim, claim, claim])
    assert all(o.error is None for o in outcomes)
    claimed = [i for o in outcomes for i in o.value]
    assert len(claimed) == len(set(claimed)) == 20
    px.execute("SELECT office.ack_events(%s)", (claimed,))


def test_an_event_without_a_known_task_is_named_by_its_shards_lowest_partition(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    _drain_events(px)
    with psycopg.connect(topo.shards[1], autocommit=True) as s1:
        local = [
            s1.execute(
                "INSERT INTO office.events (topic, task_id) VALUES ('by.hand', %s) RETURNING id",
                (task,),
            ).fetchone()
            for task in (None, "no-such-task")
        ]
    lowest = topo.partition_shard.index(1)
    expected = sorted(row[0] * PARTITIONS + lowest for row in local if row is not None)
    claimed = sorted(r[0] for r in px.execute("SELECT id FROM office.claim_events('c', 100)"))
    assert claimed == expected
    assert px.execute("SELECT office.ack_events(%s)", (claimed,)).fetchone() == (2,)
    with psycopg.connect(topo.shards[1]) as s1:
        assert s1.execute(
            "SELECT count(*) FROM office.events WHERE topic = 'by.hand' AND processed_at IS NULL"
        ).fetchone() == (0,)


def test_claim_events_skips_a_stopped_shard_with_a_warning(topo: Topology) -> None:
    if topo.cluster is None:
        pytest.skip("needs shard 1 in its own cluster")
    with psycopg.connect(topo.proxy, autocommit=True) as px:
        _drain_events(px)
        for shard in (0, 1):
            _agent_with_events(px, _workspace_on(topo, shard), tasks=2)
    topo.cluster.stop()
    try:
        with psycopg.connect(topo.proxy, autocommit=True) as px:
            warnings: list[str] = []
            px.add_notice_handler(lambda d: warnings.append(d.message_primary or ""))
            got = px.execute("SELECT id FROM office.claim_events('c', 100)").fetchall()
            assert {topo.partition_shard[_decode(r[0])[0]] for r in got} == {0}
            assert len(got) == 2
            assert any("skipped" in w and str(topo.cluster.port) in w for w in warnings)
            # claim_run without an agent skips it the same way.
            px.execute("SELECT id FROM office.claim_run('w')").fetchall()
    finally:
        topo.cluster.start()
    with psycopg.connect(topo.proxy, autocommit=True) as px:
        rest = px.execute("SELECT id FROM office.claim_events('c', 100)").fetchall()
        assert {topo.partition_shard[_decode(r[0])[0]] for r in rest} == {1} and len(rest) == 2
        px.execute("SELECT office.ack_events(%s)", ([r[0] for r in got + rest],))


# --- set-aside rows -------------------------------------------------------------------


def test_a_set_aside_event_is_the_one_its_id_names(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    _drain_events(px)
    ws = _workspace_on(topo, 1)
    _agent_with_events(px, ws, tasks=1)
    _agent_with_events(px, _workspace_on(topo, 0), tasks=1)
    (event_id, _task), *_ = [
        r
        for r in px.execute("SELECT id, task_id FROM office.list_events(NULL, 500)")
        if ws in (r[1] or "")
    ]
    _part, local_id = _decode(event_id)
    assert px.execute(
        "SELECT office.set_aside('subscriber', %s, 'bad')", (str(event_id),)
    ).fetchone() == (True,)
    with psycopg.connect(topo.shards[1]) as s1, psycopg.connect(topo.shards[0]) as s0:
        assert s1.execute(
            "SELECT row_id FROM office.poison WHERE loop = 'subscriber'"
        ).fetchall() == [(str(local_id),)]
        assert s0.execute(
            "SELECT count(*) FROM office.poison WHERE loop = 'subscriber'"
        ).fetchone() == (0,)
    # The proxy's claim leaves it out; its reports and office.poison name it by its proxy id.
    others = [r[0] for r in px.execute("SELECT id FROM office.claim_events('c', 500)")]
    assert others and event_id not in others
    px.execute("SELECT office.ack_events(%s)", (others,))
    reports = px.execute(
        "SELECT row_id, reason FROM office.take_poison_reports('subscriber')"
    ).fetchall()
    assert reports == [(str(event_id), "bad")]
    assert px.execute("SELECT row_id FROM office.poison WHERE loop = 'subscriber'").fetchall() == [
        (str(event_id),)
    ]
    stats = px.execute(
        "SELECT poison_by_loop ->> 'subscriber' FROM office.daemon_stats()"
    ).fetchone()
    assert stats == ("1",)
    assert px.execute(
        "SELECT office.release_poison('subscriber', %s)", (str(event_id),)
    ).fetchone() == (True,)
    assert px.execute("SELECT count(*) FROM office.poison").fetchone() == (
        sum(len(r) for r in _shard_rows(topo, "SELECT 1 FROM office.poison")),
    )
    assert px.execute(
        "SELECT office.release_poison('subscriber', %s)", (str(event_id),)
    ).fetchone() == (False,)


def test_a_set_aside_row_of_another_loop_goes_to_its_entitys_shard(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    ws = _workspace_on(topo, 1)
    px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
    wakeup = px.execute(
        "SELECT wakeup_request_id FROM office.request_wakeup(%s, 'user', 'ping')", (f"a-{ws}",)
    ).fetchone()
    assert wakeup is not None
    assert px.execute("SELECT office.set_aside('wakeups', %s, 'r')", (wakeup[0],)).fetchone() == (
        True,
    )
    on_shards = _shard_rows(topo, "SELECT row_id FROM office.poison WHERE loop = 'wakeups'")
    assert (wakeup[0],) in on_shards[1] and (wakeup[0],) not in on_shards[0]
    assert px.execute("SELECT office.release_poison('wakeups', %s)", (wakeup[0],)).fetchone() == (
        True,
    )
    # A row no shard knows goes where one database would have it: partition 0.
    assert px.execute("SELECT office.set_aside('prune', 'nowhere', 'r')").fetchone() == (True,)
    with psycopg.connect(topo.shards[0]) as s0:
        assert s0.execute(
            "SELECT count(*) FROM office.poison WHERE row_id = 'nowhere'"
        ).fetchone() == (1,)
    assert px.execute("SELECT office.release_poison('prune', 'nowhere')").fetchone() == (True,)


# --- enqueue_runs ---------------------------------------------------------------------


def _bulk(px: psycopg.Connection[Any], elements: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    rows = px.execute("SELECT * FROM office.enqueue_runs(%s)", (json.dumps(elements),)).fetchall()
    return [tuple(r) for r in rows]


def test_enqueue_runs_split_by_shard_answers_in_element_order(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    workspaces = [_workspace_on(topo, shard) for shard in (1, 0, 1, 0)]
    agents = [f"a-{ws}" for ws in workspaces]
    for agent, ws in zip(agents, workspaces, strict=True):
        px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
    key = uuid.uuid4().hex
    elements = [
        {"agent_profile_id": agents[i % 4], "reason": f"bulk-{i}", "idempotency_key": f"{key}:{i}"}
        for i in range(8)
    ]
    first = _bulk(px, elements)
    assert [r[0] for r in first] == list(range(1, 9))
    assert [r[1] for r in first] == ["queued"] * 8
    # The same call again: every element deduped onto its own run, in order.
    again = _bulk(px, elements)
    assert [(r[0], r[1], r[3]) for r in again] == [(r[0], "deduped", r[3]) for r in first]
    for element, row in zip(elements, first, strict=True):
        shard = topo.shard_of_workspace(workspaces[agents.index(element["agent_profile_id"])])
        on_shards = _shard_rows(
            topo, "SELECT agent_profile_id, reason FROM office.runs WHERE id = %s", row[3]
        )
        assert on_shards[shard] == [(element["agent_profile_id"], element["reason"])]
        assert on_shards[1 - shard] == []


@pytest.mark.parametrize(
    ("bad", "sqlstate"),
    [
        ({"agent_profile_id": "no-such-agent", "reason": "r"}, "OFA01"),
        ({"agent_profile_id": "<shard1>", "reason": ""}, "22023"),
        ({"agent_profile_id": "<shard1>", "reason": "r", "surprise": 1}, "22023"),
        ("not an object", "22023"),
    ],
)
def test_enqueue_runs_errors_name_the_element_of_the_whole_call(
    topo: Topology, px: psycopg.Connection[Any], bad: Any, sqlstate: str
) -> None:
    ws0, ws1 = _workspace_on(topo, 0), _workspace_on(topo, 1)
    for ws in (ws0, ws1):
        px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
    # Where one database would answer for it: its agent's shard, else partition 0's.
    shard = 0
    if isinstance(bad, dict) and bad["agent_profile_id"] == "<shard1>":
        bad, shard = {**bad, "agent_profile_id": f"a-{ws1}"}, 1
    # The bad element is the third of the call and the first of its shard.
    elements = [
        {"agent_profile_id": f"a-{ws0}", "reason": "ok-1"},
        {"agent_profile_id": f"a-{ws0}", "reason": "ok-2"},
        bad,
    ]
    with (
        psycopg.connect(topo.shards[shard], autocommit=True) as conn,
        pytest.raises(psycopg.Error) as direct,
    ):
        conn.execute("SELECT * FROM office.enqueue_runs(%s)", (json.dumps([bad]),))
    with pytest.raises(psycopg.Error) as caught:
        _bulk(px, elements)
    assert caught.value.sqlstate == direct.value.sqlstate == sqlstate
    assert "enqueue_runs element 3:" in str(caught.value)
    assert str(direct.value).splitlines()[0].split("element 1: ", 1)[1] in str(caught.value)


def test_enqueue_runs_of_agents_no_shard_knows_is_answered_as_one_database(
    px: psycopg.Connection[Any],
) -> None:
    assert _bulk(px, []) == []
    with pytest.raises(psycopg.Error) as caught:
        _bulk(px, [{"agent_profile_id": "ghost", "reason": "r"}])
    assert caught.value.sqlstate == "OFA01" and "element 1:" in str(caught.value)
