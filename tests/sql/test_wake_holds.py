"""What a wake policy holds at claim time (docs/api.md §9, "What a policy
holds"), and explain_agent and office.governance_stats, which report it: a
reached budget holds every run of the agent, a cooldown and a run cap every
run not of origin human; a held run stays queued and is claimed once the hold
ends (by time or by a policy change), never twice, never lost."""

from __future__ import annotations

import datetime as dt
import itertools
import time
from typing import Any

import psycopg
import pytest

from tests.harness import Concurrently, values

Conn = psycopg.Connection[Any]


@pytest.fixture
def agent(db: Conn) -> str:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    return "a1"


def enqueue(db: Conn, agent: str, reason: str, origin: str | None = None) -> str:
    row = db.execute(
        "SELECT outcome, run_id FROM office.enqueue_run(agent_profile_id => %s, reason => %s,"
        " origin => %s)",
        [agent, reason, origin],
    ).fetchone()
    assert row is not None and row[0] == "queued", row
    return str(row[1])


def claim(db: Conn, agent: str | None = None) -> tuple[str, int] | None:
    if agent is None:
        row = db.execute("SELECT id, attempt FROM office.claim_run('w')").fetchone()
    else:
        row = db.execute("SELECT id, attempt FROM office.claim_run('w', %s)", [agent]).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def finish(db: Conn, claimed: tuple[str, int]) -> None:
    assert db.execute("SELECT office.finish_run(%s, %s)", claimed).fetchone() == (True,)


def explain(db: Conn, agent: str) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT run_id, status, claimable, held_by, until, detail FROM office.explain_agent(%s)",
        [agent],
    ).fetchall()


def holds(db: Conn) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT agent_profile_id, held_by, runs FROM office.governance_stats ORDER BY 1, 2"
    ).fetchall()


def test_no_policy_nothing_is_held(db: Conn, agent: str) -> None:
    run = enqueue(db, agent, "r1")
    assert explain(db, agent) == [(run, "queued", True, None, None, None)]
    assert holds(db) == []
    assert claim(db) == (run, 1)


def test_a_reached_budget_holds_every_run_until_the_policy_changes(db: Conn, agent: str) -> None:
    db.execute("SELECT office.set_wake_policy('agent', %s, budget => 1)", [agent])
    first = claim_after_enqueue(db, agent, "r1")
    assert db.execute("SELECT office.record_run_cost(%s, %s, 1)", first).fetchone() == (True,)
    finish(db, first)
    system = enqueue(db, agent, "r2")
    human = enqueue(db, agent, "r3", origin="human")
    # Neither the unfiltered claim nor the agent's own, and not the human run.
    assert claim(db) is None
    assert claim(db, agent) is None
    rows = explain(db, agent)
    assert [(r[0], r[2], r[3]) for r in rows] == [
        (system, False, "budget"),
        (human, False, "budget"),
    ]
    period_end = db.execute(
        "SELECT (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month')"
        " AT TIME ZONE 'UTC'"
    ).fetchone()
    assert period_end is not None and rows[0][4] == period_end[0]
    assert "budget of 1 per month is reached" in rows[0][5]
    assert holds(db) == [(agent, "budget", 2)]
    # The claims above delayed the agent's readiness rows; raising the budget
    # lists it again, and both runs are claimed, one at a time.
    db.execute("SELECT office.set_wake_policy('agent', %s, budget => 10)", [agent])
    second = claim(db)
    assert second == (system, 1)
    finish(db, second)
    assert claim(db) == (human, 1)


def claim_after_enqueue(db: Conn, agent: str, reason: str) -> tuple[str, int]:
    run = enqueue(db, agent, reason)
    claimed = claim(db)
    assert claimed == (run, 1)
    return claimed


def test_a_workspace_budget_holds_its_agents_and_clearing_it_lifts_the_hold(db: Conn) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1'), office.upsert_agent('a2', 'w1')")
    db.execute("SELECT office.upsert_agent('b1', 'w2')")
    db.execute("SELECT office.set_wake_policy('workspace', 'w1', budget => 0)")
    a2 = enqueue(db, "a2", "r1")
    b1 = enqueue(db, "b1", "r1")
    assert claim(db) == (b1, 1)
    assert claim(db) is None
    assert explain(db, "a2")[0][3] == "budget"
    assert db.execute("SELECT office.clear_wake_policy('workspace', 'w1')").fetchone() == (True,)
    assert claim(db) == (a2, 1)


def test_a_cooldown_holds_all_but_human_runs_and_ends_by_time(db: Conn, agent: str) -> None:
    db.execute("SELECT office.set_wake_policy('agent', %s, cooldown => '1 second')", [agent])
    first = claim_after_enqueue(db, agent, "r1")
    finish(db, first)
    ended = db.execute("SELECT finished_at FROM office.runs WHERE id = %s", [first[0]]).fetchone()
    assert ended is not None
    system = enqueue(db, agent, "r2")
    assert claim(db) is None
    assert claim(db, agent) is None
    [row] = explain(db, agent)
    assert row[:4] == (system, "queued", False, "cooldown")
    assert row[4] == ended[0] + dt.timedelta(seconds=1)
    # A human run is not held, and its claim is a claim like any other.
    human = enqueue(db, agent, "r3", origin="human")
    assert [r[3] for r in explain(db, agent)] == ["cooldown", None]
    assert holds(db) == [(agent, "cooldown", 1)]
    second = claim(db)
    assert second == (human, 1)
    finish(db, second)
    # The hold ends by itself: the delayed readiness row comes due.
    time.sleep(1.2)
    assert claim(db) == (system, 1)


