"""A host's settings file with whetstone's prompt hooks in it (Claude Code's `.claude/settings.json`,
the project's or `~/.claude`'s): one command hook under `UserPromptSubmit` and one under
`SessionStart`, known by their command. Only ours are added or taken out; every other key keeps its
place and the file its indentation. A file that is not a JSON object is refused and left as it is.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...base.errors import WhetstoneError
from ...base.files import write_atomic
from ...git import runner

HOSTS = ("claude-code",)
SCOPES = ("project", "user")
EVENTS = ("UserPromptSubmit", "SessionStart")
COMMAND = "git whetstone context"
TIMEOUT = 15  # seconds the host waits for us; the command takes a fraction of one
OURS = (("git", "whetstone", "context"), ("whetstone", "context"), ("git-whetstone", "context"))


def settings_path(scope: str = "project") -> Path:
    """The settings file of `scope`: the project's (`.claude/settings.json` at the git top level of
    the working directory, else in it) or the user's (`~/.claude/settings.json`)."""
    if scope not in SCOPES:
        raise WhetstoneError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if scope == "user":
        return Path.home() / ".claude" / "settings.json"
    here = Path.cwd()
    top = runner.run(here, "rev-parse", "--show-toplevel", check=False)
    root = Path(top.stdout.strip()) if top.returncode == 0 and top.stdout.strip() else here
    return root / ".claude" / "settings.json"


def is_ours(hook: Any) -> bool:
    """A command hook that runs whetstone's context command (however it is reached)."""
    if not isinstance(hook, dict) or hook.get("type") != "command" or not isinstance(hook.get("command"), str):
        return False
    words = [Path(w).name if i == 0 else w for i, w in enumerate(hook["command"].split())]
    return any(tuple(words[:len(ours)]) == ours for ours in OURS)


def read(path: Path) -> tuple[str | None, dict[str, Any]]:
    """The file's text (None when there is none) and its JSON object, checked where we would write."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, {}
    except (OSError, UnicodeDecodeError) as exc:
        raise WhetstoneError(f"cannot read {path} ({exc}); left as it is", exit_code=1) from None
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise WhetstoneError(f"{path} is not valid JSON ({exc}); left as it is") from None
    if not isinstance(data, dict):
        raise WhetstoneError(f"{path} holds a JSON {type(data).__name__}, not an object; left as it is")
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict) or any(not isinstance(hooks.get(e, []), list) for e in EVENTS):
        raise WhetstoneError(f"{path}: \"hooks\" is not an object of lists as the host expects; left as it is")
    return text, data


def found(data: dict[str, Any]) -> list[str]:
    """The events under which `data` runs our command."""
    hooks = data.get("hooks", {}) if isinstance(data.get("hooks"), dict) else {}
    return [event for event in EVENTS if isinstance(hooks.get(event), list) and any(
        isinstance(group, dict) and isinstance(group.get("hooks"), list) and any(map(is_ours, group["hooks"]))
        for group in hooks[event])]


def host_hooks(host: str = "claude-code", scope: str = "project", remove: bool = False) -> dict[str, Any]:
    """Add whetstone's prompt hooks to the host's settings file (or, with `remove`, take them out):
    `{host, scope, path, status, events}`, status installed, already_installed, removed or
    not_installed; `events` the ones changed."""
    if host not in HOSTS:
        raise WhetstoneError(f"host must be one of {', '.join(HOSTS)}, got {host!r}")
    path = settings_path(scope)
    text, data = read(path)
    have = found(data)
    if remove:
        changed = [e for e in EVENTS if e in have]
        if changed:
            _take_out(data)
        status = "removed" if changed else "not_installed"
    else:
        changed = [e for e in EVENTS if e not in have]
        hooks = data.setdefault("hooks", {})
        for event in changed:
            hooks.setdefault(event, []).append({"hooks": [{"type": "command", "command": COMMAND,
                                                           "timeout": TIMEOUT}]})
        status = "installed" if changed else "already_installed"
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a settings file keeps its mode: a 0600 one may hold keys, and is never readable by others meanwhile
        write_atomic(path, dump(data, text), path.stat().st_mode & 0o777 if text is not None else 0o644)
    return {"host": host, "scope": scope, "path": str(path), "status": status, "events": changed}


def _take_out(data: dict[str, Any]) -> None:
    """Remove our command hooks, and the groups, event lists and hooks object only they filled."""
    hooks = data["hooks"]
    for event in EVENTS:
        groups = hooks.get(event)
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list) and any(map(is_ours, group["hooks"])):
                group["hooks"] = [h for h in group["hooks"] if not is_ours(h)]
                if not group["hooks"]:
                    continue
            kept.append(group)
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not hooks:
        del data["hooks"]


def dump(data: dict[str, Any], text: str | None) -> str:
    """`data` as JSON laid out as `text` was: its indentation, its final newline."""
    indent: str | int = 2
    if text:
        first = re.search(r"^\{[ \t]*\r?\n([ \t]+)\S", text)
        if first:
            indent = first.group(1)
    out = json.dumps(data, indent=indent, ensure_ascii=False)
    return out + ("\n" if text is None or text.endswith("\n") else "")


def status() -> dict[str, Any]:
    """Whether a host runs whetstone's context command: the Claude Code settings files (the
    project's and the user's, each with its .local twin) that hold both hooks, and one line saying so."""
    project = settings_path("project")
    user = settings_path("user")
    where, partly, unread = [], [], []
    for path in (project, project.with_name("settings.local.json"), user, user.with_name("settings.local.json")):
        try:
            _, data = read(path)
        except WhetstoneError:
            unread.append(str(path))
            continue
        events = found(data)
        (where if len(events) == len(EVENTS) else partly if events else []).append(str(path))
    if where:
        detail = f"Claude Code runs git whetstone context before each prompt ({', '.join(where)})"
    elif partly:
        detail = f"only part of whetstone's prompt hooks are in {', '.join(partly)}"
    else:
        detail = "no host runs git whetstone context before a prompt (recall depends on the agent asking)"
    if unread:
        detail += f"; not valid JSON: {', '.join(unread)}"
    return {"installed": bool(where), "paths": where, "detail": detail}
