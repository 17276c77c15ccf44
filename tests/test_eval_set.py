"""The labeled evaluation set (tests/eval) keeps its shape, and quality on it does not regress.

The floors below sit a little under what `python3 dev.py eval` measured when they were set (see
the README's quality table); a change that loses recall, dedup or conflict quality fails here.
"""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

from git_whetstone.base.config import Config, load
from git_whetstone.semantics.words import content_words
from tests.eval import run

DATA = run.load_set()


def test_the_set_has_the_size_the_issue_asks_for():
    skills = DATA["skills"]
    assert len(skills) >= 6
    queries = [q for s in skills for q in s["queries"]]
    assert len(queries) >= 150
    kinds = [q["kind"] for q in queries]
    assert kinds.count("paraphrase") >= len(queries) / 3
    assert kinds.count("offtopic") >= 6
    assert len(DATA["dedup"]) >= 60 and len(DATA["conflict"]) >= 40 and len(DATA["judge"]) >= 150
    assert {p["label"] for p in DATA["dedup"]} == {"duplicate", "distinct", "conflict"}  # changed values: conflicts
    assert {p["label"] for p in DATA["conflict"]} == {"conflict", "compatible"}
    assert {p["label"] for p in DATA["judge"]} == {"duplicate", "conflict", "distinct", "compatible"}
    categories = {p["category"] for p in DATA["judge"]}
    assert {"antonym", "opposite-value", "negation", "exception", "shared-vocabulary", "invented-identifier",
            "paraphrase", "multilingual"} <= categories
    for skill in skills:
        entries = skill["entries"]
        assert len(entries) >= 25, skill["skill"]
        assert any(e["id"].startswith("I") for e in entries) and any(e["id"].startswith("L") for e in entries)
        assert len({e["scope"] for e in entries}) >= 8


def test_every_label_names_an_entry_and_ids_are_unique():
    seen_queries = set()
    for skill in DATA["skills"]:
        ids = [e["id"] for e in skill["entries"]]
        assert len(ids) == len(set(ids)), skill["skill"]
        for query in skill["queries"]:
            assert query["id"] not in seen_queries
            seen_queries.add(query["id"])
            assert set(query["relevant"]) <= set(ids), query["id"]
            assert bool(query["relevant"]) == (query["kind"] != "offtopic"), query["id"]
    pair_ids = [p["id"] for p in DATA["dedup"] + DATA["conflict"] + DATA["judge"]]
    assert len(pair_ids) == len(set(pair_ids))


# The labeling rule's function words (LABELING.md), on top of the embedders' own stopwords.
FUNCTION_WORDS = set("""a an the of to in on for with and or but not no never always be is are it this that as
by at from my our your we i you should must use make do all any each every when than then so up out into over
per only more less very also some its their them these those there has have had was were will would can could
get set""".split())


def test_paraphrase_queries_share_no_content_word_with_their_entries():
    for skill in DATA["skills"]:
        by_id = {e["id"]: e for e in skill["entries"]}
        for query in skill["queries"]:
            if query["kind"] != "paraphrase":
                continue
            asked = set(content_words(query["intent"])) - FUNCTION_WORDS
            for entry_id in query["relevant"]:
                entry = by_id[entry_id]
                if entry.get("always"):  # a rule for every task: relevant whatever the words
                    continue
                shared = asked & set(content_words(entry["body"] + " " + entry["scope"]))
                assert not shared, f"{query['id']} shares {sorted(shared)} with {entry_id}"


def test_the_split_is_stable_and_holds_out_a_third():
    queries = [q["id"] for s in DATA["skills"] for q in s["queries"]]
    held_out = [q for q in queries if run.split_of(q) == "test"]
    assert 0.25 < len(held_out) / len(queries) < 0.42
    assert run.split_of("great-tables/q01") == run.split_of("great-tables/q01")


