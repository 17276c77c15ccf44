"""recall: weights, matching, MMR, caps, fallback and the derived index behind it."""
from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from git_whetstone.base import config as config_mod
from git_whetstone.format import blocks, edits
from git_whetstone.index import freshness
from git_whetstone.ops import recall as recall_op
from git_whetstone.ops.writing.capture import capture
from git_whetstone.semantics.embed import HashingEmbedder
from git_whetstone.base.errors import WhetstoneError
from git_whetstone.ops.recall import recall
from git_whetstone.store.weight import weight
from git_whetstone.store.store import Store
from git_whetstone.ops.writing.attach import attach
from git_whetstone.format.layout import scope_filename
from tests.helpers import git

SKILL = "great-tables"


def cfg(**overrides):
    return config_mod.Config(**{**config_mod.load().__dict__, **overrides})


def write_blocks(store: Path, folder: str, scope: str, entries: list[tuple[str, str]], no_verify: bool = False,
                 **fields) -> Path:
    """Hand-write a scope file (as a person would) and commit it with git (`no_verify`: past the
    pre-commit hook, as `git commit --no-verify` does)."""
    prefix = "L" if folder == "learnings" else "I"
    text = ""
    for bid, body in entries:
        meta = []
        if prefix == "L":
            meta = [("recurrence", str(fields.get("recurrence", 1))), ("first_seen", fields.get("first_seen", "2026-11-01")),
                    ("last_seen", fields.get("last_seen", "2026-11-01"))]
        meta.append(("scope", scope))
        text = edits.append(text, edits.render(bid, blocks.derive_title(body), meta, body))
    path = store / folder / scope_filename(scope)
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    git(store, "add", "-A")
    git(store, "commit", "-qm", f"hand: {scope}", *(["--no-verify"] if no_verify else []))
    return path


def ids(items: list[dict]) -> list[str]:
    return [i["id"] for i in items]


def test_unknown_skill_gives_empty_lists(store_root: Path) -> None:
    result = recall("never-attached", "styling a table")
    assert result["learnings"] == [] and result["issues"] == [] and result["fallback"] is False
    assert result["omitted"] == {"learnings": 0, "issues": 0} and result["run_id"].startswith("r-")
    assert not (store_root / "never-attached").exists()
    attach("empty")
    assert recall("empty", "styling a table")["learnings"] == []


def test_result_shape(store_root: Path) -> None:
    capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
    result = recall(SKILL, "currency formatting")
    assert set(result) == {"skill", "run_id", "learnings", "issues", "conflicts", "fallback", "omitted",
                           "other_scopes", "how_to_use", "capture_contract", "warnings"}
    assert list(result["learnings"][0]) == ["id", "rule", "scope", "recurrence", "weight", "origin", "always"]
    assert result["learnings"][0]["origin"] == "skill"


def test_weight_is_recurrence_times_recency(store_root: Path, monkeypatch) -> None:
    monkeypatch.setenv("WHETSTONE_TODAY", "2026-01-01")
    capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
    monkeypatch.setenv("WHETSTONE_TODAY", "2026-06-30")  # 180 days later: one half-life
    got = recall(SKILL, "currency formatting")["learnings"][0]["weight"]
    assert got == pytest.approx(0.5 * 0.5, abs=1e-4)
    no_decay = recall(SKILL, "currency formatting", config=cfg(learnings_decay=False))
    assert no_decay["learnings"][0]["weight"] == 0.5
    day = config_mod.load()
    assert weight(3, "2026-06-30", __import__("datetime").date(2026, 6, 30), day) == 0.75
    assert weight(1, "2026-01-01", __import__("datetime").date(2026, 3, 1), day) == pytest.approx(
        0.5 * math.exp(-math.log(2) * 59 / 180), abs=1e-4)


def test_matching_scopes_win_and_unrelated_ones_stay_out(store_root: Path) -> None:
    capture(SKILL, "learning", "Format the price column as US dollars with no decimals", "currency formatting", "x")
    capture(SKILL, "learning", "Heat-map msrp with a warm YlOrBr palette", "color encoding", "x")
    capture(SKILL, "learning", "Band every other row in light grey", "row banding", "x")
    capture(SKILL, "issue", "Never round the corners of a table", "corner radius", "x")
    result = recall(SKILL, "styling a table: currency formatting and color encoding")
    assert set(ids(result["learnings"])) == {"L1", "L2"} and result["fallback"] is False


