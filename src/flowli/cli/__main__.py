"""``python -m flowli.cli``: the same as the ``flowli`` command."""

from flowli.cli import main

main()
