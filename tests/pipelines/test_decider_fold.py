"""The pipeline decider's ``evolve`` shares what an event does not change with the state before
it (it copies only what it touches): a fold must then never change a state it was given. Driven
through every kind of event a pipeline's decisions make, each state before is compared with a
deep copy taken before the next event."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from flowli.engine.deciders import Answered, Failed, Signal, Start, TimerFired
from flowli.pipelines._decider import INITIAL, decide, evolve  # the decider's pure functions, tested alone

pytestmark = pytest.mark.unit


def spec() -> dict[str, Any]:
    from flowli.pipelines._retry import plan  # the plan the service gives each stage

    options = {"maxRetries": 1, "retryInterval": 5}
    stage = {"stageHandlerName": "H", "input": None, "options": options,
             "plan": plan({"options": options, "stageName": "x"}, "p", [], [])}
    return {"pipelineId": 1, "name": "p", "application": "a", "keywords": [], "idempotencyKey": None,
            "context": [{"key": "k", "value": "v"}],
            "stages": [{**stage, "stageName": "a", "id": 10, "dependsOn": []},
                       {**stage, "stageName": "b", "id": 11, "dependsOn": ["a"]}]}


def test_a_fold_never_changes_the_states_it_was_given() -> None:
    commands = [
        Start(spec()),
        Answered("10", 1, {"ok": True, "output": "A", "context": [{"key": "k2", "value": 2, "isSensitive": True}]}),
        Failed("11", 1, "E", "boom", True, None),
        TimerFired("retry:11:1"),
        Signal("pipeline", {"op": "pause"}),
        Signal("pipeline", {"op": "append", "stages": [{**spec()["stages"][0], "stageName": "c", "id": 12,
                                                        "dependsOn": ["b"]}]}),
        Signal("pipeline", {"op": "resume"}),
        Answered("11", 2, {"ok": True, "output": "B", "waiting": True}),
        Signal("pipeline", {"op": "decide", "stage": "b", "approved": True}),
        Signal("pipeline", {"op": "rerun", "stage": "a", "next": True}),
    ]
    state, seen = copy.deepcopy(INITIAL), []
    kinds = set()
    for command in commands:
        before = copy.deepcopy(state)
        events, _ = decide(state, command)
        assert state == before, command  # decide leaves its state as it was
        for event in events:
            kinds.add(event.kind)
            kept = copy.deepcopy(state)
            seen.append((state, kept))
            state = evolve(state, event)
            assert seen[-1][0] == kept, event
    for old, kept in seen:
        assert old == kept
    assert INITIAL == {"spec": None, "order": [], "stages": {}, "ids": {}, "context": {}, "sensitive": [],
                       "paused": False, "outcome": None, "refused": [], "at": None}
    assert {"pipeline.started", "stage.dispatched", "stage.completed", "stage.failed", "stage.retry_scheduled",
            "pipeline.paused", "stages.appended", "stage.waiting_for_approval", "stage.approved",
            "stage.rerun"} <= kinds
