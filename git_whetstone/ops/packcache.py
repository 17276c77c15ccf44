"""A pack exported from what changed since the last export (issue 20): what each scope file gave
the pack and the pack's compressed chunks, kept in `.git/whetstone-export.cache` so that the next
export, in any process, reads only the files whose content changed and compresses only the chunks
those changes touch.

A file's part is keyed by its folder and the sha1 of its bytes (what git names its blob), so an
edit, a revert, a rename, a branch switch or a `git reset` is seen as the content it leaves, and
nothing is trusted that the bytes do not say. A file that fails validation is read as before (its
last committed version, with a warning) and never kept. The file holds the code's hash: a cache
another version wrote, or one whose checksum fails, is ignored and written again; a `.git` that
cannot be written only means the next export reads everything again. The pack is the same bytes
as `packs.build_pack` gives for `packs.store_items` (`tests/test_share_export.py`).
"""
from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
import zlib
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from ..base.heap import no_collection
from ..format import blocks
from ..format.layout import KIND_FOLDER, scope_filename, scope_key
from ..index import reading, records
from ..index.freshness import read_files
from ..index.records import Entry, entries_of
from ..store.store import Store
from . import packs
from .packs import Row, archive, assemble, duplicate_warning, entry_text, manifest, plain

FILE = "whetstone-export.cache"
MAGIC = b"whetstone-export-cache 1"
KEEP = 3  # a part no export used this many times in a row is dropped

# A file's part, column by column: the bytes its blocks' canonical texts are cut from (None: the
# file itself, as whetstone writes it), their ids, their sha256s end to end, the scopes and which
# one each block has ([] when one scope), the blocks' lines ([] when the file itself holds the
# texts: counted from it when a warning needs one), where each text ends (the next starts one
# newline later), and which are plain ([] when all are).
Part = tuple[bytes | None, list[str], str, list[str], list[int], list[int], list[int], list[int]]
_EMPTY: Part = (b"", [], "", [], [], [], [], [])


@dataclass(frozen=True)
class Exported:
    """A pack and what export reports about it."""

    data: bytes
    learnings: int
    issues: int
    scopes: int
    warnings: list[str]
    fresh: int  # scope files read this time (not found in the cache)


@no_collection()  # 100,000 rows and strings, none of them garbage (0.3 s of passes)
def export_pack(store: Store, skill: str, day: dt.date) -> Exported:
    """The pack of every entry of `store`: the bytes `build_pack(skill, store_items(store), day)`
    gives, read and compressed only where the store changed since the cache was written."""
    cache = Cache.load(store)
    files = [(folder, f"{folder}/{name}") for kind, folder in KIND_FOLDER.items() for name in store.scope_names(kind)]
    contents, parts, warnings_of, fresh = _parts(store, cache, files)
    rels = [rel for _, rel in files]
    whole = _whole_files(rels, contents, parts)
    if whole is not None:  # each file is one member of the pack as it stands: no entry is moved
        members, entries, learnings, scopes = whole
        total = len(entries)
        data, chunks = archive(manifest(skill, day, scopes, learnings, total - learnings, entries), members, cache.chunks)
        warnings = [warnings_of[rel] for rel in rels if rel in warnings_of]
    else:
        rows, warnings = _rows(rels, contents, parts, warnings_of)
        data, chunks = assemble(skill, day, rows, cache.chunks)
        learnings, total, scopes = sum(r[1] == "learning" for r in rows), len(rows), {r[2] for r in rows}
    cache.save(chunks)
    return Exported(data, learnings, total - learnings, len({scope_key(scope) for scope in scopes}), warnings, fresh)


