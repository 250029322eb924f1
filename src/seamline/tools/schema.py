"""A tool's JSON schema from its typed parameters: nested definitions under ``$defs``,
pydantic models by their own schema, descriptions from the docstring.

>>> parameter_docs('''Add.
...
... Args:
...     a: the first number.
... ''')
{'a': 'the first number.'}
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import msgspec

from seamline.errors import InvalidRequest

__all__ = ["ArgsSchema", "args_schema", "is_pydantic_model", "parameter_docs"]

_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params):\s*$")
_GOOGLE_ITEM = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ITEM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_REF = "#/$defs/{name}"


def is_pydantic_model(annotation: Any) -> bool:
    """A pydantic model class (told by its methods, so pydantic is never imported here)."""
    return isinstance(annotation, type) and all(
        hasattr(annotation, method) for method in ("model_json_schema", "model_validate")
    )


def parameter_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions of a Google-style (``Args:``) or Sphinx-style (``:param x:``)
    docstring; continuation lines are joined with one space."""
    found: dict[str, str] = {}
    lines = doc.splitlines()
    current: str | None = None
    section_indent: int | None = None
    item_indent: int | None = None
    for line in lines:
        sphinx = _SPHINX_ITEM.match(line)
        if sphinx:
            current, section_indent = sphinx.group(1), None
            found[current] = sphinx.group(2).strip()
            continue
        header = _SECTION.match(line)
        if header:
            section_indent, item_indent, current = len(header.group(1)), None, None
            continue
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if section_indent is not None:
            if not stripped:
                continue
            if indent <= section_indent:
                section_indent = current = None  # the section ended
                continue
            if item_indent is None:
                item_indent = indent
            item = _GOOGLE_ITEM.match(stripped) if indent == item_indent else None
            if item:
                current = item.group(1)
                found[current] = item.group(2).strip()
            elif current is not None:
                found[current] = f"{found[current]} {stripped}".strip()
        elif current is not None:  # a Sphinx item's continuation
            if stripped and indent > 0 and not stripped.startswith(":"):
                found[current] = f"{found[current]} {stripped}"
            else:
                current = None
    return found


class ModelClass(Protocol):
    """A pydantic model class: a parameter annotated with one is validated by it."""

    __name__: str

    def model_validate(self, obj: object, /) -> object: ...

    def model_json_schema(self, *, ref_template: str) -> dict[str, Any]: ...


class ArgsSchema(msgspec.Struct, frozen=True):
    """What :func:`args_schema` gives: the struct that validates arguments, the JSON schema
    a model sees, and the parameters that are pydantic models (validated by pydantic)."""

    args_type: type[msgspec.Struct]
    schema: dict[str, Any]
    models: tuple[tuple[str, ModelClass], ...]


def args_schema(
    tool_name: str, fields: list[tuple[str, Any] | tuple[str, Any, Any]], docs: dict[str, str]
) -> ArgsSchema:
    """The schema of a tool taking ``fields`` (name, annotation[, default]); an annotation
    that cannot be described to a model is an :class:`InvalidRequest` naming it."""
    models: list[tuple[str, ModelClass]] = []
    plain: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for entry in fields:
        if is_pydantic_model(entry[1]):
            models.append((entry[0], entry[1]))
            plain.append((entry[0], dict[str, Any], *entry[2:]))
        else:
            plain.append(entry)
    args_type = msgspec.defstruct(f"{tool_name}_args", plain, kw_only=True, forbid_unknown_fields=True)
    try:
        _, components = msgspec.json.schema_components([args_type], ref_template=_REF)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"tool {tool_name}: {_culprit(plain, exc)}") from None
    schema = dict(components.pop(args_type.__name__))
    schema.pop("title", None)
    schema.setdefault("required", [])
    schema["additionalProperties"] = False
    definitions: dict[str, Any] = dict(components)
    properties: dict[str, Any] = schema.setdefault("properties", {})
    for name, model in models:
        model_schema: dict[str, Any] = model.model_json_schema(ref_template="#/$defs/{model}")
        definitions.update(model_schema.pop("$defs", {}))
        definitions[model.__name__] = model_schema
        properties[name] = {"$ref": _REF.format(name=model.__name__)}
    for name, text in docs.items():
        if name in properties and text:
            prop = properties[name]
            properties[name] = (
                {**prop, "description": text} if "$ref" not in prop else {"allOf": [prop], "description": text}
            )
    if definitions:
        schema["$defs"] = definitions
    return ArgsSchema(args_type=args_type, schema=schema, models=tuple(models))


def _culprit(fields: list[tuple[str, Any] | tuple[str, Any, Any]], exc: Exception) -> str:
    """Which parameter's type has no JSON schema, found by trying each alone."""
    for entry in fields:
        alone = msgspec.defstruct("probe", [entry], kw_only=True)
        try:
            msgspec.json.schema_components([alone])
        except (TypeError, ValueError):
            return f"parameter {entry[0]!r} has a type a model cannot be told about ({entry[1]!r})"
    return f"the parameters cannot be described to a model ({exc})"
