"""The office API through PL/Proxy (docs/api.md §8, docs/scale-out.md): a proxy
database serving the shard API over two shard databases, four partitions.
Skipped where PL/Proxy is not installed (the embedded PostgreSQL 18)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from controlplane import schema
from controlplane.scaleout import proxy as proxy_sql
from tests import harness
from tests.proxy.topology import PARTITIONS, Topology, plproxy_missing

_MISSING = plproxy_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


def _uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _workspaces_on(topo: Topology, shard: int, n: int = 1) -> list[str]:
    """n fresh workspace ids whose partition lives on ``shard``."""
    found: list[str] = []
    while len(found) < n:
        ws = _uid("ws")
        if topo.shard_of_workspace(ws) == shard:
            found.append(ws)
    return found


def _one(conn: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return row[0] if len(row) == 1 else row


_SIGNATURES = """
SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_arguments(p.oid),
       pg_get_function_result(p.oid), p.proretset, obj_description(p.oid, 'pg_proc'),
       ARRAY(SELECT a.grantee::regrole::text FROM aclexplode(p.proacl) a
              WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner ORDER BY 1)
  FROM pg_proc p WHERE p.pronamespace = 'office'::regnamespace AND p.proname !~ '^_'
 ORDER BY 1, 2
"""

_RESULT_TYPES = """
SELECT t.typname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod)
  FROM pg_type t JOIN pg_attribute a ON a.attrelid = t.typrelid
 WHERE t.typnamespace = 'office'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
   AND t.oid IN (SELECT prorettype FROM pg_proc WHERE pronamespace = 'office'::regnamespace
                  AND proname !~ '^_')
 ORDER BY 1, 2
