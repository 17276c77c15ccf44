"""The commands of a store among git's other users: export and import, list, show, path, log,
validate, reindex, edit, the hooks, remotes and sync (and the merge driver and hook shims git runs).
Each parses its options, makes one call to the library's API (`git_whetstone.api`) and renders it.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import click

from .. import api
from .main import State, command, emit, main
from .render import IMPORT_PROGRESS_MIN, count, indent, indexing, one_line, progress, show_hooks


SHARE_FORMATS = ("pack", "agents-md", "claude-md", "cursor-rule")


@command()
@click.argument("skill")
@click.option("-o", "--output", metavar="FILE", help="Where to write it (a pack defaults to "
              "SKILL.whetstone.tar.gz here; a rule file is printed unless given).")
@click.option("--format", "fmt", type=click.Choice(SHARE_FORMATS), default="pack", show_default=True,
              help="A preference pack, or a rule file for AGENTS.md, CLAUDE.md or a Cursor rule (.mdc).")
@click.option("--min-weight", type=click.FloatRange(0, 1), default=0.3, show_default=True,
              help="Rule files: leave out learnings weighing less than this.")
def export(state: State, skill: str, output: str | None, fmt: str, min_weight: float, as_json: bool) -> None:
    """Write SKILL's learnings and issues as a preference pack or as a rule file.

    A pack (.tar.gz: learnings/, issues/, pack.toml) is the same bytes for the same store; no
    history, index or telemetry goes in. A rule file lists the issues as MUST rules and the
    learnings above --min-weight as preferences, strongest first, grouped by scope.

    \b
    Example:
      git whetstone export great-tables -o tables.tar.gz
      git whetstone export great-tables --format agents-md -o AGENTS.md
      git whetstone export great-tables --format cursor-rule -o .cursor/rules/tables.mdc
    """
    result = api.export(skill, output, fmt, min_weight=min_weight, config=state.config())

    def human(r: dict[str, Any]) -> None:
        if r.get("text") is not None:
            click.echo(r["text"], nl=False)
        elif r["format"] == "pack":
            click.echo(f"exported {r['skill']} to {r['path']}: {count(r['learnings'], 'learning')}, "
                       f"{count(r['issues'], 'issue')} in {count(r['scopes'], 'scope')} ({r['bytes']} bytes)")
        else:
            click.echo(f"exported {r['skill']} to {r['path']}: {count(r['rules'], 'rule')}, "
                       f"{count(r['preferences'], 'preference')} ({r['left_out']} weaker learnings left out)")
    emit(state, as_json, result, human)


@command(name="import")
@click.argument("skill")
@click.argument("source", metavar="PACK")
@click.option("--merge", "mode", flag_value="merge", default=True,
              help="Add what is new, reinforce near-duplicates, skip conflicts (the default).")
@click.option("--replace", "mode", flag_value="replace", help="Swap every entry of SKILL for the pack's.")
@click.option("--dry-run", is_flag=True, help="Only report what the import would do.")
@click.option("--from", "fmt", type=click.Choice(SHARE_FORMATS[1:]),
              help="PACK is a rule file (AGENTS.md, CLAUDE.md, Cursor .mdc) rather than a pack.")
def import_(state: State, skill: str, source: str, mode: str, dry_run: bool, fmt: str | None,
            as_json: bool) -> None:
    """Import a preference pack (or a rule file) into SKILL, in one commit.

    Merge judges each entry as capture does: new ones are added under new ids (their source
    kept in provenance), a learning it is sure is already there is reinforced once (an issue: a
    noop), a sure contradiction is skipped and reported, and what it cannot tell apart from a
    stored rule is added beside it and listed, never merged. Importing the same pack again changes
    nothing. A pack is untrusted: anything but plain entry files, or a manifest that does not
    match, refuses it whole. With --from, each bullet becomes a capture: always/never/must rules
    become issues, the rest learnings, scoped by the nearest heading.

    \b
    Example:
      git whetstone import great-tables tables.tar.gz --dry-run
      git whetstone import great-tables tables.tar.gz --replace
      git whetstone import great-tables AGENTS.md --from agents-md
    """
    with progress("importing", IMPORT_PROGRESS_MIN) as bar:
        result = api.import_pack(skill, source, mode, dry_run, fmt, progress=bar, config=state.config())

    def human(r: dict[str, Any]) -> None:
        c = r["counts"]
        verb = {"dry_run": "would import", "committed": "imported", "unchanged": "nothing new from"}[r["status"]]
        click.echo(f"{r['skill']}: {verb} {r['source']} ({r['mode']}): {c['committed']} committed, "
                   f"{c['reinforced']} reinforced, {c['noop']} noop, {c['conflicts']} conflicts"
                   + (f", {c['marked']} marked for every task" if c["marked"] else "")
                   + (f", {c['removed']} removed" if r["mode"] == "replace" else ""))
        for item in r["conflicts"]:
            other = item["conflicts_with"]
            click.echo(f"  conflict: {item['from']} \"{one_line(item['rule'])}\" contradicts {other['id']} "
                       f"({other['scope']}): {item['reason']}")
        for item in r.get("similar", []):
            click.echo(f"  kept both: {item['id'] or item['from']} \"{one_line(item['rule'])}\" looks like "
                       + ", ".join(c["id"] for c in item["similar"]) + " (settle with revise if they are one rule)")
    emit(state, as_json, result, human)


@command(name="list")
def list_(state: State, as_json: bool) -> None:
    """List the skills that have a store, with their entry counts."""
    result = api.list_stores(config=state.config())

    def human(r: dict[str, Any]) -> None:
        if not r["skills"]:
            click.echo(f"no stores under {r['store_root']}")
        for s in r["skills"]:
            click.echo(f"{s['skill']:<24} {s['learnings']:>5} learnings {s['issues']:>5} issues "
                       f"{s['always']:>4} always  {s['path']}")
    emit(state, as_json, result, human)


@command()
@click.argument("skill")
@click.argument("entry_id", metavar="[ID]", required=False)
def show(state: State, skill: str, entry_id: str | None, as_json: bool) -> None:
    """Print SKILL's learnings and issues (or just entry ID) with their metadata."""
    result = api.show(skill, entry_id, config=state.config())

    def human(r: dict[str, Any]) -> None:
        for item in r["issues"]:
            every = " · always (every task)" if item["always"] else ""
            click.echo(f"{item['id']} · {item['title']}\n  issue · scope: {item['scope']}{every} · {item['file']}")
            click.echo(indent(item["rule"]))
        for item in r["learnings"]:
            every = " · always (every task)" if item["always"] else ""
            click.echo(f"{item['id']} · {item['title']}\n  learning · scope: {item['scope']}{every} · recurrence "
                       f"{item['recurrence']} · weight {item['weight']:.2f} · last seen {item['last_seen']} · "
                       f"{item['file']}")
            click.echo(indent(item["rule"]))
        if not r["issues"] and not r["learnings"]:
            click.echo(f"{r['skill']} has no entries yet")
    emit(state, as_json, result, human)


