"""Start the next version: ``python -m tools.bump X.Y.Z`` (``make bump VERSION=X.Y.Z``).

The current version CUR (``sql/office.control``) is frozen and NEXT begins:

* ``sql/released/office--CUR.sql``: the built script of CUR (the capability
  files concatenated, as ``sql/Makefile`` builds it), with its sha256 and the
  step into CUR's pinned in ``tests/vectors/released.sha256``;
* NEXT in every place that names the current version: ``sql/office.control``,
  ``office.schema_version()`` (``sql/00_schema.sql``), ``pyproject.toml``,
  ``controlplane/__init__.py``, ``sql/proxy/office_proxy.control`` and the
  name of the generated proxy script;
* ``sql/upgrades/office--CUR--NEXT.sql``: what an upgrade to NEXT needs before
  any change is made, the new ``schema_version()`` and the native handshake
  of ``sql/95_native.sql`` again (the library is NEXT's now);
* a ``CHANGELOG.md`` section for NEXT, CUR's marked frozen today, and the
  versions table of ``docs/development.md``.

Every new text is computed before anything is written, so a refusal (a
malformed VERSION, one not above CUR, a file not as expected) leaves the
tree as it was. The yoyo migrations need nothing: ``controlplane.migrate``
derives them from the released and upgrade scripts.
"""

from __future__ import annotations

import datetime
import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]

_VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")


class BumpError(Exception):
    """The bump was refused; nothing was written."""


def parse_version(text: str) -> tuple[int, int, int]:
    match = _VERSION.fullmatch(text)
    if match is None:
        raise BumpError(f"VERSION {text!r} is not MAJOR.MINOR.PATCH (digits, no leading zeros)")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


@dataclass
class Plan:
    """What the bump writes (path -> text) and removes, relative to the root."""

    current: str
    next: str
    writes: dict[Path, str] = field(default_factory=dict)
    removes: list[Path] = field(default_factory=list)


def _read(root: Path, path: Path) -> str:
    full = root / path
    if not full.is_file():
        raise BumpError(f"{path} is missing")
    return full.read_text(encoding="utf-8")


def _replace_once(text: str, pattern: str, replacement: str, where: Path) -> str:
    new, count = re.subn(pattern, replacement, text, count=2, flags=re.MULTILINE)
    if count != 1:
        raise BumpError(f"{where}: expected exactly one match of {pattern!r}, found {count}")
    return new


def current_version(root: Path) -> str:
    control = _read(root, Path("sql/office.control"))
    match = re.search(r"^default_version = '([^']*)'$", control, re.MULTILINE)
    if match is None:
        raise BumpError("sql/office.control has no default_version")
    return match.group(1)


def _started_step(current: str, next_: str, native: str) -> str:
    handshake = native[native.index("DO $native$") :]
    return (
        f"\\echo Use \"ALTER EXTENSION office UPDATE TO '{next_}'\" to load this file. \\quit\n"
        f"-- office {current} -> {next_}, written by hand: exactly the statements that take a\n"
        f"-- {current} database to what the capability files install from nothing\n"
        "-- (tests/install/test_install_paths.py compares the two catalogs). Sections follow the\n"
        "-- capability files; the version and the native handshake stay last.\n"
        "--\n"
        "-- Pin the search_path first, for the reason 00_schema.sql gives.\n"
        "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);\n"
        "\n"
        "-- === version ==================================================================\n"
        "\n"
        "CREATE OR REPLACE FUNCTION office.schema_version() RETURNS text\n"
        "    LANGUAGE sql STABLE PARALLEL SAFE\n"
        "    SET search_path = pg_catalog, pg_temp\n"
        f"    RETURN '{next_}';\n"
        "\n"
        "-- === native helpers (95_native.sql) ==========================================\n"
        "-- The handshake again, after the version above: the library installed with\n"
        "-- these scripts is this version's, and binds only where it says so.\n"
        f"{handshake}"
    )


