"""How a replayed request is matched against a recorded one: the normalisation rule and
the first field that differs.

Before two request bodies are compared, both are normalised (the recorded one with the
folders it was recorded in, the sent one with the current ones), so what a program varies
from run to run does not count (docs/gateway.md, "Cassettes"). In every string of a JSON
body, and in a body that is not JSON:

- a named folder (the workspace, the home) becomes ``<workspace>`` / ``<home>``, also as
  Claude Code writes it in a project folder's name (every ``/`` and ``.`` a ``-``);
- the gateway's placeholder key becomes ``<placeholder>``;
- a UUID becomes ``<uuid>``, a run of 32 or more hex digits ``<hex>`` (also inside a word:
  Codex's ``msg_<uuid>``);
- a date or a date and time (ISO 8601) becomes ``<date>``, and 13 digits from 1 (a time
  in milliseconds since 1970, as in the Gemini CLI's call ids) ``<millis>``;
- what the programs' shell tools say of a run: ``Chunk ID: <id>`` and
  ``Wall time: <seconds> seconds`` (Codex), ``PGID: <pid>`` and ``PID: <pid>`` (the Gemini
  CLI).

Object keys, numbers, booleans, the method and the path are compared as they are; the
``key`` query parameter (Gemini's credential) never is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final, cast
from urllib.parse import parse_qsl, quote, urlencode

__all__ = ["as_array", "as_object", "first_difference", "normalised", "normalised_text", "without_key"]

_NOT_HEX_BEFORE, _NOT_HEX_AFTER = r"(?<![0-9a-fA-F])", r"(?![0-9a-fA-F])"  # an id may follow msg_
_VOLATILE: Final = (
    (re.compile(r"sl-gw-[A-Za-z0-9_-]{16,}"), "<placeholder>"),
    (
        re.compile(
            _NOT_HEX_BEFORE
            + r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
            + _NOT_HEX_AFTER
        ),
        "<uuid>",
    ),
    (re.compile(_NOT_HEX_BEFORE + r"[0-9a-fA-F]{32,}" + _NOT_HEX_AFTER), "<hex>"),
    (
        re.compile(r"(?<!\d)\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?!\d)"),
        "<date>",
    ),
    (re.compile(r"(?<!\d)1\d{12}(?!\d)"), "<millis>"),  # a time in milliseconds (the Gemini CLI's call ids)
    # What the programs' own shell tools report of a run: Codex's chunk id and wall time,
    # the Gemini CLI's process group.
    (re.compile(r"(?<=Chunk ID: )[0-9a-fA-F]+"), "<id>"),
    (re.compile(r"(?<=Wall time: )\d+(?:\.\d+)?(?= seconds)"), "<seconds>"),
    (re.compile(r"(?<=PGID: )\d+|(?<=PID: )\d+"), "<pid>"),
)
_SHOWN: Final = 60


def _folder_forms(places: Mapping[str, str]) -> list[tuple[str, str]]:
    """Each folder and its stand-in, the longest first (a workspace under the home is
    replaced before the home)."""
    forms: list[tuple[str, str]] = []
    for name, folder in places.items():
        folder = folder.rstrip("/")
        if len(folder) < 2:
            continue  # "/" is in every path
        forms.append((folder, f"<{name}>"))
        forms.append((re.sub(r"[^A-Za-z0-9]", "-", folder), f"<{name}>"))  # Claude Code's project folders
    return sorted(forms, key=lambda form: -len(form[0]))


def normalised_text(text: str, places: Mapping[str, str]) -> str:
    """``text`` with the named folders and the volatile values replaced by stand-ins."""
    for folder, stand_in in _folder_forms(places):
        text = text.replace(folder, stand_in)
    for pattern, stand_in in _VOLATILE:
        text = pattern.sub(stand_in, text)
    return text


def as_object(value: object) -> dict[str, object] | None:
    """``value`` as a JSON object, if it is one."""
    return cast("dict[str, object]", value) if isinstance(value, dict) else None


def as_array(value: object) -> list[object] | None:
    """``value`` as a JSON array, if it is one."""
    return cast("list[object]", value) if isinstance(value, list) else None


def normalised(value: object, places: Mapping[str, str]) -> object:
    """A JSON value with every string normalised (:func:`normalised_text`)."""
    if isinstance(value, str):
        return normalised_text(value, places)
    if (items := as_array(value)) is not None:
        return [normalised(item, places) for item in items]
    if (fields := as_object(value)) is not None:
        return {key: normalised(item, places) for key, item in fields.items()}
    return value


def without_key(target: str) -> str:
    """A request target without its ``key`` query parameter (a credential)."""
    path, question, query = target.partition("?")
    if not question:
        return target
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "key"]
    return f"{path}?{urlencode(pairs, quote_via=quote)}" if pairs else path


def first_difference(recorded: object, sent: object, where: str = "") -> str | None:
    """Where two (normalised) JSON values first differ, as ``messages[0].content[0].text``
    with what each holds there; ``None`` when they are equal."""
    if type(recorded) is not type(sent):
        return _said(where, recorded, sent)
    recorded_fields, sent_fields = as_object(recorded), as_object(sent)
    if recorded_fields is not None and sent_fields is not None:
        return _first_field_difference(recorded_fields, sent_fields, where)
    recorded_items, sent_items = as_array(recorded), as_array(sent)
    if recorded_items is not None and sent_items is not None:
        for index, (left, right) in enumerate(zip(recorded_items, sent_items, strict=False)):
            found = first_difference(left, right, f"{where}[{index}]")
            if found is not None:
                return found
        if len(recorded_items) != len(sent_items):
            return f"{where or 'body'} (recorded {len(recorded_items)} items, sent {len(sent_items)})"
        return None
    return None if recorded == sent else _said(where, recorded, sent)


def _first_field_difference(recorded: dict[str, object], sent: dict[str, object], where: str) -> str | None:
    for key in [*recorded, *(k for k in sent if k not in recorded)]:
        inner = f"{where}.{key}" if where else key
        if key not in sent:
            return f"{inner} (recorded, not sent)"
        if key not in recorded:
            return f"{inner} (sent, not recorded)"
        found = first_difference(recorded[key], sent[key], inner)
        if found is not None:
            return found
    return None


def _said(where: str, recorded: object, sent: object) -> str:
    if isinstance(recorded, str) and isinstance(sent, str):
        recorded, sent = _around_the_change(recorded, sent)
    return f"{where or 'body'} (recorded {_short(recorded)}, sent {_short(sent)})"


def _around_the_change(recorded: str, sent: str) -> tuple[str, str]:
    """Two long strings from a little before where they part (a prompt inside a long
    system reminder shows where it changed)."""
    same = 0
    for left, right in zip(recorded, sent, strict=False):
        if left != right:
            break
        same += 1
    start = max(0, same - _SHOWN // 3)
    if start == 0:
        return recorded, sent
    return "…" + recorded[start:], "…" + sent[start:]


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"