@command()
@click.argument("skill")
def path(state: State, skill: str, as_json: bool) -> None:
    """Print the directory of SKILL's store (e.g. cd "$(git whetstone path great-tables)")."""
    result = api.path(skill, config=state.config())
    emit(state, as_json, result, lambda r: click.echo(r["path"]))


@command(context_settings={"ignore_unknown_options": True})
@click.argument("skill")
@click.argument("git_args", nargs=-1, type=click.UNPROCESSED, metavar="[GIT LOG ARGS]...")
@click.option("-n", "--max-count", type=int, default=20, show_default=True, help="How many commits.")
def log(state: State, skill: str, git_args: tuple[str, ...], max_count: int, as_json: bool) -> None:
    """Show the history of SKILL's store (git log; extra arguments go to git log).

    \b
    Example:
      git whetstone log great-tables -p
    """
    if as_json or state.as_json:
        emit(state, True, api.history(skill, max_count, config=state.config()), lambda r: None)
        return
    where = api.path(skill, config=state.config())["path"]
    args = ["git", "-C", where, "log", f"-n{max_count}", *(git_args or ("--format=%h %ad %s", "--date=short"))]
    import subprocess
    raise SystemExit(subprocess.call(args))


@command()
@click.argument("skill")
@click.option("--staged", is_flag=True, help="Check what is staged for the next commit instead of the work tree.")
def validate(state: State, skill: str, staged: bool, as_json: bool) -> None:
    """Check SKILL's learnings and issues: one 'path:line: message' per problem.

    Runs the checks of the pre-commit hook (the block format, read as whetstone and as a markdown
    renderer read it, and ids claimed twice) over every scope file. Exit 0 when all is valid, 1
    when there is a problem.

    \b
    Example:
      git whetstone validate great-tables
      git whetstone validate great-tables --staged
    """
    result = api.validate(skill, staged, config=state.config())

    def human(r: dict[str, Any]) -> None:
        where = "staged files" if r["staged"] else "files"
        for error in r["errors"]:
            click.echo(error["text"])
        if r["valid"]:
            click.echo(f"{r['skill']}: {r['files']} {where} valid")
        else:
            click.echo(f"{r['skill']}: {count(len(r['errors']), 'problem')} in {r['files']} {where}", err=True)
        if r.get("hint"):
            click.echo(f"hint: {r['hint']}", err=True)
    emit(state, as_json, result, human, ok=result["valid"])


