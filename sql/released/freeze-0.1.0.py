"""Rebuild sql/released/office--0.1.0.sql and sql/upgrades/office--0.1.0--0.2.0.sql
from the current capability files:  python3 sql/released/freeze-0.1.0.py

0.1.0 is "the capability files of 0.2.0 (files-0.2.0.txt), minus the
entry_triggered delta of 0.2.0" (runs.entry_triggered, enqueue_run's entry_triggered
parameter and logic, enqueue_runs' entry_triggered key, schema_version
'0.1.0'); the upgrade step carries that delta, with the 0.2.0 definitions
copied verbatim from 30_runs.sql.

A change to one of those files would otherwise have to be written into the
upgrade steps by hand (tests/test_install_paths.py compares a fresh install
with an upgraded one). As long as 0.1.0 and 0.2.0 have been installed nowhere
but in tests, re-running this script and then freeze-0.2.0.py is the simpler
way to keep them in step. Every replacement below is asserted, so a change to the 0.2.0
delta that this script does not know makes it fail loudly instead of
producing a wrong 0.1.0.
"""

# ruff: noqa: E501  (the long lines are excerpts of 30_runs.sql, matched verbatim)
import re
from pathlib import Path

SQL = Path(__file__).resolve().parent.parent


def one(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, (text.count(old), old)
    return text.replace(old, new)


def function_block(text: str, signature_start: str, comment_sig: str) -> str:
    """CREATE FUNCTION ... through its GRANT statement (verbatim)."""
    start = text.index(signature_start)
    grant = text.index(f"GRANT EXECUTE ON FUNCTION {comment_sig}", start)
    end = text.index(";\n", grant) + 2
    return text[start:end]


runs = (SQL / "30_runs.sql").read_text()
# 00_schema.sql as it reads in 0.2.0, whatever version is current now.
schema = re.sub(
    r"^    RETURN '[0-9.]+';$",
    "    RETURN '0.2.0';",
    (SQL / "00_schema.sql").read_text(),
    count=1,
    flags=re.M,
)
RELEASED_FILES = set((SQL / "released" / "files-0.2.0.txt").read_text().split())

# ---- 0.1.0 variant of 30_runs.sql
old = runs
old = one(
    old,
    """-- entry_triggered is the last column on purpose: it arrived with 0.2.0
-- (ALTER TABLE ... ADD COLUMN appends), and a fresh install must have the
-- same column order as an upgraded one.
""",
    "",
)
old = one(
    old,
    """    finished_at        timestamptz,
    entry_triggered    boolean NOT NULL DEFAULT false
);""",
    """    finished_at        timestamptz
);""",
)
old = one(
    old,
    """COMMENT ON COLUMN office.runs.entry_triggered IS
    'True when a step-entry action enqueued the run: it never coalesces into another run and is never a coalesce target (since 0.2.0).';
""",
    "",
)
old = one(
    old,
    """                                   idempotency_key text DEFAULT NULL, task_id text DEFAULT NULL,
                                   entry_triggered boolean DEFAULT false,
                                   keyless_cause""",
    """                                   idempotency_key text DEFAULT NULL, task_id text DEFAULT NULL,
                                   keyless_cause""",
)
old = one(old, "    v_entry   boolean := coalesce(enqueue_run.entry_triggered, false);\n", "")
old = one(
    old,
    """    -- 3. Coalesce, unless the request is entry-triggered or comment-keyed.
    IF NOT v_entry AND (v_key IS NULL OR NOT starts_with(v_key, 'task_comment:')) THEN""",
    """    -- 3. Coalesce, unless the request is comment-keyed.
    IF v_key IS NULL OR NOT starts_with(v_key, 'task_comment:') THEN""",
)
assert old.count("                              AND NOT t.entry_triggered\n") == 2
old = old.replace("                              AND NOT t.entry_triggered\n", "")
old = one(
    old,
    """        INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id, entry_triggered)
        VALUES (v_agent, v_reason, v_payload, v_key, v_task, v_entry)""",
    """        INSERT INTO office.runs (agent_profile_id, reason, payload, idempotency_key, task_id)
        VALUES (v_agent, v_reason, v_payload, v_key, v_task)""",
)
assert old.count("office.enqueue_run(text, text, jsonb, text, text, boolean, text, text)") == 3
old = old.replace(
    "office.enqueue_run(text, text, jsonb, text, text, boolean, text, text)",
    "office.enqueue_run(text, text, jsonb, text, text, text, text)",
)
old = one(
    old,
    """             WHERE k NOT IN ('agent_profile_id', 'reason', 'payload', 'idempotency_key', 'task_id',
                             'entry_triggered', 'keyless_cause', 'keyless_detail')""",
    """             WHERE k NOT IN ('agent_profile_id', 'reason', 'payload', 'idempotency_key', 'task_id',
                             'keyless_cause', 'keyless_detail')""",
)
old = one(
    old,
    "             WHERE f.key NOT IN ('payload', 'entry_triggered')\n",
    "             WHERE f.key <> 'payload'\n",
)
old = one(
    old,
    """            IF jsonb_typeof(v_elem -> 'entry_triggered') NOT IN ('boolean', 'null') THEN
                RAISE EXCEPTION USING ERRCODE = '22023',
                    MESSAGE = format('entry_triggered must be a JSON boolean, not %s',
                                     jsonb_typeof(v_elem -> 'entry_triggered'));
            END IF;
""",
    "",
)
old = one(
    old,
    "                entry_triggered  => coalesce((v_elem ->> 'entry_triggered')::boolean, false),\n",
    "",
)
assert "entry_triggered" not in old.replace("entry-triggered", ""), [
    line for line in old.splitlines() if "entry_triggered" in line
]
assert "v_entry" not in old

old_schema = one(schema, "    RETURN '0.2.0';", "    RETURN '0.1.0';")

parts = []
for path in sorted(SQL.glob("[0-9][0-9]_*.sql")):
    if path.name not in RELEASED_FILES:
        continue  # arrived after 0.2.0
    if path.name == "30_runs.sql":
        parts.append(old)
    elif path.name == "00_schema.sql":
        parts.append(old_schema)
    else:
        parts.append(path.read_text())
released = "".join(parts)
assert "entry_triggered" not in released, [
    line for line in released.splitlines() if "entry_triggered" in line
]
(SQL / "released").mkdir(exist_ok=True)
(SQL / "released" / "office--0.1.0.sql").write_text(released)

# ---- the upgrade step, with the 0.2.0 definitions copied verbatim
enqueue_run = function_block(
    runs,
    "CREATE FUNCTION office.enqueue_run(",
    "office.enqueue_run(text, text, jsonb, text, text, boolean, text, text)",
)
enqueue_runs = function_block(
    runs, "CREATE FUNCTION office.enqueue_runs(", "office.enqueue_runs(jsonb)"
)
enqueue_runs_body = one(
    enqueue_runs,
    "CREATE FUNCTION office.enqueue_runs(",
    "CREATE OR REPLACE FUNCTION office.enqueue_runs(",
)
column_comment = re.search(
    r"COMMENT ON COLUMN office\.runs\.entry_triggered IS\n.*?';\n", runs, re.S
)
assert column_comment
version_fn = re.search(
    r"CREATE FUNCTION office\.schema_version\(\).*?RETURN '0\.2\.0';\n", schema, re.S
)
assert version_fn

upgrade = f"""\\echo Use "ALTER EXTENSION office UPDATE TO '0.2.0'" to load this file. \\quit
-- office 0.1.0 -> 0.2.0: entry-triggered runs (DOMAIN.md §2.23).
--
-- runs.entry_triggered arrives (NOT NULL DEFAULT false: rows written before
-- read as false and stay legal coalesce targets; no backfill, no rewrite), and
-- enqueue_run gains the entry_triggered parameter (before keyless_cause, as
-- in API.md §3), so it is dropped and created again with its grants and
-- comment; enqueue_runs accepts the entry_triggered key. The definitions
-- below are copied verbatim from 30_runs.sql: a fresh 0.2.0 install and an
-- upgraded 0.1.0 must have the same catalog (tests/test_install_paths.py).

ALTER TABLE office.runs ADD COLUMN entry_triggered boolean NOT NULL DEFAULT false;
{column_comment.group(0)}
DROP FUNCTION office.enqueue_run(text, text, jsonb, text, text, text, text);

{enqueue_run}
{enqueue_runs_body}
{version_fn.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")}"""
(SQL / "upgrades").mkdir(exist_ok=True)
(SQL / "upgrades" / "office--0.1.0--0.2.0.sql").write_text(upgrade)
print(
    f"wrote released/office--0.1.0.sql ({len(released)} bytes) and "
    f"upgrades/office--0.1.0--0.2.0.sql ({len(upgrade)} bytes)"
)
