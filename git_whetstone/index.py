"""index.sqlite (SPEC §5): the derived, disposable view of a store that recall and capture read.

Per scope file it keeps the parsed entries, their vectors, and the file's share of each scope (the
sum of its entry vectors and the scope phrase's vector), so loading a store is one row per file
and a change re-reads only the files whose stamp (size, mtime, inode) moved. Vectors are also kept
by (backend identity, hash of the text), so an edit, a move or a backend switch embeds only texts
that have no vector yet. Staleness is found by the index itself on every read, from the file
stamps and HEAD, never by trusting hooks.

A long-lived process (the MCP server) keeps the last snapshot in memory and pays only the stamp
check when nothing changed.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from . import blocks
from .embed import Embedder
from .store import KIND_FOLDER, Store, scope_key

SCHEMA = 2
_DDL = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(path TEXT PRIMARY KEY, stamp TEXT NOT NULL, warning TEXT,
    backend TEXT NOT NULL, entries TEXT NOT NULL, scopes TEXT NOT NULL, vectors BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS vectors(backend TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS vectors_key ON vectors(backend, hash);
CREATE TABLE IF NOT EXISTS scopes(backend TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
    scope TEXT NOT NULL, entries INTEGER NOT NULL, phrase BLOB NOT NULL, centroid BLOB NOT NULL,
    PRIMARY KEY(backend, kind, key));
"""


class Entry(NamedTuple):
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
    """One scope file's share of the index."""

    stamp: str
    entries: list[Entry]
    vectors: np.ndarray                       # (entries, dim)
    scopes: list[tuple[str, str, str]]        # (kind, key, display) of the scopes in this file
    sums: np.ndarray                          # (scopes, dim): sum of the entry vectors per scope
    phrases: np.ndarray                       # (scopes, dim): the scope phrase, embedded
    warning: str | None = None


@dataclass
class Snapshot:
    """Everything recall and capture need, as arrays: row i of `vectors` is `entries[i]`."""

    stamps: dict[str, str]
    files: dict[str, FileRows]
    entries: list[Entry] = field(default_factory=list)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    by_id: dict[str, int] = field(default_factory=dict)
    is_learning: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    recurrence: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    last_seen: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # proleptic day numbers
    scopes: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, key, display)
    scope_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    phrases: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    centroids: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    known: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, scope key) -> its file
    warnings: list[str] = field(default_factory=list)


_CACHE: dict[tuple[str, str], Snapshot] = {}


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]


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
        files = dict(cached.files) if cached is not None else _load_files(db, embedder, stamps)
        head_moved = cached is None or cached.stamps.get("@HEAD") != stamps["@HEAD"]
        changed = [p for p, s in stamps.items() if p != "@HEAD" and (
            p not in files or files[p].stamp != s or (head_moved and files[p].warning))]
        removed = [p for p in files if p not in stamps]
        touched = {s[:2] for p in changed + removed if p in files for s in files[p].scopes}
        db.execute("BEGIN IMMEDIATE")
        for path in removed:
            del files[path]
            db.execute("DELETE FROM files WHERE path=?", (path,))
        if changed:
            parsed = {path: read_file(store, path) for path in changed}
            texts = [e.body for entries, _ in parsed.values() for e in entries]
            texts += [e.scope for entries, _ in parsed.values() for e in entries]
            vectors = _vectors(db, embedder, texts)
            for path, (entries, warning) in parsed.items():
                files[path] = rows = _file_rows(stamps[path], entries, warning, vectors, embedder.dim)
                _save_file(db, path, rows, embedder)
                touched |= {s[:2] for s in rows.scopes}
        snap = _assemble(stamps, files, embedder.dim)
        _save_scopes(db, snap, embedder, touched)
        db.execute("INSERT OR REPLACE INTO meta VALUES('head', ?)", (stamps["@HEAD"],))
        db.execute("COMMIT")
        return snap
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    finally:
        db.close()


def _file_rows(stamp: str, entries: list[Entry], warning: str | None, vectors: dict[str, np.ndarray],
               dim: int) -> FileRows:
    matrix = (np.stack([vectors[text_hash(e.body)] for e in entries]) if entries
              else np.zeros((0, dim), np.float32))
    scopes: dict[tuple[str, str], int] = {}
    display: list[tuple[str, str, str]] = []
    for e in entries:
        k = (e.kind, scope_key(e.scope))
        if k not in scopes:
            scopes[k] = len(display)
            display.append((e.kind, k[1], e.scope))
    sums = np.zeros((len(display), dim), np.float32)
    for i, e in enumerate(entries):
        sums[scopes[(e.kind, scope_key(e.scope))]] += matrix[i]
    phrases = (np.stack([vectors[text_hash(s[2])] for s in display]) if display
               else np.zeros((0, dim), np.float32))
    return FileRows(stamp, entries, matrix, display, sums, phrases, warning)


