"""context: the rules an agent host's prompt hook (`git whetstone context`, a hook's JSON on stdin)
adds to the model's context, so they apply even when the agent forgets to call recall.

The skills are those named, else those a `.whetstone.toml` lists (from the hook's `cwd` upwards),
else the stores that match the prompt (`match_score`). For a prompt, each skill's recall (a fallback
is no match); at session start, the always-on rules of the skills named or listed. One block of at
most `MAX_CHARS`, mandatory rules first; what does not fit is counted. A store that fails is a
warning, and the other skills still answer.
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...base.clock import today
from ...base.config import Config
from ...base.errors import WhetstoneError
from ...format.layout import GLOBAL, GLOBAL_PREFIX, did_you_mean
from ...store import events
from ...store.store import Store, close_skills, list_skills
from ...store.weight import weights
from ..recall import clauses, likeness, recall
from ..workspace import Workspace

MAX_CHARS = 4_000     # the block: well inside what a host passes on whole (Claude Code: about 10,000)
MAX_PROMPT = 4_000    # characters of a prompt taken as the intent (a pasted file adds noise, not a task)
RULE_CHARS = 400      # one rule's text in the block, at most
MATCHED_SKILLS = 3    # skills chosen by matching the prompt, best first
MATCH_TOP = 3         # entries whose mean relevance is a store's match to a prompt
PROJECT_FILE = ".whetstone.toml"
PROMPT, SESSION = "UserPromptSubmit", "SessionStart"
# The match (`match_score`) from which an unnamed skill is chosen, per backend: fitted by
# scripts/fit_context.py on the dev split of tests/eval's queries, each against its own skill and the
# five others, for F2 (a skill missed is its rules not applied; a skill too many is longer context).
# Held-out split, static: its own skill chosen for 87% of on-topic queries, 33% of the skills
# chosen are the query's own (six skills that share much: tables, charts, SQL); hashing: 66%, 35%.
SKILL_BAR = {"hashing": 0.18, "static": 0.29, "sentence-transformers": 0.29}


@dataclass(frozen=True)
class Hook:
    """What a host's hook said: the event, the prompt (None at session start), where it runs."""

    event: str
    prompt: str | None = None
    cwd: Path | None = None


def read_hook(text: str) -> Hook:
    """The host hook's JSON object (Claude Code: session_id, transcript_path, cwd, hook_event_name,
    and prompt or source). The event is inferred from `prompt` / `source` when it is not named."""
    if not text.strip():
        raise WhetstoneError("nothing on stdin: pipe a host hook's JSON, or give --intent TEXT")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise WhetstoneError(f"stdin is not a host hook's JSON ({exc})") from None
    if not isinstance(data, dict):
        raise WhetstoneError(f"stdin is not a host hook's JSON object (got a JSON {type(data).__name__})")
    event, prompt = data.get("hook_event_name"), data.get("prompt")
    if event is None:
        event = PROMPT if "prompt" in data else SESSION if "source" in data else None
    if event not in (PROMPT, SESSION):
        raise WhetstoneError(f"context answers {PROMPT} and {SESSION} hooks, not {event!r}" if event is not None
                             else "the hook's JSON names no hook_event_name (and has no prompt or source)")
    if event == PROMPT and not isinstance(prompt, str):
        raise WhetstoneError(f"the {PROMPT} hook's JSON has no prompt" if prompt is None
                             else f"the {PROMPT} hook's prompt is not text")
    cwd = data.get("cwd")
    where = Path(cwd) if isinstance(cwd, str) and cwd and Path(cwd).is_dir() else None
    return Hook(event, prompt if event == PROMPT else None, where)


