"""The snapshot's scope tables: a scope several files name (a hand edit can split one) is one scope,
spelt as its first file (in path order) spells it, its centroid the normalised sum of every row it
holds, whichever file holds them."""
from __future__ import annotations

import numpy as np

from git_whetstone.format.entry import Entry
from git_whetstone.index.rows import file_rows
from git_whetstone.index.snapshot import Snapshot

DIM = 8


def _entry(number: int, path: str, scope: str, body: str) -> Entry:
    return Entry(f"L{number}", "learning", path, number, body, scope, body, 1, "2026-01-01", "2026-01-01", ())


def test_a_scope_named_by_two_files_is_one_scope_with_every_row_in_its_centroid():
    rng = np.random.default_rng(5)
    files = {"learnings/a.md": [("Column layout", "One column per line."), ("Date buckets", "Bucket by month.")],
             "learnings/b.md": [("column  LAYOUT", "Align the AS keywords."), ("column  LAYOUT", "Wrap at 80.")],
             "learnings/c.md": [("Date buckets", "Weeks start on Monday.")]}
    texts = {text for rows in files.values() for pair in rows for text in pair}
    vectors = {text: rng.normal(size=DIM).astype(np.float32) for text in sorted(texts)}
    made, number = {}, 0
    for path, rows in files.items():
        entries = []
        for scope, body in rows:
            number += 1
            entries.append(_entry(number, path, scope, body))
        made[path] = file_rows("stamp", entries, None, vectors, DIM)
    snap = Snapshot(DIM, dict(reversed(list(made.items()))))  # any order given: path order kept
    assert [display for _, _, display in snap.scopes] == ["Column layout", "Date buckets"]
    assert snap.holders[("learning", "column layout")] == ["learnings/a.md", "learnings/b.md"]
    assert snap.scope_of.tolist() == [0, 1, 0, 0, 1]
    assert np.array_equal(snap.phrases[0], vectors["Column layout"])  # the first file's spelling
    for at, bodies in enumerate([["One column per line.", "Align the AS keywords.", "Wrap at 80."],
                                 ["Bucket by month.", "Weeks start on Monday."]]):
        total = np.sum([vectors[b] for b in bodies], axis=0)
        assert np.allclose(snap.centroids[at], total / np.linalg.norm(total), atol=1e-6)
