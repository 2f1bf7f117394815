"""The web dashboard, served by ``flowli serve`` beside the HTTP service: a login with a
dashboard user, the runs of the user's applications and each run's journal as a timeline."""

from ._pages import Dashboard as Dashboard

__all__ = ["Dashboard"]
