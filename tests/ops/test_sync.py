"""Taste that follows you: stores synced across machines through git remotes, with the real git
binary, bare remotes in temp dirs and real clones. A "machine" is a store root of its own.

Every scenario ends with `git fsck --strict` on the repositories it touched.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from git_whetstone.format import blocks, checks
from git_whetstone.git import tree
from git_whetstone.ops.looking.browse import show
from git_whetstone.ops.writing.revise import revise
from git_whetstone.base.errors import WhetstoneError
from git_whetstone.ops.recall import recall
from git_whetstone.format.layout import GLOBAL, scope_filename
from git_whetstone.ops.writing.attach import attach
from git_whetstone.ops.sync.remotes import remote
from git_whetstone.ops.sync.sync import sync

from .. import helpers
from git_whetstone.store import events

from ..helpers import bare, git, run_cli, tree_state

SKILL = "great-tables"
INTENT = "styling a table: colors, currency, headers, alignment, sorting, fonts, corners, notes"


def fsck(*repos: Path) -> None:
    for repo in repos:
        proc = git(repo, "fsck", "--strict", "--no-dangling")
        assert proc.stdout.strip() == "" and proc.stderr.strip() == "", (repo, proc.stdout, proc.stderr)


class Machine(helpers.Machine):
    def sync(self, **kw) -> dict:
        return sync(self.skill, config=self.config, **kw)["stores"][0]

    def recall(self) -> dict:
        result = recall(self.skill, INTENT, config=self.config)
        result.pop("run_id")
        return result


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Machine, Machine, Path]:
    """Machine A with three older entries, pushed to a bare remote; machine B cloned from it."""
    a, b = Machine(tmp_path / "a"), Machine(tmp_path / "b")
    a.learn("Heat-map msrp with a warm palette", "color encoding")
    a.learn("Format the price column as US dollars", "currency formatting")
    a.learn("Never round the corners of a table", "corner radius", kind="issue")
    origin = bare(tmp_path)
    assert remote(SKILL, "add", str(origin), config=a.config)["status"] == "added"
    assert a.sync()["status"] == "pushed"
    cloned = remote(SKILL, "add", str(origin), config=b.config)
    assert cloned["status"] == "cloned" and cloned["created"]
    assert b.entries() == a.entries()
    return a, b, origin


A_NEW = [("Band alternate rows in light grey", "color encoding", "learning"),
         ("Bold the header row", "headers", "learning"),
         ("Right-align numeric columns", "alignment", "learning"),
         ("Show negative amounts in parentheses", "currency formatting", "learning"),
         ("Always put the source note under the table", "source notes", "issue")]
B_NEW = [("Use a colorblind-safe palette for categories", "color encoding", "learning"),
         ("Sort rows by price, highest first", "sorting", "learning"),
         ("Set the body font to a monospace face", "fonts", "learning"),
         ("Center the column labels over their columns", "alignment", "learning"),
         ("Never put a border around the title", "corner radius", "issue")]


def diverge(a: Machine, b: Machine) -> None:
    """Five captures on each machine (the same ids minted on both, some into the same files) and,
    on B, a reinforcement of one of A's older entries."""
    for body, scope, kind in A_NEW:
        a.learn(body, scope, kind)
    for body, scope, kind in B_NEW:
        b.learn(body, scope, kind)
    assert b.learn("Heat-map msrp with a warm palette", "color encoding")["status"] == "reinforced"


# --- what must hold --------------------------------------------------------------------------------

