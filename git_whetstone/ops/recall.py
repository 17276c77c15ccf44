"""recall (SPEC §4, §5): the learnings and issues that matter for an elaborated intent.

Recipe: embed the intent and each of its clauses. An entry's relevance to a clause mixes how close
its scope is (the scope's phrase or centroid) with how close its own text is; the scope counts
more, because a task names what it touches ("a revenue table") far more often than it restates a
rule. The words the entry shares with the clause are added (BM25 over body and scope,
`semantics.lexical`: a word few entries hold counts much, a common one little). Whatever its
cosine, an entry is a candidate when the intent names its scope (every word of the name, in any
order) or shares rare words with it (`rare_word`). Otherwise it is returned when its relevance
clears the cutoff for its kind (issues have the lower one) and lies within `band` of the best
match for one of the clauses: the band adapts to how well the intent matches this store at all,
where a fixed cutoff would return a dozen loose matches for a vague intent and nothing for a
precise one. A clause's own floor lies at most three bands under the best match overall, and a
clause whose best match barely clears the cutoff (one stray word) brings no matches of its own.
Learnings are ordered by relevance and weight and picked by MMR, so the k returned are not k
paraphrases; issues are ranked and capped, and what is left out is counted.

Entries marked `applies: always` (rules for every task of the skill) are not matched at all: every
one of them is returned first, on every call, nearest to the intent first and capped by `always_k`
(the rest counted in `omitted`); they take no place from the learnings and issues the intent
matched. An intent whose best match stays under `silence` gets the always-on entries and only the
entries of scopes it names or sharing its rare words; only a store with no always-on entry falls
back to its single nearest issue (or strongest learning), flagged `fallback`. `other_scopes` maps each scope that contributed nothing to its entry count, nearest
first, so the agent sees what the intent missed and can fetch a scope by name (`scopes`).
The cutoffs, band and the words' weight and bar were fitted per backend on the dev split of the
labeled set in tests/eval (scripts/fit_recall.py), so that an off-topic intent gets the always-on
entries and next to nothing else.
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..base.clock import today
from ..base.config import Config
from ..base.errors import WhetstoneError, shown, unicode_text
from ..format.layout import GLOBAL, GLOBAL_PREFIX, did_you_mean, scope_key
from ..base.progress import Progress
from ..format.entry import differs
from ..index.snapshot import Snapshot
from ..semantics.judge import CONTRADICTS, LIKELY, SAME, judge, may_oppose, read
from ..semantics.lexical import query_terms
from ..semantics.words import content_words, name_words
from ..store import events
from ..store.store import close_skills
from ..store.weight import weights
from .workspace import Workspace

MAX_INTENT = 20_000
MMR_LAMBDA = 0.75
MMR_POOL = 200
NEAR_DUPLICATE = 0.9  # cosine at which a candidate only repeats a learning already picked
OTHER_SCOPES = 40  # scopes listed in other_scopes, nearest to the intent first
NAMED_K = 50  # entries returned for the scopes a caller names (the rest counted in omitted)
SCOPE_SHARE = 0.7  # of an entry's relevance; the rest is its own text's likeness to the intent

HOW_TO_USE = (
    "Issues are mandatory: apply every returned issue, whatever else the task suggests. Learnings are "
    "preferences weighted 0-1 (how firmly to apply them): follow strong ones by default and weigh weak ones "
    "against the request. 'conflicts' names returned entries that contradict each other: the issue wins, or "
    "ask the user. Entries with 'always' true are rules for every task of this skill: apply them whatever the "
    "task. 'fallback' true means nothing matched the intent closely and this is the nearest entry overall; "
    "'omitted' counts relevant entries left out by the caps. 'other_scopes' lists the scopes nothing was "
    "returned from, with their entry counts: if the task touches one of them, call recall again with "
    "scopes=[that scope] to get its entries.")
CAPTURE_CONTRACT = (
    "The moment you act on a correction from the user, call capture with the generalized rule as body, "
    "polarity 'learning' for a taste or 'issue' for an always/never rule, a short scope phrase for when it "
    "applies, the user's words as provenance, and this run_id. To strengthen, weaken, reword or remove an entry "
    "shown here, call revise with its id. Relay the returned confirmation to the user.")


def clauses(intent: str) -> list[str]:
    """The intent and its parts: an elaborated intent lists several dimensions of one task."""
    parts = [p.strip() for p in re.split(r"[,;:\n•|()]|\s[-–—]\s|\band\b|\bthen\b|&", intent)]
    seen, out = set(), [intent]
    for part in parts:
        key = " ".join(content_words(part))
        if key and key not in seen and part != intent:
            seen.add(key)
            out.append(part)
    return out[:16]


def check_k(value: Any, name: str = "learnings_k") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise WhetstoneError(f"{name} must be a whole number from 1 to 100, got {shown(value)}")
    return value


def check_scopes(scopes: Any) -> list[str]:
    """The `scopes` argument: scope names whose entries the caller wants whatever the intent."""
    if scopes is None:
        return []
    if isinstance(scopes, str):
        scopes = [scopes]
    if not isinstance(scopes, (list, tuple)) or len(scopes) > 50:
        raise WhetstoneError(f"scopes must be a list of at most 50 scope names, got {shown(scopes)}")
    out = []
    for name in scopes:
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise WhetstoneError(f"a scope name must be text of 1 to 200 characters, got {shown(name)}")
        unicode_text(name, "scope")
        out.append(" ".join(name.split()))
    return out


def recall(skill: str, intent: str, learnings_k: int | None = None, scopes: list[str] | None = None, *,
           config: Config | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """The learnings and issues relevant to `intent` in `skill`'s store, and in the global layer
    (`__global__`, unless `consult_global` is off) within the same budget, as the JSON of SPEC §4:
    every always-on entry first, then what the intent matches, then every entry of the `scopes`
    named. An unknown or empty skill gives empty lists (or only global entries), never an error.
    `progress(done, total)` hears how a build of the index goes, when the call must build one."""
    ws = Workspace.of(config, progress)
    config = ws.config
    if not isinstance(intent, str) or not intent.strip():
        raise WhetstoneError("intent is empty: describe the task and its dimensions")
    if len(intent) > MAX_INTENT:
        raise WhetstoneError(f"intent is too long ({len(intent)} characters; at most {MAX_INTENT})")
    unicode_text(intent, "intent")
    k = check_k(config.learnings_k if learnings_k is None else learnings_k)
    named = check_scopes(scopes)
    store = ws.store(skill)
    day = today()
    result: dict[str, Any] = {
        "skill": store.skill, "run_id": events.new_run_id(day), "learnings": [], "issues": [],
        "conflicts": [], "fallback": False, "omitted": {"learnings": 0, "issues": 0}, "other_scopes": {},
        "how_to_use": HOW_TO_USE, "capture_contract": CAPTURE_CONTRACT, "warnings": [],
    }
    stores = [("skill", store)]
    if config.consult_global and store.skill != GLOBAL:
        stores.append(("global", ws.store(GLOBAL)))
    if not store.exists and any((store.path / folder).is_dir() for folder in ("learnings", "issues")):
        result["warnings"].append(f"{store.path} holds learnings but has no .git, so it is not a store "
                                  f"whetstone can use; restore its .git (or clone it again)")
    near = [] if store.exists or store.skill == GLOBAL else close_skills(config, store.skill)
    if near:  # a typo of a stored skill's name, most likely: say so rather than answer nothing
        result["warnings"].append(f"no skill named '{store.skill}' here; {did_you_mean(near)}")
    stores = [(origin, st) for origin, st in stores if st.exists]
    if not stores:
        return result
    for _, st in stores:
        st.recover_if_interrupted()  # a write a killed writer left half done
    snaps = [(origin, ws.snapshot(st)) for origin, st in stores]
    for (origin, st), (_, snap) in zip(stores, snaps):
        said = st.warnings + snap.warnings
        result["warnings"] += [w if origin == "skill" else f"{GLOBAL}: {w}" for w in said]
    live = [(origin, snap) for origin, snap in snaps if snap.count]
    if live:
        parts = clauses(intent)
        queries = ws.embedder.embed(parts)
        layers = [Layer(origin, snap, queries, day, config, named, parts) for origin, snap in live]
        ranked = _rank(layers, k, config)
        result.update(learnings=ranked.learnings, issues=ranked.issues, conflicts=ranked.conflicts,
                      fallback=ranked.fallback, omitted=ranked.omitted, other_scopes=ranked.other_scopes)
        found = set().union(*(layer.found for layer in layers))
        unknown = [name for name in named if scope_key(name) not in found]
        if unknown:
            result["warnings"].append(f"no scope named {', '.join(repr(n) for n in unknown)} in {store.skill}; "
                                      f"other_scopes lists the scopes there are")
    events.append(store.path, "recall", run_id=result["run_id"], intent=intent[:500],
                  learnings=[e["id"] for e in result["learnings"]], issues=[e["id"] for e in result["issues"]],
                  fallback=result["fallback"], omitted=result["omitted"])
    return result


def _floor(best: np.ndarray, band: float) -> np.ndarray:
    """Per clause, its best match less a band, and never more than three bands under the best of
    all: a clause that matches nothing well (one stray word) does not drag in loose neighbours."""
    return np.maximum(best - band, best.max() - 3 * band)


def likeness(snap: Snapshot, text: np.ndarray, scopes: np.ndarray) -> np.ndarray:
    """Each row's likeness to each query (queries × rows): its scope's (`scopes`, from
    `Snapshot.score`) and its own `text`'s, mixed."""
    mixed = scopes.take(snap.scope_of, axis=1)  # C order, as `text` (scopes[:, rows] would be F order)
    mixed *= SCOPE_SHARE
    mixed += (1 - SCOPE_SHARE) * text
    return mixed


