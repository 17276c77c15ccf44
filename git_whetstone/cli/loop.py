"""The commands of the loop (SPEC §4): attach, recall, capture, revise, metrics, and the upkeep a
person runs: report, compact, promote, doctor. Each parses its options, makes one call to the
library's API (`git_whetstone.api`) and renders the result.
"""
from __future__ import annotations

import sys
from typing import Any

import click

from .. import api
from .main import State, command, emit
from ..base.errors import WhetstoneError
from .render import ask_on_terminal, ask_skill_on_terminal, count, indexing, progress, show_compact, show_metrics, show_recall, show_write


@command()
@click.argument("skill")
@click.option("--path", "skill_path", metavar="DIR", help="The skill's own directory, recorded in the store.")
def attach(state: State, skill: str, skill_path: str | None, as_json: bool) -> None:
    """Create SKILL's store (a git repository) if it does not exist yet.

    \b
    Example:
      git whetstone attach great-tables
    """
    result = api.attach(skill, skill_path, config=state.config())
    emit(state, as_json, result, lambda r: click.echo(
        f"{'created' if r['created'] else 'already attached'}: {r['skill']} at {r['path']}"))


@command()
@click.argument("skill")
@click.argument("intent")
@click.option("-k", "--learnings-k", type=int, metavar="N", help="At most N learnings (default: learnings_k, 12).")
@click.option("--scope", "scopes", multiple=True, metavar="SCOPE",
              help="Also return every entry of SCOPE (repeatable), e.g. one 'other scopes' names.")
def recall(state: State, skill: str, intent: str, learnings_k: int | None, scopes: tuple[str, ...],
           as_json: bool) -> None:
    """Print the learnings and issues relevant to INTENT.

    Describe the task with its dimensions, not the user's raw words. Rules marked for every task
    (ALWAYS) come first, every time; the scopes nothing came from are listed last, with their
    entry counts: fetch one with --scope.

    \b
    Example:
      git whetstone recall great-tables "styling a gtcars table: currency formatting, color encoding"
      git whetstone recall great-tables "styling a gtcars table" --scope "row banding"
    """
    with indexing() as bar:
        result = api.recall(skill, intent, learnings_k, list(scopes) or None, config=state.config(), progress=bar)
    emit(state, as_json, result, show_recall)


CONFIRM_HELP = ("Answer what a previous call asked: yes, no, new, same:ID, replace:ID, keep:ID (or bare same, "
                "replace, keep when one entry was named); bare --confirm means yes.")


REVISE_CONFIRM_HELP = ("Answer what a previous call asked: yes (go ahead), no (keep a learning a learning), new "
                       "(the revised rule is a rule of its own); bare --confirm means yes.")


@command()
@click.argument("skill")
@click.argument("body")
@click.option("--scope", required=True, help="Short phrase for when the rule applies.")
@click.option("--issue", is_flag=True, help="A mandatory always/never rule instead of a learning.")
@click.option("--always", is_flag=True,
              help="A rule for every task of the skill: recall returns it first, whatever the task.")
@click.option("--provenance", default="", help="Where the correction came from (the user's words).")
@click.option("--run-id", help="The run_id recall returned.")
@click.option("--confirm", is_flag=False, flag_value="yes", default=None, metavar="[VALUE]", help=CONFIRM_HELP)
def capture(state: State, skill: str, body: str, scope: str, issue: bool, always: bool, provenance: str,
            run_id: str | None, confirm: str | None, as_json: bool) -> None:
    """Remember BODY as a learning (or with --issue, a mandatory rule) of SKILL.

    The same rule again (in other order, case or number words) is reinforced, or for an issue
    changes nothing; a rule that says the opposite of a stored one is reported, nothing written.
    When BODY is likely a stored rule again, or its opposite, in other words, whetstone asks: on a
    terminal here and now (one key per answer), otherwise (--json, or no terminal) it answers
    needs_confirmation with the candidates, and you repeat the call with --confirm ("new": both
    hold, remembered so the pair is never raised again). A rule that only looks like stored ones is
    written, with them listed as similar (settle one with revise SKILL ID same|replace|distinct
    --target OTHER).

    \b
    Example:
      git whetstone capture great-tables "Heat-map msrp with a warm palette" --scope "color encoding"
      git whetstone capture great-tables "Never round table corners" --scope corners --issue
      git whetstone capture sql "Write PostgreSQL, not MySQL" --scope dialect --issue --always
      git whetstone capture great-tables "Show prices in dollars" --scope currency --confirm same:L1
    """
    kind = "issue" if issue else "learning"
    result = api.capture(skill, kind, body, scope, provenance, run_id, confirm, always, config=state.config())
    terminal = not (as_json or state.as_json) and sys.stdin is not None and sys.stdin.isatty()
    if result["status"] == "needs_confirmation" and result.get("did_you_mean") and terminal:
        meant = ask_skill_on_terminal(result)
        if meant is None:
            click.echo("nothing written")
            return
        skill, confirm = (skill, "new") if meant == "new" else (meant, confirm)
        result = api.capture(skill, kind, body, scope, provenance, run_id, confirm, always, config=state.config())
    if result["status"] == "needs_confirmation" and result.get("candidates") and terminal:
        said = ask_on_terminal(result)
        if said is None:
            click.echo("nothing written")
            return
        result = api.capture(skill, kind, body, scope, provenance, run_id, said, always, config=state.config())
    emit(state, as_json, result, show_write)


