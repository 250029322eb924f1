"""The embedded ``offline`` provider: no network, no weights, deterministic.

It answers a question extractively from the workspace. Over three model calls it lists
the workspace, reads the files the question names (``calc.py``) and then those whose names
fit its words, and answers with the passages that match it best, citing file and lines. A
file the question names is answered with its outline (docstring, definitions, sections;
see ``_outline``), as is every file read when no passage matches. It reads only through the loop's
tools, so a run shows real ``tool_call`` and ``tool_result`` events, and the same
question over the same files gives the same answer, byte for byte.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from seamline.errors import InvalidRequest
from seamline.events import Event, TextDelta, ToolCall, Usage
from seamline.loop.messages import Message, ModelRequest
from seamline.providers.base import KeyPath, OptionSpec, PreflightCheck, Provider
from seamline.providers.local._outline import FileOutline, file_outline, numbered_rows

__all__ = ["OfflineProvider"]

_WORD: Final = re.compile(r"[a-z0-9_]+")
_STOP: Final = frozenset(
    "a an and are as at be by can do does for from how i if in is it its me my of on or our should so "
    "that the their them then there these this to was we what when where which who why will with you your "
    "about into use used using want need get make".split()
)
_TEXT_SUFFIXES: Final = (
    *(".md", ".rst", ".txt", ".py", ".toml", ".yaml", ".yml", ".json", ".cfg", ".ini", ".sh", ""),
    *(".js", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".c", ".h", ".cpp", ".rb", ".sql"),
)
# A word of the question that names a file: it has a dot or a slash (`calc.py`, `src/app`).
_FILE_REF: Final = re.compile(r"[\w.\-/]*[\w\-][.\/][\w.\-/]*\w")
_DOC_SUFFIXES: Final = (".md", ".rst", ".txt")
_MAX_FILES: Final = 6
_MAX_PASSAGES: Final = 3
_PASSAGE_LINES: Final = 12


def _stem(word: str) -> str:
    for suffix in ("ing", "ies", "es", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def _terms(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1]


@dataclass(frozen=True, slots=True)
class _Passage:
    path: str
    start: int
    end: int
    lines: tuple[str, ...]
    code: bool = False


class OfflineProvider(Provider):
    """Extractive answers from the workspace; the default provider."""

    name: ClassVar[str] = "offline"
    keys: ClassVar[KeyPath] = "none"
    description: ClassVar[str] = "embedded, deterministic, extractive answers from the workspace (no network)"
    default_model: ClassVar[str | None] = "extractive"
    options: ClassVar[dict[str, OptionSpec]] = {
        "max_files": OptionSpec("how many files to read at most", default=str(_MAX_FILES), kind="positive_count"),
        "passages": OptionSpec("how many passages to cite at most", default=str(_MAX_PASSAGES), kind="positive_count"),
    }
    forking = "emulated"
    session_ids = "seamline"
    cost_scope = "step"
    cost_source = "free"
    result_cadence = "stream"
    routes = ("extractive",)
    real = False

    def __init__(self, *, model: str | None = None, options: Mapping[str, str] | None = None) -> None:
        if model not in (None, "", "extractive"):
            # `run --model gpt-4o` without --provider: say so instead of answering offline.
            raise InvalidRequest(f"the offline provider has one model, extractive, not {model!r}; {_serving(model)}")
        super().__init__(model=model, options=options)

    def _step(self, request: ModelRequest) -> AsyncIterator[Event]:
        return self._answer(request)

    async def _preflight(self) -> Sequence[PreflightCheck]:
        return [PreflightCheck(name="offline", ok=True, detail="embedded; needs nothing")]

    async def _answer(self, request: ModelRequest) -> AsyncIterator[Event]:
        question, since = _last_question(request.messages)
        tools = {t.name for t in request.tools}
        called = [c for m in since if m.role == "assistant" for c in m.tool_calls]
        results = {m.call_id: m for m in since if m.role == "tool"}
        prefix = f"offline-{request.turn}-{request.step}"
        usage_in = sum(len(m.content) for m in request.messages) // 4 + 1
        if not called and "list_dir" in tools:
            yield ToolCall(call_id=f"{prefix}-0", name="list_dir", arguments={"path": ".", "depth": 4})
            yield Usage(
                input_tokens=usage_in, output_tokens=12, cost_usd=0.0, priced=True, model=self.model, usage_id=prefix
            )
            return
        listed = [c for c in called if c.name == "list_dir"]
        read = [c for c in called if c.name == "read_file"]
        if listed and not read and "read_file" in tools:
            listing = results.get(listed[-1].call_id)
            files = _choose_files(
                question, listing.content if listing and not listing.is_error else "", self._int("max_files")
            )
            if files:
                for i, path in enumerate(files):
                    yield ToolCall(call_id=f"{prefix}-{i}", name="read_file", arguments={"path": path})
                yield Usage(
                    input_tokens=usage_in,
                    output_tokens=10 * len(files),
                    cost_usd=0.0,
                    priced=True,
                    model=self.model,
                    usage_id=prefix,
                )
                return
        sources = [
            (c.arguments.get("path", ""), results[c.call_id].content)
            for c in read
            if c.call_id in results and not results[c.call_id].is_error
        ]
        answer = _compose(question, sources, self._int("passages"))
        for chunk in _chunks(answer):
            yield TextDelta(text=chunk)
        yield Usage(
            input_tokens=usage_in,
            output_tokens=len(answer) // 4 + 1,
            cost_usd=0.0,
            priced=True,
            model=self.model,
            usage_id=prefix,
        )

    def _int(self, key: str) -> int:
        try:
            return max(1, int(self.option_values[key]))
        except ValueError:
            return int(self.options[key].default or "1")


def _last_question(messages: list[Message]) -> tuple[str, list[Message]]:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return messages[i].content, messages[i + 1 :]
    return "", list(messages)


def _named_in(question: str) -> list[str]:
    """The file references in ``question``, in order: ``calc.py``, ``src/app.js``."""
    refs: list[str] = []
    for ref in _FILE_REF.findall(question):
        ref = ref.removeprefix("./")
        if ref and not ref.startswith("/") and ".." not in ref.split("/") and ref not in refs:
            refs.append(ref)
    return refs


def _names(ref: str, path: str) -> int | None:
    """How closely ``ref`` names ``path``: 0 the path itself, 1 its tail, 2 its name; None not at all."""
    if path == ref:
        return 0
    low, low_ref = path.lower(), ref.lower()
    if low == low_ref or low.endswith("/" + low_ref):
        return 1
    if "/" not in ref and low.rsplit("/", 1)[-1] == low_ref:
        return 2
    return None


def _path_terms(path: str) -> tuple[set[str], set[str]]:
    """The words of a file's name (its suffix aside) and of its folders, whole and split at ``_``."""
    folders, _, name = path.rpartition("/")
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name

    def words(text: str) -> set[str]:
        pieces = re.split(r"[^a-z0-9_]+", text.lower())
        return set(_terms(" ".join(pieces + [p for piece in pieces for p in piece.split("_")])))

    return words(stem), words(folders)


