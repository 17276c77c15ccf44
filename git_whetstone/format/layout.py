"""Names on disk (SPEC §3): skill names, the two folders, and the file that holds each scope.

A store is `<store_root>/<skill>/` with `learnings/<scope-slug>-<short-hash>.md` and
`issues/<…>.md`. File names never carry meaning (the scope comes from each block), but a tool write
puts a new scope in a file named after it, so the names are readable and distinct per scope.
"""
from __future__ import annotations

import re
from functools import lru_cache

from ..base.errors import WhetstoneError, shown

GLOBAL = "__global__"
GLOBAL_PREFIX = "G:"  # how ids from the global layer are shown and accepted: G:L3
KIND_FOLDER = {"learning": "learnings", "issue": "issues"}
GITIGNORE = "index.sqlite*\nevents.jsonl\ncompact-report.md\n"
SKILL_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# The files a store reads: learnings/*.md and issues/*.md, not hidden ones (`is_scope_file`, `is_scope_name`).
SCOPE_FILE = re.compile(r"^(?:learnings|issues)/(?!\.)[^/]+\.md$")
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def skill_name(raw: object) -> str:
    """The canonical skill name: case-folded, spaces to '-', then `[a-z0-9][a-z0-9._-]{0,63}`."""
    if not isinstance(raw, str):
        raise WhetstoneError(f"skill name must be a string, got {shown(raw)}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
        raise WhetstoneError(f"invalid skill name {shown(raw)}: control characters are not allowed")
    name = "-".join(raw.strip(" ").casefold().split(" "))
    if name == GLOBAL:
        return name
    if name.split(".")[0] in _RESERVED:
        raise WhetstoneError(f"invalid skill name {shown(raw)}: {name.split('.')[0]} is a reserved name (a device "
                             f"on Windows, so the store could not be checked out there); choose another")
    if not SKILL_NAME.fullmatch(name) or name.endswith(".") or name.endswith(".lock"):
        raise WhetstoneError(
            f"invalid skill name {shown(raw)}: use 1-64 characters a-z 0-9 . _ - starting with a letter or digit")
    return name


def close_names(name: str, known: list[str]) -> list[str]:
    """The names in `known` that `name` is likely a typo of (closest first): one or two letters
    added, dropped, swapped or changed (one for a name of five letters or fewer, none for two), or
    the same letters with other separators (great_tables, greattables). Names whose numbers
    differ (sql2 and sql, deck-69 and deck-70) are different skills on purpose, never typos."""
    def bare(text: str) -> str:
        return re.sub(r"[._-]", "", text)

    found = []
    for other in known:
        if other == name or other == GLOBAL or re.findall(r"\d+", other) != re.findall(r"\d+", name):
            continue
        distance = 0 if bare(other) == bare(name) else _edits(name, other)
        shortest = min(len(name), len(other))
        if distance <= (0 if shortest <= 2 else 1 if shortest <= 5 else 2):
            found.append((distance, other))
    return [other for _, other in sorted(found)]


def did_you_mean(names: list[str]) -> str:
    """The question a typo's look-alikes make: "did you mean great-tables?"."""
    return f"did you mean {' or '.join(names)}?"


def _edits(a: str, b: str) -> int:
    """The edit distance of two short names (insertions, deletions, changes, and swaps of two
    neighbouring letters each count one)."""
    if abs(len(a) - len(b)) > 2:
        return 3
    before, row = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        now = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            now[j] = min(row[j] + 1, now[j - 1] + 1, row[j - 1] + (ca != cb))
            if before is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                now[j] = min(now[j], before[j - 2] + 1)
        before, row = row, now
    return row[-1]


def is_scope_file(rel: str) -> bool:
    """Whether a path (relative to the store) is a scope file the store reads."""
    return bool(SCOPE_FILE.match(rel))


def is_scope_name(name: str) -> bool:
    """Whether a file named `name` in learnings/ or issues/ is a scope file the store reads."""
    return name.endswith(".md") and not name.startswith(".")


@lru_cache(maxsize=1 << 16)  # asked for every entry by compact, export and recall; a store has far fewer scopes
def scope_key(scope: str) -> str:
    """Scopes compare case-insensitively with white space folded."""
    return " ".join(scope.split()).casefold()


@lru_cache(maxsize=1 << 16)
def scope_filename(scope: str) -> str:
    """`<slug>-<short hash>.md`: readable, and distinct for distinct scopes."""
    key = scope_key(scope)
    slug = re.sub(r"[^a-z0-9]+", "-", key.encode("ascii", "ignore").decode()).strip("-")[:48].strip("-")
    import hashlib  # here: a recall names no file, and hashlib loads OpenSSL (5 ms and more)
    digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:8]
    return f"{slug or 'scope'}-{digest}.md"
