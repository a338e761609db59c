"""Every SQL statement the Python control plane sends on behalf of the office
API: the one place to read, grep and review the client's SQL
(``controlplane/client/queries/``), one module per capability, each module
the statements of the client module of the same name:

* :mod:`~.core` - the schema probe, the dedup-index lookups and the session
  reset after a raw statement (:mod:`controlplane.client.core` and the drivers);
* :mod:`~.runs` - the run queue, agents, the schema version, the bulk
  fallback's transaction (:mod:`controlplane.client.runs`);
* :mod:`~.tasks` - tasks and parent wakes; :mod:`~.events` - the outbox;
  :mod:`~.routines` - routines and wakeup requests; :mod:`~.daemon` - the
  daemon's loops; :mod:`~.dashboard` - the dashboard's reads;
* and the named reads of the control plane's own tools, run by name
  (``Office.fetch`` or :func:`controlplane.client.sync.fetch_rows`):
  :mod:`~.demo` (the demo's checks), :mod:`~.observe` (``officectl stats``,
  ``events tail``), :mod:`~.doctor` (``officectl doctor``'s catalog probes).

Modules of named :class:`Query` constants rather than ``.sql`` files of
named queries (procrastinate's way): each statement also needs its asyncpg
form (``$n``), derived once here at import, and as Python names every use is
checked by mypy and found by grep - a misspelt query is an import error, not
a ``KeyError`` at run time - while the text stays plain SQL, one constant per
statement, with the why of each beside it. (River keeps one queries file
per table in the same way.)

Each statement is written in psycopg's ``%(name)s`` style and calls the SQL
API in named notation. The SQL a client builds itself runs on the caller's
search_path, which may put a schema someone else controls first: it names
``office.`` for every office object (and ``pg_catalog`` where it reads the
catalog).

What stays elsewhere is administration, not office API calls: the catalog
and admin statements of ``migrate``, ``embedded``, ``cluster``, ``proxy``
and ``cli_base`` (``tests/unit/test_no_raw_sql.py`` holds the list).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s")


@dataclass(frozen=True)
class Query:
    """One SQL statement in psycopg form (``%(name)s``) and its asyncpg form
    (``$n``, with the parameter names in ``$n`` order)."""

    text: str
    parametrized: bool = True
    asyncpg_text: str = field(init=False)
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        names: list[str] = []
        if self.parametrized:

            def number(match: re.Match[str]) -> str:
                name = match.group(1)
                if name is None:
                    return "%"
                if name not in names:
                    names.append(name)
                return f"${names.index(name) + 1}"

            converted = _PLACEHOLDER.sub(number, self.text)
        else:
            converted = self.text
        object.__setattr__(self, "asyncpg_text", converted)
        object.__setattr__(self, "names", tuple(names))

    def asyncpg_args(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]
