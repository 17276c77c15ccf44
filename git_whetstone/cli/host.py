"""The commands for agent hosts: `context`, what a host's prompt hook runs (the rules for the task,
printed for the model's context), and `hooks host`, which puts those hooks in a host's settings.
Each makes one call to the library's API (`git_whetstone.api`) and renders it.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from .. import api
from ..base.errors import WhetstoneError
from .main import State, command, emit
from .render import one_line
from .store import hooks_group

MAX_STDIN = 8 << 20  # bytes of a hook's JSON read (a prompt with a pasted file is far less)


@command(context_settings={"ignore_unknown_options": True})
@click.argument("skills", nargs=-1, metavar="[SKILL]...")
@click.option("--intent", metavar="TEXT", help="The task, instead of a host hook's JSON on stdin.")
def context(state: State, skills: tuple[str, ...], intent: str | None, as_json: bool) -> None:
    """Print the rules for the task at hand, for an agent host's prompt hook to add to the context.

    Reads the hook's JSON on stdin (Claude Code's UserPromptSubmit: the prompt; SessionStart: the
    start of a session) or takes --intent. The skills are those named, else those listed in a
    .whetstone.toml found from the hook's cwd upwards (skills = ["sql-queries"]), else the attached
    skills whose stores match the prompt. Prints one block of at most 4,000 characters: the
    always-on and MUST rules, the relevant learnings with their ids and weights, each skill's
    run_id and how to capture a correction; at session start the always-on rules of the skills
    named or listed. Prints nothing when nothing applies. Always exits 0: a bad store or bad input
    is one line on stderr, so the person's prompt is never blocked.

    \b
    Example:
      git whetstone hooks host claude-code      # Claude Code runs it before every prompt
      echo '{"hook_event_name": "UserPromptSubmit", "prompt": "a revenue table"}' | git whetstone context
      git whetstone context sql-queries --intent "monthly revenue by region"
    """
    try:
        hook = None if intent is not None else _stdin()
        result = api.context(list(skills), hook, intent, config=state.config())
    except Exception as exc:  # whatever went wrong, the host's prompt goes on without us
        if os.environ.get("WHETSTONE_DEBUG") == "1" and not isinstance(exc, WhetstoneError):
            raise
        said = exc.message if isinstance(exc, WhetstoneError) else f"internal error: {type(exc).__name__}: {exc}"
        click.echo(f"git whetstone context: {one_line(said)}", err=True)
        return
    if as_json or state.as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        click.echo(result["text"], nl=False)
    warned = result["warnings"]
    if warned:
        more = f" (and {len(warned) - 1} more)" if len(warned) > 1 else ""
        click.echo(f"git whetstone context: warning: {one_line(warned[0])}{more}", err=True)


def _stdin() -> str:
    """The hook's JSON: stdin as text, "" on a terminal (nothing was piped)."""
    if sys.stdin is None or sys.stdin.isatty():
        return ""
    return sys.stdin.buffer.read(MAX_STDIN).decode("utf-8", "replace")


@command(hooks_group, name="host")
@click.argument("host", type=click.Choice(["claude-code"]))
@click.option("--project", "scope", flag_value="project", default=True,
              help="The project's .claude/settings.json, at the git top level (the default).")
@click.option("--user", "scope", flag_value="user", help="Your ~/.claude/settings.json, for every project.")
@click.option("--remove", is_flag=True, help="Take whetstone's hooks out again (only those).")
def hooks_host(state: State, host: str, scope: str, remove: bool, as_json: bool) -> None:
    """Make an agent host run 'git whetstone context' before every prompt and at session start.

    Adds a UserPromptSubmit and a SessionStart command hook to the host's settings file, keeping
    every other setting and hook as it was; --remove takes out only whetstone's. Running it again
    changes nothing. A settings file that is not valid JSON is refused and left alone.

    \b
    Example:
      git whetstone hooks host claude-code
      git whetstone hooks host claude-code --user
      git whetstone hooks host claude-code --remove
    """
    result = api.host_hooks(host, scope, remove)

    def human(r: dict[str, Any]) -> None:
        said = {"installed": f"added the {' and '.join(r['events'])} hooks to",
                "already_installed": "whetstone's hooks are already in",
                "removed": f"took the {' and '.join(r['events'])} hooks out of",
                "not_installed": "no whetstone hooks in"}[r["status"]]
        click.echo(f"{r['host']}: {said} {r['path']}")
    emit(state, as_json, result, human)
