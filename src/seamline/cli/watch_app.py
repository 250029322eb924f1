"""The live fleet view of ``seamline watch`` on a terminal, built on Textual (the ``watch``
extra): a table of every live and recent run, refreshed every ``interval`` seconds; the
selected run's events below it; keys that approve, deny or cancel it, and show the diff
of, merge or discard a worktree run. What the keys do is the source's
(:mod:`seamline.cli.watch_sources`): the store, or a running ``seamline serve``.

Only ``seamline watch`` imports this module, and only on a terminal, so ``seamline
--help`` never loads Textual.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import ClassVar, Final, cast

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Log, Static

from seamline.cli.watch_rows import elapsed_text
from seamline.cli.watch_sources import ActionRefused, Decision, FleetSource, Row

__all__ = ["COLUMNS", "DiffScreen", "FleetApp"]

# (key, heading) of each column of the table, in order.
COLUMNS: Final = (
    ("run", "RUN"),
    ("status", "STATUS"),
    ("backend", "BACKEND"),
    ("model", "MODEL"),
    ("tool", "TOOL"),
    ("tokens", "TOKENS"),
    ("cost", "COST"),
    ("elapsed", "ELAPSED"),
    ("branch", "BRANCH"),
    ("waiting", "WAITING"),
    ("title", "TITLE"),
)
_EVENT_LINES: Final = 2000  # the events pane keeps the newest this many lines


def _cells(row: Row) -> tuple[Text, ...]:
    """The table's cells of one run, as plain text: a string cell would be read as Rich
    markup, and a title such as ``fix [bug] in parser`` lost its ``[bug]``."""
    branch = f"{row['branch']} ({row['worktree_state']})" if row.get("branch") else ""
    waiting = row.get("pending_approvals") or 0
    values = (
        row["session_id"][:12],
        row["status"],
        row["provider"],
        row.get("model") or "",
        row.get("current_tool") or "",
        f"{row['input_tokens']}/{row['output_tokens']}",
        row["cost"],
        elapsed_text(row["elapsed_s"]),
        branch,
        f"{waiting} waiting" if waiting else "",
        row.get("title") or "",
    )
    return tuple(Text(str(value)) for value in values)


class DiffScreen(Screen[None]):
    """A worktree run's diff, over the table until escape (or v, or q)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,v,q", "close", "close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.heading = title
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(self.heading, id="diff-title", markup=False)
        yield Log(id="diff", highlight=False)
        yield Footer()

    def on_mount(self) -> None:
        log = self.query_one("#diff", Log)
        log.write_lines(self.text.splitlines() or ["(no changes)"])
        log.scroll_home(animate=False)

    def action_close(self) -> None:
        self.dismiss()


