"""What a store's history says: the one reader of `git log`. Ids are never reused, so minting, settling
a merge and `metrics` need the ids any commit ever held: one pass of `git log -p --unified=0` over the
scope folders (`id_history`); `commits` lists the commits themselves.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple
from pathlib import Path

from ..format.ids import diff_ids
from . import runner


@dataclass
class IdHistory:
    """The ids a history held: the highest number per prefix (added or removed), the ids ever
    added, and each commit's subject (newest first)."""

    top: dict[str, int] = field(default_factory=lambda: {"L": 0, "I": 0})
    added: set[str] = field(default_factory=set)
    subjects: list[str] = field(default_factory=list)


def id_history(repo: Path, *revs: str) -> IdHistory:
    """Scan the commits reachable from `revs` (`--all` for every ref; HEAD when none is given)."""
    # a merge is read against its first parent: what it brought in, and the ids a sync re-minted in it
    log = runner.run(repo, "log", "--format=%x1e%s", "-p", "--unified=0", "--no-renames", "--diff-merges=first-parent",
                     *(revs or ("HEAD",)), "--", "learnings", "issues", check=False,
                     binary=True).stdout.decode("utf-8", "replace")
    found = IdHistory()
    for chunk in log.split("\x1e")[1:]:
        subject, _, diff = chunk.partition("\n")
        found.subjects.append(subject)
        for sign, bid in diff_ids(diff):
            found.top[bid[0]] = max(found.top[bid[0]], int(bid[1:]))
            if sign == "+":
                found.added.add(bid)
    return found


class Commit(NamedTuple):
    """One commit as people read a log: its hash, author date (ISO 8601), author and subject."""

    sha: str
    date: str
    author: str
    subject: str


def commits(repo: Path, limit: int | None = None) -> list[Commit]:
    """The commits reachable from HEAD, newest first (at most `limit`)."""
    out = runner.run(repo, "log", *([f"-n{max(1, limit)}"] if limit is not None else []),
                     "--format=%H%x1f%aI%x1f%an%x1f%s%x1e").stdout
    return [Commit(*record.strip("\n").split("\x1f", 3)) for record in out.split("\x1e") if record.strip("\n")]