@command()
@click.argument("skill")
def reindex(state: State, skill: str, as_json: bool) -> None:
    """Throw SKILL's index away and rebuild it from the markdown.

    Never needed for correctness (every read brings the index up to date); useful after changing
    the embedding backend by hand or to measure a cold build.
    """
    with indexing() as bar:
        result = api.reindex(skill, config=state.config(), progress=bar)
    emit(state, as_json, result, lambda r: click.echo(
        f"reindexed {r['skill']}: {count(r['learnings'], 'learning')}, {count(r['issues'], 'issue')} in "
        f"{count(r['scopes'], 'scope')} ({r['backend']})"))


@command()
@click.argument("skill")
@click.argument("scope", required=False)
@click.option("--issue", is_flag=True, help="Edit (or start) SCOPE's issues file rather than its learnings.")
def edit(state: State, skill: str, scope: str | None, issue: bool, as_json: bool) -> None:
    """Edit SKILL's markdown in $VISUAL or $EDITOR, then validate and commit it.

    Opens the files holding SCOPE (a new file with a template block when SCOPE is new; every file
    when SCOPE is left out). The store changes only when the edit is valid, in one commit that
    names the ids touched. An invalid edit is shown and, on a terminal, offered back to the
    editor; otherwise it is dropped and nothing changes (exit 1).

    \b
    Example:
      git whetstone edit great-tables "color encoding"
      EDITOR=nano git whetstone edit great-tables "corner radius" --issue
    """

    def ask(errors: list) -> bool:
        for error in errors:
            click.echo(str(error), err=True)
        return click.confirm("The edit is not valid. Open the editor again?", default=True, err=True)

    terminal = sys.stdin is not None and sys.stdin.isatty()
    result = api.edit(skill, scope, issue=issue, config=state.config(), ask=ask if terminal else None)

    def human(r: dict[str, Any]) -> None:
        if r["status"] == "aborted":
            for error in r["errors"] if not terminal else []:
                click.echo(error, err=True)
            click.echo(r["message"], err=True)
        else:
            click.echo(f"{r['status']}: {r['message']}")
    emit(state, as_json, result, human, ok=result["status"] != "aborted")


@main.group(name="hooks")
def hooks_group() -> None:
    """Install or remove the git hooks that check and index hand edits of a store, or (host) an
    agent host's hooks that run 'git whetstone context' before each prompt.

    attach installs the git hooks; a hook that was already there is kept and run first.
    """


def _hooks_options(command: Callable) -> Callable:
    command = click.option("--force", is_flag=True,
                           help="Write even into a hooks directory other repositories share (core.hooksPath).")(command)
    command = click.option("--all", "every", is_flag=True, help="Every store under the store root.")(command)
    return click.argument("skill", required=False)(command)


@command(hooks_group, name="install")
@_hooks_options
def hooks_install(state: State, skill: str | None, every: bool, force: bool, as_json: bool) -> None:
    """Install the hooks in SKILL's store (or every store with --all).

    A foreign hook is moved to NAME.whetstone-chained and run before whetstone's. A hooks directory
    shared with other repositories (a global core.hooksPath) is refused unless --force; exit 1 then.

    \b
    Example:
      git whetstone hooks install --all
    """
    result = api.install_hooks(skill, every, force, config=state.config())
    emit(state, as_json, result, show_hooks, ok=result["ok"])


@command(hooks_group, name="uninstall")
@_hooks_options
def hooks_uninstall(state: State, skill: str | None, every: bool, force: bool, as_json: bool) -> None:
    """Remove whetstone's hooks from SKILL's store (or every store), restoring chained ones.

    Only whetstone's shims are removed; attach will not put them back until hooks install.
    """
    result = api.uninstall_hooks(skill, every, force, config=state.config())
    emit(state, as_json, result, show_hooks, ok=result["ok"])


