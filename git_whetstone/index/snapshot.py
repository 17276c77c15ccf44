"""A store's entries and vectors in memory: what recall and capture read (SPEC §5).

A snapshot is built from index.sqlite and the scope files (`freshness`) and patched file by file
when they change. Besides the arrays (`Columns`), it knows which file each row came from, which
rows are the live copy of each id, which files hold each scope, and what to warn about.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from itertools import chain, filterfalse
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from ..format.ids import is_entry_id
from .columns import Columns
from .records import FileRows, id_key, key_id


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


class FileTable(NamedTuple):
    """Every file's share of a snapshot as an image holds it (`image.read`): arrays and a few lists,
    from which one file's `FileRows` is made when something asks for that file."""

    paths: list[str]
    stamps: list[str]
    warnings: dict[int, str]               # file number -> its warning (the few files that have one)
    names: list[tuple[str, str, str]]      # (kind, key, display) as files name their scopes
    numbers: np.ndarray                    # (files, 8): start, n, first scope, scopes, top L, top I, raw at, raw length
    scope_number: np.ndarray               # per file scope: its number in the snapshot
    scope_name: np.ndarray                 # per file scope: its position in `names`
    sums: np.ndarray                       # per file scope
    phrases: np.ndarray                    # per file scope
    columns: np.ndarray                    # (COLUMNS, rows)
    raw: object                            # every file's entries, compressed JSON: raw[a:b] as bytes (image.Texts)

    def rows(self, number: int) -> FileRows:
        start, n, at, s, top_l, top_i, raw_at, raw_len = self.numbers[number].tolist()
        names = self.names
        rows = FileRows(self.stamps[number], [names[i] for i in self.scope_name[at:at + s].tolist()],
                        self.sums[at:at + s], self.phrases[at:at + s], self.columns[:, start:start + n],
                        {"L": top_l, "I": top_i}, self.warnings.get(number), raw=self.raw[raw_at:raw_at + raw_len])
        rows.start = start
        return rows


