from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..engine.conftest import db_url as db_url  # noqa: F401 - both backends
from ..engine.conftest import open_engine as open_engine  # noqa: F401


@pytest.fixture(autouse=True)
def effects_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Each test counts the effects of its steps in a file of its own."""
    path = tmp_path / "effects"
    monkeypatch.setenv("FLOWLI_TEST_EFFECTS", str(path))
    return path
