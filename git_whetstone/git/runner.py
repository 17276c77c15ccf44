"""The one way whetstone runs the real `git` binary, so hooks, signing and config behave as git does.
The environment a surrounding git sets (GIT_DIR, GIT_INDEX_FILE, … in a hook) is dropped, unless the
caller is a hook that must see what git is committing (`inherit`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..base.errors import RUNTIME, WhetstoneError

if TYPE_CHECKING:
    import subprocess

FALLBACK_NAME = "whetstone"
FALLBACK_EMAIL = "whetstone@localhost"
_INHERITED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX", "GIT_OBJECT_DIRECTORY",
              "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
              "GIT_QUARANTINE_PATH", "GIT_REFLOG_ACTION", "GIT_EDITOR")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED}
    env.setdefault("LC_ALL", "C")  # git's own messages stay parseable
    return env


def run(repo: Path, *args: str, check: bool = True, input: str | bytes | None = None,
        env: dict[str, str] | None = None, hold: int | None = None, inherit: bool = False,
        binary: bool = False) -> subprocess.CompletedProcess:
    """Run `git -C repo args…`; a failure with `check` becomes a WhetstoneError with git's words.
    `hold` is the store's write-lock descriptor: git inherits it, so if this process is killed
    the lock stays held until git has finished, and no other writer starts in the middle.
    `inherit` keeps the environment a hook was given (GIT_INDEX_FILE above all); `binary` gives
    bytes in and out instead of text."""
    import subprocess  # here, not at the top: recall never runs git and need not import it
    base = dict(os.environ) if inherit else _env()
    if env:
        base.update(env)
    try:
        # git and its hooks never read our stdin: in the MCP server that is the protocol pipe
        proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, text=not binary,
                              env=base, check=False, stdin=None if input is not None else subprocess.DEVNULL,
                              pass_fds=(hold,) if hold is not None else ())
    except FileNotFoundError:
        raise WhetstoneError("git is not installed or not on PATH", exit_code=RUNTIME) from None
    if check and proc.returncode != 0:
        _failed(repo, args, proc)
    return proc


def _failed(repo: Path, args: tuple[str, ...], proc: subprocess.CompletedProcess) -> None:
    """Raise the one-line error for a git command that failed, with git's words."""
    stderr = proc.stderr.decode("utf-8", "replace") if isinstance(proc.stderr, bytes) else proc.stderr
    stdout = proc.stdout.decode("utf-8", "replace") if isinstance(proc.stdout, bytes) else proc.stdout
    said = ((stderr or "").strip() or (stdout or "").strip()).splitlines()
    # git's own "fatal:" line says what went wrong; the lines after it are advice
    fatal = [line for line in said if line.startswith("fatal: ")]
    reason = fatal[0] if fatal else said[-1] if said else f"exit {proc.returncode}"
    verb = next((a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] != "-c")),
                args[0])
    raise WhetstoneError(f"git {verb} failed in {repo}: {reason}", exit_code=RUNTIME)


def last_line(proc: subprocess.CompletedProcess) -> str:
    """What a failed git command said last (its error, usually)."""
    said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    return said[-1] if said else f"exit {proc.returncode}"


_CONFIGURED: set[str] = set()


def _writing_env(repo: Path) -> dict[str, str]:
    """The environment of whetstone's own commit: WHETSTONE_WRITING (the shims skip their work), and a
    whetstone identity where the user configured none. Only a configured identity is remembered: a
    user who configures git later is picked up at once."""
    env = {"WHETSTONE_WRITING": "1"}
    have = {k for k in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")
            if os.environ.get(k)}
    if len(have) == 4 or str(repo) in _CONFIGURED:
        return env
    out = run(repo, "config", "--get-regexp", r"^user\.(name|email)$", check=False).stdout
    configured = {line.split(" ", 1)[0] for line in out.splitlines()}
    if {"user.name", "user.email"} <= configured:
        _CONFIGURED.add(str(repo))
        return env
    for role in ("AUTHOR", "COMMITTER"):
        if "user.name" not in configured and f"GIT_{role}_NAME" not in have:
            env[f"GIT_{role}_NAME"] = FALLBACK_NAME
        if "user.email" not in configured and f"GIT_{role}_EMAIL" not in have:
            env[f"GIT_{role}_EMAIL"] = FALLBACK_EMAIL
    return env


