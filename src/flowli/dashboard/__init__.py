"""The web dashboard, served by ``flowli serve`` beside the HTTP service: a login with a
dashboard user; the runs of the user's applications, each run with its timeline, DAG and actions, live
over server-sent events; the inbox, stuck runs, workers, schedules and the catalog."""

from ._app import Dashboard as Dashboard

__all__ = ["Dashboard"]