def test_a_cooldown_does_not_count_ends_that_are_not_a_claims_end(db: Conn, agent: str) -> None:
    db.execute("SELECT office.set_wake_policy('agent', %s, cooldown => '1 hour')", [agent])
    cancelled = enqueue(db, agent, "r1")
    assert db.execute("SELECT office.cancel_run(%s, 'test')", [cancelled]).fetchone() == (True,)
    retried = claim_after_enqueue(db, agent, "r2")
    assert db.execute("SELECT office.retry_run(%s, %s, '0 seconds')", retried).fetchone() == (True,)
    # A cancelled queued run and a retry end no claim: nothing is held.
    assert claim(db) == (retried[0], 2)


def test_a_run_cap_counts_every_claim_and_prune_runs_does_not_lift_it(db: Conn, agent: str) -> None:
    db.execute(
        "SELECT office.set_wake_policy('agent', %s, max_runs => 2, per => '1 hour')", [agent]
    )
    finish(db, claim_after_enqueue(db, agent, "r1"))
    human = enqueue(db, agent, "r2", origin="human")
    finish(db, (human, 1) if claim(db) == (human, 1) else pytest.fail("human run not claimed"))
    third = enqueue(db, agent, "r3")
    assert claim(db) is None
    [row] = explain(db, agent)
    assert row[3] == "run_cap" and row[5] == "2 runs claimed in the last hour, at most 2"
    first_claim = db.execute(
        "SELECT min(t) FROM office.wake_claims, unnest(claimed_at) t WHERE agent_profile_id = %s",
        [agent],
    ).fetchone()
    assert first_claim is not None and row[4] == first_claim[0] + dt.timedelta(hours=1)
    # The finished runs pruned, the claims still count.
    db.execute("SELECT office.prune_runs('0 seconds')")
    finished = db.execute("SELECT count(*) FROM office.runs WHERE status = 'finished'").fetchone()
    assert finished == (0,)
    assert claim(db) is None
    # A human run is not held by the cap.
    human2 = enqueue(db, agent, "r4", origin="human")
    assert claim(db) == (human2, 1)
    db.execute("SELECT office.clear_wake_policy('agent', %s)", [agent])
    finish(db, (human2, 1))
    assert claim(db) == (third, 1)


def test_the_agent_row_wins_over_the_workspace_row(db: Conn, agent: str) -> None:
    db.execute("SELECT office.set_wake_policy('workspace', 'w1', cooldown => '1 hour')")
    db.execute("SELECT office.set_wake_policy('agent', %s, cooldown => '0 seconds')", [agent])
    finish(db, claim_after_enqueue(db, agent, "r1"))
    second = enqueue(db, agent, "r2")
    assert claim(db) == (second, 1)


def test_claimers_racing_under_a_run_cap_never_exceed_it(
    db: Conn, agent: str, concurrently: Concurrently
) -> None:
    """Eight claimers, each claiming and finishing at once for two seconds,
    against a cap of one run per second: the claims logged and the runs
    claimed are one per second at most, whatever the interleaving (the hold
    is decided again under the agent's claim lock)."""
    db.execute(
        "SELECT office.set_wake_policy('agent', %s, max_runs => 1, per => '1 second')", [agent]
    )
    for i in range(20):
        enqueue(db, agent, f"r{i}")

    def claimer(conn: Conn) -> list[tuple[str, dt.datetime]]:
        got: list[tuple[str, dt.datetime]] = []
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT id, attempt, claimed_at FROM office.claim_run('w')"
            ).fetchone()
            if row is not None:
                conn.execute("SELECT office.finish_run(%s, %s)", [row[0], row[1]])
                got.append((row[0], row[2]))
        return got

    claims = sorted((at, run) for got in values(concurrently([claimer] * 8)) for run, at in got)
    runs = [run for _, run in claims]
    assert len(runs) == len(set(runs)), "a run was claimed twice"
    assert 2 <= len(claims) <= 4
    for (earlier, _), (later, _) in itertools.pairwise(claims):
        assert later - earlier >= dt.timedelta(seconds=1), claims
    queued = db.execute(
        "SELECT count(*) FROM office.runs WHERE agent_profile_id = %s AND status = 'queued'",
        [agent],
    ).fetchone()
    assert queued == (20 - len(claims),)


