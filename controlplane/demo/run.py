"""``officectl demo`` (``make demo``): racing producers against the control
plane, then the database's own account of what it decided, and the
invariants checked from the database.

Setup: a workspace with agents, a task tree (parents with children, tasks
with two blockers each, hot tasks to reassign), heavy and lightweight
routines. Then the control plane starts in process
(:class:`controlplane.daemon.Daemon`: subscriber, wakeups, cron, sweep,
recovery) and for ``seconds`` these race, each thread on its own connection:

* ``reassign`` - assign_task of hot tasks to agent after agent (each
  assignment an occurrence, delivered again by the event subscriber);
* ``redeliver`` - handles already acknowledged ``task.assigned`` events a
  second time (a consumer that lost its acknowledgement);
* ``comment`` - comment wakes (``task_comment:<comment>:<agent>``) delivered
  twice at once; ``late-redeliver`` delivers old ones again after their
  dedup window (``office.idempotency_window`` of 1 ms on its connection):
  the durable index stops them;
* ``complete-1..3`` - complete the blockers of blocked tasks and the children
  of parents in parallel, reopen and recomplete one of each, reset, again;
* ``schedule-1..2`` - add cron triggers already due to lightweight routines
  and run cron loops of their own against the daemon's (one winner a tick);
  ``refire`` fires claimed ticks a second time;
* ``fire`` - manual fires of heavy routines (skip_if_active,
  coalesce_if_active) and of a lightweight skip_if_active routine, and now and
  then completes the routines' tasks;
* ``heartbeat`` - keyless wakes of an agent whose worker is offline (they
  coalesce);
* ``worker-<agent>`` - the worker fleet: a :class:`controlplane.worker.Worker`
  per agent served, whose handler works a few milliseconds and finishes most
  runs, retries some (``Retry``) and fails some (an exception); before the
  race, one more ``Worker`` claims a run and freezes (its handler hangs, it
  sends no heartbeat): the daemon's recover_stale_runs returns the claim to
  the queue, the fleet settles it, and when the frozen worker comes back its
  late finish is refused (fenced by the attempt).

At the end: the outbox drained, a final sweep, then the report - occurrences,
runs created, deduped (windowed / durable), coalesced, skipped by policy,
from ``office.dedup_stats`` and the tables - and the invariants: one run per
key; from the producers' side, every occurrence has exactly one run carrying
its key or was coalesced into one; no stuck parent after the final sweep; no
routine gate held by a terminal task; every event handled; the dead worker's
claim recovered and its late finish refused.
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry
from psycopg_pool import ConnectionPool
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from controlplane import keys
from controlplane.client import Office
from controlplane.client import queries as q
from controlplane.client.queries import Query
from controlplane.cron import TickPlan
from controlplane.daemon import Daemon, DaemonConfig
from controlplane.daemon.cron import CronLoop
from controlplane.daemon.loop import DatabaseHealth
from controlplane.daemon.metrics import daemon_metrics_for
from controlplane.event_subscriber import EventSubscriber
from controlplane.models import DispatchRoutineResult, Event, RoutineTrigger, Run, WakeupOutcome
from controlplane.worker import Retry, Worker

__all__ = ["DemoReport", "Invariant", "run_demo"]

log = logging.getLogger("controlplane.demo")

#: Claims older than this are stale in the demo (the dead worker's, soon).
STALE_AFTER = 1.5


# --- the producers' ledger -------------------------------------------------------------


@dataclass
class Occurrence:
    """Something that happened once and must wake an agent once: its key,
    where the wake goes, and what the first delivery the demo saw did."""

    kind: str
    key: str
    queue: str  # runs | wakeup
    agent: str | None
    reason: str
    task_id: str | None
    outcome: str | None = None  # None: a trigger produced it (outcome unseen)
    deliveries: int = 1


class Ledger:
    """What the producers did, shared by their threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.occurrences: dict[str, Occurrence] = {}
        self.actions: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.error_samples: list[str] = []

    def occurred(self, occurrence: Occurrence) -> None:
        with self._lock:
            known = self.occurrences.get(occurrence.key)
            if known is None:
                self.occurrences[occurrence.key] = occurrence
            else:
                known.deliveries += 1
                if known.outcome is None:
                    known.outcome = occurrence.outcome
            self.actions["deliveries"] += 1

    def did(self, action: str, n: int = 1) -> None:
        with self._lock:
            self.actions[action] += n

    def failed(self, where: str, exc: BaseException) -> None:
        with self._lock:
            self.errors[f"{where}: {type(exc).__name__}"] += 1
            if len(self.error_samples) < 10:
                self.error_samples.append(f"{where}: {type(exc).__name__}: {exc}")

    def snapshot(self) -> list[Occurrence]:
        with self._lock:
            return list(self.occurrences.values())


