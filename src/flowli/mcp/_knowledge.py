"""The texts the MCP server gives an assistant: the resources ``concept://dag`` and
``knowledge://mcp/execution``, and the sequence of the ``diagnose_workflow_run`` prompt."""

from __future__ import annotations

CONCEPT_DAG = """\
# DAG workflows and compositions

A DAG workflow arranges atomic steps in layers: layers run in order; the steps of one layer run
together. Each step is a run of an existing workflow type and obeys the three-state contract
(PENDING, then COMPLETED with an output or FAILED with a reason).

A composition (a virtual workflow) is authored as a definition:

{"name": "vw_demo", "version": "1.0", "layers": [
  {"name": "layer_1", "steps": [
    {"name": "s1", "workflow_type": "aws.s3.create_bucket",
     "input_mapping": {"bucket": {"source": "input", "field": "bucket_name"}}}]},
  {"name": "layer_2", "steps": [
    {"name": "s2", "workflow_type": "aws.s3.put_bucket_tagging",
     "input_mapping": {
       "bucket": {"source": "step", "step": "s1", "field": "bucket_name"},
       "tagging": {"source": "static", "value": {"TagSet": [{"Key": "env", "Value": "demo"}]}}}}]}]}

Every input of a step names its source: `input` (a field of the composition's own input), `step`
(a field of the output of a step of an earlier layer), or `static` (a literal). There is no
implicit scope and no templating.

Validate with validate_composition(definition): it returns {"errors": [...], "warnings": [...]},
each a sentence starting with `step '<name>': ` or `layer '<name>': `, checked in three phases:
structure (unique names, sources only from earlier layers), references (every workflow_type is in
the catalog, with a did-you-mean for a typo), compatibility (required inputs mapped, fields and
types that fit). Fix every error and validate again before saving.

save_composition(definition) stores it for your application; it runs as
`virtual.<name>@<version>`. Saving the same definition again is the same save; a changed
definition needs a new version. Saved compositions do not appear in list_workflow_types: use
list_compositions, and audit.workflow-run.query to see what ran.

A step that fails on a fixable precondition parks the run in `remediation_pending`; its
state_data.remediation = {"step", "reason", "fix"} says what to fix. After the fix,
resolve_workflow(workflow_id, "remediated") re-runs only that step; "denied" compensates the
completed steps in reverse and fails the run.
"""

KNOWLEDGE_EXECUTION = """\
# Running workflows through flowli's MCP server

The loop: discover, read the schema, check prerequisites, start, watch, recover.

1. Confirm the type. Never invent a type name: use list_workflow_namespaces,
   list_workflow_types(prefix=..., q=...) or get_workflow_schema, and quote the exact name.
2. Prefer featured types: they are human-runnable entry points; ignore *.prepare and *.finalize
   sub-steps.
3. Reads are safe: `data` types and names with list, get, query, describe or status can be
   started directly. Confirm creates and mutations with the person first.
4. Prerequisites first: when get_workflow_schema says has_prerequisites is true, call
   get_workflow_prerequisites(workflow_type, variant) before start_workflow.
5. Start with start_workflow(workflow_type, inputs): one JSON object of inputs by name, checked
   against the schema before the run starts (every bad field is named). It answers
   {"workflow_id", "status": "PENDING"}.
6. Watch with watch_workflow(workflow_id): it blocks until COMPLETED, FAILED or
   remediation_pending (or its timeout, with the current state).
7. Recover: read get_workflow_history(workflow_id, include_state_data=True) for the failing step
   and its reason; retry_workflow re-advances a FAILED run from its last good point (completed
   steps do not run again); resolve_workflow answers a remediation gate; list_stuck_workflows
   finds runs that stalled, with what each waits on; force_terminate_workflow ends a confirmed
   stale run (it is refused while the run progresses or a worker holds it).
8. Virtual types are per application: saved compositions run as virtual.<name>@<version> and
   are not in list_workflow_types; an empty prefix="virtual." browse does not mean there are none.

States: PENDING (not yet terminal), COMPLETED (carries output), FAILED (carries a reason
{"code", "message", "step"?}; also a cancelled or terminated run), remediation_pending (a dag
parked on a fixable step).

Report properly: the workflow type, the workflow ID, the final state, and the output fields that
matter (or the failing step, its code and message).
"""


def diagnose(workflow_id: str) -> str:
    return f"""\
Diagnose the workflow run {workflow_id}, in this order:

1. get_workflow_status("{workflow_id}"): its type and state.
2. get_workflow_history("{workflow_id}", include_state_data=True): the transitions, oldest first.
3. If it is FAILED: name the failing step and its reason (code and message) from the status and
   the last failed entries of the history. If the cause is transient or fixed now, propose
   retry_workflow("{workflow_id}"): completed steps do not run again.
4. If it is remediation_pending: read state_data.remediation (step, reason, fix), tell the person
   what to fix, and after the fix call resolve_workflow("{workflow_id}", "remediated") (or
   "denied" to compensate and fail).
5. If it is PENDING and has not moved for long: list_stuck_workflows() and read its waiting_on
   (a timer, a message, a child, a task on a queue nobody serves, an expired lease). Only for a
   confirmed stale run propose force_terminate_workflow with a reason and expected_last_seq.
6. Report the workflow type, the workflow ID, the state, and what you found or did.
"""
