"""The Python clients (``Office``, ``AsyncOffice``) and ``officectl``'s
commands against a real database: typed results, errors, counters, logs."""
