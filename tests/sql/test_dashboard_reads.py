"""The dashboard's reads (sql/85_dashboard.sql): what they return, that an
office_reader may call them, and that a page reads a bounded range of an
index however rare its matches are."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from tests import harness

Conn = psycopg.Connection[Any]

WINDOW = 10_000


def _fill_runs(db: Conn, agent: str, reason: str, count: int, status: str = "finished") -> None:
    """Runs written straight into the table (the test is the owner), ids in
    creation order like the generated ones."""
    db.execute(
        "INSERT INTO office.runs (id, agent_profile_id, reason, status, finished_at)"
        " SELECT office._uuid_v7(), %s, %s, %s, CASE WHEN %s = 'finished' THEN now() END"
        " FROM generate_series(1, %s)",
        (agent, reason, status, status, count),
    )


def _all_pages(db: Conn, **filters: Any) -> tuple[list[str], int]:
    """Every page of list_runs as the dashboard walks them; the ids, and how
    many calls it took."""
    ids: list[str] = []
    before: str | None = None
    calls = 0
    while True:
        floor = db.execute("SELECT office.run_window_end(%s)", (before,)).fetchone()
        assert floor is not None
        rows = db.execute(
            "SELECT id FROM office.list_runs(before_id => %s, not_before_id => %s,"
            " page_size => 50, status => %s, agent_profile_id => %s, reason => %s,"
            " task_id => %s, key_prefix => %s)",
            (
                before,
                floor[0],
                filters.get("status"),
                filters.get("agent"),
                filters.get("reason"),
                filters.get("task"),
                filters.get("key_prefix"),
            ),
        ).fetchall()
        calls += 1
        ids += [r[0] for r in rows]
        if len(rows) == 50:
            before = rows[-1][0]
        elif floor[0] is not None:
            before = floor[0]
        else:
            return ids, calls


def test_list_runs_pages_through_every_match_once_newest_first(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w'), office.upsert_agent('a2', 'w')")
    _fill_runs(db, "a1", "rare", 3)
    _fill_runs(db, "a2", "bulk", WINDOW + 500)
    _fill_runs(db, "a1", "rare", 60)
    db.execute("VACUUM ANALYZE office.runs")
    expected = [
        r[0]
        for r in db.execute(
            "SELECT id FROM office.runs WHERE reason = 'rare' ORDER BY id DESC"
        ).fetchall()
    ]
    assert len(expected) == 63
    ids, calls = _all_pages(db, reason="rare")
    assert ids == expected
    # 50 + 10 from the first window; the 3 oldest only from the second one.
    assert calls == 3
    every, _ = _all_pages(db)
    assert len(every) == len(set(every)) == WINDOW + 563
    assert _all_pages(db, agent="a1", status="finished")[0] == expected


def test_filters_and_a_task_filter(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w'), office.upsert_agent('a2', 'w')")
    db.execute("SELECT office.create_task('w', 'T1', 't')")
    db.execute("SELECT office.enqueue_run('a1', 'r1', idempotency_key => 'alpha:1')")
    db.execute("SELECT office.enqueue_run('a2', 'r1', idempotency_key => 'beta:1')")
    db.execute("SELECT office.enqueue_run('a2', 'r2', task_id => 'T1')")
    claimed = db.execute("SELECT id FROM office.claim_run('w1', 'a1')").fetchone()
    assert claimed is not None

    def ids(**kw: Any) -> set[str]:
        return set(_all_pages(db, **kw)[0])

    def reasons(**kw: Any) -> set[str]:
        return {
            r[0]
            for r in db.execute(
                "SELECT reason FROM office.runs WHERE id = ANY(%s)", (list(ids(**kw)),)
            ).fetchall()
        }

    assert len(ids()) == 3
    assert ids(status="claimed") == {claimed[0]}
    assert reasons(agent="a2") == {"r1", "r2"}
    assert reasons(task="T1") == {"r2"}
    assert reasons(task="T1", reason="r1") == set()
    assert ids(key_prefix="beta:") == ids(agent="a2", reason="r1")
    # A LIKE wildcard in a prefix is a character, not a pattern.
    assert ids(key_prefix="%") == set()


def _runs_read(db: Conn, call: str, times: int = 7) -> tuple[int, int]:
    """Sequential scans and index fetches of office.runs by ``call`` made
    ``times`` in one transaction (past PL/pgSQL's custom plans, onto the
    generic one)."""
    with harness.table_reads(db) as reads:
        for _ in range(times):
            db.execute(call).fetchall()
    return reads["runs"].seq_scan, reads["runs"].idx_tup_fetch


def test_a_page_with_a_rare_filter_reads_a_bounded_range(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    _fill_runs(db, "a1", "bulk", 5 * WINDOW)
    db.execute("VACUUM ANALYZE office.runs")
    # Each page reads at most its window of the primary key, not the 50,000
    # runs of the table (an index-only scan counts its entries and the heap
    # fetches it makes, hence up to twice the window for the window's end).
    assert _runs_read(db, "SELECT * FROM office.list_runs(reason => 'none')") <= (0, 7 * WINDOW)
    assert _runs_read(db, "SELECT office.run_window_end(NULL)") <= (0, 7 * 2 * WINDOW)
    assert _runs_read(db, "SELECT * FROM office.list_agents()") <= (0, 7 * 2)


def test_agents_with_their_queue_and_claim(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent(i, 'w') FROM unnest(ARRAY['a1', 'a2', 'a3']) i")
    for n in range(3):
        db.execute("SELECT office.enqueue_run('a1', %s)", (f"r{n}",))
    db.execute("SELECT office.enqueue_run('a2', 'r')")
    claimed = db.execute("SELECT id FROM office.claim_run('worker-9', 'a2')").fetchone()
    assert claimed is not None
    _fill_runs(db, "a3", "bulk", 10_050, status="queued")
    rows = db.execute(
        "SELECT id, queued, oldest_queued_at IS NOT NULL, claimed_run_id, claimed_by,"
        " heartbeat_at IS NOT NULL FROM office.list_agents(page_size => 10)"
    ).fetchall()
    assert rows == [
        ("a1", 3, True, None, None, False),
        ("a2", 0, False, claimed[0], "worker-9", True),
        # Counted up to 10,001: the page says "10,000+".
        ("a3", 10_001, True, None, None, False),
    ]
    assert [r[0] for r in db.execute("SELECT id FROM office.list_agents('a1', 1)")] == ["a2"]


def test_tasks_routines_wakeups_and_events(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    db.execute("SELECT office.create_task('w', 'P', 'parent', assignee_agent_profile_id => 'a1')")
    for child in ("C2", "C1", "C3"):
        db.execute("SELECT office.create_task('w', %s, 'child', parent_id => 'P')", (child,))
    db.execute("SELECT office.add_blocker('C1', 'C2')")
    db.execute("SELECT office.create_routine('w', 'light', '{}', 'a1', id => 'L')")
    db.execute("SELECT office.add_routine_trigger('L', '0 12 * * *', 'UTC', now(), id => 'tr')")
    db.execute("SELECT office.dispatch_routine('L', 'manual')")
    db.execute("SELECT office.request_wakeup('a1', 'user', 'ping', '{}', 'wk')")

    def col(query: str, *params: Any) -> list[Any]:
        return [r[0] for r in db.execute(query, params).fetchall()]

    assert col("SELECT id FROM office.list_tasks()") == ["P", "C3", "C2", "C1"]
    assert col("SELECT id FROM office.list_tasks('C3', 2)") == ["C2", "C1"]
    assert col("SELECT id FROM office.list_task_children('P')") == ["C1", "C2", "C3"]
    assert col("SELECT id FROM office.list_task_children('P', 'C1', 1)") == ["C2"]
    assert col("SELECT id FROM office.list_task_blockers('C1')") == ["C2"]
    assert col("SELECT parent_task_id FROM office.get_parent_receipt('P')") == []
    assert col("SELECT id FROM office.list_routines()") == ["L"]
    assert col("SELECT name FROM office.get_routine('L')") == ["light"]
    assert col("SELECT id FROM office.list_routine_triggers('L')") == ["tr"]
    assert col("SELECT source FROM office.list_routine_runs('L')") == ["manual"]
    # Newest first: the request after the routine's own wake-up.
    wakeups = col("SELECT idempotency_key FROM office.list_wakeups()")
    assert wakeups[0] == "wk" and wakeups[1].startswith("routine:L:run:") and len(wakeups) == 2
    topics = col("SELECT id FROM office.list_events(NULL, 500)")
    assert topics == sorted(topics, reverse=True) and topics
    assert col("SELECT id FROM office.list_events(%s, 1)", topics[0]) == topics[1:2]


@pytest.mark.parametrize("size", [0, -1, 501, None])
def test_a_page_size_out_of_bounds_is_22023(db: Conn, size: int | None) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="page_size"):
        db.execute("SELECT * FROM office.list_tasks(NULL, %s)", (size,))


def test_an_unknown_status_is_22023(db: Conn) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="'running'"):
        db.execute("SELECT * FROM office.list_runs(status => 'running')")


def test_an_office_reader_reads_through_the_functions_not_the_tables(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w')")
    db.execute("SELECT office.enqueue_run('a1', 'r')")
    name = f"dash_reader_{uuid.uuid4().hex[:12]}"
    db.execute(f"CREATE ROLE {name} IN ROLE office_reader")
    try:
        with db.transaction():
            db.execute(f"SET LOCAL ROLE {name}")
            assert len(db.execute("SELECT * FROM office.list_runs()").fetchall()) == 1
            assert db.execute("SELECT queued FROM office.list_agents()").fetchall() == [(1,)]
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute("SELECT * FROM office.runs")
    finally:
        db.execute(f"DROP ROLE {name}")


def test_run_status_counts_are_queue_stats_on_a_small_table(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w'), office.upsert_agent('a2', 'w')")
    for reason in ("r1", "r2", "r3"):
        db.execute("SELECT office.enqueue_run('a1', %s)", (reason,))
    db.execute("SELECT office.enqueue_run('a2', 'r1')")
    claimed = db.execute("SELECT id, attempt FROM office.claim_run('w', 'a1')").fetchone()
    assert claimed is not None
    db.execute("SELECT office.finish_run(%s, %s)", claimed)
    db.execute("SELECT office.claim_run('w', 'a1')")
    counts = db.execute(
        "SELECT status, agents, runs, oldest_requested_at, exact FROM office.run_status_counts()"
    ).fetchall()
    stats = db.execute("SELECT status, agents, runs, oldest_requested_at FROM office.queue_stats")
    assert counts == [(*row, True) for row in stats.fetchall()]
