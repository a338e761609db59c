"""The report: the database's own account of what it decided during the
race (``office.dedup_stats`` and the tables), the invariants, and its
printing as rich tables."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from controlplane.client import Office
from controlplane.demo import reads
from controlplane.demo.governance import Governance
from controlplane.demo.invariants import Invariant, check
from controlplane.demo.race import Race
from controlplane.demo.workers import DeadWorker
from controlplane.demo.world import World

#: ``office.dedup_stats`` as (queue, reason, kind) -> total.
DedupStats = dict[tuple[str, str, str], int]


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


def dedup_stats(office: Office) -> DedupStats:
    return {(r.queue, r.reason, r.kind): r.total for r in office.dedup_stats()}


def since(baseline: DedupStats, now: DedupStats) -> DedupStats:
    """What was suppressed after ``baseline``: ``office.dedup_stats`` counts
    since the database began, and the demo reports only its own."""
    delta = {k: v - baseline.get(k, 0) for k, v in now.items()}
    return {k: v for k, v in delta.items() if v > 0}


def build_report(
    office: Office,
    race: Race,
    baseline: DedupStats,
    world: World,
    dead: DeadWorker,
    governance: Governance,
) -> DemoReport:
    p = race.prefix + "-%"
    stats = since(baseline, dedup_stats(office))
    occurrences = race.ledger.snapshot()
    finished = reads.run_counts(office, p)
    runs = finished.runs
    wakeups = reads.wakeup_counts(office, p)
    fires = reads.fire_counts(office, p)
    windowed = sum(v for (_, _, kind), v in stats.items() if kind == "windowed")
    durable = sum(v for (_, _, kind), v in stats.items() if kind == "durable")
    coalesced_runs = sum(v for (_, _, kind), v in stats.items() if kind == "coalesced")
    counts = {
        "occurrences": len(occurrences),
        "deliveries": race.ledger.actions["deliveries"],
        "runs_created": runs,
        "runs_finished": finished.finished,
        "runs_failed": finished.failed,
        "runs_open": finished.open,
        "deduped_windowed": windowed,
        "deduped_durable": durable,
        "coalesced_runs": coalesced_runs,
        "coalesced_wakeups": wakeups.coalesced,
        "coalesced_routine_fires": fires.coalesced,
        "coalesced": coalesced_runs + wakeups.coalesced + fires.coalesced,
        "skipped_routine_fires": fires.skipped,
        "skipped_wakeups": wakeups.skipped,
        "skipped_by_policy": fires.skipped + wakeups.skipped,
        "routine_fires": fires.total,
        "routine_fires_cron": fires.cron,
        "wakeup_requests": wakeups.total,
    }
    suppressions = [
        {"queue": q, "reason": r, "kind": k, "total": v} for (q, r, k), v in sorted(stats.items())
    ]
    invariants = check(office, race.prefix, world, dead, occurrences, governance)
    errors = dict(race.ledger.errors)
    return DemoReport(
        ok=all(i.held for i in invariants),
        prefix=race.prefix,
        seed=race.seed,
        seconds=race.seconds,
        counts=counts,
        suppressions=suppressions,
        invariants=invariants,
        producers=dict(sorted(race.ledger.actions.items())),
        errors=errors,
        error_samples=list(race.ledger.error_samples),
        occurrences=dict(Counter(o.kind for o in occurrences).most_common()),
    )


def print_report(console: Console, report: DemoReport) -> None:
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
