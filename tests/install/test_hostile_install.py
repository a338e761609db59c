"""Installing office into a database whose ``public`` schema an attacker
controls (docs/architecture.md principle 8; docs/api.md Conventions).

Before office is installed, a role that may only create in ``public`` plants
there a look-alike of every function, aggregate, operator and type that
office's objects use, and the variants that an untyped literal or a narrower
argument would prefer to the catalog's own (``text`` where the catalog has
``name`` or ``regclass``, ``int`` where it has ``bigint``, ...). The list comes
from the catalog of a scratch install — the functions and operators bound in
SQL-standard bodies, argument defaults, views, column defaults, constraints,
indexes and triggers, every name called, operator written or type cast to in
a function body, and the types of office's columns and arguments — so a
function added later is covered without editing this file. Every look-alike
records that it ran (a sequence, which no rollback undoes, a WARNING, which no
exception block swallows, and a row saying as whom); a look-alike type is a
domain whose check records it.

The database's own ``search_path`` is ``public, pg_catalog``. office is then
installed by each path — ``CREATE EXTENSION`` as a superuser and as a database
owner who is not one (the extension is trusted), ``officectl migrate``
(released 0.1.0, then every upgrade step), and upgrades of installs made
before anything was planted — and its API is exercised as producer, worker,
reader and admin, through SQL, the Python clients and ``officectl``: a
scenario, the key builders with their vectors (``tests/vectors/keys.json``),
then every other API function of the catalog once with a sample of each
argument type (a new function is exercised without editing this file; one
that cannot be is listed in ``NOT_EXERCISED`` with why, or the test fails).
No look-alike may have run, and nothing office owns may depend on one
(``pg_depend``). A control installs the released 0.3.0 the same way and shows
that it does bind and run them, so the check can fail. A schema ``office``
that is already there is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from controlplane.aio import AsyncOffice
from controlplane.cli.main import main as officectl
from controlplane.client import Office
from controlplane.migrate import migrate
from controlplane.observability import DEDUP_LOGGER
from tests import harness
from tests.scenarios.keys import SIGNATURES, VECTORS

SUFFIX = f"{harness.LABEL}_{os.getpid()}"
ATTACKER = f"office_attacker_{SUFFIX}"
OWNER = f"office_hostile_owner_{SUFFIX}"
TEMPLATE = f"office_hostile_tmpl_{SUFFIX}"
SCRATCH = f"office_hostile_scratch_{SUFFIX}"
TARGET = f"office_hostile_{SUFFIX}"
HOSTILE_PATH = "public, pg_catalog"
# The test's own catalog queries must not run planted code either.
PINNED = "-c search_path=pg_catalog,pg_temp"
USERS = {
    role: f"office_hostile_{role.removeprefix('office_')}_{SUFFIX}"
    for role in ("office_producer", "office_worker", "office_reader", "office_admin")
}

# The node trees in which PostgreSQL stores what it bound when an object was
# created, for office's objects (``o`` is the set of office relations).
BOUND_TREES = """
WITH o AS (SELECT c.oid FROM pg_class c WHERE c.relnamespace = 'office'::regnamespace)
SELECT prosqlbody::text FROM pg_proc
 WHERE pronamespace = 'office'::regnamespace AND prosqlbody IS NOT NULL
UNION ALL SELECT proargdefaults::text FROM pg_proc
 WHERE pronamespace = 'office'::regnamespace AND proargdefaults IS NOT NULL
UNION ALL SELECT ev_action::text FROM pg_rewrite WHERE ev_class IN (SELECT oid FROM o)
UNION ALL SELECT adbin::text FROM pg_attrdef WHERE adrelid IN (SELECT oid FROM o)
UNION ALL SELECT conbin::text FROM pg_constraint
 WHERE connamespace = 'office'::regnamespace AND conbin IS NOT NULL
UNION ALL SELECT indexprs::text FROM pg_index
 WHERE indrelid IN (SELECT oid FROM o) AND indexprs IS NOT NULL
UNION ALL SELECT indpred::text FROM pg_index
 WHERE indrelid IN (SELECT oid FROM o) AND indpred IS NOT NULL
UNION ALL SELECT tgqual::text FROM pg_trigger
 WHERE tgrelid IN (SELECT oid FROM o) AND tgqual IS NOT NULL
UNION ALL SELECT typdefaultbin::text FROM pg_type
 WHERE typnamespace = 'office'::regnamespace AND typdefaultbin IS NOT NULL
"""
BOUND_FUNCTION = re.compile(r":(?:funcid|aggfnoid) (\d+)")
BOUND_OPERATOR = re.compile(r":(?:opno|eqop|sortop) (\d+)")
CALLED_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
CAST_TYPE = re.compile(r"::\s*([A-Za-z_][A-Za-z0-9_]*)")
# The pg_catalog base types office's columns, arguments and results have.
USED_TYPES = """
SELECT a.atttypid FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
 WHERE c.relnamespace = 'office'::regnamespace AND a.attnum > 0
UNION SELECT pg_catalog.unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])) FROM pg_proc p
 WHERE p.pronamespace = 'office'::regnamespace
UNION SELECT p.prorettype FROM pg_proc p WHERE p.pronamespace = 'office'::regnamespace
"""
OPERATOR_TOKEN = re.compile(r"[-+*/<>=~!@#%^&|`?]+")

# What the planted objects need: a record that survives a rollback (the
# sequence), one that survives an exception block (the WARNING) and who ran it.
RECORDER = """
CREATE TABLE public.hostile_log (what text, run_as text, session_role text);
CREATE SEQUENCE public.hostile_hits;
GRANT INSERT ON public.hostile_log TO PUBLIC;
GRANT USAGE, UPDATE ON SEQUENCE public.hostile_hits TO PUBLIC;
CREATE FUNCTION public.hostile_hit(what text) RETURNS void
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_catalog.nextval('public.hostile_hits');
    RAISE WARNING 'hostile: % ran as %', what, current_user;
    INSERT INTO public.hostile_log VALUES (what, current_user, session_user);
