"""index.sqlite (SPEC §5): the derived, disposable cache of a store's parsed entries and vectors.

Per scope file it keeps the parsed entries, their vectors, and the file's share of each scope (the
sum of its entry vectors and the scope phrase's vector), so loading a store is one row per file.
Each vector is stored once: in its file's row while the file holds its text, and by (backend
identity, hash of the text) once the text has left it, so an edit, an undo, a move or a backend
switch embeds only texts that have no vector yet. The file is shared by every process (WAL mode):
nobody waits on it longer than one short save, and a process that cannot write it (busy, a
read-only store, a newer whetstone's schema) keeps its result in memory and leaves the file alone.
A big store's build from scratch writes a file of its own instead, put in place once complete
(`scratch`, `install`).
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
import zlib
from collections.abc import Callable
from itertools import repeat
from pathlib import Path

import numpy as np

from ..format.layout import scope_key
from ..semantics.embed import Embedder
from . import image
from .records import COLUMNS, Entry, FileRows, day_number, decode, id_key, text_hashes, texts_of
from .snapshot import Snapshot

EMBED_BATCH = 1024  # texts per embedding call: a first build of 100,000 entries stays small in memory
SCHEMA = 7  # 7: an entry's `differs` ids; 6: vectors stored once (in `files`; `vectors` keeps those whose
# text left); no scopes table
DDL = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(path TEXT PRIMARY KEY, stamp TEXT NOT NULL, warning TEXT,
    backend TEXT NOT NULL, n INTEGER NOT NULL, scopes_n INTEGER NOT NULL, entries TEXT NOT NULL,
    scopes TEXT NOT NULL, columns BLOB NOT NULL, vectors BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS vectors(backend TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS vectors_key ON vectors(backend, hash);
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


SCRATCH_FROM = 1_000  # files: a bigger store's first build is written into a file of its own (`scratch`)
SCRATCH = "index.sqlite-build."  # + the building process's pid (the stores' .gitignore matches index.sqlite*)
SCRATCH_STALE = 600  # s: a dead build's file untouched this long is removed (see build.SPOOL_STALE)


def scratch(root: Path) -> tuple[sqlite3.Connection, Path] | None:
    """A new, empty index in a file of this process's own, for a build from scratch: no rollback
    journal and no syncs (a third of the parent's work in a build of 100,000 entries went to the
    WAL), which is safe only because nobody else opens it and a build that fails or is killed
    leaves it unused (`sweep_scratch` removes it later). `install` puts it in place once complete.
    None when it cannot be made (a read-only store): the caller connects as usual."""
    sweep_scratch(root)
    path = root / f"{SCRATCH}{os.getpid()}"
    db = None
    try:
        path.unlink(missing_ok=True)  # a dead process's with the same pid: never reused
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        db.executescript(DDL)
        db.execute(f"PRAGMA user_version={SCHEMA}")
    except (OSError, sqlite3.Error):
        if db is not None:
            db.close()
        _unlink(path)
        return None
    return db, path


def install(db: sqlite3.Connection, path: Path, root: Path) -> bool:
    """Put a complete `scratch` index in place as index.sqlite, in the mode every other process
    opens it in (WAL), synced to disk first: the rename is the last step, so no process ever opens
    a half index. When another process has put a good index there meanwhile (it built at the same
    time, or saves into one it made), that one stays and this one is dropped: its work is not lost,
    and this process's snapshot is the same. Closes `db`; False when the file was dropped."""
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.close()
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        target = root / "index.sqlite"
        try:
            os.link(path, target)  # only where there is none: never over another process's
        except FileExistsError:
            if _holds_files(target):
                return False
            os.replace(path, target)  # an empty one (a process that opened it to wait, or died creating it)
        return True
    except (OSError, sqlite3.Error):
        return False
    finally:
        db.close()
        discard_scratch(path)