def test_mmr_prefers_diverse_learnings(store_root: Path) -> None:
    attach(SKILL)
    store = store_root / SKILL
    write_blocks(store, "learnings", "currency formatting", [
        ("L1", "Format currency columns as US dollars with no decimal places"),
        ("L2", "Format currency columns as US dollars with no decimal places at all"),
        ("L3", "Format the currency columns as US dollars, with no decimal places"),
        ("L4", "Put the currency symbol before negative amounts in parentheses"),
    ])
    result = recall(SKILL, "currency formatting of currency columns", learnings_k=2)
    assert len(result["learnings"]) == 2 and "L4" in ids(result["learnings"])
    assert result["omitted"]["learnings"] == 2


def test_issues_are_capped_and_the_rest_counted(store_root: Path) -> None:
    attach(SKILL)
    store = store_root / SKILL
    write_blocks(store, "issues", "table borders", [
        (f"I{i}", f"Never draw a {color} border around table cells number {i}")
        for i, color in enumerate(["red", "blue", "green", "black", "grey", "pink", "teal", "gold", "navy",
                                   "plum", "rust", "sand"], 1)])
    result = recall(SKILL, "table borders", config=cfg(issues_k=8))
    assert len(result["issues"]) == 8 and result["omitted"]["issues"] == 4


def test_fallback_floor_when_nothing_matches(store_root: Path) -> None:
    for body, scope in [("Format currency as US dollars", "currency formatting"),
                        ("Heat-map msrp with a warm palette", "color encoding"),
                        ("Band alternate rows in light grey", "row banding"),
                        ("Bold the header row", "headers")]:
        capture(SKILL, "learning", body, scope, "x")
    capture(SKILL, "issue", "Never round the corners of a table", "corner radius", "x")
    result = recall(SKILL, "zebra migration patterns of the serengeti")
    assert result["fallback"] is True  # no rule holds for every task: the single nearest issue
    assert result["learnings"] == [] and len(result["issues"]) == 1
    assert sorted(result["other_scopes"].items()) == [("color encoding", 1), ("currency formatting", 1),
                                                      ("headers", 1), ("row banding", 1)]


def test_conflicting_entries_are_listed(store_root: Path) -> None:
    attach(SKILL)
    store = store_root / SKILL
    write_blocks(store, "learnings", "alignment", [("L1", "Right-align currency columns")])
    write_blocks(store, "issues", "alignment", [("I1", "Never right-align currency columns")])
    result = recall(SKILL, "alignment of currency columns")
    assert result["conflicts"] and set(result["conflicts"][0]["ids"]) == {"L1", "I1"}


def test_non_ascii_text_embeds_and_matches(store_root: Path) -> None:
    vectors = HashingEmbedder().embed(["货币列右对齐", "café crème brûlée", "🎉🎉", "Ελληνικά κείμενα"])
    assert np.all(np.linalg.norm(vectors, axis=1) > 0.99)
    capture(SKILL, "learning", "货币列一律右对齐", "货币格式", "x")
    capture(SKILL, "learning", "Use crème colours for the café menu", "menu colours", "x")
    assert "L1" in ids(recall(SKILL, "货币格式与对齐")["learnings"])
    assert "L2" in ids(recall(SKILL, "cafe creme menu colours")["learnings"])


@pytest.mark.parametrize("intent, k, message", [
    ("", None, "intent is empty"), ("   ", None, "intent is empty"),
    ("x", 0, "learnings_k must be"), ("x", 101, "learnings_k must be"),
])
def test_bad_recall_input(store_root: Path, intent: str, k, message: str) -> None:
    with pytest.raises(WhetstoneError, match=message):
        recall(SKILL, intent, k)


# --- the index -------------------------------------------------------------------------------------

class CountingEmbedder(HashingEmbedder):
    """The real hashing embedder, counting what it is asked to embed."""

    def __init__(self, identity: str = HashingEmbedder.identity) -> None:
        self.identity = identity
        self.texts: list[str] = []

    def embed(self, texts):
        self.texts += texts
        return super().embed(texts)


def _store_with(store_root: Path, n: int) -> Store:
    attach(SKILL)
    store = store_root / SKILL
    write_blocks(store, "learnings", "alpha", [(f"L{i}", f"Rule number {i} about alpha things") for i in range(1, n + 1)])
    return Store.open(config_mod.load(), SKILL)


def test_only_changed_entries_are_re_embedded(store_root: Path) -> None:
    store = _store_with(store_root, 6)
    counting = CountingEmbedder()
    first = freshness.snapshot(store, counting)
    assert len(first.entries) == 6 and len(counting.texts) == 6 + 1  # six bodies, one scope phrase
    freshness.LIVE.clear()
    counting.texts.clear()
    freshness.snapshot(store, counting)
    assert counting.texts == []  # vectors come from index.sqlite
    path = next((store.path / "learnings").glob("*.md"))
    path.write_text(path.read_text().replace("Rule number 3 about alpha things", "Rule three, reworded"))
    snap = freshness.snapshot(store, counting)
    assert counting.texts == ["Rule three, reworded"]
    assert snap.entries[snap.by_id["L3"]].body == "Rule three, reworded"


