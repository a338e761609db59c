"""The convergence scenarios run directly on a shard and through the proxy:
each test takes ``via`` (``direct``: the shard that owns the
workspace; ``proxy``: the proxy of four partitions over two shards) and must
give the same outcome both ways. Races run on real concurrent connections
(``harness.run_concurrently``). Skipped where PL/Proxy is not installed."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from controlplane import keys
from tests import harness
from tests.proxy.topology import Topology, plproxy_missing, topology

_MISSING = plproxy_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

Conn = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def topo() -> Iterator[Topology]:
    with topology("one_cluster") as t:
        yield t


class World:
    """One fresh workspace with an agent, reached ``via`` a shard or the proxy."""

    def __init__(self, topo: Topology, via: str) -> None:
        self.ws = f"ws-{uuid.uuid4().hex[:10]}"
        self.agent = f"a-{self.ws}"
        self.shard = topo.shards[topo.shard_of_workspace(self.ws)]
        self.dsn = topo.proxy if via == "proxy" else self.shard
        self.conn = psycopg.connect(self.dsn, autocommit=True)
        self.conn.execute("SELECT office.upsert_agent(%s, %s)", (self.agent, self.ws))

    def one(self, query: str, *args: Any) -> Any:
        row = self.conn.execute(query, args).fetchone()
        assert row is not None
        return row[0] if len(row) == 1 else row

    def task(self, name: str, **fields: Any) -> str:
        task_id = f"{name}-{self.ws}"
        named = "".join(f", {k} => %({k})s" for k in fields)
        self.conn.execute(
            f"SELECT office.create_task(%(ws)s, %(id)s{named})",
            {"ws": self.ws, "id": task_id, **fields},
        )
        return task_id

    def runs_with_key(self, key: str) -> int:
        """Runs holding or served by ``key``, counted on the owning shard."""
        with psycopg.connect(self.shard) as conn:
            row = conn.execute(
                "SELECT count(DISTINCT id) FROM office.runs WHERE idempotency_key = %s OR id IN"
                " (SELECT run_id FROM office.run_keys_recorded WHERE idempotency_key = %s)",
                (key, key),
            ).fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture(params=["direct", "proxy"])
def world(request: pytest.FixtureRequest, topo: Topology) -> Iterator[World]:
    w = World(topo, request.param)
    try:
        yield w
    finally:
        w.conn.close()


def _all_ok(results: list[harness.Outcome]) -> list[Any]:
    errors = [r.error for r in results if r.error is not None]
    assert not errors, errors
    return [r.value for r in results]


def test_two_producers_with_one_remembered_key_converge_on_one_run(world: World) -> None:
    key = f"k-{world.ws}"

    def enqueue(conn: Conn) -> Any:
        return conn.execute(
            "SELECT outcome, run_id FROM office.enqueue_run(%s, 'race', idempotency_key => %s)",
            (world.agent, key),
        ).fetchone()

    outcomes = _all_ok(harness.run_concurrently(world.dsn, [enqueue, enqueue]))
    assert len({run_id for _, run_id in outcomes}) == 1
    assert sorted(outcome for outcome, _ in outcomes)[1] == "queued"
    assert world.runs_with_key(key) == 1


def test_blockers_resolving_together_wake_the_task_once(world: World) -> None:
    task = world.task("t", assignee_agent_profile_id=world.agent)
    blockers = [world.task("b1"), world.task("b2")]
    for blocker in blockers:
        world.conn.execute("SELECT office.add_blocker(%s, %s)", (task, blocker))

    def complete(blocker: str) -> Any:
        return lambda conn: conn.execute(
            "SELECT office.move_task(%s, 'COMPLETED')", (blocker,)
        ).fetchone()

    _all_ok(harness.run_concurrently(world.dsn, [complete(b) for b in blockers]))
    key = keys.blockers_resolved_key(task, blockers)
    assert key is not None
    assert world.one("SELECT office.blockers_resolved_key(%s, %s)", task, blockers) == key
    assert world.runs_with_key(key) == 1
    again = world.one(
        "SELECT outcome FROM office.enqueue_run(%s, 'task_blockers_resolved',"
        " idempotency_key => %s, task_id => %s)",
        world.agent,
        key,
        task,
    )
    assert again == "deduped"


def test_the_sweep_wakes_a_parent_the_edge_path_missed_once_under_concurrent_sweeps(
    world: World,
) -> None:
    parent = world.task("p", assignee_agent_profile_id=world.agent)
    child = world.task("c", parent_id=parent)
    # A paused agent refuses the edge path's wake: the parent is stuck.
    world.conn.execute("SELECT office.set_agent_status(%s, 'paused')", (world.agent,))
    world.conn.execute("SELECT office.move_task(%s, 'COMPLETED')", (child,))
    world.conn.execute("SELECT office.set_agent_status(%s, 'idle')", (world.agent,))
    stuck = [
        r[0]
        for r in world.conn.execute("SELECT parent_task_id FROM office.list_stuck_parents(1000)")
    ]
    assert parent in stuck

    def sweep(conn: Conn) -> list[Any]:
        return conn.execute(
            "SELECT parent_task_id, delivered, run_id FROM office.sweep_stuck_parents(1000)"
        ).fetchall()

    rows = [r for rs in _all_ok(harness.run_concurrently(world.dsn, [sweep, sweep])) for r in rs]
    delivered = [r for r in rows if r[0] == parent and r[1]]
    assert len(delivered) == 1
    receipt = world.conn.execute(
        "SELECT delivered_run_id FROM office.get_parent_receipt(%s)", (parent,)
    ).fetchall()
    assert receipt == [(delivered[0][2],)]
    operation = world.one(
        "SELECT office.wake_operation_id(%s, office.child_set_key(%s),"
        " office.child_generation(%s))",
        parent,
        parent,
        parent,
    )
    assert world.runs_with_key(operation) == 1
    assert not [r for r in sweep(world.conn) if r[0] == parent]


def test_a_remembered_wakeup_is_dispatched_once_by_concurrent_dispatchers(world: World) -> None:
    key = f"w-{world.ws}"
    request = (
        "SELECT outcome, wakeup_request_id"
        " FROM office.request_wakeup(%s, 'test', idempotency_key => %s)"
    )
    first = world.one(request, world.agent, key)
    again = world.one(request, world.agent, key)
    assert first[0] == "queued" and again[1] == first[1] and again[0] != "queued"

    def dispatch(conn: Conn) -> list[Any]:
        return conn.execute(
            "SELECT wakeup_request_id, run_id FROM office.dispatch_queued_wakeups(1000)"
        ).fetchall()

    rows = [
        r for rs in _all_ok(harness.run_concurrently(world.dsn, [dispatch, dispatch])) for r in rs
    ]
    ours = [run_id for request_id, run_id in rows if request_id == first[1]]
    assert len(ours) == 1 and ours[0] is not None
    assert world.one("SELECT agent_profile_id FROM office.get_run(%s)", ours[0]) == world.agent
    assert not [r for r in dispatch(world.conn) if r[0] == first[1]]


@pytest.mark.parametrize(
    ("policy", "second"), [("skip_if_active", "skipped"), ("coalesce_if_active", "coalesced")]
)
def test_a_routines_gate_lets_one_of_two_concurrent_dispatches_through(
    world: World, policy: str, second: str
) -> None:
    routine = world.one(
        "SELECT id FROM office.create_routine(%s, 'gate', '{\"title\": \"gate\"}',"
        " assignee_agent_profile_id => %s, concurrency_policy => %s)",
        world.ws,
        world.agent,
        policy,
    )

    def dispatch(conn: Conn) -> Any:
        return conn.execute(
            "SELECT status, linked_task_id FROM office.dispatch_routine(%s, 'manual')", (routine,)
        ).fetchone()

    outcomes = _all_ok(harness.run_concurrently(world.dsn, [dispatch, dispatch]))
    assert sorted(status for status, _ in outcomes) == sorted(["task_created", second])
    created = [task for status, task in outcomes if status == "task_created"]
    assert world.one("SELECT workspace_id FROM office.get_task(%s)", created[0]) == world.ws


def test_one_of_two_concurrent_claims_wins_and_a_recovered_claim_is_fenced(world: World) -> None:
    run_id = world.one("SELECT run_id FROM office.enqueue_run(%s, 'lease')", world.agent)

    def claim(conn: Conn) -> list[Any]:
        return conn.execute(
            "SELECT id, attempt FROM office.claim_run('w', %s)", (world.agent,)
        ).fetchall()

    claims = [r for rs in _all_ok(harness.run_concurrently(world.dsn, [claim, claim])) for r in rs]
    assert [c[0] for c in claims] == [run_id]
    (old_attempt,) = [c[1] for c in claims]
    assert world.one("SELECT office.heartbeat_run(%s, %s)", run_id, old_attempt) is True
    # The lease lapses: recovery requeues it, the old holder is fenced out.
    assert world.one("SELECT office.recover_stale_runs('0 seconds')") >= 1
    assert world.one("SELECT office.heartbeat_run(%s, %s)", run_id, old_attempt) is False
    new = world.one("SELECT id, attempt FROM office.claim_run('w2', %s)", world.agent)
    assert new == (run_id, old_attempt + 1)
    assert world.one("SELECT office.finish_run(%s, %s)", run_id, old_attempt) is False
    assert world.one("SELECT office.finish_run(%s, %s)", run_id, new[1]) is True
    assert world.one("SELECT status FROM office.get_run(%s)", run_id) == "finished"


def test_two_producers_assigning_one_task_converge_on_one_run(world: World) -> None:
    task = world.task("t")

    def assign(conn: Conn) -> Any:
        return conn.execute(
            "SELECT run_id FROM office.assign_task(%s, %s)", (task, world.agent)
        ).fetchone()

    run_ids = {r[0] for r in _all_ok(harness.run_concurrently(world.dsn, [assign, assign]))}
    assert len(run_ids) == 1
    with psycopg.connect(world.shard) as conn:
        row = conn.execute(
            "SELECT count(*) FROM office.runs WHERE task_id = %s", (task,)
        ).fetchone()
    assert row == (1,)


def test_two_daemons_firing_one_cron_tick_fire_it_once(world: World) -> None:
    routine = world.one(
        "SELECT id FROM office.create_routine(%s, 'cron', '{\"title\": \"tick\"}',"
        " assignee_agent_profile_id => %s, concurrency_policy => 'always_create')",
        world.ws,
        world.agent,
    )
    trigger, tick = world.one(
        "SELECT id, next_run_at FROM office.add_routine_trigger(%s, '* * * * *',"
        " next_run_at => '2001-01-01 00:00:00+00')",
        routine,
    )

    def fire(conn: Conn) -> Any:
        return conn.execute(
            "SELECT claimed, status, linked_task_id FROM office.fire_routine_tick(%s, %s,"
            " %s::timestamptz + interval '1 minute')",
            (trigger, tick, tick),
        ).fetchone()

    outcomes = _all_ok(harness.run_concurrently(world.dsn, [fire, fire]))
    fired = [o for o in outcomes if o[0]]
    assert len(fired) == 1 and fired[0][1] == "task_created"
    assert world.one("SELECT workspace_id FROM office.get_task(%s)", fired[0][2]) == world.ws
    due = world.conn.execute(
        "SELECT next_run_at FROM office.due_routine_triggers(now(), 1000) WHERE trigger_id = %s",
        (trigger,),
    ).fetchall()
    assert due == [(tick + datetime.timedelta(minutes=1),)]
