"""How does a new rule relate to a stored one? Four answers, by the strength of the evidence
(SPEC §4, "Judging a capture"): sure (same or contradicts), likely, related, unrelated.

Cosine only says how much two rules are about the same thing, not whether they agree, so the words
decide: `same` is the same content words after normalisation; `contradicts` the same but for one
opposition (a negation, two values of one attribute, two numbers). `likely` needs that opposition on
mostly shared words (`OPPOSED_SHARE`), or the backend's `ask` cosine with shared wording
(`CLOSE_WORDING`); `related` a cosine at least `mention` above the new rule's mean to the store
(`baseline`). The bars are fitted by scripts/fit_judge.py on tests/eval's dev split.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..base.config import Config
from .words import content_of, normalize, stem, words

# Words that name the same attribute's values: two rules that differ only in one of these say
# opposite things (one value or the other). Written as they appear; matched after stemming.
_SLOTS = {
    "alignment": "left right center centre centered centred justify justified",
    "vertical position": "top bottom middle",
    "relative position": "above below",
    "order in time": "before after",
    "order": "first last",
    "ends": "start end beginning",
    "sort order": "ascending descending asc desc increasing decreasing",
    "age order": "newest oldest latest earliest",
    "letter case": "uppercase lowercase upper lower capitalized capitalised",
    "naming case": "camelcase snake_case kebab pascalcase camel snake kebab pascal",
    "quotes": "single double backtick backticks",
    "typeface": "serif sans monospace mono proportional",
    "theme": "light dark",
    "length": "short long brief concise terse succinct verbose lengthy detailed wordy longer shorter",
    "tone": "formal casual informal chatty stiff playful conversational",
    "size": "small large big tiny huge larger smaller bigger",
    "width": "wide narrow wider narrower",
    "indentation": "tabs spaces tab",
    "time zone": "utc local",
    "voice": "active passive",
    "number form": "singular plural",
    "amount": "more less fewer increase decrease higher lower",
    "bound": "min max minimum maximum",
    "visibility": "show hide",
    "inclusion": "include exclude",
    "switch": "enable disable enabled disabled",
    "change": "add remove",
    "opacity": "opaque transparent",
    "corners": "round rounded square sharp",
    "warmth": "warm cool cold",
    "explicitness": "explicit implicit",
    "orientation": "horizontal vertical landscape portrait",
    "emphasis": "bold italic regular",
    "mode": "sync async synchronous asynchronous",
}
_SLOT_OF: dict[str, str] = {}
for _slot, _values in _SLOTS.items():
    for _value in _values.split():
        _SLOT_OF.setdefault(stem(_value), _slot)
        _SLOT_OF.setdefault(_value, _slot)
# Said of a rule, these make it a prohibition; these others a permission (an exception, often).
_PROHIBITION = frozenset("never not no don't dont avoid avoiding without stop none nothing nor neither cannot "
                         "can't won't shouldn't mustn't isn't aren't doesn't didn't forbid forbidden banned ban "
                         "skip omit".split())
_PERMISSION = frozenset("fine ok okay allowed acceptable permitted alright".split())
# Content words that carry no meaning of their own in a rule ("prefer X" = "use X" = "show X"); an
# attribute value among them (show / hide) still counts as one (`Reading.values`).
_FILLER = frozenset(stem(w) for w in """place places prefer preferably ensure sure want wants need needs
should like rule thing things way ways instead rather whenever show display format render present write
put set give apply""".split())
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
# Words that make the order of the others matter ("tabs rather than spaces", "convert X to Y"): a rule
# holding one is the same as another only when their content words come in the same order.
_RELATIONAL = frozenset("""to from into onto than instead rather over under before after above below as for with
vs versus against per by between within without not""".split())

SAME, CONTRADICTS, LIKELY, RELATED, UNRELATED = "same", "contradicts", "likely", "related", "unrelated"
# Of the content words two opposed rules hold besides the words they differ in, the share they must
# have in common for the opposition to be specific (the same thing, one attribute flipped): more for
# two numbers, which as often measure two different things ("12 pt axis labels", "10 pt tick
# labels"). And of all their content words, the share two rules close in meaning must have in common
# to be likely one rule or opposites. Fitted on the dev split (scripts/fit_judge.py).
OPPOSED_SHARE = {"negation": 0.4, "value": 0.4, "number": 0.6}
CLOSE_WORDING = 0.3


@dataclass(frozen=True)
class Judgement:
    """The judge's answer about a new rule and a stored one. `opposed`: a likely pair whose words
    point opposite ways on shared content (why is in `reason`): it may be a contradiction in other
    words, and the question put to the caller is "which holds?"."""

    relation: str          # same | contradicts | likely | related | unrelated
    similarity: float
    reason: str = ""
    opposed: bool = False


@dataclass(frozen=True)
class Reading:
    """What the judge reads of one rule: its content words in order (filler and polarity words
    out), whether it forbids or permits, its numbers, and the attribute values it names."""

    sequence: tuple[str, ...]
    ordered: bool
    forbids: bool
    permits: bool
    numbers: frozenset[str]
    values: dict[str, frozenset[str]]


@lru_cache(maxsize=8192)
def read(text: str) -> Reading:
    """What the judge reads of `text` (a recall reads each entry it returns that nobody read yet:
    its words taken once; a word never holds a hyphen or a slash, `words` splits there)."""
    tokens = words(text)
    found = set(tokens)
    forbids = bool(found & _PROHIBITION)
    permits = bool(found & _PERMISSION)
    sequence = _sequence_of(tokens)
    numbers = {m.replace(",", ".") for m in _NUMBER.findall(normalize(text))} | {t for t in tokens if t.isdigit()}
    if not numbers and found & {"no", "without", "none", "zero"} and found & {"decimal", "decimals", "digit", "digits"}:
        numbers.add("0")  # "no decimals" is a value too
    values: dict[str, set[str]] = {}
    for token in tokens:
        slot = _SLOT_OF.get(token) or _SLOT_OF.get(stem(token))
        if slot:
            values.setdefault(slot, set()).add(stem(token))
    if "sans" in values.get("typeface", set()):  # "sans-serif" is one value, not two
        values["typeface"].discard("serif")
    return Reading(sequence, bool(found & _RELATIONAL), forbids, permits, frozenset(numbers),
                   {k: frozenset(v) for k, v in values.items()})


def _sequence_of(tokens: list[str]) -> tuple[str, ...]:
    """The content words of a text whose `words` are `tokens`, less filler and polarity words."""
    return tuple(w for w in content_of(tokens) if w not in _FILLER and w not in _PERMISSION and w not in _PROHIBITION)


def same_words(a: Reading, b: Reading) -> bool:
    """Whether two rules say the same content words: in the same order, or in any order when
    neither holds a word that makes order matter."""
    if a.sequence == b.sequence:
        return bool(a.sequence)
    return not (a.ordered or b.ordered) and sorted(a.sequence) == sorted(b.sequence) and bool(a.sequence)


def opposition(a: Reading, b: Reading) -> tuple[str, str, frozenset[str]]:
    """How two rules point opposite ways, if they do: ("negation" | "value" | "number", why, the
    words that differ), or ("", "", ∅)."""
    if a.forbids != b.forbids or (a.permits != b.permits and (a.forbids or b.forbids)):
        return "negation", "one says to do it, the other says not to", frozenset()
    for slot in sorted(a.values.keys() & b.values.keys()):
        if a.values[slot] != b.values[slot]:
            x, y = sorted(a.values[slot] - b.values[slot]), sorted(b.values[slot] - a.values[slot])
            if x and y:
                return "value", f"{slot}: '{' '.join(x)}' against '{' '.join(y)}'", a.values[slot] | b.values[slot]
    if a.numbers and b.numbers and not a.numbers & b.numbers:
        return ("number", f"different values ({', '.join(sorted(a.numbers))} against {', '.join(sorted(b.numbers))})",
                a.numbers | b.numbers)
    return "", "", frozenset()


def may_oppose(readings: list[Reading]) -> np.ndarray:
    """n × n: False where `opposition` between two of the rules read as `readings` is surely empty
    (no polarity that differs, no attribute both name, no numbers on both sides), for every pair at
    once, so the judge reads only the pairs that may be opposed."""
    n = len(readings)
    forbids = np.fromiter((r.forbids for r in readings), bool, n)
    permits = np.fromiter((r.permits for r in readings), bool, n)
    numbers = np.fromiter((bool(r.numbers) for r in readings), bool, n)
    out = forbids[:, None] != forbids[None, :]
    out |= (permits[:, None] != permits[None, :]) & (forbids[:, None] | forbids[None, :])
    out |= numbers[:, None] & numbers[None, :]
    slots = {slot: i for i, slot in enumerate(sorted({slot for r in readings for slot in r.values}))}
    if slots:
        named = np.zeros((n, len(slots)), np.float32)
        for row, r in enumerate(readings):
            named[row, [slots[slot] for slot in r.values]] = 1
        out |= (named @ named.T) > 0
    return out


def judge(new: str, old: str, similarity: float, config: Config, *, same_scope: bool,
          baseline: float = 0.0) -> Judgement:
    """How the rule `new` relates to the stored rule `old`, given the cosine of their vectors,
    whether their scopes are the same (or close), and the mean cosine of `new` to the store's
    entries (`baseline`: what any rule of the skill scores)."""
    a, b = read(new), read(old)
    kind, reason, differing = opposition(a, b)
    if kind:
        rest_a = tuple(w for w in a.sequence if w not in differing)
        rest_b = tuple(w for w in b.sequence if w not in differing)
        if rest_a == rest_b and rest_a:  # the same rule but for the one opposition
            return Judgement(CONTRADICTS, similarity, reason, True)
        if same_scope and share(set(rest_a), set(rest_b)) >= OPPOSED_SHARE[kind]:
            return Judgement(LIKELY, similarity, reason, True)
    elif same_words(a, b) and same_scope and a.permits == b.permits:
        return Judgement(SAME, similarity)
    if same_scope and similarity >= config.threshold("ask") and share(set(a.sequence), set(b.sequence)) >= CLOSE_WORDING:
        return Judgement(LIKELY, similarity, reason)
    if similarity >= config.threshold("candidate") and similarity - baseline >= config.threshold("mention"):
        return Judgement(RELATED, similarity, reason)
    return Judgement(UNRELATED, similarity, reason)


def share(a: set[str], b: set[str]) -> float:
    """The share of two sets of words that both hold (Jaccard)."""
    return len(a & b) / len(a | b) if a or b else 0.0


@dataclass(frozen=True)
class Triage:
    """The judge's answers about the rules nearest a new one, sorted: the closest sure one decides
    (`decisive`), the likely ones are asked about, the likely and related ones are mentioned."""

    decisive: tuple[Any, Judgement] | None
    likely: list[tuple[Any, Judgement]]
    mentioned: list[tuple[Any, Judgement]]


CANDIDATES = 3  # look-alikes put to the caller, or mentioned, for one new rule


def triage(judged: list[tuple[Any, Judgement]]) -> Triage:
    """Sort the judge's answers about the rules nearest a new one (closest first) into what decides,
    what to ask about and what to mention."""
    decisive = next(((e, j) for e, j in judged if j.relation in (SAME, CONTRADICTS)), None)
    likely = [(e, j) for e, j in judged if j.relation == LIKELY][:CANDIDATES]
    mentioned = [(e, j) for e, j in judged if j.relation in (LIKELY, RELATED)][:CANDIDATES]
    return Triage(decisive, likely, mentioned)


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
