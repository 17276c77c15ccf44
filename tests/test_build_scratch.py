"""A build from scratch writes index.sqlite into a file of its own (no journal, no syncs) and puts it
in place only once complete (index/cache.py `scratch`, `install`): the same index, byte for byte in
every table, and the same image as a build straight into index.sqlite; nobody ever sees a half
index; a build cut short or killed leaves nothing that is used, and the next clears what a killed
one left; a good index another process put in place meanwhile is kept.

The store is test_build's (6,000 entries in 600 files, a broken file and an id written twice)."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from git_whetstone.index import cache, freshness, image
from git_whetstone.ops.hooks import reindex
from tests.test_build import big  # noqa: F401  (the fixture)


def _dump(path):
    db = sqlite3.connect(path / "index.sqlite")
    try:
        return "\n".join(db.iterdump()), db.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        db.close()


def _build(config, path, monkeypatch, scratch: bool, streamed: bool | None = None, reindexed: bool = True):
    """A build from scratch (`reindex`); `streamed`: whether its image's entry vectors must have
    been written as the batches came (None: as it happens when `scratch`)."""
    monkeypatch.setattr(cache, "SCRATCH_FROM", 100 if scratch else 10**9)
    made, held = [], []
    real, holds = cache.scratch, image.Stream.holds
    monkeypatch.setattr(cache, "scratch", lambda root: made.append(1) or real(root))
    monkeypatch.setattr(image.Stream, "holds", lambda self, snap, offset: held.append(
        holds(self, snap, offset) if streamed is not False else False) or held[-1])
    if reindexed:
        reindex("big", config=config)
    else:  # a process that finds the index and the image gone (reindex would discard half images itself)
        freshness.LIVE.clear()
        for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm", image.NAME):
            (path / name).unlink(missing_ok=True)
        freshness.snapshot(_store(config, path), _embedder(config))
    assert bool(made) == scratch
    assert held == ([] if not scratch else [scratch if streamed is None else streamed])
    freshness.LIVE.clear()
    assert [p.name for p in path.iterdir() if p.name.endswith(".tmp")] == []
    return _dump(path), (path / image.NAME).read_bytes()


def _saved_by_the_next_process(config, path, monkeypatch):
    saved = []
    real = cache.save
    monkeypatch.setattr(cache, "save", lambda db, e, removed, records, kept=None:
                        saved.append(sorted(r[0] for r in records)) or real(db, e, removed, records, kept))
    freshness.snapshot(_store(config, path), _embedder(config))
    freshness.LIVE.clear()
    monkeypatch.setattr(cache, "save", real)
    return saved


def _scratch_files(path):
    return sorted(p.name for p in path.iterdir() if p.name.startswith(cache.SCRATCH))


def test_a_build_from_scratch_is_the_build_straight_into_the_index(big, monkeypatch):  # noqa: F811
    config, path = big
    direct = _build(config, path, monkeypatch, scratch=False)
    direct_next = _saved_by_the_next_process(config, path, monkeypatch)
    scratch = _build(config, path, monkeypatch, scratch=True)
    assert direct[0][0].count("INSERT INTO \"files\"") == 600
    assert scratch[0] == direct[0]  # every table, row by row, and the WAL mode other processes expect
    assert scratch[0][1] == "wal"
    assert scratch[1] == direct[1]  # the image, its entry vectors streamed into it as the batches came
    assert _scratch_files(path) == []
    assert _build(config, path, monkeypatch, scratch=True, streamed=False) == direct  # or written whole
    # and a later process uses it as it does the other: only the broken file is read again (HEAD may have moved)
    assert _saved_by_the_next_process(config, path, monkeypatch) == direct_next
    assert len(direct_next) == 1 and len(direct_next[0]) == 1


def _store(config, path):
    from git_whetstone.ops.workspace import Workspace
    return Workspace.of(config=config).store("big")


def _embedder(config):
    from git_whetstone.semantics.embed import get_embedder
    return get_embedder(config.embedding_backend)


def test_nobody_sees_a_half_index_and_a_build_cut_short_leaves_nothing(big, monkeypatch):  # noqa: F811
    """While the build runs there is no index.sqlite (a process starting then builds too); a build
    that fails part way puts nothing in place and removes its file."""
    config, path = big
    monkeypatch.setattr(cache, "SCRATCH_FROM", 100)
    real, seen = cache.save, []

    def save(db, *args, **kwargs):
        seen.append(((path / "index.sqlite").exists(), _scratch_files(path)))
        if len(seen) == 3:
            raise KeyboardInterrupt  # cut short after two batches were saved into the file
        return real(db, *args, **kwargs)

    monkeypatch.setattr(cache, "save", save)
    with pytest.raises(KeyboardInterrupt):
        reindex("big", config=config)
    assert seen == [(False, [f"{cache.SCRATCH}{os.getpid()}"])] * 3
    assert not (path / "index.sqlite").exists() and _scratch_files(path) == []
    monkeypatch.setattr(cache, "save", real)
    after = _build(config, path, monkeypatch, scratch=True)
    assert after == _build(config, path, monkeypatch, scratch=False)


def test_a_killed_build_s_file_is_never_used_and_the_next_build_clears_it(big, monkeypatch):  # noqa: F811
    config, path = big
    reference = _build(config, path, monkeypatch, scratch=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    # a killed build's file: a valid index holding rows nothing holds (it must never be taken)
    for pid, age in ((dead, 2 * cache.SCRATCH_STALE), (str(os.getpid()), 0)):  # this pid's: a dead namesake's
        planted = path / f"{cache.SCRATCH}{pid}"
        db = sqlite3.connect(planted)
        db.executescript(cache.DDL)
        db.execute(f"PRAGMA user_version={cache.SCHEMA}")
        db.execute("INSERT INTO vectors VALUES('planted', 'x', x'00')")
        db.commit()
        db.close()
        os.utime(planted, (time.time() - age, time.time() - age))
    young = path / f"{cache.SCRATCH}{dead}9"  # dead too, but written to lately: maybe another pid namespace's
    young.write_bytes(b"half")
    half_image = path / f"{image.NAME}.{dead}.tmp"  # the image it was streaming
    half_image.write_bytes(b"half")
    os.utime(half_image, (time.time() - 2 * cache.SCRATCH_STALE,) * 2)
    assert _build(config, path, monkeypatch, scratch=True, reindexed=False) == reference
    assert _scratch_files(path) == [young.name] and not half_image.exists()  # the old ones cleared


def test_a_good_index_another_process_put_in_place_meanwhile_is_kept(big, monkeypatch):  # noqa: F811
    """Two builds at once end with one good index: the one that finishes second keeps the first's
    (whatever that process saved into it since is not lost). An empty index.sqlite (a process that
    opened it to wait) is replaced."""
    config, path = big
    reference = _build(config, path, monkeypatch, scratch=True)
    real = cache.install

    def install(db, scratch, root, other):
        if other:
            db2 = sqlite3.connect(root / "index.sqlite")
            db2.execute("PRAGMA journal_mode=WAL")
            db2.executescript(cache.DDL)
            db2.execute("INSERT INTO vectors VALUES('other', 'x', x'00')")
            db2.execute("INSERT INTO files VALUES('learnings/x.md', '1:1:1', NULL, 'b', 0, 0, x'', '[]', x'', x'')")
            db2.commit()
            db2.close()
        else:
            sqlite3.connect(root / "index.sqlite").close()  # an empty file
        return real(db, scratch, root)

    for other in (True, False):
        freshness.forget(_store(config, path))
        monkeypatch.setattr(cache, "install", lambda db, s, root, o=other: install(db, s, root, o))
        monkeypatch.setattr(cache, "SCRATCH_FROM", 100)
        freshness.snapshot(_store(config, path), _embedder(config))
        freshness.LIVE.clear()
        assert _scratch_files(path) == []
        db = sqlite3.connect(path / "index.sqlite")
        marks = db.execute("SELECT hash FROM vectors WHERE backend='other'").fetchall()
        db.close()
        if other:
            assert marks == [("x",)]  # the other process's index, as it left it
        else:
            assert _dump(path) == reference[0]


def test_a_stream_writes_a_batch_of_more_arrays_than_one_write_takes(tmp_path):
    """A batch whose files are more than one pwritev takes (IOV_MAX, 1,024 on Linux: a backend
    whose vectors depend on their batch hands the build all its files at once) is still streamed,
    every vector in its place."""
    from git_whetstone.index.snapshot import Snapshot
    rng = np.random.default_rng(3)
    snap = Snapshot(dim=4)
    first = [rng.standard_normal((n % 3, 4)).astype(np.float32) for n in range(2_500)]  # (empty ones too)
    stream = image.Stream(tmp_path, 4)
    stream.add(snap, first)
    rows = sum(len(v) for v in first)
    assert stream.rows == rows and stream.path.exists()
    stream.close()
    data = np.fromfile(stream.path, np.float32, offset=image.HEADER_ALIGN).reshape(-1, 4)
    assert np.array_equal(data, np.concatenate(first))
