"""What more than one test module does: scenarios and helpers by capability
(``tasks``, ``routines``, ``parent_wake``, ``keys``, ``clients``, ``daemon``,
``worker``, ``ui``).
A test module imports from here and from ``tests/harness.py``, never from
another test module (``tests/unit/test_import_graph.py`` checks it)."""
