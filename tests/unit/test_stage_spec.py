"""A pipeline's declaration (``declaration`` and ``stage_list`` of ``flowli.pipelines``): stages run
in declaration order unless a stage lists its own ``dependsOn``; unknown, duplicate and cyclic
names are refused, and so are bad fields and options, each in one sentence naming the stage (or
its index) and the field."""

from __future__ import annotations

from typing import Any

import pytest

from flowli.pipelines import PipelineInputError, declaration, stage_list

pytestmark = pytest.mark.unit


def s(name: str, **options: Any) -> dict[str, Any]:
    return {"stageName": name, "stageHandlerName": "H", **({"options": options} if options else {})}


def deps(stages: list[dict[str, Any]], existing: list[dict[str, Any]] | None = None) -> dict[str, list[str]]:
    return {spec["stageName"]: spec["dependsOn"] for spec in stage_list(stages, existing or [])}


def refusal(stages: Any, existing: list[dict[str, Any]] | None = None) -> str:
    with pytest.raises(PipelineInputError) as refused:
        stage_list(stages, existing or [])
    return str(refused.value)


# ---- ordering -------------------------------------------------------------------------------


def test_stages_depend_on_the_one_declared_before_them_by_default():
    assert deps([s("a"), s("b"), s("c")]) == {"a": [], "b": ["a"], "c": ["b"]}
    assert [spec["stageName"] for spec in stage_list([s("c"), s("a"), s("b")])] == ["c", "a", "b"]


def test_an_explicit_depends_on_replaces_the_default_and_the_next_stage_follows_the_declared_order():
    # the reference's fan-out: email and archive both wait for load; then a stage without dependsOn
    assert deps([s("load"), s("email", dependsOn=["load"]), s("archive", dependsOn=["load"]), s("report")]) == {
        "load": [], "email": ["load"], "archive": ["load"], "report": ["archive"]}
    assert deps([s("a"), s("b"), s("c", dependsOn=["b", "a", "b"])])["c"] == ["b", "a"]  # once each, in order
    # a stage may wait for one declared after it when that makes no cycle
    assert deps([s("a"), s("b", dependsOn=["c"]), s("c", dependsOn=["a"])]) == {"a": [], "b": ["c"], "c": ["a"]}


def test_an_append_continues_the_declaration_order_of_the_existing_stages():
    existing = stage_list([s("a"), s("b")])
    assert deps([s("c"), s("d")], existing) == {"c": ["b"], "d": ["c"]}
    assert deps([s("e", dependsOn=["a"])], existing) == {"e": ["a"]}
    assert refusal([s("b")], existing) == "stage 'b': stageName is used twice in the pipeline"
    assert refusal([s("c", dependsOn=["z"])], existing) == (
        "stage 'c': options.dependsOn names 'z', which is not a stage of the pipeline")


def test_a_validated_stage_has_every_field_and_its_options_without_nulls():
    [spec] = stage_list([{"stageName": "load", "stageHandlerName": "LoadHandler", "input": '{"id": 1}',
                          "description": "Load it", "isEvent": True,
                          "options": {"maxRetries": 3, "retryInterval": None, "jitter": False, "backoff": "linear",
                                      "runInParallelWith": ["x"], "runAsUser": "svc", "timeOut": 2.5}}])
    assert spec == {"stageName": "load", "stageHandlerName": "LoadHandler", "input": '{"id": 1}',
                    "description": "Load it", "isEvent": True, "dependsOn": [],
                    "options": {"maxRetries": 3, "jitter": False, "backoff": "linear", "runInParallelWith": ["x"],
                                "runAsUser": "svc", "timeOut": 2.5}}
    [bare] = stage_list([s("x")])
    assert bare == {"stageName": "x", "stageHandlerName": "H", "input": None, "description": None, "isEvent": False,
                    "options": {}, "dependsOn": []}


# ---- refusals of the stage list -------------------------------------------------------------


