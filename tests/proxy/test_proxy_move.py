"""``officectl cluster move``: one partition of a four-partition, two-shard
cluster moves to a third database (docs/scale-out.md "Move a partition").
Skipped where PL/Proxy is not installed (the embedded PostgreSQL 18)."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from controlplane.cli.main import main
from controlplane.scaleout import cluster, partition_move
from tests import harness
from tests.proxy.topology import (
    PARTITIONS,
    Topology,
    _create_database,
    _drop_database,
    _local,
    plproxy_missing,
    topology,
)

_MISSING = plproxy_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

MOVED = 1  # partition 1 lives on shard 1 (p % 2) and moves to the third database


@dataclass
class Cluster:
    topo: Topology
    target: str  # the third database
    workspaces: dict[int, str]  # partition -> a workspace holding data of every kind

    @property
    def proxy(self) -> str:
        return self.topo.proxy


@pytest.fixture
def world() -> Iterator[Cluster]:
    name = f"office_pxm_{harness.LABEL}_{os.getpid()}_c"
    admin = harness.conninfo("postgres")
    _create_database(admin, name)
    try:
        with topology("one_cluster") as topo, psycopg.connect(topo.proxy, autocommit=True) as px:
            workspaces: dict[int, str] = {}
            while len(workspaces) < PARTITIONS:
                ws = f"ws-{uuid.uuid4().hex[:10]}"
                part = _one(px, "SELECT office._partition(%s)", ws)
                if part not in workspaces:
                    workspaces[part] = ws
                    _populate(topo, px, ws)
            yield Cluster(topo=topo, target=_local(name), workspaces=workspaces)
    finally:
        _drop_database(admin, name)


def _one(conn: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return row[0] if len(row) == 1 else row


def _populate(topo: Topology, px: psycopg.Connection[Any], ws: str) -> None:
    """A row in every table that holds workspace data, written through the proxy."""
    agent, parent, child, blocker = f"a-{ws}", f"p-{ws}", f"c-{ws}", f"b-{ws}"
    px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
    px.execute(
        "SELECT office.create_task(%s, %s, assignee_agent_profile_id => %s)", (ws, parent, agent)
    )
    px.execute("SELECT office.create_task(%s, %s)", (ws, blocker))
    # Assigned: a run and an event; a child of parent: wake marks.
    px.execute(
        "SELECT office.create_task(%s, %s, parent_id => %s, assignee_agent_profile_id => %s)",
        (ws, child, parent, agent),
    )
    px.execute("SELECT office.add_blocker(%s, %s)", (parent, blocker))
    keyed = "SELECT office.enqueue_run(%s, 'keyed', idempotency_key => %s, task_id => %s)"
    px.execute(keyed, (agent, f"k-{ws}", blocker))
    px.execute(keyed, (agent, f"k2-{ws}", blocker))  # coalesced: its key is recorded
    while run := px.execute(
        "SELECT id, attempt FROM office.claim_run('w', %s)", (agent,)
    ).fetchone():
        px.execute("SELECT office.finish_run(%s, %s)", run)
    px.execute("SELECT office.move_task(%s, 'COMPLETED')", (child,))
    # The sweep's delivery writes a receipt; a child created done marks the parent.
    px.execute(
        "SELECT office.reconcile_parent(%s, office.child_set_key(%s), office.child_generation(%s))",
        (parent, parent, parent),
    )
    px.execute(
        "SELECT office.create_task(%s, %s, parent_id => %s, state => 'COMPLETED')",
        (ws, f"c2-{ws}", parent),
    )
    routine = _one(
        px,
        "SELECT id FROM office.create_routine(%s, 'r', assignee_agent_profile_id => %s)",
        ws,
        agent,
    )
    px.execute("SELECT office.add_routine_trigger(%s, '* * * * *')", (routine,))
    px.execute("SELECT office.dispatch_routine(%s, 'manual')", (routine,))
    px.execute(
        "SELECT office.request_wakeup(%s, 'test', idempotency_key => %s)", (agent, f"w-{ws}")
    )
    # Poison is written by the loops on the shard itself.
    with psycopg.connect(topo.shards[topo.shard_of_workspace(ws)], autocommit=True) as shard:
        shard.execute("SELECT office.set_aside('sweep', %s, 'test')", (parent,))


# Every row related to one workspace, found by joins written independently of
# partition_move.MOVED_TABLES (so a wrong rule there shows up here).
_ROWS_OF_WORKSPACE = {
    "agent_profiles": "SELECT t.* FROM office.agent_profiles t WHERE workspace_id = %(ws)s",
    "tasks": "SELECT t.* FROM office.tasks t WHERE workspace_id = %(ws)s",
    "task_blockers": "SELECT t.* FROM office.task_blockers t JOIN office.tasks k"
    " ON k.id = t.task_id WHERE k.workspace_id = %(ws)s",
    "routines": "SELECT t.* FROM office.routines t WHERE workspace_id = %(ws)s",
    "routine_triggers": "SELECT t.* FROM office.routine_triggers t JOIN office.routines r"
    " ON r.id = t.routine_id WHERE r.workspace_id = %(ws)s",
    "runs": "SELECT t.* FROM office.runs t JOIN office.agent_profiles a"
    " ON a.id = t.agent_profile_id WHERE a.workspace_id = %(ws)s",
    "run_keys_recorded": "SELECT t.* FROM office.run_keys_recorded t JOIN office.runs r"
    " ON r.id = t.run_id JOIN office.agent_profiles a ON a.id = r.agent_profile_id"
    " WHERE a.workspace_id = %(ws)s",
    "agent_ready": "SELECT t.* FROM office.agent_ready t JOIN office.agent_profiles a"
    " ON a.id = t.agent_profile_id WHERE a.workspace_id = %(ws)s",
    "wakeup_requests": "SELECT t.* FROM office.wakeup_requests t JOIN office.agent_profiles a"
    " ON a.id = t.agent_profile_id WHERE a.workspace_id = %(ws)s",
    "routine_runs": "SELECT t.* FROM office.routine_runs t JOIN office.routines r"
    " ON r.id = t.routine_id WHERE r.workspace_id = %(ws)s",
    "events": "SELECT t.* FROM office.events t JOIN office.tasks k"
    " ON k.id = t.task_id WHERE k.workspace_id = %(ws)s",
    "parent_child_wake_receipts": "SELECT t.* FROM office.parent_child_wake_receipts t"
    " JOIN office.tasks k ON k.id = t.parent_task_id WHERE k.workspace_id = %(ws)s",
    "parent_wake_marks": "SELECT t.* FROM office.parent_wake_marks t JOIN office.tasks k"
    " ON k.id = t.parent_task_id WHERE k.workspace_id = %(ws)s",
    "poison": "SELECT t.* FROM office.poison t JOIN office.tasks k"
    " ON t.loop = 'sweep' AND k.id = t.row_id WHERE k.workspace_id = %(ws)s",
}


def _rows(dsn: str, ws: str) -> dict[str, list[str]]:
    with psycopg.connect(dsn) as conn:
        if _one(conn, "SELECT to_regnamespace('office')") is None:
            return {table: [] for table in _ROWS_OF_WORKSPACE}
        return {
            table: sorted(
                str(r[0])
                for r in conn.execute(f"SELECT row_to_json(x)::text FROM ({q}) x", {"ws": ws})
            )
            for table, q in _ROWS_OF_WORKSPACE.items()
        }


def _everywhere(world: Cluster) -> dict[tuple[int, str], dict[str, list[str]]]:
    """(partition, database) -> the rows of that partition's workspace there."""
    return {
        (part, dsn): _rows(dsn, ws)
        for part, ws in world.workspaces.items()
        for dsn in [*world.topo.shards, world.target]
    }


