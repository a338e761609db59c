"""The generated files that are committed, and the check that they are current.

    python -m tools.generated verify [--dsn DSN]    # make verify
    python -m tools.generated write  [--dsn DSN]    # make generate

Each file has one generator, the same function its test uses:

- ``docs/reference.md``: :func:`tools.reference.render` of a fresh install
  (``tests/docs/test_reference.py``);
- ``sql/proxy/office_proxy--<version>.sql``: :func:`controlplane.scaleout.proxy.generate`
  of a shard's catalog, here a fresh install (``tests/proxy/test_proxy.py`` compares
  it with the shards of its topology, where PL/Proxy is installed);
- ``sql/native/constants.h``: :func:`tools.native_constants.render`, the
  names and words the C definitions share with the SQL ones.

They need a PostgreSQL server: ``--dsn`` (default ``OFFICE_DSN``, else the
embedded database) names a database on it, and a scratch database there gets
this checkout's SQL. ``verify`` prints a unified diff of every stale file and
exits 1; ``write`` rewrites them. (``sql/office--<version>.sql``, the built
install script, is not committed: ``sql/Makefile`` concatenates it.)
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import psycopg

from controlplane import schema
from controlplane.scaleout import proxy
from tools import native_constants, reference

ROOT = Path(__file__).resolve().parents[1]

Generator = Callable[[psycopg.Connection[Any]], str]


def generated_files() -> dict[Path, Generator]:
    """Each committed generated file, by path relative to the repository."""
    return {
        Path("docs/reference.md"): reference.render,
        Path("sql/proxy") / f"office_proxy--{schema.current_version()}.sql": proxy.generate,
        Path("sql/native/constants.h"): native_constants.render,
    }


def stale(server: str) -> dict[Path, str]:
    """The generated files whose committed text differs from their
    generator's, with what the generator makes."""
    out: dict[Path, str] = {}
    with reference.fresh_database(server) as conn:
        for path, generate in generated_files().items():
            text = generate(conn)
            committed = ROOT / path
            if not committed.exists() or committed.read_text(encoding="utf-8") != text:
                out[path] = text
    return out


@click.group()
def main() -> None:
    """Check or rewrite the committed generated files."""


@main.command()
@click.option("--dsn", envvar="OFFICE_DSN", help="A database on the server to use.")
def verify(dsn: str | None) -> None:
    """Exit 1, with a diff, when a generated file is not what its generator makes."""
    found = stale(reference.server_url(dsn))
    for path, text in found.items():
        committed = ROOT / path
        old = committed.read_text(encoding="utf-8") if committed.exists() else ""
        sys.stdout.writelines(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"{path} (committed)",
                f"{path} (generated)",
            )
        )
    if found:
        names = ", ".join(str(p) for p in found)
        raise click.ClickException(f"stale generated files: {names}; run `make generate`")
    click.echo(f"generated files are current: {', '.join(map(str, generated_files()))}")


@main.command()
@click.option("--dsn", envvar="OFFICE_DSN", help="A database on the server to use.")
def write(dsn: str | None) -> None:
    """Rewrite every stale generated file."""
    for path, text in stale(reference.server_url(dsn)).items():
        (ROOT / path).write_text(text, encoding="utf-8")
        click.echo(f"wrote {path}")


if __name__ == "__main__":
    main()
