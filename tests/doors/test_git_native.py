"""Git-native behaviour (SPEC §7) against the real git binary: hand edits, the hooks attach
installs (through their shims, which find whetstone themselves), revert, reset, a fresh clone,
hooks that were there first, and `validate`, `edit`, `reindex`, `hooks` and `install-man`.

Every scenario ends with `git fsck --strict` on the repositories it touched.
"""
from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from git_whetstone.format import edits
from git_whetstone.base import resources
from git_whetstone.ops.sync import hooks
from git_whetstone.base import config as config_mod
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.recall import recall
from git_whetstone.store.store import Store
from git_whetstone.ops.writing.attach import attach
from git_whetstone.format.layout import scope_filename

from ..helpers import REPO, git, run_cli, tree_state

SKILL = "great-tables"
BIN = Path(sys.executable).parent


def fsck(*repos: Path) -> None:
    for repo in repos:
        proc = git(repo, "fsck", "--strict", "--no-dangling")
        assert proc.stdout.strip() == "" and proc.stderr.strip() == "", (repo, proc.stdout, proc.stderr)


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def rules(skill: str = SKILL, intent: str = "table styling: colors, currency formatting, corners", **kw) -> dict:
    result = recall(skill, intent, **kw)
    return {e["id"]: e["rule"] for e in result["learnings"] + result["issues"]}


def learning(bid: str, body: str, scope: str = "color encoding", *, blank: bool = True,
             recurrence: str = "1") -> str:
    """A learning block written by hand (with a title of the writer's choosing)."""
    text = edits.render(bid, "written by hand", [("recurrence", recurrence), ("first_seen", "2026-11-01"),
                                                  ("last_seen", "2026-11-01"), ("scope", scope)], body)
    return text if blank else text.replace("\n\n", "\n", 1)


def scope_file(store: Path, scope: str = "color encoding", folder: str = "learnings") -> Path:
    return store / folder / scope_filename(scope)


def new_store() -> Path:
    """A store with L1 (color encoding) and L2 (currency formatting), captured by the tool."""
    path = Path(attach(SKILL)["path"])
    capture(SKILL, "learning", "Heat-map msrp with a warm palette", "color encoding", "warm colors")
    capture(SKILL, "learning", "Format the price column as US dollars", "currency formatting", "dollars")
    return path


# --- the hooks attach installs -----------------------------------------------------------------------

def test_attach_installs_four_shims_that_find_the_whetstone_that_installed_them(store_root: Path) -> None:
    store = Path(attach(SKILL)["path"])
    for name in hooks.NAMES:
        shim = store / ".git" / "hooks" / name
        assert shim.stat().st_mode & stat.S_IXUSR
        text = shim.read_text()
        assert text.startswith("#!/bin/sh\n") and hooks.MARK in text
        assert f"whetstone_exe={BIN / 'git-whetstone'}" in text  # an absolute path, PATH does not matter
    state = hooks.status(Store.open(config_mod.load(), SKILL))
    assert state["ok"] and set(state["hooks"].values()) == {"whetstone"}
    assert git(store, "status", "--porcelain").stdout == ""
    assert attach(SKILL)["status"] == "already_attached"  # refreshing them is quiet and changes nothing
    fsck(store)


def run_shim(shim: Path, exe: str, cwd: Path, env: dict[str, str], *args: str):
    """Run an installed shim whose whetstone is `exe`, as git would (cwd: the work tree's top)."""
    import subprocess
    text = re.sub(r"^whetstone_exe=.*$", f"whetstone_exe={exe}", shim.read_text(), count=1, flags=re.M)
    copy = cwd / ".git" / "hooks" / f"probe-{shim.name}"
    copy.write_text(text)
    copy.chmod(0o755)
    try:
        return subprocess.run([str(copy), *args], cwd=cwd, capture_output=True, text=True,
                              env={"PATH": env.get("PATH", "/usr/bin:/bin"), **env})
    finally:
        copy.unlink()


