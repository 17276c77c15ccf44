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
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from .embed import Embedder
from .store import KIND_FOLDER, Store, scope_key

SCHEMA = 4
_DDL = """
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
EMBED_BATCH = 1024  # texts per embedding call: a first build of 100,000 entries stays small in memory
PARSED_FILES = 512  # files whose entries stay parsed in a long-lived process (the rest: JSON text)


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


def id_key(entry_id: str) -> int:
    """L1, I1, L2, … as one integer that sorts by number, learnings first (I<n> is 2n+1)."""
    return int(entry_id[1:]) * 2 + (entry_id[0] == "I")


def key_id(key: int) -> str:
    return f"{'I' if key & 1 else 'L'}{key >> 1}"


class FileRows:
    """One scope file's share of the index: per-entry columns (recurrence, last_seen as a day
    number, position of its scope in `scopes`, id key), its scopes with the sum of their entry
    vectors and their phrase vectors, and its entries. Loaded from index.sqlite, the entries stay
    JSON text until something reads them, so a store of 100,000 entries loads in a few arrays.
    `vectors` is held only until the snapshot has copied the rows into its matrix."""

    def __init__(self, stamp: str, scopes: list[tuple[str, str, str]], sums: np.ndarray, phrases: np.ndarray,
                 columns: np.ndarray, top: dict[str, int], warning: str | None = None, *,
                 entries: list[Entry] | None = None, raw: bytes | None = None,
                 vectors: np.ndarray | None = None) -> None:
        self.stamp, self.scopes, self.sums, self.phrases = stamp, scopes, sums, phrases
        self.columns = columns                  # (4, entries) int64
        self.top, self.warning = top, warning   # highest id number per prefix
        self._entries, self.raw, self.vectors = entries, raw, vectors
        self.n = columns.shape[1]
        self.start = 0                          # first row in the snapshot

    recurrence = property(lambda self: self.columns[0])
    last_seen = property(lambda self: self.columns[1])
    scope_index = property(lambda self: self.columns[2])
    id_key = property(lambda self: self.columns[3])

    @property
    def scope_at(self) -> dict[tuple[str, str], int]:
        """(kind, key) -> position in `scopes`."""
        return {(kind, key): i for i, (kind, key, _) in enumerate(self.scopes)}

    @property
    def entries(self) -> list[Entry]:
        if self._entries is None:
            self._entries = _decode(self.raw)
            _PARSED[id(self)] = self
            if len(_PARSED) > PARSED_FILES:
                _PARSED.popitem(last=False)[1].unparse()
        return self._entries

    def text(self) -> bytes:
        """The entries as compressed UTF-8 JSON: 0.4 KB an entry where a str of the same JSON took
        1.6 (every provenance line holds a dash, and one non-ASCII character makes a str two bytes
        a character). Parsed again in about 20 µs a file."""
        if self.raw is None:
            self.raw = zlib.compress(json.dumps([list(e) for e in self._entries], ensure_ascii=False).encode(), 6)
        return self.raw

    def unparse(self) -> None:
        """Keep the entries as JSON text only (what was handed out stays valid)."""
        self.text()
        self._entries = None
        _PARSED.pop(id(self), None)

    def claim(self, raw: bytes) -> None:
        """Count the ids a broken file's text still claims (its entries are left out of recall,
        but a new id must never repeat one a person wrote there)."""
        for prefix, number in _CLAIMED.findall(raw.decode("utf-8", "replace")):
            self.top[prefix] = max(self.top[prefix], int(number))


_CLAIMED = re.compile(r"^## ([LI])([1-9]\d*)\b", re.M)
_PARSED: OrderedDict[int, FileRows] = OrderedDict()


def _decode(raw: bytes) -> list[Entry]:
    return [Entry(*row[:10], tuple(row[10])) for row in json.loads(zlib.decompress(raw))]


class _Rows(Sequence):
    """`Snapshot.entries`: the entry at each row (None once dead), parsed on first use."""

    def __init__(self, snap: "Snapshot") -> None:
        self.snap = snap

    def __len__(self) -> int:
        return self.snap.size

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(self.snap.size))]
        row = int(row)
        if row < 0:
            row += self.snap.size
        owner = self.snap.owner[row]
        return None if owner is None else owner.entries[row - owner.start]


class _Ids(Mapping):
    """`Snapshot.by_id`: entry id -> row of its live copy."""

    def __init__(self, by_key: dict[int, int]) -> None:
        self.by_key = by_key

    def __getitem__(self, entry_id: str) -> int:
        if not isinstance(entry_id, str) or not _ID.fullmatch(entry_id):
            raise KeyError(entry_id)
        return self.by_key[id_key(entry_id)]

    def __iter__(self) -> Iterator[str]:
        return map(key_id, self.by_key)

    def __len__(self) -> int:
        return len(self.by_key)

    def values(self):
        return self.by_key.values()


_ID = re.compile(r"[LI][1-9]\d*")


class _Known(Mapping):
    """`Snapshot.known`: (kind, scope key) -> the first file that holds it."""

    def __init__(self, holders: dict[tuple[str, str], dict[str, None]]) -> None:
        self.holders = holders

    def __getitem__(self, scope: tuple[str, str]) -> str:
        files = self.holders.get(scope)
        if not files:
            raise KeyError(scope)
        return next(iter(files))

    def __iter__(self):
        return (scope for scope, files in self.holders.items() if files)

    def __len__(self) -> int:
        return sum(1 for _ in self)


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
        self.owner: list[FileRows | None] = []          # by row: the file it came from; None once dead
        self.by_key: dict[int, int] = {}                # id key -> row of the live copy
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
        self._phrases = np.zeros((max(scope_capacity, 16), dim), np.float32)
        self._centroids = np.zeros((len(self._phrases), dim), np.float32)
        self.duplicates: dict[str, list[str]] = {}      # file -> warnings about ids it repeats
        self.warned: set[str] = set()                   # files with a warning or a duplicate id
        self.notice: str | None = None                  # said once, by the call that saw it
        self.dead = 0
        self.watch = None                               # a long-lived process's change feed (watch.py)
        self.db: sqlite3.Connection | None = None       # and its open index.sqlite
        self.db_inode = 0
        self._top: dict[str, int] | None = None

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
    def entries(self) -> _Rows:
        return _Rows(self)

    @property
    def by_id(self) -> _Ids:
        return _Ids(self.by_key)

    @property
    def count(self) -> int:
        return len(self.by_key)

    @property
    def known(self) -> _Known:
        """(kind, scope key) -> the first file that holds it."""
        return _Known(self.holders)

    @property
    def top(self) -> dict[str, int]:
        if self._top is None:
            self._top = {prefix: max((r.top[prefix] for r in self.files.values()), default=0)
                         for prefix in ("L", "I")}
        return dict(self._top)

    @property
    def warnings(self) -> list[str]:
        out = [self.notice] if self.notice else []
        for path in sorted(self.warned):
            if self.files[path].warning:
                out.append(self.files[path].warning)
            out += self.duplicates.get(path, [])
        return out

    # --- changes --------------------------------------------------------------------------------
    def remove_file(self, path: str) -> None:
        rows = self.files.pop(path, None)
        if rows is None:
            return
        if self._top is not None and any(rows.top[p] >= self._top[p] for p in self._top):
            self._top = None  # it may have held the highest id: count again when asked
        numbers = self.rows.pop(path)
        self._alive[numbers] = False
        self.dead += len(numbers)
        for number, key in zip(numbers.tolist(), self._id_key[numbers].tolist()):
            if self.by_key.get(key) == number:
                del self.by_key[key]
            self.owner[number] = None
        self.duplicates.pop(path, None)
        self.warned.discard(path)
        touched = []
        for kind, key, _ in rows.scopes:
            self.holders[(kind, key)].pop(path, None)
            touched.append(self.scope_number[(kind, key)])
        self._settle(touched)

    def add_files(self, items: list[tuple[str, FileRows]]) -> None:
        """Append the rows of files not in the snapshot yet (a whole store at once when building).
        Each file's `vectors` are copied into the snapshot's matrix and let go."""
        total = sum(rows.n for _, rows in items)
        self._grow_rows(self.size + total)
        if self._top is not None:
            self._top = {p: max([self._top[p], *(rows.top[p] for _, rows in items)]) for p in self._top}
        start = self.size
        touched: list[int] = []
        columns: dict[str, list] = {"learning": [], "columns": [], "scope_of": []}
        dead: list[int] = []
        for path, rows in items:
            n = rows.n
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
            if n:
                self._vectors[self.size:self.size + n] = rows.vectors
            rows.vectors = None
            columns["learning"].append(np.full(n, path.startswith("learnings/")))
            columns["columns"].append(rows.columns)
            columns["scope_of"].append(np.array(mapping, np.int64)[rows.scope_index] if n else
                                       np.zeros(0, np.int64))
            rows.start = self.size
            dupes = []
            by_key = self.by_key
            for number, key in enumerate(rows.id_key.tolist(), self.size):
                other = by_key.setdefault(key, number)
                if other != number:
                    dupes.append((number, other, key))
            self.owner.extend([rows] * n)
            self.size += n
            self.files[path] = rows
            self.rows[path] = np.arange(rows.start, self.size)
            if dupes:
                self.duplicates[path] = [
                    f"{path}:{self.entries[number].line}: duplicate id {key_id(key)} (also in "
                    f"{self.entries[other].path}); this copy is left out" for number, other, key in dupes]
                dead += [number for number, _, _ in dupes]
            if rows.warning or dupes:
                self.warned.add(path)
        if total:
            sl = slice(start, self.size)
            merged = np.concatenate(columns["columns"], axis=1)
            self._alive[sl] = True
            self._alive[dead] = False
            self._learning[sl] = np.concatenate(columns["learning"])
            self._recurrence[sl] = merged[0]
            self._last_seen[sl] = merged[1]
            self._scope_of[sl] = np.concatenate(columns["scope_of"])
            self._id_key[sl] = merged[3]
        self._settle(touched)

    def compacted(self) -> "Snapshot":
        """The same snapshot without dead rows (rows in path order, as a fresh build has them)."""
        snap = Snapshot(self.dim, self.count + 64, len(self.scopes) + 16)
        paths = sorted(self.files)
        for i in range(0, len(paths), 256):  # a slice at a time: no second copy of every vector
            chunk = [(path, self.files[path]) for path in paths[i:i + 256]]
            for path, rows in chunk:
                rows.vectors = self.vectors[self.rows[path]]
            snap.add_files(chunk)
        snap.stamps, snap.watch, snap.notice = self.stamps, self.watch, self.notice
        snap.db, snap.db_inode, self.db = self.db, self.db_inode, None
        return snap

    def _settle(self, touched: list[int]) -> None:
        """Recompute the touched scopes' centroids from their files' sums (added in path order,
        exactly as a fresh build adds them); a scope no file holds any more matches nothing."""
        if not touched:
            return
        at = np.array(sorted(set(touched)), np.int64)  # (np.unique would import numpy.ma: 12 ms)
        sums = np.zeros((len(at), self.dim), np.float64)
        empty = np.zeros(len(at), bool)
        for j, i in enumerate(at.tolist()):
            kind, key, _ = self.scopes[i]
            holders = self.holders[(kind, key)]
            if not holders:
                empty[j] = True
            elif len(holders) == 1:  # the usual case: one file per scope
                rows = self.files[next(iter(holders))]
                sums[j] = rows.sums[rows.scope_at[(kind, key)]]
            else:
                for path in sorted(holders):
                    rows = self.files[path]
                    sums[j] += rows.sums[rows.scope_at[(kind, key)]]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        norms[norms == 0] = 1
        self._centroids[at] = sums / norms
        if empty.any():
            gone = at[empty]
            self._centroids[gone] = 0
            self._phrases[gone] = 0

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
        if need <= len(self._phrases):
            return
        cap = max(need, len(self._phrases) * 3 // 2)
        for name in ("_phrases", "_centroids"):
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


def _recheck(store: Store, snap: Snapshot) -> tuple[dict[str, str] | None, set[str] | None]:
    """What changed since `snap` was brought up to date: (None, None) when nothing did, else the
    new stamps and the paths that may differ (None: any may). The first recheck of a snapshot
    starts a watch (watch.py) and scans every file; later ones stat only what the watch reports."""
    if snap.watch is not None:
        names = snap.watch.changes()
        if names is not None:
            head = store.head() or ""
            if not names and head == snap.stamps.get("@HEAD"):
                return None, None
            stamps = dict(snap.stamps)
            stamps["@HEAD"] = head
            for rel in names:
                if not rel.endswith(".md") or rel.rpartition("/")[2].startswith("."):
                    continue
                try:
                    st = os.stat(store.path / rel)
                except (FileNotFoundError, NotADirectoryError):
                    stamps.pop(rel, None)
                    continue
                stamps[rel] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
            return (None, None) if stamps == snap.stamps else (stamps, names)
        snap.watch = None
    from .watch import Watch
    snap.watch = Watch.start(store.path, tuple(KIND_FOLDER.values()))  # before the scan: nothing slips between
    stamps = scan(store)
    return (None, None) if stamps == snap.stamps else (stamps, None)


def snapshot(store: Store, embedder: Embedder) -> Snapshot:
    """The store's entries and vectors, brought up to date with the files on disk."""
    key = (str(store.path), embedder.identity)
    cached = _CACHE.get(key)
    hint = None
    if cached is None:
        stamps = scan(store)
    else:
        cached.notice = None
        stamps, hint = _recheck(store, cached)
        if stamps is None:
            return cached
    try:
        snap = _refresh(store, embedder, stamps, cached, hint)
    except sqlite3.OperationalError:  # busy or disk trouble part way: read the markdown without it this time
        _close(_CACHE.pop(key, None))
        snap = _refresh(store, embedder, stamps, None, None, _memory())
    except sqlite3.DatabaseError as exc:  # corrupt, truncated or an older schema: rebuild it
        _close(_CACHE.pop(key, None))
        _discard(store)
        try:
            snap = _refresh(store, embedder, stamps, None, None)
        except sqlite3.DatabaseError:  # still there (a read-only store): rebuild in memory, leave the file
            snap = _refresh(store, embedder, stamps, None, None, _memory())
        snap.notice = f"index.sqlite was unreadable ({exc}); rebuilt it from the markdown"
    _CACHE[key] = snap
    return snap


