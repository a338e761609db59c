"""``officectl ui``: serve the dashboard (``controlplane.ui``) with uvicorn.

Its libraries are the ``ui`` extra; without them the command says how to
install them instead of failing on an import.
"""

from __future__ import annotations

from collections.abc import Sequence

import click
import psycopg

from controlplane.cli.base import Context, connect, describe, one_line_errors, stderr, stdout


def _host_names(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> list[str]:
    from controlplane.ui.guard import host_name

    for name in value:
        if not host_name(name):
            raise click.BadParameter(f"{name!r} is not a host name or address")
    return list(value)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    callback=_host_names,
    metavar="NAME",
    help="A host name (or address) the browser may use in the URL, besides the bound "
    "address (and localhost names when that is a loopback or every address); "
    "repeatable. Any other Host header is refused (400).",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Offer actions (cancel or requeue a run, pause/resume an agent, fire a routine, "
    "sweep once) where the role may call them.",
)
@click.pass_obj
@one_line_errors
def ui(obj: Context, host: str, port: int, allowed_hosts: list[str], allow_actions: bool) -> None:
    """The operator's dashboard: server-rendered pages over office's views
    and functions, read-only unless --allow-actions."""
    serve(
        obj.database_url(),
        host=host,
        port=port,
        allow_actions=allow_actions,
        allowed_hosts=allowed_hosts,
    )


def serve(
    url: str, *, host: str, port: int, allow_actions: bool, allowed_hosts: Sequence[str] = ()
) -> None:
    """Serve the dashboard on ``url`` until Ctrl-C (``officectl ui``, and
    ``officectl demo --ui`` after its race)."""
    try:
        import uvicorn

        from controlplane.ui import create_app
    except ImportError as exc:
        raise click.ClickException(
            f"officectl ui needs the ui extra ({exc.name} is missing): "
            "pip install 'office-controlplane[ui]'"
        ) from None
    try:
        # A malformed DSN (ProgrammingError) is one line now, not a banner later.
        connect(url).close()
    except psycopg.OperationalError as exc:
        # The server is down or refuses: the pages show the banner and come
        # back by themselves once it answers, as they do when it goes away
        # while they run; the terminal says why it does not answer now.
        stderr.print(
            f"officectl ui: the database does not answer yet ({describe(exc)}); "
            "the pages show a banner until it does",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    app = create_app(url, allow_actions=allow_actions, host=host, allowed_hosts=allowed_hosts)
    shown = f"[{host}]" if ":" in host else host
    stdout.print(
        f"officectl ui on http://{shown}:{port}/ "
        f"({'actions on' if allow_actions else 'read-only'}); Ctrl-C stops it",
        highlight=False,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")


COMMANDS = (ui,)
