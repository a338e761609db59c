"""The documents hold: README and operations examples run as written, the
generated reference is current, docs/api.md's contract matches the catalog."""
