"""``officectl worker`` as a subprocess over a handler module written into a
temporary directory, whose handlers note each call in a JSON-lines file:
what the worker tests, directly and on a proxy, all start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.scenarios.daemon import OFFICECTL, DaemonProcess

HANDLERS = '''
import asyncio, json, os, time
from controlplane.worker import Retry, current_run_context

def _note(run, event, **more):
    line = json.dumps({"id": run.id, "attempt": run.attempt, "event": event,
                       "pid": os.getpid(), **more})
    with open(os.environ["HANDLER_LOG"], "a") as f:
        f.write(line + "\\n")

def _act(run):
    """What the payload asks for (on the attempts it names)."""
    p = run.payload
    if p.get("attempts") and run.attempt not in p["attempts"]:
        return None
    return p.get("action")

def handle(run):
    _note(run, "start")
    action = _act(run)
    if action == "sleep":
        time.sleep(run.payload["seconds"])
    elif action == "retry":
        raise Retry(run.payload["delay"])
    elif action == "fail":
        raise ValueError(run.payload["message"])
    elif action == "cost":
        recorded = current_run_context().record_cost(run.payload["amount"])
        _note(run, "recorded", recorded=recorded)
        time.sleep(run.payload.get("seconds", 0))
    _note(run, "end")

async def ahandle(run):
    _note(run, "start")
    try:
        if _act(run) == "sleep":
            await asyncio.sleep(run.payload["seconds"])
    except asyncio.CancelledError:
        _note(run, "cancelled")
        raise
    _note(run, "end")

NOT_CALLABLE = 42
'''


@dataclass
class Handlers:
    """The handler module's directory and the file its calls are noted in."""

    dir: Path
    log: Path

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def events(self, run_id: str, event: str = "start") -> list[dict[str, Any]]:
        return [c for c in self.calls() if c["id"] == run_id and c["event"] == event]


@contextmanager
def worker(
    dsn: str, handlers: Handlers, handler: str = "handlers:handle", *options: str
) -> Iterator[DaemonProcess]:
    """``officectl --dsn DSN worker HANDLER --log-format json OPTIONS…`` in the
    handler module's directory; killed at the end if the test did not stop it."""
    handle, name = tempfile.mkstemp(prefix="officectl-worker-", suffix=".log")
    os.close(handle)
    command = [str(OFFICECTL), "--dsn", dsn, "worker", handler, "--log-format", "json", *options]
    env = {**os.environ, "HANDLER_LOG": str(handlers.log)}
    with open(name, "wb") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=handlers.dir, env=env
        )
    process = DaemonProcess(proc, Path(name))
    try:
        yield process
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
        Path(name).unlink(missing_ok=True)


def enqueue(db: psycopg.Connection[Any], agent: str, n: int | str, **payload: Any) -> str:
    """One run, keyed ``task_comment:…`` so that it never coalesces."""
    row = db.execute(
        "SELECT outcome, run_id FROM office.enqueue_run(%s, 'task_comment', %s::jsonb,"
        " idempotency_key => %s)",
        (agent, json.dumps(payload), f"task_comment:c{n}:{agent}"),
    ).fetchone()
    assert row is not None and row[0] == "queued", row
    return str(row[1])
