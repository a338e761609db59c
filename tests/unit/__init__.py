"""Tier 1, run first: pure Python, no server (the key builders against the
vectors, cron arithmetic, the import graphs, the client facades, the released
files' pins). ``conftest.py`` here refuses the database fixtures."""
