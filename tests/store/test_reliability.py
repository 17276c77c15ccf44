"""Reliability (issue 10): several processes writing one store, writers killed at any point, and
hostile or broken input. Nothing is mocked: real processes (tests/worker.py runs the library and can
SIGKILL itself at an exact point), the real git binary, real sqlite. The soak test is marked slow
and left out of the default run: `python3 dev.py test -m slow tests/store/test_reliability.py`.
"""
from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import sqlite3
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_whetstone.format import blocks, edits, markdown
from git_whetstone.git import runner as gitbin
from git_whetstone.index import cache, freshness
from git_whetstone.store import events
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.writing.inputs import clean_body, clean_scope
from git_whetstone.ops.writing.revise import revise
from git_whetstone.base.config import load
from git_whetstone.semantics.embed import get_embedder
from git_whetstone.base.errors import RUNTIME, WhetstoneError
from git_whetstone.ops.recall import recall
from git_whetstone.store.store import Store, list_skills
from git_whetstone.ops.writing.attach import attach
from git_whetstone.ops.writing.edit import validate

from ..helpers import REPO, git, run_cli, tree_state

WORKER = Path(__file__).parent.parent / "worker.py"
SKILL = "tables"


# --- helpers ---------------------------------------------------------------------------------------

def words(rng: random.Random, n: int) -> list[str]:
    """Made-up words: texts built from them share no stems or trigrams, so the judge calls two of
    them distinct (never a duplicate, never a conflict)."""
    return ["".join(rng.choice(string.ascii_lowercase) for _ in range(9)) for _ in range(n)]


def distinct_rules(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(words(rng, 6)).capitalize() + "." for _ in range(n)]


class Worker:
    """tests/worker.py in its own process: one JSON operation per line in, one answer per line out."""

    def __init__(self, env: dict[str, str] | None = None, session: bool = False) -> None:
        self.err = open(os.devnull, "w")
        self.proc = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, env={**os.environ, **(env or {})}, cwd=REPO,
                                     start_new_session=session)
        self.pid = self.proc.pid

    def ready(self) -> "Worker":
        line = self.proc.stdout.readline()
        assert line and "ready" in json.loads(line), line
        return self

    def send(self, op: str, **args) -> None:
        self.proc.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict | None:
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def call(self, op: str, **args) -> dict:
        self.send(op, **args)
        return self.answer()

    def kill(self, group: bool = False) -> None:
        if group:
            os.killpg(self.pid, signal.SIGKILL)
        else:
            self.proc.kill()
        self.close()

    def close(self) -> int:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        code = self.proc.wait(timeout=120)
        self.proc.stdout.close()
        self.err.close()
        return code


class Zygote(Worker):
    """A worker that only forks: each call runs in a child that starts in milliseconds, with the
    library loaded and the calling test's environment."""

    def fork(self, op: str, die_at: str | None = None, session: bool = False, out: str | None = None,
             **args) -> int:
        self.send("fork", call=op, args=args, env=dict(os.environ), die_at=die_at, session=session, out=out)
        return self.answer()["pid"]

    def reap(self, pid: int) -> int:
        """The child's exit code (0 the call returned, 1 it raised WhetstoneError), or minus the
        signal that killed it."""
        return self.call("reap", pid=pid)["status"]


@pytest.fixture(scope="module")
def zygote():
    worker = Zygote().ready()
    yield worker
    worker.close()


def workers(n: int, **kwargs) -> list[Worker]:
    started = [Worker(**kwargs) for _ in range(n)]
    return [w.ready() for w in started]


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


