"""Pipeline schedules: a stored pipeline declaration and a trigger. Each firing creates an
ordinary pipeline through the idempotent create, keyed by the schedule and the firing instant,
so a firing creates exactly one pipeline however many service processes fire it."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowli.access import Access, owned
from flowli.domain import START_RUNS, redact
from flowli.engine import SCHEDULE, Engine, ScheduleError, firing_key
from flowli.store import NewItem

from ._inputs import PipelineInputError, ScheduleIn, read
from ._service import Pipelines
from ._spec import declaration


def schedule_input(body: ScheduleIn | Any) -> ScheduleIn:
    """A schedule's body (a ``ScheduleIn``, or a mapping read into one) with its pipeline
    validated now, not at the first firing (its trigger is validated where the schedule is
    stored: ``flowli.engine.trigger``)."""
    body = read(ScheduleIn, body)
    declaration(body.pipeline)
    return body


class Schedules:
    def __init__(self, engine: Engine, pipelines: Pipelines):
        self.engine = engine
        self.pipelines = pipelines
        engine.on_fire("pipeline", self._fire)

    async def _fire(self, item: Any, instant: datetime, items: Sequence[NewItem]) -> None:
        app = await self.engine.items.find("application", item.application, "")
        access = Access(item.application, app.id if app else 0, "operator", f"schedule:{item.body['name']}")
        body = {**item.body["target"]["pipeline"], "idempotencyKey": firing_key(item, instant)}
        await self.pipelines.create(access, body, idempotent=True, items=items)

    def _json(self, item: Any) -> dict[str, Any]:
        b = item.body
        return {"id": item.id, "name": b["name"], **b["trigger"], "state": b["state"], "nextFireAt": b["nextFireAt"],
                "lastFireAt": b["lastFireAt"], "firings": b.get("firings", 0),
                "pipeline": redact(b["target"].get("pipeline"))}  # its sensitive context values, as a pipeline's

    async def create(self, access: Access, body: ScheduleIn | Any) -> dict[str, Any]:
        """Store a schedule: ``body`` a ``ScheduleIn`` (the HTTP service's, as it read it), or a
        mapping read into one."""
        access.require(START_RUNS)
        body = schedule_input(body)
        pipeline = body.pipeline.model_dump(exclude_unset=True)  # the create body as it was sent
        try:
            made = await self.engine.add_schedule(
                body.name, {"kind": "pipeline", "pipeline": pipeline}, cron=body.cron, timezone=body.timezone,
                interval=body.intervalSeconds, at=body.runAt, application=access.application)
        except ScheduleError as exc:
            raise PipelineInputError(str(exc)) from None
        return await self.get(access, made["id"])

    async def _item(self, access: Access, schedule_id: Any) -> Any:
        return await owned(self.engine, access, SCHEDULE, schedule_id, "schedule")

    async def get(self, access: Access, schedule_id: Any) -> dict[str, Any]:
        return self._json(await self._item(access, schedule_id))

    async def list(self, access: Access) -> builtins.list[dict[str, Any]]:
        return [self._json(i) for i in await self.engine.items.list(SCHEDULE, access.application)]

    async def delete(self, access: Access, schedule_id: Any) -> None:
        access.require(START_RUNS)
        item = await self._item(access, schedule_id)
        await self.engine.items.delete(SCHEDULE, item.id)

    async def set_state(self, access: Access, schedule_id: Any, state: str) -> dict[str, Any]:
        access.require(START_RUNS)
        item = await self._item(access, schedule_id)
        # a firing counts itself in the same item meanwhile: change the body read, else read again
        while not await self.engine.items.update(SCHEDULE, item.id, {**item.body, "state": state},
                                                 self.engine.clock.now(), expect=item.body):
            item = await self._item(access, schedule_id)
        return await self.get(access, item.id)