def _empty(rows: dict[str, list[str]]) -> bool:
    return not any(rows.values())


def _move(world: Cluster, *extra: str, as_json: bool = True) -> Any:
    """``officectl cluster move`` of partition MOVED to the world's target."""
    command = ["cluster", "move", "--proxy", world.proxy, "--partition", str(MOVED)]
    command += ["--to", world.target, *(["--json"] if as_json else []), *extra]
    return CliRunner().invoke(main, command)


def _server_option(world: Cluster, partition: int) -> str:
    shards, _ = cluster.shard_connstrs(world.proxy)
    return partition_move._by_partition(shards)[partition]


def test_the_moved_tables_are_every_office_table_but_the_shard_counters(world: Cluster) -> None:
    with psycopg.connect(world.topo.shards[0]) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_depend d ON d.objid = c.oid"
                " JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'office'"
                " WHERE c.relkind IN ('r', 'p')"
            )
        }
    moved = [t for t, _ in partition_move.MOVED_TABLES]
    assert len(moved) == len(set(moved)) and not set(moved) & partition_move.STAYING
    assert set(moved) | partition_move.STAYING == tables


def test_a_moved_partition_lives_only_on_the_new_shard_and_answers_as_before(
    world: Cluster,
) -> None:
    ws = world.workspaces[MOVED]
    agent, child = f"a-{ws}", f"c-{ws}"
    before = _everywhere(world)
    source = world.topo.shards[world.topo.partition_shard[MOVED]]
    empty = [t for t, rows in before[(MOVED, source)].items() if not rows]
    assert not empty, f"no row of the workspace in {empty}"
    with psycopg.connect(world.proxy, autocommit=True) as px:
        task_before = px.execute("SELECT * FROM office.get_task(%s)", (child,)).fetchall()

    result = _move(world)
    assert result.exit_code == 0, result.output
    moved = json.loads(result.output)
    assert moved["switched"] is True and moved["rows"]["agent_profiles"] == 1
    assert _server_option(world, MOVED) == world.target

    after = _everywhere(world)
    assert after[(MOVED, world.target)] == before[(MOVED, source)]
    assert _empty(after[(MOVED, source)])
    for part in range(PARTITIONS):
        if part != MOVED:
            for dsn in (*world.topo.shards, world.target):
                assert after[(part, dsn)] == before[(part, dsn)], (part, dsn)
            assert _empty(after[(part, world.target)])

    with psycopg.connect(world.proxy, autocommit=True) as px:
        assert px.execute("SELECT * FROM office.get_task(%s)", (child,)).fetchall() == task_before
        again = _one(
            px,
            "SELECT outcome, run_id FROM office.enqueue_run(%s, 'keyed', idempotency_key => %s)",
            agent,
            f"k-{ws}",
        )
        assert again[0] == "deduped"
        assert _one(px, "SELECT status FROM office.get_run(%s)", again[1]) == "finished"
        fresh = _one(px, "SELECT run_id FROM office.enqueue_run(%s, 'after the move')", agent)
        claimed = _one(px, "SELECT id, attempt FROM office.claim_run('w', %s)", agent)
        assert claimed[0] != again[1]
        assert _one(px, "SELECT office.finish_run(%s, %s)", *claimed) is True
        px.execute("SELECT office.move_task(%s, 'IN_PROGRESS')", (f"b-{ws}",))
    with psycopg.connect(world.target) as target:
        assert _one(target, "SELECT count(*) FROM office.runs WHERE id = %s", fresh) == 1
        # The event of that move has an id above every copied one.
        copied = [json.loads(e)["id"] for e in after[(MOVED, world.target)]["events"]]
        newest = _one(
            target,
            "SELECT max(id) FROM office.events WHERE task_id = %s AND id <> ALL(%s)",
            f"b-{ws}",
            copied,
        )
        assert newest is not None and newest > max(copied)
    with psycopg.connect(source) as conn:
        assert _one(conn, "SELECT count(*) FROM office.runs WHERE id = %s", fresh) == 0


