"""The dashboard's clients: read-only and with actions, each on the data of
the requesting module's ``office`` fixture (every test module says what its
pages show)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from controlplane.ui import create_app
from tests.scenarios.ui import browse


@pytest.fixture
def client(dsn: str, office: psycopg.Connection[Any]) -> Iterator[TestClient]:
    with browse(create_app(dsn)) as http:
        yield http


@pytest.fixture
def actions(dsn: str, office: psycopg.Connection[Any]) -> Iterator[TestClient]:
    with browse(create_app(dsn, allow_actions=True)) as http:
        yield http
