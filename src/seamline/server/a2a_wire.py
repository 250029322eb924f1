"""The A2A (Agent2Agent) protocol 1.0 on the wire, as seamline's own msgspec types: the
JSON-RPC binding's requests and replies, tasks, messages, parts, artifacts, stream
responses and the agent card.

The JSON is the protocol buffers JSON mapping the official SDKs speak (camelCase names,
enums as their names: ``TASK_STATE_WORKING``, ``ROLE_AGENT``); only the fields seamline
reads or writes are here, and unknown fields a client sends are ignored, as the mapping
asks. seamline does not import the SDK (it brings protobuf and google-api-core): the
tests drive these types with the SDK's own client.
"""

from __future__ import annotations

import time
from typing import Any, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "PROTOCOL_VERSION",
    "AgentCapabilities",
    "AgentCard",
    "AgentInterface",
    "AgentSkill",
    "Artifact",
    "ArtifactUpdate",
    "CancelParams",
    "ListParams",
    "Message",
    "Part",
    "RpcError",
    "RpcRequest",
    "SendConfiguration",
    "SendParams",
    "StreamResponse",
    "Task",
    "TaskList",
    "TaskParams",
    "TaskState",
    "TaskStatus",
    "TaskStatusUpdate",
    "timestamp",
]

PROTOCOL_VERSION: Final = "1.0"

TaskState = Literal[
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
]


class _Wire(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """A message of the protocol: camelCase names, defaults left out."""


class Part(_Wire):
    """One piece of a message or artifact: text, structured data, or a file by URL or bytes."""

    text: str | UnsetType = UNSET
    data: Any = UNSET
    url: str | UnsetType = UNSET
    raw: str | UnsetType = UNSET  # base64
    media_type: str | UnsetType = UNSET
    filename: str | UnsetType = UNSET
    metadata: dict[str, Any] | UnsetType = UNSET


class Message(_Wire):
    message_id: str = ""
    context_id: str | UnsetType = UNSET
    task_id: str | UnsetType = UNSET
    role: str = "ROLE_UNSPECIFIED"
    parts: list[Part] = msgspec.field(default_factory=list)
    metadata: dict[str, Any] | UnsetType = UNSET
    reference_task_ids: list[str] = msgspec.field(default_factory=list)


class TaskStatus(_Wire):
    state: TaskState
    message: Message | UnsetType = UNSET
    timestamp: str | UnsetType = UNSET


class Artifact(_Wire):
    artifact_id: str
    name: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    parts: list[Part] = msgspec.field(default_factory=list)
    metadata: dict[str, Any] | UnsetType = UNSET


class Task(_Wire):
    id: str
    context_id: str
    status: TaskStatus
    artifacts: list[Artifact] = msgspec.field(default_factory=list)
    history: list[Message] = msgspec.field(default_factory=list)
    metadata: dict[str, Any] | UnsetType = UNSET


class TaskStatusUpdate(_Wire):
    task_id: str
    context_id: str
    status: TaskStatus
    metadata: dict[str, Any] | UnsetType = UNSET


class ArtifactUpdate(_Wire):
    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = False


class StreamResponse(_Wire):
    """One of: the task, a message, a status update, an artifact update."""

    task: Task | UnsetType = UNSET
    message: Message | UnsetType = UNSET
    status_update: TaskStatusUpdate | UnsetType = UNSET
    artifact_update: ArtifactUpdate | UnsetType = UNSET


# -- requests ------------------------------------------------------------------------------


class RpcRequest(msgspec.Struct, kw_only=True):
    """A JSON-RPC 2.0 request; ``params`` is decoded once the method is known."""

    jsonrpc: str = ""
    method: str = ""
    id: str | int | None = None
    params: msgspec.Raw = msgspec.Raw(b"{}")


class SendConfiguration(_Wire):
    accepted_output_modes: list[str] = msgspec.field(default_factory=list)
    history_length: int | UnsetType = UNSET
    return_immediately: bool = False
    task_push_notification_config: dict[str, Any] | UnsetType = UNSET


class SendParams(_Wire):
    """``SendMessage`` and ``SendStreamingMessage``."""

    message: Message
    configuration: SendConfiguration | UnsetType = UNSET
    metadata: dict[str, Any] | UnsetType = UNSET
    tenant: str = ""


class TaskParams(_Wire):
    """``GetTask`` and ``SubscribeToTask``."""

    id: str
    history_length: int | UnsetType = UNSET
    tenant: str = ""


class ListParams(_Wire):
    """``ListTasks``: the page ``pageToken`` names (an offset), of ``pageSize`` tasks."""

    context_id: str = ""
    status: str = ""
    page_size: int | UnsetType = UNSET
    page_token: str = ""
    history_length: int | UnsetType = UNSET
    include_artifacts: bool = False
    tenant: str = ""


class TaskList(msgspec.Struct, rename="camel", kw_only=True):
    """A page of tasks; every field is written, as the protocol requires."""

    tasks: list[Task]
    next_page_token: str
    page_size: int
    total_size: int


class CancelParams(_Wire):
    id: str
    metadata: dict[str, Any] | UnsetType = UNSET
    tenant: str = ""


class RpcError(Exception):
    """A JSON-RPC error reply: the A2A codes (-32001 task not found, -32002 not
    cancelable, -32003 push notifications unsupported, -32004 unsupported operation) and
    the JSON-RPC ones (-32700, -32600, -32601, -32602, -32603)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- the agent card ----------------------------------------------------------------------


# The card's fields are all written out (no defaults left out): a client reads a missing
# boolean as false and a missing binding as none.
class AgentInterface(_Wire):
    url: str
    protocol_binding: str
    protocol_version: str


class AgentCapabilities(_Wire):
    streaming: bool
    push_notifications: bool
    extended_agent_card: bool


class AgentSkill(_Wire):
    id: str
    name: str
    description: str
    tags: list[str] = msgspec.field(default_factory=list)
    input_modes: list[str] = msgspec.field(default_factory=list)
    output_modes: list[str] = msgspec.field(default_factory=list)


class AgentProvider(_Wire):
    organization: str
    url: str


class AgentCard(_Wire):
    name: str
    description: str
    supported_interfaces: list[AgentInterface]
    version: str
    capabilities: AgentCapabilities
    default_input_modes: list[str]
    default_output_modes: list[str]
    skills: list[AgentSkill]
    provider: AgentProvider | UnsetType = UNSET
    # Security in the 0.3 form, which 1.0 readers (the SDK's included) convert and 0.3
    # readers need as it is.
    security_schemes: dict[str, Any] | UnsetType = UNSET
    security: list[dict[str, list[str]]] | UnsetType = UNSET
    # The 0.3 card's interface, for 0.3 clients (a 1.0 reader takes supportedInterfaces).
    url: str | UnsetType = UNSET
    preferred_transport: str | UnsetType = UNSET
    protocol_version: str | UnsetType = UNSET


def timestamp(seconds: float | None = None) -> str:
    """An RFC 3339 time in UTC, as the protocol's Timestamp is written."""
    moment = time.time() if seconds is None else seconds
    whole = int(moment)
    micros = int((moment - whole) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{micros:06d}Z"
