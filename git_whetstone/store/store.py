"""A skill's store (SPEC §3): one git repository of scope files under the store root.

`Store` owns the files: where they are, the cross-process write lock, id minting from
next_ids.json, and every write as one atomic, journaled change committed as one git commit. It
knows nothing about embeddings or retrieval, nor about hooks (installing them is `ops.attach`'s).
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..base.config import Config
from ..base.errors import RUNTIME, WhetstoneError
from ..base.files import read_or_none
from ..format.counters import ids_text
from ..format.layout import (GLOBAL, KIND_FOLDER, SKILL_NAME, close_names, is_scope_file, is_scope_name, scope_filename,
                             scope_key, skill_name)
from ..git import runner, tree
from ..git.locks import Busy, flock, git_locks
from . import ids, journal



@dataclass
class Store:
    """One skill's repository. Construct with `Store.open`; writes happen inside `with store.lock()`."""

    config: Config
    skill: str
    path: Path
    warnings: list[str] = field(default_factory=list)
    _lock_fd: int | None = field(default=None, repr=False)  # while this process holds the write lock

    @classmethod
    def open(cls, config: Config, skill: object) -> "Store":
        name = skill_name(skill)
        root = Path(config.store_root).expanduser()
        if root.exists() and not root.is_dir():
            raise WhetstoneError(f"store root {root} is not a directory (see store_root / WHETSTONE_STORE_ROOT)")
        path = root / name
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(root.resolve()):
                raise WhetstoneError(f"store {path} is a link to {target}, outside the store root; refusing it")
        return cls(config, name, path)

    # --- state ----------------------------------------------------------------------------------

    @property
    def exists(self) -> bool:
        return (self.path / ".git").exists()

    def require(self) -> None:
        if not self.exists and self.orphaned():
            raise WhetstoneError(f"{self.path} holds learnings but has no .git, so it is not a store whetstone "
                                 f"can use; restore its .git (or clone it again)", exit_code=RUNTIME)
        if not self.exists:
            raise WhetstoneError(f"no store for skill '{self.skill}' (create it with: git whetstone attach {self.skill})")

    def orphaned(self) -> bool:
        """A store directory whose .git is gone: its markdown is there, its history is not."""
        return any((self.path / folder).is_dir() for folder in KIND_FOLDER.values())

    def head(self) -> str | None:
        return runner.head(self.path)

    def scope_files(self, kind: str) -> list[Path]:
        folder = self.path / KIND_FOLDER[kind]
        return [folder / name for name in self.scope_names(kind)]

    def scope_names(self, kind: str) -> list[str]:
        """The names of the scope files of `kind`, sorted (listed without a Path each: 0.3 s fewer
        at 10,000 files)."""
        try:
            return sorted(filter(is_scope_name, os.listdir(self.path / KIND_FOLDER[kind])))
        except FileNotFoundError:
            return []

    def scope_texts(self) -> dict[str, bytes]:
        """The store's scope files as they are on disk, by path relative to the store."""
        return {self.rel(path): path.read_bytes() for kind in KIND_FOLDER for path in self.scope_files(kind)}

    def rel(self, path: Path) -> str:
        return path.relative_to(self.path).as_posix()

    def file_for_scope(self, kind: str, scope: str, known: dict[tuple[str, str], str]) -> Path:
        """The file that holds `scope` for `kind`: where its blocks already live (`known` maps
        (kind, scope key) to a file), else a new one named after the scope."""
        rel = known.get((kind, scope_key(scope)))
        if rel:
            return self.path / rel
        path = self.path / KIND_FOLDER[kind] / scope_filename(scope)
        while path.exists():  # a hand-made file of another scope took the name
            path = path.with_name(path.stem + "x.md")
        return path

    # --- locking --------------------------------------------------------------------------------

    @contextmanager
    def lock(self, recover: bool = True) -> Iterator[None]:
        """Hold the store's cross-process write lock, then finish or undo a write that a killed
        writer left behind (`recover`; the hooks, which run inside a person's git command, skip it).

        The lock is an flock on .git/whetstone.lock: it dies with its process, so a killed writer
        never leaves a stale lock, and a live one makes others wait up to `lock_timeout`, then
        fail with "store busy". The git commands a writer runs share its lock, so a writer killed
        while git works holds the store until that git has finished."""
        self.require()
        with flock(self.path / ".git" / "whetstone.lock", self.config.lock_timeout, self.skill) as fd:
            self._lock_fd = fd
            try:
                if recover:
                    try:
                        self.recover()
                    except OSError as exc:
                        raise self.cannot_write(exc, "an interrupted write is still to finish") from None
                try:
                    yield
                except OSError as exc:  # a full disk, say, under a write that is not a commit
                    raise self.cannot_write(exc, "nothing was committed") from None
            finally:
                self._lock_fd = None

    def recover_if_interrupted(self) -> None:
        """For readers: if a killed writer left a write half done and nobody holds the store,
        finish or undo it now (one stat when there is nothing to do; never waits)."""
        if not journal.pending(self.path):
            return
        try:
            with flock(self.path / ".git" / "whetstone.lock", 0, self.skill, wait=False) as fd:
                self._lock_fd = fd
                try:
                    self.recover()
                finally:
                    self._lock_fd = None
        except WhetstoneError:
            pass  # a writer holds it (and will recover), or the store is read-only

    def recover(self) -> str | None:
        """Finish or undo the write a killed writer left (with the write lock held); the action
        taken, or None when there was nothing to do (see `journal.recover`)."""
        found = journal.recover(self.path, self.commit_paths, self._lock_fd)
        if found is None:
            return None
        action, said = found
        self.warnings += said
        return action

    # --- ids ------------------------------------------------------------------------------------

    def mint(self, kind: str, top: dict[str, int]) -> tuple[str, str]:
        """The next id for `kind` and the new text of `next_ids.json`, for the caller to write in
        the same commit. The number is above every id in the markdown (`top`: highest number per
        prefix, so a hand-added block is not shadowed) and above every id this clone ever minted
        or saw in its history (see `ids`)."""
        counters = self._counters(top)
        seen = ids.high_water(self.path, top)
        prefix = "L" if kind == "learning" else "I"
        number = max(counters[kind], top.get(prefix, 0) + 1, seen[kind])
        counters[kind] = seen[kind] = number + 1
        ids.save_high_water(self.path, seen)
        return f"{prefix}{number}", ids_text(counters)

    def keep_ids(self, top: dict[str, int]) -> str:
        """Raise the high-water mark over every id the markdown claims (`top`, hand-written blocks
        included), so an id a person wrote is never minted again, even after its block is deleted;
        returns the text next_ids.json should have to match. The post-commit hook and `edit` call
        it; `mint` then starts above it."""
        counters, seen = self._counters(top), ids.high_water(self.path, top)
        for kind, prefix in (("learning", "L"), ("issue", "I")):
            counters[kind] = seen[kind] = max(counters[kind], seen[kind], top.get(prefix, 0) + 1)
        ids.save_high_water(self.path, seen)
        return ids_text(counters)

    def _counters(self, top: dict[str, int]) -> dict[str, int]:
        found, warning = ids.counters(self.path, top)
        if warning:
            self.warnings.append(warning)
        return found

    # --- writing --------------------------------------------------------------------------------

    def write_and_commit(self, message: str, files: dict[Path, str | bytes | None], *,
                         finishing: str | None = None) -> None:
        """Write (or delete, for None) each file atomically, then commit them all as one change.
        If the commit fails (a hook said no), every file is put back as it was. The whole change
        is journaled first, so a writer killed at any point leaves enough for the next one to
        finish it or undo it. `finishing` names the git operation this commit completes (a rebase,
        from its post-rewrite hook: the branch is already moved, only git's state is left)."""
        pending = runner.in_progress(self.path)
        if pending and pending != finishing:  # a commit now would conclude the user's merge (or rebase …) under our message
            raise WhetstoneError(f"{self.skill} is in the middle of a {pending} (a sync or a git command stopped on "
                                 f"a conflict): finish it (resolve, git add, git commit) or undo it (git {pending} "
                                 f"--abort) in {self.path}, then try again", exit_code=RUNTIME)
        rels = [self.rel(p) for p in files]
        read = refuse_unfinished(self, rels)  # (each scope file read once: checked, then journaled)
        before = {path: read[rel][0] if rel in read else read_or_none(path) for path, rel in zip(files, rels)}
        in_head = {path: read[rel][2] for path, rel in zip(files, rels) if rel in read and read[rel][2]}
        after = {path: text.encode("utf-8") if isinstance(text, str) else text for path, text in files.items()}
        try:
            record = journal.record(self.path, message, before, after, in_head)
        except OSError as exc:  # nothing is written yet
            raise self.cannot_write(exc, "nothing was changed") from None
        try:
            journal.apply(before, after)
            self.commit_paths(message, rels)
        except BaseException as exc:
            try:
                journal.apply(after, before)
                journal.unstage(self.path, rels, self._lock_fd)  # git's index matches HEAD again
            except OSError:  # the journal stays: the next write (or read) undoes the change
                if isinstance(exc, OSError):
                    raise self.cannot_write(exc, "the next call finishes or undoes the change once there is "
                                                 "room") from None
                raise exc
            record.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise self.cannot_write(exc, "nothing was changed") from None
            raise
        record.unlink(missing_ok=True)

    def cannot_write(self, exc: OSError, outcome: str) -> WhetstoneError:
        """The one-line error for a write the system refused (a full disk, a read-only mount, …)."""
        return WhetstoneError(f"cannot write to {self.skill} in {self.path}: {exc.strerror or exc}; {outcome}",
                              exit_code=RUNTIME)

    def commit_paths(self, message: str, paths: list[str]) -> None:
        """Commit `paths` as they are on disk (`runner.commit`), waiting (up to lock_timeout) while
        another git command holds one of git's lock files (.git/index.lock, HEAD.lock, …), and
        taking over those a killed git left; a damaged .git/index is rebuilt from HEAD once."""
        deadline = time.monotonic() + self.config.lock_timeout
        repaired = False
        while True:
            if self._lock_fd is not None:
                self.warnings += journal.reap_git_locks(self.path)
            try:
                runner.commit(self.path, message, paths, hold=self._lock_fd)
                return
            except WhetstoneError as exc:
                if not repaired and self._lock_fd is not None:
                    said = journal.repair_index(self.path, exc.message, self._lock_fd)  # a damaged .git/index
                    if said:
                        self.warnings += said
                        repaired = True
                        continue
                held = git_locks(self.path)
                if not held:
                    raise
                if time.monotonic() >= deadline:
                    raise Busy(
                        f"store busy: another git command has held {self.skill}'s {held[0].relative_to(self.path)} "
                        f"for {self.config.lock_timeout:g}s; try again (if no git command is running there, "
                        f"remove {held[0]})", exit_code=RUNTIME) from None
                time.sleep(0.05)


