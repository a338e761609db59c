"""The asynchronous client, where users import it from: see
:mod:`controlplane.client.aio`."""

from controlplane.client.aio import AsyncOffice, drive_async

__all__ = ["AsyncOffice", "drive_async"]
