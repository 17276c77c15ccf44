"""A skill's store (SPEC §3): one git repository of scope files under the store root.

The store owns the files: skill names, the layout, id minting from `next_ids.json`, the
cross-process write lock, atomic writes, one git commit per change, and the journal that lets the
next writer finish (or undo) a change whose writer was killed half way. It knows nothing about
embeddings or retrieval.
"""
from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from . import gitbin
from .config import Config
from .errors import RUNTIME, WhetstoneError, shown

GLOBAL = "__global__"
GLOBAL_PREFIX = "G:"  # how ids from the global layer are shown and accepted: G:L3
KIND_FOLDER = {"learning": "learnings", "issue": "issues"}
GITIGNORE = "index.sqlite*\nevents.jsonl\ncompact-report.md\n"
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
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
    if (not _NAME.fullmatch(name) or name.endswith(".") or name.endswith(".lock")
            or name.split(".")[0] in _RESERVED):
        raise WhetstoneError(
            f"invalid skill name {shown(raw)}: use 1-64 characters a-z 0-9 . _ - starting with a letter or digit")
    return name


def today() -> dt.date:
    """Today's date; WHETSTONE_TODAY (YYYY-MM-DD) pins it for tests and benchmarks."""
    pinned = os.environ.get("WHETSTONE_TODAY")
    if pinned:
        try:
            return dt.date.fromisoformat(pinned)
        except ValueError:
            raise WhetstoneError(f"WHETSTONE_TODAY: expected YYYY-MM-DD, got {shown(pinned)}") from None
    return dt.date.today()


def scope_key(scope: str) -> str:
    """Scopes compare case-insensitively with white space folded."""
    return " ".join(scope.split()).casefold()


