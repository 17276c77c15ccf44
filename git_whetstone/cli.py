"""`git whetstone …`: thin click commands over the library, one call each.

Each command parses its options, calls one library function and renders the result: readable
text by default, and with `--json` exactly the JSON the MCP tool returns. Library modules are
imported inside the commands so `git whetstone -h` never pays for numpy, let alone mcp or torch.
Exit codes: 0 the call ran (whatever its status), 1 runtime failure, 2 bad usage or input, each
failure with one line on stderr.

Why one long file: it is a list of ~30 commands of 15-30 lines each (options, help text, one
call, rendering), read top to bottom like the man page it mirrors; `git whetstone -h` loads this
one module and click, nothing else.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, Callable, NoReturn

import click

from . import __version__
from .base.errors import WhetstoneError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class State:
    def __init__(self, store_root: str | None, as_json: bool) -> None:
        self.store_root = store_root
        self.as_json = as_json
        self._config = None

    def config(self):
        if self._config is None:
            from .base.config import load
            self._config = load(self.store_root)
        return self._config


def json_option(command: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print the library's JSON result.")(command)


def emit(state: State, as_json: bool, result: Any, human: Callable[[Any], None]) -> None:
    if as_json or state.as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        human(result)
        for warning in result.get("warnings", []) if isinstance(result, dict) else []:
            click.echo(f"warning: {warning}", err=True)


@click.group(context_settings=CONTEXT)
@click.option("--store-root", metavar="DIR", help="Store root for this call (default: config, then "
              "$WHETSTONE_STORE_ROOT, then ~/.local/share/whetstone).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON results for every command.")
@click.version_option(__version__, "-V", "--version", prog_name="whetstone")
@click.pass_context
def main(ctx: click.Context, store_root: str | None, as_json: bool) -> None:
    """A git-native memory of your taste for AI skills.

    Each skill gets a git repository of markdown learnings (weighted preferences) and issues
    (mandatory always/never rules). Agents recall them at the start of a task and capture each
    correction; you read, edit, revert and push them with git.

    \b
    Example:
      git whetstone attach great-tables
      git whetstone capture great-tables "Format currency as USD, no decimals" --scope "currency formatting"
      git whetstone recall great-tables "styling a table: currency formatting, alignment"
    """
    ctx.obj = State(store_root, as_json)


@main.command()
@click.argument("skill")
@click.option("--path", "skill_path", metavar="DIR", help="The skill's own directory, recorded in the store.")
@json_option
@click.pass_obj
def attach(state: State, skill: str, skill_path: str | None, as_json: bool) -> None:
    """Create SKILL's store (a git repository) if it does not exist yet.

    \b
    Example:
      git whetstone attach great-tables
    """
    from .ops.attach import attach as run_attach
    result = run_attach(skill, skill_path, config=state.config())
    emit(state, as_json, result, lambda r: click.echo(
        f"{'created' if r['created'] else 'already attached'}: {r['skill']} at {r['path']}"))


@main.command()
@click.argument("skill")
@click.argument("intent")
@click.option("-k", "--learnings-k", type=int, metavar="N", help="At most N learnings (default: learnings_k, 12).")
@click.option("--scope", "scopes", multiple=True, metavar="SCOPE",
              help="Also return every entry of SCOPE (repeatable), e.g. one 'other scopes' names.")
@json_option
@click.pass_obj
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
    from .ops.recall import recall as run_recall
    with _indexing() as bar:
        result = run_recall(skill, intent, learnings_k, list(scopes) or None, config=state.config(), progress=bar)
    emit(state, as_json, result, _show_recall)


def _show_recall(r: dict[str, Any]) -> None:
    note = " (fallback: nothing matched closely)" if r["fallback"] else ""
    click.echo(f"{r['skill']}: {_count(len(r['issues']), 'issue')}, {_count(len(r['learnings']), 'learning')}"
               f"{note}  [run {r['run_id']}]")
    for item in r["issues"]:
        mark = "ALWAYS" if item["always"] else "MUST  "
        click.echo(f"  {item['id']:>5}  {mark} [{item['scope']}] {_one_line(item['rule'])}")
    for item in r["learnings"]:
        mark = " always" if item["always"] else ""
        click.echo(f"  {item['id']:>5}  {item['weight']:.2f}   [{item['scope']}] {_one_line(item['rule'])}{mark}")
    for conflict in r["conflicts"]:
        click.echo(f"  conflict: {' vs '.join(conflict['ids'])}: {conflict['reason']}")
    left = r["omitted"]
    if left["learnings"] or left["issues"]:
        click.echo(f"  omitted: {left['learnings']} learnings, {left['issues']} issues (raise -k to see more)")
    if r["other_scopes"]:
        listed = ", ".join(f"{name} ({count})" for name, count in r["other_scopes"].items())
        click.echo(f"  other scopes (fetch one with --scope): {listed}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _one_line(text: str) -> str:
    return " ".join(text.split())


CONFIRM_HELP = ("Answer what a previous call asked: yes, no, new, same:ID, replace:ID, keep:ID (or bare same, "
                "replace, keep when one entry was named); bare --confirm means yes.")
REVISE_CONFIRM_HELP = ("Answer what a previous call asked: yes (go ahead), no (keep a learning a learning), new "
                       "(the revised rule is a rule of its own); bare --confirm means yes.")


@main.command()
@click.argument("skill")
@click.argument("body")
@click.option("--scope", required=True, help="Short phrase for when the rule applies.")
@click.option("--issue", is_flag=True, help="A mandatory always/never rule instead of a learning.")
@click.option("--always", is_flag=True,
              help="A rule for every task of the skill: recall returns it first, whatever the task.")
@click.option("--provenance", default="", help="Where the correction came from (the user's words).")
@click.option("--run-id", help="The run_id recall returned.")
@click.option("--confirm", is_flag=False, flag_value="yes", default=None, metavar="[VALUE]", help=CONFIRM_HELP)
@json_option
@click.pass_obj
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
    from .ops.capture import capture as run_capture
    kind = "issue" if issue else "learning"
    result = run_capture(skill, kind, body, scope, provenance, run_id, confirm, always, config=state.config())
    if result["status"] == "needs_confirmation" and result.get("candidates") and not (as_json or state.as_json) \
            and sys.stdin is not None and sys.stdin.isatty():
        said = _ask_on_terminal(result)
        if said is None:
            click.echo("nothing written")
            return
        result = run_capture(skill, kind, body, scope, provenance, run_id, said, always, config=state.config())
    emit(state, as_json, result, _show_write)


ANSWER_KEYS = {"s": "same", "r": "replace", "k": "keep", "n": "new"}


def _ask_on_terminal(result: dict[str, Any]) -> str | None:
    """Put a capture's question to the person at the terminal: which look-alike it is about (a
    digit), then how the two relate (one letter). The `confirm` value to repeat the call with, or
    None when they quit."""
    candidates = result["candidates"]
    click.echo("This is likely the same rule as one of these, or its opposite:")
    for number, c in enumerate(candidates, 1):
        click.echo(f"  [{number}] {c['id']} ({c['scope']}, similarity {c['similarity']:.2f}): {_one_line(c['rule'])}")
    chosen = candidates[0]
    if len(candidates) > 1:
        click.echo(f"Which is it about? [1-{len(candidates)}], n: none of them (store it as new), q: quit ", nl=False)
        key = _key("".join(str(i) for i in range(1, len(candidates) + 1)) + "nq")
        if key == "q":
            return None
        if key == "n":
            return "new"
        chosen = candidates[int(key) - 1]
    click.echo(f"{chosen['id']}: s: the same rule (reinforce it), r: the new one replaces it, k: {chosen['id']} "
               f"holds (write nothing), n: a different rule (store it too), q: quit ", nl=False)
    key = _key("srknq")
    if key == "q":
        return None
    return "new" if key == "n" else f"{ANSWER_KEYS[key]}:{chosen['id']}"


def _key(allowed: str) -> str:
    """One key press among `allowed` (echoed), asked again until it is one."""
    while True:
        key = click.getchar().lower()
        if key in allowed:
            click.echo(key)
            return key
        if key in ("\x03", "\x04"):  # ctrl-c, ctrl-d
            click.echo()
            return "q"


def _show_write(r: dict[str, Any]) -> None:
    status = r["status"]
    if r.get("confirmation"):
        click.echo(f"{status}: {r['confirmation']}")
    else:
        click.echo(f"{status}: {r.get('prompt', '')}")
    for label, key in (("candidate", "candidates"), ("similar", "similar")):
        for c in r.get(key) or []:
            click.echo(f"  {label} {c['id']} ({c['scope']}, similarity {c['similarity']:.2f}): {_one_line(c['rule'])}")
    if r.get("promotion"):
        click.echo(f"ask: {r['promotion']['prompt']}")


@main.command()
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
@json_option
@click.pass_obj
def revise(state: State, skill: str, entry_id: str, action: str | None, body: str | None, scope: str | None,
           always: bool | None, target: str | None, run_id: str | None, confirm: str | None, as_json: bool) -> None:
    """Change entry ID of SKILL: ACTION is reinforce, weaken, remove, promote or demote; or, with
    no ACTION, --always / --scoped set or clear its mark as a rule for every task; or, with
    --target, say how ID relates to that entry: same (fold ID into it), replace (ID replaces it)
    or distinct (both hold: never ask about the pair again).

    remove, promote and demote ask for --confirm first; same, replace and distinct do not.

    \b
    Example:
      git whetstone revise great-tables L3 reinforce
      git whetstone revise great-tables L3 promote --confirm
      git whetstone revise great-tables I2 --always
      git whetstone revise great-tables L7 same --target L3
      git whetstone revise great-tables L7 distinct --target L3
    """
    from .ops.revise import revise as run_revise
    if action is None and always is None:
        raise WhetstoneError("give an ACTION (reinforce, weaken, remove, promote, demote, same, replace, distinct) "
                             "or --always / --scoped")
    result = run_revise(skill, entry_id, action, body, scope, run_id, confirm, always, target, config=state.config())
    emit(state, as_json, result, _show_write)


@main.command()
@click.argument("skill", required=False)
@json_option
@click.pass_obj
def metrics(state: State, skill: str | None, as_json: bool) -> None:
    """Print how the loop is doing for SKILL (or every skill): runs, captures, repeats."""
    from .ops.metrics import metrics as run_metrics
    result = run_metrics(skill, config=state.config())
    emit(state, as_json, result, _show_metrics)


def _show_metrics(r: dict[str, Any]) -> None:
    if not r["skills"]:
        click.echo("no stores yet")
    for name, m in r["skills"].items():
        click.echo(f"{name}: {m['runs']} runs, {m['learnings']} learnings, {m['issues']} issues")
        per_run = m["learnings_surfaced_per_run"]
        click.echo(f"  learnings surfaced per run: {per_run if per_run is not None else '-'}")
        click.echo("  captures: " + (", ".join(f"{k} {v}" for k, v in sorted(m["captures"].items())) or "none"))
        for week in m["repeat_correction_rate"]:
            click.echo(f"  {week['week']}: {week['repeats']}/{week['captures']} captures repeated a correction")
        click.echo(f"  promotions: {m['promotions']}")
        survived = m["learnings_survived"]
        click.echo(f"  learnings survived: {m['learnings']}/{m['learnings_created']}"
                   + (f" ({survived:.0%})" if survived is not None else ""))
    click.echo(f"note: {r['note']}")


@main.command()
@click.argument("skill", required=False)
@click.option("--all", "every", is_flag=True, help="Every skill on one page.")
@click.option("-o", "--output", metavar="FILE", help="Where to write the page (default: SKILL-report.html, "
              "or whetstone-report.html with --all, in the current directory).")
@click.option("--open", "open_it", is_flag=True, help="Open the page in the default browser.")
@json_option
@click.pass_obj
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
    from .ops.report import report as run_report
    result = run_report(skill, every=every, output=output, config=state.config())
    emit(state, as_json, result, lambda r: click.echo(
        f"wrote {r['path']} ({', '.join(r['skills']) or 'no skills'}: {_count(r['issues'], 'issue')}, "
        f"{_count(r['learnings'], 'learning')})"))
    if open_it:
        import webbrowser
        from pathlib import Path
        if not webbrowser.open(Path(result["path"]).resolve().as_uri()):
            click.echo(f"warning: no browser to open {result['path']} with", err=True)


@main.command()
@click.argument("skill", required=False)
@click.option("--all", "every", is_flag=True, help="Compact every skill, then report cross-skill clusters.")
@click.option("--dry-run", is_flag=True, help="Only show what the structural pass would change.")
@json_option
@click.pass_obj
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
    from .ops.compact import compact as run_compact, compact_all
    if every == bool(skill):
        raise click.UsageError("give a SKILL or --all")
    with _progress("compacting", 0) as bar:
        result = compact_all(dry_run=dry_run, config=state.config()) if every else \
            run_compact(skill, dry_run=dry_run, config=state.config(), progress=bar,
                        notice=(lambda line: click.echo(line, err=True)) if bar else None)
    emit(state, as_json, result, _show_compact)


def _show_compact(r: dict[str, Any]) -> None:
    for one in r.get("skills", [r]):
        verb = "would change" if one["dry_run"] else ("changed" if one["committed"] else "nothing to change")
        click.echo(f"{one['skill']}: {verb}" + (f" ({len(one['changes'])})" if one["changes"] else ""))
        for change in one["changes"]:
            click.echo(f"  - {change}")
        for key, label in (("harden", "worth hardening"), ("churn", "churn"), ("stale", "stale"),
                           ("unresolved_conflicts", "unresolved conflicts")):
            items = one["report"][key]
            if items:
                click.echo(f"  {label}: " + ", ".join(str(i.get("id") or i.get("scope") or i.get("conflicts_with"))
                                                      for i in items))
        for item in one["report"].get("always", []):
            click.echo(f"  for every task? {item['id']} ({item['scope']}), {item['why']}: {_one_line(item['rule'])}"
                       f" (mark it: git whetstone revise {one['skill']} {item['id']} --always)")
        for pair in one["report"].get("similar_scopes", []):
            click.echo(f"  similar scopes ({pair['kind']}s): '{pair['scopes'][0]}' / '{pair['scopes'][1]}'"
                       " (not merged: move entries with revise --scope if they mean the same)")
        for pair in one["report"].get("look_alikes", []):
            what = "contradict" if pair["relation"] == "contradicts" else "possible duplicates or contradiction"
            click.echo(f"  {what}: {' / '.join(pair['ids'])} ({pair['scope']}): "
                       + " / ".join(f'"{_one_line(rule)}"' for rule in pair["rules"]))
    for cluster in r.get("clusters", []):
        click.echo(f"candidate {cluster['id']} in {', '.join(cluster['skills'])}: {_one_line(cluster['rule'])}")
        click.echo(f"  enact with: git whetstone promote --cluster {cluster['id']}")


@main.command()
@click.argument("skill", required=False)
@click.argument("entry_id", metavar="[ID]", required=False)
@click.option("--cluster", "cluster_id", metavar="CID", help="Enact a cluster that compact --all reported.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def promote(state: State, skill: str | None, entry_id: str | None, cluster_id: str | None, yes: bool,
            as_json: bool) -> None:
    """Lift entry ID of SKILL into the global layer, so every skill's recall sees it.

    The entry gets a new id there (G:…) and leaves the skill in the same step; --cluster enacts a
    cluster that compact --all reported. Asks for confirmation unless --yes.

    \b
    Example:
      git whetstone promote great-tables L3
      git whetstone promote --cluster C-1a2b3c4d --yes
    """
    from .ops.global_layer import promote as run_promote, promote_cluster
    if bool(cluster_id) == bool(skill and entry_id) or (cluster_id and (skill or entry_id)):
        raise click.UsageError("give SKILL and ID, or --cluster CID")
    what = f"cluster {cluster_id}" if cluster_id else f"{entry_id} of {skill}"
    if not yes:
        if not sys.stdin.isatty():
            raise WhetstoneError(f"promoting {what} to the global layer needs confirmation: add --yes")
        click.confirm(f"Move {what} into the global layer?", abort=True)
    result = promote_cluster(cluster_id, config=state.config()) if cluster_id else \
        run_promote(skill, entry_id, config=state.config())
    emit(state, as_json, result, lambda r: click.echo(r["confirmation"]))


@main.command()
@click.argument("skill")
@json_option
@click.pass_obj
def doctor(state: State, skill: str, as_json: bool) -> None:
    """Check that SKILL's learning loop is alive (read-only); exit 1 when it is not.

    Checks the store, its markdown, hooks and merge drivers, where it stands against its remote
    (as of the last sync: doctor never fetches), the index, the embedding backend, and whether
    recalls and captures are landing. Each finding says the command that fixes it; prints how to
    wire the agent host when the loop looks dead.
    """
    from .ops.doctor import doctor as run_doctor
    result = run_doctor(skill, config=state.config())

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
            click.echo("The loop looks dead. Wire whetstone into your agent host:")
            for line in r["setup"]:
                click.echo(f"  {line}")
    emit(state, as_json, result, human)
    if not result["healthy"]:
        raise SystemExit(1)


# --- sharing taste: packs and rule files ----------------------------------------------------------

SHARE_FORMATS = ("pack", "agents-md", "claude-md", "cursor-rule")


@main.command()
@click.argument("skill")
@click.option("-o", "--output", metavar="FILE", help="Where to write it (a pack defaults to "
              "SKILL.whetstone.tar.gz here; a rule file is printed unless given).")
@click.option("--format", "fmt", type=click.Choice(SHARE_FORMATS), default="pack", show_default=True,
              help="A preference pack, or a rule file for AGENTS.md, CLAUDE.md or a Cursor rule (.mdc).")
@click.option("--min-weight", type=click.FloatRange(0, 1), default=0.3, show_default=True,
              help="Rule files: leave out learnings weighing less than this.")
@json_option
@click.pass_obj
def export(state: State, skill: str, output: str | None, fmt: str, min_weight: float, as_json: bool) -> None:
    """Write SKILL's learnings and issues as a preference pack or as a rule file.

    A pack (.tar.gz: learnings/, issues/, pack.toml) is the same bytes for the same store; no
    history, index or telemetry goes in; the next export reads and compresses only the scope files
    changed since (a cache in .git). A rule file lists the issues as MUST rules and the
    learnings above --min-weight as preferences, strongest first, grouped by scope.

    \b
    Example:
      git whetstone export great-tables -o tables.tar.gz
      git whetstone export great-tables --format agents-md -o AGENTS.md
      git whetstone export great-tables --format cursor-rule -o .cursor/rules/tables.mdc
    """
    from .ops.share import export as run_export
    result = run_export(skill, output, fmt, min_weight=min_weight, config=state.config())

    def human(r: dict[str, Any]) -> None:
        if r.get("text") is not None:
            click.echo(r["text"], nl=False)
        elif r["format"] == "pack":
            click.echo(f"exported {r['skill']} to {r['path']}: {_count(r['learnings'], 'learning')}, "
                       f"{_count(r['issues'], 'issue')} in {_count(r['scopes'], 'scope')} ({r['bytes']} bytes)")
        else:
            click.echo(f"exported {r['skill']} to {r['path']}: {_count(r['rules'], 'rule')}, "
                       f"{_count(r['preferences'], 'preference')} ({r['left_out']} weaker learnings left out)")
    emit(state, as_json, result, human)


@main.command(name="import")
@click.argument("skill")
@click.argument("source", metavar="PACK")
@click.option("--merge", "mode", flag_value="merge", default=True,
              help="Add what is new, reinforce near-duplicates, skip conflicts (the default).")
@click.option("--replace", "mode", flag_value="replace", help="Swap every entry of SKILL for the pack's.")
@click.option("--dry-run", is_flag=True, help="Only report what the import would do.")
@click.option("--from", "fmt", type=click.Choice(SHARE_FORMATS[1:]),
              help="PACK is a rule file (AGENTS.md, CLAUDE.md, Cursor .mdc) rather than a pack.")
@json_option
@click.pass_obj
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
    from .ops.share import PROGRESS_MIN, import_pack
    with _progress("importing", PROGRESS_MIN) as bar:
        result = import_pack(skill, source, mode, dry_run, fmt, progress=bar, config=state.config())

    def human(r: dict[str, Any]) -> None:
        c = r["counts"]
        verb = {"dry_run": "would import", "committed": "imported", "unchanged": "nothing new from"}[r["status"]]
        click.echo(f"{r['skill']}: {verb} {r['source']} ({r['mode']}): {c['committed']} committed, "
                   f"{c['reinforced']} reinforced, {c['noop']} noop, {c['conflicts']} conflicts"
                   + (f", {c['marked']} marked for every task" if c["marked"] else "")
                   + (f", {c['removed']} removed" if r["mode"] == "replace" else ""))
        for item in r["conflicts"]:
            other = item["conflicts_with"]
            click.echo(f"  conflict: {item['from']} \"{_one_line(item['rule'])}\" contradicts {other['id']} "
                       f"({other['scope']}): {item['reason']}")
        for item in r.get("similar", []):
            click.echo(f"  kept both: {item['id'] or item['from']} \"{_one_line(item['rule'])}\" looks like "
                       + ", ".join(c["id"] for c in item["similar"]) + " (settle with revise if they are one rule)")
    emit(state, as_json, result, human)


INDEX_PROGRESS_MIN = 2_000  # scope files a build reads before a terminal gets a progress bar


def _indexing():
    """A progress callback for a build of the index on a terminal (None elsewhere)."""
    return _progress("indexing scope files", INDEX_PROGRESS_MIN)


@contextlib.contextmanager
def _progress(label: str, least: int):
    """A progress bar for a job of more than `least` steps when stderr is a terminal (None
    elsewhere: a pipe, a file), closed when the job ends."""
    bar = _ProgressBar(label, least) if sys.stderr.isatty() else None
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


class _ProgressBar:
    """A progress callback that draws on stderr once a job has more than `least` steps."""

    def __init__(self, label: str, least: int) -> None:
        self.label, self.least, self.bar = label, least, None

    def __call__(self, done: int, total: int) -> None:
        if total <= self.least:
            return
        if self.bar is not None and (total != self.bar.length or done < self.bar.pos):
            self.close()  # the next job (a recall builds the skill's index, then the global layer's)
        if self.bar is None:
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr)
            self.bar.__enter__()
        self.bar.update(done - self.bar.pos)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


@main.command(name="list")
@json_option
@click.pass_obj
def list_(state: State, as_json: bool) -> None:
    """List the skills that have a store, with their entry counts."""
    from .ops.browse import list_stores
    result = list_stores(config=state.config())

    def human(r: dict[str, Any]) -> None:
        if not r["skills"]:
            click.echo(f"no stores under {r['store_root']}")
        for s in r["skills"]:
            click.echo(f"{s['skill']:<24} {s['learnings']:>5} learnings {s['issues']:>5} issues "
                       f"{s['always']:>4} always  {s['path']}")
    emit(state, as_json, result, human)


@main.command()
@click.argument("skill")
@click.argument("entry_id", metavar="[ID]", required=False)
@json_option
@click.pass_obj
def show(state: State, skill: str, entry_id: str | None, as_json: bool) -> None:
    """Print SKILL's learnings and issues (or just entry ID) with their metadata."""
    from .ops.browse import show as run_show
    result = run_show(skill, entry_id, config=state.config())

    def human(r: dict[str, Any]) -> None:
        for item in r["issues"]:
            every = " · always (every task)" if item["always"] else ""
            click.echo(f"{item['id']} · {item['title']}\n  issue · scope: {item['scope']}{every} · {item['file']}")
            click.echo(_indent(item["rule"]))
        for item in r["learnings"]:
            every = " · always (every task)" if item["always"] else ""
            click.echo(f"{item['id']} · {item['title']}\n  learning · scope: {item['scope']}{every} · recurrence "
                       f"{item['recurrence']} · weight {item['weight']:.2f} · last seen {item['last_seen']} · "
                       f"{item['file']}")
            click.echo(_indent(item["rule"]))
        if not r["issues"] and not r["learnings"]:
            click.echo(f"{r['skill']} has no entries yet")
    emit(state, as_json, result, human)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.split("\n"))


