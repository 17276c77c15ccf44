"""One inotify instance per process, shared by every store's watch (watch.py): each watch sees
exactly its own changes, whoever drains the instance; closing one leaves the others working; an
overflow makes every watch rescan, a lost folder only its own; a forked child never drains the
parent's events; and a server holding many stores uses one instance, not one per store. Real
inotify, real files; the last test compares a long-lived process watching several stores with a
fresh process."""
from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from git_whetstone.index import freshness, watch
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.recall import recall

FOLDERS = ("learnings", "issues")


def _store(root: Path) -> Path:
    for folder in FOLDERS:
        (root / folder).mkdir(parents=True, exist_ok=True)
    return root


def _start(root: Path) -> watch.Watch:
    feed = watch.Watch.start(_store(root), FOLDERS)
    if feed is None:
        pytest.skip("inotify is not available here (not Linux, or out of instances)")
    return feed


def _instances() -> int:
    """inotify instances this process holds open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            pass
    return count


@pytest.fixture(autouse=True)
def _linux() -> None:
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs Linux")


def test_stores_watched_at_once_each_see_exactly_their_own_changes(tmp_path: Path) -> None:
    a, b, c = (_start(tmp_path / name) for name in "abc")
    assert a.changes() == b.changes() == c.changes() == set()
    (tmp_path / "a" / "learnings" / "one.md").write_text("x")
    (tmp_path / "b" / "issues" / "two.md").write_text("y")
    assert b.changes() == {"issues/two.md"}  # b drains the instance: a's event is kept for a
    assert c.changes() == set()
    (tmp_path / "a" / "issues" / "three.md").write_text("z")
    assert c.changes() == set() and b.changes() == set()
    assert a.changes() == {"learnings/one.md", "issues/three.md"}
    assert a.changes() == b.changes() == c.changes() == set()
    os.replace(tmp_path / "b" / "issues" / "two.md", tmp_path / "b" / "issues" / "four.md")
    assert a.changes() == c.changes() == set()
    assert b.changes() == {"issues/two.md", "issues/four.md"}


def test_closing_a_watch_keeps_the_others_and_a_new_watch_sees_only_what_follows(tmp_path: Path) -> None:
    a, b = _start(tmp_path / "a"), _start(tmp_path / "b")
    (tmp_path / "a" / "learnings" / "before.md").write_text("x")
    (tmp_path / "b" / "learnings" / "b1.md").write_text("x")
    a.close()  # its queued event is not drained: it must not reach anyone
    assert a.closed and a.changes() is None
    assert b.changes() == {"learnings/b1.md"}
    again = _start(tmp_path / "a")
    assert again.changes() == set()
    (tmp_path / "a" / "learnings" / "after.md").write_text("x")
    assert b.changes() == set()
    assert again.changes() == {"learnings/after.md"}

    # two watches on the same folders (one store, two backends) share the kernel's descriptors
    twin = _start(tmp_path / "a")
    (tmp_path / "a" / "issues" / "both.md").write_text("x")
    assert twin.changes() == {"issues/both.md"} and again.changes() == {"issues/both.md"}
    (tmp_path / "a" / "issues" / "queued.md").write_text("x")
    twin.close()  # its copy of the event goes with it; the descriptors stay for `again`
    late = _start(tmp_path / "a")
    (tmp_path / "a" / "learnings" / "late.md").write_text("x")
    assert again.changes() == {"issues/queued.md", "learnings/late.md"}
    assert late.changes() == {"learnings/late.md"}
    assert b.changes() == set()


def test_a_lost_folder_makes_only_its_watch_rescan(tmp_path: Path) -> None:
    a, b = _start(tmp_path / "a"), _start(tmp_path / "b")
    (tmp_path / "a" / "learnings").rename(tmp_path / "a" / "moved")
    (tmp_path / "b" / "learnings" / "kept.md").write_text("x")
    assert b.changes() == {"learnings/kept.md"}
    assert a.changes() is None and a.changes() is None and a.closed
    (tmp_path / "b" / "issues" / "still.md").write_text("x")
    assert b.changes() == {"issues/still.md"}


def test_an_overflow_of_the_shared_queue_makes_every_watch_rescan_once(tmp_path: Path) -> None:
    a, b, c = (_start(tmp_path / name) for name in "abc")
    most = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if most > 100_000:
        pytest.skip("the kernel's queue is too long to overflow cheaply here")
    first, second = (os.open(tmp_path / "a" / "learnings" / name, os.O_WRONLY | os.O_CREAT) for name in ("1.md", "2.md"))
    try:
        for _ in range(most // 2 + 16):  # alternating files: the kernel merges no two events
            os.write(first, b"x")
            os.write(second, b"x")
    finally:
        os.close(first)
        os.close(second)
    assert b.changes() is None  # b drained the overflow: every store's watch lost track
    assert a.changes() is None and c.changes() is None
    again = [_start(tmp_path / name) for name in "abc"]
    (tmp_path / "c" / "issues" / "new.md").write_text("x")
    assert [feed.changes() for feed in again] == [set(), set(), {"issues/new.md"}]


def test_a_watch_nobody_asks_holds_a_bounded_number_of_names(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "MOST_HELD", 3)
    a, b = _start(tmp_path / "a"), _start(tmp_path / "b")
    for n in range(3):
        (tmp_path / "a" / "learnings" / f"{n}.md").write_text("x")
    assert b.changes() == set()
    assert a.changes() == {f"learnings/{n}.md" for n in range(3)}  # up to the bound: every name
    for n in range(4):
        (tmp_path / "a" / "learnings" / f"{n}.md").write_text("y")
    assert b.changes() == set()
    assert a.changes() is None  # past it: a rescan, not a growing set


def test_an_overflow_in_a_crafted_buffer_reaches_every_watch(tmp_path: Path) -> None:
    a, b = _start(tmp_path / "a"), _start(tmp_path / "b")
    wd = next(iter(a.folders))
    event = watch._HEADER.pack(wd, watch.IN_CREATE, 0, 8) + b"x.md\0\0\0\0"
    with watch._lock:
        watch._dispatch(event + watch._HEADER.pack(-1, watch.IN_Q_OVERFLOW, 0, 0))
    assert a.changes() is None and b.changes() is None


def test_the_instance_closed_under_us_makes_every_watch_rescan_and_the_next_start_opens_one(tmp_path: Path) -> None:
    a, b = _start(tmp_path / "a"), _start(tmp_path / "b")
    os.close(watch._fd)
    assert a.changes() is None and b.changes() is None
    again = _start(tmp_path / "a")
    (tmp_path / "a" / "learnings" / "x.md").write_text("x")
    assert again.changes() == {"learnings/x.md"}
    assert _instances() == 1


def test_a_forked_child_never_drains_the_parents_events(tmp_path: Path) -> None:
    a = _start(tmp_path / "a")
    _store(tmp_path / "b")
    (tmp_path / "a" / "learnings" / "before.md").write_text("x")
    pid = os.fork()
    if pid == 0:  # the child: the parent's watch is not its own; a watch of its own works
        code = 1
        try:
            if a.changes() is None and _instances() == 0:
                a.close()
                mine = watch.Watch.start(tmp_path / "b", FOLDERS)
                (tmp_path / "b" / "issues" / "child.md").write_text("x")
                code = 0 if mine is not None and mine.changes() == {"issues/child.md"} else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    (tmp_path / "a" / "learnings" / "after.md").write_text("x")
    assert a.changes() == {"learnings/before.md", "learnings/after.md"}


def test_two_hundred_stores_use_one_instance_and_each_sees_its_changes(tmp_path: Path) -> None:
    gc.collect()  # earlier tests' watches, held in cycles until a collection
    feeds = [_start(tmp_path / f"s{n}") for n in range(200)]
    assert _instances() == 1
    for n in range(0, 200, 2):
        (tmp_path / f"s{n}" / FOLDERS[n % 4 // 2] / f"{n}.md").write_text("x")
    for n in reversed(range(200)):
        assert feeds[n].changes() == ({f"{FOLDERS[n % 4 // 2]}/{n}.md"} if n % 2 == 0 else set())
    for feed in feeds[::3]:
        feed.close()
    (tmp_path / "s1" / "learnings" / "one.md").write_text("x")
    assert [feed.changes() for feed in feeds[1:3]] == [{"learnings/one.md"}, set()]
    del feeds  # collected, not closed: the descriptors go at the next call
    gc.collect()
    last = _start(tmp_path / "last")
    assert not watch._owners.keys() - set(last.folders)
    kernel = [line for line in Path(f"/proc/self/fdinfo/{watch._fd}").read_text().splitlines()
              if line.startswith("inotify wd:")]
    assert len(kernel) == len(last.folders) == 2  # the others' descriptors were removed, not leaked
    assert _instances() == 1


def test_a_long_lived_process_watching_several_stores_answers_as_a_fresh_one(store_root: Path) -> None:
    skills = ["great-tables", "plotly", "pandas"]
    for n, skill in enumerate(skills):
        capture(skill, "learning", f"Format currency as US dollars {n}", "currency formatting", "x")
        capture(skill, "issue", f"Never band rows in bright green {n}", "row banding", "x")

    def answers() -> list:
        return [(r["learnings"], r["issues"]) for r in
                (recall(skill, intent) for skill in skills for intent in ("currency formatting", "row banding"))]

    for _ in range(3):  # the second round starts the watches; later ones rely on them
        answers()
    assert all(snap.watch is not None for snap in freshness.LIVE.values()) and _instances() == 1
    for n, skill in enumerate(skills):  # an edit by hand in each store, read back in another order
        rule = next((store_root / skill / "learnings").glob("currency-formatting-*.md"))
        rule.write_text(rule.read_text().replace("US dollars", f"euros, store {n}"))
        if n == 1:
            capture(skills[0], "learning", "Bold the header row", "headers", "x")
    for skill in reversed(skills):
        recall(skill, "headers")
    held = answers()
    assert all(f"euros, store {n}" in str(held[2 * n]) for n in range(3))
    freshness.LIVE.clear()  # as a new process would
    assert held == answers()