def _in_scopes(snap: Snapshot, scopes: list[int]) -> np.ndarray:
    """Per row, whether its scope is one of `scopes` (by number)."""
    table = np.zeros(len(snap.scopes), bool)
    table[scopes] = True
    return table[snap.scope_of]


class Layer:
    """One store's scores for an intent: the skill's own store, or the global layer. Every row is
    scored: its relevance to each clause (clauses × rows) mixes its scope's likeness to the clause
    (the closer of the scope's phrase and centroid) with its own text's, and adds the words it
    shares with the clause (BM25, `lexical`): a rare word shared counts whatever the cosine. The
    entries of a scope the intent names (every word of its name, in any order) are hits."""

    def __init__(self, origin: str, snap: Snapshot, queries: np.ndarray, day: dt.date,
                 config: Config, named: list[str], texts: list[str]) -> None:
        self.origin, self.snap, self.queries = origin, snap, queries
        self.day, self.config = day, config
        # per row, and kept while the snapshot does not change (`Snapshot.derived`)
        self.always = snap.derived("always", lambda: snap.alive & snap.always)  # returned whatever the intent
        scoped = snap.derived("scoped", lambda: snap.alive & ~snap.always)
        self.learning = snap.derived("learning", lambda: scoped & snap.is_learning)
        self.issue = snap.derived("issue", lambda: scoped & ~snap.is_learning)
        self.always_rows = snap.derived("always rows", lambda: np.flatnonzero(self.always))
        keys = {scope_key(name) for name in named}
        wanted = [i for i, (_, key, _) in enumerate(snap.scopes) if key in keys] if keys else []
        self.found = {snap.scopes[i][1] for i in wanted}  # the named scopes this store has
        self.named = _in_scopes(snap, wanted) & scoped
        self.named_rows = np.flatnonzero(self.named)
        text, self.scope_level = snap.score(queries)
        self.scope_relevance = self.scope_level.max(axis=0)  # `queries` holds the intent at least
        self.per_clause = likeness(snap, text, self.scope_level)
        # the words each row shares with each clause (BM25) add to its relevance; a word few rows
        # hold, shared with the intent, makes a row a candidate
        rare = np.zeros(snap.size, bool)
        lexicon, weight, bar = snap.lexicon(), config.threshold("lexical"), config.threshold("rare_word")
        for at, clause in enumerate(texts if weight else texts[:1]):  # the intent: its rare words
            for idf, rows, share in lexicon.matches(query_terms(clause)):
                self.per_clause[at, rows] += weight * share
                if at == 0 and idf >= bar:
                    rare[rows] = True
        self.relevance = self.per_clause.max(axis=0)
        spoken = snap.scopes_named(set(name_words(texts[0])))
        # hits whatever their cosine: the entries of a scope the intent names, and those sharing a rare word
        self.spoken = (_in_scopes(snap, spoken) | rare) & scoped
        self.learn_hit = self.learning & ((self.relevance >= config.threshold("learning_cutoff")) | self.spoken)
        self.issue_hit = self.issue & ((self.relevance >= config.threshold("issue_cutoff")) | self.spoken)

    def weight_of(self, rows) -> np.ndarray:
        """The weight of each of `rows` today (0 for an issue)."""
        rows = np.asarray(rows, np.intp)
        snap = self.snap
        return np.where(snap.is_learning[rows], weights(snap.recurrence[rows], snap.last_seen[rows], self.day,
                                                        self.config), 0.0)

    def best(self) -> np.ndarray:
        """Per clause of the intent, the best relevance among this layer's hits (-1 when none)."""
        hits = self.learn_hit | self.issue_hit
        if not hits.any():
            return np.full(len(self.per_clause), -1.0)
        return self.per_clause.take(np.flatnonzero(hits), axis=1).max(axis=1)

    def keep_near(self, floor: np.ndarray) -> None:
        """Only entries within the band of the best match for some clause stay hits: each part of
        a many-sided intent brings its own best matches, not just the part that matched best.
        Entries of the scopes the caller named are returned on their own, after these."""
        kept = ((self.per_clause >= floor[:, None]).any(axis=0) | self.spoken) & ~self.named
        self.learn_hit &= kept
        self.issue_hit &= kept

    def entry(self, row: int):
        return self.snap.entries[row]

    def shown_id(self, row: int) -> str:
        entry = self.entry(row)
        return entry.id if self.origin == "skill" else GLOBAL_PREFIX + entry.id


