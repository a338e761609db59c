"""Server instructions per call with no policy rows: 0.5.0 against 0.4.0.

    bash bench/run.sh governance_instructions

The count bench/governance.py's no-policy lines cannot give: a throughput
ratio on this machine moves by several per cent between rounds, the
instructions the server executes for a call repeat to a few in a million
(bench/instructions.py says why and how they are counted). The 0.4.0
baseline is bench/governance.py's (the 0.4.0 tree built and installed as
extension ``office_040``); each version gets a cluster of its own, set up as
bench/instructions.py sets up its one, and the same two cases: a fresh-key
``enqueue_run`` and a ``claim_run`` + ``finish_run`` cycle.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from bench import instructions
from bench.common import bench_parser, machine_line, publish
from bench.governance import BASELINE_EXTENSION, install_baseline
from bench.hotpath import QUEUED

CASES = ((instructions.FRESH, 200), (instructions.CYCLE, 200))
VERSIONS = (("0.4.0", BASELINE_EXTENSION), ("0.5.0", "office"))


def count(workdir: Path, extension: str) -> dict[str, float]:
    """Instructions per call of each case, office installed as ``extension``."""
    setup = [
        statement.replace("CREATE EXTENSION office", f"CREATE EXTENSION {extension}")
        for statement in instructions.SETUP
    ]
    workdir.mkdir()
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres")
    base = instructions.prepare_cluster(workdir, setup)
    return {case.name: instructions.instructions(base, workdir, case, n) for case, n in CASES}


def main() -> None:
    parser = bench_parser(__doc__, "governance_instructions")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("governance_instructions: skipped, valgrind is not installed")
        return
    install_baseline(str(instructions.PG_BIN / "pg_config"))
    measured: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        if os.geteuid() == 0:
            shutil.chown(tmp, "postgres")
        for version, extension in VERSIONS:
            measured[version] = count(Path(tmp) / extension, extension)
            for name, value in measured[version].items():
                print(f"{version} {name:40} {value:12,.0f} instructions", flush=True)
    rows = []
    for case, _ in CASES:
        old, new = measured["0.4.0"][case.name], measured["0.5.0"][case.name]
        rows.append(f"| {case.name} | {old:,.0f} | {new:,.0f} | {new / old:.3f}× |")
    body = "\n".join(
        [
            "## Server instructions per call, no policy rows: 0.5.0 against 0.4.0",
            "",
            "Command: `bash bench/run.sh governance_instructions`: bench/instructions.py's"
            " count (callgrind over `postgres --single`, per call = (I(2N) − I(N)) / N) of"
            " two of its cases, on a cluster of 0.4.0 (built from its tree, extension"
            f" `{BASELINE_EXTENSION}`) and one of 0.5.0, each with 64 agents and"
            f" {QUEUED:,} queued runs.",
            f"Machine: {machine_line(args.dsn)}.",
            "",
            "The server's own work only (bench/instructions.py says what that leaves out):"
            " the wall-clock ratios of the governance section are smaller, since the"
            " client, the network and the WAL flush cost both versions the same.",
            "",
            "| case | 0.4.0 | 0.5.0 | 0.5.0 / 0.4.0 |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    publish(body, "governance_instructions", args.write)


if __name__ == "__main__":
    main()
