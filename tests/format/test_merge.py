"""Merging taste: the merge drivers on their own, and through a plain `git pull` between real
clones of a bare remote (the post-merge hook re-mints ids both sides minted).

Every scenario that touches a repository ends with `git fsck --strict` on it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from git_whetstone.format import blocks, edits, markdown, merging
from git_whetstone.ops.sync import drivers, hooks
from git_whetstone.store.store import Store
from git_whetstone.ops.writing.attach import attach
from git_whetstone.format.layout import scope_filename

from ..helpers import Machine, bare, git, run_cli

SKILL = "great-tables"


def fsck(*repos: Path) -> None:
    for repo in repos:
        proc = git(repo, "fsck", "--strict", "--no-dangling")
        assert proc.stdout.strip() == "" and proc.stderr.strip() == "", (repo, proc.stdout, proc.stderr)


def learning(bid: str, body: str, *, recurrence: int = 1, first_seen: str = "2026-11-01",
             last_seen: str = "2026-11-01", scope: str = "color encoding", provenance: tuple[str, ...] = (),
             always: bool = False) -> str:
    fields = [("recurrence", str(recurrence)), ("first_seen", first_seen), ("last_seen", last_seen),
              ("scope", scope)] + ([("applies", "always")] if always else []) + [
              ("provenance", blocks.encode_value(p)) for p in provenance]
    return edits.render(bid, blocks.derive_title(body), fields, body)


def scope_text(*texts: str) -> str:
    return "\n".join(texts)


# --- scope files, block by block -------------------------------------------------------------------

def test_both_reinforcements_and_every_provenance_line_are_kept() -> None:
    base = scope_text(learning("L1", "Warm palette", recurrence=2, provenance=("one",)))
    ours = scope_text(learning("L1", "Warm palette", recurrence=3, last_seen="2026-11-05", provenance=("one", "a")))
    theirs = scope_text(learning("L1", "Warm palette", recurrence=3, last_seen="2026-11-09", provenance=("one", "b")))
    text, conflicts = merging.merge_scope(base, ours, theirs, "learnings/x.md")
    assert conflicts == [] and text == learning("L1", "Warm palette", recurrence=4, last_seen="2026-11-09",
                                                 provenance=("one", "a", "b"))


def test_the_every_task_mark_merges_three_way() -> None:
    """Marked on one side and reinforced on the other: both changes stay; unmarked on one side and
    untouched on the other: the mark goes; minted on both sides, either side's mark holds."""
    base = scope_text(learning("L1", "Warm palette"))
    marked = scope_text(learning("L1", "Warm palette", always=True))
    reinforced = scope_text(learning("L1", "Warm palette", recurrence=2, last_seen="2026-11-03"))
    text, conflicts = merging.merge_scope(base, marked, reinforced, "learnings/x.md")
    assert conflicts == [] and text == learning("L1", "Warm palette", recurrence=2, last_seen="2026-11-03", always=True)
    text, _ = merging.merge_scope(marked, base, scope_text(learning("L1", "Warm palette", recurrence=2,
                                                                  last_seen="2026-11-03", always=True)), "learnings/x.md")
    assert text == learning("L1", "Warm palette", recurrence=2, last_seen="2026-11-03")
    both = scope_text(learning("L1", "Warm palette", recurrence=2, last_seen="2026-11-03", always=True))
    text, _ = merging.merge_scope(marked, both, both.replace("recurrence: 2", "recurrence: 3"), "learnings/x.md")
    assert "- applies: always" in text
    text, _ = merging.merge_scope("", marked, scope_text(learning("L1", "Warm palette")), "learnings/x.md")
    assert "- applies: always" in text


def test_a_body_edited_on_one_side_and_reinforced_on_the_other_keeps_both_changes() -> None:
    base = scope_text(learning("L1", "Warm palette"), learning("L2", "Dollars"))
    ours = scope_text(learning("L1", "Warm YlOrBr palette"), learning("L2", "Dollars"))
    theirs = scope_text(learning("L1", "Warm palette", recurrence=2, last_seen="2026-11-03"), learning("L2", "Dollars"),
                        learning("L3", "Bold headers"))
    text, conflicts = merging.merge_scope(base, ours, theirs, "learnings/x.md")
    assert conflicts == []
    assert text == scope_text(learning("L1", "Warm YlOrBr palette", recurrence=2, last_seen="2026-11-03"),
                              learning("L2", "Dollars"), learning("L3", "Bold headers"))