class Pool:
    """Rows from several layers side by side: (layer, row) pairs with their vectors and sort keys."""

    def __init__(self, layers: list[Layer], picks: list[np.ndarray]) -> None:
        self.layers, self.picks = layers, picks
        self.layer = np.concatenate([np.full(len(rows), i, np.int64) for i, rows in enumerate(picks)])
        self.row = np.concatenate([np.asarray(rows, np.int64) for rows in picks])
        self.key = self._gather(lambda layer: layer.snap.id_key)
        self._vectors: np.ndarray | None = None
        self._weight: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.row)

    @property
    def refs(self) -> list[tuple[int, int]]:
        """Every (layer, row) pair, in the pool's order."""
        return self.refs_at(slice(None))

    def refs_at(self, at) -> list[tuple[int, int]]:
        """The (layer, row) pairs at `at` (an index array or a slice): a pool of thousands of
        hits shows a few of them."""
        return list(zip(self.layer[at].tolist(), self.row[at].tolist()))

    @property
    def vectors(self) -> np.ndarray:
        if self._vectors is None:
            self._vectors = np.concatenate([layer.snap.vectors[rows] for layer, rows in zip(self.layers, self.picks)])
        return self._vectors

    def vectors_at(self, at: np.ndarray) -> np.ndarray:
        """The vectors of the pool's rows `at` only (MMR needs a few hundred)."""
        out = np.empty((len(at), self.layers[0].snap.dim), np.float32)
        for i, layer in enumerate(self.layers):
            mine = self.layer[at] == i
            out[mine] = layer.snap.vectors[self.row[at][mine]]
        return out

    def _gather(self, get) -> np.ndarray:
        return np.concatenate([get(layer)[rows] for layer, rows in zip(self.layers, self.picks)])

    def column(self, name: str) -> np.ndarray:
        if name == "weight":  # the same today however often asked (settling, then ranking): once
            if self._weight is None:
                self._weight = np.concatenate([layer.weight_of(rows) for layer, rows in zip(self.layers, self.picks)])
            return self._weight
        return self._gather(lambda layer: getattr(layer, name)).astype(np.float64)

    def keep(self, mask: np.ndarray) -> None:
        self.picks = [rows[mask[self.layer == i]] for i, rows in enumerate(self.picks)]
        self.__init__(self.layers, self.picks)

    def order(self, value: np.ndarray, limit: int | None = None) -> np.ndarray:
        """Best first; ties go to the skill's own entry, then to the lower id. With `limit`, only
        the first `limit` of that order (sorting only the rows that can be among them)."""
        if limit is None or len(value) <= 2 * limit:
            return np.lexsort((self.key, self.layer, -value))[:limit]
        cut = -np.partition(-value, limit - 1)[limit - 1]  # the limit-th best value: ties all stay
        near = np.flatnonzero(value >= cut)
        return near[np.lexsort((self.key[near], self.layer[near], -value[near]))][:limit]


