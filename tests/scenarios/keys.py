"""The key builders' shared vectors (``tests/vectors/keys.json``), their
signatures (the functions the vectors call, as the catalog declares them,
read from the generated docs/reference.md so the unit tier needs no server),
and one SQL call per vector: what the key tests (both sides) and the
hardening tests check."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

VECTOR_FILE = Path(__file__).parents[1] / "vectors" / "keys.json"

REFERENCE_FILE = Path(__file__).parents[2] / "docs" / "reference.md"


def load_vectors() -> list[dict[str, Any]]:
    vectors: list[dict[str, Any]] = json.loads(VECTOR_FILE.read_text(encoding="utf-8"))["vectors"]
    return vectors


VECTORS = load_vectors()


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    has_default: bool


def reference_signature(function: str, reference: str) -> list[Parameter]:
    """``office.<function>``'s parameters as docs/reference.md prints them:
    that file is rendered from the installed catalog (tools/reference.py) and
    ``make verify`` fails when it is stale, so it is the catalog without a
    server. Exactly one overload, or this fails."""
    blocks = re.findall(
        rf"^```sql\noffice\.{re.escape(function)}\((.*?)\)\n  RETURNS ", reference, re.S | re.M
    )
    assert len(blocks) == 1, f"docs/reference.md has {len(blocks)} signatures of office.{function}"
    parameters = []
    for argument in filter(None, (a.strip() for a in blocks[0].split(","))):
        name, rest = argument.split(" ", 1)
        type_, default, _ = rest.partition(" DEFAULT ")
        parameters.append(Parameter(name, type_, bool(default)))
    return parameters


# The key builders are the functions the vectors call; their parameter names,
# order and types (docs/api.md §1, binding) are the catalog's.
BUILDERS = sorted({vector["function"] for vector in VECTORS})
_REFERENCE = REFERENCE_FILE.read_text(encoding="utf-8")
PARAMETERS: dict[str, list[Parameter]] = {
    name: reference_signature(name, _REFERENCE) for name in BUILDERS
}
SIGNATURES: dict[str, list[tuple[str, str]]] = {
    name: [(p.name, p.type) for p in parameters] for name, parameters in PARAMETERS.items()
}
DEFAULTED: dict[str, list[str]] = {
    name: [p.name for p in parameters if p.has_default] for name, parameters in PARAMETERS.items()
}

# How a vector argument reaches SQL: a schema-qualified cast, so the call
# itself does not depend on the caller's search_path (see test_hardening).
_SQL_CASTS = {
    "text": "pg_catalog.text",
    "text[]": "pg_catalog.text[]",
    "bigint": "pg_catalog.int8",
    "timestamp with time zone": "pg_catalog.timestamptz",
}


@dataclass(frozen=True)
class SqlResult:
    value: str | None = None
    sqlstate: str | None = None
    message: str | None = None


def sql_call(conn: psycopg.Connection[Any], vector: dict[str, Any]) -> SqlResult:
    """One SELECT of ``office.<function>`` in named notation with the vector's
    arguments, under the vector's session TimeZone (if any)."""
    function = vector["function"]
    types = dict(SIGNATURES[function])
    args: dict[str, Any] = vector["args"]
    call = sql.SQL("SELECT office.{}({})").format(
        sql.Identifier(function),
        sql.SQL(", ").join(
            sql.SQL("{} => %s::{}").format(sql.Identifier(name), sql.SQL(_SQL_CASTS[types[name]]))
            for name in args
        ),
    )
    if vector.get("timezone"):
        conn.execute(sql.SQL("SET TimeZone = {}").format(sql.Literal(vector["timezone"])))
    try:
        row = conn.execute(call, list(args.values())).fetchone()
    except psycopg.Error as exc:
        return SqlResult(sqlstate=exc.sqlstate, message=str(exc))
    finally:
        if vector.get("timezone"):
            conn.execute("RESET TimeZone")
    assert row is not None
    return SqlResult(value=row[0])


def check(vector: dict[str, Any], result: SqlResult) -> None:
    if "error" in vector:
        assert result.sqlstate == vector["error"], (
            f"{vector['name']}: expected SQLSTATE {vector['error']}, got {result}"
        )
        assert result.message is not None and vector["error_mentions"] in result.message
    else:
        assert result.sqlstate is None, f"{vector['name']}: unexpected error {result}"
        assert result.value == vector["expected"], vector["name"]


def vector_ids(vectors: list[dict[str, Any]]) -> list[str]:
    return [v["name"] for v in vectors]