class Files(MutableMapping):
    """`Snapshot.files`: path -> `FileRows`, in the order files were added, as a dict would hold
    them. A snapshot mapped from an image keeps its files as a `FileTable` and makes a file's
    `FileRows` only when asked for it (10,000 of them took 60 ms and 20 MB at 100,000 entries);
    what is added since is held as a dict holds it."""

    def __init__(self, table: FileTable | None = None) -> None:
        self.table = table
        self._number = dict(zip(table.paths, range(len(table.paths)))) if table else {}
        self._made: dict[int, FileRows] = {}
        self._gone: set[int] = set()
        self._extra: dict[str, FileRows] = {}

    def _find(self, path: str) -> int:
        number = self._number.get(path, -1)
        return -1 if number in self._gone else number

    def at(self, number: int) -> FileRows:
        """The table's file `number` (held or not)."""
        rows = self._made.get(number)
        if rows is None:
            rows = self._made[number] = self.table.rows(number)
        return rows

    def __getitem__(self, path: str) -> FileRows:
        rows = self._extra.get(path)
        if rows is not None:
            return rows
        number = self._find(path)
        if number < 0:
            raise KeyError(path)
        return self.at(number)

    def __setitem__(self, path: str, rows: FileRows) -> None:
        if self._find(path) >= 0:  # never done (a changed file is removed first): its rows' owner would move
            del self[path]
        self._extra[path] = rows

    def __delitem__(self, path: str) -> None:
        if path in self._extra:
            del self._extra[path]
            return
        number = self._find(path)
        if number < 0:
            raise KeyError(path)
        self._gone.add(number)
        self._made.pop(number, None)

    def __contains__(self, path: object) -> bool:
        return path in self._extra or self._find(path) >= 0

    def __iter__(self) -> Iterator[str]:
        paths = self.table.paths if self.table else []
        if self._gone:
            paths = [path for number, path in enumerate(paths) if number not in self._gone]
        return chain(paths, list(self._extra))

    def __len__(self) -> int:
        return len(self._number) - len(self._gone) + len(self._extra)

    def each(self) -> Iterator[tuple[str, FileRows]]:
        """`items()`, the rows of a file not made yet made for the caller alone (`image.write`
        reads every file once: a mapped snapshot keeps none of them for it)."""
        if self.table:
            gone, made = self._gone, self._made
            for number, path in enumerate(self.table.paths):
                if number not in gone:
                    yield path, made[number] if number in made else self.table.rows(number)
        yield from list(self._extra.items())

    def outdated(self, stamps: dict[str, str], paths: Iterable[str], warned: bool) -> list[str]:
        """The paths among `paths` that are in `stamps` and not held, or held with another stamp
        (or, `warned`, with a warning): what a refresh reads again. One loop, no file's rows made."""
        number, gone, made, extra = self._number, self._gone, self._made, self._extra
        table_stamps, warnings = (self.table.stamps, self.table.warnings) if self.table else ([], {})
        if (self.table and not (gone or made or extra) and not (warned and warnings)
                and list(map(stamps.get, self.table.paths)) == table_stamps):
            # a snapshot as its image holds it, every file of which is on disk as it was (the usual
            # cold start): only paths it does not hold are read; no Python loop over 10,000 files
            return list(filterfalse(number.__contains__, filter(stamps.__contains__, paths)))
        out = []
        for path in paths:
            stamp = stamps.get(path)
            if stamp is None:
                continue
            at = number.get(path, -1)
            if at >= 0 and at not in gone and at not in made:  # a file as the image holds it: no rows made
                if table_stamps[at] != stamp or (warned and at in warnings):
                    out.append(path)
                continue
            rows = made[at] if at >= 0 and at not in gone else extra.get(path)
            if rows is None or rows.stamp != stamp or (warned and rows.warning):
                out.append(path)
        return out

    def shared(self, stamps: dict[str, str]) -> dict[str, str]:
        """`stamps` (HEAD's under "@HEAD"), or a dict equal to it made of the table's own strings
        when the table holds exactly its files, each with its stamp: a cold process's scan made
        20,000 strings (1.3 MB at 100,000 entries) that the snapshot would keep beside the table's
        equal ones. Taken only when equal (compared: a fraction of a millisecond)."""
        if not self.table or self._gone or self._extra or len(stamps) != len(self.table.paths) + 1:
            return stamps
        out = dict(zip(self.table.paths, self.table.stamps))
        if "@HEAD" not in stamps or "@HEAD" in out:
            return stamps
        out["@HEAD"] = stamps["@HEAD"]
        return out if out == stamps else stamps

    def warning(self, path: str) -> str | None:
        """`self[path].warning`, without making the file's rows."""
        number = -1 if path in self._extra else self._find(path)
        return self[path].warning if number < 0 or number in self._made else self.table.warnings.get(number)

    def top(self) -> dict[str, int]:
        """The highest id number per prefix over every file held."""
        out = {"L": 0, "I": 0}
        if self.table:
            held = np.ones(len(self.table.paths), bool)
            held[list(self._gone)] = False
            held[list(self._made)] = False
            if held.any():
                out = dict(zip(("L", "I"), self.table.numbers[held, 4:6].max(axis=0).tolist()))
        for rows in [*(self._made[n] for n in self._made if n not in self._gone), *self._extra.values()]:
            out = {p: max(out[p], rows.top[p]) for p in out}
        return out


class _Owners:
    """`Snapshot.owner`: row -> the `FileRows` it came from, None once its file is removed. The
    rows restored from an image hold their file's number in the table (the file made when asked);
    rows added since hold their file."""

    def __init__(self, files: Files, numbers: np.ndarray | None = None) -> None:
        self.files = files
        self.restored = np.zeros(0, np.int32) if numbers is None else numbers
        self.added: list[FileRows | None] = []

    def __getitem__(self, row: int) -> FileRows | None:
        if row < len(self.restored):
            number = int(self.restored[row])
            return None if number < 0 else self.files.at(number)
        return self.added[row - len(self.restored)]

    def add(self, rows: FileRows, n: int) -> None:
        self.added.extend([rows] * n)

    def clear(self, start: int, stop: int) -> None:
        """Rows [start, stop) are dead for good."""
        cut = len(self.restored)
        self.restored[start:min(stop, cut)] = -1
        self.added[max(start - cut, 0):max(stop - cut, 0)] = [None] * max(stop - max(start, cut), 0)


