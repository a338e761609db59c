"""The tier summary's grouping (tests/tiers.py), pure Python."""

from __future__ import annotations

import pytest

from tests.tiers import tier_of


@pytest.mark.parametrize(
    ("nodeid", "tier"),
    [
        ("tests/sql/test_runs.py::test_a[x]", "sql"),
        ("tests/proxy/deep/test_b.py::test_b", "proxy"),
        ("tests/test_top.py::test_c", "test_top"),
        ("sql/test_runs.py::test_a", "sql"),  # pytest run from inside tests/
    ],
)
def test_a_test_belongs_to_the_first_directory_under_tests(nodeid: str, tier: str) -> None:
    assert tier_of(nodeid) == tier
