"""`git whetstone hooks host claude-code`: whetstone's prompt hooks in a host's settings file, every
other setting and hook kept, run as a real process against a temporary HOME and project."""
from __future__ import annotations

import json
import os
from pathlib import Path

from git_whetstone import api
from tests.helpers import git, run_cli

OURS = {"type": "command", "command": "git whetstone context", "timeout": 15}
FOREIGN = {
    "model": "claude-sonnet-4-5",
    "permissions": {"allow": ["Bash(npm test)"], "deny": []},
    "hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "~/bin/log-prompt.sh"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./check.sh"}]}],
    },
    "env": {"GREETING": "grüß dich"},
}


def a_project(tmp_path: Path) -> Path:
    top = tmp_path / "project"
    (top / "src").mkdir(parents=True)
    git(top, "init", "-q")
    return top


def host(*args: str, cwd: Path):
    return run_cli("hooks", "host", "claude-code", *args, cwd=cwd)


def test_foreign_hooks_and_settings_are_kept_and_remove_gives_the_file_back(tmp_path: Path) -> None:
    top = a_project(tmp_path)
    settings = top / ".claude" / "settings.json"
    settings.parent.mkdir()
    original = json.dumps(FOREIGN, indent=2, ensure_ascii=False) + "\n"
    settings.write_text(original)
    settings.chmod(0o600)

    first = host(cwd=top / "src")  # from a folder inside: the project is the git top level
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"claude-code: added the UserPromptSubmit and SessionStart hooks to {settings}\n"
    data = json.loads(settings.read_text())
    assert list(data) == ["model", "permissions", "hooks", "env"] and data["env"] == FOREIGN["env"]
    assert list(data["hooks"]) == ["UserPromptSubmit", "PreToolUse", "SessionStart"]
    assert data["hooks"]["UserPromptSubmit"] == FOREIGN["hooks"]["UserPromptSubmit"] + [{"hooks": [OURS]}]
    assert data["hooks"]["PreToolUse"] == FOREIGN["hooks"]["PreToolUse"]
    assert data["hooks"]["SessionStart"] == [{"hooks": [OURS]}]
    assert settings.stat().st_mode & 0o777 == 0o600
    installed = settings.read_bytes()

    stamp = settings.stat().st_mtime_ns
    again = host("--json", cwd=top)
    assert json.loads(again.stdout)["status"] == "already_installed"
    assert settings.read_bytes() == installed and settings.stat().st_mtime_ns == stamp  # not rewritten

    api.attach("some-skill")
    doctor = json.loads(run_cli("doctor", "some-skill", "--json", cwd=top).stdout)
    assert next(c for c in doctor["checks"] if c["name"] == "host")["ok"]

    removed = host("--remove", cwd=top)
    assert removed.returncode == 0 and "took the UserPromptSubmit and SessionStart hooks out" in removed.stdout
    assert settings.read_text() == original  # byte for byte
    assert json.loads(host("--remove", "--json", cwd=top).stdout)["status"] == "not_installed"
    assert settings.read_text() == original


def test_a_missing_file_is_made_and_other_layouts_are_kept(tmp_path: Path) -> None:
    top = a_project(tmp_path)
    api.attach("some-skill")
    doctor = json.loads(run_cli("doctor", "some-skill", "--json", cwd=top).stdout)
    check = next(c for c in doctor["checks"] if c["name"] == "host")
    assert not check["ok"] and check["severity"] == "warning" and check["fix"] == "git whetstone hooks host claude-code"
    settings = top / ".claude" / "settings.json"
    assert json.loads(host("--remove", "--json", cwd=top).stdout)["status"] == "not_installed"
    assert not settings.exists()  # removing nothing writes nothing
    made = host(cwd=top)
    assert made.returncode == 0, made.stderr
    assert json.loads(settings.read_text()) == {"hooks": {"UserPromptSubmit": [{"hooks": [OURS]}],
                                                          "SessionStart": [{"hooks": [OURS]}]}}
    assert host("--remove", cwd=top).returncode == 0
    assert json.loads(settings.read_text()) == {}
    # a file indented with four spaces and no final newline stays so
    four = json.dumps({"theme": "dark", "hooks": {}}, indent=4)
    settings.write_text(four)
    host(cwd=top)
    assert settings.read_text().startswith('{\n    "theme": "dark",\n    "hooks": {\n        "UserPromptSubmit"')
    assert not settings.read_text().endswith("\n")
    host("--remove", cwd=top)
    assert json.loads(settings.read_text()) == {"theme": "dark"}


def test_a_broken_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    top = a_project(tmp_path)
    settings = top / ".claude" / "settings.json"
    settings.parent.mkdir()
    for text in ('{"hooks": {"UserPromptSubmit": [}', '["not", "an", "object"]', '{"hooks": "none"}'):
        settings.write_text(text)
        for args in ((), ("--remove",)):
            proc = host(*args, cwd=top)
            assert proc.returncode == 2 and proc.stdout == ""
            assert len(proc.stderr.strip().splitlines()) == 1 and "left as it is" in proc.stderr
            assert settings.read_text() == text


def test_user_settings_live_under_home(tmp_path: Path) -> None:
    home = Path(os.environ["HOME"])
    assert home.is_relative_to(tmp_path)  # never the real home
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    proc = host("--user", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    user = home / ".claude" / "settings.json"
    assert set(json.loads(user.read_text())["hooks"]) == {"UserPromptSubmit", "SessionStart"}
    assert not (elsewhere / ".claude").exists()
    # --project outside a repository: the current directory
    host("--project", cwd=elsewhere)
    assert (elsewhere / ".claude" / "settings.json").exists()
    host("--user", "--remove", cwd=elsewhere)
    assert json.loads(user.read_text()) == {}
