"""The `git whetstone` command line, run as real processes against real git."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from git_whetstone.ops.recall import recall
from tests.helpers import git, run_cli, tree_state

SKILL = "great-tables"


def ok(*args: str, **kwargs):
    proc = run_cli(*args, **kwargs)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_round_trip_through_the_cli(store_root: Path) -> None:
    env = {"WHETSTONE_TODAY": "2026-07-24"}
    assert "created" in ok("attach", SKILL, env=env).stdout
    out = ok("capture", SKILL, "Format the price (msrp) column as US dollars with no decimal places.",
             "--scope", "currency formatting", "--provenance", "make the revenue column US dollars", env=env)
    assert out.stdout.startswith("committed: ")
    ok("capture", SKILL, "Never round the corners of a table.", "--scope", "corner radius", "--issue",
       "--provenance", "square corners", env=env)
    # a paraphrase the judge cannot be sure of is put to the caller, with the look-alike to decide about
    asked = json.loads(ok("capture", SKILL, "Show the price column in US dollars, no decimal places.",
                          "--scope", "currency formatting", "--provenance", "no cents", "--json", env=env).stdout)
    assert asked["status"] == "needs_confirmation" and [c["id"] for c in asked["candidates"]] == ["L1"]
    again = json.loads(ok("capture", SKILL, "Show the price column in US dollars, no decimal places.",
                          "--scope", "currency formatting", "--provenance", "no cents", "--confirm", "same:L1",
                          "--run-id", "r-2026-07-24-feedc0de", "--json", env=env).stdout)
    assert again["status"] == "reinforced" and again["entry_id"] == "L1" and again["recurrence"] == 2

    result = json.loads(ok("--json", "recall", SKILL, "styling a gtcars table: currency formatting, corners").stdout)
    assert [i["id"] for i in result["learnings"]] == ["L1"] and [i["id"] for i in result["issues"]] == ["I1"]

    store = store_root / SKILL
    learning = next((store / "learnings").glob("currency-formatting-*.md")).read_text()
    assert learning == (
        "## L1 · Format the price (msrp) column as US dollars with no decimal places\n"
        "- recurrence: 2\n- first_seen: 2026-07-24\n- last_seen: 2026-07-24\n- scope: currency formatting\n"
        "- provenance: \"2026-07-24 — 'make the revenue column US dollars'\"\n"
        "- provenance: \"2026-07-24 — 'no cents' (run r-2026-07-24-feedc0de)\"\n\n"
        "Format the price (msrp) column as US dollars with no decimal places.\n")
    issue = next((store / "issues").glob("corner-radius-*.md")).read_text()
    assert issue == ("## I1 · Never round the corners of a table\n- scope: corner radius\n"
                     "- provenance: \"2026-07-24 — 'square corners'\"\n\nNever round the corners of a table.\n")
    log = git(store, "log", "--format=%s").stdout.splitlines()
    assert log == ["capture: reinforce L1 (currency formatting), recurrence 2", "capture: add I1 (corner radius)",
                   "capture: add L1 (currency formatting)", "attach: create the store for great-tables"]
    git(store, "fsck", "--strict")
    assert git(store, "status", "--porcelain").stdout == ""  # index and events are git-ignored
    shown = ok("log", SKILL).stdout
    assert "capture: add I1 (corner radius)" in shown


def test_json_output_is_the_library_result(store_root: Path) -> None:
    ok("capture", SKILL, "Use a warm palette for heat maps", "--scope", "color encoding")
    from_cli = json.loads(ok("recall", SKILL, "color encoding of a heat map", "--json").stdout)
    from_lib = recall(SKILL, "color encoding of a heat map")
    from_cli.pop("run_id"), from_lib.pop("run_id")
    assert from_cli == from_lib


def test_human_output_and_browsing_commands(store_root: Path) -> None:
    ok("capture", SKILL, "Use a warm palette for heat maps", "--scope", "color encoding")
    ok("capture", SKILL, "Never round table corners", "--scope", "corners", "--issue")
    text = ok("recall", SKILL, "color encoding and corners").stdout
    assert "I1  MUST" in text and "L1  0.50" in text
    listed = ok("list").stdout
    assert SKILL in listed and "1 learnings" in listed
    shown = json.loads(ok("show", SKILL, "--json").stdout)
    assert shown["learnings"][0]["id"] == "L1" and shown["issues"][0]["id"] == "I1"
    assert "L1 · Use a warm palette for heat maps" in ok("show", SKILL, "L1").stdout
    assert ok("path", SKILL).stdout.strip() == str(store_root / SKILL)
    history = json.loads(ok("log", SKILL, "--json").stdout)
    assert history["commits"][0]["subject"] == "capture: add I1 (corners)"
    metrics = json.loads(ok("metrics", SKILL, "--json").stdout)
    assert metrics["skills"][SKILL]["captures"] == {"committed": 2} and metrics["skills"][SKILL]["runs"] == 1
    assert metrics["skills"][SKILL]["capture_rate"] is None
    assert f"{SKILL}: 1 runs" in ok("metrics").stdout


def test_revise_through_the_cli(store_root: Path) -> None:
    ok("capture", SKILL, "Use a warm palette for heat maps", "--scope", "color encoding")
    asked = json.loads(ok("revise", SKILL, "L1", "remove", "--json").stdout)
    assert asked["status"] == "needs_confirmation"
    done = ok("revise", SKILL, "L1", "remove", "--confirm")
    assert done.stdout.startswith("committed: ")
    assert json.loads(ok("show", SKILL, "--json").stdout)["learnings"] == []


def test_conflict_exits_zero_and_writes_nothing(store_root: Path) -> None:
    ok("capture", SKILL, "Right-align currency columns", "--scope", "currency formatting")
    before = tree_state(store_root / SKILL)
    proc = ok("capture", SKILL, "Never right-align currency columns", "--scope", "currency formatting")
    assert proc.stdout.startswith("conflict: ") and "L1" in proc.stdout
    assert tree_state(store_root / SKILL) == before


def one_line_error(proc, code: int = 2) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("git whetstone: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize("args, message", [
    (["capture", "../x", "body", "--scope", "s"], "invalid skill name '../x'"),
    (["capture", "a/b", "body", "--scope", "s"], "invalid skill name 'a/b'"),
    (["capture", "", "body", "--scope", "s"], "invalid skill name ''"),
    (["capture", "x" * 200, "body", "--scope", "s"], "invalid skill name"),
    (["recall", "../x", "intent"], "invalid skill name"),
    (["capture", SKILL, "", "--scope", "s"], "body is empty"),
    (["capture", SKILL, "body"], "Missing option '--scope'"),
    (["revise", SKILL, "L99", "reinforce"], "unknown entry id L99"),
    (["revise", SKILL, "L1", "explode"], "unknown action 'explode'"),
    (["revise", SKILL, "L1", "reinforce", "--confirm", "perhaps"], "confirm must be"),
    (["recall", SKILL, ""], "intent is empty"),
    (["recall", SKILL, "x", "-k", "0"], "learnings_k must be"),
    (["show", SKILL, "L77"], "unknown entry id"),
    (["path", "nope"], "no store for skill 'nope'"),
    (["frobnicate"], "No such command 'frobnicate'"),
])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(store_root: Path, args: list[str], message: str) -> None:
    ok("capture", SKILL, "Use a warm palette for heat maps", "--scope", "color encoding")
    before = tree_state(store_root / SKILL)
    line = one_line_error(run_cli(*args))
    assert message in line
    assert tree_state(store_root / SKILL) == before
    assert sorted(p.name for p in store_root.iterdir()) == [SKILL]


def test_config_that_is_not_toml_is_a_clear_error(store_root: Path, tmp_path: Path) -> None:
    conf = Path(os.environ["XDG_CONFIG_HOME"]) / "whetstone" / "config.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text("learnings_k = [unclosed\n")
    line = one_line_error(run_cli("recall", SKILL, "x"))
    assert "config.toml" in line and "TOML" in line
    conf.write_text('learnings_k = "many"\n')
    assert "learnings_k" in one_line_error(run_cli("recall", SKILL, "x"))
    conf.unlink()
    line = one_line_error(run_cli("recall", SKILL, "x", env={"WHETSTONE_SUPERVISION": "chaotic"}))
    assert "WHETSTONE_SUPERVISION" in line


def test_store_root_option_wins(store_root: Path, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    ok("--store-root", str(other), "attach", SKILL)
    assert (other / SKILL / ".git").is_dir() and not (store_root / SKILL).exists()


def test_corrupt_next_ids_is_recovered_with_a_warning(store_root: Path) -> None:
    ok("capture", SKILL, "Use a warm palette for heat maps", "--scope", "color encoding")
    ok("capture", SKILL, "Bold the header row", "--scope", "headers")
    ok("revise", SKILL, "L2", "remove", "--confirm")  # the highest id is gone from the markdown
    (store_root / SKILL / "next_ids.json").write_text("{not json")
    proc = ok("capture", SKILL, "Band alternate rows", "--scope", "banding", "--json")
    assert json.loads(proc.stdout)["entry_id"] == "L3"
    assert "next_ids.json was missing or corrupt" in proc.stderr or "next_ids.json" in proc.stdout
    assert json.loads((store_root / SKILL / "next_ids.json").read_text()) == {"learning": 4, "issue": 1}


def test_a_rejecting_hook_is_a_one_line_runtime_error_and_nothing_changes(store_root: Path) -> None:
    ok("attach", SKILL)
    store = store_root / SKILL
    hook = store / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'policy says no' >&2\nexit 1\n")
    hook.chmod(0o755)
    before = tree_state(store)
    line = one_line_error(run_cli("capture", SKILL, "Use a warm palette", "--scope", "color"), code=1)
    assert "policy says no" in line
    assert tree_state(store) == before
    assert git(store, "status", "--porcelain").stdout == ""


def test_the_cli_ends_without_the_interpreters_teardown_and_loses_no_output(store_root: Path) -> None:
    # the process ends with os._exit (cli._leave): what it printed to a block-buffered pipe all arrives
    ok("capture", SKILL, "Use a warm palette for heat maps", "--scope", "color encoding")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    prefix = "import atexit, sys; atexit.register(lambda: print('teardown', file=sys.stderr)); "
    code = prefix + "from git_whetstone.cli import run; run(sys.argv[1:])"
    import subprocess
    proc = subprocess.run([sys.executable, "-c", code, "recall", SKILL, "color encoding of a heat map", "--json"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "teardown" not in proc.stderr, proc.stderr
    from_cli, from_lib = json.loads(proc.stdout), recall(SKILL, "color encoding of a heat map")
    from_cli.pop("run_id"), from_lib.pop("run_id")
    assert from_cli == from_lib
    failed = subprocess.run([sys.executable, "-c", code, "recall", "no such skill!", "x"], capture_output=True,
                            text=True, env=env)
    assert failed.returncode == 2 and failed.stdout == "" and len(failed.stderr.splitlines()) == 1, failed.stderr


def test_cli_start_imports_no_heavy_library(store_root: Path) -> None:
    for args in (["--help"], ["capture", "-h"], ["list"]):
        proc = run_cli(*args, env={"PYTHONPROFILEIMPORTTIME": "1"})
        assert proc.returncode == 0, proc.stderr
        imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
        assert imported, "importtime printed nothing"
        assert not imported & {"mcp", "torch", "sentence_transformers", "mcp_entry"}, args
    help_only = run_cli("--help", env={"PYTHONPROFILEIMPORTTIME": "1"}).stderr
    assert "numpy" not in {line.split("|")[-1].strip().split(".")[0] for line in help_only.splitlines()}
    # a recall from a fresh index hashes nothing: hashlib (OpenSSL) is not loaded for it
    ok("capture", SKILL, "Use a warm palette for heat maps", "--scope", "color encoding")
    ok("recall", SKILL, "heat map colours")
    recalled = run_cli("recall", SKILL, "heat map colours", env={"PYTHONPROFILEIMPORTTIME": "1"})
    modules = {line.split("|")[-1].strip() for line in recalled.stderr.splitlines() if line.startswith("import time:")}
    assert "warm palette" in recalled.stdout and "git_whetstone.index.snapshot" in modules and "hashlib" not in modules


def test_python_dash_x_importtime_help(store_root: Path) -> None:
    import subprocess
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "git_whetstone", "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "Usage:" in proc.stdout
    modules = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()}
    assert not any(m.split(".")[0] in ("mcp", "torch", "sentence_transformers") for m in modules)


def test_git_dispatches_to_git_whetstone(store_root: Path) -> None:
    import shutil
    import subprocess
    scripts = Path(sys.executable).parent
    if not (scripts / "git-whetstone").exists():
        pytest.skip("git-whetstone is not installed beside this python")
    env = dict(os.environ, PATH=f"{scripts}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["git", "whetstone", "-h"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "recall" in proc.stdout
    assert shutil.which("git")
    proc = subprocess.run(["git", "whetstone", "attach", SKILL], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and (store_root / SKILL / ".git").exists()


def test_bare_command_prints_help(store_root: Path) -> None:
    proc = run_cli()
    assert proc.returncode == 0 and "Usage:" in proc.stdout and "capture" in proc.stdout
    assert run_cli("-h").stdout == proc.stdout


def _on_a_terminal(args: list[str], keys: str, store_root: Path) -> str:
    """Run the CLI with a pseudo-terminal as its stdin and stdout, typing `keys` one at a time as it
    asks; everything it wrote."""
    import pty
    import select
    import subprocess
    import time

    parent, child = pty.openpty()
    env = dict(os.environ, WHETSTONE_STORE_ROOT=str(store_root), TERM="dumb")
    proc = subprocess.Popen([sys.executable, "-m", "git_whetstone", *args], stdin=child, stdout=child, stderr=child,
                            env=env, cwd=Path(__file__).resolve().parent.parent.parent, close_fds=True)
    os.close(child)
    said, pending = b"", list(keys)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([parent], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(parent, 4096)
            except OSError:
                break
            if not chunk:
                break
            said += chunk
            if pending and said.rstrip().endswith(b"quit"):  # a question waits for its key
                time.sleep(0.5)  # as a person would: the terminal drops what is typed before it reads keys
                os.write(parent, pending.pop(0).encode())
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(parent)
    return said.decode("utf-8", "replace")


def test_capture_on_a_terminal_asks_one_key_at_a_time(store_root: Path) -> None:
    """On a terminal the question comes with numbered candidates and takes single keys; without one
    (or with --json) the same capture answers needs_confirmation."""
    for body, scope in (("Keep weekly status updates short.", "status updates"),
                        ("Status updates list every open risk at the top.", "status updates")):
        ok("capture", SKILL, body, "--scope", scope, "--confirm", "new")
    body = "Weekly status updates should be long and list every open risk."
    piped = json.loads(ok("capture", SKILL, body, "--scope", "status updates", "--json").stdout)
    assert piped["status"] == "needs_confirmation" and len(piped["candidates"]) == 2
    shown = _on_a_terminal(["capture", SKILL, body, "--scope", "status updates"], "2r", store_root)
    assert "[1] L2" in shown and "[2] L1" in shown, shown  # nearest first
    assert "committed:" in shown and "replacing L1" in shown, shown
    assert git(store_root / SKILL, "log", "-1", "--format=%s").stdout.strip() == \
        "capture: add L3 (status updates), replacing L1"
    quit_ = _on_a_terminal(["capture", SKILL, "Weekly status updates should be long and list risks.", "--scope",
                            "status updates"], "q", store_root)
    assert "nothing written" in quit_, quit_


def test_a_typo_in_a_skill_name_does_not_split_the_memory(store_root: Path) -> None:
    """With great-tables stored, recall great-table warns "did you mean great-tables?"; a capture into
    great-table asks before it creates a store (needs_confirmation without a terminal, a question on
    one); --confirm new creates it; a reserved name is refused as reserved."""
    ok("capture", SKILL, "Format currency as US dollars.", "--scope", "currency formatting")
    recalled = ok("recall", "great-table", "styling a table: currency formatting")
    assert "warning: no skill named 'great-table' here; did you mean great-tables?" in recalled.stderr
    before = tree_state(store_root)
    asked = json.loads(ok("capture", "great-table", "Bold the header row.", "--scope", "headers", "--json").stdout)
    assert asked["status"] == "needs_confirmation" and asked["did_you_mean"] == ["great-tables"]
    assert "great-tables" in asked["prompt"] and asked["entry_id"] is None
    printed = ok("capture", "great-table", "Bold the header row.", "--scope", "headers")
    assert printed.stdout.startswith("needs_confirmation: ") and "--confirm new" in printed.stdout
    assert tree_state(store_root) == before and not (store_root / "great-table").exists()  # nothing created
    # on a terminal: the question, and the answer taken (the stored name)
    shown = _on_a_terminal(["capture", "great-table", "Bold the header row.", "--scope", "headers"], "1", store_root)
    assert "Did you mean" in shown and "[1] great-tables" in shown and "committed:" in shown, shown
    assert not (store_root / "great-table").exists()
    assert "Bold the header row." in (store_root / SKILL / "learnings").joinpath(
        next(p.name for p in (store_root / SKILL / "learnings").glob("*.md") if "headers" in p.name)).read_text()
    made = ok("capture", "great-table", "Bold the header row.", "--scope", "headers", "--confirm", "new")
    assert made.stdout.startswith("committed: ") and (store_root / "great-table" / ".git").exists()
    # a reserved name says so, not the character-set rule it satisfies
    refused = run_cli("capture", "con", "Bold the header row.", "--scope", "headers")
    assert refused.returncode == 2 and "reserved" in refused.stderr and "a-z 0-9" not in refused.stderr, refused.stderr


def test_the_command_line_names_its_own_options_not_the_mcp_arguments(store_root: Path) -> None:
    """What a command prints for a person names the command line's options (`--confirm same:L1`,
    `git whetstone revise SKILL L1 promote --confirm`); --json keeps the MCP tool's words."""
    ok("capture", SKILL, "Format the price (msrp) column as US dollars with no decimal places.", "--scope",
       "currency formatting")
    ok("capture", SKILL, "Never round the corners of a table.", "--scope", "corner radius", "--issue")
    paraphrase = ["capture", SKILL, "Show the price column in US dollars, no decimal places.", "--scope",
                  "currency formatting"]
    asked = ok(*paraphrase).stdout
    assert asked.startswith("needs_confirmation: ") and "--confirm same:L1" in asked and "--confirm new" in asked
    assert "confirm='" not in asked, asked
    assert "confirm='same:L1'" in json.loads(ok(*paraphrase, "--json").stdout)["prompt"]
    for _ in range(2):
        ok("revise", SKILL, "L1", "reinforce")
    promoted = ok("revise", SKILL, "L1", "reinforce").stdout
    assert f"git whetstone revise {SKILL} L1 promote --confirm promotes it" in promoted, promoted
    assert f"git whetstone revise {SKILL} L1 promote --confirm no records" in promoted, promoted
    assert "revise(" not in promoted and "confirm='" not in promoted
    removing = ok("revise", SKILL, "L1", "remove").stdout
    assert "Repeat the call with --confirm." in removing, removing
    ambiguous = run_cli("capture", SKILL, "Show prices in dollars", "--scope", "currency formatting",
                        "--confirm", "keep:L9")
    assert ambiguous.returncode == 2 and "confirm='" not in ambiguous.stderr, ambiguous.stderr