def test_bodies_changed_differently_on_both_sides_are_a_conflict_validate_explains() -> None:
    base = scope_text(learning("L1", "Warm palette"), learning("L2", "Dollars"))
    ours = scope_text(learning("L1", "Red palette"), learning("L2", "Dollars", recurrence=2))
    theirs = scope_text(learning("L1", "Orange palette"), learning("L2", "Dollars"))
    text, conflicts = merging.merge_scope(base, ours, theirs, "learnings/x.md")
    assert conflicts == ["L1"]
    assert text.startswith("<<<<<<< ours: L1 as changed on this side\n" + learning("L1", "Red palette")
                           + "=======\n" + learning("L1", "Orange palette")
                           + ">>>>>>> theirs: L1 as changed on the other side\n\n")
    assert text.endswith(learning("L2", "Dollars", recurrence=2))  # the rest merged as usual
    errors = markdown.validate(text, "learnings/x.md", "learnings")
    assert {e.message for e in errors} == {"unresolved merge conflict marker"}  # not "duplicate id L1"
    from git_whetstone.format.checks import conflict_hint
    assert "keep the one you want, delete the marker lines" in conflict_hint(errors)


def test_the_ids_driver_takes_the_per_key_maximum(tmp_path: Path) -> None:
    files = {}
    for name, text in (("o", '{"learning": 3, "issue": 2}\n'), ("a", '{"learning": 7, "issue": 2}\n'),
                       ("b", '{"learning": 5, "issue": 4}\n')):
        files[name] = tmp_path / name
        files[name].write_text(text)
    code = drivers.run_driver("ids", str(files["o"]), str(files["a"]), str(files["b"]), "7", "next_ids.json")
    assert code == 0 and json.loads(files["a"].read_text()) == {"learning": 7, "issue": 4}


def test_a_side_that_is_not_blocks_goes_to_git_s_line_merge(tmp_path: Path) -> None:
    base = learning("L1", "Warm palette")
    broken = base.replace("- recurrence: 1", "- recurrence: many")
    paths = {}
    for name, text in (("o", base), ("a", broken), ("b", base + "\n" + learning("L2", "Cold palette"))):
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    code = drivers.run_driver("blocks", str(paths["o"]), str(paths["a"]), str(paths["b"]), "7", "learnings/x.md")
    assert code == 0 and paths["a"].read_text() == broken + "\n" + learning("L2", "Cold palette")


BODIES = ["Warm palette", "Cold palette", "Bold headers", "Right-align numbers", "Sort by price",
          "Monospace body", "No borders", "Dollars, no cents"]


@st.composite
def three_versions(draw):
    """A base scope file and two sides, each changing it by deleting, reinforcing, rewording,
    reordering or adding blocks (the adding sides may mint the same ids for different rules)."""
    count = draw(st.integers(0, 4))
    base = {f"L{i + 1}": learning(f"L{i + 1}", BODIES[i], recurrence=2) for i in range(count)}

    def side() -> list[str]:
        out = []
        for bid in draw(st.permutations(list(base))):
            action = draw(st.sampled_from(["keep", "keep", "drop", "reinforce", "reword"]))
            number = int(bid[1:])
            if action == "keep":
                out.append(base[bid])
            elif action == "reinforce":
                out.append(learning(bid, BODIES[number - 1], recurrence=draw(st.integers(3, 5)),
                                    last_seen=draw(st.sampled_from(["2026-11-02", "2026-11-03"]))))
            elif action == "reword":
                out.append(learning(bid, BODIES[number - 1] + draw(st.sampled_from([" now", " always"])), recurrence=2))
        for offset in range(draw(st.integers(0, 2))):
            out.append(learning(f"L{count + 1 + offset}", draw(st.sampled_from(BODIES)) + " too",
                                first_seen=draw(st.sampled_from(["2026-11-01", "2026-11-02"])),
                                last_seen="2026-11-04"))
        return out

    return scope_text(*base.values()), scope_text(*side()), scope_text(*side())


