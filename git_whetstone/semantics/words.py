"""Words of a rule, as every part of whetstone that reads text sees them (the hashing embedder,
the judge, recall's clauses, compact's scope names), so they all agree on what a word is.
index.sqlite keeps each rule's content words and each scope's name words as made here: a change to
what a word is must raise `index.cache.SCHEMA`, so every index is rebuilt.
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_TOKEN = re.compile(r"[^\W_]+|[^\w\s]")
_APOSTROPHE_NOT = re.compile(r"n['\u2019]t\b")

NEGATIONS = frozenset("""never not no don't dont avoid avoiding without stop none nothing nor neither
cannot can't won't shouldn't mustn't isn't aren't doesn't didn't instead rather than""".split())
STOPWORDS = frozenset("""a an the and or but if then else of to in on at by for from with as is are was
were be been being it its this that these those there here into onto over under than so such
we you your i me my our us they them their he she his her do does did done should must shall
will would can could may might please always also just only very really use using used make
keep all any each every some one per via when where which who whom what while
""".split()) | NEGATIONS


def normalize(text: str) -> str:
    """NFKC, case-folded, accents taken off Latin letters ("café" meets "cafe"), and "n't" spelled
    out so it reads as a negation word."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if not text.isascii():
        text = "".join(map(_fold_accent, text))
    return _APOSTROPHE_NOT.sub(" not", text)


@lru_cache(maxsize=4096)
def _fold_accent(ch: str) -> str:
    base = unicodedata.normalize("NFD", ch)[0]
    return base if base.isascii() and base.isalpha() else ch


NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}


_PUNCTUATION = frozenset(chr(c) for c in range(128) if not chr(c).isalnum())  # as tokens: ASCII symbols
_SEPARATORS = frozenset("-/.,:;!?'\"()[]{}|`")  # what joins or decorates the words of a name, and means nothing


def words(text: str) -> list[str]:
    """Word and symbol tokens of `text` (ASCII punctuation dropped, small number words as digits)."""
    return _tokens(text, _PUNCTUATION)


def _tokens(text: str, dropped: frozenset[str]) -> list[str]:
    return [NUMBER_WORDS.get(t, t) for t in _TOKEN.findall(normalize(text)) if t not in dropped]


@lru_cache(maxsize=1 << 16)  # a store says the same few thousand words again and again
def stem(word: str) -> str:
    """A light English stemmer: enough that 'columns' meets 'column' and 'aligned' meets 'align'."""
    if not word.isascii() or len(word) <= 3 or not word.isalpha():
        return word
    for suffix, repl in (("ies", "y"), ("ied", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""),
                         ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                return word
            base = word[: len(word) - len(suffix)] + repl
            if suffix in ("ing", "ed") and len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]  # "formatting" -> "format"
            if suffix == "es" and not base.endswith(("s", "x", "z", "ch", "sh")):
                base = word[:-1]  # "scales" -> "scale"
            return base
    return word


def content_words(text: str) -> list[str]:
    """Stemmed tokens that carry meaning (no stopwords, no negations)."""
    return content_of(words(text))


def content_of(tokens: list[str]) -> list[str]:
    """`content_words` of a text whose `words` are `tokens`."""
    return [stem(t) for t in tokens if t not in STOPWORDS]


def name_words(name: str) -> tuple[str, ...]:
    """A short name (a scope) as compact compares names: its words stemmed and sorted, stopwords out
    but negations kept ("no emoji" is not "emoji"), small numbers as digits. Case, plurals, word order
    and separating punctuation do not count; a value does ("light theme" is not "dark theme", "level 1"
    not "level 2"), and so does a symbol that is part of a name ("c++ style" is not "c# style")."""
    tokens = _tokens(name, _SEPARATORS)
    return tuple(sorted(stem(t) for t in tokens if t not in STOPWORDS or t in NEGATIONS)) or tuple(sorted(tokens))
