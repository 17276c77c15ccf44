"""The judge decides alone only when it is sure, and capture, revise, import and compact never turn
"unsure" into a merge: a look-alike is put to the caller (balanced, supervised) or kept beside the
new rule with its name (autonomous). The sentences here are made up for the purpose, of the kinds
that fool a cosine: antonyms, opposite values, a rule and its exception, shared vocabulary,
invented identifiers."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from git_whetstone.base import config as config_mod
from git_whetstone.base.errors import WhetstoneError
from git_whetstone.ops.capture import capture
from git_whetstone.ops.compact import compact
from git_whetstone.ops.recall import recall
from git_whetstone.ops.revise import revise
from git_whetstone.semantics.judge import CONTRADICTS, SAME, UNRELATED, UNSURE, judge
from tests.helpers import git

SKILL = "report-writing"


def cfg(**overrides) -> config_mod.Config:
    return dataclasses.replace(config_mod.load(), **overrides)


def commits(store: Path) -> list[str]:
    return git(store, "log", "--format=%s").stdout.splitlines()


# --- the judge on its own --------------------------------------------------------------------------

@pytest.mark.parametrize("new, old", [
    ("Always indent SQL with four spaces.", "Indent the SQL with 4 spaces"),          # number words, case
    ("Underline section titles.", "Section titles: underline them"),                  # order, no relation word
    ("Please put units in the axis labels", "Put the units in axis labels."),          # filler and plurals
])
def test_the_same_words_are_sure_to_be_the_same_rule(new: str, old: str) -> None:
    assert judge(new, old, 0.9, cfg(), same_scope=True).relation == SAME


@pytest.mark.parametrize("new, old, why", [
    ("Never abbreviate month names in dates.", "Abbreviate month names in dates.", "not to"),
    ("Left-align the descriptions column.", "Right-align the descriptions column.", "alignment"),
    ("Round the ratios to three decimals.", "Round the ratios to 1 decimal.", "different values"),
    ("Set the theme of slides to dark.", "Set the theme of slides to light.", "theme"),
])
def test_the_same_words_but_one_opposition_are_sure_to_contradict(new: str, old: str, why: str) -> None:
    verdict = judge(new, old, 0.9, cfg(), same_scope=True)
    assert verdict.relation == CONTRADICTS and why in verdict.reason, verdict


@pytest.mark.parametrize("new, old", [
    ("Keep status updates terse.", "Status updates should cover every detail at length."),   # antonyms, other words
    ("Titles in a monospace face like Menlo.", "Prefer a serif typeface such as Garamond."),   # opposite values
    ("Emoji are fine in the team's own changelog.", "Never put emoji in release notes."),       # an exception
    ("Put tabs rather than spaces.", "Put spaces rather than tabs."),                           # order matters
    ("Join zorblax_events on zorb_key.", "Join quillfeather_logs on zorb_key."),               # invented names
    ("Bold the subtotal row.", "Bold the header row."),                                        # shared vocabulary
])
def test_what_the_words_do_not_settle_is_never_sure(new: str, old: str) -> None:
    verdict = judge(new, old, 0.85, cfg(), same_scope=True)
    assert verdict.relation in (UNSURE, UNRELATED), verdict
    assert judge(new, old, 0.85, cfg(), same_scope=True).relation == UNSURE  # close: the caller decides


def test_the_same_words_in_another_scope_are_not_merged() -> None:
    assert judge("Use sentence case.", "Use sentence case", 0.99, cfg(), same_scope=False).relation == UNSURE


def test_an_opposed_look_alike_is_flagged() -> None:
    verdict = judge("Keep status updates short.", "Weekly status updates should be long and list every open risk.", 0.8,
                    cfg(), same_scope=True)
    assert verdict.relation == UNSURE and verdict.opposed and "length" in verdict.reason


# --- capture asks, names, or is told ------------------------------------------------------------------

@pytest.fixture
def store(store_root: Path) -> Path:
    capture(SKILL, "learning", "Keep weekly status updates short.", "status updates", "tl;dr please")
    return store_root / SKILL


def test_balanced_asks_with_candidates_and_writes_nothing(store: Path) -> None:
    before = commits(store)
    asked = capture(SKILL, "learning", "Weekly status updates should be long and list every open risk.", "status updates",
                    "more detail")
    assert asked["status"] == "needs_confirmation" and asked["entry_id"] is None
    (first,) = asked["candidates"]
    assert first["id"] == "L1" and first["scope"] == "status updates" and 0 < first["similarity"] <= 1
    assert "L1" in asked["prompt"] and "replace:L1" in asked["prompt"]  # opposed: which holds?
    assert commits(store) == before


def test_autonomous_writes_the_unsure_rule_as_new_and_names_the_look_alike(store: Path) -> None:
    result = capture(SKILL, "learning", "Weekly status updates should be long and list every open risk.", "status updates",
                     "more detail", config=cfg(supervision="autonomous"))
    assert result["status"] == "committed" and result["entry_id"] == "L2"
    assert [s["id"] for s in result["similar"]] == ["L1"]
    assert "recurrence: 1" in next((store / "learnings").glob("*.md")).read_text()  # L1 untouched
    conflicts = recall(SKILL, "write the weekly status updates")["conflicts"]
    assert conflicts and set(conflicts[0]["ids"]) == {"L1", "L2"} and conflicts[0]["reason"].startswith("may")


def test_the_answers_same_replace_keep_and_new(store: Path) -> None:
    body, scope = "Status updates: short, to the point.", "status updates"
    kept = capture(SKILL, "learning", body, scope, "x", confirm="keep:L1")
    assert kept["status"] == "noop" and kept["entry_id"] == "L1"
    same = capture(SKILL, "learning", body, scope, "x", confirm="same:L1")
    assert same["status"] == "reinforced" and same["recurrence"] == 2
    before = len(commits(store))
    replaced = capture(SKILL, "learning", "Status updates may run long when a project slips.", scope, "y",
                       confirm="replace:L1")
    assert replaced["status"] == "committed" and replaced["replaced_id"] == "L1" and replaced["entry_id"] == "L2"
    assert len(commits(store)) == before + 1 and commits(store)[0] == "capture: add L2 (status updates), replacing L1"
    text = "".join(p.read_text() for p in (store / "learnings").glob("*.md"))
    assert "## L1 " not in text and "## L2 " in text
    new = capture(SKILL, "learning", "Status updates go out on Fridays.", scope, "z", confirm="new")
    assert new["status"] == "committed" and new["entry_id"] == "L3"


def test_answers_that_name_nothing_known_are_refused(store: Path) -> None:
    with pytest.raises(WhetstoneError, match="unknown entry id L9"):
        capture(SKILL, "learning", "Short status updates.", "status updates", "x", confirm="same:L9")
    with pytest.raises(WhetstoneError, match="confirm must be"):
        capture(SKILL, "learning", "Short status updates.", "status updates", "x", confirm="merge:L1")


def test_a_sure_contradiction_names_both_rules_and_asks_which_holds(store_root: Path) -> None:
    capture(SKILL, "issue", "Never cc the client's manager.", "cc etiquette", "x")
    result = capture(SKILL, "learning", "Always cc the client's manager.", "cc etiquette", "y")
    assert result["status"] == "conflict" and result["conflicts_with"]["id"] == "I1"
    assert "Never cc" in result["prompt"] and "Always cc" in result["prompt"]
    assert "replace:I1" in result["prompt"] and "keep:I1" in result["prompt"]


def test_revise_asks_before_rewording_into_a_look_alike(store: Path) -> None:
    capture(SKILL, "learning", "Send the weekly status update before noon.", "status timing", "x", confirm="new")
    asked = revise(SKILL, "L2", "reinforce", body="Weekly status updates should be long and list every open risk.",
                   scope="status updates")
    assert asked["status"] == "needs_confirmation" and asked["candidates"][0]["id"] == "L1"
    done = revise(SKILL, "L2", "reinforce", body="Weekly status updates should be long and list every open risk.",
                  scope="status updates", confirm="new")
    assert done["status"] == "committed"


def test_compact_merges_only_what_it_is_sure_of_and_reports_the_rest(store: Path) -> None:
    capture(SKILL, "learning", "Weekly status updates should be long and list every open risk.", "status updates", "x",
            confirm="new")
    capture(SKILL, "learning", "Keep the weekly status updates short", "status updates", "x", confirm="new")
    result = compact(SKILL)
    assert result["changes"] == ["merge L3 into L1 (status updates)"]
    pairs = {tuple(p["ids"]) for p in result["report"]["look_alikes"]}
    assert ("L1", "L2") in pairs
    assert "Possible duplicates and contradictions" in (store / "compact-report.md").read_text()


def test_revise_takes_no_answer_that_names_an_entry(store: Path) -> None:
    with pytest.raises(WhetstoneError, match="revise takes confirm yes, no or new"):
        revise(SKILL, "L1", "reinforce", confirm="same:L1")


def test_the_pre_filter_never_hides_an_opposition() -> None:
    """recall judges only the pairs `may_oppose` lets through: over every pair of rules in the
    labeled set (entries, and both sides of every labeled pair), a pair it rules out has no
    opposition, so the judge could have found neither a contradiction nor an opposed look-alike."""
    import numpy as np
    from git_whetstone.semantics.judge import may_oppose, opposition, read
    from tests.eval import run as eval_run
    labeled = eval_run.load_set()
    texts = {e["body"] for skill in labeled["skills"] for e in skill["entries"]}
    for name in ("dedup", "conflict", "judge"):
        texts |= {p[side] for p in labeled[name] for side in ("existing", "new")}
    readings = [read(t) for t in sorted(texts)]
    allowed = may_oppose(readings)
    opposed = np.array([[bool(opposition(a, b)[0]) for b in readings] for a in readings])
    assert len(readings) > 300 and opposed.sum() > 1000  # every kind of opposition is there to find
    assert not (opposed & ~allowed).any()
    assert (~allowed).sum() > allowed.sum() / 2  # and it rules out pairs: it is worth running


def _plain_reading(text: str):
    """What `read` gives, computed the plain way: every word split on hyphens and slashes, the
    content words taken from the text again (`content_words`)."""
    import re

    from git_whetstone.semantics import judge as judge_mod
    from git_whetstone.semantics.words import content_words, normalize, stem, words
    tokens = words(text)
    found = set(tokens)
    sequence = tuple(w for w in content_words(text) if w not in judge_mod._FILLER
                     and w not in judge_mod._PERMISSION and w not in judge_mod._PROHIBITION)
    numbers = ({m.replace(",", ".") for m in judge_mod._NUMBER.findall(normalize(text))}
               | {t for t in tokens if t.isdigit()})
    if not numbers and found & {"no", "without", "none", "zero"} and found & {"decimal", "decimals", "digit", "digits"}:
        numbers.add("0")
    values: dict[str, set[str]] = {}
    for token in tokens:
        for part in re.split(r"[-/]", token):
            slot = judge_mod._SLOT_OF.get(part) or judge_mod._SLOT_OF.get(stem(part))
            if slot:
                values.setdefault(slot, set()).add(stem(part))
    if "sans" in values.get("typeface", set()):
        values["typeface"].discard("serif")
    return judge_mod.Reading(sequence, bool(found & judge_mod._RELATIONAL), bool(found & judge_mod._PROHIBITION),
                             bool(found & judge_mod._PERMISSION), frozenset(numbers),
                             {k: frozenset(v) for k, v in values.items()})


def test_the_judge_reads_and_decides_as_the_plain_computation_does() -> None:
    """`read` takes a text's words once and splits none on hyphens or slashes (`words` already
    did: the plain reading still tries), and `judge` leaves no word out of a negation's two rules when none differs (recall judges
    dozens of such pairs a call): over the labeled set's texts and some made for it, every reading
    is the plain one, and every pair's verdict is what the plain readings give."""
    from git_whetstone.semantics import judge as judge_mod
    from tests.eval import run as eval_run
    labeled = eval_run.load_set()
    texts = {e["body"] for skill in labeled["skills"] for e in skill["entries"]}
    for name in ("dedup", "conflict", "judge"):
        texts |= {p[side] for p in labeled[name] for side in ("existing", "new")}
    texts |= {"Use a sans-serif face for tables", "Use serif/sans-serif faces", "No decimals in counts",
              "Never round to 2 decimals; show three", "Don't use red-green palettes", "ok to skip the legend"}
    texts = sorted(texts)
    assert len(texts) > 300
    for text in texts:
        assert judge_mod.read(text) == _plain_reading(text), text
    config = cfg()

    def plain(a: str, b: str, similarity: float, same_scope: bool) -> tuple:
        x, y = _plain_reading(a), _plain_reading(b)
        kind, reason, differing = judge_mod.opposition(x, y)
        if kind:
            rest_x = tuple(w for w in x.sequence if w not in differing)
            rest_y = tuple(w for w in y.sequence if w not in differing)
            if rest_x == rest_y and rest_x:
                return CONTRADICTS, reason, True
        elif judge_mod.same_words(x, y) and same_scope and x.permits == y.permits:
            return SAME, "", False
        return (UNSURE if similarity >= config.threshold("grey") else UNRELATED), reason, bool(kind)

    judged = set()
    for i, a in enumerate(texts):
        for b in texts[i:i + 40]:  # every text against its neighbours in order: look-alikes sit together
            for similarity, same_scope in ((0.95, True), (0.0, False)):
                got = judge(a, b, similarity, config, same_scope=same_scope)
                assert (got.relation, got.reason, got.opposed) == plain(a, b, similarity, same_scope), (a, b)
                judged.add(got.relation)
    assert judged == {SAME, CONTRADICTS, UNSURE, UNRELATED}  # every verdict was reached
