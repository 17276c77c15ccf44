"""index.sqlite-snapshot: a store's whole snapshot in one file that a new process maps instead of
decoding (SPEC §5: derived and disposable, like index.sqlite beside it).

Loading 100,000 entries from index.sqlite means reading 100 MB of vector blobs, copying them into
the matrix and rebuilding every file's rows in Python: half a second. The image holds the same
snapshot as arrays (vectors, their compact copies, the integer columns, the scopes' phrases and
centroids, every file's share) plus a JSON header naming each file with its stamp, so a load maps
the file (copy on write: a process that patches its snapshot writes private pages, never the
file) and builds only the small Python structures. Pages are read when something touches them.

It is keyed like the cache: by format version, backend identity and dimension; and each file in it
carries its stamp, so a file changed since the image was written is simply patched by the refresh
(`freshness._refresh`) as in a long-lived process. A process that loaded without an image, or
patched much of one, writes a new one (atomically: a temporary file and a rename). A damaged,
foreign or truncated image is ignored and replaced.
"""
from __future__ import annotations

import gc
import json
import mmap
import os
from pathlib import Path

import numpy as np

from .records import FileRows
from .snapshot import Snapshot

NAME = "index.sqlite-snapshot"  # matched by the stores' .gitignore (index.sqlite*)
MAGIC = b"whetstone snapshot\n"
VERSION = 2
ALIGN = 64
IMAGE_FROM = 5_000  # entries: a smaller store loads from index.sqlite as fast
REWRITE_SHARE = 0.1  # rewrite an image once a tenth of its files had to be patched


def read(root: Path, identity: str, dim: int) -> Snapshot | None:
    """The snapshot the image at `root` holds, or None when there is none this process can use."""
    try:
        with open(root / NAME, "rb") as file:
            if os.fstat(file.fileno()).st_size < len(MAGIC) + 8:
                return None
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
        if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_RANDOM"):
            # recall reads a few thousand scattered float32 rows: map those pages, not their neighbours
            mapped.madvise(mmap.MADV_RANDOM)
    except (OSError, ValueError):
        return None
    collecting = gc.isenabled()
    gc.disable()  # tens of thousands of small objects, none of them garbage: no collection passes
    try:
        return _restore(mapped, identity, dim)
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    finally:
        if collecting:
            gc.enable()


def _restore(mapped: mmap.mmap, identity: str, dim: int) -> Snapshot | None:
    if mapped[:len(MAGIC)] != MAGIC:
        return None
    length = int.from_bytes(mapped[len(MAGIC):len(MAGIC) + 8], "little")
    header = json.loads(mapped[len(MAGIC) + 8:len(MAGIC) + 8 + length])
    if header["version"] != VERSION or header["identity"] != identity or header["dim"] != dim:
        return None
    arrays = {}
    for name, (offset, dtype, shape) in header["arrays"].items():
        count = int(np.prod(shape))
        if offset + count * np.dtype(dtype).itemsize > len(mapped):
            return None  # truncated
        arrays[name] = np.frombuffer(mapped, dtype, count, offset).reshape(shape)
    raw = memoryview(mapped)[header["raw_base"]:]
    files: list[tuple[str, FileRows]] = []
    for path, stamp, warning, start, n, scopes, top_l, top_i, at, raw_at, raw_len in header["files"]:
        s = len(scopes)
        rows = FileRows(stamp, [tuple(x) for x in scopes], arrays["sums"][at:at + s], arrays["file_phrases"][at:at + s],
                        arrays["file_columns"][:, start:start + n], {"L": top_l, "I": top_i}, warning,
                        raw=raw[raw_at:raw_at + raw_len])
        rows.start = start
        files.append((path, rows))
    snap = Snapshot(dim)
    snap.restore(arrays, header["size"], [tuple(s) for s in header["scopes"]], files, header["dead"],
                 header["duplicates"], header["scope_residual"])
    return snap


def write(root: Path, identity: str, snap: Snapshot) -> None:
    """Write `snap` as the image at `root` (through a temporary file and a rename); a store that
    cannot be written keeps the image it has, or none."""
    snap.compact_ready(now=True)
    files, sums, phrases, columns, raws = [], [], [], [], []
    at = raw_at = 0
    for path, rows in snap.files.items():
        raw = rows.text()
        s = len(rows.scopes)
        files.append([path, rows.stamp, rows.warning, rows.start, rows.n, rows.scopes, rows.top["L"], rows.top["I"],
                      at, raw_at, len(raw)])
        sums.append(rows.sums)
        phrases.append(rows.phrases)
        at += s
        raws.append(raw)
        raw_at += len(raw)
    column_rows = np.zeros((4, snap.size), np.int64)
    for _, rows in snap.files.items():
        column_rows[:, rows.start:rows.start + rows.n] = rows.columns
    arrays = {name: np.ascontiguousarray(array) for name, array in snap.image_arrays().items()}
    arrays["sums"] = np.concatenate(sums) if sums else np.zeros((0, snap.dim), np.float32)
    arrays["file_phrases"] = np.concatenate(phrases) if phrases else np.zeros((0, snap.dim), np.float32)
    arrays["file_columns"] = column_rows
    header = {"version": VERSION, "identity": identity, "dim": snap.dim, "size": snap.size, "dead": snap.dead,
              "scopes": snap.scopes, "files": files, "duplicates": snap.duplicates,
              "scope_residual": snap.scope_residual, "arrays": {}}
    # offsets depend on the header's length, which depends on the offsets: reserve room for them
    layout, offset = {}, 0
    for name, array in arrays.items():
        layout[name] = [offset, array.dtype.str, list(array.shape)]
        offset = _aligned(offset + array.nbytes)
    blob_size = offset
    header["arrays"] = {name: [0, dtype, shape] for name, (_, dtype, shape) in layout.items()}
    header["raw_base"] = 0
    room = _aligned(len(MAGIC) + 8 + len(json.dumps(header, ensure_ascii=False).encode()) + 24 * (len(layout) + 1))
    header["arrays"] = {name: [room + off, dtype, shape] for name, (off, dtype, shape) in layout.items()}
    header["raw_base"] = room + blob_size
    text = json.dumps(header, ensure_ascii=False).encode()
    if len(MAGIC) + 8 + len(text) > room:
        return  # cannot happen: the reserve is larger than the offsets can grow
    tmp = root / f".{NAME}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as out:
            out.write(MAGIC + len(text).to_bytes(8, "little") + text)
            out.write(b"\0" * (room - out.tell()))
            for name, array in arrays.items():
                out.write(memoryview(array).cast("B"))
                out.write(b"\0" * (_aligned(out.tell()) - out.tell()))
            for raw in raws:
                out.write(raw)
        os.replace(tmp, root / NAME)
    except OSError:  # a read-only store or a full disk: the image is only a cache
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def discard(root: Path) -> None:
    try:
        (root / NAME).unlink(missing_ok=True)
    except OSError:
        pass
