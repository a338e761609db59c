#!/usr/bin/env bash
# `make bench`: a durable PostgreSQL 15 cluster (fsync and synchronous_commit
# on, data on the disk under /var/tmp, not /dev/shm), the extension installed
# with PGXS, then each benchmark; results go to docs/benchmarks.md.
# Usage: bash bench/run.sh [enqueue|enqueue_steady|pgbench_enqueue|hotpath|instructions|peers|growth|sweep|claim|ui|wakeup_dispatchers|governance|governance_instructions ...]
# (default: all of them; peers needs the bench extra, which `make bench`
# installs). OFFICE_BENCH_PG_BIN, OFFICE_BENCH_DIR and OFFICE_BENCH_PORT
# choose another PostgreSQL 15 build, data directory (keep it on a disk, not
# tmpfs) and port.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.venv/bin
PG15_BIN=${OFFICE_BENCH_PG_BIN:-/usr/lib/postgresql/15/bin}
PORT=${OFFICE_BENCH_PORT:-26440}  # below the ephemeral range (tests/ports.py)
DIR=${OFFICE_BENCH_DIR:-/var/tmp/office-bench}
SECONDS_PER_CASE=${OFFICE_BENCH_SECONDS:-10}

stop() {
    if [ -f "$DIR/data/postmaster.pid" ]; then
        runuser -u postgres -- "$PG15_BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$DIR"
}
trap stop EXIT
stop
make --no-print-directory install PG_CONFIG="$PG15_BIN/pg_config" >/dev/null
mkdir -p "$DIR" && chown postgres: "$DIR"
runuser -u postgres -- "$PG15_BIN/initdb" -D "$DIR/data" -U postgres --auth=trust -E UTF8 >/dev/null
runuser -u postgres -- "$PG15_BIN/pg_ctl" -D "$DIR/data" -w -l "$DIR/log" \
    -o "-p $PORT -c listen_addresses=127.0.0.1 -k $DIR -c max_connections=50" start >/dev/null
psql -X -q -h 127.0.0.1 -p "$PORT" -U postgres -c "CREATE DATABASE office_bench" postgres
psql -X -q -h 127.0.0.1 -p "$PORT" -U postgres -c "CREATE EXTENSION office" office_bench
DSN="postgresql://postgres@127.0.0.1:$PORT/office_bench"

benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(enqueue enqueue_steady pgbench_enqueue hotpath instructions peers growth sweep claim ui wakeup_dispatchers governance governance_instructions)
for bench in "${benches[@]}"; do
    "$BIN/python" -m "bench.$bench" --dsn "$DSN" --seconds "$SECONDS_PER_CASE" --write docs/benchmarks.md
done
