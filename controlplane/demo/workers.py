"""The worker fleet the demo starts (a :class:`controlplane.worker.Worker`
per agent served) and the worker that dies: it claims a run and freezes, the
daemon's recovery returns the claim to the queue, the fleet settles it, and
the late finish of the frozen worker, come back, is refused."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from psycopg_pool import ConnectionPool

from controlplane import keys
from controlplane.client import Office
from controlplane.demo import reads
from controlplane.demo.ledger import Occurrence
from controlplane.demo.race import Race, connect
from controlplane.demo.world import World
from controlplane.models import Run
from controlplane.worker import Retry, Worker

#: The frozen worker, its thread and its own registry (its outcomes, apart
#: from the fleet's: a late finish refused shows there as ``lost``).
Doomed = tuple[Worker, threading.Thread, CollectorRegistry]


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


class Fleet:
    def __init__(self, race: Race, world: World) -> None:
        self.race = race
        self.ledger = race.ledger
        self.w = world
        #: The fleet stays on duty after the race (``race.stop``), until the
        #: demo settled.
        self.stopping = threading.Event()
        self.stopped = False
        self.workers: list[tuple[Worker, threading.Thread]] = []
        #: The fleet's outcomes (office_worker_runs_total), apart from the
        #: frozen worker's.
        self.registry = CollectorRegistry()
        self.dead = DeadWorker()

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
            self.race.url,
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

    def handler(self, name: str) -> Callable[[Run], None]:
        """A fleet worker's agent: a few milliseconds of work, then it
        finishes the run (most often), asks for a retry, or gives up."""
        rng = self.race.rng(name)

        def handle(run: Run) -> None:
            self.stopping.wait(rng.uniform(0.002, 0.02))  # the work
            roll = rng.random()
            if roll < 0.05:
                raise Retry(0.05)
            if roll < 0.1:
                raise RuntimeError("the agent gave up")

        return handle

    def start(self) -> None:
        for agent in self.w.served:
            name = f"worker-{agent.removeprefix(self.race.prefix + '-')}"
            self.workers.append(
                self.start_worker(
                    name, agent, self.handler(name), heartbeat=0.3, registry=self.registry
                )
            )

    def stop(self) -> None:
        """Stop the fleet; its outcomes go into the ledger, once (the demo
        stops it when the race settles and again on the way out)."""
        if self.stopped:
            return
        self.stopped = True
        self.stopping.set()  # a handler at work returns now
        for worker, _ in self.workers:
            worker.stop()
        for _, thread in self.workers:
            thread.join(60)
        for outcome, action in (
            ("finished", "runs finished"),
            ("retried", "runs retried"),
            ("failed", "runs failed"),
            ("lost", "stale reports refused"),
        ):
            total = self.registry.get_sample_value("office_worker_runs_total", {"outcome": outcome})
            if total:
                self.ledger.did(action, int(total))
        self.workers = []

    def kill_a_worker(self, office: Office) -> Doomed:
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
            self.dead.revive.wait(max(60.0, self.race.seconds * 4))

        registry = CollectorRegistry()
        worker, thread = self.start_worker(
            "worker-doomed", self.w.doomed, frozen, heartbeat=3600, registry=registry
        )
        assert self.dead.claimed.wait(30), "the doomed worker found nothing to claim"
        return worker, thread, registry

    def ghost(self, doomed: Doomed) -> None:
        """The frozen worker comes back once its run was settled (finished or
        failed) by another worker: its handler returns, and the finish it
        writes is refused."""
        worker, thread, registry = doomed

        def main() -> None:
            try:
                with connect(self.race.url) as office:
                    deadline = time.monotonic() + max(30.0, self.race.seconds * 3)
                    while time.monotonic() < deadline:
                        state = reads.run_state(office, self.dead.run_id)
                        if state.attempt > self.dead.attempt:
                            self.dead.recovered = True
                        if state.status in ("finished", "failed"):
                            self.dead.settled_by = state.claimed_by
                            self.dead.settled_attempt = state.attempt
                            self.dead.settled_as = state.status
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
