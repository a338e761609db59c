"""``officectl demo``: racing producers against the control plane on a test
database; the report's invariants are read from the database itself."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg

from tests import harness

ROOT = Path(__file__).resolve().parents[2]
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
        "a ping-pong of two agents is guarded at office.max_chain_depth": True,
        "a burst during a cooldown is one held run per bucket": True,
        "a budget stops a run in progress": True,
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
        # Each finish the fleet reports is a finished run, counted once
        # (the fleet is stopped twice: when the race settles and on the way out).
        finished = db.execute(
            "SELECT count(*) FROM office.runs"
            " WHERE agent_profile_id LIKE %s AND status = 'finished'",
            (report["prefix"] + "-%",),
        ).fetchone()
        assert finished is not None
        assert 0 < report["producers"]["runs finished"] <= finished[0] == counts["runs_finished"]
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


def test_demo_ui_keeps_the_dashboard_up_on_the_demos_database(dsn: str) -> None:
    port = harness.free_port()
    proc = subprocess.Popen(
        [str(OFFICECTL), "--dsn", dsn, "demo", "--seconds", "1", "--ui", "--ui-port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:  # the report, then the dashboard's line
            seen.append(line)
            if line.startswith("officectl ui on "):
                break
        assert "all invariants held" in "".join(seen) and f":{port}/" in seen[-1], seen
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):  # the line is printed before uvicorn binds
            try:
                overview = httpx.get(url + "/", timeout=10)
                break
            except httpx.ConnectError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
        assert overview.status_code == 200
        assert "read-only" in overview.text.split("<main")[0]  # no actions on the demo
        finished = re.search(r'data-stat="runs-finished">([0-9]+)', overview.text)
        agents = httpx.get(url + "/agents", timeout=10).text
        with psycopg.connect(dsn, autocommit=True) as db:
            count = db.execute("SELECT count(*) FROM office.agent_profiles").fetchone()
            runs = db.execute("SELECT count(*) FROM office.runs WHERE status = 'finished'")
            done = runs.fetchone()
        assert count is not None and agents.count('<tr class="agent">') == min(count[0], 50)
        # The race is over: the overview's numbers are the database's.
        assert finished and done and int(finished.group(1)) == done[0] > 0
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
