"""Reliability (issue 10): hostile or broken input gets a clear one-line error or is repaired, and
no other data changes. Nothing is mocked: the real git binary, real sqlite, the real CLI."""
from __future__ import annotations

import json
import os
import sqlite3
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_whetstone import blocks, events, gitbin
from git_whetstone import index as index_mod
from git_whetstone.capture import capture, clean_body, clean_scope, revise
from git_whetstone.config import load
from git_whetstone.embed import get_embedder
from git_whetstone.errors import WhetstoneError
from git_whetstone.retrieve import recall
from git_whetstone.store import Store, attach, list_skills
from git_whetstone.validation import validate

from .helpers import git, run_cli, tree_state

SKILL = "tables"


# --- helpers ---------------------------------------------------------------------------------------


def markdown_entries(store: Path) -> dict[str, blocks.Block]:
    """Every block in the store's scope files, by id; fails on any id written twice."""
    found: dict[str, blocks.Block] = {}
    for folder in ("learnings", "issues"):
        for path in sorted((store / folder).glob("*.md")):
            parsed = blocks.parse(path.read_text(encoding="utf-8"), path.name, folder)
            assert parsed.errors == [], [str(e) for e in parsed.errors]
            for block in parsed.blocks:
                assert block.id not in found, f"{block.id} twice"
                found[block.id] = block
    return found


def assert_healthy(store: Path) -> dict[str, blocks.Block]:
    """The store validates, git is clean and consistent, and the index says what the markdown says."""
    assert validate(store.name)["valid"], validate(store.name)["errors"]
    fsck = git(store, "fsck", "--strict", "--no-dangling", check=False)
    assert fsck.returncode == 0 and fsck.stdout.strip() == "", fsck.stdout + fsck.stderr
    assert git(store, "status", "--porcelain").stdout == ""
    assert not (store / ".git" / "index.lock").exists()
    entries = markdown_entries(store)
    index_agrees(store, entries)
    return entries


def index_agrees(store: Path, entries: dict[str, blocks.Block]) -> None:
    """What index.sqlite holds (read back by a process with nothing in memory) matches the markdown."""
    index_mod._CACHE.clear()
    snap = index_mod.snapshot(Store.open(load(), store.name), get_embedder("hashing", ""))
    indexed = {snap.entries[row].id: snap.entries[row] for row in snap.by_id.values()}
    assert {i: e.body for i, e in indexed.items()} == {i: b.body for i, b in entries.items()}
    assert {i: e.recurrence for i, e in indexed.items() if i[0] == "L"} == \
        {i: b.recurrence for i, b in entries.items() if i[0] == "L"}
    index_mod._CACHE.clear()


@pytest.fixture
def autonomous(monkeypatch: pytest.MonkeyPatch) -> None:
    """Routine captures commit without asking; writers wait long enough on a loaded 2-core machine."""
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "autonomous")
    monkeypatch.setenv("WHETSTONE_LOCK_TIMEOUT", "60")


# --- crash safety ------------------------------------------------------------------------------------


# (kill point, whether the interrupted capture ends up committed)


def test_a_half_created_store_left_by_a_killed_attach_is_cleaned_up(store_root: Path) -> None:
    store_root.mkdir(parents=True)
    leftover = store_root / ".tables.creating-999999"
    leftover.mkdir()
    (leftover / "junk").write_text("x")
    assert attach(SKILL)["status"] == "attached"
    assert not leftover.exists()
    assert list_skills(load()) == [SKILL]


# --- hostile and broken input -------------------------------------------------------------------------

HOSTILE_NAMES = ["..", "../outside", "a/b", "/etc", "a\x00b", "a\x01b", "tab\there", "esc\x1b[31m", "con",
                 "NUL", "com1", "lpt9.txt", "aux", "x" * 10_000, "a" * 65]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[repr(n)[:20] for n in HOSTILE_NAMES])
