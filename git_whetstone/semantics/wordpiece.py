"""BERT's uncased WordPiece tokenizer in plain Python, for the static embedding backend.

It splits text the way all-MiniLM-L6-v2's own tokenizer does, so a word maps to the same vocabulary
rows the table was distilled from:

1. clean: drop NUL, U+FFFD and control or format characters; every kind of whitespace becomes a space;
2. put spaces around CJK ideographs (each becomes a word of its own);
3. decompose (NFD), drop combining marks (accents), lowercase;
4. split on whitespace, and make every punctuation character a word of its own;
5. cut each word into the longest vocabulary pieces from the left, later pieces spelled `##…`;
   a word with a part no piece covers, or longer than 100 characters, is unknown as a whole.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from functools import lru_cache

MAX_WORD_CHARS = 100  # longer words are unknown as a whole, as in BERT

# ASCII: controls go (tab, newline and carriage return become spaces), everything else stays.
_ASCII_CLEAN = {c: None for c in (*range(0, 32), 127)} | {9: " ", 10: " ", 13: " "}
_ASCII_WORDS = re.compile(r"[a-z0-9]+|[^a-z0-9 ]")

# CJK Unified Ideographs and their extensions and compatibility blocks (not kana or hangul).
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


@lru_cache(maxsize=8192)
def _char_class(ch: str) -> str:
    """'' to drop, ' ' for whitespace, 'c' for a CJK ideograph, 'p' for punctuation, 'l' otherwise."""
    if ch in "\t\n\r ":
        return " "
    cp = ord(ch)
    category = unicodedata.category(ch)
    if cp == 0 or cp == 0xFFFD or category in ("Cc", "Cf", "Co", "Cs"):  # unassigned (Cn) stays
        return ""
    if ch.isspace():
        return " "
    if any(lo <= cp <= hi for lo, hi in _CJK):
        return "c"
    if category[0] == "P" or (cp < 128 and not ch.isalnum()):
        return "p"
    return "l"


def basic_words(text: str) -> list[str]:
    """Steps 1-4: the words and punctuation marks of `text`, lowercased and without accents."""
    if text.isascii():
        if not text.isprintable():  # printable ASCII has nothing to clean
            text = text.translate(_ASCII_CLEAN)
        return _ASCII_WORDS.findall(text.lower())
    kept = []
    for ch in text:
        kind = _char_class(ch)
        if kind == "c":
            kept.append(f" {ch} ")
        elif kind:
            kept.append(ch if kind != " " else " ")
    text = unicodedata.normalize("NFD", "".join(kept))
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
    # lowercase letter by letter, as BERT's tokenizer does: str.lower() alone would write a word-final
    # capital sigma as "ς", a token the model never saw in that place
    text = "".join(map(str.lower, text)) if "\u03a3" in text else text.lower()
    words: list[str] = []
    for chunk in text.split():
        if chunk.isalnum():
            words.append(chunk)
            continue
        start = 0
        for i, ch in enumerate(chunk):
            if _char_class(ch) == "p":
                if start < i:
                    words.append(chunk[start:i])
                words.append(ch)
                start = i + 1
        if start < len(chunk):
            words.append(chunk[start:])
    return words


class WordPiece:
    """Greedy longest-match-first WordPiece over a vocabulary of pieces (`##` marks a continuation).
    `word(w)` is the indices that spell one basic word, or None where BERT would say [UNK]."""

    CACHE = 100_000  # words remembered; rules repeat the same few thousand

    def __init__(self, vocab: Mapping[str, int]) -> None:
        self.vocab = vocab
        # "##" counted too: a bound, not exact
        self.longest = getattr(vocab, "longest", None) or max(map(len, vocab), default=0)
        self._cache: dict[str, tuple[int, ...] | None] = {}

    def word(self, word: str) -> tuple[int, ...] | None:
        try:
            return self._cache[word]
        except KeyError:
            pass
        found = self._spell(word)
        if len(self._cache) < self.CACHE:
            self._cache[word] = found
        return found

    def words(self, words: list[str]) -> list[tuple[int, ...] | None]:
        """`word` of each of `words`: one dict lookup a word once they are known."""
        found = list(map(self._cache.get, words))
        if None in found:  # words met for the first time (or unknown ones, which are cached as None)
            found = [self.word(w) if ids is None else ids for ids, w in zip(found, words)]
        return found

    def _spell(self, word: str) -> tuple[int, ...] | None:
        if len(word) > MAX_WORD_CHARS:
            return None
        vocab, ids, start = self.vocab, [], 0
        while start < len(word):
            end = min(len(word), start + self.longest)
            while end > start:
                index = vocab.get(word[start:end] if start == 0 else "##" + word[start:end])
                if index is not None:
                    ids.append(index)
                    break
                end -= 1
            else:
                return None
            start = end
        return tuple(ids)


class SortedVocab(Mapping):
    """The static table's vocabulary as mapped: pieces in byte order in `text` (an mmap), each
    piece's place (`starts`, `ends`) and row, found by binary search. A cold process spells a few
    dozen pieces, and a dict of all 30,000 costs more (4-9 ms) than all its lookups; after `LOOKUPS`
    of them (a big build) the dict is made once and used from then on."""

    LOOKUPS = 2048

    def __init__(self, text, starts: memoryview, ends: memoryview, rows: memoryview, longest: int,
                 joined: tuple[int, int]) -> None:
        self.text, self.starts, self.ends, self.rows, self.longest = text, starts, ends, rows, longest
        self._joined = joined  # where the pieces lie in `text`, one a line, for the dict
        self._dict: dict[str, int] | None = None
        self._left = self.LOOKUPS

    def get(self, piece: str, default=None):
        if self._dict is not None:
            return self._dict.get(piece, default)
        self._left -= 1
        if self._left < 0:
            return self.as_dict().get(piece, default)
        key, text, starts, ends = piece.encode(), self.text, self.starts, self.ends
        lo, hi = 0, len(ends)
        while lo < hi:
            mid = (lo + hi) >> 1
            if text[starts[mid]:ends[mid]] < key:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(ends) and text[starts[lo]:ends[lo]] == key:
            return self.rows[lo]
        return default

    def as_dict(self) -> dict[str, int]:
        if self._dict is None:
            at, length = self._joined
            self._dict = dict(zip(self.text[at:at + length].decode().split("\n"), self.rows.tolist()))
        return self._dict

    def __getitem__(self, piece: str) -> int:
        row = self.get(piece)
        if row is None:
            raise KeyError(piece)
        return row

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.ends)
