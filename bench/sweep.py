"""Stuck-parent sweep benchmark: the cost of one tick as the task table grows.

    bash bench/run.sh sweep

For 10k, 100k and 1M tasks, on a durable cluster, the data is families of a
parent and four children: a few hundred truly stuck parents (their children
finished while the parent had no assignee; assigning it afterwards is what
makes it stuck), 10 % open families (a child in progress), and the rest
parents whose finished wave was delivered - half by the sweep (a receipt and a
finished run), half by the edge path (a finished run, no receipt). Between
two ticks some delivered parents were touched (here: their runs finished),
so a tick starts with a backlog of marked parents that are not stuck.

The bulk rows are loaded with triggers off (session_replication_role =
replica); the changes that make parents worth a look (the assignments of the
stuck parents, the finishing runs) go through the triggers, as they would in
production. Then, at each size:

* one ``sweep_stuck_parents(5)`` with the backlog (it forgets the backlog and
  delivers 5), then the median of five more (5 each);
* the median of five ``list_stuck_parents(100)``;
* for contrast, the median of three reads of the same 100 rows by scanning
  every open parent (``office._scan_stuck_parents``: what the sweep would cost
  without the marks).

Target: from 10k to 1M tasks the sweep and the list grow by less than 3x.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import bench_parser, machine_line, write_section

SIZES = (10_000, 100_000, 1_000_000)
CHILDREN = 4
STUCK = 300
BACKLOG = 200
AGENTS = 64
T0 = "2026-01-01 00:00:00+00"

TABLES = (
    "office.parent_wake_marks, office.parent_child_wake_receipts, office.runs, office.events,"
    " office.tasks, office.agent_profiles"
)

# Family f: parent pNNNNNNN, children pNNNNNNN-c0..c3. The kinds are spread
# over the whole id range (a scan in id order has to walk it): STUCK stuck
# families, every tenth family open, the rest delivered (even f: by the
# sweep, with a receipt; odd f: by the edge path, no receipt). About BACKLOG
# delivered families have their run still queued: it finishes before the
# tick, which marks them.
LOAD = """
SET session_replication_role = replica;
CREATE TEMP TABLE bench_family AS
SELECT f, 'p' || lpad(f::text, 7, '0') AS parent,
       CASE WHEN f %% (%(families)s / %(stuck)s) = 0 AND f / (%(families)s / %(stuck)s) < %(stuck)s
                THEN 'stuck'
            WHEN f %% 10 = 3 THEN 'open'
            ELSE 'delivered' END AS kind,
       f %% (%(families)s / %(backlog)s) = 1 AND f / (%(families)s / %(backlog)s) < %(backlog)s
           AS backlog
  FROM generate_series(0, %(families)s - 1) AS f;
INSERT INTO office.agent_profiles (id, workspace_id, name, status)
SELECT 'agent-' || a, 'w1', '', 'idle' FROM generate_series(0, %(agents)s - 1) AS a;

INSERT INTO office.tasks (id, workspace_id, parent_id, title, state, assignee_agent_profile_id,
                          is_office, is_ephemeral, created_at, updated_at)
SELECT b.parent, 'w1', NULL, '', 'IN_PROGRESS',
       CASE WHEN b.kind = 'stuck' THEN NULL ELSE 'agent-' || (b.f %% %(agents)s) END,
       true, false, %(t0)s::timestamptz, %(t0)s::timestamptz
  FROM bench_family b;

INSERT INTO office.tasks (id, workspace_id, parent_id, title, state, is_office, is_ephemeral,
                          created_at, updated_at)
SELECT b.parent || '-c' || c, 'w1', b.parent, '',
       CASE WHEN b.kind = 'open' AND c = 0 THEN 'IN_PROGRESS'
            WHEN c %% 2 = 0 THEN 'COMPLETED' ELSE 'CANCELLED' END,
       true, false, %(t0)s::timestamptz, %(t0)s::timestamptz + make_interval(secs => c + 1)
  FROM bench_family b, generate_series(0, %(children)s - 1) AS c;

INSERT INTO office.runs (id, agent_profile_id, reason, payload, status, idempotency_key, task_id,
                         requested_at, finished_at)
SELECT 'run-' || b.f, 'agent-' || (b.f %% %(agents)s), 'task_children_completed', '{}',
       CASE WHEN b.backlog THEN 'queued' ELSE 'finished' END,
       'task_children_completed:' || b.parent || ':' || md5(b.parent), b.parent,
       %(t0)s::timestamptz + interval '1 hour',
       CASE WHEN b.backlog THEN NULL ELSE %(t0)s::timestamptz + interval '2 hours' END
  FROM bench_family b WHERE b.kind = 'delivered';

INSERT INTO office.parent_child_wake_receipts (parent_task_id, child_set_key, delivered_run_id,
                                               delivery_operation_id, delivered_at,
                                               child_generation)
