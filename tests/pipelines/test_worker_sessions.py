"""A worker session expires when its worker falls silent: after SESSION_TTL_SECONDS without a
heartbeat or any other call it answers 401 (bootstrap again), while a worker that keeps calling
keeps it. In process, on a clock that moves only when told (the TTL is a minute of real time)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flowli import Registry
from flowli.pipelines import Applications, Pipelines, Unauthorized, Workers, install
from flowli.testing import Clock

pytestmark = pytest.mark.integration

SESSION_TTL_SECONDS = 60
"""The TTL the README documents: six heartbeat intervals of 10 s."""


async def test_a_worker_session_expires_when_its_worker_falls_silent(open_engine):
    registry = Registry()
    install(registry)
    clock = Clock()
    async with open_engine(registry, clock=clock, worker=False) as engine:
        apps = Applications(engine)
        _, key = await apps.create("billing")
        workers = Workers(engine, Pipelines(engine))
        made = await workers.bootstrap(await apps.authenticate(key), {"workerName": "w", "supportedHandlers": ["H"]})
        token = made["workerSessionToken"]
        for _ in range(4):  # a worker that keeps calling keeps its session, well past the TTL
            await clock.advance(timedelta(seconds=SESSION_TTL_SECONDS / 2))
            await workers.heartbeat(await workers.session(token), {})
        await clock.advance(timedelta(seconds=SESSION_TTL_SECONDS / 2))
        assert await workers.pull(await workers.session(token), {"waitSeconds": 0}) is None  # a poll is a sign of life
        await clock.advance(timedelta(seconds=SESSION_TTL_SECONDS + 1))
        with pytest.raises(Unauthorized, match=f"expired: its worker sent nothing for {SESSION_TTL_SECONDS} s"):
            await workers.session(token)
