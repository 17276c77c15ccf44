"""What the index holds per entry and per scope file: the records recall and capture read.

An `Entry` is one learning or issue as parsed from its block. A `FileRows` is one scope file's
share of the index: per-entry columns, its scopes with the sum of their entry vectors and their
phrase vectors, and its entries, kept as compressed JSON until something reads them.
"""
from __future__ import annotations

import datetime as dt
import json
import zlib
from collections import OrderedDict
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ..format.ids import claimed_numbers
from ..format.layout import scope_key

PARSED_FILES = 256  # files whose entries stay parsed in a long-lived process (the rest: JSON text): a
# recall reads those of a dozen files; 512 kept 5 MB of entries parsed after 300 recalls at 100,000 entries


class Entry(NamedTuple):
    """One learning or issue as recall and capture see it."""

    id: str
    kind: str
    path: str
    line: int
    title: str
    scope: str
    body: str
    recurrence: int
    first_seen: str | None
    last_seen: str | None
    provenance: tuple[str, ...]
    always: bool = False  # `- applies: always`: a rule for every task of the skill
    differs: tuple[str, ...] = ()  # `- differs_from:`: the ids of the entries said to hold beside this one


def differs(a: Entry, b: Entry) -> bool:
    """Whether the caller said `a` and `b` hold side by side (`differs_from`, written on either of
    them): such a pair is never asked about, mentioned, merged or reported as a conflict again."""
    return b.id in a.differs or a.id in b.differs


COLUMNS = 5  # per-entry integer columns: recurrence, last_seen, scope index, id key, always


def id_key(entry_id: str) -> int:
    """L1, I1, L2, … as one integer that sorts by number, learnings first (I<n> is 2n+1)."""
    return int(entry_id[1:]) * 2 + (entry_id[0] == "I")


def key_id(key: int) -> str:
    return f"{'I' if key & 1 else 'L'}{key >> 1}"


class FileRows:
    """One scope file's share of the index: per-entry columns (recurrence, last_seen as a day
    number, position of its scope in `scopes`, id key, 1 when always-on), its scopes with the sum of their entry
    vectors and their phrase vectors, and its entries. Loaded from index.sqlite, the entries stay
    JSON text until something reads them, so a store of 100,000 entries loads in a few arrays.
    `vectors` is held only until the snapshot has copied the rows into its matrix."""

    def __init__(self, stamp: str, scopes: list[tuple[str, str, str]], sums: np.ndarray, phrases: np.ndarray,
                 columns: np.ndarray, top: dict[str, int], warning: str | None = None, *,
                 entries: list[Entry] | None = None, raw: bytes | None = None,
                 vectors: np.ndarray | None = None) -> None:
        self.stamp, self.scopes, self.sums, self.phrases = stamp, scopes, sums, phrases
        self.columns = columns                  # (COLUMNS, entries) int64
        self.top, self.warning = top, warning   # highest id number per prefix
        self._entries, self.raw, self.vectors = entries, raw, vectors
        self.n = columns.shape[1]
        self.start = 0                          # first row in the snapshot

    recurrence = property(lambda self: self.columns[0])
    last_seen = property(lambda self: self.columns[1])
    scope_index = property(lambda self: self.columns[2])
    id_key = property(lambda self: self.columns[3])
    always = property(lambda self: self.columns[4])

    @property
    def scope_at(self) -> dict[tuple[str, str], int]:
        """(kind, key) -> position in `scopes`."""
        return {(kind, key): i for i, (kind, key, _) in enumerate(self.scopes)}

    @property
    def entries(self) -> list[Entry]:
        if self._entries is None:
            self._entries = decode(self.raw)
            _PARSED[id(self)] = self
            if len(_PARSED) > PARSED_FILES:
                _PARSED.popitem(last=False)[1].unparse()
        return self._entries

    def text(self) -> bytes:
        """The entries as compressed UTF-8 JSON: 0.4 KB an entry where a str of the same JSON took
        1.6 (every provenance line holds a dash, and one non-ASCII character makes a str two bytes
        a character). Parsed again in about 20 µs a file."""
        if self.raw is None:
            # level 1: a build compresses 100,000 entries, and level 6 made them only a tenth smaller
            self.raw = zlib.compress(json.dumps([list(e) for e in self._entries], ensure_ascii=False).encode(), 1)
        return self.raw

    def unparse(self) -> None:
        """Keep the entries as JSON text only (what was handed out stays valid)."""
        self.text()
        self._entries = None
        _PARSED.pop(id(self), None)

    def claim(self, raw: bytes) -> None:
        """Count the ids a broken file's text still claims (its entries are left out of recall,
        but a new id must never repeat one a person wrote there)."""
        for prefix, number in claimed_numbers(raw.decode("utf-8", "replace")).items():
            self.top[prefix] = max(self.top[prefix], number)


