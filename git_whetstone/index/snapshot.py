"""A store's entries and vectors in memory: what recall and capture read (SPEC §5).

A snapshot is made from its files' rows (`FileRows`, in path order) and never changes: a change
on disk makes a new one (`changed`), which takes the rows of the files that did not change from
the old one. Row i of `vectors` is the entry `entries[i]`; beside them, the columns recall needs
and the scopes (each one's phrase vector, and its centroid: the normalised sum of its entries'
vectors). A row whose id an earlier file already claims is kept but not `alive`, with a warning.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..format.entry import id_key, key_id
from ..semantics.lexical import Lexicon
from .rows import FileRows


def _unit(rows: np.ndarray) -> np.ndarray:
    """`rows` scaled to length 1, in place (a row of zeros stays so)."""
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows /= np.where(norms == 0, 1, norms)
    return rows


class _Rows(Sequence):
    """`Snapshot.entries`: the entry at each row, its file's entries decoded on first use."""

    def __init__(self, snap: "Snapshot") -> None:
        self.snap = snap

    def __len__(self) -> int:
        return self.snap.size

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(self.snap.size))]
        file = int(np.searchsorted(self.snap.starts, int(row), side="right")) - 1
        return self.snap.rows[file].entries[int(row) - int(self.snap.starts[file])]


class _Ids(Mapping):
    """`Snapshot.by_id`: entry id -> row of its live copy."""

    def __init__(self, snap: "Snapshot") -> None:
        self.snap = snap

    def __getitem__(self, entry_id: str) -> int:
        row = self.snap.row_of(entry_id) if isinstance(entry_id, str) and len(entry_id) > 1 and \
            entry_id[0] in "LI" and entry_id[1:].isdigit() else None
        if row is None:
            raise KeyError(entry_id)
        return row

    def __iter__(self) -> Iterator[str]:
        return map(key_id, self.snap._keys.tolist())

    def __len__(self) -> int:
        return len(self.snap._keys)


