"""The fresh-key enqueue under pgbench: the effect bench/enqueue.py
and bench/peers.py report, shown without Python in the loop.

    bash bench/run.sh pgbench_enqueue      # part of `make bench`

Each case is one pgbench script, one statement per transaction, prepared
(``-M prepared``), fresh random keys, on tables truncated right after a
CHECKPOINT (bench/enqueue.py's ``reset``):

* floor: ``INSERT … ON CONFLICT DO NOTHING`` of one key into a table with one
  unique index (bench/enqueue.py's floor);
* runs row: the row ``enqueue_run`` stores, inserted straight into
  ``office.runs`` (``ON CONFLICT`` on its key, as enqueue_run's insert): what
  the table costs, its indexes, checks and readiness trigger, without the
  function;
* runs row without the readiness trigger (disabled for the case);
* ``enqueue_run`` with a key and a task, as bench/enqueue.py calls it, with the
  default ``office.notify`` and with ``office.notify = off``.

Every case runs ``--rounds`` times, the cases in turn, and the best round
counts (on a shared machine load only slows a closed loop down).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench import enqueue
from bench.common import bench_parser, machine_line, publish

KEY = "'fresh-' || :client_id || '-' || :k"
TASK = "'task-fresh-' || :client_id || '-' || :k"
AGENT = f"'bench-agent-' || (:client_id % {enqueue.AGENTS})"
RANDOM_KEY = "\\set k random(1, 2000000000)\n"
TRIGGER = "runs_30_ready_insert"

RUNS_ROW = (
    "INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id)"
    f" VALUES ({AGENT}, 'task_assigned',"
    f" jsonb_build_object('agent_profile_id', {AGENT}, 'task_id', {TASK}), {KEY}, {TASK})"
    " ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;"
)
ENQUEUE_RUN = (
    f"SELECT outcome FROM office.enqueue_run({AGENT}, 'task_assigned', '{{}}'::jsonb,"
    f" {KEY}, {TASK});"
)


@dataclass(frozen=True)
class Case:
    name: str
    statement: str
    notify: str | None = None  # office.notify for the pgbench sessions
    without_trigger: bool = False


CASES = [
    Case("floor", f"INSERT INTO public.bench_floor (k) VALUES ({KEY}) ON CONFLICT DO NOTHING;"),
    Case("runs row", RUNS_ROW),
    Case("runs row, no readiness trigger", RUNS_ROW, without_trigger=True),
    Case("enqueue_run", ENQUEUE_RUN),
    Case("enqueue_run, office.notify = off", ENQUEUE_RUN, notify="off"),
]


def default_pgbench() -> str | None:
    """pgbench on the PATH, else PostgreSQL 15's (Debian's package)."""
    debian = Path("/usr/lib/postgresql/15/bin/pgbench")
    return shutil.which("pgbench") or (str(debian) if debian.exists() else None)


def _pgbench(
    binary: str, dsn: str, script: Path, clients: int, seconds: float, notify: str | None
) -> float:
    env = dict(os.environ)
    if notify is not None:
        env["PGOPTIONS"] = f"-c office.notify={notify}"
    threads = ["-c", str(clients), "-j", str(clients), "-T", str(max(1, round(seconds)))]
    out = subprocess.run(
        # pgbench takes a connection string where it takes a database name.
        [binary, "-n", "-M", "prepared", "-f", str(script), *threads, dsn],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    found = re.search(r"tps = ([\d.]+)", out)
    assert found is not None, out
    return float(found.group(1))


def measure(
    binary: str, dsn: str, case: Case, clients: int, seconds: float, workdir: Path
) -> float:
    script = workdir / "case.sql"
    script.write_text(RANDOM_KEY + case.statement + "\n")
    enqueue.reset(dsn, "floor, fresh keys")
    if not case.without_trigger:
        return _pgbench(binary, dsn, script, clients, seconds, case.notify)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE office.runs DISABLE TRIGGER {TRIGGER}")
        try:
            return _pgbench(binary, dsn, script, clients, seconds, case.notify)
        finally:
            conn.execute(f"ALTER TABLE office.runs ENABLE TRIGGER {TRIGGER}")


def main() -> None:
    parser = bench_parser(__doc__, "pgbench_enqueue")
    parser.add_argument("--connections", default="1,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pgbench", default=default_pgbench(), help="the pgbench binary")
    args = parser.parse_args()
    if args.pgbench is None:
        parser.error("no pgbench binary found: give --pgbench")
    counts = [int(c) for c in args.connections.split(",")]
    best: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for clients in counts:
                for case in CASES:
                    tps = measure(args.pgbench, args.dsn, case, clients, args.seconds, Path(tmp))
                    best[(case.name, clients)] = max(best.get((case.name, clients), 0.0), tps)
                    print(f"{clients} conn  {case.name:34} {tps:9.0f} tps", flush=True)
    rows = []
    for case in CASES:
        cells = []
        for clients in counts:
            tps, floor = best[(case.name, clients)], best[("floor", clients)]
            cells.append(f"{tps:,.0f} ({tps / floor:.2f}×)")
        rows.append(f"| {case.name} | " + " | ".join(cells) + " |")
    body = "\n".join(
        [
            "## pgbench: the fresh-key enqueue against the row it stores",
            "",
            f"Command: `bash bench/run.sh pgbench_enqueue` ({args.seconds:g} s a case, best of"
            f" {args.rounds} rounds, the cases in turn).",
            f"Machine: {machine_line(args.dsn)}.",
            "",
            "pgbench, `-M prepared`, one statement per transaction, fresh random keys, every",
            "case on tables truncated right after a CHECKPOINT. Transactions per second (ratio to",
            'the floor of the same connection count). "runs row" inserts the row `enqueue_run`',
            "stores straight into `office.runs`: the table's own cost, the floor under any",
            "`enqueue_run`.",
            "",
            "| case | "
            + " | ".join(f"{c} connection{'s' if c > 1 else ''}" for c in counts)
            + " |",
            "|---|" + "---|" * len(counts),
            *rows,
        ]
    )
    publish(body, "pgbench_enqueue", args.write)


if __name__ == "__main__":
    main()