def discard_scratch(path: Path) -> None:
    """Remove a `scratch` file (put in place, or of a build that failed) and what sqlite kept beside it."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        _unlink(Path(f"{path}{suffix}"))


def _holds_files(path: Path) -> bool:
    try:
        other = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return other.execute("SELECT 1 FROM files LIMIT 1").fetchone() is not None
        finally:
            other.close()
    except sqlite3.Error:
        return False


def sweep_scratch(root: Path) -> None:
    """Remove the `scratch` files of builds that were killed, and the images they were writing
    (`image.Stream`): their process is gone and nothing has written to them for SCRATCH_STALE
    seconds (a build in another pid namespace looks dead here)."""
    images = f"{image.NAME}."
    try:
        names = [name for name in os.listdir(root) if name.startswith(SCRATCH)
                 or name.startswith(images) and name.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        owner = (name[len(SCRATCH):].split("-", 1)[0] if name.startswith(SCRATCH)
                 else name[len(images):-len(".tmp")])
        if not owner.isdigit() or int(owner) == os.getpid():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:  # (a process of another user raises PermissionError: alive)
            try:
                if time.time() - os.stat(root / name).st_mtime > SCRATCH_STALE:
                    _unlink(root / name)  # (its -wal or -shm, if any, in their own turn)
            except OSError:
                pass
        except OSError:
            pass


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


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
    for record in db.execute(
            "SELECT path, stamp, warning, backend, n, scopes_n, entries, scopes, columns, vectors FROM files "
            "WHERE backend=? ORDER BY path", (embedder.identity,)):
        path = record[0]
        if stamps.get(path) != record[1]:
            continue
        rows = rows_of(record, dim)
        if rows.warning:
            claim_from_disk(root, path, rows)
        chunk.append((path, rows))
        if len(chunk) == 256:
            snap.add_files(chunk)
            chunk = []
    snap.add_files(chunk)
    return snap


def held(db: sqlite3.Connection, embedder: Embedder, stamps: dict[str, str], paths: list[str]) -> dict[str, FileRows]:
    """The rows of those of `paths` whose record here is this backend's, carries the stamp the file
    has on disk (`stamps`) and no warning (a broken file is read from HEAD, which may have moved):
    what a load from the index would give them, without reading or embedding anything."""
    found: dict[str, FileRows] = {}
    for i in range(0, len(paths), 500):
        chunk = paths[i:i + 500]
        for record in db.execute(
                "SELECT path, stamp, warning, backend, n, scopes_n, entries, scopes, columns, vectors FROM files "
                f"WHERE backend=? AND warning IS NULL AND path IN ({','.join('?' * len(chunk))})",
                (embedder.identity, *chunk)):
            if stamps.get(record[0]) == record[1]:
                found[record[0]] = rows_of(record, embedder.dim)
    return found


def rows_of(record: tuple, dim: int) -> FileRows:
    """A file's rows from its `files` record (as `file_record` makes it): the entries stay JSON
    text, the entry vectors a view of the record's blob until the snapshot copies them."""
    path, stamp, warning, _, n, s, entries, scope_json, columns, blob = record
    scope_list = [tuple(x) for x in json.loads(scope_json)]
    ints = np.frombuffer(columns, np.int64)
    flat = np.frombuffer(blob, np.float32).reshape(-1, dim)
    top = {"L": int(ints[-2]), "I": int(ints[-1])}
    return FileRows(stamp, scope_list, flat[n:n + s].copy(), flat[n + s:n + 2 * s].copy(),
                    ints[:COLUMNS * n].reshape(COLUMNS, n), top, warning, raw=entries, vectors=flat[:n])


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


