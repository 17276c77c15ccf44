"""Locks that keep writers apart: whetstone's own write lock (an flock that passes to waiters in
order and dies with its process), and the lock files git leaves behind when it is killed.
"""
from __future__ import annotations

import errno
import fcntl
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..base.errors import RUNTIME, WhetstoneError


class Busy(WhetstoneError):
    """Another git command held the repository past lock_timeout."""


@contextmanager
def flock(path: Path, timeout: float, skill: str, *, wait: bool = True) -> Iterator[int]:
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


_GIT_LOCKS = ("index.lock", "HEAD.lock", "ORIG_HEAD.lock", "packed-refs.lock", "config.lock", "shallow.lock")


def git_locks(repo: Path) -> list[Path]:
    """The lock files git has in `repo` right now: its index, HEAD, refs and config."""
    gitdir = repo / ".git"
    found = [gitdir / name for name in _GIT_LOCKS if (gitdir / name).exists()]
    for folder, _, names in os.walk(gitdir / "refs"):
        found += [Path(folder) / name for name in names if name.endswith(".lock")]
    return found


def git_running_in(repo: Path) -> bool | None:
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


def clear_stale_git_locks(repo: Path) -> list[str]:
    """Remove git's lock files (.git/index.lock, HEAD.lock, a branch's .lock, …) when the git that
    made them is gone: killed before it could clean up, it leaves them behind and every later git
    command refuses to run. Call only while holding the store's write lock (so no whetstone git
    is running); they are removed only when /proc shows no other git process working in this
    repository (without /proc they are left alone). Returns the files removed, relative to .git."""
    held = git_locks(repo)
    if not held:
        return []
    seen = {}
    for lock in held:
        try:
            st = lock.stat()
            seen[lock] = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            pass
    if not seen or git_running_in(repo) is not False:
        return []
    removed = []
    for lock, stamp in seen.items():
        try:
            st = lock.stat()
            if (st.st_ino, st.st_mtime_ns) == stamp:
                lock.unlink()
                removed.append(lock.relative_to(repo / ".git").as_posix())
        except FileNotFoundError:
            pass
    return removed
