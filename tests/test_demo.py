"""``officectl demo``: racing producers against the control plane on a test
database; the report's invariants are read from the database itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
OFFICECTL = Path(sys.executable).parent / "officectl"


def test_demo_json_report_shows_every_invariant_held_and_every_suppression(dsn: str) -> None:
    result = subprocess.run(
        [str(OFFICECTL), "demo", "--dsn", dsn, "--seconds", "3", "--seed", "7", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-4000:] + result.stdout[-4000:]
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["seed"] == 7
    held = {i["name"]: i["held"] for i in report["invariants"]}
    assert held == {
        "one run per key": True,
        "every occurrence has exactly one run (or was coalesced into one)": True,
        "no stuck parent after a final sweep": True,
        "no routine gate held by a terminal task": True,
        "every event handled": True,
        "a dead worker's claim is recovered, settled by another, its late finish refused": True,
    }, report["invariants"]
    counts = report["counts"]
    for kind in (
        "occurrences",
        "runs_created",
        "runs_finished",
        "deduped_windowed",
        "deduped_durable",
        "coalesced",
        "coalesced_runs",
        "coalesced_wakeups",
        "coalesced_routine_fires",
        "skipped_by_policy",
        "skipped_routine_fires",
        "skipped_wakeups",
        "routine_fires_cron",
    ):
        assert counts[kind] > 0, (kind, counts)
    # More deliveries than occurrences: the duplicates the database absorbed.
    assert counts["deliveries"] > counts["occurrences"]
    kinds = {(s["queue"], s["kind"]) for s in report["suppressions"]}
    assert {("runs", "windowed"), ("runs", "durable"), ("runs", "coalesced")} <= kinds
    assert ("wakeup", "durable") in kinds  # a routine tick fired twice
    assert report["errors"] == {}, report["error_samples"]

    # The report's numbers are the database's.
    with psycopg.connect(dsn, autocommit=True) as db:
        runs = db.execute(
            "SELECT count(*) FROM office.runs WHERE agent_profile_id LIKE %s",
            (report["prefix"] + "-%",),
        ).fetchone()
        assert runs is not None and runs[0] == counts["runs_created"]
        windowed = db.execute(
            "SELECT coalesce(sum(total), 0) FROM office.dedup_stats WHERE kind = 'windowed'"
        ).fetchone()
        assert windowed is not None and windowed[0] == counts["deduped_windowed"]


def test_demo_prints_its_tables(dsn: str) -> None:
    result = subprocess.run(
        [str(OFFICECTL), "--dsn", dsn, "demo", "--seconds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-4000:] + result.stdout[-4000:]
    assert "What the database decided" in result.stdout
    assert "Invariants (read from the database)" in result.stdout
    assert "all invariants held" in result.stdout
    assert "Traceback" not in result.stderr
