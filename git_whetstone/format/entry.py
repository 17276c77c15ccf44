"""An entry: one learning or issue as every operation sees it, made from its block (SPEC §3).

`Entry` is what a parsed block says, fields read once: the id and kind, where it stands (file and
line), its title, scope, body, a learning's recurrence and dates, its provenance, whether it holds
for every task (`applies: always`) and which entries it was said to hold beside (`differs_from`).
"""
from __future__ import annotations

from typing import NamedTuple

from .blocks import ALWAYS, Block, decode_value, ids_of


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


def id_key(entry_id: str) -> int:
    """L1, I1, L2, … as one integer that sorts by number, learnings first (I<n> is 2n+1)."""
    return int(entry_id[1:]) * 2 + (entry_id[0] == "I")


def key_id(key: int) -> str:
    """The id an `id_key` stands for."""
    return f"{'I' if key & 1 else 'L'}{key >> 1}"


def entries_of(parsed: list[Block], rel: str) -> list[Entry]:
    """The entries of parsed blocks, each read in one pass over its fields: the first value of each
    field, every provenance line decoded."""
    out = []
    for b in parsed:
        first: dict[str, str] = {}
        provenance = []
        for key, value in b.fields:
            if key == "provenance":
                provenance.append(decode_value(value))
            elif key not in first:
                first[key] = value
        out.append(_entry(b.id, rel, b.line, b.title, b.body, first, tuple(provenance)))
    return out


def clean_entries(found: list[tuple], rel: str) -> list[Entry]:
    """The entries of a file's blocks as `blocks.clean_blocks` gives them (a file as whetstone
    writes it, read without making its Blocks)."""
    return [_entry(bid, rel, line, title, body, values, provenance)
            for bid, title, body, line, values, provenance in found]


def _entry(bid: str, rel: str, line: int, title: str, body: str, fields: dict[str, str],
           provenance: tuple[str, ...]) -> Entry:
    learning = bid[0] == "L"
    return Entry(bid, "learning" if learning else "issue", rel, line, title, " ".join((fields.get("scope") or "").split()),
                 body, int(fields.get("recurrence") or 1) if learning else 0, fields.get("first_seen"),
                 fields.get("last_seen"), provenance, fields.get("applies") == ALWAYS, ids_of(fields.get("differs_from")))
