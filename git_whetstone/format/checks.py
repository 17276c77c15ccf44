"""Checking a set of scope files as a whole (SPEC §3 "Validation", §7): every file through the
block format (and, by default, mistune's second opinion), and ids that two files both claim.

The files are given as path → bytes, so the same check serves the work tree (`validate`, `edit`),
what is staged for the next commit (the pre-commit hook) and what was committed (post-commit);
where they come from is the git and store layers' business. Every finding is a
`blocks.FormatError`, printed as `path:line: message`.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from . import blocks, markdown
from .blocks import FormatError
from .ids import heading_ids



def top_ids(files: Mapping[str, bytes]) -> dict[str, int]:
    """The highest id number per prefix claimed anywhere in `files`."""
    top = {"L": 0, "I": 0}
    for data in files.values():
        for bid, _ in heading_ids(data.decode("utf-8", "replace")):
            top[bid[0]] = max(top[bid[0]], int(bid[1:]))
    return top


def check(files: Mapping[str, bytes], full: Iterable[str] | None = None, *,
          with_markdown: bool = True) -> list[FormatError]:
    """The format errors of a set of scope files (path → content), sorted by path and line.

    Each file in `full` (every file when None) goes through `markdown.validate`, or without
    `with_markdown` through the line reader alone (`blocks.parse`: what recall reads with, ten times
    faster than also asking mistune). All of them are scanned for ids claimed by two files; a
    repeated id is reported in the files of `full`, against the copy in a file outside it (the
    one that was there first) when there is one."""
    wanted = set(files) if full is None else set(full) & set(files)
    errors: list[FormatError] = []
    claims: dict[str, list[tuple[str, int]]] = {}
    for rel in sorted(files):
        try:
            text = files[rel].decode("utf-8")
        except UnicodeDecodeError:
            if rel in wanted:
                errors.append(FormatError(rel, 1, "not valid UTF-8 (save the file as UTF-8)"))
            continue
        if rel in wanted:
            folder = rel.split("/", 1)[0]
            errors += markdown.validate(text, rel, folder) if with_markdown else blocks.parse(text, rel, folder).errors
        seen_here = set()
        for bid, line in heading_ids(text):
            if bid not in seen_here:  # a repeat inside one file is blocks.parse's to report
                seen_here.add(bid)
                claims.setdefault(bid, []).append((rel, line))
    for bid, where in claims.items():
        if len(where) < 2 or all(rel not in wanted for rel, _ in where):
            continue
        # the copy that stays is one nobody is changing, else the first by path
        keep = next((w for w in where if w[0] not in wanted), where[0])
        for rel, line in where:
            if (rel, line) != keep and rel in wanted:
                errors.append(FormatError(rel, line, f"duplicate id {bid} (also in {keep[0]}:{keep[1]}); "
                                                     f"give this block the next free number"))
    return sorted(errors, key=lambda e: (e.path, e.line))


CONFLICT_HINT = ("a merge left two versions of a block between <<<<<<< and >>>>>>>: keep the one you want, "
                 "delete the marker lines, then git add and commit (or git whetstone sync again)")


def conflict_hint(errors: Iterable[FormatError]) -> str | None:
    """What to do about conflict markers among `errors`, if there are any."""
    return CONFLICT_HINT if any(e.message == "unresolved merge conflict marker" for e in errors) else None