@command()
@click.argument("skill")
@click.argument("entry_id", metavar="ID")
@click.argument("action", metavar="[ACTION]", required=False)  # checked by the library, as for MCP
@click.option("--body", help="Reword the entry.")
@click.option("--scope", help="Move the entry to another scope.")
@click.option("--always/--scoped", "always", default=None,
              help="Mark the entry as a rule for every task (recalled first, every time), or take the mark "
                   "off (recalled when a task is about its scope). Given without an ACTION.")
@click.option("--target", metavar="ID", help="The entry the action is about, for same, replace and distinct.")
@click.option("--run-id", help="The run_id recall returned.")
@click.option("--confirm", is_flag=False, flag_value="yes", default=None, metavar="[VALUE]", help=REVISE_CONFIRM_HELP)
def revise(state: State, skill: str, entry_id: str, action: str | None, body: str | None, scope: str | None,
           always: bool | None, target: str | None, run_id: str | None, confirm: str | None, as_json: bool) -> None:
    """Change entry ID of SKILL: ACTION is reinforce, weaken, remove, promote or demote; or, with
    no ACTION, --body rewords it and --scope moves it, and --always / --scoped set or clear its
    mark as a rule for every task; or, with
    --target, say how ID relates to that entry: same (fold ID into it), replace (ID replaces it)
    or distinct (both hold: never ask about the pair again).

    remove, promote and demote ask for --confirm first; same, replace and distinct do not.

    \b
    Example:
      git whetstone revise great-tables L3 reinforce
      git whetstone revise great-tables L3 --body "Band alternate rows in pale blue"
      git whetstone revise great-tables L3 promote --confirm
      git whetstone revise great-tables I2 --always
      git whetstone revise great-tables L7 same --target L3
      git whetstone revise great-tables L7 distinct --target L3
    """
    if action is None and always is None and body is None and scope is None:
        raise WhetstoneError("give an ACTION (reinforce, weaken, remove, promote, demote, same, replace, distinct), "
                             "--body / --scope alone to reword or move the entry, or --always / --scoped")
    result = api.revise(skill, entry_id, action, body, scope, run_id, confirm, always, target, config=state.config())
    emit(state, as_json, result, show_write)


@command()
@click.argument("skill", required=False)
def metrics(state: State, skill: str | None, as_json: bool) -> None:
    """Print how the loop is doing for SKILL (or every skill): runs, captures, repeats."""
    result = api.metrics(skill, config=state.config())
    emit(state, as_json, result, show_metrics)


@command()
@click.argument("skill", required=False)
@click.option("--all", "every", is_flag=True, help="Every skill on one page.")
@click.option("-o", "--output", metavar="FILE", help="Where to write the page (default: SKILL-report.html, "
              "or whetstone-report.html with --all, in the current directory).")
@click.option("--open", "open_it", is_flag=True, help="Open the page in the default browser.")
def report(state: State, skill: str | None, every: bool, output: str | None, open_it: bool, as_json: bool) -> None:
    """Write a self-contained HTML page of SKILL's memory (or every skill's, with --all).

    Charts of the repeat-correction rate and captures per week, every scope's learnings as bars of
    their weight today (what retires soon) with the issues as hard rules, the store's history from
    git, the look-alikes and contradictions left to settle, and what the global layer adds. One
    file, nothing fetched: open it from disk, mail it, keep it.

    \b
    Example:
      git whetstone report great-tables --open
      git whetstone report --all -o ~/taste.html
    """
    result = api.report(skill, every=every, output=output, config=state.config())
    emit(state, as_json, result, lambda r: click.echo(
        f"wrote {r['path']} ({', '.join(r['skills']) or 'no skills'}: {count(r['issues'], 'issue')}, "
        f"{count(r['learnings'], 'learning')})"))
    if open_it:
        import webbrowser
        from pathlib import Path
        if not webbrowser.open(Path(result["path"]).resolve().as_uri()):
            click.echo(f"warning: no browser to open {result['path']} with", err=True)