def test_a_move_interrupted_before_the_switch_leaves_the_source_serving_and_reruns(
    world: Cluster,
) -> None:
    ws = world.workspaces[MOVED]
    agent = f"a-{ws}"
    source = world.topo.shards[world.topo.partition_shard[MOVED]]
    # A failed copy: the target holds an agent of that id in another partition's
    # workspace, and its transaction fails.
    with psycopg.connect(world.target, autocommit=True) as target:
        target.execute("CREATE EXTENSION office")
        target.execute("SELECT office.upsert_agent(%s, %s)", (agent, world.workspaces[0]))
    before = _everywhere(world)
    failed = _move(world)
    assert failed.exit_code != 0 and "23505" in failed.output, failed.output
    assert _everywhere(world) == before and _server_option(world, MOVED) == source
    with psycopg.connect(world.target, autocommit=True) as target:
        target.execute("DELETE FROM office.agent_profiles WHERE id = %s", (agent,))

    # A rehearsal copies, commits on the target, and stops before the switch.
    rehearsal = _move(world, "--rehearse")
    assert rehearsal.exit_code == 0, rehearsal.output
    assert json.loads(rehearsal.output)["switched"] is False
    assert _server_option(world, MOVED) == source
    copy = _everywhere(world)
    assert copy[(MOVED, world.target)] == before[(MOVED, source)]
    assert copy[(MOVED, source)] == before[(MOVED, source)]
    # The source still serves: a write lands there, not on the copy.
    with psycopg.connect(world.proxy, autocommit=True) as px:
        late = _one(
            px,
            "SELECT run_id FROM office.enqueue_run(%s, 'late', idempotency_key => 'late')",
            agent,
        )
    with psycopg.connect(world.target) as target:
        assert _one(target, "SELECT count(*) FROM office.runs WHERE id = %s", late) == 0

    # The move again: the copy is replaced, the late write comes along once.
    result = _move(world, as_json=False)
    assert result.exit_code == 0 and "switched" in result.output, result.output
    after = _everywhere(world)
    assert _empty(after[(MOVED, source)])
    with psycopg.connect(world.target) as target:
        assert _one(target, "SELECT count(*) FROM office.runs WHERE id = %s", late) == 1
        assert _one(target, "SELECT count(*) FROM office.agent_profiles WHERE id = %s", agent) == 1
    with psycopg.connect(world.proxy, autocommit=True) as px:
        again = _one(
            px,
            "SELECT outcome, run_id FROM office.enqueue_run(%s, 'late', idempotency_key => 'late')",
            agent,
        )
        assert again == ("deduped", late)