def _parts(store: Store, cache: "Cache", files: list[tuple[str, str]]
           ) -> tuple[dict[str, bytes], dict[str, Part], dict[str, str], int]:
    """Every scope file's bytes and part (from the cache when its content is there, else read as
    export always read it), the warnings of files that fail validation, and how many were read."""
    contents: dict[str, bytes] = {}
    parts: dict[str, Part] = {}
    keys: dict[str, str] = {}
    root = str(store.path)
    for folder, rel in files:
        try:
            contents[rel] = _read(f"{root}/{rel}")
        except FileNotFoundError:  # gone since it was listed: no entries, as read_file says
            parts[rel] = _EMPTY
            continue
        key = keys[rel] = f"{folder}/{hashlib.sha1(contents[rel]).hexdigest()}"
        part = cache.files.get(key)
        if part is not None:
            parts[rel] = cache.used[key] = part
    warnings_of: dict[str, str] = {}
    misses = [rel for _, rel in files if rel not in parts]
    for rel, (entries, warning) in (read_files(store, misses) if misses else {}).items():
        part = None if warning else _verified(entries, contents[rel])
        if part is None and not warning:  # not as whetstone writes it: parsed from these very bytes
            parsed = _parsed(rel, contents[rel])
            if parsed is None:
                entries, warning = reading.read_file(store, rel)
            else:
                part = _part(parsed)
        if part is None:  # failing validation: read as recall reads it, and not kept (its history counts too)
            parts[rel] = _part(entries)
            if warning:
                warnings_of[rel] = warning
        else:
            parts[rel] = cache.used[keys[rel]] = part
    return contents, parts, warnings_of, len(misses)


def _whole_files(rels: list[str], contents: dict[str, bytes], parts: dict[str, Part]
                 ) -> tuple[dict[str, bytes], list[str], int, set[str]] | None:
    """The pack's entry files when each is one scope file's text as it stands (as whetstone keeps
    a store): every file's blocks plain, of one kind and one scope, in id order, no two files with
    the same pack file, and no id claimed twice. Then also the manifest's [entries] lines in id
    order, how many are learnings, and the scopes. None when any of that fails (`_rows` sorts it
    out). Done column by column: 100,000 rows a row at a time cost more than the rest."""
    members: dict[str, bytes] = {}
    ids: tuple[list[list[str]], list[list[str]]] = ([], [])
    hashes: tuple[list[str], list[str]] = ([], [])
    scopes: set[str] = set()
    for rel in rels:
        source, part_ids, part_hashes, part_scopes, which, _, ends, plains = parts[rel]
        if not part_ids:
            continue
        if which or plains:
            return None
        kind = int(part_ids[0][0] != "L")
        name = f"{KIND_FOLDER['issue' if kind else 'learning']}/{scope_filename(part_scopes[0])}"
        if name in members:
            return None
        text = contents[rel] if source is None else source
        members[name] = text if ends[-1] == len(text) else text[:ends[-1]]
        ids[kind].append(part_ids)
        hashes[kind].append(part_hashes)
        scopes.add(part_scopes[0])
    entries: list[str] = []
    for kind, prefix in enumerate("LI"):
        flat = list(chain.from_iterable(ids[kind]))
        joined = " ".join(flat)
        if joined.count(prefix) != len(flat) or len(set(flat)) != len(flat):
            return None  # an id of the other kind in a file, or one claimed twice
        try:
            numbers = np.array(list(map(int, joined.replace(prefix, "").split())), dtype=np.int64)
        except (ValueError, OverflowError):
            return None
        down = np.diff(numbers) < 0
        down[np.cumsum([len(group) for group in ids[kind]], dtype=np.int64)[:-1] - 1] = False  # from one file to the next
        if down.any():
            return None  # a file's ids out of order
        digests = "".join(hashes[kind])
        entries += [f'{flat[k]} = "{digests[64 * k:64 * k + 64]}"'  # ids and hex digits: nothing to escape
                    for k in np.argsort(numbers, kind="stable").tolist()]  # a tie keeps file order
    return members, entries, sum(map(len, ids[0])), scopes