@dataclass
class Ranked:
    """What recall returns of the stores' entries: the lists of SPEC §4 and what was left out."""

    learnings: list[dict[str, Any]] = field(default_factory=list)
    issues: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    fallback: bool = False
    omitted: dict[str, int] = field(default_factory=lambda: {"learnings": 0, "issues": 0})
    other_scopes: dict[str, int] = field(default_factory=dict)


def _rank(layers: list[Layer], k: int, config: Config) -> Ranked:
    skill = layers[0] if layers[0].origin == "skill" else None
    band = config.threshold("band")
    best = np.max([layer.best() for layer in layers], axis=0)
    if best.max() < config.threshold("silence"):  # nothing fits the intent well: no match, only what it names
        for layer in layers:
            layer.learn_hit &= layer.spoken
            layer.issue_hit &= layer.spoken
    floor = _floor(best, band)  # each clause's own best matches count
    # and a clause whose best match barely clears the cutoff ("symbols") brings no matches of its own
    floor[1:][best[1:] < config.threshold("learning_cutoff") + band] = np.inf
    for layer in layers:
        layer.keep_near(floor)
    learn = Pool(layers, [np.flatnonzero(layer.learn_hit) for layer in layers])
    issue = Pool(layers, [np.flatnonzero(layer.issue_hit) for layer in layers])
    every = Pool(layers, [layer.always_rows for layer in layers])
    named = Pool(layers, [layer.named_rows for layer in layers])
    # A global entry that says what a skill entry returned says is not repeated: the skill's wins.
    for pool in (learn, issue, every, named):
        _drop_repeats(pool, [learn, issue, every, named], skill, config)
    ranked = Ranked()

    # every always-on entry, nearest to the intent first, up to always_k
    always = every.refs_at(every.order(every.column("relevance")))
    kept = always[:config.always_k]
    for li, row in always[config.always_k:]:
        ranked.omitted["learnings" if layers[li].snap.is_learning[row] else "issues"] += 1

    if len(learn):
        value = learn.column("relevance") * (0.5 + 0.5 * learn.column("weight"))
        chosen = learn.refs_at(np.array(_mmr(learn.vectors_at, value, learn.order(value, MMR_POOL), k), np.intp))
        ranked.omitted["learnings"] += len(learn) - len(chosen)
    else:
        chosen = []
    if not len(learn) and not len(issue) and not always and not len(named):
        # nothing matched and no rule holds for every task: the single nearest issue (or the
        # strongest learning), flagged, so a vague intent is not met with nothing at all
        issues_left = Pool(layers, [np.flatnonzero(layer.issue) for layer in layers])
        if len(issues_left):
            li, row = issues_left.refs_at(issues_left.order(issues_left.column("relevance"), 1))[0]
            issue = Pool(layers, [np.array([row]) if i == li else np.zeros(0, np.int64) for i in range(len(layers))])
        else:
            strongest = Pool(layers, [np.flatnonzero(layer.learning) for layer in layers])
            chosen = strongest.refs_at(strongest.order(strongest.column("weight"), 1))
        ranked.fallback = bool(len(issue) or chosen)
    order = issue.order(issue.column("relevance"), config.issues_k)
    ranked.omitted["issues"] += max(0, len(issue) - config.issues_k)
    issues = issue.refs_at(order)
    # every entry of the scopes the caller named, nearest first, up to NAMED_K
    fetched = named.refs_at(named.order(named.column("relevance")))
    for li, row in fetched[NAMED_K:]:
        ranked.omitted["learnings" if layers[li].snap.is_learning[row] else "issues"] += 1
    fetched = fetched[:NAMED_K]
    matched = [*chosen, *issues, *fetched]

    weight: dict[tuple[int, int], float] = {}  # each shown row's weight, a layer's at once
    for li, layer in enumerate(layers):
        rows = [row for at, row in [*kept, *matched] if at == li]
        weight.update(zip([(li, row) for row in rows], layer.weight_of(rows).tolist()))

    def shown(li: int, row: int, is_always: bool) -> dict[str, Any]:
        layer, e = layers[li], layers[li].entry(row)
        out = {"id": layer.shown_id(row), "rule": e.body, "scope": e.scope}
        if e.kind == "learning":
            out.update(recurrence=e.recurrence, weight=round(weight[li, row], 4))
        out.update(origin=layer.origin, always=is_always)
        return out

    for li, row in kept:
        (ranked.learnings if layers[li].snap.is_learning[row] else ranked.issues).append(shown(li, row, True))
    ranked.learnings += [shown(li, row, False) for li, row in chosen]
    ranked.issues += [shown(li, row, False) for li, row in issues]
    for li, row in fetched:
        (ranked.learnings if layers[li].snap.is_learning[row] else ranked.issues).append(shown(li, row, False))
    ranked.conflicts = _conflicts(layers, [*kept, *matched], config)
    ranked.other_scopes = _other_scopes(layers, matched)  # an always-on entry says nothing of its scope's others
    return ranked