def _choose_files(question: str, listing: str, limit: int) -> list[str]:
    """The files to read: those the question names, in its order, then the best by their names."""
    lines = (line.strip() for line in listing.splitlines())
    paths = sorted({p for p in lines if p and not p.endswith("/") and not p.startswith("[")})
    named: list[str] = []
    for ref in _named_in(question):
        hits = sorted((rank, p.count("/"), p) for p in paths if (rank := _names(ref, p)) is not None)
        if not hits and "/" in ref and "." in ref.rsplit("/", 1)[-1]:
            named.append(ref)  # a path deeper than the listing reaches: read_file answers for it
        # The closest match, and every other file of that name when the ref is only a name.
        named.extend(p for rank, _, p in hits if rank == hits[0][0] and p not in named)
    terms = set(_terms(question))
    scored: list[tuple[float, str]] = []
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
        if suffix not in _TEXT_SUFFIXES or path in named:
            continue
        stem_terms, folder_terms = _path_terms(path)
        score = 4.0 * len(terms & stem_terms) + 2.0 * len(terms & (folder_terms - stem_terms))
        if suffix in _DOC_SUFFIXES:
            score += 1.0
        if name.lower().startswith("readme"):
            score += 1.5
        if path.count("/") == 0 and score > 0:
            score += 0.25
        scored.append((score, path))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return (named + [p for s, p in scored if s > 0])[:limit]


def _passages(path: str, numbered: str) -> list[_Passage]:
    rows = numbered_rows(numbered)
    out: list[_Passage] = []
    block: list[tuple[int, str]] = []

    def close() -> None:
        if block:
            lines = tuple(t for _, t in block)
            code = in_code or any(t.strip().startswith("```") for t in lines)
            out.append(_Passage(path, block[0][0], block[-1][0], lines, code))
            block.clear()

    in_code = False
    for number, text in rows:
        stripped = text.strip()
        if stripped.startswith("```"):
            in_code = not in_code
        heading = stripped.startswith("#") and not in_code
        if heading and block:
            close()
        if not stripped:
            # a heading keeps the paragraph after it; a blank line elsewhere ends the passage
            if block and not (len(block) == 1 and block[0][1].lstrip().startswith("#")):
                close()
            continue
        block.append((number, text))
        if len(block) >= _PASSAGE_LINES:
            close()
    close()
    return out


