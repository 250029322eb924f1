"""A2A 0.3 on the same endpoint: its method names (``message/send``, ``message/stream``,
``tasks/get``, ``tasks/cancel``, ``tasks/resubscribe``) and JSON shapes, converted to the
1.0 calls :mod:`seamline.server.a2a_route` serves and back.

0.3 differs from 1.0 in names, not in meaning: parts and results carry a ``kind``, roles
and states are lower case (``user``, ``input-required``), a send blocks unless
``configuration.blocking`` is false, a stream's status update says whether it is
``final``, and ``message/send`` answers with the task itself rather than ``{"task": …}``.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["LEGACY_METHODS", "legacy_params", "legacy_result"]

# 0.3 method -> the 1.0 method that serves it.
LEGACY_METHODS: Final = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
}
_ROLE_IN: Final = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_ROLE_OUT: Final = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
_STOPPED: Final = frozenset({"completed", "canceled", "failed", "rejected", "input-required", "auth-required"})


def _part_in(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    out = {k: v for k, v in part.items() if k in ("text", "data", "metadata")}
    file = part.get("file")
    if isinstance(file, dict):  # a file by URI or bytes: 1.0's url or raw
        if "uri" in file:
            out["url"] = file["uri"]
        if "bytes" in file:
            out["raw"] = file["bytes"]
        if "mimeType" in file:
            out["mediaType"] = file["mimeType"]
        if "name" in file:
            out["filename"] = file["name"]
    return out


def _message_in(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    out = {k: v for k, v in message.items() if k != "kind"}
    role = message.get("role")
    out["role"] = _ROLE_IN.get(role, role) if isinstance(role, str) else role
    if isinstance(message.get("parts"), list):
        out["parts"] = [_part_in(p) for p in message["parts"]]
    return out


def legacy_params(method: str, params: Any) -> Any:
    """A 0.3 call's params as the 1.0 method takes them."""
    if not isinstance(params, dict) or method not in ("message/send", "message/stream"):
        return params
    out = dict(params)
    out["message"] = _message_in(params.get("message"))
    config = params.get("configuration")
    if isinstance(config, dict):
        changed = {k: v for k, v in config.items() if k not in ("blocking", "pushNotificationConfig")}
        if config.get("blocking") is False:
            changed["returnImmediately"] = True
        if "pushNotificationConfig" in config:
            changed["taskPushNotificationConfig"] = config["pushNotificationConfig"]
        out["configuration"] = changed
    return out


def _state(state: Any) -> Any:
    if isinstance(state, str) and state.startswith("TASK_STATE_"):
        return state.removeprefix("TASK_STATE_").lower().replace("_", "-")
    return state


def _part_out(part: dict[str, Any]) -> dict[str, Any]:
    meta = {"metadata": part["metadata"]} if "metadata" in part else {}
    if "text" in part:
        return {"kind": "text", "text": part["text"], **meta}
    if "data" in part:
        data = part["data"] if isinstance(part["data"], dict) else {"value": part["data"]}
        return {"kind": "data", "data": data, **meta}
    file = {"uri": part["url"]} if "url" in part else {"bytes": part.get("raw", "")}
    if "mediaType" in part:
        file["mimeType"] = part["mediaType"]
    if "filename" in part:
        file["name"] = part["filename"]
    return {"kind": "file", "file": file, **meta}


def _message_out(message: dict[str, Any]) -> dict[str, Any]:
    out = {**message, "kind": "message", "role": _ROLE_OUT.get(message.get("role", ""), "agent")}
    out["parts"] = [_part_out(p) for p in message.get("parts", [])]
    return out


def _status_out(status: dict[str, Any]) -> dict[str, Any]:
    out = {**status, "state": _state(status.get("state"))}
    if isinstance(status.get("message"), dict):
        out["message"] = _message_out(status["message"])
    return out


def _artifact_out(artifact: dict[str, Any]) -> dict[str, Any]:
    return {**artifact, "parts": [_part_out(p) for p in artifact.get("parts", [])]}


def _task_out(task: dict[str, Any]) -> dict[str, Any]:
    out = {**task, "kind": "task", "status": _status_out(task["status"])}
    out["artifacts"] = [_artifact_out(a) for a in task.get("artifacts", [])]
    out["history"] = [_message_out(m) for m in task.get("history", [])]
    return out


def legacy_result(result: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 result (a task, ``{"task": …}``, or a stream response) in 0.3's shape."""
    if "statusUpdate" in result:
        update = result["statusUpdate"]
        status = _status_out(update["status"])
        return {**update, "kind": "status-update", "status": status, "final": status["state"] in _STOPPED}
    if "artifactUpdate" in result:
        update = result["artifactUpdate"]
        return {**update, "kind": "artifact-update", "artifact": _artifact_out(update["artifact"])}
    if "message" in result and "status" not in result:
        return _message_out(result["message"])
    task = result.get("task", result)
    return _task_out(task)
