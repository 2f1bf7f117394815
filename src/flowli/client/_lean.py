"""The HTTP client of ``HttpWorker``'s hot path: HTTP/1.1 on one keep-alive connection of
asyncio streams, each request written whole, its answer parsed by httptools (uvicorn's parser).

Why not httpx here: a worker sends four or five requests per stage, and on this project's
measurement (``python -m bench.clients``) httpx as the worker used it cost its process about
0.68 ms of CPU per request against 0.08 ms for this client (0.20 for aiohttp): the worker's CPU
was the second largest share of a stage's. It speaks only what the worker needs: one request at
a time per client (the worker has a client per long poll and per job slot; a second request
waits for the first), JSON bodies, a
response with a length or chunked, TLS with the context it is given. Its failures are httpx's
``TransportError`` (a subclass), so that its caller handles both clients alike; a request is
sent twice only when the service closed a kept connection before it read the request (the
connection closed with no byte of an answer, on a connection that had served requests before);
an answer lost otherwise is the caller's to repeat, as with httpx."""

from __future__ import annotations

import asyncio
import select
import ssl as _ssl
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httptools
import httpx
import orjson


class LeanTransportError(httpx.TransportError):
    """The connection failed, closed, or the answer did not come within the timeout."""


class LeanResponse:
    """An answer: its status, headers (lower-case names) and body."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes):
        self.status_code, self.headers, self.content = status_code, headers, content

    def json(self) -> Any:
        return orjson.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class _Cut(EOFError):
    """The connection closed before the answer ended; ``answered``: some of it had come."""

    def __init__(self, why: str, *, answered: bool):
        super().__init__(why)
        self.answered = answered


class _Answer:
    """httptools' callbacks: an answer as it is parsed."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.done = False
        self.keep = False
        self.parser: Any = None

    def on_headers_complete(self) -> None:
        self.keep = self.parser.should_keep_alive()  # read here: httptools forgets it once the answer ends

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class LeanClient:
    """Requests to ``base_url`` (``http`` or ``https``) over one connection, opened on the first
    request and kept while the service keeps it. ``headers`` go with every request (and can be
    updated); ``timeout`` bounds each request from its write to its answer's last byte."""

    def __init__(self, base_url: str, *, timeout: float, headers: dict[str, str] | None = None,
                 ssl: _ssl.SSLContext | None = None):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the service's URL must be http:// or https:// with a host, not {base_url!r}")
        default = 443 if parts.scheme == "https" else 80
        self.host = parts.hostname
        self.port = parts.port or default
        self.prefix = parts.path.rstrip("/")
        self.ssl = (ssl or _ssl.create_default_context()) if parts.scheme == "https" else None
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = host if self.port == default else f"{host}:{self.port}"
        self.timeout = timeout
        self.headers: dict[str, str] = dict(headers or {})
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._turn = asyncio.Lock()

    async def __aenter__(self) -> LeanClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def post(self, path: str, *, json: Any = None, headers: dict[str, str] | None = None) -> LeanResponse:
        return await self.request("POST", path, json=json, headers=headers)

    async def get(self, path: str, *, headers: dict[str, str] | None = None) -> LeanResponse:
        return await self.request("GET", path, headers=headers)

    async def request(self, method: str, path: str, *, json: Any = None,
                      headers: dict[str, str] | None = None) -> LeanResponse:
        body = b"" if json is None and method == "GET" else orjson.dumps(json)
        head = [f"{method} {self.prefix}{path} HTTP/1.1\r\nHost: {self.authority}\r\n"]
        for name, value in (self.headers | headers if headers else self.headers).items():
            head.append(f"{name}: {value}\r\n")
        if method != "GET":
            head.append(f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n")
        head.append("\r\n")
        data = "".join(head).encode("latin-1") + body
        async with self._turn:  # one request at a time on the connection (a renewal waits for a result)
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._exchange(data)
            except TimeoutError:
                self._drop()
                raise LeanTransportError(f"no answer from {self.authority} within {self.timeout:g} s") from None
            except (OSError, EOFError, httptools.HttpParserError) as exc:
                self._drop()
                raise LeanTransportError(f"{method} {path} to {self.authority}: {exc or type(exc).__name__}") from exc
            except BaseException:  # cancelled between its write and its answer: the connection is not reusable
                self._drop()
                raise

    async def _exchange(self, data: bytes) -> LeanResponse:
        kept = self._kept()
        if not kept:
            self._drop()
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port, ssl=self.ssl)
        try:
            return await self._answer(data)
        except _Cut as exc:
            if not kept or exc.answered:
                raise
            # a kept connection the service closed as the request went out, before reading it (a
            # server closes an idle connection only between requests): sent again, once, on a new one
            self._drop()
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port, ssl=self.ssl)
            return await self._answer(data)

    def _kept(self) -> bool:
        """Whether the connection is open and idle as it should be: nothing to read from it (an
        idle HTTP/1.1 connection that is readable was closed by the service, or is broken)."""
        reader, writer = self._reader, self._writer
        if reader is None or writer is None or reader.at_eof() or writer.is_closing():
            return False
        sock = writer.get_extra_info("socket")
        try:
            readable, _, _ = select.select([sock], [], [], 0) if sock is not None else ([], [], [])
        except (OSError, ValueError):
            return False
        return not readable

    async def _answer(self, data: bytes) -> LeanResponse:
        assert self._reader is not None and self._writer is not None
        reader = self._reader
        self._writer.write(data)
        answer = _Answer()
        parser = answer.parser = httptools.HttpResponseParser(answer)
        got = False
        try:
            while not answer.done:
                chunk = await reader.read(65536)
                if not chunk:
                    raise EOFError("the service closed the connection before its answer ended")
                got = True
                parser.feed_data(chunk)
        except (ConnectionError, EOFError) as exc:
            raise _Cut(str(exc) or type(exc).__name__, answered=got) from exc
        finally:
            answer.parser = None  # the parser holds the answer: the two would be a reference cycle
        if not answer.keep:
            self._drop()
        return LeanResponse(parser.get_status_code(), answer.headers, b"".join(answer.body))

    def _drop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def aclose(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, _ssl.SSLError):  # closed already by the service: nothing to wait for
                pass