def test_unknown_names_self_references_duplicates_and_cycles_are_refused_naming_the_stage():
    assert refusal([s("validate", dependsOn=["ghost"])]) == (
        "stage 'validate': options.dependsOn names 'ghost', which is not a stage of the pipeline")
    assert refusal([s("a"), s("b", dependsOn=["b"])]) == "stage 'b': options.dependsOn names the stage itself"
    assert refusal([s("validate"), {**s("validate"), "stageHandlerName": "X"}]) == (
        "stage 'validate': stageName is used twice in the pipeline")
    assert refusal([s("a", dependsOn=["b"]), s("b", dependsOn=["a"])]) == (
        "stage 'a': options.dependsOn makes a cycle: a -> b -> a")
    # the default order makes the cycle too: b follows a, which waits for b
    assert refusal([s("a", dependsOn=["b"]), s("b")]) == "stage 'a': options.dependsOn makes a cycle: a -> b -> a"
    assert refusal([s("a"), s("b", dependsOn=["d"]), s("c", dependsOn=["b"]), s("d", dependsOn=["c"])]) == (
        "stage 'b': options.dependsOn makes a cycle: b -> d -> c -> b")


def test_a_cycle_through_the_existing_stages_is_refused():
    existing = stage_list([s("a"), s("b")])
    existing[0]["dependsOn"] = ["c"]  # as if a waited for a stage appended later
    assert refusal([s("c")], existing) == "stage 'a': options.dependsOn makes a cycle: a -> c -> b -> a"


@pytest.mark.parametrize(("stages", "message"), [
    (None, "stages: at least one stage is required"),
    ([], "stages: at least one stage is required"),
    ({"stageName": "a"}, "stages: at least one stage is required"),
    ([s("a"), "b"], 'stages[1] must be an object, got "b"'),
    ([{"stageHandlerName": "H"}], 'stages[0]: stageName is required'),
    ([s("a"), {"stageName": "  ", "stageHandlerName": "H"}], "stages[1]: stageName is required (a nonempty string)"),
    ([{"stageName": 5, "stageHandlerName": "H"}], 'stages[0]: stageName must be a string, got 5'),
    ([s("a,b")], "stage 'a,b': stageName must not contain commas, tabs or line breaks"),
    ([s("a\tb")], "stage 'a\\tb': stageName must not contain commas, tabs or line breaks"),
    ([s("a\nb")], "stage 'a\\nb': stageName must not contain commas, tabs or line breaks"),
    ([{"stageName": "a"}], "stage 'a': stageHandlerName is required"),
    ([{"stageName": "a", "stageHandlerName": ""}], "stage 'a': stageHandlerName is required (a nonempty string)"),
    ([{**s("a"), "retries": 3}], "stage 'a': retries is not a known field"),
    ([{"stageName": "", "stageHandlerName": "H", "retries": 3}], "stages[0]: retries is not a known field"),
    ([{**s("a"), "input": {"invoiceId": 1}}], 'stage \'a\': input must be a string, got {"invoiceId": 1}'),
    ([{**s("a"), "input": 7}], "stage 'a': input must be a string, got 7"),
    ([{**s("a"), "description": ["x"]}], 'stage \'a\': description must be a string, got ["x"]'),
    ([{**s("a"), "isEvent": "yes"}], 'stage \'a\': isEvent must be true or false, got "yes"'),
    ([{**s("a"), "options": [1]}], "stage 'a': options must be an object, got [1]"),
], ids=["none", "empty", "not-a-list", "not-an-object", "no-name", "blank-name", "number-name", "comma", "tab",
        "line-break", "no-handler", "empty-handler", "unknown-field", "unknown-field-unnamed", "input-object",
        "input-number", "description", "is-event", "options-list"])
def test_each_bad_stage_is_refused_in_one_sentence_naming_it(stages, message):
    assert refusal(stages) == message