@main.command()
@click.argument("skill")
@json_option
@click.pass_obj
def path(state: State, skill: str, as_json: bool) -> None:
    """Print the directory of SKILL's store (e.g. cd "$(git whetstone path great-tables)")."""
    from .ops.browse import path as run_path
    result = run_path(skill, config=state.config())
    emit(state, as_json, result, lambda r: click.echo(r["path"]))


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("skill")
@click.argument("git_args", nargs=-1, type=click.UNPROCESSED, metavar="[GIT LOG ARGS]...")
@click.option("-n", "--max-count", type=int, default=20, show_default=True, help="How many commits.")
@json_option
@click.pass_obj
def log(state: State, skill: str, git_args: tuple[str, ...], max_count: int, as_json: bool) -> None:
    """Show the history of SKILL's store (git log; extra arguments go to git log).

    \b
    Example:
      git whetstone log great-tables -p
    """
    from .ops.browse import history, path as run_path
    if as_json or state.as_json:
        emit(state, True, history(skill, max_count, config=state.config()), lambda r: None)
        return
    where = run_path(skill, config=state.config())["path"]
    args = ["git", "-C", where, "log", f"-n{max_count}", *(git_args or ("--format=%h %ad %s", "--date=short"))]
    import subprocess
    raise SystemExit(subprocess.call(args))


