"""``PipelinesClient``: create, look up, list and act on pipelines over HTTP."""

from __future__ import annotations

from typing import Any

import httpx


class ClientError(Exception):
    """A refusal of the service: its status and its one-sentence error (and any extra fields)."""

    def __init__(self, status: int, error: str, body: Any = None):
        super().__init__(f"{status}: {error}")
        self.status = status
        self.error = error
        self.body = body


def _check(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
            error = body.get("error") or body.get("reason") or response.text
        except ValueError:
            body, error = None, response.text
        raise ClientError(response.status_code, str(error), body)
    if response.status_code == 204 or not response.content:
        return None
    return response.json()


class PipelinesClient:
    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0, transport: Any = None):
        self.http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers={"X-API-Key": api_key}, timeout=timeout,
                                      transport=transport)

    async def __aenter__(self) -> PipelinesClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    async def create(self, pipeline: dict[str, Any]) -> dict[str, Any]:
        """The legacy create (``POST /pipelines``): always a new pipeline."""
        return dict(_check(await self.http.post("/pipelines", json=pipeline)))

    async def create_idempotent(self, pipeline: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        """``POST /pipelines/idempotent``: ``{"pipeline", "created", "wasExisting"}``; ClientError 409
        when the key was used for another intent (its ``body["pipelineId"]`` names that one)."""
        body = {**pipeline, **({"idempotencyKey": idempotency_key} if idempotency_key else {})}
        return dict(_check(await self.http.post("/pipelines/idempotent", json=body)))

    async def by_idempotency_key(self, key: str) -> dict[str, Any]:
        return dict(_check(await self.http.post("/pipelines/by-idempotency-key", json={"idempotencyKey": key})))

    async def get(self, pipeline_id: int) -> dict[str, Any]:
        return dict(_check(await self.http.get(f"/pipelines/{pipeline_id}")))

    async def list(self, *, page_number: int = 1, page_size: int = 20, search: str | None = None,
                   statuses: list[str] | None = None, keywords: dict[str, str] | None = None,
                   name: str | None = None) -> dict[str, Any]:
        params: list[tuple[str, Any]] = [("pageNumber", page_number), ("pageSize", page_size)]
        params += [("search", search)] if search else []
        params += [("name", name)] if name else []
        params += [("statuses", s) for s in statuses or []]
        params += [("keywords", f"{k}:{v}") for k, v in (keywords or {}).items()]
        return dict(_check(await self.http.get("/pipelines", params=params)))

    async def append_stages(self, pipeline_id: int, stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(_check(await self.http.post(f"/pipelines/{pipeline_id}/stages", json={"stages": stages}))["stages"])

    async def resume_stage(self, stage_id: int, approved: bool, rejection_reason: str | None = None) -> None:
        body: dict[str, Any] = {"approved": approved}
        if rejection_reason is not None:
            body["rejectionReason"] = rejection_reason
        _check(await self.http.post(f"/stages/{stage_id}/resume", json=body))

    async def pause(self, pipeline_id: int) -> dict[str, Any]:
        return dict(_check(await self.http.post(f"/pipelines/{pipeline_id}/pause")))

    async def resume(self, pipeline_id: int) -> dict[str, Any]:
        return dict(_check(await self.http.post(f"/pipelines/{pipeline_id}/resume")))

    async def cancel(self, pipeline_id: int) -> dict[str, Any]:
        return dict(_check(await self.http.post(f"/pipelines/{pipeline_id}/cancel")))

    async def rerun_stage(self, stage_id: int, rerun_all_next_stages: bool = False) -> dict[str, Any]:
        return dict(_check(await self.http.post("/pipelines/rerunStage", json={
            "stageId": stage_id, "rerunAllNextStages": rerun_all_next_stages})))

    async def skip_stage(self, stage_id: int) -> dict[str, Any]:
        return dict(_check(await self.http.post("/pipelines/skipStage", json={"stageId": stage_id})))

    async def history(self, pipeline_id: int) -> list[dict[str, Any]]:
        return list(_check(await self.http.get(f"/pipelines/{pipeline_id}/history")))