"""


def test_every_shard_function_is_on_the_proxy_with_its_signature(topo: Topology) -> None:
    with psycopg.connect(topo.shards[0]) as shard, psycopg.connect(topo.proxy) as px:
        for query in (_SIGNATURES, _RESULT_TYPES):
            assert px.execute(query).fetchall() == shard.execute(query).fetchall()


def test_the_committed_proxy_script_is_generated_from_the_shard_api(topo: Topology) -> None:
    committed = schema.sql_dir() / "proxy" / f"office_proxy--{schema.current_version()}.sql"
    with psycopg.connect(topo.shards[0]) as shard:
        assert proxy_sql.generate(shard) == committed.read_text(encoding="utf-8"), (
            "regenerate: python -m controlplane.scaleout.proxy SHARD_DSN > " + str(committed)
        )
        names = {row[0] for row in shard.execute(_SIGNATURES)}
    assert set(proxy_sql.ROUTES) == names, "ROUTES names a function the shard does not have"


def test_every_row_of_a_workspace_lives_on_its_partitions_shard(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    workspaces = [_uid("ws") for _ in range(12)]
    for ws in workspaces:
        px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
        px.execute(
            "SELECT office.create_task(%s, %s, assignee_agent_profile_id => %s)",
            (ws, f"t-{ws}", f"a-{ws}"),
        )
        px.execute(
            "SELECT office.enqueue_run(%s, 'placement', idempotency_key => %s)",
            (f"a-{ws}", f"k-{ws}"),
        )
    for index, shard in enumerate(topo.shards):
        with psycopg.connect(shard) as conn:
            for ws in workspaces:
                here = _one(
                    conn,
                    "SELECT (SELECT count(*) FROM office.agent_profiles WHERE workspace_id = %s)"
                    " + (SELECT count(*) FROM office.tasks WHERE workspace_id = %s)"
                    " + (SELECT count(*) FROM office.runs WHERE agent_profile_id = %s)",
                    ws,
                    ws,
                    f"a-{ws}",
                )
                expected = 3 if topo.shard_of_workspace(ws) == index else 0
                # the assignment enqueues a run too: at least agent+task+2 runs
                assert (here >= 3) if expected else (here == 0), (ws, index, here)
    assert {topo.shard_of_workspace(ws) for ws in workspaces} == {0, 1}


def test_partitions_follow_hashtext(px: psycopg.Connection[Any]) -> None:
    for ws in ("alpha", "beta", "gamma", ""):
        assert _one(px, "SELECT office._partition(%s)", ws) == _one(
            px, "SELECT hashtext(%s) & %s", ws, PARTITIONS - 1
        )


@pytest.mark.parametrize("shard", [0, 1])
def test_remembered_keys_converge_through_the_proxy(
    topo: Topology, px: psycopg.Connection[Any], shard: int
) -> None:
    (ws,) = _workspaces_on(topo, shard)
    agent = f"a-{ws}"
    px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
    first = _one(
        px, "SELECT outcome, run_id FROM office.enqueue_run(%s, 'r', idempotency_key => 'k')", agent
    )
    again = _one(
        px, "SELECT outcome, run_id FROM office.enqueue_run(%s, 'r', idempotency_key => 'k')", agent
    )
    assert first[0] == "queued" and again[1] == first[1] and again[0] != "queued"
    keys = px.execute("SELECT idempotency_key FROM office.run_keys(%s)", (first[1],)).fetchall()
    assert ("k",) in keys


@pytest.mark.parametrize("shard", [0, 1])
def test_two_producers_assigning_one_task_converge_on_one_run(
    topo: Topology, px: psycopg.Connection[Any], shard: int
) -> None:
    (ws,) = _workspaces_on(topo, shard)
    agent, task = f"a-{ws}", f"t-{ws}"
    px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
    px.execute("SELECT office.create_task(%s, %s)", (ws, task))

    def assign(conn: psycopg.Connection[Any]) -> Any:
        return conn.execute(
            "SELECT run_id FROM office.assign_task(%s, %s)", (task, agent)
        ).fetchone()

    results = harness.run_concurrently(topo.proxy, [assign, assign])
    run_ids = {r.value[0] for r in results if r.error is None}
    assert all(r.error is None for r in results) and len(run_ids) == 1
    with psycopg.connect(topo.shards[shard]) as conn:
        assert _one(conn, "SELECT count(*) FROM office.runs WHERE task_id = %s", task) == 1


def test_claims_leases_and_fencing_through_the_proxy(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    (ws,) = _workspaces_on(topo, 1)
    agent = f"a-{ws}"
    px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
    run_id = _one(px, "SELECT run_id FROM office.enqueue_run(%s, 'lease')", agent)
    claimed = _one(px, "SELECT id, attempt FROM office.claim_run('w1', %s)", agent)
    assert claimed[0] == run_id
    assert _one(px, "SELECT office.heartbeat_run(%s, %s)", run_id, claimed[1]) is True
    assert _one(px, "SELECT office.finish_run(%s, %s)", run_id, claimed[1] + 1) is False
    assert _one(px, "SELECT office.finish_run(%s, %s)", run_id, claimed[1]) is True
    assert _one(px, "SELECT status FROM office.get_run(%s)", run_id) == "finished"


def test_requeue_and_bulk_cancel_through_the_proxy(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    """requeue_run by its run's shard; requeue_runs and cancel_runs over
    runs of both shards, the counts added."""
    runs = []
    for shard in (0, 1):
        (ws,) = _workspaces_on(topo, shard)
        agent = f"a-{ws}"
        px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
        runs.append(_one(px, "SELECT run_id FROM office.enqueue_run(%s, 'requeue')", agent))
    assert _one(px, "SELECT office.cancel_runs(%s, 'ops')", [*runs, "unknown"]) == 2
    assert _one(px, "SELECT office.requeue_run(%s)", runs[1]) is True
    assert _one(px, "SELECT office.requeue_run(%s)", runs[1]) is False
    assert _one(px, "SELECT status FROM office.get_run(%s)", runs[1]) == "queued"
    assert _one(px, "SELECT office.requeue_runs(%s)", runs) == 1
    assert _one(px, "SELECT office.cancel_runs(%s, 'ops')", runs) == 2
    assert _one(px, "SELECT office.requeue_runs(%s)", runs) == 2
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        px.execute("SELECT office.requeue_runs(%s)", ([f"x{i}" for i in range(10_001)],))


def test_claim_run_without_an_agent_finds_the_only_claimable_run_on_any_shard(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    # Drain whatever earlier tests left claimable, then one run on shard 1 only.
    while px.execute("SELECT id FROM office.claim_run('drain')").fetchone():
        pass
    (ws,) = _workspaces_on(topo, 1)
    px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
    run_id = _one(px, "SELECT run_id FROM office.enqueue_run(%s, 'only')", f"a-{ws}")
    assert px.execute("SELECT id FROM office.claim_run('w')").fetchall() == [(run_id,)]
    assert px.execute("SELECT id FROM office.claim_run('w')").fetchall() == []


def test_counts_are_added_over_the_shards(topo: Topology, px: psycopg.Connection[Any]) -> None:
    expected = 0
    for shard in topo.shards:
        with psycopg.connect(shard, autocommit=True) as conn:
            expected += _one(conn, "SELECT count(*) FROM office.parent_wake_marks")
    assert _one(px, "SELECT office.recover_stale_runs('100 years')") == 0
    assert isinstance(_one(px, "SELECT office.mark_all_parents()"), int)
    assert _one(px, "SELECT office.schema_version()") == schema.current_version()


@pytest.mark.parametrize(
    ("query", "args", "sqlstate"),
    [
        ("SELECT office.enqueue_run(%s, 'r')", ("no-such-agent",), "OFA01"),
        ("SELECT office.create_task(%s, 't')", (None,), None),
        ("SELECT office.list_stuck_parents(-1)", (), "22023"),
        ("SELECT office.sweep_stuck_parents(-1)", (), "22023"),
        ("SELECT office.due_routine_triggers(now(), 0)", (), "22023"),
        ("SELECT office.take_poison_reports('wakeups', 0)", (), "22023"),
        ("SELECT office.claim_events('')", (), "22023"),
        ("SELECT office.claim_events('c', 0)", (), "22023"),
        ("SELECT office.list_events(NULL, 0)", (), "22023"),
        ("SELECT office.ack_events(NULL)", (), "22023"),
        ("SELECT office.set_aside('nope', 'x', 'r')", (), "22023"),
        ("SELECT office.set_aside('subscriber', '', 'r')", (), "22023"),
        ("SELECT * FROM office.enqueue_runs('{}')", (), "22023"),
        (
            "SELECT * FROM office.enqueue_runs(%s)",
            ('[{"agent_profile_id": "no", "reason": "r"}]',),
            "OFA01",
        ),
        ("SELECT * FROM office.enqueue_runs(%s)", ('[{"agent_profile_id": "no"}]',), "22023"),
    ],
)
def test_shard_sqlstates_reach_the_caller_unchanged(
    topo: Topology, query: str, args: tuple[Any, ...], sqlstate: str | None
) -> None:
    with psycopg.connect(topo.shards[0], autocommit=True) as shard:
        try:
            shard.execute(query, args)
            direct = None
        except psycopg.Error as exc:
            direct = exc.sqlstate
    with psycopg.connect(topo.proxy, autocommit=True) as px, pytest.raises(psycopg.Error) as caught:
        px.execute(query, args)
    assert caught.value.sqlstate == (sqlstate or direct) == direct


def test_ofw01_reaches_the_caller_through_the_proxy(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    # Two workspaces on one partition, so the shard itself sees both.
    ws = _uid("ws")
    other = next(
        w
        for w in (_uid("ws") for _ in range(1000))
        if _one(px, "SELECT office._partition(%s) = office._partition(%s)", w, ws)
    )
    px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{other}", other))
    px.execute("SELECT office.create_task(%s, %s)", (ws, f"t-{ws}"))
    with pytest.raises(psycopg.Error) as caught:
        px.execute("SELECT office.assign_task(%s, %s)", (f"t-{ws}", f"a-{other}"))
    assert caught.value.sqlstate == "OFW01"


def test_an_unknown_id_is_answered_as_one_database_would(px: psycopg.Connection[Any]) -> None:
    assert _one(px, "SELECT office.task_terminal_status('no-such-task')") == "missing"
    assert px.execute("SELECT * FROM office.get_run('no-such-run')").fetchall() == []


def test_a_stopped_shard_fails_its_calls_by_name_and_the_other_keeps_serving(
    topo: Topology,
) -> None:
    if topo.cluster is None:
        pytest.skip("needs shard 1 in its own cluster")
    (ws0,), (ws1,) = _workspaces_on(topo, 0), _workspaces_on(topo, 1)
    with psycopg.connect(topo.proxy, autocommit=True) as px:
        for ws in (ws0, ws1):
            px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
    topo.cluster.stop()
    try:
        with psycopg.connect(topo.proxy, autocommit=True) as px:
            with pytest.raises(psycopg.Error) as by_workspace:
                px.execute("SELECT office.create_task(%s, 't-down')", (ws1,))
            with pytest.raises(psycopg.Error) as by_id:
                px.execute(
                    "SELECT office.enqueue_run(%s, 'r', idempotency_key => 'down')", (f"a-{ws1}",)
                )
            assert by_id.value.sqlstate == "08006"
            assert f"port={topo.cluster.port}" in str(by_id.value)
            # The cross-shard checks of a live shard's call skip the stopped one.
            px.execute("SELECT office.create_task(%s, %s)", (ws0, f"t-up-{ws0}"))
            # PL/Proxy's own connection error (XX000) names the shard database.
            assert topo.shards[1].rsplit("dbname=", 1)[1] in str(by_workspace.value)
            assert str(topo.cluster.port) in str(by_workspace.value)
            run_id = _one(
                px,
                "SELECT run_id FROM office.enqueue_run(%s, 'r', idempotency_key => 'up')",
                f"a-{ws0}",
            )
            assert _one(px, "SELECT agent_profile_id FROM office.get_run(%s)", run_id) == f"a-{ws0}"
    finally:
        topo.cluster.start()
    with psycopg.connect(topo.proxy, autocommit=True) as px:
        first = _one(
            px,
            "SELECT run_id FROM office.enqueue_run(%s, 'r', idempotency_key => 'down')",
            f"a-{ws1}",
        )
        again = _one(
            px,
            "SELECT run_id FROM office.enqueue_run(%s, 'r', idempotency_key => 'down')",
            f"a-{ws1}",
        )
        assert first == again


_VIEW_COLUMNS = """
SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
       obj_description(c.oid, 'pg_class'),
       ARRAY(SELECT g.grantee::regrole::text || ':' || g.privilege_type FROM aclexplode(c.relacl) g
              WHERE g.grantee <> c.relowner ORDER BY 1)
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
 WHERE c.relnamespace = 'office'::regnamespace AND a.attnum > 0
   -- the views, and office.poison and office.wake_decisions (tables on a shard,
   -- views on the proxy)
   AND ((c.relkind = 'v' AND c.relname !~ '^_') OR c.relname IN ('poison', 'wake_decisions'))
 ORDER BY 1, 2