@main.command(hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hook(name: str, args: tuple[str, ...]) -> None:
    """Run the store hook NAME in the current repository (what the installed shims call).

    pre-commit exits 1 to refuse a commit; the others always exit 0.
    """
    with indexing() as bar:
        status = api.run_hook(name, list(args), progress=bar)
    raise SystemExit(status)


@command()
@click.argument("skill")
@click.argument("action", required=False, metavar="[add URL | remove NAME | list]")
@click.argument("target", required=False, metavar="")
@click.option("--name", metavar="NAME", help="The name to give the remote with add (default: origin).")
def remote(state: State, skill: str, action: str | None, target: str | None, name: str | None,
           as_json: bool) -> None:
    """Add, remove or list the git remotes SKILL's store syncs with.

    Any git remote works: a bare repository on disk, ssh, https. On a machine without the store,
    add clones it from URL (or starts it, when URL is an empty repository).

    \b
    Example:
      git init --bare ~/taste/great-tables.git
      git whetstone remote great-tables add ~/taste/great-tables.git
      git whetstone remote great-tables add git@example.com:me/tables-taste.git --name laptop
      git whetstone remote great-tables remove laptop
    """
    result = api.remote(skill, action, target, name, config=state.config())

    def human(r: dict[str, Any]) -> None:
        if r["status"] in ("listed", "removed"):
            if r["status"] == "removed":
                click.echo(f"removed {r['remote']} from {r['skill']}")
            for item in r["remotes"]:
                click.echo(f"{item['name']}\t{item['url']}")
            if r["status"] == "listed" and not r["remotes"]:
                click.echo(f"{r['skill']} has no remote (git whetstone remote {r['skill']} add URL)")
            return
        verb = {"cloned": "cloned from", "added": "added", "already_added": "already has"}[r["status"]]
        click.echo(f"{r['skill']}: {verb} {r['remote']} {r['url']}" if r["status"] != "cloned" else
                   f"{r['skill']}: cloned from {r['url']} into {r['path']}")
    emit(state, as_json, result, human)


@command()
@click.argument("skill", required=False)
@click.option("--all", "every", is_flag=True, help="Every store under the store root, the global layer too.")
@click.option("--remote", "remote_name", metavar="NAME",
              help="The remote to sync with (default: the branch's upstream, then origin, then the only one).")
def sync(state: State, skill: str | None, every: bool, remote_name: str | None, as_json: bool) -> None:
    """Fetch, merge and push SKILL's store (or every store) through its git remote.

    Captures made elsewhere since the last sync merge with these block by block; an id minted on
    both sides is re-minted on one (the rename is in its provenance). When both sides changed the
    same block's body differently, the merge stops with both versions in the file: exit 1, and a
    line saying what to do. A store with uncommitted edits is refused.

    \b
    Example:
      git whetstone sync great-tables
      git whetstone sync --all          # from cron, or at the start of a session
    """
    with indexing() as bar:
        result = api.sync(skill, every, remote_name, config=state.config(), progress=bar)

    def human(r: dict[str, Any]) -> None:
        for one in r["stores"]:
            click.echo(one["message"], err=one["status"] in ("conflict", "failed"))
    emit(state, as_json, result, human, ok=result["ok"])


@main.command(name="merge-driver", hidden=True)
@click.argument("kind", type=click.Choice(["blocks", "ids"]))
@click.argument("base")
@click.argument("ours")
@click.argument("theirs")
@click.argument("marker_size")
@click.argument("path")
def merge_driver(kind: str, base: str, ours: str, theirs: str, marker_size: str, path: str) -> None:
    """Merge one file of a store for git (what the installed merge drivers run).

    KIND is blocks (a scope file) or ids (next_ids.json); BASE, OURS and THEIRS are git's temporary
    files and the result is written over OURS. Exits 1 when a conflict is left.
    """
    raise SystemExit(api.run_driver(kind, base, ours, theirs, marker_size, path))


@command(name="install-man")
@click.option("--dir", "directory", metavar="DIR", help="Where to put git-whetstone.1 "
              "(default: ~/.local/share/man/man1, searched by man when ~/.local/bin is on PATH).")
def install_man(state: State, directory: str | None, as_json: bool) -> None:
    """Copy the man page where man finds it, for installs that did not put it there.

    Then 'git help whetstone' and 'git whetstone --help' open it.
    """
    from ..base.resources import install_man as run_install_man
    result = run_install_man(directory)
    emit(state, as_json, result, lambda r: click.echo(f"installed {r['path']}"))