@command()
@click.argument("skill", required=False)
@click.option("--all", "every", is_flag=True, help="Compact every skill, then report cross-skill clusters.")
@click.option("--dry-run", is_flag=True, help="Only show what the structural pass would change.")
def compact(state: State, skill: str | None, every: bool, dry_run: bool, as_json: bool) -> None:
    """Tidy SKILL's store: merge scopes spelled two ways and duplicate entries, retire decayed learnings.

    The changes are one commit (git revert undoes them all); only entries the judge is sure say the
    same are merged, and only scopes whose names are the same but for case, plurals, word order and
    punctuation ("dark theme" never merges into "light theme"). Advisory findings (learnings worth
    hardening, churn, stale learnings, unresolved conflicts, possible duplicates and contradictions,
    scopes close in meaning) are printed and written to compact-report.md. With --all, cross-skill
    clusters are reported as global candidates.

    \b
    Example:
      git whetstone compact great-tables --dry-run
      git whetstone compact --all
    """
    if every == bool(skill):
        raise click.UsageError("give a SKILL or --all")
    with progress("compacting", 0) as bar:
        result = api.compact_all(dry_run=dry_run, config=state.config()) if every else \
            api.compact(skill, dry_run=dry_run, config=state.config(), progress=bar,
                        notice=(lambda line: click.echo(line, err=True)) if bar else None)
    emit(state, as_json, result, show_compact)


@command()
@click.argument("skill", required=False)
@click.argument("entry_id", metavar="[ID]", required=False)
@click.option("--cluster", "cluster_id", metavar="CID", help="Enact a cluster that compact --all reported.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--always/--scoped", "always", default=None,
              help="For a rule marked for every task: keep the mark (every task of every skill), or drop it.")
def promote(state: State, skill: str | None, entry_id: str | None, cluster_id: str | None, yes: bool,
            always: bool | None, as_json: bool) -> None:
    """Lift entry ID of SKILL into the global layer, so every skill's recall sees it.

    The entry gets a new id there (G:…) and leaves the skill in the same step; --cluster enacts a
    cluster that compact --all reported. Asks for confirmation unless --yes. A rule marked for every
    task of its skill would apply to every task of every skill: say --always or --scoped.

    \b
    Example:
      git whetstone promote great-tables L3
      git whetstone promote --cluster C-1a2b3c4d --yes
    """
    if bool(cluster_id) == bool(skill and entry_id) or (cluster_id and (skill or entry_id)):
        raise click.UsageError("give SKILL and ID, or --cluster CID")
    what = f"cluster {cluster_id}" if cluster_id else f"{entry_id} of {skill}"
    if not yes:
        if not sys.stdin.isatty():
            raise WhetstoneError(f"promoting {what} to the global layer needs confirmation: add --yes")
        click.confirm(f"Move {what} into the global layer?", abort=True)
    def call(always: bool | None) -> dict:
        return api.promote_cluster(cluster_id, always, config=state.config()) if cluster_id else \
            api.promote(skill, entry_id, always, config=state.config())
    result = call(always)
    if result["status"] == "needs_confirmation" and sys.stdin.isatty() and not as_json and not state.as_json:
        result = call(click.confirm(f"{what} applies to every task of its skill. Keep it a rule for every task "
                                    f"of every skill? (no: promote it without the mark)"))
    emit(state, as_json, result, lambda r: click.echo(r.get("confirmation") or r["prompt"]))


@command()
@click.argument("skill")
def doctor(state: State, skill: str, as_json: bool) -> None:
    """Check that SKILL's learning loop is alive (read-only); exit 1 when it is not.

    Checks the store, its markdown, hooks and merge drivers, where it stands against its remote
    (as of the last sync: doctor never fetches), the index, the embedding backend, and whether
    recalls and captures are landing. Each finding says the command that fixes it; prints how to
    wire the agent host when the loop looks dead.
    """
    result = api.doctor(skill, config=state.config())

    def human(r: dict[str, Any]) -> None:
        for c in r["checks"]:
            mark = "ok  " if c["ok"] else ("warn" if c["severity"] == "warning" else "FAIL")
            click.echo(f"{mark}  {c['name']:<9} {c['detail']}")
            for error in c.get("errors", [])[1:]:
                click.echo(f"            {error}")
            if c.get("fix"):
                click.echo(f"            fix: {c['fix']}")
        click.echo(f"{r['skill']}: {'healthy' if r['healthy'] else 'unhealthy'}")
        if r["setup"]:
            click.echo("The loop looks dead. Wire whetstone into your agent host:" if r["dead"] else
                       "If the agent host on this machine is not wired yet:")
            for line in r["setup"]:
                click.echo(f"  {line}")
    emit(state, as_json, result, human, ok=result["healthy"])
