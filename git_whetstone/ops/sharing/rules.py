"""Rule files (SPEC §4 export/import): a store's entries as the AGENTS.md, CLAUDE.md or Cursor rule
(`.mdc`) an agent host reads, and such a file read back into entries.

Exported, the issues are MUST rules and the learnings weighing at least `min_weight` SHOULD
preferences, each part grouped by scope; a rule for every task of the skill (`applies: always`)
ends in `(every task)` (a preference: `(weight 0.75, every task)`). Read, each bullet is an entry:
an issue when labelled `MUST:` or worded always/never/must, a learning otherwise, scoped by the
nearest heading, marked for every task when it ends so.
"""
from __future__ import annotations

import datetime as dt
import re
from typing import Any

from ... import __version__
from ...base.config import Config
from ...base.errors import WhetstoneError
from ...format import blocks
from ...format.layout import scope_key
from ...store.weight import weight
from ..writing.inputs import MAX_SCOPE, clean_body, clean_scope
from .packs import Item, id_order, rule_hash


def render_rules(skill: str, items: list[Item], fmt: str, day: dt.date, min_weight: float,
                 config: Config) -> tuple[str, dict[str, int]]:
    """A rule file: the issues as MUST rules, then the learnings weighing at least `min_weight` as
    SHOULD preferences, each part grouped by scope (preferences: strongest scope and rule first).
    Returns the text and how many of each kind it lists."""
    issues: dict[str, list[Item]] = {}
    for item in items:
        if item.kind == "issue":
            issues.setdefault(scope_key(item.scope), []).append(item)
    prefs: dict[str, list[tuple[float, Item]]] = {}
    for item in items:
        if item.kind == "learning":
            w = weight(item.recurrence, item.last_seen, day, config)
            if w >= min_weight:
                prefs.setdefault(scope_key(item.scope), []).append((w, item))
    for rows in prefs.values():
        rows.sort(key=lambda row: (-row[0], id_order(row[1])))
    n_issues, n_prefs = sum(map(len, issues.values())), sum(map(len, prefs.values()))

    lines: list[str] = []
    if fmt == "cursor-rule":
        lines += ["---", f"description: Taste and rules for {skill}, kept by whetstone", "globs:",
                  "alwaysApply: true", "---", ""]
    lines += [f"# Taste and rules for {skill}", "",
              (f"<!-- Exported by whetstone {__version__} from the skill {skill} on {day.isoformat()}: "
               f"{n_issues} rules and {n_prefs} preferences (weight at least {min_weight:.2f}). Capture "
               f"corrections with whetstone and export again rather than editing this file. -->"), ""]
    if issues:
        lines += ["## Rules (MUST)", "", "Follow every rule here, whatever else the task suggests.", ""]
        for key in sorted(issues):
            group = issues[key]
            lines += [f"### {group[0].scope}", ""]
            lines += [f"- MUST: {_one_line(item.body)}{' (every task)' if item.always else ''}" for item in group]
            lines.append("")
    if prefs:
        lines += ["## Preferences (strongest first)", "",
                  "Apply these by default; the weight (0 to 1) says how firmly.", ""]
        for key in sorted(prefs, key=lambda k: (-prefs[k][0][0], k)):
            group = prefs[key]
            lines += [f"### {group[0][1].scope}", ""]
            lines += [f"- SHOULD: {_one_line(item.body)} (weight {w:.2f}{', every task' if item.always else ''})"
                      for w, item in group]
            lines.append("")
    if not issues and not prefs:
        lines += ["No rules or preferences yet.", ""]
    return "\n".join(lines).rstrip("\n") + "\n", {"issues": n_issues, "learnings": n_prefs}


def _one_line(text: str) -> str:
    return " ".join(text.split())


