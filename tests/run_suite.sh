#!/usr/bin/env bash
# The whole test run behind `make test`:
#   1. the unit tier (tests/unit), pure Python, pointed at a port nothing
#      listens on: it needs no server, and a failure there stops the run
#      before any cluster is started;
#   2. install the extension into PostgreSQL 15 (PGXS) and start a throwaway
#      PostgreSQL 15 cluster as the `postgres` OS user, data on /dev/shm;
#   3. `make verify` on it (the committed generated files are current), then
#      run the other tiers of pytest against it: the C definitions serve
#      (sql/95_native.sql bound them);
#   4. on the same cluster, the concurrency tests again with every native
#      function bound back to PL/pgSQL in each database they make
#      (OFFICE_TEST_DEFINITIONS=plpgsql, tests/harness.py): the race tests and
#      isolation specs, the concurrent callers of the hot path, and the fault
#      tier (SIGKILL, SIGSTOP, a database restarted under a daemon or a
#      worker). So both definitions meet every concurrency test on one server
#      version; tests/sql/test_native_differential.py compares them call by
#      call in step 3;
#   5. start the embedded PostgreSQL 18 (the same code `officectl` uses for its
#      default database, with its home on /dev/shm) and run the tiers again.
#      That pass exists for PL/pgSQL on the newest server and for the embedded
#      path, so it leaves out what does not depend on the test cluster's
#      version and already ran in step 3:
#        - ui: the dashboard's HTML and the demo's report, rendered by
#          Python from rows the sql tier has already checked on 18;
#        - docs: the contract, reference and README checks read files and the
#          catalog (the same scripts on both), the README's shell blocks run
#          on a private embedded database in either pass, and the pg_cron
#          example runs on a throwaway PostgreSQL 15 cluster in either pass;
#        - bench: the benchmarks' own correctness (their SQL is the hot path
#          the sql tier covers);
#        - the two restart tests (a database restarted under the daemon,
#          under a worker) and the migrate-roles tests, which start a
#          throwaway PostgreSQL 15 cluster of their own in either pass
#          (the proxy tier needs plproxy, which the embedded server lacks:
#          it skips itself there);
#        - install/test_embedded.py, which starts embedded PostgreSQL 18
#          homes of its own in either pass;
#   6. ruff, mypy --strict, and clang-format over sql/native/ (make format-check);
#   7. a table of the steps with their times (each pytest step has already
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

run_pytest() {  # run_pytest PORT LABEL [PYTEST ARGS...]: every tier but the unit one, less what ARGS leave out
    local port=$1 label=$2; shift 2
    OFFICE_TEST_DEFINITIONS=installed OFFICE_TEST_HOST=127.0.0.1 OFFICE_TEST_PORT=$port OFFICE_TEST_USER=postgres \
        OFFICE_TEST_LABEL=$label "$BIN/pytest" -p no:cacheprovider -q --ignore=tests/unit "$@" tests
}

# The concurrency tests of step 4, by file or by test (pytest fails on a name
# that is gone, so a rename cannot drop one silently).
PLPGSQL_CONCURRENCY=(
    tests/sql/test_runs_races.py
    tests/sql/test_tasks_races.py
    tests/sql/test_routines_races.py
    tests/sql/test_parent_wake_races.py
    tests/sql/test_isolation_harness.py
    tests/sql/test_wakeups_dispatchers.py
    tests/sql/test_runs_claim.py::test_eight_claimers_a_thousand_times_never_fail_and_never_double_claim
    tests/sql/test_runs_keys.py::test_sixteen_producers_mixing_repeated_keys_over_several_buckets
    tests/sql/test_runs_keys.py::test_two_bulk_calls_in_opposite_orders_never_deadlock
    tests/sql/test_runs_ready.py::test_claimers_producers_and_finishers_never_leave_a_claimable_run_behind
    tests/sql/test_runs_requeue.py::test_cancel_runs_racing_claims_never_fails_and_counts_what_it_cancelled
    tests/sql/test_runs_requeue.py::test_bulk_requeues_and_cancels_in_opposite_orders_never_deadlock
    tests/sql/test_runs_bulk.py::test_opposite_bulk_calls_with_fresh_keys_do_not_deadlock
    tests/daemon/test_daemon_faults.py
    tests/daemon/test_daemon.py::test_database_restarted_under_the_daemon
    tests/daemon/test_daemon.py::test_two_daemons_never_handle_an_event_a_tick_or_a_wakeup_twice
    tests/daemon/test_daemon.py::test_a_dead_workers_claim_is_recovered_and_its_late_finish_refused
    tests/daemon/test_worker.py::test_forty_runs_over_eight_agents_are_each_finished_once
    tests/daemon/test_worker.py::test_a_heartbeating_run_is_never_recovered
    tests/daemon/test_worker.py::test_a_frozen_worker_loses_its_run_and_its_late_outcome_is_refused
    tests/daemon/test_worker.py::test_sigterm_hands_back_a_run_longer_than_the_grace
    tests/daemon/test_worker.py::test_database_restarted_under_a_worker
)
run_pytest_plpgsql() {  # run_pytest_plpgsql PORT: step 4
    OFFICE_TEST_DEFINITIONS=plpgsql OFFICE_TEST_HOST=127.0.0.1 OFFICE_TEST_PORT=$1 OFFICE_TEST_USER=postgres \
        OFFICE_TEST_LABEL=pg15plpgsql "$BIN/pytest" -p no:cacheprovider -q "${PLPGSQL_CONCURRENCY[@]}"
}

# What step 5 leaves out (the header says why).
PG18_LEAVES_OUT=(
    --ignore=tests/ui
    --ignore=tests/docs
    --ignore=tests/bench
    --deselect=tests/daemon/test_daemon.py::test_database_restarted_under_the_daemon
    --deselect=tests/daemon/test_worker.py::test_database_restarted_under_a_worker
    --ignore=tests/install/test_migrate_roles.py
    --ignore=tests/install/test_embedded.py
)

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
    step "pytest on PostgreSQL 15, PL/pgSQL definitions" run_pytest_plpgsql "$PG15_PORT"
else
    failures+=("start PostgreSQL 15"); cat "$PG15_DIR/log" 2>/dev/null
fi
stop_pg15

if start_pg18; then
    step "pytest on embedded PostgreSQL 18" run_pytest "$PG18_PORT" pg18 "${PG18_LEAVES_OUT[@]}"
else
    failures+=("start embedded PostgreSQL 18")
fi
stop_pg18

step "ruff" "$BIN/ruff" check controlplane tests bench tools
step "ruff format" "$BIN/ruff" format --check controlplane tests bench tools
step "mypy --strict" "$BIN/mypy" --strict controlplane tools tests bench
step "clang-format" make --no-print-directory format-check

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
