"""The demo's run: the world set up, the control plane started in process,
the producers and the fleet racing for ``seconds``, the control plane let
catch up, then the report (see :mod:`controlplane.demo`)."""

from __future__ import annotations

import json
import logging
import random
import secrets
import threading
import time
from collections.abc import Callable

import psycopg
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from controlplane.client import Office
from controlplane.daemon import Daemon, DaemonConfig
from controlplane.demo import reads
from controlplane.demo.governance import play as play_governance
from controlplane.demo.producers import Producers
from controlplane.demo.race import Race, connect
from controlplane.demo.report import (
    DedupStats,
    DemoReport,
    build_report,
    dedup_stats,
    print_report,
    since,
)
from controlplane.demo.workers import Doomed, Fleet
from controlplane.demo.world import setup

#: Claims older than this are stale in the demo (the dead worker's, soon).
STALE_AFTER = 1.5


class Demo:
    def __init__(self, url: str, seconds: float, seed: int, console: Console, quiet: bool) -> None:
        self.race = Race(url, seconds, seed)
        self.console = console
        self.quiet = quiet
        self.threads: list[threading.Thread] = []
        self.baseline: DedupStats = {}

    def spawn(
        self, name: str, body: Callable[[Office, random.Random], None], options: str | None = None
    ) -> None:
        """A producer thread: ``body`` repeatedly until the race ends; a
        failed call is counted and the producer goes on."""
        race = self.race

        def main() -> None:
            rng = race.rng(name)
            try:
                with connect(race.url, options) as office:
                    while not race.stop.is_set():
                        try:
                            body(office, rng)
                        except Exception as exc:
                            race.ledger.failed(name, exc)
                            race.stop.wait(0.05)
            except Exception as exc:  # the connection itself
                race.ledger.failed(name, exc)

        thread = threading.Thread(target=main, name=f"demo-{name}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def run(self) -> DemoReport:
        race = self.race
        with connect(race.url) as office:
            version = office.schema_version()
            world = setup(office, race.prefix)
            self.baseline = dedup_stats(office)
            fleet = Fleet(race, world)
            doomed = fleet.kill_a_worker(office)
        if not self.quiet:
            self.console.print(
                f"[bold]office {version}[/bold]: workspace [cyan]{world.workspace}[/cyan], "
                f"{len(world.all_agents)} agents, {len(world.assignee)} tasks, "
                f"{2 + len(world.light) + 1} routines; "
                f"racing for {race.seconds:g} s (seed {race.seed})"
            )
        daemon = Daemon(
            DaemonConfig(
                dsn=race.url,
                consumer=f"{race.prefix}-daemon",
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
            self.compete(Producers(race, world), fleet, doomed)
            with connect(race.url) as office:
                governance = play_governance(office, race.prefix, world.workspace)
            if not self.quiet:
                self.console.print(
                    "[dim]letting the control plane catch up, then a final sweep…[/dim]"
                )
            self.settle(daemon, fleet)
        finally:
            race.stop.set()
            fleet.dead.revive.set()
            fleet.stop()
            daemon.stop()
            daemon.join(30)
        with connect(race.url) as office:
            return build_report(office, race, self.baseline, world, fleet.dead, governance)

    def compete(self, producers: Producers, fleet: Fleet, doomed: Doomed) -> None:
        """The race: every producer, the fleet and the dead worker's return,
        for ``seconds``, with a progress bar of live counts."""
        race = self.race
        barrier = threading.Barrier(3)
        self.spawn("reassign", producers.reassign)
        self.spawn("redeliver", producers.redeliver)
        self.spawn("comment", producers.comment)
        self.spawn(
            "late-redeliver", producers.late_redeliver, options="-c office.idempotency_window=1ms"
        )
        self.spawn("heartbeat", producers.heartbeat)
        self.spawn("fire", producers.fire)
        self.spawn("refire", producers.refire)
        for i in range(1, 3):
            self.spawn(f"schedule-{i}", producers.schedule())
        for i in range(3):
            self.spawn(f"complete-{i + 1}", producers.complete(i, barrier))
        fleet.start()
        fleet.ghost(doomed)

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
        with progress, connect(race.url) as office:
            bar = progress.add_task("", total=race.seconds)
            while True:
                elapsed = time.monotonic() - started
                if elapsed >= race.seconds:
                    break
                progress.update(bar, completed=elapsed, description=self._live_counts(office))
                time.sleep(min(0.5, race.seconds - elapsed))
            race.stop.set()
            barrier.abort()
            for thread in self.threads:
                thread.join(30)
            progress.update(bar, completed=race.seconds, description=self._live_counts(office))

    def _live_counts(self, office: Office) -> str:
        try:
            counts = reads.run_counts(office, self.race.prefix + "-%")
            stats = since(self.baseline, dedup_stats(office))
        except psycopg.Error:
            return ""
        deduped = sum(v for (_, _, kind), v in stats.items() if kind in ("windowed", "durable"))
        coalesced = sum(v for (_, _, kind), v in stats.items() if kind == "coalesced")
        return (
            f"{self.race.ledger.actions['deliveries']} deliveries · {counts.runs} runs "
            f"({counts.finished} finished) · {deduped} deduped · {coalesced} coalesced"
        )

    def settle(self, daemon: Daemon, fleet: Fleet) -> None:
        """Let the control plane catch up, then a final sweep."""
        with connect(self.race.url) as office:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                pending = reads.pending_events(office, self.race.prefix + "-%")
                if pending == 0 and fleet.dead.done.is_set():
                    break
                time.sleep(0.05)
            fleet.stop()
            daemon.stop()
            daemon.join(30)
            for _ in range(100):  # the final sweep: until nothing is left to deliver
                if not office.sweep_stuck_parents(100):
                    break
        fleet.dead.done.wait(5)


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
        print_report(console, report)
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
