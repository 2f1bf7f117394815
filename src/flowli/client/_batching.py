"""What ``HttpWorker`` sends many to a request when the service offers the batch routes (its
bootstrap answer says ``batch``): its jobs' results, through ``POST /stages/results``.

A job hands its result to ``Results.submit`` and waits for that result's own answer. One task
sends what is waiting, up to ``maxResults`` a request, as soon as it is there: while a request is
out, the results that finish meanwhile wait for the next one (as a store's group commit: no delay
is added, a lone result goes alone). A result answered 503 (not confirmed) or lost with its
connection is sent again; 409 (stale) is the service's last word on it; a 202 needs no ack."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from ._client import ClientError, _check

log = logging.getLogger("flowli.client")


class Results:
    def __init__(self, http: httpx.AsyncClient, limit: int):
        self.http = http
        self.limit = max(1, limit)
        self._waiting: list[tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = []
        self._wake = asyncio.Event()

    async def submit(self, stage: Any, token: str, result: dict[str, Any]) -> dict[str, Any]:
        """Send ``result`` of the job ``token`` of ``stage``; its answer (``status``, ``accepted``,
        ``reason``) once the service gave one that is not 503. A refusal of the result itself
        (400, 404) raises ClientError, as the one-result route's would."""
        done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting.append(({"stageId": stage, "token": token, **result}, done))
        self._wake.set()
        answer = await done
        if answer["status"] == 409:
            log.warning("result of stage %s refused: %s", stage, answer.get("reason"))
        elif answer["status"] >= 400:
            raise ClientError(answer["status"], str(answer.get("reason")), answer)
        return answer

    async def run(self) -> None:
        """Send what waits, batch after batch, until cancelled."""
        delay = 0.1
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                batch, self._waiting = self._waiting[:self.limit], self._waiting[self.limit:]
                try:
                    answers = _check(await self.http.post("/stages/results", json={"results": [b for b, _ in batch]}))
                except (httpx.TransportError, ClientError) as exc:
                    if isinstance(exc, ClientError) and exc.status != 503:
                        for _, done in batch:  # the request itself refused: each job learns why
                            if not done.done():
                                done.set_exception(exc)
                        continue
                    self._waiting[:0] = batch  # not confirmed: the same results again, first
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                delay = 0.1
                again = []
                for (item, done), answer in zip(batch, answers["results"]):
                    if answer["status"] == 503:
                        again.append((item, done))
                    elif not done.done():
                        done.set_result(answer)
                if again:
                    self._waiting[:0] = again
                    await asyncio.sleep(delay)
