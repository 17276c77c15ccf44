"""index.sqlite (SPEC §5): the derived, disposable view of a store that recall and capture read.

It holds each entry's fields, its vector keyed by (backend identity, hash of its text), and per
scope a phrase vector and a centroid. Staleness is found by the index itself on every read, from
file stamps (size, mtime, inode) and HEAD, never by trusting hooks: only files whose stamp moved
are parsed again and only texts without a vector for this backend are embedded.

A long-lived process (the MCP server) keeps the last snapshot in memory and pays only the stamp
check when nothing changed.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass, field, replace

import numpy as np

from . import blocks
from .embed import Embedder
from .store import KIND_FOLDER, Store, scope_key

SCHEMA = 1
_DDL = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(path TEXT PRIMARY KEY, stamp TEXT NOT NULL, warning TEXT);
CREATE TABLE IF NOT EXISTS entries(
    path TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, line INTEGER NOT NULL,
    title TEXT NOT NULL, scope TEXT NOT NULL, body TEXT NOT NULL, recurrence INTEGER NOT NULL,
    first_seen TEXT, last_seen TEXT, provenance TEXT NOT NULL, text_hash TEXT NOT NULL,
    PRIMARY KEY(path, seq));
CREATE TABLE IF NOT EXISTS vectors(backend TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL,
    PRIMARY KEY(backend, hash)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS scopes(backend TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
    scope TEXT NOT NULL, phrase_hash TEXT NOT NULL, centroid BLOB NOT NULL, PRIMARY KEY(backend, kind, key));
"""


@dataclass(frozen=True)
class Entry:
    """One learning or issue as recall and capture see it."""

    id: str
    kind: str
    path: str
    line: int
    title: str
    scope: str
    body: str
    recurrence: int
    first_seen: str | None
    last_seen: str | None
    provenance: tuple[str, ...]


@dataclass
class FileRows:
    stamp: str
    entries: list[Entry]
    vectors: np.ndarray
    warning: str | None = None


@dataclass
class Snapshot:
    """Everything recall and capture need, as arrays: row i of `vectors` is `entries[i]`."""

    stamps: dict[str, str]
    files: dict[str, FileRows]
    entries: list[Entry] = field(default_factory=list)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    by_id: dict[str, int] = field(default_factory=dict)
    scopes: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, key, display)
    scope_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    phrases: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    centroids: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    warnings: list[str] = field(default_factory=list)

    def kind_mask(self, kind: str) -> np.ndarray:
        return np.fromiter((e.kind == kind for e in self.entries), bool, len(self.entries))


_CACHE: dict[tuple[str, str], Snapshot] = {}


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]


def entry_text(entry: Entry) -> str:
    """What gets embedded for an entry: its rule, the body."""
    return entry.body


def _scan(store: Store) -> dict[str, str]:
    stamps: dict[str, str] = {"@HEAD": store.head() or ""}
    for folder in KIND_FOLDER.values():
        try:
            with os.scandir(store.path / folder) as it:
                for item in it:
                    if item.name.endswith(".md") and not item.name.startswith("."):
                        st = item.stat()
                        stamps[f"{folder}/{item.name}"] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
        except FileNotFoundError:
            pass
    return stamps


def snapshot(store: Store, embedder: Embedder) -> Snapshot:
    """The store's entries and vectors, brought up to date with the files on disk."""
    key = (str(store.path), embedder.identity)
    stamps = _scan(store)
    cached = _CACHE.get(key)
    if cached is not None and cached.stamps == stamps:
        return cached
    try:
        snap = _refresh(store, embedder, stamps, cached)
    except sqlite3.DatabaseError as exc:
        _discard(store)
        _CACHE.pop(key, None)
        snap = _refresh(store, embedder, stamps, None)
        _CACHE[key] = snap
        # said once, by the call that rebuilt it; the cached snapshot stays clean
        return replace(snap, warnings=[f"index.sqlite was unreadable ({exc}); rebuilt it from the markdown",
                                       *snap.warnings])
    _CACHE[key] = snap
    return snap


def forget(store: Store) -> None:
    """Drop the in-memory snapshot and the index file (`reindex`, or a detected corruption)."""
    for key in [k for k in _CACHE if k[0] == str(store.path)]:
        del _CACHE[key]
    _discard(store)


def _discard(store: Store) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        (store.path / f"index.sqlite{suffix}").unlink(missing_ok=True)


