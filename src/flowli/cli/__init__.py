"""The ``flowli`` command: a thin layer over :class:`flowli.Engine` (see ``flowli --help``)."""

from . import _catalog, _commands, _mcp, _operators, _service, _verify  # noqa: F401  (they register their commands on the app)
from ._app import app as app

__all__ = ["app", "main"]


def main() -> None:
    """The console script ``flowli``."""
    app(prog_name="flowli")