END
$$;
-- The check of a look-alike type (a domain over the catalog's type).
CREATE FUNCTION public.hostile_seen(what text, value anyelement) RETURNS boolean
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM public.hostile_hit(what);
    RETURN true;
END
$$;
"""

# Argument types a caller's value may match better than the catalog's own:
# an untyped literal prefers the string category (text), a narrower number
# matches an int exactly, a name column matches name exactly, and so on.
ALTERNATIVES = {
    "S": ("text", "name", "character varying"),
    "N": ("integer", "bigint", "numeric", "double precision"),
    "D": ("timestamp with time zone", "timestamp without time zone", "date"),
    "T": ("interval",),
    "U": ("jsonb", "json"),
    "A": ("text[]",),
    "P": ("text", "text[]"),
}
# Types no look-alike can take (only C functions may).
UNPLANTABLE = {'"any"', "internal", "cstring", "trigger", "event_trigger", "language_handler"}
# Polymorphic results a variant without polymorphic arguments turns into text[].
ARRAY_POLYMORPHIC = {"anyarray", "anycompatiblearray"}


@dataclass(frozen=True)
class Routine:
    """One function or aggregate to plant (a look-alike or a variant)."""

    name: str
    args: tuple[str, ...]
    result: str
    kind: str  # f (function) or a (aggregate)
    volatility: str
    returns_set: bool = False
    variadic: bool = False
    outs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Operator:
    name: str
    left: str | None
    right: str
    result: str


@dataclass
class Plan:
    """What to plant, one object per name and argument types."""

    routines: dict[tuple[str, tuple[str, ...]], Routine] = field(default_factory=dict)
    operators: dict[tuple[str, str | None, str], Operator] = field(default_factory=dict)
    types: set[str] = field(default_factory=set)


def _polymorphic(type_name: str) -> bool:
    return type_name.startswith("any")


def _variants(args: tuple[str, ...], categories: tuple[str, ...]) -> set[tuple[str, ...]]:
    """The signature itself, each argument replaced by each alternative of its
    type category, and all arguments text."""
    found = {args}
    for i, category in enumerate(categories):
        for alternative in (*ALTERNATIVES.get(category, ()), "text"):
            found.add((*args[:i], alternative, *args[i + 1 :]))
    if args:
        found.add(tuple("text" for _ in args))
    return {v for v in found if not any(t in UNPLANTABLE for t in v)}


def _concrete_result(result: str, args: tuple[str, ...]) -> str:
    """A polymorphic result needs a polymorphic argument; a variant without
    one returns the plainest concrete type instead."""
    if not _polymorphic(result) or any(_polymorphic(a) for a in args):
        return result
    return "text[]" if result in ARRAY_POLYMORPHIC else "text"


def derive_plan(conn: psycopg.Connection[Any]) -> Plan:
    """What to plant, from the catalog of a database where office is installed."""
    functions: set[int] = set()
    operators: set[int] = set()
    for (tree,) in conn.execute(BOUND_TREES).fetchall():
        functions.update(int(m) for m in BOUND_FUNCTION.findall(tree))
        operators.update(int(m) for m in BOUND_OPERATOR.findall(tree))
    names: set[str] = set()
    tokens: set[str] = set()
    casts: set[str] = set()
    for (body,) in conn.execute(
        "SELECT prosrc FROM pg_proc WHERE pronamespace = 'office'::regnamespace"
    ).fetchall():
        names.update(n.lower() for n in CALLED_NAME.findall(body))
        tokens.update(OPERATOR_TOKEN.findall(body))
        casts.update(n.lower() for n in CAST_TYPE.findall(body))
    plan = Plan()
    plan.types.update(
        str(row[0])
        for row in conn.execute(
            f"""
            SELECT t.typname FROM pg_catalog.pg_type t
            WHERE t.typnamespace = 'pg_catalog'::regnamespace AND t.typtype = 'b'
              AND t.typcategory <> 'A' AND (t.oid IN ({USED_TYPES}) OR t.typname = ANY(%s))
            """,
            (list(casts),),
        ).fetchall()
    )
    for row in conn.execute(
        """
        SELECT p.proname, p.prokind, p.provolatile, p.proretset, p.provariadic <> 0,
               ARRAY(SELECT pg_catalog.format_type(t, NULL)
                     FROM pg_catalog.unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)
                     ORDER BY i),
               ARRAY(SELECT y.typcategory::text
                     FROM pg_catalog.unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)
                     JOIN pg_catalog.pg_type y ON y.oid = a.t ORDER BY i),
               pg_catalog.format_type(p.prorettype, NULL),
               ARRAY(SELECT pg_catalog.format_type(t, NULL)
                     FROM pg_catalog.unnest(p.proallargtypes) WITH ORDINALITY AS a(t, i)
                     WHERE p.proargmodes[i] IN ('o', 't') ORDER BY i),
               ARRAY(SELECT n FROM pg_catalog.unnest(p.proargnames) WITH ORDINALITY AS a(n, i)
                     WHERE p.proargmodes[i] IN ('o', 't') ORDER BY i)
        FROM pg_catalog.pg_proc p
        LEFT JOIN pg_catalog.pg_aggregate g ON g.aggfnoid = p.oid
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND p.prokind IN ('f', 'a') AND coalesce(g.aggkind, 'n') = 'n'
          AND (p.oid = ANY(%s) OR p.proname = ANY(%s))
        """,
        (list(functions), list(names)),
    ).fetchall():
        name, kind, volatility, retset, variadic, args, cats, result, out_types, out_names = row
        if result in UNPLANTABLE:
            continue
        outs = tuple(zip(out_names or (), out_types or (), strict=True))
        for variant in _variants(tuple(args), tuple(cats)):
            if variadic and not variant[-1].endswith("[]") and not _polymorphic(variant[-1]):
                continue  # VARIADIC needs an array (or a polymorphic) type
            plan.routines.setdefault(
                (name, variant),
                Routine(
                    name,
                    variant,
                    _concrete_result(result, variant),
                    kind,
                    volatility,
                    retset,
                    variadic,
                    outs if all(not _polymorphic(t) for _, t in outs) else (),
                ),
            )
    for name, left, right, lcat, rcat, result in conn.execute(
        """
        SELECT o.oprname, pg_catalog.format_type(NULLIF(o.oprleft, 0), NULL),
               pg_catalog.format_type(o.oprright, NULL), l.typcategory::text, r.typcategory::text,
               pg_catalog.format_type(o.oprresult, NULL)
        FROM pg_catalog.pg_operator o
        LEFT JOIN pg_catalog.pg_type l ON l.oid = o.oprleft
        JOIN pg_catalog.pg_type r ON r.oid = o.oprright
        WHERE o.oprnamespace = 'pg_catalog'::regnamespace
          AND (o.oid = ANY(%s) OR o.oprname = ANY(%s))
        """,
        (list(operators), list(tokens)),
    ).fetchall():
        args = (right,) if left is None else (left, right)
        cats = (rcat,) if left is None else (lcat, rcat)
        for variant in _variants(args, cats):
            operator = Operator(
                name,
                None if left is None else variant[0],
                variant[-1],
                _concrete_result(result, variant),
            )
            plan.operators.setdefault((name, operator.left, operator.right), operator)
    return plan


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _record(what: str) -> str:
    """A plpgsql body part that records a run of ``what``."""
    return "PERFORM public.hostile_hit('" + what.replace("'", "''") + "');"


def _aggregate_sql(n: int, r: Routine, volatility: str) -> str:
    """An aggregate whose step and final functions both record a run (the
    final one runs even over no rows)."""
    what = f"public.{r.name}({', '.join(r.args)})"
    state = r.result
    step_args = ", ".join((f"s {state}", *(f"a{i} {t}" for i, t in enumerate(r.args))))
    return (
        f"CREATE FUNCTION public.hostile_step_{n}({step_args}) RETURNS {state}"
        f" LANGUAGE plpgsql {volatility} AS $$ BEGIN {_record(what)} RETURN NULL; END $$;\n"
        f"CREATE FUNCTION public.hostile_final_{n}(s {state}) RETURNS {state}"
        f" LANGUAGE plpgsql {volatility} AS $$ BEGIN {_record(what)} RETURN NULL; END $$;\n"
        f"CREATE AGGREGATE public.{_ident(r.name)}({', '.join(r.args) or '*'}) (SFUNC = "
        f"public.hostile_step_{n}, STYPE = {state}, FINALFUNC = public.hostile_final_{n});"
    )


def _function_sql(r: Routine, volatility: str) -> str:
    what = f"public.{r.name}({', '.join(r.args)})"
    args = [f"a{i} {t}" for i, t in enumerate(r.args)]
    if r.variadic:
        args[-1] = "VARIADIC " + args[-1]
    args += [f"OUT {_ident(o)} {t}" for o, t in r.outs]
    single = r.outs[0][1] if len(r.outs) == 1 else "record" if r.outs else r.result
    returns = ("SETOF " if r.returns_set else "") + single
    finish = "RETURN;" if r.returns_set or r.outs or r.result == "void" else "RETURN NULL;"
    return (
        f"CREATE FUNCTION public.{_ident(r.name)}({', '.join(args)}) RETURNS {returns}"
        f" LANGUAGE plpgsql {volatility} AS $$ BEGIN {_record(what)} {finish} END $$;"
    )


def planting_statements(plan: Plan) -> list[str]:
    """The statements creating every look-alike of ``plan`` in public."""
    out = []
    for n, r in enumerate(sorted(plan.routines.values(), key=repr)):
        volatility = {"i": "IMMUTABLE", "s": "STABLE", "v": "VOLATILE"}[r.volatility]
        out.append(
            _aggregate_sql(n, r, volatility) if r.kind == "a" else _function_sql(r, volatility)
        )
    for n, o in enumerate(sorted(plan.operators.values(), key=repr)):
        operands = ([o.left] if o.left else []) + [o.right]
        what = f"public.{o.name}({', '.join(operands)})"
        args = ", ".join(f"a{i} {t}" for i, t in enumerate(operands))
        sides = (f"LEFTARG = {o.left}, " if o.left else "") + f"RIGHTARG = {o.right}"
        out.append(
            f"CREATE FUNCTION public.hostile_op_{n}({args}) RETURNS {o.result}"
            f" LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN {_record(what)} RETURN NULL; END $$;\n"
            f"CREATE OPERATOR public.{o.name} ({sides}, FUNCTION = public.hostile_op_{n});"
        )
    for name in sorted(plan.types):
        out.append(
            f"CREATE DOMAIN public.{_ident(name)} AS pg_catalog.{_ident(name)}"
            f" CHECK (public.hostile_seen('public.{name}', VALUE))"
        )
    return out


# --- databases and roles ----------------------------------------------------------


def _connect(url: str, *, pinned: bool = True) -> psycopg.Connection[Any]:
    """A connection; ``pinned=False`` keeps the database's (hostile) path."""
    return psycopg.connect(url, autocommit=True, options=PINNED if pinned else None)


