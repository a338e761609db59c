"""Helpers every test module may use: connection facts, concurrent callers,
and the isolation-spec runner."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql

T = TypeVar("T")

HOST = os.environ.get("OFFICE_TEST_HOST", "127.0.0.1")
PORT = int(os.environ.get("OFFICE_TEST_PORT", "55432"))
USER = os.environ.get("OFFICE_TEST_USER", "postgres")
LABEL = os.environ.get("OFFICE_TEST_LABEL", "dev")

ISOLATION_DIR = Path(__file__).parent / "isolation"
PG_ISOLATION_REGRESS = Path(
    os.environ.get(
        "OFFICE_PG_ISOLATION_REGRESS",
        "/usr/lib/postgresql/15/lib/pgxs/src/test/isolation/pg_isolation_regress",
    )
)


def conninfo(dbname: str) -> str:
    """A libpq URL for ``dbname`` on the test cluster."""
    return f"postgresql://{USER}@{HOST}:{PORT}/{dbname}"


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


@contextmanager
def _fresh_office_database(name: str) -> Iterator[None]:
    with psycopg.connect(conninfo("postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        with psycopg.connect(conninfo(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION office")
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
    ``expected/<name>.out`` (or with the same file name under ``expected_dir``)."""
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
