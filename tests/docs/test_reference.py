"""``docs/reference.md`` cannot drift from the catalog, and every function and
view of schema ``office`` explains itself (``\\df+ office.*``)."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests import harness
from tools import reference

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"
REGENERATE = "python -m tools.reference > docs/reference.md"


def _assert_same(generated: str, where: str) -> None:
    committed = REFERENCE.read_text(encoding="utf-8")
    if generated == committed:
        return
    diff = "".join(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            generated.splitlines(keepends=True),
            "docs/reference.md (committed)",
            f"docs/reference.md ({where})",
        )
    )
    pytest.fail(f"docs/reference.md is stale; run `{REGENERATE}`\n{diff[:6000]}")


def test_the_reference_is_the_catalog_of_a_fresh_install() -> None:
    _assert_same(reference.render_fresh(harness.conninfo("postgres")), "fresh plain install")


def test_the_extension_install_gives_the_same_reference(dsn: str) -> None:
    """Through the module's command line, on the test database (CREATE EXTENSION)."""
    result = subprocess.run(
        [sys.executable, "-m", "tools.reference", "--dsn", dsn, "--installed"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    _assert_same(result.stdout, "CREATE EXTENSION office")


def test_every_function_and_view_has_a_comment(db: psycopg.Connection[Any]) -> None:
    missing = db.execute(
        """
        SELECT 'function ' || p.oid::regprocedure::text
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'office' AND coalesce(btrim(obj_description(p.oid, 'pg_proc')), '') = ''
        UNION ALL
        SELECT 'view ' || c.oid::regclass::text
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'office' AND c.relkind IN ('v', 'm')
           AND coalesce(btrim(obj_description(c.oid, 'pg_class')), '') = ''
         ORDER BY 1
        """
    ).fetchall()
    assert [m[0] for m in missing] == []


def test_the_reference_lists_every_function(db: psycopg.Connection[Any]) -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    names = [
        r[0]
        for r in db.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'office'"
        ).fetchall()
    ]
    # (the PL/pgSQL copies sql/95_native.sql makes where the library is
    # installed are not in it: the reference is what every install has)
    _, copies = reference.natives_and_copies()
    assert names and all(f"### `office.{name}`" in text for name in names if name not in copies)
    assert "`office.enqueue_result(outcome text, dedup_kind text, run_id text)`" in text
