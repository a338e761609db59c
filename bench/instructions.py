"""Server instructions per call: the hot path against its floors,
counted by valgrind's callgrind in a single-user PostgreSQL.

    bash bench/run.sh instructions      # part of `make bench`

Why a count and not a clock: on this kind of machine a throughput ratio
moves by 15-30 % between runs with the disk's flush time, so an effect of a
few per cent on the server's CPU cannot be told from noise. The instructions
the server executes for a call repeat to a few in a million from run to run.
They count the server's own work only: no kernel (network, WAL flush), no
client, no other process, no waits.

How: one cluster is prepared once (office installed, 64 agents, 100,000
queued runs as the claim cases have, the floor tables of bench/hotpath.py,
VACUUM ANALYZE). Each case runs on a fresh copy of it in ``postgres --single``
under callgrind, warmed up by 20 calls, then N calls, and again with 2N: per
call = (I(2N) - I(N)) / N, which cancels start-up, warm-up and shutdown.
Every call is an EXECUTE of a statement prepared first, its own transaction,
so no case parses its SQL per call. The claim + finish cycles are each a
PL/pgSQL function of two statements (office's claim_run and finish_run, the
raw SKIP LOCKED claim and UPDATE finish), so both sides pay the same wrapper.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import bench_parser, machine_line, publish
from bench.hotpath import AGENTS, FILL_QUEUE, FLOOR_TABLES, QUEUED

PG_BIN = Path(os.environ.get("OFFICE_BENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))
WARM_UP = 20

# One statement each, without blank lines: single-user mode (-j) ends a
# statement at a semicolon followed by a blank line.
SETUP = [
    "CREATE EXTENSION office",
    "SELECT count(*) FROM (SELECT office.upsert_agent('bench-agent-' || n, 'bench')"
    f" FROM generate_series(0, {AGENTS - 1}) n) s",
    FILL_QUEUE,
    *FLOOR_TABLES,
    f"INSERT INTO public.bench_queue (status) SELECT 'queued' FROM generate_series(1, {QUEUED})",
    """CREATE FUNCTION public.bench_office_cycle() RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_id text; v_attempt int;
BEGIN
    SELECT c.id, c.attempt INTO v_id, v_attempt FROM office.claim_run('w1') c;
    PERFORM office.finish_run(v_id, v_attempt);
END $$""",
    """CREATE FUNCTION public.bench_raw_cycle() RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_id bigint;
