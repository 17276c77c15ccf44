"""compact, the global layer (promote), doctor and metrics, driven through the CLI."""
from __future__ import annotations

import json
from pathlib import Path

from git_whetstone.format import blocks, edits
from git_whetstone.format.layout import scope_filename
from tests.helpers import git, run_cli, tree_state


def ok(*args: str, **kwargs) -> dict:
    proc = run_cli(*args, "--json", **kwargs)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hand_write(store: Path, folder: str, scope: str, entries: list[tuple[str, str]], *, recurrence: int = 1,
               first: str = "2026-10-01", last: str = "2026-11-01", name: str | None = None) -> None:
    """Write a scope file as a person would (any spelling of the scope), and commit it."""
    text = ""
    for bid, body in entries:
        meta = [("recurrence", str(recurrence)), ("first_seen", first), ("last_seen", last)] if folder == "learnings" else []
        meta += [("scope", scope), ("provenance", blocks.encode_value(f"{first} — 'hand written'"))]
        text = edits.append(text, edits.render(bid, blocks.derive_title(body), meta, body))
    (store / folder / (name or scope_filename(scope))).write_text(text)
    git(store, "add", "-A")
    git(store, "commit", "-qm", f"hand: {scope}")


def test_compact_merges_scopes_and_duplicates_once(store_root: Path) -> None:
    env = {"WHETSTONE_TODAY": "2026-11-29", "WHETSTONE_HASHING_BAND": "1"}  # recall every rule that matches
    ok("attach", "tables")
    store = store_root / "tables"
    hand_write(store, "learnings", "currency formatting", [
        ("L1", "Format currency columns as US dollars with no decimal places"),
        ("L2", "Put negative amounts in parentheses")])
    hand_write(store, "learnings", "Currency formatting", [
        ("L3", "Format currency columns in US dollars, no decimal places")], name="currency-upper-1.md")
    hand_write(store, "learnings", "currency format", [
        ("L4", "Show negative amounts in parentheses"),
        ("L5", "Align the currency symbol to the left edge of the cell")], name="currency-format-2.md")
    hand_write(store, "issues", "corner radius", [("I1", "Never round table corners")])
    git(store, "fsck", "--strict")
    before = ok("recall", "tables", "currency formatting of the price columns", env=env)
    distinct_before = {"dollars", "parentheses", "symbol"}
    assert {w for w in distinct_before if any(w in e["rule"] for e in before["learnings"])} == distinct_before

    result = ok("compact", "tables", env=env)
    assert result["committed"] is True
    assert any("merge scope" in c for c in result["changes"])
    assert any(c.startswith("merge L3 into L1") for c in result["changes"])
    assert any(c.startswith("merge L4 into L2") for c in result["changes"])
    files = sorted(p.name for p in (store / "learnings").glob("*.md"))
    assert len(files) == 1, files
    text = (store / "learnings" / files[0]).read_text()
    assert text.count("## L") == 3 and "- scope: currency formatting\n" in text and "Currency formatting" not in text
    assert "- recurrence: 2\n" in text and "compact merged L3 into L1" in text
    subject = git(store, "log", "-1", "--format=%s%n%b").stdout
    assert subject.startswith("compact: ") and "merge L3 into L1" in subject
    after = ok("recall", "tables", "currency formatting of the price columns", env=env)
    assert {w for w in distinct_before if any(w in e["rule"] for e in after["learnings"])} == distinct_before
    assert (store / "compact-report.md").exists() and git(store, "status", "--porcelain").stdout == ""

    head = git(store, "rev-parse", "HEAD").stdout
    again = ok("compact", "tables", env=env)
    assert again["changes"] == [] and again["committed"] is False
    assert git(store, "rev-parse", "HEAD").stdout == head
    git(store, "fsck", "--strict")

    git(store, "revert", "--no-edit", "HEAD")  # one revert undoes the whole compaction
    assert len(list((store / "learnings").glob("*.md"))) == 3


def test_dry_run_changes_nothing(store_root: Path) -> None:
    ok("attach", "tables")
    store = store_root / "tables"
    hand_write(store, "learnings", "alpha", [("L1", "Bold the header row"), ("L2", "Make the header row bold")])
    before = tree_state(store)
    result = ok("compact", "tables", "--dry-run")
    assert result["dry_run"] and result["changes"] == ["merge L2 into L1 (alpha)"]
    assert tree_state(store) == before


