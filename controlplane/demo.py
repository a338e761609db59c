"""``officectl demo`` (being written)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DemoReport:
    ok: bool


def run_demo(
    url: str,
    *,
    seconds: float = 15.0,
    seed: int | None = None,
    as_json: bool = False,
    debug: bool = False,
) -> DemoReport:
    raise NotImplementedError("the demo is being written")
