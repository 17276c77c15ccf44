"""recall (SPEC §4, §5): the learnings and issues that matter for an elaborated intent.

Recipe: embed the intent and each of its clauses. An entry's relevance to a clause mixes how close
its scope is (the scope's phrase or centroid) with how close its own text is;
the scope counts more, because a task names what it touches ("a revenue table") far more often
than it restates a rule. An entry is returned when its relevance clears the cutoff for its kind
(issues have the lower one) and lies within `band` of the best match for one of the clauses: the
band adapts to how well the intent matches this store at all, where a fixed cutoff would return a
dozen loose matches for a vague intent and nothing for a precise one. A clause's own floor lies at
most three bands under the best match overall, and a clause whose best match barely clears the
cutoff (one stray word) brings no matches of its own. Learnings are ordered by
relevance and weight and picked by MMR, so the k returned are not k paraphrases; issues are
ranked and capped, and what is left out is counted.

Entries marked `applies: always` (rules for every task of the skill) are not matched at all: every
one of them is returned first, on every call, nearest to the intent first and capped by `always_k`
(the rest counted in `omitted`); they take no place from the learnings and issues the intent
matched. An intent that matches nothing gets the always-on entries and nothing else; only a store
with no always-on entry falls back to its single nearest issue (or strongest learning), flagged
`fallback`. `other_scopes` maps each scope that contributed nothing to its entry count, nearest
first, so the agent sees what the intent missed and can fetch a scope by name (`scopes`).
The mix, cutoffs and band were fitted per backend on the labeled set in tests/eval.
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
from ..format.layout import GLOBAL, GLOBAL_PREFIX, scope_key
from ..index import scan
from ..index.build import Progress
from ..index.records import differs
from ..index.snapshot import Snapshot
from ..semantics.judge import CONTRADICTS, LIKELY, SAME, judge, may_oppose, read
from ..semantics.words import content_words
from ..store import events
from ..store.weight import weights
from .workspace import Workspace

MAX_INTENT = 20_000
MMR_LAMBDA = 0.75
MMR_POOL = 200
NEAR_DUPLICATE = 0.9  # cosine at which a candidate only repeats a learning already picked
OTHER_SCOPES = 40  # scopes listed in other_scopes, nearest to the intent first
NAMED_K = 50  # entries returned for the scopes a caller names (the rest counted in omitted)
SCOPE_SHARE = 0.7  # of an entry's relevance; the rest is its own text's likeness to the intent
PILOT_SCOPES = 4  # per clause: the likeliest scopes, whose rows are scanned first to learn a floor (big stores)
PRUNE_SHARE = 0.7  # scan only the rows that floor lets matter when they are fewer than this share of all: a
#                   gathered row costs ~1.4 times one of a whole pass (95 against 67 ns at 100,000 entries)
NEAR_MARGIN = 1e-5  # the scan's first sift is this much looser than float32 rounding could need

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
        queries = ws.embedder.embed(clauses(intent))
        layers = [Layer(origin, snap, queries, day, config, named) for origin, snap in live]
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


def _row_max(scores: np.ndarray) -> np.ndarray:
    """`scores.max(axis=1)` for a tall matrix of a few columns (one per clause), a column at a
    time: numpy's reduction over a short axis costs 20 times more (11 ms at 100,000 rows)."""
    best = scores[:, 0].copy()
    for j in range(1, scores.shape[1]):
        np.maximum(best, scores[:, j], out=best)
    return best


@dataclass
class Found:
    """What the scan found (`candidates`): the rows whose exact scores could change recall's answer,
    ascending; which of them must be scored exactly before anything is decided (`exact`): the
    rows that may or may not be hits, and those that could be some clause's best match; and,
    for the others (surely hits), their approximate scores (clauses × rows) and bounds, good
    enough to tell most of them near or not and out of the first ranks or not (`Layer.settle`)."""

    rows: np.ndarray
    exact: np.ndarray
    approx: np.ndarray
    slack: np.ndarray


