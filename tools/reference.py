"""``docs/reference.md``, generated from the installed catalog.

    python -m tools.reference > docs/reference.md

installs this checkout's SQL into a scratch database on the server of
``--dsn`` (default ``OFFICE_DSN``, else the embedded database), renders every
function, view, table and result type of schema ``office`` from the catalog
(``pg_proc``, ``pg_get_function_arguments``, ``pg_get_function_result``,
``obj_description``, ACLs, ``pg_trigger``) and drops the scratch database.
``--installed`` renders the database at ``--dsn`` as it is instead.

The text of each object is its ``COMMENT ON`` (what ``\\df+ office.*`` shows),
so the reference and psql never disagree; ``tests/docs/test_reference.py``
regenerates the file against a fresh database and fails when it differs from
the committed one.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import click
import psycopg
from psycopg import sql

from controlplane import schema

ROLES = ("office_producer", "office_worker", "office_reader", "office_admin")

#: docs/api.md §7, and the one transient error callers should retry.
SQLSTATES = (
    (
        "22023",
        "an argument is invalid: empty required text, non-object payload, unknown "
        "state/status/policy/cause, key longer than 512 characters, payload over 1 MiB",
    ),
    ("OFA01", "agent not found"),
    ("OFA02", "agent does not accept runs (paused, stopped, pending_approval)"),
    ("OFT01", "task not found"),
    ("OFR01", "routine / routine trigger / routine run / wakeup request not found"),
    (
        "40001",
        "serialization failure: an enqueue met a concurrent one for the same bucket inside a "
        "REPEATABLE READ or SERIALIZABLE transaction; retry the transaction",
    ),
)
_KNOWN = {code for code, _ in SQLSTATES}
_RAISED = re.compile(r"ERRCODE\s*=\s*'([0-9A-Z]{5})'")
_CALLED = re.compile(r"\boffice\.(\w+)\s*\(")
_MENTIONED = re.compile(r"\b(OF[A-Z0-9]{3}|[0-9]{2}[0-9A-Z]{3})\b")
_VOLATILITY = {"i": "IMMUTABLE", "s": "STABLE", "v": "VOLATILE"}


@dataclass
class Function:
    name: str
    signature: str  # regprocedure text
    arguments: str
    result: str
    comment: str
    language: str
    volatility: str
    security_definer: bool
    source: str
    result_type: str  # the composite type of the result, if any
    granted: list[str]
    triggers: list[str] = field(default_factory=list)
    sqlstates: list[str] = field(default_factory=list)

    @property
    def internal(self) -> bool:
        return self.name.startswith("_")

    @property
    def trigger(self) -> bool:
        return self.result == "trigger"


@dataclass
class Relation:
    name: str
    kind: str  # r (table), v (view), c (composite type)
    comment: str
    columns: list[tuple[str, str, str]]  # name, type, comment
    granted: list[str]


# --- reading the catalog ----------------------------------------------------------


def _granted(acl: Any) -> list[str]:
    """The office roles (and PUBLIC, which should never appear) in an ACL."""
    if acl is None:
        return ["PUBLIC"]
    grantees = set()
    for item in acl:
        grantee = str(item).split("=", 1)[0]
        if grantee in ROLES:
            grantees.add(grantee)
        elif grantee == "":
            grantees.add("PUBLIC")
    return sorted(grantees, key=lambda r: ROLES.index(r) if r in ROLES else -1)


# A statement of sql/95_native.sql: a C binding, or the PL/pgSQL copy a C
# definition hands calls to (made only where the library is installed).
_NATIVE_STATEMENT = re.compile(
    r"CREATE OR REPLACE FUNCTION office\.(\w+)\([^;]*?LANGUAGE (c|plpgsql)\b", re.S
)


def portable(name: str) -> tuple[str, str]:
    """The language and body of a function's definition in the capability
    files, the PL/pgSQL one that sql/95_native.sql replaces where the library
    is installed: the reference documents what every install has, so it is
    the same on either (tests/docs/test_reference.py runs on both)."""
    for path in schema.capability_files():
        text = path.read_text(encoding="utf-8")
        found = re.search(
            rf"CREATE FUNCTION office\.{name}\(.*?LANGUAGE (\w+).*?AS \$\$(.*?)\$\$;", text, re.S
        )
        if found:
            return found.group(1), found.group(2)
    raise RuntimeError(f"office.{name} has a native binding but no definition in sql/")


def natives_and_copies() -> tuple[set[str], set[str]]:
    """The functions sql/95_native.sql binds to C where the library is
    installed, and the PL/pgSQL copies it makes there for them."""
    text = (schema.sql_dir() / "95_native.sql").read_text(encoding="utf-8")
    statements = _NATIVE_STATEMENT.findall(text)
    return (
        {name for name, language in statements if language == "c"},
        {name for name, language in statements if language == "plpgsql"},
    )


def read_functions(conn: psycopg.Connection[Any]) -> list[Function]:
    rows = conn.execute(
        """
        SELECT p.proname, p.oid::regprocedure::text,
               pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
               coalesce(obj_description(p.oid, 'pg_proc'), ''), l.lanname, p.provolatile,
               p.prosecdef, coalesce(p.prosrc, ''),
               CASE WHEN t.typtype = 'c' THEN format_type(p.prorettype, NULL) ELSE '' END,
               p.proacl::text[]
          FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace
          JOIN pg_language l ON l.oid = p.prolang
          JOIN pg_type t ON t.oid = p.prorettype
         WHERE n.nspname = 'office'
         ORDER BY p.proname COLLATE "C", p.oid::regprocedure::text COLLATE "C"
        """
    ).fetchall()
    functions = [
        Function(
            name=name,
            signature=signature,
            arguments=arguments,
            result=result,
            comment=comment.strip(),
            language=language,
            volatility=_VOLATILITY.get(volatility, volatility),
            security_definer=bool(definer),
            source=source,
            result_type=result_type,
            granted=_granted(acl),
        )
        for (
            name,
            signature,
            arguments,
            result,
            comment,
            language,
            volatility,
            definer,
            source,
            result_type,
            acl,
        ) in rows
    ]
    natives, copies = natives_and_copies()
    functions = [f for f in functions if f.name not in copies]
    for f in functions:
        if f.name in natives:
            language, f.source = portable(f.name)
            f.language = f"{language} (C where the library is installed: sql/95_native.sql)"
    triggers = conn.execute(
        """
        SELECT t.tgfoid::regprocedure::text, pg_get_triggerdef(t.oid)
          FROM pg_trigger t
          JOIN pg_class c ON c.oid = t.tgrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'office' AND NOT t.tgisinternal
         ORDER BY t.tgname COLLATE "C"
        """
    ).fetchall()
    by_signature = {f.signature: f for f in functions}
    for signature, definition in triggers:
        if signature in by_signature:
            by_signature[signature].triggers.append(_trigger_text(definition))
    _attach_sqlstates(functions)
    return functions


_TRIGGER = re.compile(
    r"^CREATE (?:CONSTRAINT )?TRIGGER (?P<name>\S+) (?P<when>.*?) ON (?P<table>\S+) "
    r"(?:REFERENCING .*? )?FOR EACH (?P<level>ROW|STATEMENT)(?P<cond> WHEN .*)? EXECUTE "
)


def _trigger_text(definition: str) -> str:
    match = _TRIGGER.match(definition)
    if match is None:
        return definition
    text = f"`{match['name']}`: {match['when']} ON {match['table']} FOR EACH {match['level']}"
    return text + (" (with a WHEN condition)" if match["cond"] else "")


def _attach_sqlstates(functions: list[Function]) -> None:
    """The SQLSTATEs of each function: raised in its body or in an internal
    (``_``) helper it calls, or named in its comment. Calls into public
    functions are not followed (a caller may turn their errors into
    outcomes; its comment says so)."""
    by_name: dict[str, list[Function]] = {}
    for f in functions:
        by_name.setdefault(f.name, []).append(f)
    raised_anywhere = {code for f in functions for code in _RAISED.findall(f.source)}
    known = _KNOWN | raised_anywhere

    def raised(name: str, seen: set[str]) -> set[str]:
        if name in seen:
            return set()
        seen.add(name)
        codes: set[str] = set()
        for f in by_name.get(name, []):
            codes |= set(_RAISED.findall(f.source))
            for callee in _CALLED.findall(f.source):
                if callee.startswith("_"):
                    codes |= raised(callee, seen)
        return codes

    for f in functions:
        mentioned = {code for code in _MENTIONED.findall(f.comment) if code in known}
        codes = raised(f.name, set()) | mentioned
        f.sqlstates = sorted(codes, key=lambda c: (c not in _KNOWN, c))


def read_relations(conn: psycopg.Connection[Any]) -> list[Relation]:
    rows = conn.execute(
        """
        SELECT c.oid, c.relname, c.relkind::text,
               -- COMMENT ON TYPE writes the composite's pg_type row, not its pg_class one.
               coalesce(CASE WHEN c.relkind = 'c' THEN obj_description(c.reltype, 'pg_type')
                             ELSE obj_description(c.oid, 'pg_class') END, ''),
               c.relacl::text[]
          FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'office' AND c.relkind IN ('r', 'v', 'c', 'm', 'p')
         ORDER BY c.relname COLLATE "C"
        """
    ).fetchall()
    relations = []
    for oid, name, kind, comment, acl in rows:
        columns = conn.execute(
            """
            SELECT a.attname, format_type(a.atttypid, a.atttypmod),
                   coalesce(col_description(a.attrelid, a.attnum), '')
              FROM pg_attribute a
             WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum
            """,
            (oid,),
        ).fetchall()
        relations.append(
            Relation(
                name=name,
                kind={"m": "v", "p": "r"}.get(kind, kind),
                comment=comment.strip(),
                columns=[(str(n), str(t), str(d).strip()) for n, t, d in columns],
                granted=[] if acl is None else _granted(acl),
            )
        )
    return relations


# --- rendering --------------------------------------------------------------------


def _split_arguments(arguments: str) -> list[str]:
    """``pg_get_function_arguments`` text split at top-level commas."""
    parts, depth, quoted, current = [], 0, False, ""
    for char in arguments:
        if char == "'":
            quoted = not quoted
        elif not quoted and char in "([":
            depth += 1
        elif not quoted and char in ")]":
            depth -= 1
        if char == "," and depth == 0 and not quoted:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def _signature_block(f: Function) -> str:
    arguments = _split_arguments(f.arguments)
    one_line = f"office.{f.name}({', '.join(arguments)})"
    if len(one_line) <= 90:
        head = one_line
    else:
        head = f"office.{f.name}(\n" + ",\n".join(f"    {a}" for a in arguments) + "\n)"
    return f"```sql\n{head}\n  RETURNS {f.result}\n```"


def _columns_text(columns: Iterable[tuple[str, str, str]]) -> str:
    return ", ".join(f"{name} {type_}" for name, type_, _ in columns)


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "", name.lower().replace(" ", "-"))


def _function_section(f: Function, types: dict[str, Relation], level: str = "###") -> list[str]:
    heading = f.name if f.signature.count("(") == 1 else f.signature
    lines = [f"{level} `office.{heading}`", "", _signature_block(f), ""]
    lines.append(f.comment or "*(no comment)*")
    lines.append("")
    facts: list[tuple[str, str]] = []
    if f.result_type and f.result_type.startswith("office."):
        composite = types.get(f.result_type.removeprefix("office."))
        if composite is not None and composite.kind == "c":
            facts.append(("result", f"`{f.result_type}({_columns_text(composite.columns)})`"))
        elif composite is not None:
            facts.append(("result", f"rows of [`{f.result_type}`](#{_anchor(f.result_type)})"))
    if f.sqlstates:
        facts.append(("SQLSTATEs", ", ".join(f"`{c}`" for c in f.sqlstates)))
    if f.triggers:
        facts.append(("fires", "<br>".join(f.triggers)))
    facts.append(("granted to", ", ".join(f.granted) if f.granted else "nobody (owner only)"))
    properties = [f.language, f.volatility] + (["SECURITY DEFINER"] if f.security_definer else [])
    facts.append(("properties", " ".join(properties)))
    lines += ["| | |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in facts]
    lines.append("")
    return lines


def _relation_section(r: Relation, what: str) -> list[str]:
    lines = [f"### `office.{r.name}`", "", r.comment or "*(no comment)*", ""]
    lines += ["| column | type | |", "|---|---|---|"]
    lines += [f"| `{n}` | `{t}` | {d} |" for n, t, d in r.columns]
    lines.append("")
    if what != "type":
        granted = ", ".join(r.granted) if r.granted else "nobody (reached through functions)"
        lines += [f"SELECT granted to: {granted}", ""]
    return lines


def _role_matrix(functions: list[Function], relations: list[Relation]) -> list[str]:
    short = [r.removeprefix("office_") for r in ROLES]
    lines = [
        "Direct grants (`office_admin` is also a member of the other three roles). "
        "Internal `_` functions and trigger functions are left out: they are reached "
        "through the functions below.",
        "",
        "| object | " + " | ".join(short) + " |",
        "|---|" + "---|" * len(ROLES),
    ]
    for f in functions:
        if f.internal or f.trigger:
            continue
        marks = ["x" if role in f.granted else "" for role in ROLES]
        lines.append(f"| `{f.name}()` | " + " | ".join(marks) + " |")
    for kind, label in (("v", "view"), ("r", "table")):
        for r in relations:
            if r.kind == kind and not r.name.startswith("_"):
                marks = ["x" if role in r.granted else "" for role in ROLES]
                lines.append(f"| `{r.name}` ({label}) | " + " | ".join(marks) + " |")
    lines += [
        "",
        "What the grants do not show:",
        "",
        "- **Workers are fenced by their claim.** `heartbeat_run`, `finish_run`, `fail_run`"
        " and `retry_run` act only while the run is claimed with the given `attempt`, and,"
        " when `worker_id` is given, claimed by that worker: the attempt can be read by"
        " every role that may call `get_run`, so a worker passing its id cannot be"
        " impersonated by another. The project's workers always pass it.",
        "- **Poison is the daemon's.** `set_aside` and `release_poison` are `office_admin`'s"
        " only (the daemon's role has it); `office.poison` is read through"
        " `take_poison_reports` and `officectl doctor`.",
        "- **`NOTIFY office_runs` is a wake-up hint, nothing more.** PostgreSQL has no"
        " privilege on channels: any role that can connect may LISTEN and NOTIFY on"
        " `office_runs`. The payload is an agent id that nothing trusts: a worker woken"
        " by it calls `claim_run`, which decides; a forged notification costs one empty"
        " claim, and a missed one is made up by the worker's poll.",
        "",
    ]
    return lines


def render(conn: psycopg.Connection[Any]) -> str:
    """The reference of the office schema installed in ``conn``'s database."""
    version_row = conn.execute("SELECT office.schema_version()").fetchone()
    version = str(version_row[0]) if version_row else "?"
    functions = read_functions(conn)
    relations = read_relations(conn)
    types = {r.name: r for r in relations}
    public = [f for f in functions if not f.internal and not f.trigger]
    internal = [f for f in functions if f.internal or f.trigger]
    views = [r for r in relations if r.kind == "v"]
    tables = [r for r in relations if r.kind == "r"]
    composites = [r for r in relations if r.kind == "c"]

    out = [
        f"# office {version}: SQL reference",
        "",
        "<!-- Generated by `python -m tools.reference > docs/reference.md` from the",
        "     installed catalog. Do not edit: change the COMMENT ON in sql/ and regenerate;",
        "     tests/docs/test_reference.py fails when this file and the catalog differ. -->",
        "",
        "Every function, view, table and result type of schema `office`, read from the",
        "catalog of a fresh install. The text of each object is its `COMMENT ON`, so",
        "`\\df+ office.*` and `\\dv+ office.*` in psql say the same. The contract these",
        "objects implement (names, parameters, outcome words, SQLSTATEs) is",
        "[api.md](api.md); operating them is [operations.md](operations.md).",
        "",
        "A duplicate, a coalesce or a policy skip is an **outcome** (a column of the",
        "result), never an error. *SQLSTATEs* below lists what a function raises in its",
        "own body or in the internal helpers it calls, and what its comment names.",
        "",
        "## Contents",
        "",
        "- [SQLSTATEs](#sqlstates)",
        "- [Roles](#roles)",
        "- [Functions](#functions): "
        + ", ".join(f"[{f.name}](#office{_anchor(f.name)})" for f in public),
        "- [Views](#views): " + ", ".join(f"[{r.name}](#office{_anchor(r.name)})" for r in views),
        "- [Tables](#tables): "
        + ", ".join(f"[{r.name}](#office{_anchor(r.name)})" for r in tables),
        "- [Result types](#result-types): "
        + ", ".join(f"[{r.name}](#office{_anchor(r.name)})" for r in composites),
        "- [Internal and trigger functions](#internal-and-trigger-functions)",
        "",
        "## SQLSTATEs",
        "",
        "| SQLSTATE | when |",
        "|---|---|",
    ]
    out += [f"| `{code}` | {text} |" for code, text in SQLSTATES]
    out += ["", "## Roles", ""]
    out += _role_matrix(functions, relations)
    out += ["## Functions", ""]
    for f in public:
        out += _function_section(f, types)
    out += ["## Views", ""]
    for r in views:
        out += _relation_section(r, "view")
    out += [
        "## Tables",
        "",
        "Tables are reached through the functions above (roles have no privileges on",
        "them); they are listed for reading results and for psql sessions of the owner.",
        "",
    ]
    for r in tables:
        out += _relation_section(r, "table")
    out += ["## Result types", ""]
    for r in composites:
        out += _relation_section(r, "type")
    out += ["## Internal and trigger functions", ""]
    for f in internal:
        out += _function_section(f, types)
    return "\n".join(out).rstrip("\n") + "\n"