def _other_scopes(layers: list[Layer], returned: list[tuple[int, int]]) -> dict[str, int]:
    """The scopes no returned entry came from, each with its count of entries (always-on ones
    aside: those were all returned), nearest to the intent first, at most OTHER_SCOPES. Counted
    with numpy and looked at by name only for the nearest few (a store may hold thousands)."""
    used = {layers[li].snap.scopes[int(layers[li].snap.scope_of[row])][1] for li, row in returned}
    counts, nearest = [], {}  # nearest: scope key -> (relevance, display)
    for layer in layers:
        snap = layer.snap
        count = snap.derived("scope counts", lambda: np.bincount(snap.scope_of[layer.learning | layer.issue],
                                                                 minlength=len(snap.scopes)))
        counts.append(count)
        have = snap.derived("scopes counted", lambda: np.flatnonzero(count))
        if not len(have):
            continue
        # the same key under both kinds, and keys already used
        take = OTHER_SCOPES * 2 + len(used)
        if len(have) > take:
            have = have[np.argpartition(-layer.scope_relevance[have], take - 1)[:take]]
        exact = layer.scope_relevance[have]
        for at, relevance in zip(have.tolist(), exact.tolist()):
            _, key, display = snap.scopes[at]
            seen = nearest.get(key)
            if key not in used and (seen is None or relevance > seen[0]):
                nearest[key] = (relevance, seen[1] if seen else display)  # the first spelling met names it
    chosen = sorted(nearest.items(), key=lambda item: (-item[1][0], item[1][1]))[:OTHER_SCOPES]
    out = {}
    for key, (_, display) in chosen:
        total = 0
        for layer, count in zip(layers, counts):
            for kind in ("learning", "issue"):
                at = layer.snap.scope_number.get((kind, key))
                total += int(count[at]) if at is not None else 0
        out[display] = total
    return out


