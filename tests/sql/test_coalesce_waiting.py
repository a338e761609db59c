"""Coalescing while a run waits (docs/api.md §9, "Coalescing while a run
waits"): a queued run that is not claimable now (a back-off, a not_before, a
cooldown) absorbs a wake of its bucket whatever its age; the merge keeps the
higher priority and the deeper chain, and a human wake makes the run human
and due now, with one pulled_forward decision."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]


@pytest.fixture
def agent(db: Conn) -> str:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    return "a1"


def wake(db: Conn, reason: str = "work", **args: Any) -> tuple[str, str]:
    names = "".join(f", {k} => %({k})s" for k in args)
    row = db.execute(
        f"SELECT outcome, run_id FROM office.enqueue_run(agent_profile_id => 'a1',"
        f" reason => %(reason)s, payload => %(payload)s::jsonb{names})",
        {"reason": reason, "payload": '{"n": 1}', **args},
    ).fetchone()
    assert row is not None
    return (row[0], row[1])


def row_of(db: Conn, run_id: str) -> dict[str, Any]:
    cur = db.execute(
        "SELECT origin, cause_run_id, chain_depth, priority, coalesced_count,"
        " scheduled_retry_at > now() AS waiting, scheduled_retry_at IS NULL AS due_now"
        " FROM office.runs WHERE id = %s",
        [run_id],
    )
    names = [c.name for c in cur.description or []]
    found = cur.fetchone()
    assert found is not None
    return dict(zip(names, found, strict=True))


def parked(db: Conn) -> str:
    """A run of bucket (a1, work) parked on a back-off and requested an hour
    ago: past the coalesce window, not claimable now."""
    outcome, run = wake(db)
    assert outcome == "queued"
    db.execute(
        "UPDATE office.runs SET requested_at = now() - interval '1 hour',"
        " scheduled_retry_at = now() + interval '1 hour' WHERE id = %s",
        [run],
    )
    return run


def decisions(db: Conn) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT decision, run_id, origin, chain_depth FROM office.wake_decisions ORDER BY id"
    ).fetchall()


def test_a_run_on_a_back_off_absorbs_a_wake_whatever_its_age(db: Conn, agent: str) -> None:
    run = parked(db)
    assert wake(db) == ("coalesced", run)
    state = row_of(db, run)
    # coalesced_count counts the requests the run serves: its own and this one.
    assert (state["coalesced_count"], state["waiting"], state["origin"]) == (2, True, "system")
    # A due run an hour old is not a target: a new run.
    db.execute("UPDATE office.runs SET scheduled_retry_at = NULL WHERE id = %s", [run])
    outcome, other = wake(db)
    assert outcome == "queued" and other != run


def test_a_human_wake_pulls_a_parked_run_forward_once(db: Conn, agent: str) -> None:
    run = parked(db)
    assert wake(db, origin="human") == ("coalesced", run)
    state = row_of(db, run)
    assert (state["origin"], state["chain_depth"], state["waiting"]) == ("human", 0, False)
    assert decisions(db) == [("pulled_forward", run, "human", 0)]
    claimed = db.execute("SELECT id FROM office.claim_run('w')").fetchone()
    assert claimed == (run,)


def test_an_agent_wake_deepens_the_chain_and_a_system_one_leaves_the_wait(
    db: Conn, agent: str
) -> None:
    cause_outcome, cause = wake(db, "other", origin="agent")
    assert cause_outcome == "queued" and row_of(db, cause)["chain_depth"] == 1
    run = parked(db)
    assert wake(db, cause_run_id=cause) == ("coalesced", run)
    state = row_of(db, run)
    assert (state["origin"], state["cause_run_id"], state["chain_depth"]) == ("agent", cause, 2)
    assert state["waiting"] is True  # a non-human wake leaves scheduled_retry_at alone
    # ... and so does its own not_before, which a coalesce ignores.
    assert wake(db, not_before="2100-01-01") == ("coalesced", run)
    assert row_of(db, run)["waiting"] is True


def test_the_merge_keeps_the_higher_priority(db: Conn, agent: str) -> None:
    outcome, run = wake(db, priority=-3)
    assert outcome == "queued"
    assert wake(db) == ("coalesced", run) and row_of(db, run)["priority"] == 0
    assert wake(db, priority=7) == ("coalesced", run) and row_of(db, run)["priority"] == 7
    assert wake(db, priority=2) == ("coalesced", run) and row_of(db, run)["priority"] == 7


def test_a_run_held_by_a_cooldown_absorbs_the_wakes_of_its_bucket(db: Conn, agent: str) -> None:
    db.execute("SELECT office.set_wake_policy('agent', 'a1', cooldown => '1 hour')")
    first = db.execute("SELECT run_id FROM office.enqueue_run('a1', 'first')").fetchone()
    assert first is not None
    db.execute("SELECT office.finish_run(id, attempt) FROM office.claim_run('w')")
    outcome, run = wake(db)
    assert outcome == "queued"
    db.execute(
        "UPDATE office.runs SET requested_at = now() - interval '1 hour' WHERE id = %s", [run]
    )
    # Past the window but held by the cooldown: a target.
    assert wake(db) == ("coalesced", run)
    # A human wake takes it out of the cooldown's hold: human and due now.
    assert wake(db, origin="human") == ("coalesced", run)
    assert row_of(db, run)["origin"] == "human"
    assert [d[0] for d in decisions(db)] == ["pulled_forward"]
    claimed = db.execute("SELECT id FROM office.claim_run('w')").fetchone()
    assert claimed == (run,)