def test_the_shim_skips_tool_commits_and_repositories_that_are_not_stores(store_root: Path, tmp_path: Path) -> None:
    store = Path(attach(SKILL)["path"])
    log = tmp_path / "calls"
    fake = tmp_path / "fake-whetstone"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    shim = store / ".git" / "hooks" / "post-commit"
    assert run_shim(shim, str(fake), store, {"WHETSTONE_WRITING": "1"}).returncode == 0
    assert not log.exists()  # a tool commit: no whetstone (no Python) starts at all
    assert run_shim(shim, str(fake), store, {}).returncode == 0
    assert log.read_text() == "hook post-commit\n"
    other = tmp_path / "plain"
    other.mkdir()
    git(other, "init", "-q")
    assert run_shim(shim, str(fake), other, {}).returncode == 0
    assert log.read_text() == "hook post-commit\n"  # not a store: nothing ran


def test_the_shim_falls_back_to_git_whetstone_on_path_then_to_doing_nothing(store_root: Path, tmp_path: Path) -> None:
    store = Path(attach(SKILL)["path"])
    shim = store / ".git" / "hooks" / "pre-commit"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "git-whetstone").write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "called"}\nexit 1\n')
    (bindir / "git-whetstone").chmod(0o755)
    proc = run_shim(shim, "/nonexistent/git-whetstone", store, {"PATH": f"{bindir}:/usr/bin:/bin"})
    assert proc.returncode == 1 and (tmp_path / "called").read_text() == "hook pre-commit\n"
    proc = run_shim(shim, "/nonexistent/git-whetstone", store, {"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and "git-whetstone is gone" in proc.stderr


def test_a_shim_written_for_a_bare_python_runs_the_package_from_where_it_was(store_root: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a git-whetstone beside the installing Python (python -m git_whetstone from a
    checkout), the shim runs that Python on the package's directory."""
    store = new_store()
    monkeypatch.setattr(resources, "launcher", lambda: (sys.executable, str(REPO)))
    hooks.install_store(Store.open(config_mod.load(), SKILL))
    shim = (store / ".git" / "hooks" / "pre-commit").read_text()
    assert f"whetstone_exe={sys.executable}" in shim and "whetstone_path=/" in shim
    path = scope_file(store)
    path.write_text(path.read_text().replace("\n\nHeat-map", "\nHeat-map"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    import shutil
    import subprocess
    env["PATH"] = f"{Path(shutil.which('git')).parent}:/usr/bin:/bin"  # no git-whetstone to fall back on
    proc = subprocess.run(["git", "commit", "-qam", "x"], cwd=store, capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and f"learnings/{path.name}:7: no blank line" in proc.stderr
    git(store, "checkout", "--", ".")
    fsck(store)


# --- hand edits ------------------------------------------------------------------------------------

def test_a_hand_edited_body_committed_with_commit_a_is_recalled(store_root: Path) -> None:
    store = new_store()
    path = scope_file(store)
    path.write_text(path.read_text().replace("Heat-map msrp with a warm palette\n", "Heat-map msrp in shades of red\n"))
    proc = git(store, "commit", "-qam", "Say red, not warm")
    assert proc.stderr == ""
    assert rules()["L1"] == "Heat-map msrp in shades of red"
    fsck(store)


def test_a_hand_added_block_is_recalled_and_its_id_is_never_minted_again(store_root: Path) -> None:
    store = new_store()
    path = scope_file(store)
    path.write_text(path.read_text() + "\n" + learning("L7", "Band alternate rows of the table in light grey"))
    git(store, "commit", "-qam", "Add a rule by hand")
    assert rules(intent="table styling: colors, row banding")["L7"] == "Band alternate rows of the table in light grey"
    assert json.loads((store / ".git" / "whetstone-ids.json").read_text())["learning"] == 8  # post-commit saw L7
    text = path.read_text()
    path.write_text(text[: text.index("## L7")].rstrip("\n") + "\n")  # delete it again
    git(store, "commit", "-qam", "Drop the hand rule")
    assert "L7" not in rules(intent="table styling: colors, row banding")
    result = capture(SKILL, "learning", "Put the source note under the table", "source notes", "x")
    assert result["entry_id"] == "L8"  # not L3..L7: L7 was used, if only for a while
    fsck(store)


def test_edit_keeps_next_ids_up_with_ids_written_by_hand(store_root: Path, tmp_path: Path) -> None:
    store = new_store()
    editor = tmp_path / "append_l9.py"
    block = learning("L9", "Use a colorblind-safe palette")
    editor.write_text(f"import sys\nwith open(sys.argv[1], 'a') as f:\n    f.write('\\n' + {block!r})\n")
    proc = run_cli("edit", SKILL, "color encoding", env={"EDITOR": f"{sys.executable} {editor}"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "committed: edit: add L9 (color encoding)"
    assert json.loads(git(store, "show", "HEAD:next_ids.json").stdout) == {"learning": 10, "issue": 1}
    assert git(store, "status", "--porcelain").stdout == ""
    fsck(store)


BROKEN = {
    "no blank line before the body": (lambda: learning("L3", "Bold the header row", blank=False), 6,
                                      "no blank line before the body"),
    "recurrence: many": (lambda: learning("L3", "Bold the header row", recurrence="many"), 2,
                         "recurrence must be a positive integer"),
    "a duplicate id": (lambda: learning("L1", "Bold the header row"), 1, "duplicate id L1"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_hand_edit_is_refused_with_path_line_and_nothing_is_committed(store_root: Path, case: str) -> None:
    store = new_store()
    make, line, message = BROKEN[case]
    path = scope_file(store, "headers")  # a new file: the duplicate id is across files
    path.write_text(make())
    git(store, "add", "-A")
    before = head(store)
    proc = git(store, "commit", "-qm", "hand edit", check=False)
    assert proc.returncode == 1
    assert f"learnings/{path.name}:{line}: {message}" in proc.stderr
    assert head(store) == before
    assert git(store, "diff", "--cached", "--name-only").stdout.strip() == f"learnings/{path.name}"  # still staged
    fsck(store)


def test_the_hook_checks_what_is_committed_not_the_work_tree(store_root: Path) -> None:
    """`git commit -a` and `git commit PATH` commit through another index (GIT_INDEX_FILE); a plain
    `git commit` commits what is staged, whatever the work tree says."""
    store = new_store()
    path = scope_file(store)
    good = path.read_text()
    bad = good.replace("\n\nHeat-map", "\nHeat-map")  # no blank line before the body
    path.write_text(bad)
    before = head(store)
    for args in (["-am", "all"], ["-m", "only", "--", str(path.relative_to(store))]):
        proc = git(store, "commit", "-q", *args, check=False)
        assert proc.returncode == 1 and f"learnings/{path.name}:7: no blank line" in proc.stderr, args
        assert head(store) == before
    path.write_text(good.replace("warm palette", "warm YlOrBr palette"))
    git(store, "add", "-A")
    path.write_text(bad)  # broken in the work tree, fine in the index
    git(store, "commit", "-qm", "staged version")
    committed = git(store, "show", f"HEAD:learnings/{path.name}").stdout
    assert committed.endswith("\n\nHeat-map msrp with a warm YlOrBr palette\n")
    git(store, "checkout", "--", ".")
    fsck(store)


def test_a_commit_past_the_hook_is_warned_about_at_once_and_at_every_recall(store_root: Path) -> None:
    store = new_store()
    path = scope_file(store)
    path.write_text(path.read_text().replace("- recurrence: 1", "- recurrence: many"))
    proc = git(store, "commit", "-qam", "forced", "--no-verify")
    assert f"learnings/{path.name}:2: recurrence must be a positive integer" in proc.stderr
    assert "invalid markdown" in proc.stderr
    result = recall(SKILL, "color encoding")
    assert "L1" not in [e["id"] for e in result["learnings"]]  # no valid version of its file is committed
    assert any(f"learnings/{path.name}:2:" in w for w in result["warnings"])
    fsck(store)


# --- revert, reset, clone --------------------------------------------------------------------------

def test_reverting_a_capture_forgets_it_and_reverting_the_revert_brings_it_back(store_root: Path) -> None:
    store = new_store()
    assert git(store, "log", "-1", "--format=%s").stdout.startswith("capture: add L2")
    git(store, "revert", "--no-edit", "HEAD")
    assert set(rules()) == {"L1"}
    git(store, "revert", "--no-edit", "HEAD")
    assert rules()["L2"] == "Format the price column as US dollars"
    assert git(store, "status", "--porcelain").stdout == ""
    fsck(store)


def test_a_hard_reset_fires_no_hook_and_the_next_recall_reflects_it(store_root: Path) -> None:
    store = new_store()
    assert set(rules()) == {"L1", "L2"}
    git(store, "reset", "-q", "--hard", "HEAD~1")
    assert set(rules()) == {"L1"}
    fsck(store)


def test_a_fresh_clone_recalls_without_hooks_or_index_and_mints_fresh_ids(store_root: Path, tmp_path: Path) -> None:
    store = new_store()
    path = scope_file(store)
    path.write_text(path.read_text() + "\n" + learning("L5", "Band alternate rows in light grey"))
    git(store, "commit", "-qam", "hand rule")
    path.write_text(path.read_text()[: path.read_text().index("## L5")].rstrip("\n") + "\n")
    git(store, "commit", "-qam", "drop it")
    other_root = tmp_path / "elsewhere"
    other_root.mkdir()
    clone = other_root / SKILL
    git(other_root, "clone", "-q", str(store), SKILL)
    assert not (clone / "index.sqlite").exists()
    assert not [p for p in (clone / ".git" / "hooks").iterdir() if not p.name.endswith(".sample")]
    there = config_mod.load(store_root=other_root)
    assert rules(config=there) == {"L1": "Heat-map msrp with a warm palette",
                                   "L2": "Format the price column as US dollars"}
    assert (clone / "index.sqlite").exists()
    result = capture(SKILL, "learning", "Put the source note under the table", "source notes", "x", config=there)
    assert result["entry_id"] == "L6"  # the clone's history shows L5 was used
    fsck(store, clone)


def test_a_pull_through_the_post_merge_hook_warns_about_what_it_brought_in(store_root: Path, tmp_path: Path) -> None:
    store = new_store()
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(store), "clone")
    there = config_mod.load(store_root=tmp_path)
    hooks.install_store(Store(there, "clone", clone))
    path = scope_file(store)
    path.write_text(path.read_text().replace("- recurrence: 1", "- recurrence: 0"))
    git(store, "commit", "-qam", "forced", "--no-verify")
    proc = git(clone, "pull", "-q", "--ff-only")
    assert f"learnings/{path.name}:2: recurrence must be a positive integer" in proc.stderr
    fsck(store, clone)


def test_a_tool_write_during_a_half_done_merge_is_refused_and_changes_nothing(store_root: Path) -> None:
    """A commit now would conclude the merge under a capture's message: capture says what to do
    instead, and validate explains the markers."""
    store = new_store()
    path = scope_file(store)
    git(store, "switch", "-q", "-c", "elsewhere")
    path.write_text(path.read_text().replace("warm palette", "warm red palette"))
    git(store, "commit", "-qam", "red")
    git(store, "switch", "-q", "main")
    path.write_text(path.read_text().replace("warm palette", "warm orange palette"))
    git(store, "commit", "-qam", "orange")
    assert git(store, "merge", "-q", "elsewhere", check=False).returncode == 1
    before = tree_state(store)
    proc = run_cli("capture", SKILL, "Bold the header row", "--scope", "headers")
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"git whetstone: {SKILL} is in the middle of a merge (a sync or a git command "
                                   f"stopped on a conflict): finish it (resolve, git add, git commit) or undo it "
                                   f"(git merge --abort) in {store}, then try again")
    assert tree_state(store) == before and (store / ".git" / "MERGE_HEAD").exists()
    proc = run_cli("validate", SKILL)
    assert proc.returncode == 1 and "unresolved merge conflict marker" in proc.stdout
    assert "hint: a merge left two versions of a block between <<<<<<< and >>>>>>>" in proc.stderr
    assert rules()["L1"] == "Heat-map msrp with a warm orange palette"  # recall serves what is committed
    git(store, "merge", "--abort")
    assert capture(SKILL, "learning", "Bold the header row", "headers", "x")["status"] == "committed"
    fsck(store)


# --- hooks that were there first ---------------------------------------------------------------------

def test_a_users_pre_commit_hook_keeps_running_before_whetstones(store_root: Path, tmp_path: Path) -> None:
    """A hook from git's init template (a user's pre-commit) is chained at attach, runs on hand and
    tool commits alike, refuses what it refuses, and comes back unchanged on uninstall."""
    template = tmp_path / "template"
    (template / "hooks").mkdir(parents=True)
    mine = template / "hooks" / "pre-commit"
    ran = tmp_path / "ran"
    mine.write_text(f"#!/bin/sh\necho ran >> {ran}\n"
                    f'[ -e {tmp_path / "refuse"} ] && {{ echo "policy says no" >&2; exit 1; }}\nexit 0\n')
    mine.chmod(0o755)
    git(tmp_path, "config", "--global", "init.templateDir", str(template))

    def runs() -> int:
        return ran.read_text().count("ran") if ran.exists() else 0

    store = Path(attach(SKILL)["path"])
    hooks_dir = store / ".git" / "hooks"
    assert (hooks_dir / "pre-commit.whetstone-chained").read_bytes() == mine.read_bytes()
    assert hooks.MARK in (hooks_dir / "pre-commit").read_text()
    count = runs()
    capture(SKILL, "learning", "Heat-map msrp with a warm palette", "color encoding", "warm colors")
    assert runs() == count + 1  # whetstone's own commits run it too

    path = scope_file(store)
    path.write_text(path.read_text().replace("warm palette", "warm YlOrBr palette"))
    git(store, "commit", "-qam", "passes both")
    assert runs() == count + 2
    path.write_text(path.read_text().replace("\n\nHeat-map", "\nHeat-map"))
    proc = git(store, "commit", "-qam", "theirs passes, ours refuses", check=False)
    assert proc.returncode == 1 and "no blank line" in proc.stderr and runs() == count + 3
    git(store, "checkout", "--", ".")

    (tmp_path / "refuse").touch()
    path.write_text(path.read_text().replace("YlOrBr", "Oranges"))
    before = head(store)
    proc = git(store, "commit", "-qam", "theirs refuses", check=False)
    assert proc.returncode == 1 and "policy says no" in proc.stderr and head(store) == before
    git(store, "checkout", "--", ".")
    proc = run_cli("capture", SKILL, "Bold the header row", "--scope", "headers")
    assert proc.returncode == 1 and "policy says no" in proc.stderr and head(store) == before

    proc = run_cli("hooks", "uninstall", SKILL)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in hooks_dir.iterdir() if not p.name.endswith(".sample")) == ["pre-commit"]
    assert (hooks_dir / "pre-commit").read_bytes() == mine.read_bytes()
    assert os.access(hooks_dir / "pre-commit", os.X_OK)
    assert git(store, "config", "whetstone.hooks").stdout.strip() == "false"
    assert "warnings" not in attach(SKILL)  # attach respects the uninstall …
    assert not hooks.status(Store.open(config_mod.load(), SKILL))["ok"]
    proc = run_cli("hooks", "install", SKILL)  # … until the hooks are installed again
    assert proc.returncode == 0 and "pre-commit chained" in proc.stdout
    fsck(store)


def test_a_shared_hooks_directory_is_refused_unless_forced(store_root: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared-hooks"
    shared.mkdir()
    git(tmp_path, "config", "--global", "core.hooksPath", str(shared))
    result = attach(SKILL)
    assert result["status"] == "attached" and "core.hooksPath" in result["warnings"][0]
    assert list(shared.iterdir()) == []
    proc = run_cli("hooks", "install", SKILL)
    assert proc.returncode == 1 and "--force" in proc.stderr and list(shared.iterdir()) == []
    proc = run_cli("hooks", "install", SKILL, "--force", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"]
    assert sorted(p.name for p in shared.iterdir()) == sorted(hooks.NAMES)
    plain = tmp_path / "plain"  # another repository under the same hooks: nothing changes for it
    plain.mkdir()
    git(plain, "init", "-q")
    (plain / "notes.md").write_text("## L1 · not a store\n")
    git(plain, "add", "-A")
    assert git(plain, "commit", "-qm", "x").stderr == ""
    assert run_cli("hooks", "uninstall", "--all").returncode == 1
    assert run_cli("hooks", "uninstall", "--all", "--force").returncode == 0
    assert list(shared.iterdir()) == []
    fsck(Path(result["path"]), plain)


# --- the commands ----------------------------------------------------------------------------------

def test_validate_reports_path_line_message_and_exits_1(store_root: Path) -> None:
    store = new_store()
    assert run_cli("validate", SKILL).returncode == 0
    path = scope_file(store)
    path.write_text(re.sub(r"^- first_seen: .*$", "- first_seen: 2026-13-01", path.read_text(), flags=re.M))
    proc = run_cli("validate", SKILL)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"learnings/{path.name}:3: first_seen must be a date (YYYY-MM-DD)")
    assert run_cli("validate", SKILL, "--staged").returncode == 0  # nothing broken is staged
    git(store, "add", "-A")
    proc = run_cli("validate", SKILL, "--staged", "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["errors"][0]["line"] == 3
    git(store, "reset", "-q", "--hard")
    fsck(store)


def test_edit_that_breaks_a_block_is_dropped_without_a_terminal(store_root: Path, tmp_path: Path) -> None:
    store = new_store()
    editor = tmp_path / "break.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/^- recurrence: 1$/- recurrence: many/' \"$@\"\n")
    editor.chmod(0o755)
    before = tree_state(store)
    proc = run_cli("edit", SKILL, "color encoding", env={"EDITOR": str(editor)})
    assert proc.returncode == 1
    assert f"learnings/{scope_file(store).name}:2: recurrence must be a positive integer" in proc.stderr
    assert tree_state(store) == before and git(store, "status", "--porcelain").stdout == ""
    assert not list((store / ".git").glob("whetstone-edit-*"))
    proc = run_cli("edit", SKILL, "color encoding", env={"EDITOR": "true"})
    assert proc.returncode == 0 and proc.stdout.startswith("unchanged")
    fsck(store)


def test_edit_a_new_scope_starts_from_a_template_with_the_next_id(store_root: Path, tmp_path: Path) -> None:
    store = new_store()
    editor = tmp_path / "fill.sh"
    editor.write_text("#!/bin/sh\nsed -i -e 's/^Write the rule here.*$/Never round the corners of a table./' "
                      "-e 's/A short title for the rule/Square corners/' \"$@\"\n")
    editor.chmod(0o755)
    proc = run_cli("edit", SKILL, "corner radius", "--issue", "--json", env={"EDITOR": str(editor)})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "committed" and result["message"] == "edit: add I1 (corner radius)"
    assert git(store, "log", "-1", "--format=%s").stdout.strip() == "edit: add I1 (corner radius)"
    assert rules(intent="corner radius of the table")["I1"] == "Never round the corners of a table."
    proc = run_cli("edit", SKILL, "corner radius", env={"EDITOR": str(editor)})
    assert proc.stdout.startswith("unchanged")  # an existing scope opens its file, as it is
    proc = run_cli("edit", SKILL, "brand new scope", env={"EDITOR": "true"})
    assert proc.stdout.startswith("unchanged") and not list((store / "learnings").glob("brand-new-scope-*"))
    fsck(store)


def test_edit_names_changed_moved_and_removed_ids(store_root: Path, tmp_path: Path) -> None:
    store = new_store()
    colors, money = scope_file(store), scope_file(store, "currency formatting")
    script = tmp_path / "shuffle.py"
    script.write_text(
        "import sys, pathlib\n"
        f"colors = pathlib.Path({str(colors.relative_to(store))!r})\n"
        f"money = pathlib.Path({str(money.relative_to(store))!r})\n"
        "colors.write_text(colors.read_text().replace('warm palette', 'warm YlOrBr palette'))\n"
        "money.write_text('')\n")
    proc = run_cli("edit", SKILL, env={"EDITOR": f"{sys.executable} {script}"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "committed: edit: change L1, remove L2 (color encoding, currency formatting)"
    assert not money.exists() and set(rules()) == {"L1"}
    fsck(store)


def test_reindex_rebuilds_the_index_and_prints_counts(store_root: Path) -> None:
    store = new_store()
    proc = run_cli("reindex", SKILL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"reindexed {SKILL}: 2 learnings, 0 issues in 2 scopes")
    assert (store / "index.sqlite").exists()
    assert json.loads(run_cli("reindex", SKILL, "--json").stdout)["learnings"] == 2


def test_install_man_lets_git_help_open_the_page(store_root: Path, tmp_path: Path) -> None:
    import shutil
    import subprocess
    if not shutil.which("man"):
        pytest.skip("man is not installed")
    mandir = tmp_path / "man"
    proc = run_cli("install-man", "--dir", str(mandir / "man1"))
    assert proc.returncode == 0 and (mandir / "man1" / "git-whetstone.1").exists()
    # git opens git-<cmd>'s page only for a command it can find: git-whetstone is on PATH once installed
    env = {**os.environ, "MANPATH": str(mandir), "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for args in (["help", "whetstone"], ["whetstone", "--help"]):
        proc = subprocess.run(["git", *args], capture_output=True, text=True, env=env)
        assert "git-whetstone - a git-native memory" in proc.stdout, (args, proc.stderr)
