"""An execution id from outside (a route, an MCP tool's argument, a dashboard form or path, the
command line) is checked before it reaches a store or the archive: one without an eid's form is
the id of no run (404 over HTTP, one sentence over MCP and the CLI), never a 500, and never tells
whether a file exists on the server (``../../x`` against the archive folder)."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from ..assistants.test_mcp import over_http, refused
from ..dashboard.conftest import csrf_of, logged_in
from ..served import PASSWORD, Names, Servers, Service, clerk, flowli, log_checked

pytestmark = pytest.mark.e2e


def planted(svc: Service, names: Names) -> tuple[str, str]:
    """A JSON file beside the shared SQLite server's bucket, and the archive folder made: the eid
    that reaches the file through the archive (``../../probe-…``), and one that reaches none."""
    db = Path(svc.db.removeprefix("sqlite:///"))
    (Path(f"{db}-bucket") / "archive").mkdir(parents=True, exist_ok=True)
    probe = names("probe")
    (db.parent / f"{probe}.json").write_text('{"record": {"eid": "x"}, "journal": []}')
    return f"../../{probe}", f"../../{names('absent')}"


async def test_a_malformed_eid_is_no_run_on_every_entry_point_and_tells_nothing(servers: Servers, names: Names):
    svc = servers.get("sqlite")  # the archive is a folder beside the SQLite file: one backend says it
    present, absent = planted(svc, names)
    app = names("billing")
    _, key, _ = await svc.application(app)
    async with clerk(svc.db) as apps:
        await apps.create_user(names.email("ann"), PASSWORD, "operator", [app])
    with log_checked(svc):
        async with httpx.AsyncClient(base_url=svc.url, headers={"X-API-Key": key}, timeout=30) as api:
            for eid in ("%00", "..%5C..%5Cx", "x" * 300, "NOT-A-UUID", str(uuid.uuid4()).upper()):
                for path in ("", "/history"):
                    r = await api.get(f"/catalog/runs/{eid}{path}")
                    assert r.status_code == 404 and "unknown execution" in r.json()["error"], (eid, path, r.text)
                r = await api.post(f"/catalog/runs/{eid}/terminate", json={"reason": "stale"})
                assert r.status_code == 404, (eid, r.text)
        async with logged_in(svc.url, names.email("ann")) as ann:
            csrf = csrf_of((await ann.get("/runs")).text)
            for eid in (present, absent, "\0"):
                quoted = eid.replace(".", "%2E").replace("\0", "%00")
                for path in (f"/runs/{quoted}", f"/runs/{quoted}/events"):
                    r = await ann.get(path)
                    assert r.status_code == 404 and "There is no run" in r.text, (eid, path, r.status_code)
                r = await ann.post(f"/runs/{quoted}/act", data={"csrf": csrf, "action": "cancel"})
                assert r.status_code == 404, (eid, r.status_code)
                r = await ann.post("/stuck/terminate", data={"csrf": csrf, "application": app, "eid": eid,
                                                             "reason": "stale", "confirm": "yes"})
                assert r.status_code == 404, (eid, r.status_code)
                r = await ann.post("/inbox/decide", data={"csrf": csrf, "application": app, "eid": eid,
                                                          "decision": "approve"})
                assert r.status_code == 404, (eid, r.status_code)
        async with over_http(svc.url, key) as client:
            for eid in (present, absent):
                for tool in ("get_workflow_status", "get_workflow_history", "watch_workflow", "retry_workflow"):
                    text = await refused(client, tool, workflow_id=eid)
                    assert "unknown execution" in text and "an execution id is a UUID" in text, (tool, eid, text)
                text = await refused(client, "force_terminate_workflow", workflow_id=eid, reason="stale")
                assert "unknown execution" in text, text
                text = await refused(client, "get_approval", approval_id=eid)
                assert "unknown execution" in text, text
    for eid in (present, absent):
        done = flowli(svc.db, "show", eid)
        assert done.returncode == 2 and "unknown execution" in done.stderr and "Traceback" not in done.stderr, \
            done.stderr