def _as(role: str, dbname: str) -> str:
    return f"postgresql://{role}@{harness.HOST}:{harness.PORT}/{dbname}"


def _superuser(db: str) -> str:
    return harness.conninfo(db)


def _owner(db: str) -> str:
    return _as(OWNER, db)


def _drop_everything(admin: psycopg.Connection[Any]) -> None:
    for name in (TARGET, TEMPLATE, SCRATCH):
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
    for role in (ATTACKER, OWNER, *USERS.values()):
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@dataclass
class Planted:
    plan: Plan
    statements: list[str]
    refused: list[str]


def _create_database(name: str, template: str) -> None:
    with _connect(harness.conninfo("postgres")) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(template), sql.Identifier(OWNER)
            )
        )


def plant(dbname: str, statements: list[str]) -> list[str]:
    """Plant the look-alikes in public as the attacker, who may create only
    there; return the statements PostgreSQL refused."""
    refused = []
    with _connect(harness.conninfo(dbname)) as conn:
        conn.execute(
            sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(ATTACKER))
        )
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(ATTACKER)))
        conn.execute(RECORDER)
        for statement in statements:
            try:
                conn.execute(statement)
            except psycopg.Error as exc:
                refused.append(f"{statement[:120]}: {exc}")
    return refused


def make_hostile(dbname: str) -> None:
    """The database's own search_path puts public first."""
    with _connect(harness.conninfo("postgres")) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} SET search_path = {}").format(
                sql.Identifier(dbname), sql.SQL(HOSTILE_PATH)
            )
        )


