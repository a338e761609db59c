"""The outbox subscriber, the second producer of task_assigned runs
(controlplane/event_subscriber.py; docs/domain.md §2.12): scenarios 22-26 and 29 of
docs/domain.md §5, redelivery, and failing handlers. Races with assign_task and
between two subscribers are in tests/sql/test_tasks_races.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from controlplane.client import Office
from controlplane.daemon.supervisor import with_lock_timeout
from controlplane.event_subscriber import (
    DETAIL_MISSING_GENERATION,
    DETAIL_STORED_RUNNER,
    EventSubscriber,
    HandlerAction,
)
from controlplane.models import DedupKind, Event, QueueOutcome
from tests.scenarios.tasks import (
    Conn,
    agent,
    assign,
    claim_and_age,
    create,
    events,
    keyless_stats,
    run_keys,
    runs,
)


@pytest.fixture
def office(dsn: str) -> Iterator[Office]:
    with Office(dsn, registry=CollectorRegistry()) as client:
        yield client


@pytest.fixture
def subscriber(office: Office) -> EventSubscriber:
    return EventSubscriber(office, consumer="test-subscriber")


def publish(conn: Conn, payload: dict[str, Any], topic: str = "task.assigned") -> int:
    """An event as a foreign producer (or an older office) might write it."""
    row = conn.execute(
        "INSERT INTO office.events (topic, task_id, payload) VALUES (%s, %s, %s::jsonb)"
        " RETURNING id",
        [topic, payload.get("task_id"), json.dumps(payload)],
    ).fetchone()
    assert row is not None
    return int(row[0])


def event(conn: Conn, event_id: int) -> Event:
    [row] = [e for e in events(conn) if e["id"] == event_id]
    return Event.model_validate(row)


def plain_task(conn: Conn, task_id: str, assignee: str | None, step: str | None = None) -> None:
    """A task inserted with plain SQL: the trigger writes its event, nobody
    enqueues its run (that is the subscriber's job)."""
    conn.execute(
        "INSERT INTO office.tasks (id, workspace_id, workflow_step_id, assignee_agent_profile_id)"
        " VALUES (%s, 'w1', %s, %s)",
        [task_id, step, assignee],
    )


def pending(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM office.events WHERE processed_at IS NULL").fetchone()
    assert row is not None
    return int(row[0])


# --- the producer ------------------------------------------------------------------


def test_a_plain_insert_becomes_a_keyed_run(db: Conn, subscriber: EventSubscriber) -> None:
    agent(db, "A")
    plain_task(db, "T", "A", step="s")
    report = subscriber.run_once()
    assert (report.claimed, report.acked, report.runs_created) == (1, 1, 1)
    [handled] = report.handled
    assert handled.action is HandlerAction.ENQUEUED
    assert handled.idempotency_key == "task_assigned:T:A:1"
    assert handled.result is not None and handled.result.outcome is QueueOutcome.QUEUED
    [run] = runs(db)
    assert run["idempotency_key"] == "task_assigned:T:A:1" and run["task_id"] == "T"
    assert run["payload"]["assignment_generation"] == 1
    assert pending(db) == 0
    assert subscriber.run_once().claimed == 0


def test_s22_assign_task_and_the_subscriber_converge_on_one_run(
    db: Conn, subscriber: EventSubscriber
) -> None:
    agent(db, "A")
    created = create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    claim_and_age(db, created["run_id"])  # so generation 2 is not coalesced into it
    assigned = assign(db, "T", "A")
    assert (assigned["assignment_generation"], assigned["outcome"]) == (2, "queued")
    report = subscriber.run_once()
    assert [h.idempotency_key for h in report.handled] == [
        "task_assigned:T:A:1",
        "task_assigned:T:A:2",
    ]
    results = [h.result for h in report.handled]
    assert [r.outcome if r else None for r in results] == [QueueOutcome.DEDUPED] * 2
    assert [r.run_id if r else None for r in results] == [created["run_id"], assigned["run_id"]]
    assert run_keys(db) == ["task_assigned:T:A:1", "task_assigned:T:A:2"]


def test_s23_redelivery_of_one_generation_creates_one_run(
    db: Conn, office: Office, subscriber: EventSubscriber
) -> None:
    agent(db, "A")
    plain_task(db, "T", "A")  # no step: generation 0
    # A consumer claims the event and crashes before acknowledging it.
    [lost] = office.claim_events("crashed", visibility=0)
    assert lost.payload["assignment_generation"] == 0
    first = subscriber.run_once()
    assert first.handled[0].result is not None
    assert first.handled[0].result.outcome is QueueOutcome.QUEUED
    # The same event delivered once more (e.g. the ack was lost).
    db.execute("UPDATE office.events SET processed_at = NULL, visible_at = NULL")
    second = subscriber.run_once()
    assert second.handled[0].result is not None
    assert second.handled[0].result.outcome is QueueOutcome.DEDUPED
    assert run_keys(db) == ["task_assigned:T:A:0"]
    assert event(db, lost.id).deliveries == 3


def test_s24_a_new_generation_after_a_finished_run_is_a_new_run(
    db: Conn, subscriber: EventSubscriber
) -> None:
    agent(db, "A")
    plain_task(db, "T", "A")
    subscriber.run_once()
    [gen0] = runs(db)
    db.execute(
        "UPDATE office.runs SET status = 'finished', finished_at = now() WHERE id = %s",
        [gen0["id"]],
    )
    db.execute("UPDATE office.tasks SET assignee_agent_profile_id = 'A' WHERE id = 'T'")
    subscriber.run_once()
    assert run_keys(db) == ["task_assigned:T:A:0", "task_assigned:T:A:1"]
    gen1 = runs(db)[1]
    claim_and_age(db, gen1["id"])
    db.execute("UPDATE office.events SET processed_at = NULL, visible_at = NULL")
    report = subscriber.run_once()
    assert [h.result.outcome for h in report.handled if h.result] == [
        QueueOutcome.DEDUPED,
        QueueOutcome.DEDUPED,
    ]
    assert len(runs(db)) == 2


def test_s25_an_event_without_a_generation_is_keyless_unresolved(
    db: Conn, subscriber: EventSubscriber, caplog: pytest.LogCaptureFixture
) -> None:
    agent(db, "A")
    plain_task(db, "T", "A")
    db.execute("DELETE FROM office.events")
    publish(db, {"task_id": "T", "agent_profile_id": "A"})
    publish(db, {"task_id": "T", "agent_profile_id": "A", "assignment_generation": None})
    with caplog.at_level(logging.INFO, logger="controlplane.dedup"):
        report = subscriber.run_once()
    assert [h.action for h in report.handled] == [HandlerAction.ENQUEUED] * 2
    assert [h.idempotency_key for h in report.handled] == [None, None]
    assert [h.detail for h in report.handled] == [DETAIL_MISSING_GENERATION] * 2
    assert all(r["idempotency_key"] is None for r in runs(db))
    assert keyless_stats(db) == {("task_assigned", "unresolved"): 2}
    logged = [r for r in caplog.records if r.getMessage() == "run enqueued with no dedup key"]
    assert len(logged) == 2
    assert all(r.levelno == logging.INFO for r in logged)
    assert all(getattr(r, "detail", None) == "event_missing_generation" for r in logged)


def test_s26_an_event_without_an_agent_falls_back_to_the_stored_assignee_keyless(
    db: Conn, subscriber: EventSubscriber
) -> None:
    agent(db, "A")
    plain_task(db, "T", "A", step="s")
    db.execute("DELETE FROM office.events")
    publish(db, {"task_id": "T", "assignment_generation": 1})
    [handled] = subscriber.run_once().handled
    assert handled.action is HandlerAction.ENQUEUED
    assert (handled.agent_profile_id, handled.idempotency_key) == ("A", None)
    assert handled.detail == DETAIL_STORED_RUNNER
    assert keyless_stats(db) == {("task_assigned", "unresolved"): 1}
    assert run_keys(db) == [None]


def test_s29_the_event_carries_its_generation_no_re_read(
    db: Conn, subscriber: EventSubscriber
) -> None:
    for name in ("A", "B", "C"):
        agent(db, name)
    plain_task(db, "T", None, step="s")
    for name in ("A", "B", "C"):
        db.execute("UPDATE office.tasks SET assignee_agent_profile_id = %s WHERE id = 'T'", [name])
    first = next(e for e in events(db) if e["payload"]["assignment_generation"] == 1)
    # Occurrence 3 has committed; handling occurrence 1 still mints its key.
    handled = subscriber.handle(Event.model_validate(first))
    assert handled.idempotency_key == "task_assigned:T:A:1"
    assert run_keys(db) == ["task_assigned:T:A:1"]


# --- nothing to wake ------------------------------------------------------------------


def test_events_that_wake_nobody_are_acknowledged(db: Conn, subscriber: EventSubscriber) -> None:
    agent(db, "A")
    agent(db, "sleepy", status="paused")
    plain_task(db, "T", "A")
    db.execute("UPDATE office.tasks SET assignee_agent_profile_id = NULL WHERE id = 'T'")
    db.execute(
        "INSERT INTO office.tasks (id, workspace_id, assignee_agent_profile_id, is_office)"
        " VALUES ('foreign', 'w1', 'A', false)"
    )
    plain_task(db, "P", "sleepy")
    plain_task(db, "G", "A")
    db.execute("DELETE FROM office.tasks WHERE id = 'G'")
    db.execute("UPDATE office.tasks SET state = 'IN_PROGRESS' WHERE id = 'T'")
    db.execute(
        "DELETE FROM office.events WHERE payload ->> 'task_id' = 'T'"
        " AND payload ->> 'assignment_generation' = '0'"
    )
    report = subscriber.run_once()
    summary = [(h.task_id, h.action, h.detail) for h in report.handled]
    assert summary == [
        ("T", HandlerAction.IGNORED, "no assignee to wake"),
        ("foreign", HandlerAction.IGNORED, "not an Office task"),
        ("P", HandlerAction.SKIPPED, "agent 'sleepy' is paused and does not accept runs"),
        ("G", HandlerAction.IGNORED, "task not found"),
        ("T", HandlerAction.IGNORED, "no handler for this topic"),
    ]
    assert report.acked == 5 and pending(db) == 0
    assert runs(db) == []


def test_an_event_for_a_deleted_agent_is_skipped(db: Conn, subscriber: EventSubscriber) -> None:
    agent(db, "A")
    plain_task(db, "T", "A")
    db.execute("DELETE FROM office.agent_profiles WHERE id = 'A'")
    [handled] = subscriber.run_once().handled
    assert handled.action is HandlerAction.SKIPPED
    assert handled.idempotency_key == "task_assigned:T:A:0"


# --- failures and redelivery ------------------------------------------------------------


def test_a_failing_handler_leaves_the_event_for_redelivery_then_sets_it_aside(
    db: Conn, office: Office, caplog: pytest.LogCaptureFixture
) -> None:
    agent(db, "A")
    plain_task(db, "T", "A")
    subscriber = EventSubscriber(office, visibility=0, give_up_after=3)

    def broken(event: Event) -> Any:
        raise RuntimeError(f"cannot handle {event.id}")

    subscriber.handlers["task.assigned"] = broken
    with caplog.at_level(logging.ERROR, logger="controlplane.subscriber"):
        for delivery in (1, 2):
            report = subscriber.run_once()
            assert [h.action for h in report.handled] == [HandlerAction.FAILED]
            assert report.acked == 0 and pending(db) == 1
            assert "RuntimeError: cannot handle" in (report.failed[0].detail or "")
            assert event(db, report.handled[0].event_id).deliveries == delivery
        report = subscriber.run_once()
    # Given up: set aside (office.poison), never acknowledged, claimed no more.
    assert report.acked == 0 and report.set_aside == [report.handled[0].event_id]
    assert subscriber.run_once().claimed == 0
    assert any(r.getMessage().startswith("event handler failed") for r in caplog.records)


def test_an_unacknowledged_claim_is_not_redelivered_before_its_visibility(
    db: Conn, office: Office
) -> None:
    agent(db, "A")
    plain_task(db, "T", "A")
    office.claim_events("slow", visibility=3600)
    report = EventSubscriber(office).run_once()
    assert report.claimed == 0
    assert runs(db) == []


def test_a_duplicate_result_is_a_dedup_with_the_holder(
    db: Conn, subscriber: EventSubscriber
) -> None:
    agent(db, "A")
    result = create(db, "T", workflow_step_id="s", assignee_agent_profile_id="A")
    [handled] = subscriber.run_once().handled
    assert handled.result is not None
    assert handled.result.outcome is QueueOutcome.DEDUPED
    assert handled.result.dedup_kind is DedupKind.WINDOWED
    assert handled.result.run_id == result["run_id"]


# --- one event must not hold up the others -------------------------------------------


@pytest.fixture
def impatient(dsn: str) -> Iterator[Office]:
    """A client whose connections give up on a lock after 200 ms, as the
    daemon's do after its --lock-timeout."""
    with Office(with_lock_timeout(dsn, 0.2), registry=CollectorRegistry()) as client:
        yield client


def test_the_daemon_connections_carry_the_lock_timeout_in_both_dsn_forms(dsn: str) -> None:
    url = make_conninfo(dsn, options="-c work_mem=8MB")
    as_url = "postgresql://{user}@{host}:{port}/{dbname}?options=-c%20work_mem%3D8MB".format(
        **conninfo_to_dict(url)
    )
    for conninfo in (url, as_url):
        with psycopg.connect(with_lock_timeout(conninfo, 1.5)) as conn:
            shown = conn.execute(
                "SELECT current_setting('lock_timeout'), current_setting('work_mem')"
            )
            assert shown.fetchone() == ("1500ms", "8MB")


def test_a_served_key_is_deduped_while_a_producer_holds_its_lock(
    db: Conn, dsn: str, impatient: Office
) -> None:
    agent(db, "A")
    plain_task(db, "T", "A", step="s")
    [first] = EventSubscriber(impatient).run_once().handled
    assert first.result is not None and first.result.outcome == QueueOutcome.QUEUED
    again = publish(db, {"task_id": "T", "agent_profile_id": "A", "assignment_generation": 1})
    with psycopg.connect(dsn) as producer:
        # A redelivering producer in an open transaction: it holds the key's lock.
        producer.execute(
            "SELECT office.enqueue_run('A', 'task_assigned', idempotency_key => %s)",
            [first.idempotency_key],
        )
        [handled] = EventSubscriber(impatient).run_once().handled
    assert handled.event_id == again and handled.action == HandlerAction.ENQUEUED
    assert handled.result is not None and handled.result.run_id == first.result.run_id
    assert handled.result.outcome == QueueOutcome.DEDUPED
    assert len(runs(db)) == 1


def test_an_event_whose_lock_stays_held_is_deferred_and_the_others_go_on(
    db: Conn, dsn: str, impatient: Office
) -> None:
    agent(db, "A")
    agent(db, "B", workspace="w2")
    plain_task(db, "T1", "A", step="s")
    db.execute(
        "INSERT INTO office.tasks (id, workspace_id, workflow_step_id, assignee_agent_profile_id)"
        " VALUES ('T2', 'w2', 's', 'B')"
    )
    key = "task_assigned:T1:A:1"
    subscriber = EventSubscriber(impatient, visibility=0, give_up_after=1)
    with psycopg.connect(dsn) as producer:
        # A producer serving T1's key in a transaction it keeps open.
        producer.execute(
            "SELECT office.enqueue_run('A', 'task_assigned', idempotency_key => %s)", [key]
        )
        report = subscriber.run_once()
        by_task = {h.task_id: h for h in report.handled}
        assert by_task["T1"].action == HandlerAction.DEFERRED
        assert "lock" in (by_task["T1"].detail or "")
        assert by_task["T2"].action == HandlerAction.ENQUEUED
        assert report.acked == 1 and report.set_aside == [] and pending(db) == 1
        producer.commit()
    [later] = subscriber.run_once().handled
    assert later.task_id == "T1" and later.action == HandlerAction.ENQUEUED
    assert later.result is not None and later.result.outcome == QueueOutcome.DEDUPED
    assert pending(db) == 0
    assert sorted(r["idempotency_key"] for r in runs(db)) == [key, "task_assigned:T2:B:1"]


def test_the_event_carries_who_caused_it_to_the_run(db: Conn, subscriber: EventSubscriber) -> None:
    """A plain write by an agent during its run: the event records the agent's
    claimed run as the cause when it is written, and the subscriber's run
    carries it, though the cause's claim has ended by delivery."""
    agent(db, "a1")
    agent(db, "a2")
    db.execute("SELECT office.enqueue_run('a1', 'work')")
    cause = db.execute("SELECT id, attempt FROM office.claim_run('w', 'a1')").fetchone()
    assert cause is not None
    db.execute('SET office.actor = \'{"id": "a1", "type": "agent"}\'')
    try:
        plain_task(db, "t1", "a2", "step")
    finally:
        db.execute("RESET office.actor")
    db.execute("SELECT office.finish_run(%s, %s)", cause)
    [handled] = subscriber.run_once().handled
    assert handled.action is HandlerAction.ENQUEUED and handled.result is not None
    row = db.execute(
        "SELECT origin, cause_run_id, chain_depth FROM office.runs WHERE id = %s",
        [handled.result.run_id],
    ).fetchone()
    assert row == ("agent", cause[0], 1)
