"""The worker's HTTP client (``flowli.client._lean``: HTTP/1.1 on asyncio streams) against a
real server on loopback that answers as the test tells it: a kept connection is reused, one the
server closed while idle is replaced before anything is sent, an answer without keep-alive or in
chunks is read whole, an answer that never comes or a connection cut mid-answer is a
``TransportError`` (httpx's, so callers handle both clients alike), and a request cancelled
between its write and its answer leaves no half answer for the next one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

# the worker's client is internal to flowli.client (HttpWorker uses it); tested here on its own
from flowli.client._lean import LeanClient

from .garbage import Garbage

pytestmark = pytest.mark.integration

Answer = Callable[[dict[str, Any]], bytes | None]


def ok(body: Any, *, close: bool = False) -> bytes:
    data = json.dumps(body).encode()
    extra = "Connection: close\r\n" if close else ""
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n{extra}\r\n".encode() + data


@asynccontextmanager
async def server(answer: Answer) -> AsyncIterator[dict[str, Any]]:
    """A server whose connections each read requests one at a time and write ``answer(request)``
    (None: write nothing and close). ``seen`` counts connections and keeps each request."""
    seen: dict[str, Any] = {"connections": 0, "requests": []}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = {"line": lines[0], "headers": headers, "body": body, "connection": seen["connections"]}
                seen["requests"].append(request)
                out = answer(request)
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
                if b"Connection: close" in out:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    seen["url"] = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    async with srv:
        yield seen


async def test_requests_share_one_kept_connection_with_their_headers_and_json() -> None:
    async with server(lambda r: ok({"echo": json.loads(r["body"] or b"null"), "path": r["line"]})) as s:
        async with LeanClient(s["url"] + "/base", timeout=5, headers={"X-Worker-Session": "t1"}) as c:
            first = await c.post("/jobs/pull", json={"waitSeconds": 1})
            c.headers["X-Extra"] = "yes"
            second = await c.post("/jobs/ack", json={"token": "a"}, headers={"traceparent": "00-x"})
            third = await c.get("/healthz")
    assert first.status_code == 200 and first.json() == {"echo": {"waitSeconds": 1}, "path": "POST /base/jobs/pull HTTP/1.1"}
    assert second.json()["echo"] == {"token": "a"} and third.json()["path"] == "GET /base/healthz HTTP/1.1"
    assert s["connections"] == 1
    one, two, three = s["requests"]
    assert one["headers"]["x-worker-session"] == "t1" and "x-extra" not in one["headers"]
    assert two["headers"]["x-extra"] == "yes" and two["headers"]["traceparent"] == "00-x"
    assert two["headers"]["content-type"] == "application/json" and one["headers"]["host"] == s["url"][7:]
    assert "traceparent" not in three["headers"] and three["body"] == b""


async def test_answers_read_leave_no_reference_cycle() -> None:
    """Each answer's parts are freed by reference counting (a worker's requests are its hot path:
    a cycle per answer left them to the cyclic collector)."""
    async with server(lambda r: ok({"n": 1})) as s, LeanClient(s["url"], timeout=5) as c:
        await c.post("/warm", json={})  # the connection is opened outside the window checked
        with Garbage() as garbage:
            for _ in range(20):
                assert (await c.post("/jobs/ack", json={"token": "a"})).json() == {"n": 1}
    assert dict(garbage.found) == {}


async def test_a_connection_the_server_closed_is_replaced_and_close_is_honoured() -> None:
    answers = iter([ok({"n": 1}, close=True), ok({"n": 2}), ok({"n": 3})])
    async with server(lambda r: next(answers)) as s, LeanClient(s["url"], timeout=5) as c:
        assert (await c.post("/a", json={})).json() == {"n": 1}
        assert (await c.post("/b", json={})).json() == {"n": 2}  # the answer said close: a new connection
        assert (await c.post("/c", json={})).json() == {"n": 3}
        assert [r["connection"] for r in s["requests"]] == [1, 2, 2]


async def test_an_answer_in_chunks_and_an_empty_one_are_read_whole() -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
               b"5\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\n\r\n")
    empty = b"HTTP/1.1 204 No Content\r\n\r\n"
    answers = iter([chunked, empty, ok("after")])
    async with server(lambda r: next(answers)) as s, LeanClient(s["url"], timeout=5) as c:
        got = await c.post("/x", json=None)
        assert got.json() == {"a": 1} and got.headers["transfer-encoding"] == "chunked"
        none = await c.post("/y", json={})
        assert none.status_code == 204 and none.content == b"" and none.text == ""
        assert (await c.post("/z", json={})).json() == "after" and s["connections"] == 1


async def test_no_answer_and_a_cut_answer_are_transport_errors_and_the_next_request_reconnects() -> None:
    def answer(r: dict[str, Any]) -> bytes | None:
        if r["line"].startswith("POST /silent"):
            return b""  # nothing: the client's timeout
        if r["line"].startswith("POST /cut"):
            return b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{\"partial"  # then the next read blocks
        return ok("fine")

    async with server(answer) as s, LeanClient(s["url"], timeout=5) as c:
        c.timeout = 0.3  # short for the requests that get no whole answer only: a loaded machine may stall 0.3 s
        with pytest.raises(httpx.TransportError, match="no answer .* within 0.3 s"):
            await c.post("/silent", json={})
        c.timeout = 5
        assert (await c.post("/ok", json={})).json() == "fine"
        c.timeout = 0.3
        with pytest.raises(httpx.TransportError):
            await c.post("/cut", json={})
        c.timeout = 5
        assert (await c.post("/ok", json={})).json() == "fine"
        assert s["connections"] == 3  # each failure dropped its connection


async def test_a_kept_connection_closed_before_the_request_was_read_is_replaced_and_the_request_sent_once_more(
        ) -> None:
    """A server closes an idle kept connection between requests: a request that meets that close
    (no byte of an answer) goes again on a new connection; one whose answer was cut does not, nor
    one on a new connection."""
    plan = iter(["ok", "close", "ok", "ok", "cut", "close-new"])

    def answer(r: dict[str, Any]) -> bytes | None:
        step = next(plan)
        if step == "close" or step == "close-new":
            return None  # closed without a byte of an answer
        if step == "cut":
            return b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\n{\""
        return ok(r["line"].split()[1])

    async with server(answer) as s, LeanClient(s["url"], timeout=2) as c:
        assert (await c.post("/one", json={})).json() == "/one"
        assert (await c.post("/two", json={})).json() == "/two"  # met a close: sent again on connection 2
        assert [r["line"].split()[1] for r in s["requests"]] == ["/one", "/two", "/two"]
        assert (await c.post("/three", json={})).json() == "/three"
        with pytest.raises(httpx.TransportError):
            await c.post("/four", json={})  # its answer was cut: not sent again
        with pytest.raises(httpx.TransportError):
            await c.post("/five", json={})  # closed on a new connection: not sent again
        assert [r["line"].split()[1] for r in s["requests"]][-2:] == ["/four", "/five"]


async def test_a_refused_connection_is_a_transport_error() -> None:
    async with server(lambda r: ok(1)) as s:
        url = s["url"]
    async with LeanClient(url, timeout=2) as c:
        with pytest.raises(httpx.TransportError, match="POST /jobs/pull to 127.0.0.1"):
            await c.post("/jobs/pull", json={})


async def test_a_request_cancelled_before_its_answer_leaves_no_half_answer_behind() -> None:
    def answer(r: dict[str, Any]) -> bytes | None:
        return b"" if r["line"].startswith("POST /slow") else ok("next")  # the slow one: no answer yet

    async with server(answer) as s, LeanClient(s["url"], timeout=5) as c:
        slow = asyncio.create_task(c.post("/slow", json={}))
        await asyncio.sleep(0.1)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        assert (await c.post("/next", json={})).json() == "next"  # not the slow one's answer
        assert s["connections"] == 2


async def test_two_requests_at_once_take_turns_on_the_connection() -> None:
    async with server(lambda r: ok(r["line"].split()[1])) as s, LeanClient(s["url"], timeout=5) as c:
        got = await asyncio.gather(*(c.post(f"/n{i}", json={}) for i in range(5)))
        assert [g.json() for g in got] == [f"/n{i}" for i in range(5)] and s["connections"] == 1


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="must be http:// or https:// with a host, not 'ftp://x'"):
        LeanClient("ftp://x", timeout=1)