def _must(key: str | None) -> str:
    assert key is not None, "a key builder gave no key"
    return key


# --- the world ---------------------------------------------------------------------------


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


def _setup(office: Office, prefix: str) -> World:
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


# --- the dead worker -----------------------------------------------------------------------


@dataclass
class DeadWorker:
    run_id: str = ""
    attempt: int = 0
    recovered: bool = False
    # Who settled the recovered run: the fleet finishes most runs but fails
    # (or retries) some, and any report by another worker counts.
    settled_by: str | None = None
    settled_attempt: int | None = None
    settled_as: str | None = None
    late_finish_accepted: bool | None = None
    claimed: threading.Event = field(default_factory=threading.Event)
    revive: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


# --- connections ------------------------------------------------------------------------------


@contextmanager
def _office(url: str, options: str | None = None) -> Iterator[Office]:
    """An Office on a one-connection pool of its own (one producer thread)."""
    kwargs: dict[str, Any] = {"autocommit": True, "application_name": "officectl demo"}
    if options:
        kwargs["options"] = options
    pool: ConnectionPool[Any] = ConnectionPool(
        url, min_size=1, max_size=1, kwargs=kwargs, open=True, num_workers=1, timeout=30
    )
    try:
        yield Office(pool=pool)
    finally:
        pool.close()


# --- the report -----------------------------------------------------------------------------


@dataclass
class Invariant:
    name: str
    held: bool
    detail: str


@dataclass
class DemoReport:
    ok: bool
    prefix: str
    seed: int
    seconds: float
    counts: dict[str, int]
    suppressions: list[dict[str, Any]]
    invariants: list[Invariant]
    producers: dict[str, int]
    errors: dict[str, int]
    error_samples: list[str]
    #: Occurrences by kind (assignment, comment, blockers resolved, ...).
    occurrences: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        document = asdict(self)
        document["invariants"] = [asdict(i) for i in self.invariants]
        return document


# --- the demo --------------------------------------------------------------------------------


