"""Tools: a name, a JSON schema derived from a typed Python function, and metadata.

>>> from seamline.tools import tool
>>> @tool
... def add(a: int, b: int = 1) -> str:
...     '''Add two numbers.'''
...     return str(a + b)
>>> add.parameters["required"]
['a']
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

import msgspec

from seamline.errors import InvalidRequest
from seamline.events import Event
from seamline.tools.schema import ModelClass, args_schema, parameter_docs

if TYPE_CHECKING:
    from seamline.tools.workspace import Workspace

__all__ = ["Tool", "ToolClass", "ToolContext", "ToolSpec", "Toolset", "tool", "tool_article"]

ToolClass: TypeAlias = Literal["read", "write", "execute", "network"]
ToolFunction: TypeAlias = Callable[..., Awaitable[str] | str]


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a model sees of a tool."""

    name: str
    description: str
    parameters: dict[str, object]


@dataclass(slots=True)
class ToolContext:
    """Passed to a tool that declares a parameter annotated ``ToolContext``."""

    call_id: str
    session_id: str
    turn_id: int
    emit: Callable[[Event], None]
    workspace: Workspace | None = None  # the tool set's workspace, when it has one


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable the model may ask for. Build one with :func:`tool`."""

    name: str
    description: str
    parameters: dict[str, object]
    function: ToolFunction
    tool_class: ToolClass = "read"
    source: str = "host"
    server: str | None = None
    reaches_outside: bool = False
    _args_type: type[msgspec.Struct] | None = field(default=None, repr=False)
    _context_param: str | None = field(default=None, repr=False)
    _is_async: bool = field(default=False, repr=False)
    _models: tuple[tuple[str, ModelClass], ...] = field(default=(), repr=False)  # pydantic parameters

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def validate(self, arguments: Mapping[str, object]) -> dict[str, object]:
        """Check ``arguments`` against the schema; :class:`InvalidRequest` says what is wrong."""
        if self._args_type is None:
            return dict(arguments)
        try:
            # convert reads a dict without changing it: no copy of one
            given = arguments if type(arguments) is dict else dict(arguments)
            converted = msgspec.convert(given, self._args_type, strict=False)
        except msgspec.ValidationError as exc:
            raise InvalidRequest(f"invalid arguments for {self.name}: {exc}") from None
        values: dict[str, object] = msgspec.structs.asdict(converted)
        for name, model in self._models:
            if name in arguments:
                try:
                    values[name] = model.model_validate(values[name])
                except ValueError as exc:  # pydantic's ValidationError is a ValueError
                    raise InvalidRequest(f"invalid arguments for {self.name}: {name}: {exc}") from None
        return values

    @property
    def takes_context(self) -> bool:
        """Whether the function has a parameter annotated :class:`ToolContext`."""
        return self._context_param is not None

    async def invoke(self, arguments: Mapping[str, object], context: ToolContext | None = None) -> str:
        """Validate ``arguments`` and call the function; ``context`` is needed only by a tool
        that takes one (:attr:`takes_context`)."""
        kwargs = self.validate(arguments)
        if self._context_param is not None:
            if context is None:
                raise InvalidRequest(f"tool {self.name} takes a ToolContext and was called without one")
            kwargs[self._context_param] = context
        if self._is_async:
            result = await typing.cast(Awaitable[str], self.function(**kwargs))
        else:
            result = typing.cast(str, self.function(**kwargs))
        return result if isinstance(result, str) else msgspec.json.encode(result).decode()


@overload
def tool(function: ToolFunction, /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    tool_class: ToolClass = "read",
    reaches_outside: bool = False,
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    function: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    tool_class: ToolClass = "read",
    reaches_outside: bool = False,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a :class:`Tool` of a typed function; the schema comes from its signature."""

    def build(fn: ToolFunction) -> Tool:
        return _build_tool(
            fn, name=name, description=description, tool_class=tool_class, reaches_outside=reaches_outside
        )

    return build if function is None else build(function)


def _build_tool(
    fn: ToolFunction, *, name: str | None, description: str | None, tool_class: ToolClass, reaches_outside: bool
) -> Tool:
    label: str = name or str(getattr(fn, "__name__", "tool"))
    if not callable(fn):
        raise InvalidRequest(f"@tool takes a function, not {fn!r}")
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError) as exc:
        raise InvalidRequest(f"tool {label}: its annotations cannot be read ({exc})") from None
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    context_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            context_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise InvalidRequest(f"tool {label}: *args and **kwargs cannot be described to a model")
        if param.kind is param.POSITIONAL_ONLY:
            raise InvalidRequest(f"tool {label}: parameter {param.name!r} is positional-only; a model names arguments")
        if param.default is inspect.Parameter.empty:
            fields.append((param.name, annotation))
        else:
            fields.append((param.name, annotation, param.default))
    doc = inspect.getdoc(fn) or ""
    built = args_schema(label, fields, parameter_docs(doc))
    return Tool(
        name=label,
        description=description or doc.split("\n\n")[0].strip() or label,
        parameters=built.schema,
        function=fn,
        tool_class=tool_class,
        reaches_outside=reaches_outside,
        _args_type=built.args_type,
        _context_param=context_param,
        _is_async=inspect.iscoroutinefunction(fn),
        _models=built.models,
    )


class Toolset:
    """The tools offered in a run, by name; only tools added here are ever offered."""

    def __init__(self, tools: Iterable[Tool] = (), *, workspace: Workspace | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self.workspace = workspace
        for t in tools:
            self.add(t)

    def add(self, new: Tool) -> None:
        if new.name in self._tools:
            raise ValueError(f"tool {new.name!r} is already in this tool set")
        self._tools[new.name] = new

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    def restrict(self, allow: Iterable[str]) -> Toolset:
        """A tool set holding only the allowed names; an unknown name is an error."""
        wanted = list(allow)
        unknown = [n for n in wanted if n not in self._tools]
        if unknown:
            raise InvalidRequest(f"unknown tool(s) in allowlist: {', '.join(unknown)}; known: {', '.join(self._tools)}")
        return Toolset((self._tools[n] for n in wanted), workspace=self.workspace)

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> typing.Iterator[Tool]:
        return iter(self._tools.values())


def tool_article(tool_class: str) -> str:
    """``an execute``, ``a write``: a tool class with its article, for messages."""
    return f"an {tool_class}" if tool_class[:1] in "aeiou" else f"a {tool_class}"
