"""The vocabulary of deciders, the declarative form of a workflow (see ``Registry.decider``):
the commands that reach a decider's execution, the events it records, the effects it asks of
the engine.

    from flowli.engine.deciders import Start, Signal, Event, Delegate, Complete
"""

from ._decider import Adopted as Adopted
from ._decider import Answered as Answered
from ._decider import Cancel as Cancel
from ._decider import CancelRequested as CancelRequested
from ._decider import Child as Child
from ._decider import ChildEnded as ChildEnded
from ._decider import Command as Command
from ._decider import Complete as Complete
from ._decider import Decider as Decider
from ._decider import Delegate as Delegate
from ._decider import Effect as Effect
from ._decider import Event as Event
from ._decider import Expired as Expired
from ._decider import Fail as Fail
from ._decider import Failed as Failed
from ._decider import Index as Index
from ._decider import Retried as Retried
from ._decider import Signal as Signal
from ._decider import Start as Start
from ._decider import Timer as Timer
from ._decider import TimerFired as TimerFired
from ._decider import Withdraw as Withdraw

__all__ = [
    "Adopted",
    "Answered",
    "Cancel",
    "CancelRequested",
    "Child",
    "ChildEnded",
    "Command",
    "Complete",
    "Decider",
    "Delegate",
    "Effect",
    "Event",
    "Expired",
    "Fail",
    "Failed",
    "Index",
    "Retried",
    "Signal",
    "Start",
    "Timer",
    "TimerFired",
    "Withdraw",
]