def test_compact_keeps_apart_scopes_whose_names_differ_by_a_symbol(store_root: Path) -> None:
    ok("attach", "code")
    store = store_root / "code"
    hand_write(store, "learnings", "c++ style", [("L1", "Put the opening brace on its own line")])
    hand_write(store, "learnings", "c# style", [("L2", "Name private fields with a leading underscore")])
    hand_write(store, "learnings", "C++-style", [("L3", "Prefer std::array to C arrays")], name="cpp-again.md")
    changes = ok("compact", "code", "--dry-run")["changes"]
    assert [c for c in changes if c.startswith("merge scope")] == ["merge scope 'C++-style' into 'c++ style' (learnings)"]


def test_decayed_learnings_retire_by_compact_only_and_issues_never(store_root: Path) -> None:
    ok("attach", "tables")
    store = store_root / "tables"
    hand_write(store, "learnings", "old taste", [("L1", "Use a teal palette for every chart")],
               first="2020-01-01", last="2020-01-02")
    hand_write(store, "learnings", "fresh taste", [("L2", "Band alternate rows in light grey")],
               first="2026-11-01", last="2026-11-20")
    hand_write(store, "issues", "old rule", [("I1", "Never use 3D pie charts")])
    env = {"WHETSTONE_TODAY": "2026-11-29"}
    recalled = ok("recall", "tables", "teal palette for every chart", env=env)
    assert recalled["learnings"][0]["id"] == "L1" and recalled["learnings"][0]["weight"] < 0.01
    assert "## L1 " in next((store / "learnings").glob("old-taste-*.md")).read_text()  # recall never retires
    result = ok("compact", "tables", env=env)
    assert [c for c in result["changes"] if c.startswith("retire")] == [result["changes"][0]]
    assert result["changes"][0].startswith("retire L1")
    assert not list((store / "learnings").glob("old-taste-*.md"))  # emptied file deleted
    assert list((store / "issues").glob("*.md"))  # issues never retire
    assert ok("show", "tables", "L2")["learnings"]


def test_promote_to_global_reaches_other_skills_and_reverts(store_root: Path) -> None:
    ok("capture", "tables", "Write every date as ISO 8601, like 2026-11-29", "--scope", "dates")
    ok("capture", "slides", "Use a dark theme for every slide", "--scope", "theme")
    before = ok("recall", "slides", "dates shown on the slides")
    assert all(e["origin"] == "skill" for e in before["learnings"])

    refused = run_cli("promote", "tables", "L1")  # no terminal, no --yes: refused
    assert refused.returncode == 2 and "--yes" in refused.stderr
    moved = ok("promote", "tables", "L1", "--yes")
    assert moved["global_id"] == "G:L1"
    result = ok("recall", "slides", "dates shown on the slides")
    globals_ = [e for e in result["learnings"] if e["origin"] == "global"]
    assert [e["id"] for e in globals_] == ["G:L1"] and "ISO 8601" in globals_[0]["rule"]
    assert ok("show", "tables")["learnings"] == []
    glob = store_root / "__global__"
    assert "promoted from tables L1" in next((glob / "learnings").glob("*.md")).read_text()

    git(glob, "revert", "--no-edit", "HEAD")  # undo the promotion in both repositories
    git(store_root / "tables", "revert", "--no-edit", "HEAD")
    assert ok("show", "tables")["learnings"][0]["id"] == "L1"
    result = ok("recall", "slides", "dates shown on the slides")
    assert all(e["origin"] == "skill" for e in result["learnings"])
    for repo in (glob, store_root / "tables"):
        git(repo, "fsck", "--strict")
    git(glob, "revert", "--no-edit", "HEAD")  # and redo it: revert the revert
    revised = ok("revise", "slides", "G:L1", "reinforce")  # ids recall showed work in revise
    assert revised["skill"] == "__global__" and revised["recurrence"] == 2


