"""Every command in the README works as written.

Fenced blocks are run by their language: ``sh`` lines with bash from the
repository root (on a private embedded database), ``sql`` with psql against a
fresh office database, ``python`` with this interpreter. In ``sql`` blocks a
``-- text`` comment right after a statement is its expected output. The one
command not run here is ``make test``: it is what runs this; instead the test
checks that CI's entry point calls exactly it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import harness

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
TEST_COMMAND = "make test"


def _blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCKS if lang == language]


@pytest.fixture
def embedded_env() -> Iterator[dict[str, str]]:
    """Environment for README shell commands: no DSN, a private embedded home."""
    port = harness.free_port()
    home = Path("/dev/shm") / f"office-readme-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k != "OFFICE_DSN"}
    env.update(OFFICE_HOME=str(home), OFFICE_EMBEDDED_PORT=str(port))
    try:
        yield env
    finally:
        subprocess.run(
            [str(ROOT / ".venv/bin/officectl"), "db", "stop"],
            env=env,
            check=False,
            capture_output=True,
        )
        subprocess.run(["rm", "-rf", str(home)], check=False)


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    assert _blocks("sh") and _blocks("sql") and _blocks("python")


def test_ci_runs_the_readme_test_command() -> None:
    assert any(TEST_COMMAND in block.splitlines() for block in _blocks("sh"))
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [line for line in ci.splitlines() if line.strip() and not line.startswith("#")]
    assert commands[-1].strip() == f"exec {TEST_COMMAND}"


def test_shell_commands(embedded_env: dict[str, str]) -> None:
    commands = [
        line.strip()
        for block in _blocks("sh")
        for line in block.splitlines()
        if line.strip() and line.strip() != TEST_COMMAND
    ]
    assert commands
    for command in commands:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=ROOT,
            env=embedded_env,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    # The quick start's psql block, as a new user runs it after make demo:
    # against `officectl db url`, which the demo left as it was.
    url = subprocess.run(
        [str(ROOT / ".venv/bin/officectl"), "db", "url"],
        env=embedded_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    _check_sql_blocks(url)
    # The demo wrote into its own database of that server.
    demo_url = subprocess.run(
        [str(ROOT / ".venv/bin/officectl"), "db", "url", "--demo"],
        env=embedded_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    assert demo_url == url.rsplit("/", 1)[0] + "/office_demo"
    demo_runs = subprocess.run(
        ["psql", "-X", "-At", demo_url, "-c", "SELECT count(*) > 0 FROM office.runs"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    assert demo_runs == "t"


def _check_sql_blocks(dsn: str) -> None:
    for block in _blocks("sql"):
        result = subprocess.run(
            ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-At", dsn],
            input=block,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"{block}\n{result.stderr}"
        output = result.stdout.splitlines()
        for expected in re.findall(r";\n-- (.+)$", block, re.MULTILINE):
            assert expected in output, f"expected {expected!r} in psql output {output}"


def test_sql_blocks(dsn: str) -> None:
    _check_sql_blocks(dsn)


def test_python_blocks(dsn: str) -> None:
    for block in _blocks("python"):
        result = subprocess.run(
            [sys.executable, "-c", block],
            env={**os.environ, "OFFICE_DSN": dsn},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert result.returncode == 0, f"{block}\n{result.stderr}"
