"""capture and revise through the library, checked against the markdown and the real git history."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from git_whetstone.base import config as config_mod
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.writing.revise import revise
from git_whetstone.base.errors import WhetstoneError
from git_whetstone.ops.recall import recall
from tests.helpers import git, tree_state

SKILL = "great-tables"


def commits(store: Path) -> list[str]:
    return git(store, "log", "--format=%s").stdout.splitlines()


def cfg(**overrides):
    return config_mod.Config(**{**config_mod.load().__dict__, **overrides})


@pytest.fixture
def store(store_root: Path) -> Path:
    capture(SKILL, "learning", "Format currency columns as US dollars with no decimal places.",
            "currency formatting", "make the revenue column US dollars")
    return store_root / SKILL


def test_new_learning_is_committed_as_exact_markdown(store: Path, monkeypatch) -> None:
    monkeypatch.setenv("WHETSTONE_TODAY", "2026-07-24")
    result = capture(SKILL, "learning", "Right-align currency columns so decimals line up.", "column alignment",
                     "'numbers should line up'")
    assert result["status"] == "committed" and result["entry_id"] == "L2" and result["recurrence"] == 1
    assert "L2" in result["confirmation"]
    files = list((store / "learnings").glob("column-alignment-*.md"))
    assert len(files) == 1
    assert files[0].read_text() == (
        "## L2 · Right-align currency columns so decimals line up\n"
        "- recurrence: 1\n"
        "- first_seen: 2026-07-24\n"
        "- last_seen: 2026-07-24\n"
        "- scope: column alignment\n"
        "- provenance: \"2026-07-24 — 'numbers should line up'\"\n"
        "\n"
        "Right-align currency columns so decimals line up.\n")
    assert commits(store)[0] == "capture: add L2 (column alignment)"
    assert json.loads((store / "next_ids.json").read_text()) == {"learning": 3, "issue": 1}


def test_near_duplicate_learning_reinforces(store: Path, monkeypatch) -> None:
    monkeypatch.setenv("WHETSTONE_TODAY", "2030-01-02")
    before = len(commits(store))
    result = capture(SKILL, "learning", "Show currency columns in US dollars, no decimal places",
                     "currency formatting", "dollars again")
    assert result["status"] == "reinforced" and result["entry_id"] == "L1" and result["recurrence"] == 2
    text = next((store / "learnings").glob("*.md")).read_text()
    assert "- recurrence: 2\n" in text and "- last_seen: 2030-01-02\n" in text
    # a reinforcement's provenance line names its run, so the same words twice are two lines (two changes)
    assert re.search(r"- provenance: \"2030-01-02 — 'dollars again' \(run r-2030-01-02-[0-9a-f]{8}\)\"\n", text)
    assert text.count("## ") == 1
    assert len(commits(store)) == before + 1 and commits(store)[0].startswith("capture: reinforce L1")


def test_exact_duplicate_issue_is_noop(store: Path) -> None:
    first = capture(SKILL, "issue", "Never round the corners of a table.", "corner radius", "square corners")
    head = git(store, "rev-parse", "HEAD").stdout
    again = capture(SKILL, "issue", "Never round the corners of a table.", "corner radius", "again")
    assert again["status"] == "noop" and again["entry_id"] == first["entry_id"]
    assert git(store, "rev-parse", "HEAD").stdout == head


def test_negated_rule_in_same_scope_is_a_conflict_and_writes_nothing(store: Path) -> None:
    capture(SKILL, "learning", "Right-align currency columns", "currency formatting", "x")
    before = tree_state(store)
    result = capture(SKILL, "learning", "Never right-align currency columns", "currency formatting", "y")
    assert result["status"] == "conflict"
    assert result["conflicts_with"]["id"] == "L2" and result["entry_id"] is None
    assert "L2" in result["prompt"]
    assert tree_state(store) == before


def test_conflict_can_be_resolved_by_replacing(store: Path) -> None:
    capture(SKILL, "learning", "Right-align currency columns", "currency formatting", "x")
    result = capture(SKILL, "learning", "Never right-align currency columns", "currency formatting", "y",
                     confirm="replace")
    assert result["status"] == "committed" and result["entry_id"] == "L3"
    text = next((store / "learnings").glob("*.md")).read_text()
    assert "## L2 " not in text and "## L3 · Never right-align currency columns" in text
    assert commits(store)[0] == "capture: add L3 (currency formatting), replacing L2"


def test_changed_value_is_a_conflict_not_a_duplicate(store: Path) -> None:
    capture(SKILL, "learning", "Show percentages with 2 decimals", "number formatting", "x")
    result = capture(SKILL, "learning", "Show percentages with 0 decimals", "number formatting", "y")
    assert result["status"] == "conflict"


def test_promotion_prompt_is_asked_once_and_a_decline_is_remembered(store: Path) -> None:
    body = "Format currency columns as US dollars with no decimal places."
    prompts = []
    for _ in range(5):
        result = capture(SKILL, "learning", body, "currency formatting", "again")
        prompts.append("promotion" in result)
    assert prompts == [False, False, True, False, False]  # recurrence 2, 3, 4 (asks), 5, 6
    declined = revise(SKILL, "L1", "promote", confirm="no")
    assert declined["status"] == "committed"
    assert "declined promotion" in next((store / "learnings").glob("*.md")).read_text()
    # weaken below the threshold and reinforce past it again: not asked, the answer was no
    for _ in range(3):
        revise(SKILL, "L1", "weaken")
    asked = [("promotion" in revise(SKILL, "L1", "reinforce")) for _ in range(3)]
    assert asked == [False, False, False]


def test_promote_moves_a_learning_into_issues_after_confirmation(store: Path) -> None:
    asked = revise(SKILL, "L1", "promote")
    assert asked["status"] == "needs_confirmation" and "confirm" in asked["prompt"]
    done = revise(SKILL, "L1", "promote", confirm=True)
    assert done["status"] == "committed" and done["entry_id"] == "I1" and done["replaced_id"] == "L1"
    assert not list((store / "learnings").glob("*.md"))
    issue = next((store / "issues").glob("*.md")).read_text()
    assert issue.startswith("## I1 · ") and "promoted from L1" in issue and "recurrence" not in issue
    assert commits(store)[0] == "revise: promote L1 to I1 (currency formatting)"
    again = revise(SKILL, "I1", "demote", confirm=True)
    assert again["entry_id"] == "L2"  # ids are never reused


def test_demote_checks_for_conflicts(store: Path) -> None:
    capture(SKILL, "learning", "Right-align currency columns", "alignment", "x")
    capture(SKILL, "issue", "Never use bold text in table headers", "headers", "x")
    before = tree_state(store)
    result = revise(SKILL, "I1", "demote", body="Never right-align currency columns", confirm=True)
    assert result["status"] == "conflict" and result["conflicts_with"]["id"] == "L2"
    assert tree_state(store) == before


def test_remove_needs_confirmation_and_ids_are_not_reused(store: Path) -> None:
    before = tree_state(store)
    asked = revise(SKILL, "L1", "remove")
    assert asked["status"] == "needs_confirmation" and tree_state(store) == before
    assert revise(SKILL, "L1", "remove", confirm="yes")["status"] == "committed"
    assert not list((store / "learnings").glob("*.md"))  # an emptied scope file is deleted
    assert capture(SKILL, "learning", "Use a warm palette", "color", "x")["entry_id"] == "L2"


def test_weaken_and_reword(store: Path) -> None:
    capture(SKILL, "learning", "Format currency columns as US dollars with no decimal places.",
            "currency formatting", "again")
    weakened = revise(SKILL, "L1", "weaken")
    assert weakened["status"] == "committed" and weakened["recurrence"] == 1
    assert revise(SKILL, "L1", "weaken")["status"] == "noop"
    reworded = revise(SKILL, "L1", "reinforce", body="Format currency columns as euros with no decimal places.")
    assert reworded["status"] == "committed"
    text = next((store / "learnings").glob("*.md")).read_text()
    assert "## L1 · Format currency columns as euros with no decimal places\n" in text
    assert "- recurrence: 2\n" in text


def test_revise_moves_an_entry_to_another_scope(store: Path) -> None:
    capture(SKILL, "learning", "Use a warm palette for heat maps", "color encoding", "x")
    result = revise(SKILL, "L1", "reinforce", scope="color encoding")
    assert result["status"] == "committed"
    files = list((store / "learnings").glob("*.md"))
    assert len(files) == 1 and files[0].read_text().count("## L") == 2


def test_supervision_modes_behave_differently(store_root: Path) -> None:
    body, near = "Use a warm palette for heat maps", "Heat maps get warm colour ramps like YlOrBr"
    results = {}
    for mode in ("autonomous", "balanced", "supervised"):
        skill = f"s-{mode}"
        conf = cfg(supervision=mode)
        first = capture(skill, "learning", body, "color encoding", "x", config=conf)
        second = capture(skill, "learning", near, "color encoding", "y", config=conf)
        results[mode] = (first["status"], second["status"])
    # autonomous writes both; balanced asks only about the ambiguous one; supervised asks before any write
    assert results["autonomous"][0] == "committed" and results["autonomous"][1] in ("committed", "reinforced")
    assert results["balanced"][0] == "committed"
    assert results["supervised"][0] == "needs_confirmation"
    assert results != {m: results["autonomous"] for m in results}
    conf = cfg(supervision="supervised")
    done = capture("s-supervised", "learning", body, "color encoding", "x", confirm=True, config=conf)
    assert done["status"] == "committed"


def test_a_likely_duplicate_asks_in_balanced_and_commits_in_autonomous(store_root: Path) -> None:
    body = "Use a warm palette for heat maps"
    near = "Warm palette for the heat map of prices"  # most of its words, close in meaning: likely the same rule
    from git_whetstone.semantics.embed import get_embedder
    a, b = get_embedder("hashing").embed([body, near])
    conf = cfg()
    sim = float(a @ b)
    assert sim >= conf.threshold("ask"), sim
    capture("bal", "learning", body, "color encoding", "x", config=cfg(supervision="balanced"))
    asked = capture("bal", "learning", near, "color encoding", "y", config=cfg(supervision="balanced"))
    assert asked["status"] == "needs_confirmation" and asked["similar_to"]["id"] == "L1"
    kept = capture("bal", "learning", near, "color encoding", "y", confirm="new", config=cfg(supervision="balanced"))
    assert kept["status"] == "committed" and kept["entry_id"] == "L2"
    capture("auto", "learning", body, "color encoding", "x", config=cfg(supervision="autonomous"))
    auto = capture("auto", "learning", near, "color encoding", "y", config=cfg(supervision="autonomous"))
    assert auto["status"] == "committed" and [s["id"] for s in auto["similar"]] == ["L1"]


def test_events_get_one_line_per_call(store: Path) -> None:
    r = recall(SKILL, "currency formatting for a table")
    capture(SKILL, "learning", "Use a warm palette", "color", "x", run_id=r["run_id"])
    revise(SKILL, "L2", "reinforce", run_id=r["run_id"])
    lines = [json.loads(line) for line in (store / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in lines] == ["capture", "recall", "capture", "revise"]
    assert lines[2]["run_id"] == r["run_id"] == lines[3]["run_id"]
    assert lines[1]["learnings"] == ["L1"]


@pytest.mark.parametrize("kwargs, message", [
    ({"polarity": "maybe"}, "polarity must be 'learning' or 'issue'"),
    ({"body": "   "}, "body is empty"),
    ({"body": "a\x00b"}, "control characters"),
    ({"body": "line\n## L9 · sneaky\nmore"}, "would be a heading"),
    ({"body": "<<<<<<< HEAD"}, "merge conflict marker"),
    ({"body": "- warm colours\n- no green"}, "cannot be stored as written"),
    ({"body": "Palette\n---\nwarm only"}, "cannot be stored as written"),
    ({"body": "x" * 5000}, "too long"),
    ({"scope": ""}, "scope is empty"),
    ({"skill": "../x"}, "invalid skill name"),
    ({"confirm": "perhaps"}, "confirm must be"),
])
def test_bad_capture_input_changes_nothing(store: Path, kwargs: dict, message: str) -> None:
    args = {"skill": SKILL, "polarity": "learning", "body": "Use bold headers", "scope": "headers",
            "provenance": "x", **kwargs}
    before = tree_state(store)
    with pytest.raises(WhetstoneError, match=message) as caught:
        capture(**args)
    assert "\n" not in caught.value.message and caught.value.exit_code == 2
    assert tree_state(store) == before


@pytest.mark.parametrize("entry_id, action, message", [
    ("L99", "reinforce", "unknown entry id L99"),
    ("X1", "reinforce", "unknown entry id"),
    ("L1", "explode", "unknown action"),
    ("L1", "demote", "only issues can be demoted"),
])
def test_bad_revise_input_changes_nothing(store: Path, entry_id: str, action: str, message: str) -> None:
    before = tree_state(store)
    with pytest.raises(WhetstoneError, match=message):
        revise(SKILL, entry_id, action)
    assert tree_state(store) == before


def test_revise_on_missing_store_is_an_error(store_root: Path) -> None:
    with pytest.raises(WhetstoneError, match="no store for skill 'nope'"):
        revise("nope", "L1", "reinforce")
    assert not (store_root / "nope").exists()


def test_capture_into_an_invalid_file_is_refused(store: Path) -> None:
    path = next((store / "learnings").glob("*.md"))
    path.write_text(path.read_text().replace("- recurrence: 1", "- recurrence: many"))
    with pytest.raises(WhetstoneError, match="recurrence must be a positive integer"):
        capture(SKILL, "learning", "Put the currency symbol before the amount", "currency formatting", "x")