def test_promoting_a_rule_for_every_task_asks_whether_it_holds_for_every_skill(store_root: Path) -> None:
    ok("capture", "memos", "Sign every memo with the team's name", "--scope", "sign-off", "--always")
    before = tree_state(store_root / "memos")
    asked = ok("promote", "memos", "L1", "--yes")  # --yes answers the move, not the mark
    assert asked["status"] == "needs_confirmation"
    assert "--always" in run_cli("promote", "memos", "L1", "--yes").stdout
    assert tree_state(store_root / "memos") == before
    assert not list((store_root / "__global__").glob("*/*.md"))  # nothing reached the global layer

    scoped = ok("promote", "memos", "L1", "--yes", "--scoped")
    assert scoped["status"] == "committed"
    text = next((store_root / "__global__" / "learnings").glob("*.md")).read_text()
    assert "applies: always" not in text
    assert not any(e.get("always") for e in ok("recall", "slides", "the colour of a chart's axis")["learnings"])

    ok("capture", "memos", "Date every memo in the first line", "--scope", "dates", "--always")
    kept = ok("promote", "memos", "L2", "--yes", "--always")
    assert kept["status"] == "committed"
    always = [e for e in ok("recall", "slides", "the colour of a chart's axis")["learnings"] if e.get("always")]
    assert [e["id"] for e in always] == [kept["global_id"]]


def test_global_duplicates_give_way_and_global_issues_conflict(store_root: Path) -> None:
    ok("capture", "tables", "Never use emoji in headings", "--scope", "headings", "--issue")
    ok("promote", "tables", "I1", "--yes")
    ok("capture", "docs", "Bold the first column", "--scope", "emphasis")
    # a capture that a global issue forbids is a conflict naming it
    clash = ok("capture", "docs", "Use emoji in headings", "--scope", "headings")
    assert clash["status"] == "conflict" and clash["conflicts_with"]["id"] == "G:I1"
    kept = ok("capture", "docs", "Use emoji in headings", "--scope", "headings", "--confirm", "new")
    assert kept["status"] == "committed"
    result = ok("recall", "docs", "headings with emoji")
    ids = [e["id"] for e in result["learnings"]] + [e["id"] for e in result["issues"]]
    assert "G:I1" in ids and kept["entry_id"] in ids
    assert any(set(c["ids"]) == {"G:I1", kept["entry_id"]} for c in result["conflicts"])
    # the same rule in the skill and the global layer: the skill's own entry wins, once
    ok("capture", "wiki", "Never use emoji in headings", "--scope", "headings", "--issue")
    result = ok("recall", "wiki", "headings with emoji")
    assert [e["id"] for e in result["issues"]] == ["I1"] and result["issues"][0]["origin"] == "skill"


def test_compact_all_reports_clusters_and_promote_cluster_enacts_one(store_root: Path) -> None:
    for skill in ("tables", "slides", "docs"):
        ok("capture", skill, "Write every date as ISO 8601", "--scope", "dates")
    ok("capture", "tables", "Right-align numeric columns", "--scope", "alignment")
    report = ok("compact", "--all")
    assert [s["skill"] for s in report["skills"]] == ["docs", "slides", "tables"]
    assert len(report["clusters"]) == 1
    cluster = report["clusters"][0]
    assert cluster["skills"] == ["docs", "slides", "tables"] and cluster["id"].startswith("C-")
    assert not (store_root / "__global__").exists()  # reporting writes nothing global
    assert ok("compact", "--all")["clusters"][0]["id"] == cluster["id"]  # stable
    done = ok("promote", "--cluster", cluster["id"], "--yes")
    assert done["global_id"] == "G:L1"
    for skill in ("tables", "slides", "docs"):
        assert "ISO 8601" not in json.dumps(ok("show", skill))
    text = next((store_root / "__global__" / "learnings").glob("*.md")).read_text()
    assert "- recurrence: 3\n" in text and text.count("promoted from") == 3
    missing = run_cli("promote", "--cluster", "C-00000000", "--yes")
    assert missing.returncode == 2 and "unknown cluster" in missing.stderr