@pytest.fixture(scope="module")
def planted() -> Iterator[Planted]:
    """The plan (from a scratch install), a template database holding every
    look-alike in public, the attacker, the database owner and the login roles
    of the exercise."""
    with _connect(harness.conninfo("postgres")) as admin:
        _drop_everything(admin)
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(SCRATCH))
        )
        with _connect(harness.conninfo(SCRATCH)) as scratch:
            scratch.execute("CREATE EXTENSION office")
            plan = derive_plan(scratch)
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(SCRATCH)))
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(ATTACKER)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(OWNER)))
        for office_role, user in USERS.items():
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                    sql.Identifier(user), sql.Identifier(office_role)
                )
            )
        try:
            _create_database(TEMPLATE, "template0")
            statements = planting_statements(plan)
            yield Planted(plan, statements, plant(TEMPLATE, statements))
        finally:
            _drop_everything(admin)


@pytest.fixture
def target(planted: Planted) -> Iterator[str]:
    """The name of this test's database (``OWNER`` owns it), dropped afterwards."""
    try:
        yield TARGET
    finally:
        with _connect(harness.conninfo("postgres")) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TARGET))
            )


@pytest.fixture
def hostile_database(target: str) -> str:
    """A copy of the planted template, on the hostile path."""
    _create_database(target, TEMPLATE)
    make_hostile(target)
    return target


# --- what ran, what is bound -----------------------------------------------------