def wait_for_writers(store: Path) -> None:
    """Block until no process (a writer, or a git it started) holds the store's write lock."""
    fd = os.open(store / ".git" / "whetstone.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


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
    freshness.LIVE.clear()
    snap = freshness.snapshot(Store.open(load(), store.name), get_embedder("hashing", ""))
    indexed = {snap.entries[row].id: snap.entries[row] for row in snap.by_id.values()}
    assert {i: e.body for i, e in indexed.items()} == {i: b.body for i, b in entries.items()}
    assert {i: e.recurrence for i, e in indexed.items() if i[0] == "L"} == \
        {i: b.recurrence for i, b in entries.items() if i[0] == "L"}
    freshness.LIVE.clear()


def ids_added_in_history(store: Path) -> list[str]:
    """The id each `capture: add <id>` commit added, oldest first: an id handed out twice shows up twice."""
    import re
    return re.findall(r"^capture: add ([LI]\d+) ", git(store, "log", "--reverse", "--format=%s").stdout, re.M)


def recovery_events(store: Path) -> list[dict]:
    return [e for e in events.read(store) if e.get("event") == "recover"]


@pytest.fixture
def autonomous(monkeypatch: pytest.MonkeyPatch) -> None:
    """Routine captures commit without asking; writers wait long enough on a loaded 2-core machine."""
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "autonomous")
    monkeypatch.setenv("WHETSTONE_LOCK_TIMEOUT", "60")


# --- concurrency -----------------------------------------------------------------------------------

def test_four_processes_capturing_at_once_lose_nothing(store_root: Path, tmp_path: Path, autonomous, zygote) -> None:
    """4 processes × 25 distinct preferences into one store at the same moment: 100 entries with
    100 distinct ids in 100 commits, and git fsck is clean."""
    attach(SKILL)
    store = store_root / SKILL
    scopes = ["table layout", "colour palette", "number format"]  # shared: writers race on the same files
    plans = [[(rule, scopes[i % 3]) for i, rule in enumerate(distinct_rules(seed, 25))] for seed in range(4)]
    outs = [tmp_path / f"answers-{i}.json" for i in range(4)]
    pids = [zygote.fork("batch", out=str(out), ops=[
        {"op": "capture", "args": {"skill": SKILL, "polarity": "learning", "body": body, "scope": scope}}
        for body, scope in plan]) for plan, out in zip(plans, outs)]
    assert [zygote.reap(pid) for pid in pids] == [0, 0, 0, 0]
    answers = [a for out in outs for a in json.loads(out.read_text())["result"]]
    assert all(a["ok"] for a in answers), [a for a in answers if not a["ok"]]
    results = [a["result"] for a in answers]
    assert [r["status"] for r in results] == ["committed"] * 100
    ids = [r["entry_id"] for r in results]
    assert len(set(ids)) == 100
    entries = assert_healthy(store)
    assert sorted(entries) == sorted(ids)
    bodies = {body for plan in plans for body, _ in plan}
    assert {b.body for b in entries.values()} == bodies
    log = git(store, "log", "--format=%s").stdout.splitlines()
    assert len([s for s in log if s.startswith("capture: add ")]) == 100 and len(log) == 101


def test_a_reader_does_not_wait_for_a_writer_holding_the_lock(store_root: Path, autonomous) -> None:
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\nfcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\n"
        "time.sleep(30)\n"), str(store / ".git" / "whetstone.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        (store / "learnings" / "hand.md").write_text(edits.render(
            "L7", "Hand rule", [("recurrence", "1"), ("first_seen", "2026-01-01"), ("last_seen", "2026-01-01"),
                                ("scope", "row banding")], "Band every third row in a darker grey."))
        started = time.monotonic()
        result = recall(SKILL, "banding the rows of a table")
        assert time.monotonic() - started < 5
        assert {e["id"] for e in result["learnings"]} == {"L1", "L7"}
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_readers_and_writers_share_the_index(store_root: Path, tmp_path: Path, autonomous, zygote) -> None:
    """Two processes recalling in a loop while two capture: no call fails, the index ends in agreement."""
    attach(SKILL)
    store = store_root / SKILL
    intents = [f"table {w} layout" for w in words(random.Random(9), 30)]
    jobs = [[{"op": "recall", "args": {"skill": SKILL, "intent": intent}} for intent in intents]] * 2
    jobs += [[{"op": "capture", "args": {"skill": SKILL, "polarity": "learning", "body": body, "scope": "table layout"}}
              for body in distinct_rules(100 + seed, 10)] for seed in (0, 1)]
    outs = [tmp_path / f"answers-{i}.json" for i in range(4)]
    pids = [zygote.fork("batch", out=str(out), ops=ops) for ops, out in zip(jobs, outs)]
    assert [zygote.reap(pid) for pid in pids] == [0] * 4
    answers = [a for out in outs for a in json.loads(out.read_text())["result"]]
    assert len(answers) == 80 and all(a["ok"] for a in answers), [a for a in answers if not a["ok"]][:3]
    assert len(assert_healthy(store)) == 20


