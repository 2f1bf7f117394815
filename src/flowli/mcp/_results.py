"""What a tool call answers besides its structured content: a short text for the assistant
(with the JSON after it, for clients that read text only), and one sentence for arguments that
do not fit a tool's parameters (never the validator's report of several lines)."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError

from flowli.engine import problems

_LISTS = ("types", "namespaces", "runs", "compositions", "history", "prerequisites")


def short_text(tool: str, result: dict[str, Any]) -> str:
    """One or two sentences of what a tool answered."""
    if result.get("status") == "approval_required":
        return f"{result.get('summary')} waits for a person's approval: follow it with get_approval" \
               f" {result.get('approval_id')}."
    if "approval_id" in result and "status" in result:
        return f"Approval {result['approval_id']} ({result.get('summary')}) is {result['status']}."
    if "workflow_id" in result and "status" in result:
        text = f"Run {result['workflow_id']}"
        if result.get("workflow_type"):
            text += f" of {result['workflow_type']}"
        text += f" is {result['status']}"
        reason = result.get("reason")
        if isinstance(reason, dict) and reason.get("message"):
            where = f" at step {reason['step']}" if reason.get("step") else ""
            text += f" ({reason.get('code')}{where}: {reason['message']})"
        if (result.get("state_data") or {}).get("remediation"):
            text += "; a remediation gate waits for resolve_workflow"
        if result.get("timed_out"):
            text += "; the watch timed out, watch again to go on waiting"
        return text + "."
    if "errors" in result and "warnings" in result:
        errors, warnings = result["errors"], result["warnings"]
        if not errors:
            return f"The composition is valid ({len(warnings)} warning{'s' * (len(warnings) != 1)})."
        return f"The composition has {len(errors)} error{'s' * (len(errors) != 1)}; the first: {errors[0]}"
    for key in _LISTS:
        if isinstance(result.get(key), list):
            n = len(result[key])
            more = result.get("next") or result.get("next_after_seq")
            return f"{n} {key if n != 1 else key.rstrip('s')}" + ("; more on the next page." if more else ".")
    if "workflow_type" in result and "content_hash" in result:
        return f"Saved as {result['workflow_type']} ({result['content_hash']})."
    if "workflow_type" in result:
        return f"{result['workflow_type']}: {', '.join(k for k in result if k != 'workflow_type')}."
    return f"{tool} answered {', '.join(result)}."


class Server(MCPServer):
    """The SDK's server, with the short text and the one-sentence refusal of bad arguments."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            result = await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise  # a crash: the SDK logs it and answers a generic sentence
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(f"Error executing tool {name}: its arguments do not fit: "
                                f"{'; '.join(problems(exc.__cause__))}") from exc.__cause__
            raise
        if isinstance(result, CallToolResult) and isinstance(result.structured_content, dict) and not result.is_error:
            data = result.structured_content
            result.content = [TextContent(type="text", text=short_text(name, data)),
                              TextContent(type="text", text=json.dumps(data, default=str))]
        return result