def _read(path: str) -> bytes:
    """A file's bytes, read at the size it has (half what `open().read()` costs, 70 ms at 10,000
    files); to its end, whatever that is, when the size does not hold."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)
        if len(data) == size:
            return data
        read = [data]
        while read[-1]:
            read.append(os.read(fd, 1 << 16))
        return b"".join(read)
    finally:
        os.close(fd)


def _rows(rels: list[str], contents: dict[str, bytes], parts: dict[str, Part],
          warnings_of: dict[str, str]) -> tuple[list[Row], list[str]]:
    """The pack's rows in id order, and the warnings in file order (as `store_items` gives them):
    a file's own, then each id claimed again, whose later copies are left out."""
    rows: list[tuple] = []
    warnings: list[str] = []
    seen: dict[str, tuple[str, int]] = {}

    def where(rel: str, k: int) -> str:
        source, _, _, _, _, lines, ends, _ = parts[rel]
        text = contents[rel] if source is None else source
        line = lines[k] if lines else text.count(b"\n", 0, ends[k - 1] + 1 if k else 0) + 1
        return f"{rel}:{line}"

    for rel in rels:
        if rel in warnings_of:
            warnings.append(warnings_of[rel])
        source, ids, hashes, scopes, which, _, ends, plains = parts[rel]
        text = contents[rel] if source is None else source
        start = 0
        for k, entry_id in enumerate(ids):
            if entry_id in seen:
                warnings.append(duplicate_warning(where(rel, k), entry_id, where(*seen[entry_id])))
            else:
                seen[entry_id] = (rel, k)
                learning = entry_id[0] == "L"
                rows.append((not learning, int(entry_id[1:]), len(rows), entry_id, "learning" if learning else "issue",
                             scopes[which[k]] if which else scopes[0], hashes[64 * k:64 * k + 64],
                             text[start:ends[k]], bool(plains[k]) if plains else True))
            start = ends[k] + 1
    rows.sort(key=lambda r: r[:3])  # id order; a tie keeps file order
    return [r[3:] for r in rows], warnings


def _part(entries: list[Entry]) -> Part:
    """A file's part from its entries: their canonical texts joined as `joined` joins plain ones."""
    texts: list[bytes] = []
    hashes: list[str] = []
    scopes: dict[str, int] = {}
    which, ends, plains, at = [], [], [], 0
    for e in entries:
        text = entry_text(e)
        raw = text.encode("utf-8")
        texts.append(raw)
        hashes.append(hashlib.sha256(raw).hexdigest())
        which.append(scopes.setdefault(e.scope, len(scopes)))
        plains.append(int(plain(text)))
        at += len(raw)
        ends.append(at)
        at += 1
    return (b"\n".join(texts), [e.id for e in entries], "".join(hashes), list(scopes),
            which if len(scopes) > 1 else [], [e.line for e in entries], ends, [] if all(plains) else plains)


def _verified(entries: list[Entry], raw: bytes) -> Part | None:
    """The part of a file read from the index, if the file's bytes are exactly its entries'
    canonical texts, one blank line apart, each at the line the index says (as whetstone writes
    a file): then the entries are what these bytes parse to, and the file itself holds the texts."""
    source, ids, hashes, scopes, which, lines, ends, plains = _part(entries)
    if source != raw:
        return None
    line, start = 1, 0
    for k, end in enumerate(ends):
        if lines[k] != line:
            return None
        line += raw.count(b"\n", start, end) + 1
        start = end + 1
    return None, ids, hashes, scopes, which, [], ends, plains


def _parsed(rel: str, raw: bytes) -> list[Entry] | None:
    """The entries of these bytes, or None when they fail validation."""
    try:
        parsed = blocks.parse(raw.decode("utf-8"), rel, rel.split("/", 1)[0])
    except UnicodeDecodeError:
        return None
    return None if parsed.errors else entries_of(parsed.blocks, rel)