class _Holders(MutableMapping):
    """`Snapshot.holders` of a snapshot mapped from an image: scope -> the files holding it (a
    dict, in file order), made from the table when first asked for and held as a dict from then
    on (every change to it goes through here first)."""

    def __init__(self, snap: "Snapshot", table: FileTable) -> None:
        self.snap, self.table = snap, table
        self._dicts: dict[tuple[str, str], dict[str, None]] = {}
        numbers = table.numbers
        self._file = np.repeat(np.arange(len(numbers)), numbers[:, 3])  # file of each file scope
        self._order = np.argsort(table.scope_number, kind="stable")     # file scopes by scope, files in order
        self._bounds = np.searchsorted(table.scope_number[self._order], np.arange(len(snap.scopes) + 1))

    def __getitem__(self, scope: tuple[str, str]) -> dict[str, None]:
        held = self._dicts.get(scope)
        if held is None:
            number = self.snap.scope_number[scope]  # KeyError for a scope never seen
            if number + 1 >= len(self._bounds):
                raise KeyError(scope)
            at = self._order[self._bounds[number]:self._bounds[number + 1]]
            paths = self.table.paths
            held = self._dicts[scope] = {paths[f]: None for f in self._file[at].tolist()}
        return held

    def __setitem__(self, scope: tuple[str, str], files: dict[str, None]) -> None:
        self._dicts[scope] = files

    def __delitem__(self, scope: tuple[str, str]) -> None:
        raise TypeError("a scope once seen stays in the snapshot")

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.snap.scope_number)  # every scope seen has its holders, empty or not

    def __len__(self) -> int:
        return len(self.snap.scope_number)


class KeyIndex(MutableMapping):
    """id key -> row, as a dict would hold it, for a snapshot mapped from an image: the keys it
    was restored with in two sorted arrays (1.6 MB at 100,000 entries where a dict of Python ints
    took 11), and what changed since in a small dict. Looked up by binary search."""

    def __init__(self, keys: np.ndarray, rows: np.ndarray, ordered: bool = False) -> None:
        """`keys[i]` is held at row `rows[i]`; `ordered`: the keys are sorted already."""
        if not ordered:
            order = np.argsort(keys, kind="stable")
            keys, rows = keys[order], rows[order]
        self._keys, self._rows = keys, rows
        self._gone = np.zeros(len(keys), bool)
        self._extra: dict[int, int] = {}
        self._len = len(keys)
        self._source: np.ndarray | None = None

    @classmethod
    def gathered(cls, id_key: np.ndarray, rows: np.ndarray) -> "KeyIndex":
        """The index of keys `id_key[rows]` (ascending) held at `rows`, its arrays made when it is
        first asked for a key: a long-lived process that only recalls counts the keys and never
        looks one up (0.9 MB at 100,000 entries)."""
        index = cls(np.zeros(0, np.int64), rows, ordered=True)
        index._source, index._len = id_key, len(rows)
        return index

    def _ready(self) -> None:
        if self._source is not None:
            self._keys, self._source = self._source[self._rows], None
            self._gone = np.zeros(len(self._keys), bool)

    def _at(self, key: int) -> int:
        """The position of `key` among the restored keys still held, or -1."""
        self._ready()
        i = int(np.searchsorted(self._keys, key))
        return i if i < len(self._keys) and self._keys[i] == key and not self._gone[i] else -1

    def __getitem__(self, key: int) -> int:
        if key in self._extra:
            return self._extra[key]
        i = self._at(key)
        if i < 0:
            raise KeyError(key)
        return int(self._rows[i])

    def __setitem__(self, key: int, row: int) -> None:
        i = self._at(key)
        if i >= 0:
            self._rows[i] = row
        else:
            self._len += key not in self._extra
            self._extra[key] = row

    def __delitem__(self, key: int) -> None:
        if key in self._extra:
            del self._extra[key]
        else:
            i = self._at(key)
            if i < 0:
                raise KeyError(key)
            self._gone[i] = True
        self._len -= 1

    def discard(self, keys: np.ndarray, rows: np.ndarray) -> None:
        """Forget each key of `keys` held at the row beside it in `rows` (one held at another row
        stays): `if self.get(key) == row: del self[key]` for many rows at once, one binary search for
        all of them (a compact removes 80,000 rows at 100,000 entries: two searches a row took half
        a second). A key in `_extra` is never held among the restored ones."""
        self._ready()
        for key, row in zip(keys.tolist(), rows.tolist()) if self._extra else ():
            if self._extra.get(key) == row:
                del self._extra[key]
                self._len -= 1
        if not len(self._keys) or not len(keys):
            return
        at = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
        hit = (self._keys[at] == keys) & ~self._gone[at] & (self._rows[at] == rows)
        at = np.unique(at[hit])
        self._gone[at] = True
        self._len -= len(at)

    def __iter__(self) -> Iterator[int]:
        self._ready()
        yield from self._keys[~self._gone].tolist()
        yield from list(self._extra)

    def __len__(self) -> int:
        return self._len

    def values(self) -> list[int]:  # type: ignore[override]
        """Every row, in the order `__iter__` gives the keys: at once, not a binary search a key
        (compact's report lists the ids of every live row)."""
        self._ready()
        return [*self._rows[~self._gone].tolist(), *self._extra.values()]


