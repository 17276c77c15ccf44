"""Fit the bar from which `git whetstone context` chooses an unnamed skill for a prompt, per backend.

    .venv/bin/python scripts/fit_context.py                     # every installed backend
    .venv/bin/python scripts/fit_context.py --backend static

Every skill of the labeled set (tests/eval/skills) is loaded into a store of its own, side by side
under one store root, as a person with six attached skills has them. Each query is then scored
against every store (`context.match_score`: the best relevance of any entry to any clause) and
labeled: its own skill is a match for an on-topic query and no match for an off-topic one; the five
other skills are no match for an on-topic query (an off-topic query is left out against them: some
are another skill's task, "Refactor the SQL query…" among email-drafting's). On the dev split (one
query in three is test, by a hash of its id, as in tests/eval/run.py) the bar is the one with the
best F1, the lower bar on a tie: a skill missed is its rules not applied, a skill too many is only
longer context. The test split says whether the fit carries over. The bar goes into
git_whetstone/ops/hosts/context.py's SKILL_BAR by hand.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.eval.run import BACKEND_CODES, DAY, installed, load_set, load_skill, split_of  # noqa: E402


def scores(backend: str, root: Path) -> list[tuple[str, bool, float, str, str]]:
    """(split, is a match, score, query id, skill) for every labeled (query, skill) pair."""
    from git_whetstone.base.config import load
    from git_whetstone.ops.hosts.context import match_score
    from git_whetstone.ops.recall import clauses
    from git_whetstone.ops.workspace import Workspace

    config = dataclasses.replace(load(root), embedding_backend=backend, consult_global=False)
    if backend == "sentence-transformers" and not os.environ.get("WHETSTONE_EMBEDDING_MODEL"):
        from tests.helpers import model_dir
        config = dataclasses.replace(config, embedding_model=str(model_dir()))
    skills = load_set()["skills"]
    for skill in skills:
        load_skill(config, skill)
    ws = Workspace.of(config)
    stores = {s["skill"]: ws.store(s["skill"]) for s in skills}
    out = []
    for skill in skills:
        for query in skill["queries"]:
            queries = ws.embedder.embed(clauses(query["intent"]))
            for name, store in stores.items():
                own = name == skill["skill"]
                if query["kind"] == "offtopic" and not own:
                    continue
                out.append((split_of(query["id"]), own and query["kind"] != "offtopic",
                            match_score(ws, store, queries), query["id"], name))
    return out


def figures(rows, bar: float) -> dict[str, float]:
    """Recall (an on-topic query's own skill chosen), precision (chosen skills that are the query's
    own), F2 and how often an off-topic query chooses its skill, at `bar`, at most MATCHED_SKILLS
    skills a query, best first, as `context` chooses."""
    from git_whetstone.ops.hosts.context import MATCHED_SKILLS

    by_query: dict[str, list[tuple[float, bool, str]]] = {}
    for _, y, s, q, n in rows:
        by_query.setdefault(q, []).append((s, y, n))
    tp = fp = pos = off = off_chosen = 0
    for q, scored in by_query.items():
        chosen = [(s, y, n) for s, y, n in sorted(scored, key=lambda t: -t[0]) if s >= bar][:MATCHED_SKILLS]
        pos += any(y for _, y, _ in scored)
        tp += sum(y for _, y, _ in chosen)
        fp += sum(not y for _, y, _ in chosen)
        if not any(y for _, y, _ in scored):
            off += any(n == q.split("/")[0] for _, _, n in scored) and len(scored) == 1
            off_chosen += len(scored) == 1 and bool(chosen)
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / pos if pos else 1.0
    return {"recall": r, "precision": p, "f2": 5 * p * r / (4 * p + r) if p + r else 0.0,
            "offtopic_chosen": off_chosen / off if off else 0.0, "queries": len(by_query)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=list(BACKEND_CODES))
    args = parser.parse_args(argv)
    for backend in args.backend or [b for b in BACKEND_CODES if installed(b)]:
        with tempfile.TemporaryDirectory(prefix="whetstone-fit-") as root:
            os.environ.update(WHETSTONE_STORE_ROOT=root, WHETSTONE_TODAY=DAY, HF_HUB_OFFLINE="1")
            rows = scores(backend, Path(root))
        dev = [r for r in rows if r[0] == "dev"]
        test = [r for r in rows if r[0] == "test"]
        grid = np.round(np.arange(0.0, 1.0, 0.01), 2)
        best = max(grid, key=lambda b: (round(figures(dev, b)["f2"], 4), -b))
        print(f"{backend}: bar {best:.2f}")
        for name, part in (("dev", dev), ("test", test)):
            f = figures(part, best)
            print(f"  {name:<4} recall {f['recall']:.3f}  precision {f['precision']:.3f}  F2 {f['f2']:.3f}  "
                  f"off-topic queries choosing their skill {f['offtopic_chosen']:.3f}  ({f['queries']} queries)")
        for bar in sorted({best - 0.05, best + 0.05}):
            f = figures(test, bar)
            print(f"  test at {bar:.2f}: recall {f['recall']:.3f}  precision {f['precision']:.3f}  F2 {f['f2']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