# --- hand edits and git ---------------------------------------------------------------------------

@main.command()
@click.argument("skill")
@click.option("--staged", is_flag=True, help="Check what is staged for the next commit instead of the work tree.")
@json_option
@click.pass_obj
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
    from .ops.edit import validate as run_validate
    result = run_validate(skill, staged, config=state.config())

    def human(r: dict[str, Any]) -> None:
        where = "staged files" if r["staged"] else "files"
        for error in r["errors"]:
            click.echo(error["text"])
        if r["valid"]:
            click.echo(f"{r['skill']}: {r['files']} {where} valid")
        else:
            click.echo(f"{r['skill']}: {_count(len(r['errors']), 'problem')} in {r['files']} {where}", err=True)
        if r.get("hint"):
            click.echo(f"hint: {r['hint']}", err=True)
    emit(state, as_json, result, human)
    if not result["valid"]:
        raise SystemExit(1)


@main.command()
@click.argument("skill")
@json_option
@click.pass_obj
def reindex(state: State, skill: str, as_json: bool) -> None:
    """Throw SKILL's index away and rebuild it from the markdown.

    Never needed for correctness (every read brings the index up to date); useful after changing
    the embedding backend by hand or to measure a cold build.
    """
    from .ops.hooks import reindex as run_reindex
    with _indexing() as bar:
        result = run_reindex(skill, config=state.config(), progress=bar)
    emit(state, as_json, result, lambda r: click.echo(
        f"reindexed {r['skill']}: {_count(r['learnings'], 'learning')}, {_count(r['issues'], 'issue')} in "
        f"{_count(r['scopes'], 'scope')} ({r['backend']})"))


