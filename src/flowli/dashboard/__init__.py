"""The web dashboard, served by ``flowli serve`` beside the HTTP service: a login with a
dashboard user; the runs of the user's applications, each run with its timeline, DAG and actions, live
over server-sent events; the inbox, stuck runs, workers, schedules and the catalog."""

from ._app import Dashboard as Dashboard
from ._graph import MAX_NODES as MAX_NODES
from ._graph import Node as Node
from ._graph import TooLarge as TooLarge
from ._graph import layered as layered
from ._graph import layout as layout
from ._graph import svg as svg

__all__ = ["MAX_NODES", "Dashboard", "Node", "TooLarge", "layered", "layout", "svg"]
