""""Both hold", remembered in the markdown (SPEC §3 `differs_from`), and one revise call that settles
a pair (SPEC §4 revise `same` / `replace` / `distinct` with `target`): through the library, the
real CLI, the MCP server and real git (the pre-commit hook, `git revert`, a merge's re-mint).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from git_whetstone.base.errors import WhetstoneError
from git_whetstone.format import blocks, edits, merging
from git_whetstone.format import entry as entry_mod
from git_whetstone.format.entry import Entry, differs
from git_whetstone.index import rows as rows_mod
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.writing.revise import revise
from git_whetstone.ops.workspace import Workspace

from ..helpers import Machine, bare, git, run_cli, tree_state
from ..doors.test_mcp import served  # noqa: F401  (the module's shared server)

SKILL = "price-tables"
RULES = [  # (kind, rule, scope): L1, L2, I1, L3, L4 in this order
    ("learning", "Put the currency symbol before the amount.", "currency formatting"),
    ("learning", "Band alternate rows in light grey.", "row banding"),
    ("issue", "Never round the corners of a table.", "corner radius"),
    ("learning", "Show negative amounts in parentheses.", "currency formatting"),
    ("learning", "Bold the header row.", "headers"),
]
LEARNING = """## L3 · Put the currency symbol before the amount
- recurrence: 2
- first_seen: 2026-05-02
- last_seen: 2026-09-14
- scope: currency formatting
- applies: always
- differs_from: L7, L12, I2
- provenance: "2026-05-02 — 'the $ goes first'"