def test_revise_with_a_body_and_no_action_rewords(store_root: Path) -> None:
    """`revise SKILL L1 --body …` rewords (as the MCP tool promises); weaken --body says it reworded
    too; each commit message says reworded."""
    ok("capture", SKILL, "Band alternate rows in light grey.", "--scope", "row banding")
    ok("revise", SKILL, "L1", "reinforce")
    store = store_root / SKILL
    reworded = ok("revise", SKILL, "L1", "--body", "Band alternate rows in pale blue.").stdout
    assert reworded.startswith("committed: ") and "reworded L1" in reworded, reworded
    assert git(store, "log", "-1", "--format=%s").stdout.strip() == "revise: reword L1 (row banding)"
    text = next((store / "learnings").glob("*.md")).read_text()
    assert "## L1 · Band alternate rows in pale blue\n" in text and "light grey" not in text
    assert "- recurrence: 2\n" in text  # a reword changes the words, not the weight
    weakened = ok("revise", SKILL, "L1", "weaken", "--body", "Band every other row in pale blue.").stdout
    assert "weakened L1" in weakened and "reworded" in weakened, weakened
    assert git(store, "log", "-1", "--format=%s").stdout.strip() == \
        "revise: weaken and reword L1 (row banding), recurrence 1"
    moved = ok("revise", SKILL, "L1", "--scope", "table rows").stdout
    assert moved.startswith("committed: ") and "moved L1 to 'table rows'" in moved, moved
    nothing = run_cli("revise", SKILL, "L1")
    assert nothing.returncode == 2 and "--body" in nothing.stderr, nothing.stderr


