"""Recall's 8-bit scan (index/scan.py) changes nothing recall returns.

A big store's first pass runs on compact vectors (int8 rows, bfloat16 scopes) with numkong, and only
the rows that could matter are scored again in float32. These tests run recall both ways, the
8-bit scan (`vector_scan = "int8"`, at every size) and every row in float32 (`"numpy"`, recall as
it was before the scan existed), and require the same answer: on the labeled set with the default
backend, and on a synthetic store of the benchmark's kind with intents that match, intents that
match nothing (the fallback), one-word intents and many-sided ones.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import random

import numpy as np
import pytest

from git_whetstone.base.config import Config, load
from git_whetstone.index import freshness, scan
from git_whetstone.index.columns import Columns
from git_whetstone.ops import recall as recall_op
from git_whetstone.ops.doctor import doctor
from tests.eval import run as eval_run
from tests.helpers import bench_store

pytest.importorskip("numkong")


def _answer(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "run_id"}


def _both_ways(config: Config, skill: str, intents: list[str], scopes: list[str] | None = None) -> list[dict]:
    """Recall of every intent with the 8-bit scan and with float32 everywhere; asserts they agree."""
    answers = []
    for intent in intents:
        freshness.LIVE.clear()  # each way from the same index.sqlite, nothing shared in memory
        compact = recall_op.recall(skill, intent, scopes=scopes, config=dataclasses.replace(config, vector_scan="int8"))
        exact = recall_op.recall(skill, intent, scopes=scopes, config=dataclasses.replace(config, vector_scan="numpy"))
        assert _answer(compact) == _answer(exact), intent
        answers.append(exact)
    return answers


def test_the_eval_set_recalls_the_same_with_the_8bit_scan(tmp_path, monkeypatch):
    monkeypatch.setenv("WHETSTONE_TODAY", eval_run.DAY)
    config = dataclasses.replace(load(tmp_path / "eval"), consult_global=False,
                                 embedding_backend=Config().embedding_backend)
    assert scan.kernel(10, "int8") == "int8" and scan.kernel(10, "numpy") == "numpy"
    intents = []
    for skill in eval_run.load_set()["skills"]:
        eval_run.load_skill(config, skill)
        queries = [q["intent"] for q in skill["queries"]]
        answers = _both_ways(config, skill["skill"], queries)
        intents += queries
        assert any(a["learnings"] for a in answers)
    assert len(intents) >= 150


def test_a_synthetic_big_store_recalls_the_same_with_the_8bit_scan(store_root, monkeypatch):
    from git_whetstone.index import columns
    monkeypatch.setattr(columns, "HEADS_FROM", 1_000)  # the rows' heads sift first (at 20,000 rows by default)
    bench, config, built = bench_store(monkeypatch, "big", 6_000, 11)
    # the scan skips the rows of unlikely scopes whenever it can (by default only when that
    # leaves few rows, which at this size is rare): the answers must not change
    monkeypatch.setattr(recall_op, "PRUNE_SHARE", 1.0)
    rng = random.Random(5)
    intents = bench.intents(rng, 40) + [
        "tide charts", "Plan the choir rehearsal schedule for the harbor master",  # nothing close
        "revenue", "legend", "Bake sourdough bread with a long cold proof",
        "Format currency; align columns; add a totals row; pick a palette; write the caption; cite sources",
    ]
    answers = _both_ways(config, "big", intents)
    assert any(a["fallback"] for a in answers) and sum(not a["fallback"] for a in answers) >= 40
    assert any(a["omitted"]["learnings"] > 20 for a in answers)  # wide matches counted exactly too
    # stored rules word for word, scope and all: rows whose text meets a clause exactly
    stored = [f"{body} ({scope})" for _, body, scope in rng.sample(built.learnings + built.issues, 12)]
    _both_ways(config, "big", stored)
    _pruning_holds(bench, config, "big", intents + stored)

    # and the scan pruned: far fewer rows were scored exactly than the store holds
    freshness.LIVE.clear()
    cfg = dataclasses.replace(config, vector_scan="int8")
    recall_op.recall("big", intents[0], config=cfg)
    snap = next(s for k, s in freshness.LIVE.items() if k[0] == str(built.path))
    layer = recall_op.Layer("skill", snap, recall_op.Workspace.of(cfg).embedder.embed(recall_op.clauses(intents[0])),
                            bench.BENCH_TODAY, cfg)
    assert 0 < len(layer.rows) < snap.size / 3

    # rules for every task, a named scope and the map of the others: the same both ways too
    from git_whetstone.ops.capture import capture
    for rule, scope in (("Write every number with a thin space between thousands", "number style"),
                        ("Never use exclamation marks", "tone"), ("Cite the data source under each table", "sources")):
        capture("big", "issue", rule, scope, always=True, confirm="new", config=config)
    named = [snap.scopes[7][2]]
    answers = _both_ways(config, "big", intents[:12] + ["Plan the choir rehearsal schedule"], scopes=named)
    for a in answers:
        assert sum(e["always"] for e in a["issues"]) == 3 and len(a["other_scopes"]) == recall_op.OTHER_SCOPES
        assert any(e["scope"] == named[0] for e in a["learnings"] + a["issues"])


def _pruning_holds(bench, config: Config, skill: str, intents: list[str]) -> None:
    """The rows the scan skips (`recall._worth_scanning`) are, by the exhaustive float32 scores,
    under the floor `_rank` sets on every clause (so neither near nor any clause's best); recall
    skipped rows, and left rows to their bounds (`Layer.loose`), for a good share of the intents."""
    freshness.LIVE.clear()
    cfg = dataclasses.replace(config, vector_scan="numpy")
    ws = recall_op.Workspace.of(cfg)
    snap = ws.snapshot(ws.store(skill))
    band = cfg.threshold("band")
    scoped = snap.alive & ~snap.always
    cutoff = np.where(snap.is_learning, cfg.threshold("learning_cutoff"), cfg.threshold("issue_cutoff"))
    cutoff[~scoped] = np.inf
    pruned = bounded = 0
    for intent in intents:
        queries = ws.embedder.embed(recall_op.clauses(intent))
        exact = recall_op.Layer("skill", snap, queries, bench.BENCH_TODAY, cfg)  # every row in float32
        # and rows surely hits, but surely no clause's best, were left to their bounds at first;
        # the rows scored exactly (a named scope's among them) have their exact relevance
        named = [snap.scopes[int(snap.scope_of[int(np.argmax(exact.relevance))])][2]]
        compact = recall_op.Layer("skill", snap, queries, bench.BENCH_TODAY,
                                  dataclasses.replace(cfg, vector_scan="int8"), named)
        bounded += bool(compact.loose.any())
        assert not compact.loose[compact.rows].any() and compact.named.any()
        assert np.allclose(compact.relevance[compact.rows], exact.relevance[compact.rows], rtol=0, atol=1e-6)
        best = exact.best()
        floor = np.maximum(best - band, best.max() - 3 * band)  # before _rank raises weak clauses' floors
        runs = recall_op._runs(snap.scope_of, np.isfinite(cutoff))
        bound, floor, _ = recall_op._pilot(snap, snap.scan(queries, recall_op.SCOPE_SHARE), cutoff, band, runs)
        rows = recall_op._worth_scanning(snap, bound, floor, runs)
        if floor is not None:  # the rows of the scopes worth it, found by runs: those a pass over every row finds
            keep = (bound >= floor[:, None]).any(axis=0)
            every = np.flatnonzero(keep[snap.scope_of] & np.isfinite(cutoff))
            assert (rows is None and len(every) >= recall_op.PRUNE_SHARE * snap.size) or np.array_equal(rows, every)
        if rows is None:
            continue
        pruned += 1
        skipped = np.ones(snap.size, bool)
        skipped[rows] = False
        skipped &= scoped
        assert skipped.any() and (exact.per_clause[skipped] < floor).all(), intent
    assert pruned >= len(intents) // 2 and bounded >= len(intents) // 2, (pruned, bounded)


@pytest.mark.parametrize("gather", [300, 128])
def test_a_subset_of_rows_scores_what_the_pass_over_every_row_gives(monkeypatch, gather):
    """`Pass.scores(rows)` gathers the rows asked for a block at a time and scores a buffer's worth
    of them at once (`GATHER_BLOCK`, which a block's rows can fill more than once): the very numbers
    and bounds the pass over every row gives those rows, for any subset (none, one, scattered,
    dense across blocks, every row), and `blocks` yields them all, once, in order."""
    from git_whetstone.index import columns
    rng = np.random.default_rng(9)
    cols = _random_columns(rng)
    dim, rows, scopes = cols.dim, cols.size, len(cols.scopes)
    monkeypatch.setattr(columns, "SCAN_BLOCK", 300)  # eight full blocks and a tail of 100
    monkeypatch.setattr(columns, "GATHER_BLOCK", gather)
    subsets = [np.zeros(0, np.intp), np.array([0]), np.array([rows - 1]), np.arange(299, 302),
               np.sort(rng.choice(rows, 40, replace=False)), np.sort(rng.choice(rows, 700, replace=False)),
               np.sort(rng.choice(rows, 2_200, replace=False)), np.arange(rows)]
    for clauses in (1, 6):
        queries = rng.standard_normal((clauses, dim)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        cols.vectors[:clauses] = queries  # rows that say what the clauses say: the bound is tight for them
        cols._coded = 0
        scanning = cols.scan(queries, 0.7)
        every, slack = (a.copy() for a in scanning.scores())
        for subset in subsets:
            some, their = scanning.scores(subset)
            assert some.shape == (clauses, len(subset)), len(subset)
            assert np.array_equal(some, every[:, subset]) and np.array_equal(their, slack[subset]), len(subset)
            pieces = [(start, stop, block.copy()) for start, stop, block in scanning.blocks(subset)]
            assert [start for start, _, _ in pieces] == [0, *(stop for _, stop, _ in pieces)][:len(pieces)]
            assert all(stop - start <= gather for start, stop, _ in pieces)
            if len(subset):
                assert pieces[-1][1] == len(subset)
                assert np.array_equal(np.concatenate([block for _, _, block in pieces], axis=1), some)
        # and the scope bound is above what any row of the scope scores, exactly, on every clause
        scope_level = np.maximum(cols.centroids @ queries.T, cols.phrases @ queries.T)
        exact = (0.7 * scope_level[cols.scope_of] + 0.3 * (cols.vectors @ queries.T)).T
        top = np.full((clauses, scopes), -np.inf, np.float32)
        for j in range(clauses):
            np.maximum.at(top[j], cols.scope_of, exact[j])
        assert (scanning.scope_bound() >= top).all()


def test_the_approximate_scores_stay_within_their_bound():
    rng = np.random.default_rng(3)
    for dim, rows, scopes, clauses in ((256, 3000, 300, 1), (384, 2000, 50, 7), (64, 500, 499, 16)):
        cols = Columns(dim, rows, scopes)
        vectors = rng.standard_normal((rows, dim)).astype(np.float32) * rng.random((rows, 1)).astype(np.float32) ** 3
        vectors[::97] = 0  # empty texts embed to zero
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        cols.size = rows
        cols.vectors[:] = vectors
        cols.scopes = [("learning", str(i), str(i)) for i in range(scopes)]
        for matrix in (cols.phrases, cols.centroids):
            m = rng.standard_normal((scopes, dim)).astype(np.float32)
            matrix[:] = m / np.linalg.norm(m, axis=1, keepdims=True)
        cols.scopes_changed(np.arange(scopes))
        assert cols.compact_ready()  # a few thousand rows: copied at once
        cols.scope_of[:] = rng.integers(0, scopes, rows)
        queries = rng.standard_normal((clauses, dim)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        approx, slack = cols.approximate(queries, 0.7)
        scope_level = np.maximum(cols.centroids @ queries.T, cols.phrases @ queries.T)
        exact = (0.7 * scope_level[cols.scope_of] + 0.3 * (cols.vectors @ queries.T)).T
        error = np.abs(approx - exact).max(axis=0)
        assert (error <= slack).all(), (dim, (error - slack).max())
        assert slack.max() < 0.02, slack.max()  # tight enough to prune: a fiftieth of a cosine


def test_a_rows_head_bounds_its_product_and_holds_most_of_it(store_root, monkeypatch):
    """A big snapshot learns the rows' principal directions once and keeps each row's head (its
    first HEAD_DIMS coordinates in that basis, in 8 bits) and the length of its tail: the head
    product lies within its bound of the exact product for every row and clause, rows added since
    the basis was learned included; and on sentence vectors the tails are short, so the bound prunes."""
    from git_whetstone.index import columns
    from tests.helpers import assert_heads_hold

    rng = np.random.default_rng(5)
    monkeypatch.setattr(columns, "HEADS_FROM", 1_000)
    cols = Columns(256, 1_200, 4)
    vectors = rng.standard_normal((1_200, 256)).astype(np.float32) * rng.random((1_200, 1)).astype(np.float32) ** 3
    vectors[::97] = 0  # empty texts embed to zero
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    cols.size = 600
    cols.vectors[:] = vectors[:600]
    assert cols.compact_ready() and cols.head_basis is None  # too few rows to learn from
    cols.size = 1_200
    cols.vectors[600:] = vectors[600:]
    assert cols.compact_ready() and cols.head_basis.shape == (256, scan.HEAD_DIMS)
    basis = cols.head_basis
    assert np.allclose(basis.T @ basis, np.eye(scan.HEAD_DIMS), atol=1e-5)
    cols.grow_rows(1_300)
    cols.size = 1_300
    cols.vectors[1_200:] = vectors[:100] * -1  # rows added later: coded in the basis learned before
    assert cols.compact_ready() and cols.head_basis is basis
    for clauses in (1, 7):
        queries = rng.standard_normal((clauses, 256)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        assert_heads_hold(cols, queries)
        scanning = cols.scan(queries, 0.7)  # rows of no scope (bare columns): no scope part
        approx, slack = (x.copy() for x in scanning.scores())
        lift = np.quantile(approx + slack, 0.9, axis=1).astype(np.float32)[:, None]
        want = np.flatnonzero(((approx - lift).max(axis=0) + slack) >= 0)
        assert len(want) and np.isin(want, scanning.heads_kept(None, lift)).all()

    bench, config, _ = bench_store(monkeypatch, "heads", 3_000, 17)
    ws = recall_op.Workspace.of(dataclasses.replace(config, vector_scan="int8"))
    snap = ws.snapshot(ws.store("heads"))
    assert snap.compact_ready(now=True)
    for intent in bench.intents(random.Random(2), 6) + ["revenue"]:
        assert_heads_hold(snap, ws.embedder.embed(recall_op.clauses(intent)))
    live = snap._tails[:snap.size][snap.alive]
    assert np.median(live) < 0.75, np.median(live)  # against 0.87 for directions at random (sqrt(1 − 64/256))
    compacted = snap.compacted()  # the same rows' directions: the basis is kept, the heads made in it
    assert np.array_equal(compacted.head_basis, snap.head_basis) and compacted.compact_ready(now=True)
    assert_heads_hold(compacted, ws.embedder.embed(recall_op.clauses("revenue by region, in a bar chart")))


def test_the_heads_keep_every_row_the_scan_could_keep(store_root, monkeypatch):
    """`Pass.heads_kept` reads only the rows' heads, and keeps every row whose full 8-bit scores
    could pass `_near_enough`'s test (some clause's score plus the row's bound reaching that
    clause's lift), over every row and over subsets, for floors from loose to tight; and it
    leaves out most of the rest."""
    from git_whetstone.index import columns

    monkeypatch.setattr(columns, "HEADS_FROM", 1_000)
    monkeypatch.setattr(columns, "SCAN_BLOCK", 700)  # blocks, gathered ones and a tail
    bench, config, _ = bench_store(monkeypatch, "kept", 6_000, 19)
    ws = recall_op.Workspace.of(dataclasses.replace(config, vector_scan="int8"))
    snap = ws.snapshot(ws.store("kept"))
    rng = np.random.default_rng(19)
    scanned = kept = 0
    for intent in bench.intents(random.Random(4), 12) + ["revenue", "Bake sourdough bread with a long cold proof"]:
        scanning = snap.scan(ws.embedder.embed(recall_op.clauses(intent)), recall_op.SCOPE_SHARE)
        approx, slack = (x.copy() for x in scanning.scores())
        reach = approx + slack
        for quantile in (0.5, 0.9, 0.99, 0.999):
            lift = np.quantile(reach, quantile, axis=1).astype(np.float32)[:, None]
            lift += rng.uniform(-0.01, 0.01, lift.shape).astype(np.float32)
            for rows in (None, np.flatnonzero(rng.random(snap.size) < 0.3), np.arange(snap.size // 3, snap.size)):
                at = np.arange(snap.size) if rows is None else rows
                want = np.flatnonzero(((approx[:, at] - lift).max(axis=0) + slack[at]) >= 0)
                got = scanning.heads_kept(rows, lift)
                assert np.array_equal(got, np.sort(got)) and np.isin(want, got).all(), (intent, quantile)
                scanned += len(at)
                kept += len(got)
    assert kept < scanned / 2, (kept, scanned)


def test_the_heads_keep_a_row_whose_tail_meets_the_clauses_tail(monkeypatch):
    """The head bound is tight for a row whose tail points where the clause's tail points (the
    tail product is then the whole of tail(v)·tail(q)): such a row is still kept from its head
    alone at the highest lift its 8-bit scores could pass, however they round (its exact score,
    the scope's part as the pass has it, plus twice the score's bound less the scope's error,
    counted once), and left out a little above it."""
    from git_whetstone.index import columns

    monkeypatch.setattr(columns, "HEADS_FROM", 1_000)
    rng = np.random.default_rng(23)
    dim, n, extra, scopes = 256, 2_000, 300, 20
    spectrum = 0.99 ** np.arange(dim)  # strong directions first, and a long tail past the head
    cols = _random_columns(rng, dim, n, scopes, spectrum, room=extra)
    assert cols.compact_ready() and cols.head_basis is not None
    queries = (rng.standard_normal((3, dim)) * spectrum).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    basis = cols.head_basis.astype(np.float64)
    clause = rng.integers(0, 3, extra)
    tail = queries[clause] - (queries[clause] @ basis) @ basis.T  # each clause's tail, as the basis leaves it
    tail /= np.linalg.norm(tail, axis=1, keepdims=True)
    head = rng.standard_normal((extra, dim)) @ basis @ basis.T
    head /= np.linalg.norm(head, axis=1, keepdims=True)
    share = rng.uniform(0.2, 0.95, (extra, 1))
    rows = share * tail + np.sqrt(1 - share ** 2) * head
    cols.size = n + extra
    cols.vectors[n:] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    cols.scope_of[n:] = rng.integers(0, scopes, extra)
    assert cols.compact_ready()
    dropped = 0
    for j in range(3):  # a clause at a time: the longest clause tail is then this one's
        scanning = cols.scan(queries[j:j + 1], 0.7)
        exact = cols.vectors.astype(np.float64) @ queries[j].astype(np.float64)
        for r in (n + np.flatnonzero(clause == j)).tolist():
            slack = float(scanning.slack(np.array([r]))[0])
            worst = (0.7 * float(scanning.scope[0, cols.scope_of[r]]) + 0.3 * exact[r]
                     + 2 * slack - 0.7 * scanning.scope_error)
            kept = scanning.heads_kept(np.array([r]), np.array([[worst - 1e-6]], np.float32))
            assert list(kept) == [0], (j, r)
            dropped += not len(scanning.heads_kept(np.array([r]), np.array([[worst + 0.02]], np.float32)))
    assert dropped > extra * 0.9, dropped  # tight: a fiftieth over, the head leaves nearly all out


def test_the_bfloat16_scope_scores_stay_within_their_bound():
    """The scopes' compact copies are bfloat16 (`scan.halve`: float32's top half, rounded to
    nearest even, as numkong rounds it), the clauses bfloat16 twice over (rounded, then what the
    rounding missed). A pass's scope scores stay within `scope_error` of the float32 products,
    that bound is the scopes' largest rounding error (`scope_residual`, measured, not assumed)
    plus the clauses' own, and it stays tight enough to prune. Scopes that say what a clause
    says, and zero ones (a scope with no text), are among them."""
    rng = np.random.default_rng(17)
    vectors = rng.standard_normal((500, 256)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    half, residual = scan.halve(vectors)
    assert half.dtype == np.uint16
    assert np.array_equal(half, np.asarray(scan.numkong().astype(vectors, "bfloat16")))  # numkong's rounding
    assert np.isclose(residual, np.linalg.norm(vectors - scan.widen(half), axis=1).max(), rtol=1e-6, atol=0)
    assert np.array_equal(scan.widen(scan.halve(scan.widen(half))[0]), scan.widen(half))  # exact once rounded
    for dim, scopes, clauses in ((256, 3_000, 5), (384, 700, 1), (64, 200, 12)):
        cols = _random_columns(rng, dim, 400, scopes)
        queries = rng.standard_normal((clauses, dim)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        cols.phrases[1:clauses] = queries[1:]  # scope phrases that are the clauses: the largest products
        cols.centroids[-1] = 0
        assert cols.compact_ready(now=True)
        # and the worst case the bound allows for: a clause along the largest rounding error of a
        # scope (both its vectors that one), which the bound must cover in full
        worst = int(np.argmax(np.linalg.norm(cols.phrases - scan.widen(cols.phrases16), axis=1)))
        cols.centroids[worst] = cols.phrases[worst]
        cols.scopes_changed(np.array([worst]))
        along = cols.phrases[worst] - scan.widen(cols.phrases16[worst])
        queries[0] = along / np.linalg.norm(along)
        scanning = cols.scan(queries, 0.7)
        assert cols.phrases16.dtype == np.uint16 and cols.scope_residual > 0
        exact = np.maximum(queries @ cols.centroids.T, queries @ cols.phrases.T)
        error = np.abs(scanning.scope - exact).max()
        assert 0.9 * cols.scope_residual <= error <= scanning.scope_error < 3e-3, (dim, error, scanning.scope_error)
        assert scanning.scope_error < 1.01 * cols.scope_residual + scan.EPS + 1e-5  # the clauses' part: small
        assert (np.abs(np.diag(scanning.scope[1:, 1:clauses]) - 1) <= scanning.scope_error).all()
        # the clauses' two parts: within a hundredth of a cosine's thousandth of the rounded scopes
        # against the clauses themselves
        rounded = np.maximum(queries @ scan.widen(cols.centroids16).T, queries @ scan.widen(cols.phrases16).T)
        assert np.abs(scanning.scope - rounded).max() <= 1e-5, np.abs(scanning.scope - rounded).max()


def test_doctor_says_which_scan_runs(store_root):
    recall_op.recall("tables", "anything", config=load())  # no store: nothing to scan, no error
    from git_whetstone.ops.attach import attach
    attach("tables")
    found = {c["name"]: c for c in doctor("tables")["checks"]}
    assert "numkong" in found["scan"]["detail"] and "int8" in found["scan"]["detail"]
    plain = {c["name"]: c for c in doctor("tables", config=dataclasses.replace(load(), vector_scan="numpy"))["checks"]}
    assert plain["scan"]["detail"] == "recall scans vectors with numpy float32 (vector_scan = numpy)"


def test_the_scan_in_blocks_gives_what_one_pass_over_every_row_gives(monkeypatch):
    """`approximate` multiplies a block of rows at a time (`SCAN_BLOCK`) and adds each row's scope
    score in the same block; the scores and bounds must be the very numbers the whole-matrix
    computation gives (one numkong call over every row, then each clause's scope scores added),
    tail block included."""
    from git_whetstone.index import columns
    rng = np.random.default_rng(5)
    cols = _random_columns(rng)
    dim, rows, scopes = cols.dim, cols.size, len(cols.scopes)
    monkeypatch.setattr(columns, "SCAN_BLOCK", 1_000)  # two full blocks and a tail of 500
    for clauses in (1, 5, 16):
        queries = rng.standard_normal((clauses, dim)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        approx, slack = (a.copy() for a in cols.approximate(queries, 0.7))
        # the whole-matrix computation, as the scan did it in one pass
        q = scan.Queries(queries)
        both = np.asarray(scan.numkong().dots_packed(cols.codes, q.packed)).T.astype(np.float32)
        whole, second = both[:clauses], both[clauses:]
        whole *= (q.first * (1 - 0.7))[:, None]
        second *= (q.second * (1 - 0.7))[:, None]
        whole += second
        whole *= cols.scales
        scope = np.maximum(q.dots_half(cols.centroids16), q.dots_half(cols.phrases16)) * np.float32(0.7)
        for j in range(clauses):
            whole[j] += scope[j][cols.scope_of]
        assert approx.shape == whole.shape and np.array_equal(approx, whole)
        assert np.array_equal(cols.approximate(queries, 0.7)[1], slack)


def test_the_shortcuts_of_recall_give_what_the_full_computation_gives(tmp_path, monkeypatch):
    """Two shortcuts recall takes whatever the scan: conflicts judged only for the pairs
    `may_oppose` lets through, and weights computed only for the rows ranked or shown. On the
    labeled set, recall answers the same with every close pair judged; and a weight computed for
    a few rows is the very number computed for every row at once."""
    from git_whetstone.store.weight import weights
    monkeypatch.setenv("WHETSTONE_TODAY", eval_run.DAY)
    config = dataclasses.replace(load(tmp_path / "eval"), consult_global=False,
                                 embedding_backend=Config().embedding_backend)
    conflicts = 0
    for skill in eval_run.load_set()["skills"]:
        eval_run.load_skill(config, skill)
        for q in skill["queries"]:
            with monkeypatch.context() as m:
                m.setattr(recall_op, "may_oppose", lambda readings: np.ones((len(readings),) * 2, bool))
                every_pair = recall_op.recall(skill["skill"], q["intent"], config=config)
            shortcut = recall_op.recall(skill["skill"], q["intent"], config=config)
            assert _answer(shortcut) == _answer(every_pair), q["intent"]
            conflicts += len(shortcut["conflicts"])
    assert conflicts >= 3  # the set's rules are consistent: the few listed are likely opposites
    rng = np.random.default_rng(2)
    day = dt.date.fromisoformat(eval_run.DAY)
    recurrence = rng.integers(1, 40, 100_000)
    last_seen = (day.toordinal() - rng.integers(0, 2_000, 100_000)) * (rng.random(100_000) > 0.05)  # 0: never seen
    every = weights(recurrence, last_seen, day, config)
    for size in (*range(1, 20), 200, 5_000):
        rows = rng.choice(100_000, size, replace=False)
        assert np.array_equal(weights(recurrence[rows], last_seen[rows], day, config), every[rows])


def test_captures_duplicate_check_finds_the_same_nearest_entries_with_the_8bit_scan(store_root, monkeypatch):
    """`Context.nearest` (capture's duplicate check) on a big store scans the 8-bit rows and scores
    exactly only those that may reach the judge's floor and be among the closest it asks for: the
    entries, their order, similarities and verdicts are those of scoring every row in float32."""
    from git_whetstone.ops.context import NEAREST, Context
    from git_whetstone.ops.workspace import Workspace
    bench, config, built = bench_store(monkeypatch, "big", 6_000, 11)
    rng = random.Random(8)
    stored = [body for _, body, _ in rng.sample(built.learnings + built.issues, 25)]
    bodies = stored + [s.rstrip(".") + " in every report." for s in stored[:10]] + [
        "Never use more than two decimal places in a revenue table", "Bake sourdough with a long cold proof",
        "Use a colorblind-safe palette for every chart", "Left-align text columns and right-align numbers"]
    scopes = [rng.choice(built.scopes).phrase for _ in bodies]

    read: list[int] = []  # how many rows each call of the 8-bit path scored exactly

    def nearest(scan_path: str, limit: int, exclude: list | None = None) -> list:
        freshness.LIVE.clear()
        ws = Workspace.of(dataclasses.replace(config, vector_scan=scan_path))
        ctx = Context.open(ws, ws.store("big"))
        assert scan.kernel(ctx.snap.size, scan_path) == scan_path
        vectors_of = ctx.snap.vectors_of
        alive = int(ctx.snap.alive.sum())  # (every row once: the store's mean likeness, the judge's baseline)
        ctx.snap.vectors_of = lambda rows: (len(rows) == alive or read.append(len(rows)), vectors_of(rows))[1]
        return [[(e.id, j.similarity, j.relation, j.reason, j.opposed)
                 for e, j in ctx.nearest(b, s, limit=limit, exclude=x and ctx.entry(x))]
                for b, s, x in zip(bodies, scopes, exclude or [None] * len(bodies))]

    def same(limit: int, exclude: list | None = None) -> list:
        """The float32 path's answers, once the 8-bit path's are checked against them (`read` then
        holds how many rows the 8-bit path scored exactly, call by call)."""
        read.clear()
        compact, exact = nearest("int8", limit, exclude), nearest("numpy", limit, exclude)
        # the same entries in the same order with the same verdicts; a similarity may differ in the
        # last bit of a float32 (a product over fewer rows adds in another order), far below the
        # thousandth capture shows
        assert [[f[:1] + f[2:] for f in found] for found in compact] == \
            [[f[:1] + f[2:] for f in found] for found in exact]
        assert all(abs(a[1] - b[1]) < 1e-6 for x, y in zip(compact, exact) for a, b in zip(x, y))
        assert all(exact[:25])  # a stored rule finds itself
        return exact

    # every entry above the judge's floor: the scan's bound decides about the farthest of them
    everything = same(10_000)
    assert sum(len(found) for found in everything) > 1_000 and max(read) > 500
    # the closest 25, as a capture asks for them (only the rows that may be among them are scored
    # exactly: `_may_lead`); then with the 4th closest left out, as an edit leaves out the entry
    # it changes (the 26th closest comes in)
    for exclude in (None, [found[3][0] if len(found) > 3 else None for found in everything]):
        closest = same(NEAREST, exclude)
        assert all(len(found) == NEAREST for found in closest[:25])
        assert max(read) < 10 * NEAREST, read  # of the hundreds that reach the floor


@pytest.mark.parametrize("crowded, bound", [(True, 1e-5), (True, 3e-4), (False, 1e-5)])
def test_the_duplicate_check_scores_every_row_that_may_be_among_the_closest(crowded, bound):
    """`_may_lead` with each row's cosine bounded to ±`bound` and read as badly as that allows
    (the k-th closest as low, the others as high), its scope's likeness from the bfloat16 phrases.
    Crowded, hundreds of rows lie within the bounds of the k-th place (with the smaller bound,
    within the scope score's error; with the larger, with no scope likeness, within the rows'
    own bounds: every error term counts); spread out, the rows are further apart than all the
    bounds together (the k-th row itself is at stake). Every row of the first k, by exact likeness
    among the rows at the floor, is kept; most others are not."""
    from git_whetstone.ops.context import NEAREST, SCOPE_PULL, _may_lead
    rng = np.random.default_rng(12)
    n, k, floor = 3_000 if crowded else 120, NEAREST + 1, 0.25  # (k as `nearest` asks)
    cols = _random_columns(rng, dim=64, rows=n, scopes=60 if crowded else 400)
    cols.compact_ready(now=True)
    for trial in range(30):
        scope_vec = rng.standard_normal(64).astype(np.float32)
        scope_vec /= np.linalg.norm(scope_vec)
        if bound > 1e-4:  # no scope likeness (an empty scope's vector): the rows' own bounds decide
            scope_vec[:] = 0
        pull = cols.phrases @ scope_vec  # what `nearest` computes exactly for the rows it keeps
        cosine = rng.uniform(0.2, 0.6 if crowded else 4.0, n).astype(np.float32)  # (spread: past 1, apart)
        slack = np.full(n, bound, np.float32)
        likeness = cosine + np.float32(SCOPE_PULL) * pull[cols.scope_of]
        near = np.flatnonzero(cosine >= floor)
        first = near[np.argsort(-likeness[near], kind="stable")][:k]
        # the worst the scan's scores can be: the k-th row read as low as its bound lets it, every
        # other row as high (the others of the first k set the cut as high as they can)
        side = np.ones(n, np.float32)
        side[first[-1]] = -1
        approx = (cosine + side * slack * np.float32(0.999)).astype(np.float32)
        rows = np.flatnonzero(approx + slack >= floor)
        kept = _may_lead(cols, rows, approx[rows], slack[rows], scope_vec, floor, k)
        assert set(first.tolist()) <= set(kept.tolist()), trial
        assert len(kept) < (len(rows) / 4 if crowded else k + 3), (trial, len(kept), len(rows))


def _random_columns(rng, dim: int = 64, rows: int = 2_500, scopes: int = 40, spectrum=1.0, room: int = 0) -> Columns:
    """Columns of random unit rows (their components scaled by `spectrum` before they are made
    unit), phrases and centroids, each row in a random scope; room for `room` rows more."""
    cols = Columns(dim, rows + room, scopes)
    vectors = (rng.standard_normal((rows, dim)) * spectrum).astype(np.float32)
    cols.size = rows
    cols.vectors[:] = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cols.scopes = [("learning", str(i), str(i)) for i in range(scopes)]
    for matrix in (cols.phrases, cols.centroids):
        m = rng.standard_normal((scopes, dim)).astype(np.float32)
        matrix[:] = m / np.linalg.norm(m, axis=1, keepdims=True)
    cols.scopes_changed(np.arange(scopes))
    cols.scope_of[:] = rng.integers(0, scopes, rows)
    return cols


def _chosen_whole(snap, scanning, rows, cutoff, band):
    """The candidates as recall found them before it sifted each block of scores: from every
    row's scores kept whole (clauses × rows), or None when no row is surely a hit."""
    approx, slack = (a.copy() for a in scanning.scores(rows))
    cut = cutoff if rows is None else cutoff[rows]
    top = approx.max(axis=0)
    sure = top - slack >= cut
    if not sure.any():
        return None
    low = np.array([np.max(approx[j] - slack, where=sure, initial=-np.inf) for j in range(len(approx))], np.float32)
    floor = np.maximum(low - band, low.max() - 3 * band)
    reach = approx + slack[None, :]
    near = (reach >= floor[:, None]).any(axis=0)
    best = (reach >= low[:, None]).any(axis=0)
    found = np.flatnonzero((top + slack >= cut) & near)
    return (found if rows is None else rows[found]), ~sure[found] | best[found], approx[:, found], slack[found]


@pytest.mark.parametrize("heads", [True, False])
def test_the_sifted_scan_finds_what_every_row_kept_whole_finds(store_root, monkeypatch, heads):
    """`recall._chosen` keeps from each block of scores only the rows that can reach the pilot's
    floor (`_near_enough`, which first leaves out the rows whose heads say they cannot) and decides
    on those: the very rows, exact flags, scores and bounds that deciding on every row's scores at
    once gives, pruned or not, over many blocks."""
    from git_whetstone.index import columns
    monkeypatch.setattr(columns, "HEADS_FROM", 1_000 if heads else 10**9)
    bench, config, _ = bench_store(monkeypatch, "sift", 6_000, 13)
    monkeypatch.setattr(columns, "SCAN_BLOCK", 700)  # eight full blocks and a tail
    cfg = dataclasses.replace(config, vector_scan="int8")
    ws = recall_op.Workspace.of(cfg)
    snap = ws.snapshot(ws.store("sift"))
    band = cfg.threshold("band")
    cutoff = np.where(snap.is_learning, cfg.threshold("learning_cutoff"), cfg.threshold("issue_cutoff"))
    cutoff[~(snap.alive & ~snap.always)] = np.inf
    rng = np.random.default_rng(13)
    sifted = subsets = 0
    for intent in bench.intents(random.Random(3), 30) + ["revenue", "Bake sourdough bread with a long cold proof"]:
        queries = ws.embedder.embed(recall_op.clauses(intent))
        scanning = snap.scan(queries, recall_op.SCOPE_SHARE)
        # and each row a cutoff of its own, close to its score: which cutoff is whose matters then
        top = scanning.scores()[0].max(axis=0)
        own = np.where(np.isfinite(cutoff), top + rng.uniform(-0.05, 0.05, snap.size), np.inf)
        for cut in (cutoff, own):
            runs = recall_op._runs(snap.scope_of, np.isfinite(cut))
            bound, floor, low = recall_op._pilot(snap, scanning, cut, band, runs)
            under = None if floor is None else np.minimum(floor, low)
            with monkeypatch.context() as m:  # the rows of the scopes that can reach the floor, however many
                m.setattr(recall_op, "PRUNE_SHARE", 1.0)
                pruned = recall_op._worth_scanning(snap, bound, floor, runs)
            for rows in (None, recall_op._worth_scanning(snap, bound, floor, runs), pruned,
                         np.flatnonzero(np.isfinite(cut))):
                found = recall_op._chosen(snap, scanning, rows, cut, band, under)
                whole = _chosen_whole(snap, scanning, rows, cut, band)
                if whole is None:
                    continue
                sifted += under is not None
                subsets += under is not None and rows is pruned and rows is not None and len(rows) < snap.size // 2
                for got, want in zip((found.rows, found.exact, found.approx, found.slack), whole):
                    assert got.shape == want.shape and np.array_equal(got, want), intent
    assert sifted >= 120 and subsets >= 12, (sifted, subsets)  # and on sparse subsets of the rows too
    assert (snap.head_basis is not None) == heads


def test_the_likeliest_scopes_are_those_with_the_largest_bounds():
    """`recall._largest` (the pilot's scopes) looks for each clause's k largest bounds among the
    values over a sample's k-th largest only: the values it picks are the k largest, ties and all."""
    rng = np.random.default_rng(7)
    for clauses, scopes, k in ((1, 5, 4), (5, 64, 4), (5, 65, 4), (3, 1_000, 1), (6, 10_000, 4), (4, 3_000, 16)):
        for values in (rng.standard_normal((clauses, scopes)).astype(np.float32),
                       rng.integers(0, 6, (clauses, scopes)).astype(np.float32),  # many ties
                       np.sort(rng.random((clauses, scopes)), axis=1)):          # the largest at the end
            got = recall_op._largest(values, k)
            assert got.shape == (clauses, k)
            for j in range(clauses):
                assert len(set(got[j].tolist())) == k
                assert np.array_equal(np.sort(values[j][got[j]]), np.sort(values[j])[-k:])


def test_the_rows_of_some_scopes_found_by_runs_are_those_every_row_gives():
    """`recall._rows_of` finds the rows of the scopes asked for from runs of neighbours
    (`_runs`) instead of looking at every row's scope: the very rows, ascending, that the look at
    every row gives, whatever the layout (a scope's rows in one run, split by dead or always-on
    rows, appended far from the others by a capture, scopes interleaved row by row)."""
    rng = np.random.default_rng(4)
    for case in range(60):
        scopes = int(rng.integers(1, 300))
        sizes = rng.integers(1, 25, scopes)
        scope_of = np.repeat(rng.permutation(scopes), sizes)  # a file's rows, file after file
        if case % 3 == 1:  # rows appended later to scopes that have some
            scope_of = np.concatenate([scope_of, rng.integers(0, scopes, int(rng.integers(1, 200)))])
        if case % 5 == 2:  # every row in a scope of its own choosing
            scope_of = rng.integers(0, scopes, len(scope_of))
        can_hit = rng.random(len(scope_of)) < (1.0 if case % 4 == 0 else 0.85)
        if case % 7 == 3:
            can_hit[:] = False
        runs = recall_op._runs(scope_of, can_hit)
        assert runs.shape[0] == 3 and runs[1].sum() == can_hit.sum()
        for share in (0.0, 0.05, 0.5, 1.0):
            keep = rng.random(scopes) < share
            want = np.flatnonzero(keep[scope_of] & can_hit)
            got = recall_op._rows_of(runs, keep)
            assert got.dtype == want.dtype and np.array_equal(got, want), case
            for limit in (len(want), len(want) + 1, float(rng.integers(0, len(scope_of) + 2))):
                got = recall_op._rows_of(runs, keep, limit)
                assert (got is None) == (len(want) >= limit) and (got is None or np.array_equal(got, want)), case