def _drop_repeats(pool: Pool, pools: list[Pool], skill: Layer | None, config: Config) -> None:
    """Drop from `pool` the global entries the judge is sure say what a skill entry in `pools` says."""
    if skill is None or not len(pool):
        return
    theirs = np.flatnonzero(pool.layer != 0)
    if not len(theirs):
        return
    mine = [(v, layer_row) for p in pools for v, layer_row in zip(p.vectors, p.refs) if layer_row[0] == 0]
    if not mine:
        return
    sims = pool.vectors[theirs] @ np.stack([v for v, _ in mine]).T
    drop = set()
    for t, row_sims in zip(theirs, sims):
        li, row = int(pool.layer[t]), int(pool.row[t])
        body = pool.layers[li].entry(row).body
        for m in np.flatnonzero(row_sims >= config.threshold("dedup")):
            other = skill.entry(mine[m][1][1]).body
            if judge(body, other, float(row_sims[m]), config, same_scope=True).relation == SAME:
                drop.add(int(t))
                break
    if drop:
        mask = np.ones(len(pool), bool)
        mask[list(drop)] = False
        pool.keep(mask)


def _mmr(vectors_at, value: np.ndarray, order: np.ndarray, k: int) -> list[int]:
    """Maximal marginal relevance: each pick trades value against likeness to what was picked.
    `order` ranks the candidates (value, then skill before global, then id), so equal scores
    always resolve the same way whatever the row order; `vectors_at(rows)` gives their vectors.

    The value is put on a 0-1 scale over the pool first: the trade against likeness must not depend
    on how spread the scores are (with every candidate in one scope they differ by hundredths and
    likeness by tenths, so diversity alone would order them: PrefEval hit@5 0.18 before, 0.25
    after). A near-duplicate of a pick (cosine >= NEAR_DUPLICATE) comes after everything else."""
    pool = order[:MMR_POOL]
    value = value[pool]
    spread = float(value.max() - value.min()) if len(value) else 0.0
    if spread > 0:
        value = (value - value.min()) / spread
    vectors = vectors_at(pool)
    sims = vectors @ vectors.T
    picked: list[int] = []
    closest = np.zeros(len(pool))
    lead = MMR_LAMBDA * value  # -inf once picked
    for step in range(min(k, len(pool))):
        score = lead - (1 - MMR_LAMBDA) * closest - 2.0 * (closest >= NEAR_DUPLICATE)
        best = int(np.argmax(score))  # the first maximum: the earliest in `order`
        picked.append(best)
        lead[best] = -np.inf
        closest = sims[best] if step == 0 else np.maximum(closest, sims[best])
    return [int(pool[i]) for i in picked]