class Demo:
    def __init__(self, url: str, seconds: float, seed: int, console: Console, quiet: bool) -> None:
        self.url = url
        self.seconds = seconds
        self.seed = seed
        self.console = console
        self.quiet = quiet
        self.prefix = f"demo-{secrets.token_hex(3)}"
        self.ledger = Ledger()
        self.stop = threading.Event()
        #: The worker fleet stays on duty after the race, until the demo settled.
        self.fleet_stop = threading.Event()
        self.fleet: list[tuple[Worker, threading.Thread]] = []
        #: The fleet's outcomes (office_worker_runs_total), apart from the
        #: frozen worker's.
        self.fleet_registry = CollectorRegistry()
        self.dead = DeadWorker()
        self.threads: list[threading.Thread] = []
        self.world: World | None = None
        self.baseline: dict[tuple[str, str, str], int] = {}

    # --- helpers -------------------------------------------------------------

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}:{name}")

    def spawn(
        self, name: str, body: Callable[[Office, random.Random], None], options: str | None = None
    ) -> None:
        """A producer thread: ``body`` repeatedly until the race ends; a
        failed call is counted and the producer goes on."""

        def main() -> None:
            rng = self.rng(name)
            try:
                with _office(self.url, options) as office:
                    while not self.stop.is_set():
                        try:
                            body(office, rng)
                        except Exception as exc:
                            self.ledger.failed(name, exc)
                            self.stop.wait(0.05)
            except Exception as exc:  # the connection itself
                self.ledger.failed(name, exc)

        thread = threading.Thread(target=main, name=f"demo-{name}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def start_worker(
        self,
        name: str,
        agent: str,
        handler: Callable[[Run], object],
        *,
        heartbeat: float,
        registry: CollectorRegistry,
    ) -> tuple[Worker, threading.Thread]:
        """A :class:`Worker` for one agent on a pool of its own, in a thread
        (no signal handlers: the demo stops it)."""
        pool: ConnectionPool[Any] = ConnectionPool(
            self.url,
            min_size=1,
            max_size=2,
            kwargs={"autocommit": True, "application_name": f"officectl demo {name}"},
            open=True,
            timeout=30,
        )
        worker = Worker(
            Office(pool=pool, registry=registry),
            handler,
            agent_profile_id=agent,
            worker_id=name,
            heartbeat=heartbeat,
            poll=0.05,
            grace=30,
            registry=registry,
        )

        def main() -> None:
            try:
                worker.run()
            except Exception as exc:
                self.ledger.failed(name, exc)
            finally:
                pool.close()

        thread = threading.Thread(target=main, name=f"demo-{name}", daemon=True)
        thread.start()
        return worker, thread

    def pause(self, rng: random.Random, low: float, high: float) -> None:
        self.stop.wait(rng.uniform(low, high))

    @property
    def w(self) -> World:
        assert self.world is not None
        return self.world

    # --- producers ----------------------------------------------------------------

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
        self.pause(rng, 0.01, 0.04)

    def redeliver(self, office: Office, rng: random.Random) -> None:
        rows = office.fetch(q.DEMO_HANDLED_ASSIGNMENTS, {"p": self.w.prefix + "-%"})
        subscriber = EventSubscriber(office, consumer="demo-redeliver")
        for row in rng.sample(rows, min(3, len(rows))):
            handled = subscriber.handle(Event.model_validate(row))
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
        self.pause(rng, 0.02, 0.06)

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
        self.pause(rng, 0.02, 0.05)

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
        self.pause(rng, 0.05, 0.1)

    def heartbeat(self, office: Office, rng: random.Random) -> None:
        office.enqueue_run(
            self.w.busy, "heartbeat", {"beat": time.time()}, keyless_cause="by_design"
        )
        wake = office.request_wakeup(self.w.busy, "manual", "agent_nudge", {"from": "demo"})
        office.dispatch_wakeup(wake.wakeup_request_id)
        self.ledger.did("heartbeats")
        self.pause(rng, 0.05, 0.12)

    def fire(self, office: Office, rng: random.Random) -> None:
        routine_id = rng.choice([self.w.heavy_skip, self.w.heavy_coalesce, self.w.light_skip])
        result = office.dispatch_routine(routine_id, "manual")
        self.ledger.did(f"manual fires: {result.status.value}")
        if rng.random() < 0.25:  # somebody finishes the routines' tasks
            rows = office.fetch(
                q.DEMO_OPEN_ROUTINE_TASKS, {"a": self.w.heavy_skip, "b": self.w.heavy_coalesce}
            )
            for row in rows:
                office.move_task(row["linked_task_id"], "COMPLETED")
                self.ledger.did("routine tasks completed")
        self.pause(rng, 0.03, 0.08)

    def schedule(self, name: str) -> Callable[[Office, random.Random], None]:
        """A scheduler racing the daemon's cron loop: adds a due trigger to a
        lightweight routine now and then, and runs a cron loop of its own."""
        demo = self
        holder: dict[str, CronLoop] = {}

        class RacingCron(CronLoop):
            def step(self, trigger: RoutineTrigger, plan: TickPlan) -> str:
                outcome = super().step(trigger, plan)
                demo.ledger.did(f"ticks {outcome} by the demo's schedulers")
                return outcome

            def report(self, routine_id: str, result: DispatchRoutineResult) -> None:
                super().report(routine_id, result)
                demo._tick_occurred(routine_id, result)

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
                    stop=self.stop,
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
            self.pause(rng, 0.05, 0.15)

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
        rows = office.fetch(q.DEMO_RECENT_TICK_KEYS, {"p": f"routine:{self.w.prefix}-%:tick:%"})
        for row in rng.sample(rows, min(2, len(rows))):
            key = row["idempotency_key"]
            _, routine_id, trigger_id, _, unix = key.split(":")
            tick = datetime.fromtimestamp(int(unix), UTC)
            result = office.dispatch_routine(
                routine_id, "cron", trigger_id=trigger_id, claimed_tick=tick
            )
            self._tick_occurred(routine_id, result)
            if result.wakeup_outcome is WakeupOutcome.DEDUPED:
                self.ledger.did("ticks fired twice (deduped)")
        self.pause(rng, 0.05, 0.12)

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
                self.stop.wait(0.1)
                if index == 0 and not self.stop.is_set():
                    barrier.reset()
            self.pause(rng, 0.0, 0.05)

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
            row = office.fetch(q.DEMO_CHILD_WAVE, {"p": parent})[0]
            self.ledger.occurred(
                Occurrence(
                    "children completed",
                    _must(keys.wake_operation_id(parent, row["k"], row["g"])),
                    "runs",
                    self.w.assignee[parent],
                    "task_children_completed",
                    parent,
                )
            )

    def handler(self, name: str) -> Callable[[Run], None]:
        """A fleet worker's agent: a few milliseconds of work, then it
        finishes the run (most often), asks for a retry, or gives up."""
        rng = self.rng(name)

        def handle(run: Run) -> None:
            self.fleet_stop.wait(rng.uniform(0.002, 0.02))  # the work
            roll = rng.random()
            if roll < 0.05:
                raise Retry(0.05)
            if roll < 0.1:
                raise RuntimeError("the agent gave up")

        return handle

    def start_fleet(self) -> None:
        for agent in self.w.served:
            name = f"worker-{agent.removeprefix(self.prefix + '-')}"
            self.fleet.append(
                self.start_worker(
                    name, agent, self.handler(name), heartbeat=0.3, registry=self.fleet_registry
                )
            )

    def stop_fleet(self) -> None:
        """Stop the fleet; its outcomes go into the ledger."""
        for worker, _ in self.fleet:
            worker.stop()
        for _, thread in self.fleet:
            thread.join(60)
        for outcome, action in (
            ("finished", "runs finished"),
            ("retried", "runs retried"),
            ("failed", "runs failed"),
            ("lost", "stale reports refused"),
        ):
            total = self.fleet_registry.get_sample_value(
                "office_worker_runs_total", {"outcome": outcome}
            )
            if total:
                self.ledger.did(action, int(total))
        self.fleet = []

    def kill_a_worker(self, office: Office) -> tuple[Worker, threading.Thread, CollectorRegistry]:
        """A worker claims a run and freezes: its handler hangs and, with a
        heartbeat interval of an hour, it renews nothing."""
        key = keys.comment_key(f"{self.w.prefix}-last-words", self.w.doomed)
        office.enqueue_run(self.w.doomed, "task_comment", {"last": True}, key)
        self.ledger.occurred(
            Occurrence("comment", key, "runs", self.w.doomed, "task_comment", None, "queued")
        )

        def frozen(run: Run) -> None:
            self.dead.run_id, self.dead.attempt = run.id, run.attempt
            self.dead.claimed.set()
            self.dead.revive.wait(max(60.0, self.seconds * 4))

        registry = CollectorRegistry()
        worker, thread = self.start_worker(
            "worker-doomed", self.w.doomed, frozen, heartbeat=3600, registry=registry
        )
        assert self.dead.claimed.wait(30), "the doomed worker found nothing to claim"
        return worker, thread, registry

    def ghost(self, doomed: tuple[Worker, threading.Thread, CollectorRegistry]) -> None:
        """The frozen worker comes back once its run was settled (finished or
        failed) by another worker: its handler returns, and the finish it
        writes is refused."""
        worker, thread, registry = doomed

        def main() -> None:
            try:
                with _office(self.url) as office:
                    deadline = time.monotonic() + max(30.0, self.seconds * 3)
                    while time.monotonic() < deadline:
                        row = office.fetch(q.DEMO_RUN_STATE, {"id": self.dead.run_id})[0]
                        if row["attempt"] > self.dead.attempt:
                            self.dead.recovered = True
                        if row["status"] in ("finished", "failed"):
                            self.dead.settled_by = row["claimed_by"]
                            self.dead.settled_attempt = row["attempt"]
                            self.dead.settled_as = row["status"]
                            break
                        time.sleep(0.05)
                worker.stop()  # no more claims; its run in flight gets the grace period
                self.dead.revive.set()
                thread.join(60)
                written = sum(
                    registry.get_sample_value("office_worker_runs_total", {"outcome": o}) or 0
                    for o in ("finished", "failed", "retried")
                )
                refused = registry.get_sample_value("office_worker_runs_total", {"outcome": "lost"})
                self.dead.late_finish_accepted = bool(written) or not refused
            except Exception as exc:
                self.ledger.failed("dead worker", exc)
            finally:
                self.dead.done.set()

        threading.Thread(target=main, name="demo-dead-worker", daemon=True).start()

    # --- the run ---------------------------------------------------------------------

    def run(self) -> DemoReport:
        with _office(self.url) as office:
            version = office.schema_version()
            self.world = _setup(office, self.prefix)
            self.baseline = self._dedup_stats(office)
            doomed = self.kill_a_worker(office)
        if not self.quiet:
            self.console.print(
                f"[bold]office {version}[/bold]: workspace [cyan]{self.w.workspace}[/cyan], "
                f"{len(self.w.all_agents)} agents, {len(self.w.assignee)} tasks, "
                f"{2 + len(self.w.light) + 1} routines; "
                f"racing for {self.seconds:g} s (seed {self.seed})"
            )
        daemon = Daemon(
            DaemonConfig(
                dsn=self.url,
                consumer=f"{self.prefix}-daemon",
                poll_interval=0.05,
                sweep_interval=0.5,
                recover_interval=0.2,
                stale_after=STALE_AFTER,
                stats_interval=0.5,
                max_backoff=1.0,
                disabled=frozenset({"prune"}),
            )
        )
        daemon.start()
        try:
            self.race(doomed)
            if not self.quiet:
                self.console.print(
                    "[dim]letting the control plane catch up, then a final sweep…[/dim]"
                )
            self.settle(daemon)
        finally:
            self.stop.set()
            self.fleet_stop.set()
            self.dead.revive.set()
            self.stop_fleet()
            daemon.stop()
            daemon.join(30)
        with _office(self.url) as office:
            return self.report(office)

    def race(self, doomed: tuple[Worker, threading.Thread, CollectorRegistry]) -> None:
        barrier = threading.Barrier(3)
        self.spawn("reassign", self.reassign)
        self.spawn("redeliver", self.redeliver)
        self.spawn("comment", self.comment)
        self.spawn(
            "late-redeliver", self.late_redeliver, options="-c office.idempotency_window=1ms"
        )
        self.spawn("heartbeat", self.heartbeat)
        self.spawn("fire", self.fire)
        self.spawn("refire", self.refire)
        for i in range(1, 3):
            self.spawn(f"schedule-{i}", self.schedule(f"schedule-{i}"))
        for i in range(3):
            self.spawn(f"complete-{i + 1}", self.complete(i, barrier))
        self.start_fleet()
        self.ghost(doomed)

        started = time.monotonic()
        progress = Progress(
            TextColumn("[bold]racing[/bold]"),
            BarColumn(),
            TextColumn("{task.description}"),
            TimeRemainingColumn(),
            console=self.console,
            disable=self.quiet,
            transient=False,
        )
        with progress, _office(self.url) as office:
            bar = progress.add_task("", total=self.seconds)
            while True:
                elapsed = time.monotonic() - started
                if elapsed >= self.seconds:
                    break
                progress.update(bar, completed=elapsed, description=self._live_counts(office))
                time.sleep(min(0.5, self.seconds - elapsed))
            self.stop.set()
            barrier.abort()
            for thread in self.threads:
                thread.join(30)
            progress.update(bar, completed=self.seconds, description=self._live_counts(office))

    def _live_counts(self, office: Office) -> str:
        try:
            row = office.fetch(q.DEMO_RUN_COUNTS, {"p": self.prefix + "-%"})[0]
            stats = self._delta(self._dedup_stats(office))
        except psycopg.Error:
            return ""
        deduped = sum(v for (_, _, kind), v in stats.items() if kind in ("windowed", "durable"))
        coalesced = sum(v for (_, _, kind), v in stats.items() if kind == "coalesced")
        return (
            f"{self.ledger.actions['deliveries']} deliveries · {row['runs']} runs "
            f"({row['finished']} finished) · {deduped} deduped · {coalesced} coalesced"
        )

    def settle(self, daemon: Daemon) -> None:
        """Let the control plane catch up, then a final sweep."""
        with _office(self.url) as office:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                pending = office.fetch(q.DEMO_PENDING_EVENTS, {"p": self.prefix + "-%"})[0]["n"]
                if pending == 0 and self.dead.done.is_set():
                    break
                time.sleep(0.05)
            self.fleet_stop.set()
            self.stop_fleet()
            daemon.stop()
            daemon.join(30)
            for _ in range(100):  # the final sweep: until nothing is left to deliver
                if not office.sweep_stuck_parents(100):
                    break
        self.dead.done.wait(5)

    # --- the report -----------------------------------------------------------------------

    @staticmethod
    def _dedup_stats(office: Office) -> dict[tuple[str, str, str], int]:
        return {(r.queue, r.reason, r.kind): r.total for r in office.dedup_stats()}

    def _delta(self, now: dict[tuple[str, str, str], int]) -> dict[tuple[str, str, str], int]:
        delta = {k: v - self.baseline.get(k, 0) for k, v in now.items()}
        return {k: v for k, v in delta.items() if v > 0}

    def report(self, office: Office) -> DemoReport:
        p = self.prefix + "-%"

        def one(query: Query) -> dict[str, Any]:
            return office.fetch(query, {"p": p})[0]

        stats = self._delta(self._dedup_stats(office))
        occurrences = self.ledger.snapshot()
        finished = one(q.DEMO_RUN_COUNTS)
        runs = finished["runs"]
        wakeups = one(q.DEMO_WAKEUP_COUNTS)
        fires = one(q.DEMO_FIRE_COUNTS)
        windowed = sum(v for (_, _, kind), v in stats.items() if kind == "windowed")
        durable = sum(v for (_, _, kind), v in stats.items() if kind == "durable")
        coalesced_runs = sum(v for (_, _, kind), v in stats.items() if kind == "coalesced")
        counts = {
            "occurrences": len(occurrences),
            "deliveries": self.ledger.actions["deliveries"],
            "runs_created": runs,
            "runs_finished": finished["finished"],
            "runs_failed": finished["failed"],
            "runs_open": finished["open"],
            "deduped_windowed": windowed,
            "deduped_durable": durable,
            "coalesced_runs": coalesced_runs,
            "coalesced_wakeups": wakeups["coalesced"],
            "coalesced_routine_fires": fires["coalesced"],
            "coalesced": coalesced_runs + wakeups["coalesced"] + fires["coalesced"],
            "skipped_routine_fires": fires["skipped"],
            "skipped_wakeups": wakeups["skipped"],
            "skipped_by_policy": fires["skipped"] + wakeups["skipped"],
            "routine_fires": fires["total"],
            "routine_fires_cron": fires["cron"],
            "wakeup_requests": wakeups["total"],
        }
        suppressions = [
            {"queue": q, "reason": r, "kind": k, "total": v}
            for (q, r, k), v in sorted(stats.items())
        ]
        invariants = self.check(office, occurrences)
        errors = dict(self.ledger.errors)
        return DemoReport(
            ok=all(i.held for i in invariants),
            prefix=self.prefix,
            seed=self.seed,
            seconds=self.seconds,
            counts=counts,
            suppressions=suppressions,
            invariants=invariants,
            producers=dict(sorted(self.ledger.actions.items())),
            errors=errors,
            error_samples=list(self.ledger.error_samples),
            occurrences=dict(Counter(o.kind for o in occurrences).most_common()),
        )

    def check(self, office: Office, occurrences: list[Occurrence]) -> list[Invariant]:
        p = self.prefix + "-%"
        result: list[Invariant] = []

        twice = office.fetch(q.DEMO_KEYS_HELD_TWICE)[0]
        result.append(
            Invariant(
                "one run per key",
                twice["runs"] == 0 and twice["wakeups"] == 0,
                f"{twice['runs']} keys with several runs, {twice['wakeups']} with several wakeups",
            )
        )

        # The producers' side: each occurrence they made has one run carrying
        # its key, or was coalesced into a queued run of its bucket.
        run_keys = [o.key for o in occurrences if o.queue == "runs"]
        wake_keys = [o.key for o in occurrences if o.queue == "wakeup"]
        by_key = {
            r["idempotency_key"]: int(r["n"])
            for r in office.fetch(q.DEMO_RUNS_BY_KEY, {"k": run_keys})
        }
        wake_by_key = {
            r["idempotency_key"]: int(r["n"])
            for r in office.fetch(q.DEMO_WAKEUPS_BY_KEY, {"k": wake_keys})
        }
        buckets = {
            (r["agent_profile_id"], r["reason"], r["task_id"])
            for r in office.fetch(q.DEMO_COALESCED_BUCKETS, {"p": p})
        }
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
            if s.parent_task_id.startswith(self.prefix + "-")
        ]
        result.append(
            Invariant(
                "no stuck parent after a final sweep",
                not stuck,
                ", ".join(stuck) if stuck else f"{len(self.w.parents)} parents, none stuck",
            )
        )

        held = office.fetch(q.DEMO_HELD_ROUTINE_GATES, {"p": p})[0]["n"]
        result.append(
            Invariant(
                "no routine gate held by a terminal task",
                held == 0,
                f"{held} task_created routine runs with a terminal task",
            )
        )

        pending = office.fetch(q.DEMO_PENDING_EVENTS, {"p": p})[0]["n"]
        result.append(Invariant("every event handled", pending == 0, f"{pending} pending"))

        d = self.dead
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
        return result


