"""Reading many scope files into rows: a refresh's changed files, or a whole store when the index is
built from scratch (a first recall, a fresh clone, `reindex`, a backend switch).

Each file is parsed (`reading`), its texts embedded, and made into its rows and its index.sqlite
record. Many files are read by a pool of forked workers, each taking a batch of files through all
of it and handing back the records (bytes: entries as compressed JSON, vectors as one blob), which
the parent turns into rows as a load from index.sqlite does. A batch's records go through a file
in memory (/dev/shm), the pool's pipe carrying only its number: 2 MB a batch through the pipe kept
the pool's result thread reading and its worker thread waking on every chunk, a fifth of the
parent's time at 100,000 entries. The spool holds at most `SPOOL_AHEAD` batches (the workers wait
for the parent beyond that: 64 MB of /dev/shm in a Docker container), its folder is named for the
build's process, and a build first clears the spools of builds that died before they could (a killed
process). The pool is used only where a text's
vector does not depend on the batch it is embedded in (`Embedder.batch_free`: the static and
hashing backends), so the index it builds is the one a single process builds, bit for bit; and
only in a process with no other thread (a fork copies one thread, and locks another one held).
"""
from __future__ import annotations

import gc
import mmap
import os
import pickle
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from itertools import repeat

import numpy as np

from ..semantics.embed import Embedder
from ..store.store import Store
from . import cache
from .reading import read_file
from .records import Entry, FileRows, file_rows, text_hashes

Progress = Callable[[int, int], None]
POOL_FROM = 1_000  # files: below this, starting the workers costs more than they save
POOL_BATCH = 100   # files a worker takes at a time (250 measured no faster)
WORKERS = 2
SPOOL_AHEAD = 16   # batches handed out before the parent has taken theirs (1.4 MB each at 100,000 entries)
SPOOL_PREFIX = "whetstone-build-"
# A spool untouched this long (s) whose process is gone was left by a killed build. The age guards a
# build in another pid namespace sharing the folder: its pid looks dead here, but it writes all along.
SPOOL_STALE = 600


class Reuse:
    """The vectors index.sqlite holds in the records of some files (those read again, and those
    removed: a compact merges a scope's files into one), for a build to take instead of embedding
    their texts again (`take`), and which of them the new records took: the workers mark them in
    a page they share with the parent, so that only the others are kept in `vectors` (`unused`)."""

    def __init__(self, db: sqlite3.Connection, embedder: Embedder, paths: list[str],
                 known: dict[tuple[str, str], list[Entry]] | None = None) -> None:
        self.identity = embedder.identity
        self.row, self.table = cache.held_vectors(db, embedder, paths, known)
        self._page = mmap.mmap(-1, max(1, len(self.table)))  # shared: a forked worker's marks are seen here
        self.taken = np.frombuffer(self._page, np.uint8)

    def take(self, texts: list[str]) -> tuple[list[int], np.ndarray, list[int]]:
        """(the places in `texts` of those held here, their vectors, the places of the others)."""
        row = self.row
        hits, at, others = [], [], []
        for i, text in enumerate(texts):
            r = row.get(text)
            if r is None:
                others.append(i)
            else:
                hits.append(i)
                at.append(r)
        rows = np.array(at, np.intp)
        self.taken[rows] = 1
        return hits, self.table[rows], others

    def unused(self) -> list[tuple[str, str, bytes]]:
        """`vectors` rows (backend, hash, vector) for the texts held here that no new record took."""
        left = [(text, r) for text, r in self.row.items() if not self.taken[r]]
        return list(zip(repeat(self.identity), text_hashes([text for text, _ in left]),
                        [self.table[r].tobytes() for _, r in left]))


class Written:
    """The entries a writer knows for the files it has just written (compact: the snapshot's, with
    its changes), by the bytes written. A refresh takes them for a file that still holds exactly
    those bytes instead of parsing it (`take`: the bytes, not the stamp, so an edit within the
    stamp's granularity is parsed), and `taken` says which it took. `read` maps (path, stamp) to
    the entries the writer decoded of files before it wrote them: the records those files had are
    not decoded again to take their vectors (`Reuse`)."""

    def __init__(self, files: dict[str, tuple[bytes, list[Entry]]],
                 read: dict[tuple[str, str], list[Entry]] | None = None) -> None:
        self.files = files
        self.read = read or {}
        self.taken: dict[str, list[Entry]] = {}

    def take(self, store: Store, paths: list[str]) -> dict[str, list[Entry]]:
        """The entries of those of `paths` that hold the bytes written (added to `taken`)."""
        found = {}
        for path in paths:
            hit = self.files.get(path)
            if hit is None:
                continue
            try:
                if (store.path / path).read_bytes() != hit[0]:
                    continue
            except OSError:
                continue
            found[path] = hit[1]
        self.taken.update(found)
        return found