def save(db: sqlite3.Connection, embedder: Embedder, removed: list[str], records: list[tuple],
         kept: list[tuple[str, str, bytes]] | None = None) -> bool:
    """Write what one refresh learned (or a part of it), in one transaction; skipped (False) when
    another process holds the index for writing past a short wait, or the file cannot be written.

    A vector is stored once: in its file's record while a file holds its text, else (the text was
    edited away, its file removed, or the store switched backends) in `vectors`, so an undo, a
    move or a switch back embeds nothing again. `kept`, when given, is what the caller worked out
    itself to keep in `vectors` of this backend's records being replaced or removed (a build that
    took their vectors: `build.Reuse.unused`), and only other backends' records are retired here."""
    try:
        db.execute("PRAGMA busy_timeout=1000")
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return False
    try:
        _retire(db, embedder.identity, {**{path: None for path in removed}, **{r[0]: r[6] for r in records}},
                own=kept is None)
        if kept:
            db.executemany("INSERT OR IGNORE INTO vectors VALUES(?,?,?)", kept)
        db.executemany("DELETE FROM files WHERE path=?", [(path,) for path in removed])
        db.executemany("INSERT OR REPLACE INTO files VALUES(?,?,?,?,?,?,?,?,?,?)", records)
        db.execute("COMMIT")
    except sqlite3.OperationalError:  # read-only after all, or the disk is full: the index is only a cache
        if db.in_transaction:
            db.execute("ROLLBACK")
        return False
    return True


def _retire(db: sqlite3.Connection, identity: str, replaced: dict[str, bytes | None], own: bool = True) -> None:
    """Keep in `vectors` the vectors of the records about to be replaced (path -> the new record's
    entries, None when removed) whose texts the new record no longer holds (those of this
    backend's records only when `own`).

    Only the texts of the records are read (`texts_of`), never whole entries: a compact at 100,000
    entries retires some 8,000 records, and building their `Entry`s took a third of the save."""
    if not replaced or db.execute("SELECT 1 FROM files LIMIT 1").fetchone() is None:
        return  # a first build replaces nothing
    paths = list(replaced)
    kept: list[tuple[str, str, bytes]] = []
    which = "" if own else "backend!=? AND "
    for i in range(0, len(paths), 500):
        chunk = paths[i:i + 500]
        for path, backend, raw, scope_json, n, blob in db.execute(
                f"SELECT path, backend, entries, scopes, n, vectors FROM files WHERE {which}path IN "
                f"({','.join('?' * len(chunk))})", ([] if own else [identity]) + chunk):
            new = replaced[path]
            if backend == identity and new == raw:
                continue
            texts, rows = _old_vectors(raw, scope_json, n, blob)
            if backend == identity and new is not None:
                bodies, scopes = texts_of(new)
                still = {*bodies, *scopes}
                gone = [i for i, text in enumerate(texts) if text not in still]
                texts, rows = [texts[i] for i in gone], rows[gone]
            kept += zip(repeat(backend), text_hashes(texts), [row.tobytes() for row in rows])
    db.executemany("INSERT OR IGNORE INTO vectors VALUES(?,?,?)", kept)


def _old_vectors(raw: bytes, scope_json: str, n: int, blob: bytes,
                 bodies: list[str] | None = None) -> tuple[list[str], np.ndarray]:
    """Every body and scope phrase a `files` record holds, and their vectors as rows of one float32
    matrix in the same order. A record holds the bodies' vectors, then its scopes' sums, then the
    scope phrases' (the width is the record's own: another backend's may differ). `bodies`, when
    given, are the record's entries' bodies, in order (not decoded from `raw` again)."""
    if bodies is None:
        bodies, _ = texts_of(raw)
    phrases = [scope[2] for scope in json.loads(scope_json)]
    s = len(phrases)
    if not n + s:
        return [], np.zeros((0, 0), np.float32)
    flat = np.frombuffer(blob, np.float32).reshape(n + 2 * s, -1)
    return bodies + phrases, np.concatenate((flat[:n], flat[n + s:]))