class Cache:
    """The parts and chunks the last export used, as `.git/whetstone-export.cache` holds them:
    a first line (magic, code hash, sha256 of the rest), the length of a JSON index, the index
    (each part's rows and where its bytes and its blocks' sha256s are; each chunk's key and place),
    then the bytes."""

    def __init__(self, path: Path, files: dict[str, Part] | None = None,
                 chunks: dict[bytes, bytes] | None = None, ages: dict[str, int] | None = None) -> None:
        self.path = path
        self.files = files or {}
        self.ages = ages or {}  # key -> how many exports in a row did not use that part
        self.chunks = chunks or {}
        self.used: dict[str, Part] = {}

    @classmethod
    def load(cls, store: Store) -> "Cache":
        path = store.path / ".git" / FILE
        try:
            data = path.read_bytes()
        except OSError:
            return cls(path)
        try:
            start = data.index(b"\n") + 1  # after the first line
            magic, code, digest = data[:start - 1].rsplit(b" ", 2)
            body = memoryview(data)[start:]
            if magic != MAGIC or code.decode() != _code() or hashlib.sha256(body).hexdigest() != digest.decode():
                return cls(path)
            at = data.index(b"\n", start) + 1
            size = int(data[start:at - 1])
            index = json.loads(data[at:at + size])
            blob = memoryview(data)[at + size:]
            files: dict[str, Part] = {}
            ages: dict[str, int] = {}
            for key, (offset, n, digests, age, ids, *columns) in index["files"].items():
                split = ids.split(" ") if ids else []
                files[key] = (None if offset < 0 else bytes(blob[offset:offset + n]), split,
                              blob[digests:digests + 32 * len(split)].hex(), *columns)
                ages[key] = int(age)
            chunks = {bytes.fromhex(key): bytes(blob[at:at + n]) for key, at, n in index["chunks"]}
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls(path)  # not one this code wrote: ignored, and written again
        return cls(path, files, chunks, ages)

    def save(self, chunks: dict[bytes, bytes]) -> None:
        """Keep the parts and chunks this export used, when they are not what was loaded."""
        if (self.used.keys() == self.files.keys() and chunks.keys() == self.chunks.keys()
                and not any(self.ages.values())):
            return
        blob: list[bytes] = []
        at = 0

        def put(data: bytes) -> list[int]:
            nonlocal at
            blob.append(data)
            at += len(data)
            return [at - len(data), len(data)]

        kept = {key: (part, 0) for key, part in self.used.items()}
        for key, part in self.files.items():  # a revert or a branch switched back finds its files again
            if key not in kept and self.ages.get(key, 0) + 1 < KEEP:
                kept[key] = (part, self.ages.get(key, 0) + 1)
        files = {key: [*(put(part[0]) if part[0] is not None else [-1, 0]), put(bytes.fromhex(part[2]))[0], age,
                       " ".join(part[1]), *part[3:]]  # the sha256s as bytes: half the size, and no JSON string
                 for key, (part, age) in kept.items()}
        listed = [[key.hex(), *put(data)] for key, data in chunks.items()]
        index = json.dumps({"files": files, "chunks": listed}, separators=(",", ":"), ensure_ascii=False).encode()
        body = b"%d\n" % len(index) + index + b"".join(blob)
        head = b"%s %s %s\n" % (MAGIC, _code().encode(), hashlib.sha256(body).hexdigest().encode())
        # not flushed to disk: a cache that a crash leaves torn fails its checksum and is ignored
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(head + body)
            os.replace(tmp, self.path)
        except OSError:  # a cache: the next export reads the store again
            _remove(tmp)
            return
        for left in self.path.parent.glob(f".{self.path.name}.*.tmp"):  # an export killed while writing
            pid = left.name.rsplit(".", 2)[-2]
            if pid.isdigit() and not _running(int(pid)):
                _remove(left)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process, or not a pid at all: leave its file alone
    return True


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


@functools.cache
def _code() -> str:
    """What a part and a chunk depend on: the code that reads, renders and compresses, and zlib."""
    digest = hashlib.sha256(zlib.ZLIB_RUNTIME_VERSION.encode())
    for module in (packs, blocks, records, reading):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]