def scope_filename(scope: str) -> str:
    """`<slug>-<short hash>.md`: readable, and distinct for distinct scopes."""
    key = scope_key(scope)
    slug = re.sub(r"[^a-z0-9]+", "-", key.encode("ascii", "ignore").decode()).strip("-")[:48].strip("-")
    digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:8]
    return f"{slug or 'scope'}-{digest}.md"


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
        if not self.exists and self._orphaned():
            raise WhetstoneError(f"{self.path} holds learnings but has no .git, so it is not a store whetstone "
                                 f"can use; restore its .git (or clone it again)", exit_code=RUNTIME)
        if not self.exists:
            raise WhetstoneError(f"no store for skill '{self.skill}' (create it with: git whetstone attach {self.skill})")

    def _orphaned(self) -> bool:
        """A store directory whose .git is gone: its markdown is there, its history is not."""
        return any((self.path / folder).is_dir() for folder in KIND_FOLDER.values())

    def head(self) -> str | None:
        return gitbin.head(self.path)

    def scope_files(self, kind: str) -> list[Path]:
        folder = self.path / KIND_FOLDER[kind]
        try:
            return sorted(p for p in folder.iterdir() if p.suffix == ".md" and not p.name.startswith("."))
        except FileNotFoundError:
            return []

    def rel(self, path: Path) -> str:
        return path.relative_to(self.path).as_posix()

    # --- creation -------------------------------------------------------------------------------

    def create(self) -> bool:
        """Make the repository with its first commit and install its hooks; False when it already
        was a store. Safe against other processes creating it at the same moment: creation holds a
        lock beside the store and builds the repository in a private directory that is renamed
        into place, so no process ever removes a store another one made."""
        if self.exists:
            return False
        if self._orphaned():
            self.require()  # says what is wrong
        root = self.path.parent
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WhetstoneError(f"cannot create the store root {root}: {exc.strerror or exc}",
                                 exit_code=RUNTIME) from None
        guard = root / f".{self.skill}.create-lock"
        with _flock(guard, self.config.lock_timeout, self.skill):
            try:
                created = self._create_under_lock(root)
            finally:
                # Safe to remove while held: every creator re-checks `exists` once it has the lock.
                guard.unlink(missing_ok=True)
        if not created:
            return False
        from . import hooks
        self.warnings += hooks.ensure(self)
        return True

    def _create_under_lock(self, root: Path) -> bool:
        """Build the repository in a private directory and rename it into place."""
        if self.exists:
            return False
        if self.path.exists() and (not self.path.is_dir() or any(self.path.iterdir())):
            raise WhetstoneError(f"{self.path} exists and is not a whetstone store; move it away first")
        # Whoever made a `.creating-<pid>` directory held this lock while it existed, so any left
        # now belongs to a creator that was killed: clear them all.
        for leftover in root.glob(f".{self.skill}.creating-*"):
            _remove_tree(leftover)
        work = root / f".{self.skill}.creating-{os.getpid()}"
        work.mkdir()
        try:
            gitbin.run(work, "init", "-q", "--initial-branch=main")
            (work / "learnings").mkdir()
            (work / "issues").mkdir()
            write_atomic(work / ".gitignore", GITIGNORE)
            write_atomic(work / "next_ids.json", ids_text({"learning": 1, "issue": 1}))
            gitbin.commit(work, f"attach: create the store for {self.skill}", [".gitignore", "next_ids.json"])
            if self.path.exists():
                self.path.rmdir()  # the empty directory someone made for it
            try:
                os.rename(work, self.path)
            except OSError:
                if not self.exists:
                    raise
                _remove_tree(work)  # another creator got there first (it did not wait for our lock)
                return False
        except BaseException:
            _remove_tree(work)  # only ever our own private directory
            raise
        return True

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
        with _flock(self.path / ".git" / "whetstone.lock", self.config.lock_timeout, self.skill) as fd:
            self._lock_fd = fd
            try:
                if recover:
                    self.recover()
                yield
            finally:
                self._lock_fd = None

    def recover_if_interrupted(self) -> None:
        """For readers: if a killed writer left a write half done and nobody holds the store,
        finish or undo it now (one stat when there is nothing to do; never waits)."""
        if not (self.path / ".git" / JOURNAL).exists():
            return
        try:
            with _flock(self.path / ".git" / "whetstone.lock", 0, self.skill, wait=False) as fd:
                self._lock_fd = fd
                try:
                    self.recover()
                finally:
                    self._lock_fd = None
        except WhetstoneError:
            pass  # a writer holds it (and will recover), or the store is read-only

    # --- ids ------------------------------------------------------------------------------------

    def mint(self, kind: str, top: dict[str, int]) -> tuple[str, str]:
        """The next id for `kind` and the new text of `next_ids.json`, for the caller to write in
        the same commit. Ids are never reused: the number is above every id in the markdown (so a
        hand-added block is not shadowed) and above every id this clone ever minted or saw in its
        history, kept in `.git/whetstone-ids.json` (so a `git revert` or `reset` of a capture, which
        rolls next_ids.json back too, cannot hand its id out again). A corrupt next_ids.json is
        rebuilt from the markdown and git history with a warning."""
        counters = self._read_ids(top)
        seen = self._high_water(top)
        prefix = "L" if kind == "learning" else "I"
        number = max(counters[kind], top.get(prefix, 0) + 1, seen[kind])
        counters[kind] = number + 1
        seen[kind] = number + 1
        write_atomic(self.path / ".git" / "whetstone-ids.json", ids_text(seen))
        return f"{prefix}{number}", ids_text(counters)

    def keep_ids(self, top: dict[str, int]) -> str:
        """Raise the high-water mark over every id the markdown claims (`top`: highest number per
        prefix, hand-written blocks included), so an id a person wrote is never minted again, even
        after its block is deleted; returns the text next_ids.json should have to match. The
        post-commit hook and `edit` call it; `mint` then starts above it."""
        counters, seen = self._read_ids(top), self._high_water(top)
        for kind, prefix in (("learning", "L"), ("issue", "I")):
            counters[kind] = seen[kind] = max(counters[kind], seen[kind], top.get(prefix, 0) + 1)
        write_atomic(self.path / ".git" / "whetstone-ids.json", ids_text(seen))
        return ids_text(counters)

    def _high_water(self, top: dict[str, int]) -> dict[str, int]:
        try:
            data = json.loads((self.path / ".git" / "whetstone-ids.json").read_text())
            return {k: int(data[k]) for k in ("learning", "issue")}
        except (OSError, ValueError, KeyError, TypeError):
            return self._recover_ids(top)  # a fresh clone: learn what history used

    def _read_ids(self, top: dict[str, int]) -> dict[str, int]:
        try:
            data = json.loads((self.path / "next_ids.json").read_text(encoding="utf-8"))
            if (isinstance(data, dict) and all(isinstance(data.get(k), int) and not isinstance(data.get(k), bool)
                                               and data[k] >= 1 for k in ("learning", "issue"))):
                return {"learning": data["learning"], "issue": data["issue"]}
        except (OSError, ValueError):
            pass
        recovered = self._recover_ids(top)
        self.warnings.append(
            f"next_ids.json was missing or corrupt; rebuilt it from the markdown and git history "
            f"(next learning L{recovered['learning']}, next issue I{recovered['issue']})")
        return recovered

    def _recover_ids(self, top: dict[str, int]) -> dict[str, int]:
        """Next ids above everything the markdown (`top`: highest number per prefix), the
        history and the committed next_ids.json ever used."""
        highest = {"L": top.get("L", 0), "I": top.get("I", 0)}
        log = gitbin.run(self.path, "log", "--all", "--format=", "-p", "--unified=0", "--",
                         "learnings", "issues", check=False).stdout
        for match in re.finditer(r"^[-+]## ([LI])(\d+) \u00b7", log, re.M):
            highest[match.group(1)] = max(highest[match.group(1)], int(match.group(2)))
        committed = gitbin.run(self.path, "show", "HEAD:next_ids.json", check=False).stdout
        try:
            data = json.loads(committed)
            for kind, prefix in (("learning", "L"), ("issue", "I")):
                if isinstance(data.get(kind), int):
                    highest[prefix] = max(highest[prefix], data[kind] - 1)
        except (ValueError, AttributeError):
            pass
        return {"learning": highest["L"] + 1, "issue": highest["I"] + 1}

    # --- writing --------------------------------------------------------------------------------

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

    def write_and_commit(self, message: str, files: dict[Path, str | bytes | None]) -> None:
        """Write (or delete, for None) each file atomically, then commit them all as one change.
        If the commit fails (a hook said no), every file is put back as it was.

        Before the first file changes, the whole change (each file before and after, and the
        commit message) is written to .git/whetstone-journal.json, so a writer killed at any point
        leaves enough for the next one to finish the change or undo it (`recover`)."""
        pending = gitbin.in_progress(self.path)
        if pending:  # a commit now would conclude the user's merge (or rebase …) under our message
            raise WhetstoneError(f"{self.skill} is in the middle of a {pending} (a sync or a git command stopped on "
                                 f"a conflict): finish it (resolve, git add, git commit) or undo it (git {pending} "
                                 f"--abort) in {self.path}, then try again", exit_code=RUNTIME)
        before = {path: _read_or_none(path) for path in files}
        after = {path: text.encode("utf-8") if isinstance(text, str) else text for path, text in files.items()}
        journal = self.path / ".git" / JOURNAL
        write_atomic(journal, json.dumps({
            "pid": os.getpid(), "message": message,
            "files": [{"path": self.rel(p), "before": _pack(before[p]), "after": _pack(after[p])} for p in files]}))
        try:
            for path in _write_order(before, after):
                _put(path, after[path])
            self._commit(message, [self.rel(p) for p in files])
        except BaseException:
            for path in _write_order(after, before):
                _put(path, before[path])
            # unstage what `git add` staged, so git's index matches HEAD again
            gitbin.run(self.path, "reset", "-q", "--pathspec-from-file=-", "--pathspec-file-nul",
                       input="\0".join(self.rel(p) for p in files), check=False, hold=self._lock_fd)
            journal.unlink(missing_ok=True)
            raise
        journal.unlink(missing_ok=True)

    def _commit(self, message: str, paths: list[str]) -> None:
        """`gitbin.commit`, waiting (up to lock_timeout) while another git command holds one of
        git's lock files (.git/index.lock, HEAD.lock, …), and taking over those a killed git left."""
        deadline = time.monotonic() + self.config.lock_timeout
        while True:
            self._clear_stale_git_locks()
            try:
                gitbin.commit(self.path, message, paths, hold=self._lock_fd)
                return
            except WhetstoneError:
                held = _git_locks(self.path)
                if not held:
                    raise
                if time.monotonic() >= deadline:
                    shown_lock = held[0].relative_to(self.path)
                    raise Busy(
                        f"store busy: another git command has held {self.skill}'s {shown_lock} for "
                        f"{self.config.lock_timeout:g}s; try again (if no git command is running there, "
                        f"remove {held[0]})", exit_code=RUNTIME) from None
                time.sleep(0.05)

    def _clear_stale_git_locks(self) -> None:
        """Remove git's lock files (.git/index.lock, HEAD.lock, a branch's .lock, …) when the git
        that made them is gone: killed before it could clean up, it leaves them behind and every
        later git command refuses to run. Only done while this process holds the write lock, so
        no whetstone git is running, and only when /proc shows no other git process working in
        this repository (without /proc they are left alone)."""
        if self._lock_fd is None:
            return
        held = _git_locks(self.path)
        if not held:
            return
        seen = {}
        for lock in held:
            try:
                st = lock.stat()
                seen[lock] = (st.st_ino, st.st_mtime_ns)
            except FileNotFoundError:
                pass
        if not seen or _git_running_in(self.path) is not False:
            return
        removed = []
        for lock, stamp in seen.items():
            try:
                st = lock.stat()
                if (st.st_ino, st.st_mtime_ns) == stamp:
                    lock.unlink()
                    removed.append(lock.relative_to(self.path / ".git").as_posix())
            except FileNotFoundError:
                pass
        if removed:
            self.warnings.append(f"removed git lock files a killed git command had left behind: {', '.join(removed)}")
            from . import events
            events.append(self.path, "recover", action="removed_stale_git_locks", files=removed)

    # --- recovery -------------------------------------------------------------------------------

    def recover(self) -> str | None:
        """Finish or undo the write a killed writer left in .git/whetstone-journal.json (call with
        the write lock held). Every file of that change must be as it was before or as the change
        wanted it: then the change is completed and committed with its own message, or, if git
        now refuses the commit (a hook), every file is put back. Files someone changed since are
        left as found. Each outcome is one "recover" event and a warning; returns the action."""
        journal = self.path / ".git" / JOURNAL
        try:
            raw = journal.read_bytes()
        except FileNotFoundError:
            return None
        from . import events
        try:
            data = json.loads(raw)
            message = data["message"]
            changes = {self.path / item["path"]: (_unpack(item["before"]), _unpack(item["after"]))
                       for item in data["files"]}
            if not isinstance(message, str) or any(not self._inside(p) for p in changes):
                raise ValueError("not a journal whetstone wrote")
        except (ValueError, KeyError, TypeError, AttributeError):
            journal.unlink(missing_ok=True)
            self.warnings.append("dropped an unreadable .git/whetstone-journal.json")
            events.append(self.path, "recover", action="dropped_journal")
            return "dropped_journal"
        _remove_leftovers(self.path)
        self._clear_stale_git_locks()
        subject = message.split("\n", 1)[0]
        rels = [self.rel(p) for p in changes]
        current = {p: _read_or_none(p) for p in changes}
        reason = None
        if any(current[p] not in pair for p, pair in changes.items()):
            action = "left_as_found"
            reason = "its files were changed since"
        else:
            for path in _write_order(current, {p: after for p, (_, after) in changes.items()}):
                _put(path, changes[path][1])
            # (if git cannot even say, the journal stays for the next write to try again)
            if not self._differs_from_head(rels):
                action = "found_committed"  # the writer was killed after its commit
            else:
                action = "committed"
            try:
                if action == "committed":
                    self._commit(f"{message.rstrip()}\n\n(completed by whetstone after the writer was "
                                 f"interrupted)\n", rels)
            except Busy:
                raise  # git is busy, not refusing: the journal stays for the next write
            except WhetstoneError as exc:  # not in HEAD, and git refuses it now: undo it
                restore = {p: before for p, (before, _) in changes.items()}
                for path in _write_order({p: after for p, (_, after) in changes.items()}, restore):
                    _put(path, restore[path])
                gitbin.run(self.path, "reset", "-q", "--pathspec-from-file=-", "--pathspec-file-nul",
                           input="\0".join(rels), check=False, hold=self._lock_fd)
                action, reason = "rolled_back", exc.message
        journal.unlink(missing_ok=True)
        said = {"committed": "completed and committed", "found_committed": "found it already committed",
                "rolled_back": "rolled it back", "left_as_found": "left its files as found"}[action]
        self.warnings.append(f"an interrupted write ('{subject}') was found: {said}"
                             + (f" ({reason})" if reason else ""))
        events.append(self.path, "recover", action=action, message=subject, files=rels,
                      **({"reason": reason} if reason else {}))
        return action

    def _inside(self, path: Path) -> bool:
        """Whether a path a journal names is a file of the store's work tree (never in .git, never outside)."""
        if not path.is_relative_to(self.path):
            return False
        parts = Path(os.path.normpath(path.relative_to(self.path))).parts
        return bool(parts) and parts[0] not in ("..", ".git")

    def _differs_from_head(self, rels: list[str]) -> bool:
        """Whether any of `rels` differs between the work tree (or git's index) and HEAD."""
        for i in range(0, len(rels), 500):
            out = gitbin.run(self.path, "status", "--porcelain", "-z", "--untracked-files=all", "--",
                             *(f":(literal){rel}" for rel in rels[i:i + 500]), hold=self._lock_fd).stdout
            if out.strip("\0"):
                return True
        return False


