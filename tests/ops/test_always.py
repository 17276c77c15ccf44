"""Rules for every task (SPEC §3, §4): `- applies: always`, set by capture and revise, returned first
by every recall; `other_scopes` and `scopes` let an agent fetch what the intent missed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from git_whetstone import api
from git_whetstone.base.errors import WhetstoneError
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.recall import recall
from git_whetstone.ops.writing.revise import revise

from ..helpers import git, run_cli, tree_state
from ..doors.test_mcp import served  # noqa: F401  (the module's shared server)

SKILL = "sql-queries"
SCOPED = [  # (kind, rule, scope)
    ("learning", "Put each selected column on its own line.", "column layout"),
    ("learning", "Replace nested subqueries with common table expressions.", "query structure"),
    ("issue", "Never write SELECT star in a saved query.", "column selection"),
    ("learning", "Bucket timestamps by month with DATE_TRUNC.", "date bucketing"),
]
EVERY = [
    ("issue", "Target the Postgres dialect whatever the warehouse.", "dialect"),
    ("learning", "End every statement with a semicolon.", "statement endings"),
]


@pytest.fixture
def store(store_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "autonomous")
    for kind, rule, scope in SCOPED:
        assert capture(SKILL, kind, rule, scope)["status"] == "committed"
    for kind, rule, scope in EVERY:
        result = capture(SKILL, kind, rule, scope, always=True)
        assert result["status"] == "committed" and result["always"] is True, result
    return store_root / SKILL


def returned(result: dict) -> list[tuple[str, bool]]:
    return [(e["rule"], e["always"]) for e in result["learnings"] + result["issues"]]


def test_capture_always_writes_the_mark_after_the_scope(store: Path) -> None:
    text = next((store / "issues").glob("dialect-*.md")).read_text()
    lines = text.splitlines()
    assert lines[1:3] == ["- scope: dialect", "- applies: always"]
    assert "capture: add I2 (dialect, every task)" in git(store, "log", "--format=%s").stdout
    assert run_cli("validate", SKILL).returncode == 0


def test_every_recall_returns_the_always_on_rules_first(store: Path) -> None:
    for intent in ("Rewrite the churn report's nested subqueries as readable steps",
                   "Count signups per month for the growth dashboard",
                   "What is a good name for a cat?"):
        result = recall(SKILL, intent)
        got = returned(result)
        marked = {rule for _, rule, _ in EVERY}
        assert {rule for rule, always in got if always} == marked, (intent, got)
        # first in each list, before anything the intent matched
        for key in ("learnings", "issues"):
            flags = [e["always"] for e in result[key]]
            assert flags == sorted(flags, reverse=True), (intent, result[key])
    subqueries = returned(recall(SKILL, "Rewrite the churn report's nested subqueries as readable steps"))
    assert ("Replace nested subqueries with common table expressions.", False) in subqueries
    off_topic = recall(SKILL, "What is a good name for a cat?")
    assert [always for _, always in returned(off_topic)] == [True, True]  # the always-on rules and nothing else
    assert not off_topic["fallback"]
    assert off_topic["other_scopes"] == {"column layout": 1, "query structure": 1, "column selection": 1,
                                         "date bucketing": 1} != {}


def test_always_on_rules_take_no_place_from_learnings_k_and_have_their_own_cap(store: Path,
                                                                               monkeypatch) -> None:
    result = recall(SKILL, "Rewrite the churn report's nested subqueries as readable steps", learnings_k=1)
    scoped = [e for e in result["learnings"] if not e["always"]]
    assert len(scoped) == 1 and sum(e["always"] for e in result["learnings"]) == 1
    monkeypatch.setenv("WHETSTONE_ALWAYS_K", "1")
    capped = recall(SKILL, "What is a good name for a cat?")
    assert len(capped["learnings"] + capped["issues"]) == 1
    assert capped["omitted"]["learnings"] + capped["omitted"]["issues"] == 1


def test_other_scopes_name_what_the_intent_missed_and_scopes_fetch_it(store: Path) -> None:
    result = recall(SKILL, "Rewrite the churn report's nested subqueries as readable steps")
    assert "query structure" not in result["other_scopes"]
    assert result["other_scopes"].get("column layout") == 1
    assert "dialect" not in result["other_scopes"]  # its rule came back (always-on)
    fetched = recall(SKILL, "Rewrite the churn report's nested subqueries as readable steps",
                     scopes=["Column Layout"])
    assert ("Put each selected column on its own line.", False) in returned(fetched)
    assert "column layout" not in fetched["other_scopes"]
    unknown = recall(SKILL, "anything", scopes=["no such scope"])
    assert any("no scope named 'no such scope'" in w for w in unknown["warnings"])
    with pytest.raises(WhetstoneError, match="scopes must be a list"):
        recall(SKILL, "anything", scopes={"a": 1})
    cli = run_cli("recall", SKILL, "Rewrite the churn report's nested subqueries", "--scope", "column layout",
                  "--scope", "date bucketing", "--json")
    got = {e["rule"] for e in json.loads(cli.stdout)["learnings"]}
    assert {"Put each selected column on its own line.", "Bucket timestamps by month with DATE_TRUNC."} <= got
    human = run_cli("recall", SKILL, "What is a good name for a cat?").stdout
    assert "ALWAYS" in human and "other scopes (fetch one with --scope): " in human


def test_revise_sets_and_clears_the_mark_in_one_commit_each(store: Path) -> None:
    before = git(store, "rev-parse", "HEAD").stdout
    marked = revise(SKILL, "L1", always=True)
    assert marked["status"] == "committed" and "every task" in marked["confirmation"]
    assert git(store, "rev-list", "--count", f"{before.strip()}..HEAD").stdout.strip() == "1"
    assert ("Put each selected column on its own line.", True) in returned(recall(SKILL, "a cat's name"))
    assert revise(SKILL, "L1", always=True)["status"] == "noop"
    state = tree_state(store)
    with pytest.raises(WhetstoneError, match="call of its own"):
        revise(SKILL, "L1", "reinforce", always=False)
    with pytest.raises(WhetstoneError, match="always must be true or false"):
        revise(SKILL, "L1", always="yes")
    assert tree_state(store) == state
    cleared = run_cli("revise", SKILL, "L1", "--scoped", "--json")
    assert json.loads(cleared.stdout)["status"] == "committed"
    assert "applies" not in next((store / "learnings").glob("column-layout-*.md")).read_text()
    assert git(store, "show", "--numstat", "--format=", "HEAD").stdout.split("\t")[:2] == ["0", "1"]  # one line out
    refused = run_cli("revise", SKILL, "L1")
    assert refused.returncode == 2 and "--always / --scoped" in refused.stderr


def test_capturing_a_stored_rule_with_always_marks_it(store: Path) -> None:
    again = capture(SKILL, "learning", "Put each selected column on its own line.", "column layout", always=True)
    assert again["status"] == "reinforced" and again["recurrence"] == 2
    assert "marked it for every task" in again["confirmation"]
    issue = capture(SKILL, "issue", "Never write SELECT star in a saved query.", "column selection", always=True)
    assert issue["status"] == "committed" and issue["entry_id"] == "I1"
    flags = {rule: always for rule, always in returned(recall(SKILL, "a cat's name"))}
    assert flags["Put each selected column on its own line."] and flags["Never write SELECT star in a saved query."]
    shown = json.loads(run_cli("show", SKILL, "I1", "--json").stdout)
    assert shown["issues"][0]["always"] is True
    assert "always (every task)" in run_cli("show", SKILL).stdout


def test_a_hand_written_mark_is_read_and_a_bad_value_refused(store: Path) -> None:
    path = next((store / "learnings").glob("date-bucketing-*.md"))
    path.write_text(path.read_text().replace("- scope: date bucketing\n", "- scope: date bucketing\n- applies: always\n"))
    git(store, "commit", "-qam", "mark by hand")
    assert ("Bucket timestamps by month with DATE_TRUNC.", True) in returned(recall(SKILL, "a cat's name"))
    path.write_text(path.read_text().replace("- applies: always", "- applies: mostly"))
    refused = git(store, "commit", "-qam", "bad mark", check=False)
    assert refused.returncode != 0 and "applies takes only 'always'" in refused.stderr


def test_the_mcp_tools_take_always_and_scopes(served) -> None:  # noqa: F811
    skill = "mcp-always"
    made = served.call("capture", skill=skill, polarity="issue", body="Answer in British English.",
                       scope="language", provenance="colour, not color", always=True)
    assert made["status"] == "committed" and made["always"] is True
    served.call("capture", skill=skill, polarity="learning", body="Bold the header row.", scope="headers",
                provenance="")
    got = served.call("recall", skill=skill, intent="Plan a trip to Rome")
    assert [e["always"] for e in got["issues"]] == [True] and got["other_scopes"] == {"headers": 1}
    fetched = served.call("recall", skill=skill, intent="Plan a trip to Rome", scopes=["headers"])
    assert [e["rule"] for e in fetched["learnings"]] == ["Bold the header row."]
    cleared = served.call("revise", skill=skill, entry_id="I1", always=False)
    assert cleared["status"] == "committed"
    after = served.call("recall", skill=skill, intent="Plan a trip to Rome")
    assert not any(e["always"] for e in after["learnings"] + after["issues"])
    assert "always" in served.error("revise", skill=skill, entry_id="I1", always="maybe")  # an MCP error, not a crash


def test_the_mark_travels_with_a_rule_through_packs_the_global_layer_and_compact(store: Path, tmp_path: Path,
                                                                                 monkeypatch) -> None:
    from git_whetstone.ops.upkeep.compact import compact
    from git_whetstone.ops.upkeep.global_layer import promote
    from git_whetstone.ops.sharing.exchange import export, import_pack

    pack = tmp_path / "sql.tar.gz"
    export(SKILL, str(pack))
    import_pack("sql-copy", str(pack))
    copied = {e["rule"]: e["always"] for e in recall("sql-copy", "a cat's name")["learnings"] + recall(
        "sql-copy", "a cat's name")["issues"]}
    assert {rule for rule, always in copied.items() if always} == {rule for _, rule, _ in EVERY}
    # compact: a marked learning never retires, however old
    monkeypatch.setenv("WHETSTONE_TODAY", "2031-01-01")
    changes = compact(SKILL)["changes"]
    assert sorted(c.split(" (")[0] for c in changes if c.startswith("retire")) == ["retire L1", "retire L2", "retire L3"]
    # the global layer: a rule for every task of every skill
    promote(SKILL, "L4", always=True)  # "End every statement with a semicolon." (always; it holds for every skill)
    elsewhere = recall("another-skill", "Plan a trip to Rome")
    assert [(e["rule"], e["origin"], e["always"]) for e in elsewhere["learnings"]] == [
        ("End every statement with a semicolon.", "global", True)]


def test_an_import_or_a_promote_that_meets_the_rule_unmarked_marks_it(store: Path, tmp_path: Path) -> None:
    """The review's case: the rule is already in the target, unmarked; the pack's (or the skill's)
    copy is marked. The mark is not lost: the target's copy takes it."""
    from git_whetstone.ops.upkeep.global_layer import promote
    from git_whetstone.ops.sharing.exchange import export, import_pack

    pack = tmp_path / "sql.tar.gz"
    export(SKILL, str(pack))
    capture("sql-copy", "issue", "Target the Postgres dialect whatever the warehouse.", "dialect")  # unmarked
    result = import_pack("sql-copy", str(pack))
    assert result["counts"]["marked"] == 1 and result["marked"][0]["rule"].startswith("Target the Postgres")
    flags = {e["rule"]: e["always"] for e in recall("sql-copy", "a cat's name")["issues"]}
    assert flags["Target the Postgres dialect whatever the warehouse."] is True
    assert import_pack("sql-copy", str(pack))["status"] == "unchanged"  # idempotent
    # the global layer already holds the rule, unmarked; the skill's marked copy is promoted into it
    capture("__global__", "learning", "End every statement with a semicolon.", "statement endings")
    promote(SKILL, "L4", always=True)
    elsewhere = recall("another-skill", "Plan a trip to Rome")
    assert [(e["rule"], e["always"]) for e in elsewhere["learnings"]] == [("End every statement with a semicolon.", True)]


def test_supervised_asks_before_marking_an_issue_it_already_holds(store: Path, monkeypatch) -> None:
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "supervised")
    before = tree_state(store)
    asked = capture(SKILL, "issue", "Never write SELECT star in a saved query.", "column selection", always=True)
    assert asked["status"] == "needs_confirmation" and "confirm='yes'" in asked["prompt"]
    assert tree_state(store) == before
    done = capture(SKILL, "issue", "Never write SELECT star in a saved query.", "column selection", always=True,
                   confirm="yes")
    assert done["status"] == "committed" and done["entry_id"] == "I1"


