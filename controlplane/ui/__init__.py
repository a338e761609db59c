"""``officectl ui``: the operator's dashboard (the ``ui`` extra).

:func:`create_app` builds the Starlette application; ``controlplane.cli.ui``
serves it with uvicorn.
"""

from controlplane.ui.app import create_app

__all__ = ["create_app"]