def file_record(path: str, rows: FileRows, embedder: Embedder) -> tuple:
    """The `files` row for a file's rows (taken before the snapshot adopts their vectors)."""
    blob = b"".join(a.astype(np.float32).tobytes() for a in (rows.vectors, rows.sums, rows.phrases))
    top = np.array([rows.top["L"], rows.top["I"]], np.int64)
    return (path, rows.stamp, rows.warning, embedder.identity, rows.n, len(rows.scopes), rows.text(),
            json.dumps(rows.scopes, ensure_ascii=False), rows.columns.tobytes() + top.tobytes(), blob)


def file_records(files: list[tuple[str, str, list[Entry]]], texts: list[str], matrix: np.ndarray,
                 embedder: Embedder) -> list[tuple]:
    """`file_record(path, file_rows(stamp, entries, None, vectors, dim), embedder)` for each of many
    files (path, stamp, entries) that parsed without a warning, where `matrix[i]` is the vector of
    `texts[i]` (every body and scope phrase, each once): the same records, byte for byte, made with
    one gather and one scatter-add for the whole batch instead of a `FileRows` and a dozen numpy
    calls per file. Each scope's sum is added up in entry order in float32, as `file_rows` does."""
    dim, identity = embedder.dim, embedder.identity
    # json.dumps(x, ensure_ascii=False), byte for byte, without a new encoder each call (nothing here is circular)
    encode = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode
    row_of = dict(zip(texts, range(len(texts))))
    keys: dict[str, str] = {}
    bodies: list[int] = []
    phrase_rows: list[int] = []
    slots: list[int] = []  # per entry: its scope's place among the batch's file scopes
    ints: list[int] = []   # per entry: recurrence, last_seen, scope index, id key, always
    made = []
    for path, stamp, entries in files:
        scopes: dict[tuple[str, str], int] = {}
        display: list[tuple[str, str, str]] = []
        base = len(phrase_rows)
        top = {"L": 0, "I": 0}
        for e in entries:
            key = keys.get(e.scope)
            if key is None:
                key = keys[e.scope] = scope_key(e.scope)
            at = scopes.get((e.kind, key))
            if at is None:
                at = scopes[(e.kind, key)] = len(display)
                display.append((e.kind, key, e.scope))
                phrase_rows.append(row_of[e.scope])
            bodies.append(row_of[e.body])
            slots.append(base + at)
            number = id_key(e.id)
            ints += (e.recurrence, day_number(e.last_seen), at, number, e.always)
            if top[e.id[0]] < number >> 1:
                top[e.id[0]] = number >> 1
        made.append((path, stamp, entries, display, top))
    vectors = matrix[np.array(bodies, np.intp)].astype(np.float32, copy=False)
    sums = _sums(np.array(slots, np.intp), vectors, len(phrase_rows))
    phrases = matrix[np.array(phrase_rows, np.intp)].astype(np.float32, copy=False)
    columns = np.array(ints, np.int64).reshape(-1, COLUMNS).T
    out = []
    at = scope_at = 0
    for path, stamp, entries, display, top in made:
        n, s = len(entries), len(display)
        blob = b"".join((vectors[at:at + n].tobytes(), sums[scope_at:scope_at + s].tobytes(),
                         phrases[scope_at:scope_at + s].tobytes()))
        raw = zlib.compress(encode(entries).encode(), 1)  # as FileRows.text()
        out.append((path, stamp, None, identity, n, s, raw, encode(display),
                    columns[:, at:at + n].tobytes() + np.array([top["L"], top["I"]], np.int64).tobytes(), blob))
        at, scope_at = at + n, scope_at + s
    return out