def test_named_scopes_come_back_whole_and_a_rule_in_both_layers_once(store_root: Path, monkeypatch) -> None:
    """A named scope's entries are returned on their own, not put through MMR against the intent's
    matches (where they would lose); a rule held by the skill and by the global layer comes back
    once, the skill's copy, whether either is marked."""
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "autonomous")
    words = ["amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
             "kestrel", "lagoon", "meadow", "nutmeg"]
    for word in words:
        assert capture("big", "learning", f"Axis label fonts on {word} charts use the {word} style",
                       "axis labels")["status"] == "committed"
    for word in words[:6]:
        assert capture("big", "learning", f"Put the legend of {word} stacked bars where {word} readers look",
                       "legend placement")["status"] == "committed"
    result = recall("big", "axis label fonts on the chart", learnings_k=3, scopes=["legend placement"])
    legend = [e for e in result["learnings"] if e["scope"] == "legend placement"]
    assert len(legend) == 6, result["learnings"]
    assert "legend placement" not in result["other_scopes"]
    # one rule in both layers: once, the skill's (marked in the skill, scoped in the global layer)
    capture("big", "issue", "Never use a 3D chart.", "chart type", always=True)
    capture("__global__", "issue", "Never use a 3D chart.", "chart type")
    rules = [(e["rule"], e["origin"]) for e in recall("big", "a 3D chart type for the sales figures")["issues"]]
    assert rules == [("Never use a 3D chart.", "skill")], rules
    # and the other way round: scoped in the skill, marked in the global layer
    capture("big2", "issue", "Never draw pie charts.", "chart type")
    capture("__global__", "issue", "Never draw pie charts.", "pie charts", always=True)
    rules = [(e["rule"], e["origin"]) for e in recall("big2", "draw pie charts of the market share")["issues"]]
    assert rules.count(("Never draw pie charts.", "skill")) == 1 and ("Never draw pie charts.", "global") not in rules


