"""recall's `Layer` in a big store works on its candidates (the few thousand rows the 8-bit scan
leaves), not on every row: its hit masks are worked out and searched among them, and the vectors
it reads are kept as read and found again through an array over the candidates. Each of these is
held here to the plain computation over every row (`vector_scan = numpy`, numpy over the masks,
the snapshot's own vectors), on a synthetic store big enough for the scan to leave rows loose.
"""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from git_whetstone.index import freshness
from git_whetstone.ops import recall as recall_op
from tests.helpers import bench_store

pytest.importorskip("numkong")


def _layers(config, snap, intent: str, day, named: list[str]):
    """The 8-bit scan's layer and the plain one, for the same intent."""
    queries = recall_op.Workspace.of(config).embedder.embed(recall_op.clauses(intent))
    return [recall_op.Layer("skill", snap, queries, day, dataclasses.replace(config, vector_scan=way), named)
            for way in ("int8", "numpy")]


def test_a_layer_on_its_candidates_gives_what_every_row_gives(store_root, monkeypatch):
    bench, config, built = bench_store(monkeypatch, "layer", 6_000, 17)
    rng = random.Random(3)
    intents = bench.intents(rng, 12) + ["tide charts", "revenue",
                                        "Format currency; align columns; add a totals row; pick a palette"]
    recall_op.recall("layer", intents[0], config=config)
    snap = next(s for k, s in freshness.LIVE.items() if k[0] == str(built.path))
    pick = np.random.default_rng(5)
    loose_seen = 0
    for n, intent in enumerate(intents):
        named = [snap.scopes[n * 7][2]] if n % 3 == 0 else []
        layer, plain = _layers(config, snap, intent, bench.BENCH_TODAY, named)
        assert layer.candidates is not None and plain.candidates is None
        assert 0 < len(layer.candidates) < snap.size / 2
        loose_seen += len(layer.loose_rows)
        # the always-on and named rows, and the hits: what numpy finds over every row (the scan's
        # hits are those that can also be near: the plain layer's are more until `keep_near`)
        assert np.array_equal(layer.always_rows, np.flatnonzero(layer.always))
        assert np.array_equal(layer.named_rows, np.flatnonzero(layer.named)) and layer.named.any() == bool(named)
        among = np.zeros(snap.size, bool)
        among[layer.candidates] = True
        for mask, theirs in ((layer.learn_hit, plain.learn_hit), (layer.issue_hit, plain.issue_hit)):
            assert np.array_equal(layer.where(mask), np.flatnonzero(mask))
            assert np.array_equal(mask, theirs & among), intent
        for cutoff in np.quantile(layer.relevance[layer.candidates], [0, 0.1, 0.5, 0.9, 1]):  # at any cutoff
            for kind in (layer.learning, layer.issue):
                assert np.array_equal(layer._marked(kind, cutoff), kind & (layer.relevance >= cutoff))
        # near the best matches: the same hits left, however the loose rows were decided
        floor = recall_op._floor(np.maximum(layer.best(), plain.best()), config.threshold("band"))
        for each in (layer, plain):
            each.keep_near(floor)
        assert np.array_equal(layer.learn_hit, plain.learn_hit) and np.array_equal(layer.issue_hit, plain.issue_hit)
        assert not ((layer.learn_hit | layer.issue_hit) & layer.named).any()  # those come on their own
        assert np.array_equal(layer.where(layer.learn_hit), np.flatnonzero(layer.learn_hit))
        # the vectors read, asked for between settlings (each read kept apart until asked for),
        # in any order, with rows read and not read, candidates and not: the snapshot's own
        rest = layer.loose_rows[layer.loose[layer.loose_rows]]
        for part in np.array_split(pick.permutation(rest), 3):
            layer.settle(part)
            rows = np.concatenate([pick.choice(layer.rows, min(60, len(layer.rows))),
                                   pick.choice(layer.candidates, 20), pick.choice(snap.size, 20)])
            assert np.array_equal(layer.vectors_of(rows), snap.vectors[rows])
            assert np.array_equal(layer.vectors_of(rows[:1]), snap.vectors[rows[:1]])
            # a pool's vectors, of one layer (as the layer gives them) and of two side by side
            hits = layer.where(layer.learn_hit)
            for pool in (recall_op.Pool([layer], [hits]), recall_op.Pool([layer, plain], [hits, hits[::-1]])):
                at = pick.permutation(len(pool))[:200]
                assert np.array_equal(pool.vectors_at(at), snap.vectors[pool.row[at]])
        # every candidate scored exactly now: the plain layer's relevance, to float32 rounding
        assert not layer.loose.any()
        assert np.allclose(layer.relevance[layer.candidates], plain.relevance[layer.candidates], atol=1e-5)
    assert loose_seen > 1_000  # the scan left rows loose, to be settled in pieces


def _assert_mmr_order(picked: list[int], vectors: np.ndarray, value: np.ndarray, order: np.ndarray, k: int) -> None:
    """`picked` is an MMR order, up to float ties: replayed with every candidate scored at every step
    (the reference, written out here), each pick scores the step's best within float32 rounding."""
    pool = order[:recall_op.MMR_POOL]
    value = value[pool]
    spread = float(value.max() - value.min()) if len(value) else 0.0
    if spread > 0:
        value = (value - value.min()) / spread
    sims = vectors[pool] @ vectors[pool].T
    at = {int(row): i for i, row in enumerate(pool)}
    assert len(picked) == min(k, len(pool)) and len(set(picked)) == len(picked)
    closest, available = np.zeros(len(pool)), np.ones(len(pool), bool)
    for step, row in enumerate(picked):
        score = (recall_op.MMR_LAMBDA * value - (1 - recall_op.MMR_LAMBDA) * closest
                 - 2.0 * (closest >= recall_op.NEAR_DUPLICATE))
        best = at[row]
        assert available[best]
        assert score[best] >= np.where(available, score, -np.inf).max() - 1e-5
        available[best] = False
        closest = sims[best] if step == 0 else np.maximum(closest, sims[best])


def test_mmr_picks_what_scoring_every_candidate_at_every_step_picks():
    rng = np.random.default_rng(11)
    for trial in range(200):
        n = int(rng.integers(1, 260))
        vectors = rng.standard_normal((n, 16)).astype(np.float32)
        vectors[rng.random(n) < 0.2] = vectors[0]  # near-duplicates, and ties in value
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        value = np.round(rng.random(n), 1 if trial % 2 else 6)
        order = rng.permutation(n)
        k = int(rng.integers(1, n + 3))
        _assert_mmr_order(recall_op._mmr(lambda at: vectors[at], value, order, k), vectors, value, order, k)
