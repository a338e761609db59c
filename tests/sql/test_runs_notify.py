"""The wake-up signal for workers (docs/api.md §3, since 0.4.0): NOTIFY
office_runs with the agent id, as the setting office.notify says: edge (the
default: only when the agent has no claimed run and no other claimable queued
run), every (on, the 0.3.0 spelling), off; another value is 22023 naming the
setting. Runs made by enqueue_run, enqueue_runs, dispatch_wakeup and the task
triggers follow it alike."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]
MARK = "-- end --"


@pytest.fixture
def signals(db: Conn, dsn: str) -> Iterator[Callable[[], list[str]]]:
    """``signals()``: the payloads received on office_runs since the last call
    (a marker notification sent last tells when everything before it is in)."""
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    db.execute("SELECT office.upsert_agent('a2', 'w1')")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN office_runs")

        def received() -> list[str]:
            db.execute("SELECT pg_notify('office_runs', %s)", [MARK])
            got: list[str] = []
            for note in listener.notifies(timeout=30):
                if note.payload == MARK:
                    return got
                got.append(note.payload)
            raise AssertionError("the marker never arrived")

        yield received


def enqueue(db: Conn, agent: str, reason: str, **kwargs: Any) -> str:
    row = db.execute(
        "SELECT outcome FROM office.enqueue_run(%s, %s, idempotency_key => %s)",
        [agent, reason, kwargs.get("key")],
    ).fetchone()
    assert row is not None
    return str(row[0])


def claim(db: Conn, agent: str) -> tuple[str, int]:
    row = db.execute("SELECT id, attempt FROM office.claim_run('w', %s)", [agent]).fetchone()
    assert row is not None
    return (row[0], row[1])


def test_edge_signals_only_when_no_worker_is_bound_to_come(
    db: Conn, signals: Callable[[], list[str]]
) -> None:
    assert enqueue(db, "a1", "r1") == "queued"
    assert signals() == ["a1"]
    assert enqueue(db, "a1", "r2") == "queued"  # a1 has a claimable run already
    assert enqueue(db, "a2", "r1") == "queued"
    assert signals() == ["a2"]
    first = claim(db, "a1")
    second_run = db.execute("SELECT id FROM office.runs WHERE reason = 'r2'").fetchone()
    assert second_run is not None
    db.execute("SELECT office.cancel_run(%s, 'not needed')", [second_run[0]])
    assert enqueue(db, "a1", "r3") == "queued"  # a1 holds a claim: its worker comes back
    assert signals() == []
    db.execute("SELECT office.finish_run(%s, %s)", list(first))
    db.execute("SELECT office.finish_run(%s, %s)", list(claim(db, "a1")))
    assert enqueue(db, "a1", "r4") == "queued"  # nothing in flight: signal
    assert signals() == ["a1"]


def test_edge_does_not_count_a_retry_that_is_not_due(
    db: Conn, signals: Callable[[], list[str]]
) -> None:
    enqueue(db, "a1", "r1")
    run_id, attempt = claim(db, "a1")
    db.execute("SELECT office.retry_run(%s, %s, '1 hour')", [run_id, attempt])
    signals()
    assert enqueue(db, "a1", "r2") == "queued"
    assert signals() == ["a1"]


@pytest.mark.parametrize("mode", ["every", "on"])
def test_every_signals_every_queued_run_and_nothing_else(
    db: Conn, signals: Callable[[], list[str]], mode: str
) -> None:
    db.execute(f"SET office.notify = {mode}")
    enqueue(db, "a1", "r1", key="K")
    enqueue(db, "a1", "r1", key="K")  # deduped
    enqueue(db, "a1", "r1")  # coalesced
    enqueue(db, "a1", "r2")
    enqueue(db, "a2", "r1")
    assert signals() == ["a1", "a1", "a2"]


def test_off_never_signals(db: Conn, signals: Callable[[], list[str]]) -> None:
    db.execute("SET office.notify = off")
    enqueue(db, "a1", "r1")
    enqueue(db, "a2", "r1")
    assert signals() == []


@pytest.mark.parametrize("value", ["true", "false", "sometimes"])
def test_another_value_is_22023_naming_the_setting(db: Conn, value: str) -> None:
    db.execute("SELECT office.upsert_agent('a1', 'w1')")
    db.execute("SELECT set_config('office.notify', %s, false)", [value])
    with pytest.raises(psycopg.Error) as info:
        enqueue(db, "a1", "r1")
    assert info.value.sqlstate == "22023" and "office.notify" in str(info.value)
    db.execute("RESET office.notify")
    assert db.execute("SELECT count(*) FROM office.runs").fetchone() == (0,)


def test_a_bulk_call_signals_once_per_agent_under_edge(
    db: Conn, signals: Callable[[], list[str]]
) -> None:
    requests = [{"agent_profile_id": a, "reason": r} for a in ("a1", "a2") for r in ("r1", "r2")]
    db.execute("SELECT count(*) FROM office.enqueue_runs(%s::jsonb)", [json.dumps(requests)])
    assert signals() == ["a1", "a2"]


@pytest.mark.parametrize(("mode", "expected"), [("edge", ["a1"]), ("off", [])])
def test_dispatch_wakeup_follows_the_setting(
    db: Conn, signals: Callable[[], list[str]], mode: str, expected: list[str]
) -> None:
    db.execute("SELECT set_config('office.notify', %s, false)", [mode])
    request = db.execute(
        "SELECT wakeup_request_id FROM office.request_wakeup('a1', 'manual')"
    ).fetchone()
    assert request is not None
    status = db.execute("SELECT status FROM office.dispatch_wakeup(%s)", [request[0]]).fetchone()
    assert status == ("claimed",)
    assert signals() == expected


def test_a_task_trigger_signals_the_assignee(db: Conn, signals: Callable[[], list[str]]) -> None:
    db.execute("SELECT office.create_task('w1', assignee_agent_profile_id => 'a2')")
    assert signals() == ["a2"]
