"""index.sqlite-snapshot: a store's whole snapshot in one file that a new process maps instead of
decoding (SPEC §5: derived and disposable, like index.sqlite beside it).

Loading 100,000 entries from index.sqlite means reading 100 MB of vector blobs, copying them into
the matrix and rebuilding every file's rows in Python: half a second. The image holds the same
snapshot as arrays (vectors, their compact copies, the integer columns, the scopes' phrases and
centroids, every file's share, each file's name and stamp as text) behind a small JSON header
saying where each lies, so a load maps the file (copy on write: a process that patches its
snapshot writes private pages, never the file) and builds only the small Python structures.
Pages are read when something touches them.

It is keyed like the cache: by format version, backend identity and dimension; and each file in it
carries its stamp, so a file changed since the image was written is simply patched by the refresh
(`freshness._refresh`) as in a long-lived process. A process that loaded without an image, or
patched much of one, writes a new one (atomically: a temporary file and a rename). A damaged,
foreign or truncated image is ignored and replaced.
"""
from __future__ import annotations

import json
import mmap
import os
from pathlib import Path

import numpy as np

from ..base.heap import no_collection
from .records import COLUMNS
from .columns import SCOPE_PAIR
from .snapshot import FileTable, Snapshot

NAME = "index.sqlite-snapshot"  # matched by the stores' .gitignore (index.sqlite*)
MAGIC = b"whetstone snapshot\n"
VERSION = 10  # 10: an entry's `differs` ids (in its file's entries); 9: each row's head (`scan.heads`) and the basis it lies in; 8: the scopes' compact copies in
# bfloat16 (uint16 bits), no longer float16; 7: a scope's centroid and phrase side by side (`scope_pairs`)
ALIGN = 64
HEADER_ALIGN = 4096  # the header's room: whole pages (see `Stream`)
WRITE_BUFFERS = 512  # arrays a `Stream` writes in one call (Linux takes at most 1,024, IOV_MAX)
# float32 matrices read with pread, never through the mapping (see Rows): a recall reads a few
# thousand rows of them, and the scan reads only their compact copies. A scope's two vectors lie
# side by side (scopes × 2 × dim, `SCOPE_PAIR`'s order), so one read gets both: recall wants both
# of every scope it scores, and reading them apart took 530 reads a recall at 100,000 entries.
READ_NOT_MAPPED = ("vectors", "scope_pairs")
IMAGE_FROM = 5_000  # entries: a smaller store loads from index.sqlite as fast
REWRITE_SHARE = 0.1  # rewrite an image once a tenth of its files had to be patched
SPARE, SPARE_MIN = 8, 256  # room for an eighth more rows and scopes (at least 256) in the file
DENSE, DENSE_MIN = 16, 256  # rows asked for at least one in 16 (and 256 or more): read in chunks
CHUNK_BYTES = 1 << 20  # bytes per chunk read (1,024 rows of 256-dimensional vectors, 512 scope pairs), freed
# after: sized in rows, a chunk of scope pairs took 8 MB, the peak of a long-lived process 5-7 MB higher


def read(root: Path, identity: str, dim: int) -> Snapshot | None:
    """The snapshot the image at `root` holds, or None when there is none this process can use."""
    try:
        with open(root / NAME, "rb") as file:
            if os.fstat(file.fileno()).st_size < len(MAGIC) + 8:
                return None
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
            readers = {name: Rows(os.dup(file.fileno())) for name in READ_NOT_MAPPED}
            texts = Texts(os.dup(file.fileno()))
    except (OSError, ValueError):
        return None
    try:
        with no_collection():  # tens of thousands of small objects, none of them garbage
            snap, layout = _restore(mapped, texts, identity, dim)
    except (ValueError, KeyError, TypeError, IndexError, OSError):
        snap = None
    if snap is not None:
        for name, reader in readers.items():
            offset, _, shape = layout[name]
            reader.place(offset, snap.size if name == "vectors" else len(snap.scopes), shape[1:])
        snap.readers = readers
        if hasattr(mmap, "MADV_DONTNEED"):
            snap.release_codes = CodePages(mapped, snap.codes.base, layout["codes"][0], snap.size, dim)
    return snap


