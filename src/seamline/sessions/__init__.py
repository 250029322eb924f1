"""Session records and stores: SQLite by default (PostgreSQL for teams), with an
append-only raw log, a cost ledger and a canonical transcript derived from the log."""

from seamline.moved_modules import keep_old_paths
from seamline.sessions.portable_store import SessionStore
from seamline.sessions.records import FileTouch, RawRow, SessionRecord, Totals, TranscriptEntry, UsageRow
from seamline.sessions.sqlite_store import SQLiteStore, default_store_path, open_store

__all__ = [
    "FileTouch",
    "RawRow",
    "SessionRecord",
    "SQLiteStore",
    "SessionStore",
    "Totals",
    "TranscriptEntry",
    "UsageRow",
    "default_store_path",
    "open_store",
]

# The modules' names before they said which store they hold.
keep_old_paths(
    {
        "seamline.sessions.core": "seamline.sessions.portable_store",
        "seamline.sessions.store": "seamline.sessions.sqlite_store",
    }
)