def _connect(store: Store) -> sqlite3.Connection:
    db = sqlite3.connect(store.path / "index.sqlite", timeout=30, isolation_level=None)
    db.execute("PRAGMA busy_timeout=30000")
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version not in (0, SCHEMA):
        db.close()
        raise sqlite3.DatabaseError(f"schema {version} is not {SCHEMA}")
    if version == 0:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_DDL)
        db.execute(f"PRAGMA user_version={SCHEMA}")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def _refresh(store: Store, embedder: Embedder, stamps: dict[str, str], cached: Snapshot | None) -> Snapshot:
    db = _connect(store)
    try:
        db.execute("BEGIN IMMEDIATE")
        files = dict(cached.files) if cached is not None else _load_rows(db, embedder)
        head_moved = cached is None or cached.stamps.get("@HEAD") != stamps["@HEAD"]
        changed = [p for p, s in stamps.items() if p != "@HEAD" and (
            p not in files or files[p].stamp != s or (head_moved and files[p].warning))]
        removed = [p for p in files if p not in stamps]
        for path in removed:
            del files[path]
            db.execute("DELETE FROM entries WHERE path=?", (path,))
            db.execute("DELETE FROM files WHERE path=?", (path,))
        parsed = {path: read_file(store, path) for path in changed}
        new_texts = [entry_text(e) for entries, _ in parsed.values() for e in entries]
        vectors = _vectors(db, embedder, new_texts)
        for path, (entries, warning) in parsed.items():
            rows = np.stack([vectors[text_hash(entry_text(e))] for e in entries]) if entries else \
                np.zeros((0, embedder.dim), np.float32)
            files[path] = FileRows(stamps[path], entries, rows, warning)
            db.execute("DELETE FROM entries WHERE path=?", (path,))
            db.executemany(
                "INSERT INTO entries VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                [(path, seq, e.id, e.line, e.title, e.scope, e.body, e.recurrence, e.first_seen, e.last_seen,
                  json.dumps(e.provenance, ensure_ascii=False), text_hash(entry_text(e)))
                 for seq, e in enumerate(entries)])
            db.execute("INSERT OR REPLACE INTO files VALUES(?,?,?)", (path, stamps[path], warning))
        snap = _assemble(stamps, files, embedder, db)
        db.execute("INSERT OR REPLACE INTO meta VALUES('head', ?)", (stamps["@HEAD"],))
        db.execute("COMMIT")
        return snap
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    finally:
        db.close()


def _load_rows(db: sqlite3.Connection, embedder: Embedder) -> dict[str, FileRows]:
    """Every file the index already knows, with its entries and (where present) their vectors."""
    files = {path: FileRows(stamp, [], np.zeros((0, embedder.dim), np.float32), warning)
             for path, stamp, warning in db.execute("SELECT path, stamp, warning FROM files")}
    rows = db.execute(
        "SELECT e.path, e.id, e.line, e.title, e.scope, e.body, e.recurrence, e.first_seen, e.last_seen,"
        " e.provenance, v.vec FROM entries e LEFT JOIN vectors v ON v.backend=? AND v.hash=e.text_hash"
        " ORDER BY e.path, e.seq", (embedder.identity,)).fetchall()
    grouped: dict[str, list[tuple]] = {}
    for row in rows:
        grouped.setdefault(row[0], []).append(row)
    for path, group in grouped.items():
        if path not in files or any(r[10] is None for r in group):
            files.pop(path, None)  # re-read: unknown file or vectors missing for this backend
            continue
        kind = "learning" if path.startswith("learnings/") else "issue"
        files[path].entries = [Entry(r[1], kind, path, r[2], r[3], r[4], r[5], r[6], r[7], r[8],
                                     tuple(json.loads(r[9]))) for r in group]
        files[path].vectors = np.frombuffer(b"".join(r[10] for r in group), np.float32).reshape(len(group), -1)
    return files


def read_file(store: Store, rel: str) -> tuple[list[Entry], str | None]:
    """Parse one scope file; if it fails validation, serve its last committed version instead."""
    folder = rel.split("/", 1)[0]
    try:
        text = (store.path / rel).read_bytes().decode("utf-8")
        parsed = blocks.parse(text, rel, folder)
        problem = str(parsed.errors[0]) if parsed.errors else None
    except UnicodeDecodeError:
        parsed, problem = None, f"{rel}:1: not valid UTF-8"
    except FileNotFoundError:
        return [], None
    if problem is None and parsed is not None:
        return _entries(parsed.blocks, rel), None
    committed = _committed_text(store, rel)
    fallback = blocks.parse(committed, rel, folder) if committed is not None else None
    if fallback is not None and not fallback.errors:
        return _entries(fallback.blocks, rel), f"{problem} (serving the last committed version of {rel})"
    return [], f"{problem} (no valid committed version of {rel}; its entries are left out)"