class Unusable(Exception):
    """index.sqlite cannot be used by this process (and must not be deleted): the reason, for a warning."""


def _memory() -> sqlite3.Connection:
    """An empty index in memory, for a process that cannot use the file."""
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    db.executescript(_DDL)
    return db


def forget(store: Store) -> None:
    """Drop the in-memory snapshot and the index file (`reindex`, or a detected corruption)."""
    for key in [k for k in _CACHE if k[0] == str(store.path)]:
        _close(_CACHE.pop(key))
    _discard(store)


def _close(snap: Snapshot | None) -> None:
    if snap is not None and snap.db is not None:
        snap.db.close()
        snap.db = None


def _discard(store: Store) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            (store.path / f"index.sqlite{suffix}").unlink(missing_ok=True)
        except OSError:
            pass  # read-only: the rebuild then happens in memory


def _connect(store: Store) -> sqlite3.Connection:
    """The index, opened (created when missing). Raises `Unusable` when this process cannot write
    it (a read-only store) or it belongs to a newer whetstone, sqlite3.DatabaseError when corrupt."""
    def open_() -> tuple[sqlite3.Connection, int]:
        try:
            db = sqlite3.connect(store.path / "index.sqlite", timeout=5, isolation_level=None, check_same_thread=False)
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
        _discard(store)
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
             hint: set[str] | None, db: sqlite3.Connection | None = None) -> Snapshot:
    """Bring `cached` (or a snapshot built from the index file) up to date with `stamps`; `hint`,
    when given, holds every path whose stamp may differ from the snapshot's.

    The work (reading files, embedding) happens outside any write transaction; what changed is
    then saved in one short transaction. Readers never wait for the index: if another process is
    saving (or the file cannot be written), this one keeps its result in memory and skips the save,
    which the next call makes up for."""
    # A process that refreshes a snapshot a second time is long-lived (the server): it keeps its
    # connection, since closing the last one checkpoints the WAL (12 ms after each write).
    keep = cached is not None and db is None
    notice = None
    if db is None:
        db = _reuse(store, cached) if keep else None
        try:
            db = db or _connect(store)
        except (Unusable, sqlite3.OperationalError) as exc:  # read-only, a newer whetstone's, or busy being
            db, keep = _memory(), False                        # created: patch the snapshot without the file
            notice = str(exc) if isinstance(exc, Unusable) else None
    try:
        if cached is None:
            snap = _load(db, embedder, stamps, store)
            snap.stamps = {"@HEAD": ""}
            hint = None
        else:
            snap = cached
        snap.notice = notice or snap.notice
        head_moved = snap.stamps.get("@HEAD") != stamps["@HEAD"]
        if hint is None:
            candidates = [p for p in stamps if p != "@HEAD"]
            gone = snap.files
        else:
            candidates = sorted(hint | (snap.warned if head_moved else set()))
            gone = [p for p in hint if p in snap.files]
        changed = sorted(p for p in candidates if p in stamps and (
            p not in snap.files or snap.files[p].stamp != stamps[p] or (head_moved and snap.files[p].warning)))
        removed = [p for p in gone if p not in stamps]
        if changed or removed:  # a copy left out as a duplicate id may be the only copy now: read again
            changed = sorted(set(changed) | (snap.duplicates.keys() & stamps.keys()))
        touched = {s[:2] for p in changed + removed if p in snap.files for s in snap.files[p].scopes}
        if not changed and not removed:  # a fresh process on a fresh index: nothing to write
            snap.stamps = stamps
            _hold(store, snap, db, keep)
            return snap
        for path in removed:
            snap.remove_file(path)
        added: list[tuple[str, FileRows]] = []
        records: list[tuple] = []
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
            del parsed, vectors
            for path, rows in added:
                if rows.warning:
                    _claim_from_disk(store, path, rows)
                touched |= {s[:2] for s in rows.scopes}
                records.append(_file_record(path, rows, embedder))
                if len(added) > PARSED_FILES:  # a build: keep the entries as text, as a load would
                    rows.unparse()
            snap.add_files(added)
        if snap.dead * 3 > max(snap.size, 30):  # compact: rebuild the rows from the files
            snap = snap.compacted()
        snap.stamps = stamps
        _save(db, embedder, snap, removed, records, new_vectors, touched)
        _hold(store, snap, db, keep)
        return snap
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        _CACHE.pop((str(store.path), embedder.identity), None)  # a half-patched snapshot is not kept
        if cached is not None:
            cached.db = None
        db.close()
        raise