Put the currency symbol before the amount.
"""


@pytest.fixture
def store(store_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "autonomous")
    for kind, rule, scope in RULES:
        assert capture(SKILL, kind, rule, scope, f"said: {rule[:12]}")["status"] == "committed"
    return store_root / SKILL


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def commits_since(repo: Path, before: str) -> list[str]:
    return git(repo, "log", "--format=%s", f"{before}..HEAD").stdout.splitlines()


def entries(skill: str = SKILL) -> dict[str, Entry]:
    """Every entry of the skill as the index gives it, by id."""
    ws = Workspace.of()
    snap = ws.snapshot(ws.store(skill))
    return {e.id: e for e in (snap.entries[row] for row in range(snap.size) if snap.alive[row])}


def file_of(store: Path, scope: str, folder: str = "learnings") -> Path:
    found = [p for p in (store / folder).glob("*.md") if f"- scope: {scope}\n" in p.read_text()]
    assert len(found) == 1, found
    return found[0]


# --- the field in the markdown ----------------------------------------------------------------------

def test_a_block_with_differs_from_reads_and_writes_back_byte_for_byte() -> None:
    parsed = blocks.parse(LEARNING, "learnings/x.md", "learnings")
    assert parsed.errors == []
    block = parsed.blocks[0]
    assert block.differs == ("L7", "L12", "I2") and block.always
    assert edits.render(block.id, block.title, block.fields, block.body) == LEARNING == block.raw
    assert edits.with_differs(block, ["I2", "L12", "L7"]) == LEARNING  # the same ids: not one byte moves
    # the one-match reader (what every read of a file as whetstone writes it takes) reads the field too
    (found,) = blocks.clean_blocks(LEARNING, "learnings")  # read off one match, as a build reads it
    assert found[4]["differs_from"] == "L7, L12, I2" and found[5] == ("2026-05-02 — 'the $ goes first'",)
    issue = edits.render("I2", "Never abbreviate", [("scope", "codes"), ("differs_from", "L3")], "Never abbreviate.")
    assert blocks.clean_blocks(issue, "issues")[0][4]["differs_from"] == "L3"
    assert blocks.parse(issue, "issues/y.md", "issues").blocks[0].differs == ("L3",)
    # a block without the field is untouched by a reader that knows it
    plain = LEARNING.replace("- differs_from: L7, L12, I2\n", "")
    assert blocks.parse(plain).blocks[0].raw == plain and blocks.parse(plain).blocks[0].differs == ()
    # as the index holds it: the ids, in the file's order, through its compressed JSON and back
    entry = entry_mod.entries_of([block], "learnings/x.md")[0]
    assert entry.differs == ("L7", "L12", "I2")
    assert entry_mod.clean_entries(blocks.clean_blocks(LEARNING, "learnings"), "learnings/x.md") == [entry]
    vectors = {entry.body: np.ones(4, np.float32), entry.scope: np.ones(4, np.float32)}
    rows = rows_mod.file_rows("stamp", [entry], None, vectors, 4)
    assert rows_mod.FileRows(rows.stamp, rows.scopes, rows.phrases, rows.sums, rows.columns, rows.top,
                             raw=rows.text()).entries == [entry]


def test_with_differs_adds_sorts_replaces_and_removes_one_line() -> None:
    plain = blocks.parse(LEARNING.replace("- differs_from: L7, L12, I2\n", "")).blocks[0]
    added = edits.with_differs(plain, ["I2", "L10", "L3", "L10"])
    assert added == LEARNING.replace("- differs_from: L7, L12, I2", "- differs_from: L3, L10, I2")  # after applies
    unmarked = blocks.parse(LEARNING.replace("- applies: always\n", "").replace("- differs_from: L7, L12, I2\n", ""))
    assert edits.with_differs(unmarked.blocks[0], ["L1"]).split("\n")[5] == "- differs_from: L1"  # after scope
    block = blocks.parse(LEARNING).blocks[0]
    assert edits.with_differs(block, []) == plain.raw
    # on a CRLF file the line written takes the file's line ending
    crlf = blocks.parse(LEARNING.replace("\n", "\r\n")).blocks[0]
    assert edits.with_differs(crlf, ["L1"]) == LEARNING.replace("L7, L12, I2", "L1").replace("\n", "\r\n")
    # after update_fields added provenance and with_always added its line
    text = edits.with_always(unmarked.blocks[0], True, edits.update_fields(unmarked.blocks[0], {}, "more"))
    assert edits.with_differs(unmarked.blocks[0], ["L9"], text).split("\n")[5:7] == ["- applies: always",
                                                                                       "- differs_from: L9"]


@pytest.mark.parametrize("value", ["L3,I2", "L3, ", "the price rule", "L03", "G:L3", "l3", "L3 I2", ""])
def test_a_malformed_differs_from_is_a_path_line_error(value: str) -> None:
    text = LEARNING.replace("L7, L12, I2", value)
    if not value:
        text = text.replace("- differs_from: \n", "- differs_from:\n")
    errors = [str(e) for e in blocks.parse(text, "learnings/x.md", "learnings").errors]
    assert errors == [f"learnings/x.md:7: differs_from takes entry ids separated by ', ' (e.g. 'L3, I2'), "
                      f"got '{value.strip()}'"]


def test_differs_holds_in_either_direction() -> None:
    def entry(bid: str, *named: str) -> Entry:
        return Entry(bid, "learning", "x.md", 1, "t", "s", "b", 1, None, None, (), False, named)

    a, b, c = entry("L1", "L2"), entry("L2"), entry("I3", "L9")
    assert differs(a, b) and differs(b, a)
    assert not differs(a, c) and not differs(c, b)


def test_a_merge_takes_the_union_of_ids_both_sides_added_and_one_sides_change_alone() -> None:
    def learning(*named: str, recurrence: int = 1) -> str:
        fields = [("recurrence", str(recurrence)), ("first_seen", "2026-11-01"), ("last_seen", "2026-11-01"),
                  ("scope", "currency")]
        if named:
            fields.append(("differs_from", ", ".join(named)))
        return edits.render("L1", "Dollars", fields, "Dollars.")

    base = learning("L4")
    text, conflicts = merging.merge_scope(base, learning("L4", "L9"), learning("I2", "L4"), "learnings/x.md")
    assert conflicts == [] and text == learning("L4", "L9", "I2")
    # both sides changed the block, only one its ids: that side's ids (a removal too)
    text, _ = merging.merge_scope(base, learning(recurrence=2), learning("L4", recurrence=3), "learnings/x.md")
    assert text == learning(recurrence=4)
    text, _ = merging.merge_scope(base, learning("L4", "L5"), base, "learnings/x.md")
    assert text == learning("L4", "L5")
    # minted on both sides as the same rule: every id either names
    text, _ = merging.merge_scope("", learning("L2"), learning("L3"), "learnings/x.md")
    assert text == learning("L2", "L3")


# --- revise with a target: the library --------------------------------------------------------------

def test_distinct_records_the_pair_once_in_one_commit(store: Path) -> None:
    before = head(store)
    done = revise(SKILL, "L3", "distinct", target="L1")
    assert done["status"] == "committed" and done["entry_id"] == "L3" and done["target"] == "L1"
    assert done["action"] == "distinct" and "both hold" in done["confirmation"]
    assert commits_since(store, before) == ["revise: L3 and L1 both hold"]
    text = file_of(store, "currency formatting").read_text()
    assert "- scope: currency formatting\n- differs_from: L1\n- provenance:" in text
    assert git(store, "show", "--numstat", "--format=", "HEAD").stdout.split("\t")[:2] == ["1", "0"]  # one line in
    assert entries()["L3"].differs == ("L1",) and differs(entries()["L1"], entries()["L3"])
    # recorded already, from either side: nothing written
    state = tree_state(store)
    assert revise(SKILL, "L3", "distinct", target="L1")["status"] == "noop"
    assert revise(SKILL, "L1", "distinct", target="L3")["status"] == "noop"
    assert tree_state(store) == state
    # another id joins the line, in id order
    revise(SKILL, "L3", "distinct", target="I1")
    revise(SKILL, "L3", "distinct", target="L2")
    assert "- differs_from: L1, L2, I1\n" in file_of(store, "currency formatting").read_text()
    assert run_cli("validate", SKILL).returncode == 0


def test_the_ids_survive_index_sqlite(store: Path) -> None:
    """What a new process loads from index.sqlite holds the ids too."""
    from git_whetstone.index import freshness

    revise(SKILL, "L3", "distinct", target="I1")
    for snap in freshness.LIVE.values():  # as a new process: nothing in memory, the index on disk
        freshness.close(snap)
    freshness.LIVE.clear()
    ws = Workspace.of()
    snap = ws.snapshot(ws.store(SKILL))
    assert snap.entries[snap.by_id["L3"]].differs == ("I1",)
    assert snap.entries[snap.by_id["L1"]].differs == ()

def test_same_folds_a_learning_into_a_learning_in_one_commit(store: Path, monkeypatch) -> None:
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "supervised")  # the caller has judged: no question, any mode
    revise(SKILL, "L4", always=True, confirm="yes")
    before = head(store)
    folded = revise(SKILL, "L4", "same", target="L1")
    assert folded["status"] == "committed" and folded["entry_id"] == "L1" and folded["recurrence"] == 2
    assert folded["removed_id"] == "L4" and folded["target"] == "L1"
    assert commits_since(store, before) == ["revise: fold L4 into L1 (currency formatting), recurrence 2"]
    now = entries()
    assert "L4" not in now and now["L1"].recurrence == 2 and now["L1"].always  # the mark stays with the survivor
    assert [p.split(" — ", 1)[1] for p in now["L1"].provenance] == [f"'said: {RULES[0][1][:12]}'",
                                                                    f"'said: {RULES[4][1][:12]}'"]
    assert not list((store / "learnings").glob("headers-*.md"))  # its only entry went: so did the file
    assert run_cli("validate", SKILL).returncode == 0


def test_same_in_one_file_and_replace_keep_every_other_byte(store: Path) -> None:
    path = file_of(store, "currency formatting")
    text = path.read_text()
    l1, l3 = blocks.parse(text, "learnings/x.md", "learnings").blocks
    before = head(store)
    replaced = revise(SKILL, "L3", "replace", target="L1")
    assert replaced["status"] == "committed" and replaced["entry_id"] == "L3" and replaced["replaced_id"] == "L1"
    assert commits_since(store, before) == ["revise: L3 replaces L1 (currency formatting)"]
    assert path.read_text() == l3.raw and "L1" not in entries()
    # the other order: the survivor first in its file, the folded entry after it
    git(store, "revert", "--no-edit", "HEAD")
    assert path.read_text() == text
    folded = revise(SKILL, "L3", "same", target="L1")
    assert folded["entry_id"] == "L1"
    after = blocks.parse(path.read_text(), "learnings/x.md", "learnings").blocks
    assert [b.id for b in after] == ["L1"] and after[0].recurrence == 2
    assert path.read_text() == edits.update_fields(l1, {"recurrence": "2", "last_seen": l1.get("last_seen")},
                                                    l3.provenance).rstrip("\n") + "\n"


def test_same_hardens_a_learning_stated_as_an_issue_and_leaves_an_issue_target_as_it_is(store: Path) -> None:
    issue = capture(SKILL, "issue", "Never show the currency code after an amount.", "currency formatting",
                    "it must be first")["entry_id"]
    assert issue == "I2"
    before = head(store)
    folded = revise(SKILL, issue, "same", target="L1")
    assert folded["status"] == "committed" and folded["entry_id"] == "I3" and folded["replaced_id"] == "L1"
    assert commits_since(store, before) == [f"revise: fold {issue} into L1 (currency formatting), now the issue I3"]
    now = entries()
    assert issue not in now and "L1" not in now
    assert now["I3"].body == "Never show the currency code after an amount."  # worded as the issue, as capture does
    assert any("promoted from L1" in p for p in now["I3"].provenance) and now["I3"].provenance[-1].endswith(
        "it must be first'")
    # an issue target stays as it is; the learning folded into it goes
    state_of_issue = file_of(store, "corner radius", "issues").read_text()
    before = head(store)
    assert revise(SKILL, "L2", "same", target="I1")["entry_id"] == "I1"
    assert commits_since(store, before) == ["revise: fold L2 into I1 (corner radius)"]
    assert file_of(store, "corner radius", "issues").read_text() == state_of_issue and "L2" not in entries()


def test_a_target_is_checked_before_anything_is_touched(store: Path) -> None:
    state = tree_state(store)
    cases = [
        (dict(action="same"), "same needs a target"),
        (dict(action="distinct", target=""), "distinct needs a target"),
        (dict(action="reinforce", target="L1"), "target goes only with same, replace, distinct"),
        (dict(always=True, target="L1"), "target goes only with"),
        (dict(action="replace", target="L3"), "target is L3 itself"),
        (dict(action="replace", target="l3"), "target is L3 itself"),
        (dict(action="same", target="L99"), "unknown entry id L99 in price-tables"),
        (dict(action="same", target="banana"), "unknown entry id 'banana' for target"),
        (dict(action="same", target=3), "unknown entry id 3 for target"),
        (dict(action="same", target="G:L1"), "G:L1 is in the global layer and L3 is not"),
        (dict(action="same", target="L1", body="Put it first."), "same takes no body or scope"),
        (dict(action="explode", target="L1"), "unknown action 'explode'"),
    ]
    for kwargs, message in cases:
        with pytest.raises(WhetstoneError, match=message.replace("(", r"\(")) as raised:
            revise(SKILL, "L3", **kwargs)
        assert "\n" not in raised.value.message
    with pytest.raises(WhetstoneError, match="G:L3 is in the global layer and L1 is not"):
        revise(SKILL, "G:L3", "same", target="L1")
    with pytest.raises(WhetstoneError, match="unknown entry id L99"):
        revise(SKILL, "L99", "distinct", target="L1")
    assert tree_state(store) == state


def test_both_global_ids_settle_a_pair_in_the_global_layer(store: Path) -> None:
    from git_whetstone.format.layout import GLOBAL
    from git_whetstone.ops.upkeep.global_layer import promote

    promote(SKILL, "L1")
    promote(SKILL, "L3")
    layer = store.parent / GLOBAL
    recorded = revise("any-skill", "G:L2", "distinct", target="g:L1")
    assert recorded["status"] == "committed" and recorded["target"] == "L1"
    assert "- differs_from: L1\n" in file_of(layer, "currency formatting").read_text()
    assert git(layer, "log", "-1", "--format=%s").stdout.strip() == "revise: L2 and L1 both hold"


# --- the CLI and the MCP tool -----------------------------------------------------------------------

def test_the_cli_settles_a_pair_and_refuses_a_missing_target(store: Path) -> None:
    before = head(store)
    done = run_cli("revise", SKILL, "L3", "distinct", "--target", "L1", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "committed" and result["target"] == "L1" and result["entry_id"] == "L3"
    assert commits_since(store, before) == ["revise: L3 and L1 both hold"]
    human = run_cli("revise", SKILL, "L4", "same", "--target", "L1")
    assert human.returncode == 0 and human.stdout.startswith("committed: Whetstone folded L4 into L1")
    for args, message in ((["L3", "replace"], "replace needs a target"),
                          (["L3", "weaken", "--target", "L1"], "target goes only with same, replace, distinct"),
                          (["L3", "distinct", "--target", "L3"], "target is L3 itself")):
        refused = run_cli("revise", SKILL, *args)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused
        assert refused.stderr.startswith("git whetstone: ") and message in refused.stderr
    helped = run_cli("revise", "--help").stdout
    assert "--target ID" in helped and "same --target L3" in helped
    assert "\\-\\-target" in (Path(__file__).parent.parent.parent / "man" / "git-whetstone.1").read_text()


def test_the_mcp_revise_tool_takes_a_target(served) -> None:  # noqa: F811
    skill = "mcp-differs"
    for body, scope in (("Put the currency symbol before the amount.", "currency"),
                        ("Show negative amounts in parentheses.", "negative numbers"),
                        ("Bold the header row.", "headers")):
        assert served.call("capture", skill=skill, polarity="learning", body=body, scope=scope,
                           provenance="")["status"] == "committed"
    tools = {t.name: t for t in served.portal.call(served.client.list_tools).tools}
    schema = tools["revise"].input_schema["properties"]
    assert "same/replace/distinct" in schema["target"]["description"]
    assert {"same", "replace", "distinct"} <= set(schema["action"]["enum"])
    recorded = served.call("revise", skill=skill, entry_id="L2", action="distinct", target="L1")
    assert recorded["status"] == "committed" and recorded["target"] == "L1"
    folded = served.call("revise", skill=skill, entry_id="L3", action="same", target="L1")
    assert folded["entry_id"] == "L1" and folded["removed_id"] == "L3"
    assert "needs a target" in served.error("revise", skill=skill, entry_id="L2", action="replace")
    assert "unknown entry id L9" in served.error("revise", skill=skill, entry_id="L2", action="same", target="L9")
    assert git(served.root / skill, "log", "-2", "--format=%s").stdout.splitlines() == [
        "revise: fold L3 into L1 (currency), recurrence 2", "revise: L2 and L1 both hold"]


# --- real git -----------------------------------------------------------------------------------------

def test_a_hand_written_differs_from_goes_through_the_hook_and_a_malformed_one_is_refused(store: Path) -> None:
    path = file_of(store, "row banding")
    good = path.read_text().replace("- scope: row banding\n", "- scope: row banding\n- differs_from: L1\n")
    path.write_text(good)
    git(store, "commit", "-qam", "L2 and L1 both hold, by hand")
    assert entries()["L2"].differs == ("L1",)
    path.write_text(good.replace("- differs_from: L1", "- differs_from: L1 and L3"))
    before = head(store)
    refused = git(store, "commit", "-qam", "bad", check=False)
    assert refused.returncode == 1 and head(store) == before
    message = (f"learnings/{path.name}:6: differs_from takes entry ids separated by ', ' (e.g. 'L3, I2'), "
               f"got 'L1 and L3'")
    assert message in refused.stderr
    validated = run_cli("validate", SKILL)
    assert validated.returncode == 1 and message in validated.stdout + validated.stderr
    # an id that no longer exists is no error
    path.write_text(good.replace("- differs_from: L1", "- differs_from: L1, L77"))
    git(store, "commit", "-qam", "a gone id")
    assert entries()["L2"].differs == ("L1", "L77")


def test_reverting_a_distinct_takes_the_line_out_again(store: Path) -> None:
    path = file_of(store, "row banding")
    text = path.read_text()
    revise(SKILL, "L2", "distinct", target="I1")
    assert "- differs_from: I1\n" in path.read_text()
    git(store, "revert", "--no-edit", "HEAD")
    assert path.read_text() == text and entries()["L2"].differs == ()


def _pull(b: Machine, rebase: bool) -> None:
    proc = subprocess.run(["git", "pull", "-q", "--rebase" if rebase else "--no-rebase", "--no-edit"], cwd=b.path,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "re-mint" in proc.stderr, proc.stderr


@pytest.mark.parametrize("how", ["sync", "pull", "rebase"])
def test_a_re_mint_moves_the_references_to_the_entry_that_was_re_minted(tmp_path: Path, how: str) -> None:
    """L2 is minted on both machines for different rules. Each machine records "both hold" about its
    own L2 (A on its L3, B on L1, which both sides share). After the merge, one L2 keeps the id and
    the other is re-minted: each reference names the copy it was written about."""
    from git_whetstone.ops.sync.remotes import remote
    from git_whetstone.ops.sync.sync import sync

    a, b = Machine(tmp_path / "a"), Machine(tmp_path / "b")
    a.learn("Heat-map msrp with a warm palette", "color encoding")
    origin = bare(tmp_path)
    remote(a.skill, "add", str(origin), config=a.config)
    assert sync(a.skill, config=a.config)["stores"][0]["status"] == "pushed"
    remote(b.skill, "add", str(origin), config=b.config)
    a.learn("Band alternate rows in light grey", "row banding")          # A's L2
    a.learn("Sort rows by price, highest first", "sorting")             # A's L3
    revise(a.skill, "L3", "distinct", target="L2", config=a.config)     # about A's L2
    b.learn("Set the body font to a monospace face", "fonts")           # B's L2
    revise(b.skill, "L1", "distinct", target="L2", config=b.config)     # about B's L2
    assert sync(a.skill, config=a.config)["stores"][0]["status"] == "pushed"
    if how == "sync":
        merged = sync(b.skill, config=b.config)["stores"][0]
        assert merged["status"] == "merged", merged
    else:
        _pull(b, rebase=how == "rebase")
    found = b.entries()
    kept, moved = found["Band alternate rows in light grey"][0], found["Set the body font to a monospace face"][0]
    assert {kept, moved} == {"L2", "L4"}  # which one keeps L2 is the content hash's call
    new_of = {"A": kept, "B": moved}  # the id each machine's L2 has now
    got = {e.body: e.differs for e in entries_at(b)}
    assert got["Sort rows by price, highest first"] == (new_of["A"],)
    assert got["Heat-map msrp with a warm palette"] == (new_of["B"],)
    assert run_cli("--store-root", str(b.root), "validate", b.skill).returncode == 0
    assert git(b.path, "status", "--porcelain").stdout == ""


def test_both_sides_naming_their_own_copy_name_both_after_the_merge(tmp_path: Path) -> None:
    from git_whetstone.ops.sync.remotes import remote
    from git_whetstone.ops.sync.sync import sync

    a, b = Machine(tmp_path / "a"), Machine(tmp_path / "b")
    a.learn("Heat-map msrp with a warm palette", "color encoding")
    origin = bare(tmp_path)
    remote(a.skill, "add", str(origin), config=a.config)
    sync(a.skill, config=a.config)
    remote(b.skill, "add", str(origin), config=b.config)
    a.learn("Band alternate rows in light grey", "row banding")
    revise(a.skill, "L1", "distinct", target="L2", config=a.config)
    b.learn("Set the body font to a monospace face", "fonts")
    revise(b.skill, "L1", "distinct", target="L2", config=b.config)
    sync(a.skill, config=a.config)
    assert sync(b.skill, config=b.config)["stores"][0]["status"] == "merged"
    got = {e.body: e.differs for e in entries_at(b)}
    assert got["Heat-map msrp with a warm palette"] == ("L2", "L3")


def entries_at(machine: Machine) -> list[Entry]:
    """Every entry of a machine's store, as its index gives them."""
    ws = Workspace.of(machine.config)
    snap = ws.snapshot(ws.store(machine.skill))
    return [snap.entries[row] for row in range(snap.size) if snap.alive[row]]


