"""The invariants, read from the database at the end of the race."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.client import Office
from controlplane.demo import reads
from controlplane.demo.governance import BUCKETS, Governance, agents
from controlplane.demo.ledger import Occurrence
from controlplane.demo.workers import DeadWorker
from controlplane.demo.world import World


@dataclass
class Invariant:
    name: str
    held: bool
    detail: str


def check(
    office: Office,
    prefix: str,
    world: World,
    dead: DeadWorker,
    occurrences: list[Occurrence],
    governance: Governance,
) -> list[Invariant]:
    p = prefix + "-%"
    result: list[Invariant] = []

    twice = reads.keys_held_twice(office)
    result.append(
        Invariant(
            "one run per key",
            twice.runs == 0 and twice.wakeups == 0,
            f"{twice.runs} keys with several runs, {twice.wakeups} with several wakeups",
        )
    )

    # The producers' side: each occurrence they made has one run carrying
    # its key, or was coalesced into a queued run of its bucket.
    run_keys = [o.key for o in occurrences if o.queue == "runs"]
    wake_keys = [o.key for o in occurrences if o.queue == "wakeup"]
    by_key = reads.runs_by_key(office, run_keys)
    wake_by_key = reads.wakeups_by_key(office, wake_keys)
    buckets = reads.coalesced_buckets(office, p)
    bad: list[str] = []
    via_coalesce = 0
    for o in occurrences:
        if o.queue == "wakeup":
            if wake_by_key.get(o.key, 0) != 1:
                bad.append(f"{o.key}: {wake_by_key.get(o.key, 0)} wakeups")
            continue
        n = by_key.get(o.key, 0)
        if n == 1:
            continue
        if n == 0 and (o.agent, o.reason, o.task_id) in buckets:
            via_coalesce += 1
            continue
        bad.append(f"{o.key}: {n} runs")
    result.append(
        Invariant(
            "every occurrence has exactly one run (or was coalesced into one)",
            not bad,
            f"{len(occurrences)} occurrences, {via_coalesce} by coalescing"
            + (f"; {len(bad)} wrong, e.g. {bad[0]}" if bad else ""),
        )
    )

    stuck = [
        s.parent_task_id
        for s in office.list_stuck_parents(1000)
        if s.parent_task_id.startswith(prefix + "-")
    ]
    result.append(
        Invariant(
            "no stuck parent after a final sweep",
            not stuck,
            ", ".join(stuck) if stuck else f"{len(world.parents)} parents, none stuck",
        )
    )

    held = reads.held_routine_gates(office, p)
    result.append(
        Invariant(
            "no routine gate held by a terminal task",
            held == 0,
            f"{held} task_created routine runs with a terminal task",
        )
    )

    pending = reads.pending_events(office, p)
    result.append(Invariant("every event handled", pending == 0, f"{pending} pending"))

    d = dead
    recovered = (
        d.recovered
        and d.settled_attempt is not None
        and d.settled_attempt > d.attempt
        and d.settled_by not in (None, "worker-doomed")
        and d.late_finish_accepted is False
    )
    result.append(
        Invariant(
            "a dead worker's claim is recovered, settled by another, its late finish refused",
            recovered,
            f"attempt {d.attempt} → {d.settled_as or 'not settled'} by {d.settled_by} at "
            f"attempt {d.settled_attempt}; late finish_run "
            + {True: "accepted", False: "refused", None: "never made"}[d.late_finish_accepted],
        )
    )
    result.extend(check_governance(office, prefix, governance))
    return result


def check_governance(office: Office, prefix: str, g: Governance) -> list[Invariant]:
    a = agents(prefix)
    decisions = reads.wake_decisions(office, f"{prefix}-gov-%")
    guarded = [d for d in decisions if d.decision == "guarded"]
    depths = sorted({d.chain_depth for d in guarded})
    stopped = [d for d in decisions if d.decision == "budget_exhausted"]
    return [
        Invariant(
            "a ping-pong of two agents is guarded at office.max_chain_depth",
            g.guarded and g.handoffs == 20 and bool(guarded) and depths == [21],
            f"{g.handoffs} handoffs queued, then guarded; {len(guarded)} guarded decisions"
            f" at chain depth {depths}",
        ),
        Invariant(
            "a burst during a cooldown is one held run per bucket",
            len(g.held) == len(BUCKETS) and all(h == "cooldown" for h in g.held),
            f"{g.burst} wakes of {a['cool']} → {len(g.held)} queued runs, held by {g.held}",
        ),
        Invariant(
            "a budget stops a run in progress",
            g.heartbeat_refused and g.requeued and not g.claimed_again and len(stopped) == 1,
            f"heartbeat {'refused' if g.heartbeat_refused else 'accepted'}, run "
            f"{'back in the queue' if g.requeued else 'not requeued'}, "
            f"{'claimed again' if g.claimed_again else 'not claimed again'};"
            f" {len(stopped)} budget_exhausted decision",
        ),
    ]