def _save(db: sqlite3.Connection, embedder: Embedder, snap: Snapshot, removed: list[str],
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
        _save_scopes(db, snap, embedder, touched)
        db.execute("COMMIT")
    except sqlite3.OperationalError:  # read-only after all, or the disk is full: the index is only a cache
        if db.in_transaction:
            db.execute("ROLLBACK")


def _reuse(store: Store, snap: Snapshot) -> sqlite3.Connection | None:
    """The snapshot's open connection, if it still is to the store's index.sqlite (a `reindex` in
    another process replaces the file)."""
    if snap.db is not None:
        try:
            if os.stat(store.path / "index.sqlite").st_ino == snap.db_inode:
                return snap.db
        except OSError:
            pass
        _close(snap)
    return None


def _hold(store: Store, snap: Snapshot, db: sqlite3.Connection, keep: bool) -> None:
    if not keep:
        db.close()
    elif snap.db is not db:
        snap.db = db
        snap.db_inode = os.stat(store.path / "index.sqlite").st_ino


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
    index = np.zeros(len(entries), np.int64)
    for i, e in enumerate(entries):
        index[i] = scopes[(e.kind, scope_key(e.scope))]
        sums[index[i]] += matrix[i]
    phrases = (np.stack([vectors[text_hash(s[2])] for s in display]) if display
               else np.zeros((0, dim), np.float32))
    columns = np.array([[e.recurrence for e in entries], [_day(e.last_seen) for e in entries], index,
                        [id_key(e.id) for e in entries]], np.int64).reshape(4, len(entries))
    top = {prefix: max((int(e.id[1:]) for e in entries if e.id[0] == prefix), default=0) for prefix in ("L", "I")}
    return FileRows(stamp, display, sums, phrases, columns, top, warning, entries=entries, vectors=matrix)


def _file_record(path: str, rows: FileRows, embedder: Embedder) -> tuple:
    """The `files` row for a file's rows (taken before the snapshot adopts their vectors)."""
    blob = b"".join(a.astype(np.float32).tobytes() for a in (rows.vectors, rows.sums, rows.phrases))
    top = np.array([rows.top["L"], rows.top["I"]], np.int64)
    return (path, rows.stamp, rows.warning, embedder.identity, rows.n, len(rows.scopes), rows.text(),
            json.dumps(rows.scopes, ensure_ascii=False), rows.columns.tobytes() + top.tobytes(), blob)


def _load(db: sqlite3.Connection, embedder: Embedder, stamps: dict[str, str], store: Store) -> Snapshot:
    """A snapshot of the files the index already holds for this backend whose stamp still matches
    the disk, in path order (as a fresh build adds them), a few hundred files at a time so their
    blobs never all sit in memory beside the matrix. Their entries stay JSON text until read."""
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
        n, s = (len(ints) - 2) // 4, len(scope_list)
        flat = np.frombuffer(blob, np.float32).reshape(-1, dim)
        top = {"L": int(ints[-2]), "I": int(ints[-1])}
        rows = FileRows(stamp, scope_list, flat[n:n + s].copy(), flat[n + s:n + 2 * s].copy(),
                        ints[:4 * n].reshape(4, n), top, warning, raw=entries, vectors=flat[:n])
        if warning:
            _claim_from_disk(store, path, rows)
        chunk.append((path, rows))
        if len(chunk) == 256:
            snap.add_files(chunk)
            chunk = []
    snap.add_files(chunk)
    return snap


def _claim_from_disk(store: Store, rel: str, rows: FileRows) -> None:
    try:
        rows.claim((store.path / rel).read_bytes())
    except OSError:
        pass


def read_files(store: Store, rels: list[str]) -> dict[str, tuple[list[Entry], str | None]]:
    """`read_file` for many files at once: a file whose stamp the index (in memory, else
    index.sqlite) holds without a warning gives the entries parsed when it was indexed, the rest
    are parsed from the markdown. Nothing is written and nothing is embedded."""
    out: dict[str, tuple[list[Entry], str | None]] = {}
    stamps: dict[str, str] = {}
    for rel in rels:
        try:
            st = os.stat(store.path / rel)
            stamps[rel] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
        except OSError:
            pass
    for (path, _), snap in list(_CACHE.items()):
        if path == str(store.path):
            for rel, stamp in stamps.items():
                rows = snap.files.get(rel)
                if rel not in out and rows is not None and rows.stamp == stamp and not rows.warning:
                    out[rel] = (rows.entries, None)
    if len(out) < len(stamps) and (store.path / "index.sqlite").exists():
        try:
            db = sqlite3.connect(f"file:{store.path / 'index.sqlite'}?mode=ro", uri=True, timeout=5)
            try:
                if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA:
                    for rel, stamp, warning, raw in db.execute("SELECT path, stamp, warning, entries FROM files"):
                        if rel not in out and stamps.get(rel) == stamp and not warning:
                            out[rel] = (_decode(raw), None)
            finally:
                db.close()
        except sqlite3.Error:
            pass
    for rel in rels:
        if rel not in out:
            out[rel] = read_file(store, rel)
    return out


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
