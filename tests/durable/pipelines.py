"""Pipeline files for the durable-run tests: a fan-out of scripted roles, then a summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

USAGE = {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.001}


def write_script(path: Path, text: str, *, delay: float = 0.0) -> Path:
    response: dict[str, Any] = {"text": text, "usage": USAGE}
    if delay:
        response["delay"] = delay
    path.write_text(json.dumps([response]))
    return path


def fan_out_pipeline(tmp: Path, roles: list[str], *, slow: str | None = None, delay: float = 0.0) -> Path:
    """``fan`` (every role at once) -> ``sum`` (one more role) -> done; scripted roles."""
    bindings: dict[str, Any] = {}
    for role in [*roles, "summary"]:
        script = write_script(tmp / f"{role}.json", f"answer of {role}", delay=delay if role == slow else 0.0)
        bindings[role] = {"kind": "agent", "provider": "scripted", "options": {"script": str(script)}}
    definition = {
        "name": "fan-out",
        "phases": [{"name": "fan", "roles": roles, "next": "sum"}, {"name": "sum", "role": "summary", "next": "done"}],
        "transitions": {"fan": ["sum"], "sum": ["done"]},
        "roles": bindings,
        "team": {"max_parallel": max(len(roles), 1)},
    }
    path = tmp / "fan-out.json"
    path.write_text(json.dumps(definition))
    return path