def test_an_oversized_provenance_is_refused_in_one_line(store_root: Path) -> None:
    ok("capture", SKILL, "Band alternate rows in light grey.", "--scope", "row banding")
    before = tree_state(store_root / SKILL)
    proc = run_cli("capture", SKILL, "Bold the header row.", "--scope", "headers", "--provenance", "x" * 5000)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "provenance is too long (5000 characters" in proc.stderr
    assert tree_state(store_root / SKILL) == before


def test_names_that_differ_in_a_number_are_not_typos(store_root: Path) -> None:
    ok("capture", "deck-69", "Put the price on the last slide.", "--scope", "pricing")
    made = ok("capture", "deck-70", "Put the price on the last slide.", "--scope", "pricing", "--json")
    assert json.loads(made.stdout)["status"] == "committed"
    assert "did you mean" not in ok("recall", "deck-7", "pricing slides").stderr


def test_an_autonomous_capture_into_a_close_name_starts_it_and_says_so(store_root: Path) -> None:
    ok("capture", SKILL, "Format currency as US dollars.", "--scope", "currency formatting")
    made = ok("capture", "great-table", "Bold the header row.", "--scope", "headers",
              env={"WHETSTONE_SUPERVISION": "autonomous"})
    assert made.stdout.startswith("committed: ") and (store_root / "great-table" / ".git").exists()
    assert "did you mean great-tables?" in made.stderr, made.stderr
