"""index.sqlite (SPEC §5): the derived, disposable view of a store that recall and capture read.

Per scope file it keeps the parsed entries, their vectors, and the file's share of each scope (the
sum of its entry vectors and the scope phrase's vector), so loading a store is one row per file
and a change re-reads only the files whose stamp (size, mtime, inode) moved. Vectors are also kept
by (backend identity, hash of the text), so an edit, a move or a backend switch embeds only texts
that have no vector yet. Staleness is found by the index itself on every read, from the file
stamps and HEAD, never by trusting hooks.

A long-lived process (the MCP server) keeps the last snapshot in memory and pays only the stamp
check when nothing changed. The file is a cache shared by every process (WAL mode): nobody waits on
it longer than one short save, and a process that cannot write it (busy, a read-only store, a
newer whetstone's schema) keeps its result in memory and leaves the file as it is.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import sqlite3
import sys
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

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
    """One scope file's share of the index, with per-entry columns ready to concatenate."""

    stamp: str
    entries: list[Entry]
    vectors: np.ndarray                       # (entries, dim)
    scopes: list[tuple[str, str, str]]        # (kind, key, display) of the scopes in this file
    sums: np.ndarray                          # (scopes, dim): sum of the entry vectors per scope
    phrases: np.ndarray                       # (scopes, dim): the scope phrase, embedded
    warning: str | None = None
    scope_index: np.ndarray = field(init=False)   # entry -> position in `scopes`
    scope_at: dict[tuple[str, str], int] = field(init=False)  # (kind, key) -> position in `scopes`
    recurrence: np.ndarray = field(init=False)
    last_seen: np.ndarray = field(init=False)     # day numbers, 0 when unknown
    top: dict[str, int] = field(init=False)       # highest id number per prefix

    def __post_init__(self) -> None:
        self.scope_at = local = {(kind, key): i for i, (kind, key, _) in enumerate(self.scopes)}
        n = len(self.entries)
        if len(local) == 1:
            self.scope_index = np.zeros(n, np.int64)
        else:
            self.scope_index = np.fromiter((local[(e.kind, scope_key(e.scope))] for e in self.entries), np.int64, n)
        self.recurrence = np.fromiter((e.recurrence for e in self.entries), np.int64, n)
        self.last_seen = np.fromiter((_day(e.last_seen) for e in self.entries), np.int64, n)
        self.top = {prefix: max((int(e.id[1:]) for e in self.entries if e.id[0] == prefix), default=0)
                    for prefix in ("L", "I")}

    def claim(self, raw: bytes) -> None:
        """Count the ids a broken file's text still claims (its entries are left out of recall,
        but a new id must never repeat one a person wrote there)."""
        for prefix, number in _CLAIMED.findall(raw.decode("utf-8", "replace")):
            self.top[prefix] = max(self.top[prefix], int(number))


_CLAIMED = re.compile(r"^## ([LI])([1-9]\d*)\b", re.M)