# --- output ------------------------------------------------------------------------------------


def _print_report(console: Console, report: DemoReport) -> None:
    c = report.counts
    table = Table(title="What the database decided", title_justify="left")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_column("detail")
    table.add_row(
        "occurrences",
        str(c["occurrences"]),
        ", ".join(f"{n} {kind}" for kind, n in report.occurrences.items())
        + f"; {c['deliveries']} deliveries by the producers",
    )
    table.add_row(
        "runs created",
        str(c["runs_created"]),
        f"{c['runs_finished']} finished, {c['runs_failed']} failed, {c['runs_open']} still open",
    )
    table.add_row("deduped (windowed)", str(c["deduped_windowed"]), _by_reason(report, "windowed"))
    table.add_row("deduped (durable)", str(c["deduped_durable"]), _by_reason(report, "durable"))
    table.add_row(
        "coalesced",
        str(c["coalesced"]),
        f"{c['coalesced_runs']} runs, {c['coalesced_wakeups']} wakeups, "
        f"{c['coalesced_routine_fires']} routine fires",
    )
    table.add_row(
        "skipped by policy",
        str(c["skipped_by_policy"]),
        f"{c['skipped_routine_fires']} routine fires, {c['skipped_wakeups']} wakeups",
    )
    console.print(table)

    checks = Table(title="Invariants (read from the database)", title_justify="left")
    checks.add_column("invariant")
    checks.add_column("held", justify="center")
    checks.add_column("detail")
    for invariant in report.invariants:
        mark = "[green]yes[/green]" if invariant.held else "[bold red]NO[/bold red]"
        checks.add_row(invariant.name, mark, invariant.detail)
    console.print(checks)
    if report.errors:
        console.print(f"[yellow]producer calls that failed: {report.errors}[/yellow]")
    verdict = (
        "[bold green]all invariants held[/bold green]"
        if report.ok
        else "[bold red]an invariant failed[/bold red]"
    )
    console.print(f"{verdict} (seed {report.seed}; ids start with {report.prefix})")


