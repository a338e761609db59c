"""Dashboard benchmark: server time per page of ``officectl ui`` with 1M runs.

    bash bench/run.sh ui

The runs are loaded with one set-based INSERT (the bench is the owner; the
API would take minutes and measure nothing of the dashboard): 1,000 agents,
the newest 5,000 runs queued, 100 claimed, the rest finished, every run
keyed. Then each page is requested in-process through the ASGI app (server
time: what the page costs, without a network), ``--repeat`` times, and the
median and the slowest are reported. With ``auto_explain`` on the pages'
connection, the plan of every statement inside the dashboard's functions is
collected, so the section shows which index each page reads and how many
buffers it touches.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool
from starlette.testclient import TestClient

from bench.common import bench_parser, machine_line, publish
from controlplane.client import Office
from controlplane.ui import create_app
from controlplane.ui.queries import Dashboard, RunFilter

RUNS = 1_000_000
AGENTS = 1_000
QUEUED = 5_000
CLAIMED = 100

LOAD = f"""
TRUNCATE office.runs, office.agent_profiles CASCADE;
INSERT INTO office.agent_profiles (id, workspace_id)
SELECT 'agent-' || lpad(a::text, 4, '0'), 'w' FROM generate_series(1, {AGENTS}) a;
INSERT INTO office.runs (id, agent_profile_id, reason, status, idempotency_key, requested_at,
                         finished_at, claimed_at, claimed_by, heartbeat_at)
SELECT office._uuid_v7(), 'agent-' || lpad((1 + n % {AGENTS})::text, 4, '0'),
       'reason-' || (n % 20), s.status, 'bench:' || n, now(),
       CASE WHEN s.status = 'finished' THEN now() END,
       CASE WHEN s.status = 'claimed' THEN now() END,
       CASE WHEN s.status = 'claimed' THEN 'bench-worker' END,
       CASE WHEN s.status = 'claimed' THEN now() END
  FROM generate_series(1, {RUNS}) n
 CROSS JOIN LATERAL (SELECT CASE
           WHEN n > {RUNS - QUEUED} THEN 'queued'
           WHEN n > {RUNS - QUEUED - AGENTS} AND n % {AGENTS // CLAIMED} = 0 THEN 'claimed'
           ELSE 'finished' END AS status) s;
"""

#: (name, path) of each page measured.
PAGES = (
    ("overview", "/"),
    ("runs, unfiltered", "/runs"),
    ("runs, one agent", "/runs?agent=agent-0007"),
    ("runs, a filter matching nothing", "/runs?reason=nothing"),
    ("runs, key prefix", "/runs?key_prefix=bench%3A99999"),
    ("agents", "/agents"),
    ("run page", "/runs/{run}"),
)


def _load(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as db:
        started = time.perf_counter()
        db.execute(LOAD)
        db.execute("VACUUM ANALYZE office.runs")
        db.execute("VACUUM ANALYZE office.agent_profiles")
        print(f"loaded {RUNS:,} runs in {time.perf_counter() - started:.0f} s", flush=True)
        row = db.execute("SELECT id FROM office.runs ORDER BY id DESC LIMIT 1").fetchone()
        assert row is not None
        return str(row[0])


#: The reads each page makes (the same Dashboard methods the pages call).
READS: dict[str, Callable[[Dashboard, str], object]] = {
    "overview": lambda d, _: (
        d.queue_stats(),
        d.dedup_stats(),
        d.keyless_stats(),
        d.daemon_stats(),
    ),
    "runs, unfiltered": lambda d, _: d.runs(RunFilter()),
    "runs, one agent": lambda d, _: d.runs(RunFilter(agent="agent-0007")),
    "runs, a filter matching nothing": lambda d, _: d.runs(RunFilter(reason="nothing")),
    "runs, key prefix": lambda d, _: d.runs(RunFilter(key_prefix="bench:99999")),
    "agents": lambda d, _: d.agents(),
    "run page": lambda d, run: (d.office.get_run(run), d.office.run_keys(run)),
}


def _plans(dsn: str, page: str, run: str) -> list[str]:
    """The plans of the statements one page's reads run, nested ones
    included, from auto_explain sent to this session as LOG messages."""
    captured: list[str] = []

    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.execute("LOAD 'auto_explain'")
        for setting, value in (
            ("auto_explain.log_min_duration", "0"),
            ("auto_explain.log_analyze", "on"),
            ("auto_explain.log_buffers", "on"),
            ("auto_explain.log_timing", "off"),
            ("auto_explain.log_nested_statements", "on"),
            ("client_min_messages", "log"),
        ):
            conn.execute("SELECT pg_catalog.set_config(%s, %s, false)", (setting, value))
        conn.add_notice_handler(lambda d: captured.append(d.message_primary or ""))

    with ConnectionPool(
        dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, configure=configure
    ) as pool:
        dash = Dashboard(Office(pool=pool))
        READS[page](dash, run)
    return [p for p in captured if "office." in p and "pg_catalog.set_config" not in p]


def _summary(plan: str) -> str:
    """The lines of a plan worth a table cell: nodes with their row counts
    and the shared buffers each read."""
    lines = []
    for line in plan.splitlines():
        text = line.strip()
        if re.match(r"(->\s*)?[A-Z][A-Za-z ]+(Scan|Limit|Sort|Aggregate|Nested Loop|Join)", text):
            lines.append(re.sub(r"\s+\(cost=[^)]*\)", "", text))
        elif text.startswith("Buffers:") and lines:
            lines[-1] += f" [{text}]"
    return "; ".join(lines)


def main() -> None:
    parser = bench_parser(__doc__, "ui")  # --seconds is unused: pages are counted
    parser.add_argument("--repeat", type=int, default=20, help="requests per page")
    args = parser.parse_args()

    newest = _load(args.dsn)
    rows: list[tuple[str, float, float, int]] = []
    with TestClient(create_app(args.dsn), base_url="http://127.0.0.1:8765") as http:
        for name, template in PAGES:
            path = template.format(run=newest)
            status = http.get(path).status_code  # warm: the pool, the plans
            times: list[float] = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                status = http.get(path).status_code
                times.append((time.perf_counter() - started) * 1000)
            rows.append((name, statistics.median(times), max(times), status))
            print(f"{name}: {statistics.median(times):.1f} ms (status {status})", flush=True)

    plans = {name: [_summary(p) for p in _plans(args.dsn, name, newest)] for name, _ in PAGES}

    body: list[str] = [
        "## Dashboard: server time per page with 1M runs",
        "",
        f"Command: `bash bench/run.sh ui` (`python -m bench.ui --dsn … --repeat {args.repeat}`).",
        f"Machine: {machine_line(args.dsn)}.",
        "",
        f"{RUNS:,} runs over {AGENTS:,} agents ({QUEUED:,} queued, {CLAIMED} claimed, the rest"
        " finished, all keyed), loaded set-based and analyzed. Each page requested in-process"
        f" through the ASGI app, {args.repeat} times after one warm-up: server time, no"
        " network.",
        "",
        "| page | median ms | slowest ms | status |",
        "|---|---|---|---|",
    ]
    body += [f"| {n} | {m:.1f} | {s:.1f} | {st} |" for n, m, s, st in rows]
    body += ["", "Plans of the statements inside the dashboard's functions (auto_explain):", ""]
    for name, summaries in plans.items():
        body.append(f"- **{name}**:")
        body += [f"  - `{s}`" for s in summaries if s] or ["  - (no nested statement)"]
    publish("\n".join(body) + "\n", "ui", args.write)


if __name__ == "__main__":
    main()
