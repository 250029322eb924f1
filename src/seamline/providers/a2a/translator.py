"""A2A results as seamline events.

What the agent sends, as one ``SendMessage`` result or the ``SendStreamingMessage``
responses in order, is one of ``task``, ``message``, ``statusUpdate`` or
``artifactUpdate``. :class:`A2ATranslator` follows one turn:

- an artifact's text parts are ``text_delta`` events as they arrive (``append`` chunks
  continue the artifact), and one ``text`` when the artifact's last chunk comes (or at the
  end of the turn); a ``data`` part is its JSON, a file part (``url``/``raw``) a ``raw`` event;
- an agent ``message`` (alone, or in a task's status) is one ``text``;
- the task's id and context id are kept (the context id is the provider session id);
- the task's state ends the turn: ``completed`` and ``input-required`` complete it (stop
  reason ``completed`` / ``input_required``: the next turn answers the same task),
  ``canceled`` aborts it, ``failed`` and ``rejected`` fail it (``ProviderFailure`` with the
  agent's words), ``auth-required`` fails it as ``AuthFailure``.

The final text is the artifacts' text where there is any, else the last agent message.
"""

from __future__ import annotations

import json
from typing import Any, Final

from seamline.errors import AuthFailure, ProviderFailure
from seamline.events import Complete, Event, Raw, Text, TextDelta

__all__ = ["INTERRUPTED", "TERMINAL", "A2ATranslator"]

TERMINAL: Final = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"})
INTERRUPTED: Final = frozenset({"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"})


def _part_text(part: Any) -> str | None:
    if not isinstance(part, dict):
        return None
    text = part.get("text")
    if isinstance(text, str):
        return text
    if "data" in part:
        return json.dumps(part["data"], ensure_ascii=False)
    return None


def message_text(message: Any) -> str:
    parts = _list(message.get("parts")) if isinstance(message, dict) else []
    return "".join(t for t in (_part_text(p) for p in parts) if t is not None)


