"""Keeping a snapshot fresh: every read finds out itself what changed on disk (SPEC §5, §7).

Staleness is found from file stamps (size, mtime, inode) and HEAD, never by trusting hooks: a
revert, a reset or a fresh clone skip some of them. A long-lived process (the MCP server) keeps
each store's last snapshot in `LIVE` and pays only the stamp check when nothing changed; after
the first check it watches the scope folders (inotify, `watch`) and stats only what changed. A
changed file is parsed again (`reading`), its new texts embedded, and the result saved to
index.sqlite (`cache`) in one short transaction.
"""
from __future__ import annotations

import os
import sqlite3

from ..format.layout import KIND_FOLDER, is_scope_file, is_scope_name
from ..semantics.embed import Embedder
from ..store.store import Store
from . import build, cache, image
from .reading import read_file
from .records import Entry, FileRows
from .snapshot import Snapshot

# The snapshots this process keeps, by (store path, backend identity).
LIVE: dict[tuple[str, str], Snapshot] = {}
BUILD_FILES = 512  # a refresh of more files than this is a build: their entries kept as text (`_refresh`)
# A live snapshot's changed files are added once all are read (False: batch by batch, growing its
# matrices as they come, then compacted: the reference the tests compare with).
DEFER = True


def scan(store: Store) -> dict[str, str]:
    """Every scope file's stamp by path (size, mtime, inode: `stamp_of`), and HEAD's commit under
    "@HEAD". One stat per file, relative to its open folder (10,000 of them in a cold process at
    100,000 entries); a file gone between the listing and its stat is simply not there."""
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


def _size(stamp: str) -> int:
    """The size a stamp holds (`stamp_of`)."""
    try:
        return int(stamp.split(":", 1)[0])
    except ValueError:
        return 0


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
                if not is_scope_file(rel):
                    continue
                try:
                    st = os.stat(store.path / rel)
                except (FileNotFoundError, NotADirectoryError):
                    stamps.pop(rel, None)
                    continue
                stamps[rel] = stamp_of(st)
            return (None, None) if stamps == snap.stamps else (stamps, names)
        snap.watch = None
    from .watch import Watch  # here: a process that checks a store once (the CLI) never loads ctypes
    snap.watch = Watch.start(store.path, tuple(KIND_FOLDER.values()))  # before the scan: nothing slips between
    stamps = scan(store)
    return (None, None) if stamps == snap.stamps else (stamps, None)


def snapshot(store: Store, embedder: Embedder, progress: build.Progress | None = None,
             written: build.Written | None = None) -> Snapshot:
    """The store's entries and vectors, brought up to date with the files on disk; `progress(done,
    total)` is told of the files read and embedded, when there are any. `written` holds the entries
    of files a writer has just written: a changed file that still holds the bytes written is not
    parsed again."""
    key = (str(store.path), embedder.identity)
    cached = LIVE.get(key)
    hint = None
    if cached is None:
        stamps = scan(store)
    else:
        cached.notice = None
        stamps, hint = _recheck(store, cached)
        if stamps is None:
            return cached
    try:
        snap = _refresh(store, embedder, stamps, cached, hint, progress=progress, written=written)
    except sqlite3.OperationalError:  # busy or disk trouble part way: read the markdown without it this time
        close(LIVE.pop(key, None))
        snap = _refresh(store, embedder, stamps, None, None, cache.memory(), progress, written)
    except sqlite3.DatabaseError as exc:  # corrupt, truncated or an older schema: rebuild it
        close(LIVE.pop(key, None))
        cache.discard(store.path)
        try:
            snap = _refresh(store, embedder, stamps, None, None, progress=progress, written=written)
        except sqlite3.DatabaseError:  # still there (a read-only store): rebuild in memory, leave the file
            snap = _refresh(store, embedder, stamps, None, None, cache.memory(), progress, written)
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


def _reuse(store: Store, snap: Snapshot) -> sqlite3.Connection | None:
    """The snapshot's open connection, if it still is to the store's index.sqlite (a `reindex` in
    another process replaces the file)."""
    if snap.db is not None:
        try:
            if os.stat(store.path / "index.sqlite").st_ino == snap.db_inode:
                return snap.db
        except OSError:
            pass
        snap.db.close()
        snap.db = None
    return None


