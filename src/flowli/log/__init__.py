"""Evidence: what a step wrote while it ran (attempt logs and attachments). It explains the
journal; it is never authority, and no decision depends on it. Imports domain only."""

from ._bucket import Bucket as Bucket
from ._bucket import Evidence as Evidence
from ._logger import Attempt as Attempt
from ._logger import attach as attach
from ._logger import attempt_scope as attempt_scope
from ._logger import current_attempt as current_attempt
from ._logger import get_logger as get_logger

__all__ = ["Attempt", "Bucket", "Evidence", "attach", "attempt_scope", "current_attempt", "get_logger"]