def test_explain_agent_order_and_holds_of_the_run_itself(db: Conn, agent: str) -> None:
    later = db.execute(
        "SELECT run_id FROM office.enqueue_run(agent_profile_id => %s, reason => 'r1',"
        " not_before => now() + interval '1 hour')",
        [agent],
    ).fetchone()
    assert later is not None
    urgent = db.execute(
        "SELECT run_id FROM office.enqueue_run(agent_profile_id => %s, reason => 'r2',"
        " priority => 5)",
        [agent],
    ).fetchone()
    assert urgent is not None
    plain = enqueue(db, agent, "r3")
    rows = explain(db, agent)
    assert [r[0] for r in rows] == [urgent[0], later[0], plain]
    assert [(r[2], r[3]) for r in rows] == [(True, None), (False, "not_before"), (True, None)]
    claimed = claim(db, agent)
    assert claimed is not None
    rows = explain(db, agent)
    assert rows[0][:4] == (claimed[0], "claimed", False, None)
    assert "claimed by w" in rows[0][5]
    assert [r[3] for r in rows[1:]] == ["not_before", "claimed"]
    assert holds(db) == [(agent, "not_before", 1)]
    db.execute("SELECT office.set_agent_status(%s, 'paused')", [agent])
    assert [r[3] for r in explain(db, agent)[1:]] == ["paused", "paused"]
    assert holds(db) == [(agent, "paused", 2)]
    one = db.execute("SELECT count(*) FROM office.explain_agent(%s, 1)", [agent]).fetchone()
    assert one == (1,)


@pytest.mark.parametrize("max_rows", [None, 0, -1, 10001])
def test_explain_agent_max_rows_out_of_range_is_22023(
    db: Conn, agent: str, max_rows: int | None
) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="max_rows"):
        db.execute("SELECT * FROM office.explain_agent(%s, %s)", [agent, max_rows])


@pytest.mark.parametrize("who", [None, "", "nobody"])
def test_explain_agent_unknown_agent_is_ofa01(db: Conn, who: str | None) -> None:
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT * FROM office.explain_agent(%s)", [who])
    assert info.value.sqlstate == "OFA01"


def test_every_role_may_explain_and_readers_read_the_stats(db: Conn, agent: str) -> None:
    enqueue(db, agent, "r1")
    for role in ("office_reader", "office_producer", "office_worker", "office_admin"):
        db.execute(f"SET ROLE {role}")
        try:
            assert len(explain(db, agent)) == 1
            if role in ("office_reader", "office_admin"):
                assert holds(db) == []
        finally:
            db.execute("RESET ROLE")


def test_sixteen_concurrent_wakes_during_a_cooldown_make_no_new_run(
    db: Conn, agent: str, concurrently: Concurrently
) -> None:
    """The bucket's run, past the coalesce window, waits on a cooldown: all
    sixteen wakes, at once on their own connections, coalesce into it (one
    run per bucket, however long the wait)."""
    db.execute("SELECT office.set_wake_policy('agent', %s, cooldown => '1 hour')", [agent])
    finish(db, claim_after_enqueue(db, agent, "first"))
    run = enqueue(db, agent, "tick")
    db.execute(
        "UPDATE office.runs SET requested_at = now() - interval '1 hour' WHERE id = %s", [run]
    )

    def wake(conn: Conn) -> tuple[str, str]:
        row = conn.execute("SELECT outcome, run_id FROM office.enqueue_run(%s, 'tick')", [agent])
        found = row.fetchone()
        assert found is not None
        return (found[0], found[1])

    assert values(concurrently([wake] * 16)) == [("coalesced", run)] * 16
    queued = db.execute(
        "SELECT count(*) FROM office.runs WHERE agent_profile_id = %s AND status = 'queued'",
        [agent],
    ).fetchone()
    assert queued == (1,)


def test_human_wakes_racing_claimers_pull_a_parked_run_forward_once(
    db: Conn, agent: str, concurrently: Concurrently
) -> None:
    """A run parked on a back-off; two human wakes and four claimers at once:
    one pulled_forward decision, the run claimed once."""
    run = enqueue(db, agent, "work")
    db.execute(
        "UPDATE office.runs SET scheduled_retry_at = now() + interval '1 hour',"
        " requested_at = now() - interval '1 hour' WHERE id = %s",
        [run],
    )

    def human(conn: Conn) -> Any:
        return conn.execute(
            "SELECT outcome FROM office.enqueue_run(%s, 'work', origin => 'human')", [agent]
        ).fetchone()

    def claimer(conn: Conn) -> list[str]:
        got = []
        for _ in range(50):
            row = conn.execute("SELECT id FROM office.claim_run('w')").fetchone()
            if row is not None:
                got.append(row[0])
        return got

    outcomes = values(concurrently([human, human, claimer, claimer, claimer, claimer]))
    claimed_ids = [i for got in outcomes[2:] for i in got]
    pulled = db.execute(
        "SELECT count(*) FROM office.wake_decisions WHERE decision = 'pulled_forward'"
    ).fetchone()
    assert pulled == (1,)
    assert claimed_ids.count(run) == 1, claimed_ids
    attempt = db.execute("SELECT attempt FROM office.runs WHERE id = %s", [run]).fetchone()
    assert attempt == (1,)
