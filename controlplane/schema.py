"""The SQL of the office extension, as files and as scripts.

One source of truth for both install paths:

* the extension path (``CREATE EXTENSION office``) uses the scripts as they are;
* the plain path (``officectl migrate`` through yoyo, for managed PostgreSQL)
  uses the same scripts after :func:`plain_sql` has removed the two things that
  only make sense inside ``CREATE EXTENSION``.

The install script of the current version is the capability files
``sql/[0-9][0-9]_*.sql`` concatenated in name order — exactly what
``sql/Makefile`` builds with ``cat``. Earlier versions are frozen under
``sql/released/`` and the steps between versions live under ``sql/upgrades/``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

EXTENSION = "office"

_PACKAGE_DIR = Path(__file__).resolve().parent


def sql_dir() -> Path:
    """The directory holding ``office.control`` and the capability files.

    A wheel carries it inside the package (``controlplane/_sql``); a source
    checkout (editable install, tests) has it at the repository root.
    """
    packaged = _PACKAGE_DIR / "_sql"
    return packaged if packaged.is_dir() else _PACKAGE_DIR.parent / "sql"


def current_version() -> str:
    """The ``default_version`` of ``office.control``: what a fresh install gets."""
    control = (sql_dir() / "office.control").read_text(encoding="utf-8")
    match = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.MULTILINE)
    if match is None:
        raise RuntimeError("office.control has no default_version")
    return match.group(1)


def capability_files() -> list[Path]:
    """The files whose concatenation is the current version's install script."""
    return sorted(sql_dir().glob("[0-9][0-9]_*.sql"))


def install_script(version: str | None = None) -> str:
    """The full install script of ``version`` (default: the current one)."""
    if version is None or version == current_version():
        return "".join(p.read_text(encoding="utf-8") for p in capability_files())
    frozen = sql_dir() / "released" / f"{EXTENSION}--{version}.sql"
    if not frozen.is_file():
        raise LookupError(f"no install script for office version {version!r}")
    return frozen.read_text(encoding="utf-8")


def released_versions() -> list[str]:
    """The versions frozen in ``sql/released/``, oldest first."""
    names = (sql_dir() / "released").glob(f"{EXTENSION}--*.sql")
    return sorted((p.stem.split("--")[1] for p in names), key=version_key)


def versions() -> list[str]:
    """Every version, oldest first: the released ones, then the current one."""
    return [*released_versions(), current_version()]


def upgrade_steps() -> list[tuple[str, str]]:
    """Every ``(from, to)`` pair with an upgrade script, oldest first."""
    steps = []
    for path in (sql_dir() / "upgrades").glob(f"{EXTENSION}--*--*.sql"):
        _, source, target = path.stem.split("--")
        steps.append((source, target))
    return sorted(steps, key=lambda step: version_key(step[0]))


def upgrade_script(source: str, target: str) -> str:
    path = sql_dir() / "upgrades" / f"{EXTENSION}--{source}--{target}.sql"
    if not path.is_file():
        raise LookupError(f"no upgrade script from office {source!r} to {target!r}")
    return path.read_text(encoding="utf-8")


_GUARD = re.compile(r"^\\echo .*\\quit\s*$", re.MULTILINE)
_CONFIG_DUMP = re.compile(r"^SELECT pg_catalog\.pg_extension_config_dump\(.*\);\s*$", re.MULTILINE)


def plain_sql(script: str) -> str:
    """An extension script made applicable outside ``CREATE EXTENSION``.

    Removes the ``\\echo … \\quit`` guard (psql-only) and the
    ``pg_extension_config_dump`` calls (they may only run inside an extension
    script; outside one, pg_dump dumps the tables' rows anyway).
    """
    return _CONFIG_DUMP.sub("", _GUARD.sub("", script))


def install_extension_files(extension_dir: Path) -> list[Path]:
    """Write the control file and every install/upgrade script into a
    PostgreSQL ``share/extension`` directory; return the paths written."""
    extension_dir.mkdir(parents=True, exist_ok=True)
    written = []
    control = extension_dir / f"{EXTENSION}.control"
    shutil.copyfile(sql_dir() / "office.control", control)
    written.append(control)
    current = extension_dir / f"{EXTENSION}--{current_version()}.sql"
    current.write_text(install_script(), encoding="utf-8")
    written.append(current)
    for folder, pattern in (
        ("released", "*.sql"),
        ("released", "*.control"),
        ("upgrades", "*.sql"),
    ):
        for path in sorted((sql_dir() / folder).glob(f"{EXTENSION}--{pattern}")):
            target = extension_dir / path.name
            shutil.copyfile(path, target)
            written.append(target)
    # The proxy extension (docs/scale-out.md): harmless where PL/Proxy is absent,
    # since only CREATE EXTENSION office_proxy needs it.
    for path in sorted((sql_dir() / "proxy").glob("office_proxy*")):
        if path.suffix in (".control", ".sql") and path.name != "proxy_base.sql":
            target = extension_dir / path.name
            shutil.copyfile(path, target)
            written.append(target)
    return written


def version_key(version: str) -> tuple[int, ...]:
    """``"0.10.0"`` as ``(0, 10, 0)``, for comparing versions; a text that is
    not dotted integers (a database's schema_version() gone wrong) is ``()``,
    before every version."""
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return ()
