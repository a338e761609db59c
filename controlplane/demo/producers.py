"""The producers: each method is one step of a producer thread (see
:meth:`controlplane.demo.run.Demo.spawn`), taken again and again until the
race stops, and records in the ledger every occurrence it made."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from controlplane import keys
from controlplane.client import Office
from controlplane.cron import TickPlan
from controlplane.daemon.cron import CronLoop
from controlplane.daemon.loop import DatabaseHealth
from controlplane.daemon.metrics import daemon_metrics_for
from controlplane.demo import reads
from controlplane.demo.ledger import Occurrence
from controlplane.demo.race import Race
from controlplane.demo.world import World
from controlplane.event_subscriber import EventSubscriber
from controlplane.models import DispatchRoutineResult, RoutineTrigger, WakeupOutcome


def _must(key: str | None) -> str:
    assert key is not None, "a key builder gave no key"
    return key


class Producers:
    def __init__(self, race: Race, world: World) -> None:
        self.race = race
        self.ledger = race.ledger
        self.w = world

    def reassign(self, office: Office, rng: random.Random) -> None:
        task_id = rng.choice(self.w.hot)
        agent = rng.choice(self.w.agents)
        result = office.assign_task(task_id, agent, actor_id="demo", actor_type="system")
        self.ledger.occurred(
            Occurrence(
                "assignment",
                _must(keys.assignment_key(task_id, agent, result.assignment_generation)),
                "runs",
                agent,
                "task_assigned",
                task_id,
                None if result.outcome is None else result.outcome.value,
            )
        )
        self.ledger.did("reassignments")
        self.race.pause(rng, 0.01, 0.04)

    def redeliver(self, office: Office, rng: random.Random) -> None:
        events = reads.handled_assignments(office, self.w.prefix + "-%")
        subscriber = EventSubscriber(office, consumer="demo-redeliver")
        for event in rng.sample(events, min(3, len(events))):
            handled = subscriber.handle(event)
            if handled.idempotency_key and handled.result is not None:
                self.ledger.occurred(
                    Occurrence(
                        "assignment",
                        handled.idempotency_key,
                        "runs",
                        handled.agent_profile_id,
                        "task_assigned",
                        handled.task_id,
                        handled.result.outcome.value,
                    )
                )
                self.ledger.did("events delivered again")
        self.race.pause(rng, 0.02, 0.06)

    def comment(self, office: Office, rng: random.Random) -> None:
        self.ledger.did("comments")
        number = self.ledger.actions["comments"]
        comment_id = f"{self.w.prefix}-comment-{number}"
        task_id = rng.choice([*self.w.hot, *self.w.blocked])
        agent = rng.choice([*self.w.agents, self.w.busy])
        key = keys.comment_key(comment_id, agent)
        for _ in range(2):  # the webhook delivers it twice
            result = office.enqueue_run(
                agent, "task_comment", {"comment_id": comment_id}, key, task_id
            )
            self.ledger.occurred(
                Occurrence(
                    "comment", key, "runs", agent, "task_comment", task_id, result.outcome.value
                )
            )
        self.race.pause(rng, 0.02, 0.05)

    def late_redeliver(self, office: Office, rng: random.Random) -> None:
        old = [o for o in self.ledger.snapshot() if o.kind == "comment"]
        for occurrence in rng.sample(old, min(2, len(old))):
            assert occurrence.agent is not None
            result = office.enqueue_run(
                occurrence.agent, "task_comment", {"late": True}, occurrence.key, occurrence.task_id
            )
            self.ledger.occurred(
                Occurrence(
                    "comment",
                    occurrence.key,
                    "runs",
                    occurrence.agent,
                    "task_comment",
                    occurrence.task_id,
                    result.outcome.value,
                )
            )
            self.ledger.did("late redeliveries")
        self.race.pause(rng, 0.05, 0.1)

    def heartbeat(self, office: Office, rng: random.Random) -> None:
        office.enqueue_run(
            self.w.busy, "heartbeat", {"beat": time.time()}, keyless_cause="by_design"
        )
        wake = office.request_wakeup(self.w.busy, "manual", "agent_nudge", {"from": "demo"})
        office.dispatch_wakeup(wake.wakeup_request_id)
        self.ledger.did("heartbeats")
        self.race.pause(rng, 0.05, 0.12)

    def fire(self, office: Office, rng: random.Random) -> None:
        routine_id = rng.choice([self.w.heavy_skip, self.w.heavy_coalesce, self.w.light_skip])
        result = office.dispatch_routine(routine_id, "manual")
        self.ledger.did(f"manual fires: {result.status.value}")
        if rng.random() < 0.25:  # somebody finishes the routines' tasks
            tasks = reads.open_routine_tasks(office, self.w.heavy_skip, self.w.heavy_coalesce)
            for task_id in tasks:
                office.move_task(task_id, "COMPLETED")
                self.ledger.did("routine tasks completed")
        self.race.pause(rng, 0.03, 0.08)

    def schedule(self) -> Callable[[Office, random.Random], None]:
        """A scheduler racing the daemon's cron loop: adds a due trigger to a
        lightweight routine now and then, and runs a cron loop of its own."""
        producers = self
        holder: dict[str, CronLoop] = {}

        class RacingCron(CronLoop):
            def step(self, trigger: RoutineTrigger, plan: TickPlan) -> str:
                outcome = super().step(trigger, plan)
                producers.ledger.did(f"ticks {outcome} by the demo's schedulers")
                return outcome

            def report(self, routine_id: str, result: DispatchRoutineResult) -> None:
                super().report(routine_id, result)
                producers._tick_occurred(routine_id, result)

        def body(office: Office, rng: random.Random) -> None:
            loop = holder.get("loop")
            if loop is None or loop.office is not office:
                metrics = daemon_metrics_for()
                loop = RacingCron(
                    office,
                    batch=50,
                    interval=0.05,
                    metrics=metrics,
                    health=DatabaseHealth(metrics),
                    stop=self.race.stop,
                )
                holder["loop"] = loop
            if rng.random() < 0.3:
                routine_id = rng.choice(self.w.light)
                ago = timedelta(seconds=rng.randint(0, 240))
                office.add_routine_trigger(
                    routine_id, "* * * * *", next_run_at=datetime.now(UTC) - ago
                )
                self.ledger.did("triggers added")
            loop.iterate()
            self.race.pause(rng, 0.05, 0.15)

        return body

    def _tick_occurred(self, routine_id: str, result: DispatchRoutineResult) -> None:
        if result.idempotency_key:
            outcome = None if result.wakeup_outcome is None else result.wakeup_outcome.value
            self.ledger.occurred(
                Occurrence(
                    "routine tick",
                    result.idempotency_key,
                    "wakeup",
                    None,
                    "routine_dispatch_cron",
                    None,
                    outcome,
                )
            )

    def refire(self, office: Office, rng: random.Random) -> None:
        """Fires a tick a second time (a redelivered claim): its key is taken."""
        tick_keys = reads.recent_tick_keys(office, f"routine:{self.w.prefix}-%:tick:%")
        for key in rng.sample(tick_keys, min(2, len(tick_keys))):
            _, routine_id, trigger_id, _, unix = key.split(":")
            tick = datetime.fromtimestamp(int(unix), UTC)
            result = office.dispatch_routine(
                routine_id, "cron", trigger_id=trigger_id, claimed_tick=tick
            )
            self._tick_occurred(routine_id, result)
            if result.wakeup_outcome is WakeupOutcome.DEDUPED:
                self.ledger.did("ticks fired twice (deduped)")
        self.race.pause(rng, 0.05, 0.12)

    def complete(
        self, index: int, barrier: threading.Barrier
    ) -> Callable[[Office, random.Random], None]:
        """One of three threads completing blockers and children in parallel;
        thread 0 then reopens and recompletes one of each, and resets."""
        w = self.w

        def sync() -> None:
            barrier.wait(timeout=5)

        def body(office: Office, rng: random.Random) -> None:
            try:
                sync()
                for blockers in w.blocked.values():
                    if index < len(blockers):
                        office.move_task(blockers[index], "COMPLETED")
                for children in w.parents.values():
                    office.move_task(
                        children[index], rng.choice(["COMPLETED", "COMPLETED", "CANCELLED"])
                    )
                sync()
                if index == 0:
                    self._record_waves(office)
                    for target, blockers in w.blocked.items():
                        self._record_blockers(target, blockers)
                    # Reopen and recomplete one blocker (the same key) and one
                    # child (a new wave, unless within the same second).
                    for blockers in w.blocked.values():
                        office.move_task(blockers[0], "IN_PROGRESS")
                        office.move_task(blockers[0], "COMPLETED")
                        self.ledger.did("blockers reopened and recompleted")
                    for target, blockers in w.blocked.items():
                        self._record_blockers(target, blockers)
                    for children in w.parents.values():
                        child = rng.choice(children)
                        office.move_task(child, "IN_PROGRESS")
                        office.move_task(child, "COMPLETED")
                        self.ledger.did("children reopened and recompleted")
                    self._record_waves(office)
                    self.ledger.did("rounds of completions")
                sync()
                # Back to work for the next round (no wake: not terminal).
                for blockers in w.blocked.values():
                    if index < len(blockers):
                        office.move_task(blockers[index], "TODO")
                for children in w.parents.values():
                    office.move_task(children[index], "TODO")
                sync()
            except threading.BrokenBarrierError:
                self.race.stop.wait(0.1)
                if index == 0 and not self.race.stop.is_set():
                    barrier.reset()
            self.race.pause(rng, 0.0, 0.05)

        return body

    def _record_blockers(self, target: str, blockers: list[str]) -> None:
        self.ledger.occurred(
            Occurrence(
                "blockers resolved",
                _must(keys.blockers_resolved_key(target, blockers)),
                "runs",
                self.w.assignee[target],
                "task_blockers_resolved",
                target,
            )
        )

    def _record_waves(self, office: Office) -> None:
        for parent in self.w.parents:
            child_set_key, generation = reads.child_wave(office, parent)
            self.ledger.occurred(
                Occurrence(
                    "children completed",
                    _must(keys.wake_operation_id(parent, child_set_key, generation)),
                    "runs",
                    self.w.assignee[parent],
                    "task_children_completed",
                    parent,
                )
            )
