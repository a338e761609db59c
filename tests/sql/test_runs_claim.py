"""claim_run under load and under races (docs/api.md §3, since 0.4.0): 0 or 1
row, never an exception caused by another claimer, never two claimed runs of
one agent, agents that do not accept runs skipped, and a cost that does not
grow with the backlog of agents that already hold a claim (the plans are
read with auto_explain, asserting rows and buffers, never time);
get_run."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests import harness
from tools import native_constants

Conn = psycopg.Connection[Any]

BUSY = 50


def build_backlog(db: Conn, queued: int) -> None:
    """BUSY agents that each hold a claim and share ``queued`` queued runs,
    one idle agent with one queued run (the newest), all analyzed. Not
    explained, when the plans fixture is on: the readiness trigger runs a
    few statements per queued run."""
    explaining = db.execute(
        "SELECT current_setting('auto_explain.log_min_duration', true)"
    ).fetchone()
    db.execute("SELECT set_config('auto_explain.log_min_duration', '-1', false)")
    db.execute(
        "SELECT office.upsert_agent('busy-' || i, 'w') FROM generate_series(1, %s) i", [BUSY]
    )
    db.execute("SELECT office.upsert_agent('idle', 'w')")
    db.execute(
        "INSERT INTO office.runs"
        " (agent_profile_id, reason, status, claimed_at, heartbeat_at, attempt)"
        " SELECT 'busy-' || i, 'r', 'claimed', now(), now(), 1 FROM generate_series(1, %s) i",
        [BUSY],
    )
    db.execute(
        "INSERT INTO office.runs (agent_profile_id, reason, task_id, requested_at)"
        " SELECT 'busy-' || (1 + n %% %s), 'r' || (n %% 7), 't' || n,"
        "        now() - interval '1 hour' + n * interval '1 ms'"
        "   FROM generate_series(1, %s) n",
        [BUSY, queued],
    )
    db.execute("INSERT INTO office.runs (agent_profile_id, reason) VALUES ('idle', 'r')")
    db.execute("ANALYZE office.runs")
    db.execute("ANALYZE office.agent_profiles")
    if explaining and explaining[0] is not None:
        db.execute("SELECT set_config('auto_explain.log_min_duration', %s, false)", explaining)


@pytest.fixture
def plans(db: Conn) -> Iterator[list[dict[str, Any]]]:
    """Every plan of the statements run inside functions, as JSON, with
    actual rows and buffers (auto_explain, sent to this client as notices)."""
    captured: list[dict[str, Any]] = []

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        text = diag.message_primary or ""
        if text.startswith("duration:") and "plan:" in text:
            captured.append(json.loads(text.split("plan:", 1)[1])["Plan"])

    db.execute("LOAD 'auto_explain'")
    for setting, value in [
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_analyze", "on"),
        ("auto_explain.log_buffers", "on"),
        ("auto_explain.log_timing", "off"),
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_format", "json"),
        ("client_min_messages", "log"),
    ]:
        db.execute(f"SET {setting} = {value}")
    db.add_notice_handler(on_notice)
    yield captured
    db.remove_notice_handler(on_notice)
    db.execute("SET client_min_messages = notice")


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def rows_read(plan: dict[str, Any]) -> int:
    """Rows produced by the scans of a plan, over all their loops."""
    return sum(
        int(n["Actual Rows"]) * int(n["Actual Loops"])
        + int(n.get("Rows Removed by Filter", 0))
        + int(n.get("Rows Removed by Index Recheck", 0))
        for n in nodes(plan)
        if "Scan" in n["Node Type"]
    )


def buffers(plan: dict[str, Any]) -> int:
    """Pages a statement read itself: 0 for the call of a nested function
    (a plan without scans), whose statements are counted on their own."""
    if not any("Scan" in n["Node Type"] for n in nodes(plan)):
        return 0
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def claim_plans(
    db: Conn, plans: list[dict[str, Any]], *args: str
) -> tuple[Any, list[dict[str, Any]], int]:
    """The claimed row's agent, the plans of claim_run's nested statements,
    and the rows the call fetched through indexes (pg_stat_xact_user_tables).
    Where claim_run is C (sql/95_native.sql) its looks are index scans of its
    own, which no plan shows but the fetch count does; its writes are still
    statements with plans."""
    placeholders = ", ".join(["%s"] * len(args))
    totals = (
        "SELECT coalesce(sum(seq_scan), 0), coalesce(sum(idx_tup_fetch), 0)"
        " FROM pg_stat_xact_user_tables WHERE schemaname = 'office'"
    )
    # In one transaction (pg_stat_xact_*: its counts), and in the simple query
    # protocol: in the extended one, a statement's portal, and with it its
    # plan's notice, lives on until the next statement of the transaction.
    with db.transaction(), psycopg.ClientCursor(db) as cursor:
        before = cursor.execute(totals).fetchone()
        plans.clear()
        row = cursor.execute(
            f"SELECT agent_profile_id FROM office.claim_run({placeholders})", list(args)
        ).fetchone()
        # The nested statements of claim_run; the last plan is the call itself.
        inner = plans[:-1]
        after = cursor.execute(totals).fetchone()
    assert before is not None and after is not None
    assert after[0] == before[0]  # no sequential scan
    return row, inner, after[1] - before[1]


def test_claim_reads_a_bounded_number_of_rows_with_200k_queued_runs_of_busy_agents(
    db: Conn, plans: list[dict[str, Any]]
) -> None:
    build_backlog(db, 200_000)
    # Every busy agent is listed in office.agent_ready (its runs were queued
    # while it was busy). The first claim looks at each listed agent once,
    # removes the busy ones and claims the only claimable run, the newest of
    # 200k: a few rows per agent, not per queued run (0.3.0 walked all 200k).
    got, inner, fetched = claim_plans(db, plans, "w")
    assert got == ("idle",)
    read = [rows_read(p) for p in inner]
    used = [buffers(p) for p in inner]
    assert max(read) <= 12 * (BUSY + 1), read
    assert sum(used) <= 40 * (BUSY + 1), used
    assert fetched <= 10 * (BUSY + 1), fetched  # about 8 an agent: a walk of the backlog reads 200k
    assert db.execute("SELECT count(*) FROM office.agent_ready").fetchone() == (0,)
    # From then on the busy agents cost nothing: a claim reads a number of
    # rows and pages that does not depend on them (nor on their backlog).
    db.execute("SELECT office.upsert_agent('idle-2', 'w')")
    db.execute("SELECT office.enqueue_run('idle-2', 'r')")
    got, inner, fetched = claim_plans(db, plans, "w")
    assert got == ("idle-2",)
    assert sum(rows_read(p) for p in inner) <= 30, [rows_read(p) for p in inner]
    assert sum(buffers(p) for p in inner) <= 80, [buffers(p) for p in inner]
    assert fetched <= 10, fetched
    got, inner, fetched = claim_plans(db, plans, "w")
    assert got is None
    assert sum(rows_read(p) for p in inner) == 0, [rows_read(p) for p in inner]
    # 4, and a page each for the probes of the two empty partial indexes
    # (idx_wake_policies_holds, idx_run_queued_priority: docs/api.md §9).
    assert sum(buffers(p) for p in inner) <= 6, [buffers(p) for p in inner]
    assert fetched == 0
    # A busy agent by name: nothing, and its backlog is not read.
    got, inner, fetched = claim_plans(db, plans, "w", "busy-1")
    assert got is None
    assert max((rows_read(p) for p in inner), default=0) <= 2
    assert sum(buffers(p) for p in inner) <= 20
    assert fetched <= 2, fetched


def test_claim_of_one_agent_reads_its_oldest_run_not_its_backlog(
    db: Conn, plans: list[dict[str, Any]]
) -> None:
    build_backlog(db, 50_000)
    db.execute(
        "UPDATE office.runs SET status = 'finished' WHERE agent_profile_id = 'busy-1'"
        " AND status = 'claimed'"
    )
    got, inner, fetched = claim_plans(db, plans, "w", "busy-1")
    assert got == ("busy-1",)
    sorts = [n for p in inner for n in nodes(p) if n["Node Type"] == "Sort"]
    assert sorts == []  # read in index order, never a sort of its ~1,000 runs
    # (the most: the removal of its office.agent_ready row, one probe each)
    assert max(rows_read(p) for p in inner) <= 10
    assert fetched <= 10, fetched


def test_claim_skips_agents_that_do_not_accept_runs(db: Conn) -> None:
    for agent in ["paused", "stopped", "pending", "idle"]:
        db.execute("SELECT office.upsert_agent(%s, 'w')", [agent])
        db.execute("SELECT office.enqueue_run(%s, 'r')", [agent])
    for agent, status in [
        ("paused", "paused"),
        ("stopped", "stopped"),
        ("pending", "pending_approval"),
    ]:
        db.execute("SELECT office.set_agent_status(%s, %s)", [agent, status])
    assert db.execute("SELECT agent_profile_id FROM office.claim_run()").fetchone() == ("idle",)
    assert db.execute("SELECT * FROM office.claim_run()").fetchone() is None
    assert db.execute("SELECT * FROM office.claim_run('w', 'paused')").fetchone() is None
    db.execute("SELECT office.set_agent_status('paused', 'idle')")
    assert db.execute("SELECT agent_profile_id FROM office.claim_run()").fetchone() == ("paused",)
    states = db.execute(
        "SELECT agent_profile_id, status FROM office.runs ORDER BY agent_profile_id"
    ).fetchall()
    assert states == [
        ("idle", "claimed"),
        ("paused", "claimed"),
        ("pending", "queued"),
        ("stopped", "queued"),
    ]


def test_eight_claimers_a_thousand_times_never_fail_and_never_double_claim(
    db: Conn, concurrently: harness.Concurrently
) -> None:
    agents = [f"agent-{i}" for i in range(4)]
    for agent in [*agents, "sleeper"]:
        db.execute("SELECT office.upsert_agent(%s, 'w')", [agent])
    for n in range(3):
        db.execute("SELECT office.enqueue_run('sleeper', %s)", [f"r{n}"])
    db.execute("SELECT office.set_agent_status('sleeper', 'paused')")
    stop = threading.Event()
    violations: list[Any] = []

    def watcher() -> None:
        # Continuously, from outside: never two claimed runs of one agent, and
        # the paused agent's runs stay queued.
        with psycopg.connect(harness.conninfo(db.info.dbname), autocommit=True) as conn:
            while not stop.is_set():
                bad = conn.execute(
                    "SELECT agent_profile_id, count(*) FILTER (WHERE status = 'claimed')"
                    " FROM office.runs GROUP BY 1"
                    " HAVING count(*) FILTER (WHERE status = 'claimed') > 1"
                    "     OR (agent_profile_id = 'sleeper' AND bool_or(status <> 'queued'))"
                ).fetchall()
                violations.extend(bad)

    def claimer(seed: int) -> Callable[[Conn], int]:
        def run(conn: Conn) -> int:
            rng = random.Random(seed)
            claims = 0
            for n in range(1000):
                row = conn.execute(
                    "SELECT id, agent_profile_id, attempt FROM office.claim_run(%s, %s)",
                    [f"w{seed}", rng.choice([None, None, *agents])],
                ).fetchone()
                if row is None:
                    conn.execute(
                        "SELECT office.enqueue_run(%s, %s)", [rng.choice(agents), f"r{seed}.{n}"]
                    )
                    continue
                claims += 1
                run_id, agent, attempt = row
                assert agent != "sleeper"
                mine = conn.execute(
                    "SELECT count(*) FROM office.runs WHERE agent_profile_id = %s"
                    " AND status = 'claimed'",
                    [agent],
                ).fetchone()
                assert mine == (1,)
                end = rng.choice(["finish", "finish", "retry", "heartbeat"])
                if end == "retry":
                    conn.execute("SELECT office.retry_run(%s, %s, '0')", [run_id, attempt])
                elif end == "heartbeat":
                    conn.execute("SELECT office.heartbeat_run(%s, %s)", [run_id, attempt])
                    conn.execute("SELECT office.finish_run(%s, %s)", [run_id, attempt])
                else:
                    conn.execute("SELECT office.finish_run(%s, %s)", [run_id, attempt])
            return claims

        return run

    watch = threading.Thread(target=watcher)
    watch.start()
    try:
        outcomes = concurrently([claimer(i) for i in range(8)])
    finally:
        stop.set()
        watch.join(60)
    assert [o.error for o in outcomes] == [None] * 8
    assert sum(o.value for o in outcomes) > 0
    assert violations == []
    assert db.execute(
        "SELECT count(*) FROM office.runs WHERE agent_profile_id = 'sleeper' AND status = 'queued'"
    ).fetchone() == (3,)
    db.execute("SELECT office.set_agent_status('sleeper', 'idle')")
    got = db.execute("SELECT agent_profile_id FROM office.claim_run('w', 'sleeper')").fetchone()
    assert got == ("sleeper",)


@pytest.mark.parametrize("worker", ["w" * 201, "w\n1"], ids=["201 characters", "control character"])
def test_a_bad_worker_id_is_22023(db: Conn, worker: str) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    db.execute("SELECT office.enqueue_run('a1', 'r')")
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT * FROM office.claim_run(%s)", [worker])
    assert info.value.sqlstate == "22023" and "worker_id" in str(info.value)
    assert db.execute("SELECT status FROM office.runs").fetchall() == [("queued",)]


@pytest.mark.parametrize(
    "role", ["office_producer", "office_worker", "office_reader", "office_admin"]
)
def test_every_office_role_may_get_a_run(db: Conn, role: str) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    run_id = db.execute("SELECT run_id FROM office.enqueue_run('a1', 'r')").fetchone()
    assert run_id is not None
    db.execute(f"SET ROLE {role}")
    try:
        with db.cursor(row_factory=dict_row) as cur:
            rows = cur.execute("SELECT * FROM office.get_run(%s)", [run_id[0]]).fetchall()
            none = cur.execute("SELECT * FROM office.get_run('no-such-run')").fetchall()
    finally:
        db.execute("RESET ROLE")
    assert [(r["id"], r["status"], r["heartbeat_at"]) for r in rows] == [
        (run_id[0], "queued", None)
    ]
    assert none == []


@pytest.mark.parametrize("definition", ["claim_run", "_claim_run_plpgsql"])
def test_a_call_skips_a_bounded_number_of_busy_agents_and_the_next_call_goes_on(
    db: Conn, definition: str
) -> None:
    """More busy agents listed at once than a call may skip: the first call
    removes the rows of exactly the bound's worth of them (a readiness lock
    each, no more), answers none, and keeps what it removed; the next removes
    the rest and claims the free agent's run. The C and the PL/pgSQL
    definitions alike."""
    if db.execute(f"SELECT to_regproc('office.{definition}')").fetchone() == (None,):
        pytest.skip(f"office.{definition} does not exist here (no library)")
    bound, extra = native_constants.claim_skip_bound(), 40
    busy = bound + extra
    for low in range(0, busy, 500):
        high = min(low + 500, busy) - 1
        db.execute(
            "SELECT count(office.upsert_agent('busy-' || i, 'w'))"
            " FROM generate_series(%s::int, %s::int) i",
            [low, high],
        )
        # A claim each, then a queued run each: its readiness row is stale.
        db.execute(
            "INSERT INTO office.runs"
            " (agent_profile_id, reason, status, claimed_at, heartbeat_at, attempt)"
            " SELECT 'busy-' || i, 'r', 'claimed', now(), now(), 1"
            "   FROM generate_series(%s::int, %s::int) i",
            [low, high],
        )
        db.execute(
            "INSERT INTO office.runs (agent_profile_id, reason, requested_at)"
            " SELECT 'busy-' || i, 'r2', now() - interval '1 hour' + i * interval '1 ms'"
            "   FROM generate_series(%s::int, %s::int) i",
            [low, high],
        )
    db.execute("SELECT office.upsert_agent('free', 'w')")
    free = db.execute("SELECT run_id FROM office.enqueue_run('free', 'r')").fetchone()
    listed = (
        "SELECT count(DISTINCT agent_profile_id) FROM office.agent_ready"
        " WHERE agent_profile_id LIKE 'busy-%'"
    )
    assert harness.scalar(db, listed) == busy

    with db.transaction():
        first = db.execute(f"SELECT id FROM office.{definition}('w', NULL)").fetchall()
        locks = harness.scalar(
            db,
            "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'",
        )
    assert first == []
    assert harness.scalar(db, listed) == extra
    assert locks <= bound + 8, locks  # one readiness lock per agent skipped, and a batch
    second = db.execute(f"SELECT id FROM office.{definition}('w', NULL)").fetchall()
    assert second == [free]
    assert harness.scalar(db, listed) == 0