def files(store: Store, embedder: Embedder, db: sqlite3.Connection, paths: list[str], stamps: dict[str, str],
          reuse: Reuse, progress: Progress | None = None, pool: bool | None = None,
          given: dict[str, list[Entry]] | None = None) -> Iterator[list[tuple[str, FileRows, tuple]]]:
    """(path, rows, index.sqlite record) for every path, in batches, in the order of `paths`; a
    file with a warning has claimed the ids its text still holds. `progress(done, total)` counts
    files. `pool` forces the workers on or off (None: where they pay). A text `reuse` holds is
    not embedded again; a file `given` holds entries for is not parsed (`Written.take`)."""
    if pool is None:
        pool = len(paths) >= POOL_FROM and _can_fork(embedder)
    yield from (_pooled if pool else _serial)(store, embedder, db, paths, stamps, _Ticker(progress, len(paths)), reuse,
                                              given or {})


def _read(store: Store, path: str, given: dict[str, list[Entry]] | None) -> tuple[list[Entry], str | None]:
    """`read_file`, or the entries handed over for the file."""
    found = given.get(path) if given else None
    return (list(found), None) if found is not None else read_file(store, path)


def _can_fork(embedder: Embedder) -> bool:
    import multiprocessing  # here: a process that reads a fresh index (a CLI recall) never pays its 10 ms

    return (getattr(embedder, "batch_free", False) and threading.active_count() == 1
            and "fork" in multiprocessing.get_all_start_methods() and _cpus() > 1)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Ticker:
    """`progress(done, total)`, called only when `done` grows."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, done: int) -> None:
        done = min(done, self.total)
        if self.progress is not None and done > self.done:
            self.done = done
            self.progress(done, self.total)


def _serial(store: Store, embedder: Embedder, db: sqlite3.Connection, paths: list[str], stamps: dict[str, str],
            tick: _Ticker, reuse: Reuse, given: dict[str, list[Entry]]) -> Iterator[list[tuple[str, FileRows, tuple]]]:
    """In this process: reading is the first half of the work, embedding (texts the index does not
    hold yet, all at once) the second."""
    half = len(paths) // 2
    parsed = {}
    for i, path in enumerate(paths, 1):
        parsed[path] = _read(store, path, given)
        tick(i * half // len(paths))
    texts = [e.body for entries, _ in parsed.values() for e in entries]
    texts += [e.scope for entries, _ in parsed.values() for e in entries]
    texts = list(dict.fromkeys(texts))
    hits, matrix, others = reuse.take(texts)
    vectors = cache.vectors_for(db, embedder, [texts[i] for i in others],
                                lambda done, total: tick(half + (len(paths) - half) * done // total))
    vectors.update(zip([texts[i] for i in hits], matrix))
    tick(len(paths))
    yield [_made(store, embedder, path, stamps[path], entries, warning, vectors)
           for path, (entries, warning) in parsed.items()]


def _made(store: Store, embedder: Embedder, path: str, stamp: str, entries: list, warning: str | None,
          vectors: dict) -> tuple[str, FileRows, tuple]:
    rows = file_rows(stamp, entries, warning, vectors, embedder.dim)
    if warning:
        cache.claim_from_disk(store.path, path, rows)
    return path, rows, cache.file_record(path, rows, embedder)


# What the workers work on (the batches of paths, by number), set in the parent before it forks
# them (so nothing is pickled), the folder they leave each batch's records in, the vectors
# they need not embed again, and the entries of files they need not parse.
_JOB: tuple[Store, Embedder, dict[str, str], list[list[str]], str | None, Reuse, dict[str, list[Entry]]] | None = None


def _pooled(store: Store, embedder: Embedder, db: sqlite3.Connection, paths: list[str], stamps: dict[str, str],
            tick: _Ticker, reuse: Reuse, given: dict[str, list[Entry]]) -> Iterator[list[tuple[str, FileRows, tuple]]]:
    global _JOB
    import multiprocessing  # here, as in _can_fork (and the spool's modules: 4 ms)
    import shutil
    import tempfile

    from ..format.blocks import parse  # read_file imports it on first use: once here, not in each worker
    parse("")
    embedder.embed(["warm up"])  # and a backend's table: the workers share its pages
    batches = [paths[i:i + POOL_BATCH] for i in range(0, len(paths), POOL_BATCH)]
    done = 0
    collecting = gc.isenabled()
    # No collection while a build makes its many objects (they hold no cycles; a full collection
    # each time they pass the threshold took a tenth of the parent's time), and none in the
    # workers, which inherit that; what the parent held before is frozen, so a worker that does
    # collect never touches (and copies) those pages.
    gc.disable()
    gc.freeze()
    spool = None
    bulk = getattr(embedder, "bulk", None)  # a backend's faster tables for a big build, shared by the workers
    ahead = threading.Semaphore(SPOOL_AHEAD)  # released as the parent takes each batch

    def numbers() -> Iterator[int]:  # run by the pool's task thread: it waits here, not the workers' output
        for number in range(len(batches)):
            ahead.acquire()
            yield number

    try:
        folder = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
        _sweep(folder)
        try:
            spool = tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", dir=folder)
        except OSError:  # nowhere to leave them: the records come through the pool's pipe
            pass
        _JOB = (store, embedder, stamps, batches, spool, reuse, given)
        with bulk() if bulk else nullcontext(), \
                multiprocessing.get_context("fork").Pool(min(WORKERS, _cpus())) as workers:
            gc.unfreeze()
            dim = embedder.dim
            try:
                for answer in workers.imap(_work, numbers()):
                    records = _handed(spool, answer)
                    ahead.release()
                    done += len(records)
                    tick(done)
                    yield [(record[0], cache.rows_of(record, dim), record) for record in records]
            finally:  # a build cut short: the task thread must not wait for batches nobody takes
                ahead.release(len(batches) + 1)
    finally:
        _JOB = None
        if spool is not None:
            shutil.rmtree(spool, ignore_errors=True)
        gc.unfreeze()
        if collecting:
            gc.enable()


def _sweep(folder: str) -> None:
    """Remove the spools builds left in `folder` when killed: those whose process is gone and that
    nothing has written to for SPOOL_STALE seconds."""
    import shutil
    import time

    try:
        names = [name for name in os.listdir(folder) if name.startswith(SPOOL_PREFIX)]
    except OSError:
        return
    for name in names:
        owner = name[len(SPOOL_PREFIX):].split("-", 1)[0]
        if not owner.isdigit() or int(owner) == os.getpid():
            continue
        path = os.path.join(folder, name)
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:  # (a process of another user raises PermissionError: alive)
            try:
                if time.time() - os.stat(path).st_mtime > SPOOL_STALE:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                pass
        except OSError:
            pass


def _work(number: int) -> int | list[tuple]:
    """In a worker: batch `number`'s records, left in the spool for the parent (`_handed`), its
    number the answer; the records themselves when there is no spool or it cannot take them (a full /dev/shm)."""
    store, embedder, stamps, batches, spool, reuse, given = _JOB
    records = _records(store, embedder, stamps, batches[number], reuse, given)
    if spool is None:
        return records
    name = os.path.join(spool, str(number))
    try:
        with open(name, "wb") as out:
            pickle.dump(records, out, pickle.HIGHEST_PROTOCOL)
    except OSError:
        try:
            os.unlink(name)
        except OSError:
            pass
        return records
    return number


def _handed(spool: str, answer: int | list[tuple]) -> list[tuple]:
    """A worker's records for a batch: taken out of the spool, or as it sent them."""
    if not isinstance(answer, int):
        return answer
    name = os.path.join(spool, str(answer))
    with open(name, "rb") as given:
        records = pickle.load(given)
    os.unlink(name)
    return records


