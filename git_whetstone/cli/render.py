"""What the commands print: each result as readable text (with `--json`, the JSON itself), a
progress bar on a terminal, and the question a capture puts to a person at a terminal."""
from __future__ import annotations

import contextlib
import sys
from typing import Any

import click


def show_recall(r: dict[str, Any]) -> None:
    note = " (fallback: nothing matched closely)" if r["fallback"] else ""
    click.echo(f"{r['skill']}: {count(len(r['issues']), 'issue')}, {count(len(r['learnings']), 'learning')}"
               f"{note}  [run {r['run_id']}]")
    for item in r["issues"]:
        mark = "ALWAYS" if item["always"] else "MUST  "
        click.echo(f"  {item['id']:>5}  {mark} [{item['scope']}] {one_line(item['rule'])}")
    for item in r["learnings"]:
        mark = " always" if item["always"] else ""
        click.echo(f"  {item['id']:>5}  {item['weight']:.2f}   [{item['scope']}] {one_line(item['rule'])}{mark}")
    for conflict in r["conflicts"]:
        click.echo(f"  conflict: {' vs '.join(conflict['ids'])}: {conflict['reason']}")
    left = r["omitted"]
    if left["learnings"] or left["issues"]:
        click.echo(f"  omitted: {left['learnings']} learnings, {left['issues']} issues (raise -k to see more)")
    if r["other_scopes"]:
        listed = ", ".join(f"{name} ({count})" for name, count in r["other_scopes"].items())
        click.echo(f"  other scopes (fetch one with --scope): {listed}")


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def one_line(text: str) -> str:
    return " ".join(text.split())


ANSWER_KEYS = {"s": "same", "r": "replace", "k": "keep", "n": "new"}


def ask_on_terminal(result: dict[str, Any]) -> str | None:
    """Put a capture's question to the person at the terminal: which look-alike it is about (a
    digit), then how the two relate (one letter). The `confirm` value to repeat the call with, or
    None when they quit."""
    candidates = result["candidates"]
    click.echo("This is likely the same rule as one of these, or its opposite:")
    for number, c in enumerate(candidates, 1):
        click.echo(f"  [{number}] {c['id']} ({c['scope']}, similarity {c['similarity']:.2f}): {one_line(c['rule'])}")
    chosen = candidates[0]
    if len(candidates) > 1:
        click.echo(f"Which is it about? [1-{len(candidates)}], n: none of them (store it as new), q: quit ", nl=False)
        key = read_key("".join(str(i) for i in range(1, len(candidates) + 1)) + "nq")
        if key == "q":
            return None
        if key == "n":
            return "new"
        chosen = candidates[int(key) - 1]
    click.echo(f"{chosen['id']}: s: the same rule (reinforce it), r: the new one replaces it, k: {chosen['id']} "
               f"holds (write nothing), n: a different rule (store it too), q: quit ", nl=False)
    key = read_key("srknq")
    if key == "q":
        return None
    return "new" if key == "n" else f"{ANSWER_KEYS[key]}:{chosen['id']}"


def ask_skill_on_terminal(result: dict[str, Any]) -> str | None:
    """Put a capture into an unknown skill name close to stored ones to the person at the terminal:
    the stored skill they meant (a digit), or "new" to start the skill named, or None when they quit."""
    names = result["did_you_mean"]
    click.echo(f"There is no skill named '{result['skill']}'. Did you mean:")
    for number, name in enumerate(names, 1):
        click.echo(f"  [{number}] {name}")
    keys = "1" if len(names) == 1 else f"1-{len(names)}"
    click.echo(f"Capture into [{keys}], n: start the skill '{result['skill']}', q: quit ", nl=False)
    key = read_key("".join(str(i) for i in range(1, len(names) + 1)) + "nq")
    if key == "q":
        return None
    return "new" if key == "n" else names[int(key) - 1]


def read_key(allowed: str) -> str:
    """One key press among `allowed` (echoed), asked again until it is one."""
    while True:
        key = click.getchar().lower()
        if key in allowed:
            click.echo(key)
            return key
        if key in ("\x03", "\x04"):  # ctrl-c, ctrl-d
            click.echo()
            return "q"


def show_write(r: dict[str, Any]) -> None:
    status = r["status"]
    if r.get("confirmation"):
        click.echo(f"{status}: {r['confirmation']}")
    else:
        click.echo(f"{status}: {r.get('prompt', '')}")
    for label, key in (("candidate", "candidates"), ("similar", "similar")):
        for c in r.get(key) or []:
            click.echo(f"  {label} {c['id']} ({c['scope']}, similarity {c['similarity']:.2f}): {one_line(c['rule'])}")
    if r.get("promotion"):
        click.echo(f"ask: {r['promotion']['prompt']}")


def show_metrics(r: dict[str, Any]) -> None:
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
        click.echo(f"  learnings survived: {m['learnings_surviving']}/{m['learnings_created']}"
                   + (f" ({survived:.0%})" if survived is not None else ""))
    click.echo(f"note: {r['note']}")


def show_compact(r: dict[str, Any]) -> None:
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
            click.echo(f"  for every task? {item['id']} ({item['scope']}), {item['why']}: {one_line(item['rule'])}"
                       f" (mark it: git whetstone revise {one['skill']} {item['id']} --always)")
        for pair in one["report"].get("similar_scopes", []):
            click.echo(f"  similar scopes ({pair['kind']}s): '{pair['scopes'][0]}' / '{pair['scopes'][1]}'"
                       " (not merged: move entries with revise --scope if they mean the same)")
        for pair in one["report"].get("look_alikes", []):
            what = "contradict" if pair["relation"] == "contradicts" else "possible duplicates or contradiction"
            click.echo(f"  {what}: {' / '.join(pair['ids'])} ({pair['scope']}): "
                       + " / ".join(f'"{one_line(rule)}"' for rule in pair["rules"]))
    for cluster in r.get("clusters", []):
        click.echo(f"candidate {cluster['id']} in {', '.join(cluster['skills'])}: {one_line(cluster['rule'])}")
        click.echo(f"  enact with: git whetstone promote --cluster {cluster['id']}")


INDEX_PROGRESS_MIN = 2_000  # scope files a build reads before a terminal gets a progress bar
IMPORT_PROGRESS_MIN = 300  # entries an import judges before a terminal gets a progress bar


def indexing():
    """A progress callback for a build of the index on a terminal (None elsewhere)."""
    return progress("indexing scope files", INDEX_PROGRESS_MIN)


@contextlib.contextmanager
def progress(label: str, least: int):
    """A progress bar for a job of more than `least` steps when stderr is a terminal (None
    elsewhere: a pipe, a file), closed when the job ends."""
    bar = ProgressBar(label, least) if sys.stderr.isatty() else None
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


class ProgressBar:
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


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.split("\n"))


def show_hooks(r: dict[str, Any]) -> None:
    for s in r["stores"]:
        if s["status"] == "refused":
            continue
        actions = ", ".join(f"{name} {what}" for name, what in s["hooks"].items())
        click.echo(f"{s['skill']}: {s['status']} in {s['hooks_dir']} ({actions})")
    for s in r["stores"]:
        for warning in s["warnings"]:
            click.echo(f"warning: {s['skill']}: {warning}", err=True)
