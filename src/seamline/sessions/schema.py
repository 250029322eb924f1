"""The store's schema and its migrations, per SQL dialect.

Migrations are numbered; a store records the last one applied in ``schema_version``
(SQLite also mirrors it in ``PRAGMA user_version``). Opening a store applies what is
missing, in one transaction each; a store newer than this seamline is refused.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Dialect"]

Dialect = Literal["sqlite", "postgres"]

_TYPES: Final[dict[Dialect, dict[str, str]]] = {
    "sqlite": {
        "serial": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "real": "REAL",
        "bigint": "INTEGER",
        "without_rowid": " WITHOUT ROWID",
        "skey_of_session": "printf('%014x', CAST(created_at * 1000000 AS INTEGER)) || id",
    },
    "postgres": {
        "serial": "BIGSERIAL PRIMARY KEY",
        "real": "DOUBLE PRECISION",
        "bigint": "BIGINT",
        "without_rowid": "",
        "skey_of_session": "lpad(to_hex(CAST(created_at * 1000000 AS BIGINT)), 14, '0') || id",
    },
}

_V1: Final = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    model TEXT,
    provider_session_id TEXT,
    parent_id TEXT,
    workspace TEXT,
    mode TEXT NOT NULL DEFAULT 'agent',
    status TEXT NOT NULL DEFAULT 'open',
    metadata TEXT NOT NULL DEFAULT '{{}}',
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS raw_log (
    seq {serial},
    session_id TEXT NOT NULL REFERENCES sessions(id),
    turn INTEGER NOT NULL,
    direction TEXT NOT NULL,
    source TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS raw_log_session ON raw_log(session_id, seq);
"""

_V2: Final = """
ALTER TABLE sessions ADD COLUMN owner_pid INTEGER;
ALTER TABLE sessions ADD COLUMN owner_host TEXT;
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent_id);
CREATE TABLE IF NOT EXISTS usage_ledger (
    id {serial},
    session_id TEXT NOT NULL REFERENCES sessions(id),
    turn INTEGER NOT NULL,
    input_tokens {bigint} NOT NULL,
    output_tokens {bigint} NOT NULL,
    cache_read_tokens {bigint} NOT NULL,
    cache_write_tokens {bigint} NOT NULL,
    cost_usd {real},
    priced INTEGER NOT NULL,
    model TEXT,
    created_at {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_session ON usage_ledger(session_id);
CREATE TABLE IF NOT EXISTS transcript (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    idx INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    kind TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    call_id TEXT,
    data TEXT NOT NULL,
    raw_seq {bigint} NOT NULL,
    parser TEXT NOT NULL,
    parser_version INTEGER NOT NULL,
    PRIMARY KEY (session_id, idx)
);
CREATE TABLE IF NOT EXISTS transcript_state (
    session_id TEXT PRIMARY KEY REFERENCES sessions(id),
    last_raw_seq {bigint} NOT NULL,
    versions TEXT NOT NULL
);
"""

# v3: the raw log and the ledger are clustered by session (one B-tree, no side index),
# numbered per session; derived transcripts are dropped and derived again on read.
_V3: Final = """
CREATE TABLE raw_log_v3 (
    session_id TEXT NOT NULL,
    seq {bigint} NOT NULL,
    turn INTEGER NOT NULL,
    direction TEXT NOT NULL,
    source TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at {real} NOT NULL,
    PRIMARY KEY (session_id, seq)
){without_rowid};
INSERT INTO raw_log_v3 (session_id, seq, turn, direction, source, payload, created_at)
    SELECT session_id, ROW_NUMBER() OVER (PARTITION BY session_id ORDER BY seq), turn, direction, source, payload,
    created_at FROM raw_log;
DROP TABLE raw_log;
ALTER TABLE raw_log_v3 RENAME TO raw_log;
CREATE TABLE usage_ledger_v3 (
    session_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    input_tokens {bigint} NOT NULL,
    output_tokens {bigint} NOT NULL,
    cache_read_tokens {bigint} NOT NULL,
    cache_write_tokens {bigint} NOT NULL,
    cost_usd {real},
    priced INTEGER NOT NULL,
    model TEXT,
    created_at {real} NOT NULL,
    PRIMARY KEY (session_id, n)
){without_rowid};
INSERT INTO usage_ledger_v3 (session_id, n, turn, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
    cost_usd, priced, model, created_at)
    SELECT session_id, ROW_NUMBER() OVER (PARTITION BY session_id ORDER BY id), turn, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, cost_usd, priced, model, created_at FROM usage_ledger;
DROP TABLE usage_ledger;
ALTER TABLE usage_ledger_v3 RENAME TO usage_ledger;
DELETE FROM transcript;
DELETE FROM transcript_state
"""

