"""The snapshot's scope tables: a scope several files name (a hand edit can split one) is one scope,
spelt as its first file (in path order) spells it, its centroid the normalised sum of every row it
holds, whichever file holds them."""
from __future__ import annotations

import numpy as np

from git_whetstone.format.entry import Entry
from git_whetstone.index.rows import file_rows
from git_whetstone.index.snapshot import Snapshot
from git_whetstone.semantics.lexical import query_terms
from tests.helpers import bm25_scores

DIM = 8


def _entry(number: int, path: str, scope: str, body: str) -> Entry:
    return Entry(f"L{number}", "learning", path, number, body, scope, body, 1, "2026-01-01", "2026-01-01", ())


def _made(files: dict[str, list[tuple[str, str]]], vectors: dict[str, np.ndarray], first: int = 0) -> dict:
    """Each file's rows, its entries numbered on from `first`; a text's vector made when first seen."""
    rng, made, number = np.random.default_rng(len(vectors)), {}, first
    for path, rows in files.items():
        entries = []
        for scope, body in rows:
            number += 1
            entries.append(_entry(number, path, scope, body))
            for text in (scope, body):
                vectors.setdefault(text, rng.normal(size=DIM).astype(np.float32))
        made[path] = file_rows("stamp", entries, None, vectors, DIM)
    return made


FILES = {"learnings/a.md": [("Column layout", "One column per line."), ("Date buckets", "Bucket by month.")],
         "learnings/b.md": [("column  LAYOUT", "Align the AS keywords."), ("column  LAYOUT", "Wrap at 80.")],
         "learnings/c.md": [("Date buckets", "Weeks start on Monday.")]}


def test_a_scope_named_by_two_files_is_one_scope_with_every_row_in_its_centroid():
    vectors: dict[str, np.ndarray] = {}
    made = _made(FILES, vectors)
    snap = Snapshot(DIM, dict(reversed(list(made.items()))))  # any order given: path order kept
    assert [display for _, _, display in snap.scopes] == ["Column layout", "Date buckets"]
    assert snap.holders[("learning", "column layout")] == ["learnings/a.md", "learnings/b.md"]
    assert snap.scope_of.tolist() == [0, 1, 0, 0, 1]
    assert np.array_equal(snap.phrases[0], vectors["Column layout"])  # the first file's spelling
    for at, bodies in enumerate([["One column per line.", "Align the AS keywords.", "Wrap at 80."],
                                 ["Bucket by month.", "Weeks start on Monday."]]):
        total = np.sum([vectors[b] for b in bodies], axis=0)
        assert np.allclose(snap.centroids[at], total / np.linalg.norm(total), atol=1e-6)


def _same_snapshot(got: Snapshot, made: Snapshot) -> None:
    assert list(got.files) == list(made.files) and got.size == made.size and got.scopes == made.scopes
    assert [e.id for e in got.entries] == [e.id for e in made.entries]
    for name in ("recurrence", "last_seen", "id_key", "always", "is_learning", "scope_of", "alive", "starts"):
        assert getattr(got, name).tolist() == getattr(made, name).tolist(), name
    assert np.array_equal(got.vectors, made.vectors) and np.array_equal(got.phrases, made.phrases)
    assert np.allclose(got.centroids, made.centroids, atol=1e-6)
    assert got.warnings == made.warnings and dict(got.by_id) == dict(made.by_id)


def test_a_changed_file_is_the_snapshot_made_anew():
    """A capture's change (rows added to a file's scopes, a row gone, one scope's rows moved) gives
    the snapshot a fresh build of every file would; so does a change that names a new scope, and
    one that removes a file."""
    vectors: dict[str, np.ndarray] = {}
    before = Snapshot(DIM, _made(FILES, vectors))
    more = _made({"learnings/b.md": [("column  LAYOUT", "Align the AS keywords."), ("column  LAYOUT", "Wrap at 80."),
                                     ("column  LAYOUT", "Never wrap a join.")],
                  "learnings/c.md": []}, vectors, first=10)
    more["learnings/c.md"] = _made({"learnings/c.md": [("Date buckets", "Weeks start on Sunday.")]}, vectors, 20)[
        "learnings/c.md"]
    after = before.changed([], more)
    _same_snapshot(after, Snapshot(DIM, {**before.files, **more}))
    assert before.size == 5 and [e.id for e in before.entries][-1] == "L5"  # the old one unchanged
    new_scope = _made({"learnings/a.md": [("Column layout", "One column per line."), ("Joins", "Joins first.")]},
                      vectors, first=30)
    _same_snapshot(after.changed([], new_scope), Snapshot(DIM, {**after.files, **new_scope}))
    gone = after.changed(["learnings/c.md"], {})
    _same_snapshot(gone, Snapshot(DIM, {p: r for p, r in after.files.items() if p != "learnings/c.md"}))


def test_a_changed_file_merges_its_words_into_the_lexicon_as_a_new_one_would_read_them():
    """The lexicon a spliced snapshot carries scores every word of every row as one made from every
    file's words: a word gone with a removed row, a word the change brings, the rows after it moved."""
    vectors: dict[str, np.ndarray] = {}
    before = Snapshot(DIM, _made(FILES, vectors))
    before.lexicon()
    more = _made({"learnings/a.md": [("Column layout", "Negative amounts in parentheses."),
                                     ("Date buckets", "Bucket by month."), ("Date buckets", "Fiscal weeks.")],
                  "learnings/c.md": [("Date buckets", "Weeks start on Sunday, never Monday.")]}, vectors, first=10)
    after = before.changed([], more)
    made = Snapshot(DIM, {**before.files, **more})
    words = "negative amount parenthes column line bucket month fiscal week start sunday monday align wrap"
    assert after._pending is not None and after.lexicon().size == made.lexicon().size == 6  # merged, not made anew
    assert np.allclose(bm25_scores(after.lexicon(), query_terms(words)), bm25_scores(made.lexicon(), query_terms(words)),
                       atol=1e-6)
    assert not bm25_scores(after.lexicon(), query_terms("line")).any()  # the only row that said it is gone
    # two changes before the next recall: both merged, in order, when it asks
    first = after.changed([], _made({"learnings/b.md": [("column  LAYOUT", "Wrap at 80.")]}, vectors, first=40))
    second = first.changed([], _made({"learnings/c.md": [("Date buckets", "Fortnights, not weeks.")]}, vectors, first=50))
    made = Snapshot(DIM, {**first.files, **second.files})
    assert second._pending is not None and second.lexicon().size == made.lexicon().size == 5
    assert np.allclose(bm25_scores(second.lexicon(), query_terms(words)), bm25_scores(made.lexicon(), query_terms(words)),
                       atol=1e-6)