def _hold(store: Store, snap: Snapshot, db: sqlite3.Connection, keep: bool) -> None:
    if not keep:
        db.close()
    elif snap.db is not db:
        snap.db = db
        snap.db_inode = os.stat(store.path / "index.sqlite").st_ino


def _refresh(store: Store, embedder: Embedder, stamps: dict[str, str], cached: Snapshot | None,
             hint: set[str] | None, db: sqlite3.Connection | None = None,
             progress: build.Progress | None = None, written: build.Written | None = None) -> Snapshot:
    """Bring `cached` (or a snapshot built from the index file) up to date with `stamps`; `hint`,
    when given, holds every path whose stamp may differ from the snapshot's.

    The work (reading files, embedding) happens outside any write transaction; what changed is
    then saved in one short transaction (a build's batches each in one of their own, as they come). Readers never wait for the index: if another process is
    saving (or the file cannot be written), this one keeps its result in memory and skips the save,
    which the next call makes up for."""
    # A process that refreshes a snapshot a second time is long-lived (the server): it keeps its
    # connection, since closing the last one checkpoints the WAL (12 ms after each write).
    keep = cached is not None and db is None
    notice = None
    # a bigger store's build from scratch (no index.sqlite, no image) writes a file of its own, put in
    # place as index.sqlite once complete (`cache.scratch`, `cache.install`)
    fresh = stream = None
    if (db is None and cached is None and len(stamps) > cache.SCRATCH_FROM
            and not (store.path / "index.sqlite").exists() and not (store.path / image.NAME).exists()):
        fresh = cache.scratch(store.path)
        if fresh is not None:
            db = fresh[0]
    if db is None:
        db = _reuse(store, cached) if keep else None
        try:
            db = db or cache.connect(store.path)
        except (cache.Unusable, sqlite3.OperationalError) as exc:  # read-only, a newer whetstone's, or busy being
            db, keep = cache.memory(), False                        # created: patch the snapshot without the file
            notice = str(exc) if isinstance(exc, cache.Unusable) else None
    try:
        if cached is None:
            snap = cache.load(db, embedder, stamps, store.path)
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
        changed = sorted(snap.files.outdated(stamps, candidates, head_moved))
        removed = [p for p in gone if p not in stamps]
        if changed or removed:  # a copy left out as a duplicate id may be the only copy now: read again
            changed = sorted(set(changed) | (snap.duplicates.keys() & stamps.keys()))
        if not changed and not removed:  # a fresh process on a fresh index: nothing to write
            snap.stamps = snap.files.shared(stamps)  # a mapped snapshot's: the table's strings, not the scan's
            if fresh is not None:
                cache.install(db, fresh[1], store.path)
            _hold(store, snap, db, keep)
            if cached is None and not snap.mapped and snap.count >= image.IMAGE_FROM:
                image.write(store.path, embedder.identity, snap)  # the next process maps it
            return snap
        snap.remove_files(removed)
        records: list[tuple] = []  # not saved yet, with the paths in `unsaved`
        unsaved, saving = removed, True
        reuse = None
        if changed:
            snap.remove_files(changed)  # all out first: a block moved between two files is no duplicate
            # A new process's image may be older than index.sqlite (a capture since, or a process that
            # patched too few files to write the image again): the files the index holds as they are on
            # disk come from it, as a load without the image takes them, so no process after the first
            # reads, embeds or saves them again. They are added with the rest in `changed` order.
            held = cache.held(db, embedder, stamps, changed) if cached is None and snap.mapped else {}
            to_read = [path for path in changed if path not in held] if held else changed
            many = len(changed) > BUILD_FILES  # a build: keep the entries as text, as a load would
            start, files, rows_read = snap.size, 0, 0
            # room for all the rows is made once, foreseen from the bytes read so far (their stamps
            # hold their sizes): by the share of files read, a store whose big files come late
            # grew its matrices (150 MB at 100,000 rows) again and again
            size = {path: _size(stamps[path]) for path in to_read}
            total, bytes_read = sum(size.values()), 0
            # a live snapshot's new rows are added at the end, where a change big enough to leave
            # it compacted (a compact's) adds them to the compacted one instead (`DEFER`)
            deferred: list[tuple[str, FileRows]] | None = [] if DEFER and cached is not None and not held else None
            # the vectors the records of the files read again and removed hold: the new records take
            # those of their texts (a compact moves most of a merged scope's texts to another file),
            # and only the others are kept in `vectors`, by the last save
            reuse = build.Reuse(db, embedder, to_read + removed, written.read if written is not None else None)
            given = written.take(store, to_read) if written is not None else None
            if fresh is not None and not held and deferred is None:  # its image's biggest array, as it comes
                stream = image.Stream(store.path, embedder.dim)
            for batch in build.files(store, embedder, db, to_read, stamps, reuse, progress, given=given):
                for path, rows, record in batch:
                    records.append(record)
                    rows_read += rows.n
                    if many:
                        rows.unparse()
                files += len(batch)
                bytes_read += sum(size[path] for path, _, _ in batch)
                if held:
                    held.update((path, rows) for path, rows, _ in batch)
                    continue
                if deferred is not None:
                    deferred += [(path, rows) for path, rows, _ in batch]
                else:
                    # more batches to come (from the workers): room for them all, once, when this one
                    # does not fit (growing by each better guess copied 100,000 rows to 1.5 times a
                    # first guess already too big: a store's early files hold more entries a byte)
                    if files < len(changed) and snap.size + sum(rows.n for _, rows, _ in batch) > snap.capacity:
                        snap.grow_rows(start + rows_read * 9 * max(total, 1) // (8 * max(bytes_read, 1)))
                    if stream is not None:
                        stream.add(snap, [rows.vectors for _, rows, _ in batch])
                    snap.add_files([(path, rows) for path, rows, _ in batch])
                if files < len(changed):
                    # while the workers make the next batches: this one saved (a short transaction of
                    # its own, as the save at the end; once one is skipped, the rest wait for that
                    # one) and, for the image this process writes next, its rows' compact copies
                    if saving and cache.save(db, embedder, unsaved, records, []):
                        unsaved, records = [], []
                    else:
                        saving = False
                    if cached is None and snap.size >= image.IMAGE_FROM:
                        snap.code_rows()
            if held:
                snap.add_files([(path, held[path]) for path in changed])
            if deferred:  # (rows of duplicate ids only add dead ones: compacted with them or without)
                if snap.dead * 3 > max(snap.size + sum(rows.n for _, rows in deferred), 30):
                    snap = snap.compacted(deferred)
                else:
                    snap.add_files(deferred)
        if snap.dead * 3 > max(snap.size, 30):  # compact: rebuild the rows from the files
            snap = snap.compacted()
        snap.stamps = stamps
        if records or unsaved:
            cache.save(db, embedder, unsaved, records, reuse.unused() if reuse is not None else None)
        if fresh is not None:
            cache.install(db, fresh[1], store.path)
        _hold(store, snap, db, keep)
        if (cached is None and snap.count >= image.IMAGE_FROM
                and (not snap.mapped or len(changed) + len(removed) > image.REWRITE_SHARE * len(snap.files))):
            image.write(store.path, embedder.identity, snap, stream)  # a process that loaded writes what the next one maps
        if stream is not None:
            stream.drop()  # (unless `write` used it)
        return snap
    except BaseException:
        try:
            if db.in_transaction:
                db.execute("ROLLBACK")
        except sqlite3.ProgrammingError:  # closed: a build from scratch already put in place
            pass
        LIVE.pop((str(store.path), embedder.identity), None)  # a half-patched snapshot is not kept
        if cached is not None:
            cached.db = None
        db.close()
        if fresh is not None:  # a half build is never put in place
            cache.discard_scratch(fresh[1])
        if stream is not None:
            stream.drop()
        raise


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
        for rel, entries in cache.cached_entries(store.path, stamps).items():
            out.setdefault(rel, (entries, None))
    for rel in rels:
        if rel not in out:
            out[rel] = read_file(store, rel)
    return out