def test_a_switched_move_whose_source_kept_its_rows_is_finished_by_a_rerun(
    world: Cluster,
) -> None:
    source = world.topo.shards[world.topo.partition_shard[MOVED]]
    assert _move(world, "--rehearse").exit_code == 0
    with psycopg.connect(world.proxy, autocommit=True) as px:  # switched by hand, say
        px.execute(
            sql.SQL("ALTER SERVER office_cluster OPTIONS (SET p1 {})").format(
                sql.Literal(world.target)
            )
        )
    before = _everywhere(world)
    assert not _empty(before[(MOVED, source)])
    result = _move(world)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rows"]["agent_profiles"] == 1  # purged on the source
    after = _everywhere(world)
    assert _empty(after[(MOVED, source)])
    assert after[(MOVED, world.target)] == before[(MOVED, world.target)]


def test_claimed_runs_refuse_the_move_unless_forced_and_their_holder_finishes_after(
    world: Cluster,
) -> None:
    ws = world.workspaces[MOVED]
    agent = f"a-{ws}"
    with psycopg.connect(world.proxy, autocommit=True) as px:
        px.execute("SELECT office.enqueue_run(%s, 'in flight')", (agent,))
        claimed = _one(px, "SELECT id, attempt FROM office.claim_run('w', %s)", agent)
    before = _everywhere(world)
    refused = _move(world)
    assert refused.exit_code != 0 and "1 claimed runs" in refused.output, refused.output
    assert _everywhere(world) == before
    forced = _move(world, "--force")
    assert forced.exit_code == 0, forced.output
    assert json.loads(forced.output)["forced"] is True
    with psycopg.connect(world.proxy, autocommit=True) as px:
        assert _one(px, "SELECT office.heartbeat_run(%s, %s)", *claimed) is True
        assert _one(px, "SELECT office.finish_run(%s, %s)", *claimed) is True
    with psycopg.connect(world.target) as target:
        status = _one(target, "SELECT status FROM office.runs WHERE id = %s", claimed[0])
        assert status == "finished"


def test_a_move_refuses_a_partition_that_does_not_exist(world: Cluster) -> None:
    result = CliRunner().invoke(
        main,
        ["cluster", "move", "--proxy", world.proxy, "--partition", "4", "--to", world.target],
    )
    assert result.exit_code != 0 and "between 0 and 3" in result.output