SELECT b.parent,
       (SELECT string_agg(b.parent || '-c' || c || ':'
                          || CASE WHEN c %% 2 = 0 THEN 'COMPLETED' ELSE 'CANCELLED' END,
                          ',' ORDER BY c)
          FROM generate_series(0, %(children)s - 1) AS c),
       'run-' || b.f,
       'task_children_completed:' || b.parent || ':' || md5(b.parent),
       %(t0)s::timestamptz + interval '1 hour',
       to_char((%(t0)s::timestamptz + make_interval(secs => %(children)s)) AT TIME ZONE 'UTC',
               'YYYY-MM-DD HH24:MI:SS')
  FROM bench_family b WHERE b.kind = 'delivered' AND b.f %% 2 = 0;
RESET session_replication_role;
"""

# Through the triggers: the stuck parents get their assignee (marks them), the
# backlog's runs finish (marks them).
TOUCH = """
UPDATE office.tasks t SET assignee_agent_profile_id = 'agent-' || (b.f %% %(agents)s)
  FROM bench_family b WHERE b.kind = 'stuck' AND t.id = b.parent;
UPDATE office.runs SET status = 'finished', finished_at = now() WHERE status = 'queued';
DROP TABLE bench_family;
"""

LIST = "SELECT count(*) FROM office.list_stuck_parents(100)"
SCAN = "SELECT count(*) FROM office._scan_stuck_parents(100, 'task_children_completed')"
SWEEP = "SELECT count(*) FILTER (WHERE delivered) FROM office.sweep_stuck_parents(5)"


def script(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> None:
    """Statements separated by ``;`` at line ends, one at a time (server-side
    parameters allow one statement per call)."""
    for statement in sql.split(";\n"):
        if statement.strip():
            conn.execute(statement, params if "%(" in statement else None)


def timed(conn: psycopg.Connection[Any], sql: str) -> tuple[float, Any]:
    start = time.perf_counter()
    row = conn.execute(sql).fetchone()
    return (time.perf_counter() - start) * 1000.0, row[0] if row else None


def median_ms(conn: psycopg.Connection[Any], sql: str, times: int) -> float:
    return statistics.median(timed(conn, sql)[0] for _ in range(times))


def load(conn: psycopg.Connection[Any], tasks: int) -> dict[str, float]:
    families = tasks // (CHILDREN + 1)
    params = {
        "agents": AGENTS,
        "stuck": STUCK,
        "open": families // 10,
        "families": families,
        "children": CHILDREN,
        "backlog": BACKLOG,
        "t0": T0,
    }
    phases: dict[str, float] = {}
    conn.execute(f"TRUNCATE {TABLES} CASCADE")
    start = time.perf_counter()
    script(conn, LOAD, params)
    phases["load"] = time.perf_counter() - start
    start = time.perf_counter()
    conn.execute("VACUUM (ANALYZE) office.tasks, office.runs, office.parent_child_wake_receipts")
    phases["vacuum analyze"] = time.perf_counter() - start
    script(conn, TOUCH, params)
    conn.execute("ANALYZE office.parent_wake_marks")
    return phases


def measure(conn: psycopg.Connection[Any], tasks: int) -> dict[str, Any]:
    phases = load(conn, tasks)
    marked = conn.execute("SELECT count(DISTINCT parent_task_id) FROM office.parent_wake_marks")
    row = marked.fetchone()
    result: dict[str, Any] = {"tasks": tasks, "marked": row[0] if row else 0, **phases}
    result["list_ms"] = median_ms(conn, LIST, 5)
    result["first_sweep_ms"], result["first_delivered"] = timed(conn, SWEEP)
    result["sweep_ms"] = median_ms(conn, SWEEP, 5)
    result["scan_ms"] = median_ms(conn, SCAN, 3)
    result["stuck_left"] = conn.execute(LIST).fetchone()
    return result


# The statements the plans are of, read from the installed functions (not
# copied here, where they would drift): (title, function, the statement's
# first words, {parameter reference: the value to explain it with}).
EXPLAINS: list[tuple[str, str, str, dict[str, str]]] = [
    (
        "list_stuck_parents: the marked parents, one index probe each",
        "office.list_stuck_parents(int, text)",
        "SELECT s.parent_task_id",
        {"list_stuck_parents.max_rows": "100"},
    ),
    (
        "sweep_stuck_parents: forgetting the marked parents that are not stuck",
        "office.sweep_stuck_parents(int)",
        "WITH marked AS (",
        {},
    ),
]
#: For contrast, what the sweep would read without the marks.
SCAN_EXPLAIN = (
    "without the marks (office._scan_stuck_parents): every open parent is read",
    """
    SELECT v.parent_task_id, v.child_set_key, v.newest_child_updated_at
      FROM office._parent_wake_stuck v
     ORDER BY v.parent_task_id COLLATE "C"
     LIMIT 100
    """,
)


def function_statement(
    conn: psycopg.Connection[Any], function: str, starts: str, values: dict[str, str]
) -> str:
    """The statement of ``function``'s body that begins with ``starts``, up to
    its semicolon, with its parameter references replaced by ``values``."""
    row = conn.execute(
        "SELECT prosrc FROM pg_proc WHERE oid = %s::regprocedure", (function,)
    ).fetchone()
    assert row is not None, function
    source = str(row[0])
    begin = source.index(starts)
    statement = source[begin : source.index(";", begin)]
    for reference, value in values.items():
        statement = statement.replace(reference, value)
    return statement


def explain(conn: psycopg.Connection[Any], tasks: int) -> str:
    load(conn, tasks)
    parts = [
        f"Plans on the {tasks:,}-task data set of `bench/sweep.py` (marks: {STUCK} stuck "
        f"parents and a backlog of {BACKLOG} delivered ones), `EXPLAIN (ANALYZE, BUFFERS,"
        " COSTS OFF)` with the functions' `enable_seqscan = off`, timing lines removed.",
    ]
    statements = [
        (title, function_statement(conn, function, starts, values))
        for title, function, starts, values in EXPLAINS
    ]
    conn.execute("SET enable_seqscan = off")
    for title, sql in [*statements, SCAN_EXPLAIN]:
        # The sweep's statement deletes marks: explain it and roll back.
        with conn.transaction(force_rollback=True):
            rows = conn.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}"
            ).fetchall()
        plan = "\n".join(r[0] for r in rows)
        parts += ["", f"### {title}", "", "```", plan, "```"]
    conn.execute("RESET enable_seqscan")
    return "\n".join(parts)


def verdict(growth: float) -> str:
    return "met" if growth < 3.0 else "**missed**"


def main() -> None:
    parser = bench_parser(__doc__, "sweep")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument(
        "--plans",
        type=Path,
        help="write EXPLAIN plans of the largest size into this markdown file's plans section"
        " (default with --write: parent-wake.md beside it)",
    )
    args = parser.parse_args()
    if args.plans is None and args.write is not None:
        args.plans = args.write.parent / "parent-wake.md"
    sizes = [int(s) for s in args.sizes.split(",")]

    results: list[dict[str, Any]] = []
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        for tasks in sizes:
            result = measure(conn, tasks)
            results.append(result)
            print(
                f"{tasks:>9,} tasks: load {result['load']:.1f}s"
                f" + vacuum {result['vacuum analyze']:.1f}s, marked {result['marked']},"
                f" list(100) {result['list_ms']:.2f} ms, first sweep(5)"
                f" {result['first_sweep_ms']:.2f} ms, sweep(5) {result['sweep_ms']:.2f} ms,"
                f" scan {result['scan_ms']:.1f} ms",
                flush=True,
            )
        plans = explain(conn, sizes[-1]) if args.plans else ""

    first, last = results[0], results[-1]

    def growth(key: str) -> float:
        return float(last[key] / first[key]) if first[key] else 0.0

    rows = [
        f"| {r['tasks']:,} | {r['load'] + r['vacuum analyze']:.0f} s | {r['marked']} "
        f"| {r['list_ms']:.2f} | {r['first_sweep_ms']:.2f} | {r['sweep_ms']:.2f} "
        f"| {r['scan_ms']:.1f} |"
        for r in results
    ]
    growth_rows = [
        f"| {name} | {growth(key):.2f}× | < 3× | {verdict(growth(key))} |"
        for name, key in [
            ("`list_stuck_parents(100)`", "list_ms"),
            ("first `sweep_stuck_parents(5)` (with the backlog)", "first_sweep_ms"),
            ("`sweep_stuck_parents(5)`", "sweep_ms"),
        ]
    ]
    body = "\n".join(
        [
            "## Stuck-parent sweep: one tick as the task table grows",
            "",
            "Command: `bash bench/run.sh sweep`.",
            f"Machine: {machine_line(args.dsn)}.",
            "",
            f"Families of a parent and {CHILDREN} children: {STUCK} stuck parents, 10 % open"
            " families, the rest delivered (half with a receipt, half by the edge path only);",
            f"{BACKLOG} delivered parents were touched since the last tick (their runs finished),",
            "so the first tick starts with them marked. Times in milliseconds, one connection;",
            "list and sweep are medians of 5, the scan (every open parent read, no marks: what",
            "a sweep would cost without them) a median of 3.",
            "",
            "| tasks | data load | marked parents | list(100) ms | first sweep(5) ms"
            " | sweep(5) ms | scan ms |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Growth from {first['tasks']:,} to {last['tasks']:,} tasks:",
            "",
            "| operation | growth | target | |",
            "|---|---|---|---|",
            *growth_rows,
        ]
    )
    print(body)
    if args.write:
        write_section(args.write, "sweep", body)
    if args.plans:
        write_section(args.plans, "plans", plans)
        print(plans)


if __name__ == "__main__":
    main()
