"""The isolation-spec harness itself: it runs a real race and fails when the
interleaving's output differs from what is expected."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests import harness


def test_roles_race_spec_passes() -> None:
    result = harness.run_isolation_spec("roles_race")
    assert result.passed, result.diffs or result.output


def test_harness_fails_on_a_different_outcome(tmp_path: Path) -> None:
    # Same spec, but expect the second installer to have created the role too:
    # the harness must report the mismatch rather than pass.
    expected = tmp_path / "expected"
    shutil.copytree(harness.ISOLATION_DIR / "expected", expected)
    out = expected / "roles_race.out"
    text = out.read_text()
    wrong = text.replace("created\n-------\nf      \n", "created\n-------\nt      \n")
    assert wrong != text
    out.write_text(wrong)
    result = harness.run_isolation_spec("roles_race", expected_dir=expected)
    assert not result.passed
    assert "-t      \n+f      " in result.diffs