def test_a_call_waiting_on_the_move_is_ended_and_writes_nothing_on_the_source(
    world: Cluster,
) -> None:
    ws = world.workspaces[MOVED]
    agent = f"a-{ws}"
    source = world.topo.shards[world.topo.partition_shard[MOVED]]
    blocked: list[BaseException] = []
    threads: list[threading.Thread] = []

    def enqueue() -> None:
        try:
            with psycopg.connect(world.proxy, autocommit=True) as px:
                px.execute(
                    "SELECT office.enqueue_run(%s, 'blocked', idempotency_key => 'blocked')",
                    (agent,),
                )
        except psycopg.Error as exc:
            blocked.append(exc)

    def start_a_writer(table: str, rows: int) -> None:
        # Once, while the move holds the source's locks: a call the proxy
        # routes to the source, waiting on them.
        if threads:
            return
        threads.append(threading.Thread(target=enqueue))
        threads[0].start()
        with psycopg.connect(source, autocommit=True) as conn:
            while not _one(
                conn,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE '%%enqueue_run%%'",
            ):
                conn.execute("SELECT pg_sleep(0.05)")

    result = partition_move.move_partition(
        world.proxy, MOVED, world.target, progress=start_a_writer
    )
    threads[0].join(60)
    assert result.switched and len(blocked) == 1, blocked
    with psycopg.connect(source) as conn:
        assert _one(conn, "SELECT count(*) FROM office.runs WHERE idempotency_key = 'blocked'") == 0
    with psycopg.connect(world.proxy, autocommit=True) as px:  # the caller's retry
        retried = _one(
            px,
            "SELECT outcome, run_id FROM office.enqueue_run(%s, 'blocked',"
            " idempotency_key => 'blocked')",
            agent,
        )
    assert retried[0] == "queued"
    with psycopg.connect(world.target) as target:
        assert _one(target, "SELECT count(*) FROM office.runs WHERE id = %s", retried[1]) == 1


def test_a_move_refuses_its_own_source_spelled_otherwise(world: Cluster) -> None:
    source = world.topo.shards[world.topo.partition_shard[MOVED]]
    result = CliRunner().invoke(
        main,
        [
            "cluster",
            "move",
            "--proxy",
            world.proxy,
            "--partition",
            str(MOVED),
            "--to",
            f"{source} application_name=same",
        ],
    )
    assert result.exit_code != 0 and "shard already" in result.output, result.output


def test_a_move_to_a_url_dsn_stores_key_value_and_serves_through_the_proxy(
    world: Cluster,
) -> None:
    # PL/Proxy appends user=... to a partition's string: a URL stored as it
    # was given would make every call of the partition fail.
    target = conninfo_to_dict(world.target)
    url = f"postgresql://{target['user']}@{target['host']}:{target['port']}/{target['dbname']}"
    command = ["cluster", "move", "--proxy", world.proxy, "--partition", str(MOVED)]
    result = CliRunner().invoke(main, [*command, "--to", url, "--json"])
    assert result.exit_code == 0, result.output
    assert conninfo_to_dict(_server_option(world, MOVED)) == target
    assert "://" not in _server_option(world, MOVED)
    with psycopg.connect(world.proxy, autocommit=True) as px:
        px.execute("SELECT office.upsert_agent('a-url-move', %s)", (world.workspaces[MOVED],))
    with psycopg.connect(world.target) as tgt:
        assert _one(tgt, "SELECT count(*) FROM office.agent_profiles WHERE id = 'a-url-move'") == 1


class _Writers:
    """Producers enqueueing keyed runs of the moved workspace through the
    proxy: every key by ``PRODUCERS`` threads at about the same time (so the
    key lock and the dedup decide), even keys coalescible into the agents'
    queued runs (the key recorded), odd ones entry-triggered (a run each). A
    call that fails is retried until it is answered, as a caller would."""

    STREAMS = 3
    PRODUCERS = 2

    def __init__(self, proxy: str, agents: list[str]) -> None:
        self.proxy, self.agents = proxy, agents
        self.answers: dict[str, set[str]] = {}
        self.errors: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._produce, args=(stream,))
            for stream in range(self.STREAMS)
            for _ in range(self.PRODUCERS)
        ]

    def answered(self) -> int:
        with self.lock:
            return len(self.answers)

    def _enqueue(self, px: psycopg.Connection[Any], key: str, n: int) -> Any:
        return _one(
            px,
            "SELECT outcome, run_id FROM office.enqueue_run(%s, %s, idempotency_key => %s,"
            " entry_triggered => %s)",
            self.agents[n % len(self.agents)],
            "stress",
            key,
            n % 2 == 1,
        )

    def _produce(self, stream: int) -> None:
        px = psycopg.connect(self.proxy, autocommit=True)
        n = 0
        try:
            while not self.stop.is_set():
                key = f"stress-{stream}-{n}"
                while True:
                    try:
                        outcome, run_id = self._enqueue(px, key, n)
                        break
                    except psycopg.Error as exc:
                        with self.lock:
                            name = type(exc).__name__
                            self.errors[name] = self.errors.get(name, 0) + 1
                        if px.broken or px.closed:
                            px = psycopg.connect(self.proxy, autocommit=True)
                assert outcome in ("queued", "deduped", "coalesced") and run_id
                with self.lock:
                    self.answers.setdefault(key, set()).add(run_id)
                n += 1
        finally:
            px.close()


