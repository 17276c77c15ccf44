"""Surviving a killed writer: the journal of each write (`.git/whetstone-journal.json`), and the
lock files a killed git leaves behind.

Before a write touches a file, the whole change is recorded: each file before and after, and the
commit message (a file as HEAD holds it, a compact's thousands of scope files, by the id of its
blob: git keeps those bytes, and the journal is written at half the size). A writer killed at any point (before its files are renamed into place, between
them, before or after its commit) leaves enough for the next writer to finish the change and
commit it with its own message, or to put every file back if git now refuses it. Files are
written in an order that never shows one id in two files, so a change killed half way hides an
entry until it is recovered rather than showing it twice.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Callable

from ..base.errors import WhetstoneError
from ..base.files import read_or_none, write_atomic, write_many_atomic
from ..format.ids import heading_id_set
from ..git.locks import Busy, clear_stale_git_locks
from ..git import runner, tree
from . import events

JOURNAL = "whetstone-journal.json"  # in .git
_TEMP = re.compile(r"\..+\.\d+\.tmp")  # write_atomic's temporary names
_SAID = {"committed": "completed and committed", "found_committed": "found it already committed",
         "rolled_back": "rolled it back", "left_as_found": "left its files as found"}


def record(repo: Path, message: str, before: dict[Path, bytes | None], after: dict[Path, bytes | None],
           in_head: dict[Path, str] | None = None) -> Path:
    """Write the journal of a change about to happen; returns its path (deleted once done).
    `in_head` names the files whose bytes before are those of a blob HEAD holds (by its id)."""
    journal = repo / ".git" / JOURNAL
    in_head = in_head or {}
    write_atomic(journal, json.dumps({
        "pid": os.getpid(), "message": message,
        "files": [{"path": p.relative_to(repo).as_posix(),
                   "before": {"blob": in_head[p]} if p in in_head else _pack(before[p]), "after": _pack(after[p])}
                  for p in after]}))
    return journal


def pending(repo: Path) -> bool:
    """Whether a killed writer left a change to finish (one stat)."""
    return (repo / ".git" / JOURNAL).exists()


MANY = 32  # files in one change from which they are written side by side (`write_many_atomic`)


def apply(old: dict[Path, bytes | None], new: dict[Path, bytes | None]) -> None:
    """Change each file from `old` to `new` (None: absent), in the order that never shows an id twice."""
    stages = write_stages(old, new)
    if sum(map(len, stages)) >= MANY:
        write_many_atomic([[(path, new[path]) for path in stage] for stage in stages])
        return
    for stage in stages:
        for path in stage:
            put(path, new[path])


def put(path: Path, data: bytes | None) -> None:
    if data is None:
        path.unlink(missing_ok=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)


def write_stages(old: dict[Path, bytes | None], new: dict[Path, bytes | None]) -> list[list[Path]]:
    """The paths to change from `old` to `new`, in stages that never show an id twice: files that
    gain no id first (removals, edits, a block's old home), then those that gain one, then
    next_ids.json (a stage's files in any order; an empty stage is left out)."""
    def ids(data: bytes | None) -> set[str]:
        return heading_id_set((data or b"").decode("utf-8", "replace"))

    def gains(path: Path) -> bool:  # (a file removed or emptied gains nothing: its old text is not read)
        return bool(new[path]) and bool(ids(new[path]) - ids(old[path]))
    stages: list[list[Path]] = [[], [], []]
    for path in new:
        stages[2 if path.name == "next_ids.json" else 1 if gains(path) else 0].append(path)
    return [stage for stage in stages if stage]


def unstage(repo: Path, rels: list[str], hold: int | None) -> None:
    """Make git's index match HEAD again for `rels` (after a commit that did not happen)."""
    runner.run(repo, "reset", "-q", "--pathspec-from-file=-", "--pathspec-file-nul", input="\0".join(rels), check=False,
        hold=hold)


def reap_git_locks(repo: Path) -> list[str]:
    """Remove the lock files a killed git left (see `locks.clear_stale_git_locks`), say so in a
    "recover" event, and return a warning for the caller to pass on (none when nothing was left)."""
    removed = clear_stale_git_locks(repo)
    if not removed:
        return []
    events.append(repo, "recover", action="removed_stale_git_locks", files=removed)
    return [f"removed git lock files a killed git command had left behind: {', '.join(removed)}"]


# What git says when .git/index is damaged (a killed git, a full disk, a bad copy).
_CORRUPT_INDEX = ("index file smaller than expected", "bad signature", "bad index file", "index file corrupt",
                  "index uses", "unknown index entry format", "index file open failed")


def repair_index(repo: Path, said: str, hold: int | None) -> list[str]:
    """When git's message `said` is about a damaged .git/index, move the index aside (kept, not
    deleted) and rebuild it from HEAD with `git reset` (the work tree is not touched); a warning
    saying so, or nothing when the message was about something else. git's index is derived: all
    it can hold besides HEAD is what someone staged, and a damaged index no longer holds that."""
    index = repo / ".git" / "index"
    if not any(mark in said for mark in _CORRUPT_INDEX) or not index.exists():
        return []
    aside = index.with_name(f"index.damaged-{os.getpid()}-{int(time.time())}")
    os.replace(index, aside)
    runner.run(repo, "reset", "-q", hold=hold)
    events.append(repo, "recover", action="rebuilt_git_index", kept=aside.name)
    return [f"git's index (.git/index) was damaged; whetstone repaired it from HEAD (your files are untouched; "
            f"the damaged one is kept as .git/{aside.name})"]


def recover(repo: Path, commit: Callable[[str, list[str]], None], hold: int | None) -> tuple[str, list[str]] | None:
    """Finish or undo the change a killed writer left in the journal (call with the write lock
    held, `hold` its descriptor; `commit(message, paths)` is how the store commits). Every file of
    the change must be as it was before or as the change wanted it: then it is completed and
    committed with its own message, or, if git now refuses the commit (a hook), every file is put
    back. Files someone changed since are left as found. Each outcome is one "recover" event;
    returns (action, warnings saying what was done), or None when there was nothing to do."""
    journal = repo / ".git" / JOURNAL
    try:
        raw = journal.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
        message = data["message"]
        changes = {repo / item["path"]: (_unpack(item["before"], repo), _unpack(item["after"], repo))
                   for item in data["files"]}
        if not isinstance(message, str) or any(not _inside(repo, p) for p in changes):
            raise ValueError("not a journal whetstone wrote")
    except (ValueError, KeyError, TypeError, AttributeError):
        journal.unlink(missing_ok=True)
        events.append(repo, "recover", action="dropped_journal")
        return "dropped_journal", ["dropped an unreadable .git/whetstone-journal.json"]
    _remove_leftovers(repo)
    said = reap_git_locks(repo)
    subject = message.split("\n", 1)[0]
    rels = [p.relative_to(repo).as_posix() for p in changes]
    current = {p: read_or_none(p) for p in changes}
    reason = None
    if any(current[p] not in pair for p, pair in changes.items()):
        action, reason = "left_as_found", "its files were changed since"
    else:
        wanted = {p: after for p, (_, after) in changes.items()}
        apply(current, wanted)
        # (if git cannot even say, the journal stays for the next write to try again)
        action = "committed" if _differs_from_head(repo, rels, hold) else "found_committed"
        try:
            if action == "committed":
                commit(f"{message.rstrip()}\n\n(completed by whetstone after the writer was interrupted)\n", rels)
        except Busy:
            raise  # git is busy, not refusing: the journal stays for the next write
        except WhetstoneError as exc:  # not in HEAD, and git refuses it now: undo it
            apply(wanted, {p: before for p, (before, _) in changes.items()})
            unstage(repo, rels, hold)
            action, reason = "rolled_back", exc.message
    journal.unlink(missing_ok=True)
    events.append(repo, "recover", action=action, message=subject, files=rels, **({"reason": reason} if reason else {}))
    return action, said + [f"an interrupted write ('{subject}') was found: {_SAID[action]}"
                           + (f" ({reason})" if reason else "")]


def _inside(repo: Path, path: Path) -> bool:
    """Whether a path a journal names is a file of the store's work tree (never in .git, never outside)."""
    if not path.is_relative_to(repo):
        return False
    parts = Path(os.path.normpath(path.relative_to(repo))).parts
    return bool(parts) and parts[0] not in ("..", ".git")


def _differs_from_head(repo: Path, rels: list[str], hold: int | None) -> bool:
    """Whether any of `rels` differs between the work tree (or git's index) and HEAD."""
    for i in range(0, len(rels), 500):
        out = runner.run(repo, "status", "--porcelain", "-z", "--untracked-files=all", "--",
                  *(f":(literal){rel}" for rel in rels[i:i + 500]), hold=hold).stdout
        if out.strip("\0"):
            return True
    return False


def _pack(data: bytes | None) -> str | dict | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        import base64  # rare (a file that is not UTF-8): not loaded by every write
        return {"base64": base64.b64encode(data).decode("ascii")}


def _unpack(value: str | dict | None, repo: Path) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if "blob" in value:  # (one git no longer has, gone in a gc since: an unreadable journal)
        try:
            return tree.blob(repo, str(value["blob"]))
        except (KeyError, ValueError, AttributeError, OSError) as exc:
            raise ValueError(f"blob {value['blob']} not found") from exc
    import base64
    return base64.b64decode(value["base64"], validate=True)


def _remove_leftovers(repo: Path) -> None:
    """Temporary files (`.<name>.<pid>.tmp`) a killed writer left beside the files only writers
    holding the write lock write (scope files, next_ids.json, whetstone's files in .git): the
    caller holds that lock, so none of them is in use (but an export's cache in .git, written
    without it: losing that temporary only means the cache is not saved)."""
    wanted = {repo: ".next_ids.json.", repo / "learnings": ".", repo / "issues": ".", repo / ".git": ".whetstone"}
    for folder, prefix in wanted.items():
        try:
            for item in folder.iterdir():
                if item.name.startswith(prefix) and _TEMP.fullmatch(item.name) and item.is_file():
                    item.unlink(missing_ok=True)
        except OSError:
            pass