class FleetApp(App[None]):
    """``seamline watch``'s live view over ``source``, at most ``limit`` runs."""

    TITLE = "seamline watch"
    CSS = """
    #runs { height: 1fr; }
    #events { height: 1fr; border-top: solid $accent; }
    #status { height: 1; padding: 0 1; background: $panel; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "answer('allow')", "approve"),
        Binding("d", "answer('deny')", "deny"),
        Binding("c", "cancel_run", "cancel"),
        Binding("v", "diff", "diff"),
        Binding("m", "merge", "merge"),
        Binding("x", "discard", "discard"),
        Binding("q", "quit", "quit"),
        # The help says Ctrl-C ends the view; Textual binds it to copy (and only hints at ctrl+q).
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
    ]

    def __init__(self, source: FleetSource, *, limit: int = 20, interval: float = 1.0) -> None:
        super().__init__()
        self.source = source
        self.limit = limit
        self.interval = interval
        self.rows: dict[str, Row] = {}
        self.selected: str | None = None
        self.followed: tuple[str, str | None] | None = None  # the session and run the events pane follows
        self.status_text = ""
        self._armed: tuple[str, str] | None = None  # (action, session) a second press confirms
        self._refreshing = False
        self._closing = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Log(id="events", highlight=False, max_lines=_EVENT_LINES)
        yield Static("", id="status", markup=False)
        yield Footer()

    async def on_mount(self) -> None:
        self.sub_title = self.source.name
        table = self._table()
        for key, heading in COLUMNS:
            table.add_column(heading, key=key)
        table.focus()
        await self.refresh_rows()
        self.run_worker(self._refresh_on_change(), exclusive=True, group="refresh")

    async def _refresh_on_change(self) -> None:
        """Read again whenever the source says it changed, and every ``interval`` anyway."""
        while True:
            await self.source.changed(self.interval)
            await self.refresh_rows()

    async def on_unmount(self) -> None:
        # The refresh ends before the source closes: a read started after the close fails
        # ("the client has been closed") and would fail the app on its way out.
        self._closing = True
        for worker in self.workers.cancel_group(self, "refresh"):
            with contextlib.suppress(Exception):
                await worker.wait()
        await self.source.close()

    # -- the table --------------------------------------------------------------------------
    def _table(self) -> DataTable[Text]:
        return cast("DataTable[Text]", self.query_one("#runs", DataTable))

    async def refresh_rows(self) -> None:
        if self._refreshing or self._closing:
            return
        self._refreshing = True
        try:
            try:
                rows = await self.source.rows(self.limit)
            except ActionRefused as exc:
                self.say(exc.message)
                return
            self._show(rows)
        finally:
            self._refreshing = False

    def _show(self, rows: list[Row]) -> None:
        table = self._table()
        keys = [row["session_id"] for row in rows]
        self.rows = {row["session_id"]: row for row in rows}
        if keys == [key.value for key in table.rows]:
            for row in rows:  # the same runs in the same order: new values in place, the cursor stays
                for (column, _), value in zip(COLUMNS, _cells(row), strict=True):
                    table.update_cell(row["session_id"], column, value)
        else:
            table.clear()
            for row in rows:
                table.add_row(*_cells(row), key=row["session_id"])
            if self.selected in self.rows:
                table.move_cursor(row=keys.index(self.selected), animate=False)
        if not rows:
            self.say('no runs yet (start one: seamline run "…")')
        self._follow_selected()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # A highlight queued by the last refresh may arrive while the app closes, its table
        # already gone: nothing to follow then.
        if self._closing or not self.query("#runs"):
            return
        self._follow_selected()

    def _cursor_key(self) -> str | None:
        table = self._table()
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return key if key in self.rows else None

    def _follow_selected(self) -> None:
        """Follow the run under the cursor in the events pane (again when it starts another turn)."""
        self.selected = self._cursor_key()
        if self.selected is None:
            return
        row = self.rows[self.selected]
        wanted = (self.selected, row.get("run_id"))
        if wanted == self.followed:
            return
        self.followed = wanted
        log = self.query_one("#events", Log)
        log.clear()
        log.write_line(f"events of run {self.selected}  ({row.get('title') or 'no prompt yet'})")
        self.run_worker(self._stream(row), exclusive=True, group="follow")

    async def _stream(self, row: Row) -> None:
        log = self.query_one("#events", Log)
        try:
            async for line in self.source.follow(row):
                log.write_line(line)
        except ActionRefused as exc:
            log.write_line(f"({exc.message})")
        except OSError as exc:  # the server went away mid-stream
            log.write_line(f"(the events stopped: {exc})")
        except Exception as exc:  # noqa: BLE001 - httpx2's stream errors; the view stays up
            log.write_line(f"(the events stopped: {type(exc).__name__}: {exc})")

    # -- the keys ---------------------------------------------------------------------------
    def say(self, text: str) -> None:
        self.status_text = text
        self.query_one("#status", Static).update(text)

    def _selected_row(self) -> Row | None:
        key = self._cursor_key()
        if key is None:
            self.say("no run selected")
            return None
        return self.rows[key]

    async def _act(self, name: str, do: Callable[[Row], Awaitable[str]], *, confirm: str | None = None) -> None:
        row = self._selected_row()
        if row is None:
            return
        if confirm is not None and self._armed != (name, row["session_id"]):
            self._armed = (name, row["session_id"])
            self.say(confirm.format(run=row["session_id"][:12]))
            return
        self._armed = None
        self.say(f"{name} run {row['session_id'][:12]}…")
        try:
            self.say(await do(row))
        except ActionRefused as exc:
            self.say(exc.message)
        await self.refresh_rows()

    async def action_answer(self, decision: Decision) -> None:
        await self._act("answering", lambda row: self.source.answer(row, decision))

    async def action_cancel_run(self) -> None:
        await self._act("cancelling", self.source.cancel)

    async def action_merge(self) -> None:
        confirm = "press m again to merge run {run} into the branch it started from"
        await self._act("merging", self.source.merge, confirm=confirm)

    async def action_discard(self) -> None:
        confirm = "press x again to discard run {run}: its worktree and branch are removed"
        await self._act("discarding", self.source.discard, confirm=confirm)

    async def action_diff(self) -> None:
        row = self._selected_row()
        if row is None:
            return
        self._armed = None
        try:
            text = await self.source.diff(row)
        except ActionRefused as exc:
            self.say(exc.message)
            return
        self.say(f"diff of run {row['session_id'][:12]} (escape closes it)")
        await self.push_screen(DiffScreen(f"run {row['session_id'][:12]} · {row['branch']}", text))