class Warnings:
    """Collects the WARNINGs of planted objects from every connection."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def watch(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        def handler(diag: psycopg.errors.Diagnostic) -> None:
            if (diag.message_primary or "").startswith("hostile:"):
                self.seen.append(diag.message_primary or "")

        conn.add_notice_handler(handler)
        return conn


def planted_runs(dbname: str) -> list[str]:
    """What ran: each planted object with the roles it ran as."""
    with _connect(harness.conninfo(dbname)) as conn:
        hits = conn.execute("SELECT is_called, last_value FROM public.hostile_hits").fetchone()
        logged = conn.execute(
            "SELECT what || ' as ' || run_as || ' (session ' || session_role || ')', count(*)"
            " FROM public.hostile_log GROUP BY 1 ORDER BY 1"
        ).fetchall()
    found = [f"{row[0]}: {row[1]} time(s)" for row in logged]
    recorded = sum(int(row[1]) for row in logged)
    if hits is not None and hits[0] and hits[1] > recorded:
        found.append(f"{hits[1] - recorded} planted call(s) rolled back with their statement")
    return found


def planted_bindings(dbname: str) -> list[str]:
    """Every dependency of an object outside public on a planted one."""
    with _connect(harness.conninfo(dbname)) as conn:
        rows = conn.execute(
            """
            SELECT pg_describe_object(d.classid, d.objid, d.objsubid)
                   || ' -> ' || pg_describe_object(d.refclassid, d.refobjid, 0)
            FROM pg_depend d
            WHERE ((d.refclassid = 'pg_proc'::regclass AND d.refobjid IN
                      (SELECT oid FROM pg_proc WHERE pronamespace = 'public'::regnamespace))
                OR (d.refclassid = 'pg_operator'::regclass AND d.refobjid IN
                      (SELECT oid FROM pg_operator WHERE oprnamespace = 'public'::regnamespace))
                OR (d.refclassid = 'pg_type'::regclass AND d.refobjid IN
                      (SELECT oid FROM pg_type WHERE typnamespace = 'public'::regnamespace)))
              AND (pg_identify_object(d.classid, d.objid, d.objsubid)).schema
                  IS DISTINCT FROM 'public'
            ORDER BY 1
            """
        ).fetchall()
    return [str(row[0]) for row in rows]


# --- the API, as each role, on the database's own search_path ---------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Caller:
    """One login role's connection, with the database's (hostile) search_path;
    ``called`` collects the functions every caller sharing it has called."""

    def __init__(self, conn: psycopg.Connection[Any], called: set[str]) -> None:
        self.conn = conn
        self.called = called

    def has(self, function: str) -> bool:
        row = self.conn.execute(
            "SELECT pg_catalog.to_regproc(%s) IS NOT NULL", (f"office.{function}",)
        ).fetchone()
        return bool(row and row[0])

    def all(self, function: str, **args: Any) -> list[dict[str, Any]]:
        """``SELECT * FROM office.function(name => value, ...)``."""
        query = sql.SQL("SELECT * FROM office.{}({})").format(
            sql.Identifier(function),
            sql.SQL(", ").join(
                sql.SQL("{} => {}").format(sql.Identifier(k), sql.Placeholder(k)) for k in args
            ),
        )
        params = {k: Jsonb(v) if isinstance(v, dict) else v for k, v in args.items()}
        self.called.add(function)
        with self.conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(query, params).fetchall()

    def one(self, function: str, **args: Any) -> dict[str, Any] | None:
        rows = self.all(function, **args)
        return rows[0] if rows else None

    def view(self, name: str) -> None:
        self.conn.execute(
            sql.SQL("SELECT * FROM office.{}").format(sql.Identifier(name))
        ).fetchall()


# The catalog's API functions that the generic pass does not call, each with
# why. Every other function is exercised: by the scenario of _exercise, or,
# when the scenario does not call it, once generically (SAMPLES below).
NOT_EXERCISED: dict[str, str] = {}

# A value of each argument type for the generic call of a function the
# scenario does not reach: it runs the function's statements on the hostile
# path (an error it answers with, say an unknown id, is fine; a look-alike
# that ran is not). A function with a required argument of another type is
# neither exercised nor listed, and fails the test.
SAMPLES = {
    "text": "'hostile-probe'::pg_catalog.text",
    "text[]": "'{hostile-probe}'::pg_catalog.text[]",
    "bigint": "1::pg_catalog.int8",
    "bigint[]": "'{1}'::pg_catalog.int8[]",
    "integer": "1::pg_catalog.int4",
    "boolean": "false",
    "jsonb": "'{}'::pg_catalog.jsonb",
    "interval": "'0'::pg_catalog.interval",
    "timestamp with time zone": "'2026-01-01 00:00:00+00'::pg_catalog.timestamptz",
}

# The API: office's functions but the internal (_-prefixed) ones and the
# trigger functions, with their required (no default) parameters and the
# first office role that may execute each.
API_FUNCTIONS = """
SELECT p.proname, p.proargnames[1:p.pronargs - p.pronargdefaults],
       ARRAY(SELECT pg_catalog.format_type(t, NULL)
               FROM pg_catalog.unnest(p.proargtypes::pg_catalog.oid[]) WITH ORDINALITY AS a(t, n)
              WHERE a.n <= p.pronargs - p.pronargdefaults ORDER BY a.n),
       (SELECT r FROM pg_catalog.unnest(%s::pg_catalog.text[]) WITH ORDINALITY AS g(r, n)
         WHERE pg_catalog.has_function_privilege(r, p.oid, 'EXECUTE') ORDER BY g.n LIMIT 1)
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'office'::pg_catalog.regnamespace AND p.prokind = 'f'
   AND p.proname !~ '^_' AND p.prorettype <> 'pg_catalog.trigger'::pg_catalog.regtype
 ORDER BY p.proname
"""


@dataclass(frozen=True)
class ApiFunction:
    name: str
    required: list[tuple[str, str]]  # name, type
    role: str | None  # the first office role granted EXECUTE


def api_functions(dbname: str) -> list[ApiFunction]:
    with _connect(harness.conninfo(dbname)) as conn:
        rows = conn.execute(API_FUNCTIONS, [list(USERS)]).fetchall()
    return [
        ApiFunction(name, list(zip(names or [], types, strict=True)), role)
        for name, names, types, role in rows
    ]


def exercise(dbname: str, warnings: Warnings) -> None:
    """docs/api.md §1-§6 through named notation, each call as a role granted
    it, then every API function of the catalog the scenario did not call,
    generically; fails when one is neither exercised nor in NOT_EXERCISED."""
    called: set[str] = set()
    callers = {
        role: Caller(warnings.watch(_connect(_as(user, dbname), pinned=False)), called)
        for role, user in USERS.items()
    }
    try:
        _exercise(
            callers["office_producer"],
            callers["office_worker"],
            callers["office_reader"],
            callers["office_admin"],
        )
        in_scenario = set(called)
        functions = api_functions(dbname)
        unreachable = []
        for function in functions:
            if function.name in in_scenario or function.name in NOT_EXERCISED:
                continue
            if function.role is None or any(t not in SAMPLES for _, t in function.required):
                unreachable.append(function)
                continue
            _call_generically(callers[function.role], function)
    finally:
        for caller in callers.values():
            caller.conn.close()
    catalog = {function.name for function in functions}
    assert unreachable == [], (
        "API functions neither exercised nor in NOT_EXERCISED (no office role may"
        " execute them, or an argument type without a SAMPLE):\n"
        + "\n".join(f"{f.name}({f.required}) as {f.role}" for f in unreachable)
    )
    listed = set(NOT_EXERCISED)
    assert listed <= catalog, f"NOT_EXERCISED names no API function: {sorted(listed - catalog)}"
    assert listed.isdisjoint(in_scenario), (
        f"NOT_EXERCISED but called by the scenario: {sorted(listed & in_scenario)}"
    )


def _call_generically(caller: Caller, function: ApiFunction) -> None:
    caller.called.add(function.name)
    query = sql.SQL("SELECT * FROM office.{}({})").format(
        sql.Identifier(function.name),
        sql.SQL(", ").join(
            sql.SQL("{} => {}").format(sql.Identifier(name), sql.SQL(SAMPLES[type_]))
            for name, type_ in function.required
        ),
    )
    # An error is the function's own answer: what ran on the way is what counts.
    with contextlib.suppress(psycopg.Error):
        caller.conn.execute(query).fetchall()


def _builder_args(vector: dict[str, Any]) -> dict[str, Any]:
    types = dict(SIGNATURES[vector["function"]])
    return {
        name: datetime.fromisoformat(value)
        if value is not None and types[name] == "timestamp with time zone"
        else value
        for name, value in vector["args"].items()
    }


# §1: one vector with a value per key builder (tests/vectors/keys.json).
BUILDER_VECTORS = list(
    {
        v["function"]: v
        for v in reversed(VECTORS)
        if v.get("expected") is not None and not v.get("timezone")
    }.values()
)


def exercise_clients(dbname: str) -> None:
    """The Python clients and the CLI, which build SQL of their own (probes,
    lookups) and run it on the caller's search_path."""
    producer, admin = _as(USERS["office_producer"], dbname), _as(USERS["office_admin"], dbname)
    with Office(producer, min_size=1, max_size=1) as office:
        office.enqueue_run("a1", "sync_client", idempotency_key="sync")
        office.enqueue_run("a1", "sync_client", idempotency_key="sync")

    async def run_async() -> None:
        async with AsyncOffice(producer, min_size=1, max_size=1) as office:
            await office.enqueue_run("a1", "async_client", idempotency_key="async")

    asyncio.run(run_async())
    runner = CliRunner()
    # The commands quiet the dedup logger of the whole process (officectl
    # prints outcomes itself); the tests after this one count its records.
    dedup = logging.getLogger(DEDUP_LOGGER)
    level = dedup.level
    try:
        for url, args in (
            (producer, ["enqueue", "a1", "cli"]),
            (admin, ["doctor"]),
            (admin, ["stats"]),
            (_superuser(dbname), ["events", "tail"]),  # reads office.events itself
            (producer, ["sweep"]),
        ):
            result = runner.invoke(officectl, ["--dsn", url, *args], catch_exceptions=False)
            assert result.exit_code == 0, (args, result.output)
    finally:
        dedup.setLevel(level)