def candidates(snap: Snapshot, queries: np.ndarray, cutoff: np.ndarray, band: float, runs: np.ndarray) -> Found:
    """The rows whose exact scores could change recall's answer, found from the compact vectors
    (`scan`: every approximate score of a row within ±`slack` of the exact one). A row matters only if it
    can be a hit (its relevance can clear its kind's cutoff) and can be near (some clause's score
    can reach that clause's floor). Rows that surely clear their cutoff give each clause a best it
    cannot fall below, so a floor it cannot fall below: that best less a band, and never more than
    three bands under the best of all (as `_rank` sets it). With no row surely a hit, the answer
    may be the fallback: every possible hit is kept, and the issues that could be the nearest.
    Only the rows of the scopes that can reach such a floor are scanned at all (`_worth_scanning`;
    the tests hold it to `_chosen` over every row). `runs` are the rows that can be hits, as `_runs`
    gives them."""
    scanning = snap.scan(queries, SCOPE_SHARE)
    bound, floor, low = _pilot(snap, scanning, cutoff, band, runs)
    rows = _worth_scanning(snap, bound, floor, runs)
    return _chosen(snap, scanning, rows, cutoff, band, None if floor is None else np.minimum(floor, low))


def _chosen(snap: Snapshot, scanning, rows: np.ndarray | None, cutoff: np.ndarray, band: float,
            under: np.ndarray | None = None) -> Found:
    """`candidates` among `rows` (None: every row), the rows no other row can matter beside.
    `under` is a score per clause that neither the floor these rows set nor their best match's
    least score (`_best_under`) can lie under (`_pilot`'s, the lower of the two): a row that
    cannot reach it on any clause can be neither near nor any clause's best, so only the others
    (a few thousand of 100,000) are kept from each block of scores (`_near_enough`). With no such
    score, every row's scores are kept."""
    if under is None:
        at, (approx, slack) = None, scanning.scores(rows)  # clauses × rows, and each row's bound
    else:
        at, approx, slack = _near_enough(scanning, rows, under)
    scored = rows if at is None else (at if rows is None else rows[at])  # the rows whose scores `approx` holds
    cut = cutoff if scored is None else cutoff[scored]  # (not every scanned row's, then the kept ones')
    top = approx.max(axis=0)
    maybe = top + slack >= cut
    sure = top - slack >= cut
    if sure.any():
        low = _best_under(approx, slack, sure)
        floor = _floor(low, band)
        if under is not None and (np.minimum(floor, low) < under).any():  # the rows setting them were left out: cannot
            return _chosen(snap, scanning, rows, cutoff, band)                # be (the pilot's are among these); if it were: all
        reach = approx[0] + slack
        near = reach >= floor[0]
        best = reach >= low[0]  # could be the clause's best match
        for j in range(1, len(floor)):
            np.add(approx[j], slack, out=reach)
            near |= reach >= floor[j]
            best |= reach >= low[j]
        found = np.flatnonzero(maybe & near)
        exact = ~sure[found] | best[found]
        approx, slack = approx[:, found], slack[found]
        found = found if at is None else at[found]
        return Found(found if rows is None else rows[found], exact, approx, slack)
    if rows is not None or at is not None:  # cannot be (the rows that set the floor are among those scanned); if it were: every row
        return _chosen(snap, scanning, None, cutoff, band)
    issue = np.isfinite(cutoff) & ~snap.is_learning
    nearest = np.max(top - slack, where=issue, initial=-np.inf)
    found = np.flatnonzero(maybe | (issue & (top + slack >= nearest)))
    return Found(found, np.ones(len(found), bool), approx[:, :0], slack[:0])  # the fallback may come: all exact, no bounds