@settings(max_examples=150, deadline=None)
@given(three_versions())
def test_a_scope_file_merges_the_same_whichever_side_is_ours(versions) -> None:
    base, ours, theirs = versions
    one = merging.merge_scope(base, ours, theirs, "learnings/x.md")
    two = merging.merge_scope(base, theirs, ours, "learnings/x.md")
    assert one is not None and two is not None
    if not one[1]:  # no conflict: the very same bytes, made of valid blocks (an id minted twice aside)
        assert one == two
        parsed = blocks.parse(one[0], "learnings/x.md", "learnings")
        assert all("duplicate id" in e.message for e in parsed.errors)
    else:
        assert sorted(one[1]) == sorted(two[1])
    # nothing a side changed or added is lost (a block one side deleted and the other left alone goes)
    before = {b.id: b.raw.rstrip("\n") for b in blocks.parse(base, "x", "learnings").blocks}
    for side in (ours, theirs):
        for block in blocks.parse(side, "x", "learnings").blocks:
            if before.get(block.id) != block.raw.rstrip("\n"):
                assert block.body in one[0]


# --- installed with the hooks ----------------------------------------------------------------------

def test_hooks_install_puts_in_the_merge_drivers_and_uninstall_takes_them_out(store_root: Path) -> None:
    store = Path(attach(SKILL)["path"])
    attributes = (store / ".git" / "info" / "attributes").read_text()
    assert "/learnings/*.md merge=whetstone-blocks" in attributes and "/next_ids.json merge=whetstone-ids" in attributes
    driver = git(store, "config", "merge.whetstone-blocks.driver").stdout
    assert "merge-driver blocks %O %A %B %L %P" in driver
    check = git(store, "check-attr", "merge", "--", "issues/x.md", "next_ids.json").stdout
    assert check == "issues/x.md: merge: whetstone-blocks\nnext_ids.json: merge: whetstone-ids\n"
    (store / ".git" / "info" / "attributes").write_text(attributes + "*.png binary\n")
    assert json.loads(run_cli("hooks", "uninstall", SKILL, "--json").stdout)["stores"][0]["merge_drivers"] == "removed"
    assert (store / ".git" / "info" / "attributes").read_text().strip().endswith("*.png binary")
    assert "whetstone" not in (store / ".git" / "info" / "attributes").read_text()
    assert git(store, "config", "--get-regexp", "merge", check=False).stdout == ""
    assert json.loads(run_cli("hooks", "install", SKILL, "--json").stdout)["stores"][0]["merge_drivers"] == "installed"
    assert json.loads(run_cli("hooks", "install", SKILL, "--json").stdout)["stores"][0]["merge_drivers"] == "unchanged"
    fsck(store)


# --- a plain git pull between two clones -----------------------------------------------------------

def clones(tmp_path: Path) -> tuple[Machine, Machine, Path]:
    """Machine A's store pushed to a bare remote with plain git, and a plain clone of it on B
    that got whetstone's hooks (and so its merge drivers) afterwards."""
    a, b = Machine(tmp_path / "a"), Machine(tmp_path / "b")
    a.learn("Heat-map msrp with a warm palette", "color encoding")
    a.learn("Never round the corners of a table", "corner radius", kind="issue")
    origin = bare(tmp_path)
    git(a.path, "remote", "add", "origin", str(origin))
    git(a.path, "push", "-q", "-u", "origin", "main")
    b.root.mkdir()
    git(b.root, "clone", "-q", str(origin), SKILL)
    hooks.install_store(Store(b.config, SKILL, b.path))
    return a, b, origin


def both_capture(a: Machine, b: Machine) -> None:
    """Three captures on each machine, minting L2, L3 and I2 on both sides."""
    for body, scope, kind in (("Band alternate rows in light grey", "color encoding", "learning"),
                              ("Bold the header row", "headers", "learning"),
                              ("Always put the source note under the table", "source notes", "issue")):
        a.learn(body, scope, kind)
    for body, scope, kind in (("Use a colorblind-safe palette for categories", "color encoding", "learning"),
                              ("Sort rows by price, highest first", "sorting", "learning"),
                              ("Never put a border around the title", "corner radius", "issue")):
        b.learn(body, scope, kind)


