from ..engine.conftest import db_url as db_url  # noqa: F401 - the fixtures, re-exported
from ..engine.conftest import open_engine as open_engine  # noqa: F401