def test_hostile_skill_names_are_refused_everywhere_and_create_nothing(store_root: Path, tmp_path: Path,
                                                                       name: str) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    for call in (lambda: attach(name), lambda: capture(name, "learning", "Band rows.", "banding"),
                 lambda: recall(name, "banding"), lambda: revise(name, "L1", "remove", confirm="yes"),
                 lambda: validate(name)):
        with pytest.raises(WhetstoneError) as info:
            call()
        assert info.value.exit_code == 2 and "\n" not in info.value.message
        assert len(info.value.message) < 200 and "skill name" in info.value.message
    assert not store_root.exists() and sorted(p.name for p in tmp_path.iterdir()) == before
    if name in ("../outside", "lpt9.txt", "x" * 10_000):  # the CLI says the same (argv cannot carry a NUL)
        proc = run_cli("capture", name, "Band rows.", "--scope", "banding")
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert len(proc.stderr) < 300
    assert not store_root.exists()


HOSTILE_BODIES = {
    "1 MB": "Band rows. " * 95_326,
    "NUL": "Band rows\x00 in grey.",
    "heading inside": "Band rows in grey.\n## L1 · Sneaky second block\n- recurrence: 9",
    "heading first": "## L1 · Sneaky\n\nBand rows.",
    "conflict markers": "Band rows in grey.\n<<<<<<< HEAD\nblue\n=======\ngreen\n>>>>>>> other",
    "lone surrogate": "Band rows in gr\ud800ey.",
}


@pytest.mark.parametrize("case", HOSTILE_BODIES)
def test_hostile_bodies_are_refused_and_change_nothing(store_root: Path, autonomous, case: str) -> None:
    capture(SKILL, "learning", "Right-align every numeric column.", "alignment")
    store = store_root / SKILL
    before, logged = tree_state(store), len(list(events.read(store)))
    with pytest.raises(WhetstoneError) as info:
        capture(SKILL, "learning", HOSTILE_BODIES[case], "banding")
    assert info.value.exit_code == 2 and "\n" not in info.value.message and len(info.value.message) < 300
    with pytest.raises(WhetstoneError):
        revise(SKILL, "L1", "reinforce", body=HOSTILE_BODIES[case])
    assert tree_state(store) == before and len(list(events.read(store))) == logged
    # as a scope: refused, or folded onto the one line a scope is
    try:
        result = capture(SKILL, "learning", "Band rows in grey.", HOSTILE_BODIES[case])
    except WhetstoneError as exc:
        assert "\n" not in exc.message
        assert tree_state(store) == before
    else:
        assert markdown_entries(store)[result["entry_id"]].scope == " ".join(HOSTILE_BODIES[case].split())
        assert validate(SKILL)["valid"]


def test_a_large_body_through_the_cli_is_one_line_of_error(store_root: Path) -> None:
    proc = run_cli("capture", SKILL, "Band rows. " * 10_000, "--scope", "banding")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "too long" in proc.stderr


def test_invalid_utf8_in_a_hand_edited_file(store_root: Path, autonomous) -> None:
    """Recall serves the file's last committed version with a warning, a write into it is refused
    with path:line, a write elsewhere lands, and the broken bytes are left as they are."""
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    path = next((store / "learnings").glob("*.md"))
    broken = path.read_bytes().replace(b"pale grey", b"pale gr\xe9y")
    path.write_bytes(broken)
    found = recall(SKILL, "row banding")
    assert [e["rule"] for e in found["learnings"]] == ["Band alternate rows in pale grey."]
    assert any("not valid UTF-8" in w for w in found["warnings"])
    with pytest.raises(WhetstoneError, match="not valid UTF-8"):
        capture(SKILL, "learning", "Band every third row instead.", "row banding")
    with pytest.raises(WhetstoneError, match="not valid UTF-8"):
        revise(SKILL, "L1", "reinforce")
    assert capture(SKILL, "learning", "Right-align every numeric column.", "alignment")["status"] == "committed"
    assert path.read_bytes() == broken
    assert not validate(SKILL)["valid"]


