"""The HTTP tests run against the session's shared ``flowli serve`` (``service``, both backends;
see ``tests/served.py``), each with an application of its own."""

from __future__ import annotations

from typing import Any

import pytest

from ..served import Names, Service


@pytest.fixture
async def billing(service: Service, names: Names) -> tuple[dict[str, Any], str]:
    """A new application of this test (``billing-…``) on the shared server, and its admin key."""
    application, key, _ = await service.application(names("billing"))
    return application, key
