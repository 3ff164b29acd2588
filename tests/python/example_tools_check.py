"""Drives durable-mcp-connector --companion-tools, in front of durable-mcp-example-tools, with the
Python MCP SDK (`mcp==2.3.0`, which has no tasks API) and prints what it saw as one JSON object.

Used by tests/it/python_client.rs, which checks every value. Usage:

    python example_tools_check.py --stdio COMMAND [ARG...]

The connector inherits this process's environment (TEMPORAL_ADDRESS, ...).
"""

import argparse
import json
import os
import sys

import anyio

from mcp import Client, StdioServerParameters


def dump(result):
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stdio", nargs=argparse.REMAINDER, required=True)
    args = parser.parse_args()
    command, *rest = args.stdio
    server = StdioServerParameters(command=command, args=rest, env=dict(os.environ))

    report = {}
    async with Client(server, read_timeout_seconds=120) as client:
        listed = await client.list_tools()
        report["tools"] = [
            t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools
        ]
        report["word_count"] = dump(await client.call_tool("word_count", {"text": "a b c"}))
        # Longer than --task-after: answered at once with a task ID, followed by the companions.
        started = dump(await client.call_tool("slow_report", {"seconds": 3}))
        report["slow_report"] = started
        task_id = started["_meta"]["io.durable-mcp/taskId"]
        report["task_status"] = dump(await client.call_tool("task_status", {"task_id": task_id}))
        report["task_result"] = dump(await client.call_tool("task_result", {"task_id": task_id}))

    json.dump(report, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    anyio.run(main)
