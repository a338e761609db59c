"""The demo's reads of the tables, as their owner: one typed function per
named query of :mod:`controlplane.client.queries.demo`, run with
``Office.fetch``.

They check the API from outside (the rows themselves, not what the API
says about them), so they are the demo's own functions, not client methods.
``pattern`` is a LIKE pattern over the demo's ids (its prefix and ``-%``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from controlplane.client import Office
from controlplane.client.queries import demo as q
from controlplane.models import Event


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class RunCounts(_Row):
    runs: int
    finished: int
    failed: int
    open: int


class WakeupCounts(_Row):
    coalesced: int
    skipped: int
    total: int


class FireCounts(_Row):
    coalesced: int
    skipped: int
    materialised: int
    cron: int
    total: int


class KeysHeldTwice(_Row):
    """How many keys more than one run (wakeup request) holds."""

    runs: int
    wakeups: int


class RunState(_Row):
    status: str
    claimed_by: str | None
    attempt: int


def handled_assignments(office: Office, pattern: str) -> list[Event]:
    """The newest handled ``task.assigned`` events of the demo's tasks."""
    rows = office.fetch(q.DEMO_HANDLED_ASSIGNMENTS, {"p": pattern})
    return [Event.model_validate(row) for row in rows]


def open_routine_tasks(office: Office, first: str, second: str) -> list[str]:
    """The tasks the two routines' open (``task_created``) runs created."""
    rows = office.fetch(q.DEMO_OPEN_ROUTINE_TASKS, {"a": first, "b": second})
    return [str(row["linked_task_id"]) for row in rows]


def recent_tick_keys(office: Office, pattern: str) -> list[str]:
    """The keys of the newest wakeup requests matching ``pattern``."""
    rows = office.fetch(q.DEMO_RECENT_TICK_KEYS, {"p": pattern})
    return [str(row["idempotency_key"]) for row in rows]


class WakeDecision(_Row):
    decision: str
    agent_profile_id: str
    chain_depth: int


def wake_decisions(office: Office, pattern: str) -> list[WakeDecision]:
    """The wake decisions of the agents ``pattern`` matches, oldest first."""
    return [
        WakeDecision.model_validate(r) for r in office.fetch(q.DEMO_WAKE_DECISIONS, {"p": pattern})
    ]


def run_counts(office: Office, pattern: str) -> RunCounts:
    return RunCounts.model_validate(office.fetch(q.DEMO_RUN_COUNTS, {"p": pattern})[0])


def wakeup_counts(office: Office, pattern: str) -> WakeupCounts:
    return WakeupCounts.model_validate(office.fetch(q.DEMO_WAKEUP_COUNTS, {"p": pattern})[0])


def fire_counts(office: Office, pattern: str) -> FireCounts:
    return FireCounts.model_validate(office.fetch(q.DEMO_FIRE_COUNTS, {"p": pattern})[0])


def child_wave(office: Office, parent: str) -> tuple[str, str]:
    """The parent's child-set key and generation, of one snapshot."""
    row = office.fetch(q.DEMO_CHILD_WAVE, {"p": parent})[0]
    return str(row["k"]), str(row["g"])


def run_state(office: Office, run_id: str) -> RunState:
    return RunState.model_validate(office.fetch(q.DEMO_RUN_STATE, {"id": run_id})[0])


def pending_events(office: Office, pattern: str) -> int:
    """How many events of the demo's tasks nobody handled yet."""
    return int(office.fetch(q.DEMO_PENDING_EVENTS, {"p": pattern})[0]["n"])


def keys_held_twice(office: Office) -> KeysHeldTwice:
    return KeysHeldTwice.model_validate(office.fetch(q.DEMO_KEYS_HELD_TWICE)[0])


def runs_by_key(office: Office, keys: Sequence[str]) -> dict[str, int]:
    """How many runs hold each of ``keys`` (a key held by none is absent)."""
    rows = office.fetch(q.DEMO_RUNS_BY_KEY, {"k": list(keys)})
    return {str(row["idempotency_key"]): int(row["n"]) for row in rows}


def wakeups_by_key(office: Office, keys: Sequence[str]) -> dict[str, int]:
    """How many wakeup requests hold each of ``keys``."""
    rows = office.fetch(q.DEMO_WAKEUPS_BY_KEY, {"k": list(keys)})
    return {str(row["idempotency_key"]): int(row["n"]) for row in rows}


def coalesced_buckets(office: Office, pattern: str) -> set[tuple[str, str, str | None]]:
    """The (agent, reason, task) of every run that absorbed another."""
    rows = office.fetch(q.DEMO_COALESCED_BUCKETS, {"p": pattern})
    return {(row["agent_profile_id"], row["reason"], row["task_id"]) for row in rows}


def held_routine_gates(office: Office, pattern: str) -> int:
    """How many ``task_created`` routine runs still hold a terminal task."""
    return int(office.fetch(q.DEMO_HELD_ROUTINE_GATES, {"p": pattern})[0]["n"])