_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_BULLET = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])[ \t]+(\S.*)$")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_THEMATIC = re.compile(r"^[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_TASK = re.compile(r"^\[[ xX]\][ \t]+")
_LABEL = re.compile(r"^(MUST|SHOULD):[ \t]*")
_WEIGHT = re.compile(r"[ \t]*\((?:weight [0-9]+(?:\.[0-9]+)?(?:, )?)?(every task)?\)$")  # (weight 0.75, every task)
_HARD = re.compile(r"\b(?:always|never|must)\b", re.IGNORECASE)


def read_rules(data: bytes, name: str, fmt: str, day: dt.date) -> list[Item]:
    """The bullet rules of an AGENTS.md, CLAUDE.md or Cursor rule, in file order. A bullet is an
    issue when labelled `MUST:` or when it says always, never or must; a learning otherwise (or
    when labelled `SHOULD:`). Its scope is the nearest heading above it (for a Cursor rule
    without one, its `description`; else "general"). Bullets inside code fences and HTML comments
    are not rules; a rule repeated word for word is read once."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise WhetstoneError(f"{name}:1: not valid UTF-8") from None
    lines = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    start, fallback = _frontmatter(lines)
    heading: str | None = None
    found: list[tuple[int, str, str | None]] = []  # (line, bullet text, heading)
    current: list[Any] | None = None  # [line, text parts, heading] of the bullet being read
    fence: str | None = None
    in_comment = False
    previous = ""  # the last plain paragraph line (a setext underline makes it a heading)

    def close() -> None:
        nonlocal current
        if current is not None:
            found.append((current[0], " ".join(current[1]), current[2]))
            current = None

    for number in range(start, len(lines)):
        line = lines[number]
        if fence:
            if line.strip().startswith(fence):
                fence = None
            continue
        if in_comment:
            in_comment = "-->" not in line
            continue
        opened = _FENCE.match(line)
        if opened:
            close()
            fence = opened.group(1)[0] * 3
            continue
        if line.lstrip().startswith("<!--"):
            close()
            in_comment = "-->" not in line
            continue
        if not line.strip():
            close()
            previous = ""
            continue
        heading_match = _HEADING.match(line)
        if heading_match:
            close()
            heading, previous = (heading_match.group(2) or "").strip() or heading, ""
            continue
        if _SETEXT.match(line) and previous and current is None:
            heading, previous = previous, ""
            continue
        if _THEMATIC.match(line):
            close()
            previous = ""
            continue
        bullet = _BULLET.match(line)
        if bullet:
            close()
            current = [number + 1, [bullet.group(2).strip()], heading]
            continue
        if current is not None:  # an indented or lazy continuation of the bullet
            current[1].append(line.strip())
            continue
        previous = line.strip()
    close()

    items: list[Item] = []
    seen: set[str] = set()
    for number, raw, under in found:
        where = f"{name}:{number}"
        body = _TASK.sub("", raw)
        label = _LABEL.match(body)
        body = body[label.end():] if label else body
        said = _WEIGHT.search(body)
        every = bool(said and said.group(1))
        body = (body[:said.start()] if said and said.group(0).strip() != "()" else body).strip()
        if not body:
            continue
        if label:
            kind = "issue" if label.group(1) == "MUST" else "learning"
        else:
            kind = "issue" if _HARD.search(body) else "learning"
        try:
            body = clean_body(body)
            scope = clean_scope(_cut(under or fallback or "general"))
        except WhetstoneError as exc:
            raise WhetstoneError(f"{where}: {exc.message}") from None
        key = rule_hash(kind, scope, body)
        if key in seen:
            continue
        seen.add(key)
        items.append(Item(None, kind, scope, body, blocks.derive_title(body), 1, day.isoformat(), day.isoformat(),
                          (), where, always=every))
    return items


def _frontmatter(lines: list[str]) -> tuple[int, str | None]:
    """Where the markdown starts after a `---` frontmatter block, and its `description`."""
    if not lines or lines[0].strip() != "---":
        return 0, None
    for end in range(1, len(lines)):
        if lines[end].strip() in ("---", "..."):
            description = None
            for line in lines[1:end]:
                key, _, value = line.partition(":")
                if key.strip() == "description" and value.strip():
                    description = value.strip().strip("\"'").strip() or None
            return end + 1, description
    return 0, None  # never closed: not frontmatter


def _cut(scope: str) -> str:
    """A heading used as a scope, cut at a word boundary to what a scope may hold."""
    scope = " ".join(scope.split())
    if len(scope) <= MAX_SCOPE:
        return scope
    cut = scope[:MAX_SCOPE]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut


