"""Tool schemas: nested definitions, parameter descriptions from the docstring, and
decoration errors that are classified."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from seamline.errors import InvalidRequest, SeamlineError
from seamline.tools import ToolContext, tool

pydantic = pytest.importorskip("pydantic")


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


@dataclasses.dataclass
class Box:
    corner: Point
    label: str


class Person(pydantic.BaseModel):
    name: str
    age: int = 0


class Opaque:
    pass


def _context() -> ToolContext:
    return ToolContext(call_id="c1", session_id="s1", turn_id=0, emit=lambda event: None)


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    assert ref.startswith("#/$defs/"), ref
    found: dict[str, Any] = schema["$defs"][ref.removeprefix("#/$defs/")]
    return found


def test_a_dataclass_parameter_keeps_its_nested_definitions() -> None:
    @tool
    def draw(box: Box) -> str:
        """Draw a box."""
        return f"{box.label}@{box.corner.x},{box.corner.y}"

    schema = draw.parameters
    box = _resolve(schema, schema["properties"]["box"])
    corner = _resolve(schema, box["properties"]["corner"])
    assert corner["properties"]["x"] == {"type": "integer"}
    assert set(schema["$defs"]) == {"Box", "Point"}
    result = asyncio.run(draw.invoke({"box": {"corner": {"x": 1, "y": 2}, "label": "b"}}, _context()))
    assert result == "b@1,2"


def test_a_pydantic_parameter_gives_its_schema_and_is_validated() -> None:
    @tool
    def greet(person: Person) -> str:
        """Greet someone."""
        assert isinstance(person, Person)
        return f"hi {person.name} ({person.age})"

    schema = greet.parameters
    person = _resolve(schema, schema["properties"]["person"])
    assert person["properties"]["name"]["type"] == "string"
    assert person["required"] == ["name"]
    assert asyncio.run(greet.invoke({"person": {"name": "Ada", "age": 36}}, _context())) == "hi Ada (36)"
    with pytest.raises(InvalidRequest, match="greet"):
        greet.validate({"person": {"age": "old"}})


def test_parameter_descriptions_come_from_a_google_docstring() -> None:
    @tool
    def move(dx: int, dy: int = 0) -> str:
        """Move the cursor.

        Args:
            dx: columns to the right; negative goes left.
            dy: rows down,
                continued on a second line.
        """
        return f"{dx},{dy}"

    props = move.parameters["properties"]
    assert props["dx"]["description"] == "columns to the right; negative goes left."
    assert props["dy"]["description"] == "rows down, continued on a second line."
    assert move.description == "Move the cursor."


def test_parameter_descriptions_come_from_a_sphinx_docstring() -> None:
    @tool
    def scale(factor: float) -> str:
        """Scale the drawing.

        :param factor: how much bigger; 1 keeps the size.
        """
        return str(factor)

    assert scale.parameters["properties"]["factor"]["description"] == "how much bigger; 1 keeps the size."


def test_decoration_errors_are_classified() -> None:
    with pytest.raises(InvalidRequest, match=r"tool spread: \*args"):

        @tool
        def spread(*names: str) -> str:
            return ""

    with pytest.raises(InvalidRequest, match="tool hold: parameter 'thing'") as caught:

        @tool
        def hold(thing: Opaque) -> str:
            return ""

    assert isinstance(caught.value, SeamlineError) and caught.value.kind == "invalid_request"
