"""Helpers every test module may use: connection facts, one-value queries,
bounded waits, concurrent callers and lock waits, throwaway clusters,
table-read counters, the isolation-spec runner, and the install of office
every test database gets (with the native definitions bound back to PL/pgSQL
when the run asks for PL/pgSQL only)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from controlplane import schema
from tests import ports
from tools import reference

T = TypeVar("T")

HOST = os.environ.get("OFFICE_TEST_HOST", "127.0.0.1")
PORT = int(os.environ.get("OFFICE_TEST_PORT", str(ports.TEST_PORT)))
USER = os.environ.get("OFFICE_TEST_USER", "postgres")
LABEL = os.environ.get("OFFICE_TEST_LABEL", "dev")

ISOLATION_DIR = Path(__file__).parent / "isolation"
ISOLATION_SPECS = sorted(p.stem for p in (ISOLATION_DIR / "specs").glob("*.spec"))
PG_ISOLATION_REGRESS = Path(
    os.environ.get(
        "OFFICE_PG_ISOLATION_REGRESS",
        "/usr/lib/postgresql/15/lib/pgxs/src/test/isolation/pg_isolation_regress",
    )
)
PG15_BIN = Path("/usr/lib/postgresql/15/bin")

# OFFICE_TEST_DEFINITIONS=plpgsql: every office database the tests make has
# its native functions bound back to PL/pgSQL right after CREATE EXTENSION,
# so the concurrency tests meet both definitions on a server with the library
# (tests/run_suite.sh). Unset: the definitions the install bound serve.
DEFINITIONS = os.environ.get("OFFICE_TEST_DEFINITIONS", "installed")
if DEFINITIONS not in ("installed", "plpgsql"):
    raise RuntimeError(f"OFFICE_TEST_DEFINITIONS={DEFINITIONS!r}: 'plpgsql' or unset")
PLPGSQL_ONLY = DEFINITIONS == "plpgsql"

C_FUNCTIONS = (
    "SELECT count(*) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
    " WHERE p.pronamespace = 'office'::regnamespace AND l.lanname = 'c'"
)


def pg_bindir() -> Path:
    """The binaries of the test cluster's PostgreSQL (for a throwaway cluster)."""
    explicit = os.environ.get("OFFICE_TEST_PG_BINDIR")
    if explicit:
        return Path(explicit)
    pg_config = os.environ.get("PG_CONFIG")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], check=True, capture_output=True, text=True)
        return Path(out.stdout.strip())
    return PG15_BIN


def conninfo(dbname: str) -> str:
    """A libpq URL for ``dbname`` on the test cluster."""
    return f"postgresql://{USER}@{HOST}:{PORT}/{dbname}"