# --- a scratch database ------------------------------------------------------------


@contextmanager
def fresh_database(server_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A scratch database on ``server_url``'s server with this checkout's SQL
    installed (plain path: the same catalog as ``CREATE EXTENSION``), dropped
    on the way out."""
    name = f"office_generate_{os.getpid()}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        url = psycopg.conninfo.make_conninfo(server_url, dbname=name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(schema.plain_sql(schema.install_script()).encode())
            yield conn
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def render_fresh(server_url: str) -> str:
    """The reference of a fresh install of this checkout's SQL."""
    with fresh_database(server_url) as conn:
        return render(conn)


def server_url(dsn: str | None) -> str:
    """``dsn``, else the embedded database (started when it is not running)."""
    if dsn:
        return dsn
    from controlplane import embedded

    return embedded.EmbeddedDatabase().ensure_running().url


@click.command()
@click.option("--dsn", envvar="OFFICE_DSN", help="A database on the server to use.")
@click.option(
    "--installed", is_flag=True, help="Render the database at --dsn as it is (no scratch install)."
)
def main(dsn: str | None, installed: bool) -> None:
    """Print docs/reference.md for this checkout's SQL."""
    url = server_url(dsn)
    if installed:
        with psycopg.connect(url, autocommit=True) as conn:
            sys.stdout.write(render(conn))
    else:
        sys.stdout.write(render_fresh(url))


if __name__ == "__main__":
    main()
