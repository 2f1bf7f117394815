"""Retry classification of a pipeline's stages (``plan``, ``delays``, ``decide`` of
``flowli.pipelines``): the stage options' plan, backoff kinds and their cap, jitter the same on
every replay, terminal codes never retried, the error-code allowlist and the count of retries."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from flowli.pipelines import TERMINAL_CODES, decide, delays, plan

pytestmark = pytest.mark.unit


def stage(**options: Any) -> dict[str, Any]:
    return {"stageName": "s", "stageHandlerName": "H", "options": options}


def stage_plan(**options: Any) -> dict[str, Any]:
    return plan(stage(**options), "p", [], [])


def test_the_terminal_codes_are_the_four_business_classifications():
    assert TERMINAL_CODES == {"BUSINESS_REJECTED", "VALIDATION_ERROR", "INVALID_STATE", "MISSING_REQUIRED_DATA"}


def test_exponential_linear_capped_and_jittered_delays():
    """Every check of the HTTP suite's test of this name, pure, with exact values (the tests below
    go into each rule further)."""
    expo = stage_plan(maxRetries=5, retryInterval=10, backoff="exponential", maxRetryInterval=50)
    assert delays(expo) == [10, 20, 40, 50, 50]
    assert [decide(expo, "TIMEOUT", True, n, "s") for n in range(6)] == [10, 20, 40, 50, 50, None]
    linear = stage_plan(maxRetries=3, retryInterval=10, backoff="linear")
    assert delays(linear) == [10, 20, 30]
    assert stage_plan(maxRetries=3, retryInterval=0)["source"] == "none"  # both must be positive
    jitter = stage_plan(maxRetries=3, retryInterval=10, jitter=True)
    spread = [decide(jitter, "TIMEOUT", True, 0, f"seed-{i}") for i in range(50)]
    assert all(d is not None and 8 <= d <= 12 for d in spread) and len(set(spread)) > 10
    first = decide(jitter, "TIMEOUT", True, 0, "seed-1")
    assert decide(jitter, "TIMEOUT", True, 0, "seed-1") == first == 8.229501354615858
    for code in ("BUSINESS_REJECTED", "VALIDATION_ERROR", "INVALID_STATE", "MISSING_REQUIRED_DATA"):
        listed = stage_plan(maxRetries=3, retryInterval=1, retryOnErrorCodes=[code])
        assert decide(listed, code, True, 0, "s") is None
    assert decide(linear, "TIMEOUT", False, 0, "s") is None and decide(linear, "TIMEOUT", True, 3, "s") is None
    assert decide(linear, "TIMEOUT", True, 2, "s") == 30  # the last retry left


# ---- the plan of the stage options -------------------------------------------------------


def test_the_stage_options_plan_needs_a_positive_maximum_and_a_positive_interval():
    assert stage_plan(maxRetries=3, retryInterval=0) == {"source": "none", "maxRetries": 0, "retryOnErrorCodes": []}
    assert stage_plan(maxRetries=0, retryInterval=5)["source"] == "none"
    assert stage_plan(maxRetries=3)["source"] == "none"
    assert stage_plan(retryInterval=5)["source"] == "none"
    assert stage_plan(maxRetries=None, retryInterval=None)["source"] == "none"
    assert plan({"stageName": "s", "stageHandlerName": "H"}, "p", [], []) == {
        "source": "none", "maxRetries": 0, "retryOnErrorCodes": []}  # no options at all
    options = {"maxRetries": 2, "retryInterval": 1.5, "retryOnErrorCodes": ["TIMEOUT"], "backoff": "linear"}
    assert stage_plan(**options) == {"source": "stage", "maxRetries": 2, "options": options,
                                     "retryOnErrorCodes": ["TIMEOUT"], "jitter": False}
    assert stage_plan(maxRetries=1, retryInterval=1, jitter=True)["jitter"] is True


def test_exponential_linear_and_fixed_backoff_each_capped_by_max_retry_interval():
    assert delays(stage_plan(maxRetries=5, retryInterval=10, backoff="exponential", maxRetryInterval=50)) == [
        10, 20, 40, 50, 50]
    assert delays(stage_plan(maxRetries=5, retryInterval=10, backoff="exponential")) == [10, 20, 40, 80, 160]
    assert delays(stage_plan(maxRetries=3, retryInterval=10, backoff="linear")) == [10, 20, 30]
    assert delays(stage_plan(maxRetries=4, retryInterval=10, backoff="linear", maxRetryInterval=25)) == [10, 20, 25, 25]
    assert delays(stage_plan(maxRetries=3, retryInterval=10, backoff="fixed")) == [10, 10, 10]
    assert delays(stage_plan(maxRetries=3, retryInterval=10)) == [10, 10, 10]  # fixed when not given
    assert delays(stage_plan(maxRetries=2, retryInterval=10, maxRetryInterval=4)) == [4, 4]  # a fixed interval too
    assert delays(stage_plan(maxRetries=3, retryInterval=0.5, backoff="exponential")) == [0.5, 1.0, 2.0]


def test_delays_show_at_most_twenty_and_a_plan_of_none_has_none():
    shown = delays(stage_plan(maxRetries=100, retryInterval=1, backoff="linear"))
    assert shown == [float(n) for n in range(1, 21)]
    assert delays(stage_plan()) == []


# ---- the decision after one failure ------------------------------------------------------


def test_the_delay_of_the_next_retry_follows_the_retries_run_already_until_none_is_left():
    expo = stage_plan(maxRetries=3, retryInterval=10, backoff="exponential")
    assert [decide(expo, "TIMEOUT", True, n, "s") for n in range(5)] == [10, 20, 40, None, None]
    assert decide(stage_plan(), "TIMEOUT", True, 0, "s") is None  # a plan of none: no retry


def test_a_failure_that_is_not_retryable_or_terminal_is_never_retried():
    linear = stage_plan(maxRetries=3, retryInterval=10, backoff="linear")
    assert decide(linear, "TIMEOUT", False, 0, "s") is None
    assert decide(linear, "TIMEOUT", True, 3, "s") is None
    for code in sorted(TERMINAL_CODES):
        assert decide(linear, code, True, 0, "s") is None, code
        listed = stage_plan(maxRetries=3, retryInterval=1, retryOnErrorCodes=[code])
        assert decide(listed, code, True, 0, "s") is None, code  # even when listed
        assert decide(listed, "TIMEOUT", True, 0, "s") is None  # and the list allows only it
    assert decide(linear, "business_rejected", True, 0, "s") == 10  # codes are exact


def test_an_allowlist_retries_only_its_codes_and_an_empty_one_retries_any():
    allow = stage_plan(maxRetries=2, retryInterval=3, retryOnErrorCodes=["TIMEOUT", "UPSTREAM_ERROR"])
    assert decide(allow, "TIMEOUT", True, 0, "s") == 3
    assert decide(allow, "UPSTREAM_ERROR", True, 1, "s") == 3
    assert decide(allow, "RATE_LIMIT_EXCEEDED", True, 0, "s") is None
    assert decide(allow, None, True, 0, "s") is None  # a failure without a code is not on the list
    anything = stage_plan(maxRetries=2, retryInterval=3)
    assert decide(anything, "RATE_LIMIT_EXCEEDED", True, 0, "s") == 3
    assert decide(anything, None, True, 0, "s") == 3
    assert decide(anything, "", True, 0, "s") == 3


def test_jitter_spreads_by_a_fifth_either_way_and_is_the_same_for_the_same_seed():
    jitter = stage_plan(maxRetries=3, retryInterval=10, jitter=True)
    spread = [decide(jitter, "TIMEOUT", True, 0, f"seed-{i}") for i in range(50)]
    assert all(d is not None and 8 <= d <= 12 for d in spread) and len(set(spread)) > 10
    assert decide(jitter, "TIMEOUT", True, 0, "seed-1") == decide(jitter, "TIMEOUT", True, 0, "seed-1")
    # the fraction is the first 8 bytes of the seed's SHA-256: a replay, in any process, waits as long
    fraction = int.from_bytes(hashlib.sha256(b"seed-1").digest()[:8], "big") / 2**64
    assert decide(jitter, "TIMEOUT", True, 0, "seed-1") == 10 * (0.8 + 0.4 * fraction) == 8.229501354615858
    assert decide(jitter, "TIMEOUT", True, 0, "seed-2") == 9.299507305085578


def test_jitter_applies_to_the_capped_delay_and_only_when_asked():
    capped = stage_plan(maxRetries=4, retryInterval=10, backoff="exponential", maxRetryInterval=25, jitter=True)
    got = [decide(capped, "TIMEOUT", True, n, "same") for n in range(4)]
    fraction = int.from_bytes(hashlib.sha256(b"same").digest()[:8], "big") / 2**64
    assert got == [d * (0.8 + 0.4 * fraction) for d in (10, 20, 25, 25)]
    plain = stage_plan(maxRetries=4, retryInterval=10, backoff="exponential", maxRetryInterval=25)
    assert [decide(plain, "TIMEOUT", True, n, "same") for n in range(4)] == [10, 20, 25, 25]
    assert delays(capped) == [10, 20, 25, 25]  # the delays shown are before jitter
