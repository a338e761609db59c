"""No control-plane module over 500 lines (a module a new engineer
reads in one sitting; past that a module holds more than one capability and
is split by capability, as client/queries/ and scaleout/proxy_*.py are). Pure
Python, no server."""

from __future__ import annotations

from pathlib import Path

import controlplane

ROOT = Path(controlplane.__file__).parent
LIMIT = 500


def test_no_controlplane_module_is_over_the_limit() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(ROOT.rglob("*.py"))
    }
    assert sizes, "no module found: the scan looks in the wrong place"
    assert {name: n for name, n in sizes.items() if n > LIMIT} == {}