def _sums(slots: np.ndarray, vectors: np.ndarray, count: int) -> np.ndarray:
    """The sum of the vectors of each slot, added in float32 in the order the rows come, from zero:
    `file_rows`'s additions exactly. A step adds every slot's k-th row at once (np.add.at, which
    would do the same one row at a time, took a third of the records' time)."""
    sums = np.zeros((count, vectors.shape[1]), np.float32)
    if not len(slots):
        return sums
    order = np.argsort(slots, kind="stable")
    members = np.bincount(slots, minlength=count)
    first = np.cumsum(members) - members  # each slot's first place in `order`
    rank = np.empty(len(slots), np.intp)
    rank[order] = np.arange(len(slots)) - np.repeat(first, members)
    by_rank = np.argsort(rank, kind="stable")  # rows by their rank within their slot
    steps = np.cumsum(np.bincount(rank))
    start = 0
    for stop in steps.tolist():
        rows = by_rank[start:stop]
        sums[slots[rows]] += vectors[rows]  # the slots of one step are distinct
        start = stop
    return sums


def vectors_for(db: sqlite3.Connection, embedder: Embedder, texts: list[str],
                progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """Vectors for `texts`, by text: from `vectors` where the index keeps them (texts no file holds
    any more) and embedded otherwise (`progress(done, total)` as texts are embedded). What the
    records of files hold a build takes first (`held_vectors`)."""
    wanted = dict(zip(text_hashes(texts), texts))
    found: dict[str, np.ndarray] = {}
    if db.execute("SELECT 1 FROM vectors WHERE backend=? LIMIT 1", (embedder.identity,)).fetchone():
        hashes = list(wanted)
        for i in range(0, len(hashes), 500):
            chunk = hashes[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for h, vec in db.execute(f"SELECT hash, vec FROM vectors WHERE backend=? AND hash IN ({marks})",
                                     (embedder.identity, *chunk)):
                found[wanted[h]] = np.frombuffer(vec, np.float32)
    missing = [t for t in wanted.values() if t not in found]
    if missing:
        found.update(zip(missing, embed_all(missing, embedder, progress)))
    return found


def held_vectors(db: sqlite3.Connection, embedder: Embedder, paths: list[str],
                 known: dict[tuple[str, str], list[Entry]] | None = None) -> tuple[dict[str, int], np.ndarray]:
    """Every body and scope phrase the records of `paths` hold for this backend, and their vectors:
    (text -> its row, the rows as one float32 matrix). A build's workers take from it the vectors
    of the texts the files being read again (or removed: a compact merges a scope's files into one)
    held before, instead of embedding them again: the same vectors, bit for bit, as this backend
    gives. `known` maps (path, stamp) to the entries a caller has decoded already (compact, of the
    files it rewrote): a record with that stamp and as many entries is not decompressed again."""
    row: dict[str, int] = {}
    parts: list[np.ndarray] = []
    count = 0
    known = known or {}
    if paths and db.execute("SELECT 1 FROM files LIMIT 1").fetchone() is not None:
        for i in range(0, len(paths), 500):
            chunk = paths[i:i + 500]
            for path, stamp, raw, scope_json, n, blob in db.execute(
                    f"SELECT path, stamp, entries, scopes, n, vectors FROM files WHERE backend=? AND path IN "
                    f"({','.join('?' * len(chunk))})", (embedder.identity, *chunk)):
                found = known.get((path, stamp))
                bodies = [e.body for e in found] if found is not None and len(found) == n else None
                texts, rows = _old_vectors(raw, scope_json, n, blob, bodies)
                if texts:
                    parts.append(rows)
                for text in texts:
                    row.setdefault(text, count)
                    count += 1
    return row, (np.concatenate(parts) if parts else np.zeros((0, embedder.dim), np.float32))


def embed_all(texts: list[str], embedder: Embedder,
              progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """In batches of EMBED_BATCH (a backend's working memory grows with its batch), with
    `progress(done, total)` after each."""
    if len(texts) <= EMBED_BATCH:
        matrix = embedder.embed(texts)
    else:
        parts = []
        for i in range(0, len(texts), EMBED_BATCH):
            parts.append(embedder.embed(texts[i:i + EMBED_BATCH]))
            if progress is not None:
                progress(i + len(parts[-1]), len(texts))
        return np.concatenate(parts)
    if progress is not None:
        progress(len(texts), len(texts))
    return matrix