def test_a_plain_git_pull_merges_through_the_drivers_and_the_post_merge_hook(tmp_path: Path) -> None:
    a, b, origin = clones(tmp_path)
    both_capture(a, b)
    git(a.path, "push", "-q")
    proc = subprocess.run(["git", "pull", "-q", "--no-rebase", "--no-edit"], cwd=b.path, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    said = "whetstone: merge: re-mint I2 as I3, L2 as L4, L3 as L5 (minted on two machines)"
    assert proc.stderr == said + "\n"
    assert git(b.path, "log", "-1", "--format=%s").stdout.strip() == said.split(": ", 1)[1]
    assert len(git(b.path, "log", "-1", "--format=%P").stdout.split()) == 1  # an ordinary commit after the merge
    assert len(git(b.path, "log", "-2", "--format=%P").stdout.split("\n")[1].split()) == 2
    assert run_cli("--store-root", str(b.root), "validate", SKILL).returncode == 0
    assert json.loads((b.path / "next_ids.json").read_text()) == {"learning": 6, "issue": 4}
    assert git(b.path, "status", "--porcelain").stdout == ""
    entries = b.entries()
    assert len(entries) == 8 and len({bid for bid, _ in entries.values()}) == 8
    notes = [p for path in (b.path / "learnings").glob("*.md") for p in [path.read_text()] if "re-minted from" in p]
    notes += [p for path in (b.path / "issues").glob("*.md") for p in [path.read_text()] if "re-minted from" in p]
    assert sum(text.count("re-minted from") for text in notes) == 3
    git(b.path, "push", "-q")
    git(a.path, "pull", "-q", "--ff-only")
    assert a.entries() == entries
    fsck(a.path, b.path, origin)


def test_the_driver_command_runs_under_git_without_whetstone_on_path(tmp_path: Path) -> None:
    """git runs the driver through sh with whatever PATH it has: the command names the installing
    whetstone by its absolute path, as the hook shims do."""
    a, b, origin = clones(tmp_path)
    a.learn("Band alternate rows in light grey", "color encoding")
    b.learn("Use a colorblind-safe palette for categories", "color encoding")
    git(a.path, "push", "-q")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(shutil.which('git')).parent}:/usr/bin:/bin"
    proc = subprocess.run(["git", "pull", "-q", "--no-rebase", "--no-edit"], cwd=b.path, capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    text = (b.path / "learnings" / scope_filename("color encoding")).read_text()
    assert "<<<<<<<" not in text and text.count("## L") == 3
    fsck(b.path)


def test_a_git_pull_rebase_re_mints_the_ids_both_sides_minted(tmp_path: Path) -> None:
    """`git pull --rebase` replays this machine's captures on top of the other's: git takes next_ids.json
    and the scope files through the drivers, and post-rewrite re-mints what both sides minted."""
    a, b, origin = clones(tmp_path)
    both_capture(a, b)
    b.cli("recall", SKILL, "style the table")  # an index to follow the rewrite
    git(a.path, "push", "-q")
    proc = subprocess.run(["git", "pull", "-q", "--rebase"], cwd=b.path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "re-mint" in proc.stderr, proc.stderr
    assert len(git(b.path, "log", "--format=%P").stdout.split("\n")[0].split()) == 1  # history stays linear
    assert git(b.path, "status", "--porcelain").stdout == ""
    assert run_cli("--store-root", str(b.root), "validate", SKILL).returncode == 0
    assert json.loads((b.path / "next_ids.json").read_text()) == {"learning": 6, "issue": 4}
    entries = b.entries()
    assert len(entries) == 8 and len({bid for bid, _ in entries.values()}) == 8
    # the index follows: every rule recalled under the id the files give it
    shown = json.loads(b.cli("recall", SKILL, "palette for categories", "--json").stdout)
    assert {e["id"] for e in shown["learnings"]} <= {bid for bid, _ in entries.values()}
    # events.jsonl says which ids were re-minted
    events = [json.loads(line) for line in (b.path / "events.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "remint" and e.get("reminted") for e in events), events[-3:]
    git(b.path, "push", "-q")
    git(a.path, "pull", "-q", "--ff-only")
    assert a.entries() == entries
    fsck(a.path, b.path, origin)