class Unfinished(WhetstoneError):
    """A write refused because a file it would commit holds someone's uncommitted edit."""


def refuse_unfinished(store: Store, rels: list[str]) -> dict[str, tuple[bytes | None, bool, str | None]]:
    """Refuse (Unfinished, nothing changed) to write scope files that hold changes nobody
    committed: a commit would carry a person's unfinished edit under whetstone's message.
    (next_ids.json is whetstone's counter: a write takes it above whatever a hand wrote.)
    Returns the scope files as read (`tree.against_head`)."""
    read = tree.against_head(store.path, [r for r in rels if is_scope_file(r)])
    unfinished = sorted(rel for rel, (_, same, _) in read.items() if not same)
    if unfinished:
        more = f" and {len(unfinished) - 1} more" if len(unfinished) > 1 else ""
        raise Unfinished(
            f"{store.skill}: {unfinished[0]}{more} has changes nobody committed, and whetstone will not commit "
            f"them for you: commit them (git commit in {store.path}), set them aside (git stash), or make the "
            f"change with git whetstone edit; then try again. Nothing was changed", exit_code=RUNTIME)
    return read


def list_skills(config: Config) -> list[str]:
    """Names of the stores under the store root, sorted."""
    root = Path(config.store_root).expanduser()
    try:
        found = [p for p in root.iterdir()
                 if (p / ".git").exists() and (p.name == GLOBAL or SKILL_NAME.fullmatch(p.name))]
    except FileNotFoundError:
        return []
    home = root.resolve()
    return sorted(p.name for p in found if not p.is_symlink() or p.resolve().is_relative_to(home))


def close_skills(config: Config, skill: str) -> list[str]:
    """The stores whose names `skill` (a name no store has) is likely a typo of, closest first."""
    return close_names(skill, list_skills(config))