def plan(root: Path, version: str, today: datetime.date) -> Plan:
    """Every file the bump to ``version`` writes, with its new text."""
    parse_version(version)
    current = current_version(root)
    if _VERSION.fullmatch(current) is None:
        raise BumpError(f"sql/office.control's default_version {current!r} is malformed")
    if parse_version(version) <= parse_version(current):
        raise BumpError(f"VERSION {version} is not greater than the current version {current}")
    result = Plan(current, version)
    writes = result.writes
    sql = root / "sql"

    released = Path(f"sql/released/office--{current}.sql")
    if (root / released).exists():
        raise BumpError(f"{released} exists already: {current} was frozen before")
    started = Path(f"sql/upgrades/office--{current}--{version}.sql")
    if (root / started).exists():
        raise BumpError(f"{started} exists already")
    sources = sorted(sql.glob("[0-9][0-9]_*.sql"))
    if not sources:
        raise BumpError("sql/ has no capability files [0-9][0-9]_*.sql")
    built = "".join(p.read_text(encoding="utf-8") for p in sources)
    writes[released] = built

    pins_path = Path("tests/vectors/released.sha256")
    pins = _read(root, pins_path)
    if pins and not pins.endswith("\n"):
        pins += "\n"
    new_pins = [(built.encode("utf-8"), f"released/office--{current}.sql")]
    into = sorted((sql / "upgrades").glob(f"office--*--{current}.sql"))
    for step in into:
        new_pins.append((step.read_bytes(), f"upgrades/{step.name}"))
    for data, name in new_pins:
        if f"  {name}\n" in pins:
            raise BumpError(f"{pins_path} pins {name} already")
        pins += f"{hashlib.sha256(data).hexdigest()}  {name}\n"
    writes[pins_path] = pins

    control = Path("sql/office.control")
    writes[control] = _replace_once(
        _read(root, control),
        rf"^default_version = '{re.escape(current)}'$",
        f"default_version = '{version}'",
        control,
    )
    proxy_control = Path("sql/proxy/office_proxy.control")
    writes[proxy_control] = _replace_once(
        _read(root, proxy_control),
        rf"^default_version = '{re.escape(current)}'$",
        f"default_version = '{version}'",
        proxy_control,
    )
    proxy_script = Path(f"sql/proxy/office_proxy--{current}.sql")
    writes[Path(f"sql/proxy/office_proxy--{version}.sql")] = _read(root, proxy_script)
    result.removes.append(proxy_script)

    schema_file = Path("sql/00_schema.sql")
    writes[schema_file] = _replace_once(
        _read(root, schema_file),
        r"^(CREATE FUNCTION office\.schema_version\(\) RETURNS text\n(?:    .*\n)*?"
        rf"    RETURN '){re.escape(current)}(';)$",
        rf"\g<1>{version}\g<2>",
        schema_file,
    )
    pyproject = Path("pyproject.toml")
    writes[pyproject] = _replace_once(
        _read(root, pyproject),
        rf'^version = "{re.escape(current)}"$',
        f'version = "{version}"',
        pyproject,
    )
    package = Path("controlplane/__init__.py")
    writes[package] = _replace_once(
        _read(root, package),
        rf'^__version__ = "{re.escape(current)}"$',
        f'__version__ = "{version}"',
        package,
    )

    writes[started] = _started_step(current, version, _read(root, Path("sql/95_native.sql")))

    changelog = Path("CHANGELOG.md")
    writes[changelog] = _replace_once(
        _read(root, changelog),
        rf"^## {re.escape(current)} \(unreleased\)$",
        f"## {version} (unreleased)\n\n## {current} (frozen {today.isoformat()})",
        changelog,
    )
    development = Path("docs/development.md")
    writes[development] = _replace_once(
        _read(root, development),
        rf"^\| {re.escape(current)} \(current\) \| (.*)"
        r" \| built from the capability files \| — \|$",
        f"| {current} | \\g<1> | `released/office--{current}.sql` | `upgrades/{started.name}` |\n"
        f"| {version} (current) | (see the upgrade script) | built from the capability files | — |",
        development,
    )
    return result


def apply(root: Path, bump: Plan) -> None:
    """Write the plan's files (the texts are all computed already)."""
    for path, text in bump.writes.items():
        (root / path).write_text(text, encoding="utf-8")
    for path in bump.removes:
        (root / path).unlink()


@click.command()
@click.argument("version")
@click.option(
    "--root", type=click.Path(file_okay=False, path_type=Path), default=ROOT, show_default=True
)
def main(version: str, root: Path) -> None:
    """Freeze the current version and start VERSION."""
    try:
        bump = plan(root, version, datetime.datetime.now(datetime.UTC).date())
    except BumpError as exc:
        click.echo(f"bump refused, nothing written: {exc}", err=True)
        sys.exit(2)
    apply(root, bump)
    click.echo(f"office {bump.current} frozen, {bump.next} started:")
    for path in [*bump.writes, *bump.removes]:
        click.echo(f"  {'removed ' if path in bump.removes else ''}{path}")
    click.echo(
        "next: make install, then make generate (docs/reference.md names the version),"
        " make verify, and commit."
    )


if __name__ == "__main__":
    main()
