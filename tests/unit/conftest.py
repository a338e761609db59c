"""The unit tier runs first, on a machine without PostgreSQL: the database
fixtures of ``tests/conftest.py`` fail here with a clear message instead of
a refused connection (a test that needs a database belongs to another tier)."""

from __future__ import annotations

import pytest

_NO_SERVER = "tests/unit needs no server: a test that uses a database belongs to another tier"


@pytest.fixture
def office_database() -> None:
    pytest.fail(_NO_SERVER)


@pytest.fixture
def empty_database() -> None:
    pytest.fail(_NO_SERVER)
