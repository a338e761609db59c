"""Enqueue through a PL/Proxy proxy versus directly on a shard, at 1 and 4
connections: the proxy's cost as a ratio (docs/scale-out.md, capacity model).

    python bench/proxy_enqueue.py --proxy DSN --shard DSN [--seconds 5]

The proxy must already serve the shard (officectl cluster init). Each
connection enqueues keyed runs for its own agent, in autocommit.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

import psycopg


def _rate(dsn: str, agents: list[str], seconds: float) -> float:
    counts = [0] * len(agents)
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < stop:
                conn.execute(
                    "SELECT office.enqueue_run(%s, 'bench', idempotency_key => %s)",
                    (agents[i], uuid.uuid4().hex),
                )
                counts[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(agents))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--proxy", required=True)
    parser.add_argument("--shard", required=True)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with psycopg.connect(args.proxy, autocommit=True) as px:
        # Agents whose workspace lands on the given shard's lowest partition.
        part = px.execute(
            "SELECT part FROM office._shards() WHERE shard = %s", (args.shard,)
        ).fetchone()
        if part is None:
            raise SystemExit("--shard must be spelled as in office_cluster's options")
        agents: list[str] = []
        while len(agents) < 4:
            ws = f"bench-{uuid.uuid4().hex[:8]}"
            row = px.execute("SELECT office._partition(%s)", (ws,)).fetchone()
            if row is not None and row[0] == part[0]:
                agent = f"agent-{ws}"
                px.execute("SELECT office.upsert_agent(%s, %s)", (agent, ws))
                agents.append(agent)
    print("| connections | direct (calls/s) | proxy (calls/s) | proxy / direct |")
    print("|---|---|---|---|")
    for n in (1, 4):
        direct = _rate(args.shard, agents[:n], args.seconds)
        proxied = _rate(args.proxy, agents[:n], args.seconds)
        print(f"| {n} | {direct:.0f} | {proxied:.0f} | {proxied / direct:.2f} |")


if __name__ == "__main__":
    main()
