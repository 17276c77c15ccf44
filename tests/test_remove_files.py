"""A snapshot drops many files at once (`Snapshot.remove_files`: a compact's refresh removes 8,400 at
100,000 entries) settling their scopes' centroids once, after all are out: the same snapshot, array
for array, as dropping them one by one (one file a call, settled after each: the reference)."""
from __future__ import annotations

from git_whetstone.format import blocks
from git_whetstone.index import freshness
from git_whetstone.ops.workspace import Workspace
from tests.helpers import bench_store, git
from tests.test_compact_written import snapshot_state


def test_removing_many_files_at_once_gives_the_snapshot_removing_them_one_by_one_gives(store_root, monkeypatch):
    _, config, built = bench_store(monkeypatch, "big", 1_000, 29)
    files = sorted((built.path / "learnings").glob("*.md"))
    for n, (source, target) in enumerate(zip(files[:80:2], files[1:80:2])):  # a scope held by two files
        block = blocks.parse(source.read_text(), source.name).blocks[-1]
        fields = [("recurrence", "1"), ("first_seen", "2026-06-01"), ("last_seen", "2026-06-30"), ("scope", block.scope)]
        copy = blocks.render(f"L9{n:04d}", block.title + " again", fields, block.body + " Again.")
        target.write_text(blocks.append(target.read_text(), copy))
    git(built.path, "commit", "-qam", "hand: scopes shared by two files")
    snaps = []
    for _ in range(2):
        freshness.LIVE.clear()  # two snapshots loaded as two processes load them
        ws = Workspace.of(config)
        snaps.append(ws.snapshot(ws.store("big")))
    batch, one_by_one = snaps
    assert batch is not one_by_one
    paths = sorted(batch.files)
    # files of scopes other files share too (their centroids are summed again from those left), and
    # every file of some scopes (those scopes then match nothing); a path it does not hold is skipped
    shared = [key for key, holders in batch.holders.items() if len(holders) > 1]
    assert shared, "the store has no scope held by two files"
    gone = set(paths[::3]) | {sorted(batch.holders[key])[0] for key in shared[::2]}
    gone |= {path for key in shared[1::4] for path in batch.holders[key]}
    gone = sorted(gone) + ["learnings/no-such-file.md"]
    batch.remove_files(gone)
    for path in gone:
        one_by_one.remove_files([path])
    state = snapshot_state(batch)
    assert state["dead"] > 300 and len(state["files"]) > 20
    assert state == snapshot_state(one_by_one)
    freshness.LIVE.clear()
