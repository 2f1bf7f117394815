"""DNS rebinding against a real ``flowli serve``: a request whose ``Host`` is not a name the
service answers to (the loopback names, ``--host``, ``--allowed-host``) is refused with 421 on
every route, the API's, ``/mcp``, ``/metrics`` and the dashboard's alike; a request of a page of
another site (its ``Origin``, or the ``Referer`` of a form without one) is refused with 403, even
with the session's CSRF token."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from ..dashboard.conftest import csrf_of, pipeline
from ..dashboard.test_actions import api_view, run_path
from ..served import Servers, Service, application, flowli, serving

pytestmark = pytest.mark.e2e

MCP_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def port_of(svc: Service) -> int:
    port = urlsplit(svc.url).port
    assert port is not None
    return port


async def every_route(client: httpx.AsyncClient, host: str, key: str) -> dict[str, int]:
    """The status of each kind of route, asked with ``Host: host``."""
    h = {"Host": host}
    out = {}
    for path in ("/healthz", "/metrics", "/openapi.json", "/docs", "/login", "/runs"):
        out[path] = (await client.get(path, headers=h)).status_code
    out["/pipelines"] = (await client.get("/pipelines", headers={**h, "X-API-Key": key})).status_code
    out["/catalog/types"] = (await client.get("/catalog/types", headers={**h, "X-API-Key": key})).status_code
    out["/mcp"] = (await client.post("/mcp", json=MCP_INIT, headers={**h, **MCP_HEADERS, "X-API-Key": key})).status_code
    return out


async def test_a_host_that_is_not_the_services_is_refused_with_421_on_every_route(servers: Servers, names: Any):
    svc = servers.get("sqlite")  # the check is the HTTP layer's: one backend says it
    _, key, _ = await svc.application(names("billing"))
    port = port_of(svc)
    async with httpx.AsyncClient(base_url=svc.url, timeout=30) as client:
        for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.attacker.example:{port}",
                     f"localhost.attacker.example:{port}"):
            refused = await every_route(client, host, key)
            assert set(refused.values()) == {421}, (host, refused)
        r = await client.get("/healthz", headers={"Host": f"attacker.example:{port}"})
        assert "is not a name this service answers to" in r.json()["error"] and "--allowed-host" in r.json()["error"]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", "127.0.0.1", f"[::1]:{port}"):
            served = await every_route(client, host, key)
            assert 421 not in served.values(), (host, served)
            assert served["/healthz"] == 200 and served["/pipelines"] == 200 and served["/mcp"] == 200, (host, served)


async def test_serve_open_behind_a_rebound_name_shows_nothing_and_allowed_hosts_are_served(tmp_path):
    # a server of its own: --open (no login from this machine) and --allowed-host
    async with serving("sqlite", tmp_path, "--open", "--allowed-host", "flowli.example",
                       "--allowed-host", "[fd00::1]:9") as svc:
        _, key, _ = await application(svc.db, "billing")
        made = await pipeline(svc.url, key)
        port = port_of(svc)
        async with httpx.AsyncClient(base_url=svc.url, timeout=30) as local:
            rebound = {"Host": f"attacker.example:{port}"}
            for path in ("/runs", f"/pipelines/{made['id']}", "/inbox", "/stuck", "/metrics"):
                r = await local.get(path, headers={**rebound, "Accept": "text/html"})
                assert r.status_code == 421 and "csrf" not in r.text, (path, r.text)
            html = (await local.get(f"/pipelines/{made['id']}", headers={"Accept": "text/html"})).text
            act = await local.post(f"{run_path(html)}/act", data={"csrf": csrf_of(html), "action": "cancel"},
                                   headers=rebound)
            assert act.status_code == 421
            assert (await api_view(svc.url, key, made["id"]))["status"] in ("NotStarted", "Running")
            for host in (f"flowli.example:{port}", "FLOWLI.EXAMPLE", "[fd00::1]:9"):
                r = await local.get("/healthz", headers={"Host": host})
                assert r.status_code == 200, host
            assert (await local.get("/healthz", headers={"Host": "[fd00::1]:10"})).status_code == 421
            # an allowed name is also a trusted origin: a proxy in front may send another Host
            r = await local.post(f"{run_path(html)}/act", data={"csrf": csrf_of(html), "action": "pause"},
                                 headers={"Origin": "https://flowli.example"})
            assert r.status_code == 303, r.text


def test_an_allowed_host_that_is_no_host_name_is_refused_by_the_cli(tmp_path):
    done = flowli(f"sqlite:///{tmp_path / 'flowli.db'}", "serve", "--port", "0", "--allowed-host", "a/b")
    assert done.returncode != 0 and "--allowed-host 'a/b' is not a host name" in done.stderr
