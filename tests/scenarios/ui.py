"""Reading the dashboard's pages in a test: a client that asks as the
dashboard's own pages do, a stat's number, a form's CSRF token."""

from __future__ import annotations

import re

from starlette.testclient import TestClient
from starlette.types import ASGIApp

#: Where the tests' clients say they are: the dashboard's default address.
ORIGIN = "http://127.0.0.1:8765"


def browse(app: ASGIApp) -> TestClient:
    """A client on ``app`` as a browser on its pages: its Host header names
    the bound address, and its POSTs carry the dashboard's own Origin."""
    return TestClient(app, base_url=ORIGIN, headers={"Origin": ORIGIN})


def stat(html: str, name: str) -> int:
    match = re.search(rf'data-stat="{re.escape(name)}">([0-9.]+)', html)
    assert match, name
    return int(float(match.group(1)))


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match
    return match.group(1)