def _conflicts(layers: list[Layer], refs: list[tuple[int, int]], config: Config) -> list[dict[str, Any]]:
    """Pairs among the returned entries that contradict each other, as the judge sees them: those
    it is sure of, and those likely opposed, whose words point opposite ways on shared content
    ("may contradict"); never a pair recorded as holding side by side (`differs_from`)."""
    found = []
    if not refs:
        return found
    vecs = np.empty((len(refs), layers[0].queries.shape[1]), np.float32)
    for li, layer in enumerate(layers):  # one read per layer, not per entry
        at = [i for i, (l, _) in enumerate(refs) if l == li]
        if at:
            vecs[at] = layer.snap.vectors[[refs[i][1] for i in at]]
    sims = vecs @ vecs.T
    entries = [layers[li].entry(row) for li, row in refs]
    # too far apart for the judge to look at (a contradiction in the same words is close), or
    # nothing in the two that could oppose (the judge would find neither kind of conflict)
    looked = (sims >= config.threshold("candidate")) & may_oppose([read(e.body) for e in entries])
    # each entry's shown id and scope key once, however many pairs name it (most entries are in some)
    ids = [layers[li].shown_id(row) for li, row in refs]
    keys = [scope_key(e.scope) for e in entries]
    for i, j in np.argwhere(np.triu(looked, 1)).tolist():  # pairs in order: i, then j > i
        if refs[i][0] == refs[j][0] and differs(entries[i], entries[j]):  # ids name entries of one layer
            continue
        verdict = judge(entries[i].body, entries[j].body, float(sims[i, j]), config, same_scope=keys[i] == keys[j])
        if verdict.relation == CONTRADICTS:
            reason = verdict.reason
        elif verdict.relation == LIKELY and verdict.opposed:
            reason = f"may contradict: {verdict.reason}"
        else:
            continue
        found.append({"ids": [ids[i], ids[j]], "reason": reason})
    return found
