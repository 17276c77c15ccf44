"""index.sqlite (SPEC §5): the derived, disposable cache of a store's parsed entries and vectors.

Per scope file it keeps the parsed entries, their vectors, and the file's share of each scope (the
sum of its entry vectors and the scope phrase's vector), so loading a store is one row per file.
Vectors are also kept by (backend identity, hash of the text), so an edit, a move or a backend
switch embeds only texts that have no vector yet. The file is shared by every process (WAL mode):
nobody waits on it longer than one short save, and a process that cannot write it (busy, a
read-only store, a newer whetstone's schema) keeps its result in memory and leaves the file alone.
"""
from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import numpy as np

from ..semantics.embed import Embedder
from . import image
from .records import COLUMNS, Entry, FileRows, decode, text_hash
from .snapshot import Snapshot

EMBED_BATCH = 1024  # texts per embedding call: a first build of 100,000 entries stays small in memory
SCHEMA = 5
DDL = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(path TEXT PRIMARY KEY, stamp TEXT NOT NULL, warning TEXT,
    backend TEXT NOT NULL, n INTEGER NOT NULL, scopes_n INTEGER NOT NULL, entries TEXT NOT NULL,
    scopes TEXT NOT NULL, columns BLOB NOT NULL, vectors BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS vectors(backend TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS vectors_key ON vectors(backend, hash);
CREATE TABLE IF NOT EXISTS scopes(backend TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
    scope TEXT NOT NULL, entries INTEGER NOT NULL, phrase BLOB NOT NULL, centroid BLOB NOT NULL,
    PRIMARY KEY(backend, kind, key));
"""


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
    image.discard(root)


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
    if version not in (0, SCHEMA):
        db.close()
        raise sqlite3.DatabaseError(f"schema {version} is not {SCHEMA}")
    try:
        if version == 0:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(DDL)
            db.execute(f"PRAGMA user_version={SCHEMA}")
        db.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.OperationalError as exc:
        db.close()
        if "locked" in str(exc) or "busy" in str(exc):
            raise  # another process is creating it: see _refresh
        raise Unusable(f"index.sqlite cannot be written ({exc}); recall reads the markdown without it") from None
    return db


def load(db: sqlite3.Connection, embedder: Embedder, stamps: dict[str, str], root: Path) -> Snapshot:
    """A snapshot of the files the index already holds for this backend whose stamp still matches
    the disk, in path order (as a fresh build adds them), a few hundred files at a time so their
    blobs never all sit in memory beside the matrix. Their entries stay JSON text until read.

    A big store's snapshot comes from its image instead (`image`), mapped, when there is one for
    this backend: it may hold files changed since, which the refresh then patches like any change."""
    mapped = image.read(root, embedder.identity, embedder.dim)
    if mapped is not None:
        return mapped
    rows, scopes = db.execute("SELECT coalesce(sum(n), 0), coalesce(sum(scopes_n), 0) FROM files WHERE backend=?",
                              (embedder.identity,)).fetchone()
    snap = Snapshot(embedder.dim, rows + 64, scopes + 16)
    dim = embedder.dim
    chunk: list[tuple[str, FileRows]] = []
    for path, stamp, warning, entries, scope_json, columns, blob in db.execute(
            "SELECT path, stamp, warning, entries, scopes, columns, vectors FROM files WHERE backend=? "
            "ORDER BY path", (embedder.identity,)):
        if stamps.get(path) != stamp:
            continue
        scope_list = [tuple(s) for s in json.loads(scope_json)]
        ints = np.frombuffer(columns, np.int64)
        n, s = (len(ints) - 2) // COLUMNS, len(scope_list)
        flat = np.frombuffer(blob, np.float32).reshape(-1, dim)
        top = {"L": int(ints[-2]), "I": int(ints[-1])}
        rows = FileRows(stamp, scope_list, flat[n:n + s].copy(), flat[n + s:n + 2 * s].copy(),
                        ints[:COLUMNS * n].reshape(COLUMNS, n), top, warning, raw=entries, vectors=flat[:n])
        if warning:
            claim_from_disk(root, path, rows)
        chunk.append((path, rows))
        if len(chunk) == 256:
            snap.add_files(chunk)
            chunk = []
    snap.add_files(chunk)
    return snap


def claim_from_disk(root: Path, rel: str, rows: FileRows) -> None:
    """Count the ids a broken file still claims, from the file itself."""
    try:
        rows.claim((root / rel).read_bytes())
    except OSError:
        pass


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
                for rel, stamp, warning, raw in db.execute("SELECT path, stamp, warning, entries FROM files"):
                    if stamps.get(rel) == stamp and not warning:
                        found[rel] = decode(raw)
        finally:
            db.close()
    except sqlite3.Error:
        pass
    return found


def save(db: sqlite3.Connection, embedder: Embedder, snap: Snapshot, removed: list[str],
          records: list[tuple], new_vectors: dict[str, np.ndarray], touched: set[tuple[str, str]]) -> None:
    """Write what one refresh learned, in one transaction; skipped when another process holds the
    index for writing past a short wait, or the file cannot be written."""
    try:
        db.execute("PRAGMA busy_timeout=1000")
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return
    try:
        db.executemany("DELETE FROM files WHERE path=?", [(path,) for path in removed])
        db.executemany("INSERT OR REPLACE INTO vectors VALUES(?,?,?)",
                       [(embedder.identity, h, vec.tobytes()) for h, vec in new_vectors.items()])
        db.executemany("INSERT OR REPLACE INTO files VALUES(?,?,?,?,?,?,?,?,?,?)", records)
        save_scopes(db, snap, embedder, touched)
        db.execute("COMMIT")
    except sqlite3.OperationalError:  # read-only after all, or the disk is full: the index is only a cache
        if db.in_transaction:
            db.execute("ROLLBACK")


def save_scopes(db: sqlite3.Connection, snap: Snapshot, embedder: Embedder, touched: set[tuple[str, str]]) -> None:
    """Per scope its entry count, phrase vector and centroid, rewritten for the scopes a change touched."""
    if not touched:
        return
    counts = np.bincount(snap.scope_of[snap.alive], minlength=len(snap.scopes))
    db.executemany("DELETE FROM scopes WHERE backend=? AND kind=? AND key=?",
                   [(embedder.identity, kind, key) for kind, key in touched])
    db.executemany("INSERT INTO scopes VALUES(?,?,?,?,?,?,?)", [
        (embedder.identity, kind, key, snap.scopes[at][2], int(counts[at]), snap.phrases[at].tobytes(),
         snap.centroids[at].tobytes())
        for kind, key in touched for at in [snap.scope_number.get((kind, key))]
        if at is not None and counts[at]])


def file_record(path: str, rows: FileRows, embedder: Embedder) -> tuple:
    """The `files` row for a file's rows (taken before the snapshot adopts their vectors)."""
    blob = b"".join(a.astype(np.float32).tobytes() for a in (rows.vectors, rows.sums, rows.phrases))
    top = np.array([rows.top["L"], rows.top["I"]], np.int64)
    return (path, rows.stamp, rows.warning, embedder.identity, rows.n, len(rows.scopes), rows.text(),
            json.dumps(rows.scopes, ensure_ascii=False), rows.columns.tobytes() + top.tobytes(), blob)


def vectors_for(db: sqlite3.Connection, embedder: Embedder,
             texts: list[str]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Vectors for `texts` by hash, from the index where present and embedded otherwise; and the
    newly embedded ones, for the caller to store."""
    wanted = {text_hash(t): t for t in texts}
    found: dict[str, np.ndarray] = {}
    hashes = list(wanted)
    for i in range(0, len(hashes), 500):
        chunk = hashes[i:i + 500]
        marks = ",".join("?" * len(chunk))
        for h, vec in db.execute(f"SELECT hash, vec FROM vectors WHERE backend=? AND hash IN ({marks})",
                                 (embedder.identity, *chunk)):
            found[h] = np.frombuffer(vec, np.float32)
    missing = [h for h in hashes if h not in found]
    new: dict[str, np.ndarray] = {}
    if missing:
        matrix = embed_all([wanted[h] for h in missing], embedder)
        new = dict(zip(missing, matrix))
        found.update(new)
    return found, new


PROGRESS_OVER = 300  # texts to embed before a terminal gets a progress bar
PROGRESS_CHUNK = 128
PROGRESS_FILES = 500  # scope files to read before a terminal gets a progress bar


def read_all(paths: list[str], read) -> dict:
    """`read(path)` for every path, behind a progress bar on stderr when it is a terminal and there
    are many (a first build, a fresh clone, a reindex: reading comes before embedding)."""
    if len(paths) <= PROGRESS_FILES or not sys.stderr.isatty():
        return {path: read(path) for path in paths}
    import click
    out = {}
    with click.progressbar(paths, label=f"reading {len(paths)} scope files", file=sys.stderr) as bar:
        for path in bar:
            out[path] = read(path)
    return out


def embed_all(texts: list[str], embedder: Embedder) -> np.ndarray:
    """In batches of EMBED_BATCH (a backend's working memory grows with its batch), behind a progress
    bar on stderr when it is a terminal and there are many (a first build or a backend switch)."""
    if len(texts) <= PROGRESS_OVER or not sys.stderr.isatty():
        if len(texts) <= EMBED_BATCH:
            return embedder.embed(texts)
        return np.concatenate([embedder.embed(texts[i:i + EMBED_BATCH]) for i in range(0, len(texts), EMBED_BATCH)])
    import click
    parts = []
    with click.progressbar(length=len(texts), label=f"embedding {len(texts)} entries", file=sys.stderr) as bar:
        for i in range(0, len(texts), PROGRESS_CHUNK):
            parts.append(embedder.embed(texts[i:i + PROGRESS_CHUNK]))
            bar.update(len(parts[-1]))
    return np.concatenate(parts)