@pytest.mark.parametrize("first", ["A", "B"])
def test_captures_on_two_machines_both_survive_in_either_order(pair, first: str) -> None:
    a, b, origin = pair
    old = a.entries()
    diverge(a, b)
    order = [a, b, a, b] if first == "A" else [b, a, b, a]
    statuses = [m.sync()["status"] for m in order]
    assert statuses[0] == "pushed" and statuses[1] == "merged" and statuses[2] == "pulled"
    assert statuses[3] == "up_to_date"
    assert a.head() == b.head() == git(origin, "rev-parse", "main").stdout.strip()
    entries = a.entries()
    assert entries == b.entries()
    assert set(entries) == set(old) | {body for body, _, _ in A_NEW + B_NEW}  # the same 10 + old entries
    ids = [bid for bid, _ in entries.values()]
    assert len(ids) == len(set(ids)) == 13
    assert entries["Heat-map msrp with a warm palette"] == ("L1", 2)  # the reinforcement was kept
    assert {bid for body, (bid, _) in entries.items() if body in old} == {"L1", "L2", "I1"}
    # L3..L6 and I2 were minted on both machines: one of each pair was re-minted above them all
    reminted = {e["id"]: e["provenance"][-1] for e in show(SKILL, config=a.config)["learnings"]
                + show(SKILL, config=a.config)["issues"] if "re-minted from" in e["provenance"][-1]}
    assert set(reminted) == {"I3", "L7", "L8", "L9", "L10"}
    assert all(note.endswith("another entry was minted as " + note.split("re-minted from ")[1][:2]
                             + " on another machine") for note in reminted.values())
    assert json.loads((a.path / "next_ids.json").read_text()) == {"learning": 11, "issue": 4}
    merger = b if first == "A" else a  # the machine whose sync merged says which ids it re-minted
    said = [e for e in events.read(merger.path) if e["event"] == "remint"]
    assert [(e["via"], sorted(r["to"] for r in e["reminted"])) for e in said] == [("sync", sorted(reminted))]
    assert a.recall() == b.recall()
    for m in (a, b):
        assert run_cli("--store-root", str(m.root), "validate", SKILL).returncode == 0
        assert git(m.path, "status", "--porcelain").stdout == ""
    # ids never repeat later either: the next capture on each machine gets a fresh one
    assert a.learn("Put the units in the column label", "headers")["entry_id"] == "L11"
    assert b.learn("Use thin rules between row groups", "rules")["entry_id"] == "L11"  # (not yet synced)
    assert a.sync()["status"] == "pushed"
    later = b.sync()
    assert later["status"] == "merged" and [(r["from"], r["to"]) for r in later["reminted"]] == [("L11", "L12")]
    assert a.sync()["status"] == "pulled" and a.entries() == b.entries() and len(a.entries()) == 15
    fsck(a.path, b.path, origin)


