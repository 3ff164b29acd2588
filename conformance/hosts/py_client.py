"""The Python MCP SDK (`mcp`) as a host, for the conformance runner's `hosts` family.

Runs one plan against one MCP server and prints one JSON object: what the SDK made of each
step. The runner runs it twice, against the durable path (the connector) and against the
upstream directly, and compares the two reports. Usage:

    python py_client.py --url http://127.0.0.1:PORT/mcp --plan '{"calls": [...], ...}'

The plan (JSON): `calls` ([{"label", "tool", "arguments"}]), `tasks` (the same, each called with
the tasks extension declared and followed with `tasks/get` until it ends; an `input_required`
task is answered with `tasks/update` from the step's `answers`), `features` (true: resources
and prompts are listed, the first resource read and the first prompt got).

The SDK has no tasks API of its own: the tasks extension (`io.modelcontextprotocol/tasks`) is a
`ClientExtension` whose claim of `resultType: "task"` follows the task, which is how the SDK
lets an application add an extension.
"""

import argparse
import json
import sys
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"
ACTIVE = ("working", "input_required")


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class TaskParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")
    task_id: str


class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTask(types.Request[TaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class AnyResult(types.Result):
    model_config = ConfigDict(extra="allow")


class CreateTaskResult(types.Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class Tasks(ClientExtension):
    """The tasks extension: a call answered with a task is followed to its end."""

    identifier = TASKS

    def __init__(self, seen: list, answers: dict) -> None:
        self.seen = seen
        self.answers = answers

    def claims(self):
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.follow)]

    async def follow(self, created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        record = {"task_id": created.task_id, "statuses": [created.status], "updates": 0}
        self.seen.append(record)
        for _ in range(600):
            got = dump(await ctx.session.send_request(GetTask(params=TaskParams(task_id=created.task_id)), AnyResult))
            status = got.get("status")
            if record["statuses"][-1] != status:
                record["statuses"].append(status)
            if status == "input_required":
                keys = list((got.get("inputRequests") or {}).keys())
                record["asked"] = keys
                responses = {k: self.answers[k] for k in keys if k in self.answers}
                params = TaskParams(task_id=created.task_id, inputResponses=responses)
                await ctx.session.send_request(UpdateTask(params=params), AnyResult)
                record["updates"] += 1
            elif status not in ACTIVE:
                record["end"] = got
                if status == "completed":
                    return types.CallToolResult.model_validate(got["result"])
                error = got.get("error") or {}
                text = json.dumps({"status": status, "error": error})
                return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
            await anyio.sleep(0.5)
        raise TimeoutError(f"task {created.task_id} still active after 600 polls")


async def call(client: Client, step: dict) -> dict:
    try:
        return {"result": dump(await client.call_tool(step["tool"], step.get("arguments", {})))}
    except MCPError as e:
        return {"error": {"code": e.error.code, "message": e.error.message}}


async def all_pages(list_page, items: str) -> list:
    found, cursor = [], None
    for _ in range(100):
        page = await list_page(cursor)
        found.extend(getattr(page, items))
        cursor = page.next_cursor
        if not cursor:
            break
    return found


async def features(client: Client) -> dict:
    """Resources and prompts (every page), the first resource read and the first prompt got; an
    error (the SDK refusing an answer, say) is recorded in place of what it stopped."""
    out: dict = {}
    try:
        resources = await all_pages(lambda c: client.list_resources(cursor=c), "resources")
        out["resources"] = [dump(r) for r in resources]
        if resources:
            out["read"] = dump(await client.read_resource(resources[0].uri))
        prompts = await all_pages(lambda c: client.list_prompts(cursor=c), "prompts")
        out["prompts"] = [dump(p) for p in prompts]
        if prompts:
            arguments = {a.name: "x" for a in (prompts[0].arguments or []) if a.required}
            out["prompt"] = dump(await client.get_prompt(prompts[0].name, arguments))
    except Exception as e:  # noqa: BLE001 - recorded for the runner to compare and show
        out["error"] = f"{type(e).__name__}: {e}"
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--plan", required=True)
    args = parser.parse_args()
    plan = json.loads(args.plan)
    seen: list = []
    answers: dict = {}
    for step in plan.get("tasks", []):
        answers.update(step.get("answers", {}))
    report: dict = {"sdk": "mcp", "calls": {}, "tasks": {}}
    async with Client(args.url, read_timeout_seconds=120, extensions=[Tasks(seen, answers)]) as client:
        report["protocol_version"] = client.protocol_version
        tools = await client.list_tools()
        report["tools"] = [dump(t) for t in tools.tools]
        for step in plan.get("calls", []):
            report["calls"][step["label"]] = await call(client, step)
        for step in plan.get("tasks", []):
            before = len(seen)
            outcome = await call(client, step)
            outcome["task"] = seen[before] if len(seen) > before else None
            report["tasks"][step["label"]] = outcome
        if plan.get("features"):
            report["features"] = await features(client)
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    anyio.run(main)
