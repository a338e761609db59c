"""What every ``officectl`` command shares: the database the group was given,
one-line errors, and output as rich tables or JSON.

Command modules (the rest of :mod:`controlplane.cli`) import from here;
:mod:`controlplane.cli.main` puts them together under the ``officectl`` group.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any, TypeVar

import click
import psycopg
from psycopg_pool import ConnectionPool
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from controlplane import embedded
from controlplane.client import Office
from controlplane.errors import OfficeError
from controlplane.metrics_registry import MetricsPortUnusable
from controlplane.observability import DEDUP_LOGGER

F = TypeVar("F", bound=Callable[..., Any])

stdout = Console()
stderr = Console(stderr=True)

#: Seconds to wait for the database before a command gives up.
CONNECT_TIMEOUT = 10


@dataclass
class Context:
    dsn: str | None
    debug: bool

    def database_url(self, embedded_database: str = embedded.DATABASE) -> str:
        """The explicit DSN, or ``embedded_database`` of the embedded cluster
        (started if needed)."""
        if self.dsn:
            return self.dsn
        status = embedded.EmbeddedDatabase().ensure_running(database=embedded_database)
        url = status.url_of(embedded_database)
        stderr.print(
            f"[dim]using the embedded PostgreSQL {status.server_version} at {url} "
            f"(data: {status.data_dir})[/dim]"
        )
        return url


# --- --dsn, defined once --------------------------------------------------------

_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: URL schemes libpq takes as they are, and the one yoyo users write for
#: psycopg 3 (``postgresql+psycopg://``, as in ``yoyo.ini``), which names the
#: same database. Any other ``+driver`` scheme (``postgres+psycopg``, which
#: neither yoyo nor SQLAlchemy knows, ``postgresql+psycopg2``, ...) is refused
#: rather than guessed at.
_LIBPQ_SCHEMES = ("postgresql", "postgres")
_PSYCOPG_SCHEME = "postgresql+psycopg"


def libpq_dsn(dsn: str) -> str:
    """``dsn`` as libpq takes it: a ``postgresql+psycopg://`` URL becomes the
    same ``postgresql://`` URL; other URLs and key=value DSNs are unchanged.
    Raises ``ValueError`` for a URL of another scheme."""
    match = _URL_SCHEME.match(dsn)
    if match is None or match[1] in _LIBPQ_SCHEMES:
        return dsn
    if match[1] == _PSYCOPG_SCHEME:
        return "postgresql://" + dsn[match.end() :]
    raise ValueError(
        f"{match[1]}:// is not a database URL officectl takes "
        "(postgresql://, postgres:// or postgresql+psycopg://, or a key=value DSN)"
    )


def _dsn_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if not value:
        return None
    try:
        dsn = libpq_dsn(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    # Given after a command's name (``officectl run --dsn ...``) it replaces
    # the group's; on the group there is no Context yet and main() makes one.
    context = ctx.find_object(Context)
    if context is not None:
        context.dsn = dsn
    return dsn


def dsn_option(*, on_group: bool = False) -> Callable[[F], F]:
    """The ``--dsn`` option: on the group (also read from ``OFFICE_DSN``), and
    on the commands that have taken it after their name since 0.1.0 (``run``,
    ``demo``), where it overrides the group's and reaches the command through
    its :class:`Context`."""
    if on_group:
        return click.option(
            "--dsn",
            envvar="OFFICE_DSN",
            callback=_dsn_callback,
            help="postgresql:// URL or key=value DSN of the database "
            "(default: the embedded database).",
        )
    return click.option(
        "--dsn",
        callback=_dsn_callback,
        expose_value=False,
        help="The database, as the group's --dsn (which it overrides).",
    )


def one_line_errors(func: F) -> F:
    """Turn known failures into one clear line and exit status 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context().find_object(Context)
        try:
            return func(*args, **kwargs)
        except (
            OfficeError,
            embedded.EmbeddedError,
            MetricsPortUnusable,
            psycopg.Error,
            ValueError,
            LookupError,
        ) as exc:
            if ctx is not None and ctx.debug:
                raise
            raise click.ClickException(describe(exc)) from None

    return wrapper  # type: ignore[return-value]


def describe(exc: BaseException) -> str:
    """One line for an error: the server's first message line and its SQLSTATE."""
    if isinstance(exc, psycopg.Error):
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        return f"{first} (SQLSTATE {exc.sqlstate})" if exc.sqlstate else first
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- the database -------------------------------------------------------------


def connect(url: str) -> psycopg.Connection[Any]:
    """An autocommit connection; a refused or unreachable server fails at once
    with libpq's message (no pool waiting for a server that is not there).

    Its search_path is pinned to ``pg_catalog, pg_temp``: the commands name
    office's objects in full, and nothing they run may resolve through a path
    that puts someone else's schema first (docs/architecture.md, principle 8)."""
    conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
    conn.execute("SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)")
    return conn


@contextmanager
def open_office(url: str) -> Iterator[Office]:
    """An :class:`Office` client on a one-connection pool, for one command."""
    connect(url).close()  # fail fast, with a clear message, before the pool
    ctx = click.get_current_context(silent=True)
    debug = ctx is not None and (obj := ctx.find_object(Context)) is not None and obj.debug
    if not debug:
        # The command prints every outcome itself; a durable dedup is one of
        # them, not a warning for the operator who asked for it.
        logging.getLogger(DEDUP_LOGGER).setLevel(logging.ERROR)
    pool: ConnectionPool[Any] = ConnectionPool(
        url,
        min_size=1,
        max_size=1,
        kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT},
        timeout=CONNECT_TIMEOUT,
        open=True,
        name="officectl",
    )
    try:
        yield Office(pool=pool)
    finally:
        pool.close()


# --- output -----------------------------------------------------------------------

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def jsonable(value: Any) -> Any:
    """Plain JSON values: models as dicts, enums as their values, times as ISO
    text, durations as seconds, decimals as numbers."""
    if isinstance(value, BaseModel):
        return jsonable(value.model_dump())
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def print_json(value: Any) -> None:
    """One JSON document on stdout (plain print: no wrapping, no markup)."""
    click.echo(json.dumps(jsonable(value), sort_keys=False))


def cell(value: Any) -> str:
    """A table cell: '' for NULL, JSON for objects, ISO text for times."""
    value = jsonable(value)
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def print_table(
    title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str = ""
) -> None:
    """A rich table of ``rows`` (or the ``empty`` line when there are none)."""
    if not rows and empty:
        stdout.print(f"[dim]{empty}[/dim]")
        return
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(cell(v) for v in row))
    stdout.print(table)


def print_record(title: str | None, record: Mapping[str, Any]) -> None:
    """One result row as a two-column table (field, value)."""
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for name, value in record.items():
        table.add_row(name, cell(value))
    stdout.print(table)


def require_function(url: str, signature: str, missing: str, log: logging.Logger) -> None:
    """Refuse to start a long-running command on a reachable database that has
    no ``signature`` (a regprocedure text such as ``office.claim_events(text,
    integer, interval)``): ``missing`` says what to do. A database that cannot
    be reached now is the command's loop to wait for: warn and go on."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT pg_catalog.to_regprocedure(%s) IS NOT NULL", (signature,)
            ).fetchone()
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreachable"
        log.warning("database not reachable yet (%s); starting anyway and retrying", first)
        return
    if not row or not row[0]:
        raise click.ClickException(missing)