class _Ids(Mapping):
    """`Snapshot.by_id`: entry id -> row of its live copy."""

    def __init__(self, by_key: MutableMapping[int, int]) -> None:
        self.by_key = by_key

    def __getitem__(self, entry_id: str) -> int:
        if not is_entry_id(entry_id):
            raise KeyError(entry_id)
        return self.by_key[id_key(entry_id)]

    def __iter__(self) -> Iterator[str]:
        return map(key_id, self.by_key)

    def __len__(self) -> int:
        return len(self.by_key)

    def values(self):
        return self.by_key.values()


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


class Snapshot(Columns):
    """Everything recall and capture need, as arrays over rows: row i of `vectors` is `entries[i]`.

    Rows are grouped per file and patched in place when files change: a changed file's old rows
    are marked dead (`alive` False) and its new rows appended, so a capture costs work in
    proportion to one file, not the store. Dead rows are compacted away once they are a third of
    the store. Row order therefore carries no meaning; recall breaks ties by id (`id_key`).
    """

    def __init__(self, dim: int, capacity: int = 0, scope_capacity: int = 0) -> None:
        super().__init__(dim, capacity, scope_capacity)
        self.stamps: dict[str, str] = {}
        self.files = Files()
        self.owner = _Owners(self.files)                # by row: the file it came from; None once dead
        self.by_key: MutableMapping[int, int] = {}      # id key -> row of the live copy (KeyIndex when mapped)
        self.scope_number: dict[tuple[str, str], int] = {}
        self.holders: dict[tuple[str, str], dict[str, None]] = {}  # scope -> files holding it, in order
        self.duplicates: dict[str, list[str]] = {}      # file -> warnings about ids it repeats
        self.warned: set[str] = set()                   # files with a warning or a duplicate id
        self.notice: str | None = None                  # said once, by the call that saw it
        self.dead = 0
        self.watch = None                               # a long-lived process's change feed (watch.py)
        self.db: sqlite3.Connection | None = None       # and its open index.sqlite
        self.db_inode = 0
        self._top: dict[str, int] | None = None
        self.mapped = False                             # restored from an image (image.py)
        self._derived: dict[str, np.ndarray] = {}      # arrays made from the rows, until they change (`derived`)

    # --- views ----------------------------------------------------------------------------------
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
            self._top = self.files.top()
        return dict(self._top)

    @property
    def warnings(self) -> list[str]:
        out = [self.notice] if self.notice else []
        for path in sorted(self.warned):
            if warning := self.files.warning(path):
                out.append(warning)
            out += self.duplicates.get(path, [])
        return out

    def derived(self, name: str, make) -> np.ndarray:
        """`make()`, an array computed from the rows and scopes as they are (which rows are
        alive, their kinds and scopes), kept under `name` until a file is added or removed: a
        long-lived process recalls many times between two changes. It is shared: read-only."""
        got = self._derived.get(name)
        if got is None:
            got = self._derived[name] = make()
            got.flags.writeable = False
        return got

    # --- changes --------------------------------------------------------------------------------
    def remove_files(self, paths: list[str]) -> None:
        """Drop the rows of `paths` (those it holds). Their scopes' centroids are settled once, after
        all are out: a compact removes 8,400 files, and settling after each took a third of it."""
        touched, gone = [], []
        for path in paths:
            rows = self.files.pop(path, None)
            if rows is None:
                continue
            if self._top is not None and any(rows.top[p] >= self._top[p] for p in self._top):
                self._top = None  # it may have held the highest id: count again when asked
            numbers = np.arange(rows.start, rows.start + rows.n)  # a file's rows are contiguous
            self._alive[numbers] = False
            self.dead += len(numbers)
            gone.append(numbers)
            self.owner.clear(rows.start, rows.start + rows.n)
            self.duplicates.pop(path, None)
            self.warned.discard(path)
            for kind, key, _ in rows.scopes:
                self.holders[(kind, key)].pop(path, None)
                touched.append(self.scope_number[(kind, key)])
        if gone:  # each key forgotten only where it is held at a row removed here
            self._derived.clear()
            numbers = np.concatenate(gone)
            if isinstance(self.by_key, KeyIndex):  # a mapped snapshot's: one binary search for all
                self.by_key.discard(self._id_key[numbers], numbers)
            else:
                for number, key in zip(numbers.tolist(), self._id_key[numbers].tolist()):
                    if self.by_key.get(key) == number:
                        del self.by_key[key]
        self._settle(touched)

    def add_files(self, items: list[tuple[str, FileRows]]) -> None:
        """Append the rows of files not in the snapshot yet (a whole store at once when building).
        Each file's `vectors` are copied into the snapshot's matrix and let go."""
        total = sum(rows.n for _, rows in items)
        self._derived.clear()
        self.grow_rows(self.size + total)
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
                    self.grow_scopes(len(self.scopes) + 1)
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
            self.owner.add(rows, n)
            self.size += n
            self.files[path] = rows
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
            self._always[sl] = merged[4] != 0
        self._settle(touched)

    def restore(self, arrays: dict[str, np.ndarray], size: int, scopes: list[tuple[str, str, str]],
                table: FileTable, dead: int, duplicates: dict[str, list[str]], scope_residual: float) -> None:
        """Become the snapshot an image holds (`image.read`): its arrays as they are, its files as
        the table holds them (each file's `FileRows` made when something asks for it)."""
        self.adopt(arrays, size, scope_residual)
        self._derived.clear()
        self.scopes = scopes
        self.scope_number = dict(zip(map(itemgetter(0, 1), scopes), range(len(scopes))))  # no Python loop
        self.files = Files(table)
        starts, counts, first_scopes, scope_counts = table.numbers[:, :4].T
        rows = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
        if (np.any(first_scopes != np.cumsum(scope_counts) - scope_counts) or len(table.scope_number) != scope_counts.sum()
                or (len(rows) and (rows.min() < 0 or rows.max() >= size))):
            raise ValueError("the image's files do not match its rows")
        owner = np.full(size, -1, np.int32)  # rows of files removed before the image was written: dead
        owner[rows] = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        self.owner = _Owners(self.files, owner)
        self.holders = _Holders(self, table)
        self.warned = {table.paths[number] for number in table.warnings}
        live = arrays["key_rows"]  # the live rows by id key, as the image was written
        keys = self.id_key[live]
        if len(live) != np.count_nonzero(self.alive) or not self.alive[live].all() or np.any(keys[1:] < keys[:-1]):
            raise ValueError("the image's key order does not match its rows")
        self.by_key = KeyIndex.gathered(self._id_key, live)  # (a private copy of a page once a key moves)
        self.duplicates = duplicates
        self.warned |= set(duplicates)
        self.dead = dead
        self.mapped = True

    def compacted(self, adding: list[tuple[str, FileRows]] = ()) -> "Snapshot":
        """The same snapshot without dead rows (rows in path order, as a fresh build has them); with
        `adding`, files not in it yet (their rows' vectors held) among them: what adding them
        first, then compacting, gives, without growing this snapshot's matrices for rows dropped
        right after."""
        new = dict(adding)
        snap = Snapshot(self.dim, self.count + sum(rows.n for rows in new.values()) + 64, len(self.scopes) + 16)
        if self.head_basis is not None:  # the rows' directions are as they were: their heads are made in it
            snap.head_basis = np.array(self.head_basis)  # (a copy: a mapped one would keep the old image mapped)
        paths = sorted([*(path for path in self.files if path not in new), *new])
        for i in range(0, len(paths), 256):  # a slice at a time: no second copy of every vector
            chunk = [(path, new[path] if path in new else self.files[path]) for path in paths[i:i + 256]]
            for path, rows in chunk:
                if path not in new:
                    rows.vectors = self.vectors[rows.start:rows.start + rows.n]
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
        self.scopes_changed(at)