def _near_enough(scanning, rows: np.ndarray | None, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of `rows` (None: every row), those whose scores could reach `floor` on some clause: their
    positions in `rows`, their approximate scores (clauses × kept) and bounds. Each block of
    scores is let go once its few rows are taken (in cache, where every row's scores kept whole
    would be a store-sized array each later step passes over again). The test is looser than
    `_chosen`'s by NEAR_MARGIN, more than float32 rounding can move it: it keeps every row that
    one keeps, and a few more."""
    lift = (floor.astype(np.float64) - NEAR_MARGIN).astype(np.float32)[:, None]
    heads = scanning.heads_kept(rows, lift)  # the rows that can pass, found from their heads first
    if heads is not None:
        rows = heads if rows is None else rows[heads]
    slack = scanning.slack(rows)  # (scratch: nothing below asks for another)
    at, kept = [np.zeros(0, np.intp)], [np.zeros((len(floor), 0), np.float32)]
    for start, stop, approx in scanning.blocks(rows):
        reach = np.subtract(approx, lift).max(axis=0)  # per row, its best clause against that clause's floor
        reach += slack[start:stop]
        near = np.flatnonzero(reach >= 0)
        at.append(near + start)
        kept.append(approx[:, near])
    at = np.concatenate(at)
    return at if heads is None else heads[at], np.concatenate(kept, axis=1), slack[at]


def _best_under(approx: np.ndarray, slack: np.ndarray, sure: np.ndarray) -> np.ndarray:
    """Per clause, a score its best match cannot fall below: the rows `sure` to be hits score at
    least this much (their approximate score less their bound)."""
    low = np.empty(len(approx), np.float32)
    sure_low = np.empty_like(slack)
    for j in range(len(approx)):  # a clause at a time: no second array of clauses × rows
        np.subtract(approx[j], slack, out=sure_low)
        low[j] = np.max(sure_low, where=sure, initial=-np.inf)
    return low


def _floor(best: np.ndarray, band: float) -> np.ndarray:
    """Per clause, its best match less a band, and never more than three bands under the best of
    all: a clause that matches nothing well (one stray word) does not drag in loose neighbours."""
    return np.maximum(best - band, best.max() - 3 * band)


def _runs(scope_of: np.ndarray, can_hit: np.ndarray) -> np.ndarray:
    """The rows that `can_hit` as runs of neighbours of one scope, in row order: 3 × runs, each
    run's first row, length and scope (a file's rows are neighbours: about one run per file).
    The rows of some scopes are then found per run (`_rows_of`) instead of per row: a
    gather of 100,000 scope numbers costs half a millisecond, and the pruning took two.
    Worked out from where the scope or `can_hit` changes: no store-sized array of numbers."""
    if not len(scope_of):
        return np.zeros((3, 0), np.int64)
    change = np.empty(len(scope_of), bool)
    change[0] = True
    np.not_equal(scope_of[1:], scope_of[:-1], out=change[1:])
    change[1:] |= can_hit[1:] != can_hit[:-1]
    first = np.flatnonzero(change)  # each stretch of one scope, all able to hit or none
    length = np.diff(first, append=len(scope_of))
    keep = can_hit[first]
    first = first[keep]
    return np.stack([first, length[keep], scope_of[first]]).astype(np.int64)


def _rows_of(runs: np.ndarray, scopes: np.ndarray, limit: float = np.inf) -> np.ndarray | None:
    """The rows of `runs` whose scope is marked in `scopes` (a flag per scope), ascending; None
    when there are `limit` or more of them."""
    take = scopes[runs[2]]
    first, length = runs[0, take], runs[1, take]
    total = int(length.sum())
    if total >= limit:
        return None
    if not total:
        return np.zeros(0, np.intp)
    shift = np.repeat(first - (np.cumsum(length) - length), length)  # each row's run start less its place
    return np.arange(total, dtype=np.intp) + shift


def _pilot(snap: Snapshot, scanning, cutoff: np.ndarray, band: float, runs: np.ndarray):
    """The scopes' bounds (`scope_bound`: clauses × scopes, the scope's likeness with the best
    text any row could have), and per clause a floor `_rank`'s cannot lie under and a score its
    best match cannot fall below (`_best_under`), or None for both: the rows of the PILOT_SCOPES
    likeliest scopes of each clause are scored first, and those sure to be hits set them."""
    if len(snap.scopes) <= PILOT_SCOPES:
        return None, None, None
    bound = scanning.scope_bound()
    pilot = np.zeros(len(snap.scopes), bool)
    pilot[_largest(bound, PILOT_SCOPES)] = True
    rows = _rows_of(runs, pilot)
    if not len(rows):
        return bound, None, None
    approx, slack = scanning.scores(rows)
    sure = approx.max(axis=0) - slack >= cutoff[rows]
    if not sure.any():
        return bound, None, None
    low = _best_under(approx, slack, sure)
    return bound, _floor(low, band), low


def _largest(values: np.ndarray, k: int) -> np.ndarray:
    """Per row of `values` (clauses × scopes), the places of k of its largest values (rows × k,
    ties taken either way). Looked for only among the values at or above the k-th largest of every
    16th one, which is no more than the k-th largest of all: a few dozen a row instead of 10,000
    (one partition along the rows took 0.2 ms a recall, this 0.08)."""
    rows, n = values.shape
    if n <= 16 * k:
        return np.argpartition(-values, k - 1, axis=1)[:, :k]
    least = np.partition(values[:, ::16], -k, axis=1)[:, -k]
    out = np.empty((rows, k), np.intp)
    for j in range(rows):
        near = np.flatnonzero(values[j] >= least[j])  # at least k of them
        out[j] = near[np.argpartition(-values[j][near], k - 1)[:k]]
    return out


def _worth_scanning(snap: Snapshot, bound: np.ndarray | None, floor: np.ndarray | None,
                    runs: np.ndarray) -> np.ndarray | None:
    """The rows whose approximate scores `candidates` needs, ascending, or None for every row.
    A row of a scope whose bound stays under `_pilot`'s floor on every clause can be neither
    near nor any clause's best: it is not scanned. Pruning that would keep most rows is not
    worth its gathering: every row is scanned then."""
    if floor is None:
        return None
    keep = bound[0] >= floor[0]
    for j in range(1, len(floor)):
        keep |= bound[j] >= floor[j]
    return _rows_of(runs, keep, PRUNE_SHARE * snap.size)


def _ascending(*parts: np.ndarray) -> np.ndarray:
    """The rows of `parts` (each ascending, each row once in it), ascending, each once."""
    parts = [part for part in parts if len(part)]
    if len(parts) <= 1:
        return parts[0] if parts else np.zeros(0, np.intp)
    return _distinct(np.concatenate(parts))


def _distinct(rows: np.ndarray) -> np.ndarray:
    """`rows` ascending, each once (np.unique would import numpy.ma)."""
    rows = np.sort(rows)
    return rows[np.concatenate(([True], rows[1:] != rows[:-1]))] if len(rows) else rows


def _cutoff(snap: Snapshot, scoped: np.ndarray, learning_cutoff: float, issue_cutoff: float) -> np.ndarray:
    """Per row, the relevance it must reach to be a hit: its kind's cutoff, or infinite for dead
    rows and rows marked for every task (no intent matches them)."""
    cutoff = np.where(snap.is_learning, learning_cutoff, issue_cutoff)
    cutoff[~scoped] = np.inf
    return cutoff


class Layer:
    """One store's scores for an intent: the skill's own store, or the global layer.

    In a big store only the rows that could be returned are scored exactly (`candidates`): the
    arrays over rows hold their scores and nothing for the rest (relevance -inf, never a hit), and
    `per_clause` has one line per row scored exactly (`rows`). Rows surely hits that cannot be a
    clause's best match are first only bounded (`loose`: `relevance` holds the most, `relevance_low`
    the least they can score) and scored exactly when a decision needs it (`settle`): when their
    bounds straddle a clause's floor, or they could rank among the first few."""

    def __init__(self, origin: str, snap: Snapshot, queries: np.ndarray, day: dt.date,
                 config: Config, named: list[str] = ()) -> None:
        self.origin, self.snap, self.queries = origin, snap, queries
        # per row, and kept while the snapshot does not change (`Snapshot.derived`)
        self.always = snap.derived("always", lambda: snap.alive & snap.always)  # returned whatever the intent: matched by nothing
        scoped = snap.derived("scoped", lambda: snap.alive & ~snap.always)
        self.learning = snap.derived("learning", lambda: scoped & snap.is_learning)
        self.issue = snap.derived("issue", lambda: scoped & ~snap.is_learning)
        self.day, self.config = day, config
        keys = {scope_key(name) for name in named}
        wanted = [i for i, (_, key, _) in enumerate(snap.scopes) if key in keys] if keys else []
        self.found = {snap.scopes[i][1] for i in wanted}  # the named scopes this store has
        self.named = np.isin(snap.scope_of, wanted) & scoped if wanted else np.zeros(snap.size, bool)
        self.named_rows = np.flatnonzero(self.named) if wanted else np.zeros(0, np.intp)
        self.always_rows = snap.derived("always rows", lambda: np.flatnonzero(self.always))
        cuts = config.threshold("learning_cutoff"), config.threshold("issue_cutoff")
        cutoff = snap.derived(f"cutoff {cuts}", lambda: _cutoff(snap, scoped, *cuts))
        self.loose = np.zeros(snap.size, bool)
        self.loose_rows = np.zeros(0, np.intp)
        # the vectors read, a read at a time, `_held_n` in all, and where each candidate's is (1 +
        # its place among them; 0: not read)
        self._held: list[np.ndarray] = []
        self._held_n, self._held_at = 0, None
        self.candidates: np.ndarray | None = None  # the rows that can be hits, ascending (None: any row)
        self._level_at: np.ndarray | None = None  # scope_levels read, and where each scope's is
        self._entries: dict[int, Any] = {}  # `entry`
        path = scan.kernel(snap.size, config.vector_scan)
        if path == "int8" and snap.compact_ready(now=config.vector_scan == "int8"):
            # the rows whose exact score could change the answer, and those returned whatever it is
            # (always-on and named: ordered by their exact relevance)
            runs = snap.derived("runs", lambda: _runs(snap.scope_of, scoped))  # the rows whose cutoff is finite
            found = candidates(snap, queries, cutoff, config.threshold("band"), runs)
            self.rows = _ascending(found.rows[found.exact], self.always_rows, self.named_rows)
            if not found.exact.all():
                loose = ~found.exact & ~(self.named[found.rows] | self.always[found.rows])  # those are scored exactly
                self.loose_rows = found.rows[loose]
                self.loose_approx, self.loose_slack = found.approx[:, loose], found.slack[loose]
                self.loose[self.loose_rows] = True
            self.candidates = _ascending(self.rows, self.loose_rows)
            self._held_at = np.zeros(len(self.candidates), np.intp)
            self.per_clause = self._exact(self.rows)  # candidates × clauses, in float32
            self.scope_relevance = snap.scope_likeness  # from the scan: to pick other_scopes' few, then exact
        else:  # every row, exactly
            self.rows = np.arange(snap.size)
            scope_level = np.maximum(snap.centroids @ queries.T, snap.phrases @ queries.T)
            self.scope_relevance = _row_max(scope_level) if len(scope_level) else np.zeros(0)
            self.per_clause = SCOPE_SHARE * scope_level[snap.scope_of] + (1 - SCOPE_SHARE) * (snap.vectors @ queries.T)
        relevance = _row_max(self.per_clause)
        self.relevance = np.full(snap.size, -np.inf, relevance.dtype)
        self.relevance[self.rows] = relevance
        self.relevance_low = self.relevance.copy()
        if len(self.loose_rows):
            top = _row_max(self.loose_approx.T)
            self.relevance[self.loose_rows] = top + self.loose_slack
            self.relevance_low[self.loose_rows] = top - self.loose_slack
        self.learn_hit = self._marked(self.learning, config.threshold("learning_cutoff"))
        self.issue_hit = self._marked(self.issue, config.threshold("issue_cutoff"))

    def _marked(self, kind: np.ndarray, cutoff: float) -> np.ndarray:
        """Per row, whether it is of `kind` and its relevance reaches `cutoff` (a row that is no
        candidate has none): worked out for the candidates only."""
        if self.candidates is None:
            return kind & (self.relevance >= cutoff)
        out = np.zeros(self.snap.size, bool)
        out[self.candidates] = kind[self.candidates] & (self.relevance[self.candidates] >= cutoff)
        return out

    def where(self, mask: np.ndarray) -> np.ndarray:
        """The rows `mask` marks (one of the hit masks), ascending: looked for among the candidates."""
        return np.flatnonzero(mask) if self.candidates is None else self.candidates[mask[self.candidates]]

    def _exact(self, rows: np.ndarray) -> np.ndarray:
        """Rows × clauses: how close each of `rows` is to each part of the intent, in float32.
        The vectors read for it are kept (`vectors_of`), and so is each scope's level."""
        vectors = self.snap.vectors_of(rows)
        self._held.append(vectors)  # kept as read, not copied (`vectors_of`)
        self._held_at[np.searchsorted(self.candidates, rows)] = np.arange(self._held_n + 1, self._held_n + 1 + len(rows))
        self._held_n += len(rows)
        return (SCOPE_SHARE * self.scope_levels(self.snap.scope_of[rows])
                + (1 - SCOPE_SHARE) * (vectors @ self.queries.T))

    def scope_levels(self, scopes: np.ndarray) -> np.ndarray:
        """Scopes × clauses: the closer of each scope's phrase and centroid to each clause, in
        float32, read once per recall for each scope (`scope_pairs_of`: both vectors in one read)."""
        snap = self.snap
        if self._level_at is None:
            self._level_at = np.full(len(snap.scopes), -1, np.intp)
            self._levels = np.zeros((0, len(self.queries)), np.float32)
        scopes = np.asarray(scopes, np.intp)
        new = _distinct(scopes[self._level_at[scopes] < 0])  # each scope not yet read, once
        if len(new):
            pairs = snap.scope_pairs_of(new)  # scopes × (centroid, phrase) × dim
            # a product apiece, as over two matrices: one product of both would round its last bits
            # otherwise (a product's rounding depends on its shape)
            level = np.maximum(pairs[:, 0] @ self.queries.T, pairs[:, 1] @ self.queries.T)
            self._level_at[new] = np.arange(len(new)) + len(self._levels)
            self._levels = np.concatenate([self._levels, level])
        return self._levels[self._level_at[scopes]]

    def vectors_of(self, rows) -> np.ndarray:
        """`snap.vectors_of(rows)`, from what scoring them read when it did (MMR and the
        conflicts ask for rows scored exactly: no second read from the image)."""
        rows = np.asarray(rows, np.intp)
        if not self._held_n:
            return self.snap.vectors_of(rows)
        place = np.minimum(np.searchsorted(self.candidates, rows), len(self.candidates) - 1)
        held = self.candidates[place] == rows  # (the fallback may show a row that is no candidate)
        at = self._held_at[place] - 1
        held &= at >= 0
        out = np.empty((len(rows), self.snap.dim), np.float32)
        start = 0  # each read's rows taken from it: putting the reads together costs more (fresh pages)
        for vectors in self._held:
            mine = np.flatnonzero(held & (at >= start) & (at < start + len(vectors)))
            out[mine] = vectors[at[mine] - start]
            start += len(vectors)
        if not held.all():
            out[~held] = self.snap.vectors_of(rows[~held])
        return out

    def settle(self, rows: np.ndarray) -> np.ndarray:
        """Score the loose ones of `rows` exactly (they join `rows` and `per_clause`); returns
        those rows, and leaves their exact relevance in `relevance` and `relevance_low`."""
        rows = np.asarray(rows, np.intp)
        rows = rows[self.loose[rows]]
        if len(rows):
            per_clause = self._exact(rows)
            self.rows = np.concatenate([self.rows, rows])
            self.per_clause = np.concatenate([self.per_clause, per_clause])
            self.relevance[rows] = self.relevance_low[rows] = _row_max(per_clause)
            self.loose[rows] = False
        return rows

    def weight_of(self, rows) -> np.ndarray:
        """The weight of each of `rows` today (0 for an issue): computed for the few rows a
        recall shows or ranks, not for the whole store."""
        rows = np.asarray(rows, np.intp)
        snap = self.snap
        return np.where(snap.is_learning[rows], weights(snap.recurrence[rows], snap.last_seen[rows], self.day,
                                                        self.config), 0.0)

    def best(self) -> np.ndarray:
        """Per clause of the intent, the best relevance among this layer's hits (-1 when none)."""
        hits = (self.learn_hit | self.issue_hit)[self.rows]
        if not hits.any():
            return np.full(self.per_clause.shape[1], -1.0)
        return self.per_clause[hits].max(axis=0)

    def keep_near(self, floor: np.ndarray) -> None:
        """Only entries within the band of the best match for some clause stay hits: each part of
        a many-sided intent brings its own best matches, not just the part that matched best.
        Entries of the scopes the caller named are returned on their own, after these. A loose
        row whose bounds leave it unclear is scored exactly first."""
        if len(self.loose_rows):
            approx, slack = self.loose_approx, self.loose_slack
            surely = approx[0] - slack >= floor[0]
            maybe = approx[0] + slack >= floor[0]
            for j in range(1, len(floor)):
                surely |= approx[j] - slack >= floor[j]
                maybe |= approx[j] + slack >= floor[j]
            still = self.loose[self.loose_rows]
            self.settle(self.loose_rows[maybe & ~surely & still])
            far = self.loose_rows[~maybe & still]
        near = self.per_clause[:, 0] >= floor[0]  # a column at a time, as in _row_max
        for j in range(1, len(floor)):
            near |= self.per_clause[:, j] >= floor[j]
        kept = np.zeros(self.snap.size, bool)
        kept[self.loose_rows[self.loose[self.loose_rows]]] = True  # surely near: the loose rows left
        kept[self.rows] = near
        if len(self.loose_rows):
            kept[far] = False
        kept[self.named_rows] = False
        self.learn_hit &= kept
        self.issue_hit &= kept

    def entry(self, row: int):
        """The entry at `row`, looked up once a recall (showing it, its id and its conflicts each ask)."""
        got = self._entries.get(row)
        if got is None:
            got = self._entries[row] = self.snap.entries[row]
        return got

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
            self._vectors = np.concatenate([layer.vectors_of(rows) for layer, rows in zip(self.layers, self.picks)])
        return self._vectors

    def vectors_at(self, at: np.ndarray) -> np.ndarray:
        """The vectors of the pool's rows `at` only (MMR needs a few hundred of thousands): one
        layer's as it gives them (no second array to copy them into)."""
        if len(self.layers) == 1:
            return self.layers[0].vectors_of(self.row[at])
        out = np.empty((len(at), self.layers[0].snap.vectors.shape[1]), np.float32)
        for i, layer in enumerate(self.layers):
            mine = self.layer[at] == i
            out[mine] = layer.vectors_of(self.row[at][mine])
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
    floor = _floor(best, band)  # each clause's own best matches count
    # and a clause whose best match barely clears the cutoff ("symbols") brings no matches of its own
    floor[1:][best[1:] < config.threshold("learning_cutoff") + band] = np.inf
    for layer in layers:
        layer.keep_near(floor)
    learn = Pool(layers, [layer.where(layer.learn_hit) for layer in layers])
    issue = Pool(layers, [layer.where(layer.issue_hit) for layer in layers])
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
        _settle(learn, MMR_POOL, weighted=True)
        value = learn.column("relevance") * (0.5 + 0.5 * learn.column("weight"))
        chosen = learn.refs_at(np.array(_mmr(learn.vectors_at, value, learn.order(value, MMR_POOL), k), np.intp))
        ranked.omitted["learnings"] += len(learn) - len(chosen)
    else:
        chosen = []
    if not len(learn) and not len(issue) and not always and not len(named):
        # nothing matched and no rule holds for every task: the single nearest issue (or the
        # strongest learning), flagged, so a vague intent is not met with nothing at all
        for layer in layers:
            layer.settle(layer.loose_rows)
        issues_left = Pool(layers, [np.flatnonzero(layer.issue) for layer in layers])
        if len(issues_left):
            li, row = issues_left.refs_at(issues_left.order(issues_left.column("relevance"), 1))[0]
            issue = Pool(layers, [np.array([row]) if i == li else np.zeros(0, np.int64) for i in range(len(layers))])
        else:
            strongest = Pool(layers, [np.flatnonzero(layer.learning) for layer in layers])
            chosen = strongest.refs_at(strongest.order(strongest.column("weight"), 1))
        ranked.fallback = bool(len(issue) or chosen)
    _settle(issue, config.issues_k, weighted=False)
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


