"""Checking a store as a whole (SPEC §3 "Validation", §7): every scope file through
`blocks.validate`, and ids that two files both claim.

The files can come from the work tree, from what is staged for the next commit, or from a commit,
so the pre-commit hook checks exactly the blobs git is about to commit (through the index git
names in GIT_INDEX_FILE, which `git commit -a` and `git commit PATH` point at a temporary one),
the post-commit hook checks what was committed, and `git whetstone validate` and `edit` check
the work tree. Every finding is a `blocks.FormatError`, printed as `path:line: message`.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import blocks, gitbin
from .blocks import FormatError
from .config import Config, load
from .errors import RUNTIME, WhetstoneError
from .store import KIND_FOLDER, Store

# The files a store reads: learnings/*.md and issues/*.md, not hidden ones (see Store.scope_files).
SCOPE_FILE = re.compile(r"^(?:learnings|issues)/(?!\.)[^/]+\.md$")
_HEADING_ID = re.compile(r"^## ([LI][1-9]\d*) \u00b7", re.M)


def is_scope_file(rel: str) -> bool:
    return bool(SCOPE_FILE.match(rel))


def heading_ids(text: str) -> list[tuple[str, int]]:
    """Every block id in `text` with its line, valid block or not: what a person meant to claim."""
    return [(m.group(1), text.count("\n", 0, m.start()) + 1) for m in _HEADING_ID.finditer(text)]


def top_ids(files: Mapping[str, bytes]) -> dict[str, int]:
    """The highest id number per prefix claimed anywhere in `files`."""
    top = {"L": 0, "I": 0}
    for data in files.values():
        for bid, _ in heading_ids(data.decode("utf-8", "replace")):
            top[bid[0]] = max(top[bid[0]], int(bid[1:]))
    return top


def check(files: Mapping[str, bytes], full: Iterable[str] | None = None, *,
          markdown: bool = True) -> list[FormatError]:
    """The format errors of a set of scope files (path → content), sorted by path and line.

    Each file in `full` (every file when None) goes through `blocks.validate`, or without
    `markdown` through the line reader alone (`blocks.parse`: what recall reads with, ten times
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
            errors += blocks.validate(text, rel, folder) if markdown else blocks.parse(text, rel, folder).errors
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


# --- where the files come from ----------------------------------------------------------------------

def worktree_files(store: Store) -> dict[str, bytes]:
    """The store's scope files as they are on disk."""
    return {store.rel(path): path.read_bytes() for kind in KIND_FOLDER for path in store.scope_files(kind)}


def _git(repo: Path, *args: str, inherit: bool, input: bytes | None = None, check: bool = True) -> bytes:
    """Run git for its output (bytes). `inherit` keeps the environment git gave a hook (above all
    GIT_INDEX_FILE); otherwise the call talks to `repo` alone, as gitbin's calls do."""
    env = dict(os.environ) if inherit else gitbin._env()
    try:
        proc = subprocess.run(["git", *args], cwd=repo, input=input, capture_output=True, env=env,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise WhetstoneError("git is not installed or not on PATH", exit_code=RUNTIME) from None
    if check and proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise WhetstoneError(f"git {args[0]} failed in {repo}: {said[-1] if said else proc.returncode}",
                             exit_code=RUNTIME)
    return proc.stdout


def _blobs(repo: Path, entries: dict[str, str], inherit: bool) -> dict[str, bytes]:
    """path → content for path → blob id, read through one `git cat-file --batch`."""
    if not entries:
        return {}
    paths = sorted(entries)
    out = _git(repo, "cat-file", "--batch", inherit=inherit,
               input="".join(f"{entries[p]}\n" for p in paths).encode())
    files, pos = {}, 0
    for path in paths:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        if len(header) != 3 or header[1] != b"blob":
            raise WhetstoneError(f"git cat-file: cannot read {path} ({out[pos:end].decode(errors='replace')})",
                                 exit_code=RUNTIME)
        size = int(header[2])
        files[path] = out[end + 1:end + 1 + size]
        pos = end + 1 + size + 1
    return files


def staged_files(repo: Path, inherit: bool = False) -> dict[str, bytes]:
    """The scope files as staged: the index git is about to commit."""
    listing = _git(repo, "ls-files", "--stage", "-z", "--", "learnings", "issues", inherit=inherit)
    entries = {}
    for record in listing.decode("utf-8", "surrogateescape").split("\0"):
        if not record:
            continue
        info, path = record.split("\t", 1)
        mode, sha, stage = info.split()
        if is_scope_file(path) and stage == "0" and mode.startswith("100"):
            entries[path] = sha
    return _blobs(repo, entries, inherit)


def commit_files(repo: Path, rev: str = "HEAD", inherit: bool = False) -> dict[str, bytes]:
    """The scope files as committed in `rev`."""
    listing = _git(repo, "ls-tree", "-r", "-z", rev, "--", "learnings", "issues", inherit=inherit, check=False)
    entries = {}
    for record in listing.decode("utf-8", "surrogateescape").split("\0"):
        if record:
            info, path = record.split("\t", 1)
            mode, kind, sha = info.split()
            if kind == "blob" and is_scope_file(path) and mode.startswith("100"):
                entries[path] = sha
    return _blobs(repo, entries, inherit)


def changed_paths(repo: Path, command: str, *args: str, inherit: bool = False) -> set[str]:
    """The scope files that `git COMMAND --name-only ARGS` (diff, diff-tree) names; nothing when
    it fails (no ORIG_HEAD, say)."""
    out = _git(repo, command, "--name-only", "--no-renames", "-z", *args, inherit=inherit, check=False)
    return {p for p in out.decode("utf-8", "surrogateescape").split("\0") if is_scope_file(p)}


def staged_changes(repo: Path, inherit: bool = False) -> set[str]:
    """The scope files the next commit adds or changes."""
    return changed_paths(repo, "diff", "--cached", "--diff-filter=d", inherit=inherit)


CONFLICT_HINT = ("a merge left two versions of a block between <<<<<<< and >>>>>>>: keep the one you want, "
                 "delete the marker lines, then git add and commit (or git whetstone sync again)")


def conflict_hint(errors: Iterable[FormatError]) -> str | None:
    """What to do about conflict markers among `errors`, if there are any."""
    return CONFLICT_HINT if any(e.message == "unresolved merge conflict marker" for e in errors) else None


# --- the command -------------------------------------------------------------------------------------

def validate(skill: str, staged: bool = False, *, config: Config | None = None) -> dict[str, Any]:
    """Check every scope file of `skill` (as on disk, or with `staged` as staged for the next
    commit) and the ids across them. `valid` is False when there is any error."""
    config = config or load()
    store = Store.open(config, skill)
    store.require()
    files = staged_files(store.path) if staged else worktree_files(store)
    errors = check(files)
    hint = conflict_hint(errors)
    return {"skill": store.skill, "path": str(store.path), "staged": staged, "files": len(files),
            "valid": not errors,
            "errors": [{"path": e.path, "line": e.line, "message": e.message, "text": str(e)} for e in errors],
            **({"hint": hint} if hint else {})}