def test_a_store_linked_out_of_the_store_root_is_refused(store_root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    git(tmp_path, "init", "-q", str(outside))
    (outside / "next_ids.json").write_text('{"learning": 1, "issue": 1}\n')
    store_root.mkdir(parents=True)
    (store_root / SKILL).symlink_to(outside)
    before = tree_state(outside)
    for call in (lambda: capture(SKILL, "learning", "Band rows in grey.", "banding"),
                 lambda: recall(SKILL, "banding"), lambda: validate(SKILL), lambda: attach(SKILL),
                 lambda: revise(SKILL, "L1", "remove", confirm="yes")):
        with pytest.raises(WhetstoneError, match="outside the store root"):
            call()
    assert SKILL not in list_skills(load())
    assert tree_state(outside) == before
    proc = run_cli("recall", SKILL, "banding")
    assert proc.returncode == 2 and "outside the store root" in proc.stderr


def test_a_store_whose_git_directory_is_missing(store_root: Path, autonomous) -> None:
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    import shutil
    shutil.rmtree(store / ".git")
    before = tree_state(store)
    with pytest.raises(WhetstoneError, match="has no .git"):
        capture(SKILL, "learning", "Right-align every numeric column.", "alignment")
    with pytest.raises(WhetstoneError, match="has no .git"):
        revise(SKILL, "L1", "reinforce")
    result = recall(SKILL, "row banding")
    assert any(".git" in w for w in result["warnings"]), result["warnings"]
    assert tree_state(store) == before


CORRUPT_GIT = {
    "HEAD is garbage": lambda g: (g / "HEAD").write_text("garbage\n"),
    "git's index is truncated": lambda g: (g / "index").write_bytes((g / "index").read_bytes()[:20]),
    "git's index is garbage": lambda g: (g / "index").write_bytes(b"\0" * 64),
    "the HEAD commit is missing": lambda g: (g / "objects" / gitbin.head(g.parent)[:2] /
                                             gitbin.head(g.parent)[2:]).unlink(),
    ".git is a file of garbage": lambda g: (__import__("shutil").rmtree(g), g.write_text("garbage\n")),
}


@pytest.mark.parametrize("case", CORRUPT_GIT)
def test_a_corrupt_git_directory_is_a_clear_error_or_repaired(store_root: Path, autonomous, case: str) -> None:
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    markdown = {p: p.read_bytes() for p in store.rglob("*.md") if ".git" not in p.parts}
    CORRUPT_GIT[case](store / ".git")
    try:
        result = capture(SKILL, "learning", "Right-align every numeric column.", "alignment")
    except WhetstoneError as exc:
        assert "\n" not in exc.message and len(exc.message) < 400
        assert {p: p.read_bytes() for p in store.rglob("*.md") if ".git" not in p.parts} == markdown
        assert not [p for p in store.rglob("*.tmp")]
    else:  # repaired: the capture landed beside everything that was there
        assert result["status"] == "committed" and any("repaired" in w for w in result["warnings"])
        assert_healthy(store)
    # reading never needs git to be whole
    assert [e["id"] for e in recall(SKILL, "row banding")["learnings"]] == ["L1"]


def _as_nobody(root: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """The CLI as a user who may read the stores under `root` but not write them (root writes
    everywhere, so a read-only store needs another user; anyone else gets the chmod alone)."""
    env = dict(os.environ, HOME="/nonexistent", XDG_CONFIG_HOME="/nonexistent", WHETSTONE_STORE_ROOT=str(root),
               GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="safe.directory", GIT_CONFIG_VALUE_0="*",
               PYTHONDONTWRITEBYTECODE="1")
    extra = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    return subprocess.run([sys.executable, "-m", "git_whetstone", *args], capture_output=True, text=True, env=env,
                          cwd="/", timeout=120, **extra)


def test_a_read_only_store(store_root: Path, autonomous, monkeypatch) -> None:
    """Writes fail with one clear line and change nothing; recall still answers."""
    import shutil
    import tempfile
    shared = Path(tempfile.mkdtemp(prefix="whetstone-ro-"))  # a place another user can reach
    try:
        monkeypatch.setenv("WHETSTONE_STORE_ROOT", str(shared))
        capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
        store = shared / SKILL
        for path in [shared, *shared.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o555 if path.is_dir() else 0o444)
        before = tree_state(store)
        proc = _as_nobody(shared, ["capture", SKILL, "Right-align every numeric column.", "--scope", "alignment"])
        assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "read-only" in proc.stderr, proc.stderr
        proc = _as_nobody(shared, ["--json", "recall", SKILL, "row banding"])
        assert proc.returncode == 0, proc.stderr
        assert [e["id"] for e in json.loads(proc.stdout)["learnings"]] == ["L1"]
        assert tree_state(store) == before
    finally:
        for path in [shared, *shared.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else 0o644)
        shutil.rmtree(shared)


def test_a_truncated_index_is_rebuilt_and_nothing_else_changes(store_root: Path, autonomous) -> None:
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    recall(SKILL, "row banding")
    index_mod._CACHE.clear()
    data = (store / "index.sqlite").read_bytes()
    (store / "index.sqlite").write_bytes(data[:len(data) // 3])
    before = tree_state(store)
    result = recall(SKILL, "row banding")
    assert [e["id"] for e in result["learnings"]] == ["L1"]
    assert any("rebuilt" in w for w in result["warnings"])
    assert tree_state(store) == before
    index_mod._CACHE.clear()
    assert recall(SKILL, "row banding")["warnings"] == []


def test_an_index_from_a_future_schema_is_left_alone(store_root: Path, autonomous) -> None:
    """A newer whetstone's index is its business: this one reads the markdown without it, says so,
    and leaves the file as it is."""
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    recall(SKILL, "row banding")
    index_mod._CACHE.clear()
    db = sqlite3.connect(store / "index.sqlite")
    db.execute(f"PRAGMA user_version={index_mod.SCHEMA + 7}")
    db.close()
    data = (store / "index.sqlite").read_bytes()
    result = recall(SKILL, "row banding")
    assert [e["id"] for e in result["learnings"]] == ["L1"]
    assert any("newer" in w for w in result["warnings"]), result["warnings"]
    assert capture(SKILL, "learning", "Right-align every numeric column.", "alignment")["status"] == "committed"
    assert (store / "index.sqlite").read_bytes() == data


def test_a_torn_last_line_in_events_does_not_swallow_the_next_event(store_root: Path, autonomous) -> None:
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    with open(store / "events.jsonl", "ab") as handle:
        handle.write(b'{"ts":"2026-01-01T00:00:00+00:00","event":"capt')  # a writer died mid-line
    recall(SKILL, "row banding")
    logged = list(events.read(store))
    assert [e["event"] for e in logged] == ["capture", "recall"]
    from git_whetstone.metrics import metrics
    assert metrics(SKILL)["skills"][SKILL]["runs"] == 1


WRONG_CONFIG = [
    ("learnings_k = \"many\"", "learnings_k"), ("learnings_k = [1, 2]", "learnings_k"),
    ("lock_timeout = true", "lock_timeout"), ("lock_timeout = -1", "lock_timeout"),
    ("store_root = 5", "store_root"), ("supervision = 1", "supervision"), ("consult_global = \"maybe\"",
                                                                           "consult_global"),
    ("hashing = 0.5", "hashing"), ("[hashing]\ndedup = \"high\"", "hashing.dedup"),
    ("learnings_half_life_days = {}", "learnings_half_life_days"),
]


@pytest.mark.parametrize(("text", "key"), WRONG_CONFIG, ids=[k for _, k in WRONG_CONFIG])
def test_a_config_with_wrong_types_names_the_key_and_changes_nothing(store_root: Path, tmp_path: Path,
                                                                     monkeypatch, text: str, key: str) -> None:
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    before = tree_state(store)
    config = tmp_path / "config.toml"
    config.write_text(text + "\n")
    monkeypatch.setenv("WHETSTONE_CONFIG", str(config))
    with pytest.raises(WhetstoneError) as info:
        capture(SKILL, "learning", "Right-align every numeric column.", "alignment")
    assert key in info.value.message and info.value.exit_code == 2 and "\n" not in info.value.message
    if key == "lock_timeout":  # and the CLI says it in one line
        proc = run_cli("capture", SKILL, "Right-align every numeric column.", "--scope", "alignment")
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and key in proc.stderr
    assert tree_state(store) == before


# --- properties -------------------------------------------------------------------------------------

_TEXT = st.text(st.characters(codec=None, blacklist_categories=()), max_size=200)
_HOSTILE = st.sampled_from(["\x00", "\n## L1 · x\n", "<<<<<<< HEAD", "\n=======\n", "\r\n", "\ud800", "\t",
                            "- scope: x", "```", "<!--", "\u2028", "\ufeff", " ", "\n\n\n", "·"])
_ANY = st.lists(st.one_of(_TEXT, _HOSTILE), max_size=6).map("".join)


@settings(max_examples=300, deadline=None)
@given(_ANY)
def test_any_string_as_a_body_or_scope_is_stored_exactly_or_refused_cleanly(text: str) -> None:
    for clean, name in ((clean_body, "body"), (clean_scope, "scope")):
        try:
            value = clean(text)
        except WhetstoneError as exc:
            assert "\n" not in exc.message and exc.exit_code == 2
            continue
        value.encode("utf-8")  # what is accepted can be written
        body, scope = (value, "probe") if name == "body" else ("Probe rule.", value)
        rendered = blocks.render("L1", blocks.derive_title(body), [
            ("recurrence", "1"), ("first_seen", "2026-01-01"), ("last_seen", "2026-01-01"), ("scope", scope)], body)
        parsed = blocks.parse(rendered, "t.md", "learnings")
        assert parsed.errors == [], (name, [str(e) for e in parsed.errors])
        assert (parsed.blocks[0].body, parsed.blocks[0].scope) == (body, " ".join(scope.split()))
        assert blocks.validate(rendered, "t.md", "learnings") == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_ANY, _ANY)
def test_any_string_through_a_real_capture_round_trips_or_changes_nothing(store_root: Path, autonomous,
                                                                           body: str, scope: str) -> None:
    skill = f"prop-{os.urandom(4).hex()}"
    attach(skill)
    store = store_root / skill
    before = tree_state(store)
    try:
        result = capture(skill, "learning", body, scope)
    except WhetstoneError as exc:
        assert "\n" not in exc.message
        assert tree_state(store) == before
        return
    assert result["status"] == "committed"
    (block,) = markdown_entries(store).values()
    assert block.body == clean_body(body) and block.scope == clean_scope(scope)
    assert git(store, "status", "--porcelain").stdout == ""


_FIELDS = st.fixed_dictionaries({
    "body": st.lists(st.text(string.ascii_letters + " ,;'\"éß漢😀", min_size=1, max_size=30).map(str.strip).filter(
        lambda s: s and s[0].isalpha()), min_size=1, max_size=3).map("\n\n".join),
    "scope": st.text(string.ascii_letters + " -é", min_size=1, max_size=20).map(lambda s: " ".join(s.split())).filter(
        bool),
    "recurrence": st.integers(1, 999),
    "provenance": st.lists(st.text(max_size=30), max_size=2),
})


@settings(max_examples=150, deadline=None)
@given(st.lists(_FIELDS, min_size=1, max_size=8), st.sampled_from(["\n", "\r\n"]), st.data())
def test_any_valid_block_list_reads_back_as_written_and_tool_writes_touch_one_block(items, newline, data) -> None:
    text, rendered = "", []
    for n, item in enumerate(items, 1):
        fields = [("recurrence", str(item["recurrence"])), ("first_seen", "2026-01-01"),
                  ("last_seen", "2026-02-01"), ("scope", item["scope"])]
        fields += [("provenance", blocks.encode_value(p)) for p in item["provenance"]]
        block = blocks.render(f"L{n}", blocks.derive_title(item["body"]), fields, item["body"])
        rendered.append(block)
        text = blocks.append(text, block.replace("\n", newline) if not text else block)
    if newline == "\r\n":
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    parsed = blocks.parse(text, "t.md", "learnings")
    assert parsed.errors == []
    assert [b.raw.replace("\r\n", "\n").rstrip("\n") + "\n" for b in parsed.blocks] == rendered
    assert "".join(b.raw for b in parsed.blocks) == text
    target = data.draw(st.sampled_from(parsed.blocks))
    changed = blocks.replace(text, target, blocks.update_fields(target, {"recurrence": "7"}, "again"))
    removed = blocks.remove(text, target)
    for after in (changed, removed):
        others = [b.raw.rstrip("\r\n") for b in blocks.parse(after, "t.md", "learnings").blocks if b.id != target.id]
        assert others == [b.raw.rstrip("\r\n") for b in parsed.blocks if b.id != target.id]


# --- soak ---------------------------------------------------------------------------------------------
