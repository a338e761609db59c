"""The task and event methods of Office (psycopg) and AsyncOffice (asyncpg):
the same calls, the same pydantic results, the typed errors."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from controlplane import keys
from controlplane.aio import AsyncOffice
from controlplane.client import Office
from controlplane.errors import AgentNotFound, InvalidArgument, TaskNotFound
from controlplane.models import (
    DedupKind,
    EventTopic,
    ProducerOutcome,
    TaskState,
    TaskTerminalStatus,
)


@pytest.fixture
def office(dsn: str) -> Iterator[Office]:
    with Office(dsn, registry=CollectorRegistry()) as client:
        yield client


def test_sync_client_drives_a_task_through_its_life(office: Office) -> None:
    office.upsert_agent("A", "w1")
    office.upsert_agent("B", "w1")
    created = office.create_task("w1", id="T", workflow_step_id="s", assignee_agent_profile_id="A")
    assert (created.task_id, created.assignment_generation) == ("T", 1)
    assert created.outcome is ProducerOutcome.QUEUED and created.created
    assigned = office.assign_task("T", "B", actor_id="u1")
    assert (assigned.assignment_generation, assigned.interrupt) == (2, True)
    assert assigned.outcome is ProducerOutcome.QUEUED
    unassigned = office.assign_task("T", None)
    assert unassigned.outcome is None and unassigned.assignment_generation == 3

    office.create_task("w1", id="B1")
    office.add_blocker("T", "B1")
    office.add_blocker("T", "B1")
    with pytest.raises(InvalidArgument):
        office.add_blocker("B1", "T")
    with pytest.raises(InvalidArgument):
        office.add_blocker("B1", "B1")
    office.remove_blocker("T", "B1")

    moved = office.move_task("B1", TaskState.FAILED)
    assert moved.state is TaskState.FAILED and moved.terminal
    assert office.task_terminal_status("B1") is TaskTerminalStatus.FAILED
    assert office.task_terminal_status("nope") is TaskTerminalStatus.MISSING
    assert office.is_task_terminal("B1") is True
    archived = office.archive_task("B1")
    assert archived.archived and office.task_terminal_status("B1") is TaskTerminalStatus.CANCELLED

    task = office.get_task("T")
    assert task is not None and task.assignment_generation == 3
    assert office.get_task("nope") is None

    office.create_task("w1", id="child", parent_id="T", state="COMPLETED")
    assert office.child_set_key("T") == "child:COMPLETED"
    assert len(office.child_generation("T")) == len("2026-01-01 00:00:00")


def test_sync_client_errors_are_typed(office: Office) -> None:
    office.create_task("w1", id="T")
    with pytest.raises(TaskNotFound):
        office.move_task("nope", "TODO")
    with pytest.raises(InvalidArgument):
        office.move_task("T", "DONE")
    with pytest.raises(AgentNotFound):
        office.assign_task("T", "ghost")
    with pytest.raises(InvalidArgument):
        office.create_task("")
    with pytest.raises(TaskNotFound):
        office.is_task_terminal("nope")


def test_sync_client_claims_and_acks_events(office: Office) -> None:
    office.upsert_agent("A", "w1")
    office.create_task("w1", id="T", assignee_agent_profile_id="A")
    office.move_task("T", "IN_PROGRESS")
    claimed = office.claim_events("c1", max_rows=10, visibility=timedelta(seconds=30))
    assert [e.topic for e in claimed] == [EventTopic.TASK_ASSIGNED, EventTopic.TASK_MOVED]
    assert claimed[0].payload["agent_profile_id"] == "A"
    assert claimed[1].payload == {
        "task_id": "T",
        "workspace_id": "w1",
        "from_state": "TODO",
        "to_state": "IN_PROGRESS",
    }
    assert all(e.claimed_by == "c1" and e.deliveries == 1 for e in claimed)
    assert office.claim_events("c2") == []
    assert office.ack_events([e.id for e in claimed]) == 2
    assert office.ack_events([e.id for e in claimed]) == 0


async def test_async_client_gives_the_same_results(dsn: str) -> None:
    async with AsyncOffice(dsn, registry=CollectorRegistry()) as office:
        await office.upsert_agent("A", "w1")
        created = await office.create_task(
            "w1", id="T", workflow_step_id="s", assignee_agent_profile_id="A"
        )
        assert created.assignment_generation == 1 and created.outcome is ProducerOutcome.QUEUED
        again = await office.assign_task("T", "A")
        assert again.assignment_generation == 2 and again.interrupt is False
        assert again.outcome in (ProducerOutcome.COALESCED, ProducerOutcome.QUEUED)
        await office.create_task("w1", id="B")
        await office.add_blocker("T", "B")
        with pytest.raises(InvalidArgument):
            await office.add_blocker("B", "T")
        await office.remove_blocker("T", "B")
        moved = await office.move_task("B", TaskState.COMPLETED)
        assert moved.state is TaskState.COMPLETED
        assert await office.task_terminal_status("B") is TaskTerminalStatus.DONE
        assert await office.is_task_terminal("B") is True
        assert (await office.archive_task("B")).archived
        task = await office.get_task("T")
        assert task is not None and task.assignee_agent_profile_id == "A"
        assert await office.get_task("nope") is None
        assert await office.child_set_key("T") == ""
        assert await office.child_generation("T") == ""
        with pytest.raises(TaskNotFound):
            await office.move_task("nope", "TODO")

        events = await office.claim_events("c1", max_rows=100, visibility=0)
        assert [e.topic for e in events] == ["task.assigned", "task.assigned", "task.moved"]
        assert events[1].payload["assignment_generation"] == 2
        assert events[1].payload["actor"] == {"id": None, "type": "user"}
        assert await office.ack_events([e.id for e in events]) == 3


def test_a_repeated_create_key_is_deduped_not_raised(office: Office) -> None:
    # The run key of a creation is the same bytes as the Python builder's.
    office.upsert_agent("A", "w1")
    office.create_task("w1", id="T", workflow_step_id="s", assignee_agent_profile_id="A")
    result = office.enqueue_run(
        "A", "task_assigned", idempotency_key=keys.assignment_key("T", "A", 1)
    )
    assert result.dedup_kind is DedupKind.WINDOWED
