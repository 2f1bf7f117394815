"""Whether an application's assistants' writes wait for approval over MCP is read from its
record on every write; a store that fails to answer refuses the write (fails closed), where it
once let the write through unasked. In process, on a SQLite file, with the store's ``find``
failing as a broken database would."""

from __future__ import annotations

from typing import Any

import pytest

import flowli
from flowli.domain import Principal

# the check itself, not a tool call: a store failure cannot be arranged inside a served process,
# and the MCP server calls exactly this before every write (``mcp._server``)
from flowli.mcp._approvals import required
from flowli.pipelines import Applications
from flowli.testing import store_of

pytestmark = pytest.mark.integration


async def test_the_approval_setting_is_read_and_a_failing_store_refuses(tmp_path: Any) -> None:
    engine = await flowli.connect(f"sqlite:///{tmp_path / 'a.db'}", flowli.Registry())
    async with engine:
        apps = Applications(engine)
        await apps.create("billing")
        bot = Principal("claude", "service", ("operator",), "billing", credential="apikey:2")
        assert await required(apps, bot) is False
        await apps.configure("billing", mcpApproval="required")
        assert await required(apps, bot) is True
        # an application that has no record (code of its own): the defaults
        assert await required(apps, Principal("x", "service", ("operator",), "nowhere")) is False
        items = store_of(engine).items()
        find = items.find

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise OSError("disk I/O error")

        items.find = broken  # type: ignore[method-assign]
        try:
            with pytest.raises(OSError, match="disk I/O error"):
                await required(apps, bot)
        finally:
            del items.find
        assert items.find == find
