"""Wakeup requests in SQL (docs/api.md §4; docs/domain.md §1.5, §2.16 lightweight
materialise, §2.18): scenarios 50-54 and 56 of docs/domain.md §5 as outcomes
returned by SQL, plus request/dispatch/fail on their own and bad input."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.harness import scalar
from tests.scenarios.routines import counts, fire, raises, routine, run
from tests.scenarios.tasks import Conn, Row, agent, call


def wakeup(conn: Conn, request_id: str) -> Row:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT * FROM office.wakeup_requests WHERE id = %s", [request_id]
        ).fetchone()
    assert row is not None, f"no wakeup request {request_id}"
    return row


def agent_run(conn: Conn, run_id: str) -> Row:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM office.runs WHERE id = %s", [run_id]).fetchone()
    assert row is not None, f"no run {run_id}"
    return row


def request(
    conn: Conn, source: str = "user", payload: dict[str, Any] | None = None, **args: Any
) -> Row:
    return call(
        conn,
        "request_wakeup",
        agent_profile_id=args.pop("agent_profile_id", "agent-1"),
        source=source,
        payload=json.dumps(payload or {}),
        **args,
    )


def dispatch(conn: Conn, request_id: str) -> Row:
    return call(conn, "dispatch_wakeup", wakeup_request_id=request_id)


def fail(conn: Conn, request_id: str, reason: str = "dispatch failed") -> bool:
    return bool(scalar(conn, "SELECT office.fail_wakeup(%s, %s)", [request_id, reason]))


def inflight(conn: Conn, agent_id: str = "agent-1", reason: str = "task_comment") -> str:
    """A queued run of the agent (keyless, its own reason)."""
    row = call(conn, "enqueue_run", agent_profile_id=agent_id, reason=reason)
    return str(row["run_id"])


@pytest.fixture
def light(db: Conn) -> Conn:
    """agent-1 and a lightweight routine L (policy given per test through UPDATE)."""
    agent(db, "agent-1")
    routine(
        db, "L", template={}, variables={"topic": {"default": "ops"}}, policy="coalesce_if_active"
    )
    return db


# --- scenarios 50-53: lightweight fires ----------------------------------------------------


def test_50_a_lightweight_fire_is_done_and_wakes_the_assignee(light: Conn) -> None:
    result = fire(light, "L")
    assert (result["status"], result["linked_task_id"]) == ("done", "")
    assert result["wakeup_outcome"] == "queued"
    row = run(light, result["routine_run_id"])
    assert row["status"] == "done" and row["completed_at"] is not None
    assert row["linked_task_id"] == "" and row["wakeup_request_id"] == result["wakeup_request_id"]
    assert counts(light, "wakeup_requests") == 1 and counts(light, "tasks") == 0
    request_row = wakeup(light, result["wakeup_request_id"])
    assert request_row["source"] == "routine"
    assert request_row["reason"] == "routine_dispatch_event"
    assert request_row["payload"]["routine_id"] == "L"
    assert request_row["payload"]["variables"] == {"topic": "ops"}
    assert request_row["idempotency_key"].startswith("routine:L:")
    # Dispatched: claimed as a fresh run carrying the payload as its context.
    assert request_row["status"] == "claimed" and request_row["run_id"] == result["run_id"]
    woken = agent_run(light, result["run_id"])
    assert woken["reason"] == "routine_dispatch_event" and woken["status"] == "queued"
    assert woken["context_snapshot"] == request_row["payload"] and woken["payload"] == {}


def test_50_cron_fires_use_the_cron_reason(light: Conn) -> None:
    call(light, "add_routine_trigger", routine_id="L", cron_expression="0 * * * *", id="t1")
    result = fire(light, "L", "cron", trigger_id="t1", claimed_tick="2026-05-10 12:00:00+00")
    assert wakeup(light, result["wakeup_request_id"])["reason"] == "routine_dispatch_cron"


def test_50_a_lightweight_routine_without_assignee_is_done_without_a_wakeup(db: Conn) -> None:
    routine(db, "L", template={}, variables={}, assignee=None)
    result = fire(db, "L")
    assert result["status"] == "done" and result["wakeup_request_id"] is None
    assert counts(db, "wakeup_requests") == 0


def test_50_lightweight_runs_never_gate(light: Conn) -> None:
    light.execute("UPDATE office.routines SET concurrency_policy = 'skip_if_active'")
    statuses = [fire(light, "L")["status"] for _ in range(3)]
    assert statuses == ["done", "done", "done"]
    # The agent-level policy applied instead: one run, the others skipped.
    rows = light.execute("SELECT status FROM office.wakeup_requests ORDER BY requested_at, id")
    assert sorted(r[0] for r in rows.fetchall()) == ["claimed", "skipped", "skipped"]


def test_51_an_already_requested_key_is_success(light: Conn) -> None:
    first = fire(light, "L", "webhook", explicit_key="delivery-1")
    again = fire(light, "L", "webhook", explicit_key="delivery-1")
    assert (again["status"], again["wakeup_outcome"]) == ("done", "deduped")
    assert again["wakeup_request_id"] == first["wakeup_request_id"]
    assert run(light, again["routine_run_id"])["status"] == "done"
    assert counts(light, "wakeup_requests") == 1
    stats = light.execute("SELECT queue, reason, kind, total FROM office.dedup_stats").fetchall()
    assert stats == [("wakeup", "routine_dispatch_event", "durable", 1)]


def test_52_a_wakeup_create_error_fails_the_run_without_raising(light: Conn) -> None:
    light.execute("DELETE FROM office.agent_profiles WHERE id = 'agent-1'")
    result = fire(light, "L")
    assert result["status"] == "failed" and result["wakeup_request_id"] is None
    assert "agent 'agent-1' not found" in result["error_message"]
    row = run(light, result["routine_run_id"])
    assert row["status"] == "failed" and row["error_message"] == result["error_message"]
    assert counts(light, "wakeup_requests") == 0


@pytest.mark.parametrize("status", ["paused", "stopped", "pending_approval"])
def test_53_a_dispatch_failure_fails_the_wakeup_and_the_run_and_commits(
    light: Conn, status: str
) -> None:
    agent(light, "agent-1", status=status)
    notices: list[str] = []
    light.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    result = fire(light, "L")
    assert result["status"] == "failed" and result["wakeup_request_id"] is not None
    assert f"agent 'agent-1' is {status} and does not accept runs" in result["error_message"]
    request_row = wakeup(light, result["wakeup_request_id"])
    assert (request_row["status"], request_row["reason"]) == ("failed", "dispatch failed")
    assert request_row["finished_at"] is not None and request_row["run_id"] is None
    row = run(light, result["routine_run_id"])
    assert row["status"] == "failed" and row["wakeup_request_id"] == result["wakeup_request_id"]
    assert counts(light, "runs") == 0
    assert any(n.startswith("dispatch routine wakeup request") for n in notices), notices


def test_53_the_failure_is_written_in_the_callers_transaction(light: Conn) -> None:
    agent(light, "agent-1", status="paused")
    with light.transaction():
        result = fire(light, "L")
    # Committed with the caller's transaction (autocommit off inside it).
    assert wakeup(light, result["wakeup_request_id"])["status"] == "failed"
    assert run(light, result["routine_run_id"])["status"] == "failed"


# --- scenario 54: fail only while queued ------------------------------------------------------


def test_54_fail_applies_only_while_queued(db: Conn) -> None:
    agent(db, "agent-1")
    queued = request(db, reason="heartbeat")["wakeup_request_id"]
    assert fail(db, queued, "agent gone") is True
    row = wakeup(db, queued)
    assert (row["status"], row["reason"]) == ("failed", "agent gone")
    assert row["finished_at"] is not None
    assert fail(db, queued, "again") is False
    assert wakeup(db, queued)["reason"] == "agent gone"

    claimed = request(db)["wakeup_request_id"]
    assert dispatch(db, claimed)["status"] == "claimed"
    coalesced = request(db, payload={"x": 1})["wakeup_request_id"]
    assert dispatch(db, coalesced)["status"] == "coalesced"
    for request_id in (claimed, coalesced):
        before = wakeup(db, request_id)
        assert fail(db, request_id, "dispatch failed") is False
        assert wakeup(db, request_id) == before


def test_54_a_skipped_request_does_not_fail(db: Conn) -> None:
    agent(db, "agent-1")
    routine(db, "L", template={}, variables={}, policy="skip_if_active")
    inflight(db)
    skipped = request(db, "routine", payload={"routine_id": "L"})["wakeup_request_id"]
    assert dispatch(db, skipped)["status"] == "skipped"
    before = wakeup(db, skipped)
    assert fail(db, skipped, "dispatch failed") is False
    assert wakeup(db, skipped) == before


# --- scenario 56: the dispatcher's policies ------------------------------------------------------


def test_56_coalesce_merges_the_payload_into_the_inflight_run(db: Conn) -> None:
    agent(db, "agent-1")
    target = inflight(db)
    db.execute(
        'UPDATE office.runs SET context_snapshot = \'{"a": 1, "b": {"deep": true}}\' WHERE id = %s',
        [target],
    )
    request_id = request(db, payload={"b": 2, "c": 3})["wakeup_request_id"]
    result = dispatch(db, request_id)
    assert result == {"status": "coalesced", "run_id": target}
    row = wakeup(db, request_id)
    assert row["status"] == "coalesced" and row["run_id"] == target
    assert row["claimed_at"] is not None and row["finished_at"] is not None
    merged = agent_run(db, target)
    assert merged["coalesced_count"] == 2
    assert merged["context_snapshot"] == {"a": 1, "b": 2, "c": 3}


def test_56_coalesce_targets_a_claimed_run_and_the_newest(db: Conn) -> None:
    agent(db, "agent-1")
    older = inflight(db, reason="r1")
    claimed = call(db, "claim_run", worker_id="w")["id"]
    assert claimed == older
    newer = inflight(db, reason="r2")
    assert dispatch(db, request(db)["wakeup_request_id"])["run_id"] == newer
    db.execute("SELECT office.cancel_run(%s, 'gone')", [newer])
    assert dispatch(db, request(db)["wakeup_request_id"])["run_id"] == older
    assert agent_run(db, older)["status"] == "claimed"


def test_56_skip(db: Conn) -> None:
    agent(db, "agent-1")
    routine(db, "L", template={}, variables={}, policy="skip_if_active")
    inflight(db)
    request_id = request(
        db, "routine", payload={"routine_id": "L"}, reason="routine_dispatch_event"
    )["wakeup_request_id"]
    assert dispatch(db, request_id) == {"status": "skipped", "run_id": None}
    row = wakeup(db, request_id)
    assert (row["status"], row["reason"]) == ("skipped", "policy:skip_if_active")
    assert row["finished_at"] is not None and row["run_id"] is None
    assert counts(db, "runs") == 1


@pytest.mark.parametrize("policy", ["always_create", "always_enqueue"])
def test_56_always_create(db: Conn, policy: str) -> None:
    agent(db, "agent-1")
    routine(db, "L", template={}, variables={}, policy="always_create")
    if policy == "always_enqueue":  # the wakeup layer's spelling (a legacy row)
        db.execute("ALTER TABLE office.routines DROP CONSTRAINT routines_concurrency_policy_check")
        db.execute("UPDATE office.routines SET concurrency_policy = 'always_enqueue'")
    target = inflight(db)
    request_id = request(db, "routine", payload={"routine_id": "L"})["wakeup_request_id"]
    result = dispatch(db, request_id)
    assert result["status"] == "claimed" and result["run_id"] != target
    assert counts(db, "runs") == 2


def test_56_other_sources_and_unknown_routines_coalesce(db: Conn) -> None:
    agent(db, "agent-1")
    target = inflight(db)
    for source, payload in (
        ("heartbeat", {}),
        ("routine", {"routine_id": "gone"}),
        ("routine", {}),
    ):
        result = dispatch(db, request(db, source, payload=payload)["wakeup_request_id"])
        assert result == {"status": "coalesced", "run_id": target}
    assert agent_run(db, target)["coalesced_count"] == 4


def test_56_no_inflight_run_creates_a_fresh_one(db: Conn) -> None:
    agent(db, "agent-1")
    # A finished run is not in flight.
    done = inflight(db)
    attempt = call(db, "claim_run")["attempt"]
    assert scalar(db, "SELECT office.finish_run(%s, %s)", [done, attempt])
    request_id = request(db, "heartbeat", payload={"why": "tick"})["wakeup_request_id"]
    result = dispatch(db, request_id)
    assert result["status"] == "claimed"
    fresh = agent_run(db, result["run_id"])
    assert fresh["payload"] == {} and fresh["context_snapshot"] == {"why": "tick"}
    assert fresh["reason"] == "heartbeat"  # no reason: the source
    assert fresh["status"] == "queued" and fresh["idempotency_key"] is None
    row = wakeup(db, request_id)
    assert row["status"] == "claimed" and row["run_id"] == result["run_id"]
    assert row["claimed_at"] is not None and row["finished_at"] is not None
    # Dispatching again is a no-op.
    assert dispatch(db, request_id) == {"status": "noop", "run_id": result["run_id"]}


def test_dispatch_of_a_paused_agent_raises_and_leaves_the_request_queued(db: Conn) -> None:
    agent(db, "agent-1", status="paused")
    request_id = request(db)["wakeup_request_id"]
    with raises("OFA02", "agent 'agent-1' is paused"):
        dispatch(db, request_id)
    assert wakeup(db, request_id)["status"] == "queued"
    agent(db, "agent-1")
    assert dispatch(db, request_id)["status"] == "claimed"


# --- request_wakeup -------------------------------------------------------------------------------


def test_request_wakeup_dedups_on_the_key_durably(db: Conn) -> None:
    agent(db, "agent-1")
    first = request(db, reason="heartbeat", idempotency_key="hb:1")
    assert (first["outcome"], first["dedup_kind"]) == ("queued", None)
    db.execute("UPDATE office.wakeup_requests SET requested_at = now() - interval '30 days'")
    assert fail(db, first["wakeup_request_id"]) is True  # any status holds the key
    again = request(db, reason="heartbeat", idempotency_key="hb:1")
    assert again == {
        "outcome": "deduped",
        "dedup_kind": "durable",
        "wakeup_request_id": first["wakeup_request_id"],
    }
    # Empty key: no key.
    keyless = [request(db, idempotency_key="")["wakeup_request_id"] for _ in range(2)]
    assert len(set(keyless)) == 2
    assert (
        scalar(db, "SELECT count(*) FROM office.wakeup_requests WHERE idempotency_key IS NULL") == 2
    )
    stats = db.execute("SELECT queue, reason, kind, total FROM office.dedup_stats").fetchall()
    assert stats == [("wakeup", "heartbeat", "durable", 1)]


def test_request_wakeup_stores_the_request(db: Conn) -> None:
    agent(db, "agent-1")
    row = wakeup(
        db, request(db, "comment", payload={"c": 1}, reason="task_comment")["wakeup_request_id"]
    )
    assert (row["source"], row["reason"], row["status"], row["coalesced_count"]) == (
        "comment",
        "task_comment",
        "queued",
        1,
    )
    assert row["payload"] == {"c": 1} and row["run_id"] is None and row["finished_at"] is None


@pytest.mark.parametrize(
    ("sqlstate", "args", "message"),
    [
        ("22023", {"source": ""}, "source of the wakeup of agent 'agent-1' must not be empty"),
        ("22023", {"source": None}, "must not be empty"),
        ("22023", {"agent_profile_id": ""}, "agent_profile_id must not be empty"),
        ("OFA01", {"agent_profile_id": "ghost"}, "agent 'ghost' not found"),
        ("22023", {"payload": "[]"}, "payload must be a JSON object"),
        ("22023", {"idempotency_key": "k" * 513}, "more than 512"),
        ("22023", {"payload": None}, "payload must be a JSON object, not NULL"),
        ("22023", {"payload": json.dumps({"x": "x" * 1048576})}, "more than 1 MiB"),
        ("22023", {"reason": "r" * 3000}, "reason 'r.*' is 3000 characters, more than 200"),
        ("22023", {"reason": "r\x01"}, "reason .* contains a control character"),
        ("22023", {"source": "s" * 201}, "source .* is 201 characters"),
        ("22023", {"source": "s\t"}, "(?s)source .* contains a control character"),
    ],
)
def test_request_wakeup_refuses_bad_input(
    db: Conn, sqlstate: str, args: dict[str, Any], message: str
) -> None:
    agent(db, "agent-1")
    base: dict[str, Any] = {"agent_profile_id": "agent-1", "source": "user", "payload": "{}"}
    with raises(sqlstate, message):
        call(db, "request_wakeup", **{**base, **args})
    assert counts(db, "wakeup_requests") == 0


def test_unknown_requests_are_ofr01(db: Conn) -> None:
    with raises("OFR01", "wakeup request 'nope' not found"):
        dispatch(db, "nope")
    with raises("OFR01", "wakeup request 'nope' not found"):
        fail(db, "nope")


# --- NOTIFY office_wakeups ---------------------------------------------------------------


def test_a_new_request_notifies_unless_office_notify_is_off(db: Conn, dsn: str) -> None:
    agent(db, "agent-1")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN office_wakeups")
        db.execute("SET office.notify = off")
        request(db)
        db.execute("RESET office.notify")
        loud = request(db)["wakeup_request_id"]
        note = next(listener.notifies(timeout=30))
    assert (note.channel, note.payload) == ("office_wakeups", loud)


def test_fail_wakeup_keeps_a_reason_of_at_most_64_kib(db: Conn) -> None:
    agent(db, "agent-1")
    request_id = request(db, "user")["wakeup_request_id"]
    with raises("22023", "reason is 65537 bytes, more than 64 KiB"):
        fail(db, request_id, "r" * 65537)
    assert wakeup(db, request_id)["status"] == "queued"
    assert fail(db, request_id, "r" * 65536)
    assert wakeup(db, request_id)["reason"] == "r" * 65536
