"""Whetstone never commits what a person has not committed, and a write it reports is on disk.

Issue 19's first findings: a tool write into a scope file that holds an unfinished hand edit used
to commit that edit under the tool's message; the directory of a renamed file was never synced.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from git_whetstone.base import files
from git_whetstone.base.errors import WhetstoneError
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.recall import recall
from git_whetstone.ops.writing.revise import revise
from tests.helpers import git, tree_state

SKILL = "great-tables"


@pytest.fixture
def store(store_root: Path) -> Path:
    capture(SKILL, "learning", "Band alternate rows in light grey.", "row banding", "x")
    capture(SKILL, "learning", "Right-align numeric columns.", "alignment", "y", confirm="new")
    return store_root / SKILL


def banding(store: Path) -> Path:
    return next(p for p in (store / "learnings").glob("*.md") if "banding" in p.name)


def test_a_write_into_a_file_with_an_unfinished_hand_edit_is_refused_and_changes_nothing(store: Path) -> None:
    path = banding(store)
    path.write_text(path.read_text().replace("light grey", "pale blue"))  # saved, not committed
    before = tree_state(store)
    head = git(store, "rev-parse", "HEAD").stdout
    for call in (lambda: capture(SKILL, "learning", "Band every third row.", "row banding", "z", confirm="new"),
                 lambda: revise(SKILL, "L1", "reinforce"),
                 lambda: revise(SKILL, "L2", "reinforce", scope="row banding")):  # a move into that file
        with pytest.raises(WhetstoneError, match="nobody committed") as refused:
            call()
        assert path.name in refused.value.message and "git stash" in refused.value.message
        assert refused.value.exit_code == 1
    assert tree_state(store) == before and git(store, "rev-parse", "HEAD").stdout == head
    assert "pale blue" in path.read_text()  # the person's edit is still there, still uncommitted
    assert recall(SKILL, "row banding of a long table")["learnings"]  # recall keeps working
    git(store, "commit", "-qam", "Say which colour")
    assert capture(SKILL, "learning", "Band every third row.", "row banding", "z", confirm="new")["status"] == \
        "committed"
    assert git(store, "log", "-1", "--format=%s", "--", f"learnings/{path.name}").stdout.startswith("capture: add L3")


def test_a_hand_edit_in_another_file_is_left_alone(store: Path) -> None:
    other = next(p for p in (store / "learnings").glob("*.md") if "alignment" in p.name)
    other.write_text(other.read_text() + "\n## L9 · Half written\n")
    result = capture(SKILL, "learning", "Band every third row.", "row banding", "z", confirm="new")
    assert result["status"] == "committed"
    assert git(store, "status", "--porcelain", "--", f"learnings/{other.name}").stdout.startswith(" M")
    assert "L9" not in git(store, "show", "HEAD", "--", f"learnings/{other.name}").stdout


def test_an_untracked_scope_file_is_not_swept_into_a_commit(store: Path) -> None:
    path = banding(store)
    git(store, "rm", "-q", "--cached", f"learnings/{path.name}")
    git(store, "commit", "-qm", "untrack it")  # now a file on disk that git does not know
    with pytest.raises(WhetstoneError, match="nobody committed"):
        capture(SKILL, "learning", "Band every third row.", "row banding", "z", confirm="new")


def test_an_atomic_write_syncs_the_directory_after_the_rename(tmp_path: Path, monkeypatch) -> None:
    synced: list[bool] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    files.write_atomic(tmp_path / "x.md", "text\n")
    assert synced == [False, True]  # the file before the rename, its directory after
    assert (tmp_path / "x.md").read_text() == "text\n"


def test_a_damaged_git_index_is_rebuilt_from_head_and_nothing_committed_is_lost(store: Path) -> None:
    """A killed git or a full disk can leave .git/index damaged; every git command then fails. The next
    write moves it aside (kept), rebuilds it from HEAD and goes on; the work tree is untouched."""
    head = git(store, "rev-parse", "HEAD").stdout.strip()
    (store / ".git" / "index").write_bytes(b"DIRC garbage")
    result = capture(SKILL, "learning", "Bold the header row.", "headers", "x", confirm="new")
    assert result["status"] == "committed"
    assert any("repaired it from HEAD" in w for w in result["warnings"]), result["warnings"]
    assert list((store / ".git").glob("index.damaged-*"))  # kept, not deleted
    assert git(store, "rev-parse", "HEAD~1").stdout.strip() == head  # what was committed is all there
    assert git(store, "status", "--porcelain").stdout == ""
    git(store, "fsck", "--strict")


def test_a_stale_index_lock_of_a_killed_git_is_taken_over(store: Path) -> None:
    (store / ".git" / "index.lock").write_bytes(b"")  # left by a git that was killed: no git runs here
    result = capture(SKILL, "learning", "Bold the header row.", "headers", "x", confirm="new")
    assert result["status"] == "committed" and not (store / ".git" / "index.lock").exists()
    assert any("index.lock" in w for w in result["warnings"]), result["warnings"]
