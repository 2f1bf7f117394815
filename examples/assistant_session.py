"""A scripted assistant session: the loop an AI assistant follows over MCP (discover, schema,
start, watch, triage, diagnose), run with the official SDK's client against ``flowli mcp`` on
``flowli demo``'s database.

    flowli demo                                  # once: creates flowli.db with the demo's runs
    python examples/assistant_session.py         # or: --db sqlite:///other.db

The session starts an invoice approval, watches it wait for a person's decision, finds it among
the stuck runs with what it waits on, reads the diagnose prompt, gives the decision with
``flowli signal`` (as a person would), and watches the run to COMPLETED. Then it drafts a
composition (approve, then notify accounting), reads the validation's did-you-mean for a
misspelled type, fixes it and validates again; it saves nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import uuid
from typing import Any

from mcp import Client, StdioServerParameters

APP = "flowli.cli._demo:registry"


def say(who: str, text: str) -> None:
    print(f"{who:>9} | {text}", flush=True)


async def tool(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    say("assistant", f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})")
    result = await client.call_tool(name, arguments)
    if result.is_error:
        raise SystemExit(f"{name} was refused: {result.content[0].text}")
    data = dict(result.structured_content or {})
    say("flowli", json.dumps(data, default=str)[:300])
    return data


async def session(db: str) -> str:
    server = StdioServerParameters(command=sys.executable, args=["-m", "flowli.cli", "--db", db, "--app", APP, "mcp"])
    async with Client(server) as client:
        await tool(client, "list_workflow_namespaces")
        types = (await tool(client, "list_workflow_types", q="invoice"))["types"]
        name = types[0]["name"]  # quote the exact name the catalog returns
        schema = await tool(client, "get_workflow_schema", workflow_type=name)
        say("assistant", f"{name} takes {', '.join(f['name'] for f in schema['fields'])}")
        invoice = f"INV-MCP-{uuid.uuid4().hex[:6]}"
        started = await tool(client, "start_workflow", workflow_type=name,
                             inputs={"invoice_id": invoice, "amount": 420.0})
        wid = started["workflow_id"]
        watched = await tool(client, "watch_workflow", workflow_id=wid, timeout_seconds=5)
        say("assistant", f"still {watched['status']} after 5 s: what does it wait on?")
        stuck = (await tool(client, "list_stuck_workflows", older_than_seconds=0))["runs"]
        mine = next(r for r in stuck if r["workflow_id"] == wid)
        say("assistant", f"it waits: {mine['waiting_on']['summary']}")
        prompt = await client.get_prompt("diagnose_workflow_run", {"workflow_id": wid})
        say("assistant", "the diagnose prompt says: " + prompt.messages[0].content.text.splitlines()[2].strip())
        say("person", f"flowli signal {wid} decision '{{\"approved\": true}}'")
        await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "flowli.cli", "--db", db, "signal", wid,
                                                 "decision", '{"approved": true}'], check=True, capture_output=True)
        done = await tool(client, "watch_workflow", workflow_id=wid, timeout_seconds=60)
        history = (await tool(client, "get_workflow_history", workflow_id=wid))["history"]
        say("assistant", f"{name} {wid}: {done['status']} after {len(history)} transitions; ledger entry"
                         f" {done.get('output', {}).get('ledger_entry')}")
        draft = {"name": "approve_and_notify", "version": "1", "layers": [
            {"name": "notify", "steps": [{"name": "ledger", "workflow_type": "notify_acounting", "input_mapping": {
                "invoice_id": {"source": "input", "field": "invoice_id"},
                "amount": {"source": "input", "field": "amount"}}}]}]}
        checked = await tool(client, "validate_composition", definition=draft)
        say("assistant", f"the draft has {len(checked['errors'])} error(s): {checked['errors'][0]}")
        draft["layers"][0]["steps"][0]["workflow_type"] = "notify_accounting"  # take the suggestion
        checked = await tool(client, "validate_composition", definition=draft)
        say("assistant", f"fixed: {len(checked['errors'])} errors, {len(checked['warnings'])} warnings (not saved)")
        return str(done["status"]) if not checked["errors"] else "INVALID"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", default="sqlite:///flowli.db", help="the database of flowli demo")
    args = p.parse_args()
    return 0 if asyncio.run(session(args.db)) == "COMPLETED" else 1


if __name__ == "__main__":
    raise SystemExit(main())
