"""Which retry rules decide for a stage (``plan``, ``decide``, ``effective_policy`` and
``policy_body`` of ``flowli.pipelines``): the first enabled retry policy whose targeting selects
the stage, else the stage's options, else none; a policy's error-code filter never falls back to
the stage options; a disabled policy counts for nothing."""

from __future__ import annotations

from typing import Any

import pytest

from flowli.pipelines import PipelineInputError, decide, effective_policy, plan, policy_body

pytestmark = pytest.mark.unit

STAGE = {"stageName": "send", "stageHandlerName": "Send", "options": {"maxRetries": 5, "retryInterval": 0.1}}
KEYWORDS = [{"key": "customer", "value": "acme"}, {"key": "urgent", "value": None}]


def policy(name: str = "p", state: str = "enabled", **targeting: Any) -> dict[str, Any]:
    return policy_body({"name": name, "rules": {"maxRetries": 2, "intervalSeconds": 0.1, "backoffMultiplier": 2,
                                                "errorCodes": ["TIMEOUT"]}, "targeting": targeting, "state": state})


def source(policies: list[tuple[int, dict[str, Any]]], stage: dict[str, Any] = STAGE, pipeline: str = "billing",
           keywords: list[dict[str, Any]] = KEYWORDS) -> tuple[str, int | None]:
    made = plan(stage, pipeline, keywords, policies)
    return made["source"], made.get("policyId")


# ---- precedence -------------------------------------------------------------------------------


def test_a_matching_policy_decides_then_the_stage_options_then_none():
    matching = policy(stageNames=["send"])
    assert plan(STAGE, "billing", [], [(7, matching)]) == {
        "source": "policy", "policyId": 7, "maxRetries": 2, "intervalSeconds": 0.1, "backoffMultiplier": 2.0,
        "retryOnErrorCodes": ["TIMEOUT"], "jitter": False}
    assert source([]) == ("stage", None)
    assert source([], {"stageName": "send", "stageHandlerName": "Send"}) == ("none", None)
    # a policy that selects another stage leaves the decision to the options
    assert source([(7, policy(stageNames=["other"]))]) == ("stage", None)


def test_the_first_enabled_matching_policy_in_the_given_order_wins():
    assert source([(3, policy("a", stageNames=["other"])), (5, policy("b")), (9, policy("c"))]) == ("policy", 5)
    assert source([(3, policy("a", state="disabled")), (9, policy("c"))]) == ("policy", 9)
    assert source([(3, policy("a", state="disabled"))]) == ("stage", None)  # disabled: the options decide again
    assert source([(3, policy("a", state="disabled"))], {"stageName": "s", "stageHandlerName": "H"}) == ("none", None)
    assert source([(4, {**policy("x"), "type": "timeout"})]) == ("stage", None)  # only retry policies


def test_a_policy_whose_error_codes_do_not_match_does_not_fall_back_to_the_stage_options():
    chosen = plan(STAGE, "billing", [], [(7, policy(stageNames=["send"]))])
    assert decide(chosen, "UPSTREAM_ERROR", True, 0, "seed") is None  # the stage's five retries do not apply
    assert [decide(chosen, "TIMEOUT", True, n, "seed") for n in range(3)] == [0.1, 0.2, None]
    options = plan(STAGE, "billing", [], [])
    assert decide(options, "UPSTREAM_ERROR", True, 0, "seed") == 0.1


def test_a_policy_plan_grows_by_its_multiplier_never_jitters_and_stops_at_terminal_codes():
    rules = {"maxRetries": 4, "intervalSeconds": 3}
    plain = plan(STAGE, "billing", [], [(1, policy_body({"name": "p", "rules": rules}))])
    assert (plain["backoffMultiplier"], plain["retryOnErrorCodes"], plain["jitter"]) == (1.0, [], False)
    assert [decide(plain, "ANY", True, n, f"seed-{n}") for n in range(5)] == [3, 3, 3, 3, None]
    tripled = plan(STAGE, "billing", [], [(1, policy_body({"name": "p", "rules": {**rules, "backoffMultiplier": 3}}))])
    assert [decide(tripled, "ANY", True, n, "s") for n in range(4)] == [3, 9, 27, 81]  # no cap
    listed = plan(STAGE, "billing", [], [(1, policy_body({"name": "p", "rules": {**rules, "errorCodes": [
        "VALIDATION_ERROR"]}}))])
    assert decide(listed, "VALIDATION_ERROR", True, 0, "s") is None  # terminal even when a policy lists it
    assert decide(plain, "TIMEOUT", False, 0, "s") is None


