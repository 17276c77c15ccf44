"""Lexical matching beside the embedding (SPEC §5): BM25 over each rule's words.

A cosine misses a rule whose one telling word ("negative", "delivery dates") is drowned by the rest
of a long intent; a word the intent shares with few rules is strong evidence whatever the cosine.
Each rule is read as its content words (`words.content_words`: normalised, stopwords out, lightly
stemmed) from its body and scope, and scored against a query's words with Okapi BM25. The idf is
put on a 0-1 scale (a word only one rule holds scores about 1, a word every rule holds about 0), so a
score means the same in a store of 40 rules and of 40,000 and can be added to a cosine.

`postings` reads a batch of texts once (a scope file's) into word numbers: hashes, so there is no
vocabulary to keep and index.sqlite holds them as they are (`portable`). `Lexicon` joins the postings
of many (a snapshot's rows), merges a changed file's into them (`changed`), and scores queries
against them with a few binary searches.
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache

import numpy as np

from .words import content_words

try:  # hashlib's own BLAKE2, without the OpenSSL that `import hashlib` loads (5 ms and more) for every CLI recall
    from _blake2 import blake2b
except ImportError:
    from hashlib import blake2b

K1 = 1.2   # BM25's term-frequency saturation
B = 0.75   # and its length normalisation

Postings = tuple[np.ndarray, np.ndarray, np.ndarray]


@lru_cache(maxsize=1 << 16)  # a store says the same few thousand words again and again
def number(word: str) -> int:
    """A word as a number every process and every store agrees on: 64 bits of its BLAKE2 hash (two
    of a store's words sharing one is about as likely as a one in 10^10 draw)."""
    return int.from_bytes(blake2b(word.encode(), digest_size=8).digest(), "little", signed=True)


def postings(texts: list[str]) -> Postings:
    """Each text's distinct content words: (text number, word number, count), one row per pair."""
    rows, found, counts = [], [], []
    for at, text in enumerate(texts):
        for word, n in Counter(content_words(text)).items():
            rows.append(at)
            found.append(word)
            counts.append(n)
    return np.array(rows, np.int32), np.array(list(map(number, found)), np.int64), np.array(counts, np.float32)


def portable(found: Postings) -> tuple[bytes, bytes]:
    """Postings as index.sqlite keeps them: the word numbers, and the text numbers with the counts."""
    rows, terms, counts = found
    return terms.tobytes(), rows.tobytes() + counts.tobytes()


def from_portable(terms: bytes, record: bytes) -> Postings:
    """The postings `portable` wrote, read in place (no copy)."""
    half = len(record) // 2
    return (np.frombuffer(record, np.int32, half // 4), np.frombuffer(terms, np.int64),
            np.frombuffer(record, np.float32, half // 4, half))


def query_terms(text: str) -> np.ndarray:
    """The distinct content words of a query, as numbers, in order. (Sorted, not `np.unique`d: the
    set has made them distinct, and np.unique imports numpy.ma, 10 ms of a CLI recall.)"""
    return np.sort(np.fromiter(map(number, set(content_words(text))), np.int64))


class Lexicon:
    """BM25 over documents: the postings (word, document, count) sorted by word, and each document's
    length (its words, counted)."""

    def __init__(self, terms: np.ndarray, rows: np.ndarray, counts: np.ndarray, length: np.ndarray) -> None:
        self.terms, self.rows, self.counts, self.length, self.size = terms, rows, counts, length, len(length)
        mean = float(length.mean()) if self.size and length.any() else 1.0
        self.norm = (K1 * (1 - B + B * length / mean)).astype(np.float32)  # per document
        # the idf of a word only one document holds: the top of the 0-1 scale
        self.top_idf = float(np.log1p((self.size - 0.5) / 1.5)) if self.size else 1.0

    @classmethod
    def of(cls, size: int, parts: list[tuple[int, Postings]]) -> "Lexicon":
        """The lexicon of `size` documents given their postings (document, word, count) in parts,
        each with the number of its first document."""
        def joined(column: int, dtype: type) -> np.ndarray:
            return np.concatenate([np.zeros(0, dtype), *(p[column] + start if column == 0 else p[column]
                                                         for start, p in parts)], dtype=dtype)
        # one column at a time: at 100,000 rules the unsorted and sorted copies of all three at once
        # would be 20 MB more at the peak
        terms = joined(1, np.int64)
        order = np.argsort(terms)
        terms = terms[order]
        rows = joined(0, np.int32)[order]
        counts = joined(2, np.float32)[order]
        length = np.zeros(size, np.float32)
        np.add.at(length, rows, counts)  # bincount would make int64 and float64 copies of both first
        return cls(terms, rows, counts, length)

    def changed(self, spans: list[tuple[int, int, int, Postings]]) -> "Lexicon":
        """This lexicon with the documents from `start` to `end` of each span (in order, apart, at
        least one) replaced by `n` documents whose postings are given (numbered from 0); the
        documents after a span move by its change of size. The new postings are merged into the
        sorted ones and numpy moves the rest at once: what a capture costs the next recall."""
        starts = np.array([start for start, _, _, _ in spans], np.int64)
        ends = np.array([end for _, end, _, _ in spans], np.int64)
        moved = np.concatenate([[0], np.cumsum([n - (end - start) for start, end, n, _ in spans])])
        at = np.searchsorted(ends, self.rows, "right")  # the first span that ends after each posting's document
        keep = (at == len(spans)) | (self.rows < starts[np.minimum(at, len(spans) - 1)])
        length, new, done = [], [], 0
        for (start, end, n, (docs, words, tf)), shift in zip(spans, moved.tolist()):
            made = np.zeros(n, np.float32)
            np.add.at(made, docs, tf)
            length += [self.length[done:start], made]
            new.append((docs + (start + shift), words, tf))
            done = end
        docs, words, tf = (np.concatenate([part[column] for part in new]) for column in range(3))
        order = np.argsort(words, kind="stable")
        terms = self.terms[keep]
        where = np.searchsorted(terms, words[order])
        return Lexicon(np.insert(terms, where, words[order]),
                       np.insert((self.rows + moved[at])[keep].astype(np.int32), where, docs[order].astype(np.int32)),
                       np.insert(self.counts[keep], where, tf[order]),
                       np.concatenate([*length, self.length[done:]]))

    def idf(self, df: int) -> float:
        """How telling a word held by `df` of the documents is, 0-1 (Lucene's idf over its top)."""
        return np.log1p((self.size - df + 0.5) / (df + 0.5)) / self.top_idf

    def matches(self, query: np.ndarray) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """Per word of `query` some document holds: its idf, the documents that hold it and its share
        of their BM25 score."""
        lo = np.searchsorted(self.terms, query, "left")
        hi = np.searchsorted(self.terms, query, "right")
        out = []
        for start, end in zip(lo.tolist(), hi.tolist()):
            if end > start:
                rows, tf, idf = self.rows[start:end], self.counts[start:end], float(self.idf(end - start))
                out.append((idf, rows, idf * tf * (K1 + 1) / (tf + self.norm[rows])))
        return out
