"""The long-lived snapshot's freshness check (inotify in watch.py, a scan elsewhere), the lazily
parsed entries and the kept connection: a process that asks again sees every change, made in any
way, and answers as a fresh process would."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from git_whetstone.index import freshness, watch
from git_whetstone.ops.writing.capture import capture
from git_whetstone.semantics.embed import get_embedder
from git_whetstone.ops.recall import recall
from git_whetstone.store.store import Store
from git_whetstone.base import config as config_mod
from tests.helpers import git

SKILL = "great-tables"
INTENTS = ["currency formatting for a revenue table", "colour palette of a chart", "row banding"]


def _answers() -> list:
    return [(r["learnings"], r["issues"], r["omitted"], r["fallback"]) for r in
            (recall(SKILL, intent) for intent in INTENTS)]


def _fresh() -> list:
    freshness.LIVE.clear()  # as a new process would
    return _answers()


def _store(store_root: Path) -> Path:
    capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
    capture(SKILL, "learning", "Heat-map msrp with a warm palette", "colour palette", "x")
    capture(SKILL, "issue", "Never band rows in bright green", "row banding", "x")
    return store_root / SKILL


@pytest.mark.parametrize("watched", [True, False], ids=["inotify", "scan"])
def test_a_long_lived_process_sees_every_kind_of_change(store_root: Path, monkeypatch: pytest.MonkeyPatch,
                                                        watched: bool) -> None:
    if not watched:
        monkeypatch.setattr(watch.Watch, "start", classmethod(lambda cls, root, folders: None))
    store = _store(store_root)
    for _ in range(3):  # the second call starts the watch; later ones rely on it
        _answers()
    currency = next((store / "learnings").glob("currency-formatting-*.md"))

    # an editor saving in place, same size, no commit
    text = currency.read_text()
    with open(currency, "r+") as handle:
        handle.write(text.replace("US dollars", "EU euros!!"))
    assert "EU euros!!" in recall(SKILL, INTENTS[0])["learnings"][0]["rule"]
    assert _answers() == _fresh()

    # a file deleted, then restored by git
    currency.unlink()
    assert not any(e["scope"] == "currency formatting" for e in recall(SKILL, INTENTS[0])["learnings"])
    git(store, "checkout", "--", currency.relative_to(store).as_posix())
    assert _answers() == _fresh()

    # a new scope file written by hand, then a reset that removes it
    palette = next((store / "learnings").glob("colour-palette-*.md"))
    extra = palette.with_name("typography-0000.md")
    extra.write_text(palette.read_text().replace("L2", "L9").replace("colour palette", "typography")
                     .replace("warm palette", "serif typeface"))
    assert any(e["id"] == "L9" for e in recall(SKILL, "typography: serif typeface")["learnings"])
    git(store, "add", "-A")
    git(store, "commit", "-qm", "hand: typography")
    git(store, "reset", "-q", "--hard", "HEAD~1")
    assert not extra.exists()
    assert not any(e["id"] == "L9" for e in recall(SKILL, "typography: serif typeface")["learnings"])
    assert _answers() == _fresh()

    # a folder removed and made again (the watch loses track and starts over)
    git(store, "rm", "-rq", "issues")
    git(store, "commit", "-qm", "drop issues")
    assert recall(SKILL, INTENTS[2])["issues"] == []
    git(store, "revert", "--no-edit", "HEAD")
    assert [i["id"] for i in recall(SKILL, INTENTS[2])["issues"]] == ["I1"]
    assert _answers() == _fresh()


def test_the_watch_reports_names_and_says_when_it_lost_track(tmp_path: Path) -> None:
    (tmp_path / "learnings").mkdir()
    (tmp_path / "issues").mkdir()
    feed = watch.Watch.start(tmp_path, ("learnings", "issues"))
    if feed is None:
        pytest.skip("inotify is not available here")
    assert feed.changes() == set()
    (tmp_path / "learnings" / "a.md").write_text("x")
    (tmp_path / "issues" / "b.md").write_text("y")
    os.replace(tmp_path / "issues" / "b.md", tmp_path / "issues" / "c.md")
    assert feed.changes() == {"learnings/a.md", "issues/b.md", "issues/c.md"}
    assert feed.changes() == set()
    (tmp_path / "learnings").rename(tmp_path / "moved")
    assert feed.changes() is None and feed.changes() is None


def test_a_reindex_elsewhere_is_picked_up_by_a_process_holding_the_old_index(store_root: Path) -> None:
    _store(store_root)
    for _ in range(3):
        _answers()
    snap = next(iter(freshness.LIVE.values()))
    assert snap.db is not None  # a long-lived process keeps its connection
    feed = snap.watch
    assert feed is not None and not feed.closed
    for suffix in ("", "-wal", "-shm"):  # another process throws the index away and rebuilds it
        (store_root / SKILL / f"index.sqlite{suffix}").unlink(missing_ok=True)
    capture(SKILL, "learning", "Bold the header row", "headers", "x")
    assert any(e["scope"] == "headers" for e in recall(SKILL, "headers of the table")["learnings"])
    held = next(iter(freshness.LIVE.values()))
    assert held.watch is feed and not feed.closed  # a new connection, the same watch: no scan of every file
    assert _answers() == _fresh()


def test_forgetting_a_store_lets_go_of_its_descriptors(store_root: Path) -> None:
    _store(store_root)
    for _ in range(3):
        _answers()
    snap = next(iter(freshness.LIVE.values()))
    feed, db = snap.watch, snap.db
    assert feed is not None and not feed.closed and db is not None
    freshness.forget(Store.open(config_mod.load(), SKILL))  # a reindex in this long-lived process
    assert feed.closed and snap.watch is None and snap.db is None
    with pytest.raises(Exception):
        db.execute("SELECT 1")  # closed, not left to the collector
    assert _answers() == _fresh()


def test_entries_load_lazily_and_read_back_exactly(store_root: Path) -> None:
    _store(store_root)
    before = {e.id: e for e in freshness.snapshot(Store.open(config_mod.load(), SKILL),
                                                get_embedder("hashing")).entries if e}
    freshness.LIVE.clear()
    snap = freshness.snapshot(Store.open(config_mod.load(), SKILL), get_embedder("hashing"))
    assert all(rows._entries is None for rows in snap.files.values())  # nothing parsed by loading
    assert {e.id: e for e in snap.entries if e} == before
    assert snap.count == 3 and sorted(snap.by_id) == ["I1", "L1", "L2"]


def _stamps_from_scratch(store: Path) -> dict[str, str]:
    """What `freshness.scan` must give: HEAD, and each scope file's size, mtime and inode, stat'ed
    by its full path (a file a link points nowhere from is not there)."""
    out = {"@HEAD": git(store, "rev-parse", "HEAD").stdout.strip()}
    for folder in ("learnings", "issues"):
        for path in (store / folder).iterdir():
            if path.suffix == ".md" and not path.name.startswith(".") and path.exists():
                st = path.stat()
                out[f"{folder}/{path.name}"] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    return out


def test_a_cold_scan_sees_every_kind_of_change(store_root: Path) -> None:
    store = _store(store_root)
    handle = Store.open(config_mod.load(), SKILL)
    seen = freshness.scan(handle)
    assert seen == _stamps_from_scratch(store) and len(seen) == 4
    currency = next((store / "learnings").glob("currency-formatting-*.md"))
    palette = next((store / "learnings").glob("colour-palette-*.md"))
    banding = next((store / "issues").glob("row-banding-*.md"))
    rel = lambda path: path.relative_to(store).as_posix()  # noqa: E731

    def changed(*expected: Path) -> None:
        nonlocal seen
        now = freshness.scan(handle)
        assert now == _stamps_from_scratch(store)
        assert {p for p in seen.keys() | now.keys() if seen.get(p) != now.get(p)} == {rel(p) for p in expected}
        seen = now

    # saved in place, same size, within the same second of mtime
    st = currency.stat()
    currency.write_text(currency.read_text().replace("US dollars", "EU euros!!"))
    os.utime(currency, ns=(st.st_atime_ns, st.st_mtime_ns // 10**9 * 10**9 + (st.st_mtime_ns + 1) % 10**9))
    changed(currency)
    os.utime(palette)  # touched
    changed(palette)
    banding.unlink()  # deleted
    changed(banding)
    git(store, "checkout", "--", rel(banding))  # added back
    changed(banding)
    # replaced by a rename: same size, same mtime, another inode
    st = palette.stat()
    twin = palette.with_name(".twin.md")
    twin.write_bytes(palette.read_bytes())
    os.utime(twin, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(twin, palette)
    changed(palette)
    # what scan leaves out: a hidden file, another suffix, a link to nothing, a folder that is not there
    (store / "learnings" / ".draft.md").write_text("x")
    (store / "learnings" / "notes.txt").write_text("x")
    (store / "learnings" / "gone.md").symlink_to(store / "nowhere.md")
    changed()
    listed = os.listdir  # a file removed between the folder's listing and its stat: the others still count
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(freshness.os, "listdir", lambda fd: ["vanished.md", *listed(fd)])
        changed()
    cold = _fresh()  # a new process, from its index and the stamps, answers as one that reads every file
    freshness.forget(handle)
    assert _fresh() == cold and "EU euros!!" in cold[0][0][0]["rule"]
