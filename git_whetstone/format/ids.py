"""Ids in block headings (`## L3 · Title`): what a text claims, without parsing its blocks.

The index, the journal, the history scanner and the merge only need the ids a file or a diff
holds, valid block or not; this keeps those few patterns light (a recall that parses nothing loads
no more than this), while `blocks` holds the full parser.
"""
from __future__ import annotations

import re

DOT = "\u00b7"
# What a valid id looks like: L3, I12 (no leading zeros).
ENTRY_ID = re.compile(r"[LI][1-9]\d*")
# A heading's id as a person meant to claim it (the block may still be broken otherwise).
_HEADING_ID = re.compile(r"^## ([LI][1-9]\d*) \u00b7", re.M)
# The same after a newline: a pattern that starts with a literal is searched for that literal
# first, where `^` in multiline mode is tried at every character (3x slower over 25 MB).
_HEADING_ID_AFTER_NEWLINE = re.compile(r"\n## ([LI][1-9]\d*) \u00b7")
# An id claimed loosely: a broken block's heading may have lost its dot; its id is still taken.
_CLAIMED = re.compile(r"^## ([LI])([1-9]\d*)\b", re.M)
# A heading added or removed in a `git log -p --unified=0` (a diff line starts with + or -).
_DIFF_HEADING = re.compile(r"^([-+])## ([LI])([1-9]\d*) \u00b7", re.M)


def is_entry_id(text: object) -> bool:
    """Whether `text` is a valid entry id (L<n> or I<n>, n without leading zeros)."""
    return isinstance(text, str) and bool(ENTRY_ID.fullmatch(text))


def heading_ids(text: str) -> list[tuple[str, int]]:
    """Every block id in `text` with its line, valid block or not: what a person meant to claim."""
    found, line, seen = [], 1, 0
    for m in _HEADING_ID.finditer(text):  # lines counted from the last heading on: linear in the text
        line += text.count("\n", seen, m.start())
        seen = m.start()
        found.append((m.group(1), line))
    return found


def heading_id_set(text: str) -> set[str]:
    """The ids `heading_ids` finds, without their lines (one pass in C: a compaction's journal asks
    it of thousands of files, 25 MB at 100,000 entries)."""
    return set(_HEADING_ID_AFTER_NEWLINE.findall("\n" + text))  # (a line starts after a newline, and the text)


def line_id(line: str) -> str | None:
    """The id a line's heading claims, if the line is a block heading."""
    match = _HEADING_ID.match(line)
    return match.group(1) if match else None


def claimed_numbers(text: str) -> dict[str, int]:
    """The highest id number per prefix that any heading in `text` claims, broken blocks included."""
    top = {"L": 0, "I": 0}
    for prefix, number in _CLAIMED.findall(text):
        top[prefix] = max(top[prefix], int(number))
    return top


def diff_ids(diff: str) -> list[tuple[str, str]]:
    """(`+` or `-`, id) for every block heading a unified diff adds or removes."""
    return [(sign, f"{prefix}{number}") for sign, prefix, number in _DIFF_HEADING.findall(diff)]


def with_id(block_text: str, old_id: str, new_id: str) -> str:
    """A block's text with its heading claiming `new_id` instead of `old_id` (a re-mint)."""
    return block_text.replace(f"## {old_id} {DOT}", f"## {new_id} {DOT}", 1)
