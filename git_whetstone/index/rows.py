"""One scope file's share of the index (`FileRows`): its entries, their vectors and columns, its scopes.

A file's entries are kept as compressed JSON until something reads them, so a store of 100,000
entries loads as a few arrays per file; the integer columns recall needs (recurrence, last_seen as
a day number, the entry's scope among the file's, its id as a number, whether it holds for every
task) sit beside them.
"""
from __future__ import annotations

import datetime as dt
import json
import zlib
from functools import lru_cache

import numpy as np

from ..format.entry import Entry, id_key
from ..format.ids import claimed_numbers
from ..format.layout import scope_key
from ..semantics.lexical import Postings, from_portable, portable, postings
from ..semantics.words import name_words

COLUMNS = ("recurrence", "last_seen", "scope", "id_key", "always")


class FileRows:
    """One scope file as the index holds it. `vectors` (its entries' body vectors) is held by a file
    just read, until it is saved and a snapshot has copied them into its matrix (a file loaded from
    index.sqlite has none: they go from there straight into the matrix); `phrases` are its scopes'
    phrase vectors, `sums` the sums of each scope's entry vectors (a snapshot adds them up into centroids)."""

    def __init__(self, stamp: str, scopes: list[tuple[str, str, str]], phrases: np.ndarray, sums: np.ndarray,
                 columns: np.ndarray, top: dict[str, int], warning: str | None = None, *,
                 entries: list[Entry] | None = None, raw: bytes | None = None, vectors: np.ndarray | None = None,
                 words: tuple[bytes, bytes] | None = None, names: str | None = None) -> None:
        self.stamp, self.scopes, self.phrases, self.sums, self.columns = stamp, scopes, phrases, sums, columns
        self.top, self.warning, self.vectors = top, warning, vectors
        self._entries, self._raw = entries, raw
        self._stored_words, self._names = words, names
        self.n = columns.shape[1]

    @property
    def entries(self) -> list[Entry]:
        if self._entries is None:
            self._entries = [Entry(*row[:10], tuple(row[10]), row[11], tuple(row[12]))
                             for row in json.loads(zlib.decompress(self._raw))]
        return self._entries

    def words(self) -> Postings:
        """Its entries' content words, body and scope (`lexical.postings`): read once per version of
        the file, like its vectors, and kept in index.sqlite beside them."""
        return from_portable(*self.stored_words())

    def stored_words(self) -> tuple[bytes, bytes]:
        """`words()` as index.sqlite keeps them (`lexical.portable`), made once per version of the file."""
        if self._stored_words is None:
            self._stored_words = portable(postings([f"{e.body}\n{e.scope}" for e in self.entries]))
        return self._stored_words

    def names(self) -> str:
        """Its scopes' name words (`words.name_words`), a line each, words apart by spaces: what
        tells recall that an intent names a scope, kept in index.sqlite."""
        if self._names is None:
            self._names = "\n".join(" ".join(name_words(display)) for _, _, display in self.scopes)
        return self._names

    def text(self) -> bytes:
        """The entries as compressed UTF-8 JSON (what index.sqlite keeps)."""
        if self._raw is None:
            self._raw = zlib.compress(json.dumps([list(e) for e in self._entries], ensure_ascii=False).encode(), 1)
        return self._raw

    def claim(self, raw: bytes) -> None:
        """Count the ids a broken file's text still claims (its entries are left out of recall, but
        a new id must never repeat one a person wrote there)."""
        for prefix, number in claimed_numbers(raw.decode("utf-8", "replace")).items():
            self.top[prefix] = max(self.top[prefix], number)


def file_rows(stamp: str, entries: list[Entry], warning: str | None, vectors: dict[str, np.ndarray],
              dim: int) -> FileRows:
    """A parsed file's rows; `vectors` holds the vector of every body and scope phrase, by text."""
    scopes: dict[tuple[str, str], int] = {}
    display: list[tuple[str, str, str]] = []
    for e in entries:
        key = (e.kind, scope_key(e.scope))
        if key not in scopes:
            scopes[key] = len(display)
            display.append((e.kind, key[1], e.scope))
    columns = np.array([[e.recurrence for e in entries], [day_number(e.last_seen) for e in entries],
                        [scopes[(e.kind, scope_key(e.scope))] for e in entries], [id_key(e.id) for e in entries],
                        [e.always for e in entries]], np.int64).reshape(len(COLUMNS), len(entries))
    top = {prefix: max((int(e.id[1:]) for e in entries if e.id[0] == prefix), default=0) for prefix in ("L", "I")}
    matrix = _stack([vectors[e.body] for e in entries], dim)
    sums = np.zeros((len(display), dim), np.float32)
    for row, at in enumerate(columns[2].tolist()):
        sums[at] += matrix[row]
    return FileRows(stamp, display, _stack([vectors[s[2]] for s in display], dim), sums, columns, top, warning,
                    entries=entries, vectors=matrix)


def _stack(rows: list[np.ndarray], dim: int) -> np.ndarray:
    return np.stack(rows).astype(np.float32, copy=False) if rows else np.zeros((0, dim), np.float32)


def text_hashes(texts: list[str]) -> list[str]:
    """A short hash of each text: how index.sqlite keeps a vector whose text left its file."""
    if not texts:
        return []
    import hashlib  # here: a recall from a fresh index hashes nothing, and hashlib loads OpenSSL (5 ms and more)
    return [hashlib.sha1(text.encode("utf-8")).hexdigest()[:20] for text in texts]


@lru_cache(maxsize=4096)  # a store's dates repeat: a few hundred days
def day_number(iso: str | None) -> int:
    return dt.date.fromisoformat(iso).toordinal() if iso else 0