def _more_answers(writers: _Writers, more: int) -> Callable[[], bool]:
    floor = writers.answered() + more
    return lambda: writers.answered() >= floor


def _served(dsn: str, keys: list[str]) -> list[tuple[str, str]]:
    """(key, run id) for every run serving one of the keys on one database:
    its own key, or one recorded when a request coalesced into it."""
    with psycopg.connect(dsn) as conn:
        if _one(conn, "SELECT to_regnamespace('office')") is None:
            return []
        return [
            (r[0], r[1])
            for r in conn.execute(
                "SELECT idempotency_key, id FROM office.runs WHERE idempotency_key = ANY(%(k)s)"
                " UNION ALL SELECT idempotency_key, run_id FROM office.run_keys_recorded"
                " WHERE idempotency_key = ANY(%(k)s)",
                {"k": keys},
            )
        ]


def test_moves_back_and_forth_under_writers_lose_and_double_no_key(world: Cluster) -> None:
    ws = world.workspaces[MOVED]
    source = world.topo.shards[world.topo.partition_shard[MOVED]]
    agents = [f"stress-{i}-{ws}" for i in range(4)]
    with psycopg.connect(world.proxy, autocommit=True) as px:
        for agent in agents:
            px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
    writers = _Writers(world.proxy, agents)
    for thread in writers.threads:
        thread.start()
    moves: list[tuple[str, bool | BaseException]] = []
    try:
        for to in [world.target, source] * 3:
            # Each move while the writers run, after they answered more keys.
            harness.wait_for(_more_answers(writers, 200), "writes")
            try:
                moves.append((to, partition_move.move_partition(world.proxy, MOVED, to).switched))
            except (psycopg.Error, cluster.ClusterError) as exc:
                moves.append((to, exc))
        harness.wait_for(_more_answers(writers, 200), "writes after the last move")
    finally:
        writers.stop.set()
        for thread in writers.threads:
            thread.join(60)
    keys = sorted(writers.answers)
    runs: dict[str, set[tuple[str, str]]] = {}
    for dsn in (*world.topo.shards, world.target):
        for key, run_id in _served(dsn, keys):
            runs.setdefault(key, set()).add((dsn, run_id))
    doubled = sorted(k for k, found in runs.items() if len(found) > 1)
    answered_twice = sorted(k for k, ids in writers.answers.items() if len(ids) > 1)
    lost = sorted(
        k for k, ids in writers.answers.items() if not ids <= {r for _, r in runs.get(k, set())}
    )
    stranded = sorted(k for k, found in runs.items() if any(d != source for d, _ in found))
    summary = (
        f"{len(keys)} keys, {len(doubled)} with two runs, {len(answered_twice)} answered with"
        f" two run ids, {len(lost)} lost, {len(stranded)} off the final owner;"
        f" moves {moves}; retried errors {writers.errors}"
    )
    print(summary)  # pytest -s: the figures of the note
    assert all(ok is True for _, ok in moves), summary
    assert not doubled and not answered_twice and not lost and not stranded, summary
    # The partition is back on its source: the target keeps none of its rows.
    assert _server_option(world, MOVED) == source
    assert _empty(_rows(world.target, ws)), summary
    with psycopg.connect(world.target) as target:
        left = target.execute(
            "SELECT (SELECT count(*) FROM office.runs WHERE agent_profile_id = ANY(%(a)s))"
            " + (SELECT count(*) FROM office.run_keys_recorded WHERE idempotency_key = ANY(%(k)s))",
            {"a": agents, "k": keys},
        ).fetchone()
        assert left == (0,), summary
    # Every key answered is served by its one run through the proxy.
    with psycopg.connect(world.proxy, autocommit=True) as px:
        for n, key in enumerate(keys):
            outcome, run_id = writers._enqueue(px, key, int(key.rsplit("-", 1)[1]) + 2 * n)
            assert outcome == "deduped" and {run_id} == writers.answers[key], (key, summary)
