"""claim_run through a PL/Proxy proxy with 2 and 4 partitions versus directly
on a shard, in one run (docs/scale-out.md, capacity model).

    python -m bench.proxy_claim --dsn postgresql://postgres@HOST:PORT/postgres [--seconds 5]

The server of --dsn must have ``office`` and ``plproxy`` available; the
benchmark creates its own databases there (dropped at the end): a direct
shard, and for each partition count a proxy over that many shard databases
(one partition per shard, ``officectl cluster init``). Each connection
claims and finishes the runs of its own agent (``claim_run(worker, agent)``
+ ``finish_run``), or any run (``claim_run(worker)`` + ``finish_run``), in a
closed loop; agent ``j`` lives in partition ``j mod partitions``, so one
connection uses partition 0 (the first shard asked when the proxy locates
an id) and four spread over every shard.
"""

from __future__ import annotations

import itertools
from typing import Any

import psycopg
from psycopg import conninfo, sql

from bench.common import bench_parser, machine_line, publish, run_sync
from controlplane.scaleout import cluster

PARTITION_COUNTS = (2, 4)
CONNECTIONS = (1, 4)
AGENTS = 4
#: Queued runs per agent before each measured case: more than a case drains.
RUNS = 3_000
CASES = ("claim_run(worker, agent) + finish", "claim_run(worker) + finish")
PREFIX = "office_bench_pxc"

_serial = itertools.count(1)


def _database(admin: str, name: str, *, create: bool) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo.conninfo_to_dict(admin)
    return " ".join(
        f"{k}={v}"
        for k, v in {**params, "dbname": name}.items()
        if k in {"host", "port", "user", "dbname"}
    )


def _top_up(dsn: str, agent: str) -> None:
    """RUNS queued runs of ``agent`` on the shard ``dsn`` (keyless, one task
    each, so none coalesces), written by the shard's own enqueue_run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET office.notify = off")  # nobody listens
        row = conn.execute(
            "SELECT count(*) FROM office.runs WHERE agent_profile_id = %s AND status = 'queued'",
            (agent,),
        ).fetchone()
        missing = RUNS - (row[0] if row else 0)
        if missing > 0:
            first = next(_serial) * 1_000_000  # task ids apart from every earlier top-up
            conn.execute(
                "SELECT count(office.enqueue_run(%s, 'bench', task_id => 'bench-task-' || n))"
                " FROM generate_series(%s::bigint, %s::bigint) n",
                (agent, first, first + missing - 1),
            )
        conn.execute(
            "DELETE FROM office.runs WHERE agent_profile_id = %s AND status = 'finished'", (agent,)
        )
        conn.execute("VACUUM ANALYZE office.runs")


class Target:
    """Where the calls go (a shard, or a proxy) and where each agent's runs live."""

    def __init__(self, label: str, dsn: str, agents: list[str], homes: list[str]) -> None:
        self.label, self.dsn, self.agents, self.homes = label, dsn, agents, homes

    def refill(self) -> None:
        for agent, home in zip(self.agents, self.homes, strict=True):
            _top_up(home, agent)


def _direct(admin: str) -> Target:
    dsn = _database(admin, f"{PREFIX}_direct", create=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION office")
        agents = [f"bench-agent-{j}" for j in range(AGENTS)]
        for agent in agents:
            conn.execute("SELECT office.upsert_agent(%s, 'bench')", (agent,))
    return Target("direct shard", dsn, agents, [dsn] * AGENTS)


def _proxied(admin: str, partitions: int) -> Target:
    shards = [
        _database(admin, f"{PREFIX}_{partitions}_s{p}", create=True) for p in range(partitions)
    ]
    proxy = _database(admin, f"{PREFIX}_{partitions}_proxy", create=True)
    cluster.init_cluster(proxy, shards, partitions)
    agents: list[str] = []
    homes: list[str] = []
    with psycopg.connect(proxy, autocommit=True) as px:
        for n in itertools.count():
            if len(agents) == AGENTS:
                break
            ws = f"bench-{n}"
            row = px.execute("SELECT office._partition(%s)", (ws,)).fetchone()
            if row is not None and row[0] == len(agents) % partitions:
                agents.append(f"bench-agent-{ws}")
                px.execute("SELECT office.upsert_agent(%s, %s)", (agents[-1], ws))
                homes.append(shards[row[0]])
    return Target(f"proxy, {partitions} partitions", proxy, agents, homes)


def op(target: Target, case: str) -> Any:
    by_agent = case == CASES[0]

    def call(conn: psycopg.Connection[Any], worker: int, i: int) -> None:
        if by_agent:
            claim = conn.execute(
                "SELECT id, attempt FROM office.claim_run(%s, %s)",
                (f"w{worker}", target.agents[worker]),
                prepare=True,
            )
        else:
            claim = conn.execute(
                "SELECT id, attempt FROM office.claim_run(%s)", (f"w{worker}",), prepare=True
            )
        row = claim.fetchone()
        if row is not None:
            conn.execute("SELECT office.finish_run(%s, %s)", row, prepare=True)
        else:
            # Any-run claims skip the agents other connections are claiming
            # right now, so all of them can be passed over at once; an own
            # agent with queued runs is always claimable.
            assert not by_agent, "the queued runs ran out"

    return call


def main() -> None:
    parser = bench_parser(__doc__, "proxy_claim")
    args = parser.parse_args()
    admin = args.dsn
    targets = [_direct(admin), *(_proxied(admin, p) for p in PARTITION_COUNTS)]
    try:
        rates: dict[tuple[str, str, int], float] = {}
        for case in CASES:
            for n in CONNECTIONS:
                for target in targets:
                    target.refill()
                    rate = run_sync(target.dsn, n, args.seconds, op(target, case)).rate
                    rates[(target.label, case, n)] = rate
                    print(f"{target.label:24} {case:36} {n} conn {rate:8.0f}/s", flush=True)
        machine = machine_line(admin)
    finally:
        for name in [f"{PREFIX}_direct"] + [
            f"{PREFIX}_{p}_{db}"
            for p in PARTITION_COUNTS
            for db in ["proxy", *(f"s{s}" for s in range(p))]
        ]:
            _database(admin, name, create=False)
    direct = targets[0].label
    rows = []
    for case in CASES:
        for n in CONNECTIONS:
            base = rates[(direct, case, n)]
            cells = [f"{base:.0f}"]
            for target in targets[1:]:
                rate = rates[(target.label, case, n)]
                cells.append(f"{rate:.0f} ({rate / base:.2f})")
            rows.append(f"| {case} | {n} | {' | '.join(cells)} |")
    header = " | ".join(f"{t.label} (calls/s, / direct)" for t in targets[1:])
    body = "\n".join(
        [
            "## `claim_run` through the proxy (PL/Proxy)",
            "",
            f"Command: `python -m bench.proxy_claim --dsn DSN --seconds {args.seconds:g}`"
            " (shards and proxies are databases of the one server of DSN).",
            f"Machine: {machine}.",
            "",
            "A call is one claim and its finish (two proxied calls through a proxy); an",
            "any-run claim can find nothing while the other connections claim (counted).",
            "Each connection uses its own agent; agent j lives in partition j mod partitions,",
            "one partition per shard database. The proxy locates an agent or run by asking",
            "the shards in turn, so a call costs up to one round trip per shard more than",
            "directly.",
            "",
            f"| case | connections | direct (calls/s) | {header} |",
            "|---|---|---|" + "---|" * (len(targets) - 1),
            *rows,
        ]
    )
    publish(body, "proxy_claim", args.write)


if __name__ == "__main__":
    main()