"""


def test_the_stats_views_are_the_sum_of_the_shards(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    for shard in (0, 1):
        (ws,) = _workspaces_on(topo, shard)
        px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
        px.execute("SELECT office.enqueue_run(%s, 'stats', idempotency_key => 'k')", (f"a-{ws}",))
        px.execute("SELECT office.enqueue_run(%s, 'stats', idempotency_key => 'k')", (f"a-{ws}",))
    with psycopg.connect(topo.shards[0]) as s0, psycopg.connect(topo.shards[1]) as s1:
        assert px.execute(_VIEW_COLUMNS).fetchall() == s0.execute(_VIEW_COLUMNS).fetchall()
        queue = "SELECT status, agents, runs, oldest_requested_at FROM office.queue_stats"
        rows = {r[0]: r[1:] for r in px.execute(queue)}
        by_shard = [{r[0]: r[1:] for r in conn.execute(queue)} for conn in (s0, s1)]
        dedup = "SELECT queue, reason, kind, total FROM office.dedup_stats ORDER BY 1, 2, 3"
        summed: dict[tuple[str, str, str], int] = {}
        for conn in (s0, s1):
            for q, reason, kind, total in conn.execute(dedup):
                summed[(q, reason, kind)] = summed.get((q, reason, kind), 0) + total
        assert {(q, r, k): t for q, r, k, t in px.execute(dedup)} == summed
    for status, (agents, runs, oldest) in rows.items():
        parts = [s[status] for s in by_shard if status in s]
        assert agents == sum(p[0] for p in parts) and runs == sum(p[1] for p in parts)
        olds = [p[2] for p in parts if p[2] is not None]
        assert oldest == (min(olds) if olds else None)
    assert rows["queued"][1] >= 2


def test_office_roles_keep_their_grants_on_the_proxy(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    (ws,) = _workspaces_on(topo, 1)
    px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
    with px.transaction():
        px.execute("SET LOCAL ROLE office_producer")
        assert _one(px, "SELECT outcome FROM office.enqueue_run(%s, 'role')", f"a-{ws}") == "queued"
    with pytest.raises(psycopg.errors.InsufficientPrivilege), px.transaction():
        px.execute("SET LOCAL ROLE office_producer")
        px.execute("SELECT office.claim_run('w')")
    with px.transaction():
        px.execute("SET LOCAL ROLE office_reader")
        assert px.execute("SELECT count(*) FROM office.queue_stats").fetchone() is not None


def test_references_across_shards_are_refused_as_one_database_would(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    (ws0,), (ws1,) = _workspaces_on(topo, 0), _workspaces_on(topo, 1)
    px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws1}", ws1))
    px.execute("SELECT office.create_task(%s, %s)", (ws0, f"t-{ws0}"))
    px.execute("SELECT office.create_task(%s, %s)", (ws1, f"t-{ws1}"))
    refused = [
        ("SELECT office.assign_task(%s, %s)", (f"t-{ws0}", f"a-{ws1}"), "OFW01"),
        ("SELECT office.add_blocker(%s, %s)", (f"t-{ws0}", f"t-{ws1}"), "OFW01"),
        ("SELECT office.upsert_agent(%s, %s)", (f"a-{ws1}", ws0), "OFW01"),
        ("SELECT office.create_task(%s, %s)", (ws0, f"t-{ws1}"), "23505"),
        ("SELECT office.create_task(%s, 'c', parent_id => %s)", (ws0, f"t-{ws1}"), "OFW01"),
    ]
    for query, args, sqlstate in refused:
        with pytest.raises(psycopg.Error) as caught:
            px.execute(query, args)
        assert caught.value.sqlstate == sqlstate, query
    with psycopg.connect(topo.shards[0]) as s0:
        assert _one(s0, "SELECT count(*) FROM office.agent_profiles WHERE id = %s", f"a-{ws1}") == 0
        assert _one(s0, "SELECT count(*) FROM office.tasks WHERE id = %s", f"t-{ws1}") == 0


def test_recovered_runs_are_added_over_the_shards(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    for shard in (0, 1):
        (ws,) = _workspaces_on(topo, shard)
        px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
        px.execute("SELECT office.enqueue_run(%s, 'stale')", (f"a-{ws}",))
        assert px.execute("SELECT id FROM office.claim_run('w', %s)", (f"a-{ws}",)).fetchone()
    claimed = 0
    for shard_dsn in topo.shards:
        with psycopg.connect(shard_dsn) as conn:
            claimed += _one(conn, "SELECT count(*) FROM office.runs WHERE status = 'claimed'")
    assert claimed >= 2
    assert _one(px, "SELECT office.recover_stale_runs('0 seconds')") == claimed


def test_due_triggers_are_merged_ordered_and_limited_on_the_proxy(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    for shard in (0, 1):
        for ws in _workspaces_on(topo, shard, 2):
            routine = _one(px, "SELECT id FROM office.create_routine(%s, 'r')", ws)
            px.execute(
                "SELECT office.add_routine_trigger(%s, '* * * * *',"
                " next_run_at => %s::timestamptz)",
                (routine, f"2001-01-0{1 + shard} 00:00:00+00"),
            )
    due = "SELECT trigger_id, next_run_at FROM office.due_routine_triggers(now(), %s)"
    merged: list[Any] = []
    for shard_dsn in topo.shards:
        with psycopg.connect(shard_dsn) as conn:
            merged += conn.execute(due, (1000,)).fetchall()
    merged.sort(key=lambda r: (r[1], r[0].encode()))
    assert px.execute(due, (3,)).fetchall() == merged[:3]
    assert len(px.execute(due, (1000,)).fetchall()) == len(merged) >= 4


def test_queue_stats_keeps_the_shards_status_order_through_the_proxy(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    for shard in (0, 1):
        (ws,) = _workspaces_on(topo, shard)
        px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
        px.execute("SELECT office.enqueue_run(%s, 'order')", (f"a-{ws}",))
    order = "SELECT status FROM office.queue_stats"
    with psycopg.connect(topo.shards[0]) as s0:
        direct = [r[0] for r in s0.execute(order)]
    assert direct == ["queued", "claimed", "finished", "failed", "cancelled"]
    assert [r[0] for r in px.execute(order)] == direct


def test_assign_task_errors_come_in_the_direct_calls_order_through_the_proxy(
    topo: Topology, px: psycopg.Connection[Any]
) -> None:
    # The agent on the shard that does not hold partition 0, where an id no
    # shard knows is routed.
    (ws,) = _workspaces_on(topo, 1)
    (other,) = _workspaces_on(topo, 0)
    px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{ws}", ws))
    px.execute("SELECT office.upsert_agent(%s, %s)", (f"a-{other}", other))
    px.execute("SELECT office.create_task(%s, %s)", (ws, f"t-{ws}"))
    cases = [
        ("no-such-task", f"a-{ws}", "OFT01"),
        ("no-such-task", "no-such-agent", "OFA01"),
        (f"t-{ws}", "no-such-agent", "OFA01"),
        (f"t-{ws}", f"a-{other}", "OFW01"),
    ]
    for task, agent, sqlstate in cases:
        with pytest.raises(psycopg.Error) as caught:
            px.execute("SELECT office.assign_task(%s, %s)", (task, agent))
        assert (task, agent, caught.value.sqlstate) == (task, agent, sqlstate)
