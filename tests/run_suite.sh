#!/usr/bin/env bash
# The whole test run behind `make test`:
#   1. the unit tier (tests/unit), pure Python, pointed at a port nothing
#      listens on: it needs no server, and a failure there stops the run
#      before any cluster is started;
#   2. install the extension into PostgreSQL 15 (PGXS) and start a throwaway
#      PostgreSQL 15 cluster as the `postgres` OS user, data on /dev/shm;
#   3. `make verify` on it (the committed generated files are current), then
#      run the other tiers of pytest against it;
#   4. start the embedded PostgreSQL 18 (the same code `officectl` uses for its
#      default database, with its home on /dev/shm) and run them again;
#   5. ruff and mypy --strict;
#   6. a table of the steps with their times (each pytest step has already
#      printed its tiers, tests/tiers.py).
# Clusters are stopped on every exit path; the exit status is non-zero if any
# step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$ROOT/.venv/bin
PG15_BIN=/usr/lib/postgresql/15/bin
free_port() {  # a TCP port on 127.0.0.1 that nothing is bound to, below the ephemeral range
    python3 "$ROOT/tests/ports.py"
}
PG15_PORT=${OFFICE_TEST_PG15_PORT:-$(free_port)}
PG18_PORT=${OFFICE_TEST_PG18_PORT:-$(free_port)}
PG15_DIR=/dev/shm/office-test-pg15
EMBEDDED_HOME=/dev/shm/office-test-pg18
export OFFICE_HOME=$EMBEDDED_HOME

failures=()

stop_pg15() {
    if [ -f "$PG15_DIR/data/postmaster.pid" ]; then
        runuser -u postgres -- "$PG15_BIN/pg_ctl" -D "$PG15_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
}
stop_pg18() {
    "$BIN/officectl" db stop >/dev/null 2>&1 || true
}
cleanup() {
    stop_pg15
    stop_pg18
    rm -rf "$PG15_DIR" "$EMBEDDED_HOME"
}
trap cleanup EXIT

timings=()
step() {  # step NAME COMMAND... : run, remember a failure and the time, keep going
    local name=$1 started=$SECONDS status=passed; shift
    echo
    echo "=== $name"
    if ! "$@"; then
        failures+=("$name"); status=FAILED
    fi
    timings+=("$(printf '%6d s  %-6s  %s' $((SECONDS - started)) "$status" "$name")")
}

start_pg15() {
    cleanup
    make --no-print-directory install PG_CONFIG="$PG15_BIN/pg_config" >/dev/null || return 1
    mkdir -p "$PG15_DIR" && chown postgres: "$PG15_DIR"
    runuser -u postgres -- "$PG15_BIN/initdb" -D "$PG15_DIR/data" -U postgres --auth=trust -E UTF8 >/dev/null || return 1
    runuser -u postgres -- "$PG15_BIN/pg_ctl" -D "$PG15_DIR/data" -w -l "$PG15_DIR/log" \
        -o "-p $PG15_PORT -c listen_addresses=127.0.0.1 -k $PG15_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
        start >/dev/null
}

start_pg18() {
    "$BIN/officectl" db start --port "$PG18_PORT" \
        --set fsync=off --set synchronous_commit=off --set full_page_writes=off --set max_connections=200
}

run_pytest() {  # run_pytest PORT LABEL: every tier but the unit one
    OFFICE_TEST_HOST=127.0.0.1 OFFICE_TEST_PORT=$1 OFFICE_TEST_USER=postgres OFFICE_TEST_LABEL=$2 \
        "$BIN/pytest" -p no:cacheprovider -q --ignore=tests/unit tests
}

echo "=== unit tier (no server)"
if ! env -u OFFICE_TEST_EXTENSION_DIR OFFICE_TEST_HOST=127.0.0.1 OFFICE_TEST_PORT="$(free_port)" \
        "$BIN/pytest" -p no:cacheprovider -q tests/unit; then
    echo "make test: FAILED: unit tier (the server tiers were not run)"
    exit 1
fi

if start_pg15; then
    step "make verify" make --no-print-directory verify \
        OFFICE_DSN="host=127.0.0.1 port=$PG15_PORT user=postgres dbname=postgres"
    step "pytest on PostgreSQL 15" run_pytest "$PG15_PORT" pg15
else
    failures+=("start PostgreSQL 15"); cat "$PG15_DIR/log" 2>/dev/null
fi
stop_pg15

if start_pg18; then
    step "pytest on embedded PostgreSQL 18" run_pytest "$PG18_PORT" pg18
else
    failures+=("start embedded PostgreSQL 18")
fi
stop_pg18

step "ruff" "$BIN/ruff" check controlplane tests bench tools
step "ruff format" "$BIN/ruff" format --check controlplane tests bench tools
step "mypy --strict" "$BIN/mypy" --strict controlplane tools tests bench

echo
echo "=== steps (each pytest step ends with its tiers' counts and times)"
printf '%s\n' "${timings[@]}"
printf '%6d s  total\n' "$SECONDS"
echo
if [ ${#failures[@]} -eq 0 ]; then
    echo "make test: all steps passed"
    exit 0
fi
printf 'make test: FAILED: %s\n' "${failures[@]}"
exit 1