def _compose(question: str, sources: list[tuple[str, str]], limit: int) -> str:
    asked = question.strip()
    if not sources:
        return f'I found nothing in the workspace that answers "{asked}". I read: nothing.\n'
    refs = _named_in(question)
    named = [(path, content) for path, content in sources if any(_names(ref, path) is not None for ref in refs)]
    outlines = [o for path, content in named if (o := file_outline(path, content)) is not None][:limit]
    if outlines:
        # The question is about these files: say what they hold, then where others mention them.
        others = [(path, content) for path, content in sources if (path, content) not in named]
        chosen = _best_passages(question, others, limit)
        one = len(outlines) == 1
        parts = [f"From the workspace, what {', '.join(o.path for o in outlines)} {'holds' if one else 'hold'}:\n"]
        parts.extend(_outline_lines(o) for o in outlines)
        if chosen:
            parts.append(f"\nWhere the workspace mentions {'it' if one else 'them'}:\n")
            parts.append(_passage_lines(chosen))
        return "".join(parts) + _sources([f"{o.path}:{o.first}-{o.last}" for o in outlines], chosen)
    chosen = _best_passages(question, sources, limit)
    if chosen:
        parts = [f'From the workspace, the passages that best answer "{asked}":\n', _passage_lines(chosen)]
        return "".join(parts) + _sources([], chosen)
    outlines = [o for path, content in sources if (o := file_outline(path, content)) is not None][:limit]
    read = ", ".join(path for path, _ in sources)
    if not outlines:
        return f'I found nothing in the workspace that answers "{asked}". I read: {read}.\n'
    holds = "what it holds" if len(sources) == 1 else "what they hold"
    parts = [f'No passage I read answers "{asked}" in its words. I read {read}; {holds}:\n']
    parts.extend(_outline_lines(o) for o in outlines)
    return "".join(parts) + _sources([f"{o.path}:{o.first}-{o.last}" for o in outlines], [])


def _best_passages(question: str, sources: list[tuple[str, str]], limit: int) -> list[_Passage]:
    terms = _terms(question)
    passages = [p for path, content in sources for p in _passages(path, content)]
    if not terms or not passages:
        return []
    bags = [_terms(" ".join(p.lines)) for p in passages]
    df: dict[str, int] = {}
    for bag in bags:
        for term in set(bag):
            df[term] = df.get(term, 0) + 1
    n = len(passages)
    unique = set(terms)
    scored: list[tuple[float, int]] = []
    for i, bag in enumerate(bags):
        counts: dict[str, int] = {}
        for term in bag:
            if term in unique:
                counts[term] = counts.get(term, 0) + 1
        if not counts:
            continue
        score = sum((1 + math.log(c)) * math.log(1 + n / df[t]) for t, c in counts.items())
        score *= len(counts) / len(unique)  # passages that cover more of the question rank higher
        passage = passages[i]
        if passage.code:
            score *= 0.5  # prose explains; code only illustrates
        if passage.lines[0].lstrip().startswith("#") and unique & set(_terms(passage.lines[0])):
            score *= 1.5  # the section is about the question
        scored.append((score, i))
    scored.sort(key=lambda item: (-round(item[0], 9), passages[item[1]].path, passages[item[1]].start))
    return [passages[i] for _, i in scored[:limit]]


def _passage_lines(chosen: list[_Passage]) -> str:
    parts: list[str] = []
    for k, p in enumerate(chosen, 1):
        parts.append(f"\n{k}. {p.path}:{p.start}-{p.end}\n")
        parts.extend(f"   > {line}\n" for line in p.lines)
    return "".join(parts)


def _outline_lines(outline: FileOutline) -> str:
    head = f"\n{outline.path}:{outline.first}-{outline.last}"
    parts = [f"{head}: {outline.summary}\n" if outline.summary else f"{head}\n"]
    if outline.parts:
        parts.append(f"   {outline.label}:\n")
        parts.extend(f"   - {outline.path}:{line} {text}\n" for line, text in outline.parts)
        if outline.more:
            parts.append(f"   - and {outline.more} more\n")
    return "".join(parts)


def _sources(files: list[str], chosen: list[_Passage]) -> str:
    return "\nSources: " + ", ".join([*files, *(f"{p.path}:{p.start}-{p.end}" for p in chosen)]) + "\n"


def _chunks(text: str) -> list[str]:
    return text.splitlines(keepends=True)


# Which providers serve a model, by its name's family (a hint, not a promise).
_FAMILIES: Final = (
    (("gpt-", "o1", "o3", "o4", "chatgpt-", "codex-"), ("openai", "codex")),
    (("claude-",), ("anthropic", "claude-code")),
    (("gemini-",), ("gemini-cli",)),
)


def _serving(model: str | None) -> str:
    name = (model or "").lower()
    for prefixes, providers in _FAMILIES:
        if name.startswith(prefixes):
            listed = " or ".join(f"--provider {p}" for p in providers)
            return f"pass {listed}"
    return "pass --provider NAME (see seamline providers list)"
