"""Who may ask the dashboard.

:class:`Guard` wraps every request: a Host header that names no host the
dashboard serves is refused (400), so a name an attacker rebinds to the
dashboard's address reads nothing; a POST not sent by the dashboard's own
pages (its Origin, or its Referer when it has no Origin, is another site's, or
it has neither) is refused (403); and every response forbids framing and
anything but the dashboard's own stylesheet (Content-Security-Policy).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("office.ui")


#: The names of the loopback interface a browser puts in a Host header.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})

#: Headers on every response. The pages load nothing but /static/office.css,
#: /static/office.js (the only script: no inline script or handler runs) and
#: the empty data: icon, and fetch nothing but themselves (the live refresh);
#: no other site may frame them
#: (the confirmation page is one click from an action).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; object-src 'none'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Same-origin requests keep their Referer (a POST without Origin is
    # checked by it); other sites learn nothing of the pages' URLs.
    "Referrer-Policy": "same-origin",
}


def host_name(value: str) -> str:
    """A host as the checks compare it: lower case, no port, no brackets, no
    final dot, an IP address in its canonical form; "" for a malformed one."""
    text = value.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        name, rest = (text[1:end], text[end + 1 :]) if end > 0 else ("", "")
    elif text.count(":") > 1:  # a bare IPv6 address (a --host or --allowed-host)
        name, rest = text, ""
    else:
        name, colon, port = text.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return ""
    name = name.removesuffix(".")
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name if name and all(c.isalnum() or c in "-._" for c in name) else ""


def served_hosts(bind: str, allowed: Iterable[str] = ()) -> frozenset[str]:
    """The names a Host header may carry: the bound address (the loopback
    names too when it is a loopback address or every address) and
    ``allowed`` (``--allowed-host``). The unspecified address (``0.0.0.0``,
    ``::``) names no host, so it is never one of them."""
    names = {name for name in map(host_name, allowed) if name}
    bound = host_name(bind)
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(bound)
    except ValueError:
        address = None
    if address is None:
        if bound:
            names.add(bound)
        if bound == "localhost":
            names |= LOOPBACK_NAMES
    elif address.is_unspecified:
        names |= LOOPBACK_NAMES
    else:
        names.add(bound)
        if address.is_loopback:
            names |= LOOPBACK_NAMES
    return frozenset(names)


def foreign_post(headers: Headers, own_origin: str) -> str | None:
    """Why a POST is not one of the dashboard's own (None when it is): its
    Origin, or its Referer's origin when it sends no Origin, must be
    ``own_origin``. A POST with neither is refused too: every browser that
    runs a page sends Origin with a form's POST, so only a client that hides
    where it comes from sends neither."""
    origin = headers.get("origin")
    if origin:
        if origin.strip().lower() != own_origin:
            return f"this POST comes from another site ({origin[:100]})"
        return None
    referer = headers.get("referer")
    if referer:
        parts = urlsplit(referer.strip())
        if f"{parts.scheme}://{parts.netloc}".lower() != own_origin:
            return "this POST comes from another site (its Referer)"
        return None
    return "a POST must carry the dashboard's own Origin or Referer"


class Guard:
    """ASGI middleware in front of every route: the Host check, the POST's
    origin check, and :data:`SECURITY_HEADERS` on every response."""

    def __init__(
        self,
        app: ASGIApp,
        hosts: frozenset[str],
        refuse: Callable[[Request, int, str], Response],
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        headers = Headers(scope=scope)
        host = headers.get("host", "")
        why = None
        if host_name(host) not in self.hosts:
            log.warning("refused Host header %r", host[:100])
            status, why = (
                400,
                (
                    f"this dashboard does not serve the host {host[:100]!r}"
                    " (start officectl ui with --allowed-host NAME to serve a name)"
                ),
            )
        elif scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            status = 403
            why = foreign_post(headers, f"{scope['scheme']}://{host.strip().lower()}")
        if why is not None:
            response = self.refuse(Request(scope), status, why)
            await response(scope, receive, send_guarded)
            return
        await self.app(scope, receive, send_guarded)