def scalar(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    """The first column of the one row ``query`` returns."""
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    """An aware UTC datetime."""
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll ``condition`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.05)


@dataclass
class Outcome:
    """What one concurrent caller returned or raised."""

    value: Any = None
    error: BaseException | None = None


def run_concurrently(
    dsn: str,
    callables: Sequence[Callable[[psycopg.Connection[Any]], T]],
    *,
    autocommit: bool = True,
    timeout: float = 60.0,
) -> list[Outcome]:
    """Run each callable on its own connection, in its own thread, released
    together by a barrier once every connection is open. Returns one
    :class:`Outcome` per callable, in order; never raises a caller's error."""
    outcomes = [Outcome() for _ in callables]
    connections = [psycopg.connect(dsn, autocommit=autocommit) for _ in callables]
    barrier = threading.Barrier(len(callables))

    def worker(index: int) -> None:
        try:
            barrier.wait(timeout)
            outcomes[index].value = callables[index](connections[index])
        except BaseException as exc:
            outcomes[index].error = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(callables))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError("a concurrent caller did not finish (deadlock?)")
    finally:
        for conn in connections:
            conn.close()
    return outcomes


Concurrently = Callable[[Sequence[Callable[[psycopg.Connection[Any]], Any]]], list[Outcome]]
"""The type of the ``concurrently`` fixture: :func:`run_concurrently` bound to
the test's database."""


def values(outcomes: Sequence[Outcome]) -> list[Any]:
    """What each concurrent caller returned, in order; fails the test, naming
    the errors, when any caller raised."""
    errors = [o.error for o in outcomes if o.error is not None]
    assert errors == [], f"callers raised: {errors!r}"
    return [o.value for o in outcomes]


def wait_until_blocked(
    conn: psycopg.Connection[Any], pid: int, what: str = "a lock", timeout: float = 60.0
) -> None:
    """Until backend ``pid`` waits for a lock another backend holds, seen
    from ``conn`` (so a test orders its steps on the lock, not on timing)."""
    wait_for(
        lambda: scalar(conn, "SELECT cardinality(pg_blocking_pids(%s)) > 0", [pid]),
        f"backend {pid} to wait for {what}",
        timeout,
    )


def plpgsql_definitions() -> list[str]:
    """CREATE OR REPLACE statements binding each native function back to its
    definition in the capability files (CREATE OR REPLACE keeps its grants,
    its comment, and the triggers that point at it)."""
    natives, _ = reference.natives_and_copies()
    statements = []
    for name in sorted(natives):
        for path in schema.capability_files():
            found = re.search(
                rf"CREATE FUNCTION office\.{name}\(.*?AS \$\$.*?\$\$;",
                path.read_text("utf-8"),
                re.S,
            )
            if found:
                statements.append(
                    found.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
                )
                break
        else:
            raise AssertionError(f"office.{name}: no definition in the capability files")
    return statements


def bind_plpgsql(conn: psycopg.Connection[Any]) -> None:
    """Bind every native function of this database's office back to PL/pgSQL;
    afterwards no function of schema office is C."""
    for statement in plpgsql_definitions():
        conn.execute(statement)
    left = scalar(conn, C_FUNCTIONS)
    assert left == 0, f"{left} functions of schema office are still C after the bind-back"


def create_office(conn: psycopg.Connection[Any]) -> None:
    """``CREATE EXTENSION office`` on ``conn`` (autocommit), bound back to
    PL/pgSQL when the run is PL/pgSQL only (:data:`PLPGSQL_ONLY`)."""
    conn.execute("CREATE EXTENSION office")
    if PLPGSQL_ONLY:
        bind_plpgsql(conn)


@contextmanager
def _fresh_office_database(name: str) -> Iterator[None]:
    with psycopg.connect(conninfo("postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        with psycopg.connect(conninfo(name), autocommit=True) as conn:
            create_office(conn)
        yield
    finally:
        with psycopg.connect(conninfo("postgres"), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@dataclass
class IsolationResult:
    passed: bool
    output: str
    diffs: str


def run_isolation_spec(
    name: str,
    *,
    expected_dir: Path | None = None,
    dbname: str | None = None,
) -> IsolationResult:
    """Run ``tests/isolation/specs/<name>.spec`` with ``pg_isolation_regress
    --use-existing`` against the test cluster, in a fresh database with
    ``office`` installed (``--use-existing`` creates none), and compare with
    ``expected/<name>.out`` (or with the same file name under ``expected_dir``);
    without that file it raises before running anything."""
    expected = (expected_dir or ISOLATION_DIR / "expected") / f"{name}.out"
    if not expected.is_file():
        raise FileNotFoundError(
            f"isolation spec {name} has no expected output: write {expected}"
            " (a run's output is the interleaving it pins, reviewed by hand)"
        )
    database = dbname or f"office_iso_{LABEL}_{os.getpid()}"
    with (
        _fresh_office_database(database),
        tempfile.TemporaryDirectory(prefix=f"office-iso-{name}-") as tmp,
    ):
        workdir = Path(tmp)
        (workdir / "specs").mkdir()
        shutil.copyfile(
            ISOLATION_DIR / "specs" / f"{name}.spec", workdir / "specs" / f"{name}.spec"
        )
        shutil.copytree(expected_dir or ISOLATION_DIR / "expected", workdir / "expected")
        result = subprocess.run(
            [
                str(PG_ISOLATION_REGRESS),
                "--use-existing",
                f"--host={HOST}",
                f"--port={PORT}",
                f"--user={USER}",
                f"--dbname={database}",
                f"--inputdir={workdir}",
                f"--outputdir={workdir}",
                name,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        diffs_file = workdir / "regression.diffs"
        diffs = diffs_file.read_text() if diffs_file.exists() else ""
        return IsolationResult(result.returncode == 0, result.stdout + result.stderr, diffs)


def _as_postgres(cmd: list[str]) -> list[str]:
    """Run as the ``postgres`` OS user when root (initdb and the server refuse root)."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.getuid() == 0 else cmd


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to right now, below the
    ephemeral range (:mod:`tests.ports`)."""
    return ports.free_port()


class Cluster:
    """A throwaway PostgreSQL cluster (data on /dev/shm, a free port), for the
    tests that stop and start a server under a client: the suite's own cluster
    must never be restarted under the other tests."""

    def __init__(self, bindir: Path) -> None:
        base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
        self.dir = Path(tempfile.mkdtemp(prefix=f"office-pg-{os.getpid()}-", dir=base))
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self.bindir = bindir
        self.data = self.dir / "data"
        self.port = free_port()
        self._pg("initdb", "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8")

    def _pg(self, tool: str, *args: str, check: bool = True) -> None:
        subprocess.run(
            _as_postgres([str(self.bindir / tool), *args]),
            check=check,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE if check else subprocess.DEVNULL,
        )

    def start(self, *, tcp: bool = True) -> None:
        """Start; with ``tcp`` False it listens on its Unix socket only, so a
        client of the TCP URL finds it still down."""
        listen = "127.0.0.1" if tcp else "''"
        options = (
            f"-p {self.port} -c listen_addresses={listen} -k {self.dir} -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
        )
        log = str(self.dir / "log")
        self._pg("pg_ctl", "-D", str(self.data), "-w", "-l", log, "-o", options, "start")

    def stop(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{dbname}"

    def socket_url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{USER}@/{dbname}?host={self.dir}&port={self.port}"

    def conninfo(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={USER} dbname={dbname}"

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def throwaway_cluster(bindir: Path | None = None) -> Iterator[Cluster]:
    """A started :class:`Cluster` of ``bindir`` (default: :func:`pg_bindir`),
    destroyed on the way out."""
    cluster = Cluster(bindir or pg_bindir())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@dataclass(frozen=True)
class TableReads:
    seq_scan: int
    idx_tup_fetch: int


@contextmanager
def table_reads(conn: psycopg.Connection[Any]) -> Iterator[dict[str, TableReads]]:
    """What the statements of the block read of each office table, filled in
    when the block ends: sequential scans and index fetches, the delta of
    ``pg_stat_xact_user_tables`` across the block, which runs in one
    transaction (the counters a backend has not flushed yet carry earlier
    transactions' reads too, so only a delta is this block's)."""
    query = (
        "SELECT relname, seq_scan, coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
        " WHERE schemaname = 'office'"
    )
    reads: dict[str, TableReads] = {}
    with conn.transaction():
        before = {name: (scans, fetches) for name, scans, fetches in conn.execute(query)}
        yield reads
        for name, scans, fetches in conn.execute(query):
            was = before.get(name, (0, 0))
            reads[name] = TableReads(scans - was[0], fetches - was[1])