# ---- targeting ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("targeting", "selected"), [
    ({}, True),
    ({"stageNames": []}, True),  # an empty list does not narrow
    ({"stageNames": ["send", "other"]}, True),
    ({"stageNames": ["other"]}, False),
    ({"stageHandlerNames": ["Send"]}, True),
    ({"stageHandlerNames": ["send"]}, False),  # handler names are exact
    ({"pipelineNames": ["billing"]}, True),
    ({"pipelineNames": ["shipping"]}, False),
    ({"stageNames": ["send"], "pipelineNames": ["shipping"]}, False),  # every given list must contain it
    ({"stageNames": ["send"], "stageHandlerNames": ["Send"], "pipelineNames": ["billing"]}, True),
    ({"tags": {"include": ["customer:acme"]}}, True),
    ({"tags": {"include": ["customer"]}}, True),  # a keyword's key alone
    ({"tags": {"include": ["customer:other"]}}, False),
    ({"tags": {"include": ["customer:other", "urgent"]}}, True),  # any one of them
    ({"tags": {"exclude": ["urgent"]}}, False),
    ({"tags": {"exclude": ["customer:other"]}}, True),
    ({"tags": {"include": ["customer"], "exclude": ["customer:acme"]}}, False),  # exclude wins
], ids=lambda v: str(v))
def test_targeting_selects_a_stage_only_when_every_given_list_contains_it(targeting, selected):
    assert source([(1, policy(**targeting))]) == (("policy", 1) if selected else ("stage", None))


def test_tags_read_the_pipelines_keywords():
    only_acme = policy(tags={"include": ["customer:acme"]})
    assert source([(1, only_acme)], keywords=[]) == ("stage", None)
    assert source([(1, only_acme)], keywords=[{"key": "customer", "value": "acme"}]) == ("policy", 1)
    assert source([(1, policy(tags={"exclude": ["urgent"]}))], keywords=[]) == ("policy", 1)


# ---- what the effective-policy route answers ----------------------------------------------------


def test_the_effective_policy_says_which_decides_its_retries_and_delays():
    by_policy = plan(STAGE, "billing", [], [(7, policy(stageNames=["send"]))])
    assert effective_policy(by_policy) == {"source": "policy", "policyId": 7, "retry": {
        "maxRetries": 2, "delays": [0.1, 0.2], "retryOnErrorCodes": ["TIMEOUT"]}}
    fallback = plan({**STAGE, "options": {"maxRetries": 1, "retryInterval": 0.1}}, "billing", [], [])
    assert effective_policy(fallback) == {"source": "stage", "retry": {
        "maxRetries": 1, "delays": [0.1], "retryOnErrorCodes": []}}
    none = plan({"stageName": "s", "stageHandlerName": "Send"}, "billing", [], [])
    assert effective_policy(none) == {"source": "none", "retry": {"maxRetries": 0, "delays": [],
                                                                  "retryOnErrorCodes": []}}
    expo = plan({**STAGE, "options": {"maxRetries": 3, "retryInterval": 2, "backoff": "exponential", "jitter": True,
                                      "retryOnErrorCodes": ["TIMEOUT"]}}, "billing", [], [])
    assert effective_policy(expo) == {"source": "stage", "retry": {
        "maxRetries": 3, "delays": [2, 4, 8], "retryOnErrorCodes": ["TIMEOUT"]}}  # before jitter


# ---- a policy's body ----------------------------------------------------------------------------


def test_a_policy_body_is_normalized():
    assert policy_body({"name": "send-timeouts", "rules": {"maxRetries": 2, "intervalSeconds": 0.5},
                        "targeting": {"stageNames": ["send"], "pipelineNames": None, "tags": {"include": ["a"]}}}) == {
        "name": "send-timeouts", "type": "retry", "rules": {"maxRetries": 2, "intervalSeconds": 0.5},
        "targeting": {"stageNames": ["send"], "tags": {"include": ["a"], "exclude": []}}, "state": "enabled"}
    assert policy_body({"name": "p", "type": "retry", "rules": {"maxRetries": 0, "intervalSeconds": 0},
                        "state": "disabled"})["state"] == "disabled"


