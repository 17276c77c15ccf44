"""index.sqlite (SPEC §5): the derived, disposable cache of a store's parsed entries and vectors.

Per scope file it keeps the parsed entries (compressed JSON), their integer columns, vectors and
content words (BM25's postings), and the file's scopes with their phrase vectors, so loading a store
is one row per file. A vector
whose text left its file (an edit, a move, a removed file, another backend) is kept by (backend
identity, hash of the text) in `vectors`, so an undo or a move embeds nothing again. The file is
shared by every process (WAL mode): a save is one short transaction, and a process that cannot
write it (busy, a read-only store, a newer whetstone's schema) keeps its result in memory and leaves
the file alone.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..format.entry import Entry
from .rows import COLUMNS, FileRows

SCHEMA = 9  # 9: each file's content words; 8: one record per file, no sums; 7: `differs` ids
DDL = """
CREATE TABLE IF NOT EXISTS files(path TEXT PRIMARY KEY, stamp TEXT NOT NULL, warning TEXT,
    backend TEXT NOT NULL, entries BLOB NOT NULL, scopes TEXT NOT NULL, columns BLOB NOT NULL,
    vectors BLOB NOT NULL, phrases BLOB NOT NULL, sums BLOB NOT NULL, top TEXT NOT NULL,
    words BLOB NOT NULL, postings BLOB NOT NULL, names TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS vectors(backend TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS vectors_key ON vectors(backend, hash);
"""
# a file's record without its entries' vectors (the bulk of it), which are read apart (`stored_vectors`)
_SELECT = "SELECT path, stamp, warning, entries, scopes, columns, phrases, sums, top, words, postings, names FROM files"


class Unusable(Exception):
    """index.sqlite cannot be used by this process (and must not be deleted): the reason, for a warning."""


def memory() -> sqlite3.Connection:
    """An empty index in memory, for a process that cannot use the file."""
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    db.executescript(DDL)
    return db


def discard(root: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            (root / f"index.sqlite{suffix}").unlink(missing_ok=True)
        except OSError:
            pass  # read-only: the rebuild then happens in memory


def connect(root: Path) -> sqlite3.Connection:
    """The index, opened (created when missing). Raises `Unusable` when this process cannot write
    it (a read-only store) or it belongs to a newer whetstone, sqlite3.DatabaseError when corrupt."""
    def open_() -> tuple[sqlite3.Connection, int]:
        try:
            db = sqlite3.connect(root / "index.sqlite", timeout=5, isolation_level=None, check_same_thread=False)
        except sqlite3.OperationalError as exc:  # cannot open or create the file: a read-only store
            raise Unusable(f"index.sqlite cannot be opened ({exc}); recall reads the markdown without it") from None
        try:
            return db, db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.OperationalError as exc:
            db.close()
            raise Unusable(f"index.sqlite cannot be opened ({exc}); recall reads the markdown without it") from None
        except sqlite3.DatabaseError:  # not a database at all: the caller rebuilds it
            db.close()
            raise

    db, version = open_()
    if 0 < version < SCHEMA:  # written by an earlier whetstone: derived data, rebuilt without a word
        db.close()
        discard(root)
        db, version = open_()
    if version > SCHEMA:
        db.close()
        raise Unusable(f"index.sqlite was written by a newer whetstone (schema {version}, this one reads {SCHEMA}); "
                       f"it is left as it is and recall reads the markdown without it (git whetstone reindex "
                       f"rebuilds it for this version)")
    try:
        if version == 0:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(DDL)
            db.execute(f"PRAGMA user_version={SCHEMA}")
        db.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.OperationalError as exc:
        db.close()
        if "locked" in str(exc) or "busy" in str(exc):
            raise  # another process is creating it: the caller reads without it this time
        raise Unusable(f"index.sqlite cannot be written ({exc}); recall reads the markdown without it") from None
    return db


def load(db: sqlite3.Connection, identity: str, dim: int) -> dict[str, FileRows]:
    """Every file this backend's records hold, by path (the caller compares their stamps), without
    their entries' vectors: a snapshot reads those straight into its matrix (`stored_vectors`), so
    the blobs and the matrix never are in memory together."""
    return {record[0]: _rows(record, dim) for record in db.execute(f"{_SELECT} WHERE backend=?", (identity,))}


def stored_vectors(db: sqlite3.Connection, identity: str) -> Iterator[tuple[str, bytes]]:
    """Each file's entry vectors as this backend's record holds them (float32 rows), by path, one
    file at a time; the query runs when the first one is asked for."""
    yield from db.execute("SELECT path, vectors FROM files WHERE backend=?", (identity,))


def file_vectors(db: sqlite3.Connection, identity: str, path: str, dim: int) -> np.ndarray:
    """The entry vectors this backend's record of `path` holds."""
    blob = db.execute("SELECT vectors FROM files WHERE backend=? AND path=?", (identity, path)).fetchone()[0]
    return _matrix(blob, dim)


def _matrix(blob: bytes, dim: int) -> np.ndarray:
    """A float32 blob as rows of `dim` (read in place)."""
    return np.frombuffer(blob, np.float32).reshape(-1, dim)


def _rows(record: tuple, dim: int, vectors: bytes | None = None) -> FileRows:
    """A record as `FileRows`; sqlite3.DatabaseError when its blobs do not fit together (the caller
    rebuilds the index, as for a corrupt file)."""
    path, stamp, warning, entries, scopes, columns, phrases, sums, top, words, postings, names = record
    try:
        if len(words) % 8 or len(postings) != len(words):  # a word's number: 8 bytes; its row and count: 4 + 4
            raise ValueError("its words and postings differ in length")
        return FileRows(stamp, [tuple(s) for s in json.loads(scopes)], _matrix(phrases, dim), _matrix(sums, dim),
                        np.frombuffer(columns, np.int64).reshape(len(COLUMNS), -1), json.loads(top), warning,
                        raw=entries, vectors=None if vectors is None else _matrix(vectors, dim),
                        words=(words, postings), names=names)
    except (ValueError, TypeError) as exc:
        raise sqlite3.DatabaseError(f"the record of {path} is damaged ({exc})") from None


def cached_entries(root: Path, stamps: dict[str, str]) -> dict[str, list[Entry]]:
    """The entries index.sqlite holds for the files whose stamp still matches (and that parsed
    without a warning), read-only: nothing is written, and a missing or foreign file gives nothing."""
    found: dict[str, list[Entry]] = {}
    if not (root / "index.sqlite").exists():
        return found
    try:
        db = sqlite3.connect(f"file:{root / 'index.sqlite'}?mode=ro", uri=True, timeout=5)
        try:
            if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA:
                for path, stamp, warning, raw in db.execute("SELECT path, stamp, warning, entries FROM files"):
                    if stamps.get(path) == stamp and not warning:
                        found[path] = FileRows(stamp, [], *[np.zeros((0, 1), np.float32)] * 2, np.zeros((5, 0), np.int64),
                                               {}, raw=raw).entries
        finally:
            db.close()
    except sqlite3.Error:
        pass
    return found


def vectors_of(db: sqlite3.Connection, identity: str, hashes: list[str]) -> dict[str, np.ndarray]:
    """The vectors kept for texts that left their file, by the hashes asked for."""
    found = {}
    for i in range(0, len(hashes), 500):
        chunk = hashes[i:i + 500]
        found.update((h, np.frombuffer(vec, np.float32)) for h, vec in db.execute(
            f"SELECT hash, vec FROM vectors WHERE backend=? AND hash IN ({','.join('?' * len(chunk))})",
            (identity, *chunk)))
    return found


def _keep_foreign(db: sqlite3.Connection, identity: str, paths: list[str]) -> None:
    """Before another backend's records of `paths` are replaced or removed, keep their vectors by
    text (in `vectors`, under that backend), so switching back embeds nothing again."""
    from .rows import text_hashes
    for i in range(0, len(paths), 500):
        chunk = paths[i:i + 500]
        for record in db.execute(f"{_SELECT.replace('SELECT path', 'SELECT backend, vectors, path')} WHERE "
                                 f"backend!=? AND path IN ({','.join('?' * len(chunk))})", (identity, *chunk)):
            backend, vectors, record = record[0], record[1], record[2:]
            scopes = len(json.loads(record[4]))
            if not scopes:  # no scopes, so no entries: no vector to keep (nor a width to read them)
                continue
            dim = len(record[6]) // 4 // scopes
            rows = _rows(record, dim, vectors)
            texts = [e.body for e in rows.entries] + [display for _, _, display in rows.scopes]
            vectors = [*rows.vectors, *rows.phrases]
            db.executemany("INSERT OR IGNORE INTO vectors VALUES(?,?,?)",
                           [(backend, h, v.tobytes()) for h, v in zip(text_hashes(texts), vectors)])


def save(db: sqlite3.Connection, identity: str, removed: list[str], written: dict[str, FileRows],
         left: dict[str, np.ndarray]) -> bool:
    """Write what one refresh learned in one transaction: the files `written` (their `vectors`
    still held), those `removed`, and the vectors of texts that `left` their files (by hash).
    Skipped (False) when another process holds the index for writing past a short wait, or the
    file cannot be written: the index is only a cache, and the next call makes up for it."""
    try:
        db.execute("PRAGMA busy_timeout=1000")
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return False
    try:
        _keep_foreign(db, identity, [*removed, *written])
        db.executemany("INSERT OR IGNORE INTO vectors VALUES(?,?,?)",
                       [(identity, h, v.astype(np.float32).tobytes()) for h, v in left.items()])
        db.executemany("DELETE FROM files WHERE path=?", [(path,) for path in removed])
        db.executemany("INSERT OR REPLACE INTO files VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
            (path, rows.stamp, rows.warning, identity, rows.text(), json.dumps(rows.scopes, ensure_ascii=False),
             *(np.ascontiguousarray(a).tobytes() for a in (rows.columns, rows.vectors, rows.phrases, rows.sums)),
             json.dumps(rows.top), *rows.stored_words(), rows.names()) for path, rows in written.items()])
        db.execute("COMMIT")
    except sqlite3.OperationalError:  # read-only after all, or the disk is full
        if db.in_transaction:
            db.execute("ROLLBACK")
        return False
    return True