@main.command()
@click.argument("skill")
@click.argument("scope", required=False)
@click.option("--issue", is_flag=True, help="Edit (or start) SCOPE's issues file rather than its learnings.")
@json_option
@click.pass_obj
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
    from .ops.edit import edit as run_edit

    def ask(errors: list) -> bool:
        for error in errors:
            click.echo(str(error), err=True)
        return click.confirm("The edit is not valid. Open the editor again?", default=True, err=True)

    terminal = sys.stdin is not None and sys.stdin.isatty()
    result = run_edit(skill, scope, issue=issue, config=state.config(), ask=ask if terminal else None)

    def human(r: dict[str, Any]) -> None:
        if r["status"] == "aborted":
            for error in r["errors"] if not terminal else []:
                click.echo(error, err=True)
            click.echo(r["message"], err=True)
        else:
            click.echo(f"{r['status']}: {r['message']}")
    emit(state, as_json, result, human)
    if result["status"] == "aborted":
        raise SystemExit(1)


@main.group(name="hooks")
def hooks_group() -> None:
    """Install or remove the git hooks that check and index hand edits of a store.

    attach installs them; a hook that was already there is kept and run first.
    """


def _show_hooks(r: dict[str, Any]) -> None:
    for s in r["stores"]:
        if s["status"] == "refused":
            continue
        actions = ", ".join(f"{name} {what}" for name, what in s["hooks"].items())
        click.echo(f"{s['skill']}: {s['status']} in {s['hooks_dir']} ({actions})")
    for s in r["stores"]:
        for warning in s["warnings"]:
            click.echo(f"warning: {s['skill']}: {warning}", err=True)


