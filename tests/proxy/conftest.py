"""The proxy tier's default topology: a proxy over two shards, in one
cluster and with the second shard in a cluster of its own (module-scoped: a
topology is a few databases to create). A module that needs another shape
defines its own ``topo``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.proxy.topology import Topology, topology


@pytest.fixture(scope="module", params=["one_cluster", "two_clusters"])
def topo(request: pytest.FixtureRequest) -> Iterator[Topology]:
    with topology(request.param) as t:
        yield t


@pytest.fixture
def px(topo: Topology) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the proxy."""
    with psycopg.connect(topo.proxy, autocommit=True) as conn:
        yield conn
