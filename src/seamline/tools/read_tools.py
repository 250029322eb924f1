"""The bodies of ``read_file`` and ``grep``: bounded, interruptible, text only.

Both read through descriptors opened beneath the workspace (:mod:`seamline.tools.beneath`),
so a link never leads them out; both refuse FIFOs, devices and sockets, files over a size
cap and sparse giants (a huge size on few disk blocks); both cap what they answer and say
so; both run in a thread with a deadline and a stop flag, so a timeout or a Ctrl-C ends
them. ``grep`` compiles and matches in a child process (:mod:`seamline.tools.grep_child`)
whose address space is capped at :data:`MAX_GREP_MEMORY_BYTES`: a pattern or a line that
would allocate without bound ends as a classified ``invalid_request`` error, a catastrophic
pattern as a ``timeout`` one, and a stop ends the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fnmatch
import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import regex

from seamline.errors import InvalidRequest, PermissionDenied, SandboxViolation, SeamlineError, TimeoutFailure
from seamline.store_files import is_store_file
from seamline.tools.beneath import open_dir_beneath, regular_file

__all__ = ["MAX_GREP_MEMORY_BYTES", "GrepQuery", "grep_tree", "read_lines", "run_bounded_read", "search_here"]

MAX_FILE_BYTES: Final = 64 * 1024 * 1024  # read_file refuses bigger files
MAX_GREP_FILE_BYTES: Final = 16 * 1024 * 1024  # grep skips bigger files (and says how many)
MAX_ANSWER_BYTES: Final = 100_000  # what read_file and grep answer at most
MAX_HIT_CHARS: Final = 500  # one matching line, shown at most
_SPARSE_MIN: Final = 1024 * 1024
_SPARSE_RATIO: Final = 8  # size over 8x the bytes on disk: a sparse giant
_CHECK_EVERY: Final = 512
MAX_GREP_MEMORY_BYTES: Final = 1024 * 1024 * 1024  # the search process's address space
_POLL_S: Final = 0.05  # how often the waiting thread looks at the stop flag
_SKIP_DIRS: Final = frozenset(
    {".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
)
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Stopped(Exception):
    """The caller gave up (timeout or cancel); the thread ends here."""


async def run_bounded_read(work: Callable[[threading.Event, float], str], *, timeout: float, what: str) -> str:
    """Run ``work(stop, deadline)`` in a thread; past ``timeout`` seconds raise
    :class:`TimeoutFailure`; on cancel set the stop flag and re-raise.

    The thread is a daemon of its own (not the loop's executor): a cancelled read winds
    down in the background, within one look at the flag, and never holds up the exit."""
    stop = threading.Event()
    deadline = time.monotonic() + timeout
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()

    def settle(result: str | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result or "")

    def body() -> None:
        try:
            result = work(stop, deadline)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, None, exc)
            return
        with contextlib.suppress(RuntimeError):  # the loop may be closed after a cancel
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=body, name=f"seamline-{what}", daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.shield(done), timeout=timeout)
    except TimeoutError:
        stop.set()
        raise TimeoutFailure(f"{what} ran past {timeout:g}s and was stopped") from None
    except asyncio.CancelledError:
        stop.set()
        raise
    except Stopped:
        raise TimeoutFailure(f"{what} ran past {timeout:g}s and was stopped") from None


def _check_size(st: os.stat_result, rel: str, cap: int) -> None:
    if st.st_size > cap:
        raise InvalidRequest(
            f"{rel} is {st.st_size} bytes, over the {cap} byte limit of read_file; use grep or the shell (head, tail)"
        )
    if _sparse(st):
        raise InvalidRequest(f"{rel} is a sparse file ({st.st_size} bytes on {st.st_blocks * 512} on disk); refused")


def _sparse(st: os.stat_result) -> bool:
    return st.st_size >= _SPARSE_MIN and st.st_blocks * 512 * _SPARSE_RATIO < st.st_size


def _binary(rel: str) -> InvalidRequest:
    return InvalidRequest(f"{rel} is a binary file (not UTF-8 text); read_file and grep read text")


def _decode(raw: bytes, rel: str) -> str:
    if b"\x00" in raw:
        raise _binary(rel)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _binary(rel) from None


def read_lines(root: Path, parts: list[str], rel: str, *, offset: int, limit: int, stop: threading.Event) -> str:
    """Lines ``offset``.. of a text file, numbered ``N<TAB>text``, within the caps."""
    fd, st = regular_file(root, parts)
    with os.fdopen(fd, "rb") as fh:
        _check_size(st, rel, MAX_FILE_BYTES)
        start = max(offset, 1)
        want = max(limit, 0)
        out: list[str] = []
        size = 0
        n = 0
        cut_at: int | None = None
        for n, raw in enumerate(fh, 1):
            if n % _CHECK_EVERY == 0 and stop.is_set():
                raise Stopped
            line = _decode(raw, rel).rstrip("\n").removesuffix("\r")
            if n < start or len(out) >= want or cut_at is not None:
                continue
            entry = f"{n}\t{line}"
            if size + len(entry) + 1 > MAX_ANSWER_BYTES:
                cut_at = n
                continue
            out.append(entry)
            size += len(entry) + 1
    body = "\n".join(out)
    if cut_at is not None:
        body += f"\n[output truncated at {MAX_ANSWER_BYTES} bytes; {n - cut_at + 1} more lines; use offset={cut_at}]"
    elif start - 1 + len(out) < n:
        body += f"\n[{n - (start - 1 + len(out))} more lines; use offset]"
    return body


class GrepQuery:
    """A grep request: the pattern (compiled in the search process), an optional glob, the cap on hits."""

    def __init__(self, pattern: str, *, glob: str | None, max_results: int) -> None:
        if not isinstance(pattern, str):
            raise InvalidRequest("bad regular expression: the pattern must be a string")
        self.pattern = pattern
        self.glob = glob
        self.max_results = max(1, max_results)


def grep_tree(
    root: Path,
    parts: list[str],
    query: GrepQuery,
    *,
    is_file: bool,
    stop: threading.Event,
    deadline: float,
    memory_bytes: int = MAX_GREP_MEMORY_BYTES,
) -> str:
    """Search a file, or every file under a folder (sorted by path), for the pattern, in a
    child process with ``memory_bytes`` of address space; a stop or the deadline ends it."""
    request = {
        "root": str(root),
        "parts": parts,
        "pattern": query.pattern,
        "glob": query.glob,
        "max_results": query.max_results,
        "is_file": is_file,
        "timeout": max(deadline - time.monotonic(), 0.001),
        "memory_bytes": memory_bytes,
    }
    answer = _run_child(json.dumps(request).encode(), stop, deadline)
    if "ok" in answer:
        return str(answer["ok"])
    kind, message = answer.get("kind"), str(answer.get("message", ""))
    if kind in _CLASSES:
        raise _CLASSES[str(kind)](message)
    if kind == "os":
        number = answer.get("errno")
        raise OSError(number if isinstance(number, int) else errno.EIO, message)
    if kind == "memory":
        raise InvalidRequest(
            f"grep ran out of its {memory_bytes // (1024 * 1024)} MB memory limit "
            "(a huge repetition in the pattern, or a very long line); simplify the pattern or narrow the search"
        )
    raise InvalidRequest(f"grep failed: {message}")


_CLASSES: Final[dict[str, type[SeamlineError]]] = {
    cls.kind: cls for cls in (TimeoutFailure, InvalidRequest, SandboxViolation, PermissionDenied)
}


_CHILD_BOOT: Final = "import sys; sys.path.insert(0, sys.argv[1]); from seamline.tools.grep_child import main; main()"


def _run_child(request: bytes, stop: threading.Event, deadline: float) -> dict[str, object]:
    source = str(Path(__file__).resolve().parents[2])  # the folder that holds the seamline package
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", _CHILD_BOOT, source],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
        start_new_session=True,
    )
    try:
        first: bytes | None = request
        while True:
            try:
                out, _err = proc.communicate(first, timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                first = None
                if stop.is_set() or time.monotonic() > deadline:
                    raise Stopped from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        # Killed (by the kernel, or a C allocation failing outside Python's reach).
        return {"kind": "memory" if proc.returncode < 0 else "error", "message": f"exit {proc.returncode}"}
    return answer


def search_here(
    root: Path,
    parts: list[str],
    pattern: str,
    *,
    glob: str | None,
    max_results: int,
    is_file: bool,
    stop: threading.Event,
    deadline: float,
) -> str:
    """The search itself, in this process (the child of :func:`grep_tree`): compile, walk, match."""
    try:
        compiled = regex.compile(pattern)
    except (regex.error, TypeError, ValueError, OverflowError) as exc:
        raise InvalidRequest(f"bad regular expression: {exc}") from None
    query = GrepQuery(pattern, glob=glob, max_results=max_results)
    hits: list[str] = []
    size = 0
    skipped = {"binary": 0, "too big": 0, "link": 0, "special": 0}
    files = _one_file(root, parts) if is_file else _tree(root, parts, skipped, stop)
    for rel, raw in files:
        name = rel.rsplit("/", 1)[-1]
        if query.glob and not fnmatch.fnmatch(rel, query.glob) and not fnmatch.fnmatch(name, query.glob):
            continue
        if raw is None:
            continue
        if b"\x00" in raw[:8192]:
            skipped["binary"] += 1
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            skipped["binary"] += 1
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if n % _CHECK_EVERY == 0 and stop.is_set():
                raise Stopped
            try:
                budget = max(deadline - time.monotonic(), 0.001)
                found = compiled.search(line, timeout=budget, concurrent=True)
            except TimeoutError:
                raise TimeoutFailure(
                    "grep ran past its time limit (the pattern may backtrack catastrophically; simplify it)"
                ) from None
            if found is None:
                continue
            shown = line if len(line) <= MAX_HIT_CHARS else line[:MAX_HIT_CHARS] + "…"
            entry = f"{rel}:{n}:{shown}"
            if len(hits) >= query.max_results:
                return "\n".join(hits) + "\n[more matches; narrow the search]" + _skipped_note(skipped)
            if size + len(entry) + 1 > MAX_ANSWER_BYTES:
                return "\n".join(hits) + f"\n[output truncated at {MAX_ANSWER_BYTES} bytes; narrow the search]"
            hits.append(entry)
            size += len(entry) + 1
    return ("\n".join(hits) if hits else "no matches") + _skipped_note(skipped)


def _skipped_note(skipped: dict[str, int]) -> str:
    said = [f"{count} {why}" for why, count in skipped.items() if count]
    return f"\n[skipped: {', '.join(said)}]" if said else ""


def _one_file(root: Path, parts: list[str]) -> Iterator[tuple[str, bytes | None]]:
    rel = "/".join(parts)
    fd, st = regular_file(root, parts)
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > MAX_GREP_FILE_BYTES or _sparse(st):
            raise InvalidRequest(f"{rel} is too big for grep ({st.st_size} bytes); use the shell")
        raw = fh.read(MAX_GREP_FILE_BYTES + 1)
    if b"\x00" in raw[:8192]:
        raise _binary(rel)
    yield rel, raw


def _tree(
    root: Path, parts: list[str], skipped: dict[str, int], stop: threading.Event
) -> Iterator[tuple[str, bytes | None]]:
    prefix = "/".join(parts) + "/" if parts else ""
    with open_dir_beneath(root, parts) as fd:
        yield from _walk(fd, prefix, skipped, stop, 0)


def _walk(
    dir_fd: int, prefix: str, skipped: dict[str, int], stop: threading.Event, depth: int
) -> Iterator[tuple[str, bytes | None]]:
    if stop.is_set():
        raise Stopped
    if depth > 64:
        return
    try:
        with os.scandir(dir_fd) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    here = os.readlink(f"/proc/self/fd/{dir_fd}")
    for entry in entries:
        if entry.is_symlink():
            skipped["link"] += 1  # never followed: it may lead out of the workspace
            continue
        if is_store_file(os.path.join(here, entry.name)):
            continue  # an open session store: opening it here would drop its locks
        if entry.is_dir(follow_symlinks=False):
            if entry.name in _SKIP_DIRS:
                continue
            try:
                sub = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from _walk(sub, f"{prefix}{entry.name}/", skipped, stop, depth + 1)
            finally:
                os.close(sub)
            continue
        yield f"{prefix}{entry.name}", _read_for_grep(dir_fd, entry.name, skipped)


def _read_for_grep(dir_fd: int, name: str, skipped: dict[str, int]) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            skipped["link"] += 1
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            skipped["special"] += 1
            return None
        if st.st_size > MAX_GREP_FILE_BYTES or _sparse(st):
            skipped["too big"] += 1
            return None
        os.set_blocking(fh.fileno(), True)
        try:
            return fh.read(MAX_GREP_FILE_BYTES + 1)
        except OSError:
            return None
