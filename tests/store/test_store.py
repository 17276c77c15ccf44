"""The store (SPEC §3): skill names, attach, the git identity, the write lock, id minting and
atomic write-and-commit — all against real git repositories and real processes."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from git_whetstone.format import blocks, edits
from git_whetstone.base.config import load
from git_whetstone.base.errors import RUNTIME, WhetstoneError
from git_whetstone.format.layout import GITIGNORE, scope_filename, skill_name
from git_whetstone.store.store import Store, list_skills
from git_whetstone.ops.writing.attach import attach
from git_whetstone.base.clock import today

from ..helpers import git, run_cli, tree_state

FIXTURES = Path(__file__).parent.parent / "fixtures" / "blocks" / "valid"
IDENTITY_VARS = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")


def open_store(skill: str = "demo") -> Store:
    attach(skill)
    return Store.open(load(), skill)


def learning_block(bid: str, scope: str = "colour", body: str | None = None) -> str:
    body = body or f"Rule number {bid[1:]} about {scope}."
    return edits.render(bid, blocks.derive_title(body), [("recurrence", "1"), ("first_seen", "2026-07-01"),
                                                          ("last_seen", "2026-07-01"), ("scope", scope)], body)


def issue_block(bid: str, scope: str = "corners") -> str:
    return edits.render(bid, "Never round corners", [("scope", scope)], f"Never round corners ({bid}).")


def add(store: Store, kind: str, scope: str = "colour") -> str:
    """Mint an id, write its block and next_ids.json in one commit, like capture does."""
    folder = "learnings" if kind == "learning" else "issues"
    present = [b.id for p in store.scope_files(kind) for b in blocks.parse(p.read_text(), folder=folder).blocks]
    top = {prefix: max((int(i[1:]) for i in present if i[0] == prefix), default=0) for prefix in "LI"}
    bid, ids = store.mint(kind, top)
    path = store.path / folder / scope_filename(scope)
    text = path.read_text() if path.exists() else ""
    new = learning_block(bid, scope) if kind == "learning" else issue_block(bid, scope)
    store.write_and_commit(f"test: add {bid}", {path: edits.append(text, new), store.path / "next_ids.json": ids})
    return bid


def top_of(ids: set[str]) -> dict[str, int]:
    """The highest id number per prefix among `ids`, as a snapshot reports it to mint."""
    return {prefix: max((int(i[1:]) for i in ids if i[0] == prefix), default=0) for prefix in "LI"}


def head_author(repo: Path) -> tuple[str, str]:
    out = git(repo, "log", "-1", "--format=%an <%ae>%n%cn <%ce>").stdout.splitlines()
    return out[0], out[1]


def no_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user who never configured git: no identity in the environment, HOME or XDG config."""
    for key in (*IDENTITY_VARS, "EMAIL", "GIT_CONFIG_GLOBAL"):
        monkeypatch.delenv(key, raising=False)
    home = Path(os.environ["HOME"])
    assert not (home / ".gitconfig").exists()
    assert not (Path(os.environ["XDG_CONFIG_HOME"]) / "git" / "config").exists()


# --- skill names ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "name"), [
    ("great-tables", "great-tables"), ("Great Tables", "great-tables"), ("  PPTX  ", "pptx"),
    ("__global__", "__global__"), ("a", "a"), ("a" * 64, "a" * 64), ("0day", "0day"),
    ("x.y_z-1", "x.y_z-1"), ("Front End Design", "front-end-design"),
])
def test_good_skill_names(raw: str, name: str):
    assert skill_name(raw) == name


@pytest.mark.parametrize("raw", [
    "../x", "..", ".", "a/b", "/abs", "a\\b", "", "   ", "a" * 65, "a" * 200, "con", "CON", "con.txt", "nul",
    "aux", "com1", "lpt9", "a\x00b", "a\nb", "a\tb", "\x1b[31mred", "a\x7fb", ".hidden", "-x", "_x", "x.",
    "x.lock", "café", "über", "a:b", "a*b", "__global", "_global__", None, 5, ["x"], b"demo",
])
def test_bad_skill_names_are_refused_with_a_short_clear_error(raw: object):
    with pytest.raises(WhetstoneError) as info:
        skill_name(raw)
    error = info.value
    assert error.exit_code == 2 and "\n" not in error.message and len(error.message) < 200
    assert "skill name" in error.message


@pytest.mark.parametrize("raw", ["abc\x1f", "\x0babc", "abc\n", "\tabc", "abc\r", "abc\x0c"])
def test_control_characters_at_the_edges_of_a_name_are_refused(raw: str):
    """str.strip() would quietly drop these (they count as white space); SPEC §3 refuses them."""
    with pytest.raises(WhetstoneError, match="control characters"):
        skill_name(raw)


