"""Claim: put-if-absent; exactly one caller for a key wins, also among concurrent callers and
among stores that share one database."""

from __future__ import annotations

import asyncio

import pytest

from flowli.testing import open_store

from .conftest import T0, at

pytestmark = pytest.mark.integration


async def test_the_first_claim_of_a_key_wins(store):
    assert await store.claim("tick:2030-01-01T12:00", "w1", T0) is True
    assert await store.claim("tick:2030-01-01T12:00", "w2", at(1)) is False
    assert await store.claim("tick:2030-01-01T12:00", "w1", at(2)) is False  # also for the winner
    assert await store.claim("tick:2030-01-01T12:01", "w2", at(3)) is True


async def test_exactly_one_of_ten_concurrent_claims_wins(store):
    outcomes = await asyncio.gather(*(store.claim("k", f"w{i}", T0) for i in range(10)))
    assert sorted(outcomes) == [False] * 9 + [True]


async def test_exactly_one_claim_wins_among_stores_sharing_a_database(shared_url):
    stores = [open_store(shared_url) for _ in range(3)]
    for s in stores:
        await s.open()
    try:
        outcomes = await asyncio.gather(
            *(s.claim(f"k{j}", f"w{i}", T0) for j in range(5) for i, s in enumerate(stores))
        )
        for j in range(5):
            assert sum(outcomes[j * 3 : (j + 1) * 3]) == 1, (j, outcomes)
    finally:
        for s in stores:
            await s.close()