def test_a_cluster_with_rules_for_every_task_asks_before_it_moves(store_root: Path) -> None:
    for skill in ("tables", "slides"):
        ok("capture", skill, "Write every date as ISO 8601", "--scope", "dates", "--always")
    ok("capture", "docs", "Write every date as ISO 8601", "--scope", "dates")
    cluster = ok("compact", "--all")["clusters"][0]["id"]
    before = {skill: tree_state(store_root / skill) for skill in ("tables", "slides", "docs")}
    asked = run_cli("promote", "--cluster", cluster, "--yes", "--json")
    question = json.loads(asked.stdout)
    assert question["status"] == "needs_confirmation" and question["cluster"] == cluster
    assert "L1 of slides applies to every task of slides, L1 of tables applies to every task of tables" \
        in question["prompt"]
    assert not list((store_root / "__global__").glob("*/*.md"))
    assert {skill: tree_state(store_root / skill) for skill in before} == before  # nothing moved
    done = ok("promote", "--cluster", cluster, "--yes", "--scoped")
    assert done["global_id"] == "G:L1"
    text = next((store_root / "__global__" / "learnings").glob("*.md")).read_text()
    assert "- applies: always" not in text and text.count("promoted from") == 3


def test_doctor(store_root: Path) -> None:
    missing = run_cli("doctor", "nope")
    assert missing.returncode == 1 and "claude mcp add whetstone" in missing.stdout
    ok("capture", "tables", "Bold the header row", "--scope", "headers")
    dead = run_cli("doctor", "tables", "--json")
    assert dead.returncode == 1 and json.loads(dead.stdout)["setup"]  # captures but never a recall
    ok("recall", "tables", "headers")
    healthy = run_cli("doctor", "tables", "--json")
    assert healthy.returncode == 0, healthy.stdout
    report = json.loads(healthy.stdout)
    assert report["healthy"] and not report["setup"]
    assert {c["name"] for c in report["checks"]} >= {"store", "markdown", "index", "backend", "recalls", "captures"}
    path = next((store_root / "tables" / "learnings").glob("*.md"))
    before = tree_state(store_root / "tables")
    path.write_text(path.read_text().replace("- recurrence: 1", "- recurrence: many"))
    broken = run_cli("doctor", "tables")
    assert broken.returncode == 1 and "recurrence must be a positive integer" in broken.stdout
    path.write_text(path.read_text().replace("- recurrence: many", "- recurrence: 1"))
    assert tree_state(store_root / "tables") == before  # doctor wrote nothing


def test_metrics_count_from_history(store_root: Path) -> None:
    ok("capture", "tables", "Bold the header row", "--scope", "headers")
    ok("capture", "tables", "Band alternate rows", "--scope", "banding")
    ok("capture", "tables", "Never round corners", "--scope", "corners", "--issue")
    ok("recall", "tables", "headers and banding")
    store = store_root / "tables"
    path = next((store / "learnings").glob("banding-*.md"))
    path.unlink()  # a hand deletion counts
    git(store, "commit", "-qam", "drop banding")
    ok("revise", "tables", "L1", "promote", "--confirm")
    m = ok("metrics", "tables")["skills"]["tables"]
    assert m["learnings_created"] == 2 and m["learnings"] == 0 and m["learnings_survived"] == 0
    assert m["promotions"] == 1 and m["runs"] == 1 and m["captures"]["committed"] == 3
    assert m["retrieval_precision"] is None
    text = run_cli("metrics", "tables").stdout
    assert "promotions" in text


def test_skill_and_global_share_one_budget(store_root: Path) -> None:
    for body in ("Band table rows in grey", "Bold the table header row", "Right-align numbers in a table"):
        ok("capture", "__global__", body, "--scope", "table style")
    for body in ("Put the table source note in italics", "Use thin table borders", "Table titles in sentence case"):
        ok("capture", "tables", body, "--scope", "table style", "--confirm", "new")
    result = ok("recall", "tables", "table style", "-k", "4")
    assert len(result["learnings"]) == 4 and result["omitted"]["learnings"] == 2
    assert {e["origin"] for e in result["learnings"]} == {"skill", "global"}
    assert ok("recall", "tables", "table style", env={"WHETSTONE_CONSULT_GLOBAL": "false"})["learnings"] \
        and all(e["origin"] == "skill" for e in ok("recall", "tables", "table style",
                                                    env={"WHETSTONE_CONSULT_GLOBAL": "false"})["learnings"])


