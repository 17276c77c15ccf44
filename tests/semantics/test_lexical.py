"""BM25 over rules' words (`semantics.lexical`)."""
from __future__ import annotations

from git_whetstone.semantics.lexical import Lexicon, postings, query_terms
from tests.helpers import bm25_scores


def test_bm25_scores_rare_words_above_common_ones() -> None:
    texts = ["negative amounts in parentheses", "amounts right aligned", "amounts with separators", "row shading"]
    lexicon = Lexicon.of(len(texts), [(0, postings(texts))])
    scores = bm25_scores(lexicon, query_terms("negative amounts"))
    assert scores.argmax() == 0 and scores[3] == 0
    # "amounts" alone (held by three of four) is worth little; "negative" (held by one) much more
    assert 0 < scores[1] < scores[0] / 2 and 0 < scores[2] < scores[0] / 2
    assert not bm25_scores(lexicon, query_terms("zyzzyva, qwxlopt")).any()  # words no rule holds match nothing


def test_a_word_of_the_only_rule_is_as_rare_as_a_word_can_be() -> None:
    lexicon = Lexicon.of(1, [(0, postings(["negative amounts in parentheses"]))])
    assert [round(idf, 6) for idf, _, _ in lexicon.matches(query_terms("negative"))] == [1.0]