class Busy(WhetstoneError):
    """Another git command held the repository past lock_timeout."""


JOURNAL = "whetstone-journal.json"
_IDS = re.compile(rb"^## ([LI][1-9]\d*) \xc2\xb7", re.M)


def _pack(data: bytes | None) -> str | dict | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        import base64
        return {"base64": base64.b64encode(data).decode("ascii")}


def _unpack(value: str | dict | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    import base64
    return base64.b64decode(value["base64"], validate=True)


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _put(path: Path, data: bytes | None) -> None:
    if data is None:
        path.unlink(missing_ok=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)


def _write_order(old: dict[Path, bytes | None], new: dict[Path, bytes | None]) -> list[Path]:
    """The paths to change from `old` to `new`, in an order that never shows one id in two files:
    files that gain no id first (removals, edits, a block's old home), then those that gain one,
    then next_ids.json. Killed half way, a change then hides an entry (until recovery) rather than
    showing it twice."""
    def gains(path: Path) -> bool:
        return bool(set(_IDS.findall(new[path] or b"")) - set(_IDS.findall(old[path] or b"")))
    return sorted(new, key=lambda p: (p.name == "next_ids.json", gains(p)))


_TEMP = re.compile(r"\..+\.\d+\.tmp")  # write_atomic's temporary names


def _remove_leftovers(store: Path) -> None:
    """Temporary files (`.<name>.<pid>.tmp`) a killed writer left beside the files only writers
    holding the write lock write (scope files, next_ids.json, whetstone's files in .git): the
    caller holds that lock, so none of them is in use."""
    wanted = {store: ".next_ids.json.", store / "learnings": ".", store / "issues": ".", store / ".git": ".whetstone"}
    for folder, prefix in wanted.items():
        try:
            for item in folder.iterdir():
                if item.name.startswith(prefix) and _TEMP.fullmatch(item.name) and item.is_file():
                    item.unlink(missing_ok=True)
        except OSError:
            pass


_GIT_LOCKS = ("index.lock", "HEAD.lock", "ORIG_HEAD.lock", "packed-refs.lock", "config.lock", "shallow.lock")


def _git_locks(repo: Path) -> list[Path]:
    """The lock files git has in `repo` right now: its index, HEAD, refs and config."""
    gitdir = repo / ".git"
    found = [gitdir / name for name in _GIT_LOCKS if (gitdir / name).exists()]
    for folder, _, names in os.walk(gitdir / "refs"):
        found += [Path(folder) / name for name in names if name.endswith(".lock")]
    return found


def _git_running_in(repo: Path) -> bool | None:
    """Whether a git process works in `repo` (its current directory is inside it), from /proc;
    None when that cannot be known (no /proc). A git process whose directory cannot be read (another
    user's) counts as running there."""
    proc = Path("/proc")
    if not (proc / "self" / "cwd").exists():
        return None
    target = os.path.realpath(repo)
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            comm = (proc / entry.name / "comm").read_text().strip()
        except OSError:
            continue
        if comm != "git" and not comm.startswith("git-"):
            continue
        try:
            cwd = os.readlink(proc / entry.name / "cwd")
        except FileNotFoundError:
            continue
        except OSError:
            return True
        if cwd == target or cwd.startswith(target + os.sep):
            return True
    return False


@contextmanager
def _flock(path: Path, timeout: float, skill: str, *, wait: bool = True) -> Iterator[int]:
    """An exclusive flock on `path`, waited for up to `timeout` seconds, then "store busy"; yields
    the locked file descriptor. Waiting happens in the kernel's queue (in a helper thread, which
    can be abandoned at the timeout), so the lock passes to a waiter as soon as it is released
    instead of to whoever polls first."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        why = " (the store is read-only)" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else ""
        raise WhetstoneError(f"cannot write to {skill}: cannot take its write lock {path}: "
                             f"{exc.strerror or exc}{why}", exit_code=RUNTIME) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait or not _wait_for_flock(fd, timeout):
                raise WhetstoneError(f"store busy: another whetstone process has held {skill} for "
                                     f"{timeout:g}s; try again", exit_code=RUNTIME) from None
        yield fd
    finally:
        os.close(fd)


def _wait_for_flock(fd: int, timeout: float) -> bool:
    """Block on the lock in a helper thread for up to `timeout` seconds. The thread locks a
    duplicate of `fd` (the same open file, so the lock is `fd`'s); if it gets the lock only after
    the caller gave up, it lets go of it at once."""
    twin = os.dup(fd)
    state = {"given_up": False, "done": False, "got": False}
    guard = threading.Lock()
    finished = threading.Event()

    def block() -> None:
        try:
            fcntl.flock(twin, fcntl.LOCK_EX)
            got = True
        except OSError:
            got = False
        with guard:
            if state["given_up"]:  # too late: let go, and close the twin nobody else will
                if got:
                    fcntl.flock(twin, fcntl.LOCK_UN)
                os.close(twin)
            else:
                state.update(done=True, got=got)
        finished.set()

    threading.Thread(target=block, name="whetstone-lock-wait", daemon=True).start()
    finished.wait(timeout)
    with guard:
        if state["done"]:
            os.close(twin)  # `fd` keeps the lock
            return state["got"]
        state["given_up"] = True
    return False


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write through a temporary file and rename, so readers never see half a file (mode 0644)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "wb") as handle:
        handle.write(raw)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def ids_text(counters: dict[str, int]) -> str:
    """next_ids.json (or the local high-water mark) as written: one line of JSON."""
    return json.dumps({"learning": counters["learning"], "issue": counters["issue"]}) + "\n"


def _remove_tree(path: Path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def list_skills(config: Config) -> list[str]:
    """Names of the stores under the store root, sorted."""
    root = Path(config.store_root).expanduser()
    try:
        found = [p for p in root.iterdir() if (p / ".git").exists() and (p.name == GLOBAL or _NAME.fullmatch(p.name))]
    except FileNotFoundError:
        return []
    home = root.resolve()
    return sorted(p.name for p in found if not p.is_symlink() or p.resolve().is_relative_to(home))


def attach(skill: str, path: str | None = None, *, config: Config | None = None) -> dict:
    """Create `skill`'s store (first commit, .gitignore, next_ids.json) unless it exists, and
    install its git hooks (see `hooks.ensure`). `path`, if given, is the skill's own directory,
    recorded in the store's git config."""
    from .config import load

    config = config or load()
    store = Store.open(config, skill)
    skill_path = None
    if path not in (None, ""):
        if not isinstance(path, str):
            raise WhetstoneError(f"path must be a directory path, got {shown(path)}")
        resolved = Path(path).expanduser().resolve()
        if not resolved.is_dir():
            raise WhetstoneError(f"path {shown(path)} is not a directory (give the skill's own directory)")
        skill_path = str(resolved)
    created = store.create()  # a new store gets its hooks there
    if not created:
        from . import hooks
        store.warnings += hooks.ensure(store)  # an existing one gets them refreshed
    if skill_path:
        gitbin.run(store.path, "config", "whetstone.skillPath", skill_path)
    return {"skill": store.skill, "path": str(store.path), "created": created,
            "status": "attached" if created else "already_attached",
            **({"skill_path": skill_path} if skill_path else {}),
            **({"warnings": store.warnings} if store.warnings else {})}