@pytest.mark.parametrize(("body", "message"), [
    ([], "the body must be an object, got []"),
    ({"rules": {}}, "name is required"),
    ({"name": " ", "rules": {"maxRetries": 2, "intervalSeconds": 1}}, "name is required (a nonempty string)"),
    ({"name": "p", "type": "timeout"}, "policy 'p': type must be 'retry', got \"timeout\""),
    ({"name": "p"}, "policy 'p': rules is required"),
    ({"name": "p", "rules": {"maxRetries": 2, "intervalSeconds": 1, "tries": 1}},
     "policy 'p': rules.tries is not a known field"),
    ({"name": "p", "rules": {"maxRetries": "2", "intervalSeconds": 1}},
     "policy 'p': rules.maxRetries must be a number, got \"2\""),
    ({"name": "p", "rules": {"maxRetries": 2, "intervalSeconds": -1}},
     "policy 'p': rules.intervalSeconds must be a non-negative number, got -1"),
    ({"name": "p", "rules": {"maxRetries": True, "intervalSeconds": 1}},
     "policy 'p': rules.maxRetries must be a number, got true"),
    ({"name": "p", "rules": {"maxRetries": 2, "intervalSeconds": 1, "errorCodes": "TIMEOUT"}},
     "policy 'p': rules.errorCodes must be a list, got \"TIMEOUT\""),
    ({"name": "p", "rules": {"maxRetries": 2}}, "policy 'p': rules.intervalSeconds is required"),
    ({"name": "p", "rules": {"maxRetries": 2, "intervalSeconds": 1}, "targeting": ["send"]},
     "policy 'p': targeting must be an object, got [\"send\"]"),
    ({"name": "p", "rules": {"maxRetries": 2, "intervalSeconds": 1}, "targeting": {"stages": ["send"]}},
     "policy 'p': targeting.stages is not a known field"),
    ({"name": "p", "rules": {"maxRetries": 2, "intervalSeconds": 1}, "targeting": {"stageNames": "send"}},
     "policy 'p': targeting.stageNames must be a list, got \"send\""),
    ({"name": "p", "rules": {"maxRetries": 2, "intervalSeconds": 1}, "targeting": {"tags": ["a"]}},
     "policy 'p': targeting.tags must be an object, got [\"a\"]"),
    ({"name": "p", "rules": {"maxRetries": 2, "intervalSeconds": 1}, "targeting": {"tags": {"exclude": [1]}}},
     "policy 'p': targeting.tags.exclude[0] must be a string, got 1"),
    ({"name": "p", "rules": {"maxRetries": 2, "intervalSeconds": 1}, "state": "paused"},
     "policy 'p': state must be 'enabled' or 'disabled', got \"paused\""),
], ids=["not-an-object", "no-name", "blank-name", "type", "no-rules", "unknown-rule", "rule-text", "rule-negative",
        "rule-boolean", "error-codes", "required-rules", "targeting-list", "unknown-targeting", "stage-names",
        "tags-list", "tags-exclude", "state"])
def test_each_bad_policy_is_refused_naming_the_policy_and_the_field(body, message):
    with pytest.raises(PipelineInputError) as refused:
        policy_body(body)
    assert str(refused.value) == message


@pytest.mark.parametrize(("rules", "message"), [
    ({"maxRetries": 101, "intervalSeconds": 1}, "policy 'p': rules.maxRetries must be a number from 0 to 100, got 101"),
    ({"maxRetries": 1, "intervalSeconds": 1e20},
     "policy 'p': rules.intervalSeconds must be a number from 0 to 604800, got 1e+20"),
    ({"maxRetries": 1, "intervalSeconds": float("nan")},
     "policy 'p': rules.intervalSeconds must be a number from 0 to 604800, got nan"),
    ({"maxRetries": 1, "intervalSeconds": 1, "backoffMultiplier": 1e20},
     "policy 'p': rules.backoffMultiplier must be a number from 0 to 10, got 1e+20"),
    ({"maxRetries": 1, "intervalSeconds": 1, "backoffMultiplier": float("inf")},
     "policy 'p': rules.backoffMultiplier must be a number from 0 to 10, got inf"),
], ids=["retries", "interval", "interval-nan", "multiplier", "multiplier-inf"])
def test_each_rule_past_its_range_is_refused_naming_the_policy_and_the_rule(rules, message):
    with pytest.raises(PipelineInputError) as refused:
        policy_body({"name": "p", "rules": rules})
    assert str(refused.value) == message


def test_a_delay_never_passes_a_week_whatever_the_backoff_grows_to():
    # the largest rules there are: 100 retries, each delay ten times the one before
    steep = policy_body({"name": "p", "rules": {"maxRetries": 100, "intervalSeconds": 604800, "backoffMultiplier": 10}})
    made = plan({"stageName": "a", "stageHandlerName": "H"}, "p", [], [(1, steep)])
    assert max(effective_policy(made)["retry"]["delays"]) == 604800
    assert decide(made, "TIMEOUT", True, 99, "seed") == 604800
    options = {"maxRetries": 100, "retryInterval": 604800, "backoff": "exponential"}
    staged = plan({"stageName": "a", "stageHandlerName": "H", "options": options}, "p", [], [])
    assert decide(staged, "TIMEOUT", True, 99, "seed") == 604800