@pytest.mark.parametrize(("options", "message"), [
    ({"retries": 3}, 'options.retries is not a known field'),
    ({"maxRetries": "3"}, 'options.maxRetries must be a number, got "3"'),
    ({"maxRetries": True}, "options.maxRetries must be a number, got true"),
    ({"retryInterval": -1}, "options.retryInterval must not be negative, got -1"),
    ({"maxRetryInterval": -0.5}, "options.maxRetryInterval must not be negative, got -0.5"),
    ({"timeOut": [1]}, "options.timeOut must be a number, got [1]"),
    ({"jitter": "yes"}, 'options.jitter must be true or false, got "yes"'),
    ({"failIfOutputEmpty": 1}, "options.failIfOutputEmpty must be true or false, got 1"),
    ({"notifyOnFailure": "no"}, 'options.notifyOnFailure must be true or false, got "no"'),
    ({"dependsOn": "a"}, 'options.dependsOn must be a list, got "a"'),
    ({"dependsOn": ["a", 1]}, 'options.dependsOn[1] must be a string, got 1'),
    ({"retryOnErrorCodes": [None]}, 'options.retryOnErrorCodes[0] must be a string, got null'),
    ({"runInParallelWith": "b"}, 'options.runInParallelWith must be a list, got "b"'),
    ({"backoff": "random"}, 'options.backoff must be \'fixed\', \'linear\' or \'exponential\', got "random"'),
    ({"backoff": 2}, "options.backoff must be 'fixed', 'linear' or 'exponential', got 2"),
    ({"runAsUser": 5}, 'options.runAsUser must be a string, got 5'),
], ids=lambda v: v if isinstance(v, str) else next(iter(v)))
def test_each_bad_option_is_refused_naming_the_stage_and_the_option(options, message):
    assert refusal([s("validate", **options)]) == f"stage 'validate': {message}"


def test_the_first_bad_stage_is_named_before_any_duplicate_or_dependency():
    assert refusal([s("a"), s("a"), s("c", backoff="random")]) == (
        "stage 'c': options.backoff must be 'fixed', 'linear' or 'exponential', got \"random\"")
    assert refusal([s("a", dependsOn=["ghost"]), s("a")]) == "stage 'a': stageName is used twice in the pipeline"


# ---- the declaration --------------------------------------------------------------------------


def test_a_declaration_resolves_its_stages_and_normalizes_keywords_and_context():
    decl = declaration({"name": "invoice", "traceId": "t-1", "stages": [s("a"), s("b")],
                        "pipelineKeywords": [{"key": "customer", "value": "acme"}, {"key": "urgent"}],
                        "pipelineContextItems": [{"key": "token", "value": "x", "isSensitive": True},
                                                 {"key": "region", "value": "eu", "valueType": "text"},
                                                 {"key": "old", "value": None, "isDeleted": True}]})
    assert decl["name"] == "invoice" and decl["traceId"] == "t-1"
    assert [(st["stageName"], st["dependsOn"]) for st in decl["stages"]] == [("a", []), ("b", ["a"])]
    assert decl["keywords"] == [{"key": "customer", "value": "acme"}, {"key": "urgent", "value": None}]
    assert decl["context"] == [
        {"key": "token", "value": "x", "valueType": "string", "isSensitive": True},
        {"key": "region", "value": "eu", "valueType": "text", "isSensitive": False},
        {"key": "old", "value": None, "valueType": "string", "isSensitive": False, "isDeleted": True}]
    bare = declaration({"name": "p", "stages": [s("a")]})
    assert (bare["traceId"], bare["keywords"], bare["context"]) == (None, [], [])