class A2ATranslator:
    """One turn's A2A results in, seamline events out; :attr:`done` once the turn ended."""

    def __init__(self) -> None:
        self.task_id: str | None = None
        self.context_id: str | None = None
        self.state: str | None = None
        self.done = False
        self.ending: Complete | None = None
        self._artifacts: dict[str, list[str]] = {}  # artifact id -> its text so far
        self._closed: set[str] = set()
        self._last_message = ""

    # -- the final answer -------------------------------------------------------------------
    def final_text(self) -> str:
        texts = ["".join(chunks) for chunks in self._artifacts.values()]
        joined = "\n".join(t for t in texts if t)
        return joined or self._last_message

    # -- results ------------------------------------------------------------------------------
    def feed(self, result: Any) -> list[Event]:
        """The events for one result (a ``SendMessage`` result or one streamed response)."""
        if not isinstance(result, dict):
            raise ProviderFailure(f"a2a: the agent sent a result that is not an object: {str(result)[:200]}")
        if "task" in result:
            return self._task(result["task"])
        if "message" in result:
            return self._message(result["message"], final=True)
        if "statusUpdate" in result:
            return self._status_update(result["statusUpdate"])
        if "artifactUpdate" in result:
            return self._artifact_update(result["artifactUpdate"])
        raise ProviderFailure(f"a2a: the agent sent a result of no known kind: {sorted(result)[:5]}")

    def _ids(self, task_id: Any, context_id: Any) -> None:
        if isinstance(task_id, str) and task_id:
            self.task_id = task_id
        if isinstance(context_id, str) and context_id:
            self.context_id = context_id

    def _task(self, task: Any) -> list[Event]:
        if not isinstance(task, dict):
            raise ProviderFailure("a2a: the agent sent a task that is not an object")
        self._ids(task.get("id"), task.get("contextId"))
        events: list[Event] = []
        for artifact in _list(task.get("artifacts")):
            if isinstance(artifact, dict):
                # A whole task (plain send, GetTask) carries each artifact whole, as it is now;
                # its text is told once, when the task settles.
                events += self._artifact(artifact, append=False, last=False, whole=True)
        events += self._status(task.get("status"))
        return events

    def _message(self, message: Any, *, final: bool) -> list[Event]:
        if not isinstance(message, dict):
            raise ProviderFailure("a2a: the agent sent a message that is not an object")
        self._ids(message.get("taskId"), message.get("contextId"))
        events: list[Event] = []
        if message.get("role") != "ROLE_USER":
            text = message_text(message)
            if text:
                self._last_message = text
                events.append(Text(text=text))
            events += [Raw(source="a2a", payload=p) for p in _list(message.get("parts")) if _is_file(p)]
        if final:  # a message instead of a task: the agent answered, nothing more comes
            self._end(Complete(outcome="completed", stop_reason="completed", text=self.final_text()))
        return events

    def _status_update(self, update: Any) -> list[Event]:
        if not isinstance(update, dict):
            raise ProviderFailure("a2a: the agent sent a status update that is not an object")
        self._ids(update.get("taskId"), update.get("contextId"))
        return self._status(update.get("status"))

    def _status(self, status: Any) -> list[Event]:
        if not isinstance(status, dict):
            return []
        state = status.get("state")
        events: list[Event] = []
        message = status.get("message")
        if isinstance(message, dict):
            events += self._message(message, final=False)
        if isinstance(state, str):
            self.state = state
            events += self._settle(state, message_text(message) if isinstance(message, dict) else "")
        return events

    def _settle(self, state: str, said: str) -> list[Event]:
        if state not in TERMINAL and state not in INTERRUPTED:
            return []
        events = self._close_artifacts()
        if state == "TASK_STATE_COMPLETED":
            self._end(Complete(outcome="completed", stop_reason="completed", text=self.final_text()))
        elif state == "TASK_STATE_INPUT_REQUIRED":
            self._end(Complete(outcome="completed", stop_reason="input_required", text=self.final_text()))
        elif state == "TASK_STATE_CANCELED":
            self._end(Complete(outcome="aborted", stop_reason="cancelled", text=self.final_text()))
        elif state == "TASK_STATE_AUTH_REQUIRED":
            raise AuthFailure(f"a2a: the agent needs authentication to go on{': ' + said[:300] if said else ''}")
        else:
            word = "failed" if state == "TASK_STATE_FAILED" else "rejected the task"
            raise ProviderFailure(f"a2a: the agent {word}{': ' + said[:500] if said else ''}")
        return events

    def _end(self, complete: Complete) -> None:
        self.done = True
        self.ending = complete

    # -- artifacts ------------------------------------------------------------------------------
    def _artifact_update(self, update: Any) -> list[Event]:
        if not isinstance(update, dict) or not isinstance(update.get("artifact"), dict):
            raise ProviderFailure("a2a: the agent sent an artifact update without an artifact")
        self._ids(update.get("taskId"), update.get("contextId"))
        return self._artifact(
            update["artifact"], append=bool(update.get("append")), last=bool(update.get("lastChunk")), whole=False
        )

    def _artifact(self, artifact: dict[str, Any], *, append: bool, last: bool, whole: bool) -> list[Event]:
        key = str(artifact.get("artifactId") or "")
        events: list[Event] = []
        if whole and key in self._closed:
            return []  # told already
        chunks = self._artifacts.setdefault(key, [])
        if not append:
            chunks.clear()
        for part in _list(artifact.get("parts")):
            text = _part_text(part)
            if text:
                chunks.append(text)
                if not whole:
                    events.append(TextDelta(text=text))
            elif _is_file(part):
                events.append(Raw(source="a2a", payload=part))
        if last and key not in self._closed:
            self._closed.add(key)
            if chunks:
                events.append(Text(text="".join(chunks)))
        return events

    def _close_artifacts(self) -> list[Event]:
        events: list[Event] = []
        for key, chunks in self._artifacts.items():
            if key not in self._closed:
                self._closed.add(key)
                if chunks:
                    events.append(Text(text="".join(chunks)))
        return events


def _list(value: Any) -> list[Any]:
    """``value`` where it is a list, else nothing (a field of the wrong type is left out)."""
    return value if isinstance(value, list) else []


def _is_file(part: Any) -> bool:
    return isinstance(part, dict) and ("url" in part or "raw" in part)