def _exercise(producer: Caller, worker: Caller, reader: Caller, admin: Caller) -> None:
    path = producer.conn.execute("SHOW search_path").fetchone()
    assert path == (HOSTILE_PATH,), "the callers must run on the database's hostile path"
    # §1 key builders (each with a vector it must answer) and the version, for every role.
    assert sorted(v["function"] for v in BUILDER_VECTORS) == sorted(SIGNATURES)
    for caller in (producer, worker, reader, admin):
        caller.one("schema_version")
        for vector in BUILDER_VECTORS:
            row = caller.one(vector["function"], **_builder_args(vector))
            assert row == {vector["function"]: vector["expected"]}, vector["name"]
    # §2 agents and tasks.
    producer.one("upsert_agent", id="a1", workspace_id="w1", name="A")
    producer.one("upsert_agent", id="a2", workspace_id="w1")
    producer.one("set_agent_status", id="a2", status="idle")
    producer.one(
        "create_task",
        workspace_id="w1",
        id="parent",
        title="P",
        workflow_step_id="s1",
        assignee_agent_profile_id="a1",
    )
    producer.one(
        "create_task",
        workspace_id="w1",
        id="child",
        title="C",
        parent_id="parent",
        workflow_step_id="s1",
        assignee_agent_profile_id="a2",
    )
    producer.one("create_task", workspace_id="w1", id="blocker", title="B")
    producer.one("add_blocker", task_id="child", blocker_task_id="blocker")
    producer.one(
        "assign_task",
        task_id="blocker",
        assignee_agent_profile_id="a1",
        actor_id="u1",
        actor_type="user",
    )
    producer.one("move_task", task_id="blocker", state="COMPLETED")
    producer.one("remove_blocker", task_id="child", blocker_task_id="blocker")
    producer.one("move_task", task_id="child", state="COMPLETED")
    producer.one("archive_task", task_id="blocker")
    for caller in (producer, worker, reader, admin):
        caller.one("get_task", task_id="child")
    for function in ("child_set_key", "child_generation"):
        reader.one(function, parent_task_id="parent")
    for function in ("task_terminal_status", "is_task_terminal"):
        reader.one(function, task_id="child")
    # §3 the run queue.
    producer.one(
        "enqueue_run",
        agent_profile_id="a1",
        reason="manual",
        payload={"k": 1},
        idempotency_key="k1",
        task_id="parent",
    )
    producer.one("enqueue_run", agent_profile_id="a1", reason="manual", idempotency_key="k1")
    producer.one("enqueue_run", agent_profile_id="a2", reason="ping", keyless_cause="by_design")
    producer.all(
        "enqueue_runs",
        requests=Jsonb([{"agent_profile_id": "a1", "reason": "bulk", "idempotency_key": "k2"}]),
    )
    # §9 policies: a budget on the agent and its workspace, so heartbeat_run
    # and record_run_cost below take their budget paths.
    if admin.has("set_wake_policy"):
        admin.one(
            "set_wake_policy",
            scope="agent",
            scope_id="a1",
            budget=Decimal("1000"),
            max_retries=2,
            retry_backoff=[timedelta(seconds=1)],
        )
        admin.one("set_wake_policy", scope="workspace", scope_id="w1", budget=Decimal("1000"))
        admin.one("set_wake_policy", scope="workspace", scope_id="gone", cooldown=timedelta(0))
        admin.one("clear_wake_policy", scope="workspace", scope_id="gone")
    for outcome in ("finish", "fail", "retry", "cancel"):
        producer.one("enqueue_run", agent_profile_id="a1", reason=outcome, idempotency_key=outcome)
        claimed = worker.one("claim_run", worker_id="w", agent_profile_id="a1")
        if claimed is None:
            continue
        run_id, attempt = claimed["id"], claimed["attempt"]
        for caller in (worker, reader):
            if caller.has("get_run"):
                caller.all("get_run", run_id=run_id)
            if caller.has("run_keys"):
                caller.all("run_keys", run_id=run_id)
        if worker.has("heartbeat_run"):
            worker.one("heartbeat_run", run_id=run_id, attempt=attempt)
        if worker.has("record_run_cost"):
            worker.one(
                "record_run_cost",
                run_id=run_id,
                attempt=attempt,
                amount=Decimal("900"),
                worker_id="w",
            )
        if outcome == "finish":
            worker.one("finish_run", run_id=run_id, attempt=attempt)
        elif outcome == "fail":
            worker.one("fail_run", run_id=run_id, attempt=attempt, error_message="boom")
        elif outcome == "retry":
            worker.one("retry_run", run_id=run_id, attempt=attempt, delay=timedelta(0))
        else:
            worker.one("cancel_run", run_id=run_id, reason="enough")
    admin.one("recover_stale_runs", older_than=timedelta(0))
    admin.one("prune_runs", older_than=timedelta(0))
    # §4 routines and wakeups.
    queued = producer.one(
        "request_wakeup",
        agent_profile_id="a2",
        source="api",
        reason="hello",
        payload={"x": 1},
        idempotency_key="wk1",
    )
    assert queued is not None
    worker.one("dispatch_wakeup", wakeup_request_id=queued["wakeup_request_id"])
    doomed = producer.one("request_wakeup", agent_profile_id="a2", source="api", reason="bye")
    assert doomed is not None
    producer.one("fail_wakeup", wakeup_request_id=doomed["wakeup_request_id"], reason="not needed")
    producer.one("request_wakeup", agent_profile_id="a2", source="api", reason="later")
    worker.all("dispatch_queued_wakeups", max_rows=10, min_age=timedelta(0))
    producer.one(
        "create_routine",
        workspace_id="w1",
        name="heavy",
        task_template={"title": "T {{v}}", "description": "d"},
        assignee_agent_profile_id="a1",
        variables={"v": {"default": "x"}},
        id="r1",
    )
    producer.one(
        "create_routine",
        workspace_id="w1",
        name="light",
        assignee_agent_profile_id="a2",
        concurrency_policy="coalesce_if_active",
        id="r2",
    )
    producer.one(
        "add_routine_trigger", routine_id="r2", cron_expression="* * * * *", next_run_at=T0, id="t2"
    )
    producer.one(
        "add_routine_trigger",
        routine_id="r1",
        cron_expression="* * * * *",
        next_run_at=T0,
        id="t1",
    )
    producer.one(
        "claim_routine_tick",
        trigger_id="t2",
        observed_next_run_at=T0,
        following_next_run_at=T0 + timedelta(minutes=1),
    )
    heavy = producer.one("dispatch_routine", routine_id="r1", source="manual", variables={"v": "y"})
    producer.one(
        "dispatch_routine", routine_id="r2", source="cron", trigger_id="t2", claimed_tick=T0
    )
    producer.one("dispatch_routine", routine_id="r2", source="webhook", explicit_key="e1")
    for caller in (worker, reader):
        caller.all("due_routine_triggers", at=T0 + timedelta(days=1), max_rows=10)
    worker.one(
        "fire_routine_tick",
        trigger_id="t1",
        observed_next_run_at=T0,
        following_next_run_at=T0 + timedelta(minutes=1),
    )
    if heavy is not None:
        producer.one("close_routine_run", routine_run_id=heavy["routine_run_id"], terminal="done")
    producer.one("sync_routine_run_status", task_id="child", terminal="done")
    # §5 parent wakes.
    producer.all("list_stuck_parents", max_rows=5)
    producer.one(
        "reconcile_parent",
        parent_task_id="parent",
        child_set_key="child:COMPLETED",
        newest_child_updated_at="2026-01-01 00:00:00",
    )
    producer.all("sweep_stuck_parents", max_rows=5)
    admin.one("mark_all_parents")
    # §6 events, observability.
    events = worker.all(
        "claim_events", consumer="c", max_rows=100, visibility=timedelta(seconds=30)
    )
    worker.one("ack_events", ids=[row["id"] for row in events])
    admin.one("prune_events", older_than=timedelta(0))
    admin.one("prune_wake_decisions", older_than=timedelta(0))
    for caller in (worker, reader, admin):
        caller.one("daemon_stats")
    for caller in (reader, admin):
        for name in ("dedup_stats", "keyless_stats", "queue_stats", "wake_decisions"):
            caller.view(name)