@pytest.mark.parametrize(("body", "message"), [
    ({"stages": [s("a")]}, 'name is required'),
    ({"name": " ", "stages": [s("a")]}, "name is required (a nonempty string)"),
    ({"name": "p", "traceId": 5, "stages": [s("a")]}, 'traceId must be a string, got 5'),
    ({"name": "p"}, "stages is required"),
    ({"name": "p", "stages": [s("a")], "pipelineKeywords": {"key": "k"}},
     'pipelineKeywords must be a list, got {"key": "k"}'),
    ({"name": "p", "stages": [s("a")], "pipelineKeywords": [{"key": "k", "value": "v"}, {"value": "v"}]},
     'pipelineKeywords[1]: key is required'),
    ({"name": "p", "stages": [s("a")], "pipelineKeywords": [{"key": "k", "value": 3}]},
     'pipelineKeywords[0] (k): value must be a string, got 3'),
    ({"name": "p", "stages": [s("a")], "pipelineContextItems": ["token"]},
     'pipelineContextItems[0] must be an object, got "token"'),
    ({"name": "p", "stages": [s("a")], "pipelineContextItems": [{"key": "token", "value": "x", "isSensitive": "yes"}]},
     'pipelineContextItems[0] (token): isSensitive must be true or false, got "yes"'),
    ({"name": "p", "stages": [s("a")], "pipelineContextItems": [{"key": "n", "value": "1", "valueType": 1}]},
     'pipelineContextItems[0] (n): valueType must be a string, got 1'),
    ({"name": "p", "stages": [s("a")], "pipelineContextItems": [{"key": "n", "value": "1", "isDeleted": 0}]},
     'pipelineContextItems[0] (n): isDeleted must be true or false, got 0'),
], ids=["no-name", "blank-name", "trace-id", "no-stages", "keywords-object", "keyword-key", "keyword-value",
        "context-item", "sensitive", "value-type", "deleted"])
def test_each_bad_declaration_is_refused_naming_the_field(body, message):
    with pytest.raises(PipelineInputError) as refused:
        declaration(body)
    assert str(refused.value) == message


# ---- ranges and caps ------------------------------------------------------------------------


def test_a_chain_as_long_as_a_pipeline_may_be_is_checked_without_recursion():
    # each stage waits for the one declared after it, the last for the first (which waits for
    # none): the walk for a cycle from s0 goes down the whole chain
    chain = [s("root")] + [s(f"s{i}", dependsOn=[f"s{i + 1}"]) for i in range(998)] + [s("s998", dependsOn=["root"])]
    assert len(stage_list(chain)) == 1000
    assert refusal([*chain[:-1], s("s998", dependsOn=["s0"])]).startswith(
        "stage 's0': options.dependsOn makes a cycle: s0 -> s1 -> s2 -> ")
    assert refusal([*chain, s("extra")]) == "stages: a pipeline has at most 1000 stages, got 1001"
    existing = stage_list([s(f"e{i}") for i in range(990)])
    assert refusal([s(f"n{i}") for i in range(11)], existing) == (
        "stages: a pipeline has at most 1000 stages, got 1001")


@pytest.mark.parametrize(("options", "message"), [
    ({"maxRetries": 101}, "options.maxRetries must be from 0 to 100, got 101"),
    ({"retryInterval": 1e20}, "options.retryInterval must be from 0 to 604800 seconds, got 1e+20"),
    ({"maxRetryInterval": 604801}, "options.maxRetryInterval must be from 0 to 604800 seconds, got 604801"),
    ({"timeOut": 1e20}, "options.timeOut must be from 0 to 604800 seconds, got 1e+20"),
    ({"timeOut": float("inf")}, "options.timeOut must be from 0 to 604800 seconds, got inf"),
    ({"retryInterval": float("nan")}, "options.retryInterval must be from 0 to 604800 seconds, got nan"),
], ids=["retries", "interval", "max-interval", "timeout", "timeout-inf", "interval-nan"])
def test_each_number_past_its_range_is_refused_naming_the_stage_and_the_option(options, message):
    assert refusal([s("validate", **options)]) == f"stage 'validate': {message}"


def test_names_are_capped_in_length():
    assert refusal([s("a" * 201)]) == f"stage '{'a' * 201}': stageName is longer than 200 characters"
    assert refusal([{"stageName": "a", "stageHandlerName": "h" * 201}]) == (
        "stage 'a': stageHandlerName is longer than 200 characters")
    with pytest.raises(PipelineInputError) as refused:
        declaration({"name": "n" * 201, "stages": [s("a")]})
    assert str(refused.value) == "name is longer than 200 characters"
    assert len(stage_list([s("a" * 200, maxRetries=100, retryInterval=604800, timeOut=604800)])) == 1
