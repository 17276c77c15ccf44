"""Where the next id comes from: next_ids.json, checked against everything the store ever used.

Ids are never reused. Beside next_ids.json (committed, so it travels with the store), each clone
keeps a high-water mark in `.git/whetstone-ids.json` (never committed, so a `git revert` or `reset`
of a capture, which rolls next_ids.json back too, cannot hand its id out again). When either is
missing or corrupt, both are rebuilt from the markdown, the history and the committed
next_ids.json.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..base.files import write_atomic
from ..format.counters import ids_text, read_counters
from ..git.history import id_history
from ..git import runner

HIGH_WATER = "whetstone-ids.json"  # in .git


def counters(repo: Path, top: dict[str, int]) -> tuple[dict[str, int], str | None]:
    """next_ids.json's counters, or (when it is missing or corrupt) counters rebuilt from
    everything the store used, with a warning saying so. `top`: highest number per prefix in the
    markdown."""
    try:
        found = read_counters((repo / "next_ids.json").read_text(encoding="utf-8"))
    except OSError:
        found = None
    if found:
        return found, None
    rebuilt = recovered(repo, top)
    return rebuilt, (f"next_ids.json was missing or corrupt; rebuilt it from the markdown and git history "
                     f"(next learning L{rebuilt['learning']}, next issue I{rebuilt['issue']})")


def high_water(repo: Path, top: dict[str, int]) -> dict[str, int]:
    """The numbers this clone must mint above (a fresh clone learns them from its history)."""
    try:
        data = json.loads((repo / ".git" / HIGH_WATER).read_text())
        return {k: int(data[k]) for k in ("learning", "issue")}
    except (OSError, ValueError, KeyError, TypeError):
        return recovered(repo, top)


def save_high_water(repo: Path, seen: dict[str, int]) -> None:
    write_atomic(repo / ".git" / HIGH_WATER, ids_text(seen))


def recovered(repo: Path, top: dict[str, int]) -> dict[str, int]:
    """Next ids above everything the markdown (`top`), the history of every ref and the committed
    next_ids.json ever used."""
    used = id_history(repo, "--all").top
    highest = {prefix: max(top.get(prefix, 0), used[prefix]) for prefix in ("L", "I")}
    committed = runner.run(repo, "show", "HEAD:next_ids.json", check=False).stdout
    try:
        data = json.loads(committed)
        for kind, prefix in (("learning", "L"), ("issue", "I")):
            if isinstance(data.get(kind), int):
                highest[prefix] = max(highest[prefix], data[kind] - 1)
    except (ValueError, AttributeError):
        pass
    return {"learning": highest["L"] + 1, "issue": highest["I"] + 1}