class Snapshot:
    """Everything recall and capture need, as arrays over rows; `files` maps each path to its rows."""

    def __init__(self, dim: int, files: dict[str, FileRows], vectors: dict[str, np.ndarray] | None = None,
                 stored: Iterable[tuple[str, bytes]] = ()) -> None:
        """The snapshot of `files` (any order: kept in path order). Each file's entry vectors are
        `vectors[path]`, else its `vectors`, else the float32 blob `stored` gives for its path
        (index.sqlite's, read one at a time); they are copied into one matrix."""
        self.dim = dim
        paths = sorted(files)
        self.files = {path: files[path] for path in paths}
        self.rows = list(self.files.values())
        self._at = {path: i for i, path in enumerate(paths)}
        counts = np.array([rows.n for rows in self.rows], np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.size = int(counts.sum())
        self.vectors = np.empty((self.size, dim), np.float32)
        empty = set()
        for path, rows, start, n in zip(paths, self.rows, self.starts.tolist(), counts.tolist()):
            given = vectors[path] if vectors is not None and path in vectors else rows.vectors
            if given is None:
                empty.add(path)
            else:
                self.vectors[start:start + n] = given
        if empty:
            for path, blob in stored:
                if path in empty:
                    empty.remove(path)
                    self.vectors[self.file_rows_of(path)] = np.frombuffer(blob, np.float32).reshape(-1, dim)
        if empty:
            raise ValueError(f"no vectors for {len(empty)} files, such as {min(empty)}")
        columns = np.concatenate([rows.columns for rows in self.rows], axis=1) if self.rows else np.zeros((5, 0), np.int64)
        self.recurrence, self.last_seen, local, self.id_key, always = columns
        self.always = always != 0
        self.is_learning = np.repeat([path.startswith("learnings/") for path in paths], counts).astype(bool)
        self._scopes(paths, counts, local)
        self._scope_words: dict[str, list[tuple[int, frozenset[str]]]] | None = None
        self.stamps: dict[str, str] = {}
        self.notice: str | None = None  # said once, by the call that saw it
        self.watch = None                # a long-lived process's change feed (watch.py)
        self.db = None                   # and its open index.sqlite
        self.db_inode = 0
        self._ids()

    def _ids(self) -> None:
        """Which row holds each id, the warnings, and nothing derived yet: the last step of making
        a snapshot. A row whose id an earlier file (in path order) already claims is left out (not
        `alive`), with a warning that names both."""
        order = np.argsort(self.id_key, kind="stable")
        keys = self.id_key[order]
        again = np.flatnonzero(keys[1:] == keys[:-1]) + 1  # a later row of the same key
        self.alive = np.ones(self.size, bool)
        self.alive[order[again]] = False
        self.duplicates: dict[str, list[str]] = {}
        for at in again.tolist():
            first = at - 1
            while first and keys[first - 1] == keys[at]:
                first -= 1
            here, there = self.entries[int(order[at])], self.entries[int(order[first])]
            self.duplicates.setdefault(here.path, []).append(
                f"{here.path}:{here.line}: duplicate id {here.id} (also in {there.path}); this copy is left out")
        live = np.ones(len(keys), bool)
        live[again] = False
        self._keys, self._key_rows = keys[live], order[live]
        self._warnings = [w for path, rows in self.files.items()
                          for w in ([rows.warning] if rows.warning else []) + self.duplicates.get(path, [])]
        self._derived: dict[str, np.ndarray] = {}
        self._lexicon: Lexicon | None = None
        self._pending: tuple[Lexicon, list[list]] | None = None  # a predecessor's lexicon, and the changes since

    def _scopes(self, paths: list[str], counts: np.ndarray, local: np.ndarray) -> None:
        """The scopes every file names, numbered in the order files name them; each row's scope
        (`local`: its number among its file's scopes); each scope's phrase (as the first file naming
        it spells it) and centroid (the files' sums of its entry vectors, added up and normalised).
        Python walks the files' scope names only: the rows and vectors are moved by numpy at once."""
        self.scopes: list[tuple[str, str, str]] = []
        self.scope_number: dict[tuple[str, str], int] = {}
        self.holders: dict[tuple[str, str], list[str]] = {}
        named: list[int] = []  # per file, per scope it names (in its order): the scope's number
        firsts: list[int] = []  # per scope: where in `named` its first file names it
        for path, rows in zip(paths, self.rows):
            for kind, key, display in rows.scopes:
                at = self.scope_number.get((kind, key))
                if at is None:
                    at = self.scope_number[(kind, key)] = len(self.scopes)
                    self.scopes.append((kind, key, display))
                    self.holders[(kind, key)] = []
                    firsts.append(len(named))
                self.holders[(kind, key)].append(path)
                named.append(at)
        named_at = np.array(named, np.int64)
        where = np.cumsum([0] + [len(rows.scopes) for rows in self.rows])[:-1]  # each file's first in `named`
        self.scope_of = named_at[np.repeat(where, counts) + local]
        none = np.zeros((0, self.dim), np.float32)  # a row per scope a file names, below
        self.phrases = np.concatenate([none, *(rows.phrases for rows in self.rows)])
        sums = np.concatenate([none, *(rows.sums for rows in self.rows)])
        if len(firsts) < len(named):  # a scope more than one file names: one row, its files' sums added
            again = np.ones(len(named), bool)
            again[firsts] = False
            self.phrases, once = self.phrases[firsts], sums[firsts]
            np.add.at(once, named_at[again], sums[again])
            sums = once
        self.centroids = _unit(sums)  # in place: at 100,000 entries a copy is 10 MB more at the peak

    def row_of(self, entry_id: str) -> int | None:
        """The row of the live entry `entry_id`, or None."""
        key = id_key(entry_id)
        at = int(np.searchsorted(self._keys, key))
        return int(self._key_rows[at]) if at < len(self._keys) and self._keys[at] == key else None

    @property
    def by_id(self) -> "_Ids":
        """Entry id -> the row of its live copy."""
        return _Ids(self)

    # --- reading ----------------------------------------------------------------------------------
    @property
    def entries(self) -> _Rows:
        return _Rows(self)

    @property
    def count(self) -> int:
        """Live entries."""
        return len(self._keys)

    @property
    def known(self) -> dict[tuple[str, str], str]:
        """(kind, scope key) -> the first file that holds it."""
        return {scope: paths[0] for scope, paths in self.holders.items()}

    @property
    def top(self) -> dict[str, int]:
        """The highest id number per prefix any file holds or claims."""
        return {p: max([0, *(rows.top[p] for rows in self.rows)]) for p in ("L", "I")}

    @property
    def warnings(self) -> list[str]:
        return ([self.notice] if self.notice else []) + self._warnings

    @property
    def warned(self) -> set[str]:
        """The files read with a warning, or holding a duplicate id: read again when HEAD moves."""
        return {path for path, rows in self.files.items() if rows.warning} | set(self.duplicates)

    def file_rows_of(self, path: str) -> slice:
        """Where one file's entries are among the rows."""
        start = int(self.starts[self._at[path]])
        return slice(start, start + self.files[path].n)

    def file_vectors(self, path: str) -> np.ndarray:
        """The rows of one file's entries in `vectors`."""
        return self.vectors[self.file_rows_of(path)]

    def similarities(self, vector: np.ndarray) -> np.ndarray:
        """Each row's cosine to `vector` (rows are unit vectors), dead rows -1."""
        return np.where(self.alive, self.vectors @ vector, np.float32(-1))

    def score(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """How close each row's text is to each of `queries` (queries × rows), and each scope (the
        closer of its phrase and its centroid: queries × scopes). A query's scores lie side by side:
        the best over the queries is an elementwise maximum of a few rows, not a reduction along
        each short one (50 times faster at 100,000 rows)."""
        scopes = np.maximum(queries @ self.centroids.T, queries @ self.phrases.T)
        return queries @ self.vectors.T, scopes

    def lexicon(self) -> Lexicon:
        """BM25 over every row's words (body and scope), made on first use: a predecessor's with the
        changed files' words merged in (`Lexicon.changed`), else from every file's postings (which
        outlive the snapshot as long as their file does not change)."""
        if self._lexicon is None and self._pending is not None:  # a predecessor's, with the changes merged in
            self._lexicon, changes = self._pending
            for spans in changes:
                self._lexicon = self._lexicon.changed(spans)
        if self._lexicon is None:
            self._lexicon = Lexicon.of(self.size, list(zip(self.starts.tolist(), (rows.words() for rows in self.rows))))
        self._pending = None
        return self._lexicon

    def scopes_named(self, words: set[str]) -> list[int]:
        """The scopes whose every name word (`words.name_words`: stemmed, any order) is in `words`."""
        if self._scope_words is None:
            by_word: dict[str, list[tuple[int, frozenset[str]]]] = {}
            seen: set[int] = set()
            for rows in self.rows:
                for (kind, key, _), line in zip(rows.scopes, rows.names().split("\n")):
                    at = self.scope_number[(kind, key)]
                    name = frozenset(line.split())
                    if at not in seen and name:
                        by_word.setdefault(min(name), []).append((at, name))
                    seen.add(at)
            self._scope_words = by_word
        return [at for word in words for at, name in self._scope_words.get(word, ()) if name <= words]

    def derived(self, name: str, make: Callable[[], np.ndarray]) -> np.ndarray:
        """`make()`, kept under `name` for this snapshot's life: a long-lived process recalls many
        times between two changes. Shared: read-only."""
        got = self._derived.get(name)
        if got is None:
            got = self._derived[name] = make()
            got.flags.writeable = False
        return got

    # --- changes --------------------------------------------------------------------------------
    def changed(self, removed: list[str], added: dict[str, FileRows]) -> "Snapshot":
        """This snapshot without the files `removed` and with those `added` (their vectors held):
        a new one, taking the other files' rows from this one's arrays. When the files changed only
        their entries (each still names the scopes it named: a capture, a reinforce, a revise), the
        new rows are spliced into copies of the arrays and only those scopes' centroids are made
        again; otherwise the snapshot is made anew from every file's rows."""
        if removed or any(path not in self.files or rows.scopes != self.files[path].scopes
                          for path, rows in added.items()):
            gone = set(removed) | set(added)
            kept = {path: rows for path, rows in self.files.items() if path not in gone}
            snap = Snapshot(self.dim, {**kept, **added}, {path: self.file_vectors(path) for path in kept})
        else:
            snap = self._spliced(added)
        snap.watch, snap.db, snap.db_inode = self.watch, self.db, self.db_inode
        return snap

    def _spliced(self, added: dict[str, FileRows]) -> "Snapshot":
        """`changed` for files that name the scopes they named: a shallow copy whose row arrays are
        this one's with those files' stretches replaced (numpy copies the rest at once), whose scope
        tables are shared, whose changed scopes' centroids are their files' sums added again, and
        whose lexicon (when this one has one, or one to come) gets the files' words merged in on
        first use."""
        snap = copy.copy(self)
        snap.files = {**self.files, **added}  # the same paths, in the same order
        snap.rows = list(snap.files.values())
        counts = np.array([rows.n for rows in snap.rows], np.int64)
        snap.starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        snap.size = int(counts.sum())
        spans = [(int(self.starts[self._at[path]]), path) for path in sorted(added, key=self._at.__getitem__)]

        def spliced(old: np.ndarray, new: Callable[[str], np.ndarray]) -> np.ndarray:
            parts, done = [], 0
            for start, path in spans:
                parts += [old[done:start], new(path)]
                done = start + self.files[path].n
            return np.concatenate([*parts, old[done:]])

        def numbered(path: str) -> np.ndarray:  # its rows' scopes, as the snapshot numbers them
            rows = added[path]
            return np.array([self.scope_number[(kind, key)] for kind, key, _ in rows.scopes], np.int64)[rows.columns[2]]

        snap.vectors = spliced(self.vectors, lambda path: added[path].vectors)
        snap.recurrence = spliced(self.recurrence, lambda path: added[path].columns[0])
        snap.last_seen = spliced(self.last_seen, lambda path: added[path].columns[1])
        snap.scope_of = spliced(self.scope_of, numbered)
        snap.id_key = spliced(self.id_key, lambda path: added[path].columns[3])
        snap.always = spliced(self.always, lambda path: added[path].columns[4] != 0)
        snap.is_learning = spliced(self.is_learning, lambda path: np.full(added[path].n, path.startswith("learnings/")))
        touched = sorted({(kind, key) for rows in added.values() for kind, key, _ in rows.scopes})
        sums = np.zeros((len(touched), self.dim), np.float32)
        for total, scope in zip(sums, touched):  # each scope's files' sums, added up
            for path in self.holders[scope]:
                rows = snap.files[path]
                total += rows.sums[[named[:2] for named in rows.scopes].index(scope)]
        snap.centroids = self.centroids.copy()
        snap.centroids[[self.scope_number[scope] for scope in touched]] = _unit(sums)
        snap._ids()
        if self._lexicon is not None or self._pending is not None:  # merged on first use: a capture pays nothing
            lexicon, changes = (self._lexicon, []) if self._lexicon is not None else self._pending
            snap._pending = (lexicon, [*changes, [(start, start + self.files[path].n, added[path].n,
                                                   added[path].words()) for start, path in spans]])
        return snap