def _committed_text(store: Store, rel: str) -> str | None:
    from dulwich.errors import NotGitRepository
    from dulwich.object_store import tree_lookup_path
    from dulwich.repo import Repo

    try:
        with Repo(str(store.path)) as repo:
            tree = repo[repo.head()].tree
            _, sha = tree_lookup_path(repo.object_store.__getitem__, tree, rel.encode())
            return repo[sha].data.decode("utf-8")
    except (KeyError, NotGitRepository, UnicodeDecodeError, ValueError, OSError):
        return None


def _entries(parsed: list[blocks.Block], rel: str) -> list[Entry]:
    return [Entry(b.id, b.kind, rel, b.line, b.title, b.scope, b.body,
                  b.recurrence if b.kind == "learning" else 0,
                  b.get("first_seen"), b.get("last_seen"), tuple(b.provenance)) for b in parsed]


def _vectors(db: sqlite3.Connection, embedder: Embedder, texts: list[str]) -> dict[str, np.ndarray]:
    """Vectors for `texts` by hash: from the index where present, embedded (and stored) otherwise."""
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
    if missing:
        matrix = embedder.embed([wanted[h] for h in missing])
        db.executemany("INSERT OR REPLACE INTO vectors VALUES(?,?,?)",
                       [(embedder.identity, h, matrix[i].tobytes()) for i, h in enumerate(missing)])
        found.update(zip(missing, matrix))
    return found


def _assemble(stamps: dict[str, str], files: dict[str, FileRows], embedder: Embedder,
              db: sqlite3.Connection) -> Snapshot:
    snap = Snapshot(stamps, files)
    order = sorted(files)
    seen: dict[str, str] = {}
    keep_rows = []
    for path in order:
        rows = files[path]
        if rows.warning:
            snap.warnings.append(rows.warning)
        for i, entry in enumerate(rows.entries):
            if entry.id in seen:
                snap.warnings.append(f"{path}:{entry.line}: duplicate id {entry.id} (also in {seen[entry.id]}); "
                                     f"this copy is left out")
                continue
            seen[entry.id] = path
            snap.entries.append(entry)
            keep_rows.append(rows.vectors[i])
    snap.vectors = np.stack(keep_rows) if keep_rows else np.zeros((0, embedder.dim), np.float32)
    snap.by_id = {e.id: i for i, e in enumerate(snap.entries)}

    index: dict[tuple[str, str], int] = {}
    scope_of = np.empty(len(snap.entries), np.int64)
    for i, entry in enumerate(snap.entries):
        key = (entry.kind, scope_key(entry.scope))
        if key not in index:
            index[key] = len(snap.scopes)
            snap.scopes.append((entry.kind, key[1], entry.scope))
        scope_of[i] = index[key]
    snap.scope_of = scope_of
    count = len(snap.scopes)
    sums = np.zeros((count, embedder.dim), np.float64)
    np.add.at(sums, scope_of, snap.vectors)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    norms[norms == 0] = 1
    snap.centroids = (sums / norms).astype(np.float32)
    phrases = _vectors(db, embedder, [s[2] for s in snap.scopes])
    snap.phrases = (np.stack([phrases[text_hash(s[2])] for s in snap.scopes]) if snap.scopes
                    else np.zeros((0, embedder.dim), np.float32))
    _store_scopes(db, embedder, snap)
    return snap


def _store_scopes(db: sqlite3.Connection, embedder: Embedder, snap: Snapshot) -> None:
    current = {(kind, key): (scope, text_hash(scope), snap.centroids[i].tobytes())
               for i, (kind, key, scope) in enumerate(snap.scopes)}
    stored = {(k, key): (scope, ph, c) for k, key, scope, ph, c in db.execute(
        "SELECT kind, key, scope, phrase_hash, centroid FROM scopes WHERE backend=?", (embedder.identity,))}
    for gone in stored.keys() - current.keys():
        db.execute("DELETE FROM scopes WHERE backend=? AND kind=? AND key=?", (embedder.identity, *gone))
    db.executemany("INSERT OR REPLACE INTO scopes VALUES(?,?,?,?,?,?)",
                   [(embedder.identity, k, key, *value) for (k, key), value in current.items()
                    if stored.get((k, key)) != value])
