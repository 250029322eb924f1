"""JSON Schema (2020-12, as OpenAPI 3.1 takes it) of the API's models, read from msgspec's
own description of a type (:mod:`msgspec.inspect`).

Written here rather than taken from ``msgspec.json.schema`` for the document's style:
every Struct inline (no ``$defs``), ``["string", "null"]`` for an optional value, no
titles, and a default shown only where it is a plain value (``{}`` and ``None`` are not).
A type this module cannot describe is a TypeError, never a vague schema.

>>> import msgspec
>>> class Ask(msgspec.Struct, forbid_unknown_fields=True):
...     prompt: str
...     steps: int = 50
>>> schema_of(Ask)["properties"]["steps"]
{'type': 'integer', 'default': 50}
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, get_args, get_origin

import msgspec
import msgspec.inspect as mi
import msgspec.structs

__all__ = ["parameters_of", "schema_of"]

_PLAIN = (bool, int, float, str)


def schema_of(model: object) -> dict[str, Any]:
    """The schema of ``model``: a Struct, a builtin type, ``Annotated[...]``, a union with
    None, ``Literal[...]`` of strings, lists and string-keyed dicts of those."""
    return _schema(mi.type_info(model))


def parameters_of(model: type[msgspec.Struct], where: Literal["query", "header"]) -> list[dict[str, Any]]:
    """OpenAPI parameter objects, one per field of ``model``, in field order."""
    info = mi.type_info(model)
    assert isinstance(info, mi.StructType)
    declared = _annotations(info)
    found: list[dict[str, Any]] = []
    for field in info.fields:
        schema = _field_schema(field, declared[field.name])
        parameter: dict[str, Any] = {"name": field.encode_name, "in": where, "schema": schema}
        if field.required:
            parameter["required"] = True
        found.append(parameter)
    return found


def _schema(info: mi.Type) -> dict[str, Any]:
    match info:
        case mi.Metadata():
            return {**_schema(info.type), **(info.extra_json_schema or {})}
        case mi.StructType():
            return _struct(info)
        case mi.AnyType():
            return {}
        case mi.BoolType():
            return {"type": "boolean"}
        case mi.IntType():
            return _bounded("integer", info)
        case mi.FloatType():
            return _bounded("number", info)
        case mi.StrType():
            return _string(info)
        case mi.LiteralType():
            if not all(isinstance(v, str) for v in info.values):
                raise TypeError(f"only Literals of strings are described, not {info.values!r}")
            return {"type": "string", "enum": list(info.values)}
        case mi.ListType():
            return {"type": "array", "items": _schema(info.item_type)}
        case mi.DictType():
            if not isinstance(info.key_type, mi.StrType):
                raise TypeError(f"only string-keyed dicts are described, not {info!r}")
            if isinstance(info.value_type, mi.AnyType):
                return {"type": "object"}
            return {"type": "object", "additionalProperties": _schema(info.value_type)}
        case mi.UnionType():
            return _nullable(info)
    raise TypeError(f"no JSON Schema for {info!r}")


def _struct(info: mi.StructType) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    required = [f.encode_name for f in info.fields if f.required]
    if required:
        schema["required"] = required
    declared = _annotations(info)
    schema["properties"] = {f.encode_name: _field_schema(f, declared[f.name]) for f in info.fields}
    if info.forbid_unknown_fields:
        schema["additionalProperties"] = False
    return schema


def _field_schema(field: mi.Field, annotation: object) -> dict[str, Any]:
    schema = _schema(field.type)
    if isinstance(field.default, _PLAIN) and "default" not in schema:
        schema["default"] = field.default
    # msgspec sorts a Literal's values; the document lists them as declared (a lifecycle).
    orders = {frozenset(values): list(values) for values in _literals(annotation)}
    if orders:
        _reorder_enums(schema, orders)
    return schema


def _annotations(info: mi.StructType) -> dict[str, object]:
    return {f.name: f.type for f in msgspec.structs.fields(info.cls)}


def _literals(annotation: object) -> Iterator[tuple[object, ...]]:
    if get_origin(annotation) is Literal:
        yield get_args(annotation)
        return
    for inner in get_args(annotation):
        yield from _literals(inner)


def _reorder_enums(node: object, orders: dict[frozenset[object], list[object]]) -> None:
    if isinstance(node, dict):
        enum = node.get("enum")
        if isinstance(enum, list) and frozenset(enum) in orders:
            node["enum"] = orders[frozenset(enum)]
        for value in node.values():
            _reorder_enums(value, orders)
    elif isinstance(node, list):
        for value in node:
            _reorder_enums(value, orders)


def _bounded(kind: str, info: mi.IntType | mi.FloatType) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind}
    bounds = (
        ("minimum", info.ge),
        ("maximum", info.le),
        ("exclusiveMinimum", info.gt),
        ("exclusiveMaximum", info.lt),
        ("multipleOf", info.multiple_of),
    )
    schema.update((name, value) for name, value in bounds if value is not None)
    return schema


def _string(info: mi.StrType) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    bounds = (("minLength", info.min_length), ("maxLength", info.max_length), ("pattern", info.pattern))
    schema.update((name, value) for name, value in bounds if value is not None)
    return schema


def _nullable(info: mi.UnionType) -> dict[str, Any]:
    others = [t for t in info.types if not isinstance(t, mi.NoneType)]
    if len(others) != 1 or len(others) == len(info.types):
        raise TypeError(f"only a union of one type with None is described, not {info!r}")
    schema = _schema(others[0])
    kind = schema.get("type")
    if not isinstance(kind, str):
        raise TypeError(f"no nullable JSON Schema for {info!r}")
    return {**schema, "type": [kind, "null"]}