def test_a_scope_whose_only_returned_entry_is_always_on_is_still_listed(store: Path) -> None:
    capture(SKILL, "learning", "Mention the dialect in a comment at the top.", "dialect")
    result = recall(SKILL, "What is a good name for a cat?")
    assert result["other_scopes"].get("dialect") == 1  # its always-on issue came back, not this learning


def test_the_cli_flags_set_and_show_the_mark(store: Path) -> None:
    made = json.loads(run_cli("capture", SKILL, "Quote identifiers only when they need it.", "--scope", "quoting",
                              "--always", "--json").stdout)
    assert made["status"] == "committed" and made["always"] is True
    assert "(length, for every task)" in run_cli("capture", "other", "Keep it short.", "--scope", "length",
                                                  "--always").stdout
    marked = run_cli("revise", SKILL, "L1", "--always")
    assert marked.returncode == 0 and marked.stdout.startswith("committed: Whetstone marked L1")
    shown = json.loads(run_cli("recall", SKILL, "What is a good name for a cat?", "--json").stdout)
    assert {e["rule"] for e in shown["learnings"] + shown["issues"] if e["always"]} >= {
        "Quote identifiers only when they need it.", "Put each selected column on its own line."}


def test_a_session_start_keeps_recall_s_budget_and_counts_what_it_leaves_out_by_kind(store: Path,
                                                                                    monkeypatch) -> None:
    monkeypatch.setenv("WHETSTONE_ALWAYS_K", "1")
    start = json.dumps({"hook_event_name": "SessionStart", "source": "startup", "cwd": str(store)})
    shown = api.context([SKILL], hook=start)
    assert "ALWAYS I2 [dialect]: Target the Postgres dialect" in shown["text"]  # issues first
    assert "semicolon" not in shown["text"] and shown["omitted"] == 1
    event = [json.loads(line) for line in (store / "events.jsonl").read_text().splitlines()][-1]
    assert event["intent"] == "(session start)" and event["issues"] == ["I2"] and event["learnings"] == []
    assert event["omitted"] == {"learnings": 1, "issues": 0}  # the learning left out, counted as one


def test_a_session_start_of_two_skills_shows_each_its_own_rules_beside_the_global_ones(store_root: Path,
                                                                                        monkeypatch) -> None:
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "autonomous")
    monkeypatch.setenv("WHETSTONE_ALWAYS_K", "2")
    capture("__global__", "issue", "Never put a secret in a query.", "secrets", always=True)
    capture("tables", "learning", "Right-align every number column.", "alignment", always=True)
    capture("charts", "learning", "Start every bar axis at zero.", "axes", always=True)
    capture("charts", "learning", "Label every axis with its unit.", "axis labels", always=True)
    start = json.dumps({"hook_event_name": "SessionStart", "source": "startup", "cwd": str(store_root)})
    shown = api.context(["tables", "charts"], hook=start)["text"]
    assert shown.count("Never put a secret in a query.") == 1  # the global rule, once, in the first section
    # the second skill's places go to its own rules, not to the global one already shown
    assert "Start every bar axis at zero." in shown and "Label every axis with its unit." in shown
    monkeypatch.setenv("WHETSTONE_ALWAYS_K", "0")  # no always-on rule wanted: nothing said, nothing logged
    assert api.context(["tables"], hook=start)["runs"] == []