def test_vectors_are_keyed_by_backend_identity(store_root: Path) -> None:
    store = _store_with(store_root, 3)
    freshness.snapshot(store, CountingEmbedder())
    other = CountingEmbedder(identity="another-backend-v1")
    freshness.snapshot(store, other)
    assert len(other.texts) == 4
    again = CountingEmbedder()
    freshness.LIVE.clear()
    freshness.snapshot(store, again)
    assert again.texts == []


def test_deleted_index_is_rebuilt_silently(store_root: Path) -> None:
    capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
    before = recall(SKILL, "currency formatting")
    for path in (store_root / SKILL).glob("index.sqlite*"):
        path.unlink()
    freshness.LIVE.clear()
    after = recall(SKILL, "currency formatting")
    assert after["learnings"] == before["learnings"] and after["warnings"] == []
    assert (store_root / SKILL / "index.sqlite").exists()


def test_corrupt_index_is_rebuilt_with_a_warning(store_root: Path) -> None:
    capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
    freshness.LIVE.clear()
    for path in (store_root / SKILL).glob("index.sqlite*"):
        path.unlink()
    (store_root / SKILL / "index.sqlite").write_bytes(b"this is not a database" * 100)
    result = recall(SKILL, "currency formatting")
    assert ids(result["learnings"]) == ["L1"]
    assert any("index.sqlite was unreadable" in w for w in result["warnings"])
    assert recall(SKILL, "currency formatting")["warnings"] == []


@pytest.mark.parametrize("column, blob", [("words", b"\x01" * 7), ("postings", b""), ("phrases", b"\x00" * 5)])
def test_a_damaged_record_in_the_index_is_rebuilt_with_a_warning(store_root: Path, column: str, blob: bytes) -> None:
    capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
    recall(SKILL, "currency formatting")  # the file's record saved
    freshness.LIVE.clear()
    with sqlite3.connect(store_root / SKILL / "index.sqlite") as db:
        assert db.execute(f"UPDATE files SET {column}=?", (blob,)).rowcount == 1
    db.close()
    result = recall(SKILL, "currency formatting")
    assert ids(result["learnings"]) == ["L1"]
    assert any("index.sqlite was unreadable" in w and "damaged" in w for w in result["warnings"])
    assert recall(SKILL, "currency formatting")["warnings"] == []


def test_a_scope_file_with_no_entries_survives_a_switch_of_backend(store_root: Path) -> None:
    store = _store_with(store_root, 2)
    (store.path / "learnings" / scope_filename("empty")).write_text("", encoding="utf-8")
    freshness.snapshot(store, CountingEmbedder())
    snap = freshness.snapshot(store, CountingEmbedder(identity="another-backend-v1"))
    assert snap.count == 2


def test_hand_edits_and_resets_are_seen_without_hooks(store_root: Path) -> None:
    capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
    store = store_root / SKILL
    assert recall(SKILL, "currency formatting")["learnings"][0]["rule"] == "Format currency as US dollars"
    path = next((store / "learnings").glob("*.md"))
    path.write_text(path.read_text().replace("Format currency as US dollars\n", "Format currency as euros\n"))
    git(store, "commit", "-qam", "hand edit")
    assert recall(SKILL, "currency formatting")["learnings"][0]["rule"] == "Format currency as euros"
    git(store, "reset", "-q", "--hard", "HEAD~1")
    assert recall(SKILL, "currency formatting")["learnings"][0]["rule"] == "Format currency as US dollars"


def test_invalid_file_is_served_from_its_last_commit_with_a_warning(store_root: Path) -> None:
    capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
    path = next((store_root / SKILL / "learnings").glob("*.md"))
    path.write_text(path.read_text().replace("- scope: currency formatting\n", "- scope: currency formatting\n- "
                                             "provenance: x\nFormat currency as euros\n\n"))
    result = recall(SKILL, "currency formatting")
    assert ids(result["learnings"]) == ["L1"] and result["learnings"][0]["rule"] == "Format currency as US dollars"
    assert any("serving the last committed version" in w and ":7:" in w for w in result["warnings"])


def test_duplicate_ids_across_files_warn_and_keep_the_first(store_root: Path) -> None:
    attach(SKILL)
    store = store_root / SKILL
    write_blocks(store, "learnings", "alpha", [("L1", "Alpha rule")])
    write_blocks(store, "learnings", "beta", [("L1", "Beta rule")], no_verify=True)  # the hook would refuse it
    result = recall(SKILL, "alpha beta rule")
    assert ids(result["learnings"]) == ["L1"]
    assert any("duplicate id L1" in w for w in result["warnings"])
    # the first copy goes: the one left out is the only copy now, and a long-lived snapshot says so
    (store / "learnings" / scope_filename("alpha")).unlink()
    git(store, "commit", "-qam", "drop alpha")
    result = recall(SKILL, "alpha beta rule")
    assert [e["rule"] for e in result["learnings"]] == ["Beta rule"]
    assert not any("duplicate id" in w for w in result["warnings"])


