"""Keeping a snapshot fresh: every read finds out itself what changed on disk (SPEC §5, §7).

Staleness is found from file stamps (size, mtime, inode) and HEAD, never by trusting hooks: a
revert, a reset or a fresh clone skip some of them. A long-lived process (the MCP server) keeps
each store's last snapshot in `LIVE` and pays only the stamp check when nothing changed; after the
first check it watches the scope folders (inotify, `watch`) and stats only what changed. A changed
file is parsed again (`store.reading`), only its texts no record holds a vector for are embedded,
and the result is saved to index.sqlite (`cache`) in one short transaction.
"""
from __future__ import annotations

import os
import sqlite3

import numpy as np

from ..base.progress import Progress
from ..format.entry import Entry
from ..format.layout import KIND_FOLDER, is_scope_file, is_scope_name
from ..semantics.embed import Embedder
from ..store.reading import read_file
from ..store.store import Store
from . import cache
from .rows import FileRows, file_rows, text_hashes
from .snapshot import Snapshot

# The snapshots this process keeps, by (store path, backend identity).
LIVE: dict[tuple[str, str], Snapshot] = {}
EMBED_BATCH = 1024  # texts per embedding call: a first build of 100,000 entries stays small in memory


def scan(store: Store) -> dict[str, str]:
    """Every scope file's stamp by path (`stamp_of`), and HEAD's commit under "@HEAD"; a file gone
    between the listing and its stat is simply not there."""
    stamps: dict[str, str] = {"@HEAD": store.head() or ""}
    for folder in KIND_FOLDER.values():
        try:
            fd = os.open(store.path / folder, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            for name in os.listdir(fd):
                if is_scope_name(name):
                    try:
                        stamps[f"{folder}/{name}"] = stamp_of(os.stat(name, dir_fd=fd))
                    except (FileNotFoundError, NotADirectoryError):
                        pass
        finally:
            os.close(fd)
    return stamps


def stamp_of(st: os.stat_result) -> str:
    """What tells a version of a file from the next: its size, mtime (ns) and inode."""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def _recheck(store: Store, snap: Snapshot) -> dict[str, str] | None:
    """The stamps now, or None when nothing changed since `snap`. The first recheck of a snapshot
    starts a watch (watch.py) and scans every file; later ones stat only what the watch reports."""
    if snap.watch is not None:
        names = snap.watch.changes()
        if names is not None:
            stamps = dict(snap.stamps)
            stamps["@HEAD"] = store.head() or ""
            for rel in filter(is_scope_file, names):
                try:
                    stamps[rel] = stamp_of(os.stat(store.path / rel))
                except (FileNotFoundError, NotADirectoryError):
                    stamps.pop(rel, None)
            return None if stamps == snap.stamps else stamps
        snap.watch = None
    from .watch import Watch  # here: a process that checks a store once (the CLI) never loads ctypes
    snap.watch = Watch.start(store.path, tuple(KIND_FOLDER.values()))  # before the scan: nothing slips between
    stamps = scan(store)
    return None if stamps == snap.stamps else stamps


def snapshot(store: Store, embedder: Embedder, progress: Progress | None = None) -> Snapshot:
    """The store's entries and vectors, brought up to date with the files on disk; `progress(done,
    total)` is told of the files read and embedded, when there are many."""
    key = (str(store.path), embedder.identity)
    cached = LIVE.get(key)
    if cached is None:
        stamps = scan(store)
    else:
        cached.notice = None
        stamps = _recheck(store, cached)
        if stamps is None:
            return cached
    try:
        snap = _refresh(store, embedder, stamps, cached, progress=progress)
    except sqlite3.OperationalError:  # busy or disk trouble part way: read the markdown without it this time
        close(LIVE.pop(key, None))
        snap = _refresh(store, embedder, stamps, None, cache.memory(), progress)
    except sqlite3.DatabaseError as exc:  # corrupt, truncated or an older schema: rebuild it
        close(LIVE.pop(key, None))
        cache.discard(store.path)
        try:
            snap = _refresh(store, embedder, stamps, None, progress=progress)
        except sqlite3.DatabaseError:  # still there (a read-only store): rebuild in memory, leave the file
            snap = _refresh(store, embedder, stamps, None, cache.memory(), progress)
        snap.notice = f"index.sqlite was unreadable ({exc}); rebuilt it from the markdown"
    LIVE[key] = snap
    return snap


def forget(store: Store) -> None:
    """Drop the in-memory snapshot and the index file (`reindex`, or a detected corruption)."""
    for key in [k for k in LIVE if k[0] == str(store.path)]:
        close(LIVE.pop(key))
    cache.discard(store.path)


def close(snap: Snapshot | None) -> None:
    """Let go of what `snap` holds open: its index connection and its watch (a descriptor each)."""
    if snap is None:
        return
    if snap.db is not None:
        snap.db.close()
        snap.db = None
    if snap.watch is not None:
        snap.watch.close()
        snap.watch = None


def _open(store: Store, cached: Snapshot | None) -> tuple[sqlite3.Connection, str | None]:
    """The index to read and save: the live snapshot's connection while it is still to the store's
    index.sqlite (a `reindex` elsewhere replaces the file), else a new one; an index in memory
    (and why, to warn) when the file cannot be used."""
    if cached is not None and cached.db is not None:
        try:
            if os.stat(store.path / "index.sqlite").st_ino == cached.db_inode:
                return cached.db, None
        except OSError:
            pass
        cached.db.close()
        cached.db = None
    try:
        return cache.connect(store.path), None
    except cache.Unusable as exc:  # read-only, or a newer whetstone's
        return cache.memory(), str(exc)
    except sqlite3.OperationalError:  # busy being created by another process
        return cache.memory(), None


def _refresh(store: Store, embedder: Embedder, stamps: dict[str, str], cached: Snapshot | None,
             db: sqlite3.Connection | None = None, progress: Progress | None = None) -> Snapshot:
    """`cached` (or a snapshot of what index.sqlite holds) brought up to date with `stamps`. The
    work (reading files, embedding) happens outside any write transaction (a new process holds a
    read one meanwhile, so the records and vectors it loads are one version; WAL lets writers go on);
    what changed is then saved in one short one, skipped when another process is saving: the next
    call makes up for it."""
    notice = None
    if db is None:
        db, notice = _open(store, cached)
    try:
        if cached is None:
            db.execute("BEGIN")  # the records and the vectors read into the snapshot below: one version of them
            records = cache.load(db, embedder.identity, embedder.dim)
            files = {path: rows for path, rows in records.items() if stamps.get(path) == rows.stamp}
            moved, warned = True, {path for path, rows in files.items() if rows.warning}
        else:
            records, files = {}, cached.files
            moved, warned = cached.stamps.get("@HEAD") != stamps["@HEAD"], cached.warned
        # a broken file is served from HEAD, which may have moved; a copy left out as a duplicate id
        # may be the only copy now
        changed = sorted(path for path in stamps if path != "@HEAD" and (
            path not in files or files[path].stamp != stamps[path] or (moved and path in warned)))
        removed = [path for path in (records or files) if path not in stamps]
        if cached is not None and (changed or removed) and cached.duplicates:
            changed = sorted(set(changed) | (cached.duplicates.keys() & stamps.keys()))
        if cached is not None and not changed and not removed:
            cached.stamps = stamps
            return cached
        # the vectors of every text the versions these files had last time held
        before: dict[str, np.ndarray] = {}
        for path in [*changed, *removed]:
            if cached is not None and path in cached.files:
                before.update(texts_of(cached.files[path].entries, cached.file_vectors(path), cached.files[path]))
            elif path in records:
                vectors = cache.file_vectors(db, embedder.identity, path, embedder.dim)
                before.update(texts_of(records[path].entries, vectors, records[path]))
        read = _read(store, embedder, db, changed, stamps, before, progress)
        kept = {text for rows in read.values() for text in texts_of(rows.entries, rows.vectors, rows)}
        left = {h: before[text] for text, h in zip(before, text_hashes(list(before))) if text not in kept}
        if cached is None:
            snap = Snapshot(embedder.dim, {**{p: r for p, r in files.items() if p not in read}, **read},
                            stored=cache.stored_vectors(db, embedder.identity))
            db.execute("COMMIT")
        else:
            snap = cached.changed(removed, read)
        if read or removed:
            cache.save(db, embedder.identity, removed, read, left)
        for rows in read.values():
            rows.vectors = None  # saved, and the matrix holds them
        snap.stamps, snap.notice = stamps, notice or (cached.notice if cached is not None else None)
        if cached is not None and notice is None:  # a long-lived process keeps its connection
            snap.db, snap.db_inode = db, os.stat(store.path / "index.sqlite").st_ino
        else:
            db.close()
        return snap
    except BaseException:
        LIVE.pop((str(store.path), embedder.identity), None)  # a half-patched snapshot is not kept
        if cached is not None:
            cached.db = None
        db.close()
        raise


def _read(store: Store, embedder: Embedder, db: sqlite3.Connection, paths: list[str], stamps: dict[str, str],
          before: dict[str, np.ndarray], progress: Progress | None) -> dict[str, FileRows]:
    """The rows of files read from the markdown: their texts' vectors taken from `before`, else
    from those the index keeps by hash, else embedded. `progress(done, total)` counts files:
    reading is the first half of the work, embedding the second."""
    if not paths:
        return {}
    tick = _Ticker(progress, len(paths))
    half = len(paths) // 2
    parsed = {}
    for done, path in enumerate(paths, 1):
        parsed[path] = read_file(store, path)
        tick(done * half // len(paths))
    texts = list(dict.fromkeys(text for entries, _ in parsed.values() for e in entries for text in (e.body, e.scope)))
    vectors = {text: before[text] for text in texts if text in before}
    missing = [text for text in texts if text not in vectors]
    if missing:
        kept = cache.vectors_of(db, embedder.identity, text_hashes(missing))
        vectors.update((text, kept[h]) for text, h in zip(missing, text_hashes(missing)) if h in kept)
        todo = [text for text in missing if text not in vectors]
        for start in range(0, len(todo), EMBED_BATCH):
            batch = todo[start:start + EMBED_BATCH]
            vectors.update(zip(batch, embed_texts(batch, embedder)))
            tick(half + (len(paths) - half) * (start + len(batch)) // len(todo))
    tick(len(paths))
    out = {}
    for path, (entries, warning) in parsed.items():
        rows = out[path] = file_rows(stamps[path], entries, warning, vectors, embedder.dim)
        if warning:  # the ids a broken file still claims are never minted again
            try:
                rows.claim((store.path / path).read_bytes())
            except OSError:
                pass
    return out


def embed_texts(texts: list[str], embedder: Embedder) -> np.ndarray:
    """The vectors of texts no record holds one for: the only embedding an index update does."""
    return embedder.embed(texts)


def texts_of(entries: list[Entry], vectors: np.ndarray, rows: FileRows) -> dict[str, np.ndarray]:
    """Every body and scope phrase of a file, with its vector (`vectors`: the entries')."""
    found = dict(zip((e.body for e in entries), vectors))
    found.update(zip((display for _, _, display in rows.scopes), rows.phrases))
    return found


class _Ticker:
    """`progress(done, total)`, called only when `done` grows."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, done: int) -> None:
        done = min(done, self.total)
        if self.progress is not None and done > self.done:
            self.done = done
            self.progress(done, self.total)


def read_files(store: Store, rels: list[str]) -> dict[str, tuple[list[Entry], str | None]]:
    """`read_file` for many files at once: a file whose stamp the index (in memory, else
    index.sqlite) holds without a warning gives the entries parsed when it was indexed, the rest
    are parsed from the markdown. Nothing is written and nothing is embedded."""
    out: dict[str, tuple[list[Entry], str | None]] = {}
    stamps: dict[str, str] = {}
    for rel in rels:
        try:
            stamps[rel] = stamp_of(os.stat(store.path / rel))
        except OSError:
            pass
    for (path, _), snap in list(LIVE.items()):
        if path == str(store.path):
            for rel, stamp in stamps.items():
                rows = snap.files.get(rel)
                if rel not in out and rows is not None and rows.stamp == stamp and not rows.warning:
                    out[rel] = (rows.entries, None)
    if len(out) < len(stamps):
        missing = {rel: stamp for rel, stamp in stamps.items() if rel not in out}
        out.update((rel, (entries, None)) for rel, entries in cache.cached_entries(store.path, missing).items())
    for rel in rels:
        if rel not in out:
            out[rel] = read_file(store, rel)
    return out
