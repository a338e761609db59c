"""Every document the repository names is in the repository (pure Python, no
server). The contract and the domain notes live in docs/ (docs/api.md,
docs/domain.md); the design documents they started from are not here.

Frozen files keep what they said when they were released (sql/released/ and
the upgrade steps of released versions; tests/unit/test_released_frozen.py
pins them). Everything else, catalog text included, names docs/ paths."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The design documents, by their names in lowercase: spelled as they are
#: written, this file would be one more file naming them.
DESIGN_DOCUMENTS = ("api", "domain", "architecture", "scaleout", "testing")
DESIGN = re.compile(
    r"(?<![\w/.-])(?:" + "|".join(d.upper() for d in DESIGN_DOCUMENTS) + r")\.md|shared/(?:design)"
)
DOCS = re.compile(r"\bdocs/([a-z0-9_-]+\.md)")

FROZEN = re.compile(r"^(sql/released/|sql/upgrades/office--0\.[123]\.0--)")

#: Files allowed to name the design documents: the contract's history note
#: says where it started.
NAMES_THE_DESIGN = {"docs/api.md"}


def tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [p for p in out.split() if not FROZEN.match(p) and (ROOT / p).is_file()]


def _text(path: str) -> str:
    try:
        return (ROOT / path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def test_no_file_names_a_design_document_the_repository_lacks() -> None:
    found = {
        path for path in tracked() if path not in NAMES_THE_DESIGN and DESIGN.search(_text(path))
    }
    assert found == set()


def test_the_allowed_files_still_name_the_design() -> None:
    # An entry whose file no longer names a design document is stale.
    assert DESIGN.search(_text("docs/api.md"))


def test_every_docs_file_named_exists() -> None:
    missing = {
        f"{path}: docs/{name}"
        for path in tracked()
        for name in DOCS.findall(_text(path))
        if not (ROOT / "docs" / name).exists()
    }
    assert missing == set()