def project_skills(cwd: Path | None) -> tuple[Path | None, list[str], list[str]]:
    """The first `.whetstone.toml` from `cwd` upwards: its path, the skills it names, and what was
    wrong with it (a file that cannot be read names no skills)."""
    start = (cwd or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        path = folder / PROJECT_FILE
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            return path, [], [f"{path}: not readable TOML ({exc}); it names no skills"]
        skills = data.get("skills", [])
        skills = [skills] if isinstance(skills, str) else skills
        if not isinstance(skills, list) or not all(isinstance(s, str) for s in skills):
            return path, [], [f"{path}: skills must be a list of skill names, as skills = [\"sql-queries\"]"]
        return path, skills, []
    return None, [], []


def match_score(ws: Workspace, store: Store, queries: np.ndarray) -> float:
    """How well `store` matches a prompt: the mean relevance (recall's mix of scope and text, best over
    the clauses) of its MATCH_TOP entries nearest to it, -1 for an empty store. Three entries, not the
    best one: a stray word meets one entry of many a store. A store of fewer than ten entries per entry
    counted counts fewer (a new store's one rule on the task is not drowned by the other two)."""
    snap = ws.snapshot(store)
    if not snap.count:
        return -1.0
    relevance = likeness(snap, *snap.score(queries)).max(axis=0)[snap.alive]
    k = min(MATCH_TOP, max(1, len(relevance) // 10))
    return float(np.partition(relevance, -k)[-k:].mean())


def choose(ws: Workspace, named: list[str], hook: Hook, intent: str | None,
           warnings: list[str]) -> tuple[list[Store], str | None, str | None]:
    """The stores to answer from, how they were chosen (named, project, match) and the project file."""
    stores, how, found = [], None, None
    if named:
        how, wanted = "named", named
    else:
        path, listed, said = project_skills(hook.cwd)
        warnings += said
        found = str(path) if path else None
        how, wanted = ("project", listed) if listed else ("match", [])
    for name in wanted:
        try:
            store = ws.store(name)
        except WhetstoneError as exc:
            warnings.append(exc.message)
            continue
        if not store.exists:
            near = close_skills(ws.config, store.skill)  # a typo, most likely: a second store would split the memory
            warnings.append(f"no store for {store.skill}; {did_you_mean(near)}" if near
                            else f"no store for {store.skill} (git whetstone attach {store.skill})")
        elif store.skill not in [s.skill for s in stores]:
            stores.append(store)
    if how != "match":
        return stores, how, found
    if not intent:  # session start with nothing named: no task to match a skill against
        return [], None, found
    queries = ws.embedder.embed(clauses(intent))
    bar = SKILL_BAR.get(ws.config.embedding_backend, SKILL_BAR["static"])
    scored = []
    for name in list_skills(ws.config):
        if name == GLOBAL:
            continue
        try:
            store = ws.store(name)
            score = match_score(ws, store, queries)
        except (WhetstoneError, OSError) as exc:
            warnings.append(f"{name}: {getattr(exc, 'message', exc)}")
            continue
        if score >= bar:
            scored.append((-score, name, store))
    return [store for _, _, store in sorted(scored)[:MATCHED_SKILLS]], "match", found


def context(skills: list[str] | tuple[str, ...] = (), hook: str | None = None, intent: str | None = None, *,
            config: Config | None = None) -> dict[str, Any]:
    """The context block for a host hook's JSON (`hook`, as read from stdin) or for `intent`: the
    skills chosen, a recall of each, and `text`, the block to print ("" when nothing applies)."""
    ws = Workspace.of(config)
    if hook is not None:
        said = read_hook(hook)
    elif isinstance(intent, str) and intent.strip():
        said = Hook("intent", intent)
    else:
        raise WhetstoneError("give a host hook's JSON on stdin, or --intent TEXT")
    task = _as_intent(said.prompt) if said.prompt is not None else None
    warnings: list[str] = []
    result: dict[str, Any] = {"event": said.event, "skills": [], "chosen_by": None, "project_file": None,
                              "runs": [], "text": "", "shown": 0, "omitted": 0, "warnings": warnings}
    if said.prompt is not None and not task:
        return result  # an empty prompt: no task, nothing applies
    stores, how, found = choose(ws, list(skills), said, task, warnings)
    result.update(chosen_by=how, project_file=found)
    sections, seen_global = [], set()
    for store in stores:
        try:
            section = _recall(ws, store, task) if task else _always(ws, store, seen_global)
        except (WhetstoneError, OSError) as exc:
            warnings.append(f"{store.skill}: {getattr(exc, 'message', exc)}")
            continue
        if section is None:
            continue
        warnings += [w for w in section.pop("warnings") if w not in warnings]
        section["items"] = [i for i in section["items"] if not (i["id"].startswith(GLOBAL_PREFIX)
                                                                and i["id"] in seen_global)]
        seen_global |= {i["id"] for i in section["items"] if i["id"].startswith(GLOBAL_PREFIX)}
        result["skills"].append(store.skill)
        result["runs"].append({"skill": store.skill, "run_id": section["run_id"],
                               "ids": [i["id"] for i in section["items"]]})
        if section["items"]:
            sections.append(section)
    text, shown, omitted = compose(sections)
    result.update(text=text, shown=shown, omitted=omitted)
    return result


def _as_intent(prompt: str) -> str:
    """A prompt as recall takes it: valid Unicode, its first MAX_PROMPT characters, stripped."""
    return prompt.encode("utf-8", "replace").decode("utf-8")[:MAX_PROMPT].strip()


def _recall(ws: Workspace, store: Store, task: str) -> dict[str, Any] | None:
    """What recall returns for the task, less a fallback (a nearest entry when nothing matched is
    no reason to speak up). None for a store with no scope file: nothing to recall, no event.
    (Asking the snapshot would check every file's freshness twice, here and in recall.)"""
    if not any(store.scope_names(kind) for kind in ("learning", "issue")):
        return None
    r = recall(store.skill, task, config=ws.config)
    items = [dict(i, kind="issue") for i in r["issues"]] + [dict(i, kind="learning") for i in r["learnings"]]
    if r["fallback"]:  # recall falls back only when no rule holds for every task: nothing to show
        items = []
    return {"skill": store.skill, "run_id": r["run_id"], "items": items,
            "left": r["omitted"]["learnings"] + r["omitted"]["issues"], "warnings": r["warnings"]}


def _always(ws: Workspace, store: Store, shown: set[str]) -> dict[str, Any] | None:
    """The always-on rules of the skill (and of the global layer, less those an earlier skill's
    section `shown`), what a session starts with, recorded as a recall of them: issues first, then
    the strongest learnings, at most `always_k` of both layers together (recall's budget), what is
    left out counted by kind. None when nothing is to be said."""
    config = ws.config
    layers = [("", store)]
    if config.consult_global and store.skill != GLOBAL:
        layers.append((GLOBAL_PREFIX, ws.store(GLOBAL)))
    items, said, day = [], [], today()
    for prefix, st in layers:
        if not st.exists:
            continue
        st.recover_if_interrupted()
        snap = ws.snapshot(st)
        said += st.warnings + snap.warnings
        rows = np.flatnonzero(snap.alive & snap.always)
        weight = weights(snap.recurrence[rows], snap.last_seen[rows], day, config)
        for row, w in zip(rows.tolist(), weight.tolist()):
            e = snap.entries[row]
            if prefix + e.id in shown:
                continue
            item = {"id": prefix + e.id, "rule": e.body, "scope": e.scope, "always": True, "kind": e.kind}
            if e.kind == "learning":
                item["weight"] = round(w, 4)
            items.append(item)
    items.sort(key=lambda i: (i["kind"] != "issue", -i.get("weight", 0)))  # stable: the skill's first on ties
    omitted = {"learnings": 0, "issues": 0}
    for item in items[config.always_k:]:
        omitted[item["kind"] + "s"] += 1
    items = items[:config.always_k]
    if not items:
        return None
    run_id = events.new_run_id(day)
    events.append(store.path, "recall", run_id=run_id, intent="(session start)", via="context",
                  learnings=[i["id"] for i in items if i["kind"] == "learning"],
                  issues=[i["id"] for i in items if i["kind"] == "issue"], fallback=False, omitted=omitted)
    return {"skill": store.skill, "run_id": run_id, "items": items, "left": sum(omitted.values()), "warnings": said}


# --- the block ------------------------------------------------------------------------------------

HEAD = ("[whetstone] The user's standing corrections for this task, from their taste memory. MUST and ALWAYS "
        "rules are mandatory; learnings are preferences weighted 0-1: follow strong ones by default.")


def _tier(item: dict[str, Any]) -> int:
    """Mandatory first: always-on issues, always-on learnings, MUST rules, then learnings."""
    return (0 if item["kind"] == "issue" else 1) if item["always"] else (2 if item["kind"] == "issue" else 3)


def _line(item: dict[str, Any]) -> str:
    rule = " ".join(item["rule"].split())
    if len(rule) > RULE_CHARS:
        rule = rule[:RULE_CHARS - 1].rsplit(" ", 1)[0] + "…"
    mark = "ALWAYS " if item["always"] else "MUST " if item["kind"] == "issue" else ""
    weight = f" (weight {item['weight']:.2f})" if item["kind"] == "learning" else ""
    return f"- {mark}{item['id']}{weight} [{item['scope']}]: {rule}"


def _capture_line(sections: list[dict[str, Any]]) -> str:
    if len(sections) == 1:
        skill, run = sections[0]["skill"], sections[0]["run_id"]
    else:
        skill, run = "SKILL", "RUN_ID"
    where = "" if len(sections) == 1 else " (SKILL and RUN_ID from the heading of the skill it concerns)"
    return (f"When the user corrects you, record it at once{where}: git whetstone capture {skill} "
            f"\"<the rule, generalized>\" --scope \"<when it applies>\" --run-id {run} (add --issue for an "
            f"always/never rule), or the MCP capture tool with that run_id.")


def render(sections: list[dict[str, Any]], chosen: set[tuple[int, int]]) -> str:
    """The block showing the items `chosen` ((section, item) pairs), the rest counted per skill."""
    lines = [HEAD]
    for s, section in enumerate(sections):
        shown = [item for i, item in enumerate(section["items"]) if (s, i) in chosen]
        left = section["left"] + len(section["items"]) - len(shown)
        if not shown:
            continue
        lines.append(f"{section['skill']} (run_id {section['run_id']}):")
        lines += [item["line"] for item in shown]
        if left:
            lines.append(f"  ({left} more left out: git whetstone recall {section['skill']} \"<the task>\" lists "
                         f"them)")
    shown_any = [sections[s] for s in range(len(sections)) if any(c[0] == s for c in chosen)]
    lines.append(_capture_line(shown_any))
    return "\n".join(lines) + "\n"


def compose(sections: list[dict[str, Any]]) -> tuple[str, int, int]:
    """The block (at most MAX_CHARS; "" when no section has an item), how many items it shows and
    how many it leaves out. Items go in by tier, mandatory rules first, while the block fits."""
    everything = sum(len(s["items"]) + s["left"] for s in sections)
    for section in sections:
        for item in section["items"]:
            item["line"] = _line(item)
    order = sorted(((_tier(item), s, i) for s, section in enumerate(sections)
                    for i, item in enumerate(section["items"])))
    chosen: set[tuple[int, int]] = set()
    for _, s, i in order:
        if len(render(sections, chosen | {(s, i)})) <= MAX_CHARS:
            chosen.add((s, i))
    if not chosen:
        return "", 0, everything
    return render(sections, chosen), len(chosen), everything - len(chosen)
