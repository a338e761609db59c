"""Released history is kept, not regenerated: every frozen install script,
secondary control file and upgrade step between released versions keeps the
bytes it was released with. A change to a released version is a new version
with a hand-written upgrade step (docs/development.md)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from controlplane import schema

# `sha256sum` lines, relative to sql/; a line is added when its version is
# frozen and never changed.
PINS = Path(__file__).resolve().parents[1] / "vectors" / "released.sha256"


def pinned() -> dict[str, str]:
    lines = PINS.read_text(encoding="utf-8").splitlines()
    return {name: digest for digest, name in (line.split("  ", 1) for line in lines if line)}


def test_released_files_keep_their_bytes() -> None:
    edited = [
        name
        for name, digest in pinned().items()
        if hashlib.sha256((schema.sql_dir() / name).read_bytes()).hexdigest() != digest
    ]
    assert edited == [], f"released files were edited: {edited}"


def test_every_released_file_is_pinned() -> None:
    # Every frozen script and control file, and every step that leads to a
    # released version (the step into the current version is still open).
    released_dir = schema.sql_dir() / "released"
    released = {p.stem.removeprefix("office--") for p in released_dir.glob("*.sql")}
    expected = {f"released/{p.name}" for p in released_dir.iterdir()}
    expected |= {
        f"upgrades/office--{source}--{target}.sql"
        for source, target in schema.upgrade_steps()
        if target in released
    }
    assert expected == set(pinned())