def test_a_long_lived_snapshot_patched_by_many_changes_answers_like_a_fresh_one(store_root: Path) -> None:
    """The in-memory index is patched file by file; after captures, reinforcements, removals, a hand
    edit and a reset it must answer exactly as one built from index.sqlite and one built from the
    markdown alone."""
    topics = [("Format currency as US dollars", "currency formatting"),
              ("Heat-map msrp with a warm palette", "color encoding"),
              ("Band alternate rows in light grey", "row banding"),
              ("Bold the header row", "headers"), ("Put the source note under the table", "source notes")]
    for round_ in range(3):
        for body, scope in topics:
            capture(SKILL, "learning", f"{body} in {['reports', 'dashboards', 'slides'][round_]}", scope, "x",
                    confirm="new")
    capture(SKILL, "issue", "Never round the corners of a table", "corner radius", "x")
    from git_whetstone.ops.writing.revise import revise
    for entry_id in ("L2", "L7", "L11"):
        revise(SKILL, entry_id, "remove", confirm=True)
    revise(SKILL, "L3", "reinforce", scope="headers")
    store = store_root / SKILL
    path = next((store / "learnings").glob("color-encoding-*.md"))
    path.write_text(path.read_text().replace("warm palette", "cool palette"))
    git(store, "commit", "-qam", "hand edit")
    git(store, "reset", "-q", "--hard", "HEAD~1")
    intents = ["styling a table: currency formatting, colors, headers", "row banding and source notes",
               "corner radius", "slides about dashboards"]

    def answers() -> list:
        out = []
        for intent in intents:
            r = recall(SKILL, intent, learnings_k=5)
            out.append((r["learnings"], r["issues"], r["omitted"], r["fallback"], r["conflicts"]))
        return out

    patched = answers()
    freshness.LIVE.clear()
    assert answers() == patched  # loaded from index.sqlite
    freshness.forget(Store.open(config_mod.load(), SKILL))
    assert answers() == patched  # rebuilt from the markdown


def test_compaction_of_dead_rows_keeps_every_entry(store_root: Path) -> None:
    capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
    for _ in range(40):  # every reinforcement rewrites the file: its old rows die
        capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
        recall(SKILL, "currency formatting")
    snap = freshness.LIVE[(str(store_root / SKILL), HashingEmbedder.identity)]
    assert snap.size < 30 and snap.count == 1
    assert recall(SKILL, "currency formatting")["learnings"][0]["recurrence"] == 41


def test_arrays_kept_per_snapshot_follow_its_changes(store_root: Path) -> None:
    """A long-lived process keeps the per-row arrays recall derives from the rows (live, kinds,
    cutoffs, entries per scope: `Snapshot.derived`) between recalls; a capture, a removal and a
    hand edit must each give the arrays, and the answers, of a snapshot made from scratch."""
    from git_whetstone.ops.writing.revise import revise
    capture(SKILL, "learning", "Format currency as US dollars", "currency formatting", "x")
    capture(SKILL, "issue", "Never round the corners of a table", "corner radius", "x")
    intent = "styling a table: currency formatting, corners, colors and row banding"
    store = store_root / SKILL
    key = (str(store), HashingEmbedder.identity)

    def answer() -> tuple:
        r = recall(SKILL, intent)
        return r["learnings"], r["issues"], r["omitted"], r["other_scopes"], r["conflicts"]

    def from_scratch(snap) -> dict:
        scoped = snap.alive & ~snap.always
        learning, issue = scoped & snap.is_learning, scoped & ~snap.is_learning
        return {"always": snap.alive & snap.always, "scoped": scoped, "learning": learning, "issue": issue,
                "scope counts": np.bincount(snap.scope_of[scoped], minlength=len(snap.scopes))}

    answer()
    changes = [lambda: capture(SKILL, "learning", "Heat-map msrp with a warm palette", "color encoding", "x",
                               always=True),
               lambda: capture(SKILL, "learning", "Band alternate rows in light grey", "row banding", "x"),
               lambda: revise(SKILL, "L1", "remove", confirm=True)]
    for change in changes:
        change()
        patched = answer()
        snap = freshness.LIVE[key]
        want = from_scratch(snap)
        assert want.keys() <= snap._derived.keys()
        assert all(np.array_equal(snap._derived[name], want[name]) for name in want), change
        freshness.LIVE.clear()
        assert answer() == patched


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
