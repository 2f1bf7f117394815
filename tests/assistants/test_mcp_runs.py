"""The two MCP writes that move a Python run on, over streamable HTTP on a real ``flowli serve``:
``send_signal`` (a message to the run's channel) and ``cancel_workflow`` (recorded with its
reason), each refused where the run does not allow it, for a viewer, for the engine's own runs,
and waiting for a person's approval under an assistant's key."""

from __future__ import annotations

from typing import Any

import pytest

from ..http.test_access import assistant_key
from ..served import Names
from .test_mcp import call, over_http, refused
from .test_mcp import served as served  # noqa: F401 - a fixture (both backends)

pytestmark = pytest.mark.e2e


async def test_send_signal_gives_a_waiting_run_its_message(served: Any, names: Names) -> None:
    svc, keys, _ = served
    note = names("note")
    async with over_http(svc.url, keys["admin"]) as client:
        wid = (await call(client, "start_workflow", workflow_type="ops.await_message",
                          inputs={"note": note}))["workflow_id"]
        sent = await call(client, "send_signal", workflow_id=wid, channel="go", payload={"amount": 12})
        assert sent["workflow_id"] == wid and sent["channel"] == "go" and sent["seq"] >= 1
        done = await call(client, "watch_workflow", workflow_id=wid, timeout_seconds=60)
        assert done["status"] == "COMPLETED" and done["output"] == {"note": note, "message": {"amount": 12}}, done
        # a finished run takes no more messages; a blank channel names the argument
        assert "signal" in (await refused(client, "send_signal", workflow_id=wid, channel="go", payload=1))
        assert "channel" in (await refused(client, "send_signal", workflow_id=wid, channel=" ", payload=1))
    async with over_http(svc.url, keys["viewer"]) as client:  # a viewer looks and cannot act
        assert "runs:operate" in (await refused(client, "send_signal", workflow_id=wid, channel="go"))
    async with over_http(svc.url, keys["other"]) as client:  # another application's run is no run
        assert "unknown" in (await refused(client, "send_signal", workflow_id=wid, channel="go")).lower()


async def test_cancel_workflow_ends_a_waiting_run_with_its_reason(served: Any, names: Names) -> None:
    svc, keys, _ = served
    async with over_http(svc.url, keys["admin"]) as client:
        wid = (await call(client, "start_workflow", workflow_type="ops.await_message",
                          inputs={"note": names("n")}))["workflow_id"]
        assert "reason" in await refused(client, "cancel_workflow", workflow_id=wid, reason="")
        asked = await call(client, "cancel_workflow", workflow_id=wid, reason="the order was withdrawn")
        assert asked == {"workflow_id": wid, "status": "PENDING", "cancel_requested": True}
        ended = await call(client, "watch_workflow", workflow_id=wid, timeout_seconds=60)
        assert ended["status"] == "FAILED" and ended["reason"]["code"] == "CANCELLED", ended
        history = await call(client, "get_workflow_history", workflow_id=wid, include_state_data=True)
        assert "the order was withdrawn" in str(history)  # the reason is recorded with the request
        assert "cancel" in (await refused(client, "cancel_workflow", workflow_id=wid, reason="again")).lower()
        # the engine's own runs (an approval here) move on through their own operations only
        bot = assistant_key(svc.db, served[2], "admin")["apiKey"]
    async with over_http(svc.url, bot) as assistant:
        other = (await call(assistant, "start_workflow", workflow_type="ops.await_message",
                            inputs={"note": names("m")}))
        assert other["status"] == "approval_required", other  # an assistant's write waits for a person
        waits = await call(assistant, "send_signal", workflow_id=other["approval_id"], channel="go", payload=1)
        assert waits["status"] == "approval_required", waits
    async with over_http(svc.url, keys["admin"]) as client:
        own = await refused(client, "cancel_workflow", workflow_id=other["approval_id"], reason="mine")
        assert "flowli.mcp_approval" in own and "own operations" in own, own
