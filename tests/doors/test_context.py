"""`git whetstone context` as an agent host runs it: the hook's JSON on stdin of a real process,
checked by its stdout, its exit status and the store's event log."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from git_whetstone import api
from tests.helpers import git, run_cli

SQL = "sql-queries"
MAIL = "email-drafting"


def hook(prompt: str | None = None, cwd: Path | None = None, **extra) -> str:
    """The JSON Claude Code sends: UserPromptSubmit with a prompt, else SessionStart."""
    data = {"session_id": "abc123", "transcript_path": "/tmp/transcript.jsonl", "cwd": str(cwd or "/")}
    if prompt is not None:
        data.update(hook_event_name="UserPromptSubmit", prompt=prompt)
    else:
        data.update(hook_event_name="SessionStart", source="startup")
    data.update(extra)
    return json.dumps(data)


def recalls(root: Path, skill: str) -> list[dict]:
    path = root / skill / "events.jsonl"
    if not path.exists():
        return []
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["event"] == "recall"]


@pytest.fixture
def stores(store_root: Path) -> Path:
    """Two skills with an always-on rule, a MUST rule and learnings each."""
    api.capture(SQL, "issue", "Write PostgreSQL syntax unless told otherwise.", "dialect", always=True)
    api.capture(SQL, "issue", "Never use LIMIT without ORDER BY in a query.", "row limits")
    api.capture(SQL, "learning", "Indent JOIN clauses with four spaces.", "query layout")
    api.capture(SQL, "learning", "Name revenue columns revenue_usd in query results.", "column names")
    api.capture(MAIL, "issue", "Never use exclamation marks in emails.", "tone", always=True)
    api.capture(MAIL, "learning", "Sign off emails with Best, then the first name.", "sign-off line")
    return store_root


def project(tmp_path: Path, *skills: str) -> Path:
    """A project directory whose .whetstone.toml lists `skills`, and a folder inside it."""
    top = tmp_path / "project"
    (top / "src" / "deep").mkdir(parents=True)
    (top / ".whetstone.toml").write_text("skills = [" + ", ".join(f'"{s}"' for s in skills) + "]\n")
    return top / "src" / "deep"


def quiet(proc) -> None:
    """Nothing added to the context, and no failure the host would act on."""
    assert proc.returncode == 0 and proc.stdout == ""


def test_a_prompt_gets_the_rules_of_the_project_skills_and_records_the_recall(stores: Path, tmp_path: Path) -> None:
    where = project(tmp_path, SQL)
    proc = run_cli("context", input=hook("Get the ten biggest customers by revenue with LIMIT", where))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    out = proc.stdout
    run_id = re.search(r"sql-queries \(run_id (r-[\w-]+)\):", out).group(1)
    assert "- ALWAYS I1 [dialect]: Write PostgreSQL syntax unless told otherwise." in out
    assert "- MUST I2 [row limits]: Never use LIMIT without ORDER BY in a query." in out
    assert re.search(r"- L2 \(weight 0\.\d\d\) \[column names\]: Name revenue columns", out)
    assert f"git whetstone capture sql-queries \"<the rule, generalized>\" --scope \"<when it applies>\" " \
           f"--run-id {run_id}" in out
    assert MAIL not in out and "exclamation" not in out  # not listed for this project
    assert out.index("ALWAYS I1") < out.index("MUST I2") < out.index("L2 (weight")
    assert len(out) <= 4000
    event = recalls(stores, SQL)[-1]
    assert event["run_id"] == run_id and "I2" in event["issues"] and "L2" in event["learnings"]
    assert recalls(stores, MAIL) == []
    # doctor sees the loop alive
    doctor = json.loads(run_cli("doctor", SQL, "--json").stdout)
    assert next(c for c in doctor["checks"] if c["name"] == "recalls")["ok"]


def test_skills_named_win_and_a_prompt_alone_chooses_the_skill_it_matches(stores: Path, tmp_path: Path) -> None:
    where = project(tmp_path, SQL)
    named = run_cli("context", MAIL, input=hook("Draft an email to the team about the offsite", where))
    assert named.returncode == 0 and "email-drafting (run_id" in named.stdout and SQL not in named.stdout
    elsewhere = tmp_path / "elsewhere"  # no .whetstone.toml up from here
    elsewhere.mkdir()
    matched = run_cli("context", input=hook("Write a SQL query with LIMIT and ORDER BY on revenue columns", elsewhere))
    assert matched.returncode == 0, matched.stderr
    assert "sql-queries (run_id" in matched.stdout and "email-drafting" not in matched.stdout
    mail = run_cli("context", input=hook("Sign off the emails to the team: exclamation marks and tone", elsewhere))
    assert "email-drafting (run_id" in mail.stdout and "sql-queries" not in mail.stdout
    # a prompt that matches no skill: nothing added, nothing recorded
    before = len(recalls(stores, SQL)) + len(recalls(stores, MAIL))
    quiet(run_cli("context", input=hook("Plan a three-day hiking trip in the Dolomites", elsewhere)))
    assert len(recalls(stores, SQL)) + len(recalls(stores, MAIL)) == before
    # --intent instead of stdin
    given = run_cli("context", SQL, "--intent", "monthly revenue by region, with LIMIT")
    assert given.returncode == 0 and "MUST I2" in given.stdout


def test_session_start_gives_the_always_on_rules_of_the_project_skills(stores: Path, tmp_path: Path) -> None:
    where = project(tmp_path, SQL, MAIL)
    proc = run_cli("context", input=hook(None, where))
    assert proc.returncode == 0 and proc.stderr == ""
    assert "- ALWAYS I1 [dialect]: Write PostgreSQL" in proc.stdout
    assert "- ALWAYS I1 [tone]: Never use exclamation marks" in proc.stdout
    assert "- MUST" not in proc.stdout and "(weight" not in proc.stdout  # no task: no MUST rule, no learning
    assert "git whetstone capture SKILL" in proc.stdout  # two skills: the line says where SKILL comes from
    for skill in (SQL, MAIL):
        event = recalls(stores, skill)[-1]
        assert event["intent"] == "(session start)" and event["issues"] == ["I1"] and event["via"] == "context"
    # a session starting where no project names a skill: no task to match, so nothing
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    quiet(run_cli("context", input=hook(None, elsewhere, source="compact")))
    assert len(recalls(stores, SQL)) == 1


@pytest.mark.parametrize("stdin, said", [
    ('{"session_id": "abc", "cwd": "/", "hook_event_name": "UserPromptSubmit"}', "has no prompt"),
    ('{"session_id": "abc", "cwd": "/"}', "names no hook_event_name"),
    ('{"hook_event_name": "UserPromptSubmit", "prompt": 42}', "prompt is not text"),
    ('{"hook_event_name": "PreToolUse", "tool_name": "Bash"}', "not 'PreToolUse'"),
    ("this is not JSON {", "not a host hook's JSON"),
    ('["UserPromptSubmit"]', "not a host hook's JSON object"),
    ("", "nothing on stdin"),
    ("\udcff\x00\x01", "not a host hook's JSON"),
])
def test_bad_input_adds_nothing_and_never_fails(stores: Path, tmp_path: Path, stdin: str, said: str) -> None:
    proc = run_cli("context", SQL, input=stdin.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
    quiet(proc)
    assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert recalls(stores, SQL) == []


def test_an_empty_prompt_an_empty_store_and_an_unknown_skill_add_nothing(store_root: Path, tmp_path: Path) -> None:
    api.attach("empty")
    quiet(run_cli("context", "empty", input=hook("Write a report on sales")))
    quiet(run_cli("context", "empty", input=hook(None)))
    assert recalls(store_root, "empty") == []
    empty_prompt = run_cli("context", "empty", input=hook("   "))
    quiet(empty_prompt)
    assert empty_prompt.stderr == ""
    unknown = run_cli("context", "nope", input=hook("Write a report on sales"))
    quiet(unknown)
    assert "no store for nope" in unknown.stderr
    typo = run_cli("context", "empti", input=hook("Write a report on sales"))  # a letter off a stored skill
    quiet(typo)
    assert "no store for empti; did you mean empty?" in typo.stderr and "attach" not in typo.stderr
    # options it does not know and names that are no skill name: a line, never exit 2 (which would block the prompt)
    odd = run_cli("context", "--future-option", "../x", input=hook("Write a report"))
    quiet(odd)
    assert len(odd.stderr.strip().splitlines()) == 1


def test_a_bad_store_or_config_is_one_line_and_exit_0(stores: Path, tmp_path: Path) -> None:
    not_a_store = stores / "broken"
    (not_a_store / "learnings").mkdir(parents=True)
    proc = run_cli("context", "broken", SQL, input=hook("Write a SQL query with LIMIT"))
    assert proc.returncode == 0 and "MUST I2" in proc.stdout  # the good skill still answers
    assert "no store for broken" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    bad_config = run_cli("context", SQL, input=hook("Write a SQL query"), env={"WHETSTONE_LEARNINGS_K": "many"})
    quiet(bad_config)
    assert "learnings_k" in bad_config.stderr.lower() and len(bad_config.stderr.strip().splitlines()) == 1


def test_a_skill_with_a_broken_file_is_served_from_its_last_commit(stores: Path, tmp_path: Path) -> None:
    store = stores / SQL
    path = next((store / "issues").glob("row-limits-*.md"))
    path.write_text(path.read_text() + "\n## X9 · not an id\n\nbroken\n")  # a bad hand edit, not committed
    proc = run_cli("context", SQL, input=hook("Write a SQL query with LIMIT and ORDER BY"))
    assert proc.returncode == 0
    assert "MUST I2 [row limits]: Never use LIMIT without ORDER BY" in proc.stdout
    assert proc.stderr.startswith("git whetstone context: warning: ") and len(proc.stderr.strip().splitlines()) == 1
    assert recalls(stores, SQL)[-1]["issues"][:2] == ["I1", "I2"]
    assert git(store, "status", "--porcelain").stdout.strip() == f"M issues/{path.name}"  # left as it was


def test_the_block_is_bounded_and_counts_what_it_leaves_out(store_root: Path) -> None:
    things = ("revenue margin price discount tax headcount churn latency uptime signups tickets refunds orders "
              "invoices budgets forecasts cohorts regions channels teams quarters warehouses plans segments "
              "products vendors contracts payments shipments returns").split()
    filler = " ".join(["so readers can check every figure against the source ledger"] * 5)
    for thing in things:
        written = api.capture("tables", "issue", f"Always label {thing} figures with their unit, {filler}.",
                              f"{thing} labels", confirm="new", always=True)
        assert written["status"] == "committed", written
    proc = run_cli("context", "tables", input=hook("Add a caption to the revenue table"))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) <= 4000
    shown = proc.stdout.count("\n- ALWAYS ")
    left = int(re.search(r"\((\d+) more left out", proc.stdout).group(1))
    assert 0 < shown < 20 and shown + left == 30  # always_k (20) caps recall; the rest are counted too
    assert proc.stdout.rstrip().endswith("or the MCP capture tool with that run_id.")
