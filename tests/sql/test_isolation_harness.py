"""Every isolation spec (tests/isolation/specs/*.spec, one case each, named by
the spec) against its expected output, and the harness itself: it fails when
an interleaving's output differs from what is expected, and a spec without
expected output is an error, not a pass. The ``_nolock`` specs are controls
(the race with its lock taken out, expected to show the anomaly); the tests
that show they fail against the locked expectation sit with their races."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import harness


@pytest.mark.parametrize("spec", harness.ISOLATION_SPECS)
def test_isolation_spec(spec: str) -> None:
    result = harness.run_isolation_spec(spec)
    assert result.passed, result.diffs or result.output


def test_the_specs_are_found_and_every_expected_output_has_its_spec() -> None:
    assert "roles_race" in harness.ISOLATION_SPECS
    outputs = {p.stem for p in (harness.ISOLATION_DIR / "expected").glob("*.out")}
    assert sorted(outputs - set(harness.ISOLATION_SPECS)) == []


def test_a_spec_without_expected_output_fails(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="roles_race has no expected output"):
        harness.run_isolation_spec("roles_race", expected_dir=tmp_path)


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
