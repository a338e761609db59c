"""The demo's world: a workspace with agents, a task tree (parents with
children, tasks with two blockers each, hot tasks to reassign), heavy and
lightweight routines, all with ids under one prefix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from controlplane.client import Office


@dataclass
class World:
    prefix: str
    workspace: str
    agents: list[str]
    busy: str  # its worker is offline: wakes pile up and coalesce
    doomed: str  # the agent of the dead worker's run
    assignee: dict[str, str]
    hot: list[str]
    parents: dict[str, list[str]]
    blocked: dict[str, list[str]]
    heavy_skip: str
    heavy_coalesce: str
    light: list[str]
    light_skip: str

    @property
    def served(self) -> list[str]:
        """Agents the worker fleet serves (every one but the busy one)."""
        return [*self.agents, self.doomed]

    @property
    def all_agents(self) -> list[str]:
        return [*self.served, self.busy]


def setup(office: Office, prefix: str) -> World:
    ws = f"{prefix}-ws"
    agents = [f"{prefix}-agent-{i}" for i in range(1, 6)]
    busy, doomed = f"{prefix}-busy", f"{prefix}-agent-k"
    for agent in [*agents, busy, doomed]:
        office.upsert_agent(agent, ws, name=agent.removeprefix(prefix + "-"))
    assignee: dict[str, str] = {}

    def task(name: str, agent: str, parent: str | None = None) -> str:
        task_id = f"{prefix}-{name}"
        office.create_task(
            ws, task_id, title=name, parent_id=parent, assignee_agent_profile_id=agent
        )
        assignee[task_id] = agent
        return task_id

    parents: dict[str, list[str]] = {}
    for n in range(1, 4):
        parent = task(f"parent-{n}", agents[n - 1])
        parents[parent] = [
            task(f"parent-{n}-child-{m}", agents[(n + m) % len(agents)], parent)
            for m in range(1, 4)
        ]
    blocked: dict[str, list[str]] = {}
    for n in range(1, 4):
        target = task(f"blocked-{n}", agents[(n + 1) % len(agents)])
        blockers = [
            task(f"blocker-{n}-{x}", agents[(n + i) % len(agents)]) for i, x in enumerate("ab")
        ]
        for blocker in blockers:
            office.add_blocker(target, blocker)
        blocked[target] = blockers
    hot = [task(f"hot-{n}", agents[n % len(agents)]) for n in range(1, 5)]

    def routine(name: str, template: Mapping[str, Any], agent: str, policy: str, **kw: Any) -> str:
        routine_id = f"{prefix}-{name}"
        office.create_routine(ws, name, template, agent, policy, id=routine_id, **kw)
        return routine_id

    now = datetime.now(UTC)
    heavy_skip = routine(
        "daily-report", {"title": "Daily report", "description": "Summarise"}, agents[0],
        "skip_if_active",
    )  # fmt: skip
    office.add_routine_trigger(heavy_skip, "* * * * *", next_run_at=now - timedelta(minutes=3))
    heavy_coalesce = routine(
        "triage", {"title": "Triage the inbox"}, agents[1], "coalesce_if_active",
        catch_up_policy="skip_missed",
    )  # fmt: skip
    office.add_routine_trigger(
        heavy_coalesce, "*/5 * * * *", next_run_at=now - timedelta(minutes=12)
    )
    light = [
        routine(f"ping-{n}", {}, agents[n % len(agents)], "coalesce_if_active") for n in range(1, 4)
    ]
    for routine_id in light:
        office.add_routine_trigger(routine_id, "* * * * *", next_run_at=now - timedelta(minutes=1))
    light_skip = routine("poke-busy", {}, busy, "skip_if_active")
    return World(
        prefix=prefix,
        workspace=ws,
        agents=agents,
        busy=busy,
        doomed=doomed,
        assignee=assignee,
        hot=hot,
        parents=parents,
        blocked=blocked,
        heavy_skip=heavy_skip,
        heavy_coalesce=heavy_coalesce,
        light=light,
        light_skip=light_skip,
    )
