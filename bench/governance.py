"""Wake governance's costs (docs/api.md §9): the three performance lines of
issue 31.

    bash bench/run.sh governance

1. **No policy rows, against 0.4.0, A/B on one cluster.** The 0.4.0 tree
   (:data:`BASELINE_REV`, the parent of the commit that froze 0.4.0) is
   checked out in a temporary worktree, its library built with PGXS and
   installed next to this one as ``office_040.so`` with an extension
   ``office_040`` whose script is the 0.4.0 one bound to it; one database
   gets ``office_040``, another ``office``. Fresh-key ``enqueue_run`` (one call
   per transaction, a key and a task, as bench/enqueue.py calls it) and a
   ``claim_run`` + ``finish_run`` cycle run on one connection, the two
   databases in turn for --rounds rounds, the first of each round alternating;
   the best round of each counts (on a shared machine load only slows a closed
   loop down). pgbench runs the
   same fresh-key enqueue on both (``-M prepared``, one client).
2. **Held agents against busy ones.** 10,000 agents with queued runs that a
   cooldown holds (each ran and finished a run just now; the workspace has a
   cooldown of an hour) against 10,000 agents that each hold a claimed run,
   at 10,000 and at 200,000 queued runs: ``claim_run()`` that finds nothing,
   time per call, once every agent's readiness row has been looked at.
3. **explain_agent** of one agent with 10,000 queued runs (the default 50
   rows): time per call, and pgbench's average latency for the same call.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from bench.claim import enqueue as enqueue_backlog
from bench.common import bench_parser, machine_line, publish, run_sync
from bench.pgbench_enqueue import default_pgbench

#: The parent of the commit that froze 0.4.0 in sql/released: the 0.4.0 tree.
BASELINE_REV = "675621a^"
BASELINE_EXTENSION = "office_040"
AGENTS = 64
HELD_AGENTS = 10_000
HELD_SIZES = (10_000, 200_000)
EXPLAIN_RUNS = 10_000
# Agents set up per transaction: each claim takes a transaction-scoped lock of
# its agent, and 10,000 at once exceed the bench server's lock table.
SETUP_CHUNK = 1_000
CYCLE_RUNS = 60_000  # queued before each cycle case: more than a case drains

ENQUEUE = "SELECT outcome FROM office.enqueue_run(%s, 'task_assigned', '{}'::jsonb, %s, %s)"
CLAIM = "SELECT id, attempt FROM office.claim_run(%s)"
FINISH = "SELECT office.finish_run(%s, %s)"
EXPLAIN = "SELECT count(*) FROM office.explain_agent(%s)"
PGBENCH_ENQUEUE = (
    "\\set k random(1, 2000000000)\n"
    "SELECT outcome FROM office.enqueue_run('bench-agent-' || (:client_id % 64),"
    " 'task_assigned', '{}'::jsonb, 'fresh-' || :client_id || '-' || :k,"
    " 'task-fresh-' || :client_id || '-' || :k);\n"
)
PGBENCH_EXPLAIN = "SELECT count(*) FROM office.explain_agent('bench-agent-0');\n"
HOLD = "SELECT office.set_wake_policy('workspace', 'held', cooldown => '1 hour')"
# A cooldown of a workspace without agents: it holds nothing, but claim_run
# takes its PL/pgSQL path, as it does for the held agents.
ELSEWHERE = "SELECT office.set_wake_policy('workspace', 'elsewhere', cooldown => '1 hour')"
KINDS = ("busy", "busy, policy elsewhere", "held")
KIND_LABELS = (
    "busy (a claimed run each)",
    "busy, a policy in another workspace",
    "held by a cooldown",
)
DUE_ROWS = "SELECT count(*) FROM office.agent_ready WHERE due_at IS NULL OR due_at <= now()"
CASE_LABELS = (("enqueue", "fresh-key `enqueue_run`"), ("cycle", "`claim_run` + `finish_run`"))


def _pg_config(dsn: str) -> str:
    """The pg_config of the server: PG_CONFIG, else the server's own bindir's."""
    if os.environ.get("PG_CONFIG"):
        return os.environ["PG_CONFIG"]
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT setting FROM pg_config WHERE name = 'BINDIR'").fetchone()
    assert row is not None
    return str(Path(row[0]) / "pg_config")


def install_baseline(pg_config: str) -> None:
    """The 0.4.0 library and script, installed as extension office_040."""

    def config(flag: str) -> Path:
        out = subprocess.run([pg_config, flag], capture_output=True, text=True, check=True)
        return Path(out.stdout.strip())

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="office-baseline-") as tmp:
        tree = Path(tmp) / "office-0.4.0"
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), BASELINE_REV],
            check=True,
            capture_output=True,
        )
        try:
            subprocess.run(
                ["make", "-s", "-C", str(tree / "sql"), f"PG_CONFIG={pg_config}"],
                check=True,
                capture_output=True,
            )
            shutil.copyfile(
                tree / "sql" / "office.so", config("--pkglibdir") / f"{BASELINE_EXTENSION}.so"
            )
            script = (tree / "sql" / "office--0.4.0.sql").read_text()
            extension = config("--sharedir") / "extension"
            (extension / f"{BASELINE_EXTENSION}--0.4.0.sql").write_text(
                script.replace("'$libdir/office'", f"'$libdir/{BASELINE_EXTENSION}'")
            )
            (extension / f"{BASELINE_EXTENSION}.control").write_text(
                "comment = 'office 0.4.0, the benchmark baseline (bench/governance.py)'\n"
                "default_version = '0.4.0'\nrelocatable = false\nschema = office\n"
            )
        finally:
            subprocess.run(
                ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )


@contextlib.contextmanager
def database(dsn: str, name: str, extension: str) -> Iterator[str]:
    """A fresh database of the server with ``extension`` installed; its URL."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    url = dsn.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE EXTENSION {extension}")
        conn.execute(
            "SELECT office.upsert_agent('bench-agent-' || n, 'bench')"
            f" FROM generate_series(0, {AGENTS - 1}) n"
        )
    try:
        yield url
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def settle(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


def enqueue_op(tag: str) -> Any:
    def call(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
        key = f"fresh-{tag}-{worker}-{i}"
        row = conn.execute(
            ENQUEUE, (f"bench-agent-{i % AGENTS}", key, f"task-{key}"), prepare=True
        ).fetchone()
        assert row is not None and row[0] == "queued", row

    return call


def cycle_op(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
    row = conn.execute(CLAIM, (f"w{worker}",), prepare=True).fetchone()
    assert row is not None, "the queued runs ran out"
    conn.execute(FINISH, row, prepare=True)


def refill(url: str, serial: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE office.runs CASCADE")
        enqueue_backlog(conn, "bench-agent-", AGENTS, serial, CYCLE_RUNS)
    settle(url)


def pgbench_tps(binary: str, url: str, script: str, seconds: float) -> tuple[float, float]:
    """(tps, average latency in ms) of one pgbench client running ``script``."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as file:
        file.write(script)
        file.flush()
        out = subprocess.run(
            [binary, "-n", "-M", "prepared", "-f", file.name, "-c", "1", "-j", "1",
             "-T", str(max(1, round(seconds))), url],
            capture_output=True,
            text=True,
            check=True,
        ).stdout  # fmt: skip
    tps = re.search(r"tps = ([\d.]+)", out)
    latency = re.search(r"latency average = ([\d.]+) ms", out)
    assert tps is not None and latency is not None, out
    return float(tps.group(1)), float(latency.group(1))


def ab_against_baseline(dsn: str, seconds: float, rounds: int, pgbench: str | None) -> list[str]:
    install_baseline(_pg_config(dsn))
    best: dict[tuple[str, str], float] = {}
    bench_tps: dict[str, float] = {}
    with (
        database(dsn, "governance_old", BASELINE_EXTENSION) as old,
        database(dsn, "governance_new", "office") as new,
    ):
        for version, url in (("0.4.0", old), ("0.5.0", new)):
            with psycopg.connect(url) as conn:
                row = conn.execute("SELECT office.schema_version()").fetchone()
            assert row is not None and row[0] == version, (url, row)
        serial = 0
        for round_ in range(rounds):
            # ABBA: whichever goes second in a round meets a warmer cache and a
            # later checkpoint, so the order turns each round.
            pair = [("0.4.0", old), ("0.5.0", new)]
            for version, url in pair if round_ % 2 == 0 else pair[::-1]:
                settle(url)
                rate = run_sync(url, 1, seconds, enqueue_op(f"{version}-{round_}")).rate
                best[(version, "enqueue")] = max(best.get((version, "enqueue"), 0.0), rate)
                refill(url, serial)
                serial += CYCLE_RUNS
                cycle = run_sync(url, 1, seconds, cycle_op).rate
                best[(version, "cycle")] = max(best.get((version, "cycle"), 0.0), cycle)
                print(f"round {round_} {version}: enqueue {rate:8.0f}/s  cycle {cycle:8.0f}/s")
                if pgbench is not None:
                    tps, _ = pgbench_tps(pgbench, url, PGBENCH_ENQUEUE, seconds)
                    bench_tps[version] = max(bench_tps.get(version, 0.0), tps)
                    print(f"round {round_} {version}: pgbench enqueue {tps:8.0f} tps")
    rows = []
    for case, label in CASE_LABELS:
        old_rate, new_rate = best[("0.4.0", case)], best[("0.5.0", case)]
        ratio = old_rate / new_rate  # time per call, 0.5.0 over 0.4.0
        verdict = "met" if ratio <= 1.05 else "**missed**"
        rows.append(
            f"| {label} | {1000 / old_rate:.3f} ms | {1000 / new_rate:.3f} ms"
            f" | {ratio:.3f}× | {verdict} |"
        )
    if bench_tps:
        ratio = bench_tps["0.4.0"] / bench_tps["0.5.0"]
        verdict = "met" if ratio <= 1.05 else "**missed**"
        rows.append(
            f"| pgbench fresh-key `enqueue_run` | {bench_tps['0.4.0']:,.0f} tps |"
            f" {bench_tps['0.5.0']:,.0f} tps | {ratio:.3f}× | {verdict} |"
        )
    return [
        "No policy rows: 0.5.0 against 0.4.0 on one cluster, one connection, best of"
        f" {rounds} rounds of {seconds:g} s, the two databases in turn (the first of"
        " each round alternating).",
        "",
        "| case | 0.4.0 | 0.5.0 | time 0.5.0 / 0.4.0 | target ≤ 1.05× |",
        "|---|---|---|---|---|",
        *rows,
    ]


def look_at_every_agent(conn: psycopg.Connection[Any]) -> None:
    """Unfiltered claims until every readiness row has been looked at once
    (deleted for a busy agent, delayed for a held one): the steady state."""
    while True:
        row = conn.execute("SELECT id FROM office.claim_run('w')").fetchone()
        assert row is None, "nothing is claimable"
        due = conn.execute(DUE_ROWS).fetchone()
        if due is None or due[0] == 0:
            return


def held_against_busy(dsn: str, seconds: float) -> list[str]:
    results: dict[tuple[str, int], float] = {}
    for kind in KINDS:
        with database(dsn, f"governance_{kind.split(',')[0]}", "office") as url:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SET office.notify = off")
                for low in range(0, HELD_AGENTS, SETUP_CHUNK):
                    conn.execute(
                        "SELECT count(office.upsert_agent('hold-' || n, 'held'))"
                        " FROM generate_series(%s::int, %s::int) n",
                        (low, low + SETUP_CHUNK - 1),
                    )
                # One run per agent, claimed: busy keeps the claim, held
                # finishes it under a cooldown of an hour.
                enqueue_backlog(conn, "hold-", HELD_AGENTS, 0, HELD_AGENTS)
                if kind == "held":
                    conn.execute(HOLD)
                elif kind == "busy, policy elsewhere":
                    conn.execute(ELSEWHERE)
                finish = "PERFORM office.finish_run(r.id, r.attempt);" if kind == "held" else ""
                for low in range(0, HELD_AGENTS, SETUP_CHUNK):
                    conn.execute(
                        "DO $$DECLARE r record; BEGIN"
                        f" FOR n IN {low} .. {low + SETUP_CHUNK - 1} LOOP"
                        "   SELECT c.id, c.attempt INTO r"
                        f"   FROM office.claim_run('w', 'hold-' || n) c; {finish}"
                        " END LOOP; END$$"
                    )
            queued = 0
            for size in HELD_SIZES:
                with psycopg.connect(url, autocommit=True) as conn:
                    enqueue_backlog(conn, "hold-", HELD_AGENTS, HELD_AGENTS + queued, size - queued)
                    queued = size
                    look_at_every_agent(conn)
                settle(url)

                def call(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
                    row = conn.execute(CLAIM, (f"w{worker}",), prepare=True).fetchone()
                    assert row is None, "nothing is claimable"

                rate = run_sync(url, 1, seconds, call).rate
                results[(kind, size)] = rate
                print(f"{kind} agents, {size:,} queued: {1000 / rate:.3f} ms per claim_run()")
    header = " | ".join(f"{size:,} queued" for size in HELD_SIZES)
    rows = []
    for kind, label in zip(KINDS, KIND_LABELS, strict=True):
        cells = " | ".join(f"{1000 / results[(kind, size)]:.3f} ms" for size in HELD_SIZES)
        rows.append(f"| {HELD_AGENTS:,} agents {label} | {cells} |")
    last = HELD_SIZES[-1]
    ratio = results[("busy", last)] / results[("held", last)]
    same_path = results[("busy, policy elsewhere", last)] / results[("held", last)]
    return [
        f"`claim_run()` finding nothing, {HELD_AGENTS:,} agents with queued runs, one connection,"
        f" {seconds:g} s per cell. At {last:,} queued, held costs {ratio:.2f}× busy, and"
        f" {same_path:.2f}× busy on the same (PL/pgSQL) path: while a budget, cooldown or run"
        " cap exists anywhere, `claim_run` runs its PL/pgSQL definition.",
        "",
        f"| agents | {header} |",
        "|---|---|---|",
        *rows,
    ]


def explain_cost(dsn: str, seconds: float, pgbench: str | None) -> list[str]:
    with database(dsn, "governance_explain", "office") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            enqueue_backlog(conn, "bench-agent-", 1, 0, EXPLAIN_RUNS)
        settle(url)

        def call(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
            row = conn.execute(EXPLAIN, ("bench-agent-0",), prepare=True).fetchone()
            assert row == (50,), row

        rate = run_sync(url, 1, seconds, call).rate
        lines = [
            f"`explain_agent` of an agent with {EXPLAIN_RUNS:,} queued runs (50 rows):"
            f" {1000 / rate:.3f} ms per call from Python (target < 5 ms)"
        ]
        if pgbench is not None:
            _, latency = pgbench_tps(pgbench, url, PGBENCH_EXPLAIN, seconds)
            lines[0] += f", {latency:.3f} ms average latency under pgbench"
        lines[0] += "."
        return lines


def main() -> None:
    parser = bench_parser(__doc__, "governance")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--pgbench", default=default_pgbench(), help="the pgbench binary")
    args = parser.parse_args()
    body = [
        "## Wake governance: no policy against 0.4.0, held agents, `explain_agent`",
        "",
        f"Command: `bash bench/run.sh governance` ({args.seconds:g} s per case).",
        f"Machine: {machine_line(args.dsn)}.",
        "",
        *ab_against_baseline(args.dsn, args.seconds, args.rounds, args.pgbench),
        "",
        *held_against_busy(args.dsn, args.seconds),
        "",
        *explain_cost(args.dsn, args.seconds, args.pgbench),
    ]
    publish("\n".join(body), "governance", args.write)


if __name__ == "__main__":
    main()