BEGIN
    UPDATE public.bench_queue SET status = 'claimed', claimed_at = now()
     WHERE id = (SELECT id FROM public.bench_queue WHERE status = 'queued'
                  ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id INTO v_id;
    UPDATE public.bench_queue SET status = 'finished', finished_at = now() WHERE id = v_id;
END $$""",
    "VACUUM ANALYZE",
]


@dataclass(frozen=True)
class Case:
    name: str
    prepare: str  # PREPARE c(...) AS ...
    call: str  # an EXECUTE of it: {i} the call, {a} its agent's number, {b} the batch


FLOOR = Case(
    "floor: `INSERT … ON CONFLICT DO NOTHING` of a fresh key",
    "PREPARE c(text) AS INSERT INTO public.bench_floor (k) VALUES ($1) ON CONFLICT DO NOTHING",
    "EXECUTE c('f-{b}-{i}')",
)
FRESH = Case(
    "`enqueue_run`, fresh key and task",
    "PREPARE c(text, text, text) AS SELECT office.enqueue_run($1, 'task_assigned', '{}', $2, $3)",
    "EXECUTE c('bench-agent-{a}', 'k-{b}-{i}', 't-{b}-{i}')",
)
REPEATED = Case(
    "`enqueue_run`, repeated key (a windowed dedup)",
    FRESH.prepare,
    "EXECUTE c('bench-agent-1', 'k-{b}', 't-{b}')",
)
RAW_CYCLE = Case(
    "raw claim + finish (`SKIP LOCKED` claim, `UPDATE` finish)",
    "PREPARE c AS SELECT public.bench_raw_cycle()",
    "EXECUTE c",
)
CYCLE = Case(
    "`claim_run` + `finish_run`",
    "PREPARE c AS SELECT public.bench_office_cycle()",
    "EXECUTE c",
)
SET_FLOOR = Case(
    "set-based floor: `INSERT … SELECT` of 1,000 fresh keys",
    "PREPARE c(text) AS INSERT INTO public.bench_floor (k)"
    " SELECT $1 || n FROM generate_series(1, 1000) n ON CONFLICT DO NOTHING",
    "EXECUTE c('s-{b}-{i}-')",
)
BULK = Case(
    "`enqueue_runs` of 1,000 fresh keys",
    "PREPARE c(text) AS SELECT count(*) FROM office.enqueue_runs(("
    "SELECT jsonb_agg(jsonb_build_object("
    f"'agent_profile_id', 'bench-agent-' || (n % {AGENTS}), 'reason', 'task_assigned',"
    " 'idempotency_key', $1 || n, 'task_id', 't' || $1 || n)) FROM generate_series(1, 1000) n))",
    "EXECUTE c('b-{b}-{i}-')",
)
# (case, its floor, calls per measurement)
PAIRS = [
    (FRESH, FLOOR, 200),
    (REPEATED, FLOOR, 200),
    (CYCLE, RAW_CYCLE, 200),
    (BULK, SET_FLOOR, 4),
]


def _as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as postgres."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def prepare_cluster(workdir: Path, setup: Sequence[str] = tuple(SETUP)) -> Path:
    """The cluster every case copies, set up (by default with SETUP) in workdir."""
    data = workdir / "base"
    subprocess.run(
        _as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"]),
        check=True,
        capture_output=True,
    )
    _single_user(data, "CREATE DATABASE bench;\n\n", "postgres")
    _single_user(data, "".join(f"{statement};\n\n" for statement in setup), "bench")
    return data


def _single_user(data: Path, script: str, dbname: str, callgrind_out: Path | None = None) -> int:
    """Run ``script`` in ``postgres --single``; the instructions it took, under callgrind."""
    command = [str(PG_BIN / "postgres"), "--single", "-D", str(data), "-j"]
    command += ["-c", "fsync=off", "-c", "autovacuum=off", dbname]
    if callgrind_out is not None:
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={callgrind_out}",
            *command,
        ]
    done = subprocess.run(_as_postgres(command), input=script, capture_output=True, text=True)
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line]
    if done.returncode != 0 or errors:
        raise RuntimeError(f"postgres --single failed: {errors[:3] or done.stderr[-2000:]}")
    if callgrind_out is None:
        return 0
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found is not None, done.stderr[-2000:]
    return int(found.group(1))


def instructions(base: Path, workdir: Path, case: Case, calls: int) -> float:
    """Instructions per call of ``case``: (I(2 calls) - I(calls)) / calls."""
    counts = []
    for batch, n in enumerate((calls, 2 * calls)):
        data = workdir / "run"
        shutil.rmtree(data, ignore_errors=True)
        subprocess.run(_as_postgres(["cp", "-a", str(base), str(data)]), check=True)
        lines = [case.prepare]
        lines += [case.call.format(b=f"w{batch}", i=i, a=i % AGENTS) for i in range(WARM_UP)]
        lines += [case.call.format(b=batch, i=i, a=i % AGENTS) for i in range(n)]
        out = workdir / "callgrind.out"
        counts.append(_single_user(data, ";\n\n".join(lines) + ";\n\n", "bench", out))
        subprocess.run(_as_postgres(["rm", "-f", str(out)]), check=True)
    shutil.rmtree(workdir / "run", ignore_errors=True)
    return (counts[1] - counts[0]) / calls


def main() -> None:
    parser = bench_parser(__doc__, "instructions")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        # (Debian's valgrind: on every machine of this kind, not in `make deps`)
        print("instructions: skipped, valgrind is not installed")
        return
    rows = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        workdir = Path(tmp)
        if os.geteuid() == 0:
            shutil.chown(workdir, "postgres")
        base = prepare_cluster(workdir)
        measured: dict[str, float] = {}
        for case, floor, calls in PAIRS:
            for c in (case, floor):
                if c.name not in measured:
                    measured[c.name] = instructions(base, workdir, c, calls)
                    print(f"{c.name:60} {measured[c.name]:12,.0f} instructions", flush=True)
            ratio = measured[case.name] / measured[floor.name]
            rows.append(
                f"| {case.name} | {measured[case.name]:,.0f} | {floor.name} |"
                f" {measured[floor.name]:,.0f} | {ratio:.1f}× |"
            )
    body = "\n".join(
        [
            "## Server instructions per call",
            "",
            "Command: `make bench` (`bash bench/run.sh instructions`): callgrind over"
            " `postgres --single -c fsync=off -c autovacuum=off` (the machine line's settings"
            " are the bench cluster's), each case on a fresh copy of one cluster (office,"
            f" 64 agents, {QUEUED:,} queued runs), per call = (I(2N) − I(N)) / N after"
            f" {WARM_UP} warm-up calls (bench/instructions.py says why and how).",
            f"Machine: {machine_line(args.dsn)}.",
            "",
            "A count is the server's own work for one call, its commit included: not the"
            " kernel's (network, WAL flush), not the client's, so it is no throughput ratio"
            " (those costs come on top of both sides and narrow the gap), but it repeats, so"
            " a change to the server's work shows in it exactly. The bulk case builds its"
            " 1,000-element argument in the server (`jsonb_agg`), which a client would send.",
            "",
            "| case | instructions | floor | floor instructions | case / floor |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    publish(body, "instructions", args.write)


if __name__ == "__main__":
    main()