class Snapshot:
    """Everything recall and capture need, as arrays over rows: row i of `vectors` is `entries[i]`.

    Rows are grouped per file and patched in place when files change: a changed file's old rows
    are marked dead (`alive` False) and its new rows appended, so a capture costs work in
    proportion to one file, not the store. Dead rows are compacted away once they are a third of
    the store. Row order therefore carries no meaning; recall breaks ties by id (`id_key`).
    """

    def __init__(self, dim: int, capacity: int = 0, scope_capacity: int = 0) -> None:
        self.dim = dim
        self.stamps: dict[str, str] = {}
        self.files: dict[str, FileRows] = {}
        self.rows: dict[str, np.ndarray] = {}          # file -> its row numbers
        self.entries: list[Entry | None] = []           # by row; None once dead
        self.by_id: dict[str, int] = {}
        self.size = 0
        self._vectors = np.zeros((max(capacity, 16), dim), np.float32)
        self._alive = np.zeros(len(self._vectors), bool)
        self._learning = np.zeros(len(self._vectors), bool)
        self._recurrence = np.zeros(len(self._vectors), np.int64)
        self._last_seen = np.zeros(len(self._vectors), np.int64)
        self._scope_of = np.zeros(len(self._vectors), np.int64)
        self._id_key = np.zeros(len(self._vectors), np.int64)
        self.scopes: list[tuple[str, str, str]] = []    # (kind, key, display), by scope number
        self.scope_number: dict[tuple[str, str], int] = {}
        self.holders: dict[tuple[str, str], dict[str, None]] = {}  # scope -> files holding it, in order
        self._sums = np.zeros((max(scope_capacity, 16), dim), np.float64)
        self._phrases = np.zeros((len(self._sums), dim), np.float32)
        self._centroids = np.zeros((len(self._sums), dim), np.float32)
        self.duplicates: dict[str, list[str]] = {}      # file -> warnings about ids it repeats
        self.notice: str | None = None                  # said once, by the call that saw it
        self.dead = 0

    # --- views ----------------------------------------------------------------------------------
    @property
    def vectors(self) -> np.ndarray:
        return self._vectors[: self.size]

    @property
    def alive(self) -> np.ndarray:
        return self._alive[: self.size]

    @property
    def is_learning(self) -> np.ndarray:
        return self._learning[: self.size]

    @property
    def recurrence(self) -> np.ndarray:
        return self._recurrence[: self.size]

    @property
    def last_seen(self) -> np.ndarray:
        return self._last_seen[: self.size]

    @property
    def scope_of(self) -> np.ndarray:
        return self._scope_of[: self.size]

    @property
    def id_key(self) -> np.ndarray:
        """A sort key per row that orders by id (L1, I1, L2, …); ties in recall break on it."""
        return self._id_key[: self.size]

    @property
    def phrases(self) -> np.ndarray:
        return self._phrases[: len(self.scopes)]

    @property
    def centroids(self) -> np.ndarray:
        return self._centroids[: len(self.scopes)]

    @property
    def count(self) -> int:
        return len(self.by_id)

    @property
    def known(self) -> dict[tuple[str, str], str]:
        """(kind, scope key) -> the first file that holds it."""
        return {scope: next(iter(files)) for scope, files in self.holders.items() if files}

    @property
    def top(self) -> dict[str, int]:
        return {prefix: max((r.top[prefix] for r in self.files.values()), default=0) for prefix in ("L", "I")}

    @property
    def warnings(self) -> list[str]:
        out = [self.notice] if self.notice else []
        for path in sorted(self.files):
            if self.files[path].warning:
                out.append(self.files[path].warning)
            out += self.duplicates.get(path, [])
        return out

    # --- changes --------------------------------------------------------------------------------
    def remove_file(self, path: str) -> None:
        rows = self.files.pop(path, None)
        if rows is None:
            return
        numbers = self.rows.pop(path)
        self._alive[numbers] = False
        self.dead += len(numbers)
        for number in numbers:
            entry = self.entries[number]
            if entry is not None and self.by_id.get(entry.id) == number:
                del self.by_id[entry.id]
            self.entries[number] = None
        self.duplicates.pop(path, None)
        touched = []
        for kind, key, _ in rows.scopes:
            self.holders[(kind, key)].pop(path, None)
            touched.append(self.scope_number[(kind, key)])
        self._settle(touched)

    def add_file(self, path: str, rows: FileRows) -> None:
        self.add_files([(path, rows)])

    def add_files(self, items: list[tuple[str, FileRows]]) -> None:
        """Append the rows of files not in the snapshot yet (a whole store at once when building)."""
        total = sum(len(rows.entries) for _, rows in items)
        self._grow_rows(self.size + total)
        start = self.size
        touched: list[int] = []
        columns: dict[str, list] = {"vectors": [], "learning": [], "recurrence": [], "last_seen": [],
                                    "scope_of": []}
        for path, rows in items:
            n = len(rows.entries)
            mapping = []
            for j, (kind, key, display) in enumerate(rows.scopes):
                at = self.scope_number.get((kind, key))
                if at is None:
                    self._grow_scopes(len(self.scopes) + 1)
                    at = self.scope_number[(kind, key)] = len(self.scopes)
                    self.scopes.append((kind, key, display))
                    self.holders[(kind, key)] = {}
                if not self.holders[(kind, key)]:  # (re)born scope: its phrase comes from this file
                    self.scopes[at] = (kind, key, display)
                    self._phrases[at] = rows.phrases[j]
                self.holders[(kind, key)][path] = None
                mapping.append(at)
            touched += mapping
            columns["vectors"].append(rows.vectors)
            columns["learning"].append(np.full(n, path.startswith("learnings/")))
            columns["recurrence"].append(rows.recurrence)
            columns["last_seen"].append(rows.last_seen)
            columns["scope_of"].append(np.array(mapping, np.int64)[rows.scope_index] if n else
                                       np.zeros(0, np.int64))
            numbers = np.arange(self.size, self.size + n)
            dupes = []
            for number, entry in zip(range(self.size, self.size + n), rows.entries):
                other = self.by_id.get(entry.id)
                if other is None:
                    self.by_id[entry.id] = number
                else:
                    dupes.append((number, f"{path}:{entry.line}: duplicate id {entry.id} (also in "
                                          f"{self.entries[other].path}); this copy is left out"))
            self.entries.extend(rows.entries)
            self.size += n
            self.files[path] = rows
            self.rows[path] = numbers
            if dupes:
                self.duplicates[path] = [text for _, text in dupes]
                columns.setdefault("dead", []).extend(number for number, _ in dupes)
        if total:
            sl = slice(start, self.size)
            self._vectors[sl] = np.concatenate(columns["vectors"])
            self._alive[sl] = True
            self._alive[columns.get("dead", [])] = False
            self._learning[sl] = np.concatenate(columns["learning"])
            self._recurrence[sl] = np.concatenate(columns["recurrence"])
            self._last_seen[sl] = np.concatenate(columns["last_seen"])
            self._scope_of[sl] = np.concatenate(columns["scope_of"])
            self._id_key[sl] = [int(e.id[1:]) * 2 + (e.id[0] == "I") for e in self.entries[start:]]
        self._settle(touched)

    def _settle(self, touched: list[int]) -> None:
        """Recompute the touched scopes' sums (over their files, in path order, exactly as a fresh
        build adds them) and centroids; a scope no file holds any more matches nothing."""
        if not touched:
            return
        at = np.array(sorted(set(touched)), np.int64)  # (np.unique would import numpy.ma: 12 ms)
        for i in at:
            kind, key, _ = self.scopes[i]
            holders = self.holders[(kind, key)]
            if len(holders) == 1:  # the usual case: one file per scope
                rows = self.files[next(iter(holders))]
                self._sums[i] = rows.sums[rows.scope_at[(kind, key)]]
                continue
            total = np.zeros(self.dim, np.float64)
            for path in sorted(holders):
                rows = self.files[path]
                total += rows.sums[rows.scope_at[(kind, key)]]
            self._sums[i] = total
        sums = self._sums[at]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        empty = np.array([not self.holders[self.scopes[i][:2]] for i in at])
        norms[norms == 0] = 1
        self._centroids[at] = sums / norms
        if empty.any():
            gone = at[empty]
            self._centroids[gone] = 0
            self._phrases[gone] = 0
            self._sums[gone] = 0

    def _grow_rows(self, need: int) -> None:
        if need <= len(self._vectors):
            return
        cap = max(need, len(self._vectors) * 3 // 2)
        for name in ("_vectors", "_alive", "_learning", "_recurrence", "_last_seen", "_scope_of", "_id_key"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def _grow_scopes(self, need: int) -> None:
        if need <= len(self._sums):
            return
        cap = max(need, len(self._sums) * 3 // 2)
        for name in ("_sums", "_phrases", "_centroids"):
            old = getattr(self, name)
            new = np.zeros((cap, self.dim), old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)


_CACHE: dict[tuple[str, str], Snapshot] = {}


def text_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]


def scan(store: Store) -> dict[str, str]:
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
    stamps = scan(store)
    cached = _CACHE.get(key)
    if cached is not None:
        cached.notice = None
        if cached.stamps == stamps:
            return cached
    try:
        snap = _refresh(store, embedder, stamps, cached)
    except (Unusable, sqlite3.OperationalError) as exc:  # read-only, busy, or a newer whetstone's: not ours to
        _CACHE.pop(key, None)                              # delete; read the markdown without it this time
        snap = _refresh(store, embedder, stamps, None, _memory())
        if isinstance(exc, Unusable):
            snap.notice = str(exc)
    except sqlite3.DatabaseError as exc:  # corrupt, truncated or an older schema: rebuild it
        _discard(store)
        _CACHE.pop(key, None)
        snap = _refresh(store, embedder, stamps, None)
        snap.notice = f"index.sqlite was unreadable ({exc}); rebuilt it from the markdown"
    _CACHE[key] = snap
    return snap


class Unusable(Exception):
    """index.sqlite cannot be used by this process (and must not be deleted): the reason, for a warning."""


def _memory() -> sqlite3.Connection:
    """An empty index in memory, for a process that cannot use the file."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.executescript(_DDL)
    return db


def forget(store: Store) -> None:
    """Drop the in-memory snapshot and the index file (`reindex`, or a detected corruption)."""
    for key in [k for k in _CACHE if k[0] == str(store.path)]:
        del _CACHE[key]
    _discard(store)


def _discard(store: Store) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            (store.path / f"index.sqlite{suffix}").unlink(missing_ok=True)
        except OSError:
            pass  # read-only: the rebuild then happens in memory


def _connect(store: Store) -> sqlite3.Connection:
    """The index, opened (created when missing). Raises `Unusable` when this process cannot write
    it (a read-only store) or it belongs to a newer whetstone, sqlite3.DatabaseError when corrupt."""
    try:
        db = sqlite3.connect(store.path / "index.sqlite", timeout=5, isolation_level=None)
        version = db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.OperationalError as exc:  # cannot open or create the file: a read-only store
        raise Unusable(f"index.sqlite cannot be opened ({exc}); recall reads the markdown without it") from None
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
            db.executescript(_DDL)
            db.execute(f"PRAGMA user_version={SCHEMA}")
        db.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.OperationalError as exc:
        db.close()
        if "locked" in str(exc) or "busy" in str(exc):
            raise  # another process is creating it: see _refresh
        raise Unusable(f"index.sqlite cannot be written ({exc}); recall reads the markdown without it") from None
    return db


def _refresh(store: Store, embedder: Embedder, stamps: dict[str, str], cached: Snapshot | None,
             db: sqlite3.Connection | None = None) -> Snapshot:
    """Bring `cached` (or a snapshot built from the index file) up to date with `stamps`.

    The work (reading files, embedding) happens outside any write transaction; what changed is
    then saved in one short transaction. Readers never wait for the index: if another process is
    saving (or the file cannot be written), this one keeps its result in memory and skips the save,
    which the next call makes up for."""
    if db is None:
        try:
            db = _connect(store)
        except sqlite3.OperationalError:  # busy being created by another process: do without it this once
            db = _memory()
    try:
        if cached is None:
            known = _load_files(db, embedder, stamps, store)
            snap = Snapshot(embedder.dim, sum(len(r.entries) for r in known.values()) + 64,
                            sum(len(r.scopes) for r in known.values()) + 16)
            snap.add_files([(path, known[path]) for path in sorted(known)])
            snap.stamps = {"@HEAD": ""}
        else:
            snap = cached
        head_moved = snap.stamps.get("@HEAD") != stamps["@HEAD"]
        changed = sorted(p for p, s in stamps.items() if p != "@HEAD" and (
            p not in snap.files or snap.files[p].stamp != s or (head_moved and snap.files[p].warning)))
        removed = [p for p in snap.files if p not in stamps]
        touched = {s[:2] for p in changed + removed if p in snap.files for s in snap.files[p].scopes}
        if not changed and not removed:  # a fresh process on a fresh index: nothing to write
            snap.stamps = stamps
            return snap
        for path in removed:
            snap.remove_file(path)
        added: list[tuple[str, FileRows]] = []
        new_vectors: dict[str, np.ndarray] = {}
        if changed:
            parsed = {path: read_file(store, path) for path in changed}
            texts = [e.body for entries, _ in parsed.values() for e in entries]
            texts += [e.scope for entries, _ in parsed.values() for e in entries]
            vectors, new_vectors = _vectors(db, embedder, texts)
            for path in changed:  # all out first: a block moved between two files is no duplicate
                snap.remove_file(path)
            added = [(path, _file_rows(stamps[path], entries, warning, vectors, embedder.dim))
                     for path, (entries, warning) in parsed.items()]
            for path, rows in added:
                if rows.warning:
                    _claim_from_disk(store, path, rows)
            snap.add_files(added)
            for _, rows in added:
                touched |= {s[:2] for s in rows.scopes}
        if snap.dead * 3 > max(snap.size, 30):  # compact: rebuild the rows from the files
            files, snap = snap.files, Snapshot(embedder.dim, snap.count + 64, len(snap.scopes) + 16)
            snap.add_files([(path, files[path]) for path in sorted(files)])
        snap.stamps = stamps
        _save(db, embedder, snap, removed, added, new_vectors, touched)
        return snap
    except BaseException:
        _CACHE.pop((str(store.path), embedder.identity), None)  # a half-patched snapshot is not kept
        raise
    finally:
        db.close()


def _save(db: sqlite3.Connection, embedder: Embedder, snap: Snapshot, removed: list[str],
          added: list[tuple[str, FileRows]], new_vectors: dict[str, np.ndarray], touched: set[tuple[str, str]]) -> None:
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
        for path, rows in added:
            _save_file(db, path, rows, embedder)
        _save_scopes(db, snap, embedder, touched)
        db.execute("COMMIT")
    except sqlite3.OperationalError:  # read-only after all, or the disk is full: the index is only a cache
        if db.in_transaction:
            db.execute("ROLLBACK")


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


def _load_files(db: sqlite3.Connection, embedder: Embedder, stamps: dict[str, str],
                store: Store) -> dict[str, FileRows]:
    """The files the index already holds for this backend whose stamp still matches the disk."""
    files: dict[str, FileRows] = {}
    dim = embedder.dim
    for path, stamp, warning, entries, scopes, blob in db.execute(
            "SELECT path, stamp, warning, entries, scopes, vectors FROM files WHERE backend=?",
            (embedder.identity,)):
        if stamps.get(path) != stamp:
            continue
        rows = [Entry(*row[:10], tuple(row[10])) for row in json.loads(entries)]
        scope_list = [tuple(s) for s in json.loads(scopes)]
        flat = np.frombuffer(blob, np.float32).reshape(-1, dim)
        n, s = len(rows), len(scope_list)
        files[path] = FileRows(stamp, rows, flat[:n], scope_list, flat[n:n + s], flat[n + s:n + 2 * s], warning)
        if warning:
            _claim_from_disk(store, path, files[path])
    return files


def _claim_from_disk(store: Store, rel: str, rows: FileRows) -> None:
    try:
        rows.claim((store.path / rel).read_bytes())
    except OSError:
        pass


def read_file(store: Store, rel: str) -> tuple[list[Entry], str | None]:
    """Parse one scope file; if it fails validation, serve its last committed version instead."""
    from . import blocks  # here: a recall from a fresh index parses nothing and need not load it

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


def _entries(parsed: list, rel: str) -> list[Entry]:
    return [Entry(b.id, b.kind, rel, b.line, b.title, b.scope, b.body,
                  b.recurrence if b.kind == "learning" else 0,
                  b.get("first_seen"), b.get("last_seen"), tuple(b.provenance)) for b in parsed]


def _vectors(db: sqlite3.Connection, embedder: Embedder,
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
        matrix = _embed([wanted[h] for h in missing], embedder)
        new = dict(zip(missing, matrix))
        found.update(new)
    return found, new


PROGRESS_OVER = 300  # texts to embed before a terminal gets a progress bar
PROGRESS_CHUNK = 128


def _embed(texts: list[str], embedder: Embedder) -> np.ndarray:
    """One batch; in chunks behind a progress bar on stderr when it is a terminal and the batch is big
    (a first build or a backend switch on a large store)."""
    if len(texts) <= PROGRESS_OVER or not sys.stderr.isatty():
        return embedder.embed(texts)
    import click
    parts = []
    with click.progressbar(length=len(texts), label=f"embedding {len(texts)} entries", file=sys.stderr) as bar:
        for i in range(0, len(texts), PROGRESS_CHUNK):
            parts.append(embedder.embed(texts[i:i + PROGRESS_CHUNK]))
            bar.update(len(parts[-1]))
    return np.concatenate(parts)


def _day(iso: str | None) -> int:
    return dt.date.fromisoformat(iso).toordinal() if iso else 0


def _save_scopes(db: sqlite3.Connection, snap: Snapshot, embedder: Embedder, touched: set[tuple[str, str]]) -> None:
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