def test_the_merge_is_the_same_whichever_machine_makes_it(pair, tmp_path: Path) -> None:
    """A merging B and B merging A give the same tree, so the merge of the two merges (two machines
    that synced at once, then again) is trivial."""
    a, b, origin = pair
    diverge(a, b)
    # a copy of both machines and their remote, to play the other order on
    a2, b2 = Machine(tmp_path / "a2"), Machine(tmp_path / "b2")
    shutil.copytree(a.root, a2.root, symlinks=True)
    shutil.copytree(b.root, b2.root, symlinks=True)
    origin2 = tmp_path / "remote2.git"
    shutil.copytree(origin, origin2, symlinks=True)
    for m in (a2, b2):
        git(m.path, "remote", "set-url", "origin", str(origin2))
    a.sync(), b.sync()        # B makes the merge
    b2.sync(), a2.sync()      # A makes it
    merged_by_b, merged_by_a = b.head(), a2.head()
    assert merged_by_b != merged_by_a
    assert git(b.path, "rev-parse", "HEAD^{tree}").stdout == git(a2.path, "rev-parse", "HEAD^{tree}").stdout
    # the two merges meet (each machine synced with a different copy of the remote): nothing to do
    git(b.path, "fetch", "-q", str(a2.path), "main")
    proc = git(b.path, "merge", "--no-edit", "FETCH_HEAD", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert git(b.path, "rev-parse", "HEAD^{tree}").stdout == git(a2.path, "rev-parse", "HEAD^{tree}").stdout
    assert git(b.path, "log", "-1", "--format=%P").stdout.split()[1] == merged_by_a
    fsck(a.path, b.path, a2.path, b2.path)


def test_a_hand_edit_and_a_capture_to_the_same_scope_file_merge_without_a_conflict(pair) -> None:
    a, b, origin = pair
    colors = scope_filename("color encoding")
    path = a.path / "learnings" / colors
    path.write_text(path.read_text().replace("Heat-map msrp with a warm palette\n",
                                             "Heat-map msrp with a warm YlOrBr palette\n"))
    git(a.path, "commit", "-qam", "Name the palette")
    b.learn("Use a colorblind-safe palette for categories", "color encoding")
    assert b.learn("Heat-map msrp with a warm palette", "color encoding")["status"] == "reinforced"
    assert a.sync()["status"] == "pushed"
    result = b.sync()
    assert result["status"] == "merged" and result["conflicts"] == [] and result["reminted"] == []
    assert a.sync()["status"] == "pulled"
    entries = a.entries()
    assert entries == b.entries()
    assert entries["Heat-map msrp with a warm YlOrBr palette"] == ("L1", 2)  # A's words, B's reinforcement
    assert entries["Use a colorblind-safe palette for categories"] == ("L3", 1)
    text = (b.path / "learnings" / colors).read_text()
    assert blocks.parse(text, colors, "learnings").errors == []
    assert text.index("## L1 ·") < text.index("## L3 ·")
    fsck(a.path, b.path, origin)


def clash(a: Machine, b: Machine) -> str:
    """A and B each change L1's body their own way and commit it; the scope file's name."""
    colors = scope_filename("color encoding")
    for m, palette in ((a, "red"), (b, "orange")):
        path = m.path / "learnings" / colors
        path.write_text(path.read_text().replace("a warm palette\n", f"a warm {palette} palette\n"))
        git(m.path, "commit", "-qam", f"say {palette}")
    return colors


def test_a_real_conflict_stops_with_a_clear_message_and_leaves_both_stores_valid(pair) -> None:
    a, b, origin = pair
    colors = clash(a, b)
    b.learn("Bold the header row", "headers")  # a change that merges cleanly rides along
    assert a.sync()["status"] == "pushed"
    before_b, before_a = b.head(), a.head()
    proc = b.cli("sync", SKILL)
    assert proc.returncode == 1 and proc.stdout == ""
    message = proc.stderr.strip()
    assert "\n" not in message
    assert message.startswith(f"sync of {SKILL} stopped on a conflict: both sides changed L1 differently "
                              f"(learnings/{colors})")
    assert f"git whetstone sync {SKILL} again" in message and "git merge --abort" in message
    # B: nothing committed, the merge waits; every commit is valid, and recall serves the committed L1
    assert b.head() == before_b and (b.path / ".git" / "MERGE_HEAD").exists()
    assert checks.check(tree.commit_files(b.path, "HEAD")) == []
    result = recall(SKILL, "color encoding", config=b.config)
    assert "Heat-map msrp with a warm orange palette" in [e["rule"] for e in result["learnings"]]
    assert any("unresolved merge conflict" in w for w in result["warnings"])
    proc = b.cli("validate", SKILL)
    assert proc.returncode == 1 and proc.stdout.startswith(f"learnings/{colors}:1: unresolved merge conflict marker\n")
    assert "duplicate id" not in proc.stdout and "text before" not in proc.stdout  # two versions of L1, not two L1s
    assert "hint: a merge left two versions of a block between <<<<<<< and >>>>>>>: keep the one you want" in proc.stderr
    # nothing else writes into the half-done merge, and sync says why
    proc = b.cli("capture", SKILL, "Set the body font to a monospace face", "--scope", "fonts")
    assert proc.returncode == 1 and "in the middle of a merge" in proc.stderr
    proc = b.cli("sync", SKILL)
    assert proc.returncode == 1 and "in the middle of a merge with conflicts in" in proc.stderr
    # A never saw any of it
    assert a.head() == before_a and a.entries()["Heat-map msrp with a warm red palette"] == ("L1", 1)
    # resolving: keep this side's version ("ours"), add, sync again
    path = b.path / "learnings" / colors
    text = path.read_text()
    start, middle, end = text.index("<<<<<<<"), text.index("\n=======\n"), text.index(">>>>>>>")
    resolved = text[:start] + text[start:middle].split("\n", 1)[1] + text[text.index("\n", end) + 1:]
    path.write_text(resolved)
    git(b.path, "add", "-A")
    done = b.sync()
    assert done["status"] == "merged" and done["sent"] >= 1
    assert a.sync()["status"] == "pulled"
    assert a.entries() == b.entries()
    assert a.entries()["Heat-map msrp with a warm orange palette"] == ("L1", 1)  # the version B kept
    assert "Bold the header row" in a.entries()
    fsck(a.path, b.path, origin)


def test_merge_abort_after_a_conflict_puts_the_store_back_as_it_was(pair) -> None:
    a, b, origin = pair
    clash(a, b)
    a.sync()
    before = tree_state(b.path)
    assert b.sync()["status"] == "conflict"
    git(b.path, "merge", "--abort")
    assert tree_state(b.path) == before
    assert run_cli("--store-root", str(b.root), "validate", SKILL).returncode == 0
    assert b.learn("Bold the header row", "headers")["status"] == "committed"
    fsck(b.path)


# --- what sync refuses -----------------------------------------------------------------------------

def test_sync_refuses_uncommitted_hand_edits_and_changes_nothing(pair) -> None:
    a, b, origin = pair
    a.learn("Bold the header row", "headers")
    a.sync()
    path = b.path / "learnings" / scope_filename("color encoding")
    path.write_text(path.read_text().replace("warm palette", "warm red palette"))
    before = tree_state(b.path)
    proc = b.cli("sync", SKILL)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"git whetstone: {SKILL} has uncommitted changes (learnings/"
                                   f"{scope_filename('color encoding')}): commit them (git commit -a in "
                                   f"{b.path}) or set them aside (git stash), then sync again")
    assert tree_state(b.path) == before
    (b.path / "learnings" / "new-by-hand.md").write_text("## L9 · x\n- scope: y\n")
    git(b.path, "checkout", "--", ".")
    assert "new-by-hand.md" in b.cli("sync", SKILL).stderr  # a scope file not yet added counts too
    (b.path / "learnings" / "new-by-hand.md").unlink()
    (b.path / "learnings" / ".notes.md.swp").write_text("editor state")  # not a scope file: no matter
    assert b.sync()["status"] == "pulled"
    fsck(b.path)