def _by_reason(report: DemoReport, kind: str) -> str:
    parts = [
        f"{s['reason']} {s['total']}" + (" (wakeup)" if s["queue"] == "wakeup" else "")
        for s in report.suppressions
        if s["kind"] == kind
    ]
    return ", ".join(parts)


def run_demo(
    url: str,
    *,
    seconds: float = 15.0,
    seed: int | None = None,
    as_json: bool = False,
    debug: bool = False,
) -> DemoReport:
    """Run the demo against ``url``; prints the report (rich tables, or one
    JSON document with ``as_json``) and returns it."""
    if seconds <= 0:
        raise ValueError(f"--seconds must be positive, not {seconds:g}")
    seed = secrets.randbelow(2**31) if seed is None else seed
    console = Console(stderr=as_json)
    quiet_loggers = {} if debug else _quiet_logs()
    try:
        report = Demo(url, seconds, seed, Console(stderr=True), quiet=as_json).run()
    finally:
        for name, level in quiet_loggers.items():
            logging.getLogger(name).setLevel(level)
    if as_json:
        print(json.dumps(report.as_json(), default=str))
    else:
        _print_report(console, report)
    return report


def _quiet_logs() -> dict[str, int]:
    """The demo makes duplicates on purpose: keep the dedup logs (durable
    dedups log at WARNING) and the pool's chatter out of its output."""
    previous: dict[str, int] = {}
    for name in ("controlplane", "psycopg"):
        logger = logging.getLogger(name)
        previous[name] = logger.level
        logger.setLevel(logging.ERROR)
    return previous