# v4: the permission rules live in the store (every dialect; before, SQLite only, written
# beside the store through a second connection), and each session keeps the options it was
# started with (provider options without secrets, sandbox, budget, allowlist, system prompt).
_V4: Final = """
CREATE TABLE IF NOT EXISTS permission_rules (
    id {serial},
    effect TEXT NOT NULL CHECK (effect IN ('allow', 'deny', 'ask')),
    tool TEXT,
    tool_class TEXT,
    pattern TEXT,
    workspace TEXT,
    created_at {real} NOT NULL
);
ALTER TABLE sessions ADD COLUMN run_options TEXT NOT NULL DEFAULT '{{}}'
"""

# The trace head anchors: each run's last chained hash and record count, kept beside the
# trace file, so a trace rewritten whole (a new chain over new records) no longer matches.
# Kept in its own constant so it can take its place after whatever precedes it.
_TRACE_HEADS: Final = """
CREATE TABLE IF NOT EXISTS trace_heads (
    run_id TEXT PRIMARY KEY,
    head_hash TEXT NOT NULL,
    records {bigint} NOT NULL,
    updated_at {real} NOT NULL
)
"""

# Durable runs (seamline.durable.ledger): their tables, which the ledger used to create on
# first use, and which worker ran each role turn (``worker``, the latest start's).
_DURABLE_WORKER: Final = """
CREATE TABLE IF NOT EXISTS durable_runs (
    run_id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    report TEXT,
    created_at {real} NOT NULL,
    finished_at {real}
);
CREATE TABLE IF NOT EXISTS durable_turns (
    run_id TEXT NOT NULL,
    turn_key TEXT NOT NULL,
    prompt TEXT NOT NULL,
    budget_usd {real},
    status TEXT NOT NULL,
    starts INTEGER NOT NULL DEFAULT 0,
    events TEXT,
    cost_usd {real},
    input_tokens INTEGER,
    output_tokens INTEGER,
    updated_at {real} NOT NULL,
    PRIMARY KEY (run_id, turn_key)
);
CREATE TABLE IF NOT EXISTS durable_events (
    id {serial},
    run_id TEXT NOT NULL,
    turn_key TEXT NOT NULL,
    start_no INTEGER NOT NULL,
    event TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS durable_events_run ON durable_events (run_id, id);
ALTER TABLE durable_turns ADD COLUMN worker TEXT
"""

# The usage journal (seamline.sessions.journal): each figure's unique id, so a figure that
# reaches the ledger twice (the owner's commit and a replay of its journal) counts once.
_USAGE_JOURNAL: Final = """
ALTER TABLE usage_ledger ADD COLUMN journal_id TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS usage_journal_id ON usage_ledger(journal_id)
"""