def test_a_cluster_promotion_that_fails_part_way_is_undone_everywhere(store_root: Path) -> None:
    for skill in ("tables", "slides", "docs"):
        ok("capture", skill, "Write every date as ISO 8601", "--scope", "dates")
    cluster = ok("compact", "--all")["clusters"][0]
    hook = store_root / "tables" / ".git" / "hooks" / "pre-commit.whetstone-chained"
    hook.write_text("#!/bin/sh\necho 'tables says no' >&2\nexit 1\n")  # the user's own hook, chained
    hook.chmod(0o755)
    before = {s: tree_state(store_root / s) for s in ("tables", "slides", "docs", "__global__")}
    failed = run_cli("promote", "--cluster", cluster["id"], "--yes")
    assert failed.returncode == 1 and "undone" in failed.stderr, failed.stderr
    for skill in ("tables", "slides", "docs"):
        assert "ISO 8601" in json.dumps(ok("show", skill)), skill
        assert git(store_root / skill, "status", "--porcelain").stdout == ""
    assert ok("show", "__global__")["learnings"] == []
    assert git(store_root / "__global__", "status", "--porcelain").stdout == ""
    assert tree_state(store_root / "docs")["learnings/" + next(
        p.name for p in (store_root / "docs" / "learnings").glob("*.md"))] == \
        before["docs"]["learnings/" + next(p.name for p in (store_root / "docs" / "learnings").glob("*.md"))]


def test_promoting_what_the_global_layer_already_says_strengthens_it(store_root: Path) -> None:
    ok("capture", "tables", "Write every date as ISO 8601", "--scope", "dates")
    ok("capture", "slides", "Write every date as ISO 8601", "--scope", "dates")
    ok("promote", "tables", "L1", "--yes")
    again = ok("promote", "slides", "L1", "--yes")
    assert again["global_id"] == "G:L1"
    shown = ok("show", "__global__")["learnings"]
    assert len(shown) == 1 and shown[0]["recurrence"] == 2
    assert sum("promoted from" in p for p in shown[0]["provenance"]) == 2
    assert ok("show", "slides")["learnings"] == []


def test_compact_suggests_marking_rules_recalled_for_most_tasks(store_root: Path, monkeypatch) -> None:
    """A rule the store returns for most of the different tasks, or one the user says again in
    several runs, is listed for a person to mark for every task; nothing is marked by compact."""
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "autonomous")
    ok("capture", "tables", "Style the whole table in the house look: Inter font, grey rules", "--scope",
       "table style")
    ok("capture", "tables", "Band alternate rows in light grey", "--scope", "row banding")
    ok("capture", "tables", "Never round the corners of a table", "--scope", "corner radius", "--issue")
    ok("capture", "tables", "Always sort rows by revenue", "--scope", "sorting", "--always")
    for intent in ("table of car prices: style", "table style for the quarterly summary", "the table style of a KPI grid",
                   "a style for the revenue table", "table style: population by country", "zebra rows of a table"):
        ok("recall", "tables", intent)
    for run in ("r-1", "r-2", "r-3"):
        ok("capture", "tables", "Never round the corners of a table", "--scope", "corner radius", "--issue",
           "--run-id", run)
    store = store_root / "tables"
    before = tree_state(store)
    report = ok("compact", "tables", "--dry-run")["report"]
    why = {item["id"]: item["why"] for item in report["always"]}
    assert why.get("L1", "").startswith("recalled for ") and "of the 6 different tasks" in why["L1"], report["always"]
    assert why.get("I1") == "said again in 3 different runs in the last 90 days"
    assert "L2" not in why and "L3" not in why  # L3 is marked already; L2 came back for one task
    assert tree_state(store) == before
    text = run_cli("compact", "tables", "--dry-run").stdout
    assert "for every task? L1 (table style)" in text and "git whetstone revise tables L1 --always" in text


def test_compact_keeps_the_every_task_mark_when_it_merges_duplicates(store_root: Path) -> None:
    ok("attach", "tables")
    store = store_root / "tables"
    hand_write(store, "learnings", "table style", [("L1", "Use the Inter font in every table"),
                                                   ("L2", "Use the Inter font in every table.")])
    path = store / "learnings" / scope_filename("table style")
    text = path.read_text()
    at = text.index("## L2")
    path.write_text(text[:at] + text[at:].replace("- scope: table style\n", "- scope: table style\n- applies: always\n", 1))
    git(store, "commit", "-qam", "L2 holds for every task")
    result = ok("compact", "tables")
    assert result["changes"] == ["merge L2 into L1 (table style)"], result["changes"]
    merged = path.read_text()
    assert merged.count("## L") == 1 and "- scope: table style\n- applies: always\n" in merged
    assert run_cli("validate", "tables").returncode == 0