# --- the tests ----------------------------------------------------------------------


def _run(url: str, statement: str, warnings: Warnings | None = None) -> None:
    """``statement`` on the database's own (hostile) search_path."""
    with _connect(url, pinned=False) as conn:
        if warnings is not None:
            warnings.watch(conn)
        assert conn.execute("SHOW search_path").fetchone() == (HOSTILE_PATH,)
        conn.execute(statement)


def _run_clean(url: str, statement: str) -> None:
    with _connect(url) as conn:
        conn.execute(statement)


@dataclass(frozen=True)
class Install:
    """How office gets into the database: ``before`` runs on a clean database
    (nothing planted yet, default path), ``install`` on the hostile one."""

    install: Callable[[str, Warnings], object]
    before: Callable[[str], object] | None = None


def _extension_upgraded_from(version: str) -> Install:
    return Install(
        lambda db, w: _run(_superuser(db), "ALTER EXTENSION office UPDATE", w),
        before=lambda db: _run_clean(
            _superuser(db), f"CREATE EXTENSION office VERSION '{version}'"
        ),
    )


def _migrated_from(migration: str) -> Install:
    return Install(
        lambda db, w: migrate(_superuser(db)),
        before=lambda db: migrate(_superuser(db), target=migration),
    )


INSTALLS = {
    "create-extension-as-superuser": Install(
        lambda db, w: _run(_superuser(db), "CREATE EXTENSION office", w)
    ),
    "create-extension-as-database-owner": Install(
        lambda db, w: _run(_owner(db), "CREATE EXTENSION office", w)
    ),
    "officectl-migrate": Install(lambda db, w: migrate(_superuser(db))),
    # Installs made before anything was planted, upgraded afterwards.
    "alter-extension-update-from-0.1.0": _extension_upgraded_from("0.1.0"),
    "alter-extension-update-from-0.3.0": _extension_upgraded_from("0.3.0"),
    "officectl-migrate-from-0.3.0": _migrated_from("0003.office-0.3.0"),
}