def _hooks_options(command: Callable) -> Callable:
    command = click.option("--force", is_flag=True,
                           help="Write even into a hooks directory other repositories share (core.hooksPath).")(command)
    command = click.option("--all", "every", is_flag=True, help="Every store under the store root.")(command)
    return click.argument("skill", required=False)(command)


@hooks_group.command(name="install")
@_hooks_options
@json_option
@click.pass_obj
def hooks_install(state: State, skill: str | None, every: bool, force: bool, as_json: bool) -> None:
    """Install the hooks in SKILL's store (or every store with --all).

    A foreign hook is moved to NAME.whetstone-chained and run before whetstone's. A hooks directory
    shared with other repositories (a global core.hooksPath) is refused unless --force; exit 1 then.

    \b
    Example:
      git whetstone hooks install --all
    """
    from .ops.hooks import install
    result = install(skill, every, force, config=state.config())
    emit(state, as_json, result, _show_hooks)
    if not result["ok"]:
        raise SystemExit(1)


@hooks_group.command(name="uninstall")
@_hooks_options
@json_option
@click.pass_obj
def hooks_uninstall(state: State, skill: str | None, every: bool, force: bool, as_json: bool) -> None:
    """Remove whetstone's hooks from SKILL's store (or every store), restoring chained ones.

    Only whetstone's shims are removed; attach will not put them back until hooks install.
    """
    from .ops.hooks import uninstall
    result = uninstall(skill, every, force, config=state.config())
    emit(state, as_json, result, _show_hooks)
    if not result["ok"]:
        raise SystemExit(1)