def test_sync_without_a_remote_or_store_is_a_clear_error(store_root: Path, tmp_path: Path) -> None:
    proc = run_cli("sync", SKILL)
    assert proc.returncode == 2 and "no store for skill 'great-tables'" in proc.stderr
    attach(SKILL)
    proc = run_cli("sync", SKILL)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"git whetstone: {SKILL} has no remote to sync with; add one: git whetstone remote {SKILL} add URL")
    assert run_cli("sync").returncode == 2 and run_cli("sync", SKILL, "--all").returncode == 2
    proc = run_cli("sync", SKILL, "--remote", "nowhere")
    assert proc.returncode == 2 and "no remote named nowhere" in proc.stderr


def test_a_failed_push_is_reported_and_the_merge_stays_local(pair) -> None:
    a, b, origin = pair
    a.learn("Bold the header row", "headers")
    b.learn("Sort rows by price, highest first", "sorting")
    a.sync()
    hook = origin / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pushes are closed today' >&2\nexit 1\n")
    hook.chmod(0o755)
    before = git(origin, "rev-parse", "main").stdout
    proc = b.cli("sync", SKILL)
    assert proc.returncode == 1 and "the push to origin failed" in proc.stderr
    assert git(origin, "rev-parse", "main").stdout == before
    assert set(b.entries()) >= {"Bold the header row", "Sort rows by price, highest first"}
    hook.unlink()
    assert b.sync()["status"] == "pushed"
    fsck(b.path, origin)


# --- merging, beyond the must-holds ----------------------------------------------------------------

