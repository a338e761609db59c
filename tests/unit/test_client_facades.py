"""The two clients are one table each over the same operations (pure
Python, no server): every operation is a method of both, with the
operation's signature (its result unwrapped from ``Flow[...]``) and
docstring, blocking in :class:`Office` and awaitable in :class:`AsyncOffice`."""

from __future__ import annotations

import inspect

from controlplane.client import AsyncOffice, Office, Operations
from controlplane.client.core import OperationsCore

#: What a client has besides its operations: its lifecycle and the one
#: method without I/O.
LIFECYCLE = {"close", "open", "pool", "report_keyless"}


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def operations() -> set[str]:
    return public(Operations) - public(OperationsCore) - {"MISSING_COLUMN_CONSEQUENCES"}


def test_both_clients_offer_every_operation_and_nothing_else() -> None:
    assert public(Office) - LIFECYCLE == operations()
    assert public(AsyncOffice) - LIFECYCLE == operations()


def test_a_client_method_shows_the_operation_signature_and_docstring() -> None:
    for name in operations():
        operation = getattr(Operations, name)
        expected = inspect.signature(operation)
        for client in (Office, AsyncOffice):
            method = getattr(client, name)
            shown = inspect.signature(method)
            assert shown.parameters == expected.parameters, (client, name)
            assert shown.return_annotation == str(expected.return_annotation)[5:-1], name
            assert method.__doc__ and method.__doc__ == operation.__doc__, name
        assert not inspect.iscoroutinefunction(getattr(Office, name)), name
        assert inspect.iscoroutinefunction(getattr(AsyncOffice, name)), name
