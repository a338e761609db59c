"""The ports tests and benchmarks start servers on lie below Linux's
ephemeral range (tests/ports.py): the picker, and no hard-coded server port
at or above 32768 in the suite, the benchmarks, the Makefile or the
developer docs. Pure Python, no server."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

from tests import ports

ROOT = Path(__file__).resolve().parents[2]
EPHEMERAL = 32768

#: How a port is written where a server is started or reached.
PORT_LITERAL = re.compile(
    r"127\.0\.0\.1:(\d{4,5})\b|port[=:\s]+\"?(\d{4,5})\b|-p (\d{4,5})\b"
    r"|PORT:-(\d{4,5})\b|--port[= ](\d{4,5})\b|PORT\", \"(\d{4,5})\"",
    re.IGNORECASE,
)


def test_free_port_is_below_the_ephemeral_range_and_free() -> None:
    for _ in range(20):
        port = ports.free_port()
        assert ports.FREE_PORTS.start <= port < EPHEMERAL
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    assert ports.TEST_PORT < EPHEMERAL and ports.BENCH_PORT < EPHEMERAL


def test_run_suite_picks_its_ports_there_too() -> None:
    """tests/run_suite.sh runs tests/ports.py with the system python3."""
    script = (ROOT / "tests" / "run_suite.sh").read_text()
    assert 'python3 "$ROOT/tests/ports.py"' in script and '", 0)' not in script
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "ports.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ports.FREE_PORTS.start <= int(out) < EPHEMERAL


def test_no_hard_coded_server_port_in_the_ephemeral_range() -> None:
    files = [
        *sorted((ROOT / "tests").rglob("*.py")),
        *sorted((ROOT / "tests").rglob("*.sh")),
        *sorted((ROOT / "bench").rglob("*.py")),
        *sorted((ROOT / "bench").rglob("*.sh")),
        ROOT / "Makefile",
        ROOT / "docs" / "development.md",
        ROOT / "docs" / "operations.md",
        ROOT / "README.md",
    ]
    found = []
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in PORT_LITERAL.finditer(line):
                port = int(next(g for g in match.groups() if g))
                # 54329 is the embedded database's product default
                # (docs/development.md, "ports"), not a test port.
                if port >= EPHEMERAL and port != 54329 and path != Path(__file__):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