@main.command(hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hook(name: str, args: tuple[str, ...]) -> None:
    """Run the store hook NAME in the current repository (what the installed shims call).

    pre-commit exits 1 to refuse a commit; the others always exit 0.
    """
    from .ops.hooks import run_hook
    with _indexing() as bar:
        status = run_hook(name, list(args), progress=bar)
    raise SystemExit(status)


# --- taste that follows you: remotes and sync -------------------------------------------------------

@main.command()
@click.argument("skill")
@click.argument("action", required=False, metavar="[add URL | remove NAME | list]")
@click.argument("target", required=False, metavar="")
@click.option("--name", metavar="NAME", help="The name to give the remote with add (default: origin).")
@json_option
@click.pass_obj
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
    from .ops.remotes import remote as run_remote
    result = run_remote(skill, action, target, name, config=state.config())

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


@main.command()
@click.argument("skill", required=False)
@click.option("--all", "every", is_flag=True, help="Every store under the store root, the global layer too.")
@click.option("--remote", "remote_name", metavar="NAME",
              help="The remote to sync with (default: the branch's upstream, then origin, then the only one).")
@json_option
@click.pass_obj
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
    from .ops.sync import sync as run_sync
    with _indexing() as bar:
        result = run_sync(skill, every, remote_name, config=state.config(), progress=bar)

    def human(r: dict[str, Any]) -> None:
        for one in r["stores"]:
            click.echo(one["message"], err=one["status"] in ("conflict", "failed"))
    emit(state, as_json, result, human)
    if not result["ok"]:
        raise SystemExit(1)


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
    from .ops.drivers import run_driver
    raise SystemExit(run_driver(kind, base, ours, theirs, marker_size, path))


@main.command(name="install-man")
@click.option("--dir", "directory", metavar="DIR", help="Where to put git-whetstone.1 "
              "(default: ~/.local/share/man/man1, searched by man when ~/.local/bin is on PATH).")
@json_option
@click.pass_obj
def install_man(state: State, directory: str | None, as_json: bool) -> None:
    """Copy the man page where man finds it, for installs that did not put it there.

    Then 'git help whetstone' and 'git whetstone --help' open it.
    """
    from .base.resources import install_man as run_install_man
    result = run_install_man(directory)
    emit(state, as_json, result, lambda r: click.echo(f"installed {r['path']}"))


@main.command()
@click.pass_obj
def mcp(state: State) -> None:
    """Serve the MCP tools over stdio (what an agent host runs; see 'whetstone-mcp').

    \b
    Example:
      claude mcp add whetstone -- git whetstone mcp
    """
    if state.store_root:  # the server's tools load the config per call, so pass the choice on
        os.environ["WHETSTONE_STORE_ROOT"] = state.store_root
    serve_mcp()


def serve_mcp() -> None:
    """Become the MCP server (`python -m mcp_entry.server`): the same process, so the host's pipes
    stay as they are; the server is a door of its own, which this one does not import."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, "-m", "mcp_entry.server"])
    except OSError as exc:
        raise WhetstoneError(f"cannot start the MCP server ({sys.executable} -m mcp_entry.server): "
                             f"{exc.strerror or exc}", exit_code=1) from None


# --- entry points ---------------------------------------------------------------------------------

def run(argv: list[str] | None = None, prog_name: str = "git whetstone") -> NoReturn:
    """Run the CLI, turning every failure into one line on stderr and an exit code, then end the
    process at once (`_leave`)."""
    try:
        _run(argv, prog_name)
    except SystemExit as exc:  # how _run always ends, with an int
        _leave(exc.code if isinstance(exc.code, int) else 1)


def _leave(code: int) -> NoReturn:
    """End the process now, its output flushed. A command has closed its files, index connections
    and child processes when it returns, and nothing on these paths registers an atexit handler:
    the interpreter's teardown would only free every module and object one by one (60 ms after a
    recall, a sixth of the process)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # the reader went away (a closed pipe), as a command's broken pipe
            code = code or 1
    os._exit(code)


