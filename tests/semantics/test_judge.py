"""The judge decides alone only when it is sure, and capture, revise, import and compact never turn
anything less than sure into a merge: a rule *likely* the same as a stored one, or its opposite, is
put to the caller (balanced, supervised) or written beside it with its name (autonomous); a rule
only *related* to stored ones is written with them mentioned, in every mode. The sentences here are
made up for the purpose, of the kinds that fool a cosine: antonyms, opposite values, a rule and its
exception, shared vocabulary, invented identifiers."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from git_whetstone.base import config as config_mod
from git_whetstone.base.errors import WhetstoneError
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.upkeep.compact import compact
from git_whetstone.ops.recall import recall
from git_whetstone.ops.writing.revise import revise
from git_whetstone.semantics.judge import CONTRADICTS, LIKELY, RELATED, SAME, UNRELATED, judge
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
    for similarity in (0.3, 0.6, 0.85, 0.99):
        assert judge(new, old, similarity, cfg(), same_scope=True).relation in (LIKELY, RELATED, UNRELATED)


@pytest.mark.parametrize("new, old, opposed", [
    ("Keep weekly status updates long and detailed.", "Keep weekly status updates short.", True),  # one attribute
    ("Never show the row numbers in exported tables.", "Show the row numbers in exported tables.", True),  # a flip
    ("Read the Kestrel token from KESTREL_TOKEN.", "Read the Kestrel token from kestrel.toml.", False),  # one word
])
def test_the_same_content_but_for_one_thing_is_likely_and_asked(new: str, old: str, opposed: bool) -> None:
    verdict = judge(new, old, 0.9, cfg(), same_scope=True)
    assert verdict.relation in (LIKELY, CONTRADICTS) and verdict.opposed == opposed, verdict
    if verdict.relation == LIKELY:  # in scopes far apart the same words are only related
        assert judge(new, old, 0.9, cfg(), same_scope=False).relation == RELATED


@pytest.mark.parametrize("new, old", [
    ("Never use exclamation marks.", "Always CC my manager."),                # a negative word is not an opposition
    ("Keep emails under 150 words.", "Follow up after three business days."),  # numbers on two attributes
    ("Right-align every numeric column.", "Show currency in US dollars."),    # another attribute, another scope
])
def test_a_negation_or_a_number_on_its_own_is_no_opposition(new: str, old: str) -> None:
    verdict = judge(new, old, 0.6, cfg(), same_scope=True)
    assert verdict.relation in (RELATED, UNRELATED) and not verdict.opposed, verdict


def test_a_look_alike_is_mentioned_only_when_it_stands_out_from_the_store() -> None:
    config = cfg()
    bar = config.threshold("mention")
    new, old = "Put the legend under the chart.", "Label each line at its right end."
    assert judge(new, old, 0.55, config, same_scope=False, baseline=0.5 - bar).relation == RELATED
    assert judge(new, old, 0.55, config, same_scope=False, baseline=0.6 - bar).relation == UNRELATED
    assert judge(new, old, config.threshold("candidate") - 0.01, config, same_scope=False).relation == UNRELATED


def test_the_same_words_in_another_scope_are_not_merged() -> None:
    assert judge("Use sentence case.", "Use sentence case", 0.99, cfg(), same_scope=False).relation == RELATED


# --- capture asks, names, or is told ------------------------------------------------------------------

@pytest.fixture
def store(store_root: Path) -> Path:
    capture(SKILL, "learning", "Keep weekly status updates short.", "status updates", "tl;dr please")
    return store_root / SKILL


OPPOSITE = "Keep weekly status updates long, listing every open risk."  # likely L1's opposite: length, the rest shared


def test_balanced_asks_with_candidates_and_writes_nothing(store: Path) -> None:
    before = commits(store)
    asked = capture(SKILL, "learning", OPPOSITE, "status updates", "more detail")
    assert asked["status"] == "needs_confirmation" and asked["entry_id"] is None
    (first,) = asked["candidates"]
    assert first["id"] == "L1" and first["scope"] == "status updates" and 0 < first["similarity"] <= 1
    assert "L1" in asked["prompt"] and "replace:L1" in asked["prompt"]  # opposed: which holds?
    assert commits(store) == before


def test_autonomous_writes_the_likely_rule_as_new_and_names_the_look_alike(store: Path) -> None:
    result = capture(SKILL, "learning", OPPOSITE, "status updates", "more detail", config=cfg(supervision="autonomous"))
    assert result["status"] == "committed" and result["entry_id"] == "L2"
    assert [s["id"] for s in result["similar"]] == ["L1"]
    assert "recurrence: 1" in next((store / "learnings").glob("*.md")).read_text()  # L1 untouched
    conflicts = recall(SKILL, "write the weekly status updates")["conflicts"]
    assert conflicts and set(conflicts[0]["ids"]) == {"L1", "L2"} and conflicts[0]["reason"].startswith("may")


def test_a_related_rule_is_written_in_every_mode_with_the_look_alike_mentioned(store: Path) -> None:
    for mode, body in (("supervised", "Send weekly status updates to the whole team on Mondays."),
                       ("balanced", "Open each weekly status update with the three biggest risks."),
                       ("autonomous", "Write weekly status updates as plain text, never as slides.")):
        result = capture(SKILL, "learning", body, "status updates", "x", config=cfg(supervision=mode),
                         confirm="yes" if mode == "supervised" else None)
        assert result["status"] == "committed", (mode, result)
        assert "L1" in [s["id"] for s in result["similar"]] and "candidates" not in result


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
    asked = revise(SKILL, "L2", "reinforce", body=OPPOSITE, scope="status updates")
    assert asked["status"] == "needs_confirmation" and asked["candidates"][0]["id"] == "L1"
    done = revise(SKILL, "L2", "reinforce", body=OPPOSITE, scope="status updates", confirm="new")
    assert done["status"] == "committed"


def test_compact_merges_only_what_it_is_sure_of_and_reports_the_rest(store: Path) -> None:
    capture(SKILL, "learning", OPPOSITE, "status updates", "x", config=cfg(supervision="autonomous"))  # nobody answered
    # the same words again: capture reinforces (never a copy); a copy only arrives by a hand edit
    path = next((store / "learnings").glob("*.md"))
    path.write_text(path.read_text() + "\n## L3 \u00b7 Keep the weekly status updates short\n- recurrence: 1\n"
                    "- first_seen: 2026-01-05\n- last_seen: 2026-01-05\n- scope: status updates\n\n"
                    "Keep the weekly status updates short\n")
    (store / "next_ids.json").write_text('{"learning": 4, "issue": 1}\n')
    git(store, "commit", "-qam", "hand: a copy of L1")
    result = compact(SKILL)
    assert result["changes"] == ["merge L3 into L1 (status updates)"]
    pairs = {tuple(p["ids"]) for p in result["report"]["look_alikes"]}
    assert ("L1", "L2") in pairs  # likely opposites: reported, never merged
    assert "Possible duplicates and contradictions" in (store / "compact-report.md").read_text()


def test_new_never_stores_a_copy_of_the_same_words(store: Path) -> None:
    for _ in range(3):
        again = capture(SKILL, "learning", "Keep the weekly status updates short", "status updates", "x", confirm="new")
        assert again["status"] == "reinforced" and again["entry_id"] == "L1"
        assert "already says this in the same words" in again["confirmation"]
    assert again["recurrence"] == 4
    issue = capture(SKILL, "issue", "Never attach spreadsheets to status updates.", "status updates", "x")
    again = capture(SKILL, "issue", "Never attach spreadsheets to status updates", "status updates", "x", confirm="new")
    assert again["status"] == "noop" and again["entry_id"] == issue["entry_id"]
    assert [e["id"] for e in recall(SKILL, "weekly status updates")["learnings"]].count("L1") == 1


def test_both_hold_is_remembered_and_never_raised_again(store: Path) -> None:
    asked = capture(SKILL, "learning", OPPOSITE, "status updates", "more detail")
    assert asked["status"] == "needs_confirmation"
    both = capture(SKILL, "learning", OPPOSITE, "status updates", "more detail", confirm="new")
    assert both["status"] == "committed" and both["entry_id"] == "L2"
    text = next((store / "learnings").glob("*.md")).read_text()
    assert "- differs_from: L1\n" in text.split("## L2 ")[1]
    assert commits(store)[0].startswith("capture: add L2")
    assert not recall(SKILL, "write the weekly status updates")["conflicts"]  # no false alarm on an answered pair
    assert not compact(SKILL)["report"]["look_alikes"]
    reworded = revise(SKILL, "L2", "reinforce", body="Keep weekly status updates long, listing each open risk.")
    assert reworded["status"] == "committed" and "candidates" not in reworded and "similar" not in reworded


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


def test_the_judge_reads_as_the_plain_computation_does() -> None:
    """`read` takes a text's words once and splits none on hyphens or slashes (`words` already
    did: the plain reading still tries): over the labeled set's texts and some made for it, every
    reading is the plain one."""
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
