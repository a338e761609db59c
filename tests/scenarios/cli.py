"""Running ``officectl`` as an operator does, for the CLI tests: a
subprocess of this environment's entry point, against a DSN."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

OFFICECTL = str(Path(sys.executable).with_name("officectl"))


def cli_env() -> dict[str, str]:
    """The environment of an ``officectl`` call: no OFFICE_DSN, and a coalesce
    window of an hour. Each call is a process start and a connection: on a
    loaded machine two calls can be more than the 5 s default apart, and a
    test that expects the second to coalesce would see it queued. The window
    is not what these tests are about."""
    env = {k: v for k, v in os.environ.items() if k != "OFFICE_DSN"}
    env["PGOPTIONS"] = (env.get("PGOPTIONS", "") + " -c office.coalesce_window=1h").strip()
    return env


def officectl(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OFFICECTL, "--dsn", dsn, *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )


def ok_json(dsn: str, *args: str) -> Any:
    """The call's ``--json`` output, the call required to succeed."""
    result = officectl(dsn, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
