"""``officectl``, the operator's command line: :mod:`controlplane.cli.main`
is the command group (the ``officectl`` entry point), each other module one
group of commands, :mod:`controlplane.cli.base` what they share."""