# Storage keys: the raw log and the ledger are clustered by the session's storage key, its
# creation time in microseconds (14 hex digits) then its id, no longer by the id alone. Ids
# are random (users read and type their heads), so each run's rows went to a random page of
# every B-tree; by storage key, new sessions' rows go to the end. ``sessions.skey`` is
# written when a session is created (seamline.sessions.portable_store.storage_key); rows of a session
# that is not in the store keep an all-zero time.
_STORAGE_KEYS: Final = """
ALTER TABLE sessions ADD COLUMN skey TEXT;
UPDATE sessions SET skey = {skey_of_session};
CREATE UNIQUE INDEX IF NOT EXISTS sessions_skey ON sessions(skey);
CREATE TABLE raw_log_v8 (
    skey TEXT NOT NULL,
    seq {bigint} NOT NULL,
    turn INTEGER NOT NULL,
    direction TEXT NOT NULL,
    source TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at {real} NOT NULL,
    PRIMARY KEY (skey, seq)
){without_rowid};
INSERT INTO raw_log_v8 (skey, seq, turn, direction, source, payload, created_at)
    SELECT COALESCE(s.skey, '00000000000000' || r.session_id), r.seq, r.turn, r.direction, r.source, r.payload,
    r.created_at FROM raw_log r LEFT JOIN sessions s ON s.id = r.session_id;
DROP TABLE raw_log;
ALTER TABLE raw_log_v8 RENAME TO raw_log;
CREATE TABLE usage_ledger_v8 (
    skey TEXT NOT NULL,
    n INTEGER NOT NULL,
    turn INTEGER NOT NULL,
    input_tokens {bigint} NOT NULL,
    output_tokens {bigint} NOT NULL,
    cache_read_tokens {bigint} NOT NULL,
    cache_write_tokens {bigint} NOT NULL,
    cost_usd {real},
    priced INTEGER NOT NULL,
    model TEXT,
    created_at {real} NOT NULL,
    journal_id TEXT,
    PRIMARY KEY (skey, n)
){without_rowid};
INSERT INTO usage_ledger_v8 (skey, n, turn, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
    cost_usd, priced, model, created_at, journal_id)
    SELECT COALESCE(s.skey, '00000000000000' || u.session_id), u.n, u.turn, u.input_tokens, u.output_tokens,
    u.cache_read_tokens, u.cache_write_tokens, u.cost_usd, u.priced, u.model, u.created_at, u.journal_id
    FROM usage_ledger u LEFT JOIN sessions s ON s.id = u.session_id;
DROP TABLE usage_ledger;
ALTER TABLE usage_ledger_v8 RENAME TO usage_ledger;
CREATE UNIQUE INDEX IF NOT EXISTS usage_journal_id ON usage_ledger(journal_id)
"""

# Packs of the raw log: a run of a turn's events is written as one row (seamline.sessions.
# raw_packs): ``packed`` says how many raw rows a row holds (1 for the rows of before),
# ``pack_index`` where each one's text ends and when it came.
_RAW_PACKS: Final = """
ALTER TABLE raw_log ADD COLUMN packed INTEGER NOT NULL DEFAULT 1;
ALTER TABLE raw_log ADD COLUMN pack_index TEXT
"""

# Permission requests that wait for a person (seamline.sessions.pending): a server that
# dies (kill -9) leaves them here, and the next server on the store lists them again and
# takes their runs up (seamline.server.pending).
_PENDING_PERMISSIONS: Final = """
CREATE TABLE IF NOT EXISTS pending_permissions (
    run_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    session_id TEXT,
    run TEXT NOT NULL,
    request TEXT NOT NULL,
    owner_pid INTEGER,
    owner_host TEXT,
    created_at {real} NOT NULL,
    PRIMARY KEY (run_id, request_id)
)
"""

MIGRATIONS: Final[tuple[str, ...]] = (
    _V1,
    _V2,
    _V3,
    _V4,
    _TRACE_HEADS,
    _DURABLE_WORKER,
    _USAGE_JOURNAL,
    _STORAGE_KEYS,
    _RAW_PACKS,
    _PENDING_PERMISSIONS,
)
SCHEMA_VERSION: Final = len(MIGRATIONS)


def migration_sql(number: int, dialect: Dialect) -> list[str]:
    """The statements of migration ``number`` (1-based) for ``dialect``."""
    text = MIGRATIONS[number - 1].format(**_TYPES[dialect])
    return [s.strip() for s in text.split(";") if s.strip()]
