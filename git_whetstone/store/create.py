"""Making a store's repository: the first commit with `.gitignore` and next_ids.json.

Safe against other processes creating the same store at the same moment: creation holds a lock
beside the store and builds the repository in a private directory that is renamed into place, so
no process ever removes a store another one made. Hooks are not this layer's business: `ops.attach`
creates a store through here and then installs them.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..base.errors import RUNTIME, WhetstoneError
from ..base.files import remove_tree, write_atomic
from ..format.counters import ids_text
from ..format.layout import GITIGNORE
from ..git import runner
from ..git.locks import flock
from .store import Store


def create_repository(store: Store) -> bool:
    """Make `store`'s repository with its first commit; False when it already was a store."""
    if store.exists:
        return False
    if store.orphaned():
        store.require()  # says what is wrong
    root = store.path.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WhetstoneError(f"cannot create the store root {root}: {exc.strerror or exc}",
                             exit_code=RUNTIME) from None
    guard = root / f".{store.skill}.create-lock"
    with flock(guard, store.config.lock_timeout, store.skill):
        try:
            return _create_under_lock(store, root)
        finally:
            # Safe to remove while held: every creator re-checks `exists` once it has the lock.
            guard.unlink(missing_ok=True)


def _create_under_lock(store: Store, root: Path) -> bool:
    """Build the repository in a private directory and rename it into place."""
    if store.exists:
        return False
    if store.path.exists() and (not store.path.is_dir() or any(store.path.iterdir())):
        raise WhetstoneError(f"{store.path} exists and is not a whetstone store; move it away first")
    # Whoever made a `.creating-<pid>` directory held this lock while it existed, so any left
    # now belongs to a creator that was killed: clear them all.
    for leftover in root.glob(f".{store.skill}.creating-*"):
        remove_tree(leftover)
    work = root / f".{store.skill}.creating-{os.getpid()}"
    work.mkdir()
    try:
        runner.run(work, "init", "-q", "--initial-branch=main")
        (work / "learnings").mkdir()
        (work / "issues").mkdir()
        write_atomic(work / ".gitignore", GITIGNORE)
        write_atomic(work / "next_ids.json", ids_text({"learning": 1, "issue": 1}))
        runner.commit(work, f"attach: create the store for {store.skill}", [".gitignore", "next_ids.json"])
        if store.path.exists():
            store.path.rmdir()  # the empty directory someone made for it
        try:
            os.rename(work, store.path)
        except OSError:
            if not store.exists:
                raise
            remove_tree(work)  # another creator got there first (it did not wait for our lock)
            return False
    except BaseException:
        remove_tree(work)  # only ever our own private directory
        raise
    return True
