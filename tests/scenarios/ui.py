"""Reading the dashboard's pages in a test: a stat's number, a form's CSRF token."""

from __future__ import annotations

import re


def stat(html: str, name: str) -> int:
    match = re.search(rf'data-stat="{re.escape(name)}">([0-9.]+)', html)
    assert match, name
    return int(float(match.group(1)))


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match
    return match.group(1)