class CodePages:
    """Gives the kernel back the pages of 8-bit rows the scan has just read (madvise DONTNEED):
    the scan reads every row on every recall, and leaving them mapped keeps 25 MB resident in a
    long-lived process at 100,000 entries; mapping them again from the page cache costs a few
    hundred microseconds a scan. Only the rows the image holds, which nothing writes, and only
    whole pages of them: a row appended since lives in the mapping's private pages, which
    DONTNEED would throw away."""

    def __init__(self, mapped: mmap.mmap, base: np.ndarray, offset: int, rows: int, dim: int) -> None:
        self.mapped, self.base, self.offset, self.rows, self.dim = mapped, base, offset, rows, dim
        # Mapping them again is cheap only when the page cache holds the file in large folios (a
        # fault maps a whole folio): as the image's writer leaves it, but once the kernel has
        # evicted the pages, faults read them back in 4 KB pages unless the mapping asks for huge
        # ones (THP's `madvise` mode): at 100,000 entries 340 faults a scan instead of 62, 7.1
        # against 5.0-5.5 ms of the scan's CPU. Only the page cache's folios change, not what
        # is resident once the scan gives the pages back.
        start, end = self._pages(0, rows)
        if hasattr(mmap, "MADV_HUGEPAGE") and end > start:
            try:
                mapped.madvise(mmap.MADV_HUGEPAGE, start, end - start)
            except (OSError, ValueError):
                pass

    def _pages(self, a: int, b: int) -> tuple[int, int]:
        """The whole pages of the mapping that rows [a, b) of the image cover."""
        page = mmap.PAGESIZE
        return (-(-(self.offset + a * self.dim) // page) * page,
                (self.offset + min(b, self.rows) * self.dim) // page * page)

    def __call__(self, codes: np.ndarray, a: int, b: int) -> None:
        """Rows [a, b) of `codes` were just read."""
        if codes.base is not self.base:
            return  # grown into memory of its own: not the mapping any more
        start, end = self._pages(a, b)
        if end > start:
            try:
                self.mapped.madvise(mmap.MADV_DONTNEED, start, end - start)
            except (OSError, ValueError):
                self.base = None  # the kernel said no: stop asking


class Rows:
    """Float32 rows read from the image with pread, not through the mapping: touching a mapped
    row maps the pages around it too (the kernel's fault-around), so scoring a few thousand
    scattered rows exactly would make most of the matrix resident in a long-lived process."""

    def __init__(self, fd: int) -> None:
        self.fd, self.offset, self.count, self.width, self.shape = fd, 0, 0, 0, ()

    def place(self, offset: int, count: int, shape) -> None:
        """The matrix lies at `offset`, `count` rows of float32 arrays of `shape` each."""
        self.offset, self.count, self.shape = offset, count, tuple(shape)
        self.width = 4 * int(np.prod(self.shape))

    def read(self, rows: np.ndarray, out: np.ndarray) -> None:
        """Rows `rows` (ascending, all below `count`) into `out`: one read per run of neighbours,
        or, when they lie dense (a capture's duplicate check in a store of look-alike rules asks
        for thousands), whole chunks read into a scratch buffer and the rows picked from it."""
        if not len(rows):
            return
        if len(rows) >= DENSE_MIN and len(rows) * DENSE >= int(rows[-1]) - int(rows[0]) + 1:
            self._read_chunks(rows, out)
            return
        # each run's bytes in `out` and in the file, worked out at once: the loop (a thousand
        # runs a recall) does nothing but read
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = np.concatenate(([0], breaks))
        ends = np.concatenate((breaks, [len(rows)])) * self.width
        places = (self.offset + rows[starts].astype(np.int64) * self.width).tolist()
        view, fd, preadv = memoryview(out).cast("B"), self.fd, os.preadv
        for a, b, place in zip((starts * self.width).tolist(), ends.tolist(), places):
            if preadv(fd, [view[a:b]], place) != b - a:
                raise OSError("the snapshot image was cut short")

    def _read_chunks(self, rows: np.ndarray, out: np.ndarray) -> None:
        per = max(1, CHUNK_BYTES // self.width)  # rows a chunk
        chunk = np.empty((per, *self.shape), np.float32)
        view = memoryview(chunk).cast("B")
        at = 0
        while at < len(rows):
            start = int(rows[at])
            stop = min(start + per, self.count)
            upto = at + int(np.searchsorted(rows[at:], stop))
            want = (stop - start) * self.width
            if os.preadv(self.fd, [view[:want]], self.offset + start * self.width) != want:
                raise OSError("the snapshot image was cut short")
            out[at:upto] = chunk[rows[at:upto] - start]
            at = upto

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


class Texts:
    """Every file's entries (compressed JSON, after the arrays) read with pread, not through the
    mapping: a recall decodes the few files it shows, a few KB each, but the page cache holds a
    freshly written image in 2 MB folios and a touch of one byte maps a whole one (11 MB of the
    region resident after 11 recalls at 100,000 entries); a read copies only the bytes asked for.
    `texts[a:b]` is the region's bytes [a, b) (`FileTable.rows` slices it as it would bytes)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.base = fd, 0

    def __getitem__(self, span: slice) -> bytes:
        return self.at(self.base + span.start, span.stop - span.start)

    def at(self, offset: int, length: int) -> bytes:
        """The file's bytes [offset, offset + length)."""
        data = os.pread(self.fd, length, offset)
        if len(data) != length:
            raise OSError("the snapshot image was cut short")
        return data

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def _restore(mapped: mmap.mmap, texts: Texts, identity: str, dim: int) -> tuple[Snapshot | None, dict]:
    """The snapshot, and where each array lies in the file (offset, dtype, shape by name). The
    header and the strings are decoded once, so they are read with pread (`texts`), never through
    the mapping: its pages would stay mapped, and a page cache holding the file in 2 MB folios maps
    2 MB for a byte touched."""
    if texts.at(0, len(MAGIC)) != MAGIC:
        return None, {}
    length = int.from_bytes(texts.at(len(MAGIC), 8), "little")
    if length > len(mapped):
        return None, {}
    header = json.loads(texts.at(len(MAGIC) + 8, length))
    if header["version"] != VERSION or header["identity"] != identity or header["dim"] != dim:
        return None, {}
    arrays = {}
    for name, (offset, dtype, shape) in header["arrays"].items():
        count = int(np.prod(shape))
        if offset + count * np.dtype(dtype).itemsize > len(mapped):
            return None, {}  # truncated
        arrays[name] = np.frombuffer(mapped, dtype, count, offset).reshape(shape)
    for i, name in enumerate(SCOPE_PAIR):  # views of the pairs: what patches a scope writes them there
        arrays[name] = arrays["scope_pairs"][:, i]
    texts.base = base = header["raw_base"]
    # the strings as NUL-joined UTF-8 columns after the entries: split in a few milliseconds where
    # JSON lists of 30,000 strings took tens (and the same text as JSON strings in the header, NULs
    # escaped, 10 ms to parse at 100,000 entries); one tuple per scope name, shared by the snapshot
    # and every file naming it
    def column(name: str, count: int) -> list[str]:
        at, length = header["strings"][name]
        return texts.at(base + at, length).decode().split("\0") if count else []

    numbers, count = arrays["file_numbers"], len(arrays["name_kind"])
    paths, stamps = column("paths", len(numbers)), column("stamps", len(numbers))
    names = list(zip(map(header["kinds"].__getitem__, arrays["name_kind"].tolist()), column("name_keys", count),
                     column("name_displays", count)))
    scope_list = names[:header["scopes"]]
    if not len(paths) == len(stamps) == len(numbers) or len(names) != count:
        return None, {}
    table = FileTable(paths, stamps, {number: warning for number, warning in header["warnings"]}, names, numbers,
                      arrays["file_scope_number"], arrays["file_scope_name"], arrays["sums"], arrays["file_phrases"],
                      arrays["file_columns"], texts)
    snap = Snapshot(dim)
    snap.restore(arrays, header["size"], scope_list, table, header["dead"], header["duplicates"],
                 header["scope_residual"])
    return snap, header["arrays"]


def write(root: Path, identity: str, snap: Snapshot, stream: Stream | None = None) -> None:
    """Write `snap` as the image at `root` (through a temporary file and a rename); a store that
    cannot be written keeps the image it has, or none. `stream`, when given, holds the entry
    vectors a build wrote into that file as it went (it is used up either way)."""
    paths, stamps, warnings, numbers, sums, phrases, raws = [], [], [], [], [], [], []
    scope_number, scope_name = [], []
    names = {(kind, key, display): i for i, (kind, key, display) in enumerate(snap.scopes)}
    column_rows = np.zeros((COLUMNS, snap.size), np.int64)
    at = raw_at = 0
    for number, (path, rows) in enumerate(snap.files.each()):
        column_rows[:, rows.start:rows.start + rows.n] = rows.columns
        raw = rows.text()
        s = len(rows.scopes)
        paths.append(path)
        stamps.append(rows.stamp)
        if rows.warning:
            warnings.append([number, rows.warning])
        numbers.append([rows.start, rows.n, at, s, rows.top["L"], rows.top["I"], raw_at, len(raw)])
        for kind, key, display in rows.scopes:
            scope_number.append(snap.scope_number[(kind, key)])
            scope_name.append(names.setdefault((kind, key, display), len(names)))
        sums.append(rows.sums)
        phrases.append(rows.phrases)
        at += s
        raws.append(raw)
        raw_at += len(raw)
    arrays = {name: np.ascontiguousarray(array) for name, array in snap.image_arrays().items()}  # compact copies made
    arrays["scope_pairs"] = np.stack([arrays.pop(name) for name in SCOPE_PAIR], axis=1)
    arrays["sums"] = np.concatenate(sums) if sums else np.zeros((0, snap.dim), np.float32)
    arrays["file_phrases"] = np.concatenate(phrases) if phrases else np.zeros((0, snap.dim), np.float32)
    arrays["file_columns"] = column_rows
    arrays["file_numbers"] = np.array(numbers, np.int64).reshape(len(numbers), 8)
    arrays["file_scope_number"] = np.array(scope_number, np.int32)
    arrays["file_scope_name"] = np.array(scope_name, np.int32)
    kinds = list(dict.fromkeys(kind for kind, _, _ in names))
    arrays["name_kind"] = np.array([kinds.index(kind) for kind, _, _ in names], np.uint8)
    live = np.flatnonzero(snap.alive)
    arrays["key_rows"] = live[np.argsort(snap.id_key[live], kind="stable")]  # the KeyIndex's order: no sort at load
    columns = {"paths": paths, "stamps": stamps, "name_keys": [key for _, key, _ in names],
               "name_displays": [display for _, _, display in names]}
    if len(kinds) > 255 or any("\0" in text for strings in columns.values() for text in strings):
        discard(root)  # a name no column can hold (a NUL in a file or scope name): no image, index.sqlite
        return         # serves, rather than an old image every new process would patch again
    texts = {name: "\0".join(strings).encode() for name, strings in columns.items()}
    strings_at, at = {}, raw_at  # after the entries
    for name, text in texts.items():
        strings_at[name] = [at, len(text)]
        at += len(text)
    header = {"version": VERSION, "identity": identity, "dim": snap.dim, "size": snap.size, "dead": snap.dead,
              "scopes": len(snap.scopes), "kinds": kinds, "strings": strings_at, "warnings": warnings,
              "duplicates": snap.duplicates, "scope_residual": snap.scope_residual, "arrays": {}}
    # The columns get room to grow in the file itself (a hole: no disk, zeros when read), so a
    # process that patches a mapped snapshot appends rows into private pages of the mapping
    # instead of copying every array into memory first.
    spare = {**{name: snap.size + max(SPARE_MIN, snap.size // SPARE) for name in snap.ROW_ARRAYS},
             **{name: len(snap.scopes) + max(SPARE_MIN, len(snap.scopes) // SPARE)
                for name in (*snap.SCOPE_ARRAYS, "scope_pairs")}}
    # offsets depend on the header's length, which depends on the offsets: reserve room for them
    # (whole pages: a header of a few KB always gets the same room, so a build's `Stream` knows
    # where the entry vectors, the first array, will lie before anything else is known)
    shapes = {name: [spare.get(name, len(array)), *array.shape[1:]] for name, array in arrays.items()}
    header["arrays"] = {name: [0, array.dtype.str, shapes[name]] for name, array in arrays.items()}
    header["raw_base"] = 0
    room = _aligned(len(MAGIC) + 8 + len(json.dumps(header, ensure_ascii=False).encode()) + 24 * (len(arrays) + 1),
                    HEADER_ALIGN)
    layout, offset = {}, room
    for name, array in arrays.items():
        layout[name] = [offset, array.dtype.str, shapes[name]]
        offset = _aligned(offset + int(np.prod(shapes[name])) * array.itemsize)
    header["arrays"] = layout
    header["raw_base"] = offset
    text = json.dumps(header, ensure_ascii=False).encode()
    if len(MAGIC) + 8 + len(text) > room:
        return  # cannot happen: the reserve is larger than the offsets can grow
    tmp = root / f"{NAME}.{os.getpid()}.tmp"  # ignored by the stores' .gitignore too (index.sqlite*)
    # the entry vectors a build streamed into the file as they came are in place when they are all
    # of this snapshot's, where this header puts them; else the file is written whole
    streamed = stream is not None and stream.holds(snap, header["arrays"]["vectors"][0])
    if stream is not None and not streamed:
        stream.drop()
    try:
        with open(tmp, "r+b" if streamed else "wb") as out:
            if streamed:
                stream.close()  # (this `out` writes the rest of the same file)
            out.write(MAGIC + len(text).to_bytes(8, "little") + text)
            for name, array in arrays.items():
                if streamed and name == "vectors":
                    continue
                out.seek(header["arrays"][name][0])  # what is skipped reads as zeros
                out.write(memoryview(array).cast("B"))
            out.seek(header["raw_base"])
            out.write(b"".join([*raws, *texts.values()]))  # one write: 10,000 took 40 ms more at 100k
        os.replace(tmp, root / NAME)
    except OSError:  # a read-only store or a full disk: the image is only a cache
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def _aligned(offset: int, align: int = ALIGN) -> int:
    return -(-offset // align) * align


class Stream:
    """The image a build from scratch writes as its batches come, while its workers make the next
    ones: each batch's entry vectors (the biggest array, 100 MB at 100,000 entries, and the first,
    right after the header's room) go straight to their place in the temporary file `write` then
    completes, instead of all of them after the build. Their place is known beforehand as long as
    the header fits in its first HEADER_ALIGN bytes; when it does not, or the snapshot's rows are
    not exactly those streamed (compacted after the build), `write` writes the file whole."""

    def __init__(self, root: Path, dim: int) -> None:
        self.path = root / f"{NAME}.{os.getpid()}.tmp"
        self.dim, self.rows, self.snap = dim, 0, None
        try:
            self.fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError:  # a read-only store: nothing streamed, and `write` finds out itself
            self.fd = None

    def add(self, snap: Snapshot, vectors: list[np.ndarray]) -> None:
        """The entry vectors of the files about to be added to `snap` (after its rows), in order."""
        if self.fd is None:
            return
        if self.snap is None and snap.size == 0:
            self.snap = snap
        if snap is not self.snap or snap.size != self.rows:  # not rows 0.. of one snapshot: give up
            self.drop()
            return
        views = [memoryview(np.ascontiguousarray(v, np.float32)).cast("B") for v in vectors if len(v)]
        want, done = sum(len(view) for view in views), 0
        at = HEADER_ALIGN + self.rows * self.dim * 4
        try:  # (a call takes at most IOV_MAX buffers: a batch of one file a buffer may hold more)
            for first in range(0, len(views), WRITE_BUFFERS):
                done += os.pwritev(self.fd, views[first:first + WRITE_BUFFERS], at + done)
        except OSError:
            done = -1
        if done != want:  # (a full disk, or a short write)
            self.drop()
            return
        self.rows += sum(len(v) for v in vectors)

    def holds(self, snap: Snapshot, offset: int) -> bool:
        """Whether the file holds exactly `snap`'s entry vectors, at `offset`."""
        return self.fd is not None and snap is self.snap and snap.size == self.rows and offset == HEADER_ALIGN

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def drop(self) -> None:
        """Stop streaming and remove the file (`write` is not going to use it)."""
        if self.fd is not None:
            self.close()
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                pass


def discard(root: Path) -> None:
    """Remove the image, and what a writer killed half way left."""
    for path in (root / NAME, *root.glob(f"{NAME}.*.tmp")):
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass
