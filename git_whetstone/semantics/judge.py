"""Is a new rule the same as a stored one, its opposite, or something else?

Cosine similarity alone cannot tell "Right-align currency columns" from "Never right-align currency
columns" (the embedders ignore negation words on purpose) nor "2 decimals" from "0 decimals". The
judge looks at what the vectors leave out: a flipped negation, a swapped antonym or a changed
number between two rules that otherwise say the same thing is a conflict, never a duplicate.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..base.config import Config
from .words import NEGATIONS, content_words, normalize, stem, words

_ANTONYMS = [
    ("left", "right"), ("top", "bottom"), ("light", "dark"), ("ascend", "descend"),
    ("ascending", "descending"), ("warm", "cool"), ("increase", "decrease"), ("more", "less"),
    ("above", "below"), ("before", "after"), ("show", "hide"), ("include", "exclude"),
    ("enable", "disable"), ("upper", "lower"), ("uppercase", "lowercase"), ("horizontal", "vertical"),
    ("first", "last"), ("min", "max"), ("minimum", "maximum"), ("short", "long"), ("shorter", "longer"),
    ("large", "small"), ("larger", "smaller"), ("big", "small"), ("wide", "narrow"), ("formal", "casual"),
    ("formal", "informal"), ("active", "passive"), ("singular", "plural"), ("explicit", "implicit"),
    ("serif", "sans"), ("bold", "regular"), ("opaque", "transparent"), ("round", "square"),
    ("rounded", "square"), ("inside", "outside"), ("start", "end"), ("early", "late"), ("high", "low"),
    ("higher", "lower"), ("add", "remove"),
]
_SIDE: dict[str, tuple[int, int]] = {}
for _i, (_a, _b) in enumerate(_ANTONYMS):
    _SIDE.setdefault(stem(_a), (_i, 0))
    _SIDE.setdefault(stem(_b), (_i, 1))
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
# "Use X rather than Y" / "instead of Y" states a preference, not a prohibition of the rule itself.
_POLARITY = NEGATIONS - {"instead", "rather", "than"}
NEGATION_OVERLAP = 0.5  # a flipped negation conflicts only between rules with mostly the same words
POLARITY_MARGIN = 0.15  # a rule that says "never" is the same as one that does not only when much closer


@dataclass(frozen=True)
class Verdict:
    relation: str          # "duplicate" | "conflict" | "similar" | "distinct"
    similarity: float
    reason: str = ""


@lru_cache(maxsize=8192)
def negated(text: str) -> bool:
    """True when the rule says not to do something (never, don't, avoid, without, no …)."""
    return any(t in _POLARITY for t in words(text))


@lru_cache(maxsize=8192)
def stems(text: str) -> frozenset[str]:
    return frozenset(content_words(text))


def overlap(a: str, b: str) -> float:
    """Jaccard overlap of the two rules' content-word stems."""
    sa, sb = stems(a), stems(b)
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


@lru_cache(maxsize=8192)
def numbers(text: str) -> frozenset[str]:
    found = {m.replace(",", ".") for m in _NUMBER.findall(normalize(text))}
    found |= {t for t in words(text) if t.isdigit()}
    if {"no", "without", "none"} & set(words(text)) and not found:
        found.add("0")  # "no decimals" is a value too
    return frozenset(found)


@lru_cache(maxsize=8192)
def antonym_sides(text: str) -> dict[int, frozenset[int]]:
    sides: dict[int, set[int]] = {}
    for token in words(text):
        for part in re.split(r"[-/]", token):
            hit = _SIDE.get(stem(part))
            if hit:
                sides.setdefault(hit[0], set()).add(hit[1])
    return {pair: frozenset(side) for pair, side in sides.items()}  # cached: never mutated


def conflict_reason(a: str, b: str) -> tuple[str, str]:
    """How `a` and `b` contradict each other if they say the same thing otherwise: ("negation" |
    "antonym" | "value", why), or ("", "")."""
    if negated(a) != negated(b):
        return "negation", "one says to do it, the other says not to"
    sides_a, sides_b = antonym_sides(a), antonym_sides(b)
    for pair, side in sides_a.items():
        other = sides_b.get(pair)
        if other and side != other and len(side) == 1 and len(other) == 1:
            x, y = _ANTONYMS[pair]
            return "antonym", f"'{x}' against '{y}'"
    na, nb = numbers(a), numbers(b)
    if na and nb and not (na & nb):
        return "value", f"different values ({', '.join(sorted(na))} against {', '.join(sorted(nb))})"
    return "", ""


def _opposed(kind: str, a: str, b: str) -> bool:
    """Whether a difference `conflict_reason` found makes the two rules say opposite things.
    Negation words are not embedded, so a flipped negation must come with mostly the same words
    besides (a paraphrase that happens to use "no" is not a contradiction)."""
    return kind in ("antonym", "value") or kind == "negation" and overlap(a, b) >= NEGATION_OVERLAP


def contradiction(a: str, b: str, similarity: float, config: Config) -> str:
    """Why `a` contradicts `b`, or ''. A swapped antonym or value lowers the cosine itself, so
    every kind needs only the conflict bar."""
    if similarity < config.threshold("conflict"):
        return ""
    kind, reason = conflict_reason(a, b)
    return reason if _opposed(kind, a, b) else ""


def judge(new: str, old: str, similarity: float, config: Config, *, same_scope: bool = True) -> Verdict:
    """How the rule `new` relates to the stored rule `old`, given the cosine of their vectors.
    Duplicates must also share a scope (or a close one); conflicts need not. Two opposed rules
    below the conflict bar are too far apart to contradict and too different to be one rule."""
    kind, reason = conflict_reason(new, old)
    opposed = _opposed(kind, new, old)
    if opposed and similarity >= config.threshold("conflict"):
        return Verdict("conflict", similarity, reason)
    if opposed or not same_scope or similarity < config.threshold("grey"):
        return Verdict("distinct", similarity)
    alike = similarity
    if kind == "negation":  # "No more than three bullets" can restate "Limit to three bullets", rarely
        alike -= POLARITY_MARGIN
    if alike >= config.threshold("dedup"):
        return Verdict("duplicate", similarity)
    if alike >= config.threshold("grey"):
        return Verdict("similar", similarity)
    return Verdict("distinct", similarity)


class Groups:
    """Union-find over n items: which rules (or scopes) end up in one group of equals."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        for i in range(len(self.parent)):
            out.setdefault(self.find(i), []).append(i)
        return [g for g in out.values() if len(g) > 1]
