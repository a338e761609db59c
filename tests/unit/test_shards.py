"""``controlplane.scaleout.shards`` without a server: the shard databases read from
server office_cluster's options and user mapping, their labels, and the
masking of passwords (the proxy tests run it against PL/Proxy)."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from controlplane.scaleout import shards


def test_partitions_naming_one_connection_string_are_one_database() -> None:
    options = [
        "p0=dbname=a host=h1",
        "p1=dbname=b host=h2 port=5433",
        "p2=dbname=a host=h1",
        "p3=dbname=b host=h2 port=5433",
        "connection_lifetime=1800",
    ]
    found = shards._shards(options, ["user=office", "password=s3cret"])
    assert [(d.label, d.partitions) for d in found] == [("a", (0, 2)), ("b", (1, 3))]
    # The mapping's login is added to each connection string, as PL/Proxy adds it.
    assert conninfo_to_dict(found[1].conninfo) == {
        "dbname": "b",
        "host": "h2",
        "port": "5433",
        "user": "office",
        "password": "s3cret",
    }
    assert "s3cret" not in found[1].masked and "password=***" in found[1].masked


def test_shards_of_one_dbname_are_told_apart_by_host_and_port() -> None:
    found = shards._shards(["p0=dbname=office host=h1", "p1=dbname=office host=h2 port=6000"], [])
    assert [d.label for d in found] == ["office@h1:5432", "office@h2:6000"]


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("host=h password=x dbname=d", "host=h password=*** dbname=d"),
        ("host=h password='a b' dbname=d", "host=h password=*** dbname=d"),
        ("postgresql://u:secret@h:5432/d", "postgresql://u:***@h:5432/d"),
        ("postgresql://u@h/d", "postgresql://u@h/d"),
    ],
)
def test_mask_hides_the_password(given: str, shown: str) -> None:
    assert shards.mask(given) == shown


def test_asyncpg_arguments_of_a_key_value_string() -> None:
    assert shards.asyncpg_arguments("host=h port=6000 user=u dbname=d password=p") == {
        "host": "h",
        "port": 6000,
        "user": "u",
        "password": "p",
        "database": "d",
    }
