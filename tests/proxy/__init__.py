"""The PL/Proxy scale-out (``office_proxy``) over the topologies of
``topology.py`` (PostgreSQL 15 with plproxy only)."""