def commit(repo: Path, message: str, paths: list[str], hold: int | None = None) -> None:
    """Stage exactly `paths` (additions, changes and deletions) and commit them as one change
    (`hold`: the write lock's descriptor, see `run`).

    When the user has nothing else staged, a plain commit is enough; otherwise the commit names the
    paths (git's slower --only mode), so a half-staged hand edit never rides along.
    """
    mixed = _staged_elsewhere(repo, paths)
    listed = "\0".join(paths)  # paths go through stdin: a compaction may touch thousands of files
    # Each path staged as it is on disk, gone from git's index if gone from the disk (a path in
    # neither is skipped). Exact names, not pathspecs: `git add -A` and `git rm --cached` match
    # every pathspec against every file git tracks (3.5 s for the 6,300 files a 100k compact writes).
    run(repo, "update-index", "--add", "--remove", "-z", "--stdin", input=listed + "\0", hold=hold)
    commit_staged(repo, message, *(["--pathspec-from-file=-", "--pathspec-file-nul"] if mixed else []),
                  input=listed if mixed else None, hold=hold)
    maybe_gc(repo)


def commit_staged(repo: Path, message: str, *args: str, input: str | None = None, hold: int | None = None) -> None:
    """Commit what is staged, as it stands (how a merge is concluded: git refuses to name paths
    then), as whetstone's own write. Hooks run as for any commit; automatic maintenance is checked
    by `maybe_gc` instead of on every commit."""
    note = repo / ".git" / "WHETSTONE_COMMIT_MSG"  # a file: a compaction's message outgrows argv
    note.write_text(message, encoding="utf-8")
    try:
        run(repo, "-c", "maintenance.auto=false", "commit", "-q", "--no-edit", "-F", str(note), *args,
            input=input, env=_writing_env(repo), hold=hold)
    finally:
        note.unlink(missing_ok=True)
    _CLEAN_INDEX[str(repo)] = _index_stamp(repo)


# git's index (.git/index) as this process left it after its last commit, per repository: while
# it is untouched, nobody can have staged anything, and the `git diff --cached` check is skipped.
_CLEAN_INDEX: dict[str, tuple[int, int, int] | None] = {}


def _index_stamp(repo: Path) -> tuple[int, int, int] | None:
    try:
        st = (repo / ".git" / "index").stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _staged_elsewhere(repo: Path, paths: list[str]) -> bool:
    """Whether git's index holds staged changes to files other than `paths`."""
    known = _CLEAN_INDEX.get(str(repo))
    if known is not None and known == _index_stamp(repo):
        return False
    others = run(repo, "diff", "--cached", "--name-only", "-z", check=False)
    return others.returncode != 0 or bool(set(others.stdout.split("\0")) - {"", *paths})


# What git leaves in .git while an operation waits for the user, and the operation's name.
_PENDING = (("MERGE_HEAD", "merge"), ("rebase-merge", "rebase"), ("rebase-apply", "rebase"),
            ("CHERRY_PICK_HEAD", "cherry-pick"), ("REVERT_HEAD", "revert"))


def in_progress(repo: Path) -> str | None:
    """The git operation stopped half-way in `repo` (a merge that hit a conflict, say), if any."""
    for name, what in _PENDING:
        if (repo / ".git" / name).exists():
            return what
    return None


def revert_head(repo: Path) -> None:
    """Undo the last commit with a new one (as whetstone's own write, whatever identity the user
    has); if git cannot, leave the repository as it was and say so."""
    proc = run(repo, "-c", "maintenance.auto=false", "revert", "--no-edit", "HEAD", check=False,
               env=_writing_env(repo))
    if proc.returncode != 0:
        run(repo, "revert", "--abort", check=False)
        raise WhetstoneError(f"could not revert the last commit in {repo}: "
                             f"{(proc.stderr.strip().splitlines() or ['git said nothing'])[-1]}", exit_code=RUNTIME)
    _CLEAN_INDEX[str(repo)] = _index_stamp(repo)


def maybe_gc(repo: Path) -> None:
    """Pack loose objects once there are many, estimated as git itself does (one fan-out directory
    times 256), so a store with thousands of captures stays fast without a gc on every commit."""
    try:
        loose = len(os.listdir(repo / ".git" / "objects" / "17"))
    except OSError:
        return
    if loose * 256 > 6700:
        run(repo, "gc", "--auto", "--quiet", check=False)


def head(repo: Path) -> str | None:
    """The commit HEAD points at, read from the files under .git (no process); None before the
    first commit."""
    gitdir = repo / ".git"
    try:
        ref = (gitdir / "HEAD").read_text().strip()
    except OSError:
        return None
    if not ref.startswith("ref: "):
        return ref
    name = ref[5:]
    try:
        return (gitdir / name).read_text().strip()
    except OSError:
        pass
    try:
        for line in (gitdir / "packed-refs").read_text().splitlines():
            if line.endswith(" " + name):
                return line.split(" ", 1)[0]
    except OSError:
        pass
    return None


def is_ancestor(repo: Path, older: str | None, newer: str | None) -> bool:
    """Whether commit `older` is `newer` or one of its ancestors; False when either is missing."""
    if not older or not newer:
        return False
    return run(repo, "merge-base", "--is-ancestor", older, newer, check=False).returncode == 0