def _settle(pool: Pool, limit: int, weighted: bool) -> None:
    """Score exactly the loose rows of `pool` that could be among its first `limit` (by relevance,
    times the weight's factor when `weighted`, as `_rank` orders it): at least `limit` rows surely
    score as much as the limit-th best lower bound, so a row whose upper bound stays under it
    cannot be among them, and the upper bound it keeps sorts it below every row that can."""
    loose = pool._gather(lambda layer: layer.loose)
    if not loose.any():
        return
    high, low = pool.column("relevance"), pool.column("relevance_low")
    if weighted:
        factor = 0.5 + 0.5 * pool.column("weight")
        high, low = high * factor, low * factor
    cut = np.partition(low, len(low) - limit)[len(low) - limit] if len(low) > limit else -np.inf
    unclear = loose & (high >= cut)
    for i, layer in enumerate(pool.layers):
        layer.settle(pool.row[unclear & (pool.layer == i)])


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
        # the same key under both kinds, keys already used, and room for the approximate likeness
        # of a big store to put a scope a little out of place (each is then scored exactly)
        take = OTHER_SCOPES * 2 + len(used) + 16
        if len(have) > take:
            have = have[np.argpartition(-layer.scope_relevance[have], take - 1)[:take]]
        exact = layer.scope_levels(have).max(axis=1)
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
            vecs[at] = layer.vectors_of([refs[i][1] for i in at])
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
