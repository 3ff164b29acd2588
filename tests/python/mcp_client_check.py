"""Drives durable-mcp-connector with the Python MCP SDK (`mcp==2.3.0`) and prints what it saw.

Used by tests/it/python_client.rs, which checks every value. Usage:

    python mcp_client_check.py --mode auto|legacy|2026-07-28 --key K [--ledger FILE] \
        (--url http://127.0.0.1:PORT/mcp | --stdio COMMAND [ARG...])

Over stdio the connector inherits this process's environment (TEMPORAL_ADDRESS, ...).
With --ledger (the mock upstream's invocation ledger), it also starts the slow tool, waits until
the upstream has it, and cancels the call the way an application does (an anyio cancel scope).
Prints one JSON object on stdout.
"""

import argparse
import json
import os
import sys
import time

import anyio

from mcp import Client, MCPError, StdioServerParameters


def dump(result):
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def upstream_has(ledger: str, tool: str, event: str, key: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(ledger) as f:
                for line in f:
                    e = json.loads(line)
                    if (e["tool"], e["event"], e.get("key")) == (tool, event, key):
                        return
        except FileNotFoundError:
            pass
        await anyio.sleep(0.05)
    raise TimeoutError(f"the upstream never recorded {tool} {event} {key}")


async def cancel_slow_call(client: Client, ledger: str, key: str) -> dict:
    outcome = {}
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def call() -> None:
            with scope:
                got = await client.call_tool("slow", {"key": key})
                outcome["result"] = dump(got)
            outcome["cancelled"] = scope.cancelled_caught

        tg.start_soon(call)
        await upstream_has(ledger, "slow", "called", key)
        scope.cancel()
    return outcome


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="auto")
    parser.add_argument("--key", required=True)
    parser.add_argument("--ledger")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url")
    target.add_argument("--stdio", nargs=argparse.REMAINDER)
    args = parser.parse_args()

    if args.url:
        server = args.url
    else:
        command, *rest = args.stdio
        server = StdioServerParameters(command=command, args=rest, env=dict(os.environ))

    key = args.key
    report = {"sdk": "mcp", "mode": args.mode}
    async with Client(server, mode=args.mode, read_timeout_seconds=120) as client:
        report["protocol_version"] = client.protocol_version
        info = client.server_info
        report["server_name"] = info.name if info else None

        listed = await client.list_tools()
        report["tools"] = sorted(t.name for t in listed.tools)
        echo_tool = next(t for t in listed.tools if t.name == "echo")
        report["echo_annotations"] = (
            echo_tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
            if echo_tool.annotations
            else None
        )

        report["echo"] = dump(await client.call_tool("echo", {"key": key, "n": 5}))
        report["refuse"] = dump(await client.call_tool("refuse", {"key": key}))
        report["everything"] = dump(await client.call_tool("everything", {}))

        # The same idempotency key twice, in the request's _meta: one execution.
        idem = f"py-{key}"
        report["write_once"] = [
            dump(await client.call_tool("write_once", {"key": key, "item": 1}, meta={"idempotencyKey": idem})),
            dump(await client.call_tool("write_once", {"item": 1, "key": key}, meta={"idempotencyKey": idem})),
        ]
        report["conflict"] = dump(
            await client.call_tool("write_once", {"key": key, "item": 2}, meta={"idempotencyKey": idem})
        )

        try:
            got = await client.call_tool("no_such_tool", {})
            report["unknown"] = {"result": dump(got)}
        except MCPError as e:
            report["unknown"] = {"code": e.code, "message": e.error.message}

        if args.ledger:
            report["slow"] = await cancel_slow_call(client, args.ledger, f"{key}-slow")
            # The client is still usable after cancelling a call.
            report["after_cancel"] = dump(await client.call_tool("echo", {"key": f"{key}-after"}))

    json.dump(report, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    anyio.run(main)