def _records(store: Store, embedder: Embedder, stamps: dict[str, str], paths: list[str],
             reuse: Reuse, given: dict[str, list[Entry]] | None = None) -> list[tuple]:
    """A batch of files read, embedded (texts in first-seen order, as a process embedding them
    alone would meet them; those `reuse` holds taken from it, the others embedded at once: a
    batch-free backend gives a text the same vector in any batch) and made into records, all at
    once (`cache.file_records`) but for a file with a warning, which claims its ids from the disk."""
    parsed = [(path, *_read(store, path, given)) for path in paths]
    texts = list(dict.fromkeys([e.body for _, entries, _ in parsed for e in entries]
                               + [e.scope for _, entries, _ in parsed for e in entries]))
    matrix = np.empty((len(texts), embedder.dim), np.float32)
    hits, vectors, others = reuse.take(texts)
    matrix[np.array(hits, np.intp)] = vectors
    if others:
        matrix[np.array(others, np.intp)] = embedder.embed([texts[i] for i in others])
    records = dict.fromkeys(paths)
    clean = [(path, stamps[path], entries) for path, entries, warning in parsed if not warning]
    records.update((record[0], record) for record in cache.file_records(clean, texts, matrix, embedder))
    if len(clean) < len(parsed):
        vectors = dict(zip(texts, matrix))
        for path, entries, warning in parsed:
            if warning:
                records[path] = _made(store, embedder, path, stamps[path], entries, warning, vectors)[2]
    return list(records.values())
