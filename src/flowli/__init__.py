"""flowli: durable execution for Python workflows."""

from flowli import testing as testing  # flowli.testing.Clock after a plain `import flowli`
from flowli._connect import connect as connect
from flowli.domain import Principal as Principal
from flowli.engine import Context as Context
from flowli.engine import Engine as Engine
from flowli.engine import Options as Options
from flowli.engine import Registry as Registry

__all__ = ["Context", "Engine", "Options", "Principal", "Registry", "connect", "testing"]
__version__ = "0.1.0"