@pytest.fixture(scope="module")
def default_config(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-store")
    config = dataclasses.replace(load(root), supervision="autonomous", consult_global=False,
                                 embedding_backend=Config().embedding_backend)
    for skill in DATA["skills"]:
        run.load_skill(config, skill)
        run.load_skill(config, skill, marked=False)
    return config


def test_recall_quality_on_the_default_backend_does_not_regress(default_config, monkeypatch):
    monkeypatch.setenv("WHETSTONE_TODAY", run.DAY)
    report = run.eval_recall(default_config, DATA["skills"], "all", [])
    assert report["f1"] >= RECALL_F1_FLOOR, report
    assert report["always_recall"] == 1.0, report  # every rule marked for every task, on every call
    assert report["offtopic_not_always"] <= OFFTOPIC_CEILING, report
    assert report["by_kind"]["paraphrase"]["recall"] >= PARAPHRASE_RECALL_FLOOR, report
    plain = run.eval_recall(default_config, DATA["skills"], "all", [], marked=False)
    assert plain["specific"]["f1"] >= SPECIFIC_F1_FLOOR, plain


@pytest.mark.parametrize("mode", ["autonomous", "balanced"])
def test_the_judge_does_no_silent_harm_on_the_default_backend(default_config, monkeypatch, mode):
    """Held-out pairs, captured in autonomous and balanced mode: nothing distinct merged, no
    contradiction merged into what it contradicts, and duplicates and contradictions reach the
    caller (merged where sure, else asked or named); in balanced mode, few distinct pairs asked
    about, and contradictions stopped."""
    monkeypatch.setenv("WHETSTONE_TODAY", run.DAY)
    skills = {s["skill"]: s for s in DATA["skills"]}
    pairs = run.chosen(DATA["dedup"] + DATA["conflict"] + DATA["judge"], "test")
    report = run.eval_judge(default_config, pairs, "x", skills, run.library_caller(default_config), [],
                            modes=(mode,))[mode]
    assert report["harm"] <= HARM_CEILING, report
    assert report["caught"] >= CAUGHT_FLOOR, report
    if mode == "balanced":
        assert report["asked"] <= PAIRS_ASKED_CEILING, report
        assert report["contradictions_stopped"] >= STOPPED_FLOOR, report


def test_a_store_built_one_correction_at_a_time_is_rarely_asked_about(default_config, monkeypatch):
    """The held-out stream stores, captured rule by rule (balanced): no merge, few questions, and
    no false conflict in recall; an answered pair is never raised again."""
    monkeypatch.setenv("WHETSTONE_TODAY", run.DAY)
    report = run.eval_stream(default_config, DATA["streams"], "test", "x", run.library_caller(default_config), [],
                             modes=("balanced",))
    assert report["rules"] >= 90
    balanced = report["balanced"]
    assert balanced["merged"] == 0 and balanced["asked_again"] == 0, balanced
    assert balanced["questions"] <= STREAM_QUESTIONS_CEILING, balanced
    assert balanced["mentioned"] <= STREAM_MENTIONED_CEILING, balanced
    assert balanced["conflicts_per_recall"] <= FALSE_CONFLICTS_CEILING, balanced


# Measured with the static backend when these were set (2026-12-01, the set with rules for every task
# marked): recall macro F1 0.785 (all), every always-on rule returned, paraphrase recall 0.81, 1.0
# entry that is not always-on for an off-topic intent; the other rules alone (no marks) F1 0.458.
# On the held-out pairs (127, 2026-12-03), silent harm 0 in every mode, duplicates and contradictions
# caught 0.82, distinct and compatible pairs asked about 0.16-0.24 (balanced), contradictions stopped
# 0.44; on the held-out stream stores (98 rules), questions 0.01, mentions 0.73, no false conflict.
def test_the_eval_command_prints_a_report_per_backend(capsys, default_config, monkeypatch):
    assert run.main(["--backend", "hashing", "--split", "test", "--via", "library", "--no-judge", "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["backend"] == "hashing" and report["split"] == "test" and report["judge"] is None
    assert report["recall"]["queries"] == sum(len(run.chosen(s["queries"], "test")) for s in DATA["skills"])
    assert "WHETSTONE_TODAY" not in os.environ
    assert run.main(["--backend", "hashing", "--split", "test", "--via", "library", "--no-judge"]) == 0
    printed = capsys.readouterr().out
    assert "recall macro F1" in printed and "silent harm" not in printed
    # the judge's and the stream's rows, from a few pairs and one stream store (the whole run takes minutes;
    # the two tests above measure them in full)
    monkeypatch.setenv("WHETSTONE_TODAY", run.DAY)
    skills = {s["skill"]: s for s in DATA["skills"]}
    caller = run.library_caller(default_config)
    report["judge"] = run.eval_judge(default_config, run.chosen(DATA["judge"], "test")[:6], "t", skills, caller, [])
    report["stream"] = run.eval_stream(default_config, [DATA["streams"][0]], "all", "t", caller, [],
                                       modes=run.MODES)
    printed = run.table([report])
    assert "balanced: silent harm" in printed and "stream: rules captured one at a time" in printed
    assert "asked again / false conflicts per recall" in printed


RECALL_F1_FLOOR = 0.74
PARAPHRASE_RECALL_FLOOR = 0.75
OFFTOPIC_CEILING = 1.0  # entries that are not always-on, for an off-topic intent (the issue's target)
SPECIFIC_F1_FLOOR = 0.42
HARM_CEILING = 0.01
CAUGHT_FLOOR = 0.80
PAIRS_ASKED_CEILING = 0.25  # distinct and compatible pairs asked about or refused (balanced)
STOPPED_FLOOR = 0.40  # contradictions refused or asked about
STREAM_QUESTIONS_CEILING = 0.10
STREAM_MENTIONED_CEILING = 0.80
FALSE_CONFLICTS_CEILING = 0.2
