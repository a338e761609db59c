"""A pytest plugin that ends every run with one line per tier (the first
directory under ``tests/``): how many tests passed, failed, were skipped or
xfailed, and the wall time spent in them, so a reader of a CI log sees where
the minutes go. Loaded by ``tests/conftest.py``."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from _pytest.terminal import TerminalReporter


@dataclass
class Tier:
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    seconds: float = 0.0


_TIERS: dict[str, Tier] = defaultdict(Tier)


def tier_of(nodeid: str) -> str:
    """``tests/sql/test_x.py::t`` -> ``sql``; a module directly under tests/
    is its own tier."""
    parts = nodeid.split("::", 1)[0].split("/")
    if parts and parts[0] == "tests":
        parts = parts[1:]
    return parts[0].removesuffix(".py") if parts else nodeid


def outcome_of(report: pytest.TestReport) -> str | None:
    """The test's outcome word, from the report that decides it (a failed
    set-up or tear-down counts as an error)."""
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.when == "call":
        return report.outcome
    if report.failed:
        return "error"
    if report.skipped:
        return "skipped"
    return None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _TIERS[tier_of(report.nodeid)]
    tier.seconds += report.duration
    outcome = outcome_of(report)
    if outcome is not None:
        tier.counts[outcome] += 1


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    if not _TIERS:
        return
    terminalreporter.section("tiers")
    for name in sorted(_TIERS, key=lambda n: -_TIERS[n].seconds):
        tier = _TIERS[name]
        counts = ", ".join(f"{n} {word}" for word, n in sorted(tier.counts.items()))
        terminalreporter.write_line(f"{name:<12} {tier.seconds:8.1f} s  {counts}")
