"""Who calls, in one room: applications, their API keys and settings, dashboard users, and the
access of a caller (``Access``: its application, its role checked by the capabilities it grants,
its principal for the engine); and the refusals of the application's services. The HTTP service,
MCP, the dashboard and the CLI authenticate here."""

from ._applications import APPLICATION as APPLICATION
from ._applications import KEY as KEY
from ._applications import MAX_ID as MAX_ID
from ._applications import ROLES as ROLES
from ._applications import SESSION as SESSION
from ._applications import USER as USER
from ._applications import Access as Access
from ._applications import Applications as Applications
from ._applications import digest as digest
from ._applications import item_id as item_id
from ._applications import key_of as key_of
from ._applications import owned as owned
from ._errors import Conflict as Conflict
from ._errors import Forbidden as Forbidden
from ._errors import NotFound as NotFound
from ._errors import ServiceError as ServiceError
from ._errors import Unauthorized as Unauthorized
from ._errors import Unavailable as Unavailable

__all__ = ["APPLICATION", "KEY", "MAX_ID", "ROLES", "SESSION", "USER", "Access", "Applications", "Conflict", "Forbidden",
           "NotFound", "ServiceError", "Unauthorized", "Unavailable", "digest", "item_id", "key_of", "owned"]
