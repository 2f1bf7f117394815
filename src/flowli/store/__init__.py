"""The Store protocol and its backends. Imports domain only: it stores, fences and hands out."""

from ._journal_sql import JournalFilter as JournalFilter
from ._journal_sql import scope_sql as scope_sql
from ._protocol import HELD as HELD
from ._protocol import Acquired as Acquired
from ._protocol import Acquisition as Acquisition
from ._protocol import Advance as Advance
from ._protocol import Announcement as Announcement
from ._protocol import Claim as Claim
from ._protocol import Fence as Fence
from ._protocol import Guard as Guard
from ._protocol import Intent as Intent
from ._protocol import Item as Item
from ._protocol import Items as Items
from ._protocol import NewExecution as NewExecution
from ._protocol import NewItem as NewItem
from ._protocol import NewMessage as NewMessage
from ._protocol import OpenAttempt as OpenAttempt
from ._protocol import Plan as Plan
from ._protocol import Query as Query
from ._protocol import Renewal as Renewal
from ._protocol import Resume as Resume
from ._protocol import StateIndex as StateIndex
from ._protocol import StateQuery as StateQuery
from ._protocol import StatusChange as StatusChange
from ._protocol import Store as Store
from ._protocol import StoredState as StoredState
from ._protocol import TaskHold as TaskHold
from ._protocol import Views as Views
from ._protocol import WakeCheck as WakeCheck
from ._protocol import WakeWaiters as WakeWaiters
from ._protocol import Withdrawal as Withdrawal
from ._protocol import Write as Write
from ._protocol import WriteResult as WriteResult
from ._protocol import fits as fits
from ._sqlite_file import connect_wal as connect_wal

__all__ = [
    "Acquired",
    "Announcement",
    "Claim",
    "Fence",
    "Guard",
    "HELD",
    "Intent",
    "JournalFilter",
    "NewExecution",
    "NewItem",
    "NewMessage",
    "Renewal",
    "StateIndex",
    "StateQuery",
    "StoredState",
    "OpenAttempt",
    "Resume",
    "Acquisition",
    "StatusChange",
    "Plan",
    "Query",
    "Store",
    "TaskHold",
    "WakeCheck",
    "Item",
    "Items",
    "Views",
    "WakeWaiters",
    "Withdrawal",
    "Write",
    "WriteResult",
    "connect_wal",
    "fits",
    "scope_sql",
]
