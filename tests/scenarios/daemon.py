"""``officectl run`` as a subprocess with fractions-of-a-second intervals,
and its JSON log: what the daemon, fault and poison tests all start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from controlplane import keys
from tests.harness import scalar, wait_for

ROOT = Path(__file__).resolve().parents[2]
OFFICECTL = Path(sys.executable).parent / "officectl"

#: Short intervals for every loop; a test adds or overrides options.
FAST = (
    "--poll-interval", "50ms",
    "--sweep-interval", "200ms",
    "--recover-interval", "100ms",
    "--stats-interval", "200ms",
    "--max-backoff", "500ms",
    "--log-format", "json",
)  # fmt: skip


@dataclass
class DaemonProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path
    _offset: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON log record written so far."""
        with self.log_path.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        complete, _, _ = chunk.rpartition(b"\n")
        if complete:
            self._offset += len(complete) + 1
            for line in complete.decode().splitlines():
                try:
                    self.records.append(json.loads(line))
                except json.JSONDecodeError:
                    self.records.append({"message": line, "level": "RAW"})
        return self.records

    def messages(self) -> list[str]:
        return [r.get("message", "") for r in self.logs()]

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics_port(self) -> int:
        record = wait_for(
            lambda: next((r for r in self.logs() if "serving metrics" in r["message"]), None),
            "the metrics endpoint",
        )
        return int(record["port"])

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the daemon ignored SIGTERM:\n{self.text()[-4000:]}") from None


@contextmanager
def daemon(dsn: str, *options: str) -> Iterator[DaemonProcess]:
    """``officectl --dsn DSN run FAST… OPTIONS…`` in a subprocess; killed at
    the end if the test did not stop it."""
    handle, name = tempfile.mkstemp(prefix="officectl-run-", suffix=".log")
    os.close(handle)
    command = [str(OFFICECTL), "--dsn", dsn, "run", *FAST, *options]
    with open(name, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    process = DaemonProcess(proc, Path(name))
    try:
        yield process
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        Path(name).unlink(missing_ok=True)


def make_assignment_backlog(
    db: psycopg.Connection[Any], prefix: str, tasks: int, agents: int, workspace: str = "ws"
) -> None:
    """``tasks`` Office tasks of ``workspace`` assigned by a plain UPDATE: one
    task.assigned event each and no run - the subscriber is the only producer."""
    for i in range(agents):
        db.execute("SELECT office.upsert_agent(%s, %s)", (f"{prefix}-agent-{i}", workspace))
    db.execute(
        "SELECT office.create_task(%s, id => %s || '-task-' || n) FROM generate_series(1, %s) n",
        (workspace, prefix, tasks),
    )
    db.execute(
        """UPDATE office.tasks SET assignee_agent_profile_id =
                  %(prefix)s || '-agent-' || (split_part(id, '-task-', 2)::int %% %(agents)s)
            WHERE id LIKE %(prefix)s || '-task-%%'""",
        {"prefix": prefix, "agents": agents},
    )


def pending_events(db: psycopg.Connection[Any]) -> int:
    return int(scalar(db, "SELECT count(*) FROM office.events WHERE processed_at IS NULL"))


def assert_each_assignment_has_one_run(db: psycopg.Connection[Any], prefix: str) -> int:
    """Every assignment of the prefix's tasks has exactly one run, carrying
    its key, and no other task_assigned run exists for them."""
    assignments = db.execute(
        """SELECT id, assignee_agent_profile_id, assignment_generation FROM office.tasks
            WHERE id LIKE %s || '-task-%%' ORDER BY id""",
        (prefix,),
    ).fetchall()
    runs = dict(
        db.execute(
            """SELECT idempotency_key, count(*) FROM office.runs
                WHERE reason = 'task_assigned' AND task_id LIKE %s || '-task-%%'
                GROUP BY idempotency_key""",
            (prefix,),
        ).fetchall()
    )
    expected = {keys.assignment_key(t, a, g): 1 for t, a, g in assignments}
    assert runs == expected
    return len(expected)


def assignment_dedups(db: psycopg.Connection[Any]) -> int:
    """Suppressed task_assigned enqueues: non-zero only if an event was
    handled twice (nothing else enqueues task_assigned in these tests)."""
    return int(
        scalar(
            db,
            """SELECT coalesce(sum(total), 0) FROM office.dedup_stats
                WHERE queue = 'runs' AND reason = 'task_assigned'""",
        )
    )
