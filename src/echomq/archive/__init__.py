"""The durable archive: finished jobs folded from the completions streams into SQL.

Layout (imports point down; the commands are ``cli/archive_cmd.py``):
    recorder          serve_archive: the recording consumer (a Trio service)
    groups            a consumer group per store, the consumers' names
    history           history / open_archive: reading it back, newest first, paged
    store             the store interface, URLs and errors
      sqlite_store    SQLite (the default): one embedded file
      postgres_store  PostgreSQL through psycopg 3 (``pip install 'echomq[postgres]'``)
      sql             the table, shared by both

docs/results.md describes the stream (the contract), the table and the decisions.
"""

from __future__ import annotations

from .._model.completion import FinishedJob, FinishState
from .groups import LEGACY_GROUP, default_consumer, group_name
from .history import ArchiveReader, HistoryPage, history, open_archive, parse_since
from .recorder import ArchiveConfig, Archiver, ArchiveStatistics, serve_archive
from .store import (
    ArchiveError,
    EntryRejected,
    SchemaMismatch,
    StoreUnavailable,
    default_store_url,
)

__all__ = [
    "LEGACY_GROUP",
    "ArchiveConfig",
    "ArchiveError",
    "ArchiveReader",
    "ArchiveStatistics",
    "Archiver",
    "EntryRejected",
    "FinishState",
    "FinishedJob",
    "HistoryPage",
    "SchemaMismatch",
    "StoreUnavailable",
    "default_consumer",
    "default_store_url",
    "group_name",
    "history",
    "open_archive",
    "parse_since",
    "serve_archive",
]