def _run(argv: list[str] | None, prog_name: str) -> NoReturn:
    try:
        code = main.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except WhetstoneError as exc:
        _fail(prog_name, exc.message, exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:  # bare `git whetstone`: the help, not an error
        click.echo(exc.ctx.get_help() if exc.ctx else main.get_help(click.Context(main)))
        sys.exit(0)
    except click.UsageError as exc:
        if exc.ctx is not None and exc.ctx.parent is not None:
            hint = f" (see '{prog_name} {exc.ctx.info_name} -h')"
        else:
            hint = f" (see '{prog_name} -h')"
        _fail(prog_name, exc.format_message() + hint, 2)
    except click.Abort:
        _fail(prog_name, "aborted", 1)
    except click.ClickException as exc:
        _fail(prog_name, exc.format_message(), exc.exit_code)
    except (BrokenPipeError, KeyboardInterrupt):
        sys.exit(1)
    except Exception as exc:  # a bug: say so in one line unless asked for the traceback
        if os.environ.get("WHETSTONE_DEBUG") == "1":
            raise
        _fail(prog_name, f"internal error: {type(exc).__name__}: {exc} (WHETSTONE_DEBUG=1 shows a traceback)", 1)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(prog_name: str, message: str, code: int) -> None:
    click.echo(f"{prog_name}: {' '.join(str(message).split())}", err=True)
    sys.exit(code)


def run_whetstone() -> None:
    """`whetstone`: the same commands under a shorter name. With no arguments it serves MCP when
    stdin is not a terminal (an agent host started it) and prints the help on a terminal."""
    argv = None
    if len(sys.argv) <= 1:
        argv = ["mcp"] if sys.stdin is not None and not sys.stdin.isatty() else ["-h"]
    run(argv, prog_name="whetstone")