def test_the_plan_covers_what_the_catalog_binds(planted: Planted) -> None:
    # The look-alikes the issue found, derived here from the catalog alone.
    assert ("convert_to", ("text", "text")) in planted.plan.routines
    assert ("count", ("text",)) in planted.plan.routines
    assert ("count", ()) in planted.plan.routines
    assert ("=", "text", "text") in planted.plan.operators
    assert {"text", "jsonb", "timestamptz"} <= planted.plan.types
    # Nearly every look-alike could be created by a role without privileges.
    assert len(planted.refused) * 20 < len(planted.statements), "\n".join(planted.refused[:20])


@pytest.mark.parametrize("path", INSTALLS)
def test_nothing_planted_in_public_runs_or_is_bound(
    planted: Planted, target: str, path: str
) -> None:
    install = INSTALLS[path]
    if install.before is None:
        _create_database(target, TEMPLATE)
    else:
        _create_database(target, "template0")
        install.before(target)
        refused = plant(target, planted.statements)
        assert len(refused) == len(planted.refused)
    make_hostile(target)
    warnings = Warnings()
    install.install(target, warnings)
    failure: Exception | None = None
    try:
        exercise(target, warnings)
        exercise_clients(target)
    except Exception as exc:  # reported after what ran, which may explain it
        failure = exc
    ran = planted_runs(target)
    assert ran == [], "planted objects ran:\n" + "\n".join(ran)
    assert warnings.seen == []
    bound = planted_bindings(target)
    assert bound == [], "office objects bound to planted ones:\n" + "\n".join(bound)
    if failure is not None:
        raise failure


def test_the_released_0_3_0_binds_and_runs_what_was_planted(hostile_database: str) -> None:
    # The control: 0.3.0 installed the same way binds look-alikes (the two
    # planted here), and one runs when a producer calls the key builder.
    _run(_superuser(hostile_database), "CREATE EXTENSION office VERSION '0.3.0'")
    bound = planted_bindings(hostile_database)
    assert any("routine_fingerprint" in line for line in bound), bound
    assert any("queue_stats" in line for line in bound), bound
    _run(
        _as(USERS["office_producer"], hostile_database),
        "SELECT office.routine_fingerprint(title => 't', description => 'd', assignee => 'a')",
    )
    ran = planted_runs(hostile_database)
    assert any(line.startswith("public.convert_to(text, text) as ") for line in ran), ran
    # The 0.3.0 -> 0.4.0 step creates those objects again, under its pinned path.
    _run(_superuser(hostile_database), "ALTER EXTENSION office UPDATE")
    assert planted_bindings(hostile_database) == []


# A schema office that exists before the install: planted by another role,
# the installer's but open to another role's CREATE, or holding something.
PLANTED_SCHEMAS = {
    "owned-by-another-role": (
        "GRANT CREATE ON DATABASE {db} TO {attacker}; SET ROLE {attacker}; CREATE SCHEMA office",
        "42501",
    ),
    "others-may-create-in-it": (
        "SET ROLE {installer}; CREATE SCHEMA office; GRANT CREATE ON SCHEMA office TO {attacker}",
        "42501",
    ),
    "not-empty": (
        "SET ROLE {installer}; CREATE SCHEMA office; CREATE TABLE office.t (x int)",
        "42P06",
    ),
}


@pytest.mark.parametrize("case", PLANTED_SCHEMAS)
@pytest.mark.parametrize("who", ["superuser", "database-owner"])
def test_a_schema_office_that_is_already_there_is_refused(
    planted: Planted, target: str, case: str, who: str
) -> None:
    setup, sqlstate = PLANTED_SCHEMAS[case]
    installer, url = (
        (harness.USER, _superuser(target)) if who == "superuser" else (OWNER, _owner(target))
    )
    _create_database(target, "template0")
    _run_clean(_superuser(target), setup.format(db=target, attacker=ATTACKER, installer=installer))
    with _connect(url) as conn, pytest.raises(psycopg.Error) as caught:
        conn.execute("CREATE EXTENSION office")
    assert caught.value.sqlstate == sqlstate, caught.value
    # officectl migrate (released 0.1.0 creates the schema itself) refuses
    # every such schema as one that already exists.
    with pytest.raises(psycopg.Error) as caught:
        migrate(url)
    assert caught.value.sqlstate == "42P06", caught.value
    with _connect(_superuser(target)) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_proc WHERE pronamespace = 'office'::regnamespace"
        ).fetchone() == (0,)