_PARSED: OrderedDict[int, FileRows] = OrderedDict()


def decode(raw: bytes) -> list[Entry]:
    return [Entry(*row[:10], tuple(row[10]), row[11], tuple(row[12])) for row in json.loads(zlib.decompress(raw))]


def texts_of(raw: bytes) -> tuple[list[str], list[str]]:
    """The bodies and the scopes of the entries `raw` holds (as `decode` gives them, in order),
    read from the JSON rows without building an `Entry` (what retiring a record needs)."""
    rows = json.loads(zlib.decompress(raw))
    return [row[6] for row in rows], [row[5] for row in rows]


def text_hashes(texts: list[str]) -> list[str]:
    """`text_hash` of each of many texts."""
    if not texts:
        return []
    import hashlib  # here: a recall from a fresh index hashes nothing, and hashlib loads OpenSSL (5 ms and more)
    sha1 = hashlib.sha1
    return [sha1(text.encode("utf-8")).hexdigest()[:20] for text in texts]


def text_hash(text: str) -> str:
    return text_hashes([text])[0]


@lru_cache(maxsize=4096)  # a store's dates repeat: a few hundred days
def day_number(iso: str | None) -> int:
    return dt.date.fromisoformat(iso).toordinal() if iso else 0


def file_rows(stamp: str, entries: list[Entry], warning: str | None, vectors: dict[str, np.ndarray],
               dim: int) -> FileRows:
    """A parsed file's rows; `vectors` holds the vector of every body and scope phrase, by text."""
    matrix = (np.stack([vectors[e.body] for e in entries]) if entries
              else np.zeros((0, dim), np.float32))
    scopes: dict[tuple[str, str], int] = {}
    display: list[tuple[str, str, str]] = []
    for e in entries:
        k = (e.kind, scope_key(e.scope))
        if k not in scopes:
            scopes[k] = len(display)
            display.append((e.kind, k[1], e.scope))
    sums = np.zeros((len(display), dim), np.float32)
    index = np.zeros(len(entries), np.int64)
    for i, e in enumerate(entries):
        index[i] = scopes[(e.kind, scope_key(e.scope))]
        sums[index[i]] += matrix[i]
    phrases = (np.stack([vectors[s[2]] for s in display]) if display
               else np.zeros((0, dim), np.float32))
    columns = np.array([[e.recurrence for e in entries], [day_number(e.last_seen) for e in entries], index,
                        [id_key(e.id) for e in entries], [e.always for e in entries]],
                       np.int64).reshape(COLUMNS, len(entries))
    top = {prefix: max((int(e.id[1:]) for e in entries if e.id[0] == prefix), default=0) for prefix in ("L", "I")}
    return FileRows(stamp, display, sums, phrases, columns, top, warning, entries=entries, vectors=matrix)


def entries_of(parsed: list, rel: str) -> list[Entry]:
    """The entries of parsed blocks, each read in one pass over its fields: what `Block`'s
    properties give (the first value of each field, every provenance line decoded), for a tenth
    less of a build's parsing time."""
    from ..format.blocks import ALWAYS, decode_value, ids_of  # here: a load from the index parses nothing

    out = []
    for b in parsed:
        first: dict[str, str] = {}
        provenance = []
        for key, value in b.fields:
            if key == "provenance":
                provenance.append(decode_value(value))
            elif key not in first:
                first[key] = value
        learning = b.id[0] == "L"
        out.append(Entry(b.id, "learning" if learning else "issue", rel, b.line, b.title,
                         " ".join((first.get("scope") or "").split()), b.body,
                         int(first.get("recurrence") or 1) if learning else 0, first.get("first_seen"),
                         first.get("last_seen"), tuple(provenance), first.get("applies") == ALWAYS,
                         ids_of(first.get("differs_from"))))
    return out


def clean_entries(found: list[tuple], rel: str) -> list[Entry]:
    """The entries of a file's blocks as `blocks.clean_blocks` gives them: what `entries_of` makes of
    its parsed blocks, without the blocks (a build reads 100,000 of them)."""
    from ..format.blocks import ALWAYS, ids_of  # here, as in entries_of

    out = []
    for bid, title, body, line, values, provenance in found:
        learning = bid[0] == "L"
        out.append(Entry(bid, "learning" if learning else "issue", rel, line, title, " ".join(values["scope"].split()),
                         body, int(values["recurrence"]) if learning else 0, values.get("first_seen"),
                         values.get("last_seen"), provenance, values.get("applies") == ALWAYS,
                         ids_of(values.get("differs_from"))))
    return out