def test_open_refuses_bad_names_before_touching_the_disk(store_root: Path):
    with pytest.raises(WhetstoneError):
        Store.open(load(), "../escape")
    with pytest.raises(WhetstoneError):
        attach("a/b")
    assert not store_root.exists() and not (store_root.parent / "escape").exists()


def test_open_refuses_a_store_linked_outside_the_root(store_root: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    store_root.mkdir(parents=True)
    (store_root / "evil").symlink_to(outside)
    with pytest.raises(WhetstoneError, match="outside the store root"):
        Store.open(load(), "evil")
    inside = store_root / "real"
    inside.mkdir()
    (store_root / "alias").symlink_to(inside)
    assert Store.open(load(), "alias").path == store_root / "alias"


# --- attach ----------------------------------------------------------------------------------------

def test_attach_creates_a_repo_whose_first_commit_is_exactly_gitignore_and_next_ids(store_root: Path):
    result = attach("Great Tables")
    path = store_root / "great-tables"
    assert result == {"skill": "great-tables", "path": str(path), "created": True, "status": "attached"}
    assert git(path, "rev-list", "--count", "HEAD").stdout.strip() == "1"
    assert git(path, "ls-tree", "-r", "--name-only", "HEAD").stdout.split() == [".gitignore", "next_ids.json"]
    assert git(path, "show", "HEAD:.gitignore").stdout == "index.sqlite*\nevents.jsonl\ncompact-report.md\n"
    assert GITIGNORE == "index.sqlite*\nevents.jsonl\ncompact-report.md\n"
    ids = git(path, "show", "HEAD:next_ids.json").stdout
    assert json.loads(ids) == {"learning": 1, "issue": 1} and ids.endswith("\n")
    assert (path / "learnings").is_dir() and (path / "issues").is_dir()
    assert git(path, "status", "--porcelain").stdout == ""
    assert git(path, "symbolic-ref", "--short", "HEAD").stdout.strip() == "main"
    assert "great-tables" in git(path, "log", "-1", "--format=%s").stdout
    fsck = git(path, "fsck", "--strict", "--no-dangling")
    assert fsck.stdout.strip() == "" and fsck.stderr.strip() == ""
    for name in (".gitignore", "next_ids.json"):
        assert stat.S_IMODE((path / name).stat().st_mode) == 0o644
    assert list_skills(load()) == ["great-tables"]


def test_attach_twice_is_already_attached_and_changes_nothing(store_root: Path):
    attach("demo")
    before = tree_state(store_root / "demo")
    result = attach("Demo")
    assert result["status"] == "already_attached" and result["created"] is False and result["skill"] == "demo"
    assert tree_state(store_root / "demo") == before


def test_attach_the_global_layer(store_root: Path):
    assert attach("__global__")["path"] == str(store_root / "__global__")
    assert list_skills(load()) == ["__global__"]


def test_attach_records_the_skill_directory(store_root: Path, tmp_path: Path):
    skill_dir = tmp_path / "my-skill"
    skill_dir.mkdir()
    result = attach("demo", str(skill_dir))
    assert result["skill_path"] == str(skill_dir.resolve())
    assert git(store_root / "demo", "config", "whetstone.skillPath").stdout.strip() == str(skill_dir.resolve())


def test_attach_with_a_path_that_is_not_a_directory_creates_nothing(store_root: Path, tmp_path: Path):
    with pytest.raises(WhetstoneError, match="not a directory"):
        attach("demo", str(tmp_path / "missing"))
    assert not (store_root / "demo").exists()


def test_attach_refuses_a_directory_that_is_not_a_store(store_root: Path):
    (store_root / "demo").mkdir(parents=True)
    (store_root / "demo" / "notes.txt").write_text("mine")
    with pytest.raises(WhetstoneError, match="not a whetstone store"):
        attach("demo")
    assert (store_root / "demo" / "notes.txt").read_text() == "mine" and not (store_root / "demo" / ".git").exists()
    (store_root / "empty").mkdir()
    assert attach("empty")["status"] == "attached"


def test_list_skills_ignores_what_is_not_a_store(store_root: Path):
    attach("b-skill")
    attach("a-skill")
    (store_root / "plain-dir").mkdir()
    (store_root / "Bad Name").mkdir()
    git(store_root / "Bad Name", "init", "-q")
    assert list_skills(load()) == ["a-skill", "b-skill"]


# --- who commits -----------------------------------------------------------------------------------

def test_commits_use_the_identity_in_the_environment(store_root: Path):
    attach("demo")
    assert head_author(store_root / "demo") == ("Test Author <author@example.com>",
                                                "Test Committer <committer@example.com>")


def test_a_user_without_any_git_identity_still_gets_commits_by_whetstone(store_root: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    no_identity(monkeypatch)
    # git itself refuses to commit here (the premise of the test)
    bare = store_root.parent / "plain"
    bare.mkdir()
    git(bare, "init", "-q")
    git(bare, "config", "user.useConfigOnly", "true")
    assert git(bare, "commit", "--allow-empty", "-m", "x", check=False).returncode != 0

    store = open_store("demo")
    assert head_author(store.path) == ("whetstone <whetstone@localhost>", "whetstone <whetstone@localhost>")
    add(store, "learning")
    assert head_author(store.path) == ("whetstone <whetstone@localhost>", "whetstone <whetstone@localhost>")
    assert git(store.path, "rev-list", "--count", "HEAD").stdout.strip() == "2"
    assert git(store.path, "fsck", "--strict").returncode == 0


@pytest.mark.parametrize("where", ["home", "xdg"])
def test_a_configured_global_identity_is_used(where: str, store_root: Path, monkeypatch: pytest.MonkeyPatch):
    no_identity(monkeypatch)
    config = (Path(os.environ["HOME"]) / ".gitconfig" if where == "home"
              else Path(os.environ["XDG_CONFIG_HOME"]) / "git" / "config")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")
    store = open_store("demo")
    add(store, "issue")
    for sha in git(store.path, "rev-list", "HEAD").stdout.split():
        who = git(store.path, "show", "-s", "--format=%an <%ae>|%cn <%ce>", sha).stdout.strip()
        assert who == "Ada Lovelace <ada@example.org>|Ada Lovelace <ada@example.org>"


def test_a_partly_configured_identity_is_completed_not_replaced(store_root: Path, monkeypatch: pytest.MonkeyPatch):
    no_identity(monkeypatch)
    (Path(os.environ["HOME"]) / ".gitconfig").write_text("[user]\n\tname = Ada Lovelace\n")
    store = open_store("demo")
    assert head_author(store.path)[0] == "Ada Lovelace <whetstone@localhost>"


def test_an_identity_configured_in_the_store_is_used(store_root: Path, monkeypatch: pytest.MonkeyPatch):
    store = open_store("demo")
    no_identity(monkeypatch)  # a new process, in effect: nothing cached
    git(store.path, "config", "user.name", "Store Owner")
    git(store.path, "config", "user.email", "owner@example.net")
    add(store, "learning")
    assert head_author(store.path) == ("Store Owner <owner@example.net>", "Store Owner <owner@example.net>")


def test_an_identity_configured_later_is_used_by_a_long_lived_process(store_root: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    no_identity(monkeypatch)
    """The MCP server lives long: once git is configured, its next commit must carry that identity."""
    store = open_store("demo")  # falls back to whetstone: nothing configured yet
    assert head_author(store.path)[0] == "whetstone <whetstone@localhost>"
    (Path(os.environ["HOME"]) / ".gitconfig").write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")
    add(store, "learning")
    assert head_author(store.path)[0] == "Ada Lovelace <ada@example.org>"


# --- the write lock -----------------------------------------------------------------------------------

HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


@pytest.fixture
def held_lock(store_root: Path):
    """A second process holding demo's write lock until the test ends."""
    store = open_store("demo")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(store.path / ".git" / "whetstone.lock")],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_held_lock_makes_a_write_fail_with_store_busy_within_the_timeout(
        held_lock: subprocess.Popen, store_root: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WHETSTONE_LOCK_TIMEOUT", "0.5")
    store = Store.open(load(), "demo")
    before = tree_state(store.path)
    started = time.monotonic()
    with pytest.raises(WhetstoneError, match="store busy") as info:
        with store.lock():
            add(store, "learning")
    waited = time.monotonic() - started
    assert 0.45 <= waited < 3, waited
    assert info.value.exit_code == RUNTIME and "demo" in info.value.message
    assert tree_state(store.path) == before

    # the same through the library's capture, and through the CLI: exit 1, one line on stderr
    from git_whetstone.ops.writing.capture import capture
    with pytest.raises(WhetstoneError, match="store busy"):
        capture("demo", "learning", "Use a warm palette for heat maps.", "colour")
    proc = run_cli("capture", "demo", "Use a warm palette for heat maps.", "--scope", "colour")
    assert proc.returncode == 1 and "store busy" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert tree_state(store.path) == before


def test_the_lock_is_free_again_once_its_holder_dies(held_lock: subprocess.Popen, store_root: Path,
                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WHETSTONE_LOCK_TIMEOUT", "5")
    held_lock.kill()  # killed without any cleanup: flock dies with the process
    held_lock.wait()
    store = Store.open(load(), "demo")
    started = time.monotonic()
    with store.lock():
        add(store, "learning")
    assert time.monotonic() - started < 3
    assert git(store.path, "rev-list", "--count", "HEAD").stdout.strip() == "2"


def test_a_waiting_writer_gets_the_lock_when_it_is_released(store_root: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WHETSTONE_LOCK_TIMEOUT", "10")
    store = open_store("demo")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.replace("time.sleep(60)", "time.sleep(0.4)"),
                               str(store.path / ".git" / "whetstone.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        with store.lock():
            waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert 0.1 < waited < 5


def test_locking_needs_a_store(store_root: Path):
    store = Store.open(load(), "nothing-here")
    with pytest.raises(WhetstoneError, match="no store"):
        with store.lock():
            pass


# --- ids ---------------------------------------------------------------------------------------------

def test_mint_counts_up_per_kind_and_never_reuses_a_removed_id(store_root: Path):
    store = open_store("demo")
    assert [add(store, "learning") for _ in range(3)] == ["L1", "L2", "L3"]
    assert add(store, "issue", "corners") == "I1"
    # delete the newest learning by hand, in a later commit
    path = store.path / "learnings" / scope_filename("colour")
    text = path.read_text()
    (l3,) = [b for b in blocks.parse(text).blocks if b.id == "L3"]
    store.write_and_commit("test: remove L3", {path: edits.remove(text, l3)})
    assert add(store, "learning") == "L4"
    assert add(store, "issue", "corners") == "I2"
    assert json.loads((store.path / "next_ids.json").read_text()) == {"learning": 5, "issue": 3}
    assert store.warnings == []


def test_mint_returns_the_id_and_the_next_ids_text_to_commit_with_it(store_root: Path):
    store = open_store("demo")
    assert store.mint("learning", {}) == ("L1", json.dumps({"learning": 2, "issue": 1}) + "\n")
    assert store.mint("issue", {})[0] == "I1"
    assert (store.path / "next_ids.json").read_text() == json.dumps({"learning": 1, "issue": 1}) + "\n"


def test_an_id_minted_for_a_write_that_failed_is_not_handed_out_again(store_root: Path):
    store = open_store("demo")
    first, _ = store.mint("learning", {})
    assert store.mint("learning", {})[0] != first


def test_mint_never_shadows_a_hand_added_block(store_root: Path):
    store = open_store("demo")
    assert store.mint("learning", top_of({"L9", "I3"}))[0] == "L10"
    assert store.mint("issue", top_of({"L9", "I3"}))[0] == "I4"


@pytest.mark.parametrize("corrupt", ["{not json", "", "[]", '{"learning": "3", "issue": 1}',
                                     '{"learning": 0, "issue": 1}', '{"learning": true, "issue": 1}',
                                     '{"learning": 2}', None])
def test_a_corrupt_next_ids_is_rebuilt_from_markdown_and_history_with_a_warning(corrupt: str | None,
                                                                                  store_root: Path):
    store = open_store("demo")
    for _ in range(3):
        add(store, "learning")
    add(store, "issue", "corners")
    ids = store.path / "next_ids.json"
    # the newest learning is deleted, and a broken next_ids.json committed with it
    path = store.path / "learnings" / scope_filename("colour")
    text = path.read_text()
    (l3,) = [b for b in blocks.parse(text).blocks if b.id == "L3"]
    store.write_and_commit("test: break things", {path: edits.remove(text, l3), ids: corrupt})
    assert not ids.exists() if corrupt is None else ids.read_text() == corrupt

    present = {"L1", "L2", "I1"}
    bid, new_ids = store.mint("learning", top_of(present))
    assert bid == "L4"  # L3 lives only in history, and is still never reused
    assert json.loads(new_ids) == {"learning": 5, "issue": 2}
    assert len(store.warnings) == 1 and "next_ids.json" in store.warnings[0]
    assert store.mint("issue", top_of(present))[0] == "I2"


def test_a_corrupt_working_copy_falls_back_to_the_committed_counters(store_root: Path):
    store = open_store("demo")
    add(store, "learning")
    add(store, "learning")
    (store.path / "next_ids.json").write_text("garbage")
    assert store.mint("learning", top_of({"L1", "L2"}))[0] == "L3"
    assert store.warnings


def test_recovery_sees_ids_minted_on_other_branches(store_root: Path):
    store = open_store("demo")
    add(store, "learning")
    git(store.path, "checkout", "-q", "-b", "experiment")
    for _ in range(3):
        add(store, "learning")  # L2..L4, only on the branch
    git(store.path, "checkout", "-q", "main")
    (store.path / "next_ids.json").write_text("{")
    git(store.path, "commit", "-q", "-am", "break next_ids")
    assert store.mint("learning", top_of({"L1"}))[0] == "L5"


def test_ids_are_not_reused_after_a_capture_is_reverted(store_root: Path):
    """`git revert` of a capture rolls next_ids.json back too; re-minting the reverted id would leave
    two entries with one id once the revert itself is reverted (SPEC: ids never reused)."""
    store = open_store("demo")
    add(store, "learning")
    add(store, "learning")  # L2
    git(store.path, "revert", "--no-edit", "HEAD")
    assert json.loads((store.path / "next_ids.json").read_text()) == {"learning": 2, "issue": 1}
    assert add(store, "learning") == "L3"
    assert json.loads((store.path / "next_ids.json").read_text()) == {"learning": 4, "issue": 1}


def test_ids_are_not_reused_in_a_fresh_clone_after_a_revert(store_root: Path, tmp_path: Path):
    store = open_store("demo")
    add(store, "learning")
    add(store, "learning")  # L2
    git(store.path, "revert", "--no-edit", "HEAD")
    clone = store_root / "copy"
    subprocess.run(["git", "clone", "-q", str(store.path), str(clone)], check=True)
    assert Store.open(load(), "copy").mint("learning", top_of({"L1"}))[0] == "L3"


def test_an_earlier_implementation_store_reads_and_mints_above_its_ids(store_root: Path):
    """A `<slug>-<16hex>.md` file from whetstone-mcp 0.1.0 is read as is; new ids go above its ids."""
    from git_whetstone.ops.writing.capture import capture
    from git_whetstone.ops.recall import recall

    store = open_store("legacy")
    old = FIXTURES / "currency-formatting-3f9a1c2b7d4e5f60.md"
    target = store.path / "learnings" / old.name
    shutil.copyfile(old, target)
    git(store.path, "add", "learnings")
    git(store.path, "commit", "-q", "-m", "import the 0.1.0 store")
    assert store.scope_files("learning") == [target]

    found = recall("legacy", "currency formatting of the price column")
    assert {"L1", "L3"} <= {e["id"] for e in found["learnings"]}
    result = capture("legacy", "learning", "Show thousands separators in every currency column.",
                     "currency formatting")
    assert result["status"] == "committed" and result["entry_id"] == "L4"
    text = target.read_bytes().decode()
    assert text.startswith(old.read_bytes().decode())  # appended to the same file, nothing rewritten
    assert [b.id for b in blocks.parse(text, folder="learnings").blocks] == ["L1", "L3", "L4"]


# --- files and commits -------------------------------------------------------------------------------

def test_scope_filenames_are_readable_stable_and_distinct():
    name = scope_filename("Currency  Formatting")
    assert name == scope_filename("currency formatting") and name.startswith("currency-formatting-")
    assert len(name.rsplit("-", 1)[1]) == len("12345678.md")
    assert scope_filename("currency formatting!") != name
    assert scope_filename("货币格式").startswith("scope-")
    assert scope_filename("货币格式") != scope_filename("颜色")
    assert len(scope_filename("x" * 300)) < 70


def test_write_and_commit_is_one_commit_of_exactly_those_files(store_root: Path):
    store = open_store("demo")
    a, b = store.path / "learnings" / "a.md", store.path / "issues" / "b.md"
    store.write_and_commit("test: two files", {a: learning_block("L1"), b: issue_block("I1")})
    assert git(store.path, "log", "-1", "--format=%s").stdout.strip() == "test: two files"
    changed = git(store.path, "show", "--name-status", "--format=", "HEAD").stdout.split("\n")
    assert sorted(line for line in changed if line) == ["A\tissues/b.md", "A\tlearnings/a.md"]
    assert a.read_text() == learning_block("L1")
    assert stat.S_IMODE(a.stat().st_mode) == 0o644
    store.write_and_commit("test: delete one", {b: None})
    assert not b.exists()
    assert git(store.path, "show", "--name-status", "--format=", "HEAD").stdout.strip() == "D\tissues/b.md"
    assert git(store.path, "status", "--porcelain").stdout == ""
    assert git(store.path, "fsck", "--strict").returncode == 0
    assert not list(store.path.rglob("*.tmp"))


def test_write_and_commit_leaves_other_work_in_progress_alone(store_root: Path):
    store = open_store("demo")
    a, b, c = (store.path / "learnings" / f"{n}.md" for n in "abc")
    store.write_and_commit("test: setup", {a: learning_block("L1"), b: learning_block("L2")})
    a.write_text(learning_block("L1", body="A hand edit in progress."))  # modified, not staged
    b.write_text(learning_block("L2", body="A staged hand edit."))
    git(store.path, "add", "learnings/b.md")  # staged by the user
    store.write_and_commit("test: only c", {c: learning_block("L3")})
    assert git(store.path, "show", "--name-only", "--format=", "HEAD").stdout.split() == ["learnings/c.md"]
    status = git(store.path, "status", "--porcelain").stdout.splitlines()
    assert sorted(status) == [" M learnings/a.md", "M  learnings/b.md"]


def test_files_are_written_0644_whatever_the_umask(store_root: Path):
    store = open_store("demo")
    path = store.path / "learnings" / "a.md"
    old = os.umask(0o077)
    try:
        store.write_and_commit("test: umask", {path: learning_block("L1")})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_failed_commit_puts_every_file_back(store_root: Path):
    store = open_store("demo")
    kept, changed, gone = (store.path / "learnings" / f"{n}.md" for n in ("kept", "changed", "gone"))
    store.write_and_commit("test: setup", {kept: learning_block("L1"), changed: learning_block("L2"),
                                           gone: learning_block("L3")})
    hook = store.path / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'nope: rejected by the hook' >&2\nexit 1\n")
    hook.chmod(0o755)
    before = tree_state(store.path)
    new = store.path / "issues" / "new.md"
    with pytest.raises(WhetstoneError, match="rejected by the hook") as info:
        store.write_and_commit("test: rejected", {changed: learning_block("L2", body="Reworded."),
                                                  gone: None, new: issue_block("I1"),
                                                  store.path / "next_ids.json": '{"learning": 9, "issue": 9}\n'})
    assert info.value.exit_code == RUNTIME
    assert tree_state(store.path) == before
    assert not new.exists() and gone.exists()
    assert git(store.path, "status", "--porcelain").stdout == ""  # the work tree and git's index
    assert git(store.path, "diff", "--cached", "--name-only").stdout == ""
    assert not list(store.path.rglob("*.tmp"))
    hook.unlink()
    store.write_and_commit("test: accepted", {new: issue_block("I1")})  # and the store still works
    assert git(store.path, "status", "--porcelain").stdout == ""


def test_today_can_be_pinned(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WHETSTONE_TODAY", "2026-02-28")
    assert today().isoformat() == "2026-02-28"
    monkeypatch.setenv("WHETSTONE_TODAY", "2026-02-30")
    with pytest.raises(WhetstoneError, match="WHETSTONE_TODAY"):
        today()


def test_a_capture_never_commits_what_the_user_staged(store_root: Path):
    """The tool commits only its own files, even in a long-lived process that skips the staged-
    changes check while git's index is as it left it."""
    from git_whetstone.ops.writing.capture import capture
    capture("demo", "learning", "Bold the header row", "headers", "x")
    store = store_root / "demo"
    path = next((store / "learnings").glob("*.md"))
    path.write_text(path.read_text().replace("Bold the header row\n", "Bold the header row, always\n"))
    git(store, "add", "-A")  # a hand edit staged but not committed
    capture("demo", "learning", "Band alternate rows in grey", "banding", "x")
    committed = git(store, "show", "--stat", "--format=", "HEAD").stdout
    assert "banding" in committed and "headers" not in committed
    assert git(store, "diff", "--cached", "--name-only").stdout.strip().startswith("learnings/headers")


def test_an_id_in_a_broken_hand_written_file_is_not_minted_again(store_root: Path):
    from git_whetstone.ops.writing.capture import capture
    capture("demo", "learning", "Bold the header row", "headers", "x")
    store = store_root / "demo"
    (store / "learnings" / "hand.md").write_text(  # no blank line before the body: invalid
        "## L2 · Hand rule\n- recurrence: 1\n- first_seen: 2026-01-01\n- last_seen: 2026-01-01\n"
        "- scope: hand\nUse a warm palette\n")
    made = capture("demo", "learning", "Band alternate rows in grey", "banding", "x")
    assert made["entry_id"] == "L3"
    assert any("hand.md" in w for w in made["warnings"])


def test_concurrent_first_captures_into_a_new_skill_all_land(store_root: Path):
    """Several processes creating the same store at once: one creates it, none removes it, every
    capture lands with its own id."""
    import subprocess
    import sys
    bodies = ["Bold the header row", "Band alternate rows", "Right-align numbers", "Use thin borders"]
    procs = [subprocess.Popen([sys.executable, "-m", "git_whetstone", "--json", "capture", "race", body,
                               "--scope", f"s{i}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, body in enumerate(bodies)]
    results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
    assert all(code == 0 for code, _, _ in results), results
    ids = sorted(json.loads(out)["entry_id"] for _, out, _ in results)
    assert ids == ["L1", "L2", "L3", "L4"]
    assert git(store_root / "race", "log", "--format=%s").stdout.count("attach: create") == 1
    git(store_root / "race", "fsck", "--strict")


def test_a_commit_stages_exactly_its_paths_as_git_add_and_rm_would(tmp_path: Path) -> None:
    """`runner.commit` stages its paths by name (changed, new, deleted, and one in neither the work
    tree nor git's index) and nothing else: the same tree as `git add -A` and `git rm --cached` of
    those paths, and a hand edit to another file stays unstaged."""
    from git_whetstone.git import runner

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    for rel in ("learnings/a.md", "learnings/b.md", "issues/c.md", "learnings/keep.md"):
        (repo / rel).parent.mkdir(exist_ok=True)
        (repo / rel).write_text(f"{rel}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "start")
    (repo / "learnings/a.md").write_text("changed\n")
    (repo / "learnings/b.md").unlink()
    (repo / "issues/new one.md").write_text("new\n")
    (repo / "learnings/keep.md").write_text("a hand edit, not committed\n")
    reference = tmp_path / "reference"
    shutil.copytree(repo, reference)
    git(reference, "add", "-A", "--", "learnings/a.md", "issues/new one.md")
    git(reference, "rm", "-q", "--cached", "--", "learnings/b.md")
    git(reference, "commit", "-qm", "reference")
    runner.commit(repo, "whetstone", ["learnings/a.md", "learnings/b.md", "issues/new one.md", "learnings/gone.md"])
    assert git(repo, "rev-parse", "HEAD^{tree}").stdout == git(reference, "rev-parse", "HEAD^{tree}").stdout
    assert git(repo, "status", "--porcelain").stdout == " M learnings/keep.md\n"


def _many_file_change(folder: Path) -> tuple[dict[Path, bytes | None], dict[Path, bytes | None]]:
    """Files before and after a change of 80 files: blocks retired, files emptied away, blocks
    moved into other files (which gain an id), a new file, and next_ids.json."""
    def block(n: int) -> str:
        return f"## L{n} · rule {n}\n- recurrence: 1\n- first_seen: 2026-01-01\n- last_seen: 2026-01-01\n- scope: s\n\nRule {n}.\n"
    (folder / "learnings").mkdir(parents=True)
    old: dict[Path, bytes | None] = {}
    for f in range(80):
        path = folder / "learnings" / f"s{f}.md"
        path.write_text(block(2 * f + 1) + "\n" + block(2 * f + 2))
        old[path] = path.read_bytes()
    (folder / "next_ids.json").write_text('{"L": 160, "I": 0}\n')
    old[folder / "next_ids.json"] = (folder / "next_ids.json").read_bytes()
    new: dict[Path, bytes | None] = {}
    for f in range(0, 80, 2):  # s1's blocks move into s0, s3's into s2, ...; s<odd> is deleted
        new[folder / "learnings" / f"s{f + 1}.md"] = None
        new[folder / "learnings" / f"s{f}.md"] = "\n".join(block(n) for n in range(2 * f + 1, 2 * f + 5)).encode()
    for f in range(0, 80, 8):  # some keep one block only
        new[folder / "learnings" / f"s{f}.md"] = block(2 * f + 1).encode()
    new[folder / "learnings" / "fresh.md"] = block(161).encode()
    new[folder / "next_ids.json"] = b'{"L": 161, "I": 0}\n'
    old[folder / "learnings" / "fresh.md"] = None
    old = {p: old[p] for p in new}
    return old, new


def test_a_many_file_change_lands_in_stages_as_one_file_at_a_time_would(tmp_path: Path, monkeypatch) -> None:
    """`journal.apply` of many files (threads side by side) leaves the files a file-at-a-time
    apply leaves, no temporary behind, and renames every file that gains no id before any file
    that gains one, next_ids.json last: an id is never in two files on disk."""
    import re as re_module

    from git_whetstone.store import journal

    old, new = _many_file_change(tmp_path / "fast")
    assert len(new) >= journal.MANY
    ref_old, ref_new = _many_file_change(tmp_path / "slow")
    for path in ref_new:  # the reference: each file in turn, in any order (the end state only)
        journal.put(path, ref_new[path])
    landed: list[Path] = []
    real_replace, real_unlink = os.replace, Path.unlink

    def replace(src, dst):
        real_replace(src, dst)
        landed.append(Path(dst))

    def unlink(self, missing_ok=False):
        real_unlink(self, missing_ok=missing_ok)
        landed.append(self)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(Path, "unlink", unlink)
    journal.apply(old, new)
    monkeypatch.undo()
    assert tree_state(tmp_path / "fast") == tree_state(tmp_path / "slow")
    assert not [p for p in (tmp_path / "fast").rglob("*") if p.name.endswith(".tmp")]

    def ids(data: bytes | None) -> set[str]:
        return set(re_module.findall(r"^## (L\d+) ·", (data or b"").decode(), re_module.M))
    gaining = {p for p in new if p.name != "next_ids.json" and ids(new[p]) - ids(old[p])}
    assert sorted(landed) == sorted(new) and 0 < len(gaining) < len(new) - 1
    order = {p: n for n, p in enumerate(landed)}
    assert max(order[p] for p in new if p not in gaining and p.name != "next_ids.json") < \
        min(order[p] for p in gaining) and landed[-1].name == "next_ids.json"


def test_a_many_file_change_that_cannot_write_a_file_changes_none(tmp_path: Path) -> None:
    """If one temporary file cannot be written (here the last, whose name is too long once made a
    temporary's), no file is renamed and no temporary is left."""
    from git_whetstone.store import journal

    old, new = _many_file_change(tmp_path)
    before = tree_state(tmp_path)
    long = tmp_path / "learnings" / f"{'x' * 248}.md"
    old[long], new[long] = None, "## L999 · x\n".encode()
    with pytest.raises(OSError):
        journal.apply(old, new)
    assert tree_state(tmp_path) == before


def test_a_file_is_held_when_head_has_exactly_its_bytes(tmp_path: Path):
    """`tree.against_head` (what a write checks before it commits a scope file): each file's bytes,
    whether HEAD holds exactly them (absent counting as absent), and the blob id when it does; for
    files at the top, in a folder with many files, in a folder HEAD lacks, and where HEAD has a folder."""
    from git_whetstone.git.tree import against_head
    repo = tmp_path / "repo"
    (repo / "learnings" / "deep").mkdir(parents=True)
    git(tmp_path, "init", "-q", str(repo))
    for i in range(300):
        (repo / "learnings" / f"scope-{i}.md").write_text(f"rule {i}\n")
    (repo / "learnings" / "deep" / "inner.md").write_text("inner\n")
    (repo / "top.md").write_text("top\n")
    (repo / "solid").write_text("a file in HEAD, a folder on disk\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "files")
    (repo / "learnings" / "scope-7.md").write_text("rule 7, edited\n")
    (repo / "learnings" / "scope-8.md").unlink()
    (repo / "learnings" / "new.md").write_text("new\n")
    (repo / "issues").mkdir()
    (repo / "issues" / "fresh.md").write_text("fresh\n")
    shutil.rmtree(repo / "learnings" / "deep")  # HEAD's folder of that name is no file of it
    (repo / "solid").unlink()
    (repo / "solid").mkdir()
    (repo / "solid" / "inner.md").write_text("inner\n")
    rels = ["top.md", "learnings/scope-1.md", "learnings/scope-7.md", "learnings/scope-8.md", "learnings/new.md",
            "learnings/never.md", "issues/fresh.md", "issues/never.md", "learnings/deep", "nowhere/at/all.md",
            "solid/inner.md", "solid/through/it.md"]  # (folders HEAD holds as a file)
    found = against_head(repo, rels)
    same = {rel: held for rel, (_, held, _) in found.items()}
    assert same == {"top.md": True, "learnings/scope-1.md": True, "learnings/scope-7.md": False,
                    "learnings/scope-8.md": False, "learnings/new.md": False, "learnings/never.md": True,
                    "issues/fresh.md": False, "issues/never.md": True, "learnings/deep": True,
                    "nowhere/at/all.md": True, "solid/inner.md": False, "solid/through/it.md": True}
    blob = git(repo, "rev-parse", "HEAD:learnings/scope-1.md").stdout.strip()
    assert found["learnings/scope-1.md"] == (b"rule 1\n", True, blob)
    assert found["learnings/scope-8.md"] == (None, False, None)
    assert found["learnings/new.md"] == (b"new\n", False, None)
