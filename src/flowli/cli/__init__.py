"""The ``flowli`` command: a thin layer over :class:`flowli.Engine` (see ``flowli --help``)."""

from ._app import app as app
from ._app import main as main

__all__ = ["app", "main"]