def test_a_plain_git_pull_comes_to_the_same_tree_as_sync(pair, tmp_path: Path) -> None:
    """Without sync, git runs the drivers and the post-merge hook re-mints the ids both sides
    minted, in a commit of its own: the tree is the one sync makes in its merge commit."""
    a, b, origin = pair
    diverge(a, b)
    a.sync()
    copy = Machine(tmp_path / "copy")
    shutil.copytree(b.root, copy.root, symlinks=True)
    proc = subprocess.run(["git", "pull", "-q", "--no-rebase", "--no-edit"], cwd=b.path, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    said = "whetstone: merge: re-mint I2 as I3, L3 as L7, L4 as L8, L5 as L9, L6 as L10 (minted on two machines)"
    assert proc.stderr == said + "\n"
    assert git(b.path, "log", "-1", "--format=%s").stdout.strip() == said.split(": ", 1)[1]
    assert git(b.path, "log", "-1", "--format=%P").stdout.count(" ") == 0  # an ordinary commit after the merge
    assert run_cli("--store-root", str(b.root), "validate", SKILL).returncode == 0
    assert copy.sync()["status"] == "merged"
    assert git(b.path, "rev-parse", "HEAD^{tree}").stdout == git(copy.path, "rev-parse", "HEAD^{tree}").stdout
    assert len(b.entries()) == 13
    fsck(b.path, copy.path)


def test_a_block_deleted_on_one_side_and_reinforced_on_the_other_is_kept(pair) -> None:
    a, b, origin = pair
    result = revise(SKILL, "L2", "remove", confirm=True, config=a.config)
    assert result["status"] == "committed"
    assert not (a.path / "learnings" / scope_filename("currency formatting")).exists()
    assert b.learn("Format the price column as US dollars", "currency formatting")["status"] == "reinforced"
    a.sync()
    assert b.sync()["status"] == "merged"  # git saw modify/delete; sync merged it block by block
    a.sync()
    assert a.entries()["Format the price column as US dollars"] == ("L2", 2) == b.entries()[
        "Format the price column as US dollars"]
    fsck(a.path, b.path)


def test_a_block_moved_by_hand_on_one_side_and_reinforced_on_the_other_stays_one_entry(pair) -> None:
    """A moves L1 into a file of its own (the old file keeps L3, so git sees no rename); B reinforces
    L1 where it was. Two copies of one entry meet after the merge: they become one, where A put it."""
    a, b, origin = pair
    a.learn("Band alternate rows in light grey", "color encoding")
    a.sync(), b.sync()
    colors = a.path / "learnings" / scope_filename("color encoding")
    text = colors.read_text()
    cut = text.index("## L3 ·")
    colors.write_text(text[cut:])
    (a.path / "learnings" / "palettes.md").write_text(text[:cut].rstrip("\n") + "\n")
    git(a.path, "add", "-A")
    git(a.path, "commit", "-qm", "File L1 under palettes")
    assert b.learn("Heat-map msrp with a warm palette", "color encoding")["status"] == "reinforced"
    a.sync()
    result = b.sync()
    assert result["status"] == "merged" and result["reminted"] == [] and result["conflicts"] == []
    a.sync()
    entries = a.entries()
    assert entries == b.entries()
    assert entries["Heat-map msrp with a warm palette"] == ("L1", 2)
    assert entries["Band alternate rows in light grey"] == ("L3", 1)
    assert (a.path / "learnings" / "palettes.md").read_text().count("## L1 ·") == 1  # where A moved it
    assert "## L1 ·" not in colors.read_text()
    fsck(a.path, b.path)


def test_a_block_moved_and_changed_on_one_side_and_changed_on_the_other_says_so(pair) -> None:
    """As above (the old file keeps L3, so git sees no rename), but both sides change L1's body."""
    a, b, origin = pair
    a.learn("Band alternate rows in light grey", "color encoding")
    a.sync(), b.sync()
    colors = a.path / "learnings" / scope_filename("color encoding")
    text = colors.read_text()
    cut = text.index("## L3 ·")
    colors.write_text(text[cut:])
    moved = text[:cut].rstrip("\n") + "\n"
    (a.path / "learnings" / "palettes.md").write_text(moved.replace("with a warm palette\n", "in reds\n"))
    git(a.path, "add", "-A")
    git(a.path, "commit", "-qm", "File L1 under palettes, in reds")
    theirs = b.path / "learnings" / scope_filename("color encoding")
    theirs.write_text(theirs.read_text().replace("with a warm palette\n", "in blues\n"))
    git(b.path, "commit", "-qam", "Blues")
    a.sync()
    result = b.sync()
    assert result["status"] == "conflict"
    assert "both sides changed L1 differently, and one of them also moved it" in result["message"], result


def test_stores_started_apart_merge_into_one(store_root: Path, tmp_path: Path) -> None:
    """Two laptops that each attached the skill before they were connected: the first sync pushes,
    the second merges the unrelated histories, minting fresh ids for one side's collisions."""
    a, b = Machine(tmp_path / "a"), Machine(tmp_path / "b")
    a.learn("Heat-map msrp with a warm palette", "color encoding")
    a.learn("Bold the header row", "headers")
    b.learn("Use a colorblind-safe palette for categories", "color encoding")
    b.learn("Never round the corners of a table", "corner radius", kind="issue")
    origin = bare(tmp_path)
    for m in (a, b):
        assert remote(SKILL, "add", str(origin), config=m.config)["status"] == "added"
    assert a.sync()["status"] == "pushed"
    result = b.sync()
    assert result["status"] == "merged" and [r["from"] for r in result["reminted"]] == ["L1"]
    a.sync()
    entries = a.entries()
    assert entries == b.entries() and len(entries) == 4
    assert sorted(bid for bid, _ in entries.values()) == ["I1", "L1", "L2", "L3"]
    fsck(a.path, b.path, origin)


def test_sync_all_covers_the_global_layer_and_skips_stores_without_a_remote(pair, tmp_path: Path) -> None:
    a, b, origin = pair
    team = bare(tmp_path, "global.git", "--template=")  # made without -b main: its HEAD says master
    g_a, g_b = Machine(a.root, GLOBAL), Machine(b.root, GLOBAL)
    g_a.learn("Never use more than two fonts in one table", "fonts", kind="issue")
    remote(GLOBAL, "add", str(team), config=a.config)
    attach("lonely", config=a.config)
    result = sync(every=True, config=a.config)
    by_skill = {r["skill"]: r["status"] for r in result["stores"]}
    assert by_skill == {GLOBAL: "pushed", SKILL: "up_to_date", "lonely": "skipped"} and result["ok"]
    assert remote(GLOBAL, "add", str(team), config=b.config)["status"] == "cloned"
    proc = run_cli("--store-root", str(b.root), "sync", "--all", "--json")
    assert proc.returncode == 0, proc.stderr
    assert {r["skill"]: r["status"] for r in json.loads(proc.stdout)["stores"]} == {GLOBAL: "up_to_date",
                                                                                  SKILL: "up_to_date"}
    assert "Never use more than two fonts in one table" in g_b.entries()
    assert git(team, "symbolic-ref", "HEAD").stdout.strip() == "refs/heads/master"  # (so no fsck of it)
    fsck(g_a.path, g_b.path)


# --- remotes ---------------------------------------------------------------------------------------

def test_remote_add_list_and_remove(store_root: Path, tmp_path: Path) -> None:
    origin = bare(tmp_path)
    proc = run_cli("remote", SKILL, "add", str(origin), "--json")  # no store yet, an empty remote
    assert proc.returncode == 0, proc.stderr
    added = json.loads(proc.stdout)
    assert added["status"] == "added" and added["created"] and added["url"] == str(origin)
    assert run_cli("remote", SKILL, "add", str(origin)).stdout.strip() == f"{SKILL}: already has origin {origin}"
    other = bare(tmp_path, "other.git")
    proc = run_cli("remote", SKILL, "add", str(other))
    assert proc.returncode == 2 and "already has a remote named origin" in proc.stderr
    assert run_cli("remote", SKILL, "add", str(other), "--name", "laptop").returncode == 0
    assert run_cli("remote", SKILL).stdout == f"laptop\t{other}\norigin\t{origin}\n"
    proc = run_cli("sync", SKILL, "--json")  # two remotes, no upstream yet: origin it is
    assert proc.returncode == 0 and json.loads(proc.stdout)["stores"][0]["remote"] == "origin"
    assert git(store_root / SKILL, "rev-parse", "main").stdout == git(origin, "rev-parse", "main").stdout
    assert git(other, "rev-parse", "--verify", "-q", "main", check=False).stdout == ""
    proc = run_cli("sync", SKILL, "--remote", "laptop", "--json")  # the one named, not the upstream
    assert proc.returncode == 0 and json.loads(proc.stdout)["stores"][0]["remote"] == "laptop", proc.stderr
    assert git(other, "rev-parse", "main").stdout == git(store_root / SKILL, "rev-parse", "main").stdout
    assert run_cli("remote", SKILL, "remove", "laptop").returncode == 0
    proc = run_cli("remote", SKILL, "remove", "laptop")
    assert proc.returncode == 2 and "no remote named laptop" in proc.stderr
    assert run_cli("remote", SKILL, "list", "--json").stdout.count('"name"') == 1
    fsck(store_root / SKILL)


def test_remote_add_refuses_bad_input_and_creates_nothing(store_root: Path, tmp_path: Path) -> None:
    cases = {"--upload-pack=touch /tmp/x": "cannot start with '-'",  # after --, so it reaches the library
             str(tmp_path / "missing.git"): "no repository at",
             "": "give the remote's URL"}
    for url, said in cases.items():
        proc = run_cli("remote", SKILL, "add", "--", url)
        assert proc.returncode == 2 and said in proc.stderr, (url, proc.stderr)
    proc = run_cli("remote", SKILL, "add", str(bare(tmp_path)), "--name", "-x")
    assert proc.returncode == 2 and "invalid remote name" in proc.stderr
    plain = tmp_path / "plain"  # a repository, but not a store
    plain.mkdir()
    git(plain, "init", "-q", "-b", "main")
    (plain / "README").write_text("hello\n")
    git(plain, "add", "-A")
    git(plain, "commit", "-qm", "x")
    proc = run_cli("remote", SKILL, "add", str(plain))
    assert proc.returncode == 2 and "is not a whetstone store" in proc.stderr
    assert not store_root.exists() or list(store_root.iterdir()) == []
    assert run_cli("remote", SKILL, "fetch").returncode == 2


def test_sync_reports_json_like_the_other_commands(pair) -> None:
    a, b, origin = pair
    a.learn("Bold the header row", "headers")
    proc = a.cli("sync", SKILL, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    one = result["stores"][0]
    assert result["ok"] and one["status"] == "pushed" and one["sent"] == 1 and one["remote"] == "origin"
    assert one["head"] == a.head() and one["branch"] == "main" and one["url"] == str(origin)
    proc = b.cli("sync", SKILL)
    assert proc.returncode == 0 and proc.stdout.strip() == f"{SKILL}: pulled from origin/main (received 1 commit)"


def test_errors_from_the_library_are_whetstone_errors(pair) -> None:
    a, b, origin = pair
    with pytest.raises(WhetstoneError, match="give a SKILL or --all"):
        sync(config=a.config)
    with pytest.raises(WhetstoneError, match="unknown remote action"):
        remote(SKILL, "rename", config=a.config)


def test_doctor_says_where_a_store_stands_against_its_remote_and_how_to_mend_it(pair, tmp_path: Path) -> None:
    a, b, origin = pair

    def finding(machine, name: str) -> dict:
        proc = machine.cli("doctor", SKILL, "--json")
        return next(c for c in json.loads(proc.stdout)["checks"] if c["name"] == name)

    assert finding(a, "remote")["ok"] and "in step as of the last sync on " in finding(a, "remote")["detail"]
    assert finding(a, "drivers")["ok"]
    a.learn("Right-align every number column", "alignment")
    a.learn("Bold the totals row", "totals")
    ahead = finding(a, "remote")
    assert not ahead["ok"] and ahead["severity"] == "warning"
    assert "origin/main: 2 commits to push" in ahead["detail"] and ahead["fix"] == f"git whetstone sync {SKILL}"
    a.sync()
    git(b.path, "fetch", "-q")  # a plain git fetch moves what doctor compares against
    behind = finding(b, "remote")
    assert "origin/main: 2 commits to pull" in behind["detail"] and behind["fix"] == f"git whetstone sync {SKILL}"
    text = b.cli("doctor", SKILL).stdout
    assert f"fix: git whetstone sync {SKILL}" in text
    # a clone made by plain git carries no merge drivers: doctor says so and how to install them
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "clone", "-q", str(origin), SKILL)
    c = Machine(fresh)
    drivers = finding(c, "drivers")
    assert not drivers["ok"] and "not configured" in drivers["detail"] and drivers["fix"] == f"git whetstone hooks install {SKILL}"
    assert c.cli("hooks", "install", SKILL).returncode == 0
    assert finding(c, "drivers")["ok"]
    # a store without a remote is fine, and doctor says how to share it
    alone = Machine(tmp_path / "alone")
    alone.learn("Never abbreviate month names", "dates")
    lone = finding(alone, "remote")
    assert lone["ok"] and "git whetstone remote great-tables add URL" in lone["detail"]


def test_the_same_reinforcement_on_two_machines_counts_twice(pair, monkeypatch) -> None:
    """`revise L1 reinforce` on both machines, and the same `capture --confirm same:L2` in the same
    second on both, then sync: every reinforcement counts, although each machine's change alone
    would be the same bytes (and git merges those without asking the merge driver)."""
    a, b, origin = pair
    same_second = {"GIT_AUTHOR_DATE": "2026-07-24T10:00:00+00:00", "GIT_COMMITTER_DATE": "2026-07-24T10:00:00+00:00"}
    for m in (a, b):
        assert m.cli("revise", SKILL, "L1", "reinforce", env=same_second).returncode == 0
        proc = m.cli("capture", SKILL, "Show prices in dollars", "--scope", "currency formatting",
                     "--provenance", "dollars again", "--confirm", "same:L2", env=same_second)
        assert proc.returncode == 0 and proc.stdout.startswith("reinforced"), proc.stderr
    for m in (a, b, a):
        assert m.cli("sync", SKILL).returncode == 0
    entries = a.entries()
    assert entries == b.entries()
    assert entries["Heat-map msrp with a warm palette"] == ("L1", 3)
    assert entries["Format the price column as US dollars"] == ("L2", 3)
    # each reinforcement is a provenance line of its own, naming the run that made it
    lines = [e["provenance"] for e in show(SKILL, config=a.config)["learnings"] if e["id"] == "L2"][0]
    assert len([p for p in lines if "dollars again" in p]) == 2 and len(set(lines)) == len(lines)
    fsck(a.path, b.path, origin)


def test_doctor_on_a_freshly_synced_machine_says_it_has_not_recalled_yet(pair) -> None:
    """events.jsonl stays on each machine: a clone that has not recalled yet is not a dead loop."""
    a, b, origin = pair
    proc = b.cli("doctor", SKILL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and "looks dead" not in proc.stdout, proc.stdout
    assert "this machine has not recalled yet" in proc.stdout, proc.stdout
    recalls = next(c for c in json.loads(b.cli("doctor", SKILL, "--json").stdout)["checks"] if c["name"] == "recalls")
    assert recalls["severity"] == "warning" and not recalls["ok"]
    b.recall()
    assert "1 recalls, last on" in b.cli("doctor", SKILL).stdout


def test_metrics_count_the_learnings_a_merge_brought_and_re_minted(pair) -> None:
    """metrics after a sync that re-minted ids: every learning there is was created somewhere in the
    history, so 'learnings survived' never reads more than it started from (it read 32/31)."""
    a, b, origin = pair
    diverge(a, b)
    for m in (a, b, a):
        m.sync()
    ok = 0
    for m in (a, b):
        printed = m.cli("metrics", SKILL).stdout
        survived = re.search(r"learnings survived: (\d+)/(\d+) \((\d+)%\)", printed)
        assert survived, printed
        kept, made = int(survived.group(1)), int(survived.group(2))
        assert kept == made == 10 and survived.group(3) == "100", printed
        stats = json.loads(m.cli("metrics", SKILL, "--json").stdout)["skills"][SKILL]
        assert stats["learnings"] == stats["learnings_created"] == stats["learnings_surviving"] == 10
        assert stats["learnings_survived"] == 1.0
        ok += 1
    assert ok == 2


def test_the_machine_that_minted_an_id_first_keeps_it(pair, monkeypatch) -> None:
    """Two machines mint L3 for different rules on the same day: the one whose minting commit is
    older keeps L3 (the ids its agent has seen stay), whatever the rules' content hashes say."""
    from git_whetstone.format.merging import content_hash
    a, b, origin = pair
    rules = ["Bold the header row", "Put the units in the column label"]
    probe = [blocks.parse(f"## L4 · {r}\n- recurrence: 1\n- first_seen: 2026-07-24\n- last_seen: 2026-07-24\n"
                          f"- scope: headers\n\n{r}\n", "learnings/x.md", "learnings").blocks[0] for r in rules]
    first, later = sorted(rules, key=lambda r: content_hash(probe[rules.index(r)]), reverse=True)  # hash favours later
    for m, rule, when in ((a, first, "2026-07-24T09:00:00+00:00"), (b, later, "2026-07-24T17:00:00+00:00")):
        monkeypatch.setenv("GIT_AUTHOR_DATE", when)
        monkeypatch.setenv("GIT_COMMITTER_DATE", when)
        assert m.learn(rule, "headers")["entry_id"] == "L3"
    monkeypatch.delenv("GIT_AUTHOR_DATE")
    monkeypatch.delenv("GIT_COMMITTER_DATE")
    for m in (b, a, b):  # the later machine pushes first: who merges must not matter either
        m.sync()
    entries = a.entries()
    assert entries == b.entries()
    assert entries[first] == ("L3", 1) and entries[later] == ("L4", 1), entries
    fsck(a.path, b.path, origin)
