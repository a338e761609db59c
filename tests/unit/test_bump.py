"""tools/bump.py on a copy of the files it reads and writes: after a bump
every version place says the new version and the frozen script is pinned;
a refused bump writes nothing."""

from __future__ import annotations

import datetime
import hashlib
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from controlplane import schema
from tools import bump

ROOT = Path(__file__).resolve().parents[2]
TODAY = datetime.date(2027, 1, 2)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for folder in ("sql/released", "sql/upgrades"):
        shutil.copytree(ROOT / folder, root / folder)
    files = [
        *(p.relative_to(ROOT) for p in (ROOT / "sql").glob("[0-9][0-9]_*.sql")),
        *(p.relative_to(ROOT) for p in (ROOT / "sql/proxy").glob("office_proxy*")),
        Path("sql/office.control"),
        Path("tests/vectors/released.sha256"),
        Path("pyproject.toml"),
        Path("controlplane/__init__.py"),
        Path("CHANGELOG.md"),
        Path("docs/development.md"),
    ]
    for path in files:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, root / path)
    return root


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _next_minor(version: str) -> str:
    major, minor, _ = bump.parse_version(version)
    return f"{major}.{minor + 1}.0"


def test_bump_moves_every_version_place(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    cur = schema.current_version()
    nxt = _next_minor(cur)
    built = "".join(p.read_text(encoding="utf-8") for p in schema.capability_files())

    bump.apply(root, bump.plan(root, nxt, TODAY))

    assert f"default_version = '{nxt}'" in (root / "sql/office.control").read_text()
    assert f"default_version = '{nxt}'" in (root / "sql/proxy/office_proxy.control").read_text()
    assert not (root / f"sql/proxy/office_proxy--{cur}.sql").exists()
    assert (root / f"sql/proxy/office_proxy--{nxt}.sql").read_bytes() == (
        ROOT / f"sql/proxy/office_proxy--{cur}.sql"
    ).read_bytes()
    version_fn = re.search(
        r"CREATE FUNCTION office\.schema_version\(\).*?RETURN '([^']*)';",
        (root / "sql/00_schema.sql").read_text(),
        re.DOTALL,
    )
    assert version_fn is not None and version_fn.group(1) == nxt
    assert re.search(
        rf'^version = "{re.escape(nxt)}"$', (root / "pyproject.toml").read_text(), re.M
    )
    assert f'__version__ = "{nxt}"' in (root / "controlplane/__init__.py").read_text()
    assert bump.current_version(root) == nxt

    frozen = root / f"sql/released/office--{cur}.sql"
    assert frozen.read_text(encoding="utf-8") == built
    pins = {
        name: digest
        for digest, name in (
            line.split("  ", 1)
            for line in (root / "tests/vectors/released.sha256").read_text().splitlines()
        )
    }
    assert pins[f"released/office--{cur}.sql"] == hashlib.sha256(frozen.read_bytes()).hexdigest()
    (into,) = [(s, t) for s, t in schema.upgrade_steps() if t == cur]
    step_into = f"upgrades/office--{into[0]}--{cur}.sql"
    assert pins[step_into] == hashlib.sha256((root / "sql" / step_into).read_bytes()).hexdigest()
    assert set(pins) - set(
        line.split("  ", 1)[1]
        for line in (ROOT / "tests/vectors/released.sha256").read_text().splitlines()
    ) == {f"released/office--{cur}.sql", step_into}

    started = (root / f"sql/upgrades/office--{cur}--{nxt}.sql").read_text()
    assert started.startswith(f"\\echo Use \"ALTER EXTENSION office UPDATE TO '{nxt}'\"")
    assert f"    RETURN '{nxt}';" in started
    assert started.index(f"RETURN '{nxt}'") < started.index("DO $native$")
    assert started.endswith((ROOT / "sql/95_native.sql").read_text().split("DO $native$", 1)[1])

    changelog = (root / "CHANGELOG.md").read_text()
    assert f"## {nxt} (unreleased)\n\n## {cur} (frozen 2027-01-02)\n" in changelog
    assert f"| {nxt} (current) |" in (root / "docs/development.md").read_text()


@pytest.mark.parametrize(
    "version",
    ["", "1", "1.2", "1.2.3.4", "v9.0.0", "01.0.0", "9.0.0-rc1", " 9.0.0", "same", "older"],
)
def test_bad_version_writes_nothing(tmp_path: Path, version: str) -> None:
    root = _copy(tmp_path)
    cur = schema.current_version()
    major, minor, patch = bump.parse_version(cur)
    version = {"same": cur, "older": f"{major}.{minor}.{patch - 1}" if patch else "0.0.1"}.get(
        version, version
    )
    before = _snapshot(root)

    result = CliRunner().invoke(bump.main, [version, "--root", str(root)])

    assert result.exit_code == 2
    assert "nothing written" in result.output and repr(version)[1:-1] in result.output
    assert _snapshot(root) == before


def test_file_not_as_expected_writes_nothing(tmp_path: Path) -> None:
    # The last place the plan edits is missing its line: the earlier ones
    # must not have been written either.
    root = _copy(tmp_path)
    development = root / "docs/development.md"
    development.write_text(development.read_text().replace("(current)", "(now)"))
    before = _snapshot(root)

    result = CliRunner().invoke(
        bump.main, [_next_minor(schema.current_version()), "--root", str(root)]
    )

    assert result.exit_code == 2 and "docs/development.md" in result.output
    assert _snapshot(root) == before
