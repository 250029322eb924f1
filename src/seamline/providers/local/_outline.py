"""What a file holds, in a few lines: the ``offline`` provider's answer about a file.

A Python module gives its docstring and its top-level functions and classes (by ``ast``,
or by their ``def``/``class`` lines when it does not parse); a Markdown or text file its
first heading and paragraph and its section headings; other code its leading comment and
its top-level definitions. Every part keeps its line number, so the answer cites it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Final

__all__ = ["FileOutline", "file_outline", "numbered_rows"]

_MAX_PARTS: Final = 20
_MAX_SIGNATURE: Final = 80
_MAX_SUMMARY: Final = 400
_PY_DEF: Final = re.compile(r"(?:async\s+)?def\s+(\w+)\s*\(([^)]*)\)?|class\s+(\w+)")
_CODE_DEF: Final = re.compile(
    r"(?:export\s+)?(?:default\s+)?(?:pub(?:\([\w\s]+\))?\s+)?(?:async\s+)?"
    r"(function\*?|class|def|fn|func|interface|struct|enum|trait|type|module)\s+([A-Za-z_$][\w$]*)"
)
_COMMENT: Final = re.compile(r"^\s*(?://+|#+!?|/\*+|\*+/?|--|;+)\s?")
_DOC_SUFFIXES: Final = (".md", ".rst", ".txt")
_QUOTES: Final = re.compile(r'^[rRuU]?("""|\'\'\')|("""|\'\'\')$')  # a docstring's, read as plain text


@dataclass(frozen=True, slots=True)
class FileOutline:
    """A file's summary (``summary``, from line ``first``) and its parts, each ``(line, text)``."""

    path: str
    first: int
    last: int
    summary: str
    parts: tuple[tuple[int, str], ...]
    more: int  # parts left out
    label: str  # what the parts are: "defines" or "sections"


def numbered_rows(numbered: str) -> list[tuple[int, str]]:
    """The ``(line, text)`` rows of ``read_file``'s ``N<TAB>text`` answer; notes are skipped."""
    rows: list[tuple[int, str]] = []
    for raw in numbered.splitlines():
        head, tab, text = raw.partition("\t")
        if tab and head.strip().isdigit():
            rows.append((int(head), text))
    return rows


def file_outline(path: str, numbered: str) -> FileOutline | None:
    """The outline of a file ``read_file`` answered with ``numbered``; None when it is empty."""
    rows = numbered_rows(numbered)
    if not any(t.strip() for _, t in rows):
        return None
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    if suffix in ("py", "pyi"):
        summary, parts, label = _python(rows)
    elif f".{suffix}" in _DOC_SUFFIXES:
        summary, parts, label = _document(rows)
    else:
        summary, parts, label = _code(rows)
    return FileOutline(
        path=path,
        first=rows[0][0],
        last=rows[-1][0],
        summary=_clip(summary, _MAX_SUMMARY),
        parts=tuple(parts[:_MAX_PARTS]),
        more=max(0, len(parts) - _MAX_PARTS),
        label=label,
    )


def _python(rows: list[tuple[int, str]]) -> tuple[str, list[tuple[int, str]], str]:
    offset = rows[0][0] - 1
    try:
        tree = ast.parse("\n".join(t for _, t in rows))
    except (SyntaxError, ValueError, RecursionError):
        # A cut-off or broken file: its def and class lines still say what it holds.
        parts = []
        for n, text in rows:
            if m := _PY_DEF.match(text):
                parts.append((n, f"class {m[3]}" if m[3] else f"{m[1]}({' '.join(m[2].split())})"))
        return _QUOTES.sub("", _leading_text(rows)).strip(), parts, "defines"
    parts = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            text = f"{node.name}({_clip(ast.unparse(node.args), _MAX_SIGNATURE)})"
        elif isinstance(node, ast.ClassDef):
            text = f"class {node.name}"
        else:
            continue
        if doc := _first_paragraph(ast.get_docstring(node) or ""):
            text += f": {_clip(doc, 120)}"
        parts.append((node.lineno + offset, text))
    return _first_paragraph(ast.get_docstring(tree) or "") or _leading_text(rows), parts, "defines"


def _document(rows: list[tuple[int, str]]) -> tuple[str, list[tuple[int, str]], str]:
    headings: list[tuple[int, str]] = []
    fenced = False
    for n, text in rows:
        stripped = text.strip()
        if stripped.startswith("```"):
            fenced = not fenced
        elif stripped.startswith("#") and not fenced:
            headings.append((n, stripped.lstrip("#").strip()))
    title = headings[0][1] if headings and headings[0][0] == _first_text_line(rows) else ""
    body = _leading_text([(n, t) for n, t in rows if not t.strip().startswith("#")])
    summary = f"{title}: {body}" if title and body else title or body
    return summary, headings[1:] if title else headings, "sections"


def _code(rows: list[tuple[int, str]]) -> tuple[str, list[tuple[int, str]], str]:
    comment: list[str] = []
    for n, text in rows:
        if (not text.strip() and not comment) or (n == 1 and text.startswith("#!")):
            continue  # leading blank lines and a shebang
        m = _COMMENT.match(text)
        if not m:
            break
        comment.append(text[m.end() :].strip())
    parts = [(n, f"{m[1]} {m[2]}") for n, text in rows if (m := _CODE_DEF.match(text))]
    summary = " ".join(" ".join(comment).split()) or _leading_text(rows)
    return summary, parts, "defines"


def _first_text_line(rows: list[tuple[int, str]]) -> int | None:
    return next((n for n, t in rows if t.strip()), None)


def _leading_text(rows: list[tuple[int, str]]) -> str:
    """The first paragraph (up to a blank line) of the rows, on one line."""
    lines: list[str] = []
    for _, text in rows:
        if text.strip():
            lines.append(text.strip())
        elif lines:
            break
    return " ".join(lines)


def _first_paragraph(doc: str) -> str:
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
