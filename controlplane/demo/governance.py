"""The demo's wake governance scenes (docs/api.md §9), played while the
control plane still runs, on agents of their own that no worker of the
fleet serves:

* ``ping-pong`` - two agents hand one task back and forth, each from the run
  the other's handoff woke (``assign_task`` with the agent as the actor): the
  chain deepens by one per handoff until the handoff past
  ``office.max_chain_depth`` is ``guarded``;
* ``burst`` - an agent in a cooldown gets 16 wakes over two buckets: they
  become one queued run per bucket, each held by the cooldown;
* ``budget`` - an agent's run reports a cost past its budget: its next
  heartbeat is refused and puts the run back, and the agent's runs are not
  claimed again.

The invariants read the outcome from the database (:mod:`controlplane.demo.invariants`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from controlplane.client import Office
from controlplane.models import ProducerOutcome

#: More handoffs than the default office.max_chain_depth (20) allows.
MAX_HANDOFFS = 30
BURST = 16
BUCKETS = ("tick", "mention")
WORKER = "worker-governance"


@dataclass
class Governance:
    handoffs: int = 0  # handoffs queued before the guard
    guarded: bool = False  # the last handoff answered guarded
    burst: int = 0  # wakes made during the cooldown
    held: list[str | None] = field(default_factory=list)  # explain_agent's held_by of those runs
    heartbeat_refused: bool = False
    requeued: bool = False
    claimed_again: bool = False


def agents(prefix: str) -> dict[str, str]:
    return {name: f"{prefix}-gov-{name}" for name in ("ping", "pong", "cool", "spend")}


def play(office: Office, prefix: str, workspace: str) -> Governance:
    g = Governance()
    a = agents(prefix)
    for agent in a.values():
        office.upsert_agent(agent, workspace)
    _ping_pong(office, g, a["ping"], a["pong"], f"{prefix}-gov-handoff", workspace)
    _burst(office, g, a["cool"])
    _budget(office, g, a["spend"])
    return g


def _ping_pong(office: Office, g: Governance, ping: str, pong: str, task: str, ws: str) -> None:
    office.create_task(ws, id=task, title="review, fix, review", workflow_step_id="review")
    office.enqueue_run(ping, "start")
    current = office.claim_run(WORKER, ping)
    assert current is not None
    holder, other = ping, pong
    for _ in range(MAX_HANDOFFS):
        result = office.assign_task(task, other, actor_id=holder, actor_type="agent")
        if result.outcome is ProducerOutcome.GUARDED:
            g.guarded = True
            break
        g.handoffs += 1
        office.finish_run(current.id, current.attempt)
        woken = office.claim_run(WORKER, other)
        assert woken is not None and woken.id == result.run_id, (woken, result)
        current, holder, other = woken, other, holder
    office.finish_run(current.id, current.attempt)


def _burst(office: Office, g: Governance, cool: str) -> None:
    office.set_wake_policy("agent", cool, cooldown=timedelta(hours=1))
    office.enqueue_run(cool, "first")
    first = office.claim_run(WORKER, cool)
    assert first is not None
    office.finish_run(first.id, first.attempt)
    for n in range(BURST):
        office.enqueue_run(cool, BUCKETS[n % len(BUCKETS)], {"n": n})
        g.burst += 1
    g.held = [row.held_by for row in office.explain_agent(cool)]


def _budget(office: Office, g: Governance, spend: str) -> None:
    office.set_wake_policy("agent", spend, budget=Decimal("1.00"), budget_period="day")
    office.enqueue_run(spend, "work")
    office.enqueue_run(spend, "next")
    run = office.claim_run(WORKER, spend)
    assert run is not None
    office.record_run_cost(run.id, run.attempt, Decimal("1.50"), worker_id=WORKER)
    g.heartbeat_refused = not office.heartbeat_run(run.id, run.attempt, worker_id=WORKER)
    after = office.get_run(run.id)
    g.requeued = after is not None and after.status == "queued"
    g.claimed_again = office.claim_run(WORKER, spend) is not None
