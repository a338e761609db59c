"""office control plane: the thin Python layer over the office PostgreSQL extension."""

__version__ = "0.5.0"