# --- packs ---------------------------------------------------------------------------------------------

def test_an_import_carries_the_pairs_with_the_stores_ids(store: Path, tmp_path: Path) -> None:
    from git_whetstone.ops.sharing.exchange import export, import_pack

    revise(SKILL, "L3", "distinct", target="L1")
    revise(SKILL, "L4", "distinct", target="I1")
    path = file_of(store, "headers")
    path.write_text(path.read_text().replace("- differs_from: I1\n", "- differs_from: I1, L2, L88\n"))
    git(store, "commit", "-qam", "L4 and L2 both hold; L88 is long gone")
    pack = tmp_path / "prices.tar.gz"
    assert export(SKILL, str(pack))["learnings"] == 4
    # the target holds two of the rules already, under other ids
    capture("copy", "learning", "Bold the header row.", "headers", "x")                       # L1 = pack L4
    capture("copy", "learning", "Use a serif face for titles.", "titles", "x")                # L2
    capture("copy", "learning", "Put the currency symbol before the amount.", "currency formatting",
            "x")                                                                               # L3 = pack L1
    result = import_pack("copy", str(pack))
    assert result["status"] == "committed"
    new = {item["from"]: item["id"] for item in result["committed"]}
    met = {item["from"]: item["id"] for item in result["noop"] + result["reinforced"]}
    assert met == {"L1": "L3", "L4": "L1"} and set(new) == {"L2", "L3", "I1"}
    got = {e.id: e.differs for e in entries("copy").values()}
    assert got[new["L3"]] == ("L3",)            # pack L3 differs from pack L1, the copy's L3
    assert got[new["I1"]] == ("L1",)            # pack L4 (met as the copy's L1) differs from pack I1, written on I1
    assert got[new["L2"]] == ("L1",)            # pack L4 differs from pack L2 (added): written on the added one
    assert got["L1"] == () and got["L3"] == ()  # the entries the store held are left as they were
    assert all("L88" not in ids for ids in got.values())
    assert import_pack("copy", str(pack))["status"] == "unchanged"
    replaced = import_pack("fresh", str(pack), mode="replace")
    ids = {item["from"]: item["id"] for item in replaced["committed"]}
    got = {e.id: e.differs for e in entries("fresh").values()}
    assert got[ids["L3"]] == (ids["L1"],) and got[ids["L4"]] == (ids["L2"], ids["I1"])