def test_a_git_command_running_in_the_store_makes_a_writer_wait_then_say_busy(store_root: Path,
                                                                              monkeypatch) -> None:
    """A person's `git commit` with its editor open holds git's index.lock: a capture waits for it
    up to lock_timeout, then fails with "store busy" and changes nothing; once the commit is done,
    captures work again."""
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    (store / "notes.txt").write_text("a note\n")
    git(store, "add", "notes.txt")
    git(store, "commit", "-qm", "notes")
    (store / "notes.txt").write_text("a longer note\n")
    release = store / ".git" / "release-editor"
    editor = f"sh -c 'while [ ! -f {release} ]; do sleep 0.05; done; echo \"add a note\" > \"$1\"' -"
    # `commit -a` keeps git's index locked while the editor is open
    human = subprocess.Popen(["git", "-C", str(store), "commit", "-qa"], env={**os.environ, "GIT_EDITOR": editor},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not (store / ".git" / "index.lock").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        before = tree_state(store)
        monkeypatch.setenv("WHETSTONE_LOCK_TIMEOUT", "1")
        started = time.monotonic()
        with pytest.raises(WhetstoneError, match="store busy") as info:
            capture(SKILL, "learning", "Right-align every numeric column.", "alignment")
        assert 0.9 < time.monotonic() - started < 5
        assert info.value.exit_code == RUNTIME and "index.lock" in info.value.message
        assert tree_state(store) == before
    finally:
        release.touch()
        human.wait(timeout=30)
    assert git(store, "log", "-1", "--format=%s").stdout.strip() == "add a note"
    assert capture(SKILL, "learning", "Right-align every numeric column.", "alignment")["status"] == "committed"
    assert_healthy(store)


def test_a_stale_git_index_lock_is_taken_over(store_root: Path, autonomous) -> None:
    """git's index.lock left by a git that was killed (no git runs in the store) does not wedge the
    store: the next write removes it, says so, and lands."""
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    (store / ".git" / "index.lock").write_bytes(b"DIRC half an index")
    old = time.time() - 60
    os.utime(store / ".git" / "index.lock", (old, old))
    result = capture(SKILL, "learning", "Right-align every numeric column.", "alignment")
    assert result["status"] == "committed"
    assert any("index.lock" in w for w in result["warnings"]), result["warnings"]
    assert_healthy(store)


def test_the_post_commit_hook_updates_the_index_under_the_write_lock(store_root: Path, autonomous,
                                                                     monkeypatch) -> None:
    """A hook never fails the person's commit: with the store busy it says so and skips."""
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    recall(SKILL, "row banding")  # an index exists: the hook would refresh it
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\nfcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\n"
        "time.sleep(30)\n"), str(store / ".git" / "whetstone.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        path = next((store / "learnings").glob("*.md"))
        path.write_text(path.read_text().replace("pale grey", "pale blue"))
        proc = subprocess.run(["git", "-C", str(store), "commit", "-qam", "bluer"], capture_output=True, text=True,
                              env={**os.environ, "WHETSTONE_LOCK_TIMEOUT": "0.5"}, timeout=60)
        assert proc.returncode == 0 and "store busy" in proc.stderr
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert [e["rule"] for e in recall(SKILL, "row banding")["learnings"]] == ["Band alternate rows in pale blue."]


# --- crash safety ------------------------------------------------------------------------------------

def _crash(zygote: Zygote, point: str, op: str = "capture", **args) -> None:
    assert zygote.reap(zygote.fork(op, die_at=point, **args)) == -signal.SIGKILL  # it died there


# (kill point, whether the interrupted capture ends up committed)
CRASH_POINTS = [
    ("replace-whetstone-journal.json", False),  # id minted, nothing of the change on disk yet
    ("replace-*.md", True),                     # the change is journaled, no file written yet
    ("replaced-*.md", True),                    # the scope file is in place, next_ids.json is not
    ("replaced-next_ids.json", True),           # both files in place, git not started
    ("git-update-index-done", True),                     # staged, not committed
    ("git-commit", True),                       # about to commit
    ("git-commit-done", True),                  # committed, the write not yet finished
]


@pytest.mark.parametrize(("point", "lands"), CRASH_POINTS, ids=[p for p, _ in CRASH_POINTS])
def test_a_capture_killed_at_any_point_is_finished_or_undone_by_the_next_write(store_root: Path, autonomous, zygote,
                                                                               point: str, lands: bool) -> None:
    first = capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    _crash(zygote, point, skill=SKILL, polarity="learning", body="Right-align every numeric column.",
           scope="row banding")
    wait_for_writers(store)
    assert validate(SKILL)["valid"]
    assert first["entry_id"] in markdown_entries(store)

    after = capture(SKILL, "issue", "Never round the corners of a table.", "corners")
    assert after["status"] == "committed"
    entries = assert_healthy(store)
    bodies = {b.body for b in entries.values()}
    assert ("Right-align every numeric column." in bodies) is lands
    assert {first["entry_id"], after["entry_id"]} <= set(entries)
    assert len(entries) == 2 + lands
    interrupted = [b for b in entries.values() if b.body == "Right-align every numeric column."]
    if interrupted:  # its id is its own, and the commit says what it added
        assert interrupted[0].id not in (first["entry_id"], after["entry_id"])
        assert f"capture: add {interrupted[0].id} (row banding)" in git(store, "log", "--format=%s").stdout
    if point != "replace-whetstone-journal.json":  # before the journal there is nothing to recover
        said = recovery_events(store)
        assert len(said) == 1 and said[0]["action"] in ("committed", "found_committed"), said


@pytest.mark.parametrize("point", ["replace-*.md", "replaced-*.md", "git-update-index-done"])
def test_a_move_killed_between_its_two_files_is_whole_after_recovery(store_root: Path, autonomous, zygote,
                                                                     point: str) -> None:
    """Moving an entry to another scope rewrites two files: killed in between, the entry is never
    lost, never twice in the store, and recall sees it once recovery has run."""
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    capture(SKILL, "learning", "Right-align every numeric column.", "alignment")
    store = store_root / SKILL
    _crash(zygote, point, op="revise", skill=SKILL, entry_id="L1", action="weaken", scope="zebra striping")
    wait_for_writers(store)
    assert validate(SKILL)["valid"]
    found = recall(SKILL, "zebra striping and row banding of a table")
    assert [e["id"] for e in found["learnings"]].count("L1") == 1
    entries = assert_healthy(store)
    assert entries["L1"].scope == "zebra striping" and "L2" in entries
    assert len(recovery_events(store)) == 1


def test_a_failed_recovery_commit_is_rolled_back_with_an_event(store_root: Path, autonomous, zygote) -> None:
    """An interrupted write that can no longer be committed (a hook now refuses it) is undone."""
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    _crash(zygote, "git-update-index-done", skill=SKILL, polarity="learning", body="Right-align every numeric column.",
           scope="alignment")
    hook = store / ".git" / "hooks" / "pre-commit.whetstone-chained"
    hook.write_text("#!/bin/sh\ngrep -rq 'Right-align' learnings && { echo 'no right-align' >&2; exit 1; }\nexit 0\n")
    hook.chmod(0o755)
    result = capture(SKILL, "issue", "Never round the corners of a table.", "corners")
    assert result["status"] == "committed"
    entries = assert_healthy(store)
    assert sorted(b.body for b in entries.values()) == ["Band alternate rows in pale grey.",
                                                        "Never round the corners of a table."]
    (said,) = recovery_events(store)
    assert said["action"] == "rolled_back" and "no right-align" in said["reason"]


def test_kill_minus_nine_during_captures_in_a_loop(store_root: Path, autonomous, zygote) -> None:
    """50 trials, each killing a capturing process at a random moment (half of them with its whole
    process group, git included): every trial leaves a valid store that lost no earlier entry."""
    attach(SKILL)
    store = store_root / SKILL
    rng = random.Random(1010)
    rules = distinct_rules(77, 60)
    # how long one capture takes in a fresh process, to aim the kills inside it
    started = time.monotonic()
    assert zygote.reap(zygote.fork("capture", skill=SKILL, polarity="learning", body=rules[0], scope="layout")) == 0
    span = time.monotonic() - started
    kept = set(markdown_entries(store))
    trials, valid, outcomes = 50, 0, {}
    for trial in range(trials):
        pid = zygote.fork("capture", session=True, skill=SKILL, polarity="learning", body=rules[trial + 1],
                          scope=rng.choice(["layout", "colour", "fonts"]))
        time.sleep(rng.uniform(0, span * 1.2))
        try:
            (os.killpg if trial % 2 else os.kill)(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it had already finished
        zygote.reap(pid)
        wait_for_writers(store)  # a git it started may still be finishing
        landed = "mid-write" if (store / ".git" / "whetstone-journal.json").exists() else \
            "after" if rules[trial + 1] in git(store, "log", "-1", "--format=%b").stdout else "before"
        outcomes[landed] = outcomes.get(landed, 0) + 1
        assert validate(SKILL)["valid"], (trial, validate(SKILL)["errors"])
        fsck = git(store, "fsck", "--strict", "--no-dangling", check=False)
        assert fsck.returncode == 0, (trial, fsck.stderr)
        present = set(markdown_entries(store))
        assert kept <= present, (trial, kept - present)
        kept = present
        valid += 1
    last = capture(SKILL, "learning", rules[-1], "layout")
    assert last["status"] == "committed"
    entries = assert_healthy(store)
    assert kept <= set(entries) and valid == trials
    added = ids_added_in_history(store)
    assert len(added) == len(set(added)) == len(entries)
    print(f"kill -9 loop: {trials} trials, {valid} valid; killed {outcomes}; {len(entries) - 2} killed captures "
          f"kept; {len(recovery_events(store))} recover events")


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


def _nobody_cannot_run_whetstone() -> str | None:
    """Why the CLI cannot run as `nobody` here (as root, a checkout cloned under a private directory
    keeps its Python and package out of that user's reach), or None when it can."""
    if os.geteuid() != 0:
        return None
    try:
        proc = subprocess.run([sys.executable, "-c", "import git_whetstone.cli"], capture_output=True, text=True,
                              cwd="/", timeout=60, user=65534, group=65534, extra_groups=[],
                              env=dict(os.environ, HOME="/nonexistent", PYTHONDONTWRITEBYTECODE="1"))
    except PermissionError as exc:
        return f"the user nobody cannot run {sys.executable} ({exc.strerror})"
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return f"the user nobody cannot import whetstone from {sys.executable}: {said}"
    return None


def test_a_read_only_store(store_root: Path, autonomous, monkeypatch) -> None:
    """Writes fail with one clear line and change nothing; recall still answers. As root the store
    must be read-only to another user: that test needs `nobody` to reach this Python and checkout."""
    import shutil
    import tempfile
    why = _nobody_cannot_run_whetstone()
    if why:
        pytest.skip(f"{why}; clone the checkout where every user can read it to run this test")
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
    for snap in freshness.LIVE.values():  # as if this process had ended: its connection too
        freshness.close(snap)
    freshness.LIVE.clear()
    for suffix in ("-wal", "-shm"):
        (store / f"index.sqlite{suffix}").unlink(missing_ok=True)
    data = (store / "index.sqlite").read_bytes()
    (store / "index.sqlite").write_bytes(data[:len(data) // 3])
    before = tree_state(store)
    result = recall(SKILL, "row banding")
    assert [e["id"] for e in result["learnings"]] == ["L1"]
    assert any("rebuilt" in w for w in result["warnings"])
    assert tree_state(store) == before
    freshness.LIVE.clear()
    assert recall(SKILL, "row banding")["warnings"] == []


def test_an_index_from_a_future_schema_is_left_alone(store_root: Path, autonomous) -> None:
    """A newer whetstone's index is its business: this one reads the markdown without it, says so,
    and leaves the file as it is."""
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    recall(SKILL, "row banding")
    for snap in freshness.LIVE.values():  # as if this process had ended: its connection too (else that
        freshness.close(snap)             # connection, closed whenever it is collected, checkpoints the WAL)
    freshness.LIVE.clear()
    db = sqlite3.connect(store / "index.sqlite")
    db.execute(f"PRAGMA user_version={cache.SCHEMA + 7}")
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
    from git_whetstone.ops.looking.metrics import metrics
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
        rendered = edits.render("L1", blocks.derive_title(body), [
            ("recurrence", "1"), ("first_seen", "2026-01-01"), ("last_seen", "2026-01-01"), ("scope", scope)], body)
        parsed = blocks.parse(rendered, "t.md", "learnings")
        assert parsed.errors == [], (name, [str(e) for e in parsed.errors])
        assert (parsed.blocks[0].body, parsed.blocks[0].scope) == (body, " ".join(scope.split()))
        assert markdown.validate(rendered, "t.md", "learnings") == []


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
        block = edits.render(f"L{n}", blocks.derive_title(item["body"]), fields, item["body"])
        rendered.append(block)
        text = edits.append(text, block.replace("\n", newline) if not text else block)
    if newline == "\r\n":
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    parsed = blocks.parse(text, "t.md", "learnings")
    assert parsed.errors == []
    assert [b.raw.replace("\r\n", "\n").rstrip("\n") + "\n" for b in parsed.blocks] == rendered
    assert "".join(b.raw for b in parsed.blocks) == text
    target = data.draw(st.sampled_from(parsed.blocks))
    changed = edits.replace(text, target, edits.update_fields(target, {"recurrence": "7"}, "again"))
    removed = edits.remove(text, target)
    for after in (changed, removed):
        others = [b.raw.rstrip("\r\n") for b in blocks.parse(after, "t.md", "learnings").blocks if b.id != target.id]
        assert others == [b.raw.rstrip("\r\n") for b in parsed.blocks if b.id != target.id]


_OPS = st.lists(st.tuples(st.sampled_from(["capture", "reinforce", "weaken", "remove", "sleep"]),
                          st.integers(0, 1000)), min_size=3, max_size=10)


def run_own_entries(worker: Worker, skill: str, plan, rules: list[str], scopes: list[str], pick=None) -> dict:
    """Drive `worker` through `plan` ((op, n) pairs) on `skill`: captures of new rules, and revisions
    of entries this worker itself created. Returns what its successful calls say the store holds of
    its entries (id -> (body, recurrence), None once removed) and the calls that failed."""
    model: dict[str, tuple[str, int] | None] = {}
    failed: list[dict] = []
    fresh = iter(rules)
    for op, n in plan:
        own = sorted(k for k, v in model.items() if v is not None)
        if op == "sleep":
            worker.call("sleep", seconds=n / 40_000)
            continue
        if op == "capture" or not own:
            body = next(fresh)
            answer = worker.call("capture", skill=skill, polarity="learning", body=body, scope=scopes[n % len(scopes)])
            if answer["ok"]:
                assert answer["result"]["status"] == "committed", answer
                model[answer["result"]["entry_id"]] = (body, 1)
            else:
                failed.append(answer)
            continue
        target = own[n % len(own)]
        answer = worker.call("revise", skill=skill, entry_id=target, action=op,
                             **({"confirm": "yes"} if op == "remove" else {}))
        if not answer["ok"]:
            failed.append(answer)
        elif answer["result"]["status"] == "committed":
            body, _ = model[target]
            model[target] = None if op == "remove" else (body, answer["result"]["recurrence"])
    return {"model": model, "failed": failed}


def in_threads(jobs: list) -> list:
    """Run each callable in its own thread (each drives its own process) and return their results."""
    import threading
    results: list = [None] * len(jobs)
    errors: list = []

    def run(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def pair():
    """Two worker processes, shared by every example of a hypothesis test (each uses its own skill)."""
    both = workers(2)
    yield both
    for worker in both:
        worker.close()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.tuples(_OPS, _OPS))
def test_random_interleavings_of_two_processes_keep_every_committed_change(store_root: Path, autonomous, pair,
                                                                           plans) -> None:
    """Two processes run random captures, reinforcements, weakenings and removals of their own
    entries on one store at the same time; at the end the store is exactly what each process's
    successful calls say it should be."""
    skill = f"mix-{os.urandom(4).hex()}"
    attach(skill)
    store = store_root / skill
    outcomes = in_threads([
        lambda i=i: run_own_entries(pair[i], skill, plans[i], distinct_rules(1000 + i, 10), ["layout", "colour"])
        for i in (0, 1)])
    assert [o["failed"] for o in outcomes] == [[], []]
    entries = assert_healthy(store)
    expected = {k: v for o in outcomes for k, v in o["model"].items() if v is not None}
    assert {k: (b.body, b.recurrence) for k, b in entries.items()} == expected
    assert not set(outcomes[0]["model"]) & set(outcomes[1]["model"])  # no id was handed to both


# --- soak ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_soak_four_writers_and_a_reader(store_root: Path, autonomous) -> None:
    """4 processes × 250 mixed operations on one store while a fifth recalls in a loop: git fsck is
    clean, every id unique, every successful capture present unless it was removed, and the index
    agrees with the markdown."""
    attach(SKILL)
    store = store_root / SKILL
    started = time.monotonic()
    crowd = workers(4)
    reader = Worker().ready()
    rng = random.Random(4242)
    kinds = ["capture"] * 11 + ["reinforce"] * 4 + ["weaken"] * 2 + ["remove"] * 3
    plans = [[(rng.choice(kinds), rng.randrange(1000)) for _ in range(250)] for _ in range(4)]
    scopes = ["table layout", "colour palette", "fonts", "borders"]
    stop = []

    def read_loop() -> int:
        reads = 0
        while not stop:
            answer = reader.call("recall", skill=SKILL, intent=f"table {rng.choice(scopes)}")
            assert answer["ok"], answer
            reads += 1
        return reads

    def write(i: int) -> dict:
        try:
            return run_own_entries(crowd[i], SKILL, plans[i], distinct_rules(500 + i, 250), scopes)
        finally:
            crowd[i].close()

    def writers_then_stop() -> list[dict]:
        try:
            return in_threads([lambda i=i: write(i) for i in range(4)])
        finally:
            stop.append(True)

    outcomes, reads = in_threads([writers_then_stop, read_loop])
    reader.close()
    assert [o["failed"] for o in outcomes] == [[]] * 4
    entries = assert_healthy(store)
    expected = {k: v for o in outcomes for k, v in o["model"].items() if v is not None}
    assert {k: (b.body, b.recurrence) for k, b in entries.items()} == expected
    ids = [k for o in outcomes for k in o["model"]]
    assert len(ids) == len(set(ids))
    added = ids_added_in_history(store)
    assert len(added) == len(set(added)) == len(ids)
    print(f"soak: 4 x 250 operations and {reads} recalls in {time.monotonic() - started:.1f}s; "
          f"{len(entries)} entries, {len(ids)} captured")


# --- a full disk ------------------------------------------------------------------------------------

def _leftovers(store: Path) -> list[str]:
    return sorted(p.relative_to(store).as_posix() for p in store.rglob("*.tmp")) + (
        [".git/whetstone-journal.json"] if (store / ".git" / "whetstone-journal.json").exists() else [])


def test_a_full_disk_at_any_step_of_a_capture_is_one_line_and_changes_nothing(store_root: Path, autonomous,
                                                                             monkeypatch) -> None:
    """ENOSPC from the k-th file sync of a capture (the journal, the scope file, next_ids.json, …),
    for every k the capture reaches: one clear error, the store, its history and the index as they
    were, no temporary file or journal left; then, with room again, the capture lands."""
    capture(SKILL, "learning", "Band alternate rows in pale grey.", "row banding")
    store = store_root / SKILL
    recall(SKILL, "table rows")
    before = tree_state(store)
    real = os.fsync
    failed_at = []
    for k in range(1, 20):
        calls = 0

        def full(fd: int) -> None:
            nonlocal calls
            if not os.path.isdir(f"/proc/self/fd/{fd}"):  # the directory syncs are let through
                calls += 1
                if calls == k:
                    raise OSError(28, "No space left on device")
            real(fd)
        monkeypatch.setattr(os, "fsync", full)
        try:
            result = capture(SKILL, "learning", "Right-align every numeric column.", "alignment")
        except WhetstoneError as exc:
            failed_at.append(k)
            assert "\n" not in exc.message and "No space left on device" in exc.message, exc.message
            assert exc.message.startswith(f"cannot write to {SKILL} in {store}: ")
            assert exc.exit_code == RUNTIME
            monkeypatch.setattr(os, "fsync", real)
            assert tree_state(store) == before, k
            assert _leftovers(store) == [], k
            assert_healthy(store)
            continue
        monkeypatch.setattr(os, "fsync", real)
        assert result["status"] == "committed" and calls < k  # every step before this one was tried
        break
    assert len(failed_at) >= 3, failed_at  # the journal, the scope file, next_ids.json at least
    entries = assert_healthy(store)
    assert "Right-align every numeric column." in {b.body for b in entries.values()}


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/proc/mounts").exists(),
                    reason="mounting a small tmpfs needs root on Linux")
def test_a_capture_on_a_really_full_disk(tmp_path: Path, monkeypatch) -> None:
    """A store on a real 4 MiB tmpfs, filled to the last byte: the capture fails in one line through
    the CLI, recall keeps answering, nothing changed; freed, the same capture lands."""
    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        env = {"WHETSTONE_STORE_ROOT": str(mount), "WHETSTONE_SUPERVISION": "autonomous"}
        assert run_cli("capture", SKILL, "Band alternate rows in pale grey.", "--scope", "row banding",
                       env=env).returncode == 0
        assert run_cli("recall", SKILL, "table rows", env=env).returncode == 0
        store = mount / SKILL
        before = tree_state(store)
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for size in (65536, 4096, 512, 1):  # to the last byte
                try:
                    while os.write(fd, b"\0" * size):
                        pass
                except OSError:
                    pass
        finally:
            os.close(fd)
        full = run_cli("capture", SKILL, "Right-align every numeric column.", "--scope", "alignment", env=env)
        assert full.returncode == 1, full.stdout + full.stderr
        assert full.stderr.count("\n") == 1 and "No space left on device" in full.stderr, full.stderr
        assert tree_state(store) == before
        assert _leftovers(store) == []
        shown = run_cli("recall", SKILL, "table rows", "--json", env=env)
        assert shown.returncode == 0 and json.loads(shown.stdout)["learnings"], shown.stderr
        (mount / "filler").unlink()
        again = run_cli("capture", SKILL, "Right-align every numeric column.", "--scope", "alignment", "--json", env=env)
        assert again.returncode == 0 and json.loads(again.stdout)["status"] == "committed", again.stderr
        assert git(store, "status", "--porcelain").stdout == ""
        assert git(store, "fsck", "--strict", "--no-dangling").stdout == ""
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("point", ["replaced-*.md:20", "git-update-index", "git-update-index-done"])
def test_a_compact_killed_between_its_files_and_its_commit_is_completed_by_the_next_write(
        store_root: Path, monkeypatch, zygote, point: str) -> None:
    """A compact writes its many files side by side: killed part way through them, or after all of
    them but before its commit (while git stages them, or once git has staged them), the next write completes it from the journal, and the store holds
    what an uninterrupted compact commits."""
    import shutil

    from git_whetstone.ops.upkeep import compact as compact_op
    from ..helpers import bench_store

    _, config, built = bench_store(monkeypatch, "big", 1_000, 6)
    reference = store_root.parent / "reference"
    shutil.copytree(built.path, reference / "big", symlinks=True)
    _crash(zygote, point, "compact", skill="big")
    wait_for_writers(built.path)
    assert (built.path / ".git" / "whetstone-journal.json").exists()
    result = compact_op.compact("big", config=config)  # the next write: recovers, then finds nothing left
    assert recovery_events(built.path)[-1]["action"] == "committed"
    assert result["changes"] == []
    monkeypatch.setenv("WHETSTONE_STORE_ROOT", str(reference))
    done = compact_op.compact("big", config=load())
    assert len(done["changes"]) >= 32  # enough files for the side-by-side write
    assert git(built.path, "rev-parse", "HEAD^{tree}").stdout == git(reference / "big", "rev-parse", "HEAD^{tree}").stdout
    assert "(completed by whetstone after the writer was interrupted)" in git(built.path, "log", "-1", "--format=%B").stdout
