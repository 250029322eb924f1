"""A hand-written stdio MCP server that starts well and answers garbage to every tool call."""

from __future__ import annotations

import json
import sys

for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        continue  # a notification
    if method == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "garbage-on-call", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [{"name": "speak", "inputSchema": {"type": "object", "properties": {}}}]}
    elif method == "tools/call":
        print("%%% this is not JSON-RPC %%%", flush=True)
        continue
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}), flush=True)