def _save_file(db: sqlite3.Connection, path: str, rows: FileRows, embedder: Embedder) -> None:
    blob = b"".join(a.astype(np.float32).tobytes() for a in (rows.vectors, rows.sums, rows.phrases))
    db.execute("INSERT OR REPLACE INTO files VALUES(?,?,?,?,?,?,?)", (
        path, rows.stamp, rows.warning, embedder.identity,
        json.dumps([list(e) for e in rows.entries], ensure_ascii=False),
        json.dumps(rows.scopes, ensure_ascii=False), blob))


def _load_files(db: sqlite3.Connection, embedder: Embedder, stamps: dict[str, str]) -> dict[str, FileRows]:
    """The files the index already holds for this backend whose stamp still matches the disk."""
    files: dict[str, FileRows] = {}
    dim = embedder.dim
    for path, stamp, warning, entries, scopes, blob in db.execute(
            "SELECT path, stamp, warning, entries, scopes, vectors FROM files WHERE backend=?",
            (embedder.identity,)):
        if stamps.get(path) != stamp:
            continue
        rows = [Entry(*(tuple(v) if i == 10 else v for i, v in enumerate(row))) for row in json.loads(entries)]
        scope_list = [tuple(s) for s in json.loads(scopes)]
        flat = np.frombuffer(blob, np.float32).reshape(-1, dim)
        n, s = len(rows), len(scope_list)
        files[path] = FileRows(stamp, rows, flat[:n], scope_list, flat[n:n + s], flat[n + s:n + 2 * s], warning)
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


def _assemble(stamps: dict[str, str], files: dict[str, FileRows], dim: int) -> Snapshot:
    """One snapshot from the per-file rows: entries in file order (a duplicated id keeps its first
    file), one contiguous matrix, and each scope's centroid summed over the files that hold it."""
    snap = Snapshot(stamps, files)
    parts, keep_parts = [], []
    seen: dict[str, str] = {}
    for path in sorted(files):
        rows = files[path]
        if rows.warning:
            snap.warnings.append(rows.warning)
        keep = [e.id not in seen for e in rows.entries]
        for e, fresh in zip(rows.entries, keep):
            if fresh:
                seen[e.id] = path
                snap.entries.append(e)
            else:
                snap.warnings.append(f"{path}:{e.line}: duplicate id {e.id} (also in {seen[e.id]}); "
                                     f"this copy is left out")
        parts.append(rows.vectors if all(keep) else rows.vectors[np.array(keep, bool)])
        keep_parts.append(keep)
    snap.vectors = np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)
    snap.by_id = {e.id: i for i, e in enumerate(snap.entries)}
    snap.is_learning = np.fromiter((e.kind == "learning" for e in snap.entries), bool, len(snap.entries))
    snap.recurrence = np.fromiter((e.recurrence for e in snap.entries), np.int64, len(snap.entries))
    snap.last_seen = np.fromiter((_day(e.last_seen) for e in snap.entries), np.int64, len(snap.entries))

    index: dict[tuple[str, str], int] = {}
    sums, phrases = [], []
    for path in sorted(files):
        rows = files[path]
        for j, (kind, key, display) in enumerate(rows.scopes):
            at = index.get((kind, key))
            if at is None:
                index[(kind, key)] = len(snap.scopes)
                snap.scopes.append((kind, key, display))
                snap.known[(kind, key)] = path
                sums.append(rows.sums[j].astype(np.float64))
                phrases.append(rows.phrases[j])
            else:
                sums[at] = sums[at] + rows.sums[j]
    snap.scope_of = np.fromiter((index[(e.kind, scope_key(e.scope))] for e in snap.entries), np.int64,
                                len(snap.entries))
    if sums:
        total = np.stack(sums)
        norms = np.linalg.norm(total, axis=1, keepdims=True)
        norms[norms == 0] = 1
        snap.centroids = (total / norms).astype(np.float32)
        snap.phrases = np.stack(phrases).astype(np.float32)
    else:
        snap.centroids = snap.phrases = np.zeros((0, dim), np.float32)
    return snap


def _day(iso: str | None) -> int:
    return dt.date.fromisoformat(iso).toordinal() if iso else 0


def _save_scopes(db: sqlite3.Connection, snap: Snapshot, embedder: Embedder, touched: set[tuple[str, str]]) -> None:
    """Per scope its entry count, phrase vector and centroid, rewritten for the scopes a change touched."""
    if not touched:
        return
    where = {key: i for i, (kind, key_, _) in enumerate(snap.scopes) for key in [(kind, key_)] if key in touched}
    counts = np.bincount(snap.scope_of, minlength=len(snap.scopes))
    db.executemany("DELETE FROM scopes WHERE backend=? AND kind=? AND key=?",
                   [(embedder.identity, kind, key) for kind, key in touched])
    db.executemany("INSERT INTO scopes VALUES(?,?,?,?,?,?,?)", [
        (embedder.identity, kind, key, snap.scopes[i][2], int(counts[i]), snap.phrases[i].tobytes(),
         snap.centroids[i].tobytes()) for (kind, key), i in where.items()])
